"""The gymnasium family: "gym:<id>" levels, their documented presets, --env_kwargs, a user's
package through gymnasium's "module:Id" form, truncation, and every kind of bad input."""
import os
import sys

import numpy as np
import pytest

from scalable_agent_tf2.acting import action_spaces
from scalable_agent_tf2.acting import actor
from scalable_agent_tf2.agent import distributions
from scalable_agent_tf2.configuration import config as config_lib
from scalable_agent_tf2.configuration import settings
from scalable_agent_tf2.environments import base
from scalable_agent_tf2.environments import families
from scalable_agent_tf2.environments import gym_env
from scalable_agent_tf2.environments import gym_spaces
from scalable_agent_tf2.environments import truncation
from scalable_agent_tf2.environments.families import atari as atari_family
from scalable_agent_tf2.environments.families import base as family_base
from scalable_agent_tf2.environments.families import gym as gym_family
from scalable_agent_tf2.environments.families import mujoco_presets

USER = "gym:tests.gym_user_package.envs:"
REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _resolve(level_name, **kwargs):
  return config_lib.resolve(config_lib.ExperimentConfig(level_name=level_name, **kwargs))


def test_impala_takes_the_papers_learner_with_popart_and_a_constant_rate():
  """--algorithm=impala (families/gym.py UNTUNED), any observation and action kind: Table G.1's
  learner where it carries over, PopArt, a constant rate, RMSProp at full step."""
  for level, flags in (("gym:CartPole-v1", {}), ("gym:LunarLander-v3", {}),
                       ("gym:Pendulum-v1", {}),
                       ("gym:LunarLander-v3", dict(env_kwargs='{"continuous": true}'))):
    config = _resolve(level, algorithm="impala", **flags)
    assert families.family_of(config.level_name).name == "gym"
    assert config.algorithm == settings.IMPALA, level
    for name in ("learning_rate", "max_grad_norm", "unroll_length", "batch_size",
                 "discounting", "baseline_cost", "decay"):
      assert getattr(config, name) == atari_family.ATARI[name], (level, name)
    assert config.entropy_cost == 0.001, level  # Measured: families/gym.py's docstring.
    assert (config.num_action_repeats, config.reward_clipping) == (1, settings.NO_CLIPPING)
    assert config.popart and config.learning_rate_schedule == settings.CONSTANT, level
    assert (config.epsilon, config.rmsprop_initial_mean_square) == (1e-5, 0.0), level
    assert config.family.runs_as(config) == family_base.IN_PROCESS_GROUP
    assert config.uses_environment_groups
    assert config.num_actors * config.envs_per_actor >= atari_family.ATARI_ENVIRONMENTS
  assert _resolve("gym:CartPole-v1", algorithm="impala",
                  learning_rate=0.01).learning_rate == 0.01  # Flags win.
  with pytest.raises(ValueError, match="add --algorithm=impact"):
    _resolve("gym:CartPole-v1", algorithm="impala", circular_buffer_max_uses=4)
  assert "Presets" in families.family_of("gym:Pendulum-v1").preset_sources(
      "gym:Pendulum-v1")


@pytest.mark.parametrize("level, flags", [
    ("gym:CartPole-v1", {}), ("gym:CartPole-v1", dict(algorithm="impact")),
    ("gym:LunarLander-v3", {}), ("gym:Pendulum-v1", {}),
    ("gym:LunarLander-v3", dict(env_kwargs='{"continuous": true}'))])
