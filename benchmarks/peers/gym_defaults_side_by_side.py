"""This project with no flags beside Stable-Baselines3's PPO with its own defaults, on the
development set of gymnasium environments (issue 42), several seeds: steps and wall time to
each environment's threshold, a table and a figure per environment.

    bash benchmarks/peers/setup_sb3.sh                 # once: the peers' venv in /tmp/sb3_venv
    python -m benchmarks.peers.gym_defaults_side_by_side --output_dir=/work/runs/gym_defaults
    # Any time, also while the runs are under way: the tables, verdicts and figures.
    python -m benchmarks.peers.gym_defaults_side_by_side --output_dir=/work/runs/gym_defaults \\
        --mode=report [--figures]

For each environment of DEVELOPMENT_SET (--envs: a subset) and each seed (--seeds, default
1,2,3), one run after the other (never two at once: the machine has 2 cores), each system of
--systems:
  ours     `python experiment.py --mode=train --logdir=<output_dir>/<env>/ours_seed_S
           --level_name=gym:<id> [--env_kwargs=<json>] --seed=S
           --total_environment_frames=<budget>`: the gym family's presets, no other flag
           (--ours_flags adds some: a candidate default, in an --output_dir of its own);
           stopped with SIGINT (a checkpoint, as a user's Ctrl-C) once the mean of its last 100
           returns reaches the threshold, or at --max_seconds; it stops by itself at the budget.
  sb3_ppo  sb3_gym.py: PPO with Stable-Baselines3's own defaults, `PPO(policy, env, seed=S)`
           (its docstring: the policy for each observation space, MiniGrid's FlatObsWrapper),
           in <output_dir>/<env>/sb3_ppo_seed_S.
  rl_zoo3  sb3_gym.py --hyperparams=zoo: PPO with RL Baselines3 Zoo's tuned entry for the
           environment, where its ppo.yml has one (Environment.zoo_id); not in the default
           --systems: --systems=ours,sb3_ppo,rl_zoo3 adds it.
Every run stops at the same rule (sb3_gym.stop_reason): the running mean of the last 100
episode returns reaching the threshold, the environment's step budget, or --max_seconds.

Across machines (--archive_dir, e.g. the repository's benchmarks/results/gym_defaults): each
finished run's small files (complete.json, episodes.csv, the command) are copied there, and a
run finished there is copied into --output_dir and not made again, so that a set longer than
one machine's life is built over several (commit the archive; the logdirs stay outside).

Resuming: run the same command again. Runs whose complete.json exists are skipped (ours
refused if another command made it: check_finished_command); our
interrupted runs resume from their last checkpoint (the same command, the same logdir; what
the killed attempt trained beyond it is dropped by runlog.read_trained_records); an
interrupted peer run restarts from zero, its directory moved aside (<dir>.interrupted_<time>),
as learning_side_by_side.py does. A run that fails (e.g. a level ours refuses) is reported,
left without complete.json (tried again by the next command) and the others go on. Every
command is appended to <output_dir>/commands.txt.

Episodes, read the same way for both (sample_factory_gym's rows): (seconds since the launch of
the run's process, agent steps, return). Ours: from log.jsonl, steps = the learner's trained
steps when the episode ended, seconds interpolated between its 5-second progress records and
counted over its attempts only (each from the driver's launch of its process: TensorFlow's
import included, as torch's is for the peer; the time between attempts is not counted). The
peers: steps = SB3's collected steps when the episode ended (at most one rollout apart).

Report (--mode=report, and after the runs): per environment a markdown table, per system:
steps and wall time to the threshold (median and [min, max] over seeds, a seed that did not
reach it counting as "not reached", above every number), the return at the end of the runs
(mean of the last 100 episodes: at the threshold, the budget or --max_seconds; the budget
where there is no threshold), and the ratio ours / system of the median steps and of the
median wall time; then the issue's verdict (verdict()); and one PNG per environment in
--output_dir (return against steps and against wall time, a line per seed, a colour per
system; --figures also copies them to benchmarks/figures/).
"""
import argparse
import csv
import dataclasses
import importlib.util
import json
import os
import shlex
import shutil
import signal
import sys
import time

import numpy as np

from benchmarks.peers import learning_side_by_side as lsbs
from benchmarks.peers import sample_factory_gym as episode_file
from benchmarks.peers import sb3_gym
from benchmarks.studies import runs
from scalable_agent_tf2.runfiles import plot as learning_curves
from scalable_agent_tf2.runfiles import runlog

WINDOW = runs.FINAL_EPISODES  # The running mean of the thresholds: the last 100 returns.
STEPS_RATIO_LIMIT = 1.5  # The acceptance: ours within 1.5x PPO's median steps.


@dataclasses.dataclass(frozen=True)
class Environment:
  """One environment of the development set, and the benchmark's length on it."""
  name: str                  # --envs and the directory under --output_dir.
  level: str                 # The gymnasium id every system makes (gymnasium's module:id form
                             # where a module must register it first).
  threshold: float | None    # Mean of the last 100 returns; None: side by side only.
  budget: int                # Agent steps of every run (ours: --total_environment_frames).
  env_kwargs: str = ""       # gymnasium.make's keyword arguments (JSON): ours' --env_kwargs.
  zoo_id: str | None = None  # RL Baselines3 Zoo's ppo.yml entry; None: no tuned setting.
  # A benchmark-only package ours' venv needs for it (benchmarks/requirements-<name>.txt; the
  # peers' venv has it from setup_sb3.sh); None: requirements.txt has what it needs.
  requires: str | None = None
  optional: bool = False     # Run only when --envs names it.
  # Where threshold is None: judge at the return PPO's defaults reach at the budget (the median
  # over its seeds of run_summary's final), known once its runs finish.
  threshold_from_ppo: bool = False


