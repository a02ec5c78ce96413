"""Per-task PopArt (learning/popart.py with num_tasks > 1, Hessel et al. 2019): the statistics
against a numpy reference of the paper's update, the output-preserving rescale of every task's
output, the values and normalised losses of each trajectory's task, and the single task's
checkpoint of before per-task statistics existed."""
import json
import pathlib

import numpy as np
import pytest
import tensorflow as tf

from scalable_agent_tf2.agent import torsos as layers
from scalable_agent_tf2.learning import losses
from scalable_agent_tf2.learning import popart
from scalable_agent_tf2.learning import vtrace
from tests import reference

BETA = popart.STEP_SIZE
SINGLE_TASK_CHECKPOINT = pathlib.Path(__file__).parents[1] / "data" / "popart_single_task"


class PaperStatistics:
  """The paper's per-task statistics, in numpy: task i's first and second moments move by
  beta towards the mean of v_s and of v_s^2 over the steps of task i's trajectories in the
  batch (one step per batch in which task i has a step; the others keep theirs), bias-corrected
  by 1 - (1 - beta)^n_i, n_i the batches task i took part in; sigma_i = sqrt(nu_i - mu_i^2),
  clipped to [1e-4, 1e6]."""

  def __init__(self, num_tasks):
    self.mu_hat = np.zeros(num_tasks)
    self.nu_hat = np.zeros(num_tasks)
    self.count = np.zeros(num_tasks)

  def update(self, targets, mask, tasks):
    for task in range(len(self.count)):
      steps = mask[:, tasks == task] > 0
      values = targets[:, tasks == task][steps].astype(np.float64)
      if not values.size:
        continue
      self.mu_hat[task] = (1 - BETA) * self.mu_hat[task] + BETA * values.mean()
      self.nu_hat[task] = (1 - BETA) * self.nu_hat[task] + BETA * np.mean(values ** 2)
      self.count[task] += 1

  def moments(self):
    correction = np.where(self.count > 0, 1 - (1 - BETA) ** self.count, 1.0)
    mu = np.where(self.count > 0, self.mu_hat / correction, 0.0)
    nu = np.where(self.count > 0, self.nu_hat / correction, 1.0)
    return mu, nu

  def sigma(self):
    mu, nu = self.moments()
    return np.sqrt(np.clip(nu - mu * mu, 1e-8, 1e12))


def _scaler(num_tasks, hidden=6, seed=0):
  layer = layers.Linear(hidden, num_tasks, init=layers.Initializer(seed=seed), name="baseline")
  # A random bias too (the layer starts at zeros), so the rescale's bias term is exercised.
  layer.b.assign(np.random.default_rng(seed).normal(size=num_tasks).astype(np.float32))
  return popart.PopArt(layer, num_tasks=num_tasks), layer


# Four tasks; [T = 5, B = 6] batches. Task 3 never appears in the first batch; task 1 has three
# trajectories in it; scales differ by orders of magnitude between tasks.
SCALES = np.array([1.0, 1000.0, 0.01, 50.0])
BATCHES = [np.array([0, 1, 1, 2, 1, 0]), np.array([3, 3, 0, 1, 2, 2]),
           np.array([1, 1, 1, 1, 1, 1])]


def _batch(tasks, seed):
  rng = np.random.default_rng(seed)
  targets = (rng.normal(size=(5, len(tasks))) + 2.0) * SCALES[tasks]
  mask = (rng.random((5, len(tasks))) > 0.25).astype(np.float32)
  return targets.astype(np.float32), mask


def test_statistics_follow_the_papers_update_per_task():
  scaler, _ = _scaler(num_tasks=4)
  want = PaperStatistics(4)
  for seed, tasks in enumerate(BATCHES):
    targets, mask = _batch(tasks, seed)
    before = {name: getattr(scaler, name).numpy().copy() for name in ("mu", "nu", "count")}
    stats = scaler.update(tf.constant(targets), tf.constant(mask), tf.constant(tasks))
    want.update(targets, mask, tasks)
    mu, nu = want.moments()
    np.testing.assert_allclose(scaler.mu.numpy(), mu, rtol=1e-5)
    np.testing.assert_allclose(scaler.nu.numpy(), nu, rtol=1e-5)
    np.testing.assert_allclose(scaler.sigma.numpy(), want.sigma(), rtol=1e-4)
    np.testing.assert_array_equal(scaler.count.numpy(), want.count)
    np.testing.assert_allclose(stats["popart_sigma"], want.sigma(), rtol=1e-4)
    for task in set(range(4)) - set(tasks.tolist()):  # Absent: every bit kept.
      for name, value in before.items():
        assert getattr(scaler, name).numpy()[task] == value[task], (seed, task, name)
  # Task 3 joined in the second batch: its statistics are that batch's moments of its steps
  # alone (the bias correction counts its own batches, not the run's).
  targets, mask = _batch(BATCHES[1], 1)
  own = targets[:, BATCHES[1] == 3][mask[:, BATCHES[1] == 3] > 0].astype(np.float64)
  np.testing.assert_allclose(scaler.mu.numpy()[3], own.mean(), rtol=1e-5)
  np.testing.assert_allclose(scaler.sigma.numpy()[3], own.std(), rtol=1e-3)


