"""A run's config: the settings (settings.py) with the level's presets filled in, what follows from
them, checked; and the learner's configs, made from the table.

    config = resolve(ExperimentConfig(level_name="atari/pong", num_actors=8))
    config = config_from_argv(["--level_name=atari/pong", "--num_actors=8"])  # Flag syntax.

`resolve` fills every setting left PRESET (None) from the level's family's presets (cited beside
them in environments/families) and the algorithms' own (IMPACT Table 1, LASER), derives the settings
that follow from others and runs every check; a value given always wins. `explain` also says where
each preset and derived value comes from (--show_settings). No TensorFlow here."""
import dataclasses
import math
import os

from scalable_agent_tf2.configuration import combinations
from scalable_agent_tf2.configuration import command_line
from scalable_agent_tf2.configuration import settings
from scalable_agent_tf2.environments import families
from scalable_agent_tf2.environments import suites
from scalable_agent_tf2.environments.families import atari as atari_family
from scalable_agent_tf2.environments.families import base as family_base
from scalable_agent_tf2.environments.families import dmlab as dmlab_family

# A gradient-norm clip that a paper set on a loss averaged over the batch's T x B steps (the
# IMPACT paper's Algorithm 1 and RLlib's APPO, which ran IMPACT), where this project's learners
# sum the loss, which scales every gradient by T x B. A preset gives it under this key instead
# of max_grad_norm, and `explain` sets max_grad_norm = it x T x B with the run's own unroll and
# batch: the same clipping at the paper's batch and at any other (a --max_grad_norm given wins).
MEAN_LOSS_MAX_GRAD_NORM = "mean_loss_max_grad_norm"


def num_replayed_per_batch(batch_size, replay_fraction):
  """How many of each batch's `batch_size` items come from replay: round(fraction x size).
  ValueError: a fraction outside [0, 1), or one that leaves no replayed or no online item."""
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
  """How many replayed items join each batch of `num_online` online ones so that they are
  `replay_fraction` of the whole (LASER section 5.1 adds a replay mini-batch to a full online
  one: 32 online and 224 replayed at 7/8). ValueError as num_replayed_per_batch's."""
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

  @property
  def levels(self):
    """The levels this run plays: a suite's (dmlab30, atari57 or a list of levels such as
    "atari/pong,atari/breakout", in its order; but --excluded_levels), or the one level."""
    if suites.is_suite(self.level_name):
      excluded = set(self.excluded_level_names)
      return tuple(level for level in families.level_names(self.level_name)
                   if level not in excluded)
    return (self.level_name,)

  @property
  def excluded_level_names(self):
    return tuple(name.strip() for name in (self.excluded_levels or "").split(",")
                 if name.strip())

  @property
  def family(self):
    """The environment family of the run's levels (environments/families; a suite's share one)."""
    return families.family_of(families.level_names(self.level_name)[0])

  @property
  def uses_atari_groups(self):
    """Whether actors step their games in a C++ vector (environments/atari_vector.py)."""
    return self.family.runs_as(self) == family_base.VECTOR

  @property
  def uses_environment_groups(self):
    """Whether an actor thread steps --envs_per_actor environments in this process."""
    return self.family.runs_as(self) != family_base.OWN_PROCESS

  @property
  def is_multi_task(self):
    """One agent on a suite's levels (a built-in suite or a list): the family's suite presets
    (Atari: the deep network and the full 18 actions, Appendix G; DMLab-30's)."""
    return suites.is_suite(self.level_name)

  def learner_config(self):
    """The learner's hyperparameters (max_grad_norm <= 0, no clip, as None)."""
    values = {f.name: getattr(self, f.name) for f in settings.fields_part_of(settings.FOR_LEARNER)}
    values["max_grad_norm"] = self.max_grad_norm if (self.max_grad_norm or 0) > 0 else None
    return LearnerConfig(**values)

  def impact_config(self):
    """IMPACT's own hyperparameters (--algorithm=impact)."""
    return ImpactConfig(**{f.name: getattr(self, f.name)
                           for f in settings.fields_part_of(settings.FOR_IMPACT)})

  @property
  def replays_added(self):
    """Replayed trajectories come on top of --batch_size online ones (--replay_mixing=added;
    unset: LASER's default with --laser_replay), else they are part of it."""
    return self.replay_mixing == settings.REPLAY_ADDED if self.replay_mixing else self.laser_replay

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
    """The network for this run's levels with num_actions discrete actions (TensorFlow's)."""
    from scalable_agent_tf2.environments import base  # pylint: disable=g-import-not-at-top
    return self.family.network_config(self, base.EnvSpec(num_actions=num_actions,
                                                         frame_shape=None))

  def jit_compile_choice(self):
    """True, False, or None (the learner's default for the device)."""
    return {"auto": None, "on": True, "off": False}[self.jit_compile]


