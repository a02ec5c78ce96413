"""The agent, composed from the environment's spec, built from tf.Variables and tf.nn ops.

Plain tf.Modules, no Keras (Keras 3 layers are not tf.Modules): one XLA-compilable update.

    frame [H, W, C] uint8 --/255--> torso (shallow|deep|impact_cnn): 256 -----+
      (or vector [O] float32 --> mlp torso: 256; index [] int32 --> one-hot [n])
    reward --clip [-1, 1]-----------------------------------------------------+--> core
    previous action --one-hot (the distribution's action_features)-----------+   (LSTM 256
    instruction --hash 1000 buckets--> embedding 20 --> LSTM 64 (last token)--+    or none)
                                                                                   |
             policy_params [P] <-- policy head (heads.py, P = distribution.param_size) --+
                                                            baseline V(x) <-- linear --+

That is Figure 3's agent; the same pieces, with other settings of NetworkConfig, make the
IMPACT paper's continuous-control networks (section 4.3): a diagonal Gaussian head (2A
parameters), the observation only (reward_and_action_inputs=False), RLlib's normc weights
(initializer=NORMC_INIT) and, on vectors, a separate value MLP (separate_value_torso: "The critic
network shares the same architecture as the policy network", not its weights).

One entry point, `unroll(prev_actions, env_outputs, core_state)` over [T, B] from
`initial_state(B)` or an actor's state: the learner runs it over a batch's T+1 steps, applying
the torso to all frames at once (section 3: "folding time into the batch dimension") and
resetting the core wherever an episode ended; actors run it over one step
(acting/policies.acting_step) and sample the actions in numpy (acting/action_spaces.py).

This module holds the agent and its config; the language input is language.py's, the layers
and the torsos (and how frames reach them: to_unit_float, chunked_torso) torsos.py's.

The observation's kind (NetworkConfig.observation_kind, torsos.torso_for_observation) picks
the torso: image frames take the paper's (Figure 3), float vectors the MLP (IMPACT section
4.3's sizes), a Discrete observation's index its one-hot; the action distribution
(NetworkConfig.action_distribution, distributions.py) sizes the policy head and reads the
previous action; network_config_for_spec composes a config from an environment's spec.
"""
import collections
import dataclasses
from typing import Optional
from typing import Tuple

import tensorflow as tf

from scalable_agent_tf2.agent import distributions
from scalable_agent_tf2.agent import heads
from scalable_agent_tf2.agent import language
from scalable_agent_tf2.agent import torsos
from scalable_agent_tf2.configuration.settings import DEEP  # --torso's choices.
from scalable_agent_tf2.configuration.settings import IMPACT_CNN  # --torso's choices.
from scalable_agent_tf2.configuration.settings import SHALLOW  # --torso's choices.
from scalable_agent_tf2.configuration.settings import SHALLOW_MIN_FRAME_SIZE  # --torso's choices.
from scalable_agent_tf2.configuration.settings import TORSOS  # --torso's choices.

CORE_LSTM_SIZE = 256  # Figure 3: "LSTM 256".
# The learner's deep torso runs in chunks of at most this many frames, each chunk's activations
# recomputed in the backward pass (torsos.chunked_torso). Not in the paper: a memory choice. DMLab,
# B=32, T=100 (benchmarks/speed/learner_memory.py): the training process's peak RSS falls from
# 8.3 GB to 1.8 GB (256 frames: 2.2 GB); the shallow torso's activations (0.4 GB) are left alone.
DEEP_TORSO_CHUNK_FRAMES = 128

# The initial weights of the Linear layers (NetworkConfig.initializer): Sonnet 1's truncated
# normal (the released code's, torsos.Initializer) or RLlib's normc (the IMPACT paper's code
# base, torsos.NormcInitializer). Frame torsos always start from Sonnet's.
SONNET_INIT, NORMC_INIT = "sonnet", "normc"

# Output of `unroll`: the learner's own view of the trajectory. policy_params float32 [T, B, P]
# (the distribution's flat parameters: logits, or a Gaussian's means then log standard
# deviations); baseline float32 [T, B] ([T, B, N] with N value outputs).
NetworkOutput = collections.namedtuple("NetworkOutput", "policy_params baseline")