def test_a_task_in_several_trajectories_averages_all_its_steps():
  """Task 1's three trajectories of the first batch: one step towards the mean of all their
  kept targets, the same as if they were one trajectory."""
  tasks = BATCHES[0]
  targets, mask = _batch(tasks, 0)
  scaler, _ = _scaler(num_tasks=4)
  scaler.update(tf.constant(targets), tf.constant(mask), tf.constant(tasks))
  own = targets[:, tasks == 1][mask[:, tasks == 1] > 0].astype(np.float64)
  np.testing.assert_allclose(scaler.mu.numpy()[1], own.mean(), rtol=1e-6)
  np.testing.assert_allclose(scaler.nu.numpy()[1], np.mean(own ** 2), rtol=1e-6)
  assert scaler.count.numpy()[1] == 1.0


def _every_task_value(scaler, layer, features):
  """V_i(x) = sigma_i n_i(x) + mu_i of every task i's output, [F, N] (numpy, float64)."""
  outputs = features @ layer.w.numpy().astype(np.float64) + layer.b.numpy()
  sigma = popart.sigma_of(scaler.mu.numpy().astype(np.float64),
                          scaler.nu.numpy().astype(np.float64))
  return sigma * outputs + scaler.mu.numpy()


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_rescale_keeps_every_tasks_values(seed):
  """After each update, every task's unnormalised value of random features is unchanged to
  1e-5 of the task's scale (|V| + |mu'| + sigma': float32 parameters hold V to about 1e-7 of
  it), present in the batch or not, while the normalised outputs of the tasks present moved."""
  scaler, layer = _scaler(num_tasks=4, seed=seed)
  features = np.random.default_rng(seed + 10).normal(size=(20, 6))
  for step, tasks in enumerate(BATCHES):
    targets, mask = _batch(tasks, seed * 10 + step)
    before = _every_task_value(scaler, layer, features)
    outputs_before = features @ layer.w.numpy() + layer.b.numpy()
    scaler.update(tf.constant(targets), tf.constant(mask), tf.constant(tasks))
    after = _every_task_value(scaler, layer, features)
    scale = np.abs(before) + np.abs(scaler.mu.numpy()) + scaler.sigma.numpy()
    np.testing.assert_array_less(np.abs(after - before), 1e-5 * scale)
    outputs_after = features @ layer.w.numpy() + layer.b.numpy()
    present = sorted(set(tasks.tolist()))
    assert not np.allclose(outputs_after[:, present], outputs_before[:, present])
    absent = sorted(set(range(4)) - set(present))
    np.testing.assert_array_equal(outputs_after[:, absent], outputs_before[:, absent])


def test_values_take_each_trajectorys_task():
  scaler, layer = _scaler(num_tasks=3)
  scaler.mu.assign([5.0, -300.0, 0.25])
  scaler.nu.assign([29.0, 300.0 ** 2 + 40.0 ** 2, 0.0625 + 0.01])  # sigma 2, 40, 0.1.
  tasks = np.array([2, 0, 0, 1])
  outputs = np.random.default_rng(3).normal(size=(7, 4, 3)).astype(np.float32)
  got = scaler.values(tf.constant(outputs), tf.constant(tasks)).numpy()
  own = np.take_along_axis(outputs, np.broadcast_to(tasks[None, :, None], (7, 4, 1)), -1)[..., 0]
  sigma = np.array([2.0, 40.0, 0.1])[tasks]
  np.testing.assert_allclose(got, sigma * own + np.array([5.0, -300.0, 0.25])[tasks], rtol=1e-6)
  np.testing.assert_allclose(scaler.select(tf.constant(outputs), tf.constant(tasks)), own)


