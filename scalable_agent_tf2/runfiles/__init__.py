"""A run's files, read and written without TensorFlow.

runlog.py            the run log (log.jsonl).
checkpoint_files.py  the checkpoint directory's layout: state file, settings, copies.
checkpoint_leftovers.py  what a save cut short leaves there, tidied at the next start.
run_directory.py     the logdir: its lock and what it holds.

May import: nothing of the project's but utils; never TensorFlow.
"""