# The development set of issue 42 with its thresholds. The budgets are the benchmark's length
# on each environment (the same for every system; for ours it is the learning-rate schedule's
# length too, as --total_environment_frames is for any user), not a setting of the agent:
# a few times what PPO is known to need, so that "not reached" means not reached.
DEVELOPMENT_SET = (
    Environment("CartPole-v1", "CartPole-v1", 475.0, 500_000, zoo_id="CartPole-v1"),
    Environment("LunarLander-v3", "LunarLander-v3", 200.0, 3_000_000, zoo_id="LunarLander-v3"),
    Environment("LunarLanderContinuous-v3", "LunarLander-v3", 200.0, 3_000_000,
                env_kwargs='{"continuous": true}', zoo_id="LunarLanderContinuous-v3"),
    Environment("Pendulum-v1", "Pendulum-v1", -200.0, 1_000_000, zoo_id="Pendulum-v1"),
    Environment("MiniGrid-Empty-8x8-v0", "MiniGrid-Empty-8x8-v0", 0.9, 500_000,
                requires="minigrid"),
    Environment("MiniGrid-Unlock-v0", "MiniGrid-Unlock-v0", 0.8, 2_000_000,
                zoo_id="MiniGrid-Unlock-v0", requires="minigrid"),
    # gymnasium 1.x does not load the "gymnasium.envs" entry point minatar 1.0.15 declares:
    # register_minatar registers its ids (gymnasium's module:id form, for both systems).
    Environment("MinAtar-Breakout-v1", "benchmarks.peers.register_minatar:MinAtar/Breakout-v1",
                None, 5_000_000, requires="minatar"),
    Environment("BipedalWalker-v3", "BipedalWalker-v3", None, 5_000_000,
                zoo_id="BipedalWalker-v3", optional=True),
    # Box actions on gymnasium's MuJoCo tasks through gym: ids, 1M steps each: gymnasium's
    # reward_threshold where its spec has one (Hopper 3800, HalfCheetah 4800, Reacher -3.75);
    # Walker2d-v5 has none, so PPO's return at the end is its threshold. RL Zoo 2.9.2's ppo.yml
    # tunes the -v4 ids (Reacher: -v2; the same models and rewards; v5 fixes contact and
    # default-argument details): the Zoo's runs apply those entries to the -v5 levels.
    Environment("Hopper-v5", "Hopper-v5", 3800.0, 1_000_000, zoo_id="Hopper-v4"),
    Environment("Walker2d-v5", "Walker2d-v5", None, 1_000_000, zoo_id="Walker2d-v4",
                threshold_from_ppo=True),
    Environment("HalfCheetah-v5", "HalfCheetah-v5", 4800.0, 1_000_000, zoo_id="HalfCheetah-v4"),
    Environment("Reacher-v5", "Reacher-v5", -3.75, 1_000_000, zoo_id="Reacher-v2"),
)
ENVIRONMENTS = {env.name: env for env in DEVELOPMENT_SET}

OURS, PPO, ZOO = "ours", "sb3_ppo", "rl_zoo3"
SYSTEMS = (OURS, PPO, ZOO)
DEFAULT_SYSTEMS = (OURS, PPO)
LABELS = {OURS: "this project (no flags)", PPO: "SB3 PPO (its defaults)",
          ZOO: "SB3 PPO (RL Zoo's tuned setting)"}
COLOURS = {OURS: "tab:blue", PPO: "tab:orange", ZOO: "tab:green"}
PEER_HYPERPARAMS = {PPO: sb3_gym.DEFAULT, ZOO: sb3_gym.ZOO}
PEER_SCRIPT = os.path.join(runs.REPO_DIR, "benchmarks", "peers", "sb3_gym.py")

COMPLETE_FILE = sb3_gym.COMPLETE_FILE  # Both systems' mark of a finished run.
FAILED_FILE = "failed.json"            # The last attempt's failure (removed when it completes).
LAUNCHES_FILE = "launches.json"        # Ours: the driver's launch time of every attempt.
COMMAND_FILE = "side_by_side_command.json"
# What --archive_dir keeps of a finished run: what the report reads, and what makes it skipped
# (copied in this order, complete.json last: a copy cut short is not a finished run).
ARCHIVED_FILES = (episode_file.EPISODES_FILE, COMMAND_FILE, COMPLETE_FILE)
POLL_SECONDS = 5.0  # Ours' log is read this often (its log_secs: 5).
STOP_GRACE_SECONDS = 300  # Ours' final checkpoint after SIGINT; then the process is killed.


# ---------------------------------------------------------------------------------------
# The comparison (pure functions).


def steps_to_threshold(rows, threshold, window=WINDOW):
  """dict(steps, seconds, episodes) of the episode at which the mean of the last `window`
  returns first reached threshold (rows: (seconds, steps, return)), or None."""
  if threshold is None:
    return None
  return episode_file.reached(rows, threshold, window)


