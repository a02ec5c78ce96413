"""The acting loop over environment groups: a vector group gives the trajectories one loop per
environment gives, groups in the batched policy, restarts with backoff, seeded evaluation."""
import os
import threading
import types

import numpy as np
import pytest
import tensorflow as tf

from scalable_agent_tf2.acting import action_spaces
from scalable_agent_tf2.acting import actor
from scalable_agent_tf2.acting import policies
from scalable_agent_tf2.agent import distributions
from scalable_agent_tf2.agent import language
from scalable_agent_tf2.agent import networks
from scalable_agent_tf2.configuration import config as config_lib
from scalable_agent_tf2.environments import EnvironmentProcessDied
from scalable_agent_tf2.environments import LevelCannotRun
from scalable_agent_tf2.environments import LevelKeepsFailing
from scalable_agent_tf2.environments import families
from scalable_agent_tf2.environments.atari import AtariEnvironment
from scalable_agent_tf2.environments.atari_vector import AtariVectorGroup
from scalable_agent_tf2.environments.families import atari as atari_family
from scalable_agent_tf2.environments.families import base as family_base
from scalable_agent_tf2.run import evaluation_episodes

SEEDS = (3, 4, 5)


class _UniformPolicy:
  """Stands in for BatchedPolicy: uniform logits (so actions are the slots' own Gumbel draws),
  a baseline that reads the frames, and a state that counts calls."""

  def __init__(self, num_actions):
    self._num_actions = num_actions
    self.action_space = action_spaces.ActionSpace(distributions.CategoricalFamily(num_actions))
    self.group_sizes = []

  def initial_states(self, num_envs):
    return np.zeros((num_envs, 2), np.float32)

  def __call__(self, prev_actions, env_outputs, core_states):
    num_envs = len(prev_actions)
    self.group_sizes.append(num_envs)
    baseline = env_outputs.observation.frame.mean(axis=(1, 2, 3)).astype(np.float32)
    return np.zeros((num_envs, self._num_actions), np.float32), baseline, core_states + 1


def _unrolls(loop, count, unroll_length=20):
  return [loop.unroll(unroll_length, policy_version=k) for k in range(count)]


def test_a_vector_group_gives_the_trajectories_of_one_loop_per_environment():
  # The old path: one AtariEnvironment per loop (a group of one); the new one: a vector group.
  # No no-ops, so both start every game the same way (atari_vector.py names the difference
  # after no-ops; tests/environments/test_atari_vector.py checks the rest frame by frame).
  rngs = lambda: [np.random.default_rng([0, slot]) for slot in range(len(SEEDS))]
  group_policy, group_episodes = _UniformPolicy(4), []
  group_loop = actor.EnvironmentLoop(
      lambda attempt: AtariVectorGroup("breakout", SEEDS, max_noops=0), group_policy, rngs(),
      "atari/breakout", on_episode=lambda *e: group_episodes.append(e))
  group_unrolls = _unrolls(group_loop, 15)
  group_loop.close()
  assert set(group_policy.group_sizes) == {3}  # One policy call per step for the group.
  single_episodes = []
  for slot, (seed, rng) in enumerate(zip(SEEDS, rngs())):
    loop = actor.EnvironmentLoop(
        lambda attempt, seed=seed: AtariEnvironment("breakout", seed=seed, max_noops=0),
        _UniformPolicy(4), [rng], "atari/breakout",
        on_episode=lambda *e: single_episodes.append(e))
    for k, (trajectory,) in enumerate(_unrolls(loop, 15)):
      expected = group_unrolls[k][slot]
      assert (expected.level_name, expected.policy_version) == ("atari/breakout", k)
      for got, want in zip(tf.nest.flatten(trajectory), tf.nest.flatten(expected)):
        np.testing.assert_array_equal(np.asarray(got), np.asarray(want),
                                      err_msg=f"slot {slot}, unroll {k}")
        assert np.asarray(got).dtype == np.asarray(want).dtype
    loop.step()  # The single-environment loop reports a game one step after its end.
    loop.close()
  # Every game that ended was reported once, with the same return and length.
  assert len(group_episodes) >= 3 and sorted(group_episodes) == sorted(single_episodes)