@dataclasses.dataclass(frozen=True)
class NetworkConfig:
  """Everything that fixes the network's shapes.

  Attributes:
    num_actions: N of a categorical policy (DMLab: 9, Table D.2; Atari: the game's minimal
      set, or 18 for the multi-task agent, Appendix G), which then need not be given as
      action_distribution; None for other distributions.
    frame_shape: the shape of observation.frame: (height, width, channels) of the uint8
      frame; (O,) of a float32 vector; () of a Discrete observation's int32 index.
    torso: frames: 'shallow' (Figure 3 left), 'deep' (Figure 3 right) or 'impact_cnn' (the
      IMPACT paper's Atari network, section 4.3; 42x42 frames); vectors: 'mlp'; indices:
      'one_hot' (torsos.torso_for_observation).
    use_lstm: LSTM 256 core (DMLab) or none (Atari: "the deep network (without the LSTM)",
      section 5.3.2).
    use_instruction: whether the observation carries a language instruction (DMLab).
    torso_chunk_frames: None: DEEP_TORSO_CHUNK_FRAMES for the deep torso, else 0. 0: backprop
      keeps the torso's activations of all T x B frames (the deep torso's: 2 MB per 72x96
      frame, 6.3 GB for B=32, T=100). N > 0: the learner's unroll runs the torso over chunks
      of at most N frames and recomputes each chunk's activations in the backward pass
      (chunked_torso): the same gradients, one chunk's activations, one more torso pass.
    observation_kind: torsos.FRAME (uint8 [H, W, C]), torsos.VECTOR (float32 [O]) or
      torsos.INDEX (a Discrete(n) observation: int32 []).
    num_observation_values: n of a Discrete(n) observation (INDEX only): the one-hot's size.
    mlp_hidden_sizes: the MLP torso's layers (VECTOR only; IMPACT section 4.3's 256, 256).
    frame_max: the largest value of a frame's uint8 entries (FRAME only): frames reach the
      torso divided by it (to_unit_float), so they span [0, 1]. 255 for pixels; MiniGrid and
      BabyAI's image is the grid's encoding, indices of at most 10 (gym_spaces.frame_max).
    action_distribution: the policy's distributions family (None: categorical over
      num_actions, IMPALA section 4); it sizes the policy head (heads.policy_head) and encodes
      the previous action.
    reward_and_action_inputs: the core also reads the clipped reward and the previous action
      (Figure 3); False: the observation only (the IMPACT paper's networks: RLlib feeds
      obs_flat).
    separate_value_torso: the baseline reads a second torso of its own (IMPACT section 4.3's
      MuJoCo networks: "The critic network shares the same architecture as the policy
      network", not its weights); False: the baseline shares the torso and core (Figure 3).
    initializer: SONNET_INIT or NORMC_INIT, the Linear layers' initial weights (the MLP
      torso's and the heads'); frame torsos, the instruction encoder and the LSTM always start
      from Sonnet's (torsos.Initializer).
    state_dependent_log_std: a Gaussian policy's log_std from the head's layer (RLlib's
      free_log_std=False, which the IMPACT paper's code base ran) or one learned vector.
    trim_instruction_padding: the instruction encoder's LSTM runs up to the longest
      instruction in the batch rather than over all MAX_INSTRUCTION_WORDS slots (padding
      steps leave its state unchanged, so the encoding and its gradients are the same);
      False under XLA, which needs static shapes (the learner turns it off when it compiles
      with XLA, as it turns off torso chunks).
    num_value_outputs: the baseline's outputs: 1, or N, one per task of a suite with per-task
      PopArt (Hessel et al. 2019: one normalised value output per task, the policy shared);
      the unroll's baseline is then [T, B, N] (learning/popart.py selects a trajectory's).
  """
  num_actions: Optional[int]
  frame_shape: Tuple[int, ...]
  torso: str = DEEP
  use_lstm: bool = True
  use_instruction: bool = True
  torso_chunk_frames: Optional[int] = None
  observation_kind: str = torsos.FRAME
  num_observation_values: Optional[int] = None
  mlp_hidden_sizes: Tuple[int, ...] = torsos.MLP_HIDDEN_SIZES
  frame_max: float = torsos.PIXEL_MAX
  action_distribution: Optional[object] = None
  reward_and_action_inputs: bool = True
  separate_value_torso: bool = False
  initializer: str = SONNET_INIT
  state_dependent_log_std: bool = True
  initial_log_std: float = 0.0  # Where a free log_std starts (heads.GaussianPolicyHead).
  trim_instruction_padding: bool = True
  num_value_outputs: int = 1

  @property
  def frame_dtype(self):
    """observation.frame's dtype (learner.check_batch, assembly.trajectory_signature):
    uint8 frames, float32 vectors, int32 indices (environments/base.py's dtypes)."""
    return {torsos.FRAME: "uint8", torsos.VECTOR: "float32",
            torsos.INDEX: "int32"}[self.observation_kind]

  @property
  def torso_choice(self):
    """The torsos.TorsoChoice of this config (what Agent builds)."""
    if self.observation_kind == torsos.INDEX:
      shape = (self.num_observation_values,)
    else:
      shape = self.frame_shape
    return torsos.torso_for_observation(
        self.observation_kind, shape,
        self.torso if self.observation_kind == torsos.FRAME else None,
        has_instruction=self.use_instruction and self.observation_kind == torsos.FRAME,
        hidden_sizes=self.mlp_hidden_sizes)

  def __post_init__(self):
    self._resolve_action_distribution()
    if self.torso_chunk_frames is None:
      object.__setattr__(self, "torso_chunk_frames",
                         DEEP_TORSO_CHUNK_FRAMES if self.torso == DEEP else 0)
    if self.initializer not in (SONNET_INIT, NORMC_INIT):
      raise ValueError(f"Unknown initializer {self.initializer!r}; expected {SONNET_INIT!r} "
                       f"or {NORMC_INIT!r}.")
    if self.num_value_outputs < 1:
      raise ValueError(f"num_value_outputs must be positive, got {self.num_value_outputs}.")
    if self.torso_chunk_frames < 0:
      raise ValueError(f"torso_chunk_frames must be 0 (no chunks) or positive, got "
                       f"{self.torso_chunk_frames}.")
    if self.observation_kind != torsos.FRAME:
      self._check_non_frame()
      return
    if self.torso not in TORSOS:
      raise ValueError(f"Unknown torso {self.torso!r}; expected one of {TORSOS} for frames "
                       f"({torsos.MLP!r} and {torsos.ONE_HOT!r} take observation_kind "
                       f"{torsos.VECTOR!r} and {torsos.INDEX!r}).")
    if len(self.frame_shape) != 3 or min(self.frame_shape) < 1:
      raise ValueError(f"frame_shape must be (height, width, channels), got "
                       f"{self.frame_shape}.")
    if self.torso == SHALLOW and min(self.frame_shape[:2]) < SHALLOW_MIN_FRAME_SIZE:
      raise ValueError(f"The shallow torso's VALID convolutions (Figure 3 left: 8x8/4, then "
                       f"4x4/2) need frames of at least {SHALLOW_MIN_FRAME_SIZE}x"
                       f"{SHALLOW_MIN_FRAME_SIZE}, got {self.frame_shape[:2]}: use the deep "
                       "torso (--torso=deep, SAME padding), or larger frames.")
    impact_frame = (torsos.IMPACT_CNN_FRAME_SIZE,) * 2
    if self.torso == IMPACT_CNN and tuple(self.frame_shape[:2]) != impact_frame:
      raise ValueError(f"The impact_cnn torso is the IMPACT paper's network for 42x42 frames "
                       f"(its 11x11 layer covers the whole map left), got "
                       f"{self.frame_shape[:2]}: use 42x42 frames (--width=42 --height=42).")

  def _resolve_action_distribution(self):
    """action_distribution from num_actions (categorical), or num_actions from a categorical
    action_distribution; one of the two must be given, and positive."""
    distribution = self.action_distribution
    if distribution is None:
      if self.num_actions is None:
        raise ValueError("A network config needs num_actions (categorical) or an "
                         "action_distribution.")
      distribution = distributions.CategoricalFamily(self.num_actions)
      object.__setattr__(self, "action_distribution", distribution)
    if isinstance(distribution, distributions.CategoricalFamily):
      if self.num_actions not in (None, distribution.num_actions):
        raise ValueError(f"num_actions {self.num_actions} and {distribution} disagree.")
      object.__setattr__(self, "num_actions", distribution.num_actions)
    elif self.num_actions is not None:
      raise ValueError(f"num_actions is for categorical policies; this one is {distribution}.")
    if self.num_actions is not None and self.num_actions < 1:
      raise ValueError(f"num_actions must be positive, got {self.num_actions}.")
    if distribution.param_size < 1:
      raise ValueError(f"{distribution} has no parameters: its sizes must be positive.")

  def _check_non_frame(self):
    """Vectors take the MLP torso, indices the one-hot; neither carries an instruction."""
    kinds = {torsos.VECTOR: torsos.MLP, torsos.INDEX: torsos.ONE_HOT}
    if self.observation_kind not in kinds:
      raise ValueError(f"Unknown observation_kind {self.observation_kind!r}; expected one of "
                       f"{(torsos.FRAME,) + tuple(kinds)}.")
    wanted = kinds[self.observation_kind]
    if self.torso != wanted:
      raise ValueError(f"{self.observation_kind} observations take the {wanted!r} torso "
                       f"(torsos.torso_for_observation), got torso {self.torso!r}.")
    if self.use_instruction:
      raise ValueError(f"An instruction goes with image frames (Figure 3); got "
                       f"{self.observation_kind} observations.")
    if self.observation_kind == torsos.VECTOR:
      if len(self.frame_shape) != 1 or self.frame_shape[0] < 1:
        raise ValueError(f"A vector observation has frame_shape (O,), got {self.frame_shape}.")
    elif tuple(self.frame_shape) != () or not self.num_observation_values or (
        self.num_observation_values < 1):
      raise ValueError(f"A Discrete(n) observation is an index: frame_shape () and "
                       f"num_observation_values n >= 1, got {self.frame_shape} and "
                       f"{self.num_observation_values}.")
    _ = self.torso_choice  # Building the choice runs its own checks (hidden sizes).