def run_summary(rows, threshold, complete, window=WINDOW):
  """One run in the numbers of the table: steps and seconds to the threshold (None: not
  reached), the mean of its last `window` returns (None before any episode), the steps it
  got to, and whether it has finished."""
  hit = steps_to_threshold(rows, threshold, window)
  last = [r[2] for r in rows[-window:]]
  return dict(steps_to=hit["steps"] if hit else None, seconds_to=hit["seconds"] if hit else None,
              final=float(np.mean(last)) if last else None,
              end_steps=rows[-1][1] if rows else 0, episodes=len(rows), complete=complete)


def median_range(values):
  """dict(median, low, high, reached, count) over seeds of values where None is "not reached"
  (counted, as above every number): median or high None when they are not reached."""
  ordered = sorted(float("inf") if v is None else float(v) for v in values)
  if not ordered:
    return dict(median=None, low=None, high=None, reached=0, count=0)

  def finite(value):
    return None if value == float("inf") else value
  return dict(median=finite(float(np.median(ordered))), low=finite(ordered[0]),
              high=finite(ordered[-1]), reached=sum(v is not None for v in values),
              count=len(ordered))


def ratio(ours, peer):
  """ours / peer of two medians; None unless both are reached."""
  if ours is None or peer is None or peer <= 0:
    return None
  return ours / peer


def verdict(threshold, ours, ppo):
  """The issue's acceptance rule on one environment: (status, why), status "met", "NOT met",
  "not decided" (a run not finished) or "side by side only" (no threshold).

  ours, ppo: run_summary of each seed (None for a seed not run yet). Where PPO reaches the
  threshold (its median over seeds does), ours must reach it in every seed, with a median of
  steps at most STEPS_RATIO_LIMIT x PPO's and a median wall time below PPO's. Where PPO does
  not, ours must reach it in every seed, or the mean over seeds of its final return must lie
  within PPO's seed range or above it (learning_side_by_side.standing)."""
  if threshold is None:
    return "side by side only", "no threshold"
  runs_in = list(ours) + list(ppo)
  if not ours or not ppo or any(run is None or not run["complete"] for run in runs_in):
    done = sum(run is not None and run["complete"] for run in runs_in)
    return "not decided", f"{done} of {len(runs_in)} runs finished"
  ours_steps = median_range([run["steps_to"] for run in ours])
  every_seed = ours_steps["reached"] == ours_steps["count"]
  ppo_steps = median_range([run["steps_to"] for run in ppo])
  if ppo_steps["median"] is not None:
    problems = []
    if not every_seed:
      problems.append(f"ours reached it in {ours_steps['reached']} of {ours_steps['count']} "
                      "seeds")
    else:
      steps_ratio = ratio(ours_steps["median"], ppo_steps["median"])
      if steps_ratio > STEPS_RATIO_LIMIT:
        problems.append(f"ours took {steps_ratio:.2f}x PPO's median steps (limit "
                        f"{STEPS_RATIO_LIMIT:g}x)")
      ours_seconds = median_range([run["seconds_to"] for run in ours])["median"]
      ppo_seconds = median_range([run["seconds_to"] for run in ppo])["median"]
      if ours_seconds >= ppo_seconds:
        problems.append(f"ours took {ours_seconds:.0f} s of wall time, PPO {ppo_seconds:.0f} s")
    if problems:
      return "NOT met", "; ".join(problems)
    return "met", ("ours reached it in every seed, within "
                   f"{STEPS_RATIO_LIMIT:g}x PPO's median steps and in less wall time")
  if every_seed:
    return "met", "ours reached it in every seed; PPO's median did not"
  finals = [run["final"] for run in ours]
  ours_mean = float(np.mean(finals)) if None not in finals else None
  where = lsbs.standing(ours_mean, [run["final"] for run in ppo])
  if where in ("within", "above"):
    return "met", (f"neither reached it; ours' final return {ours_mean:.2f} (mean of seeds) is "
                   f"{where} PPO's seed range")
  return "NOT met", (f"ours reached it in {ours_steps['reached']} of {ours_steps['count']} "
                     "seeds and its final return (mean of seeds) is "
                     f"{where or 'not comparable'} PPO's seed range")


def format_steps(steps):
  if steps is None:
    return "not reached"
  if steps >= 1e6:
    return f"{steps / 1e6:.2f}M"
  return f"{steps / 1e3:.0f}k" if steps >= 1e4 else f"{steps:,.0f}"


def format_seconds(seconds):
  if seconds is None:
    return "not reached"
  return f"{seconds / 60:.1f} min" if seconds >= 600 else f"{seconds:.0f} s"


def format_median_range(summary, unit):
  """"120k [100k, not reached] (2/3 reached)" of median_range's dict."""
  if not summary["count"]:
    return "n/a"
  if not summary["reached"]:
    return f"not reached (0/{summary['count']})"
  return (f"{unit(summary['median'])} [{unit(summary['low'])}, {unit(summary['high'])}] "
          f"({summary['reached']}/{summary['count']} reached)")


def format_ratio(value):
  return "n/a" if value is None else f"{value:.2f}"


def labels_for(ours_flags):
  """LABELS, ours' naming its --ours_flags where it has some."""
  flags = " ".join(f"--{name}={value}" for name, value in ours_flags.items())
  return {**LABELS, OURS: f"this project ({flags})"} if flags else LABELS


