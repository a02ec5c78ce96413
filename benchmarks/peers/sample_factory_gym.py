"""Sample Factory 2.1.1 (APPO with V-trace) on a gymnasium level, set as close as it allows to
this project's gym family setting (discrete actions, e.g. CartPole-v1 and LunarLander-v3:
Table G.1's single-game learner; continuous actions, e.g. Pendulum-v1: IMPACT's Table 2 with
--algorithm=impact), and the two side by side, at the same time, to a running-mean target.

    bash benchmarks/peers/setup_sample_factory.sh              # once: venv in /tmp/sf_venv
    # The peer alone: one row per finished episode in <output_dir>/episodes.csv.
    python benchmarks/peers/sample_factory_gym.py --mode=learning --seed=1 \\
        --output_dir=/work/runs/sf_cartpole_s1
    # Both at the same time (each stopped at the target or the step budget):
    python benchmarks/peers/sample_factory_gym.py --mode=side_by_side --seed=1 \\
        --output_dir=/work/runs/sbs_cartpole
    # Any time: both runs' episodes read the same way, steps and time to the target.
    python benchmarks/peers/sample_factory_gym.py --mode=report --seed=1 \\
        --output_dir=/work/runs/sbs_cartpole
    # LunarLander (the solved mark 200; Sample Factory's gymnasium calls it LunarLander-v2):
    python benchmarks/peers/sample_factory_gym.py --mode=side_by_side --seed=1 \\
        --level=LunarLander-v3 --target=200 --steps=8000000 --output_dir=/work/runs/sbs_lunar
    # Pendulum with IMPACT (ours: --algorithm=impact --batch_size=4 --unroll_length=256):
    python benchmarks/peers/sample_factory_gym.py --mode=side_by_side --seed=1 \\
        --level=Pendulum-v1 --algorithm=impact --discounting=0.9 --target=-200 \\
        --steps=1000000 --output_dir=/work/runs/sbs_pendulum

The peer runs Sample Factory's gymnasium example (sf_examples/train_gym_env.py: gym.make of
the id, registered with register_env, Sample Factory's defaults) with the overrides listed in
`sample_factory_argv`, in a child process under the venv's Python (--venv, default $SF_VENV or
/tmp/sf_venv). The learning mode runs under any Python; side_by_side and report read our
log.jsonl through the project's runlog, so they run from the repository with its Python.

Side by side (--mode=side_by_side): this project's command

    python experiment.py --mode=train --level_name=gym:CartPole-v1 --seed=S \\
        --logdir=<output_dir>/ours_seed_S --total_environment_frames=<steps>

(with --algorithm=impact, also the setting's flags: --algorithm=impact --batch_size=4
--unroll_length=256; with --discounting, that flag)

and Sample Factory (<output_dir>/sample_factory_seed_S) start together and run concurrently;
each is stopped (ours with SIGINT: a checkpoint) as soon as the mean return of its last
--window (100) episodes reaches --target (500, CartPole-v1's maximum), or at --steps agent
steps, or at --max_seconds. On a shared, loaded machine running them at the same time gives
both the same contention, which is what makes their wall times comparable; while one runs
alone after the other stopped, it has the machine to itself, which favours the slower one.

Episodes, read the same way for both: (seconds since that system's launch, agent steps, return),
in episodes.csv in each run directory. Steps are the learner's count of trained agent steps
when the episode ended: ours from the episode record of log.jsonl, Sample Factory's from its
"Total num frames" reports (every 5 s) interpolated at the episode's time. Seconds: Sample
Factory's episodes carry their own time; ours are placed by interpolating the log's progress
records (every 5 s) at the episode's steps. Both count from the launch of the process (imports
and start-up included); `report` without the side-by-side launch record counts ours from its
first START record (after the imports).

Setting, ours (gym family, Discrete actions: Table G.1's learner with 48 environments) ->
Sample Factory here:
  same: unroll 20 (--rollout=20; V-trace needs recurrence = rollout, which without an RNN
    only groups the samples into trajectories); 640 samples per update = 32 trajectories x 20
    (--batch_size=640, one epoch, one minibatch); V-trace with rho_bar = c_bar = 1; discount
    0.99; entropy cost 0.01; learning rate 0.0006 annealed linearly to 0 at the step budget
    (Sample Factory's linear_decay over train_for_env_steps / batch_size updates: with one
    gymnasium step per agent step, frames and steps are the same count here); rewards neither
    scaled nor clipped (reward_scale 1; reward_clip 1000 is above CartPole's 1 and
    LunarLander's 100 per step, as ours has none); observations normalised by running mean
    and variance (ours: the actor's MeanStdFilter; Sample Factory: normalize_input); no
    return normalisation; 48 environments (2 rollout processes x 24 for this 2-core machine,
    split in halves stepped alternately: worker_num_splits=2, Sample Factory's double-buffered
    sampling); feed-forward MLP torso of two tanh layers of 256 shared by policy and value
    (encoder_mlp_layers 256 256, nonlinearity tanh, no RNN, no decoder layers), linear
    policy and value heads.
  network input: our heads also see the clipped reward and the one-hot previous action
    concatenated to the torso output (Figure 3); Sample Factory's see the torso output only.
    Initialisation: Sample Factory's orthogonal vs ours.
  optimizer: Sample Factory offers Adam or LAMB, no RMSProp. Adam with beta1=0, beta2=0.99 is
    RMSProp with decay 0.99 and momentum 0 plus Adam's bias correction and with epsilon
    outside the square root.
  loss scale: Sample Factory averages each loss over the 640 samples; ours sums them (the
    released IMPALA code). Adam's steps are scale-free, so only the scale-dependent numbers
    move: gradient-norm clip 40 on sums is 40/640 on means, RMSProp's epsilon 0.01 inside the
    square root of summed gradients is about sqrt(0.01)/640 outside it on means; baseline cost
    0.5 x 0.5 x sum of squares (ours) is value_loss_coeff 0.25 on the mean of squares.
  APPO's extras, kept (Sample Factory's algorithm): PPO ratio clipping of the policy term
    (ppo_clip_ratio 0.1) and value clipping (ppo_clip_value 1.0); advantages normalised per
    minibatch (always on in 2.1.1); policy term ratio x V-trace advantage where IMPALA's is
    log pi x V-trace advantage (the same gradient at ratio 1); policy lag capped at 1000
    updates (max_policy_lag; ours has no cap, its queue bounds it).
  acting: ours steps its 48 environments in in-process groups inside the training process
    (actor threads, dynamic batching); Sample Factory in 2 rollout processes, one inference
    worker, one learner, asynchronous (async_rl=True), all on the CPU, after its own
    decorrelation of the environments at start (decorrelate_envs_on_one_worker, its default).
  environment: the same task from each system's own gymnasium (ours: the project's
    gymnasium 1.x; Sample Factory: 0.29.1, the last it accepts; the same id, or PEER_IDS's
    where 0.29.1 names it differently); the time limit (CartPole-v1's 500 steps,
    LunarLander's 1000) in both; an episode cut by it bootstraps its return from the value in
    both (ours: gym_env's emit_truncation_step; Sample Factory: value_bootstrap=True, not its
    default: --value_bootstrap=False gives its default).

Setting under --algorithm=impact, ours (gym family, Box actions: IMPACT Table 2's Hopper column,
mujoco_presets.py, at batch 4 x 256 with 16 environments) -> Sample Factory here:
  same as above: V-trace (rho_bar = c_bar = 1), learning rate (3e-4) annealed to 0 at the
    budget, Adam with beta1 0 and beta2 0.99 as RMSProp (ours with Adam's epsilon, 1e-8),
    observations normalised, rewards unscaled, the time limit's truncation bootstrapped,
    2 rollout processes x 8 environments; and: unroll 256, 1024 samples per update; entropy
    0; gradient-norm clip 0.5 on the mean loss (ours: 0.5 x T x B on the sum, the same clip);
    value coefficient 1.0 (0.5 on the mean of squares); PPO clip 0.4 (ours clips the ratio to
    [0.6, 1.4], Sample Factory to [1 / 1.4, 1.4]); separate policy and value MLPs of two tanh
    layers of 256 (actor_critic_share_weights False), the network seeing the observation only,
    a Gaussian with state-dependent log standard deviations (adaptive_stddev, its default)
    whose samples the environment clips (Pendulum clips its torque to [-2, 2] itself).
  reuse: IMPACT uses each batch K = 20 times from a circular buffer of N = 16 batches,
    interleaved with newer ones; Sample Factory's nearest is 20 epochs over each batch in a row
    (num_epochs 20).
  not in Sample Factory: IMPACT's target network (its surrogate's ratio is against a target
    policy refreshed every N x K updates, clipped at rho 2; APPO's is against the behaviour
    policy) and its adaptive KL coefficient (Sample Factory's kl_loss_coeff is fixed: 1.0,
    IMPACT's starting value).
"""
import argparse
import csv
import dataclasses
import datetime
import glob
import json
import os
import re
import signal
import statistics
import subprocess
import sys
import time

