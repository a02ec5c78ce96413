"""MuJoCo tasks through gymnasium (environments/mujoco.py); their observation filter is
test_normalization.py's."""
import gymnasium
import numpy as np
import pytest

from scalable_agent_tf2 import environments
from scalable_agent_tf2.configuration import config as config_lib
from scalable_agent_tf2.environments import base
from scalable_agent_tf2.environments import mujoco
from scalable_agent_tf2.environments import suites

# Level -> (observation size, action size, action bound) of gymnasium's -v5 tasks.
EXPECTED = {
    "mujoco/hopper": (11, 3, 1.0),
    "mujoco/half_cheetah": (17, 6, 1.0),
    "mujoco/humanoid": (348, 17, 0.4),
}


def random_actions(spec, count, seed=0, scale=1.0):
  rng = np.random.default_rng(seed)
  return (scale * rng.normal(size=(count, spec.action_size))).astype(np.float32)


def assert_same_output(a, b):
  assert (a.reward, a.done, a.episode_return, a.episode_step) == (
      b.reward, b.done, b.episode_return, b.episode_step)
  np.testing.assert_array_equal(a.observation.frame, b.observation.frame)


@pytest.mark.parametrize("level_name", suites.MUJOCO_LEVELS)
def test_levels_in_process_and_in_an_environment_process(level_name):
  observation_size, action_size, bound = EXPECTED[level_name]
  local = environments.create_environment(level_name, seed=4, in_subprocess=False)
  remote = environments.create_environment(level_name, seed=4)
  try:
    for env in (local, remote):
      spec = env.spec
      assert isinstance(spec, base.ContinuousEnvSpec)
      assert (spec.action_size, spec.frame_shape) == (action_size, (observation_size,))
      np.testing.assert_array_equal(spec.action_low, np.full(action_size, -bound, np.float32))
      np.testing.assert_array_equal(spec.action_high, np.full(action_size, bound, np.float32))
    first = local.initial()
    assert (first.reward, first.done, first.episode_return, first.episode_step) == (0, True, 0, 0)
    assert first.observation.frame.dtype == np.float32
    assert first.observation.frame.shape == (observation_size,)
    assert_same_output(first, remote.initial())
    for action in random_actions(local.spec, 20, scale=2.0 * bound):  # Out of bounds too.
      expected = local.step(action)
      assert_same_output(expected, remote.step(action))
    with pytest.raises(ValueError, match="shape"):  # Checked before the round trip.
      remote.step(np.zeros(action_size + 1, np.float32))
  finally:
    local.close()
    remote.close()


def test_actions_are_clipped_only_when_sent_to_gymnasium():
  unclipped_env = mujoco.MujocoEnvironment("mujoco/half_cheetah", seed=7)
  clipped_env = mujoco.MujocoEnvironment("mujoco/half_cheetah", seed=7)
  raw = gymnasium.make("HalfCheetah-v5")
  raw.reset(seed=7)
  unclipped_env.initial()
  clipped_env.initial()
  action = np.array([3.0, -2.5, 0.5, -0.25, 1.5, -7.0], np.float32)
  kept = action.copy()
  clipped = np.clip(action, -1.0, 1.0)
  got = unclipped_env.step(action)
  np.testing.assert_array_equal(action, kept)  # The caller's (recorded) action is unchanged.
  assert_same_output(got, clipped_env.step(clipped))
  # Sent unclipped, gymnasium would charge the control cost of the out-of-bounds action.
  _, raw_reward, _, _, _ = raw.step(action)
  assert raw_reward < got.reward - 1.0


def test_episode_end_resets_and_reports_the_finished_episode():
  # A reference gymnasium Hopper with the same seed: resets continue its generator.
  env = mujoco.MujocoEnvironment("mujoco/hopper", seed=3)
  reference = gymnasium.make("Hopper-v5")
  expected_first, _ = reference.reset(seed=3)
  np.testing.assert_array_equal(env.initial().observation.frame,
                                expected_first.astype(np.float32))
  episode_return, num_episodes = 0.0, 0
  for step, action in enumerate(random_actions(env.spec, 400, seed=1, scale=1.0)):
    output = env.step(action)
    observation, reward, terminated, truncated, _ = reference.step(np.clip(action, -1, 1))
    episode_return += reward
    assert output.reward == pytest.approx(reward)
    if terminated or truncated:
      observation, _ = reference.reset()
      num_episodes += 1
      assert output.done
      assert output.episode_return == pytest.approx(episode_return)
      episode_return = 0.0
    else:
      assert not output.done and output.episode_return == pytest.approx(episode_return)
    np.testing.assert_array_equal(output.observation.frame, observation.astype(np.float32),
                                  err_msg=f"step {step}")
  assert num_episodes >= 2  # Random actions topple the hopper within tens of steps.


