"""A trained policy as a TensorFlow SavedModel, which any TensorFlow program loads without this
project (export_policy.py --format=saved_model; docs/POLICY_API.md):

    DIR/saved_model.pb, DIR/variables/   tf.saved_model.load(DIR)
    DIR/policy.json                      the functions' inputs and outputs, the observation's
                                         preprocessing, the level, where the weights came from

Two functions, also the SavedModel's signatures (saved_model_cli, TF Serving), each taking
and returning a dict of tensors; B is any batch size:

    initial_state({"batch_size": int32 []}) -> the state at the start of B episodes:
        prev_action [B, ...] zeros, first bool [B] True, and with an LSTM core_c, core_h
        float32 [B, 256]
    step({"observation", "reward" float32 [B], "seed" int32 [2], "greedy" bool [],
          (DeepMind Lab, missions) "instruction" string [B], (per-task PopArt) "task" int32 [B],
          and the state's keys})
        -> {"action", "policy_params" float32 [B, P] (logits, or a Gaussian's means then
            log standard deviations), "baseline" float32 [B], and the next state's keys}

An agent trained with per-task PopArt on a suite (Hessel et al. 2019) has one normalised value
output per level: its step takes each row's task, the index of its level in SPEC_FILE's
"tasks", and "baseline" is that task's output n_task(x), as its actors' was.

The step is the actors' (policies.acting_step): the network reads the clipped reward and the
previous action (Figure 3); `first` resets the LSTM as `done` does in training. An action is
sampled with the stateless `seed` (distributions' sample) or, with `greedy`, the most likely.
Observation vectors pass through the run's observation filter, frozen at the checkpoint's
statistics, inside the step; instructions are hashed inside it as language.py hashes them.
"""
import json
import os

import numpy as np
import tensorflow as tf

from scalable_agent_tf2.acting import policies
from scalable_agent_tf2.agent import language
from scalable_agent_tf2.agent import networks
from scalable_agent_tf2.agent import torsos
from scalable_agent_tf2.environments import normalization
from scalable_agent_tf2.environments import suites

SPEC_FILE = "policy.json"
# The format of SPEC_FILE, for a reader that checks what it reads.
FORMAT = "scalable_agent_tf2 policy SavedModel, version 1"


def state_keys(network_config):
  """The names of the state's tensors, in the order initial_state returns them."""
  return ["prev_action", "first"] + (["core_c", "core_h"] if network_config.use_lstm else [])


def input_specs(network_config):
  """step's inputs: name -> tf.TensorSpec (fixed dtypes, any batch size)."""
  config, family = network_config, network_config.action_distribution
  spec = lambda shape, dtype, name: tf.TensorSpec(shape, dtype, name=name)
  specs = {
      "observation": spec([None, *config.frame_shape], tf.as_dtype(config.frame_dtype),
                          "observation"),
      "reward": spec([None], tf.float32, "reward"),
      "seed": spec([2], tf.int32, "seed"),
      "greedy": spec([], tf.bool, "greedy"),
      "prev_action": spec([None, *family.action_shape], tf.as_dtype(family.action_dtype),
                          "prev_action"),
      "first": spec([None], tf.bool, "first"),
  }
  if config.use_lstm:
    for name in ("core_c", "core_h"):
      specs[name] = spec([None, networks.CORE_LSTM_SIZE], tf.float32, name)
  if config.use_instruction:
    specs["instruction"] = spec([None], tf.string, "instruction")
  if config.num_value_outputs > 1:  # Per-task PopArt: each row's task (SPEC_FILE's "tasks").
    specs["task"] = spec([None], tf.int32, "task")
  return specs


def word_ids(instructions):
  """int32 [B, MAX_INSTRUCTION_WORDS] of instruction strings [B], in the graph: the words
  split on white space, each hashed into buckets 1..1000, zero-padded (language.py's)."""
  words = tf.strings.split(instructions)[:, :language.MAX_INSTRUCTION_WORDS]
  ids = tf.ragged.map_flat_values(
      lambda w: tf.cast(tf.strings.to_hash_bucket_fast(w, language.INSTRUCTION_HASH_BUCKETS)
                        + 1, tf.int32), words)
  return ids.to_tensor(default_value=0, shape=[None, language.MAX_INSTRUCTION_WORDS])


def filter_moments(agent):
  """(mean, std) float64 [O] of the agent's frozen observation filter, or None (no filter,
  or one that has seen nothing: observations then reach the network unchanged)."""
  observation_filter = agent.observation_filter
  if observation_filter is None:
    return None
  state = observation_filter.filter.state()
  if int(state["count"]) == 0:
    return None
  statistics = normalization.RunningStatistics(state["mean"].shape)
  statistics.moments = (int(state["count"]), state["mean"], state["m2"])
  return statistics.mean.copy(), np.asarray(statistics.std, np.float64)