class _Checks:
  """A derived config's checks: every setting's own (then the learner's, which combine some)."""

  def __post_init__(self):
    settings.check_values(self, flag=False)


class _LearnerChecks(_Checks):

  def __post_init__(self):
    super().__post_init__()
    if self.max_grad_norm is not None and not self.max_grad_norm > 0:
      raise ValueError(f"max_grad_norm must be positive or None, got {self.max_grad_norm}.")
    if self.uses_trust_region and self.off_policy_correction != settings.VTRACE:
      raise ValueError(f"The trust region (trust_region_threshold={self.trust_region_threshold}) "
                       f"needs off_policy_correction='vtrace', got {self.off_policy_correction!r}.")

  @property
  def uses_trust_region(self):
    return not math.isinf(self.trust_region_threshold)


def _derived_config(name, checks, part_of, defaults, doc, constants=()):
  """A frozen dataclass of the settings marked `part_of`, in the table's order (their flag,
  help, source and check are the table's), defaulting to `defaults` (a preset's values) or to
  the table's own default; then `constants`."""
  fields = [(f.name, f.type, dataclasses.field(default=defaults.get(f.name, f.default)))
            for f in settings.fields_part_of(part_of)]
  fields += [(n, type(v), dataclasses.field(default=v)) for n, v in constants]
  return dataclasses.make_dataclass(name, fields, bases=(checks,), frozen=True,
                                    namespace=dict(__doc__=doc, __module__=__name__))


LearnerConfig = _derived_config(
    "LearnerConfig", _LearnerChecks, settings.FOR_LEARNER,
    dict(dmlab_family.DMLAB30, max_grad_norm=dmlab_family.DMLAB30["max_grad_norm"] or None),
    """The learner's hyperparameters (learner.Learner): the settings marked part_of=FOR_LEARNER
    in settings.py, then the V-trace constants without a flag (settings.VTRACE_CONSTANTS).
    Defaults: DMLab-30's presets (families/dmlab.py DMLAB30; max_grad_norm None: no clip).""",
    constants=settings.VTRACE_CONSTANTS)
ImpactConfig = _derived_config(
    "ImpactConfig", _Checks, settings.FOR_IMPACT,
    dict(family_base.IMPACT_PRESET, target_update_period=(  # IMPACT section 4.1.1: N x K.
        family_base.IMPACT_PRESET["circular_buffer_size"]
        * family_base.IMPACT_PRESET["circular_buffer_max_uses"])),
    """IMPACT's own hyperparameters (impact.ImpactLearner): the settings marked part_of=FOR_IMPACT
    in settings.py. Defaults: IMPACT Table 1's (families/base.py IMPACT_PRESET).""")


def resolve(config):
  """explain(config)'s config: presets and derived settings filled in, checked (ValueError)."""
  return explain(config)[0]


def explain(config):
  """(resolve(config), what the presets gave, {setting: where its preset or derived value comes
  from, in --show_settings' words: "<source>: <the value>"})."""
  fields = [f.name for f in dataclasses.fields(ExperimentConfig)]
  for name in ("mode", "algorithm", "preset"):
    settings.check_value(name, getattr(config, name))
  given = {k: v for k, v in dataclasses.asdict(config).items() if v is not None}
  presets, cited = preset_values(config, given)
  values = dict(presets, **given)
  _derive_from_presets(config, given, values, presets, cited)
  # A first config for the checks; the settings that follow from checked ones come last.
  checked = ExperimentConfig(**{name: values.get(name) for name in fields})
  settings.check_values(checked)
  combinations.check_combinations(checked)
  values.update(_derive_from_config(checked, given, presets, cited))
  config = ExperimentConfig(**{name: values.get(name) for name in fields})
  config.learner_config()  # The learner's own checks (those that combine its settings).
  if config.algorithm == settings.IMPACT:
    config.impact_config()
  return config, presets, cited


