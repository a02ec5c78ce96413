"""Action distribution FAMILIES: what an action kind is to the rest of the agent, without
its math (distributions.py). A family (`CategoricalFamily(num_actions)`, IMPALA's discrete
actions; `DiagGaussianFamily(action_size)`, the IMPACT paper's continuous control, section
4.3; `MultiCategoricalFamily(nvec)`, gymnasium's MultiDiscrete; a network config's
`action_distribution`, `for_spec` gives an environment's) knows the shapes:
`param_size` P of the network's flat parameters tensor [..., P] (what the policy head
outputs and structures.AgentOutput.policy_params carries), the action spec (`action_dtype`,
`action_shape`), how the network reads a previous action (`action_features`, Figure 3's
one-hot for discrete actions), the policy of an output record (`of_outputs`), the settings
that fix the action tensors' shapes (`layout`: checkpoints and the wire compare them), and the
actors' numpy sampling (`sample_numpy`, `sample_rows`: one generator per environment, so
which other actors share a forward pass never changes an environment's actions). Calling a
family on parameters gives its distribution (distributions.py).

A family is a value (equal, hashable, printed by its one defining field), so that network
configs holding one compare and print as data. Adding an action kind is a distribution in
distributions.py, a family here and its branch in `for_spec`.
"""
import numpy as np
import tensorflow as tf

from scalable_agent_tf2.agent import distributions


class _Family:
  """A family is a value: equal, hashable and printed by its one defining field (`_FIELD`), so
  that network configs holding one compare and print as data."""

  _FIELD = ""

  def __repr__(self):
    return f"{type(self).__name__}({self._FIELD}={getattr(self, self._FIELD)})"

  def __eq__(self, other):
    return type(other) is type(self) and getattr(other, self._FIELD) == getattr(
        self, self._FIELD)

  def __hash__(self):
    return hash((type(self), getattr(self, self._FIELD)))


class CategoricalFamily(_Family):
  """Categorical policies over num_actions actions: parameters [..., N] (the logits), actions
  int32 [] (one index)."""

  _FIELD = "num_actions"
  discrete = True
  action_dtype = np.dtype(np.int32)
  action_shape = ()

  def __init__(self, num_actions):
    """Args:
      num_actions: N.
    """
    self.num_actions = num_actions

  @property
  def param_size(self):
    """P = N."""
    return self.num_actions

  def __call__(self, params):
    """Categorical of flat parameters float32 [..., N]."""
    return distributions.Categorical(params)

  def of_outputs(self, outputs):
    """The policy of an output record (structures.AgentOutput or networks.NetworkOutput):
    its policy_params [..., N], the logits."""
    return distributions.Categorical(outputs.policy_params)

  def layout(self):
    """What fixes the action tensors' shapes (checkpoint and wire settings)."""
    return dict(num_actions=self.num_actions)

  @property
  def action_feature_size(self):
    """The length of action_features' rows: N."""
    return self.num_actions

  def action_features(self, actions):
    """A previous action as the network reads it (Figure 3): int [N'] -> one-hot float32
    [N', N]."""
    return tf.one_hot(tf.cast(actions, tf.int32), self.num_actions)

  def sample_rows(self, params, rngs):
    """One action per row of params [G, N] by the Gumbel-max trick, row g drawn with rngs[g]:
    a row's draws do not depend on the group's other rows.

    Args:
      params: float [G, N], logits.
      rngs: G numpy Generators.

    Returns:
      int32 [G].
    """
    params = np.asarray(params)
    noise = np.stack([rng.gumbel(size=params.shape[1:]) for rng in rngs])
    return np.argmax(params + noise, axis=-1).astype(np.int32)

  def sample_numpy(self, params, rng):
    """One action from logits [N] with rng (sample_rows of one row): an int."""
    params = np.asarray(params)
    return int(np.argmax(params + rng.gumbel(size=params.shape)))


