"""The policy's action distributions, after SEED RL's parametric distributions (Espeholt et
al. 2020, seed_rl/common/parametric_distribution.py): one learner, one V-trace and one set of
losses for every kind of action.

A FAMILY is what an action kind is to the rest of the agent: `CategoricalFamily(num_actions)`
(IMPALA's discrete actions), `DiagGaussianFamily(action_size)` (the IMPACT paper's continuous
control, section 4.3), `MultiCategoricalFamily(nvec)` (gymnasium's MultiDiscrete); `for_spec`
gives an environment's, and a network config holds one as `action_distribution`. It knows the
size P of the network's flat parameters [..., P] (`param_size`: what the policy head outputs
and structures.AgentOutput.policy_params carries), the action spec (`action_dtype`,
`action_shape`), how the network reads a previous action (`action_features`, Figure 3's one-hot
for discrete actions), the settings that fix the action tensors' shapes (`layout`: checkpoints
and the wire compare them) and the actors' numpy sampling (`sample_rows`, `sample_numpy`: one
generator per environment, so which other actors share a forward pass never changes an
environment's actions). A family is a value (equal, hashable, printed by its one field).

Calling a family on parameters gives its DISTRIBUTION, the learner's math (`Categorical(logits)`,
`DiagGaussian(mean, log_std)`, `MultiCategorical(logits, nvec)`): tensors [..., P] of any
leading shape ([T, B] when learning, [B] when acting) with `log_prob(actions)`, `entropy()`,
`kl(other)`, `total_kl(other)`, `implied_policy_kl(behaviour, ...)` (LASER's trust region,
section 4.3), `sample(seed)` (TF, stateless) and `mode()`; `[key]` slices the leading dimensions
and `stop_gradient()` detaches it. Adding an action kind is a distribution and a family here and
its branch in `for_spec`.

A Gaussian policy's log-probability is of the UNCLIPPED sample, which the trajectory stores;
action_bounds.clip_to_bounds clips only the environment's copy (RLlib's `clip_actions`). Its
log_std is state-dependent by default (RLlib's free_log_std=False, which the IMPACT paper's
code base ran; heads.GaussianPolicyHead): flat parameters [..., 2A], the means then log_std.
"""
import math

import numpy as np
import tensorflow as tf

_HALF_LOG_2PI = 0.5 * math.log(2.0 * math.pi)
_HALF_LOG_2PI_E = 0.5 * math.log(2.0 * math.pi * math.e)

# LASER section 4.3: "For large or infinite action spaces a Monte Carlo estimate of the KL
# divergence can be computed." K = 32 samples from pi per step (a choice of this project,
# not the paper's): against numerical integration in one dimension, 200 seeds gave
# 0.048 +- 0.013 for a true 0.048 and 0.57 +- 0.12 for a true 0.59, i.e. a standard error of
# about a quarter of the divergence; the cost is K x T x B x A normal draws per update.
IMPLIED_KL_NUM_SAMPLES = 32


# The families: an action kind's shapes, previous-action features and numpy sampling.


class _Family:
  """A family is a value: equal, hashable and printed by its one defining field (`_FIELD`)."""

  _FIELD = ""

  def __repr__(self):
    return f"{type(self).__name__}({self._FIELD}={getattr(self, self._FIELD)})"

  def __eq__(self, other):
    return type(other) is type(self) and getattr(other, self._FIELD) == getattr(
        self, self._FIELD)

  def __hash__(self):
    return hash((type(self), getattr(self, self._FIELD)))

  def layout(self):
    """What fixes the action tensors' shapes (checkpoint and wire settings)."""
    value = getattr(self, self._FIELD)
    return {self._FIELD: list(value) if isinstance(value, tuple) else value}

  def of_outputs(self, outputs):
    """The policy of an output record (structures.AgentOutput or networks.NetworkOutput):
    the distribution of its policy_params [..., P]."""
    return self(outputs.policy_params)

  @property
  def action_feature_size(self):
    """The length of action_features' rows: P for discrete actions (their one-hots)."""
    return self.param_size

  def sample_rows(self, params, rngs):
    """One action per row of numpy params [G, P], row g drawn with rngs[g] (numpy
    Generators): a row's draws do not depend on the group's other rows."""
    return np.stack([self.sample_numpy(row, rng) for row, rng in zip(params, rngs)])


