"""What stops a training run early, and what train raises for it (run_failures.py's errors).

The supervisor (supervisor.py) asks `stops_the_run` on every watch: an actor's error stops the
run at once; levels that cannot run are collected until every actor has delivered a first
trajectory or failed (or LEVEL_CHECK_SECS), so that one message names them all; a thread of the
learner's that died, a level whose environments keep hanging (MAX_HANGS_PER_LEVEL) and no
progress for --stall_secs (progress_watch.py) stop it too. The learner thread asks
`skipped_update` and `check_parameters` after each update: --max_nonfinite_updates skipped
updates in a row, or parameters whose global norm is not finite or above --max_parameter_norm
(finite but huge parameters make every actor's output NaN, so no update would be skipped again),
mean training has diverged. After the final checkpoint `raise_failure` raises what stopped the
run, naming the checkpoint that holds its state.
"""
import tensorflow as tf

from scalable_agent_tf2.acting import actor as actor_lib
from scalable_agent_tf2.acting import watchdog
from scalable_agent_tf2.environments import LevelCannotRun
from scalable_agent_tf2.run import assembly
from scalable_agent_tf2.run import progress_watch
from scalable_agent_tf2.run.run_failures import LevelsCannotRun
from scalable_agent_tf2.run.run_failures import NonFiniteUpdates
from scalable_agent_tf2.run.run_failures import ParametersDiverged
from scalable_agent_tf2.run.run_failures import RunFailed
from scalable_agent_tf2.run.run_failures import Stalled

# How long the supervisor keeps collecting levels that cannot run once one is reported, while
# other actors have not yet delivered a first trajectory nor failed (their environments may
# still be starting: DMLab-30 compiles maps for about a minute on a small machine).
LEVEL_CHECK_SECS = 300.0
# Environment calls that hang before a level is given up (the run stops with an error): a
# level whose every environment hangs would otherwise leave a stuck thread per replacement.
MAX_HANGS_PER_LEVEL = 3


