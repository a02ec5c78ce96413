"""What a training run did: `training.train`'s TrainResult, and where its trajectories went.

Every trajectory an actor delivers is accounted for at the stop (TrajectoryAccounts): trained
on, dropped for non-finite numbers, LASER's online fill of replayed places, or left queued or
prefetched (never counted as frames: the learner counts a batch's frames when it trains on
it). The supervisor (supervisor.py) prints the accounts as the `Trajectories:` line, with the
rest of the stop's report (`report_lines`), and returns them with the result.
"""
import dataclasses
from typing import Optional

from scalable_agent_tf2.run import input_pipeline
from scalable_agent_tf2.runfiles import runlog


@dataclasses.dataclass(frozen=True)
class TrajectoryAccounts:
  """Where a run's trajectories went.

  produced: delivered to the learner's queues (by local actors, or admitted from actor
    processes). trained: in this run's updates. dropped: of the produced, refused for
    non-finite numbers (input_pipeline.non_finite_fields; never trained on). untrained:
    produced - trained - dropped - online_fill (queued or prefetched at the stop, never
    counted as frames). online_fill: LASER's
    replayed places filled with online trajectories (laser.EpisodeMixer): trained on
    (unless prefetched at the stop) but not counted as frames (docs/LASER.md, "Departures").
    by_actor_process, duplicates (a cluster's learner only): actor process -> trajectories
    admitted, and -> repeated messages dropped.
  """
  produced: int
  trained: int
  untrained: int
  dropped: int = 0
  online_fill: int = 0
  by_actor_process: Optional[dict] = None
  duplicates: Optional[dict] = None

  @classmethod
  def count(cls, produced, trained, online_fill=0, dropped=0, **by_process):
    return cls(produced=produced, trained=trained,
               untrained=produced - trained - dropped - online_fill, dropped=dropped,
               online_fill=online_fill, **by_process)

  def lines(self):
    """The console's account."""
    dropped = (f"{self.dropped} dropped (non-finite numbers), " if self.dropped else "")
    lines = [f"Trajectories: {self.produced} delivered, {self.trained} trained on, {dropped}"
             f"{self.untrained} not trained on (queued or prefetched at the stop; not "
             f"counted as frames)."]
    if self.online_fill:
      lines.append(f"  {self.online_fill} filled replayed places while the replay held no "
                   f"complete episode (not counted as frames).")
    for task in sorted(self.by_actor_process or {}):
      line = f"  actor process {task}: {self.by_actor_process[task]} trajectories"
      if self.duplicates.get(task):
        line += f", {self.duplicates[task]} repeated messages dropped"
      lines.append(line)
    return lines


@dataclasses.dataclass(frozen=True)
class TrainResult:
  """What `train` did.

  recent_returns: level -> mean of recent episode returns. checkpoint: path of the last
  checkpoint written. replay: with --laser_replay, input_pipeline.ReplayAccounts.
  """
  num_env_frames: int
  num_updates: int
  recent_returns: dict
  checkpoint: str
  trajectories: TrajectoryAccounts
  replay: Optional[input_pipeline.ReplayAccounts] = None


def report_lines(accounts, skipped_updates, dropped_trajectories, refusal_lines,
                 num_restarts):
  """The stop's console lines before its `Stopped:` line: where the trajectories went, the
  updates skipped, the trajectories dropped, a cluster learner's refused credentials
  (refusal_lines), the environments restarted."""
  lines = list(accounts.lines())
  if skipped_updates:
    lines.append(f"Learner updates skipped (non-finite loss or gradient norm): "
                 f"{skipped_updates}.")
  if dropped_trajectories:
    lines.append(f"Trajectories dropped (non-finite numbers): {dropped_trajectories}.")
  lines += refusal_lines
  if num_restarts:
    lines.append(f"Environments restarted after a failure: {num_restarts} (the episodes they "
                 f"were playing dropped; {runlog.LOG_FILE}'s {runlog.ENVIRONMENT_FAILURE} "
                 f"records say why).")
  return lines