EPISODE_DIR_VARIABLE = "SF_GYM_EPISODE_DIR"
REPOSITORY = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
REPORT = re.compile(r"\[(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3})\]\[\d+\] "
                    r"Fps is \(10 sec: ([\d.na]+),.*?Total num frames: (\d+)\. "
                    r"Throughput: 0: ([\d.na]+)\. Samples: (\d+)\.")
ANSI = re.compile(r"\x1b\[[0-9;]*m")
EPISODES_FILE = "episodes.csv"
EPISODES_HEADER = ["seconds", "steps", "episode_return"]
LAUNCH_FILE = "launch.json"
OURS, PEER = "ours", "sample_factory"
MLP_LAYERS = (256, 256)  # IMPACT section 4.3's MLP (torsos.MLP_HIDDEN_SIZES), tanh.
IMPALA, IMPACT = "impala", "impact"


# Ours at the comparison's scale: the Box preset under IMPACT runs 4 x 256-step batches here,
# as RESULTS' Pendulum and MuJoCo studies do (Table 2's 32 x 1024 is a 16-CPU machine's).
IMPACT_UNROLL, IMPACT_BATCH = 256, 4
IMPACT_FLAGS = ("--algorithm=impact", f"--batch_size={IMPACT_BATCH}",
                f"--unroll_length={IMPACT_UNROLL}")


