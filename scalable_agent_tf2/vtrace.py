"""V-trace (IMPALA paper, section 4) and the off-policy corrections compared in Table 2.

Public names, arguments and return fields follow the released code (deepmind/scalable_agent,
vtrace.py) so its users can move over: `log_probs_from_logits_and_actions`,
`from_importance_weights`, `from_logits`. Additions: `lambda_` (Remark 2), `clip_c_threshold`
(c_bar, hard-wired to 1 in the released code) and `off_policy_correction`, which selects one of
the four rows of Table 2.

Everything is time-major: T is the unroll length, B the batch size. The returned targets carry
no gradient (the paper differentiates neither v_s nor the advantage).
"""
import collections

import tensorflow as tf

VTraceReturns = collections.namedtuple("VTraceReturns", "vs pg_advantages")

VTraceFromLogitsReturns = collections.namedtuple(
    "VTraceFromLogitsReturns",
    ["vs", "pg_advantages", "log_rhos", "behaviour_action_log_probs",
     "target_action_log_probs"])

# Table 2's rows (section 5.2.1).
VTRACE = "vtrace"
ONE_STEP_IS = "one_step_is"   # "1-step importance sampling": no traces, no correction of V.
EPSILON = "epsilon"           # "epsilon-correction": on-policy targets, log(pi + 1e-6) in the PG.
NO_CORRECTION = "none"        # "No-correction": treat the behaviour policy as on-policy.
OFF_POLICY_CORRECTIONS = (VTRACE, ONE_STEP_IS, EPSILON, NO_CORRECTION)

# Section 5.2.1: "Add a small value (epsilon = 1e-6) during gradient calculation to prevent
# log pi(a) from becoming very small".
EPSILON_CORRECTION_EPSILON = 1e-6


def log_probs_from_logits_and_actions(policy_logits, actions):
  """log pi(a | x) of the taken actions.

  Args:
    policy_logits: float32 [T, B, NUM_ACTIONS], unnormalised log-probabilities.
    actions: int32 [T, B], the actions taken.

  Returns:
    float32 [T, B].
  """
  policy_logits = tf.convert_to_tensor(policy_logits, dtype=tf.float32)
  actions = tf.convert_to_tensor(actions, dtype=tf.int32)
  policy_logits.shape.assert_has_rank(3)
  actions.shape.assert_has_rank(2)
  return -tf.nn.sparse_softmax_cross_entropy_with_logits(
      logits=policy_logits, labels=actions)


def from_importance_weights(log_rhos, discounts, rewards, values, bootstrap_value,
                            clip_rho_threshold=1.0, clip_pg_rho_threshold=1.0,
                            clip_c_threshold=1.0, lambda_=1.0,
                            name="vtrace_from_importance_weights"):
  r"""V-trace targets and policy-gradient advantages from log importance weights.

  Section 4.1 and Remark 1: with rho_t = min(rho_bar, pi/mu) and
  c_t = lambda * min(c_bar, pi/mu) (Remark 2 adds lambda),
      v_s - V(x_s) = delta_s V + gamma_s c_s (v_{s+1} - V(x_{s+1})),
      delta_s V = rho_s (r_s + gamma_s V(x_{s+1}) - V(x_s)),
  computed backwards from v_T = V(x_T) = bootstrap_value. The advantage of section 4.2 is
  rho^pg_s (r_s + gamma_s v_{s+1} - V(x_s)) with its own truncation rho^pg_bar.

  Args:
    log_rhos: float32 [T, B], log(pi(a_t|x_t) / mu(a_t|x_t)).
    discounts: float32 [T, B], gamma_t (zero where the episode ended after step t).
    rewards: float32 [T, B], the (clipped) rewards r_t.
    values: float32 [T, B], V(x_t) under the learner's parameters.
    bootstrap_value: float32 [B], V(x_T).
    clip_rho_threshold: rho_bar, or None for no truncation. Default 1 (section 5.2.1:
      "we clip each importance weight rho_t and c_t at 1").
    clip_pg_rho_threshold: the truncation of the policy-gradient weight, or None.
    clip_c_threshold: c_bar, or None. Default 1 (section 5.2.1).
    lambda_: the extra trace discount of Remark 2 (1 = the paper's default).
    name: name scope.

  Returns:
    VTraceReturns(vs float32 [T, B], pg_advantages float32 [T, B]), both gradient-free.
  """
  with tf.name_scope(name):
    log_rhos = tf.convert_to_tensor(log_rhos, dtype=tf.float32)
    discounts = tf.convert_to_tensor(discounts, dtype=tf.float32)
    rewards = tf.convert_to_tensor(rewards, dtype=tf.float32)
    values = tf.convert_to_tensor(values, dtype=tf.float32)
    bootstrap_value = tf.convert_to_tensor(bootstrap_value, dtype=tf.float32)
    _check_time_major(log_rhos, discounts, rewards, values, bootstrap_value)

    rhos = tf.exp(log_rhos)
    clipped_rhos = _truncate(rhos, clip_rho_threshold)
    cs = lambda_ * _truncate(rhos, clip_c_threshold)
    vs_minus_values = _discounted_trace_sum(
        deltas=clipped_rhos * (rewards + discounts * _shift_left(values, bootstrap_value)
                               - values),
        discounts=discounts, cs=cs)
    vs = vs_minus_values + values
    pg_advantages = _truncate(rhos, clip_pg_rho_threshold) * (
        rewards + discounts * _shift_left(vs, bootstrap_value) - values)
    return VTraceReturns(vs=tf.stop_gradient(vs),
                         pg_advantages=tf.stop_gradient(pg_advantages))


