"""Faults and stops that must lose nothing: signals at any moment, levels that cannot run,
test results that cannot be written, corrupt checkpoints; and the lines a run starts with."""
import dataclasses
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time

import pytest

from scalable_agent_tf2.environments import LevelCannotRun
from scalable_agent_tf2.environments import LevelKeepsFailing
from scalable_agent_tf2.environments import families
from scalable_agent_tf2.environments import suites
from scalable_agent_tf2.environments import toy as toy_environment
from scalable_agent_tf2.run import evaluation
from scalable_agent_tf2.run import evaluation_episodes
from scalable_agent_tf2.run import monitoring
from scalable_agent_tf2.run import training
from scalable_agent_tf2.runfiles import checkpoints
from scalable_agent_tf2.runfiles import run_directory
from scalable_agent_tf2.runfiles import runlog
from scalable_agent_tf2.utils import stop_signals
from tests.environments import test_environment_faults
from tests.run.test_training import TOY_NETWORK
from tests.run.test_training import toy_config

TESTS_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
REPO_DIR = os.path.dirname(TESTS_DIR)


def test_a_signal_while_the_run_is_built_stops_the_build_and_later_only_wakes_the_supervisor():
  lines, woken = [], []
  # What the runner gave this process (default_int_handler; SIG_IGN under nohup or `&`).
  sigint_before = signal.getsignal(signal.SIGINT)
  request = stop_signals.StopRequest(lines.append).install()
  try:
    with pytest.raises(stop_signals.Stopping, match="SIGINT"):
      os.kill(os.getpid(), signal.SIGINT)
      time.sleep(1)  # The handler runs between bytecodes of the main thread.
    request.signal_name = None
    request.supervise(lambda: woken.append(True))
    os.kill(os.getpid(), signal.SIGTERM)  # Nothing raised from here on.
    time.sleep(0.2)
    assert woken == [True] and request.signal_name == "SIGTERM"
    assert lines == ["stopping: saving a checkpoint ..."]
    os.kill(os.getpid(), signal.SIGINT)
    time.sleep(0.2)
    assert woken == [True] and "still stopping" in lines[-1]
  finally:
    request.restore()
  assert signal.getsignal(signal.SIGINT) is sigint_before


def test_start_banner_says_what_runs_and_where_it_starts_from(tmp_path):
  config = dataclasses.replace(toy_config(tmp_path, total_frames=5_000), level_name="dmlab30",
                               excluded_levels="natlab_fixed_large_map")
  fresh = "\n".join(monitoring.start_banner(config, TOY_NETWORK, "/cpu:0", False, None, 0))
  for expected in ["dmlab30 (29 levels)", "excluded levels: natlab_fixed_large_map",
                   "shallow torso", "4 actors, batch 8, unroll 10, frame budget 5,000",
                   "decaying linearly to 0 at 5,000", "device /cpu:0, XLA off",
                   f"logdir {tmp_path}", "Fresh start"]:
    assert expected in fresh
  # Where to look while it trains: the curve's file, the log, TensorBoard.
  assert (f"  learning curve: {tmp_path}/learning_curve.png (redrawn at each checkpoint and at "
          f"the stop); every number: {tmp_path}/log.jsonl and `tensorboard --logdir "
          f"{tmp_path}`") in fresh.splitlines()
  resumed = monitoring.start_banner(config, TOY_NETWORK, "/cpu:0", True, "ckpt-800", 800)
  assert resumed[-1] == "Resumed from ckpt-800 at 800 frames." and "XLA on" in resumed[-2]
  tested = monitoring.start_banner(config, TOY_NETWORK, "/cpu:0", False, "ckpt-800", 800,
                                   mode="test")
  assert "500 episodes per level" in "\n".join(tested)
  assert "learning curve:" not in "\n".join(tested)  # A test run draws none.
  assert "defaults:" not in fresh  # The paper's levels: their tables, cited in the code.
  # A level no paper ran: the banner says in one line which defaults apply, and why.
  gym = dataclasses.replace(config, level_name="gym:CartPole-v1", excluded_levels="",
                            algorithm="impact")
  banner = "\n".join(monitoring.start_banner(gym, TOY_NETWORK, "/cpu:0", False, None, 0))
  assert "  defaults: this project's for an environment the papers did not run" in banner
  assert "IMPACT" in banner and "PopArt" in banner and "4 x 64" in banner
  gym_impala = dataclasses.replace(gym, algorithm="impala")
  banner = "\n".join(monitoring.start_banner(gym_impala, TOY_NETWORK, "/cpu:0", False, None, 0))
  assert "  defaults: this project's IMPALA set for an environment the papers did not" in banner
  assert "Table G.1" in banner and "PopArt" in banner


