"""--mode=test: play the latest checkpoint's sampled policy and print the paper's tables.

Protocol (paper sections 5.3.1 and 5.3.2): --test_num_episodes episodes per level (paper:
500 on DMLab, Table 3); DMLab levels in their test configuration (the test variant of the two
levels that have one, allowHoldOutLevels, mixerSeed 0x600D5EED); Atari episodes are whole
games (no life-loss termination) starting with up to 30 no-ops (Table 4).

Each level's episodes are split over a fixed set of workers (--num_actors; each a group of
environments as in training, assembly.environment_group_size, with one action sampler per
environment, seeded from --seed, the level, the worker's number and the environment's slot),
and a worker's episodes over its environments (each plays its own quota, so short episodes are
not favoured); the inference of all workers is batched. An environment's actions do not depend
on the batching (policies.py), so a seeded test run repeats its results (up to float rounding in
batched inference).

Results go to logdir/evaluation/results.json and results.csv. That directory is checked before
any episode is played; the tables are printed before the files are written, so a write that
fails afterwards loses nothing shown (ResultsNotWritten says where it could not write).

A level whose environment cannot start or reset here (environments.LevelCannotRun) is left out
of the tables and named, with the other such levels, in one training.LevelsCannotRun after
the results of the levels that played are printed and written.

Videos (--record_video_episodes=N): the first N episodes of each level (in the order above)
are recorded under logdir/evaluation/videos/ (runfiles/videos.py: names, frames, encoders).
The worker that plays an episode to record asks its environment for a picture after every
step (base.Environment.render: through the pipe for an environment process, directly for a
group in this process), only for that environment and only while the episode is recorded.
Rendering changes no observation, so a recorded test plays and scores the same episodes as
one without videos. A level that cannot draw (base.CannotRender) is named and plays on
without videos. results.json's summary lists the files ("videos").
"""
import csv
import functools
import json
import math
import os
import threading
import time

import numpy as np

from scalable_agent_tf2.acting import actor as actor_lib
from scalable_agent_tf2.run import assembly
from scalable_agent_tf2.run import monitoring
from scalable_agent_tf2.acting import policies
from scalable_agent_tf2.runfiles import run_directory
from scalable_agent_tf2.configuration import suites
from scalable_agent_tf2.run import training
from scalable_agent_tf2.environments import LevelCannotRun
from scalable_agent_tf2.environments import families
from scalable_agent_tf2.environments.base import CannotRender
from scalable_agent_tf2.environments.families import base as family_base
from scalable_agent_tf2.runfiles import videos as videos_lib

RESULTS_SUBDIR = "evaluation"


class ResultsNotWritten(run_directory.RunDirectoryError):
  """The results were printed but could not be written (the message says where)."""


class TestProgress:
  """Episodes done per level while a test plays; a console line at most every `every_secs`."""

  def __init__(self, levels, num_episodes, print_fn, every_secs, clock=time.monotonic):
    self._done = {level: 0 for level in levels}
    self._num_episodes = num_episodes
    self._print = print_fn
    self._every_secs = every_secs
    self._clock = clock
    self._last = clock()
    # (time, episodes done) at the first episode's end: the time to go is measured from there,
    # so the start-up (environments starting, the first inference) is not taken for play.
    self._first = None
    self._lock = threading.Lock()

  def record(self, level):
    """One more episode of `level` done; prints the progress line when one is due."""
    with self._lock:
      self._done[level] += 1
      now = self._clock()
      if self._first is None:
        self._first = (now, sum(self._done.values()))
      if now - self._last < self._every_secs:
        return
      self._last = now
      line = self.line(now)
    self._print(line)

  def line(self, now):
    """e.g. "test: 30/100 episodes (pong 20/50, breakout 10/50), about 2 min to go"."""
    done, total = sum(self._done.values()), self._num_episodes * len(self._done)
    if len(self._done) <= 4:
      detail = ", ".join(f"{level} {n}/{self._num_episodes}" for level, n in self._done.items())
    else:
      finished = sum(n >= self._num_episodes for n in self._done.values())
      detail = f"{finished}/{len(self._done)} levels done"
    eta = ""
    if self._first is not None and done > self._first[1] and now > self._first[0]:
      seconds = (now - self._first[0]) * (total - done) / (done - self._first[1])
      eta = (f", about {seconds / 60:.0f} min to go" if seconds >= 60
             else f", about {seconds:.0f} s to go")
    return f"test: {done}/{total} episodes ({detail}){eta}"


def split_episodes(num_episodes, num_workers):
  """Episodes per worker: as even as possible, the first workers take the remainder."""
  num_workers = max(1, min(num_workers, num_episodes))
  base, extra = divmod(num_episodes, num_workers)
  return [base + (1 if k < extra else 0) for k in range(num_workers)]


