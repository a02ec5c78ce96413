"""The GPU path, checked on a CPU: the gpu tier's comparisons can fail, --gpu_memory reaches
TensorFlow before its first op, the batcher's ops sit on the CPU, the GPU benchmark's code
runs, and the one-command script parses and plans (issue 34; benchmarks/gpu/README.md).

The gpu tier itself (tests/benchmark_tools/test_gpu.py) runs where TensorFlow sees a GPU.
"""
import configparser
import os
import subprocess
import sys
import textwrap
from unittest import mock

import numpy as np
import pytest
import tensorflow as tf

from benchmarks.gpu import checkpoint_roundtrip
from benchmarks.gpu import comparisons
from benchmarks.tools import update_numbers

# The checkout: where the benchmarks package is (this file may move within tests/).
REPO_DIR = os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(comparisons.__file__))))
SCRIPT = os.path.join(REPO_DIR, "benchmarks", "gpu", "run_gpu_checks.sh")
CPU = "/CPU:0"


# ---------------------------------------------------------------------------------------
# The update comparison (test_gpu's first and last tests).

def test_the_update_comparison_reports_a_learning_rate_ten_percent_off():
  lines, _, _ = comparisons.compare_case("impala_gaussian", (CPU, False), (CPU, False),
                                         learning_rate=0.011)
  assert any("learning_rate" in line for line in lines), lines
  assert any(line.startswith("parameter change") for line in lines), lines


def test_xla_against_tensorflow_kernels_agrees_within_the_tolerance():
  # Another order of float32 arithmetic, as on a GPU: the tolerance must not fail it.
  lines, reference, candidate = comparisons.compare_case("impala_gaussian", (CPU, False),
                                                         (CPU, True))
  assert not lines, lines
  assert comparisons.change_difference(reference, candidate) < comparisons.CHANGE_TOLERANCE / 100


@pytest.mark.slow
@pytest.mark.timeout(900)
@pytest.mark.parametrize("case", update_numbers.CASES)
def test_every_case_compiled_with_xla_on_the_cpu_agrees(case):
  lines, _, _ = comparisons.compare_case(case, (CPU, False), (CPU, True))
  assert not lines, lines


def test_the_statistics_comparison_names_what_moved():
  want = [{"total_loss": 100.0, "num_env_frames": 80, "target_updated": True}]
  assert not comparisons.stat_mismatches(want, [{"total_loss": 100.05, "num_env_frames": 80,
                                                 "target_updated": True}])
  lines = comparisons.stat_mismatches(want, [{"total_loss": 100.2, "num_env_frames": 81,
                                              "target_updated": False}])
  assert len(lines) == 3 and "total_loss" in lines[2] and "num_env_frames" in lines[0], lines


def test_the_parameter_comparison_needs_the_same_start():
  one = dict(initial=[np.zeros(3)], final=[np.ones(3)])
  assert comparisons.change_difference(one, dict(initial=[np.zeros(3)],
                                                 final=[np.full(3, 1.05)])) == pytest.approx(0.05)
  with pytest.raises(ValueError, match="same parameters"):
    comparisons.change_difference(one, dict(initial=[np.ones(3)], final=[np.ones(3)]))


def test_one_learner_under_a_strategy_over_one_device_gives_the_single_learner_update():
  # test_gpu's --num_learners test with one GPU, here over one CPU device.
  strategy = tf.distribute.MirroredStrategy([CPU])
  lines, _, candidate = comparisons.compare_case("impala_gaussian", (CPU, False), (CPU, False),
                                                 strategy=strategy)
  assert not lines, lines
  assert candidate["devices"] == ["CPU"]
  lines, _, _ = comparisons.compare_case("impala_gaussian", (CPU, False), (CPU, False),
                                         strategy=strategy, learning_rate=0.011)
  assert lines