def test_levels_that_cannot_run_are_named_with_the_flag_that_leaves_them_out(tmp_path):
  config = dataclasses.replace(toy_config(tmp_path, total_frames=5_000), level_name="dmlab30")
  error = training.LevelsCannotRun({"natlab_varying_map_regrowth": "map missing",
                                    "natlab_fixed_large_map": "map missing"}, config, " Saved.")
  text = str(error)
  assert "2 level(s) cannot run here:\n  natlab_fixed_large_map: map missing" in text
  assert "--excluded_levels=natlab_fixed_large_map,natlab_varying_map_regrowth" in text
  assert "covers 28 of 30 levels" in text and text.endswith(" Saved.")
  single = training.LevelsCannotRun({"toy": "broken"}, toy_config(tmp_path, 5_000))
  assert "--excluded_levels" not in str(single)


def test_a_level_that_keeps_failing_points_to_its_environment_and_exits_1(tmp_path):
  # A gymnasium environment is the user's code: its crash loop is a failure of the run (exit
  # 1) and the advice is about that code, not BUILD.md (DeepMind Lab's build).
  config = dataclasses.replace(toy_config(tmp_path, total_frames=5_000),
                               level_name="gym:tests.gym_user_package.envs:UserTarget-v0")
  looping = training.LevelsCannotRun.of([LevelKeepsFailing(
      config.level_name, "its environment failed 5 times in its first 30 steps (replaced each "
      "time; ...); the last failure: step 3 of episode 1: the environment's step() raised "
      "...")], config)
  assert looping.exit_code == 1 and "BUILD.md" not in str(looping)
  assert str(looping).endswith("Fix the environment's own code (the last failure above says "
                               "what went wrong, and where) or choose another level.")
  # A DeepMind Lab level that cannot start: this machine's set-up (exit 2), BUILD.md's business.
  dmlab = dataclasses.replace(config, level_name="dmlab30")
  missing = training.LevelsCannotRun.of([LevelCannotRun("natlab_fixed_large_map",
                                                         "map missing")], dmlab)
  assert missing.exit_code == 2 and "Fix the level's environment (see BUILD.md), or run" in (
      str(missing))


def test_test_table_shows_a_dash_where_there_is_no_number():
  rows = evaluation.level_rows({"toy": [(1.0, 10)], "atari/pong": [(3.0, 100)]})
  text = evaluation.format_tables(rows, "toy")
  toy_line = next(line for line in text.splitlines() if line.startswith("toy"))
  assert "nan" not in text and toy_line.split()[-3:] == ["-", "-", "-"]


def test_test_table_has_the_spread_of_the_returns_beside_their_mean():
  rows = evaluation.level_rows({"toy": [(1.0, 10), (3.0, 10)], "atari/pong": [(3.0, 100)]})
  lines = evaluation.format_tables(rows, "toy").splitlines()
  header = lines[0].split()
  assert header[:5] == ["level", "episodes", "return", "std", "human"], header
  toy = next(line for line in lines if line.startswith("toy")).split()
  assert toy[1:4] == ["2", "2.00", "1.00"]  # Mean 2, standard deviation 1 (np.std).
  pong = next(line for line in lines if line.startswith("atari/pong")).split()
  assert pong[2:5] == ["3.00", "0.00", "14.60"]  # One episode: no spread; human 14.6.


