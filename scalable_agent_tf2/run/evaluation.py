"""--mode=test: play the latest checkpoint's sampled policy and print the paper's tables.

Protocol (paper sections 5.3.1 and 5.3.2): --test_num_episodes episodes per level (paper:
500 on DMLab, Table 3); DMLab levels in their test configuration (the test variant of the two
levels that have one, allowHoldOutLevels, mixerSeed 0x600D5EED); Atari episodes are whole
games (no life-loss termination) starting with up to 30 no-ops (Table 4).

Results go to logdir/evaluation/results.json and results.csv. That directory is checked before
any episode is played; the tables are printed before the files are written, so a write that
fails afterwards loses nothing shown (ResultsNotWritten says where it could not write). Each
file is replaced whole (a kill or a full disk leaves the previous results), and a stop signal
that comes while they are written waits for both (StoppedAfterWriting).

A level whose environment cannot start or reset here (environments.LevelCannotRun) is left out
of the tables and named, with the other such levels, in one training.LevelsCannotRun after
the results of the levels that played are printed and written.

The episodes are played by evaluation_episodes.py (workers, their environments and seeds),
the videos recorded by evaluation_videos.py; this module restores the checkpoint, runs them
and turns the episodes into the paper's tables and the results files.
"""
import csv
import io
import json
import math
import os

import numpy as np

from scalable_agent_tf2.acting import policies
from scalable_agent_tf2.environments import families
from scalable_agent_tf2.environments import suites
from scalable_agent_tf2.run import assembly
from scalable_agent_tf2.run import evaluation_episodes
from scalable_agent_tf2.run import evaluation_videos
from scalable_agent_tf2.run import monitoring
from scalable_agent_tf2.run import training
from scalable_agent_tf2.runfiles import durable_files
from scalable_agent_tf2.runfiles import run_directory
from scalable_agent_tf2.runfiles import videos as videos_lib
from scalable_agent_tf2.utils import stop_signals

RESULTS_SUBDIR = "evaluation"


class ResultsNotWritten(run_directory.RunDirectoryError):
  """The results were printed but could not be written (the message says where)."""


class VideosNotWritten(run_directory.RunDirectoryError):
  """The disk refused the videos (full, read-only); the results were written (the message
  says where the videos were to go)."""


class StoppedAfterWriting(stop_signals.Stopping):
  """SIGINT or SIGTERM came while the results were being written: the stop waited for both
  files (milliseconds), so they hold this test's results. str(): the signal; paths: the
  files."""

  def __init__(self, signal_name, paths):
    super().__init__(signal_name)
    self.paths = paths


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
  # return: the mean over the level's episodes; std: their standard deviation (np.std), the
  # spread a score is quoted with; human and random: the reference scores of the normalisation.
  header = (f"{'level':<44} {'episodes':>8} {'return':>10} {'std':>9} {'human':>9} "
            f"{'random':>9} {'norm %':>8}")
  lines.append(header)
  lines.append("-" * len(header))
  for row in rows:
    name = row.get("test_level", row["level"])
    lines.append(f"{name:<44} {row['episodes']:>8} {_number(row['mean_return'], 10, 2)} "
                 f"{_number(row.get('std_return'), 9, 2)} "
                 f"{_number(row.get('human'), 9, 2)} {_number(row.get('random'), 9, 2)} "
                 f"{_number(row.get('human_normalized'), 8, 1)}")
  if level_name in suites.SCORED_SUITES and rows:  # The toy suites have no reference scores.
    summary = suites.suite_scores({r["level"]: r["mean_return"] for r in rows}, level_name,
                                  allow_missing=True)
    num_suite_levels = len(families.level_names(level_name))
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
  """results.json (rows + summary) and results.csv (rows) in directory; returns their paths.

  Both are replaced as checkpoints' state files are (durable_files.write_files_atomically):
  a kill or a full disk leaves the previous results whole, never an empty or half file."""
  os.makedirs(directory, exist_ok=True)
  json_path = os.path.join(directory, "results.json")
  csv_path = os.path.join(directory, "results.csv")
  fields = ["level", "test_level", "episodes", "mean_return", "std_return", "mean_length",
            "human", "random", "human_normalized"]
  table = io.StringIO()
  writer = csv.DictWriter(table, fieldnames=fields, extrasaction="ignore")
  writer.writeheader()
  for row in rows:
    writer.writerow({k: row.get(k, "") for k in fields})
  durable_files.write_files_atomically([
      (json_path, json.dumps(dict(levels=rows, summary=summary), indent=2)),
      (csv_path, table.getvalue())])
  return json_path, csv_path