@dataclasses.dataclass(frozen=True)
class Setting:
  """One of ours (the gym family's preset), in the numbers Sample Factory's command line
  needs."""
  unroll: int
  batch: int            # Trajectories per update: Sample Factory's batch_size is unroll x this.
  learning_rate: float
  entropy: float
  discount: float       # --discounting overrides it in both systems.
  rmsprop_epsilon: float  # Ours, inside the root of summed gradients' mean square.
  mean_loss_clip: float  # The gradient-norm clip on the loss averaged over the batch.
  baseline_cost: float  # Ours: baseline_cost x 0.5 x sum of squared errors.
  environments: int
  sgd_passes: int       # Updates per batch: IMPACT's K (circular_buffer_max_uses), else 1.
  ppo_clip: float       # IMPACT's clip; 0.1 (Sample Factory's default) under IMPALA.
  kl_cost: float        # IMPACT's KL coefficient (its start); 0 under IMPALA.
  shared_torso: bool    # One torso for policy and value (the discrete networks) or two.
  ours_flags: tuple     # What ours is given beyond the family's presets.

  @property
  def batch_steps(self):
    return self.unroll * self.batch


def setting(algorithm):
  """The Setting of `algorithm`, read from the gym family's own presets (a preset's change
  reaches the comparison): IMPALA, the Discrete preset (Table G.1's learner, Table 1's 48
  environments, the MLP torso shared by policy and value); IMPACT, the Box preset under
  --algorithm=impact (IMPACT Table 2's Hopper column, section 4.3's 16 workers and separate
  policy and critic MLPs, mujoco_presets.py) at IMPACT_UNROLL x IMPACT_BATCH. Imported here,
  not at the top: Sample Factory's child runs this file in its own venv, without the package."""
  if REPOSITORY not in sys.path:  # Run as a script: the package is the repository's.
    sys.path.insert(0, REPOSITORY)
  # pylint: disable=import-outside-toplevel
  from scalable_agent_tf2.configuration import settings
  from scalable_agent_tf2.environments.families import gym as gym_family
  from scalable_agent_tf2.environments.families import mujoco_presets
  if algorithm == IMPALA:
    preset = gym_family.DISCRETE_PRESET
    steps = preset["unroll_length"] * preset["batch_size"]
    return Setting(
        unroll=preset["unroll_length"], batch=preset["batch_size"],
        learning_rate=preset["learning_rate"], entropy=preset["entropy_cost"],
        discount=preset["discounting"], rmsprop_epsilon=preset["epsilon"],
        mean_loss_clip=preset["max_grad_norm"] / steps, baseline_cost=preset["baseline_cost"],
        environments=gym_family.DISCRETE_ENVIRONMENTS, sgd_passes=1, ppo_clip=0.1, kl_cost=0.0,
        shared_torso=True, ours_flags=("--algorithm=impala",))  # IMPACT is the gym default.
  preset = mujoco_presets.presets(mujoco_presets.TABLE2_TASK, settings.IMPACT)
  return Setting(
      unroll=IMPACT_UNROLL, batch=IMPACT_BATCH, learning_rate=preset["learning_rate"],
      entropy=preset["entropy_cost"], discount=preset["discounting"],
      rmsprop_epsilon=preset["epsilon"], mean_loss_clip=preset["mean_loss_max_grad_norm"],
      baseline_cost=preset["baseline_cost"], environments=preset["num_actors"],
      sgd_passes=preset["circular_buffer_max_uses"], ppo_clip=preset["ppo_clip"],
      kl_cost=preset["kl_cost"], shared_torso=False, ours_flags=IMPACT_FLAGS)


