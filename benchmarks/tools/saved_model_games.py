"""A policy SavedModel (export_policy.py --format=saved_model) playing Atari games in a plain
gymnasium loop, with nothing of this project: tensorflow, gymnasium, ale-py and numpy only.

    python -m benchmarks.tools.saved_model_games --saved_model=benchmarks/agents/breakout/saved_model \\
        --games=10 --seed=1

Game g is played with seed + g (the environment's reset seed, and the first half of the
sampling seed of its steps), sampled actions as test mode samples (--greedy: the most likely).
The wrapper chain is docs/POLICY_API.md's, which reproduces environments/atari.py's
observations. Prints each game's score and their mean and standard deviation (as test mode's
table: numpy's std), and --output writes them as JSON. Nothing here imports scalable_agent_tf2
(tests/run/test_saved_policy.py runs the same chain in a process that cannot).
"""
import argparse
import json
import os
import sys

import ale_py
import gymnasium
import numpy as np
import tensorflow as tf
from gymnasium.wrappers import AtariPreprocessing
from gymnasium.wrappers import FrameStackObservation

gymnasium.register_envs(ale_py)


def atari_environment(game_id, preprocessing):
  """gymnasium's ALE game with policy.json's preprocessing (docs/POLICY_API.md): observations
  uint8 [4, 84, 84], the newest frame last; moveaxis(o, 0, -1) gives the agent's [84, 84, 4]."""
  env = gymnasium.make(
      game_id, frameskip=1,
      repeat_action_probability=preprocessing["sticky_action_probability"],
      full_action_space=preprocessing["full_action_space"],
      max_num_frames_per_episode=preprocessing["max_episode_frames"])
  env = AtariPreprocessing(env, noop_max=preprocessing["max_noops"],
                           frame_skip=preprocessing["frame_skip"],
                           screen_size=preprocessing["frame_size"],
                           terminal_on_life_loss=False, grayscale_obs=True, scale_obs=False)
  return FrameStackObservation(env, stack_size=preprocessing["frame_stack"])


def game_id(level_name):
  """"atari/space_invaders" -> "ALE/SpaceInvaders-v5"."""
  game = level_name.split("/", 1)[1]
  return "ALE/" + "".join(part.capitalize() for part in game.split("_")) + "-v5"


def play(model, env, seed, greedy=False):
  """One game; returns (score, agent steps)."""
  observation, _ = env.reset(seed=seed)
  state = model.initial_state({"batch_size": tf.constant(1)})
  reward, score, steps, done = 0.0, 0.0, 0, False
  while not done:
    out = model.step(dict(state, observation=np.moveaxis(observation, 0, -1)[None],
                          reward=tf.constant([reward], tf.float32),
                          seed=tf.constant([seed, steps], tf.int32),
                          greedy=tf.constant(greedy)))
    state = {key: out[key] for key in state}
    observation, reward, terminated, truncated, _ = env.step(int(out["action"][0]))
    score, steps, done = score + reward, steps + 1, terminated or truncated
  return score, steps


def main(argv):
  parser = argparse.ArgumentParser(prog="python -m benchmarks.tools.saved_model_games",
                                   description=__doc__.split("\n\n")[0])
  parser.add_argument("--saved_model", required=True, help="The SavedModel's folder.")
  parser.add_argument("--games", type=int, default=10)
  parser.add_argument("--seed", type=int, default=1, help="Game g plays with seed + g.")
  parser.add_argument("--greedy", action="store_true", help="The most likely actions.")
  parser.add_argument("--output", default="", help="A JSON file for the scores.")
  args = parser.parse_args(argv)
  spec_path = os.path.join(args.saved_model, "policy.json")
  if not os.path.exists(spec_path):
    print(f"error: {spec_path} is missing: give the folder that "
          "`python -m scalable_agent_tf2.run.export_policy --format=saved_model` wrote.",
          file=sys.stderr)
    return 2
  with open(spec_path) as f:
    spec = json.load(f)
  if not spec["level_name"].startswith("atari/"):
    print(f"error: {spec['level_name']} is not an Atari game; this loop plays Atari only.",
          file=sys.stderr)
    return 2
  model = tf.saved_model.load(args.saved_model)
  env = atari_environment(game_id(spec["level_name"]), spec["observation"]["preprocessing"])
  scores = []
  for game in range(args.games):
    score, steps = play(model, env, args.seed + game, args.greedy)
    scores.append(score)
    print(f"game {game + 1} (seed {args.seed + game}): {score:.0f} in {steps} steps", flush=True)
  env.close()
  summary = dict(level_name=spec["level_name"], frames=spec.get("frames"), seeds=[
      args.seed + g for g in range(args.games)], scores=scores, mean=float(np.mean(scores)),
                 std=float(np.std(scores)), greedy=args.greedy)
  print(f"{spec['level_name']}: mean {summary['mean']:.2f} +- {summary['std']:.2f} over "
        f"{args.games} games")
  if args.output:
    with open(args.output, "w") as f:
      json.dump(summary, f, indent=2)
  return 0


if __name__ == "__main__":
  sys.exit(main(sys.argv[1:]))
