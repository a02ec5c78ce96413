"""Process-level helpers every command uses.

profiling.py        where a run's CPU time goes (per-thread accounting).
stop_signals.py     SIGINT and SIGTERM as stop requests.
quiet_tensorflow.py imports TensorFlow without its start-up noise.

May import: nothing of the project's; TensorFlow only lazily (quiet_tensorflow).
"""