POLL_SECONDS = 2.0
# Ids that Sample Factory's gymnasium (0.29.1, the last it accepts) names differently from
# ours (1.x). LunarLander-v3 (gymnasium 1.0) changed, from v2: the wind's reset (the wind is off
# unless enable_wind=True), a world not fully destroyed at reset (a determinism fix) and the
# observation space's declared bounds; dynamics, rewards and the 1000-step limit are v2's, and
# both systems normalise observations by their running statistics, not by the bounds.
PEER_IDS = {"LunarLander-v3": "LunarLander-v2"}


def sample_factory_argv(args, train_dir, experiment):
  """Sample Factory's command line: its defaults, overridden as the docstring says (with
  CHILD_DEFAULTS, which its command line does not take)."""
  ours = setting(args.algorithm)
  steps = ours.batch_steps
  argv = dict(
      env=args.peer_level, experiment=experiment, train_dir=train_dir, device="cpu",
      seed=args.seed, algo="APPO", async_rl=True, serial_mode=False, num_workers=args.workers,
      num_envs_per_worker=ours.environments // args.workers, worker_num_splits=2,
      batched_sampling=False, rollout=ours.unroll, recurrence=ours.unroll,
      batch_size=steps, num_batches_per_epoch=1, num_epochs=ours.sgd_passes,
      with_vtrace=True, vtrace_rho=1.0, vtrace_c=1.0,
      gamma=ours.discount if args.discounting is None else args.discounting,
      exploration_loss="entropy", exploration_loss_coeff=ours.entropy,
      value_loss_coeff=ours.baseline_cost / 2, ppo_clip_ratio=ours.ppo_clip,
      kl_loss_coeff=ours.kl_cost, value_bootstrap=args.value_bootstrap, reward_scale=1.0,
      reward_clip=1000.0, normalize_returns=False,
      normalize_input=True, optimizer="adam", learning_rate=ours.learning_rate,
      adam_beta1=0.0, adam_beta2=0.99, adam_eps=ours.rmsprop_epsilon ** 0.5 / steps,
      max_grad_norm=ours.mean_loss_clip, nonlinearity="tanh", use_rnn=False,
      actor_critic_share_weights=ours.shared_torso, train_for_env_steps=args.steps,
      with_wandb=False, log_to_file=True)
  # A list option: its values follow the flag as separate words (decoder_mlp_layers keeps
  # its default, [], no decoder layers).
  return [f"--{key}={value}" for key, value in argv.items()] + [
      "--encoder_mlp_layers", *map(str, MLP_LAYERS)]


# Set as parser defaults in the child: 2.1.1's command line offers only the other schedules
# (its Atari example sets linear_decay the same way).
CHILD_DEFAULTS = dict(lr_schedule="linear_decay")


# ---------------------------------------------------------------------------------------
# Child: runs inside the venv, in Sample Factory's processes.


def make_logged_gym_env(full_env_name, cfg=None, env_config=None, render_mode=None):
  """Sample Factory's gymnasium example's environment (gym.make of the id), plus a log of
  every finished episode: (unix time, return, length) appended to a CSV per process."""
  import gymnasium as gym  # pylint: disable=import-outside-toplevel

  class EpisodeLog(gym.Wrapper):

    def __init__(self, env, path):
      super().__init__(env)
      self._path, self._return, self._length = path, 0.0, 0

    def reset(self, **kwargs):
      self._return, self._length = 0.0, 0
      return self.env.reset(**kwargs)

    def step(self, action):
      result = self.env.step(action)
      self._return += float(result[1])
      self._length += 1
      if result[2] or result[3]:
        with open(self._path, "a") as f:
          f.write(f"{time.time():.3f},{self._return:g},{self._length}\n")
        self._return, self._length = 0.0, 0
      return result

  del cfg, env_config  # The example's make function ignores them too.
  env = gym.make(full_env_name, render_mode=render_mode)
  directory = os.environ.get(EPISODE_DIR_VARIABLE)
  if directory:
    env = EpisodeLog(env, os.path.join(directory, f"episodes_{os.getpid()}.csv"))
  return env


