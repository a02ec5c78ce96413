"""A run's config: the settings (settings.py) with the level's presets filled in, checked.

    config = resolve(ExperimentConfig(level_name="atari/pong", num_actors=8))
    config = config_from_argv(["--level_name=atari/pong", "--num_actors=8"])  # Flag syntax.

Every setting left PRESET (None) is filled by `resolve` from `presets.presets` for the level or
suite (the paper's tables, cited in presets.py); a value given always wins. `resolve` also runs
every setting's check (settings.py) and the checks that combine settings, so a bad value fails
before any work starts, and before TensorFlow is imported: this module imports no TensorFlow.

`LearnerConfig` and `ImpactConfig`, the learner's hyperparameters (learner.py), hold the
settings marked for them (`part_of`); their defaults are the DMLab-30 and IMPACT Table 1
presets, which test_settings_tables.py keeps in step with settings.py and the families'
tables.
"""
import dataclasses
import json
import math
import os
from typing import Optional

from scalable_agent_tf2.configuration import command_line
from scalable_agent_tf2.configuration import settings
from scalable_agent_tf2.environments import families
from scalable_agent_tf2.environments import suites
from scalable_agent_tf2.environments.families import atari as atari_family
from scalable_agent_tf2.environments.families import base as family_base
from scalable_agent_tf2.environments.families import dmlab as dmlab_family
from scalable_agent_tf2.resolution import combinations
from scalable_agent_tf2.resolution import presets


def num_replayed_per_batch(batch_size, replay_fraction):
  """How many of each batch's `batch_size` items come from replay: round(fraction x size).

  Raises:
    ValueError: the fraction is outside [0, 1), or it rounds to a batch with no replayed or
      no online item (online data must keep flowing; a positive fraction must replay).
  """
  if not 0.0 <= replay_fraction < 1.0:
    raise ValueError(f"--replay_fraction must be in [0, 1), got {replay_fraction}: online "
                     f"data must keep flowing into every batch (the paper's 0.5 draws half "
                     f"of each batch from replay; LASER section 5.3 / Figure 2: learning "
                     f"from replay only fails, its 7 replayed : 1 online is 0.875).")
  num_replayed = int(round(replay_fraction * batch_size))
  if replay_fraction > 0 and num_replayed == 0:
    raise ValueError(f"--replay_fraction {replay_fraction} of --batch_size {batch_size} "
                     f"rounds to no replayed trajectory; use a larger fraction or batch.")
  if num_replayed >= batch_size:
    raise ValueError(f"--replay_fraction {replay_fraction} of --batch_size {batch_size} "
                     f"leaves no online trajectory in a batch; online data must keep flowing.")
  return num_replayed


def num_replayed_added(num_online, replay_fraction):
  """How many replayed items join each batch of `num_online` online items so that they are
  `replay_fraction` of the whole: round(num_online x fraction / (1 - fraction)).

  LASER section 5.1 adds a replay mini-batch to a full online one: 32 online and 224
  replayed trajectories at its 7/8 replay data per batch (section 5.3: "7 replay samples for
  each online sample"); IMPALA's replay (num_replayed_per_batch) takes them out of the batch.

  Raises:
    ValueError: the fraction is outside [0, 1), or positive but rounds to no replayed item.
  """
  if not 0.0 <= replay_fraction < 1.0:
    num_replayed_per_batch(num_online, replay_fraction)  # Raises its message.
  num_replayed = int(round(num_online * replay_fraction / (1.0 - replay_fraction)))
  if replay_fraction > 0 and num_replayed == 0:
    raise ValueError(f"--replay_fraction {replay_fraction} added to --batch_size {num_online} "
                     f"online trajectories rounds to no replayed trajectory; use a larger "
                     f"fraction or batch.")
  return num_replayed


