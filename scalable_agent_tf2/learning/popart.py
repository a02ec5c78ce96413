"""PopArt: V-trace's targets learned in a normalised scale, one scale per task (Hessel et al.,
2019, "Multi-task Deep Reinforcement Learning with PopArt", the IMPALA follow-up; van Hasselt
et al., 2016).

Why: IMPALA's losses carry the scale of the returns. A task paying -1 per step for 500 steps
has values near -100, a baseline loss in the thousands and gradients whose global norm (2e4
measured) the clip of 40 cuts to almost nothing, policy gradient included; a task
paying 1 once an episode has gradients so small that RMSProp's epsilon swamps them. Atari's
reward clipping (Table G.1) fixes the scale by changing the task; PopArt keeps the task and
learns the values in a scale of its own. In a suite the scales differ between tasks by orders
of magnitude (Atari-57 unclipped), and one scale for all lets the large tasks take the
gradient: Hessel et al. keep one pair of statistics per task i and one normalised output per
task (the value head has N outputs; the policy is shared), and a trajectory of task i reads
output i:

    V_i(x) = sigma_i * n_i(x) + mu_i      n_i: output i of the network's last linear layer

mu_i and sigma_i are running estimates of the mean and standard deviation of task i's V-trace
targets v_s, updated from task i's targets only. The losses are taken in the trajectory's
task's normalised scale:

    baseline:        (1/2) ((v_s - mu_i) / sigma_i - n_i(x_s))^2 = (1/2) ((v_s - V_i(x_s)) / sigma_i)^2
    policy gradient: rho_s ((r_s + gamma v_{s+1} - mu_i) / sigma_i - n_i(x_s)) grad log pi(a_s|x_s)
                   = rho_s (r_s + gamma v_{s+1} - V_i(x_s)) / sigma_i grad log pi(a_s|x_s)

With one task the summed losses of losses.py are divided by sigma^2 and sigma
(`scale_loss_terms`); with several, each trajectory's errors are divided by its task's sigma
before the sums (`PopArt.scale`, losses.py's value_scale). After each update the statistics move towards the
batch's targets and each task's column of the last layer is rescaled so that V_i(x) does not
change ("Preserving Outputs Precisely", van Hasselt et al. 2016, Algorithm 1, per output):
w'_i = w_i sigma_i / sigma'_i, b'_i = (sigma_i b_i + mu_i - mu'_i) / sigma'_i.

A batch's targets of one task: Hessel et al. ("Implementation notes") average each rollout's
targets and make one update of the statistics per rollout. Here each task present in the batch
makes one update per batch, towards the mean of all its trajectories' kept targets (and of
their squares): the same as the paper's whenever a batch holds at most one rollout of a task
(Atari-57 or DMLab-30 at the paper's batch sizes, mostly), and with a single task the
update of the released single-task PopArt exactly. Where a batch holds k rollouts of a task
the paper's rule moves its statistics k times per batch, so a task's time scale would follow
how many actors play it; this rule keeps it at 1/beta batches for every task. A task with no
kept step in the batch keeps its statistics and its column of the layer bit for bit.

IMPACT (learning/impact.py) takes it the same way: its GAE V-trace targets and advantages are
linear in the rewards and values, and its clipped surrogate is positively homogeneous in the
advantages, so the surrogate divided by sigma is the surrogate of the normalised advantages;
its KL term, like the entropy term, keeps its scale. The target network's value layer is never
read (only its policy is), so it needs no rescaling.

Step size and bounds: beta = 3e-4 and sigma clipped to [1e-4, 1e6] (Hessel et al.,
"Implementation notes"; rlax's popart takes the same bounds). The moments are bias-corrected
as Adam's are (Kingma and Ba, 2015, section 3), per task, counting the batches that task took
part in: the statistics start at mu = 0, nu = 1 (sigma 1, the identity), and an uncorrected
exponential average with beta = 3e-4 would take ~3,000 updates (about 2M steps at a batch of
640) to leave them, longer than a short run on a new environment lasts; corrected, a task's
first batch sets its scale, and the average is of all its targets so far until 1/beta of its
batches have passed.

Variables: with one task, scalars (the checkpoints of the single-task module restore as they
are); with N tasks, vectors of N under the same names.
"""
import collections

import numpy as np
import tensorflow as tf