def child_main(sf_argv):
  """Registers the logged environment under its gymnasium id and trains (as
  sf_examples.train_gym_env does)."""
  # pylint: disable=import-outside-toplevel
  from sample_factory.cfg.arguments import parse_full_cfg
  from sample_factory.cfg.arguments import parse_sf_args
  from sample_factory.envs.env_utils import register_env
  from sample_factory.train import run_rl
  level = next(a.split("=", 1)[1] for a in sf_argv if a.startswith("--env="))
  register_env(level, make_logged_gym_env)
  parser, _ = parse_sf_args(argv=sf_argv)
  parser.set_defaults(**CHILD_DEFAULTS)
  return run_rl(parse_full_cfg(parser, sf_argv))


# ---------------------------------------------------------------------------------------
# The comparison (pure functions).


def first_reaching(returns, target, window):
  """Index of the first episode at which the mean of the last `window` returns is at least
  target (a full window needed), or None."""
  total = 0.0
  for i, value in enumerate(returns):
    total += value
    if i >= window:
      total -= returns[i - window]
    if i + 1 >= window and total / window >= target - 1e-9:
      return i
  return None


def interpolate(x, xs, ys):
  """Piecewise-linear y(x) through (xs, ys) (xs non-decreasing), constant beyond the ends."""
  if not xs:
    return 0.0
  if x <= xs[0]:
    return ys[0]
  for (x0, y0), (x1, y1) in zip(zip(xs, ys), zip(xs[1:], ys[1:])):
    if x <= x1:
      return y0 + (y1 - y0) * (x - x0) / (x1 - x0) if x1 > x0 else y0
  return ys[-1]


def write_episodes(path, rows):
  """episodes.csv: a header, then (seconds, steps, return) per episode."""
  with open(path, "w", newline="") as f:
    writer = csv.writer(f)
    writer.writerow(EPISODES_HEADER)
    for seconds, steps, episode_return in rows:
      writer.writerow([f"{seconds:.1f}", int(steps), f"{episode_return:g}"])
  return path


def read_episodes(path):
  """The rows write_episodes wrote: [(seconds, steps, return)]."""
  with open(path) as f:
    reader = csv.reader(f)
    header = next(reader, None)
    if header != EPISODES_HEADER:
      raise ValueError(f"{path}: header {header}, not {EPISODES_HEADER}")
    return [(float(s), int(n), float(r)) for s, n, r in reader]


def mean_at(rows, steps, window):
  """Mean return of the last `window` episodes ended at or before `steps` (None before any)."""
  returns = [r[2] for r in rows if r[1] <= steps][-window:]
  return sum(returns) / len(returns) if returns else None


def reached(rows, target, window):
  """dict(seconds, steps, episodes) when the running mean first reached target, or None."""
  index = first_reaching([r[2] for r in rows], target, window)
  if index is None:
    return None
  return dict(seconds=rows[index][0], steps=rows[index][1], episodes=index + 1)


# ---------------------------------------------------------------------------------------
# Reading each system's episodes.


def read_reports(log_path):
  """Sample Factory's 5-second reports: (unix time, total trained frames = agent steps)."""
  if not os.path.exists(log_path):
    return []
  with open(log_path, errors="replace") as f:
    text = ANSI.sub("", f.read())
  return [(datetime.datetime.strptime(stamp, "%Y-%m-%d %H:%M:%S,%f").timestamp(), int(frames))
          for stamp, _, frames, _, _ in REPORT.findall(text)]


def peer_episodes(output_dir, launched):
  """Sample Factory's episodes: (seconds since launched, trained steps then, return)."""
  logged = []
  for path in glob.glob(os.path.join(output_dir, "games", "episodes_*.csv")):
    with open(path) as f:
      logged.extend((float(t), float(r)) for t, r, _ in csv.reader(f))
  reports = read_reports(os.path.join(output_dir, "sample_factory.log"))
  times, steps = [r[0] for r in reports], [r[1] for r in reports]
  return [(when - launched, int(interpolate(when, times, steps)), episode_return)
          for when, episode_return in sorted(logged)]


