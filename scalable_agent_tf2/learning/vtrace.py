"""V-trace (IMPALA paper, section 4) and the off-policy corrections compared in Table 2.

Public names, arguments and return fields follow the released code (deepmind/scalable_agent,
vtrace.py) so its users can move over: `log_probs_from_logits_and_actions`,
`from_importance_weights`, `from_logits`. Additions: `lambda_` (Remark 2), `clip_c_threshold`
(c_bar, hard-wired to 1 in the released code) and `off_policy_correction`, which selects one of
the four rows of Table 2.

One pure function per variant, each taking the behaviour and target policies as
distributions.py's objects (categorical or diagonal Gaussian) and checking its inputs' shapes
at entry, as rlax's vtrace.py does: `vtrace_returns` (the paper's method),
`trust_region_returns` (LASER's trust-region V-trace, Schmitt et al. 2019 section 4, with the
distributions' `implied_policy_kl` as the relevance function and `trust_region_mask`), and
Table 2's ablations `one_step_is_returns`, `epsilon_correction_returns`,
`no_correction_returns`. `from_distributions` picks one from the settings' strings (the
table VARIANTS); `from_logits` is it for logits. IMPACT's GAE advantages, built on
`from_importance_weights`, are impact.py's (`gae_from_importance_weights`).

Everything is time-major: T is the unroll length, B the batch size. The returned targets carry
no gradient (the paper differentiates neither v_s nor the advantage).
"""
import collections
import math

import tensorflow as tf

from scalable_agent_tf2.agent import distributions

# Table 2's rows (section 5.2.1), named in settings.py as --off_policy_correction's choices.
from scalable_agent_tf2.configuration.settings import EPSILON
from scalable_agent_tf2.configuration.settings import NO_CORRECTION
from scalable_agent_tf2.configuration.settings import OFF_POLICY_CORRECTIONS
from scalable_agent_tf2.configuration.settings import ONE_STEP_IS
from scalable_agent_tf2.configuration.settings import VTRACE

VTraceReturns = collections.namedtuple("VTraceReturns", "vs pg_advantages")

VTraceFromLogitsReturns = collections.namedtuple(
    "VTraceFromLogitsReturns",
    ["vs", "pg_advantages", "log_rhos", "behaviour_action_log_probs",
     "target_action_log_probs", "trust_region_mask"])

# Section 5.2.1: "Add a small value (epsilon = 1e-6) during gradient calculation to prevent
# log pi(a) from becoming very small".
EPSILON_CORRECTION_EPSILON = 1e-6


def log_probs_from_logits_and_actions(policy_logits, actions):
  """log pi(a | x) of the taken actions (the released code's name for
  distributions.Categorical(policy_logits).log_prob(actions)).

  Args:
    policy_logits: float32 [T, B, NUM_ACTIONS], unnormalised log-probabilities.
    actions: int32 [T, B], the actions taken.

  Returns:
    float32 [T, B].
  """
  policy = distributions.Categorical(policy_logits)
  policy.logits.shape.assert_has_rank(3)
  tf.convert_to_tensor(actions).shape.assert_has_rank(2)
  return policy.log_prob(actions)


