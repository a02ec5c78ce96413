"""IMPACT's networks for continuous control (IMPACT paper, section 4.3), as plain tf.Modules.

Section 4.3: "The policy networks consist of two fully-connected layers of 256 units with
nonlinear activation tanh. The critic network shares the same architecture as the policy
network", and Figure 5's tasks do not share weights between the two (the discrete setting's
"The critic network shares weights with the policy network" is said of Atari only). So:

    observation [O] --> FC 256, tanh --> FC 256, tanh --> GaussianPolicyHead --> mean [A],
                                                                                log_std [A]
    observation [O] --> FC 256, tanh --> FC 256, tanh --> linear --> baseline V(x)

The details the paper leaves to its code base follow RLlib's defaults (FullyConnectedNetwork,
rllib/models/tf/fcnet.py; see distributions.py for the log_std choice): hidden kernels initialised
with normc(1.0) (normal columns rescaled to norm 1), output kernels with normc(0.01), zero
biases; `free_log_std=False`, i.e. a state-dependent log_std from the policy's last layer
(`state_dependent_log_std=True` here), or, with `free_log_std=True`, a learned vector
initialised to 0. The network sees the observation only (RLlib feeds obs_flat; no previous
action or reward), and no observation normalisation is done here (that is the environment
side's decision).

Plain tf.Modules, no Keras, like networks.py (Keras 3 layers are not tf.Modules, and plain ops
keep the learner's update one XLA-compilable function). `ContinuousAgent` has networks.Agent's
entry points (initial_state, step, unroll) with a Gaussian policy in place of logits.
"""
import collections
import dataclasses
from typing import Tuple

import tensorflow as tf

from scalable_agent_tf2.agent import distributions
from scalable_agent_tf2 import structures

HIDDEN_SIZES = (256, 256)   # IMPACT section 4.3: "two fully-connected layers of 256 units".
HIDDEN_KERNEL_SCALE = 1.0   # RLlib fcnet: normc_initializer(1.0) for hidden layers,
OUTPUT_KERNEL_SCALE = 0.01  # normc_initializer(0.01) for the policy and value outputs.

# Output of `unroll` (the learner's view): policy_mean / policy_log_std float32 [T, B, A],
# baseline float32 [T, B].
GaussianNetworkOutput = collections.namedtuple(
    "GaussianNetworkOutput", "policy_mean policy_log_std baseline")
# What the agent emits when acting: action float32 [B, A], the UNCLIPPED sample; the
# behaviour policy's policy_mean / policy_log_std [B, A] (V-trace's mu); baseline [B].
GaussianAgentOutput = structures.GaussianAgentOutput


@dataclasses.dataclass(frozen=True)
class ContinuousNetworkConfig:
  """Everything that fixes the network's shapes.

  Attributes:
    observation_size: O, the length of the observation vector.
    action_size: A, the number of action dimensions.
    state_dependent_log_std: True: log_std from the policy's last layer (RLlib's default,
      free_log_std=False); False: one learned log_std per action dimension.
    hidden_sizes: the fully connected layers of each of the two networks.
  """
  observation_size: int
  action_size: int
  state_dependent_log_std: bool = True
  hidden_sizes: Tuple[int, ...] = HIDDEN_SIZES

  # What the project's other parts read from a network config (networks.NetworkConfig's
  # names): the observation vector is env_outputs.observation.frame, float32 [O]; no
  # instruction, no LSTM.
  torso = "mlp"
  use_instruction = False
  use_lstm = False
  # A vector (torsos.VECTOR): the run's observation filter normalises it
  # (action_spaces.takes_observation_filter).
  observation_kind = "vector"

  # The observation vector is float32 [O] (batch_checks.check_batch).
  frame_dtype = "float32"

  @property
  def frame_shape(self):
    return (self.observation_size,)

  @property
  def action_distribution(self):
    """The policy's distributions family: a diagonal Gaussian over action_size dimensions
    (IMPACT section 4.3, Appendix E)."""
    return distributions.DiagGaussianFamily(self.action_size)

  def __post_init__(self):
    if self.observation_size < 1 or self.action_size < 1:
      raise ValueError(f"observation_size and action_size must be positive, got "
                       f"{self.observation_size} and {self.action_size}.")
    if any(size < 1 for size in self.hidden_sizes):
      raise ValueError(f"hidden_sizes must be positive, got {self.hidden_sizes}.")


