"""The gpu tier: the paper's hardware (a learner on a GPU, XLA-compiled) checked on a GPU.

    python -m pytest tests -m gpu          # or benchmarks/gpu/run_gpu_checks.sh OUTPUT_DIR

Never part of the default tier (pytest.ini: -m "not slow and not gpu"); every test is skipped,
with its reason, where TensorFlow sees no GPU. Each test is a comparison of
benchmarks/gpu/comparisons.py with the GPU on one side; tests/benchmark_tools/test_gpu_readiness.py runs the
same comparisons CPU against CPU in the default tier, where they must agree, and with a forced
difference, which they must report. How each test here fails when its property breaks:
  - update: a statistic of one of three updates off by more than 1e-3 relative (or an
    integer one different), or the parameters' change off by more than 1e-2 relative
    (comparisons' docstring: why these tolerances), or the variables not on the GPU;
  - dynamic batching: a thread receives rows that are not its own (another thread's, or its
    own in another order), a call fails, or the computation was not placed on the GPU;
  - toy level: the return after 100k frames below 9 (random play scores 10/3), or the run's
    learner not on the GPU with XLA;
  - checkpoints: the restored variables' digest differs from the written one, or a side did
    not run where it should (the "CPU-only" side sees a GPU, or the GPU side's variables are
    on the CPU);
  - --num_learners: as update, the strategy's update against one learner's.
"""
import json
import os
import subprocess
import sys

import numpy as np
import pytest
import tensorflow as tf

from benchmarks.gpu import comparisons
from benchmarks.tools import update_numbers

pytestmark = [pytest.mark.gpu,
              pytest.mark.skipif(comparisons.no_gpu_reason() is not None,
                                 reason=comparisons.NO_GPU)]

# The checkout: where the benchmarks package is (this file may move within tests/).
REPO_DIR = os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(comparisons.__file__))))
GPU, CPU = "/GPU:0", "/CPU:0"


@pytest.mark.timeout(600)
@pytest.mark.parametrize("case", update_numbers.CASES)
def test_the_xla_update_on_the_gpu_equals_the_cpu_update(case):
  # Atari shallow, DMLab deep + LSTM + instructions, a Gaussian policy, IMPACT (categorical
  # and Gaussian) and LASER's trust region: update_numbers' fixed batches and seed.
  with comparisons.without_tensor_float_32():
    lines, reference, candidate = comparisons.compare_case(case, (CPU, False), (GPU, True))
  assert reference["devices"] == ["CPU"]
  assert candidate["devices"] == ["GPU"], "the GPU side's variables are not on the GPU"
  assert not lines, f"{case}: the GPU update differs from the CPU update:\n" + "\n".join(lines)


@pytest.mark.timeout(300)
def test_dynamic_batching_serves_a_policy_on_the_gpu_each_thread_its_own_rows():
  # pylint: disable=g-import-not-at-top
  from scalable_agent_tf2.acting import policies
  from scalable_agent_tf2.agent import networks
  config = networks.NetworkConfig(num_actions=5, frame_shape=(24, 24, 3),
                                  torso=networks.SHALLOW, use_lstm=True, use_instruction=False)
  with tf.device(GPU):
    agent = networks.Agent(config, seed=1)
  assert comparisons.variable_devices(agent.trainable_variables) == {"GPU"}
  policy = policies.BatchedPolicy(agent, device=GPU)
  reference = policies.PerActorPolicy(agent, device=CPU)
  try:
    inputs = comparisons.thread_inputs(policy, config, num_threads=16, group_size=3)
    with comparisons.without_tensor_float_32():
      lines = comparisons.batched_rows_mismatches(policy, reference, inputs, rounds=5)
    placement = policy.placement()
  finally:
    policy.close()
  assert not lines, "\n".join(lines)
  assert placement["batcher"] == {"/device:CPU:0"}, placement
  assert any("GPU" in device for device in placement["computation"]), placement


@pytest.mark.timeout(1200)
def test_the_toy_level_trains_to_its_usual_return_on_the_gpu(tmp_path):
  # tests/run/test_training.py's learning test (the lit-side level, reward at the episode's end),
  # with the learner and the batched inference on the GPU (training chooses it) and XLA on.
  from scalable_agent_tf2.environments import toy  # pylint: disable=g-import-not-at-top
  from tests.run import test_training  # pylint: disable=g-import-not-at-top
  lines = []
  result = test_training.train_toy(
      test_training.toy_config(tmp_path, total_frames=100_000, reward_clipping="none"),
      lines=lines, delayed_reward=True)
  where = [line for line in lines if line.strip().startswith("device ")]
  assert where and "GPU" in where[0] and "XLA on" in where[0], where or lines[:10]
  assert result.num_env_frames >= 100_000
  assert result.recent_returns[toy.DELAYED_LEVEL_NAME] >= 9.0  # Random play: 10/3; optimum 10.


def _roundtrip(action, logdir, device, cpu_only):
  env = dict(os.environ)
  if cpu_only:
    env["CUDA_VISIBLE_DEVICES"] = ""  # A CPU-only machine, as TensorFlow sees it.
  run = subprocess.run([sys.executable, "-m", "benchmarks.gpu.checkpoint_roundtrip", action,
                        f"--logdir={logdir}", f"--device={device}"], cwd=REPO_DIR, env=env,
                       capture_output=True, text=True, timeout=400)
  assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-4000:]
  return json.loads(run.stdout.strip().splitlines()[-1])


@pytest.mark.timeout(900)
def test_a_checkpoint_written_on_the_gpu_restores_on_a_cpu_only_machine_and_back(tmp_path):
  written = _roundtrip("write", tmp_path / "gpu_run", GPU, cpu_only=False)
  restored = _roundtrip("read", tmp_path / "gpu_run", CPU, cpu_only=True)
  assert written["devices"] == ["GPU"] and restored["gpus_seen"] == 0, (written, restored)
  assert comparisons.digest_mismatch(written, restored) is None, (written, restored)

  written = _roundtrip("write", tmp_path / "cpu_run", CPU, cpu_only=True)
  restored = _roundtrip("read", tmp_path / "cpu_run", GPU, cpu_only=False)
  assert written["gpus_seen"] == 0 and restored["devices"] == ["GPU"], (written, restored)
  assert comparisons.digest_mismatch(written, restored) is None, (written, restored)


@pytest.mark.timeout(600)
@pytest.mark.parametrize("case", update_numbers.STRATEGY_CASES)
def test_num_learners_over_the_gpus_gives_the_single_learner_update(case):
  from scalable_agent_tf2.transport import distributed  # pylint: disable=g-import-not-at-top
  gpus = len(tf.config.list_physical_devices("GPU"))
  # Each learner takes an equal slice of the batch (comparisons.B = 4 trajectories).
  learners = max(n for n in (1, 2, 4) if n <= gpus and comparisons.B % n == 0)
  # --num_learners=N over N GPUs; one GPU: the strategy over that one device.
  strategy = (distributed.learner_strategy(learners) if learners > 1
              else tf.distribute.MirroredStrategy([GPU]))
  assert strategy.num_replicas_in_sync == learners
  with comparisons.without_tensor_float_32():
    lines, _, candidate = comparisons.compare_case(case, (GPU, True), (GPU, True),
                                                   strategy=strategy)
  assert candidate["devices"] == ["GPU"]
  assert not lines, (f"{case}: {learners} learner(s) under MirroredStrategy differ from one "
                     f"learner:\n" + "\n".join(lines))
  np.testing.assert_equal(len(candidate["updates"]), comparisons.UPDATES)
