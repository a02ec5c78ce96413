"""The run files: the run log (runlog.py) and the checkpoint layout (checkpoints.py)."""
import json
import os
import subprocess
import sys

import pytest

from scalable_agent_tf2.population import exploit
from scalable_agent_tf2.runfiles import checkpoints
from scalable_agent_tf2.runfiles import runlog

REPO_DIR = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _append(logdir, records, tail=""):
  with open(runlog.log_path(logdir), "a") as f:
    f.writelines(json.dumps(r) + "\n" for r in records)
    f.write(tail)


def test_the_writer_logs_strict_json_and_readers_take_complete_lines_only(tmp_path):
  writer = runlog.Writer(str(tmp_path))
  writer.start(300)
  writer.episode(310, "a", 2.5, 40)
  writer.write(dict(kind=runlog.PROGRESS, time=1.0, frames=320, policy_lag=float("nan")))
  writer.flush()
  records = runlog.read_log(str(tmp_path))
  assert [r["kind"] for r in records] == [runlog.START, runlog.EPISODE, runlog.PROGRESS]
  assert records[0]["frames"] == 300 and records[1]["episode_return"] == 2.5
  assert records[2]["policy_lag"] is None  # Not NaN: strict JSON.
  with open(runlog.log_path(tmp_path)) as f:
    assert "NaN" not in f.read()

  tail = runlog.LogTail(runlog.log_path(tmp_path))
  assert len(tail.read()) == 3 and tail.read() == []
  writer.close()
  # A line being written is left for the next read.
  _append(tmp_path, [], tail='{"kind": "episode", "frames": 4')
  assert tail.read() == []
  _append(tmp_path, [], tail='00, "level": "a", "episode_return": 1.0}\n')
  assert [r["frames"] for r in tail.read()] == [400]
  assert runlog.of_kind(runlog.read_log(str(tmp_path)), runlog.EPISODE)[-1]["frames"] == 400


def test_a_new_attempt_after_a_line_cut_short_keeps_its_start_record(tmp_path):
  _append(tmp_path, [dict(kind="episode", frames=100, level="a", episode_return=1.0)],
          tail='{"kind": "progress", "fra')  # Killed mid-line.
  writer = runlog.Writer(str(tmp_path))
  writer.start(50)
  writer.close()
  records = runlog.read_log(str(tmp_path))
  assert [(r["kind"], r["frames"]) for r in records] == [("episode", 100), ("start", 50)]


def test_records_between_offsets(tmp_path):
  first = [dict(kind="episode", frames=f, level="a", episode_return=0.0) for f in (1, 2)]
  _append(tmp_path, first)
  middle = os.path.getsize(runlog.log_path(tmp_path))
  _append(tmp_path, [dict(kind="episode", frames=3, level="a", episode_return=0.0)])
  path = runlog.log_path(tmp_path)
  records, offset = runlog.read_records(path, 0, middle)
  assert [r["frames"] for r in records] == [1, 2] and offset == middle
  records, offset = runlog.read_records(path, middle)
  assert [r["frames"] for r in records] == [3] and offset == os.path.getsize(path)
  assert runlog.read_records(str(tmp_path / "none.jsonl"), 7) == ([], 7)


def test_a_resumed_attempt_drops_what_the_lost_parameters_logged(tmp_path):
  # Attempt 1 was killed after its checkpoint at 150 frames; attempt 2 resumes there.
  _append(tmp_path, [
      dict(kind="start", time=0.0, frames=0),
      dict(kind="episode", frames=100, level="a", episode_return=1.0),
      dict(kind="progress", time=1.0, frames=100, updates=10),
      dict(kind="episode", frames=200, level="a", episode_return=2.0),  # Lost.
      dict(kind="progress", time=2.0, frames=200, updates=20),  # Lost.
      dict(kind="start", time=3.0, frames=150),
      dict(kind="episode", frames=250, level="a", episode_return=3.0),
      dict(kind="progress", time=4.0, frames=250, updates=5)])
  episodes, progress = runlog.read_trained_records(str(tmp_path))
  assert [e["frames"] for e in episodes] == [100, 250]
  assert [(p["frames"], p["total_updates"]) for p in progress] == [(100, 10), (250, 15)]


def test_a_log_without_start_records_is_cut_where_frames_go_back(tmp_path):
  _append(tmp_path, [
      dict(kind="progress", time=1.0, frames=100, updates=10),
      dict(kind="progress", time=2.0, frames=200, updates=20),
      dict(kind="progress", time=3.0, frames=120, updates=2),  # A new attempt from 100.
      dict(kind="episode", frames=120, level="a", episode_return=1.0)])
  episodes, progress = runlog.read_trained_records(str(tmp_path))
  assert [(p["frames"], p["total_updates"]) for p in progress] == [(100, 10), (120, 12)]
  assert [e["frames"] for e in episodes] == [120]


