"""Learning on an Atari game, side by side: README's quick start against Sample Factory, per
frame (Pong by default, the game measured so far).

    bash benchmarks/peers/setup_sample_factory.sh     # once: the peer's venv in /tmp/sf_venv
    python -m benchmarks.peers.learning_side_by_side --frames=20000000 --seeds=1,2 \\
        --output_dir=/work/runs/pong_vs_sf
    python -m benchmarks.peers.learning_side_by_side --game=boxing --frames=30000000 \\
        --seeds=1 --output_dir=/work/runs/boxing_vs_sf    # again after a stop: it resumes

Separates the implementation from the settings: both systems learn the game (--game, this
project's name of any of the 57 Atari games: pong, boxing, breakout, space_invaders, ...)
with the same hyperparameters as far as the two allow, the same frame budget and the same
seeds, one run after the other on the whole machine. For each seed:
  ours: `experiment.py --mode=train --level_name=atari/<game> --seed=S --logdir=<output_dir>/
    ours/seed_S`, README's quick start (the Table G.1 preset, its 200M-frame budget left
    unchanged), stopped with SIGINT (a checkpoint, as a user's Ctrl-C) once its log.jsonl
    shows --frames trained. Passing --total_environment_frames=--frames instead would anneal
    the learning rate to 0 within the comparison, which is not what a user of the quick start
    gets; with the 200M budget the rate falls linearly from 0.0006 only to 0.00054 at 20M
    frames (Table G.1's schedule, optimizers.linear_decay): nearly constant.
  sample_factory: `sample_factory_pong.py --mode=learning --game=<game> --frames=F --seed=S
    --lr_schedule=constant --save_every_sec=N` (its docstring lists the setting and every
    difference left, those that depend on the game included: FIRE after a reset, lives, the
    game's length).
    Constant 0.0006 is the closer match to ours over a 20M window: ours falls 10% below it by
    the end (5% on average), where its linear_decay over a budget of --frames would end at
    3/4 of the start (0.00045, 17% below ours at the end; 8% on average).

--systems=ours (or sample_factory) makes only that system's runs, so that a comparison longer
than one sitting can be spread over several; the report reads whatever both have logged.
Where our run's logdir is gone, `--report_only --ours_table=CSV` reads our side from the
table `python -m scalable_agent_tf2.runfiles.plot LOGDIR --table_every=N` printed of it
(the mean of its last 100 games at every N frames), compared at those counts.

Interrupted runs resume when the same command is run again, so a comparison can be spread
over sittings (stop it with Ctrl-C, SIGINT or SIGTERM, also when a script started it in the
background: both systems then save a checkpoint, and the driver ends with one line saying
so; a run that fails instead ends it with the run's exit code and its console's path). Ours
resumes from its last checkpoint (checkpoint_secs, 10 minutes by default; what came after it
is dropped by runlog.read_trained_records). The peer resumes from Sample Factory's own last
checkpoint (restart_behavior=resume; one every --peer_save_every_sec, 120 s, and one when
stopped): sample_factory_pong.py keeps each launch's log and games and rebuilds episodes.csv
from all of them, games placed by the reports of their own launch, with running seconds
(gaps between sittings not counted), and the games a killed launch logged beyond the frames
the next launch resumed from dropped (that training is redone; its docstring has the
details). A finished run given a larger --frames continues the same way. Complete runs are
skipped.

One --output_dir holds the runs of one game and setting: a run of another game there is
refused (ours: its command differs; the peer: its command.json's environment), and so is one
of another command (ours: side_by_side_command.json; the peer: command.json's Sample Factory
flags other than the budget and the save interval, e.g. another seed).

Reported: per seed and system, the mean of the last 100 episode returns (runs.FINAL_EPISODES)
at every --every frames, and whether the mean of our seeds is within the peer's seed range
[min, max] or above it there; the goal is met when it is at every count. The figure has that
return against frames and against hours of running time (ours: from each attempt's START
record; the peer: the sum of its launches' durations, each from its launch, torch import and
environment start-up included).
"""
import argparse
import csv
import json
import os
import signal
import subprocess
import sys
import time

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # pylint: disable=g-import-not-at-top,wrong-import-position
import numpy as np  # pylint: disable=g-import-not-at-top,wrong-import-position

