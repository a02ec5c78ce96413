"""One actor step of an agent through the actors' own pieces, for tests that act step by step:
the network's step is policies.acting_step (what the actors' policies, load_policy and the
SavedModel run), the actions are sampled in numpy as actors sample them (the action
distribution's sample_rows, one generator per row: ActionSpace.sample_group)."""
import numpy as np

from scalable_agent_tf2.acting import policies


def acting_step(agent, prev_action, env_output, core_state):
  """(policy_params [B, P], baseline [B], core_state) of one step on env_output [B, ...]."""
  step = policies.acting_step(agent)
  observation = env_output.observation
  return step(np.asarray(prev_action), env_output.reward, env_output.done, observation.frame,
              observation.instruction, core_state)


def sampled_actions(agent, policy_params, seed=0):
  """The actions [B, *action_shape] an actor samples from policy_params [B, P]."""
  rngs = [np.random.default_rng([seed, row]) for row in range(len(policy_params))]
  return agent.config.action_distribution.sample_rows(np.asarray(policy_params), rngs)
