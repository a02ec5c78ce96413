"""Transport between processes and machines, over TensorFlow's RPC.

wire.py            the wire format of trajectories and parameters, and its validation.
distributed.py     trajectory server and learner client, parameter sync, the cluster's
                   credential check, the MirroredStrategy of several learners.
replay_service.py  the shared episode replay service of LASER (a process of its own).
replay_client.py   the learner's side of it.
filter_sync.py     the observation filter of a cluster, synced between actors and learner.

May import: configuration, structures, environments (the filter), agent, learning.buffers,
utils.
"""
