"""LASER's episode replay (Schmitt et al., 2019, sections 5.1, 5.3, 5.4, Appendix A.2) against
numpy ground truths: whole episodes, FIFO removal, replay from the episode start with the
core state recomputed, mixing with online data, one replay shared by two agents."""
import collections

import numpy as np
import pytest

from scalable_agent_tf2.structures import EnvOutput
from scalable_agent_tf2.structures import Trajectory

T = 4  # Unroll length.


def _toy_core(decay):
  """A numpy stand-in for an LSTM: s <- decay * s + reward, reset to 0 where an episode
  starts. advance(trajectory, s) runs it over steps 0..T-1 (what the actor reads between
  two unrolls' starts), the role of training's recomputation with the current network."""
  def advance(trajectory, state):
    state = float(state[0])
    for t in range(T):
      if trajectory.env_outputs.done[t]:
        state = 0.0
      state = decay * state + float(trajectory.env_outputs.reward[t])
    return (np.float32(state),)
  return advance


def _actor_stream(episode_lengths, decay=0.5, offset=0.0):
  """An actor's unrolls over episodes of the given lengths (steps), with the actor's core
  states from _toy_core(decay). Rewards number the steps (offset + 1, 2, ...): each unroll
  is recognisable. Returns (list of Trajectory, list of episode index per step)."""
  done, episode_of = [True], [0]
  for index, length in enumerate(episode_lengths):
    for step in range(length):
      done.append(step == length - 1 and index + 1 < len(episode_lengths))
      episode_of.append(index + 1 if done[-1] else index)
  # done[t]: step t starts an episode (the step after an episode's last one).
  done = np.array(done)
  rewards = offset + np.arange(len(done), dtype=np.float32)
  advance = _toy_core(decay)
  unrolls, state = [], (np.float32(0.0),)
  for start in range(0, len(done) - T, T):
    window = slice(start, start + T + 1)
    env = EnvOutput(reward=rewards[window], done=done[window], observation=None,
                    episode_return=None, episode_step=None, truncated=None)
    unroll = Trajectory("toy", 0, state, env, None)
    unrolls.append(unroll)
    state = advance(unroll, state)
  return unrolls, episode_of


def test_episode_starts_ignores_step_zero():
  assert laser.episode_starts([True, False, False, True, False]) == [3]
  assert laser.episode_starts([False, True, False, False, True]) == [1, 4]
  assert laser.episode_starts([True, False, False]) == []


def test_whole_episodes_are_stored_with_every_unroll_that_covers_them():
  # Episodes of 6, 3, 9 and 5 steps; unrolls of 4 steps: step ranges 1-4, 5-8, 9-12, ...
  unrolls, _ = _actor_stream([6, 3, 9, 5, 2])
  replay = laser.EpisodeReplay(capacity=100)
  for unroll in unrolls:
    replay.add(unroll, agent="a", actor=0)
  held = [[int(u.env_outputs.reward[0]) for u in episode.unrolls]
          for episode in replay._episodes]
  # Ground truth: episode 1 is steps 1-6 (ends in unroll 1: its start 7 is in unroll 1),
  # episode 2 steps 7-9 (unrolls 1, 2), episode 3 steps 10-18 (unrolls 2-4), episode 4
  # steps 19-23 (unrolls 4, 5). Unroll k starts at step 4k.
  assert held == [[0, 4], [4, 8], [8, 12, 16], [16, 20]]
  assert replay.num_unrolls == 9 and len(replay) == 4
  assert replay.episodes_by_agent() == {"a": 4}


def test_a_stream_joined_mid_episode_is_dropped_until_its_next_episode_starts():
  # A restarted replay service sees a running actor's stream from unroll 1 (steps 4-8): it
  # holds the end of episode 1, whose start (step 1) went to the service's predecessor.
  unrolls, _ = _actor_stream([6, 3, 9, 5, 2])
  replay = laser.EpisodeReplay(capacity=100)
  replay.join_mid_episode("a", 0)
  for unroll in unrolls[1:]:
    replay.add(unroll, agent="a", actor=0)
  held = [[int(u.env_outputs.reward[0]) for u in episode.unrolls]
          for episode in replay._episodes]
  # Episode 2 (steps 7-9) opens inside unroll 1; nothing of episode 1 is stored.
  assert held == [[4, 8], [8, 12, 16], [16, 20]]
  assert replay.num_dropped_unrolls == 1