def ours_episodes(logdir, launched=None):
  """This project's episodes from log.jsonl, the same rows: (seconds since launched (default:
  the first START record), trained steps, return)."""
  if REPOSITORY not in sys.path:  # Run as a script: the package is the repository's.
    sys.path.insert(0, REPOSITORY)
  # pylint: disable-next=import-outside-toplevel
  from scalable_agent_tf2.runfiles import runlog
  episodes, progress = runlog.read_trained_records(logdir)
  if launched is None:
    starts = runlog.of_kind(runlog.read_log(logdir), runlog.START)
    launched = starts[0]["time"] if starts else (progress[0]["time"] if progress else 0.0)
  # The first record of each step count: the time the learner got there.
  points = []
  for record in progress:
    if not points or record["frames"] > points[-1][0]:
      points.append((record["frames"], record["time"]))
  counts, times = [p[0] for p in points], [p[1] for p in points]
  return [(interpolate(r["frames"], counts, times) - launched, r["frames"],
           float(r["episode_return"])) for r in episodes]


# ---------------------------------------------------------------------------------------
# Running.


def launch_peer(args, output_dir, experiment="learning"):
  """Starts the Sample Factory child in its own process group; returns (process, log path)."""
  python = os.path.join(args.venv, "bin", "python")
  if not os.path.exists(python):
    sys.exit(f"No Python at {python}: run benchmarks/peers/setup_sample_factory.sh "
             f"{args.venv} first, or pass --venv=<its directory>.")
  episode_dir = os.path.join(output_dir, "games")
  os.makedirs(episode_dir, exist_ok=True)
  log_path = os.path.join(output_dir, "sample_factory.log")
  command = [python, os.path.abspath(__file__), "--sf_child",
             *sample_factory_argv(args, output_dir, experiment)]
  with open(os.path.join(output_dir, "command.json"), "w") as f:
    json.dump(command, f, indent=1)
  environment = dict(os.environ, **{EPISODE_DIR_VARIABLE: episode_dir})
  environment.pop("OPENBLAS_CORETYPE", None)  # torch's OpenBLAS is not the one they guard.
  with open(log_path, "w") as log:
    process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, env=environment,
                               start_new_session=True)
  return process, log_path


def ours_command(args, logdir):
  """This project's command for the level (the family's presets, the step budget)."""
  extra = list(setting(args.algorithm).ours_flags)
  if args.discounting is not None:
    extra.append(f"--discounting={args.discounting}")
  return [sys.executable, os.path.join(REPOSITORY, "experiment.py"), "--mode=train",
          f"--level_name=gym:{args.level}", f"--logdir={logdir}", f"--seed={args.seed}",
          f"--total_environment_frames={args.steps}", *extra]


def launch_ours(args, logdir):
  os.makedirs(logdir, exist_ok=True)
  console = open(os.path.join(logdir, "console.txt"), "a")  # pylint: disable=consider-using-with
  return subprocess.Popen(ours_command(args, logdir), cwd=REPOSITORY, stdout=console,
                          stderr=subprocess.STDOUT, start_new_session=True)


def stop(process, grace_seconds=120):
  """SIGINT to the process group (ours checkpoints, Sample Factory saves), then SIGKILL."""
  for sig, wait in ((signal.SIGINT, grace_seconds), (signal.SIGKILL, 30)):
    if process.poll() is not None:
      break
    try:
      os.killpg(process.pid, sig)
    except ProcessLookupError:
      break
    try:
      process.wait(timeout=wait)
    except subprocess.TimeoutExpired:
      pass
  try:  # Stragglers of the group (Sample Factory's workers) once the leader is gone.
    os.killpg(process.pid, signal.SIGKILL)
  except ProcessLookupError:
    pass


def crashed(log_path):
  """Sample Factory's own report of an exception in one of its event loops, or None."""
  if not os.path.exists(log_path):
    return None
  with open(log_path, errors="replace") as f:
    for line in f:
      if "Unhandled exception" in line or "Traceback (most recent call last)" in line:
        return ANSI.sub("", line).strip()
  return None


def group_cpu_seconds(pgid, seen):
  """Updates seen ({pid: CPU seconds}) with the user + system time of every live process of
  the process group (Linux /proc); returns their sum: the group's CPU time so far, up to
  one poll of a process that has exited since."""
  tick = os.sysconf("SC_CLK_TCK")
  for stat in glob.glob("/proc/[0-9]*/stat"):
    try:
      with open(stat) as f:
        fields = f.read().rsplit(")", 1)[1].split()
    except OSError:
      continue
    if int(fields[2]) == pgid:  # Fields after the name: state, ppid, pgrp, ..., utime, stime.
      seen[stat] = (int(fields[11]) + int(fields[12])) / tick
  return sum(seen.values())


