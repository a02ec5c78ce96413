"""The two network configs environments/families/base.py and gym.py still ask for by name.

Transitional (issue 44): the continuous-control networks are networks.Agent composed by
networks.network_config_for_spec. The families' edit that calls it (issue 44's report)
deletes this module; nothing else imports it.
"""
from scalable_agent_tf2.agent import networks


def ContinuousNetworkConfig(observation_size, action_size, state_dependent_log_std=True):  # pylint: disable=invalid-name
  """networks.continuous_vector_config (the IMPACT paper's MLPs, section 4.3)."""
  return networks.continuous_vector_config(observation_size, action_size,
                                           state_dependent_log_std)


def ContinuousFrameNetworkConfig(frame_shape, action_size, torso,  # pylint: disable=invalid-name
                                 state_dependent_log_std=True):
  """networks.continuous_frame_config (a frame torso with a diagonal Gaussian head)."""
  return networks.continuous_frame_config(frame_shape, action_size, torso,
                                          state_dependent_log_std)
