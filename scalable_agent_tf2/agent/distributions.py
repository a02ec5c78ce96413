"""The policy's action distributions as TF objects: categorical (IMPALA's discrete actions),
diagonal Gaussian (the IMPACT paper's continuous control, section 4.3) and multi-categorical
(gymnasium's MultiDiscrete: independent categorical components), after SEED RL's
parametric distributions (Espeholt et al. 2020, seed_rl/common/parametric_distribution.py):
one learner, one V-trace and one set of losses for every kind of action.

A DISTRIBUTION (`Categorical(logits)`, `DiagGaussian(mean, log_std)`,
`MultiCategorical(logits, nvec)`, or a family's `family(params)`, action_families.py) holds
tensors [..., P] with any leading shape (e.g. [T, B] when learning, [B] when acting) and offers
`log_prob(actions)`, `entropy()`, `kl(other)`, `total_kl(other)`,
`implied_policy_kl(behaviour, ...)` (LASER's trust region, section 4.3) and `sample(seed)`
(TF, stateless); `[key]` slices the leading dimensions and `stop_gradient()` detaches it.
What the shapes are, how the network reads a previous action and how actors sample in numpy
is its family's (action_families.py): the learner's math here, the action kind's layout there.

Each method is the arithmetic of the function it replaced (vtrace.py's, losses.py's and the
former gaussian.py's), moved unchanged: the learner's numbers do not move
(benchmarks/tools/update_numbers.py).

Continuous actions: a Gaussian policy's log-probability is of the UNCLIPPED sample, which is
what the trajectory stores; action_bounds.clip_to_bounds clips only the copy sent to the
environment (RLlib's `clip_actions` does the same). Its log standard deviation is STATE-
DEPENDENT and unbounded by default (RLlib's DiagGaussian with free_log_std=False, which the
IMPACT paper's code base ran; heads.GaussianPolicyHead), so the network's flat parameters
are [..., 2A], the means then the log standard deviations.
"""
import math

import tensorflow as tf

_HALF_LOG_2PI = 0.5 * math.log(2.0 * math.pi)
_HALF_LOG_2PI_E = 0.5 * math.log(2.0 * math.pi * math.e)

# LASER section 4.3: "For large or infinite action spaces a Monte Carlo estimate of the KL
# divergence can be computed." K = 32 samples from pi per step (a choice of this project,
# not the paper's): against numerical integration in one dimension, 200 seeds gave
# 0.048 +- 0.013 for a true 0.048 and 0.57 +- 0.12 for a true 0.59, i.e. a standard error of
# about a quarter of the divergence; the cost is K x T x B x A normal draws per update.
IMPLIED_KL_NUM_SAMPLES = 32


