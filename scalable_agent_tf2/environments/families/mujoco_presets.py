"""The IMPACT paper's settings for its continuous-control tasks (Appendix B.2, Table 2, IMPACT
and IMPALA columns; section 4.3), under this project's setting names.

    settings = mujoco_presets.presets("mujoco/hopper", "impact")   # dict: setting -> value

Every value cites where it comes from. Table 2's rows and the settings they become
(families/mujoco.py takes them for the MuJoCo levels):
    Learning Rate                -> learning_rate      IMPACT 3e-4, IMPALA 1.5e-5
    Discount (gamma)             -> discounting        0.995 both
    Entropy Coeff                -> entropy_cost       0.0 both
    Grad Clipping                -> max_grad_norm      0.5 both (IMPACT's x T x B: summed
                                                       losses, see below)
    Value Function Coeff         -> baseline_cost      IMPACT 1.0 (HalfCheetah 0.5, footnote
                                                       2), IMPALA 0.5
    Sample Batch Size            -> unroll_length      1024 both (RLlib's sample_batch_size:
                                                       the steps of one worker's rollout
                                                       fragment, V-trace's sequence length)
    Train Batch Size             -> batch_size         32768 steps = 32 unrolls of 1024
    Clip Parameter               -> ppo_clip           IMPACT 0.4
    Lambda (lambda)              -> gae_lambda         IMPACT 0.995
    Minibatch Buffer Size (N)    -> circular_buffer_size       IMPACT 16
    Num SGD Iterations (K)       -> circular_buffer_max_uses   IMPACT 20 (HalfCheetah 32,
                                                               footnote 1)
    KL Coeff                     -> kl_cost            IMPACT 1.0 (the adaptive
                                                       coefficient's start)
    Target-Worker Clipping (rho) -> target_worker_clipping     IMPACT 2.0
    KL Target                    -> kl_target          IMPACT 0.04: the KL coefficient adapts
                                                       towards it (below)
Section 4.3 adds: two fully connected layers of 256 tanh units for the policy and the same,
separate, for the critic (networks.continuous_vector_config; no setting), and the tasks ran
"on 16 CPUs and 1 GPU"; Table 2 gives no number of workers, so num_actors follows the CPU
count (Figure 7 varies it from 1 to 32 on HalfCheetah): 16 environments, which the family
lays out as groups stepped by one actor thread per core of this machine (families.base.actor_layout:
2 x 8 on 2 cores). Section 4.1.1: the target network is
updated every n = N x K learner steps (target_update_period 320, HalfCheetah 512).

Not in the paper, from its code base (RLlib, 2019) or from how gymnasium counts:
  * num_action_repeats 1: an agent step is one gymnasium step (frame_skip is inside the task).
  * reward_clipping "none": RLlib clips rewards only for Atari.
  * KL target: Table 2 gives the value, not the rule. RLlib's APPO (which ran IMPACT) applies
    PPO's adaptive KL penalty: whenever it refreshes the target network (every N x K learner
    steps) it scales the coefficient by 1.5 if the last step's mean KL(pi_target || pi)
    exceeds 2 x target and by 0.5 if it is below target / 2 (losses.adapted_kl_coefficient;
    impact.ImpactLearner does the same at its refreshes).
  * Optimizer: the paper names none (Table 2 has no optimizer row). RLlib's IMPALA and APPO
    default to Adam (`opt_type: adam`, epsilon 1e-8) with a constant learning rate; the
    project's learners use RMSProp (decay 0.99 and momentum 0 as Table G.1) with the learning
    rate decaying linearly to 0 at total_environment_frames. RMSProp without momentum is Adam
    without its first moment: both divide the step by the gradient's root mean square, so
    Table 2's rates carry over, but only with Adam's two other traits, which Table G.1's
    RMSProp lacks: an epsilon too small to matter (1e-8 outside the root, so (1e-8)^2 = 1e-16
    inside ours) and full-size steps from the first update (the accumulator starts at 0, not
    at TF1's 1; without Adam's bias correction the first steps are larger than Adam's, by
    1 / sqrt(1 - 0.99^n) for a steady gradient: 10x at update 1, 1.6x at 50, 1.03x at 300).
    With Table G.1's epsilon 0.01 and TF1's start, IMPALA's clip of 0.5 on the summed
    gradient leaves each weight a gradient near 1e-4, far below sqrt(0.01): measured on
    Hopper after 1,980 updates, the median step was 0.001 x the learning rate (Adam's is
    about 1 x), and the policy had not moved from random play in 2M steps (benchmarks/
    RESULTS.md, "IMPALA on MuJoCo: Table 2's learning rate needs Adam's step size").
  * Summed losses: the project's learners sum their loss terms over the T x B steps. RLlib's
    IMPALA summed them too (VTraceLoss), so IMPALA's gradient clip of 0.5 stays; RLlib's APPO
    (IMPACT) averaged them, so IMPACT's 0.5 on the mean is 0.5 x T x B on our sum (the same
    clipping; families/atari.py IMPACT_PAPER_IMPACT does the same for Table 1). The preset gives the
    0.5 as mean_loss_max_grad_norm and config.explain multiplies it by the run's own T and B,
    so a run with a smaller --batch_size or --unroll_length clips as the paper did.
  * Off-policy correction V-trace, no trust region (IMPALA's and IMPACT's own settings).
  * total_environment_frames: the paper fixes wall-clock time (three hours per run, section
    4.3), not steps; TOTAL_ENVIRONMENT_FRAMES is a budget of this project's choosing.
  * observation filter: RLlib's MeanStdFilter (environments/normalization.py).
No TensorFlow here.
"""
from scalable_agent_tf2.configuration.settings import IMPACT
from scalable_agent_tf2.configuration.settings import IMPALA
from scalable_agent_tf2.environments import suites