def dmlab_config(torso=DEEP, num_actions=9, frame_shape=(72, 96, 3)):
  """DeepMind Lab preset: 96x72 RGB (Table D.3), 9 actions (Table D.2), LSTM, language."""
  return NetworkConfig(num_actions=num_actions, frame_shape=tuple(frame_shape), torso=torso,
                       use_lstm=True, use_instruction=True)


def atari_config(num_actions, torso=SHALLOW, frame_shape=(84, 84, 4)):
  """Atari preset: 4 stacked 84x84 grey frames, feed-forward, no language (Table G.1)."""
  return NetworkConfig(num_actions=num_actions, frame_shape=tuple(frame_shape), torso=torso,
                       use_lstm=False, use_instruction=False)


def vector_config(num_actions, observation_size, use_lstm=False,
                  hidden_sizes=torsos.MLP_HIDDEN_SIZES, action_distribution=None):
  """Discrete actions on a float32 vector [O] (e.g. gym:CartPole-v1): the MLP torso (IMPACT
  section 4.3's two tanh layers of 256), feed-forward by default: a vector of a gymnasium
  task is the full state, as MuJoCo's is for the IMPACT paper's feed-forward MLPs.
  action_distribution: another discrete family (num_actions None), e.g. MultiDiscrete's."""
  return NetworkConfig(num_actions=num_actions, frame_shape=(int(observation_size),),
                       torso=torsos.MLP, use_lstm=use_lstm, use_instruction=False,
                       observation_kind=torsos.VECTOR, mlp_hidden_sizes=tuple(hidden_sizes),
                       action_distribution=action_distribution)