def _algorithm(config, given):
  """--algorithm, or the level's (its family's choice), checked against the settings given."""
  algorithm = given.get("algorithm")
  if algorithm is None and config.preset == settings.IMPACT_PAPER:
    algorithm = settings.IMPALA  # The IMPACT paper's Atari setting names it by the flag.
  elif algorithm is None:
    levels = families.level_names(config.level_name)
    algorithm = config.family.default_algorithm(levels, given=given)
  if algorithm == settings.IMPACT:
    if given.get("off_policy_correction", settings.VTRACE) != settings.VTRACE:
      raise ValueError("--off_policy_correction is IMPALA's (Table 2); IMPACT corrects with "
                       "its clipped target-worker ratio. Drop one of the two flags.")
  else:
    for name in settings.IMPACT_SETTINGS:
      if name in given:
        raise ValueError(f"--{name} is an IMPACT setting: add --algorithm=impact.")
  return algorithm


def preset_values(config, given):
  """(values, citations) of what the presets give `config` (its level's family, or the IMPACT
  paper's Atari setting; IMPACT Table 1; LASER), before the settings `given` win."""
  algorithm = _algorithm(config, given)
  levels, family = families.level_names(config.level_name), config.family
  if config.preset == settings.IMPACT_PAPER:
    if suites.is_suite(config.level_name) or family is not atari_family.FAMILY:
      raise ValueError(f"--preset={settings.IMPACT_PAPER} is the IMPACT paper's setting for "
                       f"one Atari game (Figure 6, e.g. --level_name=atari/pong); --level_name="
                       f"{config.level_name} is not one. Drop --preset or pick a game.")
    impact = algorithm == settings.IMPACT
    values = dict(atari_family.IMPACT_PAPER_IMPACT if impact else atari_family.IMPACT_PAPER_IMPALA)
    cited = dict(atari_family.IMPACT_PAPER_IMPACT_CITED if impact
                 else atari_family.IMPACT_PAPER_IMPALA_CITED)
    cited["algorithm"] = ("the IMPACT paper's setting names none (--algorithm=impact: its "
                          "IMPACT column): impala")
  else:
    cores = os.cpu_count() or 1
    values = family.presets(config.level_name, levels, algorithm, cores, given=given)
    cited = family.preset_citations(config.level_name, levels, algorithm, cores, given=given)
    cited["algorithm"] = family.algorithm_cited
    if algorithm == settings.IMPACT and not family.owns_algorithm_presets:
      values.update(family_base.IMPACT_PRESET)  # target_update_period: N x K, derived.
      cited.update(family_base.IMPACT_PRESET_CITED)
  # Up to 4 batches wait for the learner: actors rarely block, and the policy lag stays small.
  values["queue_capacity"] = 4 * values["batch_size"]
  cited["queue_capacity"] = (f"not in the paper, 4 batches of {values['batch_size']} unrolls "
                             f"(actors rarely block): {values['queue_capacity']}")
  values["algorithm"] = algorithm
  if config.laser_replay:  # LASER section 5.1: "we do not use gradient clipping by norm".
    values.pop(MEAN_LOSS_MAX_GRAD_NORM, None)
    values["max_grad_norm"] = 0.0
    cited["max_grad_norm"] = "LASER section 5.1 (no gradient clipping by norm): 0"
  return values, cited


def _derive_from_presets(config, given, values, presets, cited):
  """Sets in `values` (and cites) what follows from the presets and the settings given: a clip
  on a paper's mean loss on our summed one, the threads per op, a short budget's batch."""
  mean_clip = values.get(MEAN_LOSS_MAX_GRAD_NORM)
  if "max_grad_norm" not in given and mean_clip is not None:
    unroll, batch = values["unroll_length"], values["batch_size"]
    values["max_grad_norm"] = mean_clip * unroll * batch
    source = cited[MEAN_LOSS_MAX_GRAD_NORM].rpartition(": ")[0]
    cited["max_grad_norm"] = (f"{source}'s {mean_clip:g} on the mean loss x T x B = {unroll} "
                              f"x {batch} steps (this project's loss is summed over them): "
                              f"{values['max_grad_norm']}")
  if "intra_op_threads" not in given:  # By the machine's cores and the run's network.
    family, cores = config.family, os.cpu_count() or 1
    values["intra_op_threads"] = family.intra_op_threads(values.get("torso"), cores)
    cited["intra_op_threads"] = family.intra_op_threads_cited(values.get("torso"), cores)
  if "batch_size" not in given:
    values["batch_size"] = short_run_batch_size(values)
    if values["batch_size"] != presets["batch_size"]:
      cited["batch_size"] = (
          f"fewer unrolls than the preset's {presets['batch_size']}, as "
          f"--total_environment_frames={values['total_environment_frames']} is less than one "
          f"batch of them (config.short_run_batch_size): {values['batch_size']}")


