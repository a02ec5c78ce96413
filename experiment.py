"""IMPALA (Espeholt et al., 2018) in TensorFlow 2: train or test one agent (`--help`).

    python experiment.py --mode=train --level_name=atari/pong --logdir=/tmp/pong

The command is scalable_agent_tf2/run/experiment_main.py (its start: signals, the config
resolved once) and scalable_agent_tf2/configuration/experiment_flags.py (its flags), inside the
package so that an installed copy (`pip install .`) runs it too, as
`python -m scalable_agent_tf2.run.experiment_main`; this file is the checkout's entry point,
the one README.md uses.
"""
if __name__ == "__main__":
  # Only the start-up's own light module loads before it installs the command's stop handler:
  # a signal while the rest loads is answered with the "Stopped:" line.
  from scalable_agent_tf2.run import experiment_main
  experiment_main.run()
