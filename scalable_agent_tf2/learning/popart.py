"""PopArt: V-trace's targets learned in a normalised scale (Hessel et al., 2019, "Multi-task
Deep Reinforcement Learning with PopArt", the IMPALA follow-up; van Hasselt et al., 2016).

Why: IMPALA's losses carry the scale of the returns. A task paying -1 per step for 500 steps
has values near -100, a baseline loss in the thousands and gradients whose global norm (2e4
measured) the clip of 40 cuts to almost nothing, policy gradient included; a task
paying 1 once an episode has gradients so small that RMSProp's epsilon swamps them. Atari's
reward clipping (Table G.1) fixes the scale by changing the task; PopArt keeps the task and
learns the values in a scale of its own:

    V(x) = sigma * n(x) + mu          n: the network's baseline output (its last linear layer)

mu and sigma are running estimates of the mean and standard deviation of the V-trace targets
v_s (Hessel et al. section 3: "PopArt ... normalised using the statistics of the targets").
The losses are taken in the normalised scale (section 3.2, eq. 6-8):

    baseline:       (1/2) ((v_s - mu) / sigma - n(x_s))^2 = (1/2) ((v_s - V(x_s)) / sigma)^2
    policy gradient: rho_s (r_s + gamma v_{s+1} - V(x_s)) / sigma * grad log pi(a_s|x_s)

so the summed losses of losses.py are divided by sigma^2 and sigma (`scale_loss_terms`).
After each update the statistics move towards the batch's targets and the last layer is
rescaled so that V(x) does not change ("Preserving Outputs Precisely", van Hasselt et al.
2016, Algorithm 1; Hessel et al. eq. 4-5): w' = w sigma / sigma', b' = (sigma b + mu - mu') /
sigma'.

One set of statistics per run (a single task). Hessel et al. keep one per task of a suite,
which needs each trajectory's task in the batch; this project does not carry it there yet, so
config.py refuses --popart on a suite.

IMPACT (learning/impact.py) takes it the same way: its GAE V-trace targets and advantages are
linear in the rewards and values, and its clipped surrogate is positively homogeneous in the
advantages, so the surrogate divided by sigma is the surrogate of the normalised advantages;
its KL term, like the entropy term, keeps its scale. The target network's value layer is never
read (only its policy is), so it needs no rescaling.

Step size and bounds: beta = 3e-4 (Hessel et al.'s hyperparameter table, "PopArt step size")
and sigma clipped to [1e-4, 1e6] (the bounds rlax's popart_update takes from the paper). The moments are bias-corrected as Adam's are
(Kingma and Ba, 2015, section 3): the statistics start at mu = 0, nu = 1 (sigma 1, the
identity), and an uncorrected exponential average with beta = 3e-4 would take ~3,000 updates
(about 2M steps at a batch of 640) to leave them, longer than a short run on a new
environment lasts; corrected, the first update's targets set the scale, and the average is of
all targets so far until 1/beta updates have passed.
"""
import collections

import numpy as np
import tensorflow as tf

STEP_SIZE = 3e-4             # Hessel et al. 2019, hyperparameters: PopArt step size beta.
SIGMA_BOUNDS = (1e-4, 1e6)   # The scale's clipping (Hessel et al. 2019; rlax).

Statistics = collections.namedtuple("Statistics", "mu nu")


def sigma_of(mu, nu, bounds=SIGMA_BOUNDS):
  """The standard deviation sqrt(nu - mu^2), clipped to bounds (works on numpy and TF)."""
  low, high = bounds
  variance = nu - mu * mu
  if isinstance(variance, (tf.Tensor, tf.Variable)):
    return tf.sqrt(tf.clip_by_value(variance, low * low, high * high))
  return np.sqrt(np.clip(variance, low * low, high * high))


def updated_moments(mu_hat, nu_hat, count, target_mean, target_mean_square,
                    step_size=STEP_SIZE):
  """Bias-corrected exponential moments after one more batch (module docstring).

  Args:
    mu_hat, nu_hat: the uncorrected averages of the targets and of their squares so far (0
      before the first batch). count: batches averaged so far.
    target_mean, target_mean_square: this batch's mean of v_s and of v_s^2.
    step_size: beta.

  Returns:
    (mu_hat', nu_hat', count', Statistics(mu, nu) corrected: the moments to normalise with).
  """
  mu_hat = (1.0 - step_size) * mu_hat + step_size * target_mean
  nu_hat = (1.0 - step_size) * nu_hat + step_size * target_mean_square
  count = count + 1
  correction = 1.0 - (1.0 - step_size) ** count
  return mu_hat, nu_hat, count, Statistics(mu=mu_hat / correction, nu=nu_hat / correction)