class DiagGaussianFamily(_Family):
  """Diagonal Gaussian policies over action_size real dimensions: parameters [..., 2A] (means
  then log standard deviations), actions float32 [A] (unclipped samples)."""

  _FIELD = "action_size"
  discrete = False
  action_dtype = np.dtype(np.float32)

  def __init__(self, action_size):
    """Args:
      action_size: A.
    """
    self.action_size = action_size

  @property
  def param_size(self):
    """P = 2A."""
    return 2 * self.action_size

  @property
  def action_shape(self):
    return (self.action_size,)

  def __call__(self, params):
    """DiagGaussian of flat parameters float32 [..., 2A]."""
    return distributions.DiagGaussian.from_params(params)

  def of_outputs(self, outputs):
    """The policy of an output record (structures.AgentOutput or networks.NetworkOutput):
    its policy_params [..., 2A], the means then the log standard deviations."""
    return distributions.DiagGaussian.from_params(outputs.policy_params)

  def layout(self):
    """What fixes the action tensors' shapes (checkpoint and wire settings)."""
    return dict(action_size=self.action_size)

  @property
  def action_feature_size(self):
    """The length of action_features' rows: A."""
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
    """An unclipped sample float32 [A] of N(mean, exp(log_std)^2) from parameters [2A].

    Args:
      params: float [2A] (or [..., 2A]).
      rng: numpy.random.Generator (one per actor: repeatable seeded evaluations).
    """
    return sample_gaussian_numpy(*self.split_numpy(params), rng)

  def sample_rows(self, params, rngs):
    """One action per row of params [G, 2A], row g drawn with rngs[g]: float32 [G, A]."""
    return np.stack([self.sample_numpy(row, rng) for row, rng in zip(params, rngs)])


class MultiCategoricalFamily(_Family):
  """MultiCategorical policies over nvec: parameters [..., sum(nvec)] (each component's
  logits), actions int32 [K] (one index per component)."""

  _FIELD = "nvec"
  discrete = True
  action_dtype = np.dtype(np.int32)

  def __init__(self, nvec):
    """Args:
      nvec: K positive ints, the components' numbers of actions.
    """
    self.nvec = tuple(int(n) for n in nvec)
    if not self.nvec or min(self.nvec) < 1:
      raise ValueError(f"nvec must be positive numbers of actions, got {nvec}.")

  @property
  def param_size(self):
    """P = sum(nvec)."""
    return sum(self.nvec)

  @property
  def action_shape(self):
    return (len(self.nvec),)

  def __call__(self, params):
    """MultiCategorical of flat parameters float32 [..., sum(nvec)]."""
    return distributions.MultiCategorical(params, self.nvec)

  def of_outputs(self, outputs):
    """The policy of an output record: its policy_params [..., sum(nvec)]."""
    return distributions.MultiCategorical(outputs.policy_params, self.nvec)

  def layout(self):
    """What fixes the action tensors' shapes (checkpoint and wire settings)."""
    return dict(nvec=list(self.nvec))

  @property
  def action_feature_size(self):
    """The length of action_features' rows: sum(nvec)."""
    return sum(self.nvec)

  def action_features(self, actions):
    """A previous action as the network reads it: int [N', K] -> the components' one-hots
    concatenated, float32 [N', sum(nvec)]."""
    actions = tf.cast(actions, tf.int32)
    return tf.concat([tf.one_hot(actions[..., k], n) for k, n in enumerate(self.nvec)], -1)

  def sample_rows(self, params, rngs):
    """One action per row of params [G, sum(nvec)], row g drawn with rngs[g] (each
    component by the Gumbel-max trick, CategoricalFamily's): int32 [G, K]."""
    return np.stack([self.sample_numpy(row, rng) for row, rng in zip(params, rngs)])

  def sample_numpy(self, params, rng):
    """One action int32 [K] from parameters [sum(nvec)] with rng."""
    params = np.asarray(params)
    bounds = np.cumsum((0,) + self.nvec)
    return np.array([np.argmax(params[start:end] + rng.gumbel(size=end - start))
                     for start, end in zip(bounds[:-1], bounds[1:])], np.int32)


def sample_gaussian_numpy(mean, log_std, rng):
  """DiagGaussian.sample's numpy counterpart for actors that sample in numpy.

  Args:
    mean: float [A] (or [..., A]).
    log_std: float, the same shape.
    rng: numpy.random.Generator.

  Returns:
    float32 [A] (or [..., A]), unclipped.
  """
  mean = np.asarray(mean, np.float32)
  log_std = np.asarray(log_std, np.float32)
  if mean.shape != log_std.shape:
    raise ValueError(f"policy_log_std has shape {log_std.shape}, expected {mean.shape} like "
                     f"policy_mean.")
  noise = rng.standard_normal(mean.shape, dtype=np.float32)
  return (mean + np.exp(log_std) * noise).astype(np.float32)


def for_spec(spec):
  """The action distribution family of an environment's spec: categorical over an EnvSpec's
  num_actions (IMPALA), diagonal Gaussian over a ContinuousEnvSpec's action_size (IMPACT
  section 4.3), multi-categorical over a MultiDiscreteEnvSpec's nvec (gymnasium's
  MultiDiscrete). The spec is read by its fields, not its class, as every spec is a plain
  record (environments/base.py)."""
  if hasattr(spec, "action_size"):
    return DiagGaussianFamily(spec.action_size)
  if hasattr(spec, "nvec"):
    return MultiCategoricalFamily(spec.nvec)
  return CategoricalFamily(spec.num_actions)
