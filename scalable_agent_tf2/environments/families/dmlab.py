"""DeepMind Lab: the paper's DMLab-30 levels by their bare names (and seekavoid_arena_01), and
any other level of DeepMind Lab as "dmlab:<level>" (its path under game_scripts/levels:
"dmlab:nav_maze_random_goal_01", "dmlab:lt_chasm", "dmlab:contributed/dmlab30/rooms_watermaze").

Presets: Table D.3 and the released code (DMLAB30 for the suite, DMLAB_LEVEL for one level;
every DeepMind Lab level outside DMLab-30 takes DMLAB_LEVEL, the paper's single-level setting,
Table 1's task "seekavoid_arena_01" among them). Environments: one process per actor
(environments/dmlab.py; a missing map ends the engine's whole process,
docs/ARCHITECTURE.md "DeepMind Lab"). Observations: 96x72 RGB frames and the instruction.
"""
import difflib
import functools
import importlib.util
import os
import re

from scalable_agent_tf2.configuration import settings
from scalable_agent_tf2.environments import dmlab
from scalable_agent_tf2.environments import suites
from scalable_agent_tf2.environments.families import base

PREFIX = dmlab.LEVEL_PREFIX
# DMLab-30. Table D.3: unroll 100, 96x72 frames, Figure D.1's optimistic asymmetric reward
# clipping. Released code: batch 32, RMSProp epsilon 0.1, no gradient clipping, entropy cost and
# learning rate of the Table D.1 sweep's best agent, 10e9 frames (Figure 5); 150 actors
# (section 5.3.1, "IMPALA, deep").
DMLAB30 = dict(base.PAPER_SHARED, entropy_cost=0.0033391318945337044,
               learning_rate=0.00031866995608948655, epsilon=0.1, max_grad_norm=0.0,
               reward_clipping=settings.OPTIMISTIC_ASYMMETRIC, total_environment_frames=int(10e9),
               unroll_length=100, batch_size=32, width=96, height=72, torso=settings.DEEP,
               num_actors=150)
# One DMLab level. Table D.3: rewards clipped to [-1, 1]; released code: 1e9 frames (Figure 4);
# Table 1's 48 actors.
DMLAB_LEVEL = dict(DMLAB30, reward_clipping=settings.ABS_ONE, total_environment_frames=int(1e9),
                   num_actors=48)
DMLAB30_CITED = dict(
    base.PAPER_SHARED_CITED,
    entropy_cost=("released code (the Table D.1 sweep's best agent): "
                  f"{DMLAB30['entropy_cost']!r}"),
    learning_rate=("released code (the Table D.1 sweep's best agent): "
                   f"{DMLAB30['learning_rate']!r}"),
    epsilon="released code: 0.1", max_grad_norm="released code: 0 (none)",
    reward_clipping="Table D.3, Figure D.1: optimistic_asymmetric",
    total_environment_frames="released code (Figure 5): 10e9",
    unroll_length="Table D.3: 100", batch_size="released code: 32", width="Table D.3: 96",
    height="Table D.3: 72", torso="section 5.3.1 (IMPALA, deep): deep",
    num_actors="section 5.3.1 (IMPALA, deep): 150")
DMLAB_LEVEL_CITED = dict(DMLAB30_CITED, reward_clipping="Table D.3: abs_one",
                         total_environment_frames="released code (Figure 4): 1e9",
                         num_actors="Table 1: 48")
# A level path: words of letters, digits and underscores, separated by "/".
_LEVEL_PATH = re.compile(r"^[A-Za-z0-9_]+(/[A-Za-z0-9_]+)*$")


# Measured here (BUILD.md, "DeepMind Lab", memory): a DeepMind Lab environment process holds
# about 0.2 GB (language levels up to 0.28).
DMLAB_ENVIRONMENT_GB = 0.2


