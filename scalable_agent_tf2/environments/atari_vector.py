"""A group of N Atari games stepped together by ale-py's C++ threads (ale_py.AtariVectorEnv).

No subprocess, no pipe and no Python per environment step: one `step(actions[N])` call hands
the N actions to ale-py's worker threads (which release the GIL), and everything this module
adds is array operations over the group. The preprocessing and the episode semantics are
those of `atari.AtariEnvironment` (Appendix G, Table G.1, section 5.3.2), which
tests/environments/test_atari_vector.py checks frame by frame against it.

Interface for an actor thread that drives a group:

    group = AtariVectorGroup("pong", seeds=[10, 11, 12, 13])   # N = 4 games of one ROM.
    num_actions, frame_shape = group.spec                      # 6, (84, 84, 4)
    group.level_names                                          # ["atari/pong"] * 4
    output = group.initial()                                   # structures.EnvOutput of arrays
    output = group.step(actions)                               # actions: int [N]
    for index, episode_return, episode_step in group.finished_games():
      log(group.level_names[index], episode_return, episode_step)
    group.close()

  * Every field of the EnvOutput has the group as its leading axis: reward float32 [N]
    (unclipped), done bool [N], observation.frame uint8 [N, 84, 84, 4] (the last frame last,
    as AtariEnvironment's), observation.instruction a tuple of N "" (Atari has none),
    episode_return float32 [N], episode_step int32 [N], truncated bool [N] (all False, as
    AtariEnvironment's). Row i is what
    AtariEnvironment(seed=seeds[i]).step(actions[i]) returns, field for field, but for the
    no-op counts drawn and the two differences named below.
  * `initial()` starts a new game in every environment: done all True, rewards and statistics
    0. Call it once; afterwards every environment resets itself (the released code's
    convention, base.py): at a step that ends an episode, row i's observation is the FIRST of
    the new episode (already no-op started), done[i] is True, and reward[i] is the reward of
    the step that ended it. An actor needs no per-environment reset call.
  * done[i] is True at a game over and, in training (`terminal_on_life_loss`), at a lost life
    as well; the game then goes on (no reset, no no-ops): only a game over starts a new game.
  * episode_return / episode_step are the whole GAME's (they do not restart at a lost life), as
    AtariEnvironment's. `finished_games()` lists (index, return, length in agent steps) of the
    games that ended at the last step: what an actor logs (Table 4 scores whole games).
  * `render(i)`: environment i's newest observation frame, the grey 84x84 max-pooled frame
    in three channels, for test mode's videos. ale-py's vector returns only the preprocessed
    stacks, no emulator screen; AtariEnvironment (one process per game: sticky actions, other
    frame sizes or repeats) renders the emulator's 210x160 RGB screen.
  * The group is synchronous: every step acts in all N environments. Partial resets (below)
    need ale-py's synchronous mode, and an actor's unroll is a whole group anyway.

How AtariVectorEnv's options map onto Table G.1, and what this wrapper does on top:
  * frameskip=4, maxpool=True (max over the last two raw frames), grayscale, 84x84 INTER_AREA
    resize, stack_num=4, repeat_action_probability=0 (no sticky actions), full_action_space
    for the multi-task agent, reward_clipping=False (the learner clips), use_fire_reset=False,
    autoreset_mode SameStep (the new episode's first observation at the step that ended one).
  * No-ops: ale-py draws uniform [0, noop_max - 1] no-op frames per reset; section 5.3.2 says
    uniform [1, 30]. We pass noop_max = max_noops + 1 and reset again (with the environment's
    own random stream) every environment that drew 0 no-ops (episode_frame_number 0 after a
    reset): uniform [0, 30] conditioned on >= 1 is exactly uniform [1, 30]. It is rare (1 reset
    in 31) and costs one extra reset of those environments, not a Python loop per step.
  * First frame of a game: ale-py stacks it with three zero frames (and shifts them out over
    the next three steps); AtariEnvironment fills the stack with it. We write the first frame
    over ale-py's zero frames (_fill_first_frames).
  * Life loss: ale-py's episodic_life resets the whole game at a lost life, and its
    life_loss_info does not count the last life. Neither is AtariEnvironment's, so we use
    neither: done |= lives < previous lives, from the `lives` ale-py reports.
  * Frame cap: AtariEnvironment caps a game at max_episode_frames emulator frames counted from
    the reset, no-ops included (ALE's max_num_frames_per_episode); ale-py counts only the
    frames of agent steps, after the no-ops. We pass ale-py the same cap (it binds when no
    no-op was played) and end, and reset, every game whose episode_frame_number reached the
    cap ourselves. The one difference left: AtariEnvironment stops acting mid-step at the cap,
    ale-py finishes the step, so the last step of a capped game may add up to
    num_action_repeats - 1 frames' reward (once in 108,000 frames; the observation is the next
    game's either way).
  * Difference not removable here: after the no-ops AtariEnvironment max-pools the last two
    no-op frames into the first frame; ale-py (like gymnasium's AtariPreprocessing) uses the
    last no-op frame alone (ale-py returns no earlier screen to pool with). They differ only
    where the screen changed in the last no-op frame. Measured over no-op counts 2..30 (one
    seed): never on Breakout; on Pong only after 2 no-ops (the screen is drawn at frame 2);
    on Space Invaders 2 counts (<= 44 of 33,600 pixels), Ms. Pac-Man 15 (<= 116), Seaquest 7
    (<= 592), Beam Rider 9 (<= 1,216). Only the first observation of a game is affected.
    tests/environments/test_atari_vector.py checks the group's first frame against ALE's last
    screen.
  * Seeds: environment i gets the ALE seed AtariEnvironment derives from seeds[i]
    (atari._derive_seeds); ale-py seeds its no-op generator with it too, so the no-op counts
    are seeded and reproducible but are not AtariEnvironment's draws.
"""
import ale_py.roms
import numpy as np
from ale_py.vector_env import AtariVectorEnv