def from_logits(behaviour_policy_logits, target_policy_logits, actions, discounts, rewards,
                values, bootstrap_value, clip_rho_threshold=1.0, clip_pg_rho_threshold=1.0,
                clip_c_threshold=1.0, lambda_=1.0, off_policy_correction=VTRACE,
                name="vtrace_from_logits"):
  """V-trace (or one of Table 2's alternatives) from behaviour and target policy logits.

  Args:
    behaviour_policy_logits: float32 [T, B, NUM_ACTIONS], mu's logits (from the actors).
    target_policy_logits: float32 [T, B, NUM_ACTIONS], pi's logits (from the learner).
    actions: int32 [T, B], the actions the actors took.
    discounts, rewards, values, bootstrap_value, clip_*, lambda_: as in
      `from_importance_weights`.
    off_policy_correction: one of OFF_POLICY_CORRECTIONS (section 5.2.1, Table 2):
      'vtrace': the paper's method.
      'one_step_is': value targets without correction (n-step returns); the advantage is
        multiplied by the per-step importance weight min(clip_pg_rho_threshold, pi/mu).
      'epsilon': value targets and advantages as if on-policy; the policy gradient uses
        log(pi + 1e-6) (see `target_action_log_probs`).
      'none': value targets and advantages as if on-policy.
    name: name scope.

  Returns:
    VTraceFromLogitsReturns: vs [T, B], pg_advantages [T, B] (both gradient-free),
    log_rhos [T, B], behaviour_action_log_probs [T, B] and target_action_log_probs [T, B]
    (with the epsilon correction: log(pi(a|x) + 1e-6)). The policy-gradient loss is
    -target_action_log_probs * pg_advantages.
  """
  if off_policy_correction not in OFF_POLICY_CORRECTIONS:
    raise ValueError(
        f"Unknown off_policy_correction {off_policy_correction!r}; expected one of "
        f"{OFF_POLICY_CORRECTIONS}.")
  with tf.name_scope(name):
    behaviour_policy_logits = tf.convert_to_tensor(behaviour_policy_logits, tf.float32)
    target_policy_logits = tf.convert_to_tensor(target_policy_logits, tf.float32)
    actions = tf.convert_to_tensor(actions, dtype=tf.int32)
    behaviour_policy_logits.shape.assert_has_rank(3)
    target_policy_logits.shape.assert_has_rank(3)
    actions.shape.assert_has_rank(2)

    target_action_log_probs = log_probs_from_logits_and_actions(
        target_policy_logits, actions)
    behaviour_action_log_probs = log_probs_from_logits_and_actions(
        behaviour_policy_logits, actions)
    log_rhos = target_action_log_probs - behaviour_action_log_probs

    if off_policy_correction == VTRACE:
      returns = from_importance_weights(
          log_rhos, discounts, rewards, values, bootstrap_value,
          clip_rho_threshold=clip_rho_threshold,
          clip_pg_rho_threshold=clip_pg_rho_threshold,
          clip_c_threshold=clip_c_threshold, lambda_=lambda_)
    else:
      # Ignoring mu means rho = c = 1 everywhere: log_rhos = 0.
      returns = from_importance_weights(
          tf.zeros_like(log_rhos), discounts, rewards, values, bootstrap_value,
          clip_rho_threshold=None, clip_pg_rho_threshold=None,
          clip_c_threshold=None, lambda_=lambda_)
      if off_policy_correction == ONE_STEP_IS:
        step_weights = _truncate(tf.exp(log_rhos), clip_pg_rho_threshold)
        returns = returns._replace(
            pg_advantages=tf.stop_gradient(step_weights * returns.pg_advantages))
      elif off_policy_correction == EPSILON:
        target_action_log_probs = tf.math.log(
            tf.exp(target_action_log_probs) + EPSILON_CORRECTION_EPSILON)

    return VTraceFromLogitsReturns(
        vs=returns.vs, pg_advantages=returns.pg_advantages, log_rhos=log_rhos,
        behaviour_action_log_probs=behaviour_action_log_probs,
        target_action_log_probs=target_action_log_probs)


