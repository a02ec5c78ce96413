"""Videos of test episodes (--mode=test --record_video_episodes=N): files, encoders, and the
cutting of one environment's stream of pictures into episodes.

    <logdir>/evaluation/videos/<level>-episode-<k>.mp4     k = 001, 002, ... per level

The level's name is written with every character other than letters, digits, "-", "_" and
"." as "_" ("atari/pong" -> atari_pong-episode-001.mp4, "gym:CartPole-v1" ->
gym_CartPole-v1-episode-001.mp4). Episode k is the k-th of the level's episodes in the order
test mode lists them (evaluation_episodes.play_levels: by worker, environment, then episode).

Frames. One picture per observation of the episode the agent was given: an episode of L agent
steps is L frames, from its first observation to the one at which it took its last action
(an environment resets itself within the step that ends an episode, base.py, so the state
that last action led to is never observed); L + 1 for a gymnasium episode cut by a time limit,
whose last observation is a step of its own (truncation.py). Pictures smaller than MIN_SIDE
pixels on their short side are enlarged by repeating pixels (a 20x20 toy frame shows as
160x160), and an odd side is padded with one black row or column (H.264's 4:2:0 colour needs
even sides). A video plays at the environment's own speed (Environment.render_fps: Atari and
DeepMind Lab 15 agent steps per second, the MuJoCo tasks 1 / dt, gymnasium's render_fps),
DEFAULT_FPS where it has none.

Encoders. MP4 (H.264) through imageio-ffmpeg (requirements-runtime.txt; it ships its own
ffmpeg binary), streamed: one ffmpeg process per episode being recorded, so a long episode
never sits in memory. Where imageio-ffmpeg is not installed, GIF through Pillow, with a note:
a GIF is kept in memory until its episode ends (one byte per pixel and frame) and Pillow
merges identical consecutive frames into one longer frame (the GIF's duration still counts
every frame: frames x GIF_FRAME_MS(fps)).

numpy only at module level (no TensorFlow): imageio_ffmpeg and PIL are imported when used.
"""
import collections
import errno
import math
import os
import re
import threading

import numpy as np

SUBDIRECTORY = "videos"
MP4, GIF = "mp4", "gif"
# A video's speed where the environment has no time of its own (Atari's real time too).
DEFAULT_FPS = 15.0
# Pictures smaller than this on their short side are enlarged by repeating pixels, so that
# 20x20 toy frames and 84x84 Atari observations are not stamps on a screen.
MIN_SIDE = 160
# Browsers play GIF frames shorter than 20 ms at 100 ms; GIF counts time in 10 ms.
_GIF_MIN_MS = 20
MP4_PACKAGE = "imageio-ffmpeg"


class VideoError(RuntimeError):
  """A picture that cannot go into a video (not RGB, another size than the episode's first)."""


# Errors of a filesystem that refuses what is written to it, whoever wrote (this process, or
# ffmpeg, whose error reaches us as a broken pipe with its own message).
_DISK_ERRNOS = (errno.ENOSPC, errno.EDQUOT, errno.EROFS)


def disk_refusal(error):
  """"[Errno 28] No space left on device" when `error` (a video's write error) comes from a
  full or read-only filesystem, else None."""
  if isinstance(error, OSError) and error.errno in _DISK_ERRNOS:
    return f"[Errno {error.errno}] {os.strerror(error.errno)}"
  return next((f"[Errno {number}] {os.strerror(number)}" for number in _DISK_ERRNOS
               if os.strerror(number) in str(error)), None)


def file_stem(level_name, episode):
  """"atari/pong", 3 -> "atari_pong-episode-003" (episode counts from 1)."""
  return f"{re.sub(r'[^A-Za-z0-9._-]', '_', level_name)}-episode-{episode:03d}"