from scalable_agent_tf2.environments import atari
from scalable_agent_tf2.environments import base
from scalable_agent_tf2.structures import EnvOutput
from scalable_agent_tf2.structures import Observation

# ale-py's cap when ours is disabled (0): about 5 hours of play, far beyond any game, and
# below 2**31 (ale-py keeps the cap + 1 in an int).
_NO_FRAME_CAP = 2 ** 30


def _ale_seed(seed):
  """The ALE seed AtariEnvironment(seed=seed) gives its emulator."""
  ale_seed, _ = atari._derive_seeds(seed)  # pylint: disable=protected-access
  return ale_seed


class AtariVectorGroup(object):
  """N games of one Atari ROM stepped in ale-py's C++ threads; see the module docstring."""

  def __init__(self, game, seeds, full_action_space=False, terminal_on_life_loss=True,
               max_noops=atari.DEFAULT_MAX_NOOPS,
               max_episode_frames=atari.DEFAULT_MAX_EPISODE_FRAMES, num_threads=0):
    """Loads the ROM into len(seeds) emulators.

    Args:
      game: ROM id in lower_snake_case, e.g. "pong", "space_invaders".
      seeds: sequence of ints, one per environment (AtariEnvironment's `seed`).
      full_action_space: False: the game's minimal action set (experts); True: all 18 actions
        (the multi-task agent, Appendix G).
      terminal_on_life_loss: done on every lost life (Table G.1, training); False for test
        mode, where only a game over ends an episode.
      max_noops: games start with uniform [1, max_noops] no-op frames; 0 for none.
      max_episode_frames: a game is over after this many frames; 0 for no limit.
      num_threads: ale-py worker threads; 0: min(N, number of cores).
    """
    if ale_py.roms.get_rom_path(game) is None:
      raise ValueError("ale-py has no ROM for game %r." % (game,))
    seeds = [int(seed) for seed in seeds]
    if not seeds:
      raise ValueError("seeds must name at least one environment, got an empty sequence.")
    if max_noops < 0 or max_episode_frames < 0:
      raise ValueError("max_noops and max_episode_frames must be >= 0, got %d and %d."
                       % (max_noops, max_episode_frames))
    self.game = game
    self.num_envs = len(seeds)
    self.level_names = ["atari/%s" % game] * self.num_envs
    self._terminal_on_life_loss = terminal_on_life_loss
    self._max_noops = max_noops
    self._max_episode_frames = max_episode_frames
    self._ale_seeds = np.array([_ale_seed(seed) for seed in seeds], np.int64)
    self._vector_env = AtariVectorEnv(
        game, self.num_envs, num_threads=num_threads,
        max_num_frames_per_episode=max_episode_frames or _NO_FRAME_CAP,
        repeat_action_probability=0.0, full_action_space=full_action_space,
        autoreset_mode="SameStep", img_height=atari.DEFAULT_FRAME_SIZE,
        img_width=atari.DEFAULT_FRAME_SIZE, grayscale=True,
        stack_num=atari.DEFAULT_FRAME_STACK, frameskip=atari.DEFAULT_NUM_ACTION_REPEATS,
        maxpool=True, noop_max=max_noops + 1 if max_noops else 0, episodic_life=False,
        life_loss_info=False, reward_clipping=False, use_fire_reset=False)
    self._num_actions = int(self._vector_env.single_action_space.n)
    self._lives = np.zeros(self.num_envs, np.int32)
    # Steps since each game started, and its first frame (see _fill_first_frames).
    self._game_age = np.zeros(self.num_envs, np.int64)
    self._first_frame = np.zeros((self.num_envs,) + self.spec.frame_shape[:2], np.uint8)
    self._episode_return = np.zeros(self.num_envs, np.float32)
    self._episode_step = np.zeros(self.num_envs, np.int32)
    self._episode_frame_number = np.zeros(self.num_envs, np.int32)
    self._finished = []
    self._last_frames = None
    self._started = False
    self._closed = False

  @property
  def spec(self):
    """base.EnvSpec of each environment of the group."""
    return base.EnvSpec(num_actions=self._num_actions,
                        frame_shape=(atari.DEFAULT_FRAME_SIZE, atari.DEFAULT_FRAME_SIZE,
                                     atari.DEFAULT_FRAME_STACK))

  def _check_open(self):
    if self._closed:
      raise RuntimeError("AtariVectorGroup(%r) is closed." % self.game)

  def _reset_rows(self, frames, info, rows):
    """Resets the environments of bool mask `rows` until each played >= 1 no-op frame.

    Writes their new first stacks into `frames` [N, 84, 84, 4] and their lives and episode
    frame numbers into `info`.
    """
    while rows.any():
      new_stacks, new_info = self._vector_env.reset(options={"reset_mask": rows})
      frames[rows] = np.moveaxis(new_stacks[rows], 1, -1)
      for key in ("lives", "episode_frame_number"):
        info[key][rows] = new_info[key][rows]
      rows = rows & self._drew_no_noop(info)

  def _drew_no_noop(self, info):
    """Rows whose last reset played 0 no-ops although max_noops asks for [1, max_noops]."""
    return (info["episode_frame_number"] == 0) & (self._max_noops > 0)

  @staticmethod
  def _received(stacks, info):
    """Our own copies: frames [N, 84, 84, 4] (last frame last, as AtariEnvironment's), info."""
    return (np.ascontiguousarray(np.moveaxis(stacks, 1, -1)),
            {key: np.array(value) for key, value in info.items()})

  def _fill_first_frames(self, frames, new_game):
    """Gives the stacks AtariEnvironment's padding: its first frame, where ale-py has zeros.

    ale-py starts a game's stack as three zero frames and the first frame, and shifts real
    frames in over the next three steps; AtariEnvironment starts it as four copies of the first
    frame. So rows of `new_game` get the first frame everywhere, and the rows whose game is
    younger than the stack get it in the slots ale-py still holds as zeros.
    """
    self._game_age += 1
    self._game_age[new_game] = 0
    self._first_frame[new_game] = frames[new_game][..., -1]
    for age in range(atari.DEFAULT_FRAME_STACK - 1):  # A loop over ages, not environments.
      rows = self._game_age == age
      if rows.any():
        frames[rows, :, :, :atari.DEFAULT_FRAME_STACK - 1 - age] = (
            self._first_frame[rows][..., np.newaxis])

  def _output(self, reward, done, frames):
    self._last_frames = frames  # For render(); the caller's arrays are not written to.
    return EnvOutput(reward=reward, done=done,
                     observation=Observation(frame=frames, instruction=("",) * self.num_envs),
                     episode_return=self._episode_return.copy(),
                     episode_step=self._episode_step.copy(),
                     truncated=np.zeros(self.num_envs, bool))  # No step of its own at a cap.

  def initial(self):
    """Starts a new game in every environment; returns the first EnvOutput of the group."""
    self._check_open()
    frames, info = self._received(*self._vector_env.reset(seed=self._ale_seeds))
    self._reset_rows(frames, info, self._drew_no_noop(info))
    self._fill_first_frames(frames, np.ones(self.num_envs, bool))
    self._lives[:] = info["lives"]
    self._episode_frame_number = info["episode_frame_number"]
    self._episode_return[:] = 0
    self._episode_step[:] = 0
    self._finished = []
    self._started = True
    return self._output(np.zeros(self.num_envs, np.float32), np.ones(self.num_envs, bool),
                        frames)

  def _check_actions(self, actions):
    actions = np.asarray(actions)
    if actions.shape != (self.num_envs,) or not np.issubdtype(actions.dtype, np.integer):
      raise ValueError("actions must be integers of shape [%d] (one per environment), got "
                       "%s of shape %s." % (self.num_envs, actions.dtype, actions.shape))
    if actions.min() < 0 or actions.max() >= self._num_actions:
      raise ValueError("Actions %s are out of range: this game has %d actions (0..%d)."
                       % (actions[(actions < 0) | (actions >= self._num_actions)].tolist(),
                          self._num_actions, self._num_actions - 1))
    return actions.astype(np.int32)

  def step(self, actions):
    """Acts in every environment (int [N]); returns the group's next EnvOutput (auto-reset)."""
    self._check_open()
    if not self._started:
      raise RuntimeError("Call initial() before step() on AtariVectorGroup(%r)." % self.game)
    actions = self._check_actions(actions)
    stacks, rewards, terminated, truncated, info = self._vector_env.step(actions)
    frames, info = self._received(stacks, info)
    reset_by_ale = terminated | truncated
    # ale-py reset these rows itself (SameStep): their lives and frame numbers are the new
    # game's. The others reach our cap counted with the no-ops (AtariEnvironment's).
    capped = ~reset_by_ale & (self._max_episode_frames > 0) & (
        info["episode_frame_number"] >= self._max_episode_frames)
    self._reset_rows(frames, info, capped | (reset_by_ale & self._drew_no_noop(info)))
    game_over = reset_by_ale | capped
    self._fill_first_frames(frames, game_over)
    life_lost = info["lives"] < self._lives
    done = game_over | (life_lost & self._terminal_on_life_loss)
    self._lives[:] = info["lives"]
    self._episode_frame_number = info["episode_frame_number"]
    rewards = rewards.astype(np.float32)
    self._episode_return += rewards
    self._episode_step += 1
    output = self._output(rewards, done, frames)
    self._finished = [(int(i), float(output.episode_return[i]), int(output.episode_step[i]))
                      for i in np.flatnonzero(game_over)]
    self._episode_return[game_over] = 0
    self._episode_step[game_over] = 0
    return output

  @property
  def episode_frame_number(self):
    """int32 [N]: emulator frames of each running game, its no-ops included (ALE's count).

    At a game's first observation it is the number of no-op frames the game started with.
    """
    return self._episode_frame_number.copy()

  def finished_games(self):
    """[(index, episode_return, episode_step)] of the games that ended at the last step."""
    return list(self._finished)

  def render(self, index):
    """Environment `index`'s newest observation frame as RGB, uint8 [84, 84, 3] (the module
    docstring says why not the emulator's screen)."""
    self._check_open()
    if self._last_frames is None:
      raise RuntimeError("Call initial() before render() on AtariVectorGroup(%r)." % self.game)
    return np.repeat(self._last_frames[index, :, :, -1:], 3, axis=-1)

  def render_fps(self):
    """Agent steps per second of game time (atari.EMULATOR_FPS / 4 frames a step)."""
    return atari.EMULATOR_FPS / atari.DEFAULT_NUM_ACTION_REPEATS

  def close(self):
    """Stops ale-py's threads and frees the emulators; further calls are errors."""
    if not self._closed:
      self._closed = True
      self._vector_env = None  # ale-py joins its threads when the interface is freed.

  def __enter__(self):
    return self

  def __exit__(self, *exc_info):
    self.close()
