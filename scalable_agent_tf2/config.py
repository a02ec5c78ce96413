"""An experiment's settings: the released code's flag names, with per-suite presets.

Every field left None is filled by `resolve` from the preset of the level (SPEC.md,
"Hyperparameters"); a value given on the command line always wins. `resolve` also checks every
value, so bad flags fail before any work starts.
"""
import dataclasses
import json
from typing import Optional

from scalable_agent_tf2 import buffers
from scalable_agent_tf2 import learner as learner_lib
from scalable_agent_tf2 import losses
from scalable_agent_tf2 import networks
from scalable_agent_tf2 import suites

TRAIN, TEST = "train", "test"
JIT_COMPILE_CHOICES = ("auto", "on", "off")
# IMPACT's settings (fields of ExperimentConfig and learner.ImpactConfig); they mean nothing
# to IMPALA, so setting one without --algorithm=impact is an error.
IMPACT_FIELDS = ("target_update_period", "circular_buffer_size", "circular_buffer_max_uses",
                 "ppo_clip", "target_worker_clipping", "gae_lambda", "kl_cost")
# IMPACT paper, Table 1 (discrete environments): "Minibatch Buffer Size (N)" 4 and "Num SGD
# Iterations (K)" 2 (the text, section 4.3, reports N = 1, K = 2 as the best discrete setting).
IMPACT_CIRCULAR_BUFFER_SIZE = 4
IMPACT_CIRCULAR_BUFFER_MAX_USES = 2


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
  # 1: TF1's RMSProp (the paper's); 0: full-size steps from the start (short studies).
  rmsprop_initial_mean_square: float = 1.0
  max_grad_norm: Optional[float] = None  # <= 0 turns clipping off.
  off_policy_correction: Optional[str] = None
  # LASER's trust-region V-trace (Schmitt et al. 2019, section 4.3); inf (preset): off.
  trust_region_threshold: Optional[float] = None
  jit_compile: str = "auto"
  # Algorithm: IMPALA, or IMPACT (Luo et al., 2020) with the IMPACT settings below.
  algorithm: str = learner_lib.IMPALA
  # Experience replay (IMPALA section 5.2.2, Table D.3); fraction 0: none.
  replay_fraction: float = 0.0
  replay_capacity: int = buffers.DEFAULT_REPLAY_CAPACITY
  # LASER (Schmitt et al., 2019): replay whole episodes from their start, core states
  # recomputed (buffers.EpisodeReplay); --replay_capacity then counts unrolls.
  laser_replay: bool = False
  # LASER section 5.1: the entropy cost on online trajectories only (None: with LASER replay).
  entropy_on_online_only: Optional[bool] = None
  # LASER section 5.4 across processes: "host:port" of a replay_service.py process whose one
  # episode replay this run shares with other agents ("": a replay of its own).
  shared_replay_address: str = ""
  # This run's tag on its episodes in a shared replay ("": the logdir's name).
  agent_tag: str = ""
  # How long to wait for the replay service at the start and after losing it.
  shared_replay_connect_secs: float = 60.0
  # IMPACT (IMPACT_FIELDS; None: Table 1's values, the target period N x K).
  target_update_period: Optional[int] = None
  circular_buffer_size: Optional[int] = None
  circular_buffer_max_uses: Optional[int] = None
  ppo_clip: Optional[float] = None
  target_worker_clipping: Optional[float] = None
  gae_lambda: Optional[float] = None
  kl_cost: Optional[float] = None
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
  def is_toy(self):
    return suites.is_toy_level(self.levels[0])

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
        rmsprop_initial_mean_square=self.rmsprop_initial_mean_square,
        reward_clipping=self.reward_clipping,
        max_grad_norm=self.max_grad_norm if self.max_grad_norm > 0 else None,
        off_policy_correction=self.off_policy_correction,
        trust_region_threshold=self.trust_region_threshold)

  def impact_config(self):
    """IMPACT's own hyperparameters (--algorithm=impact)."""
    return learner_lib.ImpactConfig(
        ppo_clip=self.ppo_clip, target_worker_clipping=self.target_worker_clipping,
        gae_lambda=self.gae_lambda, kl_cost=self.kl_cost,
        target_update_period=self.target_update_period)

  @property
  def num_replayed_per_batch(self):
    """Trajectories of each batch drawn from replay (0 without replay)."""
    return buffers.num_replayed_per_batch(self.batch_size, self.replay_fraction)

  def network_config(self, num_actions):
    """The network for this run's levels."""
    if self.is_atari:
      return networks.atari_config(num_actions, torso=self.torso,
                                   frame_shape=(self.height, self.width, 4))
    if self.is_toy:  # Atari's feed-forward agent on one grey 20x20 frame.
      return networks.atari_config(num_actions, torso=self.torso,
                                   frame_shape=(self.height, self.width, 1))
    return networks.dmlab_config(torso=self.torso, num_actions=num_actions,
                                 frame_shape=(self.height, self.width, 3))

  def environment_options(self):
    """Keyword arguments for environments.environment_constructor."""
    if self.is_atari:
      # Appendix G: the multi-task agent plays all games with the full 18 actions.
      return dict(full_action_space=self.is_multi_task, sticky_actions=self.sticky_actions,
                  num_action_repeats=self.num_action_repeats, frame_size=self.width)
    if self.is_toy:
      return {}
    return dict(num_action_repeats=self.num_action_repeats, width=self.width,
                height=self.height, dataset_path=self.dataset_path, renderer=self.renderer,
                level_cache_dir=self.level_cache_dir or None)

  def jit_compile_choice(self):
    """True, False, or None (the learner's default for the device)."""
    return {"auto": None, "on": True, "off": False}[self.jit_compile]


