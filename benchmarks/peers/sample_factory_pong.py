"""Sample Factory 2.1.1 (APPO with V-trace) on an Atari game (Pong by default, the one
measured so far), set as close as it allows to this project's IMPALA Atari setting (paper
Table G.1, shallow network), for side-by-side runs.

    bash benchmarks/peers/setup_sample_factory.sh              # once: venv in /tmp/sf_venv
    python benchmarks/peers/sample_factory_pong.py --mode=throughput --seconds=240 --warmup=60
    python benchmarks/peers/sample_factory_pong.py --mode=learning --frames=24000000 --seed=1
    python benchmarks/peers/sample_factory_pong.py --mode=learning --game=boxing --seed=1 \
        --frames=40000000 --output_dir=/work/runs/sf_boxing_seed1   # again: it resumes

--game is this project's name of the game (level atari/<game>: one of the paper's 57, in
lower_snake_case, GAMES); Sample Factory plays its Atari example's environment of that game
(sf_env_name: "atari_" + the name without underscores, e.g. atari_boxing ->
BoxingNoFrameskip-v4, atari_spaceinvaders; four it spells otherwise). The file keeps its
name (sample_factory_pong.py) for the commands and the code that call it.

The driver runs under any Python with numpy; Sample Factory itself runs in a child process
under the venv's Python (--venv, default $SF_VENV or /tmp/sf_venv), which trains through
Sample Factory's own Atari example (sf_examples.atari: its environment wrappers, its Atari
defaults) with the overrides listed in `sample_factory_argv`. Outputs go to --output_dir
(default /tmp/sf_<game>/<mode>_seed<seed>_<time>), never inside the repository.

Modes:
  throughput: after the first frames are trained, waits --warmup seconds, then measures for
    --seconds and prints the median of Sample Factory's own 10-second "Fps is (10 sec: ...)"
    reports in the window (and the window's mean from its "Total num frames" counter).
  learning: trains to --frames (or stops at --max_seconds) and writes episodes.csv: one row
    per finished game (running seconds, frames, return, length, seed). Run again with the
    same --output_dir (the default is a new directory each time), it resumes (below).

Resuming a learning run. A learning run in --output_dir that was stopped (Ctrl-C, SIGTERM,
--max_seconds) or killed is continued by the same command: Sample Factory resumes from its own
checkpoint (restart_behavior=resume, passed explicitly; in 2.1.1 the learner restores the
model, the optimizer, the train step and env_steps, its frame counter, from
<output_dir>/learning/checkpoint_p0/checkpoint_<step>_<frames>.pth, the last by name, and
its first report already counts from there). It saves one every --save_every_sec (120 s,
Sample Factory's default) and when it stops on SIGINT; so a stop loses nothing and a kill at
most that interval. The driver's SIGINT reaches it on Ctrl-C, and, through the parent-death
signal, when the driver itself is killed (both take SIGINT even when started with it ignored:
stop_on_sigint); only a kill of Sample Factory's own processes (or the machine going down)
loses frames. A leftover checkpoint_temp (a save cut short) is deleted first: it sorts after
the real checkpoints, and Sample Factory would try to load it, fail and start from zero. A
run of another setting (command.json's Sample Factory flags: game, seed, schedule,
workers...; only train_for_env_steps, save_every_sec, restart_behavior and train_dir may
change) is refused, as is a launch while an earlier one's process still runs.
  Each launch keeps its own files: launch 1 writes sample_factory.log and games/ (the names
of runs from before resuming), launch k sample_factory.launch<k>.log and games.launch<k>/;
launches.json lists them with the time each started (and ended, when the driver saw it end;
for a killed driver, its log's last line or its last game, whichever is later). episodes.csv
is rebuilt from all launches at the end of each (also when stopped): a game's frames are
interpolated within the reports of the launch it ended in; its seconds are running seconds,
the earlier launches' durations plus the time since its launch started (the gaps between
sittings are not counted). The games a killed launch logged after its last checkpoint were
played by a policy whose training the next launch redoes from that checkpoint: a game of a
launch whose frames exceed those some later launch resumed from (the learner's "Loaded
experiment state ... env_steps=" line in that launch's log) is dropped, so frames never go
back and every frame count is that of the training the run kept. The resumed run plays those
frames again and logs its own games for them.

Frames. Sample Factory's Atari defaults set summaries_use_frameskip=True: its "Fps" and
"Total num frames" count agent steps x env_frameskip (4), i.e. emulator frames, which is
what this project's `frames` count. The driver checks it: over the measured reports, the
frames trained per sample collected ("Samples" counts agent steps) must be about 4. Frames
are counted when the learner consumes a batch, as this project's learner counts them. An
episode's frames in episodes.csv are the learner's count at the moment the game ended,
interpolated between the 5-second reports of its launch.

Setting, ours (Table G.1, shallow network) -> Sample Factory here:
  same: frame skip 4 with the max over the last two frames; grey 84x84; stack of 4; up to
    30 no-op starts; life loss ends a training episode (EpisodicLifeEnv; on games with lives
    only: Pong and Boxing have none, Breakout 5); no sticky actions, the game's minimal
    action set (<Game>NoFrameskip-v4; Pong: 6 actions, Boxing: 18); unroll 20
    (--rollout=20; Sample Factory's V-trace needs recurrence = rollout, which without an
    RNN only groups the samples into trajectories); 640 samples per update = 32
    trajectories x 20 (--batch_size=640, one epoch, one minibatch); V-trace with rho_bar =
    c_bar = 1; discount 0.99; entropy cost 0.01; rewards clipped to [-1, 1]; a torso shared
    by policy and value; no return or input normalisation (frames / 255).
  network: Sample Factory's `convnet_impala` encoder is the paper's shallow torso (conv 16
    8x8 stride 4, conv 32 4x4 stride 2, ReLU), followed by FC 256 (--encoder_conv_mlp_layers
    256) and no LSTM, as this project's Atari agent (feed-forward, stack of 4). Left: our
    heads also see the clipped reward and the one-hot previous action concatenated to the FC
    output (Figure 3); Sample Factory's encoder takes the frames only. Initialisation:
    Sample Factory's orthogonal vs ours.
  optimizer: Sample Factory offers Adam or LAMB, no RMSProp. Adam with beta1=0, beta2=0.99
    is RMSProp with decay 0.99 and momentum 0 plus Adam's bias correction (where TF1's
    RMSProp starts its accumulator at 1) and with epsilon outside the square root. Learning
    rate 0.0006.
  loss scale: Sample Factory averages each loss over the 640 samples; the released IMPALA
    code (and this project) sums them. Adam's steps are scale-free, so what changes is only
    where the two scale-dependent numbers sit: gradient-norm clip 40 on sums is 40/640 =
    0.0625 on means (clipping commutes with the scale), and RMSProp's epsilon 0.01 inside the
    square root of summed gradients is about sqrt(0.01)/640 = 1.5625e-4 outside it on means.
    Baseline cost: ours is 0.5 x 0.5 x sum of squares (the released code's 0.5 factor);
    Sample Factory's value_loss_coeff multiplies the plain mean of squares, hence 0.25.
  APPO's extras, kept (they are Sample Factory's algorithm): PPO ratio clipping of the
    policy term (ppo_clip_ratio 0.1: ratios outside [1/1.1, 1.1] stop the gradient) and
    value clipping (ppo_clip_value 1.0); advantages normalised per minibatch (always on in
    2.1.1); the policy term is ratio x V-trace advantage where IMPALA's is
    log pi x V-trace advantage (the same gradient at ratio 1).
  learning-rate schedule: linear_decay (default) anneals over train_for_env_steps // 640
    updates, but it counts the budget in frames and updates in agent steps, so at the end of
    the budget the rate is still 3/4 of its start (ours reaches 0 at --total_environment_
    frames). --lr_schedule=constant keeps it fixed.
  environment: Sample Factory's wrappers resize the RGB frame to 84x84 before the grey
    conversion, clip rewards by sign (the same as [-1, 1]: Atari's rewards are integers); its
    emulator is ale-py 0.8.1 (ours: the project's ale-py).
  differences that depend on the game:
    FIRE: on games whose action set has FIRE (Pong, Boxing, Breakout, most games) its
      FireResetEnv presses FIRE then action 2 after every reset, including the reset after
      a lost life; ours presses nothing (the agent must learn to, e.g. to serve in
      Breakout). Games without FIRE: neither.
    lives: on games with lives, after a lost life (a training episode's end in both) its
      EpisodicLifeEnv continues the game with one no-op step (4 frames) before the FIRE
      steps, where ours continues with the agent's next action. Pong and Boxing have no
      lives: neither applies.
    game length: gym's <Game>NoFrameskip-v4 cap of 400,000 emulator frames per game (18,000
      on Montezuma's Revenge, the Atari example's timeout for it), ours 108,000 (30 minutes
      of play): it matters only on games that last longer than 108,000 frames (not Pong:
      at most 21 points; not Boxing: one 2-minute round, about 7,200 frames).
  acting: --workers rollout processes x --envs_per_worker environments each (default 2 x 16
    = 32, as 32 actors), split in two halves stepped alternately (worker_num_splits=2, Sample
    Factory's double-buffered sampling); one inference worker, one learner, asynchronous
    (async_rl=True), on the CPU.
"""
import argparse
import csv
import ctypes
import datetime
import difflib
import glob
import json
import os
import re
import signal
import statistics
import subprocess
import sys
import time

