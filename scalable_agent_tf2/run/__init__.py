"""Runs: assembling the parts, the supervisors of training and testing, and the launcher.

experiment_main.py  experiment.py's start: the one stop-signal handler, the config resolved
                 once, handed to training, testing or an actor process.
experiment_flags.py  experiment.py's flags: --help, --show_settings, the checks before
                 TensorFlow (--mode=train|test).
assembly.py      builds agent, learner, policy and environments from a configuration.
training.py      --mode=train: builds a run and supervises it (train).
supervisor.py    one training run (Run): the training loop (the learner thread, watch, stop).
run_parts.py     a training run's parts, built before it starts: monitor, policy, actors, input.
failure_policy.py  what stops a training run early, and what train raises for it.
checkpoint_policy.py  when a training run checkpoints, and what its newest checkpoint holds.
local_actors.py  a one-machine run's actor threads, replaced when their environments hang.
run_failures.py  what stops a run early: RunFailed and its kinds, LevelsCannotRun.
training_result.py  what train returns: TrainResult, the trajectory accounts, the stop's report.
evaluation.py    test mode: plays the checkpoint's policy, prints the paper's tables.
evaluation_episodes.py  test mode's episodes: levels split over workers, the progress line.
evaluation_videos.py  test mode's videos of the first episodes of each level.
actor_process.py actors in a process of their own, feeding a learner over RPC.
input_pipeline.py  learner queues (local and remote actors) -> replay mixing -> tf.data
                 batches [T+1, B].
monitoring.py    the console line, TensorBoard and the run log's records; the start banner.
console_pace.py  the console line's rates, time to go, and what a still run waits for.
learning_curve.py  the learning curve, redrawn in a child process.
launch.py        starts a cluster's processes (a learner, N actor processes) on this machine,
                 over loopback.
repeatable.py    --repeatable: actors that wait for the learner, so a seed repeats its run.
progress_watch.py  what stops a run that makes no progress (the stalls behind --stall_secs).
export_policy.py  a run's policy (weights and settings, no optimizer) as a folder test mode
                 plays.
shared_replay_runs.py  runs feeding LASER's shared replay service.

May import: every room below it.
"""