def check_dmlab_memory(num_actors, memory_gb):
  """Refuses, before anything starts, a DeepMind Lab run whose environment processes (one per
  actor) and training process would not fit in the machine's memory: the paper's 150 actors
  (section 5.3.1) ran on as many machines; on one they need about 32 GB."""
  need = num_actors * DMLAB_ENVIRONMENT_GB + base.TRAINING_PROCESS_GB
  if need <= memory_gb:
    return
  fits = max(1, int((memory_gb - base.TRAINING_PROCESS_GB) / DMLAB_ENVIRONMENT_GB))
  raise ValueError(
      f"--num_actors={num_actors}: {num_actors} DeepMind Lab environment processes and the "
      f"training process need about {need:.0f} GB of memory ({DMLAB_ENVIRONMENT_GB} GB each "
      f"+ {base.TRAINING_PROCESS_GB} GB; BUILD.md, \"DeepMind Lab\"), and this machine has "
      f"{memory_gb:.0f} GB. Pass --num_actors={fits} or fewer (the paper's 150 actors for "
      f"DMLab-30 ran on 150 machines).")


def installed_levels_directory(module_name="deepmind_lab"):
  """game_scripts/levels of the installed deepmind_lab module, or None (not installed, or a
  build that keeps its levels elsewhere)."""
  spec = importlib.util.find_spec(module_name)
  if spec is None or not spec.origin:
    return None
  directory = os.path.join(os.path.dirname(spec.origin), "baselab", "game_scripts", "levels")
  return directory if os.path.isdir(directory) else None


def installed_level_paths(directory):
  """Every level script's path under `directory`, without ".lua" (sorted)."""
  paths = []
  for root, _, files in os.walk(directory):
    for name in files:
      if name.endswith(".lua"):
        relative = os.path.relpath(os.path.join(root, name[:-len(".lua")]), directory)
        paths.append(relative.replace(os.sep, "/"))
  return sorted(paths)


def _check_dataset(config):
  """The Brady et al. image set where a level (or its test level) needs it."""
  needing = [level for level in config.levels
             if dmlab.level_path(level).split("/")[-1] in suites.DMLAB30_LEVELS_NEEDING_DATASET
             or suites.DMLAB30_LEVEL_MAPPING.get(level) in suites.DMLAB30_LEVELS_NEEDING_DATASET]
  if needing and not config.dataset_path:
    leave_out = (f" or leave them out with --excluded_levels={','.join(needing)}"
                 if config.is_multi_task else "")
    raise ValueError(f"{', '.join(needing)} need the Brady et al. (2008) image "
                     f"dataset: pass --dataset_path (BUILD.md, \"DeepMind Lab\"){leave_out}.")


def _check_memory(config, memory_gb):
  check_dmlab_memory(config.num_actors, memory_gb)