DEFAULT_GAME = "pong"
# This project's 57 Atari games (scalable_agent_tf2/environments/suites.py ATARI57_GAMES: the
# paper's Table C.1, level "atari/<game>"), every one of which Sample Factory 2.1.1's Atari
# example has (sf_examples/atari/atari_utils.py ATARI_ENVS). Written out so that neither the
# driver nor the child imports the other system; tests check both lists.
GAMES = (
    "alien", "amidar", "assault", "asterix", "asteroids", "atlantis", "bank_heist",
    "battle_zone", "beam_rider", "berzerk", "bowling", "boxing", "breakout", "centipede",
    "chopper_command", "crazy_climber", "defender", "demon_attack", "double_dunk", "enduro",
    "fishing_derby", "freeway", "frostbite", "gopher", "gravitar", "hero", "ice_hockey",
    "jamesbond", "kangaroo", "krull", "kung_fu_master", "montezuma_revenge", "ms_pacman",
    "name_this_game", "phoenix", "pitfall", "pong", "private_eye", "qbert", "riverraid",
    "road_runner", "robotank", "seaquest", "skiing", "solaris", "space_invaders",
    "star_gunner", "surround", "tennis", "time_pilot", "tutankham", "up_n_down", "venture",
    "video_pinball", "wizard_of_wor", "yars_revenge", "zaxxon")