class Categorical:
  """softmax(logits) over N actions (IMPALA's policies).

  Attributes:
    logits: float32 [..., N], unnormalised log-probabilities.
  """

  discrete = True

  def __init__(self, logits):
    """Args:
      logits: float32 [..., N] (e.g. [T, B, N] when learning, [B, N] when acting).
    """
    self.logits = tf.convert_to_tensor(logits, tf.float32)

  @property
  def params(self):
    """float32 [..., N]: the flat parameters (the logits)."""
    return self.logits

  def __getitem__(self, key):
    """The distribution of params[key] (key indexes the leading dimensions, e.g. [:-1])."""
    return Categorical(self.logits[key])

  def stop_gradient(self):
    return Categorical(tf.stop_gradient(self.logits))

  def log_prob(self, actions):
    """log pi(a | x) of the taken actions.

    Args:
      actions: int32 [...], the leading shape of the logits.

    Returns:
      float32 [...].
    """
    actions = tf.convert_to_tensor(actions, dtype=tf.int32)
    if (actions.shape.rank is not None and self.logits.shape.rank is not None
        and actions.shape.rank != self.logits.shape.rank - 1):
      raise ValueError(f"actions has shape {actions.shape}, expected the logits' leading "
                       f"shape {self.logits.shape[:-1]} (discrete actions are int32 [...]).")
    return -tf.nn.sparse_softmax_cross_entropy_with_logits(logits=self.logits, labels=actions)

  def _sum_pi_log_pi(self):
    """sum_a pi log pi, float32 [...] (minus the entropy, as losses.entropy_loss sums it)."""
    log_policy = tf.nn.log_softmax(self.logits)
    return tf.reduce_sum(tf.exp(log_policy) * log_policy, -1)

  def entropy(self):
    """H(pi(.|x)) = -sum_a pi log pi, float32 [...]."""
    return -self._sum_pi_log_pi()

  def _kl_terms(self, other):
    log_p = tf.nn.log_softmax(self.logits)
    return tf.exp(log_p) * (log_p - tf.nn.log_softmax(other.logits))

  def kl(self, other):
    """KL(self || other) = sum_a p (log p - log q) at every step, float32 [...].

    Args:
      other: a Categorical of the same shape.
    """
    return tf.reduce_sum(self._kl_terms(other), -1)

  def total_kl(self, other):
    """sum over every step of KL(self || other), float32 scalar (one reduction over all
    steps and actions, as IMPACT's KL loss has always been summed)."""
    return tf.reduce_sum(self._kl_terms(other))

  def implied_policy_kl(self, behaviour, clip_rho_threshold=1.0, seed=None):
    """KL(pi || pi_rho_bar) at every step, pi = self: how far V-trace's fixed point is from pi.

    pi_rho_bar(a|x) = min(rho_bar mu(a|x), pi(a|x)) / sum_b min(rho_bar mu(b|x), pi(b|x)) is
    the policy whose value V-trace estimates (IMPALA Theorem 1; LASER equation 3,
    Proposition 1). LASER section 4.3 rejects a step when this divergence is large ("behaviour
    relevance function"). It depends on the states' policies only, not on the sampled actions
    (section 4.3: an action-based criterion would add bias). Computed in log space, so
    policies with tiny probabilities give finite values; exact (a sum over the N actions).

    Args:
      behaviour: Categorical [..., N], mu.
      clip_rho_threshold: rho_bar (V-trace's, 1 by default); None or inf: no truncation, so
        pi_rho_bar = pi and the divergence is 0.
      seed: unused (DiagGaussian's Monte-Carlo estimate takes one).

    Returns:
      float32 [...], >= 0, gradient-free (it selects data; it is not a loss).
    """
    del seed
    log_pi = tf.nn.log_softmax(tf.stop_gradient(self.logits))
    if clip_rho_threshold is None or math.isinf(clip_rho_threshold):
      return tf.zeros_like(log_pi[..., 0])
    log_mu = tf.nn.log_softmax(behaviour.logits)
    log_unnormalised = tf.minimum(math.log(clip_rho_threshold) + log_mu, log_pi)
    log_implied = log_unnormalised - tf.reduce_logsumexp(log_unnormalised, axis=-1,
                                                         keepdims=True)
    kl = tf.reduce_sum(tf.exp(log_pi) * (log_pi - log_implied), axis=-1)
    return tf.maximum(kl, 0.0)  # Rounding can give -1e-8 where pi_rho_bar = pi.

  def sample(self, seed):
    """Actions int32 [B] from logits [B, N] (TF, stateless, XLA-compilable).

    Args:
      seed: int32 [2], the stateless random seed.
    """
    return tf.random.stateless_categorical(self.logits, 1, seed=seed, dtype=tf.int32)[:, 0]

  def mode(self):
    """The most likely actions int32 [...] (a greedy policy): argmax of the logits."""
    return tf.argmax(self.logits, axis=-1, output_type=tf.int32)