def test_every_action_kind_takes_impact_with_the_gym_changes(level, flags):
  """One set of defaults (families/gym.py GYM_CHANGES): IMPACT on Table 2's continuous-control
  setting with PopArt, a constant rate, discount 0.99 and batches of 4 x 64 steps, for
  Discrete and Box actions alike, whether --algorithm=impact is given or not."""
  table2 = mujoco_presets.presets(mujoco_presets.TABLE2_TASK, "impact")
  config = _resolve(level, **flags)
  assert config.algorithm == settings.IMPACT, (level, flags)
  assert (config.batch_size, config.unroll_length, config.discounting) == (4, 64, 0.99)
  assert config.popart and config.learning_rate_schedule == settings.CONSTANT
  for name in ("learning_rate", "epsilon", "circular_buffer_size",
               "circular_buffer_max_uses", "gae_lambda", "kl_target", "ppo_clip"):
    assert getattr(config, name) == table2[name], (level, name)
  # Discrete actions add an entropy bonus against standardised advantages (CleanRL's discrete
  # PPO pair, DISCRETE_ACTION_CHANGES); Box actions keep Table 2's: none, advantages as they are.
  continuous = "Pendulum" in level or "continuous" in flags.get("env_kwargs", "")
  expected = ((table2["entropy_cost"], False) if continuous else (0.01, True))
  assert (config.entropy_cost, config.normalize_advantages) == expected, (level, flags)
  # Table 2's clip of 0.5 on the mean loss, on our summed loss of T x B steps, for Box
  # actions; none for discrete actions (DISCRETE_ACTION_CHANGES).
  assert config.max_grad_norm == (0.5 * 4 * 64 if continuous else 0)
  assert config.learner_config().max_grad_norm == (0.5 * 4 * 64 if continuous else None)
  assert (config.num_action_repeats, config.reward_clipping) == (1, settings.NO_CLIPPING)


def test_gym_flags_win_and_impacts_own_flags_need_no_algorithm_flag():
  assert _resolve("gym:Pendulum-v1", batch_size=8).batch_size == 8
  assert _resolve("gym:Pendulum-v1", unroll_length=256).max_grad_norm == 0.5 * 4 * 256
  assert _resolve("gym:CartPole-v1", unroll_length=256).max_grad_norm == 0  # No clip.
  assert _resolve("gym:CartPole-v1", max_grad_norm=40).max_grad_norm == 40  # Flags win.
  assert _resolve("gym:CartPole-v1",
                  circular_buffer_max_uses=4).circular_buffer_max_uses == 4


@pytest.mark.parametrize("text, ok", [("", True), ('{"continuous": true}', True),
                                      ("[1, 2]", False), ("{bad", False), ('"x"', False)])
def test_env_kwargs_must_be_a_json_object(text, ok):
  if ok:
    settings.check_value("env_kwargs", text)
    return
  with pytest.raises(ValueError, match="--env_kwargs must be"):
    settings.check_value("env_kwargs", text)
  with pytest.raises(ValueError, match="--env_kwargs must be a JSON object"):
    _resolve("gym:CartPole-v1", env_kwargs=text)


def test_env_kwargs_are_refused_for_other_families():
  with pytest.raises(ValueError, match="Drop --env_kwargs"):
    _resolve("atari/pong", env_kwargs='{"x": 1}')


@pytest.mark.parametrize("typed, suggested", [
    ("CartPole-v1", "gym:CartPole-v1"), ("gym/CartPole-v1", "gym:CartPole-v1")])
def test_a_gymnasium_id_without_the_prefix_is_pointed_to_it(typed, suggested):
  with pytest.raises(ValueError, match=f"Unknown level name.*did you mean {suggested}"):
    _resolve(typed)


def test_an_unknown_id_names_the_nearest_registered_ones():
  with pytest.raises(ValueError, match="nearest registered ids: gym:CartPole-v1"):
    _resolve("gym:CartPol-v1")


def test_a_module_that_fails_to_import_raises_its_own_error():
  with pytest.raises(RuntimeError, match="missing simulator licence file"):
    _resolve("gym:tests.gym_user_package.broken:Anything-v0")
  with pytest.raises(ModuleNotFoundError, match="No module named 'a_dependency_that_is_not_"):
    _resolve("gym:tests.gym_user_package.needs_missing_dependency:Anything-v0")


@pytest.mark.parametrize("level_name, missing", [
    ("gym:nosuchmodule:Foo-v0", "nosuchmodule"),
    ("gym:no_such_package.envs:Anything-v0", "no_such_package"),
    ("gym:tests.gym_user_package.no_such_module:Anything-v0",
     "tests.gym_user_package.no_such_module")])