# Sample Factory's names that are not "atari_" + the game without underscores.
SF_SPELLINGS = {"asteroids": "atari_asteroid", "kung_fu_master": "atari_kongfumaster",
                "montezuma_revenge": "atari_montezuma", "private_eye": "atari_privateye"}
EPISODE_DIR_VARIABLE = "SF_ATARI_EPISODE_DIR"
FRAME_SKIP = 4  # Table G.1: action repeat 4.
REPOSITORY = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
REPORT = re.compile(r"\[(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3})\]\[\d+\] "
                    r"Fps is \(10 sec: ([\d.na]+),.*?Total num frames: (\d+)\. "
                    r"Throughput: 0: ([\d.na]+)\. Samples: (\d+)\.")
ANSI = re.compile(r"\x1b\[[0-9;]*m")
STAMP = re.compile(r"\[(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3})\]")
# The learner's line when it has restored a checkpoint (learner.py _load_state).
LOADED = re.compile(r"Loaded experiment state at self\.train_step=(\d+), "
                    r"self\.env_steps=(\d+)")
# Sample Factory's checkpoint names (learner.py _save_impl): train step (9 digits, so that
# sorting by name sorts by step, as Sample Factory picks its latest), then env_steps (frames).
CHECKPOINT = re.compile(r"checkpoint_(\d+)_(\d+)\.pth$")
CHECKPOINT_TEMP = "checkpoint_temp"  # A save in progress: torch.save, then a rename.
LAUNCHES_FILE = "launches.json"
# Sample Factory flags that may change between the launches of one run: the budget (a larger
# one continues the run), the save interval, the resume flag (absent from runs launched
# before it, where resume was Sample Factory's default) and the directory (moved runs).
RESUMABLE_FLAGS = ("train_for_env_steps", "save_every_sec", "restart_behavior", "train_dir")
DEFAULT_SAVE_EVERY_SEC = 120  # Sample Factory's default checkpoint interval.
# prctl of the C library, looked up here: a child between fork and exec calls only it.
_PRCTL = ctypes.CDLL(None).prctl if sys.platform.startswith("linux") else None
PR_SET_PDEATHSIG = 1  # <linux/prctl.h>


def sf_env_name(game):
  """Sample Factory's environment name of one of GAMES ("boxing" -> "atari_boxing",
  "space_invaders" -> "atari_spaceinvaders"); ValueError naming the valid games otherwise."""
  if game not in GAMES:
    close = difflib.get_close_matches(str(game), GAMES, n=3, cutoff=0.6)
    hint = f" Did you mean {' or '.join(close)}?" if close else ""
    raise ValueError(f"--game={game}: not one of the Atari games both this project and "
                     f"Sample Factory have.{hint} Valid games (this project's names, level "
                     f"atari/<game>): {', '.join(GAMES)}.")
  return SF_SPELLINGS.get(game, "atari_" + game.replace("_", ""))


def sample_factory_argv(args, train_dir, experiment):
  """Sample Factory's command line: its Atari defaults, overridden as the docstring says."""
  schedule = args.lr_schedule
  argv = dict(
      env=sf_env_name(args.game), experiment=experiment, train_dir=train_dir, device="cpu",
      seed=args.seed,
      algo="APPO", async_rl=True, serial_mode=False, num_workers=args.workers,
      num_envs_per_worker=args.envs_per_worker, worker_num_splits=2, batched_sampling=False,
      env_frameskip=FRAME_SKIP, env_framestack=4, summaries_use_frameskip=True,
      rollout=20, recurrence=20, batch_size=640, num_batches_per_epoch=1, num_epochs=1,
      with_vtrace=True, vtrace_rho=1.0, vtrace_c=1.0, gamma=0.99,
      exploration_loss="entropy", exploration_loss_coeff=0.01, value_loss_coeff=0.25,
      reward_scale=1.0, reward_clip=1.0, normalize_returns=False, normalize_input=False,
      obs_scale=255.0, optimizer="adam", learning_rate=0.0006, lr_schedule=schedule,
      adam_beta1=0.0, adam_beta2=0.99, adam_eps=0.1 / 640, max_grad_norm=40.0 / 640,
      encoder_conv_architecture="convnet_impala", encoder_conv_mlp_layers=256,
      use_rnn=False, nonlinearity="relu", actor_critic_share_weights=True,
      train_for_env_steps=args.frames, with_wandb=False, log_to_file=True,
      # Resuming (docstring): Sample Factory's default, spelled out because the driver's
      # stitching of launches depends on it; save_every_sec bounds what a kill loses.
      restart_behavior="resume", save_every_sec=args.save_every_sec)
  if schedule == "linear_decay":
    # The Atari example's default; 2.1.1's command line accepts only the other schedules.
    del argv["lr_schedule"]
  return [f"--{key}={value}" for key, value in argv.items()]