@dataclasses.dataclass(frozen=True)
class ExperimentConfig(settings.ExperimentSettings):
  """One run: the fields of settings.ExperimentSettings, and what follows from them."""

  def to_json(self):
    return json.dumps(dataclasses.asdict(self), indent=2, sort_keys=True)

  @property
  def levels(self):
    """The levels this run plays (a suite's levels, or the one level). `resolve` checks the
    name; tests may run unlisted levels through their own environment constructor."""
    if suites.is_suite(self.level_name):
      excluded = set(self.excluded_level_names)
      return tuple(level for level in families.level_names(self.level_name)
                   if level not in excluded)
    return (self.level_name,)

  @property
  def excluded_level_names(self):
    """--excluded_levels as a tuple of names."""
    return tuple(name.strip() for name in (self.excluded_levels or "").split(",")
                 if name.strip())

  @property
  def family(self):
    """The environment family of the run's levels (environments/families): it owns their
    presets, environments, how they run and what they observe."""
    return families.family_of(self.levels[0])

  @property
  def runs_as(self):
    """How an actor's environments run (families/base.py: OWN_PROCESS, IN_PROCESS_GROUP,
    VECTOR), as the family decides for these settings."""
    return self.family.runs_as(self)

  @property
  def uses_atari_groups(self):
    """Whether actors step their games in a C++ vector (environments/atari_vector.py): Atari at
    what AtariVectorGroup implements (Table G.1's 84x84 frames and action repeat 4, no sticky
    actions); otherwise every actor has one environment process."""
    return self.runs_as == family_base.VECTOR

  @property
  def uses_environment_groups(self):
    """Whether an actor thread steps --envs_per_actor environments in this process (a vector
    or an in-process group, as the family decides); otherwise every actor has one
    environment process."""
    return self.runs_as != family_base.OWN_PROCESS

  @property
  def is_multi_task(self):
    return suites.is_suite(self.level_name)

  def learner_config(self):
    """The learner's hyperparameters (max_grad_norm 0, "no clipping", becomes None)."""
    values = {f.name: getattr(self, f.name) for f in settings.fields_part_of(settings.FOR_LEARNER)}
    values["max_grad_norm"] = self.max_grad_norm if self.max_grad_norm > 0 else None
    return LearnerConfig(**values)

  def impact_config(self):
    """IMPACT's own hyperparameters (--algorithm=impact)."""
    return ImpactConfig(**{f.name: getattr(self, f.name)
                           for f in settings.fields_part_of(settings.FOR_IMPACT)})

  @property
  def replays_added(self):
    """Replayed trajectories come on top of --batch_size online ones (--replay_mixing=added;
    unset: LASER's default with --laser_replay), else they are part of it."""
    mixing = self.replay_mixing or (settings.REPLAY_ADDED if self.laser_replay
                                    else settings.REPLAY_WITHIN_BATCH)
    return mixing == settings.REPLAY_ADDED

  @property
  def num_replayed_per_batch(self):
    """Trajectories of each learner batch drawn from replay (0 without replay)."""
    if self.replays_added:
      return num_replayed_added(self.batch_size, self.replay_fraction)
    return num_replayed_per_batch(self.batch_size, self.replay_fraction)

  @property
  def learner_batch_size(self):
    """Trajectories per learner update (per learner): online and replayed."""
    return self.batch_size + (self.num_replayed_per_batch if self.replays_added else 0)

  @property
  def num_online_per_batch(self):
    """New trajectories per learner update (per learner): only they count as frames."""
    return self.learner_batch_size - self.num_replayed_per_batch

  def network_config(self, num_actions):
    """The network for this run's levels with num_actions discrete actions (imports
    TensorFlow: call it from the TF side)."""
    from scalable_agent_tf2.environments import base  # pylint: disable=g-import-not-at-top
    return self.family.network_config(self, base.EnvSpec(num_actions=num_actions,
                                                         frame_shape=None))

  def network_config_for_spec(self, spec):
    """The network for an environment's spec (an EnvSpec or a ContinuousEnvSpec), as the
    level's family chooses (imports TensorFlow: call it from the TF side)."""
    return self.family.network_config(self, spec)

  def environment_options(self):
    """Keyword arguments for environments.environment_constructor, as the family takes them."""
    return self.family.environment_options(self)

  def jit_compile_choice(self):
    """True, False, or None (the learner's default for the device)."""
    return {"auto": None, "on": True, "off": False}[self.jit_compile]


# ---------------------------------------------------------------------------------------------
# The learner's configs: the settings marked for them, written out to be read.
# ---------------------------------------------------------------------------------------------