def test_a_module_not_found_names_the_level_and_how_to_make_it_importable(level_name, missing):
  module = level_name[len("gym:"):].rpartition(":")[0]
  with pytest.raises(ModuleNotFoundError) as raised:
    _resolve(level_name)
  message = str(raised.value)
  assert message.startswith(f"{level_name}: cannot import {module!r}, the module that should "
                            f"register "), message
  assert f"No module named '{missing}'" in message
  assert "must be importable" in message and "PYTHONPATH" in message
  assert "installed package" in message
  with open(os.path.join(REPO, "docs", "ENVIRONMENTS.md"), encoding="utf-8") as f:
    documented = " ".join(f.read().split())
  assert "must be importable" in documented and "PYTHONPATH" in documented


def test_a_missing_minigrid_is_answered_with_the_documented_install(monkeypatch):
  import gymnasium  # pylint: disable=g-import-not-at-top
  if "MiniGrid-Empty-5x5-v0" in gymnasium.registry:
    pytest.skip("minigrid was imported by this process: its ids are registered")
  monkeypatch.setitem(sys.modules, "minigrid", None)  # `import minigrid` raises ImportError.
  with pytest.raises(ValueError) as raised:
    gym_env.check_registered("MiniGrid-Empty-5x5-v0")
  assert f"`{gym_env.MINIGRID_INSTALL}`" in str(raised.value)
  assert "`pip install minigrid`" not in str(raised.value)
  with open(os.path.join(REPO, "docs", "ENVIRONMENTS.md"), encoding="utf-8") as f:
    assert gym_env.MINIGRID_INSTALL in " ".join(f.read().split())


@pytest.mark.parametrize("env_id, field, space", [
    ("UserDictObservations-v0", "observation space", "Dict"),
    ("UserMultiBinary-v0", "action space", "MultiBinary")])
def test_unsupported_spaces_are_named_with_what_is_supported(env_id, field, space):
  with pytest.raises(gym_spaces.UnsupportedSpace, match=f"its {field} {space}.*supported: "):
    _resolve(USER + env_id)


def test_a_wrong_shape_mid_episode_names_the_environment_and_the_field():
  env = gym_env.GymEnvironment(USER + "UserTarget-v0", env_kwargs={"bad_shape_at": 3})
  env.initial()
  env.step([0.0])
  env.step([0.0])
  with pytest.raises(base.EnvironmentOutputError,
                     match=r"UserTarget-v0: .*observation of shape \(3,\).*promises \(2,\)"):
    env.step([0.0])


class _UniformPolicy:
  """Stands in for BatchedPolicy on discrete actions (tests/acting/test_actor_groups.py's),
  sampling in the real action space of a categorical policy over 2 actions."""

  action_space = action_spaces.ActionSpace(distributions.CategoricalFamily(2))

  def initial_states(self, num_envs):
    return np.zeros((num_envs, 1), np.float32)

  def __call__(self, prev_actions, env_outputs, core_states):
    num_envs = len(prev_actions)
    return (np.zeros((num_envs, 2), np.float32), np.zeros(num_envs, np.float32),
            core_states)


def test_a_step_that_raises_is_restarted_and_logged():
  assert issubclass(gym_env.EnvironmentStepFailed, actor.ENVIRONMENT_FAILURES)
  built, restarts = [], []

  def factory(attempt):
    # The first environment raises at its third step, its replacement never.
    env = gym_env.GymEnvironment(USER + "UserTarget-v0", seed=attempt,
                                 env_kwargs={"raise_at": 3 if attempt == 0 else 0})
    env = _DiscretisedTarget(env)
    built.append(env)
    return [env]
  loop = actor.EnvironmentLoop(factory, _UniformPolicy(), [np.random.default_rng(0)],
                               "gym:UserTarget-v0",
                               on_restart=lambda level, error: restarts.append(str(error)))
  with pytest.raises(actor.EnvironmentRestarted):
    loop.unroll(5)
  assert len(built) == 2 and "lost its connection" in restarts[0]
  assert len(loop.unroll(5)) == 1  # The replacement plays on.
  loop.close()