# ---------------------------------------------------------------------------------------
# Child: runs inside the venv, in Sample Factory's processes.


def make_logged_game(full_env_name, cfg, env_config, render_mode=None):
  """Sample Factory's Atari environment, plus a log of every finished game's return."""
  import gymnasium as gym  # pylint: disable=import-outside-toplevel

  # pylint: disable-next=import-outside-toplevel
  from sf_examples.atari.atari_utils import make_atari_env

  class GameLog(gym.Wrapper):
    """Appends (time, return, emulator frames) when the underlying game ends.

    RecordEpisodeStatistics sits under every other wrapper in Sample Factory's stack, so its
    info["episode"] holds the unclipped score of a whole game, not of a life.
    """

    def __init__(self, env, path):
      super().__init__(env)
      self._path = path

    def step(self, action):
      result = self.env.step(action)
      episode = result[4].get("episode")
      if episode is not None:
        with open(self._path, "a") as f:
          f.write(f"{time.time():.3f},{float(episode['r']):g},{int(episode['l'])}\n")
      return result

  env = make_atari_env(full_env_name, cfg, env_config, render_mode=render_mode)
  directory = os.environ.get(EPISODE_DIR_VARIABLE)
  if directory:
    env = GameLog(env, os.path.join(directory, f"games_{os.getpid()}.csv"))
  return env


def env_name_of(sf_argv):
  """The environment name of Sample Factory's argv (its --env=<name>, sample_factory_argv)."""
  names = [arg.split("=", 1)[1] for arg in sf_argv if arg.startswith("--env=")]
  if not names:
    raise ValueError(f"No --env=<name> in Sample Factory's argv {sf_argv}")
  return names[-1]


def stop_on_sigint():
  """Makes SIGINT raise KeyboardInterrupt again where this process started with it ignored.

  A Python started with SIGINT ignored keeps it ignored (a job started with & by a
  non-interactive shell, and all it starts): Sample Factory would then neither stop nor save
  a checkpoint on the driver's SIGINT or at the driver's death, and train on, unseen, until
  killed; the driver would not stop on Ctrl-C or on the side-by-side driver's SIGINT.
  """
  if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)


def child_main(sf_argv):
  """Registers the logged game under sf_argv's --env and trains with Sample Factory's
  Atari defaults + sf_argv."""
  stop_on_sigint()
  # Sample Factory 2.1.1's checkpoints hold numpy scalars, which torch >= 2.6's torch.load
  # refuses by default (weights_only=True): a resume failed with "Weights only load failed".
  # These are the run's own files. The variable reaches Sample Factory's spawned processes.
  os.environ["TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD"] = "1"
  # pylint: disable=import-outside-toplevel
  from sample_factory.cfg.arguments import parse_full_cfg
  from sample_factory.cfg.arguments import parse_sf_args
  from sample_factory.envs.env_utils import register_env
  from sample_factory.train import run_rl
  from sf_examples.atari.atari_params import atari_override_defaults
  register_env(env_name_of(sf_argv), make_logged_game)
  parser, partial_cfg = parse_sf_args(argv=sf_argv)
  atari_override_defaults(partial_cfg.env, parser)
  return run_rl(parse_full_cfg(parser, sf_argv))


# ---------------------------------------------------------------------------------------
# Driver: launches the child, reads its log, reports.


def log_text(log_path):
  """A Sample Factory log without its colour codes, or None when there is none yet."""
  if not os.path.exists(log_path):
    return None
  with open(log_path, errors="replace") as f:
    return ANSI.sub("", f.read())


def stamp_time(stamp):
  """Unix time of a log line's "%Y-%m-%d %H:%M:%S,%f" stamp."""
  return datetime.datetime.strptime(stamp, "%Y-%m-%d %H:%M:%S,%f").timestamp()


def read_reports(log_path):
  """Sample Factory's 5-second reports: (unix time, Fps over 10 s, total frames, samples
  per second, total samples)."""
  text = log_text(log_path)
  if text is None:
    return []
  return [(stamp_time(stamp), float(fps), int(frames), float(rate), int(samples))
          for stamp, fps, frames, rate, samples in REPORT.findall(text)]


def crashed(log_path):
  """Sample Factory's own report of an exception in one of its event loops, or None."""
  with open(log_path, errors="replace") as f:
    for line in f:
      if "Unhandled exception" in line or "Traceback (most recent call last)" in line:
        return ANSI.sub("", line).strip()
  return None


def first_training_time(reports, resumed_from=0):
  """Time of the first report with frames trained beyond resumed_from (the launch's start),
  or None."""
  return next((report[0] for report in reports if report[2] > resumed_from), None)


# Launches. One run (an output directory) is trained by one or more launches of Sample
# Factory: each launch after the first resumes from the checkpoint the one before left
# (restart_behavior=resume). Each keeps its own log and game files (launch_files); LAUNCHES_FILE
# lists them in order with the time each started (and ended, when the driver saw it end).


