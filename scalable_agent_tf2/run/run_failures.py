"""How a training run fails: the errors `training.train` raises after its final checkpoint.

Two kinds, because they ask different things of the user (experiment.py's exit codes):
RunFailed, a failure of the run itself (updates that stay non-finite, diverged parameters, no
progress for --stall_secs, a thread of the learner that died, a checkpoint or log that could
not be written: exit 1, the message names the checkpoint that holds the run's last good state);
LevelsCannotRun, levels whose environments cannot start here (exit 2, this machine's set-up,
as bad flags) or start and then keep failing (exit 1, a crash loop), all named in one message
with their families' advice and the --excluded_levels that leaves them out of a suite. The
supervisor that raises them is supervisor.py; evaluation.py raises LevelsCannotRun too.
"""
from scalable_agent_tf2.environments import LevelKeepsFailing
from scalable_agent_tf2.environments import families
from scalable_agent_tf2.environments import suites
from scalable_agent_tf2.environments.families import base as families_base


class RunFailed(RuntimeError):
  """The run stopped on a failure of its own (not a bad flag): updates that stay non-finite,
  a thread of the learner that died, a checkpoint or log that could not be written. The
  message says what happened and which checkpoint holds the run's state."""


class LogWriteFailed(RunFailed):
  """A file the run writes besides its checkpoints (log.jsonl, TensorBoard's events file,
  the learning curve) could not be written: a full disk, a read-only or deleted logdir."""


class Diverged(RunFailed):
  """Training has diverged: the parameters at the stop are not worth a checkpoint (the last
  healthy one stays the newest)."""


class NonFiniteUpdates(Diverged):
  """--max_nonfinite_updates updates in a row had a non-finite loss or gradient norm."""


class ParametersDiverged(Diverged):
  """An update left the parameters' global norm non-finite or above --max_parameter_norm, or
  every trajectory carries non-finite behaviour outputs."""


class Stalled(RunFailed):
  """No progress for --stall_secs (progress_watch.ProgressWatch)."""


class LevelsCannotRun(RuntimeError):
  """Levels whose environments cannot start or reset here, or keep failing while they run
  (environments.LevelCannotRun, LevelKeepsFailing, from one or more actors), named together
  with what to do (their families' how_to_fix).

  Attributes:
    reasons: dict level name -> reason.
    keep_failing: the levels whose environments started, then kept failing (a crash loop).
    exit_code: 1 when some level kept failing while it ran (a failure of the run, as
      RunFailed's), 2 when levels only could not start (this machine's set-up, as bad flags).
  """

  def __init__(self, reasons, config, consequence="", keep_failing=()):
    self.reasons = dict(reasons)
    self.keep_failing = frozenset(keep_failing)
    self.exit_code = 1 if self.keep_failing else 2
    names = sorted(self.reasons)
    lines = [f"{len(names)} level(s) cannot run here:"]
    # A reason from an environment's death already starts with its level's name.
    lines += [f"  {reason}" if reason.startswith(f"{name}: ") else f"  {name}: {reason}"
              for name, reason in ((name, self.reasons[name]) for name in names)]
    fix = _how_to_fix(names)
    if suites.is_suite(config.level_name):
      excluded = sorted(set(config.excluded_level_names) | set(names))
      remaining = len(config.levels) - len(set(names) & set(config.levels))
      lines.append(f"{fix}, or run without them with "
                   f"--excluded_levels={','.join(excluded)} ({config.level_name}'s score then "
                   f"covers {remaining} of {len(families.level_names(config.level_name))} "
                   f"levels).")
    else:
      lines.append(f"{fix} or choose another level.")
    super().__init__("\n".join(lines) + consequence)

  @classmethod
  def of(cls, errors, config, consequence=""):
    """From the LevelCannotRun errors of actors (or evaluation workers)."""
    return cls({e.level_name: e.reason for e in errors}, config, consequence,
               keep_failing={e.level_name for e in errors
                             if isinstance(e, LevelKeepsFailing)})


def _how_to_fix(level_names):
  """The advice of the levels' families (Family.how_to_fix), each once; DeepMind Lab's points
  to BUILD.md, a gymnasium environment's to its own code."""
  advice = []
  for name in level_names:
    family = families.find_family(name)
    fix = family.how_to_fix if family is not None else families_base.Family.how_to_fix
    if fix not in advice:
      advice.append(fix)
  return "; ".join(advice)