def table(env, by_system, seeds, labels=LABELS):
  """The markdown table of one environment: by_system {system: {seed: run_summary or None}}."""
  threshold = "" if env.threshold is None else f"{env.threshold:g}"
  lines = [f"| system | runs finished | steps to {threshold or 'the threshold'}: median "
           f"[range] | wall time to {threshold or 'it'}: median [range] | return at the end: "
           "mean [range] | steps at the end: median | ours / system: steps | ours / system: "
           "wall time |", "|---|---:|---:|---:|---:|---:|---:|---:|"]
  ours = [run for run in by_system.get(OURS, {}).values() if run is not None]
  ours_steps = median_range([run["steps_to"] for run in ours])["median"]
  ours_seconds = median_range([run["seconds_to"] for run in ours])["median"]
  for system, by_seed in by_system.items():
    done = [run for run in by_seed.values() if run is not None]
    steps = median_range([run["steps_to"] for run in done])
    seconds = median_range([run["seconds_to"] for run in done])
    finals = [run["final"] for run in done if run["final"] is not None]
    final = (f"{np.mean(finals):.2f} [{min(finals):.2f}, {max(finals):.2f}]" if finals
             else "n/a")
    end = format_steps(float(np.median([run["end_steps"] for run in done]))) if done else "n/a"
    steps_ratio = "" if system == OURS else format_ratio(ratio(ours_steps, steps["median"]))
    seconds_ratio = "" if system == OURS else format_ratio(ratio(ours_seconds,
                                                                 seconds["median"]))
    if env.threshold is None:
      steps_text = seconds_text = "n/a"
    else:
      steps_text = format_median_range(steps, format_steps)
      seconds_text = format_median_range(seconds, format_seconds)
    finished = sum(run["complete"] for run in done)
    lines.append(f"| {labels[system]} | {finished}/{len(seeds)} | {steps_text} | {seconds_text} "
                 f"| {final} | {end} | {steps_ratio} | {seconds_ratio} |")
  return "\n".join(lines)


def title(env, seeds):
  kwargs = f" {env.env_kwargs}" if env.env_kwargs else ""
  if env.threshold is None:
    target = ("threshold: PPO's median return at the end, when its runs finish"
              if env.threshold_from_ppo else "no threshold: side by side only")
  else:
    source = " (PPO's median return at the end)" if env.threshold_from_ppo else ""
    target = f"threshold {env.threshold:g}{source}: mean of the last {WINDOW} returns"
  return (f"{env.level}{kwargs} ({target}; budget {format_steps(env.budget)} steps; "
          f"seed{'s' * (len(seeds) > 1)} {', '.join(map(str, seeds))})")


# ---------------------------------------------------------------------------------------
# Reading the runs.


def run_directory(output_dir, env, system, seed):
  return os.path.join(output_dir, env.name, f"{system}_seed_{seed}")


def read_json(path):
  if not os.path.exists(path):
    return None
  with open(path) as f:
    return json.load(f)


def write_json(path, value):
  with open(path + ".tmp", "w") as f:
    json.dump(value, f, indent=1, default=str)
  os.replace(path + ".tmp", path)


def attempts(records, launches):
  """Our run's attempts, [dict(start, end)]: learning_curves.attempts_from_log's (START record
  to the attempt's last record), each started instead at the driver's launch of its process
  (the last launch before its START), so that start-up counts as the peer's does."""
  spans = learning_curves.attempts_from_log(records)
  for span in spans:
    earlier = [t for t in launches if t <= span["start"]]
    if earlier:
      span["start"] = max(earlier)
  return spans


def ours_rows(logdir):
  """Our run's episodes as (seconds of running time since launch, trained steps, return)."""
  if not os.path.exists(runlog.log_path(logdir)):
    return []
  records = runlog.read_log(logdir)
  absolute = episode_file.ours_episodes(logdir, launched=0.0)  # Seconds = unix times.
  spans = attempts(records, read_json(os.path.join(logdir, LAUNCHES_FILE)) or [])
  seconds = learning_curves.running_seconds(spans, [row[0] for row in absolute])
  return [(float(s), int(steps), float(r)) for s, (_, steps, r) in zip(seconds, absolute)]


def episode_rows(directory):
  """A run's episodes.csv rows as sample_factory_gym.read_episodes reads them, without a last
  line still being written ([] before the file exists): a peer's, written as it runs, or a
  finished run of ours' (run_ours writes it from ours_rows)."""
  path = os.path.join(directory, episode_file.EPISODES_FILE)
  if not os.path.exists(path):
    return []
  with open(path, newline="") as f:
    text = f.read()
  lines = text.splitlines()[:-1] if text and not text.endswith("\n") else text.splitlines()
  reader = csv.reader(lines)
  if next(reader, None) != episode_file.EPISODES_HEADER:
    raise ValueError(f"{path}: not an episodes file (header {episode_file.EPISODES_HEADER})")
  return [(float(s), int(n), float(r)) for s, n, r in reader]


def read_run(output_dir, env, system, seed):
  """(rows, complete, failure message or None) of one run; rows [] when it has none."""
  directory = run_directory(output_dir, env, system, seed)
  complete = os.path.exists(os.path.join(directory, COMPLETE_FILE))
  # A finished run of ours from --archive_dir has its episodes.csv and no log.
  finished_rows = complete and os.path.exists(os.path.join(directory, episode_file.EPISODES_FILE))
  rows = ours_rows(directory) if system == OURS and not finished_rows else episode_rows(directory)
  failed = read_json(os.path.join(directory, FAILED_FILE))
  return rows, complete, None if complete or not failed else failed["error"]


