"""Test mode's videos (--record_video_episodes, runfiles/videos.py): the first N episodes of each
level as MP4 (GIF without imageio-ffmpeg) under logdir/evaluation/videos/.

Frame count, as videos.py defines it: an episode of L agent steps is L frames (its first
observation to the one at which the agent took its last action; the environment resets within
the step that ends an episode), L + 1 for a gymnasium episode cut by a time limit (its last
observation is a step of its own). Frame size: the environment's picture, enlarged by whole
pixels to at least videos.MIN_SIDE (160) on its short side: toy 20x20 -> 160x160; CartPole
400x600 as it is.

The test runs restore tests/data/run_before_rooms (a toy/lit_side checkpoint,
tests/run/test_old_checkpoint.py) or save an untrained agent's checkpoint (CartPole).
"""
import dataclasses
import json
import os
import shutil
import sys

import numpy as np
import pytest

from scalable_agent_tf2.configuration import config as config_lib
from scalable_agent_tf2.environments import atari
from scalable_agent_tf2.environments import atari_vector
from scalable_agent_tf2.environments import base
from scalable_agent_tf2.environments import dmlab
from scalable_agent_tf2.environments import process
from scalable_agent_tf2.environments import toy
from scalable_agent_tf2.run import assembly
from scalable_agent_tf2.run import evaluation
from scalable_agent_tf2.run import evaluation_videos
from scalable_agent_tf2.runfiles import videos
from tests import fake_deepmind_lab
from tests import video_environments

TOY_RUN = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "data", "run_before_rooms")


# --- Reading the files back (independently of the writers). ----------------------------------

def read_mp4(path):
  """(frames uint8 [n, H, W, 3], fps) decoded by ffmpeg."""
  import imageio_ffmpeg  # pylint: disable=g-import-not-at-top
  reader = imageio_ffmpeg.read_frames(path)
  meta = next(reader)
  width, height = meta["size"]
  frames = np.stack([np.frombuffer(b, np.uint8).reshape(height, width, 3) for b in reader])
  return frames, meta["fps"]


def read_gif(path):
  """(distinct frames [n, H, W, 3], durations in ms) of a GIF, as Pillow reads it."""
  from PIL import Image  # pylint: disable=g-import-not-at-top
  from PIL import ImageSequence  # pylint: disable=g-import-not-at-top
  frames, durations = [], []
  with Image.open(path) as image:
    for frame in ImageSequence.Iterator(image):
      frames.append(np.asarray(frame.convert("RGB")))
      durations.append(frame.info["duration"])
  return np.stack(frames), durations


# --- Test runs. --------------------------------------------------------------------------------

def _toy_logdir(tmp_path):
  logdir = str(tmp_path / "run")
  shutil.copytree(os.path.join(TOY_RUN, "checkpoints"), os.path.join(logdir, "checkpoints"))
  return logdir


def _toy_config(logdir, *flags):
  return config_lib.config_from_argv(["--mode=test", "--level_name=toy/lit_side",
                                      f"--logdir={logdir}", "--seed=3", *flags])


def _results(logdir):
  with open(os.path.join(logdir, "evaluation", "results.json")) as f:
    return json.load(f)


def _half_lit(frame):
  """Which half of a toy frame is lit (0 left, 1 right); fails on anything else."""
  half = frame.shape[1] // 2
  left, right = frame[:, :half].mean(), frame[:, half:].mean()
  assert {round(left / 255), round(right / 255)} == {0, 1}, (left, right)
  assert min(left, right) < 30 and max(left, right) > 225, (left, right)
  return int(right > left)


