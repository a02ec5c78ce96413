"""The numpy ground truth of V-trace, written once for every test that checks it.

Sums the paper's equation (1) term by term (IMPALA section 4.1), with no recursion shared with
scalable_agent_tf2/learning/vtrace.py, plus the inputs the tests draw for it.
"""
import numpy as np


def softmax(logits):
  e = np.exp(logits - logits.max(-1, keepdims=True))
  return e / e.sum(-1, keepdims=True)


def numpy_vtrace(log_rhos, discounts, rewards, values, bootstrap_value, rho_bar=1.0,
                 pg_rho_bar=1.0, c_bar=1.0, lambda_=1.0, mask=None):
  """(vs, pg_advantages) of equation (1), one double loop per target.

  v_s = V(x_s) + sum_{t=s}^{T-1} (prod_{i=s}^{t-1} gamma_i c_i m_{i+1}) rho_t (r_t + gamma_t
  V(x_{t+1}) - V(x_t)), with V(x_T) = bootstrap_value and c_i = lambda min(c_bar, rho_i).
  None thresholds mean no truncation. `mask` [T, B] (LASER's trust region, sections 4.2-4.3: 1 keeps
  a step, 0 rejects it; default all ones) stops the sum before the first rejected step after
  s, and the advantage of step s bootstraps from V(x_{s+1}) when step s+1 is rejected, from
  v_{s+1} otherwise (v_T = V(x_T), m_T = 1).
  """
  T, B = log_rhos.shape
  rhos = np.exp(log_rhos)
  trunc = lambda w, bar: w if bar is None else np.minimum(bar, w)
  clipped_rhos, cs = trunc(rhos, rho_bar), lambda_ * trunc(rhos, c_bar)
  mask = np.ones((T, B)) if mask is None else mask
  values_ext = np.concatenate([values, bootstrap_value[None]], axis=0)
  mask_ext = np.concatenate([mask, np.ones((1, B))], axis=0)
  vs = np.zeros((T, B))
  for b in range(B):
    for s in range(T):
      total = values[s, b]
      for t in range(s, T):
        weight = 1.0
        for i in range(s, t):
          weight *= discounts[i, b] * cs[i, b] * mask_ext[i + 1, b]
        delta = clipped_rhos[t, b] * (rewards[t, b] + discounts[t, b] * values_ext[t + 1, b]
                                      - values[t, b])
        total += weight * delta
      vs[s, b] = total
  vs_ext = np.concatenate([vs, bootstrap_value[None]], axis=0)
  next_target = np.where(mask_ext[1:] > 0, vs_ext[1:], values_ext[1:])
  pg_advantages = trunc(rhos, pg_rho_bar) * (rewards + discounts * next_target - values)
  return vs, pg_advantages


def random_inputs(rng, T, B, A=5):
  """(behaviour_logits, target_logits, actions, discounts, rewards, values, bootstrap_value)."""
  behaviour_logits = rng.normal(size=(T, B, A)).astype(np.float32)
  target_logits = rng.normal(size=(T, B, A)).astype(np.float32)
  actions = rng.integers(0, A, size=(T, B)).astype(np.int32)
  discounts = (0.9 * (rng.random((T, B)) > 0.2)).astype(np.float32)  # Some episode ends.
  rewards = rng.normal(size=(T, B)).astype(np.float32)
  values = rng.normal(size=(T, B)).astype(np.float32)
  bootstrap_value = rng.normal(size=(B,)).astype(np.float32)
  return behaviour_logits, target_logits, actions, discounts, rewards, values, bootstrap_value


def log_rhos(behaviour_logits, target_logits, actions):
  """log pi(a_t|x_t) - log mu(a_t|x_t) of the taken actions."""
  take = lambda p: np.take_along_axis(p, actions[..., None], -1)[..., 0]
  return np.log(take(softmax(target_logits))) - np.log(take(softmax(behaviour_logits)))
