"""--mode=test's videos (--record_video_episodes=N): the first N episodes of each level, in
evaluation_episodes.play_levels' order, recorded under logdir/evaluation/videos/
(runfiles/videos.py: names, frames, encoders).

The worker that plays an episode to record asks its environment for a picture after every
step (base.Environment.render: through the pipe for an environment process, directly for a
group in this process), only for that environment and only while the episode is recorded.
Rendering changes no observation, so a recorded test plays and scores the same episodes as
one without videos. A level that cannot draw (base.CannotRender) is named and plays on
without videos. results.json's summary lists the files ("videos").
"""
import functools
import os

from scalable_agent_tf2.acting import actor as actor_lib
from scalable_agent_tf2.environments.base import CannotRender
from scalable_agent_tf2.runfiles import videos as videos_lib


class WorkerVideos:
  """The videos of one worker's environments: a runfiles/videos.SlotRecording for each slot
  with episodes to record, fed with the loop's pictures of those slots after every step.

  A level that cannot draw (CannotRender) or whose videos cannot be written stops its videos
  (LevelVideos.stop names it) and plays on; an environment that fails while drawing loses the
  episode's video only (its restart starts new episodes anyway)."""

  def __init__(self, loop, level_videos, counts):
    """counts: [(episodes to record, the level-wide number of its first episode)] per slot
    (videos_lib.recorded_counts)."""
    self._loop = loop
    self._level = level_videos
    try:
      self._fps = loop.render_fps() or videos_lib.DEFAULT_FPS
    except actor_lib.ENVIRONMENT_FAILURES:  # Its step will restart it; the speed is no loss.
      self._fps = videos_lib.DEFAULT_FPS
    self._first = {slot: first for slot, (count, first) in enumerate(counts) if count}
    self._counts = {slot: count for slot, (count, _) in enumerate(counts) if count}
    self._slots = {slot: videos_lib.SlotRecording(count, self._open_writer,
                                                  functools.partial(self._keep, slot))
                   for slot, (count, _) in enumerate(counts) if count}
    self._start()

  def _open_writer(self):
    return self._level.open_writer(self._fps)

  def _keep(self, slot, writer, index, info):
    episode_return, episode_length = info
    self._level.keep(writer, self._first[slot] + index + 1, episode_return, episode_length)

  def _picture(self, slot):
    """The loop's picture of `slot`, or None: the level cannot draw (its videos stop) or the
    environment failed while drawing (this slot's episode is not recorded)."""
    try:
      return self._loop.render(slot)
    except CannotRender as error:
      self._level.stop(str(error))
    except actor_lib.ENVIRONMENT_FAILURES:
      self._slots[slot].abandon()
    return None

  def _each(self, act, only_wanted=False):
    """act(slot, SlotRecording, its picture) for every recorded slot (with `only_wanted`,
    those that want one); a file that cannot be written stops the level's videos."""
    for slot, recording in self._slots.items():
      if not self._level.active:
        self._stop()
        return
      if only_wanted and not recording.wants_picture:
        continue
      picture = self._picture(slot)
      if picture is None:
        continue
      try:
        act(slot, recording, picture)
      except (OSError, videos_lib.VideoError, RuntimeError) as error:
        self._level.cannot_write(error)

  def _start(self):
    self._each(lambda slot, recording, picture: recording.start(picture))

  def stepped(self):
    output = self._loop.env_output
    self._each(lambda slot, recording, picture: recording.observe(
        picture, bool(output.done[slot]), int(output.episode_step[slot])), only_wanted=True)

  def restarted(self):
    for recording in self._slots.values():
      recording.restart()
    self._start()

  def episode_ended(self, slot, index, episode_return, episode_length):
    """The slot's index-th (from 0) counted episode ended."""
    recording = self._slots.get(slot)
    if recording is not None and self._level.active and index < self._counts[slot]:
      try:
        recording.episode_ended((float(episode_return), int(episode_length)))
      except (OSError, videos_lib.VideoError, RuntimeError) as error:
        self._level.cannot_write(error)

  def _stop(self):
    """The level's videos stopped: this worker's unfinished ones are discarded."""
    for recording in self._slots.values():
      recording.abandon()
      recording.restart()
    self._slots = {}

  def close(self):
    for recording in self._slots.values():
      try:
        recording.close()
      except (OSError, videos_lib.VideoError, RuntimeError) as error:
        self._level.cannot_write(error)


def level_videos(config, results_dir, print_fn):
  """({level: LevelVideos}, format) for --record_video_episodes; ({}, None) without it or
  without an encoder (choose_format's note printed)."""
  if not config.record_video_episodes:
    return {}, None
  video_format, note = videos_lib.choose_format()
  if note:
    print_fn(note)
  if video_format is None:
    return {}, None
  directory = os.path.join(results_dir, videos_lib.SUBDIRECTORY)
  return {level: videos_lib.LevelVideos(level, directory, video_format, print_fn)
          for level in config.levels}, video_format


def videos_summary(level_videos, video_format, directory):
  """results.json's "videos": directory, format (None: no encoder), files per level (episode,
  file, frames, height, width, fps, episode_return, episode_length), and the levels not
  recorded with why."""
  return dict(directory=directory, format=video_format,
              files={level: v.sorted_files() for level, v in level_videos.items()},
              not_recorded={level: v.reason for level, v in level_videos.items()
                            if v.reason is not None})


def _counted(count, noun, with_count=True):
  """"1 file", "2 files" (or the noun alone, in its number)."""
  word = noun if count == 1 else noun + "s"
  return f"{count} {word}" if with_count else word


def videos_lines(summary):
  """The console's lines on where the videos went (none without a summary)."""
  if not summary:
    return []
  files = [f for level_files in summary["files"].values() for f in level_files]
  if summary["format"] is None:
    return ["Videos: none recorded (no encoder; see the note above)."]
  lines = []
  if len(summary["files"]) <= 4:
    for level, level_files in summary["files"].items():
      if level_files:
        episodes = ", ".join(str(f["episode"]) for f in level_files)
        count = len(level_files)
        lines.append(f"Videos: {level} {_counted(count, 'episode', False)} {episodes} "
                     f"({_counted(count, summary['format'].upper() + ' file')} of "
                     f"{level_files[0]['width']}x{level_files[0]['height']} at "
                     f"{level_files[0]['fps']:g} frames/s)")
  lines.append(f"Videos: {_counted(len(files), 'file')} in {summary['directory']}"
               + (f"; not recorded: {', '.join(sorted(summary['not_recorded']))} (see above)"
                  if summary["not_recorded"] else ""))
  return lines
