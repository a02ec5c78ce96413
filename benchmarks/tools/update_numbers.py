"""The numbers of learner updates on fixed batches and seeds: the proof that a change which
should not move them did not.

    python -m benchmarks.tools.update_numbers > /tmp/after.json
    git stash; python -m benchmarks.tools.update_numbers > /tmp/before.json; git stash pop
    python -m benchmarks.tools.update_numbers --compare /tmp/before.json /tmp/after.json

Each case builds a small agent from a fixed seed, runs three updates on fixed random batches
(tests/random_batches.py) and records every statistic of each update and
a digest of the parameters after them: IMPALA on Atari (shallow, no LSTM), on the DeepMind
Lab stand-in (deep torso, LSTM, instructions), a Gaussian policy (IMPALA on a MuJoCo-sized vector), IMPACT
(categorical and Gaussian) and LASER (trust region, entropy on online trajectories only).
The numbers are compared exactly: the same code on the same machine gives the same bits.
"""
import argparse
import hashlib
import json
import sys

import numpy as np

# The cases, in the order `numbers` records them. IMPACT and LASER need one learner
# (config.resolve refuses several), so only the IMPALA cases take a strategy.
CASES = ("impala_atari_shallow", "impala_dmlab_deep_lstm_instructions", "impala_gaussian",
         "impact_atari_shallow", "impact_gaussian", "laser_trust_region")
STRATEGY_CASES = ("impala_atari_shallow", "impala_dmlab_deep_lstm_instructions",
                  "impala_gaussian")
# Small fixed hyperparameters: three updates must move the parameters visibly.
HPARAMS = dict(learning_rate=0.01, total_environment_frames=100_000, max_grad_norm=40.0)
AGENT_SEED = 3


def build_case(name, jit_compile=False, strategy=None, learning_rate=None, batch_size=4):
  """(learner, batch) of one case, built from its fixed seed where the caller's device scope
  puts it (tests/benchmark_tools/test_gpu.py builds one under /GPU:0 and one under /CPU:0).

  Args:
    name: one of CASES.
    jit_compile: compile the update with XLA.
    strategy: None, or a tf.distribute strategy (STRATEGY_CASES only): the agent is built in
      its scope and the learner splits each batch over its replicas.
    learning_rate: None for HPARAMS'; another gives another step (the readiness tests').
    batch_size: B of its batches (LASER's entropy mask is [B]: their online half).

  Returns:
    (learner, batch): batch(T, B, seed) -> (env_outputs, agent_outputs), numpy, fixed by seed.
  """
  # pylint: disable=g-import-not-at-top
  import contextlib

  from scalable_agent_tf2.agent import networks
  from scalable_agent_tf2.configuration import config as config_lib
  from scalable_agent_tf2.learning import impact
  from scalable_agent_tf2.learning import learner
  from scalable_agent_tf2.structures import AgentOutput
  from tests import random_batches

  if name not in CASES:
    raise ValueError(f"Unknown case {name!r}; the cases are {', '.join(CASES)}.")
  if strategy is not None and name not in STRATEGY_CASES:
    raise ValueError(f"{name} needs one learner; a strategy takes {', '.join(STRATEGY_CASES)}.")
  atari = networks.atari_config(num_actions=4, torso=networks.SHALLOW, frame_shape=(24, 24, 4))
  dmlab = networks.dmlab_config(networks.DEEP, num_actions=5, frame_shape=(24, 28, 3))
  gaussian = networks.continuous_vector_config(observation_size=7, action_size=3,
                                               hidden_sizes=(16, 16))
  hparams = dict(HPARAMS)
  if learning_rate is not None:
    hparams["learning_rate"] = learning_rate

  def gaussian_batch(T, B, seed):
    rng = np.random.default_rng(seed)
    env_outputs, _ = random_batches.random_learner_batch(atari, T, B, seed)
    observation = env_outputs.observation._replace(
        frame=rng.normal(size=(T + 1, B, 7)).astype(np.float32),
        instruction=np.zeros((T + 1, B, 0), np.int32))
    action = rng.normal(size=(T + 1, B, 3)).astype(np.float32)
    mean = rng.normal(size=(T + 1, B, 3)).astype(np.float32)
    log_std = (0.3 * rng.normal(size=(T + 1, B, 3)) - 0.5).astype(np.float32)
    agent_outputs = AgentOutput(action=action,
                                policy_params=np.concatenate([mean, log_std], axis=-1),
                                baseline=rng.normal(size=(T + 1, B)).astype(np.float32))
    return env_outputs._replace(observation=observation), agent_outputs

  discrete = lambda config: (lambda T, B, seed: random_batches.random_learner_batch(
      config, T, B, seed))
  network, batch = {
      "atari": (atari, discrete(atari)),
      "dmlab": (dmlab, discrete(dmlab)),
      "gaussian": (gaussian, gaussian_batch),
  }[{"impala_dmlab_deep_lstm_instructions": "dmlab", "impala_gaussian": "gaussian",
     "impact_gaussian": "gaussian"}.get(name, "atari")]
  with strategy.scope() if strategy is not None else contextlib.nullcontext():
    agent = networks.Agent(network, seed=AGENT_SEED)
  if name.startswith("impact"):
    return impact.ImpactLearner(agent, config_lib.LearnerConfig(**hparams),
                                config_lib.ImpactConfig(target_update_period=2),
                                jit_compile=jit_compile), batch
  if name.startswith("laser"):
    hparams["trust_region_threshold"] = 0.5
  return learner.Learner(agent, config_lib.LearnerConfig(**hparams), jit_compile=jit_compile,
                         strategy=strategy, entropy_mask=_entropy_mask(name, batch_size)), batch


