"""Stable-Baselines3 2.9.2's PPO on a gymnasium environment with its own defaults (or with RL
Baselines3 Zoo's tuned hyperparameters): the peer of gym_defaults_side_by_side.py.

    bash benchmarks/peers/setup_sb3.sh                       # once: the venv in /tmp/sb3_venv
    /tmp/sb3_venv/bin/python benchmarks/peers/sb3_gym.py --level=CartPole-v1 --seed=1 \\
        --steps=500000 --target=475 --output_dir=/work/runs/sb3_cartpole_seed_1
    /tmp/sb3_venv/bin/python benchmarks/peers/sb3_gym.py --level=LunarLander-v3 \\
        --env_kwargs='{"continuous": true}' --hyperparams=zoo \\
        --zoo_id=LunarLanderContinuous-v3 --seed=1 --steps=3000000 --output_dir=...

Runs under the SB3 venv's Python and imports none of the project's TensorFlow code: only
sample_factory_gym's standard-library helpers for the episode file, which both systems' rows
share (EPISODES_HEADER: seconds since this process started, agent steps, return). Rows are
appended to <output_dir>/episodes.csv as the episodes end; <output_dir>/complete.json is
written when the run stops: at --steps agent steps, when the mean of the last --window
returns reaches --target, or after --max_seconds (its "reason" says which).

--hyperparams=default: PPO as SB3's documentation writes it, `PPO(policy, env, seed=S)` on
`gym.make(level, **env_kwargs)`: every hyperparameter PPO's own default (one environment,
n_steps 2048, batch 64, 10 epochs, Adam at a constant 3e-4, discount 0.99, GAE lambda 0.95,
clip 0.2, entropy 0, value coefficient 0.5, gradient norm 0.5, separate policy and value
networks of two tanh layers of 64, no observation or reward normalisation). The policy is the
one SB3's documentation prescribes for the observation space (policy_for): CnnPolicy for
images (SB3's is_image_space: a Box (H, W, C) of uint8), MultiInputPolicy for a Dict,
MlpPolicy otherwise; MinAtar's observation, a Box of bool (10, 10, C), is not an image to SB3
and is flattened by MlpPolicy. An episode cut by its time limit bootstraps its return from the
value in PPO (TimeLimit.truncated), as in this project.

MiniGrid (the usual wrapper of SB3's users): minigrid.wrappers.FlatObsWrapper, then MlpPolicy.
MiniGrid's observation is a Dict(image 7x7x3 uint8, direction, mission text) that SB3 cannot
take as it is (the text). ImgObsWrapper keeps the image alone, which SB3 sees as an image and
gives CnnPolicy, whose NatureCNN (an 8x8 stride-4 first convolution) cannot run on 7x7
("Kernel size can't be greater than actual input size"): SB3's users then write a feature
extractor of their own (minigrid's documentation does), which is no longer SB3's defaults.
FlatObsWrapper gives one vector (the image flattened and the mission one-hot by character)
that the default MlpPolicy takes, and it is RL Baselines3 Zoo's own MiniGrid wrapper, so the
two peers differ there in their hyperparameters alone. (This project reads the image and the
mission of the Dict; the direction is not observed.)

--hyperparams=zoo: RL Baselines3 Zoo 2.9.2's ExperimentManager, as its train.py sets PPO up,
with the entry of its hyperparams/ppo.yml named --zoo_id (default: --level; refused when the
file has no entry for it, where the Zoo itself would fall back to its "default" entry, which
is PPO's defaults): its n_envs, VecNormalize (normalize), env_wrapper, policy_kwargs and linear
schedules ("lin_" values) applied by the Zoo's own code. Differences from `python -m
rl_zoo3.train`: training lasts --steps, not the entry's n_timesteps (every system of the
benchmark gets the same length; "lin_" schedules anneal over --steps), and the Zoo's periodic
evaluation on a separate environment is off (eval_freq -1: it does not change training but
costs time), as is saving. The Zoo makes --level with --env_kwargs; --zoo_id names the entry
where it differs from the level's id (the MuJoCo -v5 levels take the Zoo's -v4 or -v2 entries).

Steps are SB3's num_timesteps when the episode ended: agent steps collected, counted over all
environments (this project counts the steps its learner has trained; the two differ by at most
one rollout of n_steps x n_envs).
"""
import time

LAUNCHED = time.time()  # Before the imports: torch's takes seconds, counted as start-up.

# pylint: disable=g-import-not-at-top,wrong-import-position
import argparse
import json
import logging
import os
import sys

REPOSITORY = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
if REPOSITORY not in sys.path:  # Run as a script: the episode file's helpers below, and a
  sys.path.insert(0, REPOSITORY)  # level's registering module (benchmarks.peers.register_...).
from benchmarks.peers import sample_factory_gym as episode_file

COMPLETE_FILE = "complete.json"
DEFAULT, ZOO = "default", "zoo"
MINIGRID_PREFIXES = ("MiniGrid-", "BabyAI-")
PROGRESS_SECONDS = 60.0  # How often the console gets a line (SB3's own logging is off).


