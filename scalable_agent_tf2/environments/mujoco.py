"""The IMPACT paper's continuous-control tasks (section 4.3, Figure 5) through gymnasium's MuJoCo
environments, and the observation filter its code base used for them.

    env = MujocoEnvironment("mujoco/hopper", seed=1)
    spec = env.spec                    # base.ContinuousEnvSpec(3, low [3], high [3], (11,))
    output = env.initial()             # observation.frame float32 [11], RAW (unfiltered)
    output = env.step(action)          # action float [3], unclipped; auto-resets on done
    obs_filter = MeanStdFilter((11,))  # one per learner process, shared by its actors
    frame = obs_filter(output.observation.frame)                # training: updates, then filters
    frame = obs_filter(output.observation.frame, update=False)  # evaluation: frozen

Tasks. The paper ran gym's -v2 tasks (mujoco-py, MuJoCo 1.5 or 2.0); gymnasium 1.4 ships -v4 and
-v5 (official MuJoCo bindings). We use -v5, the current ones (LEVELS). What differs from -v2
(gymnasium's version histories in gymnasium/envs/mujoco/*_v5.py; gym's -v2 sources):
  * Physics engine: MuJoCo 3.3 (requirements.txt) instead of 1.5/2.0; same models, same
    frame_skip (Hopper 4, HalfCheetah 5, Humanoid 5), same 1000-step time limit, same action
    bounds (Hopper and HalfCheetah [-1, 1], Humanoid [-0.4, 0.4]). Humanoid's body model was
    slightly changed in gym 0.21 (results before and after are not comparable).
  * Observation sizes: Hopper 11 and HalfCheetah 17, as in -v2. Humanoid 348 instead of 376:
    -v5 drops the world body's cinert / cvel / cfrc_ext and the free joint's qfrc_actuator,
    which are always 0. Humanoid's contact forces (cfrc_ext, 78 numbers) are real in -v5
    (gymnasium calls mj_rnePostConstraint after every step); under -v2 they were real with
    mujoco-py 1.50 and all zeros with mujoco-py 2.0 (openai/gym#1541); the paper does not say
    which it ran.
  * Rewards: Hopper and Humanoid pay the healthy reward only while healthy (-v2 also paid it at
    the step that made the body unhealthy: +1 and +5 on the last step of such an episode).
    Humanoid's contact cost (5e-7 x |cfrc_ext|^2, capped at 10) is in -v5 as in -v2. Same
    weights otherwise (forward 1 / 1 / 1.25, control cost 1e-3 / 0.1 / 0.1).
  * Termination and reset noise as in -v2: Hopper healthy while z > 0.7, |angle| < 0.2 and
    |state[2:]| < 100 (qpos and qvel but x and z), uniform +-5e-3 reset noise; HalfCheetah
    never terminates, +-0.1 uniform on positions and 0.1 N(0, 1) on velocities; Humanoid
    healthy while 1 < z < 2, +-1e-2.
  * A time-limit truncation ends the episode like a termination (done True), as gym's -v2
    TimeLimit and the paper's code base did (RLlib's default then: the episode's end is a
    `done`, with no bootstrap). `truncated` stays False: the step of its own that
    truncation.py defines (the gym family emits it) would bootstrap from V(x_1000) and add an
    agent step per episode, which the IMPACT paper's MuJoCo numbers did not have.

Actions. The environment takes the policy's float sample [A] unclipped; only the copy sent to
gymnasium is clipped to the action space's bounds (action_bounds.clip_to_bounds, as RLlib's
`clip_actions`). The caller's array is never changed, so the trajectory keeps the sample whose
log-probability the behaviour policy computed. Clipping matters beyond MuJoCo's own control
range: the control cost is computed from the action gymnasium receives.

Observation filter. The paper does not say how observations were handled; its code base is
RLlib, whose default `observation_filter` is "NoFilter", but its APPO and PPO examples for
these tasks all set "MeanStdFilter" (ray-project/ray, rllib/tuned_examples/):
halfcheetah-appo.yaml (APPO with IMPACT's KL loss; its minibatch buffer 16, 32 SGD
iterations, grad clip 0.5, value coefficient 0.5, KL coefficient 1 and KL target 0.04 are Table
2's HalfCheetah values), halfcheetah-ppo.yaml, hopper-ppo.yaml, humanoid-ppo-gae.yaml.
MeanStdFilter (rllib/utils/filter.py, built by get_filter with clip=None) keeps a running
count n, mean and sum of squared deviations of every observation seen (Welford's update),
updates them with each new observation BEFORE filtering it, and returns
(x - mean) / (std + 1e-8), std = sqrt(S / (n - 1)) (|mean| while n < 2), unclipped.

Where the statistics live. RLlib gives every rollout worker a filter, merges the workers'
new observations into the driver's filter after each training iteration (about every 10 s)
and sends the merged filter back to all workers. Here one MeanStdFilter per learner process
is shared by all its actor threads (thread-safe): every actor normalises with the statistics of
all observations seen so far, never staler than RLlib's. The environment returns raw
observations, so an environment process that is restarted loses nothing. Actors in other
processes of a cluster keep a filter each and sync as RLlib does, at the start of every unroll
with the parameters (filter_sync.py): `take_delta()` on the actor process (the observations
since the last sync), `apply_delta()` on the learner's filter (the checkpointed one),
`load_state()` of the merged state on the actor process. The statistics are part of the policy
(the network was trained on filtered inputs): `state()` / `load_state()` save and restore them
with checkpoints, and evaluation uses the restored filter with update=False (RLlib's
compute_action does the same).

No TensorFlow here: this runs in environment processes.
"""
import ctypes.util
import multiprocessing
import os
import sys
import threading

