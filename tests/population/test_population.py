"""The population driver (IMPALA Appendix F): members as processes, evolution, copies, crashes.

Most tests run tests/pbt_fake_member.py members (experiment.py's contract without TensorFlow,
fast); the last one trains real members on the toy task.
"""
import json
import os
import sys
import threading
import time

import numpy as np
import pytest
import tensorflow as tf

from scalable_agent_tf2.agent import networks
from scalable_agent_tf2.configuration import config as config_lib
from scalable_agent_tf2.environments import dmlab as dmlab_environment
from scalable_agent_tf2.learning import learner as learner_lib
from scalable_agent_tf2.population import command as command_lib
from scalable_agent_tf2.population import driver as driver_lib
from scalable_agent_tf2.population import exploit
from scalable_agent_tf2.population import pbt
from scalable_agent_tf2.population import processes
from scalable_agent_tf2.runfiles import checkpoints
from scalable_agent_tf2.runfiles import runlog

TESTS_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FAKE_MEMBER = os.path.join(TESTS_DIR, "pbt_fake_member.py")
# Run with -m: the driver starts members from the repository root.
TOY_MEMBER = "tests.pbt_toy_member"


def fake_command(*flags):
  def command(member, logdir, seed, hyperparameters):
    return [sys.executable, FAKE_MEMBER, f"--logdir={logdir}", f"--seed={seed}", *flags,
            *(f"--{k}={v!r}" for k, v in sorted(hyperparameters.items()))]
  return command


def settings(logdir, size=3, **overrides):
  # Learning rates 1e-3, 2e-3, ...: fake members return 1000 * learning rate per episode.
  initial = tuple(dict(entropy_cost=0.01, learning_rate=0.001 * (i + 1), epsilon=0.1)
                  for i in range(size))
  values = dict(logdir=str(logdir), initial_hyperparameters=initial, multi_task=False,
                burn_in_frames=1_000, ready_episodes=8, exploit_threshold=0.5,
                poll_secs=0.05, stop_timeout_secs=30)
  values.update(overrides)
  return driver_lib.Settings(**values)


def outputs(logdir, member):
  with open(os.path.join(pbt.member_dir(str(logdir), member),
                         processes.MEMBER_OUTPUT_FILE)) as f:
    return f.read()


def check_lineage(logdir, config):
  """Every generation follows Appendix F's rules; returns the lineage."""
  records = pbt.read_lineage(str(logdir))
  by_key = {(r.member, r.generation): r for r in records}
  for record in records:
    if record.generation == 0:
      assert record.hyperparameters == config.initial_hyperparameters[record.member]
      continue
    previous = by_key[(record.member, record.generation - 1)]
    # Exploit only when the other member is more than exploit_threshold better.
    better = (record.other_fitness is not None and record.fitness is not None
              and record.other_fitness > record.fitness + config.exploit_threshold)
    assert record.copied == better, record
    parent = by_key[(record.parent_member, record.parent_generation)]
    assert parent.member == (record.other_member if record.copied else record.member)
    # Explore: each hyperparameter is the parent's times 1, 1.2 or 1/1.2.
    for name, value in record.hyperparameters.items():
      ratio = value / parent.hyperparameters[name]
      assert min(abs(ratio - r) for r in (1.0, 1.2, 1 / 1.2)) < 1e-9, (name, ratio)
    # The previous generation saw at least ready_episodes new episodes.
    segment = pbt.Segment(record.member, previous.generation, previous.log_offset,
                          record.log_offset, float("inf"))
    logged = pbt.read_segment(str(logdir), segment)
    assert len(runlog.of_kind(logged, runlog.EPISODE)) >= config.ready_episodes
    # No evolution during the burn-in.
    assert max(r["frames"] for r in logged) >= config.burn_in_frames
  return records


