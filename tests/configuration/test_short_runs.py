"""A budget smaller than one batch (issue 41, item 7): `--total_environment_frames=2000` on a
Box-action level ran to 32,768 frames (its preset's first batch, 32 unrolls of 1,024 steps)."""
import pytest

from scalable_agent_tf2.configuration import config as config_lib


def _resolved(level, **values):
  return config_lib.resolve(config_lib.ExperimentConfig(level_name=level, **values))


# The case: a Box level under the IMPACT paper's setting (Table 2: 32 unrolls of 1,024
# steps; the gymnasium defaults' own batches, 4 x 64 (IMPALA's set: 32 x 20), are below
# 2,000 already, so a gymnasium level shows it with its unrolls lengthened).
@pytest.mark.parametrize("level, flags", [
    ("mujoco/hopper", dict(algorithm="impact")),
    ("gym:Pendulum-v1", dict(unroll_length=1024)), ("atari/pong", {}), ("dmlab30", {})])
def test_a_budget_below_one_batch_gets_the_fewest_unrolls_that_reach_it(level, flags):
  full = _resolved(level, **flags)
  short = _resolved(level, total_environment_frames=2000, **flags)
  per_unroll = short.unroll_length * short.num_action_repeats
  batch = config_lib.frames_per_batch(short.batch_size, short.unroll_length,
                                      short.num_action_repeats)
  assert batch >= 2000 and batch - per_unroll < 2000  # The fewest unrolls that reach it.
  assert batch < 2 * 2000 or short.batch_size == 1  # Not 16-fold past the budget.
  assert short.batch_size < full.batch_size


def test_a_budget_of_a_batch_or_more_and_a_given_batch_keep_the_batch():
  assert _resolved("mujoco/hopper", algorithm="impact",
                   total_environment_frames=10**7).batch_size == 32
  assert _resolved("mujoco/hopper", algorithm="impact", total_environment_frames=2000,
                   batch_size=32).batch_size == 32
  # Repeatable rounds are sized by the batch: never changed behind the user's back.
  assert _resolved("toy/lit_side", total_environment_frames=20, repeatable=True,
                   num_actors=8).batch_size == _resolved("toy/lit_side",
                                                         repeatable=True,
                                                         num_actors=8).batch_size
