"""IMPALA's loss terms (section 4.2) and reward clipping (Appendix D, Figure D.1).

The losses are SUMMED over time and batch, as in the released code (deepmind/scalable_agent,
experiment.py) and the note under the paper's Table D.1; the hyperparameters of Tables D.1,
D.3 and G.1 assume that scale.
"""
import tensorflow as tf

# Names of the reward-clipping modes (the learner's job; environments return raw rewards).
ABS_ONE = "abs_one"                            # clip to [-1, 1]: single tasks, Atari (Table G.1).
OPTIMISTIC_ASYMMETRIC = "optimistic_asymmetric"  # the paper's Figure D.1, DMLab-30 default.
SOFT_ASYMMETRIC = "soft_asymmetric"            # the released code's DMLab-30 variant.
NO_CLIPPING = "none"
REWARD_CLIPPING_MODES = (ABS_ONE, OPTIMISTIC_ASYMMETRIC, SOFT_ASYMMETRIC, NO_CLIPPING)


def clip_rewards(rewards, mode):
  """Transforms raw rewards for the learner's targets.

  Args:
    rewards: float32 tensor of any shape.
    mode: one of REWARD_CLIPPING_MODES.
      'abs_one': clip(r, -1, 1).
      'optimistic_asymmetric': 0.3 * min(tanh(r), 0) + 5 * max(tanh(r), 0) (Appendix D,
        "optimistic asymmetric reward clipping", Figure D.1).
      'soft_asymmetric': tanh(r / 5) scaled by 5, negative part by 0.3 more (the released
        code's experiment.py, --reward_clipping=soft_asymmetric).
      'none': unchanged.

  Returns:
    float32 tensor of the same shape.
  """
  rewards = tf.convert_to_tensor(rewards, dtype=tf.float32)
  if mode == ABS_ONE:
    return tf.clip_by_value(rewards, -1.0, 1.0)
  if mode == OPTIMISTIC_ASYMMETRIC:
    squashed = tf.tanh(rewards)
    return 0.3 * tf.minimum(squashed, 0.0) + 5.0 * tf.maximum(squashed, 0.0)
  if mode == SOFT_ASYMMETRIC:
    squeezed = tf.tanh(rewards / 5.0)
    return 5.0 * tf.where(rewards < 0, 0.3 * squeezed, squeezed)
  if mode == NO_CLIPPING:
    return rewards
  raise ValueError(
      f"Unknown reward clipping {mode!r}; expected one of {REWARD_CLIPPING_MODES}.")


def policy_gradient_loss(action_log_probs, advantages, mask=None):
  """-sum_t,b log pi(a_t|x_t) * A_t, the advantage held constant (section 4.2).

  Args:
    action_log_probs: float32 [T, B], log pi(a_t | x_t) of the taken actions, under the
      learner's parameters (gradients flow through this).
    advantages: float32 [T, B], e.g. V-trace's pg_advantages.
    mask: None, or float32 [T, B]: 0 leaves a step out (LASER's trust region, section 4.3:
      rejected transitions are not used "for the policy gradient and value gradient
      updates"; vtrace.trust_region_mask).

  Returns:
    float32 scalar.
  """
  return -tf.reduce_sum(_masked(action_log_probs * tf.stop_gradient(advantages), mask))


def baseline_loss(advantages, mask=None):
  """0.5 * sum_t,b (v_s - V(x_s))^2 (section 4.2; the 0.5 is the released code's).

  Args:
    advantages: float32 [T, B], v_s - V(x_s) with gradients through V(x_s) only.
    mask: None, or float32 [T, B]: 0 leaves a step out (as in policy_gradient_loss).

  Returns:
    float32 scalar. The learner multiplies it by baseline_cost (0.5, Table D.3 / G.1).
  """
  return 0.5 * tf.reduce_sum(_masked(tf.square(advantages), mask))


def _masked(terms, mask):
  """terms [T, B] with the masked-out steps (mask 0) set to zero."""
  if mask is None:
    return terms
  return tf.where(tf.cast(mask, tf.bool), terms, tf.zeros_like(terms))


def entropy_loss(policy_logits):
  """sum_t,b sum_a pi log pi: minus the policy's entropy (section 4.2, "entropy bonus").

  Args:
    policy_logits: float32 [T, B, NUM_ACTIONS].

  Returns:
    float32 scalar. The learner multiplies it by entropy_cost.
  """
  log_policy = tf.nn.log_softmax(policy_logits)
  return tf.reduce_sum(tf.exp(log_policy) * log_policy)
