"""Acting: groups of environments driven by the agent's batched policy, producing trajectories.

    policy = policies.BatchedPolicy(agent)     # one forward pass for many actor threads
    loop = EnvironmentLoop(group_factory, policy, rngs, level_name)
    trajectories = loop.unroll(unroll_length)  # one Trajectory per environment of the group

An actor thread drives a GROUP of G environments with one loop: an AtariVectorGroup (G Atari
games stepped by ale-py's C++ threads in this process), G MuJoCo tasks in this process, or one
environment process seen as a group of 1 (both an EnvironmentGroup; the process serves DMLab,
the toy levels, and Atari settings the vector group does not implement). Every step is one
call to the batched policy with the group's G rows (dynamic_batching batches it with other
threads' calls), G actions sampled with array operations, and one `step(actions)` of the
group; an unroll stacks the T steps once.

The trajectory convention is the released code's (deepmind/scalable_agent, experiment.py
build_actor), per environment: step t holds the agent output whose action was taken at
observation t-1 and the environment output that action led to; step 0 repeats the last step
of the previous unroll, and `agent_state` is the core state before step 0. The learner unrolls
the network from `agent_state` over all T+1 steps (learner.py's module docstring). A group's
G trajectories are exactly those G loops over one environment each would give.

Actions are sampled in numpy with one random generator per environment slot (policies.py), so
which other actors share a forward pass never changes an environment's actions.
"""
import collections
import threading
import time

import numpy as np
import tensorflow as tf

from scalable_agent_tf2.acting import policies
from scalable_agent_tf2.agent import language
from scalable_agent_tf2.environments import EnvironmentProcessDied
from scalable_agent_tf2.environments import EnvironmentProcessTimeout
from scalable_agent_tf2.environments import LevelCannotRun
from scalable_agent_tf2.environments import base
from scalable_agent_tf2.environments.base import CannotRender
from scalable_agent_tf2.structures import EnvOutput
from scalable_agent_tf2.structures import Observation
from scalable_agent_tf2.structures import Trajectory
from scalable_agent_tf2.utils import profiling

# Environment failures an actor recovers from by replacing the environment (a new process, or a
# new environment in this one): a dead or silent environment process, an environment whose
# step() or reset() raised or whose output broke its spec (base.EnvironmentFault).
ENVIRONMENT_FAILURES = (EnvironmentProcessDied, EnvironmentProcessTimeout,
                        base.EnvironmentFault)


class EpisodeTracker:
  """Finds where episodes end in a stream of env outputs, for reporting returns.

  `done` alone does not say it: on Atari in training a lost life sets `done` (the learner
  must not bootstrap across it) while the game, and its return, go on
  (environments/atari.py). An episode ended at a `done` output exactly when the statistics
  restart after it, i.e. the next output's episode_step is not the done output's plus one.
  So an episode is reported one step after its end.
  """

  def __init__(self):
    self._last_done = None

  def observe(self, env_output):
    """Returns (episode_return, episode_step) of an episode that has ended, else None."""
    finished = None
    if self._last_done is not None and env_output.episode_step != self._last_done[1] + 1:
      finished = self._last_done
    self._last_done = ((env_output.episode_return, env_output.episode_step)
                       if env_output.done else None)
    return finished


