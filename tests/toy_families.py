"""The toy task (scalable_agent_tf2/environments/toy.py) as the tests run it through the
production path, training.train(config) and evaluation.evaluate(config), the config carrying
what a test needs.

`on_toy(config)`: a config resolved for another level (Atari's presets: Table G.1's learner)
moved onto the toy level and its 20x20 frames, where the toy family builds TOY_NETWORK (the
shallow torso, no LSTM; --torso as the config says).

`with_faults(config, ...)`: the same task in FaultyToyFamily, an environment family of the
tests' own registered as a user registers theirs (families.register, docs/ENVIRONMENTS.md;
importing this module registers it): its environments crash, refuse to start or step slowly
as the config's --env_kwargs say (as gymnasium's family takes them), and its LSTM level builds
the network with an LSTM.

No TensorFlow at import: environment processes and population members import it.
"""
import dataclasses
import json

from scalable_agent_tf2.environments import families
from scalable_agent_tf2.environments import toy
from scalable_agent_tf2.environments.families import base as family_base
from scalable_agent_tf2.environments.families import toy as toy_family

LEVEL_NAME = "faulty-toy/lit_side"
LSTM_LEVEL_NAME = "faulty-toy/lit_side_lstm"  # The same task; the network has an LSTM.


def toy_network(torso="shallow", use_lstm=False):
  """The toy task's network (20x20 grey frames, 3 actions): what the families build."""
  from scalable_agent_tf2.agent import networks  # pylint: disable=import-outside-toplevel
  return networks.NetworkConfig(num_actions=toy.NUM_ACTIONS, frame_shape=toy.FRAME_SHAPE,
                                torso=torso, use_lstm=use_lstm, use_instruction=False)


def on_toy(config, level_name=toy.LEVEL_NAME):
  """`config` on a toy level and the toy's frames (its family's network reads --width and
  --height)."""
  height, width, _ = toy.FRAME_SHAPE
  return dataclasses.replace(config, level_name=level_name, width=width, height=height)


def with_faults(config, lstm=False, **faults):
  """`config` on FaultyToyFamily's level; faults: crash_after_steps (an environment process
  dies after that many steps), refuse_after_calls (environments built after that many fail
  to start, so that a restart fails), step_secs (seconds a step sleeps)."""
  return dataclasses.replace(on_toy(config, LSTM_LEVEL_NAME if lstm else LEVEL_NAME),
                             env_kwargs=json.dumps(faults) if faults else "")


class FaultyToyFamily(toy_family.ToyFamily):
  """The toy task with the faults the config's --env_kwargs ask for (with_faults)."""
  name = "faulty-toy"
  title = "The toy task with faults injected (tests)"
  prefixes = ("faulty-toy/",)
  takes_env_kwargs = True

  def listed_levels(self):
    return (LEVEL_NAME, LSTM_LEVEL_NAME)

  def environment_options(self, config):
    options = json.loads(config.env_kwargs or "{}")
    # What refuse_after_calls counts: this run's environments (its constructor is made once
    # per run from these options), the check of every level's arguments included.
    options["calls"] = [0]
    return options

  def environment_constructor(self, level_name, seed, test_mode, options):
    del level_name, test_mode  # One task, the same in test mode.
    options = dict(options)
    calls, refuse_after = options.pop("calls"), options.pop("refuse_after_calls", None)
    calls[0] += 1
    refuse = refuse_after is not None and calls[0] > refuse_after
    return toy.LitSideEnvironment, dict(seed=seed, refuse=refuse, **options)

  def network_config(self, config, spec):
    return family_base.frame_network_config(config, spec.num_actions, 1,
                                            use_lstm=config.levels[0] == LSTM_LEVEL_NAME,
                                            use_instruction=False)


FAMILY = next((f for f in families.families() if f.name == FaultyToyFamily.name), None)
if FAMILY is None:
  FAMILY = families.register(FaultyToyFamily())
