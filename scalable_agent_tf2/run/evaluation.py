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
    self._start = self._last = clock()
    self._lock = threading.Lock()

  def record(self, level):
    """One more episode of `level` done; prints the progress line when one is due."""
    with self._lock:
      self._done[level] += 1
      now = self._clock()
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
    if done:
      seconds = (now - self._start) * (total - done) / done
      eta = (f", about {seconds / 60:.0f} min to go" if seconds >= 60
             else f", about {seconds:.0f} s to go")
    return f"test: {done}/{total} episodes ({detail}){eta}"


def split_episodes(num_episodes, num_workers):
  """Episodes per worker: as even as possible, the first workers take the remainder."""
  num_workers = max(1, min(num_workers, num_episodes))
  base, extra = divmod(num_episodes, num_workers)
  return [base + (1 if k < extra else 0) for k in range(num_workers)]


def _play(make_loop, quotas, episodes_by_slot, cannot_run, on_episode=None):
  """Steps a worker's loop until each environment slot has finished its quota of episodes
  (a slot's later episodes are not recorded: counting the first episodes of the whole group
  would favour short episodes); a level that cannot run goes to `cannot_run` (level ->
  reason) instead. on_episode(level) is called for each recorded episode."""
  try:
    loop = make_loop()
  except LevelCannotRun as error:
    cannot_run[error.level_name] = error.reason
    return
  try:
    while any(len(e) < q for e, q in zip(episodes_by_slot, quotas)):
      try:
        loop.step()
      except actor_lib.EnvironmentRestarted:
        continue  # The unfinished episodes are dropped; new ones start.
      except LevelCannotRun as error:
        cannot_run[error.level_name] = error.reason
        return
      for slot, level, episode_return, episode_step in loop.finished_episodes:
        if len(episodes_by_slot[slot]) < quotas[slot]:
          episodes_by_slot[slot].append((float(episode_return), int(episode_step)))
          if on_episode is not None:
            on_episode(level)
  finally:
    loop.close()


def play_levels(policy, levels, num_episodes, num_workers, seed, environment_constructor,
                print_fn=print, config=None, progress=None, cannot_run=None):
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

  Returns:
    dict level -> list of (episode_return, episode_length), ordered by worker, environment,
    then episode.
  """
  raise_cannot_run = cannot_run is None
  cannot_run = {} if cannot_run is None else cannot_run
  per_level_workers = max(1, num_workers // len(levels))
  group_size = 1 if config is None else assembly.environment_group_size(config)
  tasks, results, jobs = {}, {}, []
  for level_index, level in enumerate(levels):
    for worker, count in enumerate(split_episodes(num_episodes, per_level_workers)):
      quotas = split_episodes(count, group_size)
      episodes_by_slot = [[] for _ in quotas]
      jobs.append((level, worker))
      results[(level, worker)] = episodes_by_slot
      worker_seed = assembly.derive_seed(seed, 1_000_003, level_index, worker)
      make_loop = functools.partial(_worker_loop, policy, level, worker_seed, len(quotas),
                                    environment_constructor, config, print_fn)
      tasks[f"{level}-{worker}"] = functools.partial(
          _play, make_loop, quotas, episodes_by_slot, cannot_run,
          progress.record if progress is not None else None)
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
                 print_fn):
  """An evaluation worker's EnvironmentLoop: group_size environments of `level` in test mode,
  seeded from worker_seed (environment slot, restart) and one action generator per slot."""
  if config is None or not config.uses_environment_groups:
    seeds = lambda attempt: [assembly.derive_seed(worker_seed, attempt)]
    factory = lambda attempt: assembly.start_environment(
        environment_constructor, level, seeds(attempt)[0], test_mode=True)
  else:
    seeds = lambda attempt: [assembly.derive_seed(worker_seed, slot, attempt)
                             for slot in range(group_size)]
    factory = assembly.group_factory(config, environment_constructor, level, seeds,
                                     test_mode=True)
  rngs = [np.random.default_rng([worker_seed, 2, slot]) for slot in range(group_size)]
  return actor_lib.EnvironmentLoop(
      factory, policy, rngs, level,
      on_restart=lambda lvl, e: print_fn(f"Environment for {lvl} restarted: {e}"))


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
  run_directory.check_usable(results_dir)
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
  try:
    episodes = play_levels(policy, levels, config.test_num_episodes, config.num_actors,
                           config.seed, environment_constructor, print_fn, config=config,
                           progress=TestProgress(levels, config.test_num_episodes, print_fn,
                                                 config.log_secs), cannot_run=cannot_run)
  finally:
    policy.close()
  rows = level_rows({level: e for level, e in episodes.items() if level not in cannot_run})
  summary = {}
  if suites.is_suite(config.level_name) and rows:
    summary = suites.suite_scores({r["level"]: r["mean_return"] for r in rows},
                                  config.level_name, allow_missing=True)._asdict()
  summary.update(checkpoint=path, training_frames=frames, seed=config.seed,
                 test_num_episodes=config.test_num_episodes)
  print_fn(format_tables(rows, config.level_name))
  paths = _write_or_explain(rows, summary, results_dir)
  print_fn(f"Results: {paths[0]}, {paths[1]}")
  if cannot_run:
    raise training.LevelsCannotRun(cannot_run, config, " The results above leave them out.")
  return dict(rows=rows, summary=summary, checkpoint=path, paths=paths)


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