def test_a_group_in_this_process_steps_as_its_environments_alone():
  from scalable_agent_tf2.acting import actor  # pylint: disable=g-import-not-at-top
  from scalable_agent_tf2.run import assembly  # pylint: disable=g-import-not-at-top
  config = config_lib.config_from_argv(["--level_name=mujoco/hopper", "--envs_per_actor=3"])
  constructor = assembly.default_environment_constructor(config)
  seeds = [3, 4, 5]
  envs = assembly.group_factory(config, constructor, "mujoco/hopper", lambda attempt: seeds)(0)
  assert [type(env) for env in envs] == [mujoco.MujocoEnvironment] * 3  # No processes.
  observed = []
  group = actor.as_group(envs, "mujoco/hopper",
                         observe=lambda out: observed.append(out.observation.frame) or out)
  alone = [mujoco.MujocoEnvironment("mujoco/hopper", seed=seed) for seed in seeds]
  actions = random_actions(group.spec, 3 * 150, seed=2).reshape(150, 3, -1)
  try:
    outputs = [group.initial()] + [group.step(step_actions) for step_actions in actions]
    assert group.num_envs == 3 and group.level_names == ["mujoco/hopper"] * 3
    assert len(observed) == len(outputs) and observed[0].shape == (3, 11)
    finished = 0
    for slot, env in enumerate(alone):
      expected = [env.initial()] + [env.step(action) for action in actions[:, slot]]
      for t, (mine, theirs) in enumerate(zip(outputs, expected)):
        assert (mine.reward[slot], mine.done[slot], mine.episode_step[slot]) == (
            np.float32(theirs.reward), theirs.done, theirs.episode_step), (slot, t)
        np.testing.assert_array_equal(mine.observation.frame[slot], theirs.observation.frame)
      finished += sum(1 for o in expected[1:] if o.done)
    assert finished >= 3  # Random actions topple the hopper: episodes end within the test.
  finally:
    group.close()
    actor.close_all(alone)


def test_group_reports_finished_games_by_slot():
  from scalable_agent_tf2.acting import actor  # pylint: disable=g-import-not-at-top
  group = actor.as_group([mujoco.MujocoEnvironment("mujoco/hopper", seed=s) for s in (1, 2)],
                         "mujoco/hopper")
  reference = mujoco.MujocoEnvironment("mujoco/hopper", seed=2)
  try:
    group.initial()
    reference.initial()
    actions = random_actions(group.spec, 2 * 300, seed=4).reshape(300, 2, -1)
    reported, ended = [], []
    for step_actions in actions:
      group.step(step_actions)
      reported.extend(g for g in group.finished_games() if g[0] == 1)
      output = reference.step(step_actions[1])
      if output.done:
        ended.append((1, output.episode_return, output.episode_step))
    # An episode is reported one step after its end (actor.EpisodeTracker).
    assert reported and [r[1:] for r in reported] == pytest.approx(
        [e[1:] for e in ended[:len(reported)]])
    assert len(ended) - len(reported) in (0, 1)
  finally:
    group.close()
    reference.close()


def test_time_limit_ends_an_episode_like_a_termination():
  env = mujoco.MujocoEnvironment("mujoco/half_cheetah", seed=0)  # Never terminates.
  env.initial()
  zeros = np.zeros(6, np.float32)
  outputs = [env.step(zeros) for _ in range(1001)]
  assert not any(output.done for output in outputs[:999])
  assert outputs[999].done and outputs[999].episode_step == 1000
  assert outputs[1000].episode_step == 1  # Statistics restarted.


def test_seeded_repeatability():
  def run(seed):
    env = mujoco.MujocoEnvironment("mujoco/hopper", seed=seed)
    frames = [env.initial().observation.frame]
    frames += [env.step(a).observation.frame for a in random_actions(env.spec, 60)]
    return np.stack(frames)
  np.testing.assert_array_equal(run(5), run(5))
  assert not np.array_equal(run(5), run(6))


def test_bad_level_seed_and_action_errors():
  with pytest.raises(ValueError, match="Unknown level name"):
    environments.environment_constructor("mujoco/walker")
  with pytest.raises(ValueError, match="not a MuJoCo level"):
    mujoco.gymnasium_id("atari/pong")
  with pytest.raises(ValueError, match="seed"):
    mujoco.MujocoEnvironment("mujoco/hopper", seed=-1)
  env = mujoco.MujocoEnvironment("mujoco/hopper")
  env.initial()
  with pytest.raises(ValueError, match="vector of 3 numbers"):
    env.step(1)
  with pytest.raises(ValueError, match="NaN"):
    env.step(np.array([0.0, np.nan, 0.0]))
  env.close()
  with pytest.raises(RuntimeError, match="closed"):
    env.step(np.zeros(3))


def test_presets_are_table_2():
  from scalable_agent_tf2.environments.families import mujoco_presets  # pylint: disable=g-import-not-at-top
  impala = mujoco_presets.presets("mujoco/hopper", "impala")
  assert (impala["learning_rate"], impala["baseline_cost"], impala["max_grad_norm"],
          impala["discounting"], impala["entropy_cost"]) == (1.5e-5, 0.5, 0.5, 0.995, 0.0)
  assert impala["batch_size"] * impala["unroll_length"] == 32768  # "Train Batch Size".
  assert "ppo_clip" not in impala
  impact = mujoco_presets.presets("mujoco/humanoid", "impact")
  assert (impact["learning_rate"], impact["baseline_cost"], impact["ppo_clip"],
          impact["circular_buffer_size"], impact["circular_buffer_max_uses"],
          impact["kl_cost"], impact["target_update_period"]) == (3e-4, 1.0, 0.4, 16, 20, 1.0, 320)
  cheetah = mujoco_presets.presets("mujoco/half_cheetah", "impact")  # Footnotes 1 and 2.
  assert (cheetah["circular_buffer_max_uses"], cheetah["baseline_cost"],
          cheetah["target_update_period"]) == (32, 0.5, 512)
  with pytest.raises(ValueError, match="no MuJoCo preset"):
    mujoco_presets.presets("atari/pong")
  with pytest.raises(ValueError, match="Unknown algorithm"):
    mujoco_presets.presets("mujoco/hopper", "ppo")
