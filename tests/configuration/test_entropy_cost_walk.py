"""How far a setting travels from the command line to the learner's config: --entropy_cost,
followed by tracing every call of the package while experiment.py's command line is parsed and
the learner's config (whose entropy_cost the loss weighs) is made from it.

A call is on the walk when what it returns holds the flag's value in a new object (a config, a
dict of settings, the parsed command): the functions a reader follows to see where the value
goes. Calls that only read the config (its checks, the family's questions) are not counted, nor
the run's, which hand the whole config on to the learner (experiment_main, training, assembly).
"""
import sys

from scalable_agent_tf2.configuration import experiment_flags

PACKAGE = "scalable_agent_tf2"
VALUE = 0.0123  # No preset has it: a copy of the flag's value, wherever it is found.


def _holder(obj, depth=2):
  """The object that holds VALUE as its entropy_cost (obj, or one inside it), or None."""
  if isinstance(obj, dict):
    return obj if obj.get("entropy_cost") == VALUE else None
  if getattr(obj, "entropy_cost", None) == VALUE:
    return obj
  if depth and isinstance(obj, tuple):
    return next((h for h in (_holder(o, depth - 1) for o in obj) if h is not None), None)
  if depth and hasattr(obj, "config"):
    return _holder(obj.config, depth - 1)
  return None


def _walk(argv):
  """(the learner's config of experiment.py's `argv`, the package's calls on the walk)."""
  walk, arguments = [], {}

  def profile(frame, event, result):
    if (not frame.f_globals.get("__name__", "").startswith(PACKAGE)
        or frame.f_code.co_name.startswith("<")):  # A comprehension is its function's.
      return
    if event == "call":
      code = frame.f_code
      names = code.co_varnames[:code.co_argcount + code.co_kwonlyargcount]
      arguments[id(frame)] = [_holder(frame.f_locals.get(name)) for name in names]
    elif event == "return":
      held = _holder(result)
      if held is not None and all(held is not a for a in arguments.pop(id(frame), [])):
        walk.append(f"{frame.f_globals['__name__']}.{frame.f_code.co_qualname}")

  sys.setprofile(profile)
  try:
    parsed = experiment_flags.parse_command_line(["experiment.py", *argv])
    learner_config = parsed.config.learner_config()
  finally:
    sys.setprofile(None)
    experiment_flags.FLAGS.unparse_flags()
  return learner_config, walk


def test_entropy_cost_reaches_the_learners_config_through_four_functions(tmp_path):
  learner_config, walk = _walk(["--level_name=toy/lit_side", f"--entropy_cost={VALUE}",
                                f"--logdir={tmp_path}"])
  assert learner_config.entropy_cost == VALUE
  prefix = "scalable_agent_tf2.configuration."
  # The flag's value read into a config, resolved, the parsed command, the learner's config
  # (made a first time inside explain too, for the checks that combine the learner's settings).
  assert walk == [prefix + "config.config_of_flags", prefix + "config.ExperimentConfig"
                  ".learner_config", prefix + "config.explain",
                  prefix + "experiment_flags.parse_command_line",
                  prefix + "config.ExperimentConfig.learner_config"], walk