def test_population_exploits_explores_and_records_its_lineage(tmp_path):
  config = settings(tmp_path)
  lines = []
  code = driver_lib.Population(config, fake_command("--total_environment_frames=6000"),
                               lines.append).run()
  assert code == 0, "\n".join(lines)
  records = check_lineage(tmp_path, config)
  assert len(records) > 3 * 3
  copied = [r for r in records if r.copied]
  assert copied and any(not r.copied for r in records if r.generation > 0)
  for record in copied:
    # The member resumed from the parent's newest checkpoint (which the parent may itself
    # have copied from another member just before).
    assert f"Resumed from ckpt-{record.frames} at {record.frames:,} frames" in outputs(
        tmp_path, record.member)
  # The fittest member (highest learning rate) is never replaced by a worse one.
  assert all(r.other_fitness > r.fitness for r in copied)
  assert "every member finished" in lines[-2]
  # Each member's curve starts at the beginning of training and covers its whole budget.
  for member in range(3):
    curve = runlog.of_kind(pbt.reconstruct_curve(str(tmp_path), member), runlog.EPISODE)
    assert curve[0]["frames"] == 100 and curve[-1]["frames"] >= 6000
    # The episodes' returns follow the hyperparameters of the lineage they were played with.
    learning_rates = {r.hyperparameters["learning_rate"] for r in records}
    assert all(any(abs(c["episode_return"] - 1000 * lr) < 1e-6 for lr in learning_rates)
               for c in curve)


def test_a_crashed_member_restarts_from_its_last_checkpoint(tmp_path):
  config = settings(tmp_path, size=2, burn_in_frames=10**9)  # No evolution here.
  lines = []
  code = driver_lib.Population(
      config, fake_command("--total_environment_frames=3000", "--crash_at_frames=1000"),
      lines.append).run()
  assert code == 0, "\n".join(lines)
  for member in range(2):
    assert any(f"member {member} crashed (exit code 3); restarted from its last checkpoint "
               f"(900 frames)" in line for line in lines), lines
    assert "Resumed from ckpt-900 at 900 frames" in outputs(tmp_path, member)
  assert len(pbt.read_lineage(str(tmp_path))) == 2


def test_a_member_that_keeps_crashing_or_refuses_its_flags_stops_the_population(tmp_path):
  lines = []
  code = driver_lib.Population(settings(tmp_path / "crash", size=2, max_crashes=2),
                               fake_command("--always_crash"), lines.append).run()
  assert code == 1
  assert any("crashed 3 times in a row without a new checkpoint" in line for line in lines)
  lines = []
  code = driver_lib.Population(settings(tmp_path / "refuse", size=2),
                               fake_command("--refuse"), lines.append).run()
  assert code == 2
  assert any("refused to run" in line and "--refuse given" in line for line in lines)


def test_a_shared_replay_service_is_restarted_and_one_that_keeps_failing_stops_it(tmp_path):
  class FailingService(processes.SharedReplay):
    def service_command(self):
      return [sys.executable, "-c", "import sys; print('address in use'); sys.exit(4)"]

  shared = FailingService("localhost:8099", capacity=10)
  config = settings(tmp_path, size=2, burn_in_frames=10**9, max_crashes=2, poll_secs=0.2)
  lines = []
  driver = driver_lib.Population(config, fake_command("--total_environment_frames=1000000"),
                                 lines.append, shared_replay=shared)
  code = driver.run()
  assert code == 1, lines
  restarts = [line for line in lines if "the replay service stopped (exit code 4); "
              "restarted, empty, at localhost:8099" in line]
  assert len(restarts) == 2, lines
  assert any("keeps stopping at once" in line and "address in use" in line for line in lines)
  # Every member was started sharing it, under its member name.
  for member in driver.members:
    assert member.process.args[-3:] == [
        "--laser_replay", "--shared_replay_address=localhost:8099",
        f"--agent_tag=member_{member.index:02d}"]