def _mp4_encoder():
  """imageio_ffmpeg with its ffmpeg binary, or ImportError / RuntimeError."""
  import imageio_ffmpeg  # pylint: disable=g-import-not-at-top
  imageio_ffmpeg.get_ffmpeg_exe()  # Raises RuntimeError when the binary is missing.
  return imageio_ffmpeg


def choose_format():
  """(MP4 / GIF / None, a note for the console or None): MP4 where imageio-ffmpeg works,
  else GIF where Pillow is installed, else None (no videos)."""
  try:
    _mp4_encoder()
    return MP4, None
  except (ImportError, RuntimeError) as error:
    missing = f"{MP4_PACKAGE} is not usable here ({type(error).__name__}: {error})"
  try:
    import PIL.Image  # noqa: F401 (whether Pillow is there is the question)
  except ImportError:
    return None, (f"Videos: none will be recorded: {missing} and Pillow (for GIFs) is not "
                  f"installed. Install one: pip install -r requirements-runtime.txt.")
  return GIF, (f"Videos: writing GIFs (Pillow) instead of MP4: {missing}. pip install "
               f"-r requirements-runtime.txt gives MP4.")


def prepare_frame(frame):
  """An environment's picture as the video's frame: RGB uint8 [H', W', 3], enlarged to at
  least MIN_SIDE on its short side by repeating pixels, with even sides (module docstring).

  Raises:
    VideoError: not a picture (uint8 [H, W, 3], [H, W, 1] or [H, W]).
  """
  frame = np.asarray(frame)
  if frame.ndim == 2:
    frame = frame[:, :, np.newaxis]
  if frame.dtype != np.uint8 or frame.ndim != 3 or frame.shape[-1] not in (1, 3) or \
      min(frame.shape[:2]) < 1:
    raise VideoError(f"a picture must be uint8 [H, W, 3] (RGB) or [H, W, 1] (grey); got "
                     f"{frame.dtype} of shape {frame.shape}.")
  if frame.shape[-1] == 1:
    frame = np.repeat(frame, 3, axis=-1)
  scale = math.ceil(MIN_SIDE / min(frame.shape[:2]))
  if scale > 1:
    frame = np.repeat(np.repeat(frame, scale, axis=0), scale, axis=1)
  pad_rows, pad_columns = frame.shape[0] % 2, frame.shape[1] % 2
  if pad_rows or pad_columns:
    frame = np.pad(frame, ((0, pad_rows), (0, pad_columns), (0, 0)))
  return np.ascontiguousarray(frame)


def gif_frame_ms(fps):
  """A GIF frame's duration in ms: 1000 / fps in GIF's 10 ms steps, at least 20 ms."""
  return max(_GIF_MIN_MS, 10 * round(100.0 / fps))


class _Writer:
  """One video file being written: append(picture), close() (the file is complete) or
  discard() (no file is left). num_frames, frame_shape (H', W'), path."""

  def __init__(self, path, fps):
    self.path = path
    self.fps = float(fps)
    self.num_frames = 0
    self.frame_shape = None

  def append(self, picture):
    frame = prepare_frame(picture)
    if self.frame_shape is None:
      self.frame_shape = frame.shape[:2]
      self._start(frame.shape[:2])
    elif frame.shape[:2] != self.frame_shape:
      raise VideoError(f"a picture of {frame.shape[:2]} pixels after pictures of "
                       f"{self.frame_shape}: a video's frames all have one size.")
    self._write(frame)
    self.num_frames += 1

  def discard(self):
    try:
      self._abort()
    finally:
      if os.path.exists(self.path):
        os.unlink(self.path)

  def _abort(self):
    self.close()


class Mp4Writer(_Writer):
  """H.264 MP4 through imageio-ffmpeg's ffmpeg, frames streamed to it as they come."""

  def _start(self, shape):
    self._ffmpeg = _mp4_encoder().write_frames(
        self.path, (shape[1], shape[0]), fps=self.fps, codec="libx264", pix_fmt_out="yuv420p",
        macro_block_size=1, ffmpeg_log_level="error")  # prepare_frame made the sides even.
    self._ffmpeg.send(None)  # Starts ffmpeg.

  def _write(self, frame):
    self._ffmpeg.send(frame)

  def close(self):
    ffmpeg, self._ffmpeg = getattr(self, "_ffmpeg", None), None
    if ffmpeg is not None:
      ffmpeg.close()  # Waits for ffmpeg to finish the file.