def launch_files(index):
  """(log, games directory) of the launch with this 1-based index, relative to the output
  directory: the first keeps the names of runs made before resuming existed."""
  if index == 1:
    return "sample_factory.log", "games"
  return f"sample_factory.launch{index}.log", f"games.launch{index}"


def log_times(log_path):
  """Unix times of the first and the last time-stamped line of a Sample Factory log, or
  (None, None)."""
  stamps = STAMP.findall(log_text(log_path) or "")
  if not stamps:
    return None, None
  return stamp_time(stamps[0]), stamp_time(stamps[-1])


def read_launches(output_dir):
  """The run's launches (LAUNCHES_FILE), in order. A run from before LAUNCHES_FILE with a
  log is one launch, started at its log's first line."""
  path = os.path.join(output_dir, LAUNCHES_FILE)
  if os.path.exists(path):
    with open(path) as f:
      return json.load(f)
  log, games_dir = launch_files(1)
  first, _ = log_times(os.path.join(output_dir, log))
  if first is None:
    return []
  return [dict(log=log, games=games_dir, started=first)]


def write_launches(output_dir, launches):
  path = os.path.join(output_dir, LAUNCHES_FILE)
  with open(path + ".tmp", "w") as f:
    json.dump(launches, f, indent=1)
  os.replace(path + ".tmp", path)  # A kill mid-write leaves the previous list.


def checkpoint_dir(output_dir, experiment="learning"):
  """Where Sample Factory saves the run's checkpoints: <train_dir>/<experiment>/
  checkpoint_p0 (one policy)."""
  return os.path.join(output_dir, experiment, "checkpoint_p0")


def latest_checkpoint_frames(output_dir, experiment="learning"):
  """Frames (env_steps) of the checkpoint a launch resumes from: Sample Factory loads the
  last checkpoint_* by name; 0 when there is none."""
  names = sorted(glob.glob(os.path.join(checkpoint_dir(output_dir, experiment),
                                        "checkpoint_*")))
  matches = [CHECKPOINT.search(name) for name in names if not name.endswith(CHECKPOINT_TEMP)]
  return int(matches[-1].group(2)) if matches and matches[-1] else 0


def resumed_from(log_path):
  """Frames the launch of this log started from: those of the checkpoint its learner loaded,
  0 if it trained without one, None if it reported nothing (it trained nothing)."""
  text = log_text(log_path)
  if text is None:
    return None
  loaded = LOADED.search(text)
  if loaded:
    return int(loaded.group(2))
  return 0 if REPORT.search(text) else None


def launch_seconds(output_dir, launch_record):
  """How long a launch ran: to the end the driver recorded, else (a killed driver) to the
  last line of its log or the last game it logged, whichever is later."""
  if "ended" in launch_record:
    end = launch_record["ended"]
  else:
    _, last_line = log_times(os.path.join(output_dir, launch_record["log"]))
    last_game = max((row[0] for row in games(output_dir, launch_record["games"])), default=None)
    end = max([t for t in (last_line, last_game) if t is not None],
              default=launch_record["started"])
  return max(0.0, end - launch_record["started"])


def flags_of(sf_argv):
  """{flag: value} of a Sample Factory argv of --flag=value items."""
  return dict(arg[2:].split("=", 1) for arg in sf_argv if arg.startswith("--") and "=" in arg)


def argv_conflict(output_dir, sf_argv):
  """Why a launch with sf_argv may not resume the run in output_dir (its command.json was
  written by another setting: game, seed, schedule, ...; RESUMABLE_FLAGS may differ), or
  None."""
  path = os.path.join(output_dir, "command.json")
  if not os.path.exists(path):
    return None
  with open(path) as f:
    previous = json.load(f)
  old = flags_of(previous[previous.index("--sf_child") + 1:] if "--sf_child" in previous
                 else previous)
  new = flags_of(sf_argv)
  differences = [f"{key}: {old.get(key, '(unset)')} -> {new.get(key, '(unset)')}"
                 for key in sorted(set(old) | set(new))
                 if key not in RESUMABLE_FLAGS and old.get(key) != new.get(key)]
  if differences:
    return (f"{output_dir} holds a Sample Factory run of another setting ("
            + "; ".join(differences) + ")")
  return None


def still_running(output_dir, launches):
  """The pid of an earlier launch's Sample Factory process that is still alive (a driver
  killed without its child), or None: two launches must not train one run."""
  for record in launches:
    if "pid" not in record or "ended" in record:
      continue
    try:
      with open(f"/proc/{record['pid']}/cmdline", "rb") as f:
        cmdline = f.read()
    except OSError:
      continue
    if b"--sf_child" in cmdline and os.path.abspath(output_dir).encode() in cmdline:
      return record["pid"]
  return None


def interrupt_when_parent_dies():
  """A child's preexec_fn: SIGINT when its parent (the driver) dies, however it dies
  (Linux; nothing elsewhere)."""
  if _PRCTL is not None:
    _PRCTL(PR_SET_PDEATHSIG, signal.SIGINT)