def test_episodes_leave_first_in_first_out_and_whole():
  unrolls, _ = _actor_stream([6, 3, 9, 5, 2])
  replay = laser.EpisodeReplay(capacity=5)
  for unroll in unrolls:
    replay.add(unroll, agent="a", actor=0)
    assert replay.num_unrolls <= 5
  # The last two episodes (3 + 2 unrolls) fit; the older ones left whole, oldest first.
  assert [len(e.unrolls) for e in replay._episodes] == [3, 2]
  assert replay.added_by_agent() == {"a": 4}
  # An episode longer than the capacity is dropped, and the stream recovers afterwards.
  small = laser.EpisodeReplay(capacity=2)
  for unroll in unrolls:
    small.add(unroll, agent="a", actor=0)
  assert [[int(u.env_outputs.reward[0]) for u in e.unrolls] for e in small._episodes] == [
      [16, 20]]
  assert small.num_dropped_unrolls > 0
  with pytest.raises(ValueError, match="positive integer"):
    laser.EpisodeReplay(capacity=0)
  with pytest.raises(IndexError, match="no complete episode"):
    laser.EpisodeReplay().sample()


def _online(unrolls, actor=0):
  stream = iter(unrolls)
  return lambda: next(((u, actor) for u in stream), None)


def test_mixer_refuses_a_batch_without_online_data():
  for num_replayed in (0, 4, 5):
    with pytest.raises(ValueError, match="online data must keep flowing"):
      laser.EpisodeMixer(lambda: None, laser.EpisodeReplay(), 4, num_replayed, "a",
                           _toy_core(0.5))


def test_replay_plays_episodes_from_their_start_recomputing_the_core_state():
  unrolls, _ = _actor_stream([6, 3, 9, 5, 2] * 4, decay=0.5)
  replay = laser.EpisodeReplay(capacity=1000, seed=1)
  # Current parameters differ from the actors' (decay 0.9 instead of 0.5).
  current = _toy_core(0.9)
  mixer = laser.EpisodeMixer(_online(unrolls), replay, batch_size=4, num_replayed=3,
                               agent="a", advance_state=current)
  lanes = collections.defaultdict(list)
  for call in range(4 * 12):
    replayed = mixer.num_replayed
    item = mixer()
    if mixer.num_replayed > replayed:  # Not an online fill (replay still empty).
      lanes[call % 4].append(item)
  assert mixer.num_replayed + mixer.num_online_fill == 3 * 12
  assert mixer.num_replayed > 20
  by_start = {int(u.env_outputs.reward[0]): u for u in unrolls}
  stale = 0
  for lane in lanes.values():
    # Split the lane into its episodes: each starts at the first unroll of a stored episode
    # and walks its unrolls in order.
    episodes = {tuple(int(u.env_outputs.reward[0]) for u in e.unrolls): e
                for e in replay._episodes}
    index = 0
    while index < len(lane):
      starts = [k for k in episodes if k[0] == int(lane[index].env_outputs.reward[0])]
      assert starts, "a replayed episode must begin with its first unroll"
      key = max(starts, key=len)
      played = lane[index:index + len(key)]
      assert [int(u.env_outputs.reward[0]) for u in played] == list(key[:len(played)])
      # Ground truth: the first unroll keeps the actor's state; each later one's state is
      # the current core run from there over the previous unrolls (numpy recursion).
      state = by_start[key[0]].agent_state
      assert played[0].agent_state == state
      for previous, unroll in zip(played, played[1:]):
        state = current(by_start[int(previous.env_outputs.reward[0])], state)
        assert np.allclose(unroll.agent_state, state)
      stale += sum(not np.allclose(u.agent_state, by_start[int(u.env_outputs.reward[0])]
                                   .agent_state) for u in played[1:])
      index += len(key)
  assert stale > 0  # Recomputed with the current core, not the actors' (stale) states.