from benchmarks.peers import sample_factory_pong  # pylint: disable=wrong-import-position
from benchmarks.studies import runs  # pylint: disable=wrong-import-position
from scalable_agent_tf2.runfiles import plot as learning_curves  # pylint: disable=wrong-import-position
from scalable_agent_tf2.runfiles import runlog  # pylint: disable=wrong-import-position

OURS, PEER = "ours", "sample_factory"
LABELS = {OURS: "this project (IMPALA, README quick start: Table G.1)",
          PEER: "Sample Factory 2.1.1 (APPO + V-trace)"}
COLOURS = {OURS: "tab:blue", PEER: "tab:orange"}
PEER_SCRIPT = os.path.join(runs.REPO_DIR, "benchmarks", "peers", "sample_factory_pong.py")
DEFAULT_GAME = sample_factory_pong.DEFAULT_GAME
PEER_LR_SCHEDULE = "constant"  # The closer match to ours over the window (docstring).
COMPLETE_FILE = "complete.json"
# Sample Factory reports its frame count every 5 s (~17,500 frames here) and stops a run at its
# budget between two reports: a finished run's last report may lie this share below it.
PEER_FRAME_TOLERANCE = 0.02
# Sample Factory's checkpoint interval in the peer's runs: what a kill loses at most.
PEER_SAVE_EVERY_SEC = sample_factory_pong.DEFAULT_SAVE_EVERY_SEC
POLL_SECONDS = 5.0  # How often our run's log is read for its frame count (log_secs: 5).
STOP_GRACE_SECONDS = 300  # Our final checkpoint after SIGINT; then the process is killed.
RESUME_HINT = "run the same command to resume"


class StoppedShort(Exception):
  """A run ended cleanly (exit code 0) before its budget: it was stopped (a signal to it or
  to its process group), not broken; it resumes from its last checkpoint."""


# ---------------------------------------------------------------------------------------
# The comparison (pure functions).


def frame_counts(total_frames, every):
  """The frame counts the table compares at: every, 2 x every, ..., and total_frames."""
  counts = list(range(every, total_frames + 1, every))
  if not counts or counts[-1] != total_frames:
    counts.append(total_frames)
  return counts


def curve_at(frames, returns, reached_frames, counts):
  """A run's return at each frame count: the mean of the last runs.FINAL_EPISODES episodes
  logged at or before it; None where the run has not reached it or had no episode yet."""
  curves = dict(frames=np.asarray(frames, np.float64), returns=np.asarray(returns))
  return [runs.return_at(curves, "frames", count) if count <= reached_frames else None
          for count in counts]


def standing(ours, peer_values):
  """Where ours stands against the peer's seed range: "above", "within" or "below" it;
  None when a value is missing."""
  if ours is None or not peer_values or any(v is None for v in peer_values):
    return None
  if ours > max(peer_values):
    return "above"
  return "within" if ours >= min(peer_values) else "below"


def comparison_rows(ours_by_seed, peer_by_seed, counts):
  """One row per frame count: each system's per-seed returns (lists aligned with counts, as
  curve_at gives), our mean over seeds (None unless every seed has a value) and its
  standing against the peer's seed range."""
  rows = []
  for i, count in enumerate(counts):
    ours = {seed: values[i] for seed, values in ours_by_seed.items()}
    peer = {seed: values[i] for seed, values in peer_by_seed.items()}
    complete = ours and all(v is not None for v in ours.values())
    ours_mean = float(np.mean(list(ours.values()))) if complete else None
    rows.append(dict(frames=count, ours=ours, peer=peer, ours_mean=ours_mean,
                     standing=standing(ours_mean, list(peer.values()))))
  return rows


def verdict(rows):
  """The goal (our return within the peer's seed range or above it at every frame count)
  as one line: met, not met (at which counts), or not yet decidable."""
  below = [row["frames"] for row in rows if row["standing"] == "below"]
  missing = [row["frames"] for row in rows if row["standing"] is None]
  if below:
    return ("goal NOT met: ours is below Sample Factory's seed range at "
            + ", ".join(f"{f / 1e6:g}M" for f in below) + " frames")
  if missing:
    return (f"not decided yet: {len(rows) - len(missing)} of {len(rows)} frame counts "
            "compared (the others not reached by every run), none below")
  return "goal met: ours is within Sample Factory's seed range or above it at every count"


