"""Population-based training (the paper's section 5.3), without TensorFlow.

command.py    python -m scalable_agent_tf2.population (__main__.py): flags and start.
driver.py     the population's loop: members' processes, ready, exploit, explore.
exploit.py    the exploit step's copy of a member's checkpoint into another, verified.
processes.py  members and the shared replay service as processes.
pbt.py        the decisions: truncation selection, perturbation, the hyperparameters.

May import: configuration (a member's resolved flags), environments (the suites' scores),
runfiles, utils; never TensorFlow.
"""