class DiagGaussian:
  """pi(a|x) = prod_i N(a_i; m_i(x), s_i(x)^2) over A action dimensions (IMPACT paper, section
  4.3 and Appendix E, "We assume a diagonal Gaussian policy").

  Attributes:
    mean: float32 [..., A], the means m(x).
    log_std: float32 [..., A], the log standard deviations log s(x).
  """

  discrete = False

  def __init__(self, mean, log_std, mean_name="policy_mean", log_std_name="policy_log_std"):
    """Args:
      mean: float32 [..., A].
      log_std: float32 [..., A], the same shape (a state-independent log_std is broadcast by
        the policy head).
      mean_name, log_std_name: what error messages call them.
    """
    mean = tf.convert_to_tensor(mean, tf.float32)
    log_std = tf.convert_to_tensor(log_std, tf.float32)
    if mean.shape.rank is not None and mean.shape.rank < 1:
      raise ValueError(f"{mean_name} must have an action dimension [..., A], got a scalar.")
    if not mean.shape.is_compatible_with(log_std.shape):
      raise ValueError(f"{log_std_name} has shape {log_std.shape}, expected {mean.shape} like "
                       f"{mean_name} (a state-independent log_std is broadcast by the policy "
                       f"head, heads.GaussianPolicyHead).")
    self.mean, self.log_std = mean, log_std

  @classmethod
  def from_params(cls, params):
    """From flat parameters float32 [..., 2A]: the means, then the log standard deviations."""
    mean, log_std = tf.split(tf.convert_to_tensor(params, tf.float32), 2, axis=-1)
    return cls(mean, log_std)

  @property
  def params(self):
    """float32 [..., 2A]: the mean and log_std concatenated."""
    return tf.concat([self.mean, self.log_std], axis=-1)

  def __getitem__(self, key):
    return DiagGaussian(self.mean[key], self.log_std[key])

  def stop_gradient(self):
    return DiagGaussian(tf.stop_gradient(self.mean), tf.stop_gradient(self.log_std))

  def log_prob(self, actions):
    """log pi(a | x) of the taken actions, summed over the action dimensions:

    log pi(a|x) = sum_i [-0.5 ((a_i - m_i) / s_i)^2 - log s_i - 0.5 log(2 pi)].

    Args:
      actions: float32 [..., A], the actions taken (unclipped samples).

    Returns:
      float32 [...].
    """
    actions = tf.convert_to_tensor(actions, tf.float32)
    if not actions.shape.is_compatible_with(self.mean.shape):
      raise ValueError(f"actions has shape {actions.shape}, expected {self.mean.shape} like "
                       f"policy_mean (continuous actions are float32 [..., A]).")
    standardised = (actions - self.mean) * tf.exp(-self.log_std)
    return -tf.reduce_sum(0.5 * tf.square(standardised) + self.log_std + _HALF_LOG_2PI,
                          axis=-1)

  def entropy(self):
    """H(pi(.|x)) = sum_i (log s_i + 0.5 log(2 pi e)) (the mean does not matter), float32
    [...]."""
    return tf.reduce_sum(self.log_std + _HALF_LOG_2PI_E, axis=-1)

  def kl(self, other):
    """KL(self || other) between diagonal Gaussians at every step, in closed form:

    sum_i [log(s_q,i / s_p,i) + (s_p,i^2 + (m_p,i - m_q,i)^2) / (2 s_q,i^2) - 1/2].

    Args:
      other: a DiagGaussian of the same shape (gradients flow through both).

    Returns:
      float32 [...], >= 0.
    """
    if not self.mean.shape.is_compatible_with(other.mean.shape):
      raise ValueError(f"q_mean has shape {other.mean.shape}, expected {self.mean.shape} like "
                       f"p_mean.")
    p_mean, p_log_std, q_mean, q_log_std = self.mean, self.log_std, other.mean, other.log_std
    variance_ratio = tf.exp(2.0 * (p_log_std - q_log_std))
    standardised_gap = (p_mean - q_mean) * tf.exp(-q_log_std)
    return tf.reduce_sum(
        q_log_std - p_log_std + 0.5 * (variance_ratio + tf.square(standardised_gap)) - 0.5,
        axis=-1)

  def total_kl(self, other):
    """sum over every step of KL(self || other), float32 scalar."""
    return tf.reduce_sum(self.kl(other))

  def implied_policy_kl(self, behaviour, clip_rho_threshold=1.0,
                        num_samples=IMPLIED_KL_NUM_SAMPLES, seed=(0, 0)):
    """KL(pi || pi_rho_bar) at every step, pi = self, estimated by Monte Carlo for LASER's
    trust region (LASER section 4.3).

    pi_rho_bar(a|x) = min(rho_bar mu(a|x), pi(a|x)) / Z, Z = E_pi[min(1, rho_bar mu / pi)]
    (IMPALA Theorem 1; LASER equation 3). With e(a) = max(0, log pi(a) - log mu(a) - log
    rho_bar),
        log(pi / pi_rho_bar) = e(a) + log Z,   Z = E_pi[exp(-e(a))],
    so KL = E_pi[e] + log E_pi[exp(-e)], both expectations over the same K samples a ~ pi
    (section 4.3: "a Monte Carlo estimate of the KL divergence"). The estimate is >= 0 by
    Jensen, exactly 0 where pi = mu (rho_bar >= 1), and consistent as K grows. It depends on
    the states' policies only, not on the actions taken (section 4.3).

    Args:
      behaviour: DiagGaussian [..., A], mu.
      clip_rho_threshold: rho_bar (V-trace's, 1 by default); None or inf: pi_rho_bar = pi, 0.
      num_samples: K, samples from pi per step.
      seed: int32 [2], the stateless random seed of the samples (same seed, same estimate).

    Returns:
      float32 [...], >= 0, gradient-free (it selects data; it is not a loss).
    """
    mu_mean, mu_log_std = tf.nest.map_structure(
        tf.stop_gradient, (behaviour.mean, behaviour.log_std))
    pi_mean, pi_log_std = tf.nest.map_structure(tf.stop_gradient, (self.mean, self.log_std))
    if not mu_mean.shape.is_compatible_with(pi_mean.shape):
      raise ValueError(f"target_policy_mean has shape {pi_mean.shape}, expected "
                       f"{mu_mean.shape} like behaviour_policy_mean.")
    if clip_rho_threshold is None or math.isinf(clip_rho_threshold):
      return tf.zeros_like(pi_mean[..., 0])
    if num_samples < 1:
      raise ValueError(f"num_samples must be >= 1, got {num_samples}.")
    noise = tf.random.stateless_normal(
        tf.concat([[num_samples], tf.shape(pi_mean)], 0), seed=seed)  # [K, ..., A]
    samples = pi_mean + tf.exp(pi_log_std) * noise
    # log pi(a) - log mu(a) (the 0.5 log(2 pi) terms cancel), both by the same ops, so that
    # pi = mu gives exactly 0.
    log_density = lambda mean, log_std: -tf.reduce_sum(
        0.5 * tf.square((samples - mean) * tf.exp(-log_std)) + log_std, axis=-1)
    log_pi = log_density(pi_mean, pi_log_std)
    log_mu = log_density(mu_mean, mu_log_std)
    excess = tf.nn.relu(log_pi - log_mu - math.log(clip_rho_threshold))  # [K, ...]
    log_normaliser = (tf.reduce_logsumexp(-excess, axis=0)
                      - tf.math.log(tf.cast(num_samples, tf.float32)))
    return tf.maximum(tf.reduce_mean(excess, axis=0) + log_normaliser, 0.0)

  def sample(self, seed):
    """a = m + s * eps, eps ~ N(0, I): UNCLIPPED actions float32 [..., A] (TF, stateless,
    XLA-compilable). Clip only the copy sent to the environment.

    Args:
      seed: int32 [2], the stateless random seed.
    """
    return self.mean + tf.exp(self.log_std) * tf.random.stateless_normal(
        tf.shape(self.mean), seed=seed)

  def mode(self):
    """The most likely actions float32 [..., A] (a greedy policy): the means, unclipped."""
    return self.mean