def presets(level_name, algorithm=learner_lib.IMPALA):
  """The paper's settings for a level or suite (SPEC.md "Hyperparameters"), for IMPALA or
  IMPACT (IMPACT paper, Table 1).

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
  elif suites.is_toy_level(levels[0]):
    # Not from the paper: Table G.1's learner (Atari) with a small batch and short unrolls,
    # so a run takes a minute or two on a CPU. The environment repeats no actions, so frames
    # are agent steps. Rewards are not clipped: the delayed level's reward (0-10) carries
    # how many choices were right.
    values = dataclasses.asdict(learner_lib.atari_learner_config(
        reward_clipping=losses.NO_CLIPPING))
    values.update(unroll_length=10, batch_size=8, num_action_repeats=1, width=20, height=20,
                  total_environment_frames=25_000, torso=networks.SHALLOW, num_actors=4)
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
  if algorithm == learner_lib.IMPACT:
    # IMPACT paper, Table 1 (discrete environments, IMPACT column): value function
    # coefficient 1.0, and IMPACT's own settings (ImpactConfig's defaults). Its learning rate
    # (1e-4) and gradient clipping (10) go with averaged losses (Algorithm 1's 1/M) and an
    # optimizer the paper does not name; ours are summed and trained with IMPALA's RMSProp,
    # so the level's IMPALA values stay (Table 1 gives IMPACT and IMPALA the same learning
    # rate; learner.ImpactLearner). So do the level's batch, unroll and reward clipping:
    # IMPACT and IMPALA train on the same batches.
    impact = dataclasses.asdict(learner_lib.ImpactConfig())
    impact.pop("target_update_period")  # N x K, once N and K are known (resolve).
    values.update(baseline_cost=1.0, circular_buffer_size=IMPACT_CIRCULAR_BUFFER_SIZE,
                  circular_buffer_max_uses=IMPACT_CIRCULAR_BUFFER_MAX_USES, **impact)
  return values


def _resolve_laser(config):
  """Checks LASER's replay flags; entropy_on_online_only defaults to laser_replay."""
  replays = config.replay_fraction > 0
  if config.laser_replay and not replays:
    raise ValueError("--laser_replay mixes replayed episodes into every batch: set "
                     "--replay_fraction in (0, 1), e.g. LASER's 0.875 (7 replayed "
                     "trajectories for each online one, section 5.3).")
  if config.laser_replay and config.algorithm == learner_lib.IMPACT:
    raise ValueError("--laser_replay is built for IMPALA's learner; drop --algorithm=impact "
                     "or --laser_replay.")
  online_only = config.entropy_on_online_only
  if online_only is None:
    online_only = config.laser_replay
  if online_only and not replays:
    raise ValueError("--entropy_on_online_only needs replayed data to leave out: set "
                     "--replay_fraction > 0, or drop the flag.")
  if online_only and config.algorithm == learner_lib.IMPACT:
    raise ValueError("--entropy_on_online_only is built for IMPALA's learner; drop "
                     "--algorithm=impact or the flag.")
  if config.shared_replay_address:
    if not config.laser_replay:
      raise ValueError("--shared_replay_address shares LASER's episode replay: add "
                       "--laser_replay (and --replay_fraction, e.g. 0.875).")
    host, _, port = config.shared_replay_address.rpartition(":")
    if not host or not port.isdigit():
      raise ValueError(f"--shared_replay_address must be host:port, e.g. localhost:8010; got "
                       f"{config.shared_replay_address!r}.")
    if not config.shared_replay_connect_secs > 0:
      raise ValueError(f"--shared_replay_connect_secs must be positive, got "
                       f"{config.shared_replay_connect_secs}.")
  elif config.agent_tag:
    raise ValueError("--agent_tag names this run in a shared replay: add "
                     "--shared_replay_address.")
  return dataclasses.replace(config, entropy_on_online_only=bool(online_only))