# ---------------------------------------------------------------------------------------
# Running.


# ours_command's own flags: --ours_flags may not replace them.
HARNESS_FLAGS = frozenset(
    {"mode", "logdir", "level_name", "env_kwargs", "seed", "total_environment_frames"})


def ours_command(env, seed, logdir, ours_flags=()):
  """This project's command: the level, the seed and the budget; no other flag but
  ours_flags (--ours_flags: a candidate default, as (name, value) pairs)."""
  flags = dict(level_name=f"gym:{env.level}")
  if env.env_kwargs:
    flags["env_kwargs"] = env.env_kwargs
  flags.update(seed=seed, total_environment_frames=env.budget)
  flags.update(ours_flags)
  return runs.experiment_command(logdir, **flags)


def peer_command(env, seed, system, directory, venv, max_seconds, torch_threads=0):
  """sb3_gym.py's command under the SB3 venv's Python."""
  command = [os.path.join(venv, "bin", "python"), PEER_SCRIPT, f"--level={env.level}",
             f"--seed={seed}", f"--steps={env.budget}", f"--output_dir={directory}",
             f"--hyperparams={PEER_HYPERPARAMS[system]}", f"--window={WINDOW}"]
  if torch_threads:
    command.append(f"--torch_threads={torch_threads}")
  if env.env_kwargs:
    command.append(f"--env_kwargs={env.env_kwargs}")
  if system == ZOO:
    command.append(f"--zoo_id={env.zoo_id}")
  if env.threshold is not None:
    command.append(f"--target={env.threshold:g}")
  if max_seconds != float("inf"):
    command.append(f"--max_seconds={max_seconds:g}")
  return command


def printable_peer(command):
  """A peer's command as one would type it in the repository's directory: its venv's Python
  (runs.printable would show "python")."""
  argv = [command[0], os.path.relpath(command[1], runs.REPO_DIR)] + command[2:]
  return " ".join(shlex.quote(a) for a in argv)


def last_error(console_path):
  """The line of a run's console that says why it failed: its last "error:" line or, without
  one, its last line."""
  if not os.path.exists(console_path):
    return "no console output"
  with open(console_path, errors="replace") as f:
    lines = [line.strip() for line in f if line.strip()]
  errors = [line for line in lines if line.startswith("error:") or "Error" in line[:40]]
  return (errors or lines or ["no console output"])[-1]


def fail(directory, error, print_fn):
  write_json(os.path.join(directory, FAILED_FILE), dict(error=error, time=time.time()))
  print_fn(f"  FAILED: {error}")
  return error


def finish(directory, record, print_fn):
  write_json(os.path.join(directory, COMPLETE_FILE), record)
  if os.path.exists(os.path.join(directory, FAILED_FILE)):
    os.remove(os.path.join(directory, FAILED_FILE))
  print_fn(f"  {record['reason']}")


def run_ours(env, seed, logdir, max_seconds, print_fn, ours_flags=()):
  """Trains ours (resuming its logdir) until sb3_gym.stop_reason: SIGINT at the threshold or
  --max_seconds; at the budget it stops by itself. Returns the failure or None."""
  command = ours_command(env, seed, logdir, ours_flags)
  if os.path.exists(os.path.join(logdir, COMPLETE_FILE)):
    check_finished_command(logdir, runs.printable(command))
    print_fn(f"$ {runs.printable(command)}\n  already finished")
    return None
  os.makedirs(logdir, exist_ok=True)
  lsbs.check_same_command(os.path.join(logdir, COMMAND_FILE), runs.printable(command))
  records, offset = runlog.read_records(runlog.log_path(logdir))
  launches = read_json(os.path.join(logdir, LAUNCHES_FILE)) or []
  spent = sum(span["end"] - span["start"] for span in attempts(records, launches)
              if span["end"] is not None)
  print_fn(f"$ {runs.printable(command)}"
           + (f"  # resumed after {spent:.0f} s" if spent else ""))
  launches.append(time.time())
  write_json(os.path.join(logdir, LAUNCHES_FILE), launches)
  tail = runlog.LogTail(runlog.log_path(logdir), offset)
  reason = None
  with open(os.path.join(logdir, "console.txt"), "a") as console:
    process = lsbs.start_run(command, console)
    try:
      while reason is None:
        time.sleep(POLL_SECONDS)
        exited = process.poll() is not None  # Before the read: its last records are in.
        records.extend(tail.read())
        episodes, progress = runlog.read_trained_records(logdir, records)
        steps = progress[-1]["frames"] if progress else 0
        reason = sb3_gym.stop_reason([r["episode_return"] for r in episodes], steps,
                                     spent + time.time() - launches[-1], env.threshold,
                                     WINDOW, env.budget, max_seconds)
        if exited:  # By itself: only a clean exit at the budget (or the threshold) finishes.
          reason = reason if process.returncode == 0 else None
          break
        if reason is not None and steps >= env.budget and not sb3_gym.target_reached(
            [r["episode_return"] for r in episodes], env.threshold, WINDOW):
          # At the budget the run stops by itself: its exit code decides (a run that logged
          # its last records and then failed was taken for a finished one).
          reason = None
    finally:
      runs.interrupt(process, STOP_GRACE_SECONDS)
  if reason is None:
    return fail(logdir, f"exited with {process.returncode} at {lsbs.ours_frames(logdir):,} "
                f"steps: {last_error(os.path.join(logdir, 'console.txt'))}", print_fn)
  rows = ours_rows(logdir)
  episode_file.write_episodes(os.path.join(logdir, episode_file.EPISODES_FILE), rows)
  finish(logdir, dict(reason=reason, steps=lsbs.ours_frames(logdir),
                      seconds=rows[-1][0] if rows else None, episodes=len(rows),
                      command=runs.printable(command)), print_fn)
  return None


