"""Environments of the IMPALA paper behind one interface (base.Environment), in process or in
a subprocess.

    env = create_environment("atari/pong", seed=1)    # An EnvironmentProcess.
    num_actions, frame_shape = env.spec               # 6, (84, 84, 4)
    output = env.initial()                            # structures.EnvOutput, done=True
    output = env.step(action)                         # auto-resets after an episode ends
    env.close()

Level names are those of the environment families (environments/families: "atari/<game>",
DMLab-30 names, "dmlab:<level>", "mujoco/<task>", "toy/...", "gym:<id>"); each family builds
its own levels' environments. Suites ("atari57", "dmlab30") expand to levels with
families.level_names(), the one registry of level names.

May import: structures, utils, configuration (the settings' names: configuration/settings.py,
which imports no family; the configuration resolves a run from the families' presets); lazily
agent (a family's network_config, called from the TensorFlow side). No TensorFlow here.
"""
from scalable_agent_tf2.environments import families
from scalable_agent_tf2.environments import suites
from scalable_agent_tf2.environments.base import Environment
from scalable_agent_tf2.environments.base import EnvironmentFault
from scalable_agent_tf2.environments.base import EnvSpec
from scalable_agent_tf2.environments.base import LevelCannotRun
from scalable_agent_tf2.environments.base import LevelKeepsFailing
from scalable_agent_tf2.environments.process import EnvironmentProcess
from scalable_agent_tf2.environments.process import EnvironmentProcessDied
from scalable_agent_tf2.environments.process import EnvironmentProcessTimeout

__all__ = ["EnvSpec", "Environment", "EnvironmentFault", "EnvironmentProcess",
           "EnvironmentProcessDied", "EnvironmentProcessTimeout", "LevelCannotRun",
           "LevelKeepsFailing", "create_environment", "environment_constructor"]


def environment_constructor(level_name, seed=0, test_mode=False, **options):
  """(constructor, kwargs) that build one level's environment; nothing is started yet.

  Args:
    level_name: one level ("atari/pong", "explore_goal_locations_small"); not a suite.
    seed: int, makes the environment's randomness reproducible.
    test_mode: evaluation settings, as the level's family defines them. Atari: only a game
      over ends an episode (no life-loss termination, Table G.1 "training only"). DMLab: the
      level's test variant, allowHoldOutLevels and mixerSeed 0x600D5EED. MuJoCo, gymnasium,
      toy: the same environment.
    **options: further keyword arguments of the family's environment (AtariEnvironment's
      full_action_space, DmLabEnvironment's dataset_path, GymEnvironment's env_kwargs, ...).

  Raises:
    ValueError: unknown level (the message lists the valid names) or a suite name.
    ModuleNotFoundError: a family's module is missing (DMLab: points to BUILD.md).
  """
  if suites.is_suite(level_name):
    raise ValueError("%r is a suite, not a level: create one environment per level of "
                     "families.level_names(%r)." % (level_name, level_name))
  # Unknown names raise with the closest valid ones.
  return families.family_of(level_name).environment_constructor(level_name, seed, test_mode,
                                                                options)


def create_environment(level_name, seed=0, test_mode=False, in_subprocess=True,
                       **options):
  """One level's environment, by default hosted in its own subprocess.

  Args:
    level_name, seed, test_mode, **options: see environment_constructor.
    in_subprocess: True: an EnvironmentProcess (what actors use); False: in this process.

  Returns:
    A base.Environment.
  """
  constructor, kwargs = environment_constructor(level_name, seed, test_mode, **options)
  if in_subprocess:
    return EnvironmentProcess(constructor, kwargs=kwargs)
  return constructor(**kwargs)