def gae_from_importance_weights(log_rhos, discounts, rewards, values, bootstrap_value,
                                lambda_, clip_rho_threshold=1.0, clip_c_threshold=1.0,
                                name="vtrace_gae_from_importance_weights"):
  r"""IMPACT's V-trace GAE-lambda advantages (IMPACT paper, section 3.1, after Han & Sung).

      A_t = sum_{i=t}^{T-1} (prod_{j=t}^{i-1} lambda gamma_j c_j) delta_i V,
      delta_i V = rho_i (r_i + gamma_i V(x_{i+1}) - V(x_i)),
  with rho_i = min(rho_bar, pi/mu), c_j = min(c_bar, pi/mu) and V(x_T) = bootstrap_value.
  This is V-trace's v_t - V(x_t) with Remark 2's lambda, so the value target is v_t = V(x_t)
  + A_t. IMPACT takes pi = the target network's policy and mu = the worker's.

  Args:
    log_rhos: float32 [T, B], log(pi(a_t|x_t) / mu(a_t|x_t)).
    discounts, rewards, values, bootstrap_value: as in `from_importance_weights`.
    lambda_: GAE's lambda (IMPACT Table 1, discrete: 0.995).
    clip_rho_threshold: rho_bar, or None. clip_c_threshold: c_bar, or None.
    name: name scope.

  Returns:
    VTraceReturns(vs float32 [T, B], pg_advantages float32 [T, B] = A_t), gradient-free.
  """
  with tf.name_scope(name):
    values = tf.convert_to_tensor(values, dtype=tf.float32)
    returns = from_importance_weights(
        log_rhos, discounts, rewards, values, bootstrap_value,
        clip_rho_threshold=clip_rho_threshold, clip_pg_rho_threshold=None,
        clip_c_threshold=clip_c_threshold, lambda_=lambda_)
    return VTraceReturns(vs=returns.vs, pg_advantages=tf.stop_gradient(returns.vs - values))


def _truncate(weights, threshold):
  """min(threshold, weights), or the weights themselves when threshold is None."""
  return weights if threshold is None else tf.minimum(threshold, weights)


def _shift_left(sequence, last):
  """[x_1, ..., x_{T-1}, last] from [x_0, ..., x_{T-1}] ([T, B]) and last ([B])."""
  return tf.concat([sequence[1:], last[tf.newaxis]], axis=0)


def _discounted_trace_sum(deltas, discounts, cs):
  """acc_s = deltas_s + discounts_s * cs_s * acc_{s+1}, acc_T = 0, for s = T-1 .. 0.

  All arguments and the result are [T, B]. A reverse tf.scan: a static-length loop that
  XLA compiles. Callers stop gradients through the result (the targets are constants).
  """
  def backward_step(acc, elements):
    delta, discount, c = elements
    return delta + discount * c * acc

  return tf.scan(backward_step, (deltas, discounts, cs),
                 initializer=tf.zeros_like(deltas[0]), reverse=True)


def _check_time_major(log_rhos, discounts, rewards, values, bootstrap_value):
  """Static shape checks with messages that name the offending argument."""
  log_rhos.shape.assert_has_rank(2)
  for name, tensor in (("discounts", discounts), ("rewards", rewards), ("values", values)):
    if not tensor.shape.is_compatible_with(log_rhos.shape):
      raise ValueError(
          f"{name} has shape {tensor.shape}, expected [T, B] = {log_rhos.shape} "
          "(time-major).")
  if not bootstrap_value.shape.is_compatible_with(log_rhos.shape[1:]):
    raise ValueError(
        f"bootstrap_value has shape {bootstrap_value.shape}, expected [B] = "
        f"{log_rhos.shape[1:]}.")