def check_finished_command(logdir, command):
  """Refuses a finished run of ours made by another command (other --ours_flags in the same
  --output_dir or --archive_dir): its numbers would be reported as this command's. The
  --logdir is left out of the comparison: an archived run names another machine's."""
  recorded = read_json(os.path.join(logdir, COMMAND_FILE))
  identity = lambda line: [t for t in shlex.split(line) if not t.startswith("--logdir=")]
  if recorded is not None and identity(recorded) != identity(command):
    raise SystemExit(f"{logdir} holds a finished run of another command:\n  {recorded}\nnot\n"
                     f"  {command}\nChoose another --output_dir (and --archive_dir).")


def run_peer(env, seed, system, directory, venv, max_seconds, print_fn, torch_threads=0):
  """Trains a peer with sb3_gym.py from zero (an unfinished earlier attempt moved aside);
  returns the failure or None."""
  command = peer_command(env, seed, system, directory, venv, max_seconds, torch_threads)
  # The run's identity: the script and its flags, without --max_seconds (a stopping rule, not
  # the run), --torch_threads (how fast it runs, not what it learns) and --output_dir (where:
  # the directory the identity is kept in, another on the next machine of --archive_dir).
  identity = " ".join([os.path.relpath(command[1], runs.REPO_DIR)] + [
      a for a in command[2:]
      if not a.startswith(("--max_seconds", "--torch_threads", "--output_dir"))])
  if os.path.isdir(directory):
    lsbs.check_same_command(os.path.join(directory, COMMAND_FILE), identity)
    if os.path.exists(os.path.join(directory, COMPLETE_FILE)):
      print_fn(f"$ {printable_peer(command)}\n  already finished")
      return None
    aside = f"{directory}.interrupted_{time.strftime('%Y%m%d_%H%M%S')}"
    os.rename(directory, aside)
    print_fn(f"  an unfinished {system} run restarts from zero (moved to {aside})")
  print_fn(f"$ {printable_peer(command)}")
  os.makedirs(directory)
  lsbs.check_same_command(os.path.join(directory, COMMAND_FILE), identity)
  console_path = os.path.join(directory, "console.txt")
  with open(console_path, "w") as console:
    process = lsbs.start_run(command, console)
    try:
      process.wait()
    finally:  # SIGINT (the driver interrupted): the peer stops; its run restarts next time.
      runs.interrupt(process, 60)
  record = read_json(os.path.join(directory, COMPLETE_FILE))
  if record is None:
    return fail(directory, f"exited with {process.returncode}: {last_error(console_path)}",
                print_fn)
  print_fn(f"  {record['reason']}")
  return None


def missing_packages(args):
  """{package: [environment names]} for the benchmark-only packages ours would need and
  this Python lacks (only when ours is among --systems)."""
  missing = {}
  if OURS in args.systems:
    for env in args.envs:
      if env.requires and importlib.util.find_spec(env.requires) is None:
        missing.setdefault(env.requires, []).append(env.name)
  return missing


def copy_finished(source, destination):
  """Copies a finished run's ARCHIVED_FILES from directory `source` to `destination` (made if
  missing) unless `destination` has it finished already; True when it copied."""
  if (not os.path.exists(os.path.join(source, COMPLETE_FILE))
      or os.path.exists(os.path.join(destination, COMPLETE_FILE))):
    return False
  os.makedirs(destination, exist_ok=True)
  for name in ARCHIVED_FILES:
    if os.path.exists(os.path.join(source, name)):
      shutil.copyfile(os.path.join(source, name), os.path.join(destination, name))
  return True


def run_all(args, print_fn):
  """Every run of args, one after another; returns the failures [(env, system, seed, error)].
  With --archive_dir, each run finished here is kept there too."""
  failures = []
  for env in args.envs:
    for seed in args.seeds:
      for system in args.systems:
        directory = run_directory(args.output_dir, env, system, seed)
        if system == ZOO and env.zoo_id is None:
          continue  # The Zoo has no tuned setting for it.
        if system == OURS:
          error = run_ours(env, seed, directory, args.max_seconds, print_fn, args.ours_flags)
        else:
          error = run_peer(env, seed, system, directory, args.venv, args.max_seconds, print_fn,
                           args.torch_threads)
        archived = args.archive_dir and run_directory(args.archive_dir, env, system, seed)
        if error:
          failures.append((env.name, system, seed, error))
        elif archived and copy_finished(directory, archived):
          print_fn(f"  kept in {archived}")
  return failures