def test_update_numbers_builds_each_case_once_for_both_tools():
  with pytest.raises(ValueError, match="Unknown case"):
    update_numbers.build_case("impala_pong")
  with pytest.raises(ValueError, match="needs one learner"):
    update_numbers.build_case("laser_trust_region",
                              strategy=tf.distribute.MirroredStrategy([CPU]))


def test_the_update_compiles_once_whatever_the_number_of_new_trajectories():
  # XLA compiles once per traced signature: the number of new trajectories (replay, IMPACT's
  # reused batches) is passed as a tensor, so a run's changing counts never recompile.
  the_learner, batch = update_numbers.build_case("impala_gaussian")
  for seed, num_new in enumerate((4, 0, 2)):
    env_outputs, agent_outputs = batch(5, 4, seed)
    the_learner.update(the_learner.agent.initial_state(4), env_outputs, agent_outputs,
                       num_new_trajectories=num_new)
  compiled = the_learner._compiled_update  # pylint: disable=protected-access
  assert compiled.experimental_get_tracing_count() == 1


def test_the_learners_batches_have_one_static_shape():
  # drop_remainder: no last partial batch, every dimension known, so one XLA compilation.
  # pylint: disable=g-import-not-at-top
  from scalable_agent_tf2.agent import networks
  from scalable_agent_tf2.run import assembly
  from scalable_agent_tf2.run import input_pipeline

  class _NoState:
    @staticmethod
    def initial_state():
      return ()
  config = networks.atari_config(num_actions=4, frame_shape=(24, 24, 4))
  signature = assembly.trajectory_signature(config, 5, _NoState())
  dataset = input_pipeline.make_dataset(lambda: None, signature, 8, ("atari/pong",))
  for spec in tf.nest.flatten(dataset.element_spec):
    assert spec.shape.is_fully_defined(), spec
  policy_versions, _, env_outputs, _, tasks = dataset.element_spec
  assert policy_versions.shape == [8] and env_outputs.reward.shape == [6, 8]
  assert tasks.shape == [8] and tasks.dtype == tf.int32


# ---------------------------------------------------------------------------------------
# Dynamic batching (test_gpu's second test).

def _lstm_policy_agent():
  # pylint: disable=g-import-not-at-top
  from scalable_agent_tf2.agent import networks
  config = networks.NetworkConfig(num_actions=5, frame_shape=(24, 24, 3),
                                  torso=networks.SHALLOW, use_lstm=True, use_instruction=False)
  return config, networks.Agent(config, seed=1)


def test_the_rows_comparison_passes_own_rows_and_reports_swapped_ones():
  from scalable_agent_tf2.acting import policies  # pylint: disable=g-import-not-at-top
  config, agent = _lstm_policy_agent()
  policy = policies.BatchedPolicy(agent, device=CPU)
  reference = policies.PerActorPolicy(agent, device=CPU)
  reverse = lambda tree: tf.nest.map_structure(lambda x: x[::-1], tree)
  try:
    inputs = comparisons.thread_inputs(policy, config, num_threads=6, group_size=3)
    assert not comparisons.batched_rows_mismatches(policy, reference, inputs, rounds=2)
    # A batcher that handed a group its rows in another order.
    swapped = lambda a, e, s: policy(reverse(a), reverse(e), reverse(s))
    lines = comparisons.batched_rows_mismatches(swapped, reference, inputs, rounds=1)
    placement = policy.placement()
  finally:
    policy.close()
  assert len(lines) == 6, lines
  assert placement["batcher"] == {"/device:CPU:0"}, placement
  assert placement["computation"] == {"/device:CPU:0"}, placement