def test_a_stopped_population_resumes_from_its_lineage(tmp_path):
  config = settings(tmp_path, size=2)
  command = fake_command("--total_environment_frames=8000", "--tick_secs=0.03")
  first = driver_lib.Population(config, command, lambda line: None)
  thread = threading.Thread(target=first.run)
  thread.start()
  deadline = time.monotonic() + 60
  while len(pbt.read_lineage(str(tmp_path))) < 4 and time.monotonic() < deadline:
    time.sleep(0.05)
  first.stop()
  thread.join(60)
  stopped = pbt.latest_generations(pbt.read_lineage(str(tmp_path)))
  assert all(not m.finished for m in first.members)

  lines = []
  assert driver_lib.Population(config, command, lines.append).run() == 0
  assert "Resuming a population of 2" in lines[0]
  records = check_lineage(tmp_path, config)
  latest = pbt.latest_generations(records)
  assert all(latest[m].generation >= stopped[m].generation for m in range(2))
  for member in range(2):
    assert "Resumed from" in outputs(tmp_path, member)
    curve = pbt.reconstruct_curve(str(tmp_path), member)
    assert curve[-1]["frames"] >= 8000
  # A different population size is refused.
  assert driver_lib.Population(settings(tmp_path, size=3), command, lines.append).run() == 2


def test_copy_checkpoint_copies_a_real_checkpoint_intact(tmp_path):
  config = networks.atari_config(num_actions=3, frame_shape=(20, 20, 4))

  def make(logdir, seed):
    agent = networks.Agent(config, seed=seed)
    learner = learner_lib.Learner(agent, config_lib.LearnerConfig(learning_rate=0.001 * seed),
                                  jit_compile=False)
    return agent, learner, checkpoints.Checkpointer(str(logdir), {"torso": "shallow"},
                                                     agent=agent, learner=learner)

  _, source_learner, source = make(tmp_path / "a", 1)
  for frames in (100, 200, 300):
    source_learner.num_env_frames.assign(frames)
    source.save(frames)
  _, target_learner, target = make(tmp_path / "b", 2)
  target_learner.num_env_frames.assign(900)
  target.save(900)  # The target's own, newer-numbered checkpoint must go.

  assert exploit.copy_checkpoint(str(tmp_path / "a"), str(tmp_path / "b")) == 300
  assert checkpoints.latest_checkpoint(str(tmp_path / "b")) == ("ckpt-300", 300)
  restored_agent, restored_learner, restored = make(tmp_path / "b", 3)
  assert restored.restore().endswith("ckpt-300")
  assert int(restored_learner.num_env_frames.numpy()) == 300
  assert len(restored_learner.variables) > len(restored_agent.trainable_variables)
  for got, want in zip(restored_learner.variables, source_learner.variables):  # Agent too.
    np.testing.assert_array_equal(got.numpy(), want.numpy(), err_msg=want.name)
  assert restored_learner.learning_rate.numpy() == np.float32(0.001)  # The source's.
  with pytest.raises(exploit.CopyError, match="No checkpoint"):
    exploit.copy_checkpoint(str(tmp_path / "none"), str(tmp_path / "b"))
  # A source whose newest files are gone: the copy fails and the target keeps its own.
  source_dir = checkpoints.checkpoint_dir(tmp_path / "a")
  target_dir = checkpoints.checkpoint_dir(tmp_path / "b")
  for name in os.listdir(source_dir):
    if name.startswith("ckpt-300."):
      os.remove(os.path.join(source_dir, name))
  before = sorted(os.listdir(target_dir))
  with pytest.raises(exploit.CopyError, match="ckpt-300.index missing"):
    exploit.copy_checkpoint(str(tmp_path / "a"), str(tmp_path / "b"))
  assert sorted(os.listdir(target_dir)) == before
  assert restored.restore().endswith("ckpt-300")


