"""How many of the package's files one learner update (and one actor step) runs through.

    python -m benchmarks.tools.call_path              # both paths, a table each
    python -m benchmarks.tools.call_path --json       # the same as JSON
    python -m benchmarks.tools.call_path --markdown   # docs/ARCHITECTURE.md's reading path

A reader who wants to change the loss follows one update from the batch to the optimizer step;
every file it crosses is one more to open. This tool runs docs/ARCHITECTURE.md's "one learner
update, by hand" (Atari, shallow network, Table G.1's batch of 32 x 20) and one actor step with
every tf.function run eagerly, so that each Python function the path calls is seen, and records
with sys.setprofile each call whose callee is in scalable_agent_tf2/:
- files: the package's files whose functions ran;
- cross_file_calls: the distinct (caller function, callee function) pairs whose files differ
  (the calls a reader has to follow from one file into another);
- functions: the package's distinct functions that ran;
- entries: for each file, the functions entered from another file (or the first one called),
  in the order they ran: where a reader starts in that file.
Building the agent and the learner is left out: what is counted is the update (and the step)
alone, as a reader follows it. The acceptance bound (MAX_FILES, MAX_CROSS_FILE_CALLS) is
checked by tests/benchmark_tools/test_call_path.py, which also checks that ARCHITECTURE.md's
reading path is this tool's --markdown output.
"""
import argparse
import json
import os
import sys

# The bound on both paths: a reader changing the loss (or the acting step) opens at most 7 of
# the package's files and follows at most 20 calls from one into another.
MAX_FILES = 7
MAX_CROSS_FILE_CALLS = 20

PACKAGE = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__)))), "scalable_agent_tf2")


def _in_package(filename):
  return filename.startswith(PACKAGE + os.sep)


def _relative(filename):
  return os.path.relpath(filename, os.path.dirname(PACKAGE))


class CallRecorder:
  """Records the package's calls made while it is active (a sys.setprofile hook)."""

  def __init__(self):
    self.files = []          # in the order they are first entered: the reading order
    self.entries = {}        # file -> the functions entered from elsewhere, in order
    self.functions = set()
    self.cross_file_calls = set()
    self.cross_file_call_sites = set()

  def _hook(self, frame, event, unused_arg):
    if event != "call":
      return
    callee = frame.f_code
    if not _in_package(callee.co_filename):
      return
    name = (_relative(callee.co_filename), callee.co_qualname)
    self.functions.add(name)
    if name[0] not in self.files:
      self.files.append(name[0])
    caller = frame.f_back
    # The nearest caller in the package: calls through TensorFlow or tf.nest between two of
    # the package's functions still cross from one of its files to another.
    while caller is not None and not _in_package(caller.f_code.co_filename):
      caller = caller.f_back
    caller_name = (None if caller is None
                   else (_relative(caller.f_code.co_filename), caller.f_code.co_qualname))
    if caller_name is None or caller_name[0] != name[0]:
      entries = self.entries.setdefault(name[0], [])
      if name[1] not in entries:
        entries.append(name[1])
    if caller_name is not None and caller_name[0] != name[0]:
      self.cross_file_calls.add((caller_name, name))
      self.cross_file_call_sites.add((caller_name[0], caller.f_lineno, name))

  def __enter__(self):
    sys.setprofile(self._hook)
    return self

  def __exit__(self, *unused_exc):
    sys.setprofile(None)

  def summary(self):
    return {"files": list(self.files), "num_files": len(self.files),
            "entries": {f: list(self.entries.get(f, ())) for f in self.files},
            "num_functions": len(self.functions),
            "num_cross_file_calls": len(self.cross_file_calls),
            "num_cross_file_call_sites": len(self.cross_file_call_sites),
            "cross_file_calls": sorted(f"{a[0]}:{a[1]} -> {b[0]}:{b[1]}"
                                       for a, b in self.cross_file_calls)}


def _atari_batch(T, B, num_actions, seed=0):
  import numpy as np

  from scalable_agent_tf2.structures import AgentOutput
  from scalable_agent_tf2.structures import EnvOutput
  from scalable_agent_tf2.structures import Observation
  rng = np.random.default_rng(seed)
  env_outputs = EnvOutput(
      reward=np.zeros((T + 1, B), np.float32), done=np.zeros((T + 1, B), bool),
      observation=Observation(frame=rng.integers(0, 256, (T + 1, B, 84, 84, 4), np.uint8),
                              instruction=()),
      episode_return=np.zeros((T + 1, B), np.float32),
      episode_step=np.zeros((T + 1, B), np.int32), truncated=np.zeros((T + 1, B), bool))
  agent_outputs = AgentOutput(action=np.zeros((T + 1, B), np.int32),
                              policy_params=np.zeros((T + 1, B, num_actions), np.float32),
                              baseline=np.zeros((T + 1, B), np.float32))
  return env_outputs, agent_outputs


