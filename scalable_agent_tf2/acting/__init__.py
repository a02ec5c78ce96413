"""Acting: actor threads stepping environments with a batched policy.

actor.py         EnvironmentLoop, ActorThread, EnvironmentGroup: steps, unrolls, trajectories.
policies.py      the acting step (acting_step: the network over one step) and the batched
                 policy (dynamic_batching's op: one forward pass for many actors).
action_spaces.py what an actor samples, stores and sends for each kind of action space.

May import: configuration, structures, environments, agent, utils.
"""