class EnvironmentGroup:
  """G base.Environments as one group with the interface of
  environments.atari_vector.AtariVectorGroup: initial(), step(actions [G]), finished_games(),
  level_names, num_envs, spec, close(). They are stepped one after another on the calling
  thread: one environment process (DMLab, the toy levels, Atari settings the vector group does
  not implement) or G MuJoCo tasks in this process."""

  def __init__(self, envs, level_name, observe=None):
    """observe: callable(EnvOutput) -> EnvOutput applied to the group's stacked outputs
    [G, ...] (the action space's observation filter, action_spaces.ActionSpace.observe)."""
    self._envs = list(envs)
    if not self._envs:
      raise ValueError("An environment group needs at least one environment.")
    self._observe = observe or (lambda env_output: env_output)
    self.num_envs = len(self._envs)
    self.level_names = [level_name] * self.num_envs
    self._trackers = [EpisodeTracker() for _ in self._envs]
    self._episodes = [1] * self.num_envs  # Each environment's episode in progress, from 1.
    self._finished = []

  @property
  def spec(self):
    return self._envs[0].spec

  def _as_group(self, env_outputs):
    """The environments' outputs as one EnvOutput [G, ...], checked against the spec (see
    _checked_frames) and passed through `observe` (the observation filter)."""
    frames = self._checked_frames(env_outputs)
    self._finished = []
    for slot, (tracker, env_output) in enumerate(zip(self._trackers, env_outputs)):
      finished = tracker.observe(env_output)
      if finished is not None:
        self._finished.append((slot,) + tuple(finished))
      self._episodes[slot] += _ended_an_episode(env_output)
    return self._observe(EnvOutput(
        reward=np.array([o.reward for o in env_outputs], np.float32),
        done=np.array([o.done for o in env_outputs], bool),
        observation=Observation(
            frame=frames, instruction=tuple(o.observation.instruction for o in env_outputs)),
        episode_return=np.array([o.episode_return for o in env_outputs], np.float32),
        episode_step=np.array([o.episode_step for o in env_outputs], np.int32),
        truncated=np.array([o.truncated for o in env_outputs], bool)))

  def _checked_frames(self, env_outputs):
    """The outputs' frames stacked [G, ...], once every output was checked against the spec
    before anything uses it: a wrong shape or dtype, NaN or an infinity (base.output_problem)
    raise EnvironmentOutputError, an environment fault, naming the level, the step and the
    episode. One NaN must never reach the observation filter's statistics (normalization.py).
    Finiteness is checked once for the group's stacked numbers; only a group that fails it is
    searched for the culprit."""
    spec = self.spec
    for slot, env_output in enumerate(env_outputs):
      self._raise_if(slot, env_output, base.layout_problem(env_output.observation.frame, spec))
    frames = np.stack([np.asarray(o.observation.frame) for o in env_outputs])
    rewards = np.array([o.reward for o in env_outputs], np.float64)
    if not (np.isfinite(rewards).all()
            and (frames.dtype.kind != "f" or np.isfinite(frames).all())):
      for slot, env_output in enumerate(env_outputs):
        self._raise_if(slot, env_output, base.output_problem(env_output, spec))
    return frames

  def _raise_if(self, slot, env_output, problem):
    if problem is not None:
      where = base.position(self._episodes[slot], int(env_output.episode_step),
                            _ended_an_episode(env_output))
      raise base.EnvironmentOutputError(f"{self.level_names[slot]}: {where}: the environment "
                                        f"returned {problem}.")

  def initial(self):
    self._trackers = [EpisodeTracker() for _ in self._envs]
    self._episodes = [1] * self.num_envs
    return self._as_group([env.initial() for env in self._envs])

  def step(self, actions):
    return self._as_group([env.step(action) for env, action in zip(self._envs, actions)])

  def finished_games(self):
    return list(self._finished)

  def render(self, slot):
    """Environment `slot`'s picture now (base.Environment.render)."""
    return self._envs[slot].render()

  def render_fps(self):
    return self._envs[0].render_fps()

  def close(self):
    close_all(self._envs)


def _ended_an_episode(env_output):
  """An output of step() that ended its episode (initial()'s is done with episode_step 0)."""
  return bool(env_output.done) and env_output.episode_step > 0


def close_all(envs):
  """Closes every environment of envs, even when closing one raises (the first error is
  raised after the others were closed)."""
  error = None
  for env in envs:
    try:
      env.close()
    except Exception as e:  # pylint: disable=broad-except
      error = error or e
  if error is not None:
    raise error


def as_group(env_or_group, level_name, observe=None):
  """A group as it is; a list of environments, or one environment, as an EnvironmentGroup
  (see its observe)."""
  if hasattr(env_or_group, "finished_games"):
    return env_or_group
  envs = env_or_group if isinstance(env_or_group, list) else [env_or_group]
  return EnvironmentGroup(envs, level_name, observe)