def test_trajectories_have_the_learner_layout():
  loop = actor.EnvironmentLoop(lambda attempt: AtariVectorGroup("pong", SEEDS),
                               _UniformPolicy(6), [np.random.default_rng(s) for s in SEEDS],
                               "atari/pong")
  first, second = _unrolls(loop, 2, unroll_length=5)
  loop.close()
  for old, new in zip(first, second):
    assert new.env_outputs.observation.frame.shape == (6, 84, 84, 4)
    assert new.env_outputs.observation.frame.flags["C_CONTIGUOUS"]
    assert new.env_outputs.observation.instruction.shape == (6, language.MAX_INSTRUCTION_WORDS)
    assert new.agent_outputs.policy_params.shape == (6, 6)
    assert new.agent_outputs.action.dtype == np.int32
    # Step 0 repeats the previous unroll's last step; the state is the one before step 0.
    np.testing.assert_array_equal(new.env_outputs.observation.frame[0],
                                  old.env_outputs.observation.frame[-1])
    np.testing.assert_array_equal(old.agent_state, [0, 0])
    np.testing.assert_array_equal(new.agent_state, [5, 5])


def test_the_batched_policy_serves_groups_of_several_threads():
  config = networks.NetworkConfig(num_actions=4, frame_shape=(20, 20, 2), torso="shallow",
                                  use_lstm=True, use_instruction=False)
  agent = networks.Agent(config, seed=5)
  batched, direct = policies.BatchedPolicy(agent), policies.PerActorPolicy(agent)
  rng = np.random.default_rng(0)

  def outputs_of(num_envs):
    return actor.EnvOutput(
        reward=rng.normal(size=num_envs).astype(np.float32), done=np.zeros(num_envs, bool),
        observation=actor.Observation(
            frame=rng.integers(0, 255, (num_envs, 20, 20, 2), dtype=np.uint8),
            instruction=np.zeros((num_envs, language.MAX_INSTRUCTION_WORDS), np.int32)),
        episode_return=np.zeros(num_envs, np.float32),
        episode_step=np.zeros(num_envs, np.int32), truncated=np.zeros(num_envs, bool))
  calls = [(np.arange(n, dtype=np.int32) % 4, outputs_of(n), batched.initial_states(n))
           for n in (1, 2, 5, 3)]
  results = [None] * len(calls)

  def call(k):
    for _ in range(5):  # Several rounds, so that calls meet in the batcher.
      results[k] = batched(*calls[k])
  try:
    threads = [threading.Thread(target=call, args=(k,)) for k in range(len(calls))]
    for thread in threads:
      thread.start()
    for thread in threads:
      thread.join()
    for k, args in enumerate(calls):
      for got, want in zip(tf.nest.flatten(results[k]), tf.nest.flatten(direct(*args))):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
        assert np.shape(got)[0] == len(args[0])
  finally:
    batched.close()
    direct.close()


class _Sleeps(list):
  def __call__(self, seconds):
    self.append(seconds)


def _dying_factory(failures, died_message="toy/lit_side died: exit code 1; last lines: boom"):
  """A factory whose first `failures` calls fail as a dying environment process would."""
  calls = []

  def factory(attempt):
    calls.append(attempt)
    if len(calls) <= failures:
      raise EnvironmentProcessDied(died_message)
    return AtariVectorGroup("pong", [attempt])
  return factory, calls


def test_an_environment_that_cannot_start_is_retried_with_backoff_then_reported():
  sleeps, restarts = _Sleeps(), []
  factory, calls = _dying_factory(failures=100)
  with pytest.raises(LevelCannotRun) as raised:
    actor.EnvironmentLoop(factory, _UniformPolicy(6), [np.random.default_rng(0)], "toy/lit_side",
                          on_restart=lambda *r: restarts.append(r),
                          restart_policy=actor.RestartPolicy(sleep=sleeps))
  assert sleeps == [1.0, 2.0, 4.0] and calls == [0, 1, 2, 3] and len(restarts) == 3
  assert raised.value.level_name == "toy/lit_side"
  assert raised.value.reason == "toy/lit_side died: exit code 1; last lines: boom"


def test_an_environment_that_starts_after_failures_plays_on():
  sleeps = _Sleeps()
  factory, calls = _dying_factory(failures=2)
  loop = actor.EnvironmentLoop(factory, _UniformPolicy(6), [np.random.default_rng(0)],
                               "atari/pong", restart_policy=actor.RestartPolicy(sleep=sleeps))
  (trajectory,) = loop.unroll(3)
  loop.close()
  assert sleeps == [1.0, 2.0] and calls == [0, 1, 2]
  assert trajectory.env_outputs.reward.shape == (4,)