def test_toy_test_run_records_the_first_n_episodes_as_mp4(tmp_path):
  logdir = _toy_logdir(tmp_path)
  lines = []
  result = evaluation.evaluate(
      _toy_config(logdir, "--num_actors=2", "--test_num_episodes=4",
                  "--record_video_episodes=3"), print_fn=lines.append)
  directory = os.path.join(logdir, "evaluation", "videos")
  names = sorted(os.listdir(directory))
  assert names == [f"toy_lit_side-episode-00{k}.mp4" for k in (1, 2, 3)]
  for name in names:
    frames, fps = read_mp4(os.path.join(directory, name))
    # Every toy episode is EPISODE_LENGTH steps: that many frames, 20x20 enlarged 8 times.
    assert frames.shape == (toy.EPISODE_LENGTH, 160, 160, 3)
    assert fps == toy.VIDEO_FPS
    for frame in frames:
      _half_lit(frame)  # The level's own picture: one half lit, the other dark.
  listed = result["summary"]["videos"]["files"]["toy/lit_side"]
  assert [os.path.basename(f["file"]) for f in listed] == names
  assert [f["frames"] for f in listed] == [toy.EPISODE_LENGTH] * 3
  assert _results(logdir)["summary"]["videos"]["files"] == {"toy/lit_side": listed}
  assert f"Videos: 3 files in {directory}" in lines
  assert not [n for n in os.listdir(directory) if n.startswith(".unfinished")]


def _counting_constructor(level_name, seed, test_mode):
  del level_name, test_mode
  return video_environments.CountingEnvironment, dict(seed=seed)


def test_each_video_holds_its_episode_frame_by_frame_and_n_above_the_episodes_records_all(
    tmp_path):
  logdir = _toy_logdir(tmp_path)
  result = evaluation.evaluate(
      _toy_config(logdir, "--num_actors=1", "--test_num_episodes=3",
                  "--record_video_episodes=10"),
      environment_constructor=_counting_constructor, print_fn=lambda line: None)
  listed = result["summary"]["videos"]["files"]["toy/lit_side"]
  assert [f["episode"] for f in listed] == [1, 2, 3]  # 10 asked, 3 played: all 3.
  for episode, entry in enumerate(listed):
    length = 3 + episode % 3
    assert entry["episode_length"] == length
    frames, _ = read_mp4(entry["file"])
    assert frames.shape == (length, 160, 160, 3)  # L frames of an episode of L steps.
    # Frame k is step k of this episode (H.264 keeps flat greys within a few levels).
    np.testing.assert_allclose(frames[..., 1].mean(axis=(1, 2)), 40 * np.arange(length),
                               atol=6)
    np.testing.assert_allclose(frames[..., 0].mean(axis=(1, 2)), 60 * episode, atol=6)


def test_without_an_mp4_encoder_the_videos_are_gifs_with_a_note(tmp_path, monkeypatch):
  monkeypatch.setitem(sys.modules, "imageio_ffmpeg", None)  # import imageio_ffmpeg fails.
  logdir = _toy_logdir(tmp_path)
  lines = []
  result = evaluation.evaluate(
      _toy_config(logdir, "--num_actors=1", "--test_num_episodes=2",
                  "--record_video_episodes=2"), print_fn=lines.append)
  assert any(line.startswith("Videos: writing GIFs (Pillow) instead of MP4") for line in lines)
  assert result["summary"]["videos"]["format"] == videos.GIF
  directory = os.path.join(logdir, "evaluation", "videos")
  assert sorted(os.listdir(directory)) == [f"toy_lit_side-episode-00{k}.gif" for k in (1, 2)]
  frame_ms = videos.gif_frame_ms(toy.VIDEO_FPS)
  for name in os.listdir(directory):
    frames, durations = read_gif(os.path.join(directory, name))
    # Pillow merges identical consecutive frames into a longer one: the frames the episode
    # had are the GIF's duration in frames.
    assert sum(durations) == toy.EPISODE_LENGTH * frame_ms
    assert all(d % frame_ms == 0 for d in durations)
    assert frames.shape[1:] == (160, 160, 3)
    for frame in frames:
      _half_lit(frame)


def test_a_level_that_cannot_draw_is_named_and_its_test_goes_on(tmp_path):
  logdir = _toy_logdir(tmp_path)
  lines = []
  result = evaluation.evaluate(
      _toy_config(logdir, "--num_actors=1", "--test_num_episodes=2",
                  "--record_video_episodes=1"),
      environment_constructor=lambda level, seed, test_mode: (
          video_environments.BlindEnvironment, dict(seed=seed)),
      print_fn=lines.append)
  assert result["rows"][0]["episodes"] == 2
  reason = result["summary"]["videos"]["not_recorded"]["toy/lit_side"]
  assert "BlindEnvironment has no picture" in reason
  assert any(line.startswith("Videos: toy/lit_side is not recorded: BlindEnvironment has no "
                             "picture") and "goes on without videos" in line for line in lines)
  assert not os.path.exists(os.path.join(logdir, "evaluation", "videos"))