@dataclasses.dataclass(frozen=True)
class ContinuousFrameNetworkConfig:
  """Box actions on image frames (e.g. gym:CarRacing-v3): ContinuousFrameAgent's shapes.

  Attributes:
    frame_shape: (height, width, channels) of the uint8 frame.
    action_size: A, the number of action dimensions.
    torso: a frame torso of Figure 3 or of the IMPACT paper ('shallow', 'deep', 'impact_cnn';
      torsos.torso_for_observation).
    state_dependent_log_std: as ContinuousNetworkConfig's.
  """
  frame_shape: Tuple[int, int, int]
  action_size: int
  torso: str = "shallow"
  state_dependent_log_std: bool = True

  # What the project's other parts read from a network config (networks.NetworkConfig's
  # names): uint8 frames, not filtered (the torso scales them to [0, 1]); no instruction, no
  # LSTM.
  use_instruction = False
  use_lstm = False
  observation_kind = "frame"
  frame_dtype = "uint8"

  @property
  def action_distribution(self):
    """A diagonal Gaussian over action_size dimensions (IMPACT section 4.3, Appendix E)."""
    return distributions.DiagGaussianFamily(self.action_size)

  def __post_init__(self):
    object.__setattr__(self, "frame_shape", tuple(int(n) for n in self.frame_shape))
    if self.action_size < 1:
      raise ValueError(f"action_size must be positive, got {self.action_size}.")
    self.torso_choice  # pylint: disable=pointless-statement  (torso and shape checks.)

  @property
  def torso_choice(self):
    from scalable_agent_tf2.agent import torsos  # pylint: disable=g-import-not-at-top
    return torsos.torso_for_observation(torsos.FRAME, self.frame_shape, self.torso)


def agent_class(config):
  """The agent of a continuous config: ContinuousAgent (vectors) or ContinuousFrameAgent."""
  if isinstance(config, ContinuousFrameNetworkConfig):
    return ContinuousFrameAgent
  return ContinuousAgent


class NormcInitializer:
  """RLlib's normc_initializer from one seed: N(0, 1) columns rescaled to norm `scale`."""

  def __init__(self, seed):
    self._generator = tf.random.Generator.from_seed(seed)

  def normc(self, shape, scale):
    columns = self._generator.normal(shape)
    return columns * scale / tf.norm(columns, axis=0, keepdims=True)


class Dense(tf.Module):
  """y = activation(x W + b).  x: [N, input_size] -> [N, output_size]."""

  def __init__(self, input_size, output_size, init, scale, activation=None, name=None):
    super().__init__(name=name)
    self.activation = activation
    with self.name_scope:
      self.w = tf.Variable(init.normc([input_size, output_size], scale), name="w")
      self.b = tf.Variable(tf.zeros([output_size]), name="b")

  def __call__(self, x):
    y = tf.matmul(x, self.w) + self.b
    return y if self.activation is None else self.activation(y)


class MLPTorso(tf.Module):
  """Fully connected tanh layers (IMPACT section 4.3).  x: [N, O] -> [N, hidden_sizes[-1]]."""

  def __init__(self, input_size, init, hidden_sizes=HIDDEN_SIZES, name="mlp_torso"):
    super().__init__(name=name)
    self.layers = []
    with self.name_scope:
      for index, size in enumerate(hidden_sizes):
        self.layers.append(Dense(input_size, size, init, HIDDEN_KERNEL_SCALE,
                                 activation=tf.tanh, name=f"fc_{index + 1}"))
        input_size = size
    self.output_size = input_size

  def __call__(self, x):
    for layer in self.layers:
      x = layer(x)
    return x