class GifWriter(_Writer):
  """GIF through Pillow: each frame kept as a palette image until close() writes them."""

  def _start(self, shape):
    del shape
    self._images = []

  def _write(self, frame):
    from PIL import Image  # pylint: disable=g-import-not-at-top
    self._images.append(Image.fromarray(frame).quantize(colors=256))

  def _abort(self):
    self._images = None

  def close(self):
    images, self._images = getattr(self, "_images", None), None
    if images:
      images[0].save(self.path, save_all=True, append_images=images[1:], loop=0,
                     duration=gif_frame_ms(self.fps), optimize=False)


WRITERS = {MP4: Mp4Writer, GIF: GifWriter}


class SlotRecording:
  """One environment's pictures cut into episodes, each into a video of its own.

  The actor's stream: start(picture) at the group's first output, then observe(picture, done,
  episode_step) after every step; episode_ended(info) when the loop reports the environment's
  next episode (one of the first num_episodes). Episodes are cut where an output is `done`
  and the next output starts a new count of steps (actor.EpisodeTracker's rule: a lost life
  in Atari training is `done` without an end), so the cut is known one step after the done
  output; a report may come before that (the Atari vector reports at the done step) or after.
  Each report takes the oldest cut video. Pictures are asked for (wants_picture) only while an
  episode that will be kept is being recorded.
  """

  def __init__(self, num_episodes, open_writer, keep):
    """Args:
      num_episodes: how many of this environment's first episodes to record.
      open_writer: callable() -> a new _Writer (a file of its own).
      keep: callable(writer, index, info) for the index-th (from 0) recorded episode of this
        environment, its video complete; `info` is what episode_ended was given.
    """
    self._num_episodes = num_episodes
    self._open_writer = open_writer
    self._keep = keep
    self._kept = 0
    self._writer = None
    self._held = None  # (picture, episode_step) after a done output: which episode's?
    self._cut = collections.deque()  # Complete videos waiting for their episode's report.
    self._reported = collections.deque()  # Reports waiting for their episode's video.
    self.missed = 0  # Episodes reported whose video was lost (an environment restarted).

  @property
  def wants_picture(self):
    return self._writer is not None

  def start(self, picture):
    """The first output of a (new) group of environments: an episode starts."""
    self._discard_partial()
    self._begin(picture)

  def observe(self, picture, done, episode_step):
    """The picture after a step whose output had `done` and `episode_step`."""
    if self._writer is None:
      return
    if self._held is not None:
      held, done_step = self._held
      self._held = None
      if episode_step != done_step + 1:  # The done output ended an episode.
        self._end_video()
        self._begin(held)
      elif self._writer is not None:
        self._writer.append(held)
    if self._writer is None:
      return
    if done:
      self._held = (picture, int(episode_step))
    else:
      self._writer.append(picture)

  def episode_ended(self, info=None):
    """The environment's next episode ended (reported by the loop)."""
    self._reported.append(info)
    self._match()

  def restart(self):
    """The group was replaced: its unfinished episodes are dropped (actor.EnvironmentLoop)."""
    if self._held is not None:  # An episode that ended, reported or not.
      self._held = None
      self._end_video()
    self._discard_partial()

  def abandon(self):
    """Stops recording until start(): the environment failed while drawing."""
    self._held = None
    if self._writer is not None:
      self._writer.discard()
      self._writer = None

  def close(self):
    """The end of play: a done output seen last ended its episode; the rest is discarded."""
    self.restart()
    if self._writer is not None:
      self._writer.discard()
      self._writer = None

  def _begin(self, picture):
    if self._kept + len(self._cut) + len(self._reported) < self._num_episodes:
      self._writer = self._open_writer()
      self._writer.append(picture)
    else:
      self._writer = None

  def _end_video(self):
    writer, self._writer = self._writer, None
    if writer is not None:
      writer.close()
      self._cut.append(writer)
      self._match()

  def _match(self):
    while self._cut and self._reported:
      writer, info = self._cut.popleft(), self._reported.popleft()
      self._keep(writer, self._kept, info)
      self._kept += 1

  def _discard_partial(self):
    """Forgets the videos and reports that can no longer be matched."""
    while self._cut:
      self._cut.popleft().discard()
    self.missed += len(self._reported)
    self._kept += len(self._reported)  # Their episodes keep their numbers, without a video.
    self._reported.clear()
    if self._writer is not None:
      self._writer.discard()
      self._writer = None


