"""One batch's IMPALA loss terms, unweighted and summed over its T x B steps (section 4.2),
with V-trace and LASER's trust region and entropy mask, for any action distribution
(distributions.py: categorical or diagonal Gaussian, the network config's
`action_distribution`). learner.py weights and differentiates them. IMPACT's terms (IMPACT
paper, Algorithm 1 line 8) are impact.py's, on the batch that `aligned` here lays out.

The indexing follows the released code's actor loop: step t of a trajectory holds the agent
output whose action was taken at observation t-1 and the environment output that action led
to. So, for t = 0..T-1, the action taken at observation t is agent_outputs.action[t+1], its
reward env_outputs.reward[t+1], and the learner's policy and value at observation t come from
unrolling over all T+1 observations; V(x_T) bootstraps (`aligned`).

Truncated episodes (environments/truncation.py): where observation t is a truncated episode's
last (env_outputs.truncated[t]), transition t is the environment's artificial reset step (its
action ignored, reward 0, discount 0). It is cut (`aligned`'s `kept`): rho_t = c_t = 0 in
V-trace (vtrace.from_importance_weights' transition_mask), so v_t = V(x_t) and transition t-1
into x_t (discount gamma) bootstraps from V(x_t) as at the end of an unroll (IMPALA section 4,
Remark 1: v_{t-1} = V(x_{t-1}) + rho_{t-1} (r_{t-1} + gamma V(x_t) - V(x_{t-1}))); and its
policy-gradient, baseline and entropy terms weigh 0. A termination has no such step: its
discount 0 bootstraps from nothing. With nothing truncated the cut multiplies by ones, which
changes no bit.
"""
import collections

import tensorflow as tf

from scalable_agent_tf2.learning import losses
from scalable_agent_tf2.learning import vtrace


_Aligned = collections.namedtuple(
    "_Aligned", "learner_policy values bootstrap_value actions behaviour_policy rewards "
    "discounts kept")


def aligned(action_distribution, learner_outputs, env_outputs, agent_outputs, config):
  """A batch aligned to "observation t, the action taken there, its reward", t = 0..T-1
  (module docstring): the learner's and the behaviour policies (distributions of [T, B, P]
  parameters), actions [T, B(, A)], values, rewards (clipped), discounts [T, B] (0 after an
  episode's end), kept [T, B] (0 for a transition that leaves a truncated observation: the
  module docstring), bootstrap value V(x_T) [B]."""
  rewards, discounts = _rewards_and_discounts(env_outputs, config)
  return _Aligned(
      learner_policy=action_distribution.of_outputs(learner_outputs)[:-1],
      values=learner_outputs.baseline[:-1],
      bootstrap_value=learner_outputs.baseline[-1],
      actions=agent_outputs.action[1:],
      behaviour_policy=action_distribution.of_outputs(agent_outputs)[1:],
      rewards=rewards, discounts=discounts, kept=kept_transitions(env_outputs.truncated))


def kept_transitions(truncated):
  """float32 [T, B]: 0 for transition t when observation t is a truncated episode's last
  (truncated [T+1, B]: the next step is the environment's reset, its action ignored), else 1.
  """
  return tf.cast(~tf.cast(truncated[:-1], tf.bool), tf.float32)


def _rewards_and_discounts(env_outputs, config):
  """Rewards (clipped) and discounts [T, B] of steps 1..T (discount 0 after an episode's end:
  no bootstrapping across an episode boundary)."""
  return (losses.clip_rewards(env_outputs.reward[1:], config.reward_clipping),
          tf.cast(~tf.cast(env_outputs.done[1:], tf.bool), tf.float32) * config.discounting)


def _vtrace_options(config):
  """V-trace's truncation levels, lambda and LASER's trust region, from the learner config."""
  return dict(clip_rho_threshold=config.clip_rho_threshold,
              clip_pg_rho_threshold=config.clip_pg_rho_threshold,
              clip_c_threshold=config.clip_c_threshold, lambda_=config.vtrace_lambda,
              trust_region_threshold=(config.trust_region_threshold
                                      if config.uses_trust_region else None))