def _derive_from_config(config, given, presets, cited):
  """{setting: value} (cited) of what follows from the checked `config`: --envs_per_actor where
  environments do not run in groups, IMPACT's target period N x K, LASER's defaults."""
  derived = dict(envs_per_actor=combinations.resolve_envs_per_actor(config, given))
  if "envs_per_actor" not in given and derived["envs_per_actor"] != presets.get("envs_per_actor"):
    cited["envs_per_actor"] = (f"these environments run as {config.family.runs_as(config)} "
                               f"(combinations.resolve_envs_per_actor): "
                               f"{derived['envs_per_actor']}")
  if config.algorithm == settings.IMPACT and config.target_update_period is None:
    # IMPACT section 4.1.1: "Our primary benchmark for target update frequency is n = N K".
    n, k = config.circular_buffer_size, config.circular_buffer_max_uses
    derived["target_update_period"] = n * k
    cited["target_update_period"] = f"IMPACT section 4.1.1, n = N x K = {n} x {k}: {n * k}"
  derived.update(combinations.resolve_laser(config))
  if derived["replay_mixing"] is not None and "replay_mixing" not in given:
    cited["replay_mixing"] = (
        f"LASER section 5.1, with --laser_replay: {derived['replay_mixing']}"
        if config.laser_replay else f"IMPALA section 5.2.2: {derived['replay_mixing']}")
  if "entropy_on_online_only" not in given:
    cited["entropy_on_online_only"] = (
        "LASER section 5.1, with --laser_replay: on" if derived["entropy_on_online_only"]
        else "LASER section 5.1's, without --laser_replay: off")
  return derived


def frames_per_batch(batch_size, unroll_length, num_action_repeats):
  """Environment frames one batch of new trajectories counts (learner.py's frame counter)."""
  return batch_size * unroll_length * num_action_repeats


def short_run_batch_size(values):
  """The preset batch, or the fewest unrolls that reach a frame budget smaller than one batch
  (the learner stops at the first update past the budget: 2,000 frames at 32 x 1,024 steps ran
  32,768). Not with LASER's replay or --repeatable, whose rounds are sized by the batch."""
  batch_size = values.get("batch_size")
  if batch_size is None or values.get("laser_replay") or values.get("repeatable"):
    return batch_size
  unroll = values.get("unroll_length") or 1
  repeats = values.get("num_action_repeats") or 1
  budget = values.get("total_environment_frames") or 0
  if budget <= 0 or frames_per_batch(batch_size, unroll, repeats) <= budget:
    return batch_size
  return max(1, -(-budget // (unroll * repeats)))


def machine_memory_gb():
  return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 1e9


def check_levels_can_run(config):
  """Raises ValueError (or ModuleNotFoundError) for levels this machine cannot run, before any
  environment starts (the family's check_can_run); a run checks it at its start, `resolve` not:
  a population driver resolves configs it never runs."""
  config.family.check_can_run(config, machine_memory_gb())


def config_of_flags(flag_values, table=ExperimentConfig):
  """The (unresolved) ExperimentConfig, or `table`, of parsed absl flags (define_flags')."""
  return table(**{f.name: flag_values[f.name].value for f in dataclasses.fields(table)})


def config_from_argv(argv):
  """The resolved config of experiment.py's flags (e.g. ["--level_name=dmlab30"]), parsed on a
  fresh absl FlagValues: any process checks a run's flags without TensorFlow (the population
  driver, its members'). ValueError: an unknown flag, a malformed or a bad value."""
  from absl import flags  # pylint: disable=g-import-not-at-top
  flag_values = flags.FlagValues()
  command_line.define_flags(flag_values)
  try:
    flag_values(["experiment.py", *argv])
  except flags.Error as error:
    raise ValueError(str(error)) from error
  return resolve(config_of_flags(flag_values))
