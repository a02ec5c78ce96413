"""Population-based training (IMPALA Appendix F): runs and evolves a population of members.

    python -m scalable_agent_tf2.population --logdir=/tmp/pbt --population_size=24 -- \\
        --level_name=dmlab30 --num_actors=150

Every member is an ordinary `experiment.py --mode=train` process (flags after "--" go to all
of them) with its own logdir, <logdir>/member_NN, its own seed and its own hyperparameters
(entropy cost, learning rate, RMSProp epsilon; on Atari also the gradient-norm clip), drawn
from Table D.1 (--initial_hyperparameters=table_d1, the paper's) or the same for all
(=flags). The driver reads each member's log.jsonl (runlog.py); when a member is ready
(burn-in over and --ready_episodes new episodes, pbt.is_ready), it applies pbt.evolve: the
member is stopped (SIGTERM: it writes a checkpoint), a better member's latest checkpoint is
copied into it when exploiting, and it is restarted with the new hyperparameters as flags
(training restores the checkpoint, and the flags' hyperparameters win over the checkpoint's).
Every generation is a line of <logdir>/pbt_lineage.jsonl; `--curve_of=K` prints member K's
learning curve rebuilt across its ancestors (pbt.reconstruct_curve).

A member that crashes is restarted from its last checkpoint (with the same hyperparameters);
one that crashes --max_crashes times in a row without a new checkpoint stops the population.
Ctrl-C or SIGTERM stops every member (each writes its checkpoint); the same command resumes
the population from its lineage and the members' checkpoints.

With --shared_replay_capacity=N the members share one LASER episode replay (Schmitt et al.,
2019, section 5.4: the agents of a sweep or population feed and sample one replay): the driver
starts a replay service process (python -m scalable_agent_tf2.transport.replay_service, its
output in <logdir>/replay_service.log) on a free loopback port, gives every member
--laser_replay, --shared_replay_address and --agent_tag=member_NN, restarts the service if it
dies (empty; the members reconnect within their --shared_replay_connect_secs) and stops it at
the end. Members restarted by PBT reconnect to the same service and keep feeding it. The flags
after "--" must include --replay_fraction (e.g. LASER's 0.875).

Members run as subprocesses of this driver, on this machine. On a cluster, give
--member_prefix a command that runs a process on another host and forwards SIGTERM (e.g.
"srun --nodes=1 --ntasks=1"; "{member}" is replaced by the member's index), with --logdir on
a file system every host shares.

This file is the command line; the loop is driver.py, the member and replay
service processes processes.py, the decisions pbt.py. The driver imports neither
TensorFlow nor experiment.py: the members' flags are checked by a child process
(the settings layer, config.config_from_argv) before any member starts.
"""
import dataclasses
import json
import sys

import numpy as np

from scalable_agent_tf2.configuration import command_line
from scalable_agent_tf2.configuration import command_settings
from scalable_agent_tf2.configuration import config as config_lib
from scalable_agent_tf2.configuration import settings as settings_lib
from scalable_agent_tf2.environments import suites
from scalable_agent_tf2.population import driver
from scalable_agent_tf2.population import pbt
from scalable_agent_tf2.population import processes

TABLE_D1, FLAGS_INITIAL = command_settings.TABLE_D1, command_settings.FLAGS_INITIAL
# experiment.py flags the driver sets for every member itself.
_DRIVER_FLAGS = ("logdir", "mode", "seed", "job_name", "task", "cluster")
# ... and with a shared replay (processes.SharedReplay.member_flags).
_SHARED_REPLAY_FLAGS = ("shared_replay_address", "agent_tag")


def _flag_names(experiment_flags):
  return [flag.lstrip("-").split("=")[0] for flag in experiment_flags]


def resolve_member_flags(experiment_flags, logdir):
  """The members' experiment.py settings, checked and resolved as experiment.py would.

  The settings layer (config.config_from_argv) imports neither TensorFlow nor experiment.py.

  Args:
    experiment_flags: the flags every member gets (without the driver's own).
    logdir: a member's logdir.

  Returns:
    dict: "settings" (config.ExperimentConfig's fields, resolved: the level's presets
    filled in), "adapts_max_grad_norm" (PBT adapts the gradient clip on the
    level's family: Atari, section 5.3.2) and "is_multi_task".

  Raises:
    ValueError: a bad flag, with the message experiment.py would give.
  """
  config = config_lib.config_from_argv([f"--logdir={logdir}", *experiment_flags])
  try:
    config_lib.check_levels_can_run(config)
  except ModuleNotFoundError as error:
    raise ValueError(str(error)) from error
  unscored = [level for level in config.levels if suites.reference_scores(level) is None]
  if config.is_multi_task and unscored:  # pbt.fitness would fail at the first exploit.
    raise ValueError(f"a population on a suite ranks its members by the mean capped "
                     f"human-normalised score (Table G.1's fitness), and {', '.join(unscored)} "
                     f"have no human and random reference scores; train one level, or a suite "
                     f"of Atari or DeepMind Lab levels.")
  return dict(settings=dataclasses.asdict(config),
              adapts_max_grad_norm=config.family.pbt_adapts_max_grad_norm,
              is_multi_task=config.is_multi_task)