class LevelVideos:
  """The videos of one level: where they go, which were written, and why none could be.

  Shared by the level's workers (thread-safe). files: a list of dicts (episode, file, frames,
  height, width, fps, episode_return, episode_length), by episode once `sorted_files()`.
  """

  def __init__(self, level_name, directory, video_format, print_fn=print):
    self.level_name = level_name
    self.directory = directory
    self.format = video_format
    self._print = print_fn
    self._lock = threading.Lock()
    self._files = []
    self._count = 0
    self.reason = None  # Why this level has no (more) videos.
    self.disk_refusal = None  # disk_refusal() of the write that stopped them, if that.

  @property
  def active(self):
    return self.reason is None

  def stop(self, reason):
    """The level's videos end here (the first reason is kept and printed)."""
    with self._lock:
      if self.reason is not None:
        return
      self.reason = str(reason)
    self._print(f"Videos: {self.level_name} is not recorded: {self.reason} Its test goes on "
                "without videos.")

  def cannot_write(self, error):
    """A video of the level could not be written: its videos stop (a full or read-only disk
    is kept in disk_refusal: the test then ends with an error once its results are written)."""
    self.disk_refusal = self.disk_refusal or disk_refusal(error)
    self.stop(f"its video could not be written ({type(error).__name__}: {error}).")

  def open_writer(self, fps):
    """A writer on a hidden unfinished file of this level's (renamed when kept)."""
    with self._lock:
      self._count += 1
      count = self._count
    os.makedirs(self.directory, exist_ok=True)
    path = os.path.join(self.directory, f".unfinished-{file_stem(self.level_name, count)}."
                        f"{self.format}")
    return WRITERS[self.format](path, fps or DEFAULT_FPS)

  def keep(self, writer, episode, episode_return, episode_length):
    """Names the complete video of the level's episode `episode` (from 1)."""
    path = os.path.join(self.directory, f"{file_stem(self.level_name, episode)}.{self.format}")
    os.replace(writer.path, path)
    with self._lock:
      self._files.append(dict(episode=episode, file=path, frames=writer.num_frames,
                              height=int(writer.frame_shape[0]),
                              width=int(writer.frame_shape[1]), fps=writer.fps,
                              episode_return=float(episode_return),
                              episode_length=int(episode_length)))

  def sorted_files(self):
    with self._lock:
      return sorted(self._files, key=lambda f: f["episode"])


def recorded_counts(quotas_by_worker, num_recorded):
  """How many of each environment's first episodes to record, and the level-wide number
  (from 0) of its first episode, so that the level's first num_recorded episodes in
  evaluation's order (by worker, environment, episode) are recorded.

  Args:
    quotas_by_worker: [[episodes of each environment of the worker]] per worker.
    num_recorded: N (more than the level's episodes records them all).

  Returns:
    [[(count, first episode)]] in the same layout.
  """
  result, offset = [], 0
  for quotas in quotas_by_worker:
    row = []
    for quota in quotas:
      row.append((max(0, min(quota, num_recorded - offset)), offset))
      offset += quota
    result.append(row)
  return result
