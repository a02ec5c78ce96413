"""export_policy.py --format=saved_model (run/saved_policy.py): a SavedModel that a process
which cannot import scalable_agent_tf2 loads with tf.saved_model.load, and whose outputs are
the project's network's (test mode's restore, then policies.acting_step) to 1e-5 on the same
observations: a shipped Atari agent, an LSTM agent with instructions and an agent reading
observation vectors through its filter."""
import json
import os
import subprocess
import sys
import types

import numpy as np
import pytest

from scalable_agent_tf2 import policy as policy_lib
from scalable_agent_tf2.configuration import config as config_lib
from scalable_agent_tf2.run import export_policy
from scalable_agent_tf2.run import saved_policy
from tests import policy_folders
from tests.policy_folders import BREAKOUT
from tests.policy_folders import CART_POLE
from tests.policy_folders import PIXEL_MISSION

STEPS = 7
# Loads each case's SavedModel, plays its steps (greedy, and sampled twice with one seed),
# and writes the outputs. scalable_agent_tf2 cannot be imported in this process: an import
# of it, by this script or by anything the SavedModel needs, raises.
CHILD = r'''
import importlib.util, json, sys
sys.modules["scalable_agent_tf2"] = None
import numpy as np
import tensorflow as tf

for case in json.load(open("cases.json")):
  model = tf.saved_model.load(case["saved_model"])
  spec = json.load(open(case["saved_model"] + "/policy.json"))
  data = dict(np.load(case["inputs"]))
  batch = data["reward"].shape[1]
  state = model.initial_state({"batch_size": tf.constant(batch)})
  assert sorted(state) == sorted(spec["state"]), (sorted(state), spec["state"])
  assert bool(tf.reduce_all(state["first"])), state
  outputs = {k: [] for k in ("policy_params", "baseline", "action", "prev_action", "core_c",
                             "core_h", "sampled", "sampled_again")}
  for t in range(data["reward"].shape[0]):
    inputs = dict(state, observation=data["observation"][t], reward=data["reward"][t],
                  first=data["first"][t], prev_action=data["prev_action"][t],
                  seed=tf.constant([3, t]), greedy=tf.constant(True))
    if "instruction" in data:
      inputs["instruction"] = data["instruction"][t]
    out = model.step(inputs)
    for key in ("policy_params", "baseline", "action", "prev_action", "core_c", "core_h"):
      if key in out:
        outputs[key].append(out[key].numpy())
    sampled = dict(inputs, greedy=tf.constant(False))
    outputs["sampled"].append(model.step(sampled)["action"].numpy())
    outputs["sampled_again"].append(model.signatures["step"](**sampled)["action"].numpy())
    state = {key: out[key] for key in spec["state"]}
  np.savez(case["outputs"], **{k: np.stack(v) for k, v in outputs.items() if v})
print("loaded:", sorted(m for m, module in sys.modules.items()
                        if module is not None and m.startswith("scalable_agent")))
'''


def _steps(observations, rng, num_actions, instructions=None):
  """STEPS steps of a batch: the observations [T, B, ...], random rewards, prev actions and
  episode starts (every row at t=0, row 0 again at t=4)."""
  batch = observations.shape[1]
  first = np.zeros((STEPS, batch), bool)
  first[0], first[4, 0] = True, True
  data = dict(observation=observations,
              reward=rng.choice([0.0, 1.0, -3.0], size=(STEPS, batch)).astype(np.float32),
              first=first,
              prev_action=rng.integers(0, num_actions, size=(STEPS, batch)).astype(np.int32))
  if instructions is not None:
    data["instruction"] = np.asarray(instructions)
  return data


def _frames(policy, seeds, key=None):
  """STEPS observations of make_environment's environments (random actions), [T, B, ...]."""
  rows = []
  for seed in seeds:
    env = policy.make_environment(seed=seed)
    env.action_space.seed(seed)
    observation, _ = env.reset()
    row = []
    for _ in range(STEPS):
      row.append(observation)
      observation, _, terminated, _, _ = env.step(env.action_space.sample())
      if terminated:
        observation, _ = env.reset()
    rows.append(row)
    env.close()
  if key is None:
    return np.stack([np.stack(r) for r in rows], axis=1), None
  frames = np.stack([np.stack([o["frame"] for o in r]) for r in rows], axis=1)
  texts = np.array([[o["instruction"] for o in r] for r in rows]).T
  return frames, texts


@pytest.fixture(scope="module")
def cases(tmp_path_factory):
  """Three SavedModels with their folders, levels and steps."""
  root = tmp_path_factory.mktemp("saved_policies")
  rng = np.random.default_rng(5)
  made = []
  # The shipped Breakout agent, exported by the command line as docs/POLICY_API.md gives it.
  output = str(root / "breakout")
  assert export_policy.main(["--format=saved_model", f"--output={output}", "--",
                             "--level_name=atari/breakout", f"--logdir={BREAKOUT}"]) == 0
  frames, _ = _frames(policy_lib.load_policy(BREAKOUT), (1, 2, 3))
  made.append(dict(name="breakout", folder=BREAKOUT, level="atari/breakout", flags=(),
                   saved_model=output, data=_steps(frames, rng, 4)))
  mission = policy_folders.new_folder(str(root / "mission_run"), PIXEL_MISSION)
  frames, texts = _frames(policy_lib.load_policy(mission), (1, 2), key="frame")
  made.append(_exported(root, "mission", mission, PIXEL_MISSION,
                        _steps(frames, rng, 3, instructions=texts)))
  cart = policy_folders.new_folder(str(root / "cart_run"), CART_POLE,
                                   filter_observations=rng.normal(2.0, 3.0, size=(40, 4)))
  vectors = rng.normal(2.0, 3.0, size=(STEPS, 5, 4)).astype(np.float32)
  made.append(_exported(root, "cart", cart, CART_POLE, _steps(vectors, rng, 2)))
  for case in made:
    case["inputs"] = str(root / f"{case['name']}_inputs.npz")
    case["outputs"] = str(root / f"{case['name']}_outputs.npz")
    np.savez(case["inputs"], **case["data"])
  with open(root / "cases.json", "w") as f:
    json.dump([{k: case[k] for k in ("saved_model", "inputs", "outputs")} for case in made], f)
  clean = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONSTARTUP")}
  child = subprocess.run([sys.executable, "-c", CHILD], cwd=str(root), env=clean,
                         capture_output=True, text=True, timeout=600)
  assert child.returncode == 0, child.stderr[-3000:]
  assert "loaded: []" in child.stdout, child.stdout
  for case in made:
    case["saved"] = dict(np.load(case["outputs"]))
  return made