def index_config(num_actions, num_values, use_lstm=False, action_distribution=None):
  """Discrete actions on a Discrete(n) observation (its int32 index, e.g. gym:FrozenLake-v1):
  the one-hot [n] torso, feed-forward by default (the index is the state).
  action_distribution: as vector_config's."""
  return NetworkConfig(num_actions=num_actions, frame_shape=(), torso=torsos.ONE_HOT,
                       use_lstm=use_lstm, use_instruction=False,
                       observation_kind=torsos.INDEX, num_observation_values=int(num_values),
                       action_distribution=action_distribution)


def continuous_vector_config(observation_size, action_size, state_dependent_log_std=True,
                             hidden_sizes=torsos.MLP_HIDDEN_SIZES, use_lstm=False):
  """The IMPACT paper's continuous-control network on a float32 vector [O] (section 4.3, the
  MuJoCo tasks of Figure 5): "two fully-connected layers of 256 units with nonlinear
  activation tanh" for the policy, the same architecture, not shared, for the critic; a
  diagonal Gaussian head (Appendix E); RLlib's defaults where the paper is silent (normc
  weights, the observation only, feed-forward)."""
  return NetworkConfig(
      num_actions=None, frame_shape=(int(observation_size),), torso=torsos.MLP,
      use_lstm=use_lstm, use_instruction=False, observation_kind=torsos.VECTOR,
      mlp_hidden_sizes=tuple(hidden_sizes),
      action_distribution=distributions.DiagGaussianFamily(int(action_size)),
      reward_and_action_inputs=False, separate_value_torso=True, initializer=NORMC_INIT,
      state_dependent_log_std=state_dependent_log_std)