def test_videos_that_cannot_be_written_are_named_and_the_test_goes_on(tmp_path):
  logdir = _toy_logdir(tmp_path)
  os.makedirs(os.path.join(logdir, "evaluation"))
  with open(os.path.join(logdir, "evaluation", "videos"), "w") as f:
    f.write("a file where the videos go")
  lines = []
  result = evaluation.evaluate(
      _toy_config(logdir, "--num_actors=1", "--test_num_episodes=2",
                  "--record_video_episodes=2"), print_fn=lines.append)
  assert result["rows"][0]["episodes"] == 2 and os.path.isfile(result["paths"][0])
  reason = result["summary"]["videos"]["not_recorded"]["toy/lit_side"]
  assert reason.startswith("its video could not be written (FileExistsError"), reason
  assert any(line.startswith("Videos: toy/lit_side is not recorded: its video could not be "
                             "written") for line in lines)


def test_gymnasium_cartpole_records_its_rgb_pictures_and_plays_the_same_episodes(tmp_path):
  logdir = str(tmp_path / "cartpole")
  config = config_lib.config_from_argv([
      "--mode=test", "--level_name=gym:CartPole-v1", f"--logdir={logdir}", "--seed=1",
      "--num_actors=1", "--envs_per_actor=2", "--test_num_episodes=2",
      "--record_video_episodes=2"])
  constructor = assembly.checked_environment_constructor(config, None, test_mode=True)
  agent, env = assembly.build_agent(config, constructor)
  env.close()
  assembly.make_checkpointer(config, agent, assembly.make_learner(config, agent)).save(0)
  unrecorded = evaluation.evaluate(dataclasses.replace(config, record_video_episodes=0),
                                   print_fn=lambda line: None)
  result = evaluation.evaluate(config, print_fn=lambda line: None)
  # The recording worker plays its environments in processes of their own
  # (evaluation_episodes.py _worker_loop) and asks them for pictures: the same episodes, the same scores.
  assert result["rows"] == unrecorded["rows"]
  listed = result["summary"]["videos"]["files"]["gym:CartPole-v1"]
  assert [f["episode"] for f in listed] == [1, 2]
  for entry in listed:
    frames, fps = read_mp4(entry["file"])
    # CartPole terminates (no time-limit step within 500 steps of an untrained agent): L frames
    # of its rgb_array picture, 400x600.
    assert frames.shape == (entry["episode_length"], 400, 600, 3)
    assert fps == 50  # CartPole's render_fps.


# --- The cutting of a stream into episodes (no environment). -----------------------------------

class FakeWriter:
  def __init__(self, log):
    self.frames, self.closed, self.discarded = [], False, False
    log.append(self)

  def append(self, picture):
    assert not self.closed
    self.frames.append(picture)

  def close(self):
    self.closed = True

  def discard(self):
    self.discarded = True


def _recording(num_episodes):
  writers, kept = [], []
  recording = videos.SlotRecording(num_episodes, lambda: FakeWriter(writers),
                                   lambda writer, index, info: kept.append(
                                       (index, info, writer.frames)))
  return recording, writers, kept


def _feed(recording, stream, report_late):
  """stream: [(picture, done, episode_step)], the first the group's initial output; a done
  output's episode is reported at that step (the Atari vector) or one step later (the
  EpisodeTracker of environment processes)."""
  recording.start(stream[0][0])
  late = None
  for picture, done, step in stream[1:]:
    recording.observe(picture, done, step)
    if late is not None:
      recording.episode_ended(late)
      late = None
    if done:
      if report_late:
        late = step
      else:
        recording.episode_ended(step)
  if late is not None:
    recording.episode_ended(late)
  recording.close()


def _stream(lengths):
  """Episodes of the given lengths; picture = (episode, step)."""
  stream = [((0, 0), True, 0)]
  for episode, length in enumerate(lengths):
    for step in range(1, length + 1):
      done = step == length
      stream.append(((episode + 1, 0) if done else (episode, step), done, step))
  return stream


