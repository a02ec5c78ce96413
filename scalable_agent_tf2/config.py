"""An experiment's settings: the released code's flag names, with per-suite presets.

Every field left None is filled by `resolve` from the preset of the level (SPEC.md,
"Hyperparameters"); a value given on the command line always wins. `resolve` also checks every
value, so bad flags fail before any work starts.
"""
import dataclasses
import json
from typing import Optional

from scalable_agent_tf2 import learner as learner_lib
from scalable_agent_tf2 import networks
from scalable_agent_tf2 import suites

TRAIN, TEST = "train", "test"
JIT_COMPILE_CHOICES = ("auto", "on", "off")


@dataclasses.dataclass(frozen=True)
class ExperimentConfig:
  """One run. Field names are experiment.py's flags (released code's names where it had them).

  None means "the level's preset" (see `presets`).
  """
  mode: str = TRAIN
  logdir: str = "/tmp/agent"
  level_name: str = "atari/pong"
  # Acting and the input pipeline.
  num_actors: Optional[int] = None
  batch_size: Optional[int] = None
  unroll_length: Optional[int] = None
  num_action_repeats: Optional[int] = None
  queue_capacity: Optional[int] = None
  # False: every actor thread runs its own forward pass (Table 1's "without dynamic batching").
  batched_inference: bool = True
  total_environment_frames: Optional[int] = None
  # Synchronous data-parallel learners (Figure 1 right; Table 3's "8 learners"), each
  # training on --batch_size trajectories from its own actors per update.
  num_learners: int = 1
  seed: int = 1
  # Network.
  torso: Optional[str] = None
  # Loss and optimiser.
  entropy_cost: Optional[float] = None
  baseline_cost: Optional[float] = None
  discounting: Optional[float] = None
  reward_clipping: Optional[str] = None
  learning_rate: Optional[float] = None
  decay: Optional[float] = None
  momentum: Optional[float] = None
  epsilon: Optional[float] = None
  max_grad_norm: Optional[float] = None  # <= 0 turns clipping off.
  off_policy_correction: Optional[str] = None
  # LASER's trust-region V-trace (Schmitt et al. 2019, section 4.3); inf (preset): off.
  trust_region_threshold: Optional[float] = None
  jit_compile: str = "auto"
  # TensorFlow's threads per op (0: its default, one per core). See training.configure_threads.
  intra_op_threads: int = 0
  # Environments.
  width: Optional[int] = None
  height: Optional[int] = None
  dataset_path: str = ""
  renderer: str = "software"
  level_cache_dir: str = ""
  sticky_actions: bool = False
  # Bookkeeping.
  checkpoint_secs: float = 600.0
  log_secs: float = 5.0
  test_num_episodes: int = 500

  def to_json(self):
    return json.dumps(dataclasses.asdict(self), indent=2, sort_keys=True)

  @property
  def levels(self):
    """The levels this run plays (a suite's levels, or the one level). `resolve` checks the
    name; tests may run unlisted levels through their own environment constructor."""
    if suites.is_suite(self.level_name):
      return suites.level_names(self.level_name)
    return (self.level_name,)

  @property
  def is_atari(self):
    return suites.is_atari_level(self.levels[0])

  @property
  def is_multi_task(self):
    return suites.is_suite(self.level_name)

  def learner_config(self):
    """The learner's hyperparameters."""
    return learner_lib.LearnerConfig(
        discounting=self.discounting, baseline_cost=self.baseline_cost,
        entropy_cost=self.entropy_cost, learning_rate=self.learning_rate,
        total_environment_frames=self.total_environment_frames,
        num_action_repeats=self.num_action_repeats, decay=self.decay,
        momentum=self.momentum, epsilon=self.epsilon,
        reward_clipping=self.reward_clipping,
        max_grad_norm=self.max_grad_norm if self.max_grad_norm > 0 else None,
        off_policy_correction=self.off_policy_correction,
        trust_region_threshold=self.trust_region_threshold)

  def network_config(self, num_actions):
    """The network for this run's levels."""
    if self.is_atari:
      return networks.atari_config(num_actions, torso=self.torso,
                                   frame_shape=(self.height, self.width, 4))
    return networks.dmlab_config(torso=self.torso, num_actions=num_actions,
                                 frame_shape=(self.height, self.width, 3))

  def environment_options(self):
    """Keyword arguments for environments.environment_constructor."""
    if self.is_atari:
      # Appendix G: the multi-task agent plays all games with the full 18 actions.
      return dict(full_action_space=self.is_multi_task, sticky_actions=self.sticky_actions,
                  num_action_repeats=self.num_action_repeats, frame_size=self.width)
    return dict(num_action_repeats=self.num_action_repeats, width=self.width,
                height=self.height, dataset_path=self.dataset_path, renderer=self.renderer,
                level_cache_dir=self.level_cache_dir or None)

  def jit_compile_choice(self):
    """True, False, or None (the learner's default for the device)."""
    return {"auto": None, "on": True, "off": False}[self.jit_compile]