import numpy as np

from scalable_agent_tf2.environments import action_bounds
from scalable_agent_tf2.configuration import suites
from scalable_agent_tf2.environments import base

# Level name -> gymnasium id (gymnasium 1.4's current versions of the paper's -v2 tasks).
LEVELS = {
    "mujoco/hopper": "Hopper-v5",
    "mujoco/half_cheetah": "HalfCheetah-v5",
    "mujoco/humanoid": "Humanoid-v5",
}
# RLlib's MeanStdFilter: x / (std + SMALL_NUMBER).
FILTER_EPSILON = 1e-8
# MuJoCo's OpenGL backends for a machine without a display (MuJoCo's MUJOCO_GL variable):
# OSMesa draws on the CPU (libOSMesa); EGL needs a GPU driver's EGL.
HEADLESS_GL_BACKENDS = ("osmesa", "egl")
CANNOT_RENDER_ADVICE = (
    "MuJoCo draws with OpenGL: on a machine without a display set MUJOCO_GL=egl (with a GPU) "
    "or MUJOCO_GL=osmesa (on the CPU; e.g. apt-get install libosmesa6) before starting.")


def prepare_headless_rendering(environ=None, has_library=ctypes.util.find_library,
                               modules=None, in_environment_process=None):
  """In an environment process on a machine without a display: MuJoCo's OpenGL backend, if
  MUJOCO_GL is not set, is OSMesa where its library is installed, else EGL (MuJoCo's default,
  GLFW, needs a display; MuJoCo reads MUJOCO_GL when it is first imported, so this runs
  before: gymnasium.make of a MuJoCo task imports it); and pygame (gymnasium's
  classic-control and Box2D pictures) draws with SDL's off-screen driver instead of
  complaining that there is no display. Only drawing (render()) uses either.

  Never in the process that runs TensorFlow, nor in one that will (the main process, before
  TensorFlow is imported): with MUJOCO_GL=osmesa a process that imports TensorFlow aborts
  at MuJoCo's first steps, drawing or not (measured: SIGABRT stepping Hopper-v5). Test mode
  records such environments in processes of their own (evaluation.py).

  Returns:
    The MuJoCo backend set, or None when nothing was set.
  """
  environ = os.environ if environ is None else environ
  modules = sys.modules if modules is None else modules
  if in_environment_process is None:
    in_environment_process = multiprocessing.parent_process() is not None
  if (not in_environment_process or "tensorflow" in modules or environ.get("DISPLAY")
      or environ.get("WAYLAND_DISPLAY")):
    return None
  environ.setdefault("SDL_VIDEODRIVER", "dummy")
  if environ.get("MUJOCO_GL") or "mujoco" in modules:
    return None
  backend = HEADLESS_GL_BACKENDS[0] if has_library("OSMesa") else HEADLESS_GL_BACKENDS[1]
  environ["MUJOCO_GL"] = backend
  return backend