class _LearnerChecks:
  """LearnerConfig's checks: every setting's own, and those that combine them."""

  def __post_init__(self):
    settings.check_values(self, flag=False)
    if self.max_grad_norm is not None and not self.max_grad_norm > 0:
      raise ValueError(f"max_grad_norm must be positive or None, got {self.max_grad_norm}.")
    if self.uses_trust_region and self.off_policy_correction != settings.VTRACE:
      raise ValueError(f"The trust region (trust_region_threshold="
                       f"{self.trust_region_threshold}) needs off_policy_correction="
                       f"'vtrace', got {self.off_policy_correction!r}.")

  @property
  def uses_trust_region(self):
    return not math.isinf(self.trust_region_threshold)


class _ImpactChecks:
  """ImpactConfig's checks: every setting's own."""

  def __post_init__(self):
    settings.check_values(self, flag=False)


@dataclasses.dataclass(frozen=True)
class LearnerConfig(_LearnerChecks):
  """The learner's hyperparameters (learner.Learner), defaulting to DMLab-30's presets.

  A run builds it from its settings (ExperimentConfig.learner_config): every field but the
  V-trace constants is the setting of that name marked `part_of=FOR_LEARNER` in settings.py,
  where its flag, help, source and check live; test_settings_tables.py fails if a marked
  setting is missing here or its default differs from families/dmlab.py's DMLAB30. The defaults serve
  tests and benchmarks that build a learner directly.

  Fields, with their sources:
    total_environment_frames: frames of the learning-rate decay (released code: 10e9 for
      DMLab-30, Figure 5).
    num_action_repeats: environment frames per agent step (Table D.3: 4).
    entropy_cost: entropy loss weight (released code: the Table D.1 sweep's best agent).
    baseline_cost: baseline loss weight (Table D.3: 0.5).
    discounting: gamma (Table D.3: 0.99).
    reward_clipping: Figure D.1's optimistic asymmetric clipping (Table D.3, DMLab-30).
    learning_rate: initial RMSProp learning rate (released code: the Table D.1 sweep's best).
    decay: RMSProp decay (released code: 0.99).
    momentum: RMSProp momentum (Table D.3: 0).
    epsilon: RMSProp epsilon (released code: 0.1 for DMLab).
    rmsprop_initial_mean_square: RMSProp's accumulator start (TF1's RMSPropOptimizer: 1).
    learning_rate_schedule: linear (Tables D.3, G.1: to 0 at total_environment_frames) or
      constant.
    popart: values learned in a normalised scale (Hessel et al. 2019; learning/popart.py).
    max_grad_norm: global gradient-norm clip; None: none (DMLab: the released code clips
      nothing; --max_grad_norm=0 becomes None).
    off_policy_correction: Table 2's correction (vtrace).
    trust_region_threshold: LASER section 4.3's trust region; inf: off (plain IMPALA).
    clip_rho_threshold: rho_bar (section 5.2.1: 1); no flag.
    clip_pg_rho_threshold: rho_bar of the policy gradient (section 5.2.1: 1); no flag.
    clip_c_threshold: c_bar (section 5.2.1: 1); no flag.
    vtrace_lambda: Remark 2's lambda (1: plain V-trace); no flag.
  """
  total_environment_frames: int = 10_000_000_000
  num_action_repeats: int = 4
  entropy_cost: float = 0.0033391318945337044
  baseline_cost: float = 0.5
  discounting: float = 0.99
  reward_clipping: str = settings.OPTIMISTIC_ASYMMETRIC
  learning_rate: float = 0.00031866995608948655
  decay: float = 0.99
  momentum: float = 0.0
  epsilon: float = 0.1
  rmsprop_initial_mean_square: float = 1.0
  learning_rate_schedule: str = settings.LINEAR
  popart: bool = False
  max_grad_norm: Optional[float] = None
  off_policy_correction: str = settings.VTRACE
  trust_region_threshold: float = math.inf
  # settings.VTRACE_CONSTANTS: fixed by the paper, no flag.
  clip_rho_threshold: float = 1.0
  clip_pg_rho_threshold: float = 1.0
  clip_c_threshold: float = 1.0
  vtrace_lambda: float = 1.0