def test_recomputation_with_the_actors_parameters_gives_back_the_actors_states():
  unrolls, _ = _actor_stream([9, 11, 7] * 5, decay=0.5)
  replay = laser.EpisodeReplay(capacity=1000, seed=2)
  mixer = laser.EpisodeMixer(_online(unrolls), replay, batch_size=2, num_replayed=1,
                               agent="a", advance_state=_toy_core(0.5))
  by_start = {int(u.env_outputs.reward[0]): u for u in unrolls}
  replayed = 0
  for call in range(2 * 15):
    item = mixer()
    if call % 2 == 1 and mixer.num_replayed > replayed:
      replayed = mixer.num_replayed
      assert np.allclose(item.agent_state,
                         by_start[int(item.env_outputs.reward[0])].agent_state)
  assert replayed > 5


def test_feed_forward_states_are_not_recomputed():
  unrolls, _ = _actor_stream([6, 3] * 6)
  unrolls = [u._replace(agent_state=()) for u in unrolls]

  def fail(trajectory, state):
    raise AssertionError("nothing to recompute without a core state")
  mixer = laser.EpisodeMixer(_online(unrolls), laser.EpisodeReplay(), 2, 1, "a", fail)
  items = [mixer() for _ in range(2 * 8)]
  assert mixer.num_replayed > 0 and all(i.agent_state == () for i in items)


def test_two_agents_share_one_replay_tagged_and_sample_each_others_episodes():
  replay = laser.EpisodeReplay(capacity=1000, seed=3)
  streams = {name: _actor_stream([5, 7, 3] * 6, offset=offset)[0]
             for name, offset in (("lr_high", 0.0), ("lr_low", 1000.0))}
  mixers = {name: laser.EpisodeMixer(_online(unrolls), replay, 4, 2, name,
                                       _toy_core(decay))
            for (name, unrolls), decay in zip(streams.items(), (0.5, 0.7))}
  for _ in range(4 * 12):  # The two agents' learners take turns.
    for mixer in mixers.values():
      mixer()
  held = replay.episodes_by_agent()
  assert set(held) == {"lr_high", "lr_low"} and min(held.values()) >= 3
  own = {name: {int(u.env_outputs.reward[0]) for u in unrolls}
         for name, unrolls in streams.items()}
  for episode in replay._episodes:  # Each episode is tagged with the agent that made it.
    assert {int(u.env_outputs.reward[0]) for u in episode.unrolls} <= own[episode.agent]
  for name, mixer in mixers.items():
    assert set(mixer.sampled_agents) == {"lr_high", "lr_low"}, (name, mixer.sampled_agents)


def test_another_agents_episode_starts_from_a_zero_state():
  replay = laser.EpisodeReplay(capacity=1000, seed=4)
  theirs, _ = _actor_stream([6, 3, 9] * 3, offset=1.0)
  for unroll in theirs:
    replay.add(unroll, agent="them", actor=0)
  assert any(e.unrolls[0].agent_state[0] != 0 for e in replay._episodes)
  ours, _ = _actor_stream([5] * 20, offset=1000.0)
  mixer = laser.EpisodeMixer(_online(ours), replay, 2, 1, "us", _toy_core(0.5))
  for _ in range(2):  # Online, then the first unroll of a sampled episode of theirs.
    item = mixer()
  assert mixer.sampled_agents == {"them": 1}
  assert item.agent_state == (0.0,) and type(item.agent_state) is tuple


# --- The learner and training -------------------------------------------------------------

import dataclasses
import types

import tensorflow as tf

from scalable_agent_tf2.agent import distributions
from scalable_agent_tf2.agent import networks
from scalable_agent_tf2.configuration import config as config_lib
from scalable_agent_tf2.environments import toy as toy_environment
from scalable_agent_tf2.learning import laser
from scalable_agent_tf2.learning import learner as learner_lib
from scalable_agent_tf2.learning import losses
from scalable_agent_tf2.run import input_pipeline
from scalable_agent_tf2.run import shared_replay_runs
from tests import random_batches
from tests import toy_families

TOY_LSTM = networks.NetworkConfig(
    num_actions=toy_environment.NUM_ACTIONS, frame_shape=toy_environment.FRAME_SHAPE,
    torso=networks.SHALLOW, use_lstm=True, use_instruction=False)