def _exported(root, name, folder, level, data):
  config = config_lib.config_from_argv(["--mode=test", f"--level_name={level}",
                                        f"--logdir={folder}"])
  output = str(root / name)
  export_policy.export_saved_model(config, output)
  return dict(name=name, folder=folder, level=level, saved_model=output, data=data)


def _reference_steps(data):
  return [{key: data[key][t] for key in data} for t in range(STEPS)]


@pytest.mark.parametrize("index", [0, 1, 2], ids=["breakout", "lstm_instructions", "filter"])
def test_the_saved_model_is_the_project_s_network_in_a_process_without_the_project(
    cases, index):
  case = cases[index]
  agent = policy_folders.restored_agent(case["folder"], case["level"])
  reference = policy_folders.network_outputs(agent, _reference_steps(case["data"]))
  saved = case["saved"]
  for t, (params, baseline, core) in enumerate(reference):
    np.testing.assert_allclose(saved["policy_params"][t], params, atol=1e-5, rtol=0)
    np.testing.assert_allclose(saved["baseline"][t], baseline, atol=1e-5, rtol=0)
    np.testing.assert_array_equal(saved["action"][t], np.argmax(params, axis=1))
    if agent.config.use_lstm:
      np.testing.assert_allclose(saved["core_c"][t], core[0], atol=1e-5, rtol=0)
      np.testing.assert_allclose(saved["core_h"][t], core[1], atol=1e-5, rtol=0)
  # The state it hands on: the action taken, the episode under way.
  np.testing.assert_array_equal(saved["prev_action"], saved["action"])
  # Sampled actions: one seed, one action, through the function and the signature alike.
  np.testing.assert_array_equal(saved["sampled"], saved["sampled_again"])
  num_actions = saved["policy_params"].shape[-1]
  assert ((saved["sampled"] >= 0) & (saved["sampled"] < num_actions)).all()


def test_policy_json_names_the_inputs_outputs_and_preprocessing(cases):
  specs = {case["name"]: json.load(open(os.path.join(case["saved_model"],
                                                     saved_policy.SPEC_FILE)))
           for case in cases}
  breakout = specs["breakout"]
  assert breakout["level_name"] == "atari/breakout" and breakout["frames"] == 40248320
  step = breakout["functions"]["step"]
  assert step["inputs"]["observation"] == {"dtype": "uint8", "shape": [None, 84, 84, 4]}
  assert set(step["inputs"]) == {"observation", "reward", "seed", "greedy", "prev_action",
                                 "first"}
  assert step["outputs"]["policy_params"] == {"dtype": "float32", "shape": [None, 4]}
  assert breakout["state"] == ["prev_action", "first"]
  preprocessing = breakout["observation"]["preprocessing"]
  assert (preprocessing["frame_skip"], preprocessing["frame_size"], preprocessing["frame_stack"],
          preprocessing["max_noops"]) == (4, 84, 4, 30)
  assert "--format=saved_model" in breakout["command"]
  mission = specs["mission"]
  assert mission["state"] == ["prev_action", "first", "core_c", "core_h"]
  assert mission["functions"]["step"]["inputs"]["instruction"] == {"dtype": "string",
                                                                   "shape": [None]}
  cart = specs["cart"]["observation"]["preprocessing"]
  assert len(cart["filter_mean"]) == 4 and min(cart["filter_std"]) > 0


def test_an_export_never_writes_over_a_folder_and_says_so_in_one_line(tmp_path, capsys):
  output = tmp_path / "taken"
  output.mkdir()
  (output / "notes.txt").write_text("mine")
  code = export_policy.main(["--format=saved_model", f"--output={output}", "--",
                             "--level_name=atari/breakout", f"--logdir={BREAKOUT}"])
  error = capsys.readouterr().err.strip()
  assert code == 2 and error.startswith("error: ") and "not empty" in error
  assert "\n" not in error and os.listdir(output) == ["notes.txt"]


def test_an_atari_suites_policy_describes_atari_preprocessing():
  """A suite (atari57, or a list of games) is Atari's preprocessing too, with the full action
  set of the multi-task rows (Appendix G): the level name alone is not a game's."""
  frames = types.SimpleNamespace(config=types.SimpleNamespace(frame_shape=(84, 84, 4)))
  for level_name in ("atari57", "atari/pong,atari/breakout"):
    config = config_lib.config_from_argv([f"--level_name={level_name}"])
    described = saved_policy.preprocessing(config, frames)
    assert described["frame_skip"] == 4 and described["full_action_space"], (level_name,
                                                                            described)