class RestartPolicy:
  """How an actor recovers from environment failures, and when it gives a level up.

  Starting (construction or the first reset, initial()): retried after backoff_secs[0],
  backoff_secs[1], ... (exponential: 1, 2, 4 s); when all len(backoff_secs) restarts failed
  too, the level cannot run here (environments.LevelCannotRun, the supervisor's business).
  Stepping: an environment that failed (its process died or went silent, its step() or
  reset() raised, its output broke its spec) is replaced and the episode in progress dropped,
  unless the failures are a crash loop: at least min_failures of them, and more than
  max_failure_rate of the environment steps the actor took over its last window_steps steps
  (all of them, while it has taken fewer). Then the level is reported
  (base.LevelKeepsFailing, ending with the last failure) instead of replaced forever.

  Why a rate of steps, not of seconds: a fault on a fixed share of the steps comes as often
  as the steps do, so a count per minute stops a fast environment for faults a slow one is
  allowed (5 in 60 s was 0.03% of CartPole's steps). Why these numbers: an environment that
  fails on every step stops at its min_failures-th (5th) failure; one that
  fails on 5% of its steps within about 100 steps; one that fails on 0.1% of them
  practically never: its first 5 failures come within its first 500 steps with a probability
  of 2e-4 (Poisson), and later more than 100 in 10,000 steps (against 10 on average) never
  in practice.
  """

  def __init__(self, backoff_secs=(1.0, 2.0, 4.0), max_failure_rate=0.01, min_failures=5,
               window_steps=10_000, sleep=time.sleep):
    self.backoff_secs = tuple(backoff_secs)
    self.max_failure_rate = max_failure_rate
    self.min_failures = min_failures
    self.window_steps = window_steps
    self.sleep = sleep

  def keeps_failing(self, failure_steps, steps):
    """Whether failures at the environment steps `failure_steps` (the actor's step count at
    each, oldest first, those older than window_steps dropped), `steps` steps taken in all,
    are a crash loop."""
    taken = max(1, min(steps, self.window_steps))
    return (len(failure_steps) >= self.min_failures
            and len(failure_steps) > self.max_failure_rate * taken)

  def in_words(self):
    """The rule, as the crash loop's message states it."""
    return (f"more than {self.max_failure_rate:.0%} of its last {self.window_steps:,} "
            f"steps, {self.min_failures} at least")


