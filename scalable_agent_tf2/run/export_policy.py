"""A run's policy as a folder that test mode plays: the agent's weights (its observation filter
included) and the frame count it was trained to, without the optimizer state.

    python -m scalable_agent_tf2.run.export_policy --output=benchmarks/agents/boxing -- \\
        --level_name=atari/boxing --logdir=/work/runs/atari_boxing_s1
    python experiment.py --mode=test --level_name=atari/boxing \\
        --logdir=benchmarks/agents/boxing --test_num_episodes=10 --record_video_episodes=1

After `--` come the run's own experiment flags (those that shape its network: the level,
--torso, --width, --height, --algorithm, --env_kwargs), its --logdir and, to export another
than the newest checkpoint, --restore_checkpoint. The folder holds checkpoints/: the state
file and one checkpoint (named by the frame count), the run's settings.json (which test mode
compares with its own, as for any logdir) and policy_only.json (where it came from: the
source logdir and checkpoint, the frames, this command). A policy is about a tenth of a
training checkpoint: RMSProp keeps a mean square per weight and IMPACT a target network too.
Training on such a folder is refused (checkpoints.run_checkpointer); test mode's results go to
its evaluation/ as for any logdir.

--format=saved_model writes the policy as a TensorFlow SavedModel instead, for programs
without this project (run/saved_policy.py; docs/POLICY_API.md):

    python -m scalable_agent_tf2.run.export_policy --format=saved_model \\
        --output=/tmp/breakout_saved_model -- --level_name=atari/breakout \\
        --logdir=benchmarks/agents/breakout

Either way a --restore_checkpoint is not made the source logdir's newest (nothing newer there
is set aside).
"""
import argparse
import json
import os
import shlex
import sys

from scalable_agent_tf2.configuration import config as config_lib
from scalable_agent_tf2.run import assembly
from scalable_agent_tf2.run import saved_policy
from scalable_agent_tf2.runfiles import checkpoints
from scalable_agent_tf2.runfiles import durable_files

POLICY_FOLDER, SAVED_MODEL = "policy_folder", "saved_model"
FORMATS = (POLICY_FOLDER, SAVED_MODEL)


def export(config, output, argv=None):
  """Writes config.logdir's checkpoint (the newest, or --restore_checkpoint) as a policy-only
  folder `output` (module docstring); returns (checkpoint path written, frames). argv: the
  export command's arguments, for the record (None: this process's).

  Raises:
    ValueError: `output` exists and is not empty (nothing is overwritten).
    checkpoints.CheckpointError: the run's checkpoint cannot be restored.
  """
  agent, learner, source = _restored(config, output)
  frames = int(learner.num_env_frames.numpy())
  # Saved as any checkpoint is (kill-safe), then the record that makes it a policy folder.
  path = checkpoints.Checkpointer(
      output, checkpoints.read_settings(config.logdir),
      **checkpoints.policy_trackables(agent, learner.num_env_frames)).save(frames)
  durable_files.write_atomically(checkpoints.policy_only_path(output), json.dumps(
      _record(config, source, frames, argv), indent=2, sort_keys=True) + "\n")
  return path, frames


def export_saved_model(config, output, argv=None):
  """Writes config.logdir's checkpoint as a SavedModel folder `output` (saved_policy.py);
  returns (output, frames). Takes and raises as export does."""
  agent, learner, source = _restored(config, output)
  frames = int(learner.num_env_frames.numpy())
  saved_policy.save(agent, config, output, _record(config, source, frames, argv))
  return output, frames


def _restored(config, output):
  """(agent, learner, checkpoint path) of config.logdir, test mode's (its newest left as it is),
  once `output` is known to be new."""
  if os.path.exists(output) and os.listdir(output):
    raise ValueError(f"--output={output} exists and is not empty; give a new folder.")
  environment_constructor = assembly.checked_environment_constructor(config, None,
                                                                     test_mode=True)
  return assembly.restore_agent(config, environment_constructor,
                                restore_from=config.restore_checkpoint, make_newest=False)


def _record(config, source, frames, argv):
  """Where an export came from: the source logdir and checkpoint, the frames, the command."""
  argv = sys.argv[1:] if argv is None else argv
  return dict(source_logdir=os.path.abspath(config.logdir), source_checkpoint=source,
              frames=frames, level_name=config.level_name,
              command=shlex.join(["python", "-m", "scalable_agent_tf2.run.export_policy",
                                  *argv]))


def main(argv):
  parser = argparse.ArgumentParser(
      prog="python -m scalable_agent_tf2.run.export_policy",
      description=__doc__.split("\n\n")[0] + " Experiment flags follow `--`.")
  parser.add_argument("--output", required=True,
                      help="The new folder (policy_folder: a test-mode logdir).")
  parser.add_argument("--format", choices=FORMATS, default=POLICY_FOLDER,
                      help="policy_folder: the weights as a checkpoint test mode plays; "
                           "saved_model: a TensorFlow SavedModel with policy.json.")
  split = argv.index("--") if "--" in argv else len(argv)
  args, experiment_flags = parser.parse_args(argv[:split]), argv[split + 1:]
  if not experiment_flags:
    parser.error("give the run's experiment flags after `--` (its --level_name, --logdir, ...)")
  try:
    config = config_lib.config_from_argv([*experiment_flags, "--mode=test"])
    if args.format == SAVED_MODEL:
      path, frames = export_saved_model(config, args.output, argv)
    else:
      path, frames = export(config, args.output, argv)
  except (ValueError, RuntimeError) as error:
    print(f"error: {error}", file=sys.stderr)
    return 2
  if args.format == SAVED_MODEL:
    print(f"Exported {frames:,} frames' policy as a SavedModel to {path} (its "
          f"{saved_policy.SPEC_FILE} names the inputs and outputs; docs/POLICY_API.md).")
  else:
    print(f"Exported {frames:,} frames' policy to {path} (test it with `python experiment.py "
          f"--mode=test --level_name={config.level_name} --logdir={args.output}`).")
  return 0


if __name__ == "__main__":
  sys.exit(main(sys.argv[1:]))