def test_test_progress_counts_episodes_per_level_and_time_to_go():
  now = [0.0]
  lines = []
  progress = evaluation_episodes.TestProgress(["a", "b"], 10, lines.append, every_secs=5,
                                              clock=lambda: now[0])
  progress.record("a")
  assert not lines  # Not due yet.
  now[0] = 10.0
  for _ in range(4):
    progress.record("b")
  # Printed at the first episode due (1 more in the 10 s since the first: 18 to go, 180 s),
  # then not for 5 s.
  assert lines == ["test: 2/20 episodes (a 1/10, b 1/10), about 3 min to go"]
  now[0] = 16.0
  progress.record("a")
  assert lines[-1] == "test: 6/20 episodes (a 2/10, b 4/10), about 45 s to go"


def _toy_under_dmlab_names(monkeypatch, refused, after_an_update_in=None):
  """DeepMind Lab's family builds the toy task (and its network) under DMLab-30's names, a
  test double of its environments (this machine may have no DeepMind Lab); `refused` levels
  cannot run off the main thread (where actors and test workers build their environments).
  after_an_update_in: a logdir: they refuse only once its run has logged a learner update (a
  run that trained nothing writes no checkpoint: tests/environments/test_user_environments.py).
  """
  def constructor(level_name, seed, test_mode, options):
    del options  # DeepMind Lab's.
    if level_name in refused and threading.current_thread() is not threading.main_thread():
      if after_an_update_in is not None:
        _wait_for_an_update(after_an_update_in)
      raise LevelCannotRun(level_name, "its map is missing here")
    return families.find_family(toy_environment.LEVEL_NAME).environment_constructor(
        toy_environment.LEVEL_NAME, seed, test_mode, {})
  family = families.find_family(families.level_names("dmlab30")[0])
  monkeypatch.setattr(family, "environment_constructor", constructor)
  monkeypatch.setattr(family, "network_config", lambda config, spec: TOY_NETWORK)


def _wait_for_an_update(logdir, polls=600):
  """Until the run in logdir logs a progress record with an update (polled every 0.5 s)."""
  for _ in range(polls):
    if any(r.get("updates", 0) > 0
           for r in runlog.of_kind(runlog.read_log(logdir), runlog.PROGRESS)):
      return
    time.sleep(0.5)


@pytest.mark.timeout(600)
def test_levels_that_cannot_run_stop_training_with_one_message_after_the_checkpoint(
    tmp_path, monkeypatch):
  levels = families.level_names("dmlab30")
  config = dataclasses.replace(
      toy_config(tmp_path, total_frames=100_000_000, num_actors=4, test_num_episodes=2),
      level_name="dmlab30", excluded_levels=",".join(levels[4:]))
  refused = (levels[1], levels[3])
  lines = []
  _toy_under_dmlab_names(monkeypatch, refused, after_an_update_in=tmp_path)
  with pytest.raises(training.LevelsCannotRun) as raised:
    training.train(config, print_fn=lines.append)
  assert sorted(raised.value.reasons) == sorted(refused)
  text = str(raised.value)
  assert f"--excluded_levels={','.join(sorted(levels[4:] + refused))}" in text
  checkpoint = text.split("the checkpoint ")[1].split(" holds")[0]
  assert os.path.exists(checkpoint + ".index")
  assert any(line.startswith("Stopped: level(s) cannot run") for line in lines)

  # Test mode: the levels that play are tested, printed and written; the others named.
  lines = []
  _toy_under_dmlab_names(monkeypatch, refused)
  with pytest.raises(training.LevelsCannotRun):
    evaluation.evaluate(config, print_fn=lines.append)
  table = next(line for line in lines if line.startswith("level"))
  printed = "\n".join(lines)
  assert table and suites.DMLAB30_LEVEL_MAPPING[levels[0]] in printed
  assert suites.DMLAB30_LEVEL_MAPPING[levels[1]] not in printed.split(table)[1].split("Results")[0]
  assert "over 2 of 30 levels" in printed

  # A write failing after the play: the tables are printed, the error says where.
  def refuse(rows, summary, directory):
    raise PermissionError(13, "Permission denied", os.path.join(directory, "results.json"))
  monkeypatch.setattr(evaluation, "write_results", refuse)
  lines = []
  _toy_under_dmlab_names(monkeypatch, ())
  with pytest.raises(evaluation.ResultsNotWritten, match="results.json") as raised:
    evaluation.evaluate(dataclasses.replace(config, excluded_levels=",".join(levels[1:])),
                        print_fn=lines.append)
  assert any(line.startswith("level") for line in "\n".join(lines).splitlines())
  assert "Permission denied" in str(raised.value)