@pytest.mark.parametrize("report_late", [False, True])
def test_a_stream_is_cut_into_its_episodes_whenever_they_are_reported(report_late):
  recording, writers, kept = _recording(2)
  _feed(recording, _stream([3, 5, 2]), report_late)
  assert [index for index, _, _ in kept] == [0, 1]
  assert [info for _, info, _ in kept] == [3, 5]
  assert kept[0][2] == [(0, 0), (0, 1), (0, 2)]
  assert kept[1][2] == [(1, 0), (1, 1), (1, 2), (1, 3), (1, 4)]
  assert len(writers) == 2  # The third episode was never asked for.
  assert not recording.wants_picture


def test_a_lost_life_is_not_a_cut_and_a_truncation_step_is_a_frame():
  recording, _, kept = _recording(2)
  # Episode 0: a `done` at step 2 that goes on at step 3 (Atari training's lost life), ends
  # at 4. Episode 1: truncated at step 2 (done False, its last observation), then the step
  # that starts the next episode (done, the same statistics).
  stream = [("a0", True, 0), ("a1", False, 1), ("a2", True, 2), ("a3", False, 3),
            ("b0", True, 4), ("b1", False, 1), ("b2", False, 2), ("c0", True, 2),
            ("c1", False, 1)]
  _feed(recording, stream, report_late=True)
  assert [frames for _, _, frames in kept] == [["a0", "a1", "a2", "a3"], ["b0", "b1", "b2"]]


def test_a_restart_drops_the_unfinished_and_unreported_episodes():
  recording, writers, kept = _recording(2)
  recording.start("x0")
  recording.observe("x1", False, 1)
  recording.restart()  # The environment died mid-episode.
  recording.start("y0")
  recording.observe("y1", False, 1)
  recording.observe("z0", True, 2)
  recording.observe("z1", False, 1)
  recording.episode_ended("y")
  recording.close()
  assert writers[0].discarded and [frames for _, _, frames in kept] == [["y0", "y1"]]
  assert writers[-1].discarded  # z's video, never reported.


def test_recorded_counts_follow_the_order_of_the_results():
  # 2 workers of 2 environments; 3 + 2 and 2 + 2 episodes; the first 6 recorded.
  assert videos.recorded_counts([[3, 2], [2, 2]], 6) == [[(3, 0), (2, 3)], [(1, 5), (0, 7)]]
  assert videos.recorded_counts([[1]], 5) == [[(1, 0)]]


def test_prepare_frame_enlarges_small_pictures_and_evens_their_sides():
  assert videos.prepare_frame(np.zeros((20, 20, 1), np.uint8)).shape == (160, 160, 3)
  assert videos.prepare_frame(np.zeros((84, 84, 3), np.uint8)).shape == (168, 168, 3)
  assert videos.prepare_frame(np.zeros((401, 601, 3), np.uint8)).shape == (402, 602, 3)
  with pytest.raises(videos.VideoError, match="uint8"):
    videos.prepare_frame(np.zeros((20, 20, 3), np.float32))


# --- Each environment's picture. ---------------------------------------------------------------

def test_atari_renders_the_emulators_rgb_screen_and_the_vector_its_observation():
  env = atari.AtariEnvironment("pong", seed=1, max_noops=0)
  env.initial()
  env.step(0)
  screen = env.render()
  assert screen.shape == (210, 160, 3) and screen.dtype == np.uint8
  assert len(np.unique(screen.reshape(-1, 3), axis=0)) > 2  # Colours, not grey.
  assert env.render_fps() == 15
  group = atari_vector.AtariVectorGroup("pong", seeds=[1, 2])
  output = group.initial()
  output = group.step(np.zeros(2, np.int32))
  picture = group.render(1)
  assert picture.shape == (84, 84, 3)
  np.testing.assert_array_equal(picture[..., 2], output.observation.frame[1, :, :, -1])
  group.close()


def test_dmlab_renders_its_rgb_observation():
  env = dmlab.DmLabEnvironment("explore_goal_locations_small", seed=1,
                               lab_module=fake_deepmind_lab)
  with pytest.raises(base.CannotRender, match="nothing observed"):
    env.render()
  output = env.initial()
  np.testing.assert_array_equal(env.render(), output.observation.frame)
  output = env.step(0)
  np.testing.assert_array_equal(env.render(), output.observation.frame)
  assert env.render_fps() == 15
  env.close()