class _CrashingGroup(AtariVectorGroup):
  """Dies at its `crash_at`-th step, as a crashing environment process would."""

  crash_at = 2

  def step(self, actions):
    self.steps = getattr(self, "steps", 0) + 1
    if self.steps == self.crash_at:
      raise EnvironmentProcessDied("atari/pong died while stepping")
    return super().step(actions)


class _CrashingLate(_CrashingGroup):
  crash_at = 50


def test_crashes_while_stepping_restart_until_they_are_more_than_the_policys_share_of_steps():
  policy = actor.RestartPolicy(max_failure_rate=0.05, min_failures=3, window_steps=100,
                               sleep=_Sleeps())
  restarts = []
  loop = actor.EnvironmentLoop(
      lambda attempt: (_CrashingLate if attempt < 3 else _CrashingGroup)("pong", [attempt]),
      _UniformPolicy(6), [np.random.default_rng(0)], "atari/pong",
      on_restart=lambda *r: restarts.append(r), restart_policy=policy)
  for _ in range(3):  # A crash every 50 steps (2%): restarted (and counted) for ever...
    with pytest.raises(actor.EnvironmentRestarted):
      _unrolls(loop, 3)
  assert loop.num_crashes == 3 and len(restarts) == 3
  for _ in range(3):  # Then one every 2 steps: at steps 152, 154, 156 of the loop, the last
    with pytest.raises(actor.EnvironmentRestarted):  # 100 steps hold 3, 4, 5 failures...
      loop.unroll(5)
  with pytest.raises(LevelKeepsFailing, match=r"failed 6 times in its last 100 steps "
                                              r"\(replaced each time; a level stops when its "
                                              r"failures are more than 5% of its last 100 "
                                              r"steps, 3 at least\); the last failure: "
                                              "atari/pong died while stepping"):
    loop.unroll(5)  # ...and at step 158, 6: more than 5% of them; the level is reported.
  assert loop.num_crashes == 7
  loop.close()


def test_an_actors_error_that_ends_with_a_full_stop_gets_one_not_two():
  thread = types.SimpleNamespace(name="actor-0", error=ValueError("Bad action."))
  assert str(actor.ActorFailed.of(thread, " Training stopped.")) == (
      "actor-0 stopped with ValueError: Bad action. Training stopped.")


def test_seeded_evaluation_on_atari_groups_repeats():
  config = config_lib.resolve(config_lib.ExperimentConfig(
      level_name="atari/breakout", num_actors=1, envs_per_actor=2, seed=7))
  assert config.uses_atari_groups
  agent = networks.Agent(config.network_config(4), seed=1)

  def play():
    policy = policies.BatchedPolicy(agent)
    try:
      return evaluation_episodes.play_levels(policy, config.levels, 2, config.num_actors,
                                             config.seed, None, print_fn=lambda *a: None,
                                             config=config)
    finally:
      policy.close()
  first, second = play(), play()
  assert len(first["atari/breakout"]) == 2
  assert first == second


def test_envs_per_actor_is_for_groups_only():
  atari = config_lib.resolve(config_lib.ExperimentConfig(level_name="atari/pong"))
  assert atari.uses_atari_groups and atari.uses_environment_groups
  assert atari.num_actors * atari.envs_per_actor >= atari_family.ATARI_ENVIRONMENTS
  toy = config_lib.resolve(config_lib.ExperimentConfig(level_name="toy/lit_side"))
  assert not toy.uses_environment_groups and toy.envs_per_actor == 1
  sticky = config_lib.resolve(config_lib.ExperimentConfig(level_name="atari/pong",
                                                          sticky_actions=True))
  assert sticky.envs_per_actor == 1
  with pytest.raises(ValueError, match="only MuJoCo tasks and Atari games"):
    config_lib.resolve(config_lib.ExperimentConfig(level_name="toy/lit_side",
                                                   envs_per_actor=4))
  # MuJoCo: the IMPACT paper's 16 workers (section 4.3) as groups, one thread per core.
  hopper = config_lib.resolve(config_lib.ExperimentConfig(level_name="mujoco/hopper"))
  assert hopper.uses_environment_groups and not hopper.uses_atari_groups
  assert (hopper.num_actors, hopper.envs_per_actor) == tuple(
      family_base.actor_layout(16, os.cpu_count()).values())
  assert atari_family.atari_actor_layout(2) == dict(num_actors=2, envs_per_actor=24)
  assert atari_family.atari_actor_layout(64) == dict(num_actors=48, envs_per_actor=1)
  assert family_base.actor_layout(16, 2) == dict(num_actors=2, envs_per_actor=8)
  assert family_base.actor_layout(16, 3) == dict(num_actors=3, envs_per_actor=6)
  assert family_base.actor_layout(16, 1) == dict(num_actors=2, envs_per_actor=8)


