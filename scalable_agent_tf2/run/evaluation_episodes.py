"""--mode=test's episodes: a policy played on each level by a fixed set of workers, and the
console's progress line while they play (TestProgress).

Each level's episodes are split over a fixed set of workers (--num_actors; each a group of
environments as in training, assembly.environment_group_size, with one action sampler per
environment, seeded from --seed, the level, the worker's number and the environment's slot),
and a worker's episodes over its environments (each plays its own quota, so short episodes are
not favoured); the inference of all workers is batched. An environment's actions do not depend
on the batching (policies.py), so a seeded test run repeats its results (up to float rounding in
batched inference).

A level whose environment cannot start or reset here (environments.LevelCannotRun) is
recorded in `cannot_run` (play_levels) and plays no further; a worker recording videos is
given its evaluation_videos.WorkerVideos.
"""
import functools
import threading
import time

import numpy as np

from scalable_agent_tf2.acting import actor as actor_lib
from scalable_agent_tf2.environments import LevelCannotRun
from scalable_agent_tf2.environments.families import base as family_base
from scalable_agent_tf2.run import assembly
from scalable_agent_tf2.run import evaluation_videos
from scalable_agent_tf2.runfiles import videos as videos_lib


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
  tasks, results = {}, {}  # results: (level, worker) -> episodes by environment slot.
  for level_index, level in enumerate(levels):
    quotas_by_worker = [split_episodes(count, group_size)
                        for count in split_episodes(num_episodes, per_level_workers)]
    recorded = videos_lib.recorded_counts(quotas_by_worker, record_episodes)
    for worker, quotas in enumerate(quotas_by_worker):
      episodes_by_slot = results[(level, worker)] = [[] for _ in quotas]
      make_videos = _videos_maker((videos or {}).get(level), recorded[worker])
      make_loop = functools.partial(
          _worker_loop, policy, level, assembly.derive_seed(seed, 1_000_003, level_index, worker),
          len(quotas), environment_constructor, config, print_fn,
          draws=make_videos is not None)
      tasks[f"{level}-{worker}"] = functools.partial(
          _play, make_loop, quotas, episodes_by_slot, cannot_run,
          progress.record if progress is not None else None, make_videos)
  assembly.run_concurrently(tasks, thread_prefix="evaluation-")
  if raise_cannot_run and cannot_run:
    level = sorted(cannot_run)[0]
    raise LevelCannotRun(level, cannot_run[level])
  return _by_level(levels, results)


def _videos_maker(level_videos, counts):
  """make_videos(loop) of a worker with episodes to record (counts: [(episodes to record, the
  level-wide number of the first)] per slot), or None: a level not recorded, none to record."""
  if level_videos is None or not any(count for count, _ in counts):
    return None
  return functools.partial(evaluation_videos.WorkerVideos, level_videos=level_videos,
                           counts=counts)


def _by_level(levels, results):
  """{level: [(return, length)]} of {(level, worker): episodes by slot}, ordered by worker,
  environment slot, then episode (the order the workers were made in)."""
  by_level = {level: [] for level in levels}
  for (level, _), episodes_by_slot in results.items():
    for episodes in episodes_by_slot:
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
    if draws and config.family.runs_as(config) == family_base.IN_PROCESS_GROUP:
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