# Table 2 (IMPALA column) and section 4.3, in the project's setting names.
IMPALA_TABLE2 = {
    "learning_rate": 1.5e-5,     # Table 2, "Learning Rate" 1.5 x 10^-5.
    "discounting": 0.995,        # Table 2, "Discount".
    "entropy_cost": 0.0,         # Table 2, "Entropy Coeff".
    "max_grad_norm": 0.5,        # Table 2, "Grad Clipping".
    "baseline_cost": 0.5,        # Table 2, "Value Function Coeff".
    "unroll_length": 1024,       # Table 2, "Sample Batch Size".
    "batch_size": 32,            # Table 2, "Train Batch Size" 32768 = 32 x 1024.
    "num_actors": 16,            # Section 4.3, "16 CPUs" (Table 2 gives no worker count).
    "num_action_repeats": 1,     # Not in the paper: one agent step is one gymnasium step.
    "reward_clipping": "none",   # Not in the paper: RLlib clips rewards for Atari only.
    # Not in the paper: RMSProp (Table G.1's decay and momentum) in place of RLlib's Adam,
    # with Adam's negligible epsilon ((1e-8)^2 inside the root) and its full-size first steps
    # (module docstring).
    "decay": 0.99,
    "momentum": 0.0,
    "epsilon": 1e-16,
    "rmsprop_initial_mean_square": 0.0,
    "off_policy_correction": "vtrace",      # IMPALA section 4.1; IMPACT section 3.1.
    "trust_region_threshold": float("inf"),  # No LASER trust region.
    # This project's learning-rate schedule (the paper fixes time, not steps: module
    # docstring), values in the rewards' own scale (RLlib's IMPALA and APPO had no PopArt).
    "learning_rate_schedule": "linear",
    "popart": False,
}

# Table 2 (IMPACT column): IMPALA's shared rows with IMPACT's values, plus IMPACT's own.
IMPACT_TABLE2 = dict(
    IMPALA_TABLE2,
    learning_rate=3e-4,            # Table 2, "Learning Rate" 3.0 x 10^-4.
    baseline_cost=1.0,             # Table 2, "Value Function Coeff".
    ppo_clip=0.4,                  # Table 2, "Clip Parameter".
    gae_lambda=0.995,              # Table 2, "Lambda".
    circular_buffer_size=16,       # Table 2, "Minibatch Buffer Size (N)"; section 4.3.
    circular_buffer_max_uses=20,   # Table 2, "Num SGD Iterations (K)"; section 4.3.
    kl_cost=1.0,                   # Table 2, "KL Coeff" (the adaptive coefficient's start).
    kl_target=0.04,                # Table 2, "KL Target" (module docstring: the rule).
    target_worker_clipping=2.0,    # Table 2, "Target-Worker Clipping".
    target_update_period=16 * 20,  # Section 4.1.1: n = N x K.
    normalize_advantages=False,    # Not in the paper (nor RLlib's APPO): advantages as they are.
    # Table 2, "Grad Clipping" 0.5 on RLlib APPO's averaged loss: 0.5 x T x B on our summed
    # loss, with the run's T and B (module docstring; config.resolve).
    max_grad_norm=None,
    mean_loss_max_grad_norm=0.5,
)

# Table 2's footnotes: HalfCheetah-v2's IMPACT values that differ.
IMPACT_OVERRIDES = {
    "mujoco/half_cheetah": {
        "circular_buffer_max_uses": 32,   # Footnote 1: K is 32 for HalfCheetah-v2.
        "target_update_period": 16 * 32,  # Section 4.1.1: n = N x K.
        "baseline_cost": 0.5,             # Footnote 2: value coefficient 0.5.
    },
}