def test_test_mode_checks_its_results_directory_before_playing(tmp_path):
  (tmp_path / evaluation.RESULTS_SUBDIR).write_text("a file where the results go")
  played = []
  with pytest.raises(run_directory.RunDirectoryError, match="is a file"):
    evaluation.evaluate(toy_config(tmp_path, total_frames=800),
                        environment_constructor=lambda *a: played.append(a))
  assert not played


def _start_toy_training(logdir):
  return subprocess.Popen([sys.executable, "-u", "-m", "tests.toy_training_process",
                           str(logdir)], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                          text=True, cwd=REPO_DIR)


@pytest.mark.timeout(900)
# "later" (after four progress lines) is in the slow tier: the default tier keeps a signal while
# the run is built ("banner") and one while it trains ("first_progress").
@pytest.mark.parametrize("moment", ["banner", "first_progress",
                                    pytest.param("later", marks=pytest.mark.slow)])
def test_sigint_at_any_moment_stops_with_a_checkpoint(tmp_path, moment):
  """Four actors wait in the batched policy call most of the time; the signal lands wherever
  the main thread is."""
  process = _start_toy_training(tmp_path)
  output = []
  progress_lines = 0
  deadline = time.monotonic() + 600
  for line in process.stdout:
    output.append(line)
    progress_lines += line.startswith("frames ")
    if ((moment == "banner" and line.startswith("Fresh start"))
        or (moment == "first_progress" and progress_lines == 1)
        or (moment == "later" and progress_lines == 4)):
      break
    assert time.monotonic() < deadline, "".join(output[-20:])
  process.send_signal(signal.SIGINT)
  signalled = time.monotonic()
  rest, _ = process.communicate(timeout=120)
  stop_secs = time.monotonic() - signalled
  text = "".join(output) + rest
  assert process.returncode == 0, text[-3000:]
  assert "Traceback" not in text, text[-3000:]
  assert "exited normally" in text
  if "before training started" in text:  # The signal came while the run was being built.
    assert moment == "banner"
    assert "Stopped: interrupted (SIGINT) before training started" in text
  else:
    assert "stopping: saving a checkpoint ..." in rest + "".join(output[-3:])
    stopped = text.split("Stopped: interrupted (SIGINT). Checkpoint ")[1]
    assert os.path.exists(stopped.split(" at ")[0] + ".index")
  assert stop_secs < 30, stop_secs  # README: within 10 s; a loaded CI machine gets slack.


@pytest.mark.timeout(300)
def test_a_corrupt_checkpoint_shows_only_our_error(tmp_path):
  script = f"""
import sys
from scalable_agent_tf2.utils import quiet_tensorflow
quiet_tensorflow.import_tensorflow()
import tensorflow as tf
from scalable_agent_tf2.runfiles import checkpoints

class Agent(tf.Module):
  def __init__(self):
    self.weights = tf.Variable(tf.ones([1000]))
    self.biases = tf.Variable(tf.zeros([10]))

checkpointer = checkpoints.Checkpointer({str(tmp_path)!r}, {{}}, agent=Agent())
if sys.argv[1] == "save":
  path = checkpointer.save(10)
  data = tf.io.gfile.glob(path + ".data*")[0]
  with open(data, "r+b") as f:
    f.write(b"\\xff" * 64)
else:
  try:
    checkpointer.restore()
  except checkpoints.CheckpointError as error:
    print(f"error: {{error}}", file=sys.stderr)
"""
  env = {k: v for k, v in os.environ.items() if k != "TF_CPP_MIN_LOG_LEVEL"}
  run = lambda mode: subprocess.run([sys.executable, "-c", script, mode], capture_output=True,
                                    text=True, timeout=240, env=env, cwd=REPO_DIR)
  assert run("save").returncode == 0
  restored = run("restore")
  assert restored.returncode == 0
  assert restored.stderr.startswith("error: Cannot restore checkpoint"), restored.stderr
  assert "corrupt" in restored.stderr
  for noise in ("unrestored values", "could not be found", "Exception ignored", "WARNING"):
    assert noise not in restored.stderr, restored.stderr