def learner_update_path():
  """The path of docs/ARCHITECTURE.md's learner update (Atari shallow, Table G.1)."""
  import tensorflow as tf

  from scalable_agent_tf2.agent import networks
  from scalable_agent_tf2.configuration import config as config_lib
  from scalable_agent_tf2.learning import learner
  tf.config.run_functions_eagerly(True)
  try:
    agent = networks.Agent(networks.atari_config(num_actions=6))
    atari = config_lib.config_from_argv(["--level_name=atari/pong"])  # Table G.1.
    update = learner.Learner(agent, atari.learner_config())
    T, B = 20, 32  # Table G.1: unroll length 20, batch size 32.
    env_outputs, agent_outputs = _atari_batch(T, B, num_actions=6)
    state = agent.initial_state(B)
    update.update(state, env_outputs, agent_outputs)  # builds the optimizer's slots
    with CallRecorder() as recorder:
      update.update(state, env_outputs, agent_outputs)
  finally:
    tf.config.run_functions_eagerly(False)
  return recorder.summary()


def actor_step_path():
  """The path of one actor step on Atari Pong (a vector group of 2 games, the shallow network):
  from the group's observations through the network's step to the actions sent to the games.
  The per-actor policy runs the network on the actor's own thread (the batched policy runs it
  on dynamic_batching's serving thread, which the profile hook of this thread does not see;
  the network's code is the same)."""
  import numpy as np
  import tensorflow as tf

  from scalable_agent_tf2.acting import actor
  from scalable_agent_tf2.acting import policies
  from scalable_agent_tf2.agent import networks
  from scalable_agent_tf2.environments.atari_vector import AtariVectorGroup
  tf.config.run_functions_eagerly(True)
  loop = None
  try:
    agent = networks.Agent(networks.atari_config(num_actions=6))
    policy = policies.PerActorPolicy(agent)
    seeds = [1, 2]
    loop = actor.EnvironmentLoop(lambda attempt: AtariVectorGroup("pong", seeds), policy,
                                 [np.random.default_rng(s) for s in seeds], "atari/pong")
    loop.step()
    with CallRecorder() as recorder:
      loop.step()
  finally:
    tf.config.run_functions_eagerly(False)
    if loop is not None:
      loop.close()
  return recorder.summary()


PATH_TITLES = {
    "learner_update": "One learner update (the snippet above: Atari, the shallow network, "
                      "Table G.1's batch)",
    "actor_step": "One actor step (Atari Pong, a vector group of 2 games, the shallow "
                  "network, the per-actor policy)",
}


def markdown(paths):
  """docs/ARCHITECTURE.md's reading path: each path's files in reading order, with where a
  reader enters each (the functions called from another file)."""
  lines = []
  for name, summary in paths.items():
    lines += [f"{PATH_TITLES[name]}: {summary['num_files']} files, "
              f"{summary['num_cross_file_calls']} calls from one into another.", "",
              "| # | file | entered at |", "|---|---|---|"]
    for index, filename in enumerate(summary["files"], 1):
      entries = ", ".join(f"`{entry}`" for entry in summary["entries"][filename])
      lines.append(f"| {index} | `{filename}` | {entries} |")
    lines.append("")
  return "\n".join(lines).rstrip("\n")


def measured_paths():
  """{"learner_update": summary, "actor_step": summary}."""
  from scalable_agent_tf2.utils import quiet_tensorflow
  quiet_tensorflow.import_tensorflow()
  return {"learner_update": learner_update_path(), "actor_step": actor_step_path()}


def main(argv=None):
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  parser.add_argument("--json", action="store_true", help="print JSON instead of a table")
  parser.add_argument("--markdown", action="store_true",
                      help="print docs/ARCHITECTURE.md's reading path")
  args = parser.parse_args(argv)
  paths = measured_paths()
  if args.json:
    print(json.dumps(paths, indent=1))
    return
  if args.markdown:
    print(markdown(paths))
    return
  for name, summary in paths.items():
    print(f"{name}: {summary['num_files']} files, {summary['num_cross_file_calls']} "
          f"cross-file calls ({summary['num_cross_file_call_sites']} call sites), "
          f"{summary['num_functions']} functions")
    for filename in summary["files"]:
      print(f"  {filename}")


if __name__ == "__main__":
  main()