def test_entropy_mask_keeps_the_online_trajectories_only():
  logits = np.random.default_rng(0).normal(size=[5, 4, 3]).astype(np.float32)
  mask = laser.online_mask(4, 3).numpy()
  assert mask.tolist() == [1, 0, 0, 0]
  p = np.exp(logits) / np.exp(logits).sum(-1, keepdims=True)
  expected = (p * np.log(p)).sum(-1)[:, :1].sum()  # Ground truth: trajectory 0 only.
  policy = distributions.Categorical(logits)
  got = losses.entropy_loss(policy, np.broadcast_to(mask, [5, 4]))
  assert np.isclose(got, expected, rtol=1e-5)
  assert np.isclose(losses.entropy_loss(policy), (p * np.log(p)).sum(), rtol=1e-5)


def test_the_learner_owns_lasers_entropy_mask():
  """--entropy_on_online_only gives the learner its mask once (laser.entropy_mask): every
  update's entropy term counts the batch's online trajectories only, as the loss terms with
  that mask do."""
  online = types.SimpleNamespace(entropy_on_online_only=True, learner_batch_size=4,
                                 num_replayed_per_batch=2)
  assert laser.entropy_mask(online).numpy().tolist() == [1, 1, 0, 0]
  assert laser.entropy_mask(types.SimpleNamespace(entropy_on_online_only=False)) is None
  config = networks.atari_config(num_actions=3, frame_shape=(20, 20, 1))
  env_outputs, agent_outputs = random_batches.random_learner_batch(config, 3, 4, seed=2)
  learner_config = config_lib.LearnerConfig()
  agent = networks.Agent(config, seed=1)
  masked = learner_lib.Learner(agent, learner_config, jit_compile=False,
                               entropy_mask=laser.entropy_mask(online))
  outputs, _ = agent.unroll(agent_outputs.action, env_outputs, ())
  want = [losses.impala_loss_terms(config.action_distribution, outputs, env_outputs,
                                   agent_outputs, learner_config, mask)[0]["entropy_loss"]
          for mask in (laser.entropy_mask(online), None)]
  got = masked.update((), env_outputs, agent_outputs)["entropy_loss"]
  np.testing.assert_allclose(got, want[0], rtol=1e-5)
  assert not np.isclose(want[0], want[1])  # The mask leaves the replayed half out.


def _laser_config(logdir, **overrides):
  values = dict(level_name="atari/pong", logdir=str(logdir), num_actors=2, batch_size=4,
                unroll_length=5, total_environment_frames=1_200, log_secs=30.0,
                replay_fraction=0.5, replay_capacity=200, laser_replay=True)
  values.update(overrides)
  return toy_families.on_toy(config_lib.resolve(config_lib.ExperimentConfig(**values)))


@pytest.mark.parametrize("values, message", [
    (dict(laser_replay=True), "set --replay_fraction in \\(0, 1\\)"),
    (dict(laser_replay=True, replay_fraction=1.0), "online data must keep flowing"),
    (dict(laser_replay=True, replay_fraction=0.5, algorithm="impact"), "IMPALA's learner"),
    (dict(entropy_on_online_only=True), "needs replayed data"),
])
def test_laser_flags_refuse_bad_combinations(values, message):
  with pytest.raises(ValueError, match=message):
    config_lib.resolve(config_lib.ExperimentConfig(**values))


@pytest.mark.parametrize("num_online, fraction, want", [
    (32, 0.875, 224), (32, 0.5, 32), (4, 0.75, 12), (8, 0.0, 0), (3, 0.5, 3), (5, 0.2, 1)])
def test_replayed_added_to_the_online_batch_make_the_fraction(num_online, fraction, want):
  got = config_lib.num_replayed_added(num_online, fraction)
  assert got == want
  assert got == round(num_online * fraction / (1 - fraction))


def _composition(config):
  """(online, replayed) trajectories of each learner update, and the resolved clip."""
  return (config.num_online_per_batch, config.num_replayed_per_batch, config.learner_batch_size,
          config.replay_mixing, config.max_grad_norm)


