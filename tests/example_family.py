"""A complete small environment family (docs/ENVIRONMENTS.md's example): "coin/<side>" levels.

    from scalable_agent_tf2.environments import families
    families.register(example_family.FAMILY)        # or one entry in families.FAMILIES
    python experiment.py --level_name=coin/show ...  # once registered in FAMILIES

The environment shows a coin (a 20x20 grey frame: bright for heads, dark for tails); action 0
says heads, 1 tails; reward 1 for the right answer; 8 steps an episode. "coin/show" rewards
naming the coin on screen; "coin/hide" shows it one step late (the answer is the previous
frame's: the agent needs memory). Not from any paper.
"""
import numpy as np

from scalable_agent_tf2.environments import base
from scalable_agent_tf2.environments.families import base as family_base
from scalable_agent_tf2.environments.families import toy as toy_family

LEVELS = ("coin/show", "coin/hide")
EPISODE_LENGTH = 8
FRAME_SHAPE = (20, 20, 1)


class CoinEnvironment(base.Environment):
  """See the module docstring. Numpy only, so it can also run in an environment process."""

  def __init__(self, seed=0, hide=False):
    self._rng = np.random.default_rng(seed)
    self._hide = hide
    self._statistics = base.EpisodeStatistics()
    self._coins = [0, 0]
    self._step = 0

  @property
  def spec(self):
    return base.EnvSpec(num_actions=2, frame_shape=FRAME_SHAPE)

  def _frame(self):
    return np.full(FRAME_SHAPE, 255 if self._coins[-1] == 0 else 0, np.uint8)

  def _toss(self):
    self._coins = [self._coins[-1], int(self._rng.integers(2))]

  def initial(self):
    self._statistics.restart()
    self._step = 0
    self._toss()
    return base.make_env_output(0.0, True, self._frame(), "", 0.0, 0)

  def step(self, action):
    action = base.check_action(action, 2)
    answer = self._coins[0] if self._hide else self._coins[-1]
    reward = 1.0 if action == answer else 0.0
    self._step += 1
    done = self._step >= EPISODE_LENGTH
    episode_return, episode_step = self._statistics.record(reward, episode_ended=done)
    if done:
      self._step = 0
    self._toss()
    return base.make_env_output(reward, done, self._frame(), "", episode_return, episode_step)

  def close(self):
    pass


class CoinFamily(family_base.Family):
  """The family: its names, presets, environments, how they run and its network."""
  name = "coin"
  title = "Coin levels (an example family, docs/ENVIRONMENTS.md)"
  prefixes = ("coin/",)

  def listed_levels(self):
    return LEVELS

  def presets(self, level_name, levels, algorithm, num_cores, given=None):
    # The toy levels' setting (Table G.1's learner, small batch and unrolls), 4 environments
    # in each of the machine's actor threads.
    values = dict(toy_family.TOY)
    values.update(family_base.actor_layout(8, num_cores))
    return values

  def environment_constructor(self, level_name, seed, test_mode, options):
    del test_mode  # Test mode plays the same coin.
    return CoinEnvironment, dict(seed=seed, hide=level_name == "coin/hide", **options)

  def runs_as(self, config):
    return family_base.IN_PROCESS_GROUP  # A step is a few microseconds.

  def network_config(self, config, spec):
    # Figure 3's feed-forward agent on the frame ("coin/hide" would want use_lstm=True).
    return family_base.frame_network_config(config, spec.num_actions, 1, use_lstm=False,
                                            use_instruction=False)


FAMILY = CoinFamily()