def test_normalised_losses_are_the_papers():
  """The V-trace losses of each trajectory in its task's normalised scale: the policy
  gradient's advantage rho_s ((r_s + gamma v_{s+1} - mu_i) / sigma_i - n_i(x_s)) and the
  baseline's error (v_s - mu_i) / sigma_i - n_i(x_s), i the trajectory's task, with numpy's
  V-trace (tests/reference.py) on the unnormalised values; the baseline's gradient reaches
  only the trajectory's own task's output."""
  T, B, N = 6, 5, 3
  rng = np.random.default_rng(4)
  scaler, _ = _scaler(num_tasks=N)
  mu, sigma = np.array([3.0, -200.0, 0.5]), np.array([2.0, 80.0, 0.05])
  scaler.mu.assign(mu.astype(np.float32))
  scaler.nu.assign((sigma ** 2 + mu ** 2).astype(np.float32))
  tasks = np.array([1, 0, 2, 1, 0])
  behaviour, target, actions, discounts, _, _, _ = reference.random_inputs(rng, T, B)
  rewards = (rng.normal(size=(T, B)) * 10 * sigma[tasks]).astype(np.float32)
  outputs = tf.constant(rng.normal(size=(T + 1, B, N)).astype(np.float32))
  log_rhos = reference.log_rhos(behaviour, target, actions).astype(np.float32)
  log_probs = np.log(np.take_along_axis(reference.softmax(target), actions[..., None], -1)[..., 0])
  with tf.GradientTape() as tape:
    tape.watch(outputs)
    values = scaler.values(outputs, tf.constant(tasks))
    returns = vtrace.from_importance_weights(log_rhos, discounts, rewards, values[:-1],
                                             values[-1])
    pg_loss = losses.policy_gradient_loss(
        tf.constant(log_probs, tf.float32),
        scaler.normalized(returns.pg_advantages, tf.constant(tasks)))
    baseline_loss = losses.baseline_loss(
        scaler.normalized(returns.vs - values[:-1], tf.constant(tasks)))
  own = np.take_along_axis(outputs.numpy(), np.broadcast_to(tasks[None, :, None], (T + 1, B, 1)),
                           -1)[..., 0].astype(np.float64)
  v_np = sigma[tasks] * own + mu[tasks]
  vs, pg_advantages = reference.numpy_vtrace(log_rhos, discounts, rewards, v_np[:-1], v_np[-1])
  rho = np.minimum(1.0, np.exp(log_rhos))
  q = pg_advantages / rho + v_np[:-1]  # r_s + gamma v_{s+1}.
  advantage = rho * ((q - mu[tasks]) / sigma[tasks] - own[:-1])
  error = (vs - mu[tasks]) / sigma[tasks] - own[:-1]
  np.testing.assert_allclose(pg_loss, -np.sum(log_probs * advantage), rtol=1e-4)
  np.testing.assert_allclose(baseline_loss, 0.5 * np.sum(error ** 2), rtol=1e-4)
  gradient = tape.gradient(baseline_loss, outputs).numpy()
  want = np.zeros((T + 1, B, N))
  want[np.arange(T)[:, None], np.arange(B)[None], tasks[None]] = -error
  # V-trace's targets carry no gradient; the bootstrap value's (step T) only reaches them.
  np.testing.assert_allclose(gradient[:-1], want[:-1], rtol=1e-3, atol=1e-5)
  assert not gradient[-1].any()


def test_single_task_checkpoint_of_before_restores():
  """A checkpoint written by the single-task module (tests/data/popart_single_task, before
  per-task statistics existed) restores every variable into PopArt(num_tasks=1) unchanged,
  and the next update moves on from it."""
  layer = layers.Linear(4, 1, init=layers.Initializer(seed=5), name="baseline")
  scaler = popart.PopArt(layer)
  status = tf.train.Checkpoint(popart=scaler).read(str(SINGLE_TASK_CHECKPOINT / "ckpt"))
  status.assert_consumed()
  saved = json.loads((SINGLE_TASK_CHECKPOINT / "values.json").read_text())
  for name in ("mu_hat", "nu_hat", "count", "mu", "nu"):
    assert getattr(scaler, name).numpy().tolist() == saved[name], name
  assert layer.w.numpy().tolist() == saved["w"] and layer.b.numpy().tolist() == saved["b"]
  scaler.update(tf.constant([[-80.0]]), tf.constant([[1.0]]))
  assert scaler.count.numpy() == saved["count"] + 1


def test_a_batch_without_a_kept_step_leaves_the_statistics():
  scaler, layer = _scaler(num_tasks=1)
  scaler.update(tf.constant([[-10.0, -30.0]]), tf.ones([1, 2]))
  kept = [v.numpy().copy() for v in (scaler.mu, scaler.nu, scaler.count, layer.w, layer.b)]
  scaler.update(tf.constant([[500.0, 700.0]]), tf.zeros([1, 2]))
  for before, variable in zip(kept, (scaler.mu, scaler.nu, scaler.count, layer.w, layer.b)):
    np.testing.assert_array_equal(variable.numpy(), before)


def test_layer_and_task_count_must_agree():
  layer = layers.Linear(4, 2, init=layers.Initializer(seed=0), name="baseline")
  with pytest.raises(ValueError, match="2 outputs.*3 tasks"):
    popart.PopArt(layer, num_tasks=3)
  with pytest.raises(ValueError, match="at least one task"):
    popart.PopArt(layers.Linear(4, 1, init=layers.Initializer(seed=0)), num_tasks=0)