def test_laser_flags_give_section_5_1_batches_without_clipping():
  # LASER section 5.1: mini-batches of 32 online and 224 replayed trajectories (7 replayed
  # for each online one, section 5.3), no gradient clipping by norm, entropy on online data.
  laser = config_lib.resolve(config_lib.ExperimentConfig(laser_replay=True,
                                                         replay_fraction=0.875))
  assert _composition(laser) == (32, 224, 256, "added", 0.0)
  assert laser.learner_config().max_grad_norm is None and laser.entropy_on_online_only
  dmlab = config_lib.resolve(config_lib.ExperimentConfig(
      level_name="rooms_watermaze", laser_replay=True, replay_fraction=0.875))
  assert _composition(dmlab) == (32, 224, 256, "added", 0.0)
  # A clip given on the command line wins.
  clipped = config_lib.config_from_argv(["--laser_replay", "--replay_fraction=0.875",
                                         "--max_grad_norm=40"])
  assert _composition(clipped) == (32, 224, 256, "added", 40.0)
  # Resolving a resolved config changes nothing (population members are resolved twice).
  assert config_lib.resolve(laser) == laser


def test_within_batch_mixing_keeps_the_former_laser_batches():
  within = config_lib.config_from_argv(["--laser_replay", "--replay_fraction=0.875",
                                        "--replay_mixing=within_batch"])
  assert _composition(within) == (4, 28, 32, "within_batch", 0.0)


def test_impala_replay_stays_half_of_the_batch_with_its_clip():
  # IMPALA section 5.2.2, Table 2 "with replay": half of each batch from replay; Table G.1's
  # clip of 40 on Atari.
  plain = config_lib.resolve(config_lib.ExperimentConfig())
  assert (plain.laser_replay, plain.entropy_on_online_only) == (False, False)
  assert _composition(plain) == (32, 0, 32, None, 40.0)
  replay = config_lib.resolve(config_lib.ExperimentConfig(replay_fraction=0.5))
  assert _composition(replay) == (16, 16, 32, "within_batch", 40.0)
  added = config_lib.config_from_argv(["--replay_fraction=0.5", "--replay_mixing=added"])
  assert _composition(added) == (32, 32, 64, "added", 40.0)
  assert config_lib.resolve(replay) == replay


@pytest.mark.parametrize("argv, online, replayed", [
    (["--laser_replay", "--replay_fraction=0.5"], 4, 4),   # LASER: replay on top.
    (["--laser_replay", "--replay_fraction=0.875", "--batch_size=2"], 2, 14),  # 7 : 1.
    (["--laser_replay", "--replay_fraction=0.5", "--replay_mixing=within_batch"], 2, 2),
    (["--replay_fraction=0.5"], 2, 2),                      # IMPALA 5.2.2: half of the batch.
    (["--replay_fraction=0.5", "--replay_mixing=added"], 4, 4),
])
def test_the_input_pipeline_mixes_batches_as_the_flags_say(argv, online, replayed):
  config = config_lib.config_from_argv(["--batch_size=4", *argv])
  unrolls, _ = _actor_stream([3, 5, 2] * 40)
  unrolls = [u._replace(agent_state=()) for u in unrolls]  # Feed-forward: no recomputation.
  calls = []
  stream = iter(unrolls)

  def next_online():
    calls.append(1)
    return next(stream)
  if config.laser_replay:
    mixer = input_pipeline.with_laser_replay(
        lambda: (next_online(), 0), config, None, laser.EpisodeReplay(), "a",
        lambda line: None, "/cpu:0")
  else:
    signature = (tf.TensorSpec([T + 1], tf.float32),)
    mixer = input_pipeline.with_replay(next_online, config, signature, lambda line: None)
  assert config.learner_batch_size == online + replayed
  for batch in range(8):
    before = len(calls)
    items = [mixer() for _ in range(online + replayed)]
    assert all(item is not None for item in items)
    if batch >= 4:  # The episode replay holds complete episodes by now (no online fill):
      assert len(calls) - before == online, batch  # the rest of the batch is replayed.
  assert config.num_online_per_batch == online and config.num_replayed_per_batch == replayed
  if config.laser_replay:
    assert mixer.num_online_fill + mixer.num_replayed == 8 * replayed


@pytest.mark.parametrize("argv, message", [
    (["--replay_mixing=added"], "set --replay_fraction in \\(0, 1\\)"),
    (["--laser_replay", "--replay_fraction=0.001"], "rounds to no replayed trajectory"),
    (["--laser_replay", "--replay_fraction=1.0"], "online data must keep flowing"),
])
def test_replay_mixing_refuses_bad_combinations(argv, message):
  with pytest.raises(ValueError, match=message):
    config_lib.config_from_argv(argv)