def preserved_layer(w, b, mu, sigma, new_mu, new_sigma):
  """The last linear layer (w [H, 1], b [1]) that gives the same V(x) = sigma n(x) + mu under
  the new statistics (van Hasselt et al. 2016, Algorithm 1)."""
  return w * (sigma / new_sigma), (sigma * b + mu - new_mu) / new_sigma


def unnormalized(n, mu, sigma):
  """V(x) = sigma n(x) + mu, n(x) the network's normalised baseline."""
  return sigma * n + mu


def scale_loss_terms(terms, sigma, scale_pg=True):
  """The loss terms (losses.py), computed on unnormalised values, in PopArt's normalised scale: the
  policy gradient's advantages divided by sigma (unless scale_pg is False: advantages already
  standardised per batch, losses.standardized_advantages), the baseline's error by sigma (its
  square by sigma^2) (module docstring). The entropy term keeps its scale."""
  terms = dict(terms)
  if scale_pg:
    terms["pg_loss"] = terms["pg_loss"] / sigma
  terms["baseline_loss"] = terms["baseline_loss"] / (sigma * sigma)
  return terms


def masked_moments(targets, mask):
  """Mean of targets [T, B] and of their squares over the steps mask [T, B] keeps."""
  count = tf.maximum(tf.reduce_sum(mask), tf.ones([], mask.dtype))
  return (tf.reduce_sum(targets * mask) / count,
          tf.reduce_sum(tf.square(targets) * mask) / count)


class PopArt(tf.Module):
  """The run's statistics (checkpointed with the learner) and the output layer they rescale.

  The layer is the agent's `baseline` (a layers.Linear: `w` [H, 1],
  `b` [1]); its output is n(x), which the actors' AgentOutput.baseline also carries.
  """

  def __init__(self, baseline_layer, step_size=STEP_SIZE, name="popart"):
    super().__init__(name=name)
    self.layer = baseline_layer
    self.step_size = step_size
    with self.name_scope:
      # float64: 1 - (1 - beta)^n in float32 is off by 2e-4 of itself at beta = 3e-4.
      self.mu_hat = tf.Variable(0.0, dtype=tf.float64, trainable=False, name="mu_hat")
      self.nu_hat = tf.Variable(0.0, dtype=tf.float64, trainable=False, name="nu_hat")
      self.count = tf.Variable(0.0, dtype=tf.float64, trainable=False, name="count")
      # The corrected statistics in use (mu 0, nu 1 before the first batch: the identity).
      self.mu = tf.Variable(0.0, trainable=False, name="mu")
      self.nu = tf.Variable(1.0, trainable=False, name="nu")

  @property
  def sigma(self):
    return sigma_of(self.mu, self.nu)

  def values(self, normalized_baseline):
    """V(x) of the network's normalised baseline output."""
    return unnormalized(normalized_baseline, self.mu, self.sigma)

  def update(self, targets, mask):
    """Moves the statistics towards this batch's targets v_s [T, B] (over mask [T, B]) and
    rescales the layer so that V(x) is unchanged. Call after the gradient step."""
    mean, mean_square = masked_moments(tf.cast(targets, tf.float64),
                                       tf.cast(mask, tf.float64))
    mu_hat, nu_hat, count, new = updated_moments(self.mu_hat, self.nu_hat, self.count, mean,
                                                 mean_square, self.step_size)
    new = Statistics(mu=tf.cast(new.mu, tf.float32), nu=tf.cast(new.nu, tf.float32))
    sigma, new_sigma = self.sigma, sigma_of(new.mu, new.nu)
    w, b = preserved_layer(self.layer.w, self.layer.b, self.mu, sigma, new.mu, new_sigma)
    self.layer.w.assign(w)
    self.layer.b.assign(b)
    self.mu_hat.assign(mu_hat)
    self.nu_hat.assign(nu_hat)
    self.count.assign(count)
    self.mu.assign(new.mu)
    self.nu.assign(new.nu)
    return self.statistics()

  def statistics(self):
    """The update's record of the statistics in use (log.jsonl, TensorBoard)."""
    return dict(popart_mu=self.mu.read_value(), popart_sigma=self.sigma)