class DmLabFamily(base.Family):
  """See the module docstring."""
  name = "dmlab"
  title = "DeepMind Lab levels"
  prefixes = (PREFIX,)
  has_test_levels = True
  forms_suites = True  # Table D.2: one action set for every DeepMind Lab level.
  steps_may_reset_slowly = True  # Procedural levels compile a new map at every episode.
  how_to_fix = "Fix the level's environment (see BUILD.md)"
  name_forms = ("dmlab:<level> (any DeepMind Lab level by its path under game_scripts/levels, "
                "e.g. dmlab:nav_maze_random_goal_01; DMLab-30's presets)",)

  def listed_levels(self):
    return suites.DMLAB_LEVELS

  def check_level(self, level_name):
    if not level_name.startswith(PREFIX):
      super().check_level(level_name)
      return
    path = level_name[len(PREFIX):]
    if not _LEVEL_PATH.match(path):
      raise ValueError(f"{level_name!r}: after {PREFIX!r} comes a DeepMind Lab level's path "
                       "under game_scripts/levels, without .lua (e.g. dmlab:lt_chasm, "
                       "dmlab:contributed/dmlab30/rooms_watermaze).")
    directory = installed_levels_directory()
    if directory is None or os.path.isfile(os.path.join(directory, dmlab.level_path(level_name)
                                                         + ".lua")):
      return  # Without the module the engine itself reports a missing level.
    close = difflib.get_close_matches(path, installed_level_paths(directory), n=3, cutoff=0.6)
    hint = f" Did you mean {' or '.join(PREFIX + c for c in close)}?" if close else ""
    raise ValueError(f"{level_name!r}: the installed DeepMind Lab has no level {path!r} "
                     f"(no {path}.lua under {directory}).{hint}")

  def level_identity(self, level_name):
    """Its script: "rooms_watermaze" is "dmlab:contributed/dmlab30/rooms_watermaze"."""
    return dmlab.level_path(level_name)

  def suggestions(self, name):
    """A bare name of a level the installed DeepMind Lab has: "dmlab:<name>"."""
    directory = installed_levels_directory()
    if directory and _LEVEL_PATH.match(name) and os.path.isfile(
        os.path.join(directory, name + ".lua")):
      return [PREFIX + name]
    return []

  def test_level(self, level_name):
    return dmlab.test_level(level_name)

  def presets(self, level_name, levels, algorithm, num_cores, given=None):
    # --popart on DMLab-30 keeps Table D.3's optimistic asymmetric clipping: which clipping
    # Hessel et al. 2019's DMLab-30 runs used is not confirmed here (their Atari-57 agent's
    # unclipped rewards are families/atari.py's preset with --popart).
    del levels, algorithm, num_cores, given
    return dict(DMLAB30 if suites.is_suite(level_name) else DMLAB_LEVEL)

  def preset_citations(self, level_name, levels, algorithm, num_cores, given=None):
    del levels, algorithm, num_cores, given
    return dict(DMLAB30_CITED if suites.is_suite(level_name) else DMLAB_LEVEL_CITED)

  def check_config(self, config):
    """Held-out test levels are for --mode=test (section 5.3.1)."""
    if config.mode != settings.TRAIN:
      return
    held_out = [level for level in config.levels if level in suites.DMLAB30_TEST_LEVELS
                and level not in suites.DMLAB30_TRAIN_LEVELS]
    if held_out:
      train_names = [train for train, test in suites.DMLAB30_LEVEL_MAPPING.items()
                     if test in held_out]
      raise ValueError(f"{', '.join(held_out)} is a held-out test level: train on "
                       f"{', '.join(train_names)}; --mode=test then plays the test level "
                       "(section 5.3.1).")

  def check_can_run(self, config, memory_gb):
    """Every blocker of the run on this machine in one answer, the missing module first
    (nothing else can be tried without it): the module (BUILD.md), the Brady et al. image set
    where a level needs it, memory."""
    problems = []
    for check in (_check_dataset, functools.partial(_check_memory, memory_gb=memory_gb)):
      try:
        check(config)
      except ValueError as error:
        problems.append(str(error))
    try:
      dmlab.check_deepmind_lab_available()
    except ModuleNotFoundError as error:
      then = f" Then also: {' '.join(problems)}" if problems else ""
      raise ModuleNotFoundError(f"{error}{then}", name=error.name) from None
    if problems:
      raise ValueError(" Also: ".join(problems))

  def environment_options(self, config):
    return dict(num_action_repeats=config.num_action_repeats, width=config.width,
                height=config.height, dataset_path=config.dataset_path,
                renderer=config.renderer, level_cache_dir=config.level_cache_dir or None)

  def environment_constructor(self, level_name, seed, test_mode, options):
    lab_module = options.get("lab_module", "deepmind_lab")
    if isinstance(lab_module, str):
      dmlab.check_deepmind_lab_available(lab_module)  # Fail now, not in the child.
    return dmlab.DmLabEnvironment, dict(level_name=level_name, seed=seed, test_mode=test_mode,
                                        **options)

  def network_config(self, config, spec):
    """Figure 3's agent: 96x72 RGB frames, LSTM 256 core, the instruction encoder."""
    return base.frame_network_config(config, spec.num_actions, 3, use_lstm=True,
                                     use_instruction=True)


FAMILY = DmLabFamily()