def test_atari_shallow_on_a_small_machine_runs_one_tensorflow_thread_per_op():
  atari = families.family_of("atari/pong")
  assert atari.intra_op_threads("shallow", 2) == 1
  assert atari.intra_op_threads("shallow", 1) == 1
  assert atari.intra_op_threads("shallow", 4) == 0  # Not measured.
  assert atari.intra_op_threads("deep", 2) == 0  # Measured slower.
  assert families.family_of(families.level_names("atari57")[0]).intra_op_threads("deep", 2) == 0
  for level in ("toy/lit_side", "mujoco/hopper", "seekavoid_arena_01"):
    assert families.family_of(level).intra_op_threads("shallow", 2) == 0
  # config.resolve applies it with the run's torso and this machine's cores; a flag, 0
  # included, wins over it.
  def threads(*flags):
    return config_lib.config_from_argv(list(flags)).intra_op_threads
  cores = os.cpu_count()
  assert threads("--level_name=atari/pong") == atari.intra_op_threads("shallow", cores)
  assert threads("--level_name=atari/pong", "--torso=deep") == 0
  assert threads("--level_name=atari57") == 0  # Appendix G: the deep network.
  assert threads("--level_name=atari/pong", "--intra_op_threads=0") == 0
  assert threads("--level_name=toy/lit_side", "--intra_op_threads=3") == 3
  assert threads("--level_name=mujoco/hopper") == 0


@pytest.mark.parametrize("use_lstm", [False, True], ids=["feed_forward", "lstm"])
def test_the_real_acting_path_is_on_policy_for_the_learner(use_lstm):
  """Trajectories from the real acting path (AtariVectorGroup, EnvironmentLoop, the policy's
  acting step) under fixed parameters are on-policy for the learner's unroll: log(pi / mu) = 0
  at every step, so each action is scored at the observation (and core state) it was taken at.
  Issue 43 asked whether Boxing's flat curve was a misalignment; this is the check, on the
  pipeline itself rather than a hand-written collector (tests/learning/test_learner.py's)."""
  from scalable_agent_tf2.learning import losses  # pylint: disable=g-import-not-at-top
  group = AtariVectorGroup("boxing", SEEDS)
  num_actions = group.spec.num_actions
  group.close()
  agent = networks.Agent(networks.NetworkConfig(
      num_actions=num_actions, frame_shape=(84, 84, 4), torso="shallow", use_lstm=use_lstm,
      use_instruction=False), seed=3)
  for variable in agent.trainable_variables:  # A policy far from uniform: it differs by state.
    if "policy" in variable.name:
      variable.assign(variable * 30.0)
  loop = actor.EnvironmentLoop(lambda attempt: AtariVectorGroup("boxing", SEEDS),
                               policies.PerActorPolicy(agent),
                               [np.random.default_rng(s) for s in SEEDS], "atari/boxing")
  trajectories = _unrolls(loop, 3, unroll_length=10)[-1]  # Past a first unroll: LSTM states.
  loop.close()
  stack = lambda *xs: np.stack(xs, axis=1)  # [T+1, B, ...], the learner's layout.
  env_outputs = tf.nest.map_structure(stack, *[t.env_outputs for t in trajectories])
  agent_outputs = tf.nest.map_structure(stack, *[t.agent_outputs for t in trajectories])
  state = tf.nest.map_structure(lambda *xs: np.stack(xs), *[t.agent_state for t in trajectories])
  learner_outputs, _ = agent.unroll(agent_outputs.action, env_outputs, state)
  _, returns = losses.impala_loss_terms(agent.config.action_distribution, learner_outputs,
                                            env_outputs, agent_outputs,
                                            config_lib.LearnerConfig())
  np.testing.assert_allclose(returns.log_rhos.numpy(), 0.0, atol=1e-4)
  assert len(set(agent_outputs.action.ravel().tolist())) > 1  # Not one action throughout.