def _play(make_loop, quotas, episodes_by_slot, cannot_run, on_episode=None,
          make_videos=None):
  """Steps a worker's loop until each environment slot has finished its quota of episodes
  (a slot's later episodes are not recorded: counting the first episodes of the whole group
  would favour short episodes); a level that cannot run goes to `cannot_run` (level ->
  reason) instead. on_episode(level) is called for each recorded episode; make_videos(loop)
  -> the worker's _WorkerVideos, or None."""
  try:
    loop = make_loop()
  except LevelCannotRun as error:
    cannot_run[error.level_name] = error.reason
    return
  recording = None
  try:
    recording = make_videos(loop) if make_videos is not None else None
    while any(len(e) < q for e, q in zip(episodes_by_slot, quotas)):
      try:
        loop.step()
      except actor_lib.EnvironmentRestarted:
        if recording is not None:
          recording.restarted()
        continue  # The unfinished episodes are dropped; new ones start.
      except LevelCannotRun as error:
        cannot_run[error.level_name] = error.reason
        return
      if recording is not None:
        recording.stepped()
      for slot, level, episode_return, episode_step in loop.finished_episodes:
        if len(episodes_by_slot[slot]) < quotas[slot]:
          if recording is not None:
            recording.episode_ended(slot, len(episodes_by_slot[slot]), episode_return,
                                    episode_step)
          episodes_by_slot[slot].append((float(episode_return), int(episode_step)))
          if on_episode is not None:
            on_episode(level)
  finally:
    try:
      if recording is not None:
        recording.close()
    finally:
      loop.close()


class _WorkerVideos:
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
        self._level.stop(f"its video could not be written ({type(error).__name__}: {error}).")

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
        self._level.stop(f"its video could not be written ({type(error).__name__}: {error}).")

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
        self._level.stop(f"its video could not be written ({type(error).__name__}: {error}).")


