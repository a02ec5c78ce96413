"""A run's files, read and written without TensorFlow at import.

runlog.py         the run log (log.jsonl).
checkpoints.py    the run's checkpoints: their layout, saving, restoring, what a kill leaves,
                  policy-only folders (its Checkpointer imports TensorFlow when it runs).
durable_files.py  files a kill never leaves half written (checkpoints' and results' files).
plot.py           the learning curve.
run_directory.py  the logdir: its lock and what it holds.
videos.py         test mode's episode videos.

May import: nothing of the project's but utils; TensorFlow only inside checkpoints.py's
functions (the population driver and the command line's checks read files alone).
"""