def table(rows):
  """Markdown table of comparison_rows."""
  ours_seeds, peer_seeds = sorted(rows[0]["ours"]), sorted(rows[0]["peer"])
  lines = ["| frames | " + " | ".join(f"ours seed {s}" for s in ours_seeds)
           + " | ours mean | " + " | ".join(f"SF seed {s}" for s in peer_seeds)
           + " | SF range | ours vs SF range |",
           "|---:|" + "---:|" * (len(ours_seeds) + len(peer_seeds) + 2) + "---|"]
  for row in rows:
    peer = [v for v in row["peer"].values() if v is not None]
    span = f"[{min(peer):.2f}, {max(peer):.2f}]" if len(peer) == len(row["peer"]) else "n/a"
    lines.append(f"| {row['frames'] / 1e6:g}M | "
                 + " | ".join(runs.fmt(row["ours"][s], 2) for s in ours_seeds)
                 + f" | {runs.fmt(row['ours_mean'], 2)} | "
                 + " | ".join(runs.fmt(row["peer"][s], 2) for s in peer_seeds)
                 + f" | {span} | {row['standing'] or 'n/a'} |")
  return "\n".join(lines)


# ---------------------------------------------------------------------------------------
# Running.


def ours_frames(logdir):
  """Frames our run has trained to (its last kept progress record), 0 before any."""
  progress = runlog.read_trained_records(logdir)[1] if os.path.isdir(logdir) else []
  return progress[-1]["frames"] if progress else 0


def level_name(game):
  """Our level of the game: "boxing" -> "atari/boxing"."""
  return f"atari/{game}"


def ours_command(logdir, seed, game=DEFAULT_GAME):
  """README's quick start on the game with this seed and logdir."""
  return runs.experiment_command(logdir, level_name=level_name(game), seed=seed)


def run_ours(logdir, seed, frames, print_fn, game=DEFAULT_GAME):
  """Trains README's quick start on the game with this seed until frames are trained
  (resuming)."""
  command = ours_command(logdir, seed, game)
  if ours_frames(logdir) >= frames:
    print_fn(f"$ {runs.printable(command)}\n  already trained {ours_frames(logdir):,} frames")
    return
  os.makedirs(logdir, exist_ok=True)
  check_same_command(os.path.join(logdir, "side_by_side_command.json"),
                      runs.printable(command))
  print_fn(f"$ {runs.printable(command)}  # stopped with SIGINT at {frames:,} frames")
  tail = runlog.LogTail(runlog.log_path(logdir), os.path.getsize(runlog.log_path(logdir))
                        if os.path.exists(runlog.log_path(logdir)) else 0)
  with open(os.path.join(logdir, "console.txt"), "a") as console:
    process = start_run(command, console)
    try:
      reached = 0
      while process.poll() is None and reached < frames:
        time.sleep(POLL_SECONDS)
        reached = max([reached] + [r["frames"] for r in runlog.of_kind(tail.read(),
                                                                      runlog.PROGRESS)])
    finally:
      runs.interrupt(process, STOP_GRACE_SECONDS)
  if ours_frames(logdir) < frames:
    stopped_short_or_failed(process.returncode, f"our seed {seed}", ours_frames(logdir),
                            frames, os.path.join(logdir, "console.txt"))
  print_fn(f"  trained {ours_frames(logdir):,} frames")


def stopped_short_or_failed(returncode, run, reached, frames, console):
  """Raises StoppedShort for a run that exited cleanly before its budget, RuntimeError for
  one that failed (a non-zero exit code), each naming where it got to."""
  where = f"{run} at {reached:,} of {frames:,} frames"
  if returncode == 0:
    raise StoppedShort(f"stopped: {where}; {RESUME_HINT}")
  raise RuntimeError(f"{where}: exited with {returncode}; see {console}")


def check_same_command(path, command):
  """Refuses to resume a directory whose run was started by another command."""
  if os.path.exists(path):
    with open(path) as f:
      previous = json.load(f)
    if previous != command:
      raise SystemExit(f"{os.path.dirname(path)} holds a run of another command:\n  "
                       f"{previous}\nnot\n  {command}\nChoose another --output_dir.")
  with open(path, "w") as f:
    json.dump(command, f)


