"""--preset=impact_paper: the IMPACT paper's Atari setting (Figure 6) as its Table 1 gives it;
without it, both algorithms keep the presets they had (IMPALA Table G.1, IMPACT Table 1's own
settings on IMPALA's network and frames)."""

import os

import numpy as np
import pytest

from scalable_agent_tf2.configuration import config as config_lib
from scalable_agent_tf2.environments.atari import AtariEnvironment
from scalable_agent_tf2.environments.families import atari as atari_family
from scalable_agent_tf2.runfiles import runlog

PONG = "--level_name=atari/pong"


def _values(config, names):
  return {name: getattr(config, name) for name in names}


# IMPACT paper, Table 1 (discrete environments) and section 4.3.
TABLE_1_SHARED = dict(
    learning_rate=1e-4,     # Learning Rate, IMPACT and IMPALA: 1.0e-4.
    entropy_cost=0.01,      # Entropy Coeff: 0.01.
    discounting=0.99,       # Discount: 0.99.
    unroll_length=50,       # Sample Batch Size: 50 steps per worker fragment.
    batch_size=10,          # Train Batch Size 500 = 10 fragments of 50.
    width=42, height=42,    # Section 4.3: "a stack of four 42x42 down-sampled images".
    torso="impact_cnn",     # Section 4.3: 4x4 convolutions and one 11x11, ReLU.
    num_actors=32,          # Section 4.3: 32 CPUs.
    num_action_repeats=4, reward_clipping="abs_one")
TABLE_1_IMPACT = dict(
    TABLE_1_SHARED,
    baseline_cost=1.0,            # Value Function Coeff: 1.0.
    max_grad_norm=10.0 * 500,     # Grad Clipping 10 on the mean of 500 steps; summed here.
    ppo_clip=0.3,                 # Clip Parameter: 0.3.
    target_worker_clipping=2.0,   # Target-Worker Clipping (rho): 2.0.
    kl_cost=0.0,                  # KL Coeff: 0.0.
    gae_lambda=0.995,             # Lambda: 0.995.
    circular_buffer_size=4,       # Minibatch Buffer Size (N): 4.
    circular_buffer_max_uses=2,   # Num SGD Iterations (K): 2.
    target_update_period=8)       # Section 4.1.1: n = N x K.
TABLE_1_IMPALA = dict(TABLE_1_SHARED, baseline_cost=0.5,  # Value Function Coeff: 0.5.
                      max_grad_norm=40.0)                 # Grad Clipping: 40 (summed loss).


def test_impact_preset_is_table_1s_impact_column():
  config = config_lib.config_from_argv([PONG, "--algorithm=impact", "--preset=impact_paper"])
  assert _values(config, TABLE_1_IMPACT) == TABLE_1_IMPACT
  assert config.queue_capacity == 4 * 10


def test_impala_under_the_preset_is_table_1s_impala_column():
  config = config_lib.config_from_argv([PONG, "--algorithm=impala", "--preset=impact_paper"])
  assert _values(config, TABLE_1_IMPALA) == TABLE_1_IMPALA
  assert config.circular_buffer_size is None and config.ppo_clip is None


def test_without_the_preset_both_algorithms_keep_their_presets():
  # IMPALA Table G.1 on 84x84 frames with the shallow network; IMPACT adds its Table 1's own
  # settings and keeps the rest (as before the preset existed).
  g1 = dict(learning_rate=0.0006, entropy_cost=0.01, discounting=0.99, unroll_length=20,
            batch_size=32, width=84, height=84, torso="shallow",
            max_grad_norm=40.0, epsilon=0.01, queue_capacity=128, preset="default",
            # Table 1's 48 environments in vector groups, one actor thread per core.
            **atari_family.atari_actor_layout(os.cpu_count()))
  impala = config_lib.config_from_argv([PONG])
  assert _values(impala, g1) == g1 and impala.baseline_cost == 0.5
  impact = config_lib.config_from_argv([PONG, "--algorithm=impact"])
  assert _values(impact, g1) == g1
  assert (impact.baseline_cost, impact.ppo_clip, impact.target_worker_clipping,
          impact.gae_lambda, impact.kl_cost, impact.circular_buffer_size,
          impact.circular_buffer_max_uses) == (1.0, 0.3, 2.0, 0.995, 0.0, 4, 2)


def test_flags_given_win_over_the_preset():
  config = config_lib.config_from_argv([PONG, "--algorithm=impact", "--preset=impact_paper",
                                        "--learning_rate=0.0003", "--num_actors=8"])
  assert (config.learning_rate, config.num_actors, config.width) == (0.0003, 8, 42)


@pytest.mark.parametrize("flags, message", [
    (["--level_name=dmlab30", "--preset=impact_paper"], "one Atari game"),
    (["--level_name=atari57", "--preset=impact_paper"], "one Atari game"),
    (["--level_name=seekavoid_arena_01", "--preset=impact_paper"], "one Atari game"),
    ([PONG, "--torso=impact_cnn"], "--width=42 --height=42"),
    ([PONG, "--preset=impact_paper", "--width=84", "--height=84"], "42x42"),
    ([PONG, "--preset=paper"], "--preset=paper: value should be one of"),
])
def test_bad_combinations_are_refused_with_what_to_do(flags, message):
  with pytest.raises(ValueError, match=message):
    config_lib.config_from_argv(flags)


def test_the_torso_alone_runs_on_42x42_frames():
  config = config_lib.config_from_argv([PONG, "--torso=impact_cnn", "--width=42",
                                        "--height=42"])
  assert (config.torso, config.batch_size, config.learning_rate) == ("impact_cnn", 32, 0.0006)


def test_atari_frames_are_four_stacked_42x42_grey_frames():
  config = config_lib.config_from_argv([PONG, "--preset=impact_paper"])
  environment = AtariEnvironment("pong", seed=2, **config.family.environment_options(config))
  try:
    assert environment.spec == (6, (42, 42, 4))  # Pong's minimal action set.
    first = environment.initial()
    outputs = [environment.step(0) for _ in range(3)]
  finally:
    environment.close()
  frames = [first.observation.frame] + [o.observation.frame for o in outputs]
  assert all(f.shape == (42, 42, 4) and f.dtype == np.uint8 for f in frames)
  # The newest frame is last: each step drops the oldest.
  for previous, frame in zip(frames[1:], frames[2:]):
    np.testing.assert_array_equal(frame[..., :3], previous[..., 1:])


# Slow tier: the default tier trains IMPACT end to end (tests/run/test_training.py's
# test_impact_uses_each_batch_k_times_and_checkpoints_its_target_network) and checks the
# preset's values (test_impact_preset_is_table_1s_impact_column).
@pytest.mark.slow
@pytest.mark.timeout(300)
def test_a_few_impact_updates_on_pong_with_the_preset(tmp_path):
  from scalable_agent_tf2.run import training  # pylint: disable=g-import-not-at-top (TensorFlow)
  config = config_lib.config_from_argv([
      PONG, "--algorithm=impact", "--preset=impact_paper", f"--logdir={tmp_path}",
      "--num_actors=2", "--batch_size=2", "--unroll_length=10", "--log_secs=1",
      "--total_environment_frames=960"])  # 6 batches of 2 x 10 steps x 4 frames.
  result = training.train(config, print_fn=lambda line: None)
  assert result.num_env_frames >= 960 and result.num_updates >= 6
  progress = runlog.of_kind(runlog.read_log(str(tmp_path)), runlog.PROGRESS)
  assert progress and np.isfinite(progress[-1]["total_loss"])