def test_the_batchers_ops_are_placed_on_the_cpu_and_the_computation_where_asked():
  import dynamic_batching  # pylint: disable=g-import-not-at-top
  for device, expected in ((None, {""}), ("/device:CPU:0", {"/device:CPU:0"})):
    double = dynamic_batching.batch_fn_with_options(allow_groups=True, device=device)(
        lambda x: x * 2.0)
    try:
      assert double.placement() is None  # Nothing traced before the first call.
      np.testing.assert_array_equal(double(np.ones((3, 2), np.float32)), 2.0)
      placement = double.placement()
      graph_call = tf.function(double).get_concrete_function(tf.TensorSpec([2, 2]))
    finally:
      double.close()
    assert placement["batcher"] == {dynamic_batching.BATCHER_DEVICE}, placement
    # Without a device, the computation is TensorFlow's to place (a GPU where there is one).
    assert placement["computation"] == expected, placement
    ops = [op for op in graph_call.graph.get_operations() if op.type == "BatcherCompute"]
    assert ops and all(op.device == dynamic_batching.BATCHER_DEVICE for op in ops)


# ---------------------------------------------------------------------------------------
# Checkpoints across devices (test_gpu's fourth test).

def test_a_checkpoint_round_trip_carries_every_variable_and_a_different_one_is_reported(
    tmp_path):
  written = checkpoint_roundtrip.write(str(tmp_path / "one"), CPU, updates=1)
  restored = checkpoint_roundtrip.read(str(tmp_path / "one"), CPU)
  assert comparisons.digest_mismatch(written, restored) is None, (written, restored)
  assert restored["num_env_frames"] == written["num_env_frames"] > 0
  checkpoint_roundtrip.write(str(tmp_path / "two"), CPU, updates=2)
  other = checkpoint_roundtrip.read(str(tmp_path / "two"), CPU)
  assert comparisons.digest_mismatch(written, other), (written, other)


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_the_checkpoint_round_trip_across_processes_with_no_gpu_visible(tmp_path):
  from . import test_gpu  # pylint: disable=g-import-not-at-top
  roundtrip = test_gpu._roundtrip  # pylint: disable=protected-access
  written = roundtrip("write", tmp_path, CPU, cpu_only=False)
  restored = roundtrip("read", tmp_path, CPU, cpu_only=True)
  assert restored["gpus_seen"] == 0
  assert comparisons.digest_mismatch(written, restored) is None


# ---------------------------------------------------------------------------------------
# --gpu_memory.

class _FakeGpu:
  def __init__(self, name):
    self.name = name
    self.device_type = "GPU"


def _patched_config(gpus):
  """The tf.config functions configure_gpu_memory calls, recording their calls."""
  calls = []
  patches = [
      mock.patch.object(tf.config, "list_physical_devices",
                        lambda kind=None: list(gpus) if kind == "GPU" else []),
      mock.patch.object(tf.config.experimental, "set_memory_growth",
                        lambda gpu, enable: calls.append(("growth", gpu.name, enable))),
      mock.patch.object(tf.config, "set_logical_device_configuration",
                        lambda gpu, configs: calls.append(
                            ("limit", gpu.name, [c.memory_limit for c in configs]))),
  ]
  return calls, patches


@pytest.mark.parametrize("setting, expected", [
    ("growth", [("growth", "gpu0", True), ("growth", "gpu1", True)]),
    ("all", []),
    ("20000", [("limit", "gpu0", [20000]), ("limit", "gpu1", [20000])]),
])
def test_gpu_memory_makes_the_right_tensorflow_calls(setting, expected):
  from scalable_agent_tf2.utils import quiet_tensorflow  # pylint: disable=g-import-not-at-top
  calls, patches = _patched_config([_FakeGpu("gpu0"), _FakeGpu("gpu1")])
  for patch in patches:
    patch.start()
  try:
    assert quiet_tensorflow.configure_gpu_memory(setting, tf) == 2
  finally:
    for patch in patches:
      patch.stop()
  assert calls == expected


def test_gpu_memory_is_applied_before_tensorflows_first_op():
  from scalable_agent_tf2.utils import quiet_tensorflow  # pylint: disable=g-import-not-at-top
  order = []
  with mock.patch.object(quiet_tensorflow, "configure_gpu_memory",
                         lambda setting, tf=None: order.append(("memory", setting))), \
       mock.patch.object(quiet_tensorflow, "_spend_once_per_process_notices",
                         lambda tf: order.append("first op")), \
       mock.patch.object(quiet_tensorflow, "show_startup_logs", lambda: False):
    quiet_tensorflow.import_tensorflow(0, "1234")
  assert order == [("memory", "1234"), "first op"]