def start_run(command, console):
  """Starts a run in its own session, so that only this driver signals it (a terminal's
  Ctrl-C reaches the driver alone, which then sends one SIGINT), and on Linux with SIGINT as
  its parent-death signal, so that it stops cleanly if this driver is killed."""
  return subprocess.Popen(command, cwd=runs.REPO_DIR, stdout=console,
                          stderr=subprocess.STDOUT, start_new_session=True,
                          preexec_fn=sample_factory_pong.interrupt_when_parent_dies)


def peer_complete(output_dir, frames, game=DEFAULT_GAME):
  """Whether Sample Factory's run in output_dir has finished with this budget on this game
  (a mark without a game, from before --game, is Pong's)."""
  path = os.path.join(output_dir, COMPLETE_FILE)
  if not os.path.exists(path):
    return False
  with open(path) as f:
    mark = json.load(f)
  return mark["frames"] == frames and mark.get("game", DEFAULT_GAME) == game


def peer_environment(output_dir):
  """Sample Factory's environment name in the command.json of the run in output_dir (as
  sample_factory_pong.py launched it), or None before it has one."""
  path = os.path.join(output_dir, "command.json")
  if not os.path.exists(path):
    return None
  with open(path) as f:
    return sample_factory_pong.env_name_of(json.load(f))


def other_game(output_dir, game):
  """Why the Sample Factory run in output_dir is not one of the game, or None if it is (or
  has no command.json yet)."""
  found, wanted = peer_environment(output_dir), sample_factory_pong.sf_env_name(game)
  if found is not None and found != wanted:
    return f"{output_dir} holds a Sample Factory run of {found}, not {wanted} (--game={game})"
  return None


def peer_command(output_dir, seed, frames, venv, game=DEFAULT_GAME,
                 save_every_sec=PEER_SAVE_EVERY_SEC):
  """sample_factory_pong.py's learning run on the game (see the module docstring)."""
  return [sys.executable, PEER_SCRIPT, "--mode=learning", f"--game={game}",
          f"--frames={frames}", f"--seed={seed}", f"--lr_schedule={PEER_LR_SCHEDULE}",
          f"--save_every_sec={save_every_sec}", f"--venv={venv}", f"--output_dir={output_dir}"]


def peer_sf_argv(command):
  """Sample Factory's argv of a peer_command (as sample_factory_pong.py will launch it)."""
  flags = sample_factory_pong.parse_args(command[2:])
  return sample_factory_pong.sample_factory_argv(flags, os.path.abspath(flags.output_dir),
                                                 "learning")


def run_peer(output_dir, seed, frames, venv, print_fn, game=DEFAULT_GAME,
             save_every_sec=PEER_SAVE_EVERY_SEC):
  """Trains Sample Factory on the game to frames with this seed; an unfinished run (or a
  finished one, given a larger budget) resumes from Sample Factory's last checkpoint."""
  command = peer_command(output_dir, seed, frames, venv, game, save_every_sec)
  mismatch = (other_game(output_dir, game)
              or sample_factory_pong.argv_conflict(output_dir, peer_sf_argv(command)))
  if mismatch:
    raise SystemExit(f"{mismatch}. Choose another --output_dir.")
  if peer_complete(output_dir, frames, game):
    print_fn(f"Sample Factory seed {seed}: already finished ({output_dir})")
    return
  launches = sample_factory_pong.read_launches(output_dir) if os.path.isdir(output_dir) else []
  if launches:
    print_fn(f"  resumes the Sample Factory run in {output_dir} (launch {len(launches) + 1}), "
             f"from its checkpoint at "
             f"{sample_factory_pong.latest_checkpoint_frames(output_dir):,} frames")
  print_fn(f"$ {runs.printable(command)}")
  os.makedirs(output_dir, exist_ok=True)
  with open(os.path.join(output_dir, "driver_console.txt"), "a") as console:
    process = start_run(command, console)
    try:
      process.wait()
    finally:  # The driver stops Sample Factory's process group on SIGINT.
      runs.interrupt(process, 180)
  reached = sample_factory_pong.reached_frames(output_dir)
  if process.returncode != 0 or reached < (1 - PEER_FRAME_TOLERANCE) * frames:
    stopped_short_or_failed(process.returncode, f"Sample Factory seed {seed}", reached,
                            frames, os.path.join(output_dir, "driver_console.txt"))
  with open(os.path.join(output_dir, COMPLETE_FILE), "w") as f:
    json.dump(dict(frames=frames, game=game, last_report_frames=reached, command=command), f)
  print_fn(f"  trained {reached:,} frames")