class EnvironmentLoop:
  """One actor's group of environments and the agent's state in them: steps, unrolls,
  episode reporting and restarts (RestartPolicy)."""

  def __init__(self, group_factory, policy, rngs, level_name, on_episode=None,
               on_restart=None, restart_policy=None):
    """Args:
      group_factory: callable(attempt) -> a group (AtariVectorGroup, EnvironmentGroup), a
        list of base.Environments or one (as_group); attempt counts restarts from 0.
      policy: a policies.BatchedPolicy (or PerActorPolicy); its action_space samples, stores
        and sends the actions (action_spaces.ActionSpace).
      rngs: one numpy Generator per environment of the group, for its actions.
      level_name: str, the group's level, for reports.
      on_episode: callable(level_name, episode_return, episode_step) at each episode end.
      on_restart: callable(level_name, exception) after an environment failed.
      restart_policy: RestartPolicy; None: the defaults.
    """
    self._group_factory = group_factory
    self._policy = policy
    self._action_space = policy.action_space
    self._rngs = list(rngs)
    self.level_name = level_name
    self._on_episode = on_episode
    self._on_restart = on_restart
    self._restarts = restart_policy or RestartPolicy()
    self._attempt = 0
    self._failure_steps = collections.deque()  # self._steps at each recent failure.
    self._steps = 0  # Environment steps taken (each of a group's environments counts).
    self.num_crashes = 0
    self.finished_episodes = []  # (slot, level, return, length) of the last step's episodes.
    self._group = None
    self._start_group()

  def _start_group(self):
    """A started group (factory + initial()), with backoff; LevelCannotRun when it cannot."""
    for backoff in self._restarts.backoff_secs + (None,):
      group = None
      try:
        group = as_group(self._group_factory(self._attempt), self.level_name,
                         self._action_space.observe)
        self._start_episodes(group)
        self._group = group
        return
      except ENVIRONMENT_FAILURES as error:
        if group is not None:
          group.close()
        self._attempt += 1
        if backoff is None:
          raise LevelCannotRun(self.level_name, str(error)) from error
        if self._on_restart is not None:
          self._on_restart(self.level_name, error)
        self._restarts.sleep(backoff)

  def _start_episodes(self, group):
    if len(self._rngs) != group.num_envs:
      raise ValueError(f"{group.num_envs} environments need as many random generators, got "
                       f"{len(self._rngs)}.")
    # The word ids of a group whose levels give no instruction (Atari, the toy levels), built
    # once: its steps share them.
    self._no_instructions = language.empty_instructions([group.num_envs])
    self._no_instructions.setflags(write=False)
    self.env_output = policies.encode_group_instructions(group.initial(), self._no_instructions)
    self.agent_output = self._action_space.empty_group_outputs(group.num_envs)
    self.core_state = self._policy.initial_states(group.num_envs)

  def _crashed(self, error):
    """Replaces a group that crashed while stepping, unless the level keeps crashing
    (RestartPolicy.keeps_failing)."""
    self.num_crashes += 1
    self._failure_steps.append(self._steps)
    while self._failure_steps[0] <= self._steps - self._restarts.window_steps:
      self._failure_steps.popleft()
    self._group.close()
    self._group = None
    if self._restarts.keeps_failing(self._failure_steps, self._steps):
      last = str(error)
      last = last[len(self.level_name) + 2:] if last.startswith(f"{self.level_name}: ") else last
      window = self._restarts.window_steps
      steps = (f"its first {self._steps:,}" if self._steps < window else
               f"its last {window:,}")
      raise base.LevelKeepsFailing(
          self.level_name, f"its environment failed {len(self._failure_steps)} times in "
          f"{steps} steps (replaced each time; a level stops when its failures are "
          f"{self._restarts.in_words()}); the last failure: {last}") from error
    self._attempt += 1
    if self._on_restart is not None:
      self._on_restart(self.level_name, error)
    self._start_group()

  @property
  def num_envs(self):
    return len(self._rngs)

  def render(self, slot):
    """Environment `slot`'s picture of its last output's state, RGB uint8 [H, W, 3] (test
    mode's videos). Raises base.CannotRender where the group cannot draw one."""
    if not hasattr(self._group, "render"):
      raise CannotRender(f"{self.level_name}: its environments ({type(self._group).__name__})"
                         " have no render().")
    return self._group.render(slot)

  def render_fps(self):
    """Agent steps per second of the environments' own time, or None (base.Environment)."""
    return getattr(self._group, "render_fps", lambda: None)()

  def step(self):
    """One agent step of the group; returns (agent_outputs, env_outputs) of step t [G, ...].

    Raises:
      EnvironmentRestarted: the environment failed and was replaced; the episodes in
        progress are lost and the loop starts over from new episodes.
    """
    params, baseline, core_state = self._policy(self.agent_output.action, self.env_output,
                                                self.core_state)
    space = self._action_space
    actions = space.sample_group(params, self._rngs)
    self._steps += self.num_envs
    try:
      env_output = self._group.step(space.group_to_environment(actions, self._group.spec))
    except ENVIRONMENT_FAILURES as error:
      self._crashed(error)
      raise EnvironmentRestarted(str(error)) from error
    self.agent_output = space.agent_output(actions, params, baseline)
    self.env_output = policies.encode_group_instructions(env_output, self._no_instructions)
    self.core_state = core_state
    self._report_episodes()
    return self.agent_output, self.env_output

  def _report_episodes(self):
    level_names = self._group.level_names
    self.finished_episodes = [(index, level_names[index], episode_return, episode_step)
                              for index, episode_return, episode_step
                              in self._group.finished_games()]
    if self._on_episode is not None:
      for _, level, episode_return, episode_step in self.finished_episodes:
        self._on_episode(level, episode_return, episode_step)

  def unroll(self, unroll_length, policy_version=0):
    """unroll_length steps as G Trajectories of T+1 steps (step 0 = the previous last step).

    Raises:
      EnvironmentRestarted: see step(); the partial unrolls are dropped.
    """
    agent_state = self.core_state
    agent_outputs, env_outputs = [self.agent_output], [self.env_output]
    for _ in range(unroll_length):
      agent_output, env_output = self.step()
      agent_outputs.append(agent_output)
      env_outputs.append(env_output)
    # [G, T+1, ...]: each environment's rows are contiguous.
    stack = lambda *xs: np.stack(xs, axis=1)
    env_outputs = tf.nest.map_structure(stack, *env_outputs)
    agent_outputs = tf.nest.map_structure(stack, *agent_outputs)
    level_names = self._group.level_names
    return [Trajectory(level_name=level_names[g], policy_version=policy_version,
                       agent_state=tf.nest.map_structure(lambda x, g=g: x[g], agent_state),
                       env_outputs=tf.nest.map_structure(lambda x, g=g: x[g], env_outputs),
                       agent_outputs=tf.nest.map_structure(lambda x, g=g: x[g], agent_outputs))
            for g in range(self.num_envs)]

  def close(self):
    if self._group is not None:
      self._group.close()