def test_flags_hyperparameters_win_over_a_restored_checkpoint(tmp_path):
  """A member restarted with new hyperparameters trains with them, not the checkpoint's."""
  config = networks.atari_config(num_actions=3, frame_shape=(20, 20, 4))

  def make(**hparams):
    agent = networks.Agent(config, seed=0)
    return learner_lib.Learner(agent, config_lib.LearnerConfig(**hparams), jit_compile=False)

  saved = make(learning_rate=0.001, entropy_cost=0.01, epsilon=0.1)
  path = tf.train.Checkpoint(learner=saved).save(str(tmp_path / "ckpt"))
  restored = make(learning_rate=0.0012, entropy_cost=0.012, epsilon=0.12)
  tf.train.Checkpoint(learner=restored).restore(path).assert_existing_objects_matched()
  assert restored.learning_rate.numpy() == np.float32(0.001)  # The checkpoint's values...
  restored.use_config_hyperparameters()
  assert restored.learning_rate.numpy() == np.float32(0.0012)  # ... until the flags' win.
  assert restored.entropy_cost.numpy() == np.float32(0.012)
  assert restored.optimizer.epsilon.numpy() == np.float32(0.12)


def test_command_line_checks_its_flags_before_starting(tmp_path, capsys):
  def run(*argv):
    code = command_lib.main([f"--logdir={tmp_path}", *argv])
    return code, capsys.readouterr().err

  assert run("--population_size=0", "--", "--level_name=atari/pong") == (
      2, "error: --population_size must be a positive integer, got 0.\n")
  code, error = run("--", "--level_name=atari/pong", "--logdir=/tmp/x")
  assert code == 2 and "--logdir is set by the population driver" in error
  code, error = run("--", "--level_name=atari/pong", "--learning_rate=0.1")
  assert code == 2 and "draws learning_rate from Table D.1" in error
  code, error = run("--", "--level_name=atari/pongg")
  assert code == 2 and "Unknown level name 'atari/pongg'" in error
  code, error = run("--", "--no_such_flag=1")
  assert code == 2 and "no_such_flag" in error
  # A shared replay needs LASER's replay fraction, and the driver names the members itself.
  code, error = run("--shared_replay_capacity=100", "--", "--level_name=atari/pong")
  assert code == 2 and "set --replay_fraction in (0, 1)" in error
  code, error = run("--shared_replay_capacity=100", "--", "--level_name=atari/pong",
                    "--replay_fraction=0.5", "--agent_tag=x")
  assert code == 2 and "--agent_tag is set by the population driver" in error
  code, error = run("--shared_replay_capacity=-1", "--", "--level_name=atari/pong")
  assert code == 2 and "--shared_replay_capacity must be >= 0" in error
  # A suite's fitness is its human-normalised score: levels without reference scores have none.
  code, error = run("--", "--level_name=toy/lit_side,toy/lit_side_x1000")
  assert code == 2 and error.count("\n") == 1 and "toy/lit_side, toy/lit_side_x1000 have no" \
      in error, error
  assert not os.path.exists(pbt.member_dir(str(tmp_path), 0))


def _as_if_deepmind_lab_were_installed(monkeypatch):
  """The settings of DMLab levels are checked as on a machine with DeepMind Lab (the module
  is not on PyPI: a fresh venv, CI's, has none; BUILD.md)."""
  monkeypatch.setattr(dmlab_environment, "check_deepmind_lab_available", lambda *args: None)


def test_settings_follow_the_paper(tmp_path, monkeypatch):
  _as_if_deepmind_lab_were_installed(monkeypatch)
  args = command_lib._parser().parse_args([f"--logdir={tmp_path}"])
  atari, member = command_lib.settings_from_arguments(args, ["--level_name=atari57"])
  assert member["adapts_max_grad_norm"] and atari.multi_task and atari.population_size == 24
  assert atari.adapted == pbt.ADAPTED_ATARI
  assert (atari.burn_in_frames, atari.ready_episodes, atari.exploit_threshold) == (
      20_000_000, 5_000, 5.0)
  for values in atari.initial_hyperparameters:
    assert values["max_grad_norm"] == 40.0  # Table G.1's start.
    assert 5e-5 <= values["entropy_cost"] <= 1e-2 and 5e-6 <= values["learning_rate"] <= 5e-3
    assert values["epsilon"] in (1e-1, 1e-3, 1e-5, 1e-7)
  assert len({v["learning_rate"] for v in atari.initial_hyperparameters}) == 24
  args = command_lib._parser().parse_args([f"--logdir={tmp_path}", "--population_size=2",
                                          "--initial_hyperparameters=flags"])
  single, _ = command_lib.settings_from_arguments(
      args, ["--level_name=explore_goal_locations_small", "--learning_rate=0.002"])
  assert single.adapted == pbt.ADAPTED and not single.multi_task
  assert single.initial_hyperparameters[0] == single.initial_hyperparameters[1]
  assert single.initial_hyperparameters[0]["learning_rate"] == 0.002
  command = processes.experiment_command(["--level_name=atari/pong"], "env PBT={member}")
  argv = command(3, "/tmp/m3", 7, {"learning_rate": 0.001})
  assert argv[:2] == ["env", "PBT=3"] and argv[-1] == "--learning_rate=0.001"
  assert "--logdir=/tmp/m3" in argv and "--seed=7" in argv