@dataclasses.dataclass(frozen=True)
class ImpactConfig(_ImpactChecks):
  """IMPACT's own hyperparameters (impact.ImpactLearner), defaulting to IMPACT Table 1's.

  Every field is the setting of that name marked `part_of=FOR_IMPACT` in settings.py (flag,
  help, source, check); test_settings_tables.py fails if a marked setting is missing here or
  its default differs from families/base.py's IMPACT_PRESET.

  Fields, with their sources (Luo et al., 2020):
    target_update_period: learner steps between target-network refreshes; section 4.1.1: "Our
      primary benchmark for target update frequency is n = N K", Table 1's 4 x 2 = 8.
    ppo_clip: the surrogate's clipping epsilon (Table 1: 0.3).
    target_worker_clipping: rho of pi / max(pi_target, mu / rho) (Table 1: 2.0).
    gae_lambda: lambda of the V-trace GAE advantages (Table 1: 0.995).
    kl_cost: weight of KL(pi_target || pi) (Table 1: 0.0).
    normalize_advantages: standardise the surrogate's advantages over each batch (not in the
      paper: PPO's implementations; losses.standardized_advantages).
  """
  target_update_period: int = 8
  ppo_clip: float = 0.3
  target_worker_clipping: float = 2.0
  gae_lambda: float = 0.995
  kl_cost: float = 0.0
  normalize_advantages: bool = False


def _learner_preset(preset, overrides):
  values = {f.name: preset[f.name] for f in settings.fields_part_of(settings.FOR_LEARNER)
            if f.name in preset}
  values["max_grad_norm"] = values["max_grad_norm"] or None
  return LearnerConfig(**{**values, **overrides})


def dmlab_learner_config(multi_task=True, **overrides):
  """DeepMind Lab's learner: DMLab-30 (and its experts) or a single level (Table D.3)."""
  return _learner_preset(dmlab_family.DMLAB30 if multi_task else dmlab_family.DMLAB_LEVEL, overrides)


def atari_learner_config(**overrides):
  """Atari's learner, Table G.1."""
  return _learner_preset(atari_family.ATARI, overrides)


# ---------------------------------------------------------------------------------------------
# Resolving and checking a run's settings.
# ---------------------------------------------------------------------------------------------


def resolve(config):
  """The config with every PRESET filled from `presets.presets`, checked.

  Raises:
    ValueError: a bad value, with what to do about it.
  """
  fields = {f.name: f for f in dataclasses.fields(ExperimentConfig)}
  for name in ("mode", "algorithm", "preset"):
    settings.check_value(name, getattr(config, name), fields[name])
  given = {k: v for k, v in dataclasses.asdict(config).items() if v is not None}
  # The algorithm first: the other presets depend on it.
  config = dataclasses.replace(config, algorithm=algorithm_of(config, given))
  if config.algorithm == settings.IMPACT:
    if given.get("off_policy_correction", settings.VTRACE) != settings.VTRACE:
      raise ValueError("--off_policy_correction is IMPALA's (Table 2); IMPACT corrects with "
                       "its clipped target-worker ratio. Drop one of the two flags.")
  else:
    for name in settings.IMPACT_SETTINGS:
      if name in given:
        raise ValueError(f"--{name} is an IMPACT setting: add --algorithm=impact.")
  values = preset_values(config, given)
  values.update(given)
  if "max_grad_norm" not in given:  # A clip on the paper's mean loss, on our summed one.
    values["max_grad_norm"] = presets.summed_loss_max_grad_norm(values)
  if "intra_op_threads" not in given:  # By the machine's cores and the run's network.
    values["intra_op_threads"] = presets.intra_op_threads(
        config.level_name, values.get("torso"), os.cpu_count() or 1)
  if "batch_size" not in given:
    values["batch_size"] = short_run_batch_size(values)
  config = ExperimentConfig(**{name: values.get(name) for name in fields})
  settings.check_values(config)
  combinations.check_combinations(config)
  config = combinations.resolve_envs_per_actor(config, given)
  if config.algorithm == settings.IMPACT and config.target_update_period is None:
    # IMPACT section 4.1.1: "Our primary benchmark for target update frequency is n = N K".
    config = dataclasses.replace(
        config, target_update_period=config.circular_buffer_size * config.circular_buffer_max_uses)
  config = combinations.resolve_laser(config)
  # The learner's own checks (those that combine its settings).
  config.learner_config()
  if config.algorithm == settings.IMPACT:
    config.impact_config()
  return config