def play_levels(policy, levels, num_episodes, num_workers, seed, environment_constructor,
                print_fn=print, config=None, progress=None, cannot_run=None, videos=None,
                record_episodes=0):
  """Episode returns of the policy on each level.

  Args:
    policy: policies.BatchedPolicy.
    levels: level names (training names; environments get test_mode=True).
    num_episodes: episodes per level.
    num_workers: actor threads, over all levels; each plays a group of environments
      (assembly.environment_group_size; 1 without `config`) and splits its episodes
      between them.
    seed: int.
    environment_constructor: callable(level_name, seed, test_mode) -> (constructor, kwargs).
    config: the run's config, which decides the environment groups; None: one environment
      process per worker.
    progress: a TestProgress told of every episode, or None.
    cannot_run: a dict that receives level -> reason for levels that cannot run here (their
      lists of episodes stay short or empty); None: such a level raises LevelCannotRun.
    videos: dict level -> runfiles/videos.LevelVideos of the levels to record (None: none).
    record_episodes: the first this many episodes of each of those levels are recorded, in
      the order returned (more than num_episodes: all).

  Returns:
    dict level -> list of (episode_return, episode_length), ordered by worker, environment,
    then episode.
  """
  raise_cannot_run = cannot_run is None
  cannot_run = {} if cannot_run is None else cannot_run
  per_level_workers = max(1, num_workers // len(levels))
  group_size = 1 if config is None else assembly.environment_group_size(config)
  tasks, results, jobs = {}, {}, []
  videos = videos or {}
  for level_index, level in enumerate(levels):
    quotas_by_worker = [split_episodes(count, group_size)
                        for count in split_episodes(num_episodes, per_level_workers)]
    recorded = videos_lib.recorded_counts(quotas_by_worker, record_episodes)
    for worker, quotas in enumerate(quotas_by_worker):
      episodes_by_slot = [[] for _ in quotas]
      jobs.append((level, worker))
      results[(level, worker)] = episodes_by_slot
      worker_seed = assembly.derive_seed(seed, 1_000_003, level_index, worker)
      make_videos = None
      if level in videos and any(count for count, _ in recorded[worker]):
        make_videos = functools.partial(_WorkerVideos, level_videos=videos[level],
                                        counts=recorded[worker])
      make_loop = functools.partial(_worker_loop, policy, level, worker_seed, len(quotas),
                                    environment_constructor, config, print_fn,
                                    draws=make_videos is not None)
      tasks[f"{level}-{worker}"] = functools.partial(
          _play, make_loop, quotas, episodes_by_slot, cannot_run,
          progress.record if progress is not None else None, make_videos)
  assembly.run_concurrently(tasks, thread_prefix="evaluation-")
  if raise_cannot_run and cannot_run:
    level = sorted(cannot_run)[0]
    raise LevelCannotRun(level, cannot_run[level])
  by_level = {level: [] for level in levels}
  for level, worker in jobs:
    for episodes in results[(level, worker)]:
      by_level[level].extend(episodes)
  return by_level


def _worker_loop(policy, level, worker_seed, group_size, environment_constructor, config,
                 print_fn, draws=False):
  """An evaluation worker's EnvironmentLoop: group_size environments of `level` in test mode,
  seeded from worker_seed (environment slot, restart) and one action generator per slot.

  draws: the worker records videos. A group the family runs in this process then runs each
  environment in a process of its own (the same environments, seeds and actions): drawing can
  load libraries that crash next to TensorFlow (MuJoCo's OSMesa renderer: a segmentation
  fault at the first picture in a process that imported TensorFlow, measured)."""
  if config is None or not config.uses_environment_groups:
    seeds = lambda attempt: [assembly.derive_seed(worker_seed, attempt)]
    factory = lambda attempt: assembly.start_environment(
        environment_constructor, level, seeds(attempt)[0], test_mode=True)
  else:
    seeds = lambda attempt: [assembly.derive_seed(worker_seed, slot, attempt)
                             for slot in range(group_size)]
    factory = assembly.group_factory(config, environment_constructor, level, seeds,
                                     test_mode=True)
    if draws and config.runs_as == family_base.IN_PROCESS_GROUP:
      factory = lambda attempt: _start_processes(environment_constructor, level,
                                                 seeds(attempt))
  rngs = [np.random.default_rng([worker_seed, 2, slot]) for slot in range(group_size)]
  return actor_lib.EnvironmentLoop(
      factory, policy, rngs, level,
      on_restart=lambda lvl, e: print_fn(f"Environment for {lvl} restarted: {e}"))


def _start_processes(environment_constructor, level, seeds):
  """One environment process per seed (all closed if one fails to start)."""
  envs = []
  try:
    for seed in seeds:
      envs.append(assembly.start_environment(environment_constructor, level, seed,
                                             test_mode=True))
  except BaseException:
    actor_lib.close_all(envs)
    raise
  return envs


def level_rows(level_episodes):
  """Per-level result rows: level, episodes, mean/std return, references, normalised score."""
  rows = []
  for level, episodes in level_episodes.items():
    returns = np.array([r for r, _ in episodes], np.float64)
    row = dict(level=level, episodes=len(returns), mean_return=float(np.mean(returns)),
               std_return=float(np.std(returns)),
               mean_length=float(np.mean([n for _, n in episodes])))
    family = families.find_family(level)
    if family is not None and family.has_test_levels:  # DMLab-30's, section 5.3.1.
      row["test_level"] = family.test_level(level)
    references = suites.reference_scores(level)
    if references is not None:
      row["random"], row["human"] = references
      row["human_normalized"] = 100.0 * float(
          suites.human_normalized_score(row["mean_return"], *references))
    rows.append(row)
  return rows


def format_tables(rows, level_name):
  """The paper's tables as text: per-level scores, then the suite's summary (if a suite).

  DMLab-30: Table B.1's columns and its bottom line (mean capped human-normalised score,
  Table 3); Atari-57: Table C.1's columns and Table 4's median and mean.
  """
  lines = []
  header = f"{'level':<44} {'episodes':>8} {'return':>10} {'human':>9} {'random':>9} {'norm %':>8}"
  lines.append(header)
  lines.append("-" * len(header))
  for row in rows:
    name = row.get("test_level", row["level"])
    lines.append(f"{name:<44} {row['episodes']:>8} {_number(row['mean_return'], 10, 2)} "
                 f"{_number(row.get('human'), 9, 2)} {_number(row.get('random'), 9, 2)} "
                 f"{_number(row.get('human_normalized'), 8, 1)}")
  if suites.is_suite(level_name) and rows:
    summary = suites.suite_scores({r["level"]: r["mean_return"] for r in rows}, level_name,
                                  allow_missing=True)
    num_suite_levels = len(suites.level_names(level_name))
    over = ("" if summary.num_levels == num_suite_levels
            else f" over {summary.num_levels} of {num_suite_levels} levels")
    lines.append("-" * len(header))
    if level_name == suites.DMLAB30:
      lines.append(f"Mean capped human-normalised score (Table 3){over}: "
                   f"{summary.mean_capped:.1f}%   (uncapped mean {summary.mean:.1f}%)")
    else:
      lines.append(f"Human-normalised score (Table 4){over}: median {summary.median:.2f}%, "
                   f"mean {summary.mean:.2f}%")
  return "\n".join(lines)


def _number(value, width, decimals):
  """A table cell: the number, or `-` where there is none (no reference score, no episode)."""
  if value is None or (isinstance(value, float) and math.isnan(value)):
    return f"{'-':>{width}}"
  return f"{value:>{width}.{decimals}f}"


def write_results(rows, summary, directory):
  """results.json (rows + summary) and results.csv (rows) in directory; returns their paths."""
  os.makedirs(directory, exist_ok=True)
  json_path = os.path.join(directory, "results.json")
  with open(json_path, "w") as f:
    json.dump(dict(levels=rows, summary=summary), f, indent=2)
  csv_path = os.path.join(directory, "results.csv")
  fields = ["level", "test_level", "episodes", "mean_return", "std_return", "mean_length",
            "human", "random", "human_normalized"]
  with open(csv_path, "w", newline="") as f:
    writer = csv.DictWriter(f, fieldnames=fields, extrasaction="ignore")
    writer.writeheader()
    for row in rows:
      writer.writerow({k: row.get(k, "") for k in fields})
  return json_path, csv_path


def evaluate(config, environment_constructor=None, network_config=None, print_fn=print):
  """Restores logdir's latest checkpoint and plays config.test_num_episodes per level.

  Returns:
    dict: rows (per-level results), summary (suite scores or {}), checkpoint, paths.

  Raises:
    checkpoints.CheckpointError: no usable checkpoint in logdir.
    run_directory.RunDirectoryError: the results directory cannot be written (checked before
      playing); ResultsNotWritten: writing failed after the tables were printed.
    training.LevelsCannotRun: levels that cannot run here (after the others' results).
  """
  results_dir = os.path.join(config.logdir, RESULTS_SUBDIR)
  run_directory.check_creatable(results_dir)  # Made when the results are written.
  assembly.configure_threads(config)
  environment_constructor = assembly.checked_environment_constructor(
      config, environment_constructor, test_mode=True)
  levels = config.levels
  agent, probe_env = assembly.build_agent(config, environment_constructor, network_config)
  probe_env.close()
  learner = assembly.make_learner(config, agent)  # What the checkpoint holds (no update).
  checkpointer = assembly.make_checkpointer(config, agent, learner)
  path = checkpointer.restore(required=True)
  frames = int(learner.num_env_frames.numpy())
  device = assembly.learner_device()
  for line in monitoring.start_banner(config, agent.config, device, learner.jit_compile, path,
                                      frames, mode="test"):
    print_fn(line)
  policy = policies.BatchedPolicy(agent, device=device)
  cannot_run = {}
  level_videos, video_format = _level_videos(config, results_dir, print_fn)
  try:
    episodes = play_levels(policy, levels, config.test_num_episodes, config.num_actors,
                           config.seed, environment_constructor, print_fn, config=config,
                           progress=TestProgress(levels, config.test_num_episodes, print_fn,
                                                 config.log_secs), cannot_run=cannot_run,
                           videos=level_videos, record_episodes=config.record_video_episodes)
  finally:
    policy.close()
  rows = level_rows({level: e for level, e in episodes.items() if level not in cannot_run})
  summary = {}
  if suites.is_suite(config.level_name) and rows:
    summary = suites.suite_scores({r["level"]: r["mean_return"] for r in rows},
                                  config.level_name, allow_missing=True)._asdict()
  summary.update(checkpoint=path, training_frames=frames, seed=config.seed,
                 test_num_episodes=config.test_num_episodes)
  if config.record_video_episodes:
    summary["videos"] = videos_summary(level_videos, video_format,
                                       os.path.join(results_dir, videos_lib.SUBDIRECTORY))
  print_fn(format_tables(rows, config.level_name))
  paths = _write_or_explain(rows, summary, results_dir)
  print_fn(f"Results: {paths[0]}, {paths[1]}")
  for line in videos_lines(summary.get("videos")):
    print_fn(line)
  if cannot_run:
    raise training.LevelsCannotRun(cannot_run, config, " The results above leave them out.")
  return dict(rows=rows, summary=summary, checkpoint=path, paths=paths)


def _level_videos(config, results_dir, print_fn):
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
        lines.append(f"Videos: {level} episodes {episodes} ({len(level_files)} "
                     f"{summary['format'].upper()} files of {level_files[0]['width']}x"
                     f"{level_files[0]['height']} at {level_files[0]['fps']:g} frames/s)")
  lines.append(f"Videos: {len(files)} files in {summary['directory']}"
               + (f"; not recorded: {', '.join(sorted(summary['not_recorded']))} (see above)"
                  if summary["not_recorded"] else ""))
  return lines


def _write_or_explain(rows, summary, directory):
  """write_results, or ResultsNotWritten saying where it could not write."""
  try:
    return write_results(rows, summary, directory)
  except OSError as error:
    where = error.filename or directory
    raise ResultsNotWritten(
        f"could not write the results to {where} ({error.strerror or error}); the tables "
        "above are all that is left of this test: copy them, free or fix that directory and "
        "run the test again to get the files.") from error