def _check_arguments(args, experiment_flags, shared_replay):
  """The checks that need no resolved flags: each flag's own
  (command_settings.PopulationSettings), then those that involve the members' flags. Raises
  ValueError."""
  settings_lib.check_values(args, command_settings.PopulationSettings)
  driver_flags = _DRIVER_FLAGS + (_SHARED_REPLAY_FLAGS if shared_replay is not None else ())
  for name in _flag_names(experiment_flags):
    if name in driver_flags:
      raise ValueError(f"--{name} is set by the population driver for each member; leave it "
                       f"out of the flags after '--'.")
  given = [n for n in pbt.ADAPTED if n in _flag_names(experiment_flags)]
  if args.initial_hyperparameters == TABLE_D1 and given:
    raise ValueError(f"--initial_hyperparameters={TABLE_D1} draws {', '.join(given)} from "
                     f"Table D.1; leave them out of the flags after '--', or use "
                     f"--initial_hyperparameters={FLAGS_INITIAL}.")


def settings_from_arguments(args, experiment_flags, shared_replay=None):
  """(driver.Settings, the members' resolve_member_flags answer) from the
  driver's arguments and experiment.py flags.

  Args:
    shared_replay: the processes.SharedReplay the members will share, or None.

  Raises:
    ValueError: a bad value, with what to do about it.
  """
  _check_arguments(args, experiment_flags, shared_replay)
  logdir = pbt.member_dir(args.logdir, 0)
  if shared_replay is not None:
    experiment_flags = [*experiment_flags, *shared_replay.member_flags(logdir)]
  member = resolve_member_flags(experiment_flags, logdir)
  resolved = member["settings"]
  adapted = pbt.ADAPTED
  if member["adapts_max_grad_norm"] and resolved["max_grad_norm"] > 0:
    adapted = pbt.ADAPTED_ATARI  # Section 5.3.2, Table G.1: the clip is adapted on Atari.
  rng = np.random.default_rng(args.seed)
  initial = []
  for _ in range(args.population_size):
    values = {name: float(resolved[name]) for name in adapted}
    if args.initial_hyperparameters == TABLE_D1:
      values.update(pbt.sample_hyperparameters(rng))
    initial.append(values)
  settings = driver.Settings(
      logdir=args.logdir, initial_hyperparameters=tuple(initial), adapted=adapted,
      multi_task=member["is_multi_task"], burn_in_frames=args.burn_in_frames,
      ready_episodes=args.ready_episodes, exploit_threshold=args.exploit_threshold,
      seed=args.seed, poll_secs=args.poll_secs, stop_timeout_secs=args.stop_timeout_secs,
      max_crashes=args.max_crashes)
  return settings, member


def _parser():
  """The command line: command_settings.PopulationSettings' flags (defaults, help, checks there)."""
  return command_line.CommandParser(
      command_settings.PopulationSettings, prog="python -m scalable_agent_tf2.population",
      usage="python -m scalable_agent_tf2.population --logdir=DIR [flags] -- "
            "[experiment.py flags of every member]",
      description="Population-based training (IMPALA Appendix F) of experiment.py members. "
                  "Flags after '--' go to every member.")


def main(argv=None):
  try:
    args, rest = _parser().parse_settings(argv, known_only=True)
  except ValueError as error:
    print(f"error: {error}", file=sys.stderr)
    return 2
  if args.curve_of is not None:
    try:
      curve = pbt.reconstruct_curve(args.logdir, args.curve_of)
    except (ValueError, KeyError) as error:
      print(f"error: {error!r}", file=sys.stderr)
      return 2
    try:
      for record in curve:
        print(json.dumps(record))
    except BrokenPipeError:  # E.g. piped into head.
      sys.stderr.close()
    return 0
  if rest and rest[0] == "--":
    rest = rest[1:]
  shared_replay = None
  try:
    if args.shared_replay_capacity:
      shared_replay = processes.SharedReplay(processes.free_loopback_address(),
                                             args.shared_replay_capacity, seed=args.seed)
    settings, _ = settings_from_arguments(args, rest, shared_replay)
  except ValueError as error:
    print(f"error: {error}", file=sys.stderr)
    return 2
  population = driver.Population(
      settings, processes.experiment_command(rest, args.member_prefix),
      print_fn=lambda line: print(line, flush=True), shared_replay=shared_replay)
  return population.run()


if __name__ == "__main__":
  sys.exit(main())