class CategoricalFamily(_Family):
  """Categorical policies over num_actions actions N: parameters [..., N] (the logits), actions
  int32 [] (one index)."""

  _FIELD = "num_actions"
  discrete = True
  action_dtype = np.dtype(np.int32)
  action_shape = ()

  def __init__(self, num_actions):
    self.num_actions = num_actions

  @property
  def param_size(self):
    return self.num_actions

  def __call__(self, params):
    return Categorical(params)

  def action_features(self, actions):
    """A previous action as the network reads it (Figure 3): int [N'] -> one-hot float32
    [N', N]."""
    return tf.one_hot(tf.cast(actions, tf.int32), self.num_actions)

  def sample_rows(self, params, rngs):
    """int32 [G]: the Gumbel-max trick on each row of logits [G, N], row g with rngs[g]."""
    params = np.asarray(params)
    noise = np.stack([rng.gumbel(size=params.shape[1:]) for rng in rngs])
    return np.argmax(params + noise, axis=-1).astype(np.int32)

  def sample_numpy(self, params, rng):
    """One action from logits [N] with rng (sample_rows of one row): an int."""
    params = np.asarray(params)
    return int(np.argmax(params + rng.gumbel(size=params.shape)))


class DiagGaussianFamily(_Family):
  """Diagonal Gaussian policies over action_size A real dimensions: parameters [..., 2A] (means
  then log standard deviations), actions float32 [A] (unclipped samples)."""

  _FIELD = "action_size"
  discrete = False
  action_dtype = np.dtype(np.float32)

  def __init__(self, action_size):
    self.action_size = action_size

  @property
  def param_size(self):
    return 2 * self.action_size

  @property
  def action_shape(self):
    return (self.action_size,)

  def __call__(self, params):
    return DiagGaussian.from_params(params)

  @property
  def action_feature_size(self):
    return self.action_size

  def action_features(self, actions):
    """A previous action as a network that reads it would: the (unclipped) sample itself,
    float [N', A] -> float32 [N', A]."""
    return tf.cast(actions, tf.float32)

  def split_numpy(self, params):
    """(mean, log_std) float32 [..., A] of numpy parameters [..., 2A]."""
    params = np.asarray(params, np.float32)
    if params.shape[-1] != 2 * self.action_size:
      raise ValueError(f"Gaussian policy parameters of shape {params.shape}; expected "
                       f"[..., {2 * self.action_size}] (mean and log_std of "
                       f"{self.action_size} action dimensions).")
    return params[..., :self.action_size], params[..., self.action_size:]

  def sample_numpy(self, params, rng):
    """DiagGaussian.sample's numpy counterpart: an unclipped sample float32 [A] (or [..., A])
    of N(mean, exp(log_std)^2) from parameters [2A] (or [..., 2A]) with rng."""
    mean, log_std = self.split_numpy(params)
    noise = rng.standard_normal(mean.shape, dtype=np.float32)
    return (mean + np.exp(log_std) * noise).astype(np.float32)


class MultiCategoricalFamily(_Family):
  """MultiCategorical policies over nvec: parameters [..., sum(nvec)] (each component's
  logits), actions int32 [K] (one index per component)."""

  _FIELD = "nvec"
  discrete = True
  action_dtype = np.dtype(np.int32)

  def __init__(self, nvec):
    """nvec: K positive ints, the components' numbers of actions."""
    self.nvec = tuple(int(n) for n in nvec)
    if not self.nvec or min(self.nvec) < 1:
      raise ValueError(f"nvec must be positive numbers of actions, got {nvec}.")

  @property
  def param_size(self):
    return sum(self.nvec)

  @property
  def action_shape(self):
    return (len(self.nvec),)

  def __call__(self, params):
    return MultiCategorical(params, self.nvec)

  def action_features(self, actions):
    """A previous action as the network reads it: int [N', K] -> the components' one-hots
    concatenated, float32 [N', sum(nvec)]."""
    actions = tf.cast(actions, tf.int32)
    return tf.concat([tf.one_hot(actions[..., k], n) for k, n in enumerate(self.nvec)], -1)

  def sample_numpy(self, params, rng):
    """One action int32 [K] from parameters [sum(nvec)] with rng (each component by the
    Gumbel-max trick, CategoricalFamily's)."""
    params = np.asarray(params)
    bounds = np.cumsum((0,) + self.nvec)
    return np.array([np.argmax(params[start:end] + rng.gumbel(size=end - start))
                     for start, end in zip(bounds[:-1], bounds[1:])], np.int32)