def _step_function(agent):
  """step(inputs) -> outputs, the module docstring's."""
  config, family = agent.config, agent.config.action_distribution
  acting = policies.acting_step(agent)
  moments = filter_moments(agent)

  def step(inputs):
    observation = inputs["observation"]
    if moments is not None:  # normalization.MeanStdFilter's, frozen (test mode's).
      mean, std = (tf.constant(m, tf.float64) for m in moments)
      observation = tf.cast((tf.cast(observation, tf.float64) - mean)
                            / (std + normalization.FILTER_EPSILON), tf.float32)
    instruction = word_ids(inputs["instruction"]) if config.use_instruction else ()
    core = (torsos.LSTMState(c=inputs["core_c"], h=inputs["core_h"]) if config.use_lstm
            else ())
    params, baseline, core = acting(inputs["prev_action"], inputs["reward"], inputs["first"],
                                    observation, instruction, core)
    if config.num_value_outputs > 1:  # Each row's task's output, as its actors read it.
      baseline = tf.gather(baseline, inputs["task"], axis=1, batch_dims=1)
    distribution = family(params)
    action = tf.cond(inputs["greedy"], distribution.mode,
                     lambda: distribution.sample(inputs["seed"]))
    outputs = dict(action=action, policy_params=params, baseline=baseline,
                   prev_action=action, first=tf.zeros_like(inputs["first"]))
    if config.use_lstm:
      outputs.update(core_c=core.c, core_h=core.h)
    return outputs
  return step


def _initial_state_function(agent):
  config, family = agent.config, agent.config.action_distribution

  def initial_state(inputs):
    batch_size = inputs["batch_size"]
    shape = tf.concat([[batch_size], tf.constant(family.action_shape, tf.int32)], 0)
    state = dict(prev_action=tf.zeros(shape, tf.as_dtype(family.action_dtype)),
                 first=tf.ones([batch_size], tf.bool))
    if config.use_lstm:
      core = agent.initial_state(batch_size)
      state.update(core_c=core.c, core_h=core.h)
    return state
  return initial_state


def save(agent, config, output, record):
  """Writes agent's policy as a SavedModel in the new folder `output`, with SPEC_FILE.

  Args:
    agent: a restored networks.Agent (its observation filter frozen: test mode's).
    config: the run's resolved config.
    output: a folder that does not exist or is empty.
    record: dict of where the weights came from (source_logdir, source_checkpoint, frames,
      command), written into SPEC_FILE.
  """
  module = tf.Module()
  module.weights = list(agent.variables)  # Tracked: the SavedModel's variables.
  batch_spec = {"batch_size": tf.TensorSpec([], tf.int32, name="batch_size")}
  module.initial_state = tf.function(_initial_state_function(agent),
                                     input_signature=[batch_spec])
  module.step = tf.function(_step_function(agent),
                            input_signature=[input_specs(agent.config)])
  signatures = {"initial_state": module.initial_state.get_concrete_function(),
                "step": module.step.get_concrete_function()}
  spec = describe(agent, config, signatures, record)
  tf.saved_model.save(module, output, signatures=signatures)
  with open(os.path.join(output, SPEC_FILE), "w") as f:
    json.dump(spec, f, indent=2)
    f.write("\n")
  return spec


def _tensors(structure):
  """{name: {"dtype", "shape"}} of a dict of TensorSpecs (None: any size)."""
  return {name: {"dtype": spec.dtype.name, "shape": spec.shape.as_list()}
          for name, spec in sorted(structure.items())}


def describe(agent, config, signatures, record):
  """SPEC_FILE's content: the functions' inputs and outputs, the state's keys, the
  observation's preprocessing, the actions, the level and the record."""
  functions = {name: {"inputs": _tensors(function.structured_input_signature[0][0]),
                      "outputs": _tensors(function.structured_outputs)}
               for name, function in signatures.items()}
  network = agent.config
  tasks = dict(tasks=list(config.levels)) if network.num_value_outputs > 1 else {}
  return dict(
      record, format=FORMAT, level_name=config.level_name, functions=functions, **tasks,
      state=state_keys(network),
      observation=dict(dtype=network.frame_dtype, shape=[None, *network.frame_shape],
                       preprocessing=preprocessing(config, agent)),
      actions=dict(network.action_distribution.layout(),
                   dtype=np.dtype(network.action_distribution.action_dtype).name))


def preprocessing(config, agent):
  """What an observation is, in words and numbers, for a reader who makes its own."""
  network = agent.config
  if suites.is_atari_level(config.levels[0]):  # A suite's levels are of one family.
    from scalable_agent_tf2.environments import atari  # pylint: disable=g-import-not-at-top
    options = config.family.environment_options(config)
    return dict(
        description="Atari as environments/atari.py makes it (IMPALA Table G.1; "
                    "docs/POLICY_API.md has the gymnasium wrapper chain that reproduces it): "
                    "each step repeats the action, max-pools the last two raw frames, turns "
                    "them grey and resizes them to a square (OpenCV INTER_AREA), and stacks "
                    "the last frames, the newest last; each game starts with a uniform "
                    "number of no-op frames in [1, max_noops]; rewards unclipped.",
        frame_skip=options["num_action_repeats"], max_pool_frames=2, grayscale=True,
        frame_size=options["frame_size"], frame_stack=network.frame_shape[-1],
        max_noops=atari.DEFAULT_MAX_NOOPS, sticky_action_probability=(atari.STICKY_ACTION_PROBABILITY
                                   if options["sticky_actions"] else 0.0),
        full_action_space=options["full_action_space"], max_episode_frames=atari.DEFAULT_MAX_EPISODE_FRAMES,
        terminal_on_life_loss="training only (test mode plays whole games)")
  if network.observation_kind == torsos.VECTOR:
    moments = filter_moments(agent)
    return dict(description="the raw observation vector; the step normalises it with the "
                            "run's observation filter, frozen: (x - mean) / (std + 1e-8)",
                filter_mean=None if moments is None else moments[0].tolist(),
                filter_std=None if moments is None else moments[1].tolist())
  return dict(description=f"the observation as the project's environment of "
                          f"{config.level_name} gives it (scalable_agent_tf2.make_environment)"
                          + ("; the instruction as text" if network.use_instruction else ""))
