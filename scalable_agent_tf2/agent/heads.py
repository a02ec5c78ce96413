"""The agent's policy head, sized by the action distribution's parameter count.

    core output [N, K] --> policy head --> policy_params [N, P], P = distribution.param_size

The head follows the distribution (distributions.py), as SEED RL's parametric distributions
size one network's policy output (Espeholt et al. 2020, seed_rl/common/
parametric_distribution.py):

  * categorical (IMPALA, Figure 3): one Linear layer of N logits;
  * diagonal Gaussian (the IMPACT paper's continuous control, section 4.3): GaussianPolicyHead,
    one Linear layer of 2A outputs (the means, then the log standard deviations), or of A means
    beside a learned log_std [A] (RLlib's free_log_std=True).

Each head keeps its attribute layout (a categorical head's w and b; a Gaussian head's linear
and log_std), which every checkpoint records under agent/policy/.
"""
import tensorflow as tf

from scalable_agent_tf2.agent import distributions
from scalable_agent_tf2.agent import torsos


class GaussianPolicyHead(tf.Module):
  """A diagonal Gaussian's parameters.  x: [N, input_size] -> params [N, 2A] (the means,
  then the log standard deviations: distributions.DiagGaussian.from_params).

  state_dependent_log_std=True: one linear layer of 2A outputs, the first half the means,
  the second half the log standard deviations (RLlib's DiagGaussian with free_log_std=False,
  which the IMPACT paper's code base ran). False: a linear layer for the means and a learned
  log_std [A] (starting at initial_log_std in every dimension), the same for every state,
  broadcast to [N, A] (RLlib's free_log_std=True; Stable-Baselines3's PPO head, whose
  log_std_init is 0 by default and -2 in RL Baselines3 Zoo's MuJoCo entries).
  """

  def __init__(self, input_size, action_size, init, state_dependent_log_std=True,
               initial_log_std=0.0, name="gaussian_policy_head"):
    super().__init__(name=name)
    self.action_size = action_size
    self.state_dependent_log_std = state_dependent_log_std
    with self.name_scope:
      outputs = 2 * action_size if state_dependent_log_std else action_size
      self.linear = torsos.Linear(input_size, outputs, init, name="linear")
      if not state_dependent_log_std:
        self.log_std = tf.Variable(tf.fill([action_size], float(initial_log_std)),
                                   name="log_std")

  def __call__(self, x):
    outputs = self.linear(x)
    if self.state_dependent_log_std:
      return outputs
    return tf.concat([outputs, tf.broadcast_to(self.log_std, tf.shape(outputs))], axis=-1)


def policy_head(distribution, input_size, init, state_dependent_log_std=True,
                initial_log_std=0.0, name="policy"):
  """The policy head of `distribution` (a distributions family) on inputs [N, input_size]:
  a module x [N, input_size] -> params [N, distribution.param_size].

  Args:
    distribution: the network config's action_distribution.
    input_size: the core output's size.
    init: the initializer of output layers (torsos.Initializer, or a NormcInitializer's
      for_output_layers()).
    state_dependent_log_std: a Gaussian's log_std from the layer (True) or learned free
      (False); other families have no log_std.
    initial_log_std: where a free log_std starts.
    name: the module's name.
  """
  if isinstance(distribution, distributions.DiagGaussianFamily):
    return GaussianPolicyHead(input_size, distribution.action_size, init,
                              state_dependent_log_std=state_dependent_log_std,
                              initial_log_std=initial_log_std, name=name)
  return torsos.Linear(input_size, distribution.param_size, init=init, name=name)