def done(rows, args):
  """Why a run should stop now (the target or the step budget reached), or None."""
  hit = reached(rows, args.target, args.window)
  if hit:
    return f"running mean of {args.window} reached {args.target:g} at {hit['steps']:,} steps"
  if rows and rows[-1][1] >= args.steps:
    return f"{args.steps:,} steps trained"
  return None


def run(args, directories):
  """Launches the systems of `directories` ({system: directory}) together, polls their
  episodes, stops each when done; writes episodes.csv and launch.json in each directory."""
  running, launched, why = {}, {}, {}
  cpu = {system: {} for system in directories}
  for system, directory in directories.items():
    launched[system] = time.time()
    if system == PEER:
      running[system] = launch_peer(args, directory)[0]
    else:
      running[system] = launch_ours(args, directory)
    with open(os.path.join(directory, LAUNCH_FILE), "w") as f:
      json.dump(dict(system=system, launched=launched[system], seed=args.seed,
                     command=ours_command(args, directory) if system == OURS else
                     json.load(open(os.path.join(directory, "command.json")))), f, indent=1)
    print(f"{system}: launched, {directory}", flush=True)
  deadline = time.time() + args.max_seconds
  try:
    while running:
      time.sleep(POLL_SECONDS)
      for system in list(running):
        group_cpu_seconds(running[system].pid, cpu[system])
        rows = episodes_of(system, directories[system], launched[system])
        process = running[system]
        failure = crashed(os.path.join(directories[system], "sample_factory.log")) \
            if system == PEER else None
        reason = (done(rows, args) or (f"exited with {process.poll()}" if process.poll()
                                       is not None else None)
                  or failure or ("--max_seconds" if time.time() > deadline else None))
        if reason:
          why[system] = reason
          print(f"{system}: {reason}; {time.time() - launched[system]:.0f} s since launch, "
                f"{sum(cpu[system].values()):.0f} CPU seconds; stopping", flush=True)
          stop(running.pop(system))
  finally:
    for process in running.values():
      stop(process)
  for system, directory in directories.items():
    rows = episodes_of(system, directory, launched[system])
    write_episodes(os.path.join(directory, EPISODES_FILE), rows)
    with open(os.path.join(directory, "stopped.json"), "w") as f:
      json.dump(dict(reason=why.get(system), cpu_seconds_at_stop=sum(cpu[system].values()),
                     episodes=len(rows)), f, indent=1)
  return why


def episodes_of(system, directory, launched):
  if system == PEER:
    return peer_episodes(directory, launched)
  if not os.path.exists(os.path.join(directory, "log.jsonl")):
    return []
  return ours_episodes(directory, launched)


def system_directories(args):
  return {OURS: os.path.join(args.output_dir, f"ours_seed_{args.seed}"),
          PEER: os.path.join(args.output_dir, f"sample_factory_seed_{args.seed}")}


def report(args):
  """Each system's steps and seconds to the target, read from its run directory."""
  results = {}
  for system, directory in system_directories(args).items():
    launch_path = os.path.join(directory, LAUNCH_FILE)
    launched = None
    if os.path.exists(launch_path):
      with open(launch_path) as f:
        launched = json.load(f)["launched"]
    if launched is None and system == PEER:
      continue
    rows = episodes_of(system, directory, launched) if os.path.isdir(directory) else []
    hit = reached(rows, args.target, args.window)
    results[system] = hit
    last = rows[-args.window:]
    tail = (f"{len(rows)} episodes to {rows[-1][1]:,} steps in {rows[-1][0]:.0f} s, mean of "
            f"the last {len(last)} {statistics.mean(r[2] for r in last):.1f}" if rows
            else "no episode yet")
    where = (f"reached {args.target:g} at {hit['steps']:,} steps, {hit['seconds']:.0f} s "
             f"({hit['seconds'] / 60:.1f} min) after launch, episode {hit['episodes']:,}"
             if hit else "target not reached")
    print(f"{system} seed {args.seed}: {where}; {tail}")
    if rows:
      counts = range(args.every, rows[-1][1] + 1, args.every)
      print(f"  mean of the last {args.window} at every {args.every:,} steps: " + ", ".join(
          f"{n // 1000:,}k {mean_at(rows, n, args.window):.0f}" for n in counts))
  if results.get(OURS) and results.get(PEER):
    ours, peer = results[OURS], results[PEER]
    print(f"ratio Sample Factory / ours: steps {peer['steps'] / ours['steps']:.2f}, wall time "
          f"{peer['seconds'] / ours['seconds']:.2f}")
  return results


