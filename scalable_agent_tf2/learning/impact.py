"""IMPACT (Luo et al., 2020): its learner and its circular buffer.

    CircularBuffer      section 3.2 / Figure 4a: N batches, each used at most K times.
    steps               Algorithm 1 lines 6, 7, 10: the learner's steps over the circular buffer.
    ImpactLearner       Algorithm 1: a target network and the clipped target-worker surrogate.

Its loss terms (Algorithm 1 line 8: losses.impact_loss_terms, beside IMPALA's), V-trace's
GAE-lambda advantages (losses.gae_from_importance_weights) and the KL coefficient's adaptation
(losses.adapted_kl_coefficient) are losses.py's; the update's skeleton is learner.Learner's.
"""
import threading

import tensorflow as tf

from scalable_agent_tf2.configuration import config as config_lib
from scalable_agent_tf2.learning import learner as learner_lib
from scalable_agent_tf2.learning import losses
from scalable_agent_tf2.learning import popart as popart_lib


class CircularBuffer:
  """IMPACT's circular buffer C(N, K) (section 3.2, Figure 4a; Algorithm 1 lines 6, 7, 10).

  N slots visited in turn. A slot whose batch has been used K times (or that is empty) takes
  a new batch from `fetch` when it is visited; its batch is then returned, and dropped after
  its K-th use. So every batch is used exactly K times (until the stream ends), N batches
  at most are held, and with N = K = 1 every batch is used once, as in IMPALA. The order for
  N = 2, K = 2 is b0 b1 b0 b1 b2 b3 b2 b3 ...
  """

  def __init__(self, num_batches, max_uses):
    """Args:
      num_batches: N, the number of slots.
      max_uses: K, how often each batch is used.
    """
    for name, value in (("num_batches", num_batches), ("max_uses", max_uses)):
      if int(value) != value or value < 1:
        raise ValueError(f"The circular buffer's {name} must be a positive integer, got "
                         f"{value}.")
    self._num_batches = int(num_batches)
    self._max_uses = int(max_uses)
    self._items = [None] * self._num_batches
    self._uses_left = [0] * self._num_batches
    self._slot = 0
    self._lock = threading.Lock()

  @property
  def num_batches(self):
    return self._num_batches

  @property
  def max_uses(self):
    return self._max_uses

  def next(self, fetch):
    """(batch, use) for the next learner step, or None when `fetch` has no new batch.

    Args:
      fetch: callable() -> a new batch or None (end of stream); called when the visited
        slot needs a new batch (Algorithm 1 line 7 evaluates the target network there).

    Returns:
      (batch, use): use counts from 0 (the batch's first use) to K - 1 (its last).
    """
    with self._lock:
      slot = self._slot
      if self._uses_left[slot] == 0:
        item = fetch()
        if item is None:
          return None
        self._items[slot], self._uses_left[slot] = item, self._max_uses
      item = self._items[slot]
      use = self._max_uses - self._uses_left[slot]
      self._uses_left[slot] -= 1
      if self._uses_left[slot] == 0:
        self._items[slot] = None  # Used K times: dropped (Algorithm 1 line 10).
      self._slot = (slot + 1) % self._num_batches
      return item, use

  def held(self):
    """The batches held now (those with uses left), in slot order."""
    with self._lock:
      return [item for item, left in zip(self._items, self._uses_left) if left]


def steps(dataset, learner, config):
  """IMPACT's learner steps (Algorithm 1 lines 6, 7, 10): batches pass through a
  CircularBuffer of --circular_buffer_size batches, each used --circular_buffer_max_uses
  times; the target network's policy on a batch is evaluated when it enters
  (learner.target_policy_params). Only a batch's first use brings new trajectories (and of
  those, not the replayed ones): frames are counted once.

  Yields (policy_versions [B], learner.update's keyword arguments, number of new
  trajectories), as run/input_pipeline.learner_steps does for IMPALA.
  """
  num_new = config.num_learners * config.num_online_per_batch  # Replay: one learner.
  ring = CircularBuffer(config.circular_buffer_size, config.circular_buffer_max_uses)
  batches = iter(dataset)

  def enter():
    batch = next(batches, None)
    if batch is None:
      return None
    policy_versions, agent_state, env_outputs, agent_outputs, tasks = batch
    # Algorithm 1 line 7: the target network's policy on the batch, frozen as it enters.
    return policy_versions, dict(
        agent_state=agent_state, env_outputs=env_outputs, agent_outputs=agent_outputs,
        tasks=tasks,
        target_policy_params=learner.target_policy_params(agent_state, env_outputs,
                                                          agent_outputs))

  while (step := ring.next(enter)) is not None:
    (policy_versions, inputs), use = step
    yield policy_versions, inputs, num_new if use == 0 else 0