def policy_for(observation_space):
  """The policy SB3's documentation prescribes for an observation space: "CnnPolicy" for
  images (is_image_space: Box (H, W, C) uint8, channels last or first), "MultiInputPolicy" for
  a Dict, "MlpPolicy" for the rest (vectors, and MinAtar's bool grids, which it flattens)."""
  from gymnasium import spaces
  from stable_baselines3.common.preprocessing import is_image_space
  if isinstance(observation_space, spaces.Dict):
    return "MultiInputPolicy"
  return "CnnPolicy" if is_image_space(observation_space) else "MlpPolicy"


def registered_name(level):
  """The id of a level, without gymnasium's "module:" prefix."""
  return level.rpartition(":")[2]


def make_env(level, env_kwargs):
  """(gym.make(level, **env_kwargs), the name of the wrapper put around it or None): MiniGrid's
  levels are flattened by FlatObsWrapper (the module docstring says why)."""
  import gymnasium as gym
  if registered_name(level).startswith(MINIGRID_PREFIXES):
    import minigrid  # noqa: F401 (importing it registers its ids)
    from minigrid.wrappers import FlatObsWrapper
    return FlatObsWrapper(gym.make(level, **env_kwargs)), "FlatObsWrapper"
  return gym.make(level, **env_kwargs), None


def target_reached(returns, target, window):
  """Whether the mean of the last `window` returns (a full window) is at least target: checked
  after every episode, true first at sample_factory_gym.first_reaching's episode."""
  return (target is not None and len(returns) >= window
          and sum(returns[-window:]) / window >= target - 1e-9)


def stop_reason(returns, steps, seconds, target, window, budget, max_seconds):
  """Why a run stops now, or None: the mean of its last `window` returns reached target (None:
  no target), `budget` steps reached, or max_seconds spent. gym_defaults_side_by_side stops
  this project's runs by the same rule."""
  if target_reached(returns, target, window):
    return f"running mean of {window} reached {target:g} at {steps:,} steps"
  if steps >= budget:
    return f"{budget:,} steps trained"
  if seconds >= max_seconds:
    return f"--max_seconds ({max_seconds:g}) after {steps:,} steps"
  return None


def episode_logger(args, path):
  """A callback that appends each finished episode's row to `path`, the same rows as
  sample_factory_gym.write_episodes (Monitor's "episode" info: the raw return, before any
  VecNormalize), and stops learning when stop_reason says so."""
  import csv

  from stable_baselines3.common.callbacks import BaseCallback

  class EpisodeLogger(BaseCallback):

    def __init__(self):
      super().__init__()
      self.returns, self.reason = [], None
      self._file = open(path, "w", newline="")  # pylint: disable=consider-using-with
      self._writer = csv.writer(self._file)
      self._writer.writerow(episode_file.EPISODES_HEADER)
      self._next_print = time.time() + PROGRESS_SECONDS

    def _on_step(self):
      seconds = time.time() - LAUNCHED
      for info in self.locals["infos"]:
        if "episode" in info:
          self.returns.append(float(info["episode"]["r"]))
          self._writer.writerow([f"{seconds:.1f}", int(self.num_timesteps),
                                 f"{self.returns[-1]:g}"])
          self._file.flush()
      if time.time() >= self._next_print:
        self._next_print = time.time() + PROGRESS_SECONDS
        recent = self.returns[-args.window:]
        print(f"{seconds:.0f} s: {self.num_timesteps:,} steps, {len(self.returns)} episodes, "
              f"mean of the last {len(recent)} "
              f"{sum(recent) / max(len(recent), 1):.2f}", flush=True)
      self.reason = stop_reason(self.returns, self.num_timesteps, seconds, args.target,
                                args.window, args.steps, args.max_seconds)
      return self.reason is None

    def _on_training_end(self):
      self._file.close()

  return EpisodeLogger()


def default_model(args):
  """(PPO with SB3's defaults on the level, what it was given)."""
  from stable_baselines3 import PPO
  env, wrapper = make_env(args.level, args.env_kwargs)
  policy = policy_for(env.observation_space)
  return PPO(policy, env, seed=args.seed), dict(
      policy=policy, wrapper=wrapper, observation_space=str(env.observation_space))