def entropy_steps(trust_region_mask, entropy_mask, like):
  """float32 [T, B] (or None: every step): the steps whose entropy counts.

  Those the trust region kept (trust_region_mask [T, B], LASER section 4.3: rejected
  transitions count "for all estimates") of the trajectories entropy_mask [B] selects
  (section 5.1: online ones only); `like` gives [T, B] for a mask given per trajectory.
  """
  if entropy_mask is None:
    return trust_region_mask
  per_step = tf.broadcast_to(tf.cast(entropy_mask, tf.float32), tf.shape(like))
  return per_step if trust_region_mask is None else per_step * trust_region_mask


def _vtrace_loss_terms(returns, values, mask, entropy_loss, trust_region_mask):
  """The policy-gradient and baseline losses of V-trace's returns (section 4.2) over the steps
  mask [T, B] keeps, the given entropy loss, and the count of steps LASER's trust region
  rejected (trust_region_mask [T, B], or None without a trust region)."""
  terms = dict(
      pg_loss=losses.policy_gradient_loss(returns.target_action_log_probs,
                                          returns.pg_advantages, mask),
      baseline_loss=losses.baseline_loss(returns.vs - values, mask),
      entropy_loss=entropy_loss)
  if trust_region_mask is not None:
    terms["trust_region_rejected"] = tf.reduce_sum(1.0 - trust_region_mask)
  return terms


def impala_loss_terms(action_distribution, learner_outputs, env_outputs, agent_outputs, config,
                      entropy_mask=None):
  """The three unweighted IMPALA loss terms (section 4.2) of one batch, with LASER's trust
  region when the config has one (for a Gaussian policy, the Monte-Carlo implied KL).

  Args:
    action_distribution: the policy's distributions family (the network config's
      `action_distribution`: CategoricalFamily or DiagGaussianFamily).
    learner_outputs: the network's output of [T+1, B, ...] from the learner's unroll
      (networks.NetworkOutput).
    env_outputs: EnvOutput of [T+1, B, ...].
    agent_outputs: AgentOutput of [T+1, B, ...] (the behaviour
      policy mu).
    config: LearnerConfig.
    entropy_mask: None, or float32 [B]: the trajectories whose entropy counts (LASER
      section 5.1: online data only).

  Returns:
    (dict with float32 scalars pg_loss, baseline_loss, entropy_loss (sums over T and B) and,
     with a trust region, trust_region_rejected (steps the trust region left out of the
     policy-gradient, baseline and entropy losses), the vtrace.VTraceFromLogitsReturns
     they were computed from ([T, B] each)).
  """
  batch = aligned(action_distribution, learner_outputs, env_outputs, agent_outputs, config)
  returns = vtrace.from_distributions(
      behaviour_policy=batch.behaviour_policy, target_policy=batch.learner_policy,
      actions=batch.actions, discounts=batch.discounts, rewards=batch.rewards,
      values=batch.values, bootstrap_value=batch.bootstrap_value,
      off_policy_correction=config.off_policy_correction, transition_mask=batch.kept,
      **_vtrace_options(config))
  # LASER section 4.3: rejected transitions count for none of the losses ("we reject
  # transitions entirely for all estimates"); nor does a cut transition (a truncated
  # episode's reset step, module docstring). Multiplying by a mask of ones changes no bit.
  trust_region = returns.trust_region_mask if config.uses_trust_region else None
  mask = batch.kept if trust_region is None else trust_region * batch.kept
  entropy = losses.entropy_loss(batch.learner_policy,
                                entropy_steps(mask, entropy_mask, batch.rewards))
  return _vtrace_loss_terms(returns, batch.values, mask, entropy, trust_region), returns