class EnvironmentRestarted(RuntimeError):
  """The environment process failed and was replaced by a new one."""


class ActorFailed(RuntimeError):
  """An actor thread stopped with an error that is not an environment crash."""

  @classmethod
  def of(cls, actor, consequence=""):
    """The error for ActorThread `actor`; consequence ends the message (what happened next).
    Raise it `from actor.error`."""
    return cls(base.sentence(f"{actor.name} stopped with {type(actor.error).__name__}: "
                             f"{actor.error}") + consequence)


def first_failed(actors):
  """The first of `actors` (ActorThreads) that stopped with an error, or None."""
  return next((a for a in actors if a.error is not None), None)


class ActorThread(threading.Thread):
  """Runs an EnvironmentLoop and puts its trajectories on a queue until stopped.

  An exception other than an environment failure ends the thread (LevelCannotRun too, once a
  level's environment cannot start or keeps dying); it is kept in `error` for the supervisor.
  """

  def __init__(self, index, make_loop, unroll_length, put_trajectory, policy_version,
               stop_event, first_stream=None, actor_turn=None):
    """Args:
      index: int, the actor's number (thread name).
      make_loop: callable() -> EnvironmentLoop, run on this thread.
      unroll_length: int, T.
      put_trajectory: callable(Trajectory, stream) -> bool; False when training is stopping.
        stream: the environment's number (first_stream + slot in the group), which keys the
        learner's queues and LASER's per-environment streams.
      policy_version: callable() -> int, learner updates so far.
      stop_event: threading.Event; set to stop.
      first_stream: the stream of the group's first environment; None: index.
      actor_turn: None (the default: act without waiting, IMPALA's actors), or callable()
        -> bool called before each unroll, which blocks until this actor may act it
        (--repeatable: run/repeatable.LockstepQueues.actor_turn); False: stop.
    """
    super().__init__(name="actor-%d" % index, daemon=True)
    self._make_loop = make_loop
    self._unroll_length = unroll_length
    self._put_trajectory = put_trajectory
    self._policy_version = policy_version
    self._stop_event = stop_event
    self._first_stream = index if first_stream is None else first_stream
    self._actor_turn = actor_turn
    self.error = None
    self.num_trajectories = 0
    self.num_envs_ready = 0  # Environments started (the console's "starting N environments").

  def _put_all(self, trajectories):
    for slot, trajectory in enumerate(trajectories):
      if not self._put_trajectory(trajectory, self._first_stream + slot):
        return False
      self.num_trajectories += 1
    return True

  def run(self):
    profiling.name_this_thread(self.name)
    loop = None
    try:
      loop = self._make_loop()
      self.num_envs_ready = loop.num_envs
      while not self._stop_event.is_set():
        if self._actor_turn is not None and not self._actor_turn():
          break
        try:
          trajectories = loop.unroll(self._unroll_length, self._policy_version())
        except EnvironmentRestarted:
          continue
        if not self._put_all(trajectories):
          break
    except BaseException as error:  # pylint: disable=broad-except
      if not self._stop_event.is_set():  # Errors caused by shutting down are not news.
        self.error = error
    finally:
      if loop is not None:
        loop.close()
