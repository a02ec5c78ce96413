"""The toy family's reward-scale pair (environments/toy.py): toy/lit_side and toy/lit_side_x1000
are one level at two reward scales, the diagnostic of a suite whose tasks differ only in scale
(per-task PopArt)."""
import numpy as np

from scalable_agent_tf2.environments import families
from scalable_agent_tf2.environments import toy
from scalable_agent_tf2.environments.families import toy as toy_family


def _play(level_name, seed, actions):
  """The EnvOutputs of level_name's environment, built as training builds it, from its first
  observation through `actions`."""
  family = families.family_of(level_name)
  constructor, kwargs = family.environment_constructor(level_name, seed, False, {})
  environment = constructor(**kwargs)
  outputs = [environment.initial()] + [environment.step(action) for action in actions]
  environment.close()
  return outputs


def test_the_pair_differs_only_in_reward_scale():
  actions = np.random.default_rng(0).integers(toy.NUM_ACTIONS, size=4 * toy.EPISODE_LENGTH + 3)
  small, large = toy_family.REWARD_SCALE_LEVELS
  for seed in (0, 5):
    ones, thousands = _play(small, seed, actions), _play(large, seed, actions)
    for step, (one, thousand) in enumerate(zip(ones, thousands)):
      np.testing.assert_array_equal(one.observation.frame, thousand.observation.frame)
      assert one.observation.instruction == thousand.observation.instruction
      assert (one.done, one.episode_step, one.truncated) == (
          thousand.done, thousand.episode_step, thousand.truncated), step
      assert thousand.reward == 1000.0 * one.reward, step
      assert thousand.episode_return == 1000.0 * one.episode_return, step
    rewards = {one.reward for one in ones[1:]}
    assert rewards == {0.0, 1.0}, rewards  # Successes and failures both happened.


def test_the_pair_is_listed_and_shares_the_toy_presets():
  family = families.family_of(toy_family.REWARD_SCALE_LEVELS[1])
  assert family is toy_family.FAMILY
  assert set(toy_family.REWARD_SCALE_LEVELS) <= set(family.listed_levels())
  small, large = (family.presets(name, [name], "impala", 2)
                  for name in toy_family.REWARD_SCALE_LEVELS)
  assert small == large


def test_the_unlit_levels_pay_the_other_side_of_a_dimmer_frame():
  """toy/unlit_side is toy/lit_side in conflict: the same side sequence under a seed, its lit
  half at UNLIT_BRIGHTNESS (so the frames tell the levels apart), the reward for the other
  side (none for "neither" in either); toy/unlit_side_x1000 is it paying 1,000."""
  actions = np.random.default_rng(1).integers(toy.NUM_ACTIONS, size=3 * toy.EPISODE_LENGTH)
  lit = _play("toy/lit_side", 2, actions)
  unlit = _play("toy/unlit_side", 2, actions)
  unlit_large = _play("toy/unlit_side_x1000", 2, actions)
  for action, a, b, c in zip(np.concatenate([[2], actions]), lit, unlit, unlit_large):
    np.testing.assert_array_equal(b.observation.frame,
                                  (a.observation.frame > 0) * toy.UNLIT_BRIGHTNESS)
    np.testing.assert_array_equal(c.observation.frame, b.observation.frame)
    assert (a.done, a.episode_step) == (b.done, b.episode_step) == (c.done, c.episode_step)
    assert b.reward == (0.0 if action == 2 else 1.0 - a.reward)
    assert c.reward == 1000.0 * b.reward and c.episode_return == 1000.0 * b.episode_return
  assert {b.reward for b in unlit[1:]} == {0.0, 1.0}
  assert set(toy_family.CONFLICT_LEVELS + toy_family.CONFLICT_SCALE_LEVELS) <= set(
      toy_family.LEVELS)