def presets(level_name):
  """The paper's settings for a level or suite (SPEC.md "Hyperparameters").

  Raises:
    ValueError: unknown level name (the message lists the valid ones).
  """
  levels = suites.level_names(level_name)
  multi_task = suites.is_suite(level_name)
  if suites.is_atari_level(levels[0]):
    values = dataclasses.asdict(learner_lib.atari_learner_config())
    # Table G.1; frames per game: 200M, the multi-task agent 57 x 200M (section 5.3.2).
    values.update(
        unroll_length=20, batch_size=32, num_action_repeats=4, width=84, height=84,
        total_environment_frames=int(200e6) * len(levels),
        # Appendix G: experts use the shallow network with these hyperparameters; the
        # multi-task agent the deep (residual) one.
        torso=networks.DEEP if multi_task else networks.SHALLOW,
        # Not given for Atari in the paper; Table 1's single-machine setting.
        num_actors=48)
  else:
    values = dataclasses.asdict(learner_lib.dmlab_learner_config(multi_task=multi_task))
    # Table D.3: unroll 100, 96x72, action repeat 4. Released code: batch 32; 150 actors for
    # DMLab-30 (section 5.3.1, "IMPALA, deep"), 48 for a single level (Table 1).
    values.update(unroll_length=100, batch_size=32, num_action_repeats=4, width=96,
                  height=72, torso=networks.DEEP, num_actors=150 if multi_task else 48)
  if values["max_grad_norm"] is None:
    values["max_grad_norm"] = 0.0
  # Up to this many unrolls wait for the learner (4 batches): actors rarely block, and the
  # policy lag stays a few updates.
  values["queue_capacity"] = 4 * values["batch_size"]
  values.pop("clip_rho_threshold"), values.pop("clip_pg_rho_threshold")
  values.pop("clip_c_threshold"), values.pop("vtrace_lambda")
  return values


def resolve(config):
  """The config with every None filled from the presets, checked.

  Raises:
    ValueError: a bad value, with what to do about it.
  """
  if config.mode not in (TRAIN, TEST):
    raise ValueError(f"--mode must be {TRAIN!r} or {TEST!r}, got {config.mode!r}.")
  values = presets(config.level_name)
  given = {k: v for k, v in dataclasses.asdict(config).items() if v is not None}
  values.update(given)
  config = ExperimentConfig(**{f.name: values[f.name] for f in dataclasses.fields(config)})

  for name in ("num_actors", "batch_size", "unroll_length", "num_action_repeats",
               "queue_capacity", "total_environment_frames", "width", "height",
               "test_num_episodes", "num_learners"):
    if getattr(config, name) < 1:
      raise ValueError(f"--{name} must be a positive integer, got {getattr(config, name)}.")
  if config.intra_op_threads < 0:
    raise ValueError(f"--intra_op_threads must be >= 0, got {config.intra_op_threads}.")
  for name in ("checkpoint_secs", "log_secs"):
    if getattr(config, name) <= 0:
      raise ValueError(f"--{name} must be positive, got {getattr(config, name)}.")
  if config.torso not in networks.TORSOS:
    raise ValueError(f"--torso must be one of {networks.TORSOS}, got {config.torso!r}.")
  if config.jit_compile not in JIT_COMPILE_CHOICES:
    raise ValueError(f"--jit_compile must be one of {JIT_COMPILE_CHOICES}, got "
                     f"{config.jit_compile!r}.")
  if config.is_atari and config.width != config.height:
    raise ValueError(f"Atari frames are square: --width ({config.width}) and --height "
                     f"({config.height}) must be equal.")
  if config.num_actors < config.num_learners:
    raise ValueError(f"Each learner trains on its own actors' trajectories: --num_actors "
                     f"({config.num_actors}) must be at least --num_learners "
                     f"({config.num_learners}).")
  if config.queue_capacity < config.batch_size:
    raise ValueError(f"--queue_capacity ({config.queue_capacity}) must hold at least one "
                     f"batch (--batch_size {config.batch_size}).")
  # The learner checks its own values (reward clipping, off-policy correction, learning
  # rate, discounting, ...).
  config.learner_config()
  return config
