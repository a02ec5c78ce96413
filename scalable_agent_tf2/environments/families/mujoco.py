"""The IMPACT paper's continuous-control tasks as "mujoco/<task>" (section 4.3, Figure 5:
"mujoco/hopper", "mujoco/half_cheetah", "mujoco/humanoid"; gymnasium's -v5 versions,
environments/mujoco.py says what differs from -v2).

Presets: the IMPACT paper's Table 2, IMPALA or IMPACT column (mujoco_presets.py, its preset
table), its 16 workers laid out as groups. Environments: groups stepped in the training
process (a MuJoCo step costs 40-90 core-us, far less than a process's round trip;
benchmarks/RESULTS.md). Observations: float32 vectors, normalised by the run's MeanStdFilter
(action_spaces.ObservationFilter); the IMPACT paper's MLPs (networks.continuous_vector_config).
"""
from scalable_agent_tf2.environments import suites
from scalable_agent_tf2.environments.families import base
from scalable_agent_tf2.environments.families import mujoco_presets

PREFIX = suites.MUJOCO_LEVEL_PREFIX


class MujocoFamily(base.Family):
  """See the module docstring."""
  name = "mujoco"
  title = "MuJoCo tasks (IMPACT paper, continuous control)"
  prefixes = (PREFIX,)
  owns_algorithm_presets = True

  def listed_levels(self):
    return suites.MUJOCO_LEVELS

  def presets(self, level_name, levels, algorithm, num_cores, given=None):
    # The IMPACT paper's Table 2, IMPALA or IMPACT column (IMPACT's own settings included);
    # its 16 workers (section 4.3) as 16 tasks stepped in groups by one thread per core.
    del given
    values = mujoco_presets.presets(levels[0], algorithm)
    values.update(base.actor_layout(values["num_actors"], num_cores))
    return values

  def preset_citations(self, level_name, levels, algorithm, num_cores, given=None):
    del level_name, given
    cited = mujoco_presets.citations(levels[0], algorithm)
    cited.update(base.actor_layout_cited(
        mujoco_presets.IMPALA_TABLE2["num_actors"], num_cores,
        "IMPACT section 4.3"))
    return cited

  def check_config(self, config):
    frame_settings = [name for name in ("width", "height", "torso")
                      if getattr(config, name) is not None]
    if frame_settings:
      raise ValueError(f"{', '.join('--' + name for name in frame_settings)}: MuJoCo tasks "
                       "have observation vectors and the IMPACT paper's MLPs (section 4.3), "
                       "no frames or torso. Drop the flag(s).")

  def environment_constructor(self, level_name, seed, test_mode, options):
    # Evaluation plays the same task: RLlib evaluates MuJoCo policies on the training
    # environment, with the observation filter frozen (the actor's business, mujoco.py).
    from scalable_agent_tf2.environments import mujoco  # pylint: disable=g-import-not-at-top
    del test_mode
    return mujoco.MujocoEnvironment, dict(level_name=level_name, seed=seed, **options)

  def runs_as(self, config):
    del config
    return base.IN_PROCESS_GROUP

  def network_config(self, config, spec):
    del config
    return base.continuous_network_config(spec)


FAMILY = MujocoFamily()