STEP_SIZE = 3e-4             # Hessel et al. 2019, "Implementation notes": beta.
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
  """Bias-corrected exponential moments after one more batch (module docstring); elementwise,
  so one task's scalars or N tasks' vectors.

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
  """The last linear layer (w [H, N], b [N]) that gives the same V_i(x) = sigma_i n_i(x) + mu_i
  under the new statistics (scalars, or [N]: column i takes task i's) (van Hasselt et al.
  2016, Algorithm 1)."""
  return w * (sigma / new_sigma), (sigma * b + mu - new_mu) / new_sigma


def unnormalized(n, mu, sigma):
  """V(x) = sigma n(x) + mu, n(x) the network's normalised baseline."""
  return sigma * n + mu


def scale_loss_terms(terms, sigma, scale_pg=True):
  """The loss terms (losses.py), computed on unnormalised values, in PopArt's normalised scale: the
  policy gradient's advantages divided by sigma (unless scale_pg is False: advantages already
  standardised per batch, losses.standardized_advantages), the baseline's error by sigma (its
  square by sigma^2) (module docstring). The entropy term keeps its scale. One task's sigma
  (a scalar); with several, losses.py divides each trajectory's by PopArt.scale before the
  sums."""
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


def task_moments(targets, mask, tasks, num_tasks):
  """Per task, the mean of targets [T, B] and of their squares over the kept steps (mask
  [T, B]) of its trajectories (tasks int [B]), and how many steps it has: three [N] tensors
  (the means 0 where a task has none). One task takes masked_moments' reductions, so its
  update is the single-task module's to the bit."""
  if num_tasks == 1:
    mean, mean_square = masked_moments(targets, mask)
    return (tf.reshape(mean, [1]), tf.reshape(mean_square, [1]),
            tf.reshape(tf.reduce_sum(mask), [1]))
  weights = mask[:, :, None] * tf.one_hot(tasks, num_tasks, dtype=mask.dtype)[None]
  steps = tf.reduce_sum(weights, axis=[0, 1])
  count = tf.maximum(steps, tf.ones_like(steps))
  return (tf.reduce_sum(targets[:, :, None] * weights, axis=[0, 1]) / count,
          tf.reduce_sum(tf.square(targets)[:, :, None] * weights, axis=[0, 1]) / count, steps)


def _vector(variable):
  """A statistics variable (a scalar for one task, [N] for N) as an [N] tensor."""
  return tf.reshape(variable, [-1])


def _assign(variable, vector):
  variable.assign(tf.reshape(tf.cast(vector, variable.dtype), tf.shape(variable)))