def render_rgb(env, level_name):
  """gymnasium `env`'s rgb_array picture, uint8 [H, W, 3]; base.CannotRender saying why not
  (no rgb_array mode, its renderer's error, a picture of another shape). An environment made
  without a render mode is switched to rgb_array at the first call: gymnasium's environments
  read render_mode when they draw (MuJoCo's renderer makes its OpenGL context then), so
  training, which never draws, makes its environments as it always did."""
  modes = (env.metadata or {}).get("render_modes") or ()
  if env.render_mode is None and "rgb_array" in modes:
    env.unwrapped.render_mode = "rgb_array"
  mode = env.render_mode
  if mode != "rgb_array":
    raise base.CannotRender(f"{level_name}: its render mode is {mode!r} and its render modes "
                            f"{list(modes)}; videos need 'rgb_array'.")
  try:
    frame = env.render()
  except Exception as error:  # pylint: disable=broad-except
    advice = (" " + CANNOT_RENDER_ADVICE) if "mujoco" in sys.modules else ""
    raise base.CannotRender(f"{level_name}: its render() raised {type(error).__name__}: "
                            f"{error}.{advice}") from None
  frame = np.asarray(frame) if frame is not None else None
  if frame is None or frame.dtype != np.uint8 or frame.ndim != 3 or frame.shape[-1] != 3:
    raise base.CannotRender(
        f"{level_name}: its render() returned "
        f"{'None' if frame is None else f'{frame.dtype} of shape {frame.shape}'}, not an RGB "
        "picture (uint8 [H, W, 3]).")
  return frame


def render_fps_of(env):
  """Agent steps per second of the task's own time: gymnasium's metadata render_fps (1 / dt
  for the MuJoCo tasks: Hopper 125, HalfCheetah 20, Humanoid 67); None when it has none."""
  fps = (env.metadata or {}).get("render_fps")
  return float(fps) if fps else None


def gymnasium_id(level_name):
  """"mujoco/hopper" -> "Hopper-v5"; ValueError naming the valid levels otherwise."""
  if not suites.is_mujoco_level(level_name) or level_name not in LEVELS:
    raise ValueError(f"{level_name!r} is not a MuJoCo level; the MuJoCo levels are "
                     f"{', '.join(LEVELS)}.")
  return LEVELS[level_name]


class MujocoEnvironment(base.Environment):
  """One gymnasium MuJoCo task as a base.Environment: float actions, float32 observations."""

  def __init__(self, level_name, seed=0):
    """Builds the simulator (headless: nothing is drawn but on render()).

    Args:
      level_name: one of LEVELS ("mujoco/hopper", ...).
      seed: int >= 0; the first reset is gymnasium's reset(seed=seed), later resets continue
        its generator, so a seed fixes every episode's initial state.
    """
    import gymnasium  # pylint: disable=g-import-not-at-top
    self.level_name = level_name
    prepare_headless_rendering()
    self._env = gymnasium.make(gymnasium_id(level_name))
    space = self._env.action_space
    self._low = np.asarray(space.low, np.float32)
    self._high = np.asarray(space.high, np.float32)
    observation_size = int(np.prod(self._env.observation_space.shape))
    self._spec = base.ContinuousEnvSpec(
        action_size=int(self._low.shape[0]), action_low=self._low.copy(),
        action_high=self._high.copy(), frame_shape=(observation_size,))
    if int(seed) != seed or seed < 0:
      raise ValueError(f"seed must be a non-negative integer (gymnasium's), got {seed!r}.")
    self._seed = int(seed)
    self._seeded = False
    self._statistics = base.EpisodeStatistics()
    self._closed = False

  @property
  def spec(self):
    return self._spec

  def _reset(self):
    """The first observation of a new episode, float32 [O]."""
    if self._seeded:
      observation, _ = self._env.reset()
    else:
      observation, _ = self._env.reset(seed=self._seed)
      self._seeded = True
    return np.asarray(observation, np.float32)

  def _check_open(self):
    if self._closed:
      raise RuntimeError(f"MujocoEnvironment({self.level_name!r}) is closed.")

  def initial(self):
    self._check_open()
    self._statistics.restart()
    return base.make_env_output(0.0, True, self._reset(), "", 0.0, 0)

  def step(self, action):
    """Acts with the action clipped to the bounds; the caller's array stays as it was."""
    self._check_open()
    action = base.check_continuous_action(action, self._spec.action_size)
    sent = action_bounds.clip_to_bounds(action, self._low, self._high)
    observation, reward, terminated, truncated, _ = self._env.step(sent)
    ended = bool(terminated or truncated)
    reward = float(reward)
    episode_return, episode_step = self._statistics.record(reward, episode_ended=ended)
    if ended:
      frame = self._reset()
    else:
      frame = np.asarray(observation, np.float32)
    return base.make_env_output(reward, ended, frame, "", episode_return, episode_step)

  def render(self):
    """gymnasium's rgb_array picture of the task, uint8 [480, 480, 3]."""
    self._check_open()
    return render_rgb(self._env, self.level_name)

  def render_fps(self):
    return render_fps_of(self._env)

  def close(self):
    if not self._closed:
      self._closed = True
      self._env.close()