# ---------------------------------------------------------------------------------------
# Reading and reporting.


def read_ours(logdir, game=DEFAULT_GAME):
  """dict(frames, returns, hours, reached) of our run's episodes of the game (None if no
  log); ValueError if it logged another level's."""
  if not os.path.exists(runlog.log_path(logdir)):
    return None
  episodes = learning_curves.read_episodes(logdir)
  if set(episodes) - {level_name(game)}:
    raise ValueError(f"{logdir} logged the levels {sorted(episodes)}, not "
                     f"{level_name(game)} alone")
  frames, returns = next(iter(episodes.values())) if episodes else ([], [])
  frames = runs.spread_frames(frames)
  return dict(frames=frames, returns=np.asarray(returns, np.float64),
              hours=learning_curves.training_hours(logdir, frames),
              reached=ours_frames(logdir))


def read_ours_table(path, game=DEFAULT_GAME):
  """{seed: dict(frames, hours, means, reached)} from a CSV of our run's recorded curve, as
  `python -m scalable_agent_tf2.runfiles.plot LOGDIR --table_every=N` prints it (columns
  learning_curves.TABLE_COLUMNS: level, frames, hours of running, the mean return of the last
  100 training games; a column `seed` where the file holds several seeds' runs, seed 1
  without it), for a comparison whose run of ours is no longer at hand; SystemExit naming
  what is wrong with the file."""
  try:
    with open(path, newline="") as f:
      rows = list(csv.DictReader(line for line in f if not line.startswith("#")))
  except OSError as error:
    raise SystemExit(f"--ours_table={path}: {error}") from None
  if not rows or set(learning_curves.TABLE_COLUMNS) - set(rows[0]):
    raise SystemExit(f"--ours_table={path}: expected a CSV with the columns "
                     f"{','.join(learning_curves.TABLE_COLUMNS)} (and seed, optional) and a "
                     "row per frame count, as runfiles.plot --table_every prints it")
  by_seed = {}
  for number, row in enumerate(rows, start=1):
    if row["level"] != level_name(game):
      raise SystemExit(f"--ours_table={path}, data row {number}: a run of {row['level']}, not "
                       f"{level_name(game)} (--game={game})")
    try:
      seed = int(row.get("seed") or 1)
      values = [float(row[k]) for k in ("frames", "hours", "mean_return")]
    except ValueError:
      raise SystemExit(f"--ours_table={path}, data row {number}: {row} is not numbers"
                       ) from None
    by_seed.setdefault(seed, []).append(values)
  tables = {}
  for seed, values in by_seed.items():
    frames, hours, means = np.array(sorted(values)).T
    tables[seed] = dict(frames=frames, hours=hours, means=means, reached=frames[-1])
  return tables


def table_at(run, counts):
  """A recorded table's values at the frame counts it has (None at the others)."""
  recorded = dict(zip(run["frames"].tolist(), run["means"].tolist()))
  return [recorded.get(float(count)) for count in counts]


def read_peer(output_dir, frames, game=DEFAULT_GAME):
  """The same for Sample Factory's episodes.csv (None before the run has written it;
  ValueError if its command.json plays another game). A finished run counts as having
  reached its budget (PEER_FRAME_TOLERANCE)."""
  path = os.path.join(output_dir, "episodes.csv")
  if not os.path.exists(path):
    return None
  mismatch = other_game(output_dir, game)
  if mismatch:
    raise ValueError(mismatch)
  with open(path) as f:
    rows = list(csv.DictReader(f))
  episode_frames = np.array([float(r["frames"]) for r in rows])
  reached = (frames if peer_complete(output_dir, frames, game)
             else sample_factory_pong.reached_frames(output_dir))
  return dict(frames=episode_frames,
              returns=np.array([float(r["episode_return"]) for r in rows]),
              hours=np.array([float(r["seconds"]) for r in rows]) / 3600, reached=reached)


def game_title(game):
  """"space_invaders" -> "Space Invaders"."""
  return game.replace("_", " ").title()


