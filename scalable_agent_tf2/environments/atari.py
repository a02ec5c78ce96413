"""Atari 2600 games through ale-py, preprocessed as in the IMPALA paper (Appendix G, Table G.1).

Table G.1: 84x84 grey frames, action repeat 4 with a max-pool over the last 2 raw frames, a
stack of the last 4 frames, end of episode when a life is lost (training only). Section 5.3.2:
each episode starts with a number of no-op actions drawn uniformly from [1, 30]. Appendix G:
experts use the game's minimal action set, the multi-task agent the full 18 actions. The
preprocessing is "the same as Mnih et al. (2016)"; like gymnasium's AtariPreprocessing (whose
frames tests/environments/test_atari.py matches exactly) the no-ops are raw frames and the resize is
OpenCV's INTER_AREA.

No sticky actions by default (the paper predates them); `sticky_actions=True` sets ALE's
repeat_action_probability to 0.25 (Machado et al., 2018). Rewards are returned unclipped.

Life loss and reported returns: with `terminal_on_life_loss` (training), losing a life makes
`done` True (the learner must not bootstrap across it) but the game goes on; only a game over
starts a new game (with new no-ops). episode_return / episode_step are always the whole
GAME's, so the return reported when a game ends is the game's score (Table 4 scores whole
games). At a life-loss `done` they are the running game's statistics, not restarted.
"""
import ale_py
import ale_py.roms
import cv2
import numpy as np

from scalable_agent_tf2.environments import base

# Table G.1.
DEFAULT_FRAME_SIZE = 84
DEFAULT_NUM_ACTION_REPEATS = 4
DEFAULT_FRAME_STACK = 4
# Table G.1: "Max-pool over last N action repeat frames: 2".
_NUM_POOLED_FRAMES = 2
# Section 5.3.2: no-ops "uniformly chosen from [1, 30]".
DEFAULT_MAX_NOOPS = 30
# Machado et al. (2018), "Revisiting the Arcade Learning Environment", section 5.2.
STICKY_ACTION_PROBABILITY = 0.25
# 30 minutes of play at 60 frames/s: the usual cap on an Atari episode (Machado et al. 2018,
# section 5; ale-py's ALE/*-v5 environments). 0 disables it.
DEFAULT_MAX_EPISODE_FRAMES = 108000
# The Atari 2600's (NTSC) frame rate, frames per second: a video of agent steps of
# num_action_repeats frames plays in real time at EMULATOR_FPS / num_action_repeats.
EMULATOR_FPS = 60
# ALE's NOOP is action 0 in both the minimal and the full action set.
_NOOP = ale_py.Action.NOOP

# ale-py prints its banner and warnings to stderr at every construction otherwise.
ale_py.ALEInterface.setLoggerMode(ale_py.LoggerMode.Error)


def _derive_seeds(seed):
  """(ALE seed in [0, 2**31), numpy Generator for the no-ops) from one int seed."""
  ale_state, noop_state = np.random.SeedSequence(seed).generate_state(2)
  return int(ale_state) & 0x7FFFFFFF, np.random.default_rng(int(noop_state))