def test_experiment_passes_gpu_memory_to_tensorflows_start(tmp_path):
  # In a process of its own: the start is patched to report its arguments and exit.
  script = textwrap.dedent(f"""
      import os, sys
      from scalable_agent_tf2.utils import quiet_tensorflow
      def start(intra_op_threads=0, gpu_memory="growth"):
        print("started", intra_op_threads, gpu_memory, flush=True)
        os._exit(0)
      quiet_tensorflow.import_tensorflow = start
      from scalable_agent_tf2.run import experiment_main
      sys.argv = ["experiment.py", "--level_name=toy/lit_side", "--logdir={tmp_path}",
                  "--gpu_memory=1234", "--intra_op_threads=1"]
      experiment_main.run()
  """)
  run = subprocess.run([sys.executable, "-c", script], cwd=REPO_DIR, capture_output=True,
                       text=True, timeout=120)
  assert "started 1 1234" in run.stdout, run.stdout + run.stderr[-3000:]


def test_library_callers_get_gpu_memory_through_configure_threads():
  # pylint: disable=g-import-not-at-top
  from scalable_agent_tf2.configuration import config as config_lib
  from scalable_agent_tf2.run import assembly
  from scalable_agent_tf2.utils import quiet_tensorflow
  config = config_lib.resolve(config_lib.ExperimentConfig(level_name="toy/lit_side",
                                                          gpu_memory="512"))
  seen, lines = [], []

  def already_running(setting, tf=None):
    seen.append(setting)
    raise RuntimeError("Physical devices cannot be modified after being initialized")
  with mock.patch.object(quiet_tensorflow, "configure_gpu_memory", already_running):
    assembly.configure_threads(config, lines.append)
  assert seen == ["512"]
  assert any("--gpu_memory=512" in line for line in lines), lines


# ---------------------------------------------------------------------------------------
# The GPU benchmark.

def test_the_gpu_benchmark_code_path_on_the_cpu_with_tiny_sizes(tmp_path):
  from benchmarks.speed import throughput_gpu  # pylint: disable=g-import-not-at-top
  rows = throughput_gpu.update_rows(CPU, torsos=("shallow",), unroll_lengths=(3,),
                                    xla_modes=(False,), batch_size=2, timed_updates=1,
                                    frame_shape=(24, 24, 4), log=lambda text: None)
  rows += throughput_gpu.update_rows(CPU, torsos=("deep",), unroll_lengths=(21,),
                                     xla_modes=(False,), batch_size=1, timed_updates=1,
                                     frame_shape=(24, 28, 3), log=lambda text: None)
  assert [(r["torso"], r["unroll_length"], r["xla"]) for r in rows] == [
      ("shallow", 3, False), ("deep", 21, False)]
  assert all(r["median_s"] > 0 and r["frames_per_s"] > 0 for r in rows)
  text = throughput_gpu.markdown("a machine", "a command", rows, [
      dict(level="atari/pong", torso="shallow", num_actors=2, envs_per_actor=24,
           batch_size=32, unroll_length=20, frames_per_s=1234.0),
      dict(level="atari/breakout", torso="deep", num_actors=2, envs_per_actor=24,
           batch_size=32, unroll_length=20, frames_per_s=None, error="RuntimeError: boom")])
  assert "| 3 (Atari 84x84x4) | shallow | off |" in text
  assert "| 21 (DMLab 96x72x3, LSTM) | deep | off |" in text
  assert "| atari/pong | shallow | 2 x 24 | 32, 20 | 1,234 |" in text
  assert "| atari/breakout | deep | 2 x 24 | 32, 20 | failed: RuntimeError: boom |" in text
  assert "| IMPALA (dyn. batch) 48 actors | 48 | 1 | 21K | 24K |" in text
  throughput_gpu.write_results(str(tmp_path), text, dict(updates=rows))
  assert os.path.exists(tmp_path / "gpu_benchmark.json")