class GaussianPolicyHead(tf.Module):
  """A diagonal Gaussian's parameters.  x: [N, input_size] -> (mean [N, A], log_std [N, A]).

  state_dependent_log_std=True: one linear layer of 2A outputs, the first half the means,
  the second half the log standard deviations (RLlib's DiagGaussian with free_log_std=False).
  False: a linear layer for the means and a learned log_std [A] (initialised to 0), the same
  for every state, broadcast to [N, A] (RLlib's free_log_std=True).
  """

  def __init__(self, input_size, action_size, init, state_dependent_log_std=True,
               name="gaussian_policy_head"):
    super().__init__(name=name)
    self.action_size = action_size
    self.state_dependent_log_std = state_dependent_log_std
    with self.name_scope:
      outputs = 2 * action_size if state_dependent_log_std else action_size
      self.linear = Dense(input_size, outputs, init, OUTPUT_KERNEL_SCALE, name="linear")
      if not state_dependent_log_std:
        self.log_std = tf.Variable(tf.zeros([action_size]), name="log_std")

  def __call__(self, x):
    outputs = self.linear(x)
    if self.state_dependent_log_std:
      mean, log_std = tf.split(outputs, 2, axis=-1)
      return mean, log_std
    return outputs, tf.broadcast_to(self.log_std, tf.shape(outputs))


class ContinuousAgent(tf.Module):
  """Separate policy and value MLPs (IMPACT section 4.3) with networks.Agent's entry points.

  Feed-forward: the core state is () and every step is independent, so `unroll` runs all
  T x B observations as one batch (IMPALA section 3, "folding time into the batch
  dimension"). The observation vector is read from env_outputs.observation.frame (float
  [..., O]), the field the image agents read their frames from.
  """

  def __init__(self, config, seed=0, name="continuous_agent"):
    """Args:
      config: a ContinuousNetworkConfig.
      seed: seeds the initial weights and the action sampling.
      name: module name.
    """
    super().__init__(name=name)
    self.config = config
    init = NormcInitializer(seed)
    with self.name_scope:
      self.policy_torso = MLPTorso(config.observation_size, init, config.hidden_sizes,
                                   name="policy_torso")
      self.policy = GaussianPolicyHead(
          self.policy_torso.output_size, config.action_size, init,
          state_dependent_log_std=config.state_dependent_log_std, name="policy")
      self.value_torso = MLPTorso(config.observation_size, init, config.hidden_sizes,
                                  name="value_torso")
      self.baseline = Dense(self.value_torso.output_size, 1, init, OUTPUT_KERNEL_SCALE,
                            name="baseline")
      self._sampler = tf.random.Generator.from_seed(seed + 1)

  def initial_state(self, batch_size):
    """() : the agent has no recurrent core."""
    del batch_size
    return ()

  def step(self, prev_action, env_output, core_state):
    """One acting step for a batch of any size B.

    Args:
      prev_action: float32 [B, A], unused (the network sees the observation only).
      env_output: EnvOutput of [B, ...] tensors; observation.frame float [B, O].
      core_state: ().

    Returns:
      (GaussianAgentOutput(action float32 [B, A] UNCLIPPED sample, policy_mean [B, A],
       policy_log_std [B, A], baseline [B]), ()).
    """
    add_time = lambda t: tf.convert_to_tensor(t)[tf.newaxis]
    output, core_state = self.unroll(
        add_time(prev_action), tf.nest.map_structure(add_time, env_output), core_state)
    mean, log_std = output.policy_mean[0], output.policy_log_std[0]
    action = distributions.DiagGaussian(mean, log_std).sample(
        seed=self._sampler.make_seeds(1)[:, 0])
    return GaussianAgentOutput(action=action, policy_mean=mean, policy_log_std=log_std,
                               baseline=output.baseline[0]), core_state

  def unroll(self, prev_actions, env_outputs, core_state):
    """Runs both networks over a time-major sequence.

    Args:
      prev_actions: float32 [T, B, A], unused (kept for networks.Agent's signature).
      env_outputs: EnvOutput of [T, B, ...] tensors; observation.frame float [T, B, O].
      core_state: ().

    Returns:
      (GaussianNetworkOutput(policy_mean float32 [T, B, A], policy_log_std float32
       [T, B, A], baseline float32 [T, B]), ()).
    """
    del prev_actions
    observations = tf.cast(env_outputs.observation.frame, tf.float32)
    if observations.shape[-1] is not None and (
        observations.shape[-1] != self.config.observation_size):
      raise ValueError(f"observation.frame has shape {observations.shape}, expected "
                       f"[T, B, {self.config.observation_size}] (observation_size).")
    steps, batch = tf.shape(observations)[0], tf.shape(observations)[1]
    flat = tf.reshape(observations, [-1, self.config.observation_size])
    mean, log_std = self.policy(self.policy_torso(flat))
    baseline = self.baseline(self.value_torso(flat))
    to_time_major = lambda t: tf.reshape(t, [steps, batch, self.config.action_size])
    return GaussianNetworkOutput(
        policy_mean=to_time_major(mean), policy_log_std=to_time_major(log_std),
        baseline=tf.reshape(baseline, [steps, batch])), core_state