def resolve(config):
  """The config with every None filled from the presets, checked.

  Raises:
    ValueError: a bad value, with what to do about it.
  """
  if config.mode not in (TRAIN, TEST):
    raise ValueError(f"--mode must be {TRAIN!r} or {TEST!r}, got {config.mode!r}.")
  if config.algorithm not in learner_lib.ALGORITHMS:
    raise ValueError(f"--algorithm must be one of {learner_lib.ALGORITHMS}, got "
                     f"{config.algorithm!r}.")
  given = {k: v for k, v in dataclasses.asdict(config).items() if v is not None}
  if config.algorithm == learner_lib.IMPACT:
    if given.get("off_policy_correction", "vtrace") != "vtrace":
      raise ValueError("--off_policy_correction is IMPALA's (Table 2); IMPACT corrects with "
                       "its clipped target-worker ratio. Drop one of the two flags.")
  else:
    for name in IMPACT_FIELDS:
      if name in given:
        raise ValueError(f"--{name} is an IMPACT setting: add --algorithm=impact.")
  values = presets(config.level_name, config.algorithm)
  values.update(given)
  config = ExperimentConfig(**{f.name: values.get(f.name) for f in dataclasses.fields(config)})

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
  if config.replay_capacity < 1:
    raise ValueError(f"--replay_capacity must be a positive integer, got "
                     f"{config.replay_capacity}.")
  buffers.num_replayed_per_batch(config.batch_size, config.replay_fraction)  # Checks it.
  if config.num_learners > 1 and (config.replay_fraction > 0
                                  or config.algorithm == learner_lib.IMPACT):
    raise ValueError("--num_learners > 1 trains each learner on its own actors' "
                     "trajectories; experience replay and --algorithm=impact are built for "
                     "one learner so far. Use --num_learners=1.")
  if config.algorithm == learner_lib.IMPACT:
    for name in ("circular_buffer_size", "circular_buffer_max_uses"):
      if getattr(config, name) < 1:
        raise ValueError(f"--{name} must be a positive integer, got {getattr(config, name)}.")
    if config.target_update_period is None:
      # IMPACT section 4.1.1: "Our primary benchmark for target update frequency is n = N K".
      config = dataclasses.replace(
          config,
          target_update_period=config.circular_buffer_size * config.circular_buffer_max_uses)
    config.impact_config()  # Checks IMPACT's values.
  config = _resolve_laser(config)
  # The learner checks its own values (reward clipping, off-policy correction, learning
  # rate, discounting, ...).
  config.learner_config()
  return config
