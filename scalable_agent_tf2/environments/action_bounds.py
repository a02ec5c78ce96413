"""Continuous actions on the environment side: clipping to the action space's bounds.

No TensorFlow here (environments run in cheap subprocesses, see structures.py). A Gaussian
policy's sample is unbounded; the trajectory keeps it unclipped, because the behaviour
policy's log-probability (gaussian.log_probs_from_params_and_actions) is the density of that
sample, and V-trace's and IMPACT's ratios pi/mu must compare the learner's density at the same
point. Only the copy sent to the environment is clipped, as RLlib (the IMPACT paper's code
base) does with its `clip_actions` option.
"""
import numpy as np


def clip_to_bounds(action, low, high):
  """The action the environment receives: each dimension clipped to [low_i, high_i].

  Args:
    action: float [A], the policy's unclipped sample (left unchanged: a new array is
      returned).
    low: float [A] (or a scalar), the action space's lower bounds.
    high: float [A] (or a scalar), the upper bounds, >= low.

  Returns:
    float32 [A], a new array.
  """
  action = np.asarray(action, np.float32)
  low = np.broadcast_to(np.asarray(low, np.float32), action.shape)
  high = np.broadcast_to(np.asarray(high, np.float32), action.shape)
  if np.any(np.isnan(action)):
    raise ValueError(f"The action {action} contains NaN: the policy's parameters diverged "
                     "(check the learner's losses); no valid action can be sent.")
  if np.any(low > high):
    raise ValueError(f"The action bounds are inverted: low {low} > high {high} somewhere.")
  return np.clip(action, low, high)