def test_documented_population_commands_are_valid(monkeypatch):
  from tests.project import test_docs_commands as docs  # pylint: disable=g-import-not-at-top
  # docs/POPULATION.md's DMLab-30 population is the paper's (150 actors a member): valid flags,
  # checked as on a machine with the memory for them (families/dmlab.py, check_dmlab_memory).
  monkeypatch.setattr(command_lib.config_lib, "machine_memory_gb", lambda: 1000.0)
  _as_if_deepmind_lab_were_installed(monkeypatch)
  commands = [c.argv[3:] for c in docs.all_commands()
              if c.argv[:3] == ["python", "-m", "scalable_agent_tf2.population"]]
  assert len(commands) >= 3
  for argv in commands:
    split = argv.index("--")
    args = command_lib._parser().parse_args(argv[:split])
    shared_replay = (processes.SharedReplay("localhost:8010",
                                                       args.shared_replay_capacity)
                     if args.shared_replay_capacity else None)
    config, _ = command_lib.settings_from_arguments(args, argv[split + 1:], shared_replay)
    assert config.population_size == args.population_size


def toy_settings(logdir, burn_in_frames, ready_episodes):
  """Two toy members (learning rates 0.0006, 0.0012) that always copy when they evolve."""
  initial = tuple(dict(entropy_cost=0.01, learning_rate=0.0006 * (i + 1), epsilon=0.01)
                  for i in range(2))
  return driver_lib.Settings(
      logdir=str(logdir), initial_hyperparameters=initial, multi_task=False,
      burn_in_frames=burn_in_frames, ready_episodes=ready_episodes,
      exploit_threshold=-1e9, poll_secs=0.5, stop_timeout_secs=120)