class ImpactLearner(learner_lib.Learner):
  """IMPACT's learner (IMPACT paper, Algorithm 1): a target network and the clipped
  target-worker surrogate with V-trace GAE-lambda advantages.

  One step on a batch B (Algorithm 1 lines 6-11):
    - target_policy_params(B): the target network's policy on B, computed once, when B
      enters the circular buffer (line 7; steps, CircularBuffer);
    - update(B, target_policy_params=...): r = pi / max(pi_target, mu / rho), PPO's clipped surrogate of
      r and the V-trace GAE-lambda advantages (pi_target against mu), the value loss against
      V + A, the entropy bonus and kl_cost x KL(pi_target || pi) (line 8), then the
      optimizer step (line 9) and, every target_update_period steps, target <- learner
      (line 11). One tf.function.
  The target network starts equal to the learner (line 2). It and the step count are
  tf.Module attributes, so checkpoints carry them.

  One departure, on purpose: the loss terms are summed over the batch's T x B steps, like
  IMPALA's (the note under IMPALA's Table D.1), where Algorithm 1 averages them (1/M). The
  optimizer is IMPALA's RMSProp with TF1 semantics, whose settings assume summed losses: its
  mean square starts at 1, so the gradients of a mean (M = 640 times smaller) barely move the
  parameters for hundreds of steps. Table 1's learning rate and gradient clipping go with
  averaged losses and an optimizer the paper does not name; presets.py keeps the level's
  IMPALA values for both algorithms instead (as Table 1 gives IMPACT and IMPALA the same
  learning rate). On the toy task of tests/, averaged losses with Table 1's values did not
  learn in 100k frames; summed ones with the level's values learn it in about 20k.
  """

  def __init__(self, agent, config, impact_config=config_lib.ImpactConfig(), jit_compile=None,
               name="learner", kl_target=None):
    """Args:
      agent: a networks.Agent (trained in place).
      config: a LearnerConfig (optimizer, discounting, reward clipping, baseline and
        entropy costs, V-trace truncation levels).
      impact_config: an ImpactConfig.
      jit_compile: compile the update with XLA; None chooses default_jit_compile().
      name: module name.
      kl_target: None keeps impact_config.kl_cost fixed; a KL (IMPACT Table 2: 0.04) makes
        the KL coefficient adaptive: it starts at kl_cost and, at every target-network
        refresh, losses.adapted_kl_coefficient steers it by that step's mean KL, as RLlib's
        APPO (which ran the paper's IMPACT) did.
    """
    if kl_target is not None and not kl_target > 0:
      raise ValueError(f"kl_target must be positive (or None: a fixed KL cost), got "
                       f"{kl_target}.")
    super().__init__(agent, config, jit_compile=jit_compile, name=name)
    self.impact_config = impact_config
    self.kl_target = kl_target
    with self.name_scope:
      if kl_target is not None:
        # Only an adaptive coefficient is a variable (the checkpoints of fixed-cost runs keep
        # their variables); a checkpoint carries it, so a resumed run continues adapting.
        self.kl_coefficient = tf.Variable(impact_config.kl_cost, dtype=tf.float32,
                                          trainable=False, name="kl_coefficient")
      # The learner's network, composed from the same config.
      self.target_agent = type(agent)(agent.config, name="target_agent")
      # Learner steps so far: the target network is refreshed when it is a multiple of the
      # period.
      self.num_updates = tf.Variable(0, dtype=tf.int64, trainable=False, name="num_updates")
    self._target_variables = tuple(self.target_agent.trainable_variables)
    for source, target in zip(self._variables, self._target_variables):
      if source.shape != target.shape:
        raise ValueError(f"Target network variable {target.name} {target.shape} does not "
                         f"match {source.name} {source.shape}.")
    self._copy_to_target()  # Algorithm 1 line 2.
    self._compiled_target_params = tf.function(self._target_params,
                                               jit_compile=self.jit_compile)

  def _copy_to_target(self):
    for source, target in zip(self._variables, self._target_variables):
      target.assign(source)
    return tf.constant(True)

  def target_policy_params(self, agent_state, env_outputs, agent_outputs):
    """The target network's policy on a batch (Algorithm 1 line 7), as flat parameters.

    Args: as `update`'s first three.

    Returns:
      float32 [T+1, B, P], from the target network unrolled from agent_state: the logits
      [T+1, B, NUM_ACTIONS], or a Gaussian's mean and log_std concatenated [T+1, B, 2A]
      (the agent config's action_distribution).
    """
    env_outputs, agent_outputs = learner_lib.check_batch(self.agent.config, agent_state,
                                                          env_outputs, agent_outputs)
    return self._compiled_target_params(agent_state, env_outputs, agent_outputs.action)

  def _target_params(self, agent_state, env_outputs, actions):
    outputs, _ = self.target_agent.unroll(actions, env_outputs, agent_state,
                                          static_shapes=self.jit_compile)
    return outputs.policy_params

  def update(self, agent_state, env_outputs, agent_outputs, num_new_trajectories=None,
             target_policy_params=None, tasks=None):
    """One IMPACT step (Algorithm 1 lines 8, 9, 11).

    Args:
      agent_state, env_outputs, agent_outputs, num_new_trajectories: as Learner.update
        (a batch used again in the circular buffer brings 0 new trajectories).
      target_policy_params: float32 [T+1, B, P], target_policy_params() of this batch when it
        entered the circular buffer (steps puts it there); None: the target network's policy
        now.
      tasks: int32 [B], as Learner.update's (each trajectory's task, with per-task PopArt).

    Returns:
      dict of scalars: as Learner.update plus kl_loss, ppo_clipped_fraction (steps whose PPO
      clip is active), target_worker_clipped_fraction (steps where mu / rho > pi_target) and
      target_updated (whether the target network was refreshed after this step); with
      kl_target also kl_coefficient (the one this step used).
    """
    env_outputs, agent_outputs = learner_lib.check_batch(self.agent.config, agent_state,
                                                          env_outputs, agent_outputs)
    if target_policy_params is None:
      target_policy_params = self._compiled_target_params(agent_state, env_outputs,
                                                          agent_outputs.action)
    target_policy_params = tf.convert_to_tensor(target_policy_params, tf.float32)
    want = env_outputs.reward.shape[:2].concatenate(
        [self.agent.config.action_distribution.param_size])
    if not target_policy_params.shape.is_compatible_with(want):
      raise ValueError(f"target_policy_params has shape {target_policy_params.shape}, "
                       f"expected {want} (like the behaviour policy's logits, or its mean "
                       f"and log_std concatenated).")
    num_new = learner_lib.checked_num_new_trajectories(num_new_trajectories, env_outputs)
    tasks = learner_lib.checked_tasks(tasks, env_outputs, self.num_tasks)
    return self._compiled_update(agent_state, env_outputs, agent_outputs,
                                 target_policy_params, num_new, tasks)

  def _update(self, agent_state, env_outputs, agent_outputs, target_policy_params,
              num_new_trajectories, tasks=None):
    config, impact = self.config, self.impact_config
    kl_cost = impact.kl_cost if self.kl_target is None else self.kl_coefficient.read_value()
    with tf.GradientTape() as tape:
      learner_outputs, _ = self.agent.unroll(agent_outputs.action, env_outputs, agent_state,
                                             static_shapes=self.jit_compile)
      # The network's baseline is n(x); the targets need V(x) (Learner._popart_values).
      learner_outputs, value_scale = self._popart_values(learner_outputs, tasks)
      terms, diagnostics, vs = losses.impact_loss_terms_and_targets(
          self.agent.config.action_distribution, learner_outputs, target_policy_params,
          env_outputs, agent_outputs, config, impact, value_scale)
      if self.popart is not None and value_scale is None:
        # The clipped surrogate is positively homogeneous in the advantages, so dividing it by
        # sigma is the surrogate of the normalised advantages (popart.scale_loss_terms); the
        # KL term, like the entropy term, keeps its scale.
        # Standardised advantages have no scale left to divide.
        terms = popart_lib.scale_loss_terms(terms, self.popart.sigma,
                                            scale_pg=not impact.normalize_advantages)
      # Summed over T and B like IMPALA's terms (Algorithm 1 line 8 averages: see the class
      # docstring).
      total_loss = (terms["pg_loss"] + config.baseline_cost * terms["baseline_loss"]
                    + self.entropy_cost * terms["entropy_loss"]
                    + kl_cost * terms["kl_loss"])
    gradients = tape.gradient(total_loss, self._variables)
    stats = self._apply(total_loss, terms, gradients, env_outputs.reward,
                        num_new_trajectories)
    if self.popart is not None:
      kept = losses.kept_transitions(env_outputs.truncated)
      stats.update(tf.cond(stats["update_skipped"], self.popart.statistics,
                           lambda: self.popart.update(vs, kept, tasks)))
    # A skipped step (non-finite, see _apply) is no step: it neither counts towards the
    # target refresh nor adapts the KL coefficient (whose KL would be NaN too).
    applied = tf.logical_not(stats["update_skipped"])
    self.num_updates.assign_add(tf.cast(applied, tf.int64))
    refresh = tf.logical_and(applied,
                             tf.equal(self.num_updates % impact.target_update_period, 0))
    target_updated = tf.cond(refresh, self._copy_to_target, lambda: tf.constant(False))
    if self.kl_target is None:
      return dict(stats, target_updated=target_updated, **diagnostics)
    # RLlib's APPO adapts the coefficient when it refreshes the target network, from the
    # mean KL of the learner's last step (kl_loss is summed over the T x B steps).
    mean_kl = terms["kl_loss"] / tf.cast(tf.size(env_outputs.reward[1:]), tf.float32)
    self.kl_coefficient.assign(tf.where(
        refresh, losses.adapted_kl_coefficient(kl_cost, mean_kl, self.kl_target), kl_cost))
    return dict(stats, target_updated=target_updated, kl_coefficient=kl_cost, **diagnostics)
