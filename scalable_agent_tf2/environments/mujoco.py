"""The IMPACT paper's continuous-control tasks (section 4.3, Figure 5) through gymnasium's MuJoCo
environments. Their observations are normalised by the actor's observation filter
(normalization.MeanStdFilter, RLlib's, which the paper's code base used for them); pictures are
drawn by rendering.py.

    env = MujocoEnvironment("mujoco/hopper", seed=1)
    spec = env.spec                    # base.ContinuousEnvSpec(3, low [3], high [3], (11,))
    output = env.initial()             # observation.frame float32 [11], RAW (unfiltered)
    output = env.step(action)          # action float [3], unclipped; auto-resets on done

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

No TensorFlow here: this runs in environment processes.
"""
import numpy as np

from scalable_agent_tf2.environments import action_bounds
from scalable_agent_tf2.environments import base
from scalable_agent_tf2.environments import rendering
from scalable_agent_tf2.environments import suites

# Level name -> gymnasium id (gymnasium 1.4's current versions of the paper's -v2 tasks).
LEVELS = {
    "mujoco/hopper": "Hopper-v5",
    "mujoco/half_cheetah": "HalfCheetah-v5",
    "mujoco/humanoid": "Humanoid-v5",
}
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
    rendering.prepare_headless_rendering()
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
    return rendering.render_rgb(self._env, self.level_name)

  def render_fps(self):
    return rendering.render_fps_of(self._env)

  def close(self):
    if not self._closed:
      self._closed = True
      self._env.close()