def take_archived(args, print_fn):
  """Copies the runs of args finished in --archive_dir into --output_dir (where they are not
  finished already): run_all skips them, the report reads them."""
  for env in args.envs:
    for seed in args.seeds:
      for system in SYSTEMS:
        source = run_directory(args.archive_dir, env, system, seed)
        if copy_finished(source, run_directory(args.output_dir, env, system, seed)):
          print_fn(f"{env.name} {system} seed {seed}: finished in {source}")


# ---------------------------------------------------------------------------------------
# Reporting.


def plot(env, runs_by_system, seeds, path, labels=LABELS):
  """The running mean of the last 100 returns against steps and against wall time: a line per
  seed (the seed range shaded), a colour per system, the threshold dashed."""
  import matplotlib  # pylint: disable=g-import-not-at-top
  matplotlib.use("Agg")
  import matplotlib.pyplot as plt  # pylint: disable=g-import-not-at-top
  figure, panels = plt.subplots(1, 2, figsize=(14, 5), sharey=True)
  scale, unit = runs.frame_scale(env.budget)
  for axes, column, divisor in ((panels[0], 1, scale), (panels[1], 0, 60.0)):
    for system, by_seed in runs_by_system.items():
      curves = [(np.array([row[column] for row in rows]) / divisor,
                 learning_curves.running_mean([row[2] for row in rows], WINDOW))
                for rows in by_seed.values() if rows]
      runs.plot_seeds(axes, curves, labels[system], COLOURS[system])
    if env.threshold is not None:
      axes.axhline(env.threshold, color="grey", linestyle="--", linewidth=1,
                   label=f"threshold {env.threshold:g}")
    axes.set_xlabel(f"agent steps ({unit})" if column == 1 else "minutes of running time")
    axes.grid(alpha=0.3)
    axes.legend(loc="best", fontsize=8)
  panels[0].set_ylabel(f"episode return (mean of last {WINDOW})")
  figure.suptitle(f"{title(env, seeds)}\n{labels[OURS]} and Stable-Baselines3's "
                  f"PPO, one run at a time on one {os.cpu_count()}-core machine")
  figure.tight_layout()
  figure.savefig(path, dpi=100)
  plt.close(figure)
  return path


def threshold_of(env, ppo_runs):
  """env, with threshold PPO's median return at the end (run_summary's final) where
  env.threshold_from_ppo and every PPO run of ppo_runs ((rows, complete) or None) finished."""
  if env.threshold is not None or not env.threshold_from_ppo:
    return env
  ppo_runs = list(ppo_runs)
  if not ppo_runs or any(run is None or not run[1] or not run[0] for run in ppo_runs):
    return env
  finals = [run_summary(rows, None, complete)["final"] for rows, complete in ppo_runs]
  return dataclasses.replace(env, threshold=float(np.median(finals)))


def report(args, print_fn=print):
  """Reads every run of args; prints each environment's table, failures and verdict; writes the
  figures. Returns {env name: (status, why)}."""
  verdicts, labels = {}, labels_for(args.ours_flags)
  for env in args.envs:
    runs_read, failures = {}, []  # {system: {seed: (rows, complete) or None (not started)}}
    for system in SYSTEMS:
      if system == ZOO and env.zoo_id is None:
        continue
      runs_read[system] = {}
      for seed in args.seeds:
        rows, complete, failure = read_run(args.output_dir, env, system, seed)
        started = rows or complete or os.path.isdir(
            run_directory(args.output_dir, env, system, seed))
        runs_read[system][seed] = (rows, complete) if started else None
        if failure:
          failures.append(f"{system} seed {seed} failed: {failure}")
    env = threshold_of(env, runs_read[PPO].values())
    summaries, rows_by_system = {}, {}
    for system, by_seed in runs_read.items():
      if system in args.systems or any(run is not None for run in by_seed.values()):
        summaries[system] = {seed: run and run_summary(run[0], env.threshold, run[1])
                             for seed, run in by_seed.items()}
        rows_by_system[system] = {seed: run[0] if run else [] for seed, run in by_seed.items()}
    print_fn(f"\n### {title(env, args.seeds)}\n")
    print_fn(table(env, summaries, args.seeds, labels))
    for line in failures:
      print_fn(f"- {line}")
    status, why = verdict(env.threshold, list(summaries.get(OURS, {}).values()),
                          list(summaries.get(PPO, {}).values()))
    verdicts[env.name] = (status, why)
    print_fn(f"\nverdict: {status} ({why})")
    if any(rows for by_seed in rows_by_system.values() for rows in by_seed.values()):
      path = plot(env, rows_by_system, args.seeds,
                  os.path.join(args.output_dir, f"{env.name}.png"), labels)
      print_fn(f"figure: {path}")
      if args.figures:
        copy = os.path.join(runs.REPO_DIR, "benchmarks", "figures",
                            f"gym_defaults_{env.name}.png")
        shutil.copyfile(path, copy)
        print_fn(f"figure: {copy}")
  return verdicts


