"""IMPALA (Espeholt et al., 2018) in TensorFlow 2: train or test one agent (`--help`).

    python experiment.py --mode=train --level_name=atari/pong --logdir=/tmp/pong

The command line is scalable_agent_tf2/run/experiment_main.py, inside the package so that an
installed copy (`pip install .`) runs it too, as `python -m scalable_agent_tf2.run.experiment_main`;
this file is the checkout's entry point, the one README.md uses.
"""
import signal
import sys


class _SigtermWhileLoading(Exception):
  """SIGTERM before experiment_main's own handling starts (issue 41: 0.5 s after the start the
  default action killed the process without a `Stopped:` line)."""


def _raise_on_sigterm(signum, frame):
  del signum, frame
  raise _SigtermWhileLoading()


if __name__ == "__main__":  # Replaced by experiment_main.run's StopRequest once it starts.
  signal.signal(signal.SIGTERM, _raise_on_sigterm)

try:
  from scalable_agent_tf2.run.experiment_main import FLAGS  # noqa: F401 (tests read the flags)
  from scalable_agent_tf2.run.experiment_main import config_from_flags  # noqa: F401
  from scalable_agent_tf2.run.experiment_main import main  # noqa: F401
  from scalable_agent_tf2.run.experiment_main import parse_flags  # noqa: F401
  from scalable_agent_tf2.run.experiment_main import run
except (KeyboardInterrupt, _SigtermWhileLoading) as interrupt:
  # Ctrl-C or SIGTERM while Python loads the command's modules, before its own handling
  # starts (experiment_main.run): nothing has started, a line says so instead of a traceback.
  if __name__ != "__main__":
    raise
  name = "SIGTERM" if isinstance(interrupt, _SigtermWhileLoading) else "SIGINT"
  print(f"Stopped: interrupted ({name}) while starting; nothing was started.", flush=True)
  sys.exit(130 if "--mode=test" in sys.argv else 0)  # experiment_main's exit codes.

if __name__ == "__main__":
  run()