@pytest.mark.slow
def test_mujoco_renders_its_rgb_array_picture():
  # In a process of its own, as test mode records it: OSMesa crashes next to TensorFlow.
  from scalable_agent_tf2.environments import mujoco  # pylint: disable=g-import-not-at-top
  env = process.EnvironmentProcess(mujoco.MujocoEnvironment,
                                   kwargs=dict(level_name="mujoco/hopper", seed=1))
  env.initial()
  picture = env.render()
  assert picture.shape == (480, 480, 3) and picture.dtype == np.uint8 and picture.std() > 0
  assert env.render_fps() == 125  # 1 / dt: frame_skip 4 x 0.002 s.
  env.close()


def test_mujoco_opengl_is_chosen_only_in_an_environment_process_without_display():
  from scalable_agent_tf2.environments import rendering  # pylint: disable=g-import-not-at-top
  choose = lambda environ, modules=(), child=True, osmesa=True: (
      rendering.prepare_headless_rendering(environ, lambda name: osmesa or None, modules, child),
      environ)
  assert choose({}) == ("osmesa", {"MUJOCO_GL": "osmesa", "SDL_VIDEODRIVER": "dummy"})
  assert choose({}, osmesa=False)[0] == "egl"
  # Never next to TensorFlow (OSMesa aborts MuJoCo there), nor in the main process.
  assert choose({}, modules=("tensorflow",)) == (None, {})
  assert choose({}, child=False) == (None, {})
  # A display, a user's choice, or a MuJoCo already imported are left as they are.
  assert choose({"DISPLAY": ":0"}) == (None, {"DISPLAY": ":0"})
  assert choose({"MUJOCO_GL": "egl"})[1]["MUJOCO_GL"] == "egl"
  assert choose({}, modules=("mujoco",))[0] is None


def test_without_any_encoder_no_videos_and_the_console_says_so(monkeypatch):
  monkeypatch.setitem(sys.modules, "imageio_ffmpeg", None)
  monkeypatch.setitem(sys.modules, "PIL", None)
  monkeypatch.setitem(sys.modules, "PIL.Image", None)
  video_format, note = videos.choose_format()
  assert video_format is None
  assert note.startswith("Videos: none will be recorded: imageio-ffmpeg is not usable here")
  assert "pip install -r requirements-runtime.txt" in note
  summary = evaluation_videos.videos_summary({}, None, "/d/evaluation/videos")
  assert evaluation_videos.videos_lines(summary) == [
      "Videos: none recorded (no encoder; see the note above)."]


def test_the_console_names_each_level_or_sums_a_suite_up():
  files = lambda n: [dict(episode=k, width=160, height=210, fps=15.0) for k in range(1, n + 1)]
  few = dict(directory="/d", format=videos.MP4, files={"atari/pong": files(2)},
             not_recorded={})
  assert evaluation_videos.videos_lines(few) == [
      "Videos: atari/pong episodes 1, 2 (2 MP4 files of 160x210 at 15 frames/s)",
      "Videos: 2 files in /d"]
  one = dict(directory="/d", format=videos.MP4, files={"atari/pong": files(1)},
             not_recorded={})
  assert evaluation_videos.videos_lines(one) == [
      "Videos: atari/pong episode 1 (1 MP4 file of 160x210 at 15 frames/s)",
      "Videos: 1 file in /d"]
  many = dict(directory="/d", format=videos.GIF,
              files={f"atari/game{k}": files(3) for k in range(5)},
              not_recorded={"atari/game4": "its video could not be written"})
  assert evaluation_videos.videos_lines(many) == [
      "Videos: 15 files in /d; not recorded: atari/game4 (see above)"]


def test_videos_outside_test_mode_are_refused():
  with pytest.raises(ValueError, match="records test episodes: add --mode=test"):
    config_lib.config_from_argv(["--level_name=toy/lit_side", "--record_video_episodes=2"])
  assert config_lib.config_from_argv(["--mode=test", "--level_name=toy/lit_side",
                                      "--record_video_episodes=2"]).record_video_episodes == 2