def from_importance_weights(log_rhos, discounts, rewards, values, bootstrap_value,
                            clip_rho_threshold=1.0, clip_pg_rho_threshold=1.0,
                            clip_c_threshold=1.0, lambda_=1.0, trust_region_mask=None,
                            transition_mask=None, name="vtrace_from_importance_weights"):
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
    clip_rho_threshold, clip_c_threshold: rho_bar and c_bar, or None for no truncation.
      Default 1 (section 5.2.1: "we clip each importance weight rho_t and c_t at 1").
    clip_pg_rho_threshold: the truncation of the policy-gradient weight, or None.
    lambda_: the extra trace discount of Remark 2 (1 = the paper's default).
    trust_region_mask: None (plain V-trace), or float32 [T, B] with 1 for kept and 0 for
      rejected steps (`trust_region_mask(...)`); cuts the traces (`trust_region_returns`).
    transition_mask: None, or float32 [T, B]: 0 for a transition that carries no information
      (a truncated episode's reset step: environments/truncation.py, losses.py), where
      rho_t = c_t = rho^pg_t = 0, so v_t = V(x_t) exactly and the transition into x_t
      bootstraps from it as at an unroll's end; 1 elsewhere (all ones changes no bit).
    name: name scope.

  Returns:
    VTraceReturns(vs float32 [T, B], pg_advantages float32 [T, B]), both gradient-free.
  """
  with tf.name_scope(name):
    log_rhos = tf.convert_to_tensor(log_rhos, dtype=tf.float32)
    inputs = _checked_inputs(discounts, rewards, values, bootstrap_value, transition_mask,
                             log_rhos=log_rhos)
    if trust_region_mask is not None:
      trust_region_mask = _checked_mask(trust_region_mask, "trust_region_mask", log_rhos)
    return _returns(log_rhos, inputs, clip_rho_threshold, clip_pg_rho_threshold,
                    clip_c_threshold, lambda_, trust_region_mask)


def _returns(log_rhos, inputs, clip_rho_threshold, clip_pg_rho_threshold, clip_c_threshold,
             lambda_, trust_region_mask=None):
  """from_importance_weights' math on inputs its entry (or a variant's) has checked."""
  discounts, rewards, values, bootstrap_value, transition_mask = inputs
  clipped_rhos, cs, pg_rhos = _truncated_weights(
      log_rhos, clip_rho_threshold, clip_pg_rho_threshold, clip_c_threshold, lambda_,
      transition_mask)
  values_t_plus_1 = _shift_left(values, bootstrap_value)
  if trust_region_mask is not None:
    # m_{s+1}: whether step s+1 is kept; the bootstrap value (s = T-1) always is.
    next_kept = _shift_left(trust_region_mask, tf.ones_like(bootstrap_value))
    cs = cs * next_kept
  vs_minus_values = _discounted_trace_sum(
      deltas=clipped_rhos * (rewards + discounts * values_t_plus_1 - values),
      discounts=discounts, cs=cs)
  vs = vs_minus_values + values
  vs_t_plus_1 = _shift_left(vs, bootstrap_value)
  if trust_region_mask is not None:
    vs_t_plus_1 = values_t_plus_1 + next_kept * (vs_t_plus_1 - values_t_plus_1)
  pg_advantages = pg_rhos * (rewards + discounts * vs_t_plus_1 - values)
  return VTraceReturns(vs=tf.stop_gradient(vs), pg_advantages=tf.stop_gradient(pg_advantages))


def from_logits(behaviour_policy_logits, target_policy_logits, actions, discounts, rewards,
                values, bootstrap_value, clip_rho_threshold=1.0, clip_pg_rho_threshold=1.0,
                clip_c_threshold=1.0, lambda_=1.0, off_policy_correction=VTRACE,
                trust_region_threshold=None, name="vtrace_from_logits"):
  """from_distributions for categorical policies given by their logits (the released code's
  entry point).

  Args:
    behaviour_policy_logits: float32 [T, B, NUM_ACTIONS], mu's logits (from the actors).
    target_policy_logits: float32 [T, B, NUM_ACTIONS], pi's logits (from the learner).
    actions: int32 [T, B], the actions the actors took.
    The others: as from_distributions.

  Returns:
    VTraceFromLogitsReturns, as from_distributions.
  """
  return from_distributions(
      distributions.Categorical(behaviour_policy_logits),
      distributions.Categorical(target_policy_logits), actions, discounts, rewards, values, bootstrap_value,
      clip_rho_threshold=clip_rho_threshold, clip_pg_rho_threshold=clip_pg_rho_threshold,
      clip_c_threshold=clip_c_threshold, lambda_=lambda_,
      off_policy_correction=off_policy_correction,
      trust_region_threshold=trust_region_threshold, name=name)


def from_distributions(behaviour_policy, target_policy, actions, discounts, rewards, values,
                       bootstrap_value, clip_rho_threshold=1.0, clip_pg_rho_threshold=1.0,
                       clip_c_threshold=1.0, lambda_=1.0, off_policy_correction=VTRACE,
                       trust_region_threshold=None, trust_region_seed=(0, 0),
                       transition_mask=None, name="vtrace_from_distributions"):
  """The returns of the variant --off_policy_correction and --trust_region_threshold choose:
  the one place a setting's string picks one (losses.py passes the learner config's).

  Args:
    off_policy_correction: one of OFF_POLICY_CORRECTIONS (section 5.2.1, Table 2): 'vtrace'
      (`vtrace_returns`), 'one_step_is' (`one_step_is_returns`), 'epsilon'
      (`epsilon_correction_returns`) or 'none' (`no_correction_returns`); the last three
      for categorical policies only (IMPALA's discrete-action ablation).
    trust_region_threshold: None, or LASER's trust region (`trust_region_returns`), with
      off_policy_correction='vtrace' only.
    The others: as the chosen variant takes them (`vtrace_returns`, `trust_region_returns`).

  Returns:
    VTraceFromLogitsReturns, as each variant returns it.
  """
  _check_variant(off_policy_correction, trust_region_threshold)
  shared = dict(behaviour_policy=behaviour_policy, target_policy=target_policy,
                actions=actions, discounts=discounts, rewards=rewards, values=values,
                bootstrap_value=bootstrap_value, lambda_=lambda_,
                transition_mask=transition_mask)
  clipping = dict(clip_rho_threshold=clip_rho_threshold,
                  clip_pg_rho_threshold=clip_pg_rho_threshold,
                  clip_c_threshold=clip_c_threshold)
  with tf.name_scope(name):
    if trust_region_threshold is not None:
      return trust_region_returns(trust_region_threshold=trust_region_threshold,
                                  trust_region_seed=trust_region_seed, **clipping, **shared)
    variant, clipped_by = VARIANTS[off_policy_correction]
    return variant(**{threshold: clipping[threshold] for threshold in clipped_by}, **shared)


def vtrace_returns(behaviour_policy, target_policy, actions, discounts, rewards, values,
                   bootstrap_value, clip_rho_threshold=1.0, clip_pg_rho_threshold=1.0,
                   clip_c_threshold=1.0, lambda_=1.0, transition_mask=None,
                   name="vtrace_returns"):
  """V-trace (Table 2's first row, the paper's method) from behaviour and target action
  distributions (distributions.Categorical or DiagGaussian: any kind of action).

  log_rhos = log pi(a_t|x_t) - log mu(a_t|x_t) of the taken actions (for a Gaussian policy
  the densities of the unclipped samples), then from_importance_weights.

  Args:
    behaviour_policy: a distribution of [T, B, P] parameters, mu (from the actors).
    target_policy: the same kind, pi (from the learner; gradients flow into
      target_action_log_probs).
    actions: [T, B] int32 (categorical) or [T, B, A] float32 (Gaussian), the actions the
      actors took.
    discounts, rewards, values, bootstrap_value, clip_*, lambda_: as in
      `from_importance_weights` ([T, B], [T, B], [T, B], [B]).
    transition_mask: None, or float32 [T, B]: 0 for a transition that carries no information
      (`from_importance_weights`; every variant takes it).
    name: name scope.

  Returns:
    VTraceFromLogitsReturns: vs [T, B], pg_advantages [T, B] (both gradient-free),
    log_rhos [T, B], behaviour_action_log_probs [T, B] and target_action_log_probs [T, B],
    and trust_region_mask [T, B] (all ones: no trust region). The policy-gradient loss is
    -target_action_log_probs * pg_advantages.
  """
  with tf.name_scope(name):
    inputs = _checked_inputs(discounts, rewards, values, bootstrap_value, transition_mask)
    log_probs = _action_log_probs(behaviour_policy, target_policy, actions, inputs.rewards)
    returns = _returns(log_probs.log_rhos, inputs, clip_rho_threshold, clip_pg_rho_threshold,
                       clip_c_threshold, lambda_)
    return _record(returns, log_probs, tf.ones_like(log_probs.log_rhos))


def trust_region_returns(behaviour_policy, target_policy, actions, discounts, rewards, values,
                         bootstrap_value, trust_region_threshold, clip_rho_threshold=1.0,
                         clip_pg_rho_threshold=1.0, clip_c_threshold=1.0, lambda_=1.0,
                         trust_region_seed=(0, 0), transition_mask=None,
                         name="trust_region_vtrace_returns"):
  """LASER's trust-region V-trace (Schmitt et al. 2019, section 4.3): a step is rejected (m_t =
  0) where KL(pi || pi_rho_bar) (target_policy.implied_policy_kl, rho_bar =
  clip_rho_threshold; a Monte-Carlo estimate for a Gaussian) is above the threshold.

  Section 4.2-4.3, "we stop the Monte-Carlo bootstraps once they reach undesirable
  state-behaviour pairs": a return never runs through a rejected step t+1; it bootstraps from
  V(x_{t+1}) there instead of using that step's action and reward (from_importance_weights),
      v_s - V(x_s) = delta_s V + gamma_s c_s m_{s+1} (v_{s+1} - V(x_{s+1})),
      advantage_s = rho^pg_s (r_s + gamma_s (V(x_{s+1}) + m_{s+1} (v_{s+1} - V(x_{s+1})))
                               - V(x_s)),
  with m_T = 1 (v_T = V(x_T) anyway). Rejected steps' own v_s and advantages are still
  returned; the losses leave them out (losses.py, `mask`).

  Args:
    trust_region_threshold: a number >= 0 (`trust_region_mask`; math.inf computes the mask
      but keeps every step).
    trust_region_seed: int32 [2], the seed of a Monte-Carlo implied KL's samples.
    The others: as in `vtrace_returns`.

  Returns:
    VTraceFromLogitsReturns as `vtrace_returns`', with trust_region_mask [T, B] (1 = kept,
    0 = rejected). The policy-gradient loss is -target_action_log_probs * pg_advantages *
    trust_region_mask.
  """
  with tf.name_scope(name):
    inputs = _checked_inputs(discounts, rewards, values, bootstrap_value, transition_mask)
    log_probs = _action_log_probs(behaviour_policy, target_policy, actions, inputs.rewards)
    mask = trust_region_mask(
        target_policy.implied_policy_kl(behaviour_policy, clip_rho_threshold,
                                        seed=trust_region_seed),
        trust_region_threshold)
    returns = _returns(log_probs.log_rhos, inputs, clip_rho_threshold, clip_pg_rho_threshold,
                       clip_c_threshold, lambda_, trust_region_mask=mask)
    return _record(returns, log_probs, mask)


def one_step_is_returns(behaviour_policy, target_policy, actions, discounts, rewards, values,
                        bootstrap_value, clip_pg_rho_threshold=1.0, lambda_=1.0,
                        transition_mask=None, name="one_step_is_returns"):
  """Table 2's "1-step importance sampling" (section 5.2.1): value targets without correction
  (`no_correction_returns`' n-step returns); the advantage is multiplied by the per-step
  importance weight min(clip_pg_rho_threshold, pi/mu).

  Args and returns: as `vtrace_returns`', for categorical policies ([T, B, N] logits, int32
  [T, B] actions: the ablation is IMPALA's, on discrete actions).
  """
  with tf.name_scope(name):
    log_probs, returns = _ablation_returns(
        ONE_STEP_IS, behaviour_policy, target_policy, actions, lambda_,
        _checked_inputs(discounts, rewards, values, bootstrap_value, transition_mask))
    step_weights = _truncate(tf.exp(log_probs.log_rhos), clip_pg_rho_threshold)
    returns = returns._replace(
        pg_advantages=tf.stop_gradient(step_weights * returns.pg_advantages))
    return _record(returns, log_probs, tf.ones_like(log_probs.log_rhos))


def epsilon_correction_returns(behaviour_policy, target_policy, actions, discounts, rewards,
                               values, bootstrap_value, lambda_=1.0, transition_mask=None,
                               name="epsilon_correction_returns"):
  """Table 2's "epsilon-correction" (section 5.2.1): value targets and advantages as if
  on-policy (`no_correction_returns`'); target_action_log_probs, the policy gradient's, are
  log(pi(a|x) + 1e-6) (EPSILON_CORRECTION_EPSILON; log_rhos keeps the plain log pi).

  Args and returns: as `one_step_is_returns`' (no clipping: nothing is weighted).
  """
  with tf.name_scope(name):
    log_probs, returns = _ablation_returns(
        EPSILON, behaviour_policy, target_policy, actions, lambda_,
        _checked_inputs(discounts, rewards, values, bootstrap_value, transition_mask))
    corrected = log_probs._replace(target=tf.math.log(
        tf.exp(log_probs.target) + EPSILON_CORRECTION_EPSILON))
    return _record(returns, corrected, tf.ones_like(log_probs.log_rhos))


def no_correction_returns(behaviour_policy, target_policy, actions, discounts, rewards, values,
                          bootstrap_value, lambda_=1.0, transition_mask=None,
                          name="no_correction_returns"):
  """Table 2's "no-correction" (section 5.2.1): value targets and advantages as if on-policy,
  ignoring mu (rho = c = 1 everywhere: n-step returns, lambda-returns with lambda_ < 1).

  Args and returns: as `epsilon_correction_returns`'.
  """
  with tf.name_scope(name):
    log_probs, returns = _ablation_returns(
        NO_CORRECTION, behaviour_policy, target_policy, actions, lambda_,
        _checked_inputs(discounts, rewards, values, bootstrap_value, transition_mask))
    return _record(returns, log_probs, tf.ones_like(log_probs.log_rhos))


# --off_policy_correction's choices (Table 2's rows) -> (the variant, the truncation thresholds
# it takes): `from_distributions`' table. The ablations ignore mu in their targets, so only
# 1-step importance sampling keeps a threshold (its advantage's weight).
VARIANTS = {
    VTRACE: (vtrace_returns, ("clip_rho_threshold", "clip_pg_rho_threshold",
                              "clip_c_threshold")),
    ONE_STEP_IS: (one_step_is_returns, ("clip_pg_rho_threshold",)),
    EPSILON: (epsilon_correction_returns, ()),
    NO_CORRECTION: (no_correction_returns, ()),
}


def trust_region_mask(kl, threshold):
  """1.0 where a step is kept (KL <= threshold), 0.0 where it is rejected (LASER 4.3).

  Args:
    kl: float32 [T, B], a distribution's `implied_policy_kl` (distributions.py).
    threshold: float >= 0 (math.inf keeps every step).

  Returns:
    float32 [T, B].
  """
  if threshold is None or math.isnan(threshold) or threshold < 0:
    raise ValueError(f"The trust-region threshold must be a number >= 0 (inf: keep every "
                     f"step), got {threshold}.")
  return tf.cast(tf.convert_to_tensor(kl, tf.float32) <= threshold, tf.float32)


_Inputs = collections.namedtuple(
    "_Inputs", "discounts rewards values bootstrap_value transition_mask")
_ActionLogProbs = collections.namedtuple("_ActionLogProbs", "target behaviour log_rhos")


def _check_variant(off_policy_correction, trust_region_threshold):
  """ValueError unless the two settings name a variant `from_distributions` has."""
  if off_policy_correction not in OFF_POLICY_CORRECTIONS:
    raise ValueError(
        f"Unknown off_policy_correction {off_policy_correction!r}; expected one of "
        f"{OFF_POLICY_CORRECTIONS}.")
  if trust_region_threshold is not None and off_policy_correction != VTRACE:
    raise ValueError(
        f"The trust region (trust_region_threshold={trust_region_threshold}) is defined for "
        f"V-trace (LASER section 4), not off_policy_correction={off_policy_correction!r}.")


def _checked_inputs(discounts, rewards, values, bootstrap_value, transition_mask,
                    log_rhos=None):
  """Every entry's check: the returns' inputs as float32 tensors, ValueError naming the
  argument whose shape does not fit [T, B] (bootstrap_value: [B]) of log_rhos (where given:
  from_importance_weights) or rewards (a variant's)."""
  discounts, rewards, values, bootstrap_value = (
      tf.convert_to_tensor(x, dtype=tf.float32)
      for x in (discounts, rewards, values, bootstrap_value))
  reference, name = (rewards, "rewards") if log_rhos is None else (log_rhos, "log_rhos")
  _check_time_major(reference, discounts, rewards, values, bootstrap_value, reference=name)
  if transition_mask is not None:
    transition_mask = _checked_mask(transition_mask, "transition_mask", reference)
  return _Inputs(discounts, rewards, values, bootstrap_value, transition_mask)


def _action_log_probs(behaviour_policy, target_policy, actions, rewards):
  """log pi(a_t|x_t), log mu(a_t|x_t) of the taken actions and log_rhos, their difference
  ([T, B] each); ValueError unless both policies' parameters are [T, B, P] alike and the
  actions [T, B, ...], [T, B] being rewards'."""
  _check_policies(behaviour_policy, target_policy, rewards)
  # The actions' own dtype is the distribution's to convert (a Gaussian's float64 numpy
  # samples become float32 there): only their shape is read here.
  actions_shape = tf.convert_to_tensor(actions).shape
  if not actions_shape.is_compatible_with(target_policy.actions_shape()):
    raise ValueError(f"actions has shape {actions_shape}, expected "
                     f"{target_policy.actions_shape()}: time-major [T, B] = {rewards.shape}, "
                     f"then the policy's action shape.")
  target = target_policy.log_prob(actions)
  behaviour = behaviour_policy.log_prob(actions)
  return _ActionLogProbs(target=target, behaviour=behaviour, log_rhos=target - behaviour)


def _check_policies(behaviour_policy, target_policy, rewards):
  """ValueError naming the policy whose flat parameters are not [T, B, P] (T, B: rewards')
  or differ from the other's: mu and pi must be of the same steps and action kind."""
  for name, policy in (("behaviour_policy", behaviour_policy),
                       ("target_policy", target_policy)):
    params = policy.params
    if params.shape.rank is not None and (
        params.shape.rank != 3 or not params.shape[:2].is_compatible_with(rewards.shape)):
      raise ValueError(f"{name}'s parameters have shape {params.shape}, expected [T, B, P] "
                       f"with [T, B] = {rewards.shape} (time-major).")
  if not behaviour_policy.params.shape.is_compatible_with(target_policy.params.shape):
    raise ValueError(f"behaviour_policy's parameters {behaviour_policy.params.shape} and "
                     f"target_policy's {target_policy.params.shape} differ.")


def _ablation_returns(correction, behaviour_policy, target_policy, actions, lambda_, inputs):
  """What Table 2's ablations share: the actions' _ActionLogProbs and the returns ignoring mu,
  rho = c = 1 everywhere (log_rhos = 0, no truncation; lambda_ and the transition mask kept).
  ValueError for a continuous policy: the ablations are IMPALA's, on discrete actions."""
  if not target_policy.discrete:
    raise ValueError(f"off_policy_correction={correction!r} is IMPALA's "
                     "discrete-action ablation (Table 2); Gaussian policies use 'vtrace'.")
  log_probs = _action_log_probs(behaviour_policy, target_policy, actions, inputs.rewards)
  return log_probs, _returns(tf.zeros_like(log_probs.log_rhos), inputs, None, None, None,
                             lambda_)


def _record(returns, log_probs, mask):
  """VTraceFromLogitsReturns of VTraceReturns, _ActionLogProbs and the trust-region mask."""
  return VTraceFromLogitsReturns(
      vs=returns.vs, pg_advantages=returns.pg_advantages, log_rhos=log_probs.log_rhos,
      behaviour_action_log_probs=log_probs.behaviour,
      target_action_log_probs=log_probs.target, trust_region_mask=mask)


def _checked_mask(mask, name, log_rhos):
  """`mask` as float32 [T, B]; ValueError naming it unless its shape fits log_rhos'."""
  mask = tf.convert_to_tensor(mask, dtype=tf.float32)
  if not mask.shape.is_compatible_with(log_rhos.shape):
    raise ValueError(f"{name} has shape {mask.shape}, expected [T, B] = {log_rhos.shape} "
                     f"(time-major).")
  return mask


def _truncated_weights(log_rhos, clip_rho_threshold, clip_pg_rho_threshold, clip_c_threshold,
                       lambda_, transition_mask):
  """(rho_t, c_t, rho^pg_t) [T, B] of from_importance_weights: pi/mu truncated at each
  threshold, c_t times lambda_ (Remark 2), all three 0 where transition_mask is."""
  rhos = tf.exp(log_rhos)
  clipped_rhos = _truncate(rhos, clip_rho_threshold)
  cs = lambda_ * _truncate(rhos, clip_c_threshold)
  pg_rhos = _truncate(rhos, clip_pg_rho_threshold)
  if transition_mask is None:
    return clipped_rhos, cs, pg_rhos
  return clipped_rhos * transition_mask, cs * transition_mask, pg_rhos * transition_mask


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


def _check_time_major(log_rhos, discounts, rewards, values, bootstrap_value,
                      reference="log_rhos"):
  """Static shape checks with messages that name the offending argument: [T, B] like
  log_rhos (what `reference` names), bootstrap_value [B]."""
  if log_rhos.shape.rank is not None and log_rhos.shape.rank != 2:
    raise ValueError(f"{reference} has shape {log_rhos.shape}, expected [T, B] (time-major).")
  for name, tensor in (("discounts", discounts), ("rewards", rewards), ("values", values)):
    if not tensor.shape.is_compatible_with(log_rhos.shape):
      raise ValueError(
          f"{name} has shape {tensor.shape}, expected [T, B] = {log_rhos.shape} "
          "(time-major).")
  if not bootstrap_value.shape.is_compatible_with(log_rhos.shape[1:]):
    raise ValueError(
        f"bootstrap_value has shape {bootstrap_value.shape}, expected [B] = "
        f"{log_rhos.shape[1:]}.")