class _DiscretisedTarget(base.Environment):
  """UserTarget with two discrete actions (left, right), so the discrete stand-in policy
  drives it."""

  def __init__(self, env):
    self._env = env

  @property
  def spec(self):
    return base.EnvSpec(num_actions=2, frame_shape=self._env.spec.frame_shape)

  def initial(self):
    return self._env.initial()

  def step(self, action):
    return self._env.step([1.0 if action else -1.0])

  def close(self):
    self._env.close()


def test_cartpole_steps_and_resets_by_itself():
  env = gym_env.GymEnvironment("gym:CartPole-v1", seed=3)
  assert env.spec == base.EnvSpec(num_actions=2, frame_shape=(4,))
  first = env.initial()
  assert first.done and first.observation.frame.dtype == np.float32
  outputs = [env.step(0) for _ in range(60)]  # Always left: the pole falls within 60 steps.
  ends = [o for o in outputs if o.done]
  assert ends and ends[0].episode_step < 60 and ends[0].episode_return == ends[0].episode_step
  env.close()


def test_a_truncated_episode_can_emit_its_last_observation():
  env = gym_env.GymEnvironment(USER + "UserTarget-v0", seed=1,  # emit_truncation_step: default
                               env_kwargs={"max_episode_steps": 3})
  env.initial()
  outputs = [env.step([0.5]) for _ in range(4)]
  assert [o.done for o in outputs] == [False, False, False, True]
  assert [o.truncated for o in outputs] == [False, False, True, False]
  assert outputs[3].reward == 0.0 and outputs[3].episode_step == 3  # The reset step.
  assert outputs[2].observation.frame.shape == (2,)  # The truncated episode's last.
  plain = gym_env.GymEnvironment(USER + "UserTarget-v0", seed=1, emit_truncation_step=False,
                                 env_kwargs={"max_episode_steps": 3})
  plain.initial()
  assert [plain.step([0.5]).done for _ in range(3)] == [False, False, True]


def test_a_truncated_step_bootstraps_and_a_terminated_one_does_not():
  gamma, values, bootstrap = 0.9, np.array([0.3, 5.0, 0.2]), 0.4
  rewards = np.array([1.0, 0.0, 0.5])  # Into x_1; x_1 -> reset (ignored action); onwards.
  # Truncated: x_1 is the episode's last observation, emitted as its own step (done False,
  # truncated True); x_2 starts the next episode (done True).
  truncated_targets = truncation.vtrace_targets(
      rewards, values, bootstrap, done=[True, False, True, False],
      truncated=[False, True, False, False], gamma=gamma)
  assert truncated_targets[0] == pytest.approx(1.0 + gamma * 5.0)  # Bootstraps from V(x_1).
  assert truncated_targets[1] == pytest.approx(5.0)  # The ignored action teaches nothing.
  # Terminated: x_1 starts the next episode: no value after the reward.
  terminated_targets = truncation.vtrace_targets(
      rewards[[0, 2]], values[[0, 2]], bootstrap, done=[True, True, False],
      truncated=[False, False, False], gamma=gamma)
  assert terminated_targets[0] == pytest.approx(1.0)
  # Off-policy weights do not reach across the ignored transition either.
  off_policy = truncation.vtrace_targets(
      rewards, values, bootstrap, done=[True, False, True, False],
      truncated=[False, True, False, False], gamma=gamma, rhos=[1.0, 3.0, 0.5])
  assert off_policy[0] == pytest.approx(1.0 + gamma * 5.0)


@pytest.mark.parametrize("level_name, dtype", [("gym:CartPole-v1", np.float32),
                                               ("gym:FrozenLake-v1", np.int32)])
def test_vector_and_index_observations_cross_an_environment_process(level_name, dtype):
  from scalable_agent_tf2.environments import process  # pylint: disable=g-import-not-at-top
  env = process.EnvironmentProcess(gym_env.GymEnvironment,
                                   kwargs=dict(level_name=level_name, seed=2))
  try:
    local = gym_env.GymEnvironment(level_name, seed=2)
    first, expected = env.initial(), local.initial()
    assert first.observation.frame.dtype == dtype
    np.testing.assert_array_equal(first.observation.frame, expected.observation.frame)
    np.testing.assert_array_equal(env.step(1).observation.frame, local.step(1).observation.frame)
  finally:
    env.close()