def test_recomputed_state_with_the_actors_parameters_is_the_actors_state():
  agent = networks.Agent(TOY_LSTM, seed=1)
  from scalable_agent_tf2 import environments
  constructor, kwargs = environments.environment_constructor(toy_environment.LEVEL_NAME)
  from scalable_agent_tf2.acting import actor as actor_lib
  from scalable_agent_tf2.acting import policies
  env = environments.EnvironmentProcess(constructor, kwargs=kwargs)
  policy = policies.PerActorPolicy(agent, device="/cpu:0")
  try:
    loop = actor_lib.EnvironmentLoop(lambda attempt: env, policy, [np.random.default_rng(0)],
                                     toy_environment.LEVEL_NAME)
    unrolls = [loop.unroll(7)[0] for _ in range(3)]  # Episodes of 10 steps: starts inside.
  finally:
    policy.close()
    env.close()
  advance = laser.advance_state_fn(agent, "/cpu:0")
  for previous, unroll in zip(unrolls, unrolls[1:]):
    state = advance(previous, previous.agent_state)
    tf.nest.map_structure(lambda a, b: np.testing.assert_allclose(a, b, atol=1e-5),
                          tuple(state), tuple(unroll.agent_state))


# Slow tier (two agents trained in one process, 24 s): the default tier keeps
# test_two_agents_share_one_replay_tagged_and_sample_each_others_episodes (above) and
# tests/transport/test_shared_replay.py's two agents adding and sampling through one service.
@pytest.mark.slow
def test_two_agents_with_different_hyperparameters_share_one_replay(tmp_path):
  configs = {"agent_a": _laser_config(tmp_path / "a", learning_rate=0.0006),
             "agent_b": _laser_config(tmp_path / "b", learning_rate=0.0002,
                                      entropy_cost=0.02, seed=7)}
  lines = []
  results, replay = shared_replay_runs.train_sharing_replay(
      {tag: toy_families.with_faults(config, lstm=True) for tag, config in configs.items()},
      replay_capacity=200, print_fn=lines.append)
  # Both agents' episodes are in the one replay, tagged by agent ...
  assert set(replay.added_by_agent()) == {"agent_a", "agent_b"}
  for name, result in results.items():
    assert result.num_env_frames >= 1_200
    stats = result.replay
    assert stats.num_replayed > 0
    # ... and each agent replayed episodes of the other one.
    other = ({"agent_a", "agent_b"} - {name}).pop()
    assert stats.sampled_by_agent.get(other, 0) > 0, (name, stats)
    # Online trajectories that filled replayed places (how many depends on when the other
    # agent's first episodes arrive) are accounted as such, not as untrained.
    accounts = result.trajectories
    assert accounts.online_fill == stats.num_online_fill, (accounts, stats)
    assert accounts.trained + accounts.untrained + accounts.online_fill == accounts.produced
    # LASER section 5.1's batches: --batch_size 4 online, and at --replay_fraction 0.5 as
    # many replayed (or online fill while the replay holds no episode) on top.
    assert accounts.trained == result.num_updates * 4
    # (The input pipeline has handed out up to two batches more than were trained on: the
    # prefetched one and the one being assembled.)
    handed_out = stats.num_replayed + stats.num_online_fill
    assert result.num_updates * 4 <= handed_out <= (result.num_updates + 2) * 4, stats
    # Frames count the online unrolls only: 4 of 5 steps per update, x the action repeats.
    assert result.num_env_frames == (result.num_updates * 4 * 5
                                     * configs[name].num_action_repeats)
  assert any(line.startswith("[agent_b] LASER replay") for line in lines)


def test_sharing_a_replay_refuses_runs_without_laser_or_with_one_logdir(tmp_path):
  with pytest.raises(ValueError, match="needs --laser_replay"):
    shared_replay_runs.train_sharing_replay(
        {"a": dataclasses.replace(_laser_config(tmp_path), laser_replay=False)}, 10)
  with pytest.raises(ValueError, match="its own logdir"):
    shared_replay_runs.train_sharing_replay(
        {"a": _laser_config(tmp_path), "b": _laser_config(tmp_path)}, 10)