class ContinuousFrameAgent(tf.Module):
  """Box actions on image frames: a frame torso shared by a Gaussian policy and the baseline.

  The cheapest correct agent for, e.g., CarRacing: the paper's frame torso (Figure 3; the
  IMPACT paper's image network shares its torso between policy and critic, section 4.3: "The
  critic network shares weights with the policy network") with ContinuousAgent's heads
  (GaussianPolicyHead and a linear baseline, RLlib's normc(0.01) kernels). Feed-forward like
  the IMPACT paper's networks: the core state is (). The torso starts as the other frame
  agents' (layers.Initializer: Sonnet 1's truncated normal); the heads as ContinuousAgent's.
  """

  def __init__(self, config, seed=0, name="continuous_frame_agent"):
    """Args:
      config: a ContinuousFrameNetworkConfig.
      seed: seeds the initial weights and the action sampling.
      name: module name.
    """
    # pylint: disable=g-import-not-at-top  (torsos imports layers: only this agent needs them.)
    from scalable_agent_tf2.agent import layers
    from scalable_agent_tf2.agent import networks
    from scalable_agent_tf2.agent import torsos
    super().__init__(name=name)
    self._to_unit_float = networks.to_unit_float  # The frame agents' input scaling.
    self.config = config
    init = NormcInitializer(seed)
    with self.name_scope:
      self.torso = torsos.build_torso(config.torso_choice, layers.Initializer(seed))
      self.policy = GaussianPolicyHead(
          torsos.TORSO_OUTPUT_SIZE, config.action_size, init,
          state_dependent_log_std=config.state_dependent_log_std, name="policy")
      self.baseline = Dense(torsos.TORSO_OUTPUT_SIZE, 1, init, OUTPUT_KERNEL_SCALE,
                            name="baseline")
      self._sampler = tf.random.Generator.from_seed(seed + 1)

  initial_state = ContinuousAgent.initial_state
  step = ContinuousAgent.step

  def unroll(self, prev_actions, env_outputs, core_state):
    """The torso on all T x B frames at once (IMPALA section 3), then both heads.

    Args:
      prev_actions: float32 [T, B, A], unused (kept for networks.Agent's signature).
      env_outputs: EnvOutput of [T, B, ...] tensors; observation.frame uint8 [T, B, H, W, C].
      core_state: ().

    Returns:
      (GaussianNetworkOutput(policy_mean float32 [T, B, A], policy_log_std float32
       [T, B, A], baseline float32 [T, B]), ()).
    """
    del prev_actions
    frames = tf.convert_to_tensor(env_outputs.observation.frame)
    steps, batch = tf.shape(frames)[0], tf.shape(frames)[1]
    flat = tf.reshape(frames, [-1] + list(self.config.frame_shape))
    features = self.torso(self._to_unit_float(flat))
    mean, log_std = self.policy(features)
    to_time_major = lambda t: tf.reshape(t, [steps, batch, self.config.action_size])
    return GaussianNetworkOutput(
        policy_mean=to_time_major(mean), policy_log_std=to_time_major(log_std),
        baseline=tf.reshape(self.baseline(features), [steps, batch])), core_state