def parse_args(argv):
  # No abbreviations: a mistyped flag (--seed=1) is refused, not taken for another.
  parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], allow_abbrev=False)
  parser.add_argument("--output_dir", required=True,
                      help="Runs go to <output_dir>/<env>/<system>_seed_S, figures to "
                           "<output_dir>/<env>.png; outside the repository.")
  parser.add_argument("--mode", choices=["run", "report"], default="run",
                      help="run: make the missing runs, then report; report: run nothing.")
  parser.add_argument("--envs", default=None,
                      help="Comma-separated environments of DEVELOPMENT_SET (default: all "
                           "but the optional ones): " + ", ".join(ENVIRONMENTS))
  parser.add_argument("--seeds", default="1,2,3", help="Comma-separated seeds.")
  parser.add_argument("--systems", default=",".join(DEFAULT_SYSTEMS),
                      help=f"Which systems to run: {', '.join(SYSTEMS)} ({ZOO}: only where "
                           "the Zoo has a tuned setting).")
  parser.add_argument("--max_seconds", type=float, default=float("inf"),
                      help="Also stop each run after this much running time.")
  parser.add_argument("--steps", type=int, default=None,
                      help="Every environment's budget replaced by this many agent steps "
                           "(a quick check of the whole command; other runs, other "
                           "--output_dir).")
  parser.add_argument("--torch_threads", type=int, default=0,
                      help="The peers' torch.set_num_threads (0: torch's default, one per "
                           "core; sb3_gym.py and README say why one may want 1).")
  parser.add_argument("--ours_flags", default="",
                      help="experiment.py flags added to ours' command, e.g. "
                           "'--gae_lambda=0.95': a candidate default measured as the defaults "
                           "are (its own --output_dir and --archive_dir: a run's command is "
                           "checked on resuming).")
  parser.add_argument("--venv", default=os.environ.get("SB3_VENV", "/tmp/sb3_venv"),
                      help="The peers' venv (benchmarks/peers/setup_sb3.sh).")
  parser.add_argument("--archive_dir", default=None,
                      help="Finished runs' small files are kept here, and runs finished here "
                           "are not made again (a set built over several machines; e.g. "
                           "benchmarks/results/gym_defaults, committed).")
  parser.add_argument("--figures", action="store_true",
                      help="Also copy each figure to benchmarks/figures/.")
  args = parser.parse_args(argv)
  names = ([n for n in args.envs.split(",") if n] if args.envs is not None
           else [env.name for env in DEVELOPMENT_SET if not env.optional])
  unknown = [n for n in names if n not in ENVIRONMENTS]
  if unknown or not names:
    parser.error(f"--envs={args.envs}: choose among {', '.join(ENVIRONMENTS)}")
  args.envs = [ENVIRONMENTS[n] for n in names]
  if args.steps is not None:
    if args.steps <= 0:
      parser.error("--steps must be positive")
    args.envs = [dataclasses.replace(env, budget=args.steps) for env in args.envs]
  try:
    args.seeds = runs.parse_seeds(args.seeds)
  except ValueError:
    parser.error(f"--seeds={args.seeds}: give integers separated by commas, e.g. 1,2,3")
  tokens = args.ours_flags.split()
  bad = [t for t in tokens if not t.startswith("--") or "=" not in t]
  args.ours_flags = {} if bad else runs.parse_extra_flags(args.ours_flags)
  if bad or set(args.ours_flags) & HARNESS_FLAGS:
    parser.error(f"--ours_flags={' '.join(tokens)}: give --name=value flags of experiment.py "
                 f"other than the harness's own ({', '.join(sorted(HARNESS_FLAGS))})")
  if args.ours_flags and args.figures:
    parser.error("--figures copies to benchmarks/figures/gym_defaults_<env>.png, the defaults' "
                 "figures: with --ours_flags, copy <output_dir>/<env>.png under a name of its own")
  args.systems = [name for name in args.systems.split(",") if name]
  if not args.systems or set(args.systems) - set(SYSTEMS):
    parser.error(f"--systems={','.join(args.systems)}: choose among {', '.join(SYSTEMS)}")
  if args.max_seconds <= 0 or args.torch_threads < 0:
    parser.error("--max_seconds must be positive and --torch_threads not negative")
  args.output_dir = os.path.abspath(args.output_dir)
  args.archive_dir = args.archive_dir and os.path.abspath(args.archive_dir)
  if os.path.commonpath([args.output_dir, runs.REPO_DIR]) == runs.REPO_DIR:
    parser.error(f"--output_dir {args.output_dir} is inside the repository; choose a "
                 "directory outside it (runs are large and not part of the project)")
  if (args.mode == "run" and set(args.systems) - {OURS}
      and not os.path.exists(os.path.join(args.venv, "bin", "python"))):
    parser.error(f"no SB3 venv at {args.venv}: run bash benchmarks/peers/setup_sb3.sh "
                 f"{args.venv} first (or pass --venv)")
  missing = missing_packages(args) if args.mode == "run" else {}
  if missing:  # Refused before any run starts, not found as a failure after the others.
    parser.error("; ".join(
        f"{', '.join(envs)} needs {package} in this Python (ours runs here): pip install "
        f"--no-deps -r benchmarks/requirements-{package}.txt" for package, envs in missing.items()))
  return args


def main(argv=None):
  args = parse_args(sys.argv[1:] if argv is None else argv)
  # SIGTERM ends the runs as Ctrl-C does: ours with a checkpoint, the peer's process.
  signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(128 + signum))
  print_fn = runs.command_log(args.output_dir)
  if args.archive_dir:
    take_archived(args, print_fn)
  failures = run_all(args, print_fn) if args.mode == "run" else []
  report(args)
  for env_name, system, seed, error in failures:
    print(f"FAILED: {env_name} {system} seed {seed}: {error}")
  return 1 if failures else 0


if __name__ == "__main__":
  sys.exit(main())