class MultiCategorical:
  """prod_k softmax(logits_k) over K independent categorical components of nvec[k] actions
  each (gymnasium's MultiDiscrete(nvec) action spaces; SEED RL's
  multi_categorical_distribution): the log-probability, entropy and KL are the components'
  sums.

  Attributes:
    logits: float32 [..., sum(nvec)], the components' logits one after another.
    nvec: the components' numbers of actions, a tuple of K ints.
  """

  discrete = True

  def __init__(self, logits, nvec):
    """Args:
      logits: float32 [..., sum(nvec)].
      nvec: K positive ints.
    """
    self.logits = tf.convert_to_tensor(logits, tf.float32)
    self.nvec = tuple(int(n) for n in nvec)

  @property
  def params(self):
    """float32 [..., sum(nvec)]: the flat parameters (the logits)."""
    return self.logits

  def components(self):
    """The K Categorical components, [..., nvec[k]] each."""
    return [Categorical(logits) for logits in tf.split(self.logits, self.nvec, axis=-1)]

  def __getitem__(self, key):
    return MultiCategorical(self.logits[key], self.nvec)

  def stop_gradient(self):
    return MultiCategorical(tf.stop_gradient(self.logits), self.nvec)

  def log_prob(self, actions):
    """log pi(a | x) = sum_k log pi_k(a_k | x) of the taken actions.

    Args:
      actions: int32 [..., K], one index per component.

    Returns:
      float32 [...].
    """
    actions = tf.convert_to_tensor(actions, dtype=tf.int32)
    if actions.shape.rank is not None and actions.shape[-1] != len(self.nvec):
      raise ValueError(f"actions has shape {actions.shape}, expected [..., {len(self.nvec)}] "
                       f"(one index per component of nvec {self.nvec}).")
    return tf.add_n([component.log_prob(actions[..., k])
                     for k, component in enumerate(self.components())])

  def entropy(self):
    """H(pi(.|x)) = sum_k H(pi_k(.|x)), float32 [...]."""
    return tf.add_n([component.entropy() for component in self.components()])

  def kl(self, other):
    """KL(self || other) = sum_k KL(self_k || other_k) at every step, float32 [...].

    Args:
      other: a MultiCategorical of the same nvec.
    """
    return tf.add_n([mine.kl(theirs)
                     for mine, theirs in zip(self.components(), other.components())])

  def total_kl(self, other):
    """sum over every step of KL(self || other), float32 scalar."""
    return tf.reduce_sum(self.kl(other))

  def _joint_log_probs(self):
    """log pi(a | x) of every joint action, float32 [..., prod(nvec)] (row-major in a)."""
    joint = None
    for component in self.components():
      log_policy = tf.nn.log_softmax(component.logits)  # [..., nvec[k]]
      if joint is None:
        joint = log_policy
      else:
        pairs = joint[..., :, tf.newaxis] + log_policy[..., tf.newaxis, :]  # [..., J, nvec[k]]
        joint = tf.reshape(pairs, tf.concat([tf.shape(pairs)[:-2], [-1]], 0))
    return joint

  def implied_policy_kl(self, behaviour, clip_rho_threshold=1.0, seed=None):
    """KL(pi || pi_rho_bar) at every step (Categorical.implied_policy_kl's, LASER section 4.3),
    exact over the prod(nvec) joint actions: min(rho_bar mu, pi) does not factor over the
    components, so the joint distributions are enumerated (cost and memory prod(nvec) per
    step).

    Args:
      behaviour: MultiCategorical of the same nvec, mu.
      clip_rho_threshold: rho_bar; None or inf: 0.
      seed: unused (the divergence is exact).

    Returns:
      float32 [...], >= 0, gradient-free.
    """
    return Categorical(self._joint_log_probs()).implied_policy_kl(
        Categorical(behaviour._joint_log_probs()), clip_rho_threshold, seed)  # pylint: disable=protected-access

  def sample(self, seed):
    """Actions int32 [B, K] from logits [B, sum(nvec)], each component drawn with its own
    stateless seed derived from `seed` (TF, XLA-compilable)."""
    seeds = tf.random.experimental.stateless_split(seed, len(self.nvec))
    return tf.stack([component.sample(seeds[k])
                     for k, component in enumerate(self.components())], axis=-1)

  def mode(self):
    """The most likely actions int32 [..., K] (a greedy policy): each component's argmax."""
    return tf.stack([component.mode() for component in self.components()], axis=-1)