def for_spec(spec):
  """The family of an environment's spec: categorical over an EnvSpec's num_actions (IMPALA),
  diagonal Gaussian over a ContinuousEnvSpec's action_size (IMPACT section 4.3),
  multi-categorical over a MultiDiscreteEnvSpec's nvec. The spec is read by its fields, not its
  class, as every spec is a plain record (environments/base.py)."""
  if hasattr(spec, "action_size"):
    return DiagGaussianFamily(spec.action_size)
  if hasattr(spec, "nvec"):
    return MultiCategoricalFamily(spec.nvec)
  return CategoricalFamily(spec.num_actions)


# The distributions: the learner's math, as TF objects.


class Categorical:
  """softmax(logits) over N actions (IMPALA's policies). logits: float32 [..., N]."""

  discrete = True

  def __init__(self, logits):
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

  def actions_shape(self):
    """The shape of the actions log_prob takes: the logits' leading shape [...]."""
    return self.logits.shape[:-1]

  def log_prob(self, actions):
    """log pi(a | x) float32 [...] of the taken actions int32 [...]."""
    return -tf.nn.sparse_softmax_cross_entropy_with_logits(
        logits=self.logits, labels=tf.convert_to_tensor(actions, dtype=tf.int32))

  def entropy(self):
    """H(pi(.|x)) = -sum_a pi log pi, float32 [...]."""
    log_policy = tf.nn.log_softmax(self.logits)
    return -tf.reduce_sum(tf.exp(log_policy) * log_policy, -1)

  def _kl_terms(self, other):
    log_p = tf.nn.log_softmax(self.logits)
    return tf.exp(log_p) * (log_p - tf.nn.log_softmax(other.logits))

  def kl(self, other):
    """KL(self || other) = sum_a p (log p - log q) at every step, float32 [...] (other: a
    Categorical of the same shape)."""
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
    behaviour: a Categorical [..., N], mu; clip_rho_threshold: rho_bar (V-trace's), None or
    inf: no truncation, so pi_rho_bar = pi and the divergence is 0; seed: unused
    (DiagGaussian's Monte-Carlo estimate takes one). Returns float32 [...] >= 0, gradient-free
    (it selects data; it is not a loss)."""
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
    """Actions int32 [B] from logits [B, N] with the stateless seed int32 [2] (XLA-compiles)."""
    return tf.random.stateless_categorical(self.logits, 1, seed=seed, dtype=tf.int32)[:, 0]

  def mode(self):
    """The most likely actions int32 [...] (a greedy policy): argmax of the logits."""
    return tf.argmax(self.logits, axis=-1, output_type=tf.int32)


class DiagGaussian:
  """pi(a|x) = prod_i N(a_i; m_i(x), s_i(x)^2) over A action dimensions (IMPACT paper, section
  4.3 and Appendix E, "We assume a diagonal Gaussian policy"): the means m(x) and the log
  standard deviations log s(x), float32 [..., A] each (a state-independent log_std is
  broadcast by the policy head, heads.GaussianPolicyHead)."""

  discrete = False

  def __init__(self, mean, log_std):
    mean = tf.convert_to_tensor(mean, tf.float32)
    log_std = tf.convert_to_tensor(log_std, tf.float32)
    if mean.shape.rank == 0 or not mean.shape.is_compatible_with(log_std.shape):
      raise ValueError(f"policy_log_std has shape {log_std.shape}, expected {mean.shape} like "
                       f"policy_mean (both [..., A]).")
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

  def actions_shape(self):
    """The shape of the actions log_prob takes: the means' [..., A]."""
    return self.mean.shape

  def log_prob(self, actions):
    """log pi(a | x) float32 [...] of the taken actions float32 [..., A] (unclipped samples),
    sum_i [-0.5 ((a_i - m_i) / s_i)^2 - log s_i - 0.5 log(2 pi)]."""
    actions = tf.convert_to_tensor(actions, tf.float32)
    standardised = (actions - self.mean) * tf.exp(-self.log_std)
    return -tf.reduce_sum(0.5 * tf.square(standardised) + self.log_std + _HALF_LOG_2PI,
                          axis=-1)

  def entropy(self):
    """H(pi(.|x)) = sum_i (log s_i + 0.5 log(2 pi e)) (the mean does not matter), float32
    [...]."""
    return tf.reduce_sum(self.log_std + _HALF_LOG_2PI_E, axis=-1)

  def kl(self, other):
    """KL(self || other) >= 0 between diagonal Gaussians of the same shape at every step,
    float32 [...], in closed form (gradients flow through both):
    sum_i [log(s_q,i / s_p,i) + (s_p,i^2 + (m_p,i - m_q,i)^2) / (2 s_q,i^2) - 1/2]."""
    p_mean, p_log_std, q_mean, q_log_std = self.mean, self.log_std, other.mean, other.log_std
    variance_ratio = tf.exp(2.0 * (p_log_std - q_log_std))
    standardised_gap = (p_mean - q_mean) * tf.exp(-q_log_std)
    return tf.reduce_sum(
        q_log_std - p_log_std + 0.5 * (variance_ratio + tf.square(standardised_gap)) - 0.5,
        axis=-1)

  def total_kl(self, other):
    return tf.reduce_sum(self.kl(other))  # Over every step: float32 scalar.

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
    the states' policies only, not on the actions taken (section 4.3). behaviour: a
    DiagGaussian [..., A], mu; clip_rho_threshold as Categorical's; num_samples: K; seed: int32
    [2], the samples' stateless seed (same seed, same estimate). Returns float32 [...] >= 0,
    gradient-free."""
    mu_mean, mu_log_std = tf.nest.map_structure(
        tf.stop_gradient, (behaviour.mean, behaviour.log_std))
    pi_mean, pi_log_std = tf.nest.map_structure(tf.stop_gradient, (self.mean, self.log_std))
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
    """a = m + s * eps, eps ~ N(0, I): UNCLIPPED actions float32 [..., A] with the stateless
    seed int32 [2] (XLA-compiles). Clip only the copy sent to the environment."""
    return self.mean + tf.exp(self.log_std) * tf.random.stateless_normal(
        tf.shape(self.mean), seed=seed)

  def mode(self):
    """The most likely actions float32 [..., A] (a greedy policy): the means, unclipped."""
    return self.mean


class MultiCategorical:
  """prod_k softmax(logits_k) over K independent categorical components of nvec[k] actions
  each (gymnasium's MultiDiscrete(nvec) action spaces; SEED RL's
  multi_categorical_distribution): the log-probability, entropy and KL are the components'
  sums. logits: float32 [..., sum(nvec)], the components' one after another; nvec: K ints.
  """

  discrete = True

  def __init__(self, logits, nvec):
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

  def actions_shape(self):
    """The shape of the actions log_prob takes: [..., K], one index per component."""
    return self.logits.shape[:-1].concatenate([len(self.nvec)])

  def log_prob(self, actions):
    """log pi(a | x) = sum_k log pi_k(a_k | x) float32 [...] of the taken actions int32
    [..., K]."""
    actions = tf.convert_to_tensor(actions, dtype=tf.int32)
    return tf.add_n([component.log_prob(actions[..., k])
                     for k, component in enumerate(self.components())])

  def entropy(self):
    """H(pi(.|x)) = sum_k H(pi_k(.|x)), float32 [...]."""
    return tf.add_n([component.entropy() for component in self.components()])

  def kl(self, other):
    """KL(self || other) = sum_k KL(self_k || other_k) at every step, float32 [...] (other: a
    MultiCategorical of the same nvec)."""
    return tf.add_n([mine.kl(theirs)
                     for mine, theirs in zip(self.components(), other.components())])

  def total_kl(self, other):
    return tf.reduce_sum(self.kl(other))  # Over every step: float32 scalar.

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
    step). behaviour: a MultiCategorical of the same nvec, mu; seed: unused (exact).
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