def launch(args, output_dir, experiment):
  """Starts the Sample Factory child in its own process group, resuming the run in
  output_dir if there is one; returns (process, log path, launch index)."""
  python = os.path.join(args.venv, "bin", "python")
  if not os.path.exists(python):
    sys.exit(f"No Python at {python}: run benchmarks/peers/setup_sample_factory.sh "
             f"{args.venv} first, or pass --venv=<its directory>.")
  argv = sample_factory_argv(args, output_dir, experiment)
  conflict = argv_conflict(output_dir, argv)
  if conflict:
    sys.exit(f"{conflict}; choose another --output_dir.")
  launches = read_launches(output_dir)
  running = still_running(output_dir, launches)
  if running:
    sys.exit(f"Sample Factory's process {running} of an earlier launch still trains the run "
             f"in {output_dir}: stop it first (kill -INT -- -{running}).")
  # A save cut short by a kill leaves checkpoint_temp, which sorts after every complete
  # checkpoint: Sample Factory would try to load it, fail, and start from scratch.
  temp = os.path.join(checkpoint_dir(output_dir, experiment), CHECKPOINT_TEMP)
  if os.path.exists(temp):
    os.remove(temp)
    print(f"removed {temp} (a checkpoint save cut short by a kill)")
  index = len(launches) + 1
  while any(os.path.exists(os.path.join(output_dir, name)) for name in launch_files(index)):
    index += 1  # Never write over an earlier launch's files.
  log_name, games_name = launch_files(index)
  episode_dir = os.path.join(output_dir, games_name)
  os.makedirs(episode_dir)
  log_path = os.path.join(output_dir, log_name)
  checkpoint = latest_checkpoint_frames(output_dir, experiment)
  if launches:
    print(f"launch {index}: resumes from Sample Factory's checkpoint at {checkpoint:,} frames")
  with open(os.path.join(output_dir, "command.json"), "w") as f:
    json.dump([python, os.path.abspath(__file__), "--sf_child", *argv], f, indent=1)
  environment = dict(os.environ, **{EPISODE_DIR_VARIABLE: episode_dir})
  environment.pop("OPENBLAS_CORETYPE", None)  # torch's OpenBLAS is not the one they guard.
  record = dict(log=log_name, games=games_name, started=time.time(),
                checkpoint_frames=checkpoint)
  with open(log_path, "w") as log:
    # SIGINT when this driver dies, however it dies: Sample Factory then saves a checkpoint
    # and stops, rather than training on unseen (and racing the next launch).
    process = subprocess.Popen([python, os.path.abspath(__file__), "--sf_child", *argv],
                               stdout=log, stderr=subprocess.STDOUT, env=environment,
                               start_new_session=True, preexec_fn=interrupt_when_parent_dies)
  record["pid"] = process.pid
  write_launches(output_dir, launches + [record])
  return process, log_path, index


def end_launch(output_dir, index):
  """Records when the launch with this index ended (the driver saw its child stop)."""
  launches = read_launches(output_dir)
  name = launch_files(index)[0]
  for record in launches:
    if record["log"] == name:
      record["ended"] = time.time()
  write_launches(output_dir, launches)


def stop(process, grace_seconds=60):
  """Interrupts the child's process group (Sample Factory saves and exits), then kills."""
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


def exit_status(code, timeout):
  """Why no frame was trained: the child's exit code, or the timeout that ran out."""
  return f"it exited with code {code}" if code is not None else f"none within {timeout} s"


def wait_until(process, log_path, predicate, timeout, poll_seconds=2.0):
  """Polls the child's reports until predicate(reports) or exit or timeout; returns reports."""
  deadline = time.time() + timeout
  while True:
    reports = read_reports(log_path)
    if predicate(reports) or process.poll() is not None or time.time() > deadline:
      return reports
    failure = crashed(log_path)
    if failure:
      raise RuntimeError(f"Sample Factory failed: {failure}; see {log_path}")
    time.sleep(poll_seconds)


def check_frame_unit(reports):
  """Frames trained per sample collected over the reports; fails unless about 4.

  "Total num frames" counts what the learner consumed, "Samples" what the actors collected
  (agent steps), so over a window their ratio is the frame skip (4, see docstring) up to the
  batches in flight; 3 to 5 tells 4 from 1 however loaded the machine.
  """
  frames = reports[-1][2] - reports[0][2]
  samples = reports[-1][4] - reports[0][4]
  ratio = frames / samples if samples > 0 else float("nan")
  if not 3 <= ratio <= 5:
    raise RuntimeError(f"Sample Factory trained {ratio:.2f} frames per sample collected, "
                       f"not {FRAME_SKIP}: its frame counter is not emulator frames here; "
                       "check summaries_use_frameskip in command.json.")
  return ratio