def toy_command(*flags):
  """CommandFn of tests/pbt_toy_member.py members."""
  def command(member, logdir, seed, hyperparameters):
    return [sys.executable, "-m", TOY_MEMBER, f"--logdir={logdir}", f"--seed={seed}", *flags,
            *(f"--{k}={v!r}" for k, v in sorted(hyperparameters.items()))]
  return command


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_real_members_on_the_toy_task(tmp_path):
  """Two members train the toy task (tests/pbt_toy_member.py runs training.train): a member
  that copies another resumes from that member's checkpoint and frames, the new
  hyperparameters are the ones its learner uses, and a killed member resumes from its last
  checkpoint."""
  config = toy_settings(tmp_path, burn_in_frames=1_200, ready_episodes=60)
  lines = []
  total_frames = 5_000
  driver = driver_lib.Population(config,
                                 toy_command(f"--total_environment_frames={total_frames}"),
                                 lines.append)
  killed = []

  def kill_member_1_after_a_checkpoint():
    member_dir = pbt.member_dir(str(tmp_path), 1)
    while not killed and not driver._stop_event.is_set():  # pylint: disable=protected-access
      time.sleep(0.2)
      member = driver.members[1] if len(driver.members) > 1 else None
      latest = checkpoints.latest_checkpoint(member_dir)
      if (member is not None and member.process is not None and latest is not None
          and latest[1] >= max(1000, member.record.frames + 1)):
        member.process.kill()
        killed.append(latest[1])

  killer = threading.Thread(target=kill_member_1_after_a_checkpoint, daemon=True)
  killer.start()
  code = driver.run()
  killer.join(5)
  assert code == 0, "\n".join(lines)
  records = check_lineage(tmp_path, config)
  copied = [r for r in records if r.copied]
  assert copied, "\n".join(lines)
  for record in copied:
    assert f"at {record.frames:,} frames" in outputs(tmp_path, record.member)
  assert killed and any("member 1 crashed" in line for line in lines), "\n".join(lines)
  # It resumed from the checkpoint it had written last (or a newer one it wrote as it died).
  resumed = [int(line.split(" at ")[1].split(" frames")[0].replace(",", ""))
             for line in outputs(tmp_path, 1).splitlines() if line.startswith("Resumed from")]
  assert any(frames >= killed[0] for frames in resumed), resumed
  # Each member's last checkpoint holds its last generation's hyperparameters: the flags
  # won over the values restored with the copied checkpoint.
  latest = pbt.latest_generations(records)
  for member in range(2):
    prefix, _ = checkpoints.latest_checkpoint(pbt.member_dir(str(tmp_path), member))
    saved = tf.train.load_checkpoint(os.path.join(
        checkpoints.checkpoint_dir(pbt.member_dir(str(tmp_path), member)), prefix))
    names = saved.get_variable_to_shape_map()
    value = lambda part, saved=saved, names=names: float(
        saved.get_tensor(next(n for n in names if part in n)))
    want = latest[member].hyperparameters
    assert value("learner/learning_rate") == pytest.approx(want["learning_rate"], rel=1e-6)
    assert value("learner/entropy_cost") == pytest.approx(want["entropy_cost"], rel=1e-6)
    assert value("optimizer/epsilon") == pytest.approx(want["epsilon"], rel=1e-6)
    curve = runlog.of_kind(pbt.reconstruct_curve(str(tmp_path), member), runlog.EPISODE)
    assert curve and curve[-1]["frames"] >= total_frames


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_members_share_one_replay_service_across_pbt_restarts(tmp_path):
  """--shared_replay_capacity: the driver runs one replay service; both toy members (different
  learning rates) feed it under their member names, members restarted by PBT reconnect to
  it, and it is stopped at the end with its final stats logged."""
  # At most one evolution per member (20 episodes of 40 frames, a budget of 1,200).
  config = toy_settings(tmp_path, burn_in_frames=400, ready_episodes=20)
  shared = processes.SharedReplay(processes.free_loopback_address(),
                                             capacity=300)
  lines = []
  driver = driver_lib.Population(
      config, toy_command("--total_environment_frames=1200", "--replay_fraction=0.5"),
      lines.append, shared_replay=shared)
  code = driver.run()
  assert code == 0, "\n".join(lines)
  assert driver.service.process.poll() is not None  # Stopped with the population.
  with open(tmp_path / processes.REPLAY_SERVICE_OUTPUT_FILE) as f:
    service_log = f.read()
  final = [line for line in service_log.splitlines()
           if line.startswith("Final replay stats: ")]
  assert len(final) == 1, service_log[-3000:]  # One service for the whole run.
  stats = json.loads(final[0][len("Final replay stats: "):])
  assert set(stats["added_by_agent"]) == {"member_00", "member_01"}, stats
  records = pbt.read_lineage(str(tmp_path))
  restarted = {r.member for r in records if r.generation > 0}
  assert restarted, "\n".join(lines)
  for member in range(2):
    output = outputs(tmp_path, member)
    starts = output.count(f"Sharing the LASER replay of {shared.address} as agent "
                          f"'member_{member:02d}'")
    assert starts == 1 + sum(r.member == member and r.generation > 0 for r in records)
    # Every start of the member said hello to the same service (the first set its layout);
    # a call slower than its deadline on the loaded machine reconnects with one more hello.
    hellos = (service_log.count(f"member_{member:02d} joined")
              + service_log.count(f"layout set by member_{member:02d}"))
    assert hellos >= starts, service_log[-3000:]