def zoo_model(args):
  """(PPO set up by RL Baselines3 Zoo's ExperimentManager from its ppo.yml entry, the
  entry)."""
  try:
    from rl_zoo3.exp_manager import ExperimentManager
  except ImportError as error:
    sys.exit(f"--hyperparams=zoo needs rl-zoo3 in this venv ({error}): bash "
             "benchmarks/peers/setup_sb3.sh installs it.")
  import rl_zoo3
  import yaml
  zoo_file = os.path.join(os.path.dirname(rl_zoo3.__file__), "hyperparams", "ppo.yml")
  with open(zoo_file) as f:
    entries = yaml.safe_load(f)
  if args.zoo_id not in entries:
    sys.exit(f"{zoo_file} has no entry for {args.zoo_id}: the Zoo has no tuned PPO "
             "setting for it (its 'default' entry is PPO's defaults: --hyperparams=default).")
  config = zoo_file
  if args.zoo_id != args.level:
    # The Zoo looks its entry up by the id it makes: a file holding zoo_id's entry under the
    # level's name makes the level (the one every system runs) with zoo_id's setting.
    config = os.path.join(args.output_dir, "zoo_entry.yml")
    with open(config, "w") as f:
      yaml.safe_dump({args.level: entries[args.zoo_id]}, f)
  manager = ExperimentManager(
      argparse.Namespace(**vars(args)), "ppo", args.level,
      log_folder=os.path.join(args.output_dir, "zoo"), n_timesteps=args.steps,
      eval_freq=-1, save_freq=-1, env_kwargs=dict(args.env_kwargs), seed=args.seed,
      verbose=0, config=config)
  model, saved = manager.setup_experiment()
  return model, dict(zoo_file=zoo_file, zoo_id=args.zoo_id, zoo_entry=dict(saved),
                     n_envs=manager.n_envs, normalize=bool(manager.normalize))


def versions():
  from importlib import metadata
  names = ("stable-baselines3", "rl-zoo3", "torch", "gymnasium", "minigrid", "minatar")
  found = {}
  for name in names:
    try:
      found[name] = metadata.version(name)
    except metadata.PackageNotFoundError:
      pass
  return found


def train(args):
  """Trains until stop_reason; writes episodes.csv as it goes and complete.json at the end."""
  import torch
  logging.disable(logging.WARNING)  # minatar's warning that it cannot draw without seaborn.
  os.makedirs(args.output_dir, exist_ok=True)
  if args.torch_threads:
    torch.set_num_threads(args.torch_threads)
  model, given = (zoo_model if args.hyperparams == ZOO else default_model)(args)
  logger = episode_logger(args, os.path.join(args.output_dir, episode_file.EPISODES_FILE))
  print(f"{args.level} {args.env_kwargs or ''} seed {args.seed}, {args.hyperparams} "
        f"hyperparameters: {given}", flush=True)
  model.learn(total_timesteps=args.steps, callback=logger)
  model.get_env().close()
  record = dict(reason=logger.reason or f"{model.num_timesteps:,} steps trained",
                steps=int(model.num_timesteps), seconds=time.time() - LAUNCHED,
                episodes=len(logger.returns), command=sys.argv, hyperparams=args.hyperparams,
                given=given, torch_threads=torch.get_num_threads(), versions=versions())
  with open(os.path.join(args.output_dir, COMPLETE_FILE), "w") as f:
    json.dump(record, f, indent=1, default=str)
  print(f"stopped: {record['reason']}; {record['episodes']} episodes in "
        f"{record['seconds']:.0f} s", flush=True)
  return record


def parse_args(argv):
  parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], allow_abbrev=False)
  parser.add_argument("--level", required=True,
                      help="A gymnasium id, or gymnasium's module:id form (the module "
                           "registers the id when imported).")
  parser.add_argument("--env_kwargs", default="",
                      help="gymnasium.make's keyword arguments as a JSON object.")
  parser.add_argument("--seed", type=int, default=1)
  parser.add_argument("--steps", type=int, required=True, help="Agent steps budget.")
  parser.add_argument("--output_dir", required=True)
  parser.add_argument("--hyperparams", choices=[DEFAULT, ZOO], default=DEFAULT)
  parser.add_argument("--zoo_id", default=None,
                      help="--hyperparams=zoo: the ppo.yml entry to apply to --level; "
                           "default --level.")
  parser.add_argument("--target", type=float, default=None,
                      help="Stop when the mean of the last --window returns reaches this.")
  parser.add_argument("--window", type=int, default=100)
  parser.add_argument("--max_seconds", type=float, default=float("inf"),
                      help="Stop after this wall time (start-up included).")
  parser.add_argument("--torch_threads", type=int, default=0,
                      help="torch.set_num_threads (0: torch's own default, one per core). Not "
                           "an SB3 setting, but on a loaded machine it decides the wall time: "
                           "README's measurement.")
  args = parser.parse_args(argv)
  try:
    args.env_kwargs = json.loads(args.env_kwargs) if args.env_kwargs else {}
  except json.JSONDecodeError as error:
    parser.error(f"--env_kwargs={args.env_kwargs}: not JSON ({error})")
  if not isinstance(args.env_kwargs, dict):
    parser.error("--env_kwargs must be a JSON object, e.g. '{\"continuous\": true}'")
  if args.steps <= 0 or args.window <= 0 or args.torch_threads < 0:
    parser.error("--steps and --window must be positive, --torch_threads not negative")
  args.zoo_id = args.zoo_id or args.level
  args.output_dir = os.path.abspath(args.output_dir)
  return args


def main(argv=None):
  train(parse_args(sys.argv[1:] if argv is None else argv))
  return 0


if __name__ == "__main__":
  sys.exit(main())