def test_an_end_to_end_run_that_fails_is_a_row_with_its_error():
  # pylint: disable=g-import-not-at-top
  from benchmarks.speed import throughput_gpu
  from benchmarks.speed import training_rate
  with mock.patch.object(training_rate, "run_training", side_effect=RuntimeError("no ROM")):
    rows = throughput_gpu.end_to_end_rows(["atari/pong"], ["shallow"], 1.0, 0.0,
                                          log=lambda text: None)
  assert rows[0]["frames_per_s"] is None and rows[0]["error"] == "RuntimeError: no ROM"


@pytest.mark.skipif(bool(tf.config.list_physical_devices("GPU")), reason="a GPU is here")
def test_the_gpu_benchmark_without_a_gpu_says_so_and_exits_0(tmp_path, capsys):
  from benchmarks.speed import throughput  # pylint: disable=g-import-not-at-top
  from benchmarks.speed import throughput_gpu  # pylint: disable=g-import-not-at-top
  assert throughput.main(["--gpu", f"--output_dir={tmp_path}"]) == 0
  assert throughput_gpu.NO_GPU_MESSAGE in capsys.readouterr().out
  with open(tmp_path / "gpu_benchmark.md") as f:
    assert "No GPU" in f.read()


# ---------------------------------------------------------------------------------------
# The tier's place and the script.

def test_the_gpu_tier_is_registered_and_out_of_the_default_tier():
  parser = configparser.ConfigParser()
  parser.read(os.path.join(REPO_DIR, "pytest.ini"))
  assert '-m "not slow and not gpu"' in parser["pytest"]["addopts"]
  assert "gpu:" in parser["pytest"]["markers"]
  from . import test_gpu  # pylint: disable=g-import-not-at-top
  marks = {mark.name for mark in test_gpu.pytestmark}
  assert marks == {"gpu", "skipif"}
  tests = [name for name in dir(test_gpu) if name.startswith("test_")]
  assert len(tests) == 5, tests


def test_the_script_parses_and_its_dry_run_plans_every_step(tmp_path):
  assert subprocess.run(["bash", "-n", SCRIPT]).returncode == 0
  run = subprocess.run(["bash", SCRIPT, "--dry-run", str(tmp_path / "out")],
                       capture_output=True, text=True, timeout=60, cwd=tmp_path)
  assert run.returncode == 0, run.stdout + run.stderr
  with open(tmp_path / "out" / "summary.txt") as f:
    plan = f.read()
  for expected in ("-m pip install -r requirements.txt", "pip freeze",
                   "-m pytest tests -m gpu -v -rs --junitxml=", "gpu_tier.xml",
                   "-m benchmarks.speed.throughput --gpu --output_dir=", "dry run"):
    assert expected in plan, (expected, plan)
  assert subprocess.run(["bash", SCRIPT], capture_output=True).returncode == 2  # No folder.


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_the_script_on_a_cpu_installs_and_stops_at_no_gpu(tmp_path):
  # The real path up to the GPU check, in a venv over this interpreter's packages (nothing to
  # download): installation, freeze, then exit 2 naming the missing GPU.
  subprocess.run([sys.executable, "-m", "venv", "--system-site-packages",
                  str(tmp_path / "venv")], check=True)
  run = subprocess.run(["bash", SCRIPT, str(tmp_path / "out")], capture_output=True, text=True,
                       timeout=850, env=dict(os.environ, VENV_DIR=str(tmp_path / "venv")))
  assert run.returncode == 2, run.stdout[-3000:] + run.stderr[-3000:]
  with open(tmp_path / "out" / "summary.txt") as f:
    summary = f.read()
  assert "install: exit 0" in summary and "TensorFlow sees no GPU" in summary, summary
  assert os.path.getsize(tmp_path / "out" / "pip_freeze.txt") > 0
