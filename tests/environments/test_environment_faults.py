"""Environments that misbehave while they run (issue 41): a NaN observation, a wrong shape or
dtype, a step() that raises. Each is an environment fault (base.EnvironmentFault): named with
its level, field, step and episode (and, for the user's own exception, the file and line of
their code that raised), the environment replaced like a dead environment process; nothing
non-finite reaches the observation filter. tests/run/test_stopping_and_faults.py runs the same
faults end to end."""
import numpy as np
import pytest

from scalable_agent_tf2.acting import action_spaces
from scalable_agent_tf2.acting import actor
from scalable_agent_tf2.environments import base
from scalable_agent_tf2.environments import gym_env
from scalable_agent_tf2.environments import process
from scalable_agent_tf2.structures import EnvOutput
from scalable_agent_tf2.structures import Observation
from tests.environments.test_gym_family import USER
from tests.environments.test_gym_family import _DiscretisedTarget
from tests.environments.test_gym_family import _UniformPolicy
from tests.gym_user_package import envs as user_envs

TARGET = USER + "UserTarget-v0"


def user_raise_line(message_start="the user's simulator lost", function="step"):
  """"<path of tests/gym_user_package/envs.py>:<line> in step": where UserTarget raises the
  error whose message starts with message_start."""
  with open(user_envs.__file__, encoding="utf-8") as f:
    line = next(number for number, text in enumerate(f, 1)
                if f'raise RuntimeError("{message_start}' in text)
  return f"{user_envs.__file__}:{line} in {function}"


class _FilteringPolicy(_UniformPolicy):
  """The uniform stand-in with a run's observation filter, as build_agent attaches one to an
  agent on vector observations."""

  def __init__(self, observation_size):
    self.action_space = action_spaces.ActionSpace(
        _UniformPolicy.action_space.distribution,
        observation_filter=action_spaces.ObservationFilter(observation_size))


def _loop(first_env_kwargs, policy=None):
  """An EnvironmentLoop over UserTarget whose first environment takes first_env_kwargs and
  whose replacements are well-behaved; (loop, restart messages)."""
  restarts = []

  def factory(attempt):
    return [_DiscretisedTarget(gym_env.GymEnvironment(
        TARGET, seed=attempt, env_kwargs=first_env_kwargs if attempt == 0 else {}))]
  loop = actor.EnvironmentLoop(factory, policy or _UniformPolicy(),
                               [np.random.default_rng(0)], TARGET,
                               on_restart=lambda level, error: restarts.append(str(error)))
  return loop, restarts


def test_a_nan_observation_is_a_fault_that_never_reaches_the_filters_statistics():
  policy = _FilteringPolicy(2)
  loop, restarts = _loop({"nan_at": 3}, policy)
  with pytest.raises(actor.EnvironmentRestarted):
    loop.unroll(5)
  assert restarts == [f"{TARGET}: step 3 of episode 1: the environment returned an observation "
                      "holding nan at (0,); its spec promises finite numbers (float32 [2])."]
  statistics = policy.action_space.observation_filter.filter
  # initial() and two steps, not the NaN; then the replacement's initial().
  assert statistics.count == 4
  trajectories = loop.unroll(5)  # The replacement plays on, normalised by finite statistics.
  assert statistics.count == 9 and all(np.isfinite(statistics.state()[k]).all()
                                       for k in ("mean", "m2"))
  assert np.isfinite(trajectories[0].env_outputs.observation.frame).all()
  loop.close()


def test_a_wrong_shape_is_a_fault_named_with_its_step_and_the_environment_replaced():
  loop, restarts = _loop({"bad_shape_at": 2})
  with pytest.raises(actor.EnvironmentRestarted):
    loop.unroll(5)
  assert restarts == [f"{TARGET}: step 2 of episode 1: the environment returned an observation "
                      "of shape (3,); its observation space promises (2,)."]
  assert len(loop.unroll(5)) == 1
  loop.close()


def test_the_users_exception_names_their_file_and_line_also_from_an_environment_process():
  local = gym_env.GymEnvironment(TARGET, env_kwargs={"raise_at": 2})
  remote = process.EnvironmentProcess(gym_env.GymEnvironment,
                                      kwargs=dict(level_name=TARGET, env_kwargs={"raise_at": 2}))
  try:
    for env in (local, remote):
      env.initial()
      env.step([0.0])
      with pytest.raises(gym_env.EnvironmentStepFailed) as raised:
        env.step([0.0])
      assert isinstance(raised.value, actor.ENVIRONMENT_FAILURES)
      assert raised.value.user_frame == user_raise_line()
      assert str(raised.value) == (
          f"{TARGET}: step 2 of episode 1: the environment's step() raised RuntimeError: the "
          f"user's simulator lost its connection (at {user_raise_line()}).")
  finally:
    local.close()
    remote.close()


def test_a_constructor_that_raises_names_the_users_line_in_an_error_not_a_traceback():
  with pytest.raises(gym_env.EnvironmentCannotBeMade) as raised:
    gym_env.GymEnvironment(TARGET, env_kwargs={"refuse_to_start": True})
  where = user_raise_line("the user's simulator licence", "__init__")
  assert str(raised.value) == (f"{TARGET}: making the environment raised RuntimeError: the "
                               f"user's simulator licence has expired (at {where}).")
  # When the settings are resolved (the family reads the spaces), a ValueError: the command
  # line's `error:` line, before anything starts; in an actor, an environment fault (retried).
  assert isinstance(raised.value, ValueError)
  assert isinstance(raised.value, actor.ENVIRONMENT_FAILURES)


def _output(frame, reward=0.0):
  return EnvOutput(reward=reward, done=False, observation=Observation(frame=frame, instruction=""),
                   episode_return=0.0, episode_step=1, truncated=False)


@pytest.mark.parametrize("spec, output, problem", [
    (base.EnvSpec(2, (4, 4, 3)), _output(np.zeros((4, 4, 3), np.float32)),
     "an observation of dtype float32 and shape [4, 4, 3]; its spec promises uint8 [4, 4, 3]"),
    (base.EnvSpec(2, (3,)), _output(np.zeros(4)),
     "an observation of dtype float64 and shape [4]; its spec promises float32 [3]"),
    (base.EnvSpec(2, ()), _output(np.int64(1)),
     "an observation of dtype int64 and shape []; its spec promises int32 []"),
    (base.EnvSpec(2, (3,)), _output(np.array([0.0, np.inf, -np.inf])),
     "an observation holding inf at (1,), -inf at (2,); its spec promises finite numbers"),
    (base.EnvSpec(2, (3,)), _output(np.zeros(3), reward=float("nan")),
     "a reward of nan; a reward is one finite number"),
])
def test_an_output_that_breaks_its_spec_is_named(spec, output, problem):
  assert base.output_problem(output, spec).startswith(problem)
  # Vectors of any real dtype are fine: the observation filter makes them float32.
  assert base.output_problem(_output(np.zeros(3, np.float64)), base.EnvSpec(2, (3,))) is None