class FailurePolicy:
  """What stopped the run: `failure` (neither an actor's nor the learner thread's error: a
  checkpoint or log that could not be written, a dead thread of the learner's, a stall),
  `learner_error` (the learner thread's), `stop_reason` (the Stopped: line's words) and
  `cannot_run` (level name -> environments.LevelCannotRun from actors)."""

  def __init__(self, config, print_fn, checkpoints):
    """checkpoints: the run's checkpoint_policy.CheckpointPolicy (what to resume from)."""
    self._config = config
    self._print = print_fn
    self._checkpoints = checkpoints
    self.failure = None
    self.learner_error = None
    self.stop_reason = "frame budget reached"
    self.cannot_run = {}
    self._cannot_run_since = None

  def fail(self, error):
    """Records `error` as what stopped the run, unless something stopped it already."""
    self.failure = self.failure or error

  def errors(self):
    return (self.learner_error, self.failure)

  def stops_the_run(self, actors, learner_input, monitor, num_updates, skipped_in_a_row,
                    watch, now):
    """Whether the run stops now (`failure` or `stop_reason` then says why)."""
    return (self._actors_stop_the_run(actors, now) or self._a_thread_died(actors)
            or self._hung_environments(actors, monitor, now)
            or self._stalled(actors, learner_input, num_updates, skipped_in_a_row, watch, now))

  def _actors_stop_the_run(self, actors, now):
    """Whether actors' failures stop the run now: an error at once; levels that cannot run
    once every actor has delivered a first trajectory or failed (or after LEVEL_CHECK_SECS)."""
    failed = actors.failed()
    if failed is None:
      return False
    threads = [t for t in getattr(actors, "threads", ()) if t.error is not None]
    other = next((t for t in [failed] + threads
                  if not isinstance(t.error, LevelCannotRun)), None)
    if other is not None:
      self.stop_reason = f"{other.name} failed"
      return True
    self.cannot_run = {t.error.level_name: t.error for t in threads}
    if self._cannot_run_since is None:
      self._cannot_run_since = now
      self._print(f"Level(s) cannot run: {', '.join(sorted(self.cannot_run))}; waiting for "
                  "every actor's first trajectory to find all such levels ...")
    settled = all(t.num_trajectories > 0 or t.error is not None or not t.is_alive()
                  for t in actors.threads)
    if settled or now - self._cannot_run_since >= LEVEL_CHECK_SECS:
      self.stop_reason = f"level(s) cannot run: {', '.join(sorted(self.cannot_run))}"
      return True
    return False

  def _a_thread_died(self, actors):
    """Whether a thread of the learner's (a cluster's trajectory pump) died (an actor's
    failure is _actors_stop_the_run's; the learner thread's, learner_error)."""
    dead = actors.failed_thread()
    if dead is None:
      return False
    name, error = dead
    self.fail(RunFailed(f"The learner's {name} thread died: {type(error).__name__}: {error}"))
    return True

  def _hung_environments(self, actors, monitor, now):
    """Whether hung environment calls stop the run (a level that keeps hanging); hung ones
    are reported and their actors replaced (LocalActors.hung)."""
    if not hasattr(actors, "hung"):
      return False  # Actor processes: their environments have their own timeouts.

    def limits_of(level):
      step, reset = assembly.environment_timeouts(self._config, level)
      return {watchdog.STEP: step, watchdog.RESET: reset}
    for level, call, line in actors.hung(now, limits_of):
      monitor.record_restart(level, watchdog.Abandoned(line))  # Counted and printed.
      if actors.hangs[level] >= MAX_HANGS_PER_LEVEL:
        self.fail(RunFailed(
            f"{level}: its environments hung {actors.hangs[level]} times; the last "
            f"{call}() ran past --env_{call}_timeout_secs={limits_of(level)[call]:g}. Fix the "
            f"environment's {call}(), or raise that limit if it is only slow."))
        return True
    return False

  def _stalled(self, actors, learner_input, num_updates, skipped_in_a_row, watch, now):
    """Whether the run has made no progress for --stall_secs (progress_watch)."""
    alive = any(t.is_alive() for t in getattr(actors, "threads", ())) or not hasattr(
        actors, "threads")
    counters = progress_watch.Counters(
        produced=actors.delivered()["produced"], dropped=learner_input.dropped_trajectories,
        num_updates=num_updates, actors_alive=alive, skipped_in_a_row=skipped_in_a_row)
    stall = watch.observe(counters, now, learner_input.dropped_fields)
    if stall is None:
      return False
    if watch.stall_diverged:
      self.fail(ParametersDiverged(
          f"{stall}. Lower --learning_rate (or set --max_grad_norm), then "
          f"{self._checkpoints.resume_advice()}."))
    else:
      self.fail(Stalled(f"No progress for --stall_secs={self._config.stall_secs:g}: {stall}."))
    return True

  def skipped_update(self, stats, in_a_row):
    """Says a skipped update (non-finite loss or gradient norm); raises NonFiniteUpdates at
    --max_nonfinite_updates of them in a row."""
    limit = self._config.max_nonfinite_updates
    self._print(f"Skipped a learner update: loss {stats['total_loss']:.3g}, gradient norm "
                f"{stats['grad_norm']:.3g} (not finite); parameters unchanged ({in_a_row} in a "
                f"row, the run stops at {limit}).")
    if in_a_row >= limit:
      raise NonFiniteUpdates(
          f"{in_a_row} learner updates in a row had a non-finite loss or gradient norm "
          f"(--max_nonfinite_updates={limit}): training has diverged. Lower --learning_rate "
          f"(or set --max_grad_norm), then resume from the last checkpoint.")

  def check_parameters(self, when, norm):
    """Raises ParametersDiverged when the parameters' global norm (the update's
    parameter_norm) is not finite or above --max_parameter_norm."""
    limit = self._config.max_parameter_norm
    if not progress_watch.parameters_healthy(norm, limit):
      raise ParametersDiverged(
          f"The parameters' global norm is {norm:.3g} {when} (--max_parameter_norm="
          f"{limit:g}): training has diverged. Lower --learning_rate (or set "
          f"--max_grad_norm), then {self._checkpoints.resume_advice()}.")

  def stopped_by(self):
    """The failure the Stopped: line names: `failure`, else the learner thread's error."""
    return self.failure or self.learner_error

  @staticmethod
  def levels_failed_before_any_update(actors, num_updates):
    """Levels that could not start, or kept failing (LevelCannotRun, LevelKeepsFailing),
    stopped the run before its first update."""
    return num_updates == 0 and any(
        isinstance(t.error, LevelCannotRun) for t in getattr(actors, "threads", ()))

  def raise_failure(self, actors, learner_input):
    """Raises what stopped the run early: a failed actor, a lost replay service, the
    learner's error (all after the final checkpoint)."""
    saved, kept = self._checkpoints.saved(), self._checkpoints.kept()
    failed = actors.failed()
    if failed is not None and isinstance(failed.error, LevelCannotRun):
      threads = getattr(actors, "threads", ())
      self.cannot_run.update({t.error.level_name: t.error for t in threads
                              if isinstance(t.error, LevelCannotRun)})
      raise LevelsCannotRun.of(self.cannot_run.values(), self._config, saved) from failed.error
    if failed is not None:
      raise actor_lib.ActorFailed.of(failed, saved) from failed.error
    if learner_input.lost_replay:
      lost = learner_input.lost_replay[0]
      raise type(lost)(f"{lost}{saved}") from lost
    if self.failure is not None:
      kind = type(self.failure) if isinstance(self.failure, RunFailed) else RunFailed
      raise kind(f"{self.failure}{kept}") from self.failure
    error = self.learner_error
    if isinstance(error, RunFailed):
      raise type(error)(f"{error}{kept}") from error
    if error is not None and not isinstance(error, tf.errors.CancelledError):
      raise RunFailed(f"The learner thread failed: {type(error).__name__}: {error}"
                      f"{kept}") from error