# A gymnasium environment of the user's own, misbehaving (issue 41): trained for a few hundred
# frames in a process of its own, as a user runs it.
USER_TARGET = "gym:tests.gym_user_package.envs:UserTarget-v0"


def _train_user_target(logdir, env_kwargs):
  """`python experiment.py --mode=train` on UserTarget made with env_kwargs (a dict): the
  finished process (stdout, stderr)."""
  return subprocess.run(
      [sys.executable, "experiment.py", "--mode=train", f"--level_name={USER_TARGET}",
       f"--logdir={logdir}", f"--env_kwargs={json.dumps(env_kwargs)}", "--num_actors=2",
       "--envs_per_actor=2", "--batch_size=2", "--unroll_length=8", "--log_secs=5",
       "--total_environment_frames=4000"],
      capture_output=True, text=True, timeout=150, cwd=REPO_DIR)


def _assert_stopped_with_an_error_line(run, *expected):
  """Exit 1 with one `error:` line of the level's crash loop, pointing to the environment's
  code, and no traceback."""
  output = run.stdout + run.stderr
  assert run.returncode == 1, output[-3000:]
  assert "Traceback" not in output and ".." not in run.stderr, output[-3000:]
  # (gymnasium's own warnings may come first.)
  assert re.search(f"\nerror: 1 level\\(s\\) cannot run here:\n  {re.escape(USER_TARGET)}: its "
                   r"environment failed \d+ times in its first [\d,]+ steps \(replaced each "
                   r"time; a level stops when its failures are more than 1% of its last "
                   r"10,000 steps, 5 at least\)", "\n" + run.stderr), run.stderr
  assert "Fix the environment's own code" in run.stderr and "BUILD.md" not in run.stderr
  for text in expected:
    assert text in run.stderr, run.stderr


@pytest.mark.timeout(180)
def test_nan_in_five_percent_of_observations_stops_with_an_error_line_not_a_stall(tmp_path):
  run = _train_user_target(tmp_path, {"nan_fraction": 0.05})
  _assert_stopped_with_an_error_line(
      run, "the environment returned an observation holding nan at (0,); its spec promises "
      "finite numbers (float32 [2])")
  failures = runlog.of_kind(runlog.read_log(tmp_path), runlog.ENVIRONMENT_FAILURE)
  assert len(failures) >= 5 and all("nan at (0,)" in f["error"] for f in failures)


@pytest.mark.timeout(180)
def test_a_wrong_observation_shape_stops_with_a_named_error_line_not_a_traceback(tmp_path):
  run = _train_user_target(tmp_path, {"bad_shape_at": 3})
  _assert_stopped_with_an_error_line(
      run, "the last failure: step 3 of episode 1: the environment returned an observation of "
      "shape (3,); its observation space promises (2,).")
  # Nothing was trained: no checkpoint at 0 frames stands in the way of the fixed environment.
  assert run.stderr.rstrip().endswith("Nothing was trained; no checkpoint was written.")
  assert checkpoints.latest_checkpoint(str(tmp_path)) is None


@pytest.mark.timeout(180)
def test_the_users_exception_and_their_line_reach_the_console_and_the_run_log(tmp_path):
  run = _train_user_target(tmp_path, {"raise_at": 3})
  where = test_environment_faults.user_raise_line()
  raised = ("step 3 of episode 1: the environment's step() raised RuntimeError: the user's "
            f"simulator lost its connection (at {where})")
  _assert_stopped_with_an_error_line(run, raised)
  assert f"Environment for {USER_TARGET} failed and was restarted: {USER_TARGET}: {raised}" in (
      run.stdout)
  failures = runlog.of_kind(runlog.read_log(tmp_path), runlog.ENVIRONMENT_FAILURE)
  assert failures and failures[0]["level"] == USER_TARGET and failures[0]["where"] == where
  assert raised in failures[0]["error"]
