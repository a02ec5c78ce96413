"""Learning: V-trace, the losses, the optimizer, the learners and what feeds them.

vtrace.py       V-trace (the paper's section 4.1) for any action distribution, one function
                per variant: V-trace, LASER's trust region, Table 2's ablations.
losses.py       the losses, per step (section 4.2, reward clipping, IMPACT's surrogate) and
                per batch: IMPALA's terms (with LASER's trust-region and entropy masks) and
                IMPACT's beside them, summed over T x B.
optimizers.py   RMSProp with TF1 semantics and the linear learning-rate schedule.
learner.py      the compiled update (Learner, which IMPACT's extends), the batch's checks at
                its entry.
impact.py       IMPACT's own: the circular buffer, its learner steps, ImpactLearner.
popart.py       PopArt's value normalisation (statistics, the output-preserving rescale).
laser.py        LASER's own: the episode replay and mixer, replayed core states, the
                online-only entropy mask.
buffers.py      IMPALA's experience replay and its mixer.

May import: configuration (the learner's configs among them), structures, environments, agent,
utils.
"""