class AtariEnvironment(base.Environment):
  """One Atari game with the paper's preprocessing; frames uint8 [84, 84, 4], last frame last."""

  def __init__(self, game, seed=0, full_action_space=False, terminal_on_life_loss=True,
               sticky_actions=False, num_action_repeats=DEFAULT_NUM_ACTION_REPEATS,
               max_noops=DEFAULT_MAX_NOOPS, frame_size=DEFAULT_FRAME_SIZE,
               frame_stack=DEFAULT_FRAME_STACK,
               max_episode_frames=DEFAULT_MAX_EPISODE_FRAMES):
    """Loads the game's ROM (shipped with ale-py).

    Args:
      game: ROM id in lower_snake_case, e.g. "pong", "space_invaders".
      seed: int; fixes ALE's randomness and the number of no-ops of every episode.
      full_action_space: False: the game's minimal action set (experts); True: all 18 actions
        (the multi-task agent, Appendix G).
      terminal_on_life_loss: done on every lost life (Table G.1, training); False for
        evaluation, where only a game over ends an episode.
      sticky_actions: repeat the previous action with probability 0.25 (off in the paper).
      num_action_repeats: frames per agent step (Table G.1: 4).
      max_noops: episodes start with uniform [1, max_noops] no-op frames; 0 for none.
      frame_size: side of the square grey frames (Table G.1: 84).
      frame_stack: number of stacked frames (Table G.1: 4).
      max_episode_frames: a game is over after this many frames; 0 for no limit.
    """
    rom_path = ale_py.roms.get_rom_path(game)
    if rom_path is None:
      raise ValueError("ale-py has no ROM for game %r." % (game,))
    if num_action_repeats < 1:
      raise ValueError("num_action_repeats must be >= 1, got %d." % num_action_repeats)
    ale_seed, self._noop_rng = _derive_seeds(seed)
    self._ale = ale_py.ALEInterface()
    self._ale.setInt("random_seed", ale_seed)
    self._ale.setFloat("repeat_action_probability",
                       STICKY_ACTION_PROBABILITY if sticky_actions else 0.0)
    self._ale.setInt("frame_skip", 1)  # We repeat actions ourselves, to max-pool frames.
    self._ale.setInt("max_num_frames_per_episode", max_episode_frames)
    self._ale.loadROM(str(rom_path))
    self._actions = list(self._ale.getLegalActionSet() if full_action_space
                         else self._ale.getMinimalActionSet())
    self._terminal_on_life_loss = terminal_on_life_loss
    self._num_action_repeats = num_action_repeats
    self._max_noops = max_noops
    self._frame_size = frame_size
    height, width = self._ale.getScreenDims()
    # The last two raw grey screens of an agent step, max-pooled into one frame.
    self._raw_screens = np.zeros((_NUM_POOLED_FRAMES, height, width), np.uint8)
    self._stack = np.zeros((frame_size, frame_size, frame_stack), np.uint8)
    self._lives = 0
    self._statistics = base.EpisodeStatistics()
    self._closed = False
    self.game = game

  @property
  def spec(self):
    return base.EnvSpec(num_actions=len(self._actions), frame_shape=self._stack.shape)

  def _act_frames(self, ale_action, num_frames):
    """Acts for num_frames raw frames; returns (summed reward, pooled grey frame [84, 84]).

    The pooled frame is the max over the last two raw screens (one if num_frames is 1); it is
    meaningless when the game ended during these frames.
    """
    reward = 0.0
    first_pooled = num_frames - _NUM_POOLED_FRAMES
    num_grabbed = 0
    for frame_index in range(num_frames):
      reward += self._ale.act(ale_action)
      if self._ale.game_over():
        break
      if frame_index >= first_pooled:
        self._ale.getScreenGrayscale(self._raw_screens[num_grabbed])
        num_grabbed += 1
    if num_grabbed == _NUM_POOLED_FRAMES:
      pooled = np.maximum(self._raw_screens[0], self._raw_screens[1])
    else:
      pooled = self._raw_screens[0]
    return reward, cv2.resize(pooled, (self._frame_size, self._frame_size),
                              interpolation=cv2.INTER_AREA)

  def _new_game(self):
    """Resets the game and plays the random no-ops; fills the stack with the first frame."""
    while True:
      self._ale.reset_game()
      num_noops = int(self._noop_rng.integers(1, self._max_noops + 1)) if self._max_noops else 0
      if num_noops:
        _, frame = self._act_frames(_NOOP, num_noops)
      else:
        self._ale.getScreenGrayscale(self._raw_screens[0])
        frame = cv2.resize(self._raw_screens[0], (self._frame_size, self._frame_size),
                           interpolation=cv2.INTER_AREA)
      if not self._ale.game_over():  # Practically always; retry if the no-ops ended it.
        break
    self._lives = self._ale.lives()
    self._stack[...] = frame[:, :, np.newaxis]

  def _push_frame(self, frame):
    self._stack[:, :, :-1] = self._stack[:, :, 1:]
    self._stack[:, :, -1] = frame

  def _check_open(self):
    if self._closed:
      raise RuntimeError("AtariEnvironment(%r) is closed." % self.game)

  def initial(self):
    self._check_open()
    self._new_game()
    self._statistics.restart()
    return base.make_env_output(0.0, True, self._stack.copy(), "", 0.0, 0)

  def step(self, action):
    self._check_open()
    action = base.check_action(action, len(self._actions))
    reward, frame = self._act_frames(self._actions[action], self._num_action_repeats)
    game_over = self._ale.game_over()
    episode_return, episode_step = self._statistics.record(reward, episode_ended=game_over)
    if game_over:
      self._new_game()
      done = True
    else:
      self._push_frame(frame)
      lives = self._ale.lives()
      done = self._terminal_on_life_loss and lives < self._lives
      self._lives = lives
    return base.make_env_output(reward, done, self._stack.copy(), "", episode_return,
                                episode_step)

  def render(self):
    """The emulator's RGB screen, uint8 [210, 160, 3]: the last raw frame of the last agent
    step (the grey observation max-pools the last two and shrinks them to 84x84); after a
    game over, the new game's screen after its no-ops."""
    self._check_open()
    return self._ale.getScreenRGB()

  def render_fps(self):
    return EMULATOR_FPS / self._num_action_repeats

  def close(self):
    # ALEInterface frees its emulator when garbage-collected; drop our reference now.
    self._closed = True
    self._ale = None