def plot(runs_by_system, frames, path, game=DEFAULT_GAME):
  """Returns against frames and against hours: a thin line per seed, the seed range
  shaded, one colour per system."""
  figure, panels = plt.subplots(1, 2, figsize=(14, 5), sharey=True)
  for axes, key, scale in ((panels[0], "frames", 1e6), (panels[1], "hours", 1.0)):
    for system, by_seed in runs_by_system.items():
      recorded = [run for _, run in sorted(by_seed.items()) if run and "means" in run]
      for run in recorded:  # A recorded table's points: already means of the last games.
        step = (f", recorded every {np.min(np.diff(run['frames'])) / 1e6:g}M frames"
                if len(run["frames"]) > 1 else ", recorded")
        axes.plot(run[key] / scale, run["means"], color=COLOURS[system], marker="o",
                  markersize=4, linewidth=1.2, label=LABELS[system] + step)
      curves = [runs.running_mean_curve(run, key, scale)
                for _, run in sorted(by_seed.items())
                if run is not None and "means" not in run and len(run["returns"])]
      runs.plot_seeds(axes, curves, LABELS[system], COLOURS[system])
    axes.set_xlabel("environment frames (millions)" if key == "frames"
                    else "hours of running time")
    axes.grid(alpha=0.3)
    axes.legend(loc="upper left", fontsize=8)
  panels[0].set_ylabel(f"episode return (mean of last {runs.FINAL_EPISODES})")
  seeds = max(len(by_seed) for by_seed in runs_by_system.values())
  figure.suptitle(f"{game_title(game)}, {frames / 1e6:g}M frames, "
                  f"{seeds} seed{'s' if seeds > 1 else ''} each: this project and Sample "
                  "Factory learning with the same setting as far as they allow,\nper frame "
                  f"and per hour of running time on one {os.cpu_count()}-core machine")
  figure.tight_layout()
  figure.savefig(path, dpi=100)
  plt.close(figure)
  return path


def report(output_dir, seeds, frames, every, figure_path, game=DEFAULT_GAME,
           ours_table=None):
  """Reads every run of the game (ours from the recorded table at ours_table, a path, if
  given), writes the figure, prints the table and the verdict."""
  if ours_table:
    ours = {s: run for s, run in read_ours_table(ours_table, game).items() if s in seeds}
  else:
    ours = {s: read_ours(os.path.join(output_dir, OURS, f"seed_{s}"), game) for s in seeds}
  runs_by_system = {
      OURS: ours,
      PEER: {s: read_peer(os.path.join(output_dir, PEER, f"seed_{s}"), frames, game)
             for s in seeds}}
  counts = frame_counts(frames, every)
  def values_at(run):
    if not run:
      return [None] * len(counts)
    if "means" in run:
      return table_at(run, counts)
    return curve_at(run["frames"], run["returns"], run["reached"], counts)
  by_seed = {system: {seed: values_at(run) for seed, run in runs_by_system[system].items()}
             for system in runs_by_system}
  rows = comparison_rows(by_seed[OURS], by_seed[PEER], counts)
  print(f"Return (mean of last {runs.FINAL_EPISODES} episodes) at each frame count; ours "
        "vs the peer's seed range by the mean of our seeds:")
  print(table(rows))
  print(verdict(rows))
  if any(run is not None and len(run["means"] if "means" in run else run["returns"])
         for by in runs_by_system.values() for run in by.values()):
    print(f"Wrote {plot(runs_by_system, frames, figure_path, game)}")
  return rows


def default_figure(output_dir, game):
  """<output_dir>/<game>_vs_sf.png (pong_vs_sf.png for Pong)."""
  return os.path.join(output_dir, f"{game}_vs_sf.png")


