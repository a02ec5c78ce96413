"""Transport between processes and machines, over TensorFlow's RPC.

wire.py            the wire format of trajectories and parameters, and its validation.
distributed.py     the cluster: its layout (TF_CONFIG), secret, listen addresses, errors, and
                   the MirroredStrategy of several learners.
credentials.py     every call's credential: the client's CallSigner, the service's Gatekeeper.
learner_service.py the learner's RPC service (TrajectoryServer) and its DeliveryLedger.
service_client.py  the clients' connection (ServiceClient), the actors' LearnerClient and
                   ParameterSync.
replay_service.py  the shared episode replay service of LASER (a process of its own).
replay_client.py   the learner's side of it.
filter_sync.py     the observation filter of a cluster, synced between actors and learner.

May import: configuration, structures, environments (the filter), agent, learning.buffers,
utils.
"""
