"""Truncated episodes: what V-trace needs to bootstrap them, and the rule in numpy.

structures.EnvOutput: `done` is True at the FIRST observation of a new episode (the
environment reset itself after the action that ended the previous one), and the learner's
discount of transition t (x_t -> x_{t+1}) is gamma x (1 - done[t+1]) (losses.py,
docs/ARCHITECTURE.md "Time steps"). With `done` alone a termination and a time-limit
truncation look the same: both cut the return, and the last observation of the episode is
never seen. That is right for
a termination (no value after it) and wrong for a truncation, whose return would have gone on:
V-trace should bootstrap from V(x_last) there (Pardo et al., 2018, "Time limits in
reinforcement learning", partial-episode bootstrapping; gymnasium's `truncated`).

The convention for truncation (environments/gym_env.py, emit_truncation_step=True, the gym
family's default; MuJoCo keeps a truncation as a termination, environments/mujoco.py):
  * the truncated episode's last observation x_last is emitted as a step of its own, with the
    reward of the action that led there, done False (so transition t-1 into it keeps
    discount gamma) and `truncated` True;
  * the next step(action) ignores its action and returns the new episode's first observation
    with reward 0 and done True (discount 0 across the boundary, as today).
What the learner does with `truncated` (a bool field of EnvOutput, [T+1, B] in the batch;
losses.py, tests/learning/test_truncation.py through the learner's loss terms): the transition
that LEAVES a truncated observation (t with truncated[t], whose action
did nothing) must carry no information: its importance weights rho_t = c_t = 0 and its loss
terms (policy gradient, baseline, entropy) weighted 0. Then V-trace's target at x_last is
V(x_last) itself, and the transition into it bootstraps: v_{t-1} = r + gamma V(x_last) (+ the
usual correction). A termination keeps discount 0 and bootstraps from nothing.
`vtrace_targets` below is that rule in numpy (tests/environments/test_gym_family.py checks both
cases).

numpy only.
"""
import numpy as np


def transition_masks(done, truncated, gamma):
  """Discounts and the transitions that count, [T] each, from the stored steps [T+1].

  Args:
    done: bool [T+1], observation t starts a new episode.
    truncated: bool [T+1], observation t is a truncated episode's last (its own step).
    gamma: the discount.

  Returns:
    (discounts float [T]: gamma x (1 - done[t+1]); counts float [T]: 0 for a transition that
    leaves a truncated observation, else 1).
  """
  done = np.asarray(done, bool)
  truncated = np.asarray(truncated, bool)
  return gamma * (~done[1:]).astype(np.float64), (~truncated[:-1]).astype(np.float64)


def vtrace_targets(rewards, values, bootstrap_value, done, truncated, gamma, rhos=None,
                   clip_rho=1.0, clip_c=1.0):
  """V-trace targets v_s (IMPALA section 4.1) with the truncation rule (module docstring).

  Args:
    rewards: float [T], reward of transition t (stored at step t+1).
    values: float [T], V(x_t). bootstrap_value: V(x_T).
    done, truncated: bool [T+1] as stored.
    gamma: the discount. rhos: importance weights pi/mu [T] (None: on-policy, 1).
    clip_rho, clip_c: rho-bar and c-bar.

  Returns:
    float [T] targets v_s.
  """
  rewards = np.asarray(rewards, np.float64)
  values = np.asarray(values, np.float64)
  discounts, counts = transition_masks(done, truncated, gamma)
  rhos = np.ones_like(rewards) if rhos is None else np.asarray(rhos, np.float64)
  clipped_rhos = np.minimum(clip_rho, rhos) * counts
  cs = np.minimum(clip_c, rhos) * counts
  next_values = np.append(values[1:], bootstrap_value)
  deltas = clipped_rhos * (rewards + discounts * next_values - values)
  vs_minus_v = np.zeros_like(values)
  acc = 0.0
  for t in reversed(range(len(values))):
    acc = deltas[t] + discounts[t] * cs[t] * acc
    vs_minus_v[t] = acc
  return values + vs_minus_v
