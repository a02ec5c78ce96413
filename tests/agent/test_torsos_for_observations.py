"""torsos.torso_for_observation: the torso each kind of observation takes, and the MLP and
one-hot torsos for vector and Discrete observations."""
import numpy as np
import pytest

from scalable_agent_tf2.agent import torsos


@pytest.mark.parametrize("kind, shape, torso, has_instruction, name, use_instruction", [
    ("frame", (84, 84, 4), None, False, "shallow", False),
    ("frame", (72, 96, 3), "deep", True, "deep", True),  # Image + text mission.
    ("vector", (4,), None, False, torsos.MLP, False),
    ("index", (16,), None, False, torsos.ONE_HOT, False)])
def test_each_kind_of_observation_gets_its_torso(kind, shape, torso, has_instruction, name,
                                                 use_instruction):
  choice = torsos.torso_for_observation(kind, shape, torso, has_instruction)
  assert (choice.name, choice.use_instruction) == (name, use_instruction)


@pytest.mark.parametrize("kind, shape, torso, message", [
    ("vector", (4,), "deep", "is for image frames"),
    ("vector", (2, 3), None, "No torso for vector observations"),
    ("frame", (84, 84), None, "shape \\(H, W, C\\)"),
    ("tokens", (4,), None, "No torso for tokens")])
def test_what_no_torso_takes_is_named(kind, shape, torso, message):
  with pytest.raises(ValueError, match=message):
    torsos.torso_for_observation(kind, shape, torso)


def test_the_mlp_and_one_hot_torsos():
  init = torsos.Initializer(0)
  mlp = torsos.build_torso(torsos.torso_for_observation("vector", (4,)), init)
  out = mlp(np.ones((3, 4), np.float32)).numpy()
  assert out.shape == (3, torsos.MLP_HIDDEN_SIZES[-1]) and np.all(np.abs(out) < 1)  # tanh.
  assert [layer.w.shape.as_list() for layer in mlp.layers] == [[4, 256], [256, 256]]
  one_hot = torsos.build_torso(torsos.torso_for_observation("index", (5,)), init)
  np.testing.assert_array_equal(one_hot(np.array([0, 4])).numpy(),
                                np.eye(5, dtype=np.float32)[[0, 4]])