def continuous_frame_config(frame_shape, action_size, torso=SHALLOW,
                            state_dependent_log_std=True, use_lstm=False):
  """Box actions on uint8 frames [H, W, C] (e.g. gym:CarRacing-v3): a frame torso (Figure 3's
  or the IMPACT paper's) shared by a diagonal Gaussian head and the baseline (the IMPACT
  paper's image network: "The critic network shares weights with the policy network",
  section 4.3), the heads from RLlib's normc, the observation only, feed-forward. The torso
  runs on all frames at once (torso_chunk_frames=0), as this network always has."""
  return NetworkConfig(
      num_actions=None, frame_shape=tuple(int(n) for n in frame_shape), torso=torso,
      use_lstm=use_lstm, use_instruction=False, torso_chunk_frames=0,
      action_distribution=distributions.DiagGaussianFamily(int(action_size)),
      reward_and_action_inputs=False, initializer=NORMC_INIT,
      state_dependent_log_std=state_dependent_log_std)


def network_config_for_spec(spec, observation_kind=torsos.FRAME, torso=None, use_lstm=False,
                            use_instruction=False, frame_max=torsos.PIXEL_MAX,
                            num_observation_values=None, state_dependent_log_std=True,
                            separate_value_torso=False):
  """The network for an environment's spec: the torso by the observation's kind, the core
  (use_lstm), and the head of the spec's action distribution (distributions.for_spec).

  Discrete actions (an EnvSpec, or a MultiDiscreteEnvSpec: a categorical per choice) take
  Figure 3's agent with that torso: frames (torso: --torso, shallow by default; with
  use_instruction the language encoder; frame_max), vectors (vector_config: the MLP) or
  indices (index_config: one-hot of num_observation_values).
  Box actions (a ContinuousEnvSpec) take the IMPACT paper's networks (section 4.3): on vectors
  continuous_vector_config, on frames continuous_frame_config.

  Args:
    spec: environments.base.EnvSpec, MultiDiscreteEnvSpec or ContinuousEnvSpec (frame_shape:
      (H, W, C), (O,) or ()).
    observation_kind: torsos.FRAME, VECTOR or INDEX.
    torso: frames only: 'shallow', 'deep' or 'impact_cnn' (None: shallow).
    use_lstm: the LSTM 256 core (Figure 3) or none.
    use_instruction: frames only: the observation carries a language instruction.
    frame_max: frames only: the largest value of a frame's uint8 entries.
    num_observation_values: INDEX only: n of a Discrete(n) observation.
    state_dependent_log_std: Box actions only: GaussianPolicyHead's choice.
    separate_value_torso: discrete actions only: the baseline reads a torso of its own, built
      as the policy's, on the observation alone (Box actions on vectors always have one, the
      IMPACT paper's; on frames never).

  Returns:
    NetworkConfig.

  Raises:
    ValueError: a pair of observation and actions no network takes (Box actions on an index).
  """
  distribution = distributions.for_spec(spec)
  frame_shape = tuple(spec.frame_shape)
  if not distribution.discrete:
    if observation_kind == torsos.VECTOR:
      return continuous_vector_config(frame_shape[0], distribution.action_size,
                                      state_dependent_log_std, use_lstm=use_lstm)
    if observation_kind == torsos.FRAME:
      return continuous_frame_config(frame_shape, distribution.action_size, torso or SHALLOW,
                                     state_dependent_log_std, use_lstm=use_lstm)
    raise ValueError(f"Box actions on {observation_kind} observations: no network takes this "
                     "pair (one-hot the observation as a Box (n,) vector).")
  # Every discrete family (one categorical or one per MultiDiscrete choice) takes IMPALA's
  # networks, its head sized by the family (NetworkConfig resolves num_actions from it).
  if observation_kind == torsos.VECTOR:
    config = vector_config(None, frame_shape[0], use_lstm=use_lstm,
                           action_distribution=distribution)
  elif observation_kind == torsos.INDEX:
    config = index_config(None, num_observation_values, use_lstm=use_lstm,
                          action_distribution=distribution)
  else:
    config = NetworkConfig(num_actions=None, action_distribution=distribution,
                           frame_shape=frame_shape, torso=torso or SHALLOW, use_lstm=use_lstm,
                           use_instruction=use_instruction, frame_max=frame_max)
  if separate_value_torso:
    config = dataclasses.replace(config, separate_value_torso=True)
  return config