def run_throughput(args, output_dir):
  """Warm-up, then a --seconds window; prints the median 10-second Fps in the window."""
  launched = time.time()
  process, log_path, index = launch(args, output_dir, "throughput")
  try:
    reports = wait_until(process, log_path, first_training_time, args.setup_timeout)
    start = first_training_time(reports)
    if start is None:
      code = exit_status(process.poll(), args.setup_timeout)
      sys.exit(f"Sample Factory trained no frame ({code}); see {log_path}")
    window = (start + args.warmup, start + args.warmup + args.seconds)
    reports = wait_until(process, log_path, lambda r: r and r[-1][0] >= window[1],
                         args.warmup + args.seconds + 120)
  finally:
    stop(process)
    end_launch(output_dir, index)
  inside = [r for r in reports if window[0] < r[0] <= window[1] and r[1] == r[1]]
  if len(inside) < 2:
    sys.exit(f"Only {len(inside)} reports in the measured window; see {log_path}")
  ratio = check_frame_unit(inside)
  median_fps = statistics.median(r[1] for r in inside)
  mean_fps = (inside[-1][2] - inside[0][2]) / (inside[-1][0] - inside[0][0])
  result = dict(system="Sample Factory 2.1.1 APPO+V-trace", game=args.game,
                env=sf_env_name(args.game), workers=args.workers,
                envs_per_worker=args.envs_per_worker, setup_seconds=round(start - launched, 1),
                warmup_seconds=args.warmup, measured_seconds=args.seconds,
                reports=len(inside), median_fps_10s=round(median_fps, 1),
                window_mean_fps=round(mean_fps, 1), frames_per_sample=round(ratio, 3))
  with open(os.path.join(output_dir, "throughput.json"), "w") as f:
    json.dump(result, f, indent=1)
  print(f"setup (launch to first trained frames): {result['setup_seconds']} s")
  print(f"frames trained per sample collected: {ratio:.2f} (frames are emulator frames = "
        "agent steps x 4)")
  print(f"median of {len(inside)} 10-second Fps reports over {args.seconds} s after "
        f"{args.warmup} s warm-up: {median_fps:,.0f} frames/s "
        f"(window mean from Total num frames: {mean_fps:,.0f})")
  return result


def games(output_dir, games_dir="games"):
  """Every finished game logged by the environments of one launch: (unix time, return,
  frames), by time. A line cut short by a kill is skipped."""
  rows = []
  for path in glob.glob(os.path.join(output_dir, games_dir, "games_*.csv")):
    with open(path) as f:
      for line in csv.reader(f):
        try:
          when, episode_return, length = line
          rows.append((float(when), float(episode_return), int(length)))
        except ValueError:
          continue
  return sorted(rows)


def interpolate(x, xs, ys):
  """Piecewise-linear y(x) through (xs, ys), constant beyond the ends (numpy.interp)."""
  if not xs:
    return 0
  if x <= xs[0]:
    return ys[0]
  for (x0, y0), (x1, y1) in zip(zip(xs, ys), zip(xs[1:], ys[1:])):
    if x <= x1:
      return y0 + (y1 - y0) * (x - x0) / (x1 - x0) if x1 > x0 else y1
  return ys[-1]


def stitched_games(output_dir):
  """(rows, dropped): every game of every launch as (running seconds, frames, return,
  length), in order, and how many games were dropped as redone (see the docstring).

  A game's frames are interpolated within the reports of the launch it ended in; its
  running seconds are the earlier launches' durations (launch_seconds) plus the time since
  its own launch started. A launch's games beyond the frames some later launch resumed from
  were trained again by that launch (from its checkpoint): dropped, so that frames never go
  back. So are the games of a launch without any report (nothing places them).
  """
  launches = read_launches(output_dir)
  starts = [resumed_from(os.path.join(output_dir, r["log"])) for r in launches]
  rows, dropped, offset = [], 0, 0.0
  for i, record in enumerate(launches):
    later = [start for start in starts[i + 1:] if start is not None]
    bound = min(later, default=float("inf"))
    reports = read_reports(os.path.join(output_dir, record["log"]))
    times, frames = [r[0] for r in reports], [r[2] for r in reports]
    for when, episode_return, length in games(output_dir, record["games"]):
      at = int(interpolate(when, times, frames))
      if not reports or at > bound:
        dropped += 1
        continue
      rows.append((offset + when - record["started"], at, episode_return, length))
    offset += launch_seconds(output_dir, record)
  return rows, dropped


def running_seconds(output_dir):
  """The run's running time: the sum of its launches' durations."""
  return sum(launch_seconds(output_dir, r) for r in read_launches(output_dir))


def reached_frames(output_dir):
  """The frames the run has trained to: the last report of its last launch that reported
  (0 before any). An earlier launch's later reports do not count: the launches after it
  trained those frames again (stitched_games)."""
  for record in reversed(read_launches(output_dir)):
    reports = read_reports(os.path.join(output_dir, record["log"]))
    if reports:
      return reports[-1][2]
  return 0


def write_episodes(output_dir, seed):
  """Rebuilds episodes.csv from every launch (stitched_games); returns (path, rows,
  dropped)."""
  rows, dropped = stitched_games(output_dir)
  path = os.path.join(output_dir, "episodes.csv")
  with open(path + ".tmp", "w", newline="") as f:
    writer = csv.writer(f)
    writer.writerow(["seconds", "frames", "episode_return", "episode_frames", "seed"])
    for seconds, frames, episode_return, length in rows:
      writer.writerow([f"{seconds:.1f}", frames, f"{episode_return:g}", length, seed])
  os.replace(path + ".tmp", path)
  return path, rows, dropped


