"""Several agents trained at once in this process on one LASER episode replay.

LASER section 5.4: the agents of a hyperparameter sweep run concurrently, each adds its
experience to a common replay and samples uniformly from all of it (tagged by agent). Agents
in other processes share a replay through a service instead (replay_service.py).
"""
import os

from scalable_agent_tf2.learning import laser
from scalable_agent_tf2.run import assembly
from scalable_agent_tf2.run import training


def train_sharing_replay(configs, replay_capacity, print_fn=print, seed=0):
  """Trains several agents at once in this process on one LASER episode replay.

  Each agent is a training.train run on its own thread with its own actors, learner, logdir
  and checkpoints. The runs stop at their frame budgets; signals are not handled
  (interrupting the process loses the runs' final checkpoints, the periodic ones remain).

  Args:
    configs: dict agent tag -> resolved config.ExperimentConfig with laser_replay (e.g. a
      sweep over learning rate and entropy cost), each with its own logdir.
    replay_capacity: unrolls held by the shared replay (FIFO by episode).
    print_fn: where console lines go, each prefixed with its agent's tag.
    seed: seeds the replay's sampling.

  Returns:
    (dict agent tag -> training.TrainResult, the laser.EpisodeReplay).

  Raises:
    ValueError: a config without laser_replay, or two agents with one logdir.
    The first error of a run, once every run has stopped.
  """
  for tag, config in configs.items():
    if not config.laser_replay:
      raise ValueError(f"Agent {tag!r}: sharing a replay needs --laser_replay.")
  logdirs = [os.path.normpath(config.logdir) for config in configs.values()]
  if len(set(logdirs)) != len(logdirs):
    raise ValueError(f"Each agent needs its own logdir, got {logdirs}.")
  replay = laser.EpisodeReplay(replay_capacity, seed=seed)

  def run(tag, config):
    return lambda: training.train(config, print_fn=lambda line: print_fn(f"[{tag}] {line}"),
                                  shared_replay=replay, agent_tag=tag)
  results = assembly.run_concurrently(
      {tag: run(tag, config) for tag, config in configs.items()}, thread_prefix="agent-")
  return results, replay