def parse_args(argv):
  parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], allow_abbrev=False)
  parser.add_argument("--mode", choices=["learning", "side_by_side", "report"],
                      default="side_by_side")
  parser.add_argument("--level", default="CartPole-v1", help="A gymnasium id (ours).")
  parser.add_argument("--peer_level", default=None,
                      help="The id in Sample Factory's gymnasium 0.29.1, when it names the "
                           "task differently (default: PEER_IDS, else --level).")
  parser.add_argument("--workers", type=int, default=2,
                      help="Sample Factory's rollout processes (the machine's 2 cores); the "
                           "setting's environments are split over them.")
  parser.add_argument("--algorithm", choices=[IMPALA, IMPACT], default=IMPALA,
                      help="impala: the Discrete preset (Table G.1's learner); impact: the "
                           "Box preset under --algorithm=impact at batch 4 x 256 (setting()).")
  parser.add_argument("--discounting", type=float, default=None,
                      help="Both systems' discount, when not the setting's (Pendulum: 0.9).")
  parser.add_argument("--steps", type=int, default=2_000_000,
                      help="Agent steps budget (ours: --total_environment_frames; Sample "
                           "Factory: train_for_env_steps); the learning rate anneals to 0 "
                           "over it in both.")
  parser.add_argument("--target", type=float, default=500.0,
                      help="Stop a run when the mean of its last --window returns reaches "
                           "this (CartPole-v1's maximum, 500).")
  parser.add_argument("--window", type=int, default=100)
  parser.add_argument("--every", type=int, default=100_000,
                      help="report: the running mean at every this many steps.")
  parser.add_argument("--value_bootstrap", choices=["True", "False"], default="True",
                      help="Sample Factory's value_bootstrap: True bootstraps the return of "
                           "an episode cut by its time limit from the value, as ours does "
                           "(gym_env's emit_truncation_step); False, its default, treats the "
                           "cut as the episode's end.")
  parser.add_argument("--max_seconds", type=float, default=float("inf"),
                      help="Stop every run after this wall time.")
  parser.add_argument("--seed", type=int, default=1)
  parser.add_argument("--venv", default=os.environ.get("SF_VENV", "/tmp/sf_venv"))
  parser.add_argument("--output_dir", required=True,
                      help="learning: the run's directory; side_by_side and report: "
                           "<output_dir>/ours_seed_S and sample_factory_seed_S. Outside the "
                           "repository.")
  args = parser.parse_args(argv)
  if args.peer_level is None:
    args.peer_level = PEER_IDS.get(args.level, args.level)
  environments = setting(args.algorithm).environments
  if args.workers < 1 or environments % (2 * args.workers):
    choices = [n for n in range(1, environments // 2 + 1) if environments % (2 * n) == 0]
    parser.error(f"--workers={args.workers}: each worker needs an even share of the "
                 f"{environments} environments (worker_num_splits=2): "
                 f"{', '.join(map(str, choices))}")
  if args.steps <= 0 or args.window <= 0 or args.every <= 0:
    parser.error("--steps, --window and --every must be positive")
  args.output_dir = os.path.abspath(args.output_dir)
  if os.path.commonpath([args.output_dir, REPOSITORY]) == REPOSITORY:
    parser.error(f"--output_dir {args.output_dir} is inside the repository {REPOSITORY}; "
                 "choose a directory outside it (runs are large and not part of the project)")
  if args.mode != "report" and not os.path.exists(os.path.join(args.venv, "bin", "python")):
    parser.error(f"no Sample Factory venv at {args.venv}: run bash benchmarks/peers/"
                 f"setup_sample_factory.sh {args.venv} first (or pass --venv)")
  return args


def main(argv):
  if argv[:1] == ["--sf_child"]:
    return child_main(argv[1:])
  args = parse_args(argv)
  if args.mode == "learning":
    directories = {PEER: args.output_dir}
  elif args.mode == "side_by_side":
    directories = system_directories(args)
  else:
    report(args)
    return 0
  for directory in directories.values():
    if os.path.exists(os.path.join(directory, LAUNCH_FILE)):
      sys.exit(f"{directory} holds a run already; choose another --output_dir or --seed.")
    os.makedirs(directory, exist_ok=True)
  run(args, directories)
  if args.mode == "side_by_side":
    report(args)
  else:
    rows = read_episodes(os.path.join(args.output_dir, EPISODES_FILE))
    print(f"{len(rows)} episodes; reached: {reached(rows, args.target, args.window)}")
  return 0


if __name__ == "__main__":
  sys.exit(main(sys.argv[1:]))