def evaluate(config, environment_constructor=None, print_fn=print, stop_request=None):
  """Restores logdir's latest checkpoint and plays config.test_num_episodes per level.

  environment_constructor: callable(level_name, seed, test_mode) -> (constructor, kwargs)
  that builds the environments played instead of the levels' own (a control study plays a
  run's policy on changed observations: benchmarks/studies/minigrid_controls.py); None: the
  levels' family builds them, as training did.

  stop_request: the command's stop_signals.StopRequest (experiment_main.py), which holds a
  stop signal while the results are written; None: a handler of the write's own does.

  Returns:
    dict: rows (per-level results), summary (suite scores or {}), checkpoint, paths.

  Raises:
    checkpoints.CheckpointError: no usable checkpoint in logdir.
    run_directory.RunDirectoryError: the results directory cannot be written (checked before
      playing); ResultsNotWritten: writing failed after the tables were printed;
      VideosNotWritten: the disk refused the videos (the results were written).
    training.LevelsCannotRun: levels that cannot run here (after the others' results).
  """
  results_dir = os.path.join(config.logdir, RESULTS_SUBDIR)
  run_directory.check_creatable(results_dir)  # Made when the results are written.
  assembly.configure_threads(config)
  environment_constructor = assembly.checked_environment_constructor(
      config, environment_constructor, test_mode=True)
  agent, path, frames, device = _restored_agent(config, environment_constructor, print_fn)
  policy = policies.BatchedPolicy(agent, device=device)
  cannot_run = {}
  level_videos, video_format = evaluation_videos.level_videos(config, results_dir, print_fn)
  try:
    episodes = _played_episodes(config, policy, environment_constructor, print_fn,
                                cannot_run, level_videos)
  finally:
    policy.close()
  rows = level_rows({level: e for level, e in episodes.items() if level not in cannot_run})
  summary = _summary(config, rows, path, frames)
  if config.record_video_episodes:
    summary["videos"] = evaluation_videos.videos_summary(
        level_videos, video_format, os.path.join(results_dir, videos_lib.SUBDIRECTORY))
  print_fn(format_tables(rows, config.level_name))
  paths = None
  try:
    with stop_signals.StopsDeferred(stop_request):  # Both files are this test's, or neither.
      paths = _write_or_explain(rows, summary, results_dir)
  except (KeyboardInterrupt, stop_signals.Stopping) as interrupt:
    if paths is None:  # Before the writing started: nothing was written.
      raise
    raise StoppedAfterWriting(stop_signals.interrupt_name(interrupt), paths) from None
  print_fn(f"Results: {paths[0]}, {paths[1]}")
  for line in evaluation_videos.videos_lines(summary.get("videos")):
    print_fn(line)
  if cannot_run:
    raise training.LevelsCannotRun(cannot_run, config, " The results above leave them out.")
  _raise_for_refused_videos(level_videos, os.path.join(results_dir, videos_lib.SUBDIRECTORY))
  return dict(rows=rows, summary=summary, checkpoint=path, paths=paths)


def _raise_for_refused_videos(level_videos, directory):
  """VideosNotWritten when the disk refused a level's videos (full, read-only): the test goes
  on without them, and ends with this error once its results are written."""
  refused = {level: videos.disk_refusal for level, videos in level_videos.items()
             if videos.disk_refusal}
  if refused:
    raise VideosNotWritten(
        f"could not write the videos of {', '.join(sorted(refused))} in {directory} "
        f"({next(iter(refused.values()))}): the results above were written; free space "
        "there (or make it writable) and run the test again for the videos.")


def _restored_agent(config, environment_constructor, print_fn):
  """(agent, checkpoint path, its training frames, the inference device): the agent built as
  training builds it, at logdir's latest checkpoint (CheckpointError without one), after the
  start banner."""
  agent, learner, path = assembly.restore_agent(config, environment_constructor)
  frames = int(learner.num_env_frames.numpy())
  device = assembly.learner_device()
  for line in monitoring.start_banner(config, agent.config, device, learner.jit_compile, path,
                                      frames, mode="test"):
    print_fn(line)
  return agent, path, frames, device


def _played_episodes(config, policy, environment_constructor, print_fn, cannot_run,
                     level_videos):
  """evaluation_episodes.play_levels with the config's levels, episodes, workers and seed,
  its progress on the console, and the videos of level_videos (evaluation_videos)."""
  progress = evaluation_episodes.TestProgress(config.levels, config.test_num_episodes,
                                              print_fn, config.log_secs)
  return evaluation_episodes.play_levels(
      policy, config.levels, config.test_num_episodes, config.num_actors, config.seed,
      environment_constructor, print_fn, config=config, progress=progress,
      cannot_run=cannot_run, videos=level_videos,
      record_episodes=config.record_video_episodes)


def _summary(config, rows, path, frames):
  """results.json's summary: the suite's scores (a suite's levels; {} otherwise), the
  checkpoint and its frames, the seed and the episodes per level."""
  summary = {}
  if config.level_name in suites.SCORED_SUITES and rows:
    summary = suites.suite_scores({r["level"]: r["mean_return"] for r in rows},
                                  config.level_name, allow_missing=True)._asdict()
  summary.update(checkpoint=path, training_frames=frames, seed=config.seed,
                 test_num_episodes=config.test_num_episodes)
  return summary


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
