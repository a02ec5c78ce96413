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
0.51: benchmarks/RESULTS.md, "A dictionary observation"). Needs the benchmark-only minigrid
package (benchmarks/requirements-minigrid.txt).
"""
import string

import gymnasium

FETCH_LEVEL = "MiniGrid-Fetch-5x5-N2-v0"
BLANK_ID = "FetchBlankMission-5x5-N2-v0"
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
  import minigrid  # pylint: disable=g-import-not-at-top,unused-import  (registers FETCH_LEVEL)
  return BlankMission(gymnasium.make(FETCH_LEVEL, **kwargs))


if BLANK_ID not in gymnasium.registry:
  gymnasium.register(id=BLANK_ID, entry_point=make_blank_mission_fetch)