def _fake_checkpoint(logdir, frames, payload):
  """Files laid out as checkpoints.Checkpointer writes them (contents stand-ins)."""
  directory = checkpoints.checkpoint_dir(logdir)
  os.makedirs(directory, exist_ok=True)
  prefix = f"{checkpoints.PREFIX}-{frames}"
  for suffix in (".index", ".data-00000-of-00001"):
    with open(os.path.join(directory, prefix + suffix), "w") as f:
      f.write(payload)
  with open(os.path.join(directory, checkpoints.STATE_FILE), "w") as f:
    f.write(f'model_checkpoint_path: "{prefix}"\nall_model_checkpoint_paths: "{prefix}"\n')
  with open(checkpoints.settings_path(logdir), "w") as f:
    f.write(json.dumps(dict(source=payload)))


def test_latest_checkpoint_and_copy(tmp_path):
  source, target = str(tmp_path / "a"), str(tmp_path / "b")
  assert checkpoints.latest_checkpoint(source) is None
  assert not checkpoints.has_checkpoint_files(source)
  _fake_checkpoint(source, 100, "a100")
  _fake_checkpoint(source, 300, "a300")
  _fake_checkpoint(target, 200, "b200")
  os.makedirs(os.path.join(checkpoints.checkpoint_dir(target), "ckpt-250_temp"))
  assert checkpoints.latest_checkpoint(source) == ("ckpt-300", 300)
  assert exploit.copy_checkpoint(source, target) == 300
  assert checkpoints.latest_checkpoint(target) == ("ckpt-300", 300)
  assert sorted(os.listdir(checkpoints.checkpoint_dir(target))) == [
      "checkpoint", "ckpt-300.data-00000-of-00001", "ckpt-300.index", "settings.json"]
  with open(os.path.join(checkpoints.checkpoint_dir(target), "ckpt-300.index")) as f:
    assert f.read() == "a300"
  # A source without its index file is not copied; the target keeps its checkpoint.
  os.remove(os.path.join(checkpoints.checkpoint_dir(source), "ckpt-300.index"))
  with pytest.raises(exploit.CopyError, match="ckpt-300.index missing"):
    exploit.copy_checkpoint(source, target)
  assert checkpoints.latest_checkpoint(target) == ("ckpt-300", 300)
  assert not os.path.exists(checkpoints.checkpoint_dir(target) + ".incoming")


def test_the_checkpointer_writes_the_layout_this_module_reads(tmp_path):
  import tensorflow as tf  # pylint: disable=import-outside-toplevel

  from scalable_agent_tf2.runfiles import checkpoints  # pylint: disable=import-outside-toplevel
  checkpointer = checkpoints.Checkpointer(str(tmp_path), {"torso": "shallow"},
                                          step=tf.Variable(3))
  checkpointer.save(1200)
  assert checkpoints.latest_checkpoint(str(tmp_path)) == ("ckpt-1200", 1200)
  assert checkpoints.has_checkpoint_files(str(tmp_path))
  with open(checkpoints.settings_path(str(tmp_path))) as f:
    assert json.load(f) == {"torso": "shallow"}


@pytest.mark.parametrize("stored, log_std", [
    (dict(level_name="gym:Pendulum-v1", algorithm="impact", action_size=1), "state"),
    (dict(level_name="gym:Pendulum-v1", algorithm="impact", action_size=1, log_std="free"),
     "free"),
    (dict(level_name="gym:Pendulum-v1", action_size=1), "free"),  # Before algorithm: IMPALA.
    (dict(level_name="gym:CartPole-v1", algorithm="impact", num_actions=2), None),
    (dict(level_name="mujoco/hopper", algorithm="impact", action_size=3), None)])
def test_a_settings_file_from_before_log_std_means_the_head_its_run_trained(tmp_path, stored,
                                                                            log_std):
  # Gymnasium Box runs before log_std was stored: IMPACT's head was the layer's second half.
  os.makedirs(checkpoints.checkpoint_dir(str(tmp_path)))
  with open(checkpoints.settings_path(str(tmp_path)), "w") as f:
    json.dump(stored, f)
  assert checkpoints.read_settings(str(tmp_path)).get("log_std") == log_std


def test_the_population_driver_loads_neither_tensorflow_nor_experiment_py():
  modules = ("population.command", "population.driver", "population.processes",
             "population.pbt", "population.exploit", "runfiles.runlog", "runfiles.checkpoints")
  script = ("import sys\n"
            + "".join(f"import scalable_agent_tf2.{m}\n" for m in modules)
            + "print(sorted(m for m in ('tensorflow', 'experiment') if m in sys.modules))")
  child = subprocess.run([sys.executable, "-c", script], cwd=REPO_DIR, capture_output=True,
                         text=True, check=True)
  assert child.stdout.strip() == "[]"