def _entropy_mask(name, batch_size):
  """LASER's case: the entropy cost on each batch's online half (laser.online_mask)."""
  from scalable_agent_tf2.learning import laser  # pylint: disable=g-import-not-at-top
  return laser.online_mask(batch_size, batch_size // 2) if name.startswith("laser") else None


def case_updates(name, the_learner, batch, T=5, B=4, updates=3):
  """Runs `updates` updates of case `name` on its fixed batches (seeds 0, 1, ...); returns
  [{stat: value}] per update (the learner's variables are trained in place)."""
  records = []
  for seed in range(updates):
    env_outputs, agent_outputs = batch(T, B, seed)
    state = the_learner.agent.initial_state(B)
    kwargs = {}
    if name.startswith("impact"):  # The target network's policy, frozen as the batch enters.
      kwargs["target_policy_params"] = the_learner.target_policy_params(state, env_outputs,
                                                                         agent_outputs)
    stats = the_learner.update(state, env_outputs, agent_outputs, **kwargs)
    # New statistics may be added; the old ones must keep their values.
    records.append({k: np.asarray(v).item() for k, v in sorted(stats.items())
                    if k != "update_skipped"})
  return records


def _digest(variables):
  digest = hashlib.sha256()
  for variable in variables:
    digest.update(np.ascontiguousarray(variable.numpy()).tobytes())
  return digest.hexdigest()[:16]


def numbers(T=5, B=4, updates=3):
  """{case: {"updates": [{stat: value}], "parameters": digest}}."""
  results = {}
  for name in CASES:
    the_learner, batch = build_case(name, batch_size=B)
    records = case_updates(name, the_learner, batch, T, B, updates)
    results[name] = {"updates": records,
                     "parameters": _digest(the_learner.agent.trainable_variables)}
  return results


def compare(before, after):
  """Lines naming every number that moved (empty: none did)."""
  lines = []
  for name, want in before.items():
    have = after.get(name)
    if have is None:
      lines.append(f"{name}: missing")
      continue
    if want["parameters"] != have["parameters"]:
      lines.append(f"{name}: parameters {have['parameters']}, before {want['parameters']}")
    for index, (old, new) in enumerate(zip(want["updates"], have["updates"])):
      for key, value in old.items():
        if new.get(key) != value:
          lines.append(f"{name} update {index} {key}: {new.get(key)!r}, before {value!r}")
  return lines


def main(argv=None):
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  parser.add_argument("--compare", nargs=2, metavar=("BEFORE", "AFTER"))
  args = parser.parse_args(argv)
  if args.compare:
    with open(args.compare[0]) as f, open(args.compare[1]) as g:
      lines = compare(json.load(f), json.load(g))
    print("\n".join(lines) or "The same numbers.")
    return 1 if lines else 0
  json.dump(numbers(), sys.stdout, indent=1)
  return 0


if __name__ == "__main__":
  sys.exit(main())