class Agent(tf.Module):
  """The actor-critic network with acting and learning entry points, composed from its config:
  torso (the observation's kind) + core (LSTM or none) + the action distribution's policy head
  and a baseline (Figure 3; the IMPACT paper's continuous-control networks, section 4.3).

  Its attribute paths are part of every checkpoint: torso (policy_torso and value_torso with a
  separate value torso), instruction_encoder, core, policy, baseline, observation_filter
  (older checkpoints also hold agent/_sampler, which no code reads: restoring leaves it).
  """

  def __init__(self, config, seed=0, name="agent", observation_filter=None):
    """Args:
      config: a NetworkConfig (see the presets: dmlab_config, atari_config, vector_config,
        index_config, continuous_vector_config, continuous_frame_config).
      seed: seeds the initial weights.
      name: module name.
      observation_filter: None, or the run's filter of observation vectors
        (acting/action_spaces.ObservationFilter, RLlib's MeanStdFilter; the run builds one for
        a network that reads vectors, assembly.build_agent). Actors pass every observation
        through it before the network sees or stores it; it is part of the agent, so every
        checkpoint carries its statistics and a restored agent filters as it was trained.
    """
    super().__init__(name=name)
    self.config = config
    self.observation_filter = observation_filter
    distribution = config.action_distribution
    # The Linear layers draw from one generator in the order they are built; frame torsos from
    # Sonnet's generator (the same one when the Linear layers are Sonnet's too), so that the
    # same seed gives the same network as before these were one stack.
    frame_init = torsos.Initializer(seed)
    dense_init = (frame_init if config.initializer == SONNET_INIT
                  else torsos.NormcInitializer(seed))
    torso_init = frame_init if config.observation_kind == torsos.FRAME else dense_init
    with self.name_scope:
      # The frame torsos are built as before this choice existed: the same module names and
      # order of variables, so old checkpoints restore and the same seed gives the same weights.
      torso = torsos.build_torso(config.torso_choice, torso_init,
                                 name="policy_torso" if config.separate_value_torso else None)
      if config.separate_value_torso:
        self.policy_torso = torso
      else:
        self.torso = torso
      core_input_size = getattr(torso, "output_size", torsos.TORSO_OUTPUT_SIZE)
      if config.reward_and_action_inputs:
        core_input_size += 1 + distribution.action_feature_size
      if config.use_instruction:
        self.instruction_encoder = language.InstructionEncoder(init=frame_init)
        core_input_size += language.INSTRUCTION_LSTM_SIZE
      if config.use_lstm:
        self.core = torsos.LSTM(core_input_size, CORE_LSTM_SIZE, init=frame_init, name="core")
        core_output_size = CORE_LSTM_SIZE
      else:
        core_output_size = core_input_size
      output_init = dense_init.for_output_layers()
      self.policy = heads.policy_head(distribution, core_output_size, output_init,
                                      config.state_dependent_log_std, config.initial_log_std)
      baseline_input_size = core_output_size
      if config.separate_value_torso:
        self.value_torso = torsos.build_torso(config.torso_choice, torso_init,
                                              name="value_torso")
        baseline_input_size = self.value_torso.output_size
      self.baseline = torsos.Linear(baseline_input_size, config.num_value_outputs, output_init,
                                    name="baseline")

  def initial_state(self, batch_size):
    """The core state at the start of an episode: LSTMState of zeros [B, 256], or ()."""
    if self.config.use_lstm:
      return self.core.initial_state(batch_size)
    return ()

  def unroll(self, prev_actions, env_outputs, core_state, static_shapes=False):
    """Runs the network over a time-major sequence.

    Args:
      prev_actions: [T, B, *action_shape], prev_actions[t] is the action that led to
        env_outputs[t] (unused without reward_and_action_inputs).
      env_outputs: EnvOutput of [T, B, ...] tensors (observation.frame [T, B, *frame_shape]
        of the config's frame_dtype, as learner.check_batch asserts at the update's entry);
        done[t] True means observation t starts a new episode, so the core state is reset
        before step t.
      core_state: the core state before step 0 (initial_state(B) or an actor's state).
      static_shapes: the unroll is compiled with XLA, which cannot compile the chunked
        torso's recomputing loop (torsos.chunked_torso; its own rematerialisation manages
        activation memory) and compiles for static shapes: the torso runs unchunked and the
        instruction encoder over every word slot. The same numbers either way.

    Returns:
      (NetworkOutput(policy_params float32 [T, B, P], baseline float32 [T, B] (or [T, B, N]
       with num_value_outputs N > 1)),
       the core state after the last step).
    """
    config = self.config
    frames = tf.convert_to_tensor(env_outputs.observation.frame)
    steps, batch = tf.shape(frames)[0], tf.shape(frames)[1]
    flat = lambda t: tf.reshape(t, tf.concat([[steps * batch], tf.shape(t)[2:]], 0))
    frames = flat(frames)
    torso = self.policy_torso if config.separate_value_torso else self.torso
    chunk_frames = 0 if static_shapes else config.torso_chunk_frames
    parts = [self._apply_torso(torso, frames, chunk_frames)]
    if config.reward_and_action_inputs:
      # The network's reward input is always clip(r, -1, 1) (released code).
      reward = tf.clip_by_value(tf.cast(flat(env_outputs.reward), tf.float32), -1.0, 1.0)
      parts += [reward[:, tf.newaxis],
                config.action_distribution.action_features(flat(prev_actions))]
    if config.use_instruction:
      parts.append(self.instruction_encoder(
          flat(tf.cast(env_outputs.observation.instruction, tf.int32)),
          trim_padding=config.trim_instruction_padding and not static_shapes))
    core_input = tf.concat(parts, axis=1) if len(parts) > 1 else parts[0]

    if config.use_lstm:
      core_input = tf.reshape(core_input, [steps, batch, core_input.shape[-1]])
      core_output, core_state = self.core(core_input, core_state,
                                          reset=tf.cast(env_outputs.done, tf.bool))
      core_output = flat(core_output)
    else:
      core_output = core_input
    policy_params = tf.reshape(self.policy(core_output),
                               [steps, batch, config.action_distribution.param_size])
    value_input = (self._apply_torso(self.value_torso, frames, chunk_frames)
                   if config.separate_value_torso else core_output)
    outputs = config.num_value_outputs  # One task: [T, B] as ever; N tasks: [T, B, N].
    baseline = tf.reshape(self.baseline(value_input), [steps, batch] + [outputs] * (outputs > 1))
    return NetworkOutput(policy_params=policy_params, baseline=baseline), core_state

  def _apply_torso(self, torso, frames, chunk_frames):
    """torso's features [N, K] of flat observations [N, ...] (section 3: all T x B at once;
    chunked_torso: in chunks of chunk_frames whose activations are recomputed for the
    gradient, the same numbers; 0: unchunked). Vectors (already filtered) and indices reach
    their torso as they are."""
    if self.config.observation_kind != torsos.FRAME:
      return torso(frames)
    if chunk_frames and (frames.shape[0] is None or frames.shape[0] > chunk_frames):
      return torsos.chunked_torso(torso, frames, chunk_frames, self.config.frame_max)
    return torso(torsos.to_unit_float(frames, self.config.frame_max))