def _network_levels():
  """(level, env_kwargs) of every observation and action kind the family takes, where the
  environment's package is installed (Box2D for CarRacing's frames, minigrid for a Dict)."""
  levels = [("gym:CartPole-v1", ""), ("gym:Pendulum-v1", ""), ("gym:FrozenLake-v1", ""),
            ("gym:LunarLander-v3", '{"continuous": true}'),
            ("gym:tests.gym_multi_discrete_envs:TestChoices-v0", "")]
  for module, level in (("Box2D", "gym:CarRacing-v3"), ("minigrid", "gym:MiniGrid-Empty-8x8-v0")):
    try:
      __import__(module)
    except ImportError:
      continue
    levels.append((level, ""))
  return levels


@pytest.mark.parametrize("level, env_kwargs", _network_levels())
def test_show_settings_names_the_network_the_run_builds(level, env_kwargs):
  """--show_settings's network line (the family's, without TensorFlow) is the start banner's
  line for the network the run builds from the environment's spec (issue 42: it printed the
  torso as unused while the run used the shallow one)."""
  from scalable_agent_tf2.run import monitoring  # pylint: disable=g-import-not-at-top
  config = _resolve(level, env_kwargs=env_kwargs)
  spec = gym_family.FAMILY.describe(level, gym_family.parse_env_kwargs(env_kwargs)).spec()
  network = config.family.network_config(config, spec)
  banner = monitoring.start_banner(config, network, "/cpu:0", False, None, 0)
  assert "  " + config.family.network_in_words(config) in banner
  if spec.frame_shape and len(spec.frame_shape) == 3:  # Frames: the --torso row is the one built.
    assert config.torso == network.torso, level


def test_the_start_says_in_one_line_which_defaults_apply_and_why():
  from scalable_agent_tf2.agent import networks  # pylint: disable=g-import-not-at-top
  from scalable_agent_tf2.run import monitoring  # pylint: disable=g-import-not-at-top
  config = _resolve("gym:CartPole-v1")
  banner = monitoring.start_banner(config, networks.vector_config(2, 4), "/cpu:0", False, None, 0)
  defaults = [line for line in banner if line.startswith("  defaults:")]
  assert len(defaults) == 1 and "PopArt" in defaults[0], banner
  assert "TROUBLESHOOTING.md" in defaults[0] and os.path.exists(os.path.join(
      os.path.dirname(__file__), "..", "..", "docs", "TROUBLESHOOTING.md"))
  pong = config_lib.resolve(config_lib.ExperimentConfig(level_name="atari/pong"))
  pong_banner = monitoring.start_banner(pong, networks.atari_config(6), "/cpu:0", False, None, 0)
  assert not [line for line in pong_banner if line.startswith("  defaults:")]


@pytest.mark.parametrize("level, choice, separate", [
    ("gym:CartPole-v1", "auto", True), ("gym:CartPole-v1", "shared", False),
    ("gym:CartPole-v1", "separate", True), ("gym:FrozenLake-v1", "shared", False),
    ("gym:Pendulum-v1", "auto", True)])
def test_value_torso_chooses_the_baselines_torso_for_discrete_actions(level, choice,
                                                                       separate):
  """--value_torso (auto: separate on feed-forward discrete networks; shared: Figure 3's
  arrangement, which runs from before 2026-11-28 were trained with); the network, the
  --show_settings line and the start banner's agree."""
  from scalable_agent_tf2.run import monitoring  # pylint: disable=g-import-not-at-top
  config = _resolve(level, value_torso=choice)
  spec = gym_family.FAMILY.describe(level).spec()
  network = config.family.network_config(config, spec)
  assert network.separate_value_torso == separate
  words = config.family.network_in_words(config)
  assert ("a value torso of its own" in words) == separate
  assert "  " + words in monitoring.start_banner(config, network, "/cpu:0", False, None, 0)


@pytest.mark.parametrize("level, choice, message", [
    ("gym:Pendulum-v1", "shared", "has Box actions"),
    ("atari/pong", "separate", "fixed by its paper")])
def test_value_torso_is_refused_where_no_network_takes_it(level, choice, message):
  with pytest.raises(ValueError, match=message):
    _resolve(level, value_torso=choice)