class PopArt(tf.Module):
  """The run's statistics, one pair per task (checkpointed with the learner), and the output
  layer they rescale.

  The layer is the agent's `baseline` (a torsos.Linear: `w` [H, N], `b` [N], one output per
  task); its output is n(x), which the actors' AgentOutput.baseline also carries. With one
  task (the default) the statistics are scalars and every method takes tasks=None; with N they
  are [N] and each trajectory's task (int [B], 0..N-1) selects its output and statistics.
  """

  def __init__(self, baseline_layer, num_tasks=1, step_size=STEP_SIZE, name="popart"):
    super().__init__(name=name)
    if num_tasks < 1:
      raise ValueError(f"PopArt needs at least one task; got num_tasks={num_tasks}.")
    outputs = baseline_layer.w.shape[-1]
    if outputs != num_tasks:
      raise ValueError(f"PopArt's baseline layer has {outputs} outputs for {num_tasks} tasks; "
                       "it needs one output per task (build the network's baseline with "
                       f"{num_tasks}).")
    self.layer = baseline_layer
    self.num_tasks = num_tasks
    self.step_size = step_size
    shape = [] if num_tasks == 1 else [num_tasks]
    with self.name_scope:
      # float64: 1 - (1 - beta)^n in float32 is off by 2e-4 of itself at beta = 3e-4.
      float64 = lambda value, name: tf.Variable(tf.fill(shape, tf.constant(value, tf.float64)),
                                                trainable=False, name=name)
      self.mu_hat = float64(0.0, "mu_hat")
      self.nu_hat = float64(0.0, "nu_hat")
      self.count = float64(0.0, "count")  # Per task: the batches it took part in.
      # The corrected statistics in use (mu 0, nu 1 before a task's first batch: the identity).
      self.mu = tf.Variable(tf.fill(shape, 0.0), trainable=False, name="mu")
      self.nu = tf.Variable(tf.fill(shape, 1.0), trainable=False, name="nu")

  @property
  def sigma(self):
    """sigma: a scalar for one task, [N] for N."""
    return sigma_of(self.mu, self.nu)

  def _of_tasks(self, statistic, tasks):
    """A statistic (scalar or [N]) of each trajectory's task: [B], or the scalar of one task."""
    if self.num_tasks == 1:
      return statistic
    return tf.gather(statistic, tasks)

  def select(self, outputs, tasks=None):
    """n(x) of each trajectory's task: outputs [..., B, N] (the layer's) -> [..., B], output
    tasks[b] of trajectory b. One task: outputs are already n(x), returned as they are."""
    if self.num_tasks == 1:
      return outputs
    tasks = tf.broadcast_to(tf.convert_to_tensor(tasks), tf.shape(outputs)[:-1])
    return tf.gather(outputs, tasks, axis=-1, batch_dims=outputs.shape.rank - 1)

  def values(self, normalized_baseline, tasks=None):
    """V(x) of each trajectory's task: normalized_baseline [..., B] for one task (the network's
    n(x)), [..., B, N] for N (every task's output; trajectory b reads output tasks[b] and its
    task's statistics). Returns [..., B]."""
    return unnormalized(self.select(normalized_baseline, tasks),
                        self._of_tasks(self.mu, tasks), self._of_tasks(self.sigma, tasks))

  def scale(self, tasks=None):
    """Each trajectory's task's sigma: [B] (tasks int [B]); one task's scalar sigma."""
    return self._of_tasks(self.sigma, tasks)

  def normalized(self, errors, tasks=None):
    """errors [T, B] (V-trace's advantages, v_s - V(x_s)) in each trajectory's task's
    normalised scale: divided by its sigma (module docstring)."""
    return errors / self.scale(tasks)

  def update(self, targets, mask, tasks=None):
    """Moves the statistics of the tasks in this batch towards their targets v_s [T, B] (over
    mask [T, B]; tasks int [B], None for one task) and rescales their outputs of the layer so
    that every V_i(x) is unchanged; a task without a kept step keeps everything. Call after
    the gradient step. Returns statistics()."""
    mean, mean_square, steps = task_moments(tf.cast(targets, tf.float64),
                                            tf.cast(mask, tf.float64), tasks, self.num_tasks)
    present = steps > 0
    keep = lambda new, old: tf.where(present, new, old)
    mu_hat, nu_hat, count = _vector(self.mu_hat), _vector(self.nu_hat), _vector(self.count)
    new_mu_hat, new_nu_hat, new_count, new = updated_moments(mu_hat, nu_hat, count, mean,
                                                             mean_square, self.step_size)
    mu, nu = _vector(self.mu), _vector(self.nu)
    new_mu, new_nu = keep(tf.cast(new.mu, tf.float32), mu), keep(tf.cast(new.nu, tf.float32), nu)
    w, b = preserved_layer(self.layer.w, self.layer.b, mu, sigma_of(mu, nu), new_mu,
                           sigma_of(new_mu, new_nu))
    self.layer.w.assign(tf.where(present, w, self.layer.w))
    self.layer.b.assign(keep(b, self.layer.b))
    _assign(self.mu_hat, keep(new_mu_hat, mu_hat))
    _assign(self.nu_hat, keep(new_nu_hat, nu_hat))
    _assign(self.count, keep(new_count, count))
    _assign(self.mu, new_mu)
    _assign(self.nu, new_nu)
    return self.statistics()

  def statistics(self):
    """The update's record of the statistics in use (log.jsonl, TensorBoard): popart_mu and
    popart_sigma, scalars for one task, [N] for N (one per task)."""
    return dict(popart_mu=self.mu.read_value(), popart_sigma=self.sigma)


def per_task_scalars(stats, tasks):
  """An update's statistics (numpy) as scalars: per-task PopArt's [N] ones (popart_mu,
  popart_sigma) as <name>/<level>, one per task (tasks: the levels in order), for log.jsonl,
  TensorBoard (popart_sigma/<level>) and the console (sigmas_in_words)."""
  scalars = {}
  for name, value in stats.items():
    if np.ndim(value):
      scalars.update({f"{name}/{task}": float(v) for task, v in zip(tasks, np.ravel(value))})
    else:
      scalars[name] = float(value)
  return scalars


def sigmas_in_words(record, tasks):
  """The console's words for per-task PopArt's scales in a record of per_task_scalars: the
  smallest and the largest sigma with their levels ("" before the first update)."""
  sigmas = {task: record[f"popart_sigma/{task}"] for task in tasks
            if f"popart_sigma/{task}" in record}
  if not sigmas:
    return ""
  low, high = min(sigmas, key=sigmas.get), max(sigmas, key=sigmas.get)
  return f"sigma {sigmas[low]:.3g} ({low}) .. {sigmas[high]:.3g} ({high})"