def unit_reports(output_dir):
  """The reports of the launch that collected the most samples ("Samples" restarts at 0 in
  each launch): the window check_frame_unit checks."""
  best, most = [], 0
  for record in read_launches(output_dir):
    reports = read_reports(os.path.join(output_dir, record["log"]))
    if len(reports) >= 2 and reports[-1][4] - reports[0][4] > most:
      best, most = reports, reports[-1][4] - reports[0][4]
  return best


def run_learning(args, output_dir):
  """Trains to --frames (or --max_seconds), resuming the run in output_dir if there is one;
  rebuilds episodes.csv from every launch; prints a summary."""
  process, log_path, index = launch(args, output_dir, "learning")
  launched = read_launches(output_dir)[-1]["started"]
  try:
    wait_until(process, log_path, lambda r: False, args.max_seconds)
    code = process.poll()
  finally:
    stop(process)
    end_launch(output_dir, index)
    # Also on Ctrl-C or SIGTERM: the report reads what the run has trained so far.
    path, rows, dropped = write_episodes(output_dir, args.seed)
  reports = read_reports(log_path)
  start = first_training_time(reports, resumed_from(log_path) or 0)
  if start is None:
    status = exit_status(code, args.max_seconds)
    sys.exit(f"Sample Factory trained no frame ({status}); see {log_path}")
  check_frame_unit(unit_reports(output_dir))
  last = rows[-10:]
  print(f"launch {index} started at {resumed_from(log_path) or 0:,} frames; setup (launch to "
        f"first trained frames): {start - launched:.1f} s")
  print(f"trained {reached_frames(output_dir):,} frames in {running_seconds(output_dir):.0f} s "
        f"of running time over {len(read_launches(output_dir))} launch(es); {len(rows)} games "
        f"({dropped} dropped as trained again after a resume); mean return of the last "
        f"{len(last)}: {statistics.mean(r[2] for r in last) if last else float('nan'):.2f}")
  print(f"episodes: {path}")
  return path


def parse_args(argv):
  parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
  parser.add_argument("--mode", choices=["throughput", "learning"], default="throughput")
  parser.add_argument("--game", default=DEFAULT_GAME,
                      help="Atari game, this project's name (level atari/<game>): pong, "
                           "boxing, breakout, space_invaders, ... (GAMES).")
  parser.add_argument("--workers", type=int, default=2, help="Rollout worker processes.")
  parser.add_argument("--envs_per_worker", type=int, default=16,
                      help="Environments per worker (even: two halves are double-buffered).")
  parser.add_argument("--seconds", type=float, default=240, help="Throughput: measured time.")
  parser.add_argument("--warmup", type=float, default=60,
                      help="Throughput: seconds after the first trained frames, not measured.")
  parser.add_argument("--frames", type=int, default=int(200e6),
                      help="Emulator frames to train (Sample Factory's train_for_env_steps).")
  parser.add_argument("--max_seconds", type=float, default=float("inf"),
                      help="Learning: stop after this wall time even below --frames.")
  parser.add_argument("--lr_schedule", choices=["linear_decay", "constant"],
                      default="linear_decay")
  parser.add_argument("--seed", type=int, default=1)
  parser.add_argument("--venv", default=os.environ.get("SF_VENV", "/tmp/sf_venv"))
  parser.add_argument("--output_dir", default=None,
                      help="Default: /tmp/sf_<game>/<mode>_seed<seed>_<time>.")
  parser.add_argument("--save_every_sec", type=int, default=DEFAULT_SAVE_EVERY_SEC,
                      help="Seconds between Sample Factory's checkpoints: at most what a kill "
                           "(not Ctrl-C, which saves) loses of a learning run.")
  parser.add_argument("--setup_timeout", type=float, default=900,
                      help="Seconds to wait for the first trained frames.")
  args = parser.parse_args(argv)
  if args.envs_per_worker % 2:
    parser.error("--envs_per_worker must be even (worker_num_splits=2).")
  try:
    sf_env_name(args.game)
  except ValueError as error:
    parser.error(str(error))
  return args


def default_output_dir(args, stamp=None):
  """/tmp/sf_<game>/<mode>_seed<seed>_<time> (/tmp/sf_pong/... for Pong)."""
  stamp = stamp or time.strftime("%Y%m%d_%H%M%S")
  return f"/tmp/sf_{args.game}/{args.mode}_seed{args.seed}_{stamp}"


def main(argv):
  if argv[:1] == ["--sf_child"]:
    return child_main(argv[1:])
  args = parse_args(argv)
  stop_on_sigint()
  output_dir = os.path.abspath(args.output_dir or default_output_dir(args))
  if os.path.commonpath([output_dir, REPOSITORY]) == REPOSITORY:
    sys.exit(f"--output_dir {output_dir} is inside the repository {REPOSITORY}; "
             "choose a directory outside it (runs are large and not part of the project).")
  os.makedirs(output_dir, exist_ok=True)
  print(f"output: {output_dir}")
  if args.mode == "throughput":
    run_throughput(args, output_dir)
  else:
    run_learning(args, output_dir)
  return 0


if __name__ == "__main__":
  sys.exit(main(sys.argv[1:]))