# Where each value comes from, as --show_settings cites it (the comments above, in words).
_ADAM = "as RLlib's Adam, the paper's code base (mujoco_presets.py)"
IMPALA_TABLE2_CITED = {
    "learning_rate": "IMPACT Table 2 (IMPALA): 1.5e-5",
    "discounting": "IMPACT Table 2: 0.995",
    "entropy_cost": "IMPACT Table 2: 0.0",
    "max_grad_norm": "IMPACT Table 2 (IMPALA, on a summed loss as ours): 0.5",
    "baseline_cost": "IMPACT Table 2 (IMPALA): 0.5",
    "unroll_length": "IMPACT Table 2, Sample Batch Size: 1024",
    "batch_size": "IMPACT Table 2, Train Batch Size 32768 = 32 x 1024: 32",
    "num_actors": "IMPACT section 4.3, 16 CPUs: 16",
    "num_action_repeats": "not in the paper (a gymnasium step is an agent step): 1",
    "reward_clipping": "not in the paper (RLlib clips Atari's only): none",
    "decay": "Table G.1's RMSProp (the paper names no optimizer): 0.99",
    "momentum": "Table G.1's RMSProp: 0",
    "epsilon": f"(1e-8)^2 inside the root, {_ADAM}: 1e-16",
    "rmsprop_initial_mean_square": f"full-size first steps, {_ADAM}: 0",
    "off_policy_correction": "IMPALA section 4.1, IMPACT section 3.1: vtrace",
    "trust_region_threshold": "no LASER trust region: inf",
    "learning_rate_schedule": "this project's (the paper fixes time, not steps): linear",
    "popart": "RLlib's IMPALA and APPO had none: off",
    "total_environment_frames": "this project's budget (the paper ran 3 hours): 10M",
}
IMPACT_TABLE2_CITED = dict(
    IMPALA_TABLE2_CITED,
    learning_rate="IMPACT Table 2: 3e-4",
    baseline_cost="IMPACT Table 2: 1.0",
    ppo_clip="IMPACT Table 2 (continuous control; Table 1's Atari 0.3): 0.4",
    gae_lambda="IMPACT Table 2: 0.995",
    circular_buffer_size="IMPACT Table 2 (N; Table 1's Atari 4): 16",
    circular_buffer_max_uses="IMPACT Table 2 (K; Table 1's Atari 2): 20",
    kl_cost="IMPACT Table 2, the adaptive coefficient's start (Table 1's Atari 0): 1.0",
    kl_target="IMPACT Table 2: 0.04",
    target_worker_clipping="IMPACT Table 2: 2.0",
    target_update_period="IMPACT section 4.1.1, n = N x K = 16 x 20: 320",
    normalize_advantages="the IMPACT paper (nor RLlib's APPO): off",
    max_grad_norm="IMPACT Table 2, on the mean loss (x T x B on ours): 0.5",
    mean_loss_max_grad_norm="IMPACT Table 2: 0.5",
)
IMPACT_OVERRIDES_CITED = {
    "mujoco/half_cheetah": {
        "circular_buffer_max_uses": "IMPACT Table 2, footnote 1: 32",
        "target_update_period": "IMPACT section 4.1.1, n = N x K = 16 x 32: 512",
        "baseline_cost": "IMPACT Table 2, footnote 2: 0.5",
    },
}

# The task whose Table 2 values apply to a continuous-control environment the paper did not run
# (the gymnasium family, environments/families/gym.py): Hopper's are the table's own, without
# the HalfCheetah footnotes.
TABLE2_TASK = "mujoco/hopper"

# Not from the paper (it ran three hours per task): a budget for this project's runs.
TOTAL_ENVIRONMENT_FRAMES = 10_000_000


def presets(level_name, algorithm=IMPALA):
  """Table 2's settings for one MuJoCo task and algorithm, as a new dict.

  Raises:
    ValueError: not a MuJoCo level, or an algorithm other than "impala" / "impact".
  """
  if not suites.is_mujoco_level(level_name):
    raise ValueError(f"{level_name!r} has no MuJoCo preset; the MuJoCo levels are "
                     f"{', '.join(suites.MUJOCO_LEVELS)}.")
  if algorithm == IMPALA:
    values = dict(IMPALA_TABLE2)
  elif algorithm == IMPACT:
    values = dict(IMPACT_TABLE2, **IMPACT_OVERRIDES.get(level_name, {}))
  else:
    raise ValueError(f"Unknown algorithm {algorithm!r}; Table 2 has {IMPALA!r} and "
                     f"{IMPACT!r}.")
  values["total_environment_frames"] = TOTAL_ENVIRONMENT_FRAMES
  return values


def citations(level_name, algorithm=IMPALA):
  """Where each of presets(level_name, algorithm)'s values comes from, as a new dict of the
  same keys (--show_settings)."""
  presets(level_name, algorithm)  # Its checks.
  if algorithm == IMPALA:
    return dict(IMPALA_TABLE2_CITED)
  return dict(IMPACT_TABLE2_CITED, **IMPACT_OVERRIDES_CITED.get(level_name, {}))