@pytest.mark.parametrize("flags, state_dependent", [
    ({}, False), (dict(log_std="free"), False), (dict(log_std="state"), True),
    (dict(algorithm="impala"), False), (dict(algorithm="impala", log_std="state"), True),
    (dict(env_kwargs='{"continuous": true}', log_std="state"), True)])
def test_log_std_chooses_the_gaussians_head_for_box_actions(flags, state_dependent):
  """--log_std (both algorithms' preset: free; state: from the policy's layer); the network, the
  --show_settings line and the start banner's agree."""
  from scalable_agent_tf2.run import monitoring  # pylint: disable=g-import-not-at-top
  level = "gym:LunarLander-v3" if "env_kwargs" in flags else "gym:Pendulum-v1"
  config = _resolve(level, **flags)
  spec = gym_family.FAMILY.describe(level, gym_family.parse_env_kwargs(
      config.env_kwargs)).spec()
  network = config.family.network_config(config, spec)
  assert network.state_dependent_log_std == state_dependent
  words = config.family.network_in_words(config)
  assert ("their log std from the state" in words) == state_dependent, words
  assert ("one free log std" in words) != state_dependent, words
  assert "  " + words in monitoring.start_banner(config, network, "/cpu:0", False, None, 0)


@pytest.mark.parametrize("level, message", [
    ("gym:CartPole-v1", "has discrete actions"), ("mujoco/hopper", "fixed by its paper")])
def test_log_std_is_refused_where_no_gaussian_head_takes_it(level, message):
  with pytest.raises(ValueError, match=message):
    _resolve(level, log_std="free")


@pytest.mark.parametrize("flags, initial", [
    ({}, 0.0), (dict(initial_log_std=-2.0), -2.0),
    (dict(algorithm="impala", initial_log_std=-1.0), -1.0),
    (dict(env_kwargs='{"continuous": true}', initial_log_std=0.5), 0.5)])
def test_initial_log_std_is_where_the_free_log_std_starts(flags, initial):
  level = "gym:LunarLander-v3" if "env_kwargs" in flags else "gym:Pendulum-v1"
  config = _resolve(level, **flags)
  assert config.initial_log_std == initial
  spec = gym_family.FAMILY.describe(level, gym_family.parse_env_kwargs(
      config.env_kwargs)).spec()
  network = config.family.network_config(config, spec)
  assert not network.state_dependent_log_std and network.initial_log_std == initial
  assert _resolve(level, log_std="state", env_kwargs=config.env_kwargs).initial_log_std is None


@pytest.mark.parametrize("level, flags, message", [
    ("gym:Pendulum-v1", dict(initial_log_std=-2.0, log_std="state"),
     "Add --log_std=free or drop --initial_log_std"),
    ("gym:CartPole-v1", dict(initial_log_std=-2.0), "has discrete actions. Drop --initial_log_std"),
    ("mujoco/hopper", dict(initial_log_std=-2.0), "fixed by its paper"),
    ("gym:Pendulum-v1", dict(initial_log_std=float("inf")), "must be a finite number")])
def test_initial_log_std_is_refused_where_no_free_log_std_takes_it(level, flags, message):
  with pytest.raises(ValueError, match=message):
    _resolve(level, **flags)


@pytest.mark.parametrize("level_name", [
    "gym:CarRacing-v3",  # gymnasium's Box2D module imports pygame when gymnasium.make loads it.
    "gym:tests.gym_user_package.pygame_drawn:UserPygameDrawn-v0",  # As MiniGrid's import does.
])
def test_an_environment_that_imports_pygame_starts_without_its_pkg_resources_notice(
    level_name):
  import subprocess  # pylint: disable=g-import-not-at-top
  result = subprocess.run([sys.executable, "experiment.py", f"--level_name={level_name}",
                           "--show_settings"], capture_output=True, text=True, cwd=REPO,
                          timeout=120)
  assert result.returncode == 0, result.stdout + result.stderr
  assert "pkg_resources" not in result.stderr, result.stderr
  assert result.stderr == "", result.stderr  # Nothing else either.
