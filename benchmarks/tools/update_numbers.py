"""The numbers of learner updates on fixed batches and seeds: the proof that a change which
should not move them did not.

    python -m benchmarks.tools.update_numbers > /tmp/after.json
    git stash; python -m benchmarks.tools.update_numbers > /tmp/before.json; git stash pop
    python -m benchmarks.tools.update_numbers --compare /tmp/before.json /tmp/after.json

Each case builds a small agent from a fixed seed, runs three updates on fixed random batches
(benchmarks/random_data.py) and records every statistic of each update and a digest of the
parameters after them: IMPALA on Atari (shallow, no LSTM), on the DeepMind Lab stand-in (deep
torso, LSTM, instructions), a Gaussian policy (IMPALA on a MuJoCo-sized vector), IMPACT
(categorical and Gaussian) and LASER (trust region, entropy on online trajectories only).
The numbers are compared exactly: the same code on the same machine gives the same bits.
"""
import argparse
import hashlib
import json
import sys

import numpy as np


def _cases():
  # pylint: disable=g-import-not-at-top
  from benchmarks import random_data
  from scalable_agent_tf2.agent import continuous_networks
  from scalable_agent_tf2.learning import learner
  from scalable_agent_tf2.learning import batch_loss
  from scalable_agent_tf2.agent import networks
  from scalable_agent_tf2.structures import GaussianAgentOutput

  atari = networks.atari_config(num_actions=4, torso=networks.SHALLOW, frame_shape=(24, 24, 4))
  dmlab = networks.dmlab_config(networks.DEEP, num_actions=5, frame_shape=(24, 28, 3))
  gaussian = continuous_networks.ContinuousNetworkConfig(observation_size=7, action_size=3,
                                                         hidden_sizes=(16, 16))
  hparams = dict(learning_rate=0.01, total_environment_frames=100_000, max_grad_norm=40.0)

  def gaussian_batch(T, B, seed):
    rng = np.random.default_rng(seed)
    env_outputs, _ = random_data.random_learner_batch(atari, T, B, seed)
    observation = env_outputs.observation._replace(
        frame=rng.normal(size=(T + 1, B, 7)).astype(np.float32),
        instruction=np.zeros((T + 1, B, 0), np.int32))
    agent_outputs = GaussianAgentOutput(
        action=rng.normal(size=(T + 1, B, 3)).astype(np.float32),
        policy_mean=rng.normal(size=(T + 1, B, 3)).astype(np.float32),
        policy_log_std=(0.3 * rng.normal(size=(T + 1, B, 3)) - 0.5).astype(np.float32),
        baseline=rng.normal(size=(T + 1, B)).astype(np.float32))
    return env_outputs._replace(observation=observation), agent_outputs

  def impala(config, agent_type=networks.Agent, batch=None, **extra):
    agent = agent_type(config, seed=3)
    return learner.Learner(agent, learner.LearnerConfig(**{**hparams, **extra}),
                           jit_compile=False), batch

  def impact(config, agent_type=networks.Agent, batch=None):
    agent = agent_type(config, seed=3)
    return learner.ImpactLearner(agent, learner.LearnerConfig(**hparams),
                                 learner.ImpactConfig(target_update_period=2),
                                 jit_compile=False), batch
  discrete = lambda config: (lambda T, B, seed: random_data.random_learner_batch(
      config, T, B, seed))
  return {
      "impala_atari_shallow": impala(atari, batch=discrete(atari)),
      "impala_dmlab_deep_lstm_instructions": impala(dmlab, batch=discrete(dmlab)),
      "impala_gaussian": impala(gaussian, continuous_networks.ContinuousAgent, gaussian_batch),
      "impact_atari_shallow": impact(atari, batch=discrete(atari)),
      "impact_gaussian": impact(gaussian, continuous_networks.ContinuousAgent, gaussian_batch),
      "laser_trust_region": impala(atari, batch=discrete(atari), trust_region_threshold=0.5),
  }, loss_terms


def _digest(variables):
  digest = hashlib.sha256()
  for variable in variables:
    digest.update(np.ascontiguousarray(variable.numpy()).tobytes())
  return digest.hexdigest()[:16]


def numbers(T=5, B=4, updates=3):
  """{case: {"updates": [{stat: value}], "parameters": digest}}."""
  cases, loss_terms = _cases()
  results = {}
  for name, (the_learner, batch) in cases.items():
    records = []
    for seed in range(updates):
      env_outputs, agent_outputs = batch(T, B, seed)
      state = the_learner.agent.initial_state(B)
      # One call for both learners: IMPACT's batch carries its target network's policy.
      kwargs = the_learner.batch(state, env_outputs, agent_outputs)
      if name.startswith("laser"):
        kwargs["entropy_mask"] = batch_loss.online_mask(B, B // 2)
      stats = the_learner.update(**kwargs)
      # New statistics may be added; the old ones must keep their values.
      records.append({k: np.asarray(v).item() for k, v in sorted(stats.items())
                      if k != "update_skipped"})
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