def parse_args(argv):
  # No abbreviations: a mistyped flag (--frame=...) is refused, not taken for another.
  parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], allow_abbrev=False)
  parser.add_argument("--game", default=DEFAULT_GAME,
                      help="Atari game, this project's name (level atari/<game>): pong, "
                           "boxing, breakout, space_invaders, ...")
  parser.add_argument("--frames", type=int, default=20_000_000,
                      help="Frames each run trains (the same budget for both systems).")
  parser.add_argument("--seeds", default="1,2", help="Comma-separated seeds, e.g. 1,2.")
  parser.add_argument("--output_dir", required=True,
                      help="Runs go to <output_dir>/ours/seed_S and sample_factory/seed_S; "
                           "outside the repository.")
  parser.add_argument("--every", type=int, default=2_000_000,
                      help="The table compares the returns every this many frames.")
  parser.add_argument("--figure", help="PNG path; default <output_dir>/<game>_vs_sf.png.")
  parser.add_argument("--venv", default=os.environ.get("SF_VENV", "/tmp/sf_venv"),
                      help="Sample Factory's venv (benchmarks/peers/setup_sample_factory.sh).")
  parser.add_argument("--systems", default=f"{OURS},{PEER}",
                      help=f"Which systems' runs to make now ({OURS}, {PEER} or both): the "
                           "runs of a long comparison can be spread over several sittings; "
                           "the report covers both either way.")
  parser.add_argument("--peer_save_every_sec", type=int, default=PEER_SAVE_EVERY_SEC,
                      help="Seconds between Sample Factory's checkpoints (its save_every_sec): "
                           "at most what a kill of the peer's run loses; it also saves when "
                           "stopped. A small value for checking the resume.")
  parser.add_argument("--report_only", action="store_true",
                      help="Run nothing: table and figure of what the runs have logged.")
  parser.add_argument("--ours_table",
                      help="With --report_only: our side from this CSV of a run's recorded "
                           "curve (`python -m scalable_agent_tf2.runfiles.plot LOGDIR "
                           "--table_every=N` prints it) instead of <output_dir>/ours/, for a "
                           "run of README's command whose logdir is gone; compared at the "
                           "counts it has (give --every=N).")
  args = parser.parse_args(argv)
  try:
    args.seeds = runs.parse_seeds(args.seeds)
  except ValueError:
    parser.error(f"--seeds={args.seeds}: give integers separated by commas, e.g. 1,2")
  try:
    sample_factory_pong.sf_env_name(args.game)
  except ValueError as error:
    parser.error(str(error))
  args.systems = [name for name in args.systems.split(",") if name]
  if not args.systems or set(args.systems) - {OURS, PEER}:
    parser.error(f"--systems: give {OURS}, {PEER} or both separated by a comma")
  if args.frames <= 0 or args.every <= 0:
    parser.error("--frames and --every must be positive")
  args.output_dir = os.path.abspath(args.output_dir)
  if os.path.commonpath([args.output_dir, runs.REPO_DIR]) == runs.REPO_DIR:
    parser.error(f"--output_dir {args.output_dir} is inside the repository; choose a "
                 "directory outside it (runs are large and not part of the project)")
  if (not args.report_only and PEER in args.systems
      and not os.path.exists(os.path.join(args.venv, "bin", "python"))):
    parser.error(f"no Sample Factory venv at {args.venv}: run "
                 f"bash benchmarks/peers/setup_sample_factory.sh {args.venv} first "
                 "(or pass --venv)")
  if args.ours_table and not args.report_only:
    parser.error("--ours_table replaces our runs in the report; give it with --report_only")
  args.figure = args.figure or default_figure(args.output_dir, args.game)
  return args


def make_runs(args, print_fn):
  """Each seed's runs of the named systems, one after the other."""
  for seed in args.seeds:
    if OURS in args.systems:
      run_ours(os.path.join(args.output_dir, OURS, f"seed_{seed}"), seed, args.frames,
               print_fn, args.game)
    if PEER in args.systems:
      run_peer(os.path.join(args.output_dir, PEER, f"seed_{seed}"), seed, args.frames,
               args.venv, print_fn, args.game, args.peer_save_every_sec)


def main(argv=None):
  args = parse_args(argv)
  # Started in the background by a script, this process inherits SIGINT ignored: Ctrl-C or
  # `kill -INT` would then neither stop it nor reach its runs' checkpoints.
  sample_factory_pong.stop_on_sigint()
  # SIGTERM ends the runs as Ctrl-C does: ours with a checkpoint, the peer's process group.
  signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(128 + signum))
  print_fn = runs.command_log(args.output_dir)
  if not args.report_only:
    try:
      make_runs(args, print_fn)
    except StoppedShort as stopped:  # One line, not a traceback: nothing went wrong.
      sys.exit(str(stopped))
    except KeyboardInterrupt:  # The runs were stopped with their checkpoints (finally).
      print(f"stopped by SIGINT; {RESUME_HINT}", file=sys.stderr)
      sys.exit(128 + signal.SIGINT)
  rows = report(args.output_dir, args.seeds, args.frames, args.every, args.figure,
                args.game, args.ours_table)
  return rows


if __name__ == "__main__":
  main()