def frames_per_batch(batch_size, unroll_length, num_action_repeats):
  """Environment frames one batch of new trajectories counts (learner.py's frame counter)."""
  return batch_size * unroll_length * num_action_repeats


def short_run_batch_size(values):
  """The preset batch size, or fewer unrolls when the whole frame budget is smaller than one
  batch: the learner counts frames a batch at a time and stops at the first update that
  reaches --total_environment_frames, so a budget of 2,000 frames at a batch of 32 unrolls of
  1,024 steps (IMPACT's Box setting) ran to 32,768 frames. Such a run is a smoke
  test, not the paper's setting; the batch becomes the fewest unrolls that reach the budget.
  Not with LASER's replay or --repeatable, whose rounds and replayed places are sized by it."""
  batch_size = values.get("batch_size")
  if batch_size is None or values.get("laser_replay") or values.get("repeatable"):
    return batch_size
  unroll = values.get("unroll_length") or 1
  repeats = values.get("num_action_repeats") or 1
  budget = values.get("total_environment_frames") or 0
  if budget <= 0 or frames_per_batch(batch_size, unroll, repeats) <= budget:
    return batch_size
  return max(1, -(-budget // (unroll * repeats)))


def algorithm_of(config, given):
  """--algorithm, or the level's default (presets.default_algorithm) when it is not given."""
  if given.get("algorithm") is not None:
    return given["algorithm"]
  if config.preset == settings.IMPACT_PAPER:
    return settings.IMPALA  # The IMPACT paper's Atari setting names its algorithm by the flag.
  return presets.default_algorithm(config.level_name, given)


def preset_values(config, given):
  """What the presets give the settings of `config` (its level, --algorithm, --preset and
  --laser_replay), before the settings `given` win: what `resolve` fills in, and what
  experiment.py --show_settings calls the preset's."""
  algorithm = algorithm_of(config, given)
  values = presets.presets(config.level_name, algorithm, config.preset, given=given)
  values["algorithm"] = algorithm
  if config.laser_replay:
    values.update(presets.LASER_PRESET)
    values.pop(presets.MEAN_LOSS_MAX_GRAD_NORM, None)
  return values


def machine_memory_gb():
  """The machine's physical memory in GB (1e9 bytes)."""
  return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 1e9


def check_levels_can_run(config):
  """What can be known, before any environment starts, about levels this run cannot play.

  Not part of `resolve`: a config names its levels whatever the machine has (a population
  driver or a README check resolves configs it never runs); a run checks this at its start.

  Raises:
    ValueError: naming the levels and what to do (the family's check_can_run).
    ModuleNotFoundError: a family's module is missing (DeepMind Lab: BUILD.md).
  """
  config.family.check_can_run(config, machine_memory_gb())


def config_from_flags(flag_values):
  """The resolved config of parsed absl flags (defined by command_line.define_flags).

  Raises:
    ValueError: a bad value, with what to do about it.
  """
  return resolve(ExperimentConfig(**{f.name: flag_values[f.name].value
                                     for f in dataclasses.fields(ExperimentConfig)}))


def config_from_argv(argv):
  """The resolved config of experiment.py's flags, e.g. ["--level_name=dmlab30"].

  Parses them on a fresh absl FlagValues (absl.flags.FLAGS is left alone), so any process can
  check a run's flags without importing experiment.py or TensorFlow; the population driver
  checks its members' flags this way.

  Raises:
    ValueError: an unknown flag, a malformed or a bad value, with what to do about it.
  """
  from absl import flags  # pylint: disable=g-import-not-at-top
  flag_values = flags.FlagValues()
  command_line.define_flags(flag_values)
  try:
    flag_values(["experiment.py", *argv])
  except flags.Error as error:
    raise ValueError(str(error)) from error
  return config_from_flags(flag_values)
