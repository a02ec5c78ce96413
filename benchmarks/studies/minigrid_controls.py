"""A control for the MiniGrid instruction study: MiniGrid-Fetch-5x5-N2-v0 with its mission
blanked, so that only the instruction encoder's share of what the agent learns differs.

Importing this module registers `FetchBlankMission-5x5-N2-v0`, a user package in gymnasium's
"module:Id" form (docs/ENVIRONMENTS.md):

    python experiment.py --mode=train \
      --level_name=gym:benchmarks.studies.minigrid_controls:FetchBlankMission-5x5-N2-v0 ...

Every episode's mission is the same text, BLANK_MISSION, whatever object the room's own
mission names; the image, the rewards and the episodes are MiniGrid's. An agent that reads
the mission can pick the named object; this one can only pick one of the two at random (or
the one its view favours), so its return is bounded by a mission-ignoring policy's (about
0.52: benchmarks/RESULTS.md, "A dictionary observation"). Needs the benchmark-only minigrid
package (benchmarks/requirements-minigrid.txt).

Run as a module, it plays a Fetch run's checkpoint with the missions blanked (test mode, the
run's own flags otherwise): an agent that reads the mission loses what the mission gave it.

    python -m benchmarks.studies.minigrid_controls --logdir=/work/runs/mg_s1 \
        --output_dir=/work/runs/mg_s1_blanked --test_num_episodes=200

The run's directory is copied to --output_dir first (test mode writes its results into the
logdir, and the run's own evaluation/ stays as it is).
"""
import argparse
import shutil
import string
import sys

import gymnasium

FETCH_LEVEL = "MiniGrid-Fetch-5x5-N2-v0"
BLANK_ID = "FetchBlankMission-5x5-N2-v0"
# The level name, in the "module:Id" form (this module's name even when it runs as __main__).
BLANK_LEVEL = f"gym:benchmarks.studies.minigrid_controls:{BLANK_ID}"
# A text of the missions' own form that names no object: the encoder sees words, as in
# the real level, but none that tells the two objects apart.
BLANK_MISSION = "fetch an object"


class BlankMission(gymnasium.ObservationWrapper):
  """Replaces the Dict observation's mission with BLANK_MISSION (a gymnasium Text: MiniGrid's
  MissionSpace holds only the level's own missions)."""

  def __init__(self, env):
    super().__init__(env)
    self.observation_space = gymnasium.spaces.Dict(dict(
        env.observation_space.spaces,
        mission=gymnasium.spaces.Text(max_length=64, charset=string.ascii_lowercase + " ")))

  def observation(self, observation):
    return dict(observation, mission=BLANK_MISSION)


def make_blank_mission_fetch(**kwargs):
  import minigrid  # noqa: F401 (importing it registers FETCH_LEVEL)
  return BlankMission(gymnasium.make(FETCH_LEVEL, **kwargs))


if BLANK_ID not in gymnasium.registry:
  gymnasium.register(id=BLANK_ID, entry_point=make_blank_mission_fetch)


def blanked_constructor(level_name, seed, test_mode):
  """environment_constructor for evaluation.evaluate: FETCH_LEVEL's run, BLANK_ID played."""
  from scalable_agent_tf2.environments import gym_env  # pylint: disable=g-import-not-at-top
  del level_name, test_mode
  return gym_env.GymEnvironment, dict(level_name=BLANK_LEVEL, seed=seed)


def main(argv=None):
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  parser.add_argument("--logdir", required=True, help=f"A finished gym:{FETCH_LEVEL} run.")
  parser.add_argument("--output_dir", required=True, help="Where the copy and results go.")
  parser.add_argument("--test_num_episodes", type=int, default=200)
  args = parser.parse_args(argv)
  # pylint: disable-next=g-import-not-at-top
  from scalable_agent_tf2.configuration import config as config_lib
  from scalable_agent_tf2.run import evaluation  # pylint: disable=g-import-not-at-top
  shutil.copytree(args.logdir, args.output_dir,
                  ignore=shutil.ignore_patterns(evaluation.RESULTS_SUBDIR))
  config = config_lib.config_from_argv([
      "--mode=test", f"--level_name=gym:{FETCH_LEVEL}", f"--logdir={args.output_dir}",
      f"--test_num_episodes={args.test_num_episodes}"])
  evaluation.evaluate(config, environment_constructor=blanked_constructor)
  return 0


if __name__ == "__main__":
  sys.exit(main())