class RunningStatistics:
  """Count n, mean [O] and sum of squared deviations m2 [O] of observations, in float64.

  RLlib's RunningStat (rllib/utils/filter.py): Welford's update for one observation, Chan et
  al.'s parallel formula to merge two sets (what `push_batch` and syncing use).
  """

  def __init__(self, shape):
    self.shape = tuple(shape)
    self.count = 0
    self.mean = np.zeros(self.shape, np.float64)
    self.m2 = np.zeros(self.shape, np.float64)

  def push(self, x):
    """Adds one observation x [O]."""
    x = np.asarray(x, np.float64)
    if x.shape != self.shape:
      raise ValueError(f"Observation of shape {x.shape}; this filter is for {self.shape}.")
    self.count += 1
    delta = x - self.mean
    self.mean = self.mean + delta / self.count
    self.m2 = self.m2 + delta * (x - self.mean)

  def merge(self, other):
    """Adds the observations another RunningStatistics has seen (RLlib's update)."""
    if other.shape != self.shape:
      raise ValueError(f"Cannot merge statistics of shape {other.shape} into {self.shape}.")
    total = self.count + other.count
    if other.count == 0:
      return
    delta = other.mean - self.mean
    self.mean = self.mean + delta * (other.count / total)
    self.m2 = self.m2 + other.m2 + delta * delta * (self.count * other.count / total)
    self.count = total

  def push_batch(self, xs):
    """Adds observations xs [N, O]; the same statistics as N pushes, up to rounding."""
    xs = np.asarray(xs, np.float64)
    if xs.shape[1:] != self.shape:
      raise ValueError(f"Observations of shape {xs.shape}; expected [N, {self.shape}].")
    batch = RunningStatistics(self.shape)
    batch.count = xs.shape[0]
    if batch.count:
      batch.mean = xs.mean(axis=0)
      batch.m2 = ((xs - batch.mean) ** 2).sum(axis=0)
    self.merge(batch)

  @property
  def std(self):
    """sqrt(m2 / (n - 1)); RLlib's |mean| while n < 2."""
    if self.count < 2:
      return np.abs(self.mean)
    return np.sqrt(self.m2 / (self.count - 1))

  def copy(self):
    other = RunningStatistics(self.shape)
    other.count, other.mean, other.m2 = self.count, self.mean.copy(), self.m2.copy()
    return other


class MeanStdFilter:
  """RLlib's MeanStdFilter (observation_filter="MeanStdFilter", clip=None), thread-safe.

  __call__(x, update=True) adds x [O] (or a batch [N, O]) to the statistics, then returns
  float32 (x - mean) / (std + 1e-8). With no observation seen yet it returns x unchanged
  (RLlib would divide by 1e-8). See the module docstring for where one lives and how it syncs.
  """

  def __init__(self, shape):
    self.shape = tuple(shape)
    self._lock = threading.Lock()
    self._statistics = RunningStatistics(self.shape)
    self._delta = RunningStatistics(self.shape)  # Seen since the last take_delta.

  def __call__(self, x, update=True):
    x = np.asarray(x, np.float64)
    batched = x.ndim == len(self.shape) + 1
    with self._lock:
      if update:
        for statistics in (self._statistics, self._delta):
          if batched:
            statistics.push_batch(x)
          else:
            statistics.push(x)
      if self._statistics.count == 0:
        return x.astype(np.float32)
      mean, std = self._statistics.mean, self._statistics.std
    return ((x - mean) / (std + FILTER_EPSILON)).astype(np.float32)

  @property
  def count(self):
    """How many observations the statistics hold."""
    with self._lock:
      return self._statistics.count

  def take_delta(self):
    """RunningStatistics of the observations added since the last call (and forgets them)."""
    with self._lock:
      delta, self._delta = self._delta, RunningStatistics(self.shape)
    return delta

  def apply_delta(self, delta):
    """Merges another filter's take_delta() into these statistics (RLlib's apply_changes)."""
    with self._lock:
      self._statistics.merge(delta)

  def state(self):
    """The statistics as numpy arrays (for checkpoints): count int64 [], mean / m2 [O]."""
    with self._lock:
      return {"count": np.int64(self._statistics.count),
              "mean": self._statistics.mean.copy(), "m2": self._statistics.m2.copy()}

  def load_state(self, state):
    """Replaces the statistics with `state()`'s (restore, or a learner's merged filter)."""
    mean = np.asarray(state["mean"], np.float64)
    m2 = np.asarray(state["m2"], np.float64)
    if mean.shape != self.shape or m2.shape != self.shape or int(state["count"]) < 0:
      raise ValueError(f"Filter state with mean {mean.shape}, m2 {m2.shape} and count "
                       f"{state['count']} does not fit a filter of shape {self.shape}: it was "
                       f"saved for another level.")
    with self._lock:
      self._statistics.count = int(state["count"])
      self._statistics.mean, self._statistics.m2 = mean.copy(), m2.copy()
