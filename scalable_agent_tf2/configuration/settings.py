"""Every setting of a run, written once: its flag name, type, default, topic, help and check.

The fields of `ExperimentSettings` (and `ClusterSettings`) are the table: experiment.py's flags and
--help are generated from them (command_line.py), config.ExperimentConfig is ExperimentSettings with
behaviour added, and the learner's configs are made of the settings marked for them (`part_of`).
Flag names are the released code's (deepmind/scalable_agent, experiment.py) where it had the
setting. A setting whose default is PRESET (None) takes the run's level's value (its family's
presets: Table G.1 for Atari, Table D.3 and the released code for DeepMind Lab); a value given
always wins (config.resolve). No TensorFlow here: a bad flag is reported in well under a second."""
import dataclasses
from typing import Optional

from scalable_agent_tf2.configuration.setting_fields import AT_LEAST_ONE
from scalable_agent_tf2.configuration.setting_fields import FINITE
from scalable_agent_tf2.configuration.setting_fields import GPU_MEMORY
from scalable_agent_tf2.configuration.setting_fields import JSON_OBJECT
from scalable_agent_tf2.configuration.setting_fields import NON_NEGATIVE
from scalable_agent_tf2.configuration.setting_fields import OPEN_UNIT_INTERVAL
from scalable_agent_tf2.configuration.setting_fields import POSITIVE
from scalable_agent_tf2.configuration.setting_fields import POSITIVE_INT
from scalable_agent_tf2.configuration.setting_fields import TRUST_REGION
from scalable_agent_tf2.configuration.setting_fields import UNIT_INTERVAL
from scalable_agent_tf2.configuration.setting_fields import WHOLE_POSITIVE
from scalable_agent_tf2.configuration.setting_fields import preset_setting
from scalable_agent_tf2.configuration.setting_fields import setting

# IMPALA Table D.3, "Experience Replay (in Section 5.2.2)": capacity 10,000 trajectories.
DEFAULT_REPLAY_CAPACITY = 10_000

# Choices. The modules that implement them (losses, vtrace, networks, learner) import these.
TRAIN, TEST = "train", "test"
MODES = (TRAIN, TEST)
IMPALA, IMPACT = "impala", "impact"  # Espeholt et al., 2018; Luo et al., 2020.
ALGORITHMS = (IMPALA, IMPACT)
SHALLOW, DEEP = "shallow", "deep"  # Figure 3's networks.
# The smallest frame side the shallow torso takes: Figure 3 (left)'s VALID 8x8/4 then 4x4/2
# convolutions need (side - 8) // 4 + 1 >= 4, i.e. side >= 20 (MiniGrid's 7x7 views take the
# deep torso, whose SAME layers take any size). Here, not in networks.py, so that presets
# choose the torso without TensorFlow.
SHALLOW_MIN_FRAME_SIZE = 20
IMPACT_CNN = "impact_cnn"  # The IMPACT paper's Atari network (section 4.3), 42x42 frames.
# Frames flattened into the IMPACT paper's MLP (section 4.3's two tanh layers of 256): a
# gymnasium environment's frames smaller than SHALLOW_MIN_FRAME_SIZE (a grid's symbolic
# encoding, e.g. MiniGrid's 7x7 view, MinAtar's 10x10 planes; families/gym.py's frame_torso).
FLAT_MLP = "mlp"
TORSOS = (SHALLOW, DEEP, IMPACT_CNN, FLAT_MLP)
AUTO, SHARED, SEPARATE = "auto", "shared", "separate"
VALUE_TORSOS = (AUTO, SHARED, SEPARATE)
STATE, FREE = "state", "free"  # A Gaussian's log std: from the policy's layer, or one vector.
LOG_STDS = (STATE, FREE)
DEFAULT_PRESET = "default"     # IMPALA's Tables G.1 / D.3 (+ IMPACT Table 1's own settings).
IMPACT_PAPER = "impact_paper"  # The IMPACT paper's Atari setting: Table 1, section 4.3.
PRESETS = (DEFAULT_PRESET, IMPACT_PAPER)
# Reward clipping (losses.clip_rewards).
ABS_ONE = "abs_one"                            # clip to [-1, 1]: single tasks, Atari (Table G.1).
OPTIMISTIC_ASYMMETRIC = "optimistic_asymmetric"  # the paper's Figure D.1, DMLab-30 default.
SOFT_ASYMMETRIC = "soft_asymmetric"            # the released code's DMLab-30 variant.
NO_CLIPPING = "none"
REWARD_CLIPPING_MODES = (ABS_ONE, OPTIMISTIC_ASYMMETRIC, SOFT_ASYMMETRIC, NO_CLIPPING)
# Table 2's off-policy corrections (vtrace.from_logits).
VTRACE = "vtrace"
ONE_STEP_IS = "one_step_is"   # "1-step importance sampling": no traces, no correction of V.
EPSILON = "epsilon"           # "epsilon-correction": on-policy targets, log(pi + 1e-6) in the PG.
NO_CORRECTION = "none"        # "No-correction": treat the behaviour policy as on-policy.
OFF_POLICY_CORRECTIONS = (VTRACE, ONE_STEP_IS, EPSILON, NO_CORRECTION)
REPLAY_ADDED = "added"            # LASER section 5.1: a replay mini-batch on top of the online one.
REPLAY_WITHIN_BATCH = "within_batch"  # IMPALA section 5.2.2: a share of --batch_size replayed.
REPLAY_MIXINGS = (REPLAY_ADDED, REPLAY_WITHIN_BATCH)
JIT_COMPILE_CHOICES = ("auto", "on", "off")
LINEAR, CONSTANT = "linear", "constant"
LEARNING_RATE_SCHEDULES = (LINEAR, CONSTANT)
RENDERERS = ("software", "hardware")
JOB_NAMES = ("", "learner", "actor")  # distributed.LEARNER_JOB, distributed.ACTOR_JOB.

# Topics, in --help's order.
RUN, ENVIRONMENT, NETWORK, LEARNER = "run", "environment", "network", "learner"
REPLAY, IMPACT_TOPIC, CLUSTER = "replay", "impact", "cluster"
TOPICS = {
    RUN: "Run: what to train or test, where, how long, how many actors",
    ENVIRONMENT: "Environment",
    NETWORK: "Network (Figure 3)",
    LEARNER: "Learner: loss, optimiser, off-policy correction",
    REPLAY: "Experience replay (IMPALA section 5.2.2) and LASER (Schmitt et al., 2019)",
    IMPACT_TOPIC: "IMPACT (Luo et al., 2020; --algorithm=impact only)",
    CLUSTER: "Cluster: distributed training (leave empty on one machine)",
}
# Which derived config a setting also belongs to (config.LearnerConfig, config.ImpactConfig).
FOR_LEARNER, FOR_IMPACT = "learner", "impact"

@dataclasses.dataclass(frozen=True)
class ExperimentSettings:
  """One run's settings (the table; see the module docstring). PRESET: the level's value."""
  mode: str = setting(TRAIN, RUN, "Train, or evaluate the latest checkpoint.", choices=MODES)
  logdir: str = setting("/tmp/agent", RUN, "Checkpoints, TensorBoard summaries, logs, results.")
  level_name: str = setting(
      "atari/pong", RUN,
      "A level (atari/<game>, a DMLab-30 level, dmlab:<any DeepMind Lab level>, "
      "gym:<gymnasium id>, mujoco/<task>, toy/lit_side), a suite (atari57, dmlab30), or a "
      "suite you name: levels of one family (Atari, DeepMind Lab, toy) separated by commas, "
      "e.g. atari/pong,atari/breakout,atari/boxing, trained as the built-in suite of the "
      "family is (its presets, Atari's full 18 actions; test mode's scores over the levels "
      "named); picks the presets. `python -m scalable_agent_tf2.environments.families` "
      "lists them.")
  excluded_levels: str = setting(
      "", RUN, "Suites: comma-separated levels to leave out (e.g. those this machine's "
      "DeepMind Lab cannot run); the suite's score (Table 3) then covers the other levels.")
  seed: int = setting(1, RUN, "Seeds the network, environments and action sampling.")
  preset: str = setting(
      DEFAULT_PRESET, RUN, "Whose published setting fills the settings left at their "
      "default. default: the IMPALA paper's for the level (Tables G.1, D.3), plus IMPACT "
      "Table 1's own settings with --algorithm=impact, on IMPALA's network and frames. "
      "impact_paper (Atari games): the IMPACT paper's Figure 6 setting for either algorithm: "
      "its network on four 42x42 frames (--torso=impact_cnn) and Table 1's column of the "
      "algorithm (families/atari.py lists what still differs from the paper's runs).",
      source="IMPALA Tables G.1, D.3; IMPACT section 4.3, Table 1", choices=PRESETS)
  total_environment_frames: Optional[int] = preset_setting(
      RUN, "Stop (and reach learning rate 0) after this many frames.", check=POSITIVE_INT,
      part_of=FOR_LEARNER)
  num_actors: Optional[int] = preset_setting(
      RUN, "Actor threads. Each drives --envs_per_actor environments: Atari games or MuJoCo "
      "tasks stepped together in this process, otherwise one environment process. "
      "Environments in all: num_actors x envs_per_actor (the paper's \"48 actors\" are 48 "
      "environments, each with its own actor: e.g. 2 x 24 here). Atari and MuJoCo presets: "
      "by the machine's cores (families.base.actor_layout).", check=POSITIVE_INT)
  envs_per_actor: Optional[int] = preset_setting(
      RUN, "Environments each actor thread steps together, with one batched forward pass "
      "per step for all of them. Atari games (ale-py's vector environment, without sticky "
      "actions, at 84x84 with action repeat 4) and MuJoCo tasks run in groups; every other "
      "level takes 1.", source="not in the paper", check=POSITIVE_INT)
  batched_inference: bool = setting(
      True, RUN, "Batch the actors' forward passes (dynamic_batching); false: each actor "
      "thread runs the network itself.", source="Table 1's comparison")
  queue_capacity: Optional[int] = preset_setting(
      RUN, "Trajectories waiting for the learner at most.", source="not in the paper",
      check=POSITIVE_INT)
  num_learners: int = setting(
      1, RUN, "Synchronous learners (the paper's \"8 learners\"): one per GPU, else logical "
      "CPU devices; each trains on --batch_size trajectories of its own actors per update, "
      "gradients all-reduced.", source="Figure 1 (right), Table 3", check=POSITIVE_INT)
  intra_op_threads: Optional[int] = preset_setting(
      RUN, "TensorFlow threads per op, set when TensorFlow starts (experiment.py starts it "
      "after reading the flags); 0: TensorFlow's default (one per core).",
      source="not in the paper: measured (benchmarks/RESULTS.md)", check=NON_NEGATIVE)
  checkpoint_secs: float = setting(600.0, RUN, "Seconds between checkpoints; also at exit.",
                                   source="released code", check=POSITIVE)
  log_secs: float = setting(5.0, RUN, "Seconds between console lines and summaries.",
                            check=POSITIVE)
  test_num_episodes: int = setting(500, RUN, "Test mode: episodes per level.",
                                   source="the paper's 500", check=POSITIVE_INT)
  restore_checkpoint: str = setting(
      "", RUN, "Resume from this checkpoint of --logdir (its name, e.g. ckpt-80000) instead of "
      "the newest: what to pass when the newest cannot be restored (the error names the "
      "newest intact one). Newer checkpoints are moved to <logdir>/checkpoints/set_aside/, "
      "never deleted. Empty: the newest.")
  max_nonfinite_updates: int = setting(
      20, RUN, "Consecutive learner updates with a non-finite loss or gradient norm after "
      "which the run stops with an error. Each such update is skipped (parameters and "
      "optimizer state unchanged) and counted; the last checkpoint stays as it was.",
      source="not in the paper: a diverged run, not a noisy batch", check=POSITIVE_INT)
  max_parameter_norm: float = setting(
      1e6, RUN, "A learner update that leaves the global norm of the parameters above this (or not "
      "finite) stops the run with an error: training has diverged. A checkpoint is never written "
      "of such parameters; the last healthy one stays the newest.", source="not in the paper: the "
      "default networks' global norms are 15 to 32 at their start (toy, Pong shallow and deep, "
      "CartPole, Pendulum); a diverged run measured here reached 3.8e10 at its first update",
      check=POSITIVE)
  env_step_timeout_secs: float = setting(
      60.0, RUN, "Seconds an environment's step may take. One that takes longer is reported with "
      "its level and replaced as a dead one is (a process is killed; an in-process environment's "
      "actor thread, which cannot be interrupted, is left behind and a new one started); the run "
      "goes on. A level whose environments keep hanging stops the run.", source="not in the paper: "
      "far above any step seen here (Atari, MuJoCo, gymnasium: milliseconds)", check=POSITIVE)
  env_reset_timeout_secs: float = setting(
      600.0, RUN, "Seconds an environment's reset may take (also a DeepMind Lab step, which resets "
      "at an episode's end and may compile a new map then).", source="not in the paper: a DMLab-30 "
      "reset without a level cache compiles a map, about 30 s on a small machine", check=POSITIVE)
  stall_secs: float = setting(
      300.0, RUN, "Seconds without progress after which the run stops with an error naming "
      "what was seen: every trajectory dropped as non-finite; a batch of trajectories and no "
      "learner update; no trajectory while actors are alive (after the first).",
      source="not in the paper: longer than any first update's compilation or DeepMind Lab "
      "map compilation seen here", check=POSITIVE)
  repeatable: bool = setting(
      False, RUN, "Debugging: the same --seed and command (on the same machine, in a new logdir) "
      "give the same losses and parameters, update by update; the console prints each update's "
      "losses and a digest of the parameters (compare two runs with diff). The actors act in "
      "lockstep with the learner: in rounds of one unroll of every actor's environments, taken in "
      "actor order (consecutive --batch_size of them are a batch; with --num_actors x "
      "--envs_per_actor = --batch_size each batch is one unroll of every actor), acted only when "
      "the learner asks for the round, with the parameters of its last update, while it waits; "
      "each actor runs its own forward pass (no dynamic batching); TensorFlow's ops run "
      "deterministically. Slower: actors and learner take turns. The default asynchronous mode "
      "cannot repeat: its actors never wait for the learner, so which unrolls reach the learner's "
      "queue first (and form each batch), the parameters each was acted with, and which actors "
      "share a forward pass depend on thread timing. Not with actor processes (a cluster), "
      "--num_learners > 1 or a shared replay; a resumed run or a restarted environment starts new "
      "episodes.", source="not in the paper (IMPALA's actors never wait): a debugging mode")
  show_settings: bool = setting(
      False, RUN, "Print every setting with its resolved value and its source (flag, the level's "
      "preset, default) for the given level and flags, then exit without starting TensorFlow.")
  record_video_episodes: int = setting(
      0, RUN, "Test mode: record the first N test episodes of each level as MP4 (GIF where no "
      "encoder is installed) under <logdir>/evaluation/videos/.", check=NON_NEGATIVE)
  gpu_memory: str = setting(
      "growth", RUN, "How TensorFlow takes GPU memory: growth (as needed, so environment "
      "processes and other runs can share the GPU), all (TensorFlow's default: the whole "
      "GPU at start), or a limit in MiB (e.g. 20000). No effect without a GPU.",
      source="not in the paper", check=GPU_MEMORY)
  num_action_repeats: Optional[int] = preset_setting(
      ENVIRONMENT, "Environment frames per agent step.", check=POSITIVE_INT, part_of=FOR_LEARNER)
  width: Optional[int] = preset_setting(ENVIRONMENT, "Frame width.", check=POSITIVE_INT)
  height: Optional[int] = preset_setting(ENVIRONMENT, "Frame height.", check=POSITIVE_INT)
  dataset_path: str = setting("", ENVIRONMENT, "DMLab: directory of the Brady et al. images.")
  renderer: str = setting("software", ENVIRONMENT, "DMLab renderer.", choices=RENDERERS)
  level_cache_dir: str = setting("", ENVIRONMENT, "DMLab: cache directory for compiled maps.")
  env_kwargs: str = setting(
      "", ENVIRONMENT, "gym:<id> levels: keyword arguments of gymnasium.make, as a JSON "
      "object, e.g. '{\"continuous\": true}' for gym:LunarLander-v3.",
      source="not in the paper: gymnasium's own arguments", check=JSON_OBJECT)
  sticky_actions: bool = setting(False, ENVIRONMENT, "Atari: repeat the last action with p=0.25.")
  torso: Optional[str] = preset_setting(
      NETWORK, "Figure 3's network (shallow, deep), the IMPACT paper's Atari network "
      "(impact_cnn: 42x42 frames only), or the frame flattened into the IMPACT paper's MLP "
      "(mlp: for small symbolic frames, e.g. MiniGrid's 7x7 view).", choices=TORSOS)
  value_torso: str = setting(
      AUTO, NETWORK, "gymnasium levels with discrete actions: the baseline on the policy's torso "
      "(shared, Figure 3) or on a torso of its own reading the observation alone (separate); auto: "
      "separate on feed-forward networks (vectors, indices, small frames), shared with an LSTM. "
      "shared resumes a run of such a level trained before 2026-11-28.", source="this project's: "
      "auto (gymnasium levels with discrete actions: separate on feed-forward networks, "
      "benchmarks/RESULTS.md 'Small frames and an entropy bonus'); Figure 3: shared; IMPACT "
      "section 4.3 (Box actions on vectors): separate", choices=VALUE_TORSOS)
  log_std: Optional[str] = preset_setting(
      NETWORK, "gymnasium levels with Box actions: the Gaussian's log std from the policy's "
      "layer, a function of the observation (state), or one learned vector (free).",
      choices=LOG_STDS)
  initial_log_std: Optional[float] = preset_setting(
      NETWORK, "gymnasium levels with --log_std=free: where the learned log std starts (0: a "
      "standard deviation of 1; Stable-Baselines3's log_std_init).", check=FINITE)
  algorithm: Optional[str] = preset_setting(
      LEARNER, "impala, or impact (Luo et al., 2020: target network, circular buffer, "
      "clipped target-worker surrogate; presets from its Table 1).", choices=ALGORITHMS)
  batch_size: Optional[int] = preset_setting(
      LEARNER, "Trajectories per learner update; with --replay_mixing=added (LASER's default) "
      "the online ones, the replayed ones coming on top.", check=POSITIVE_INT)
  unroll_length: Optional[int] = preset_setting(LEARNER, "Agent steps per trajectory (T).",
                                                check=POSITIVE_INT)
  entropy_cost: Optional[float] = preset_setting(LEARNER, "Entropy loss weight.",
                                                 check=NON_NEGATIVE, part_of=FOR_LEARNER)
  baseline_cost: Optional[float] = preset_setting(LEARNER, "Baseline loss weight.",
                                                  check=NON_NEGATIVE, part_of=FOR_LEARNER)
  discounting: Optional[float] = preset_setting(LEARNER, "Discount gamma.", check=UNIT_INTERVAL,
                                                part_of=FOR_LEARNER)
  reward_clipping: Optional[str] = preset_setting(
      LEARNER, "Reward clipping for the loss (abs_one: to [-1, 1]; optimistic_asymmetric: "
      "Figure D.1's).", choices=REWARD_CLIPPING_MODES, part_of=FOR_LEARNER)
  learning_rate: Optional[float] = preset_setting(
      LEARNER, "Initial RMSProp learning rate.", check=NON_NEGATIVE, part_of=FOR_LEARNER)
  decay: Optional[float] = preset_setting(LEARNER, "RMSProp decay.", check=UNIT_INTERVAL,
                                          part_of=FOR_LEARNER)
  momentum: Optional[float] = preset_setting(LEARNER, "RMSProp momentum.", check=NON_NEGATIVE,
                                             part_of=FOR_LEARNER)
  epsilon: Optional[float] = preset_setting(LEARNER, "RMSProp epsilon.", check=NON_NEGATIVE,
                                            part_of=FOR_LEARNER)
  rmsprop_initial_mean_square: Optional[float] = preset_setting(
      LEARNER, "Where RMSProp's mean-square accumulator starts. 1: TF1's RMSPropOptimizer, the "
      "paper's; its steps stay small for the first ~500 updates. 0: full-size steps from the first "
      "update (PyTorch's and Keras' RMSprop start there; the MuJoCo presets, as RLlib's Adam). See "
      "benchmarks/RESULTS.md, 'Short budgets'.", check=NON_NEGATIVE, part_of=FOR_LEARNER)
  learning_rate_schedule: Optional[str] = preset_setting(
      LEARNER, "linear: the learning rate falls linearly to 0 at --total_environment_frames (the "
      "papers'); constant: it stays at --learning_rate, so a shorter budget trains exactly as the "
      "start of a longer one.", choices=LEARNING_RATE_SCHEDULES, part_of=FOR_LEARNER)
  popart: Optional[bool] = preset_setting(
      LEARNER, "Learn the values in a normalised scale (PopArt): the baseline's targets and "
      "the policy gradient's advantages divided by a running standard deviation of V-trace's "
      "targets, the value layer rescaled to keep its outputs; rewards of any size and sign "
      "then give gradients of one size. On a suite, per-task PopArt: one scale and one value "
      "output per level, the policy shared (learning/popart.py). Off by default on suites.",
      source="Hessel et al. 2019 (the IMPALA follow-up)", part_of=FOR_LEARNER)
  max_grad_norm: Optional[float] = preset_setting(
      LEARNER, "Global gradient-norm clip; 0 for none (the default with --laser_replay).",
      part_of=FOR_LEARNER)
  off_policy_correction: Optional[str] = preset_setting(
      LEARNER, "Table 2's off-policy correction.", choices=OFF_POLICY_CORRECTIONS,
      part_of=FOR_LEARNER)
  jit_compile: str = setting("auto", LEARNER, "XLA-compile the learner update; auto: on GPUs "
                             "only (faster on each).", choices=JIT_COMPILE_CHOICES)
  replay_fraction: float = setting(
      0.0, REPLAY, "Share of each learner batch drawn from experience replay, in [0, 1); 0: "
      "no replay (the default). The paper's Table 2 'with replay': 0.5; LASER: 0.875 (7 "
      "replayed for each online trajectory). See --replay_mixing for where they go.",
      source="section 5.2.2, Table 2; LASER sections 5.1, 5.3")
  replay_mixing: Optional[str] = setting(
      None, REPLAY, "added: the replayed trajectories come on top of --batch_size online ones, "
      "round(batch_size x f / (1 - f)) of them (LASER: --batch_size=32 --replay_fraction=0.875 "
      "trains on 32 online + 224 replayed). within_batch: they replace round(batch_size x f) of "
      "the --batch_size (32 at 0.875: 4 online + 28 replayed). Default: added with --laser_replay, "
      "within_batch otherwise (IMPALA's replay, Table 2).",
      source="LASER section 5.1; IMPALA section 5.2.2", choices=REPLAY_MIXINGS)
  replay_capacity: int = setting(
      DEFAULT_REPLAY_CAPACITY, REPLAY, "Replay capacity in trajectories, oldest "
      "removed first. Memory: capacity x bytes per trajectory, printed at start.",
      source="Table D.3: 10,000", check=POSITIVE_INT)
  laser_replay: bool = setting(
      False, REPLAY, "LASER: replay whole episodes, sampled uniformly and played from their "
      "start with the core state recomputed by the current network; oldest episodes removed "
      "first; --replay_capacity counts unrolls. Needs --replay_fraction in (0, 1): LASER's 7 "
      "replayed : 1 online is 0.875. Also sets LASER section 5.1's defaults: replayed "
      "trajectories added to the online batch (--replay_mixing), no gradient-norm clipping "
      "(--max_grad_norm=0), entropy on online data only.", source="Schmitt et al., 2019")
  entropy_on_online_only: Optional[bool] = setting(
      None, REPLAY, "Entropy cost on the batch's online trajectories only. Default: on with "
      "--laser_replay, off otherwise.", source="LASER section 5.1")
  trust_region_threshold: Optional[float] = preset_setting(
      REPLAY, "LASER's trust-region V-trace: steps whose KL(pi || pi_rho_bar) exceeds this are "
      "left out of the policy and value losses and cut the V-trace traces. Default: inf (off, "
      "plain IMPALA).", source="LASER section 4.3", check=TRUST_REGION, part_of=FOR_LEARNER)
  shared_replay_address: str = setting(
      "", REPLAY, "LASER's shared replay across processes: host:port of a replay service "
      "(python -m scalable_agent_tf2.transport.replay_service), whose one episode replay this "
      "run feeds and samples together with other agents (same level, network and unroll "
      "length; other hyperparameters). Needs --laser_replay; --replay_capacity is then the "
      "service's. Empty: a replay of this run's own.", source="LASER section 5.4")
  agent_tag: str = setting("", REPLAY, "This run's tag on its episodes in the shared replay "
                           "(--shared_replay_address); default: the logdir's name.")
  shared_replay_connect_secs: float = setting(
      60.0, REPLAY, "How long to wait for the replay service at the start and after losing "
      "it; then the run stops (exit code 3) with its checkpoint written.", check=POSITIVE)
  target_update_period: Optional[int] = setting(
      None, IMPACT_TOPIC, "Learner steps between target-network refreshes. Default: "
      "circular_buffer_size x circular_buffer_max_uses.", source="IMPACT section 4.1.1",
      check=WHOLE_POSITIVE, part_of=FOR_IMPACT)
  circular_buffer_size: Optional[int] = preset_setting(
      IMPACT_TOPIC, "N, batches in the circular buffer.", check=POSITIVE_INT)
  circular_buffer_max_uses: Optional[int] = preset_setting(
      IMPACT_TOPIC, "K, learner steps on each batch before it is dropped.", check=POSITIVE_INT)
  ppo_clip: Optional[float] = preset_setting(
      IMPACT_TOPIC, "PPO's clipping epsilon of the surrogate.", check=OPEN_UNIT_INTERVAL,
      part_of=FOR_IMPACT)
  target_worker_clipping: Optional[float] = preset_setting(
      IMPACT_TOPIC, "rho: ratio pi / max(pi_target, mu / rho).", check=AT_LEAST_ONE,
      part_of=FOR_IMPACT)
  gae_lambda: Optional[float] = preset_setting(
      IMPACT_TOPIC, "lambda of the V-trace GAE advantages.", check=UNIT_INTERVAL,
      part_of=FOR_IMPACT)
  kl_cost: Optional[float] = preset_setting(IMPACT_TOPIC, "Weight of KL(pi_target || pi).",
                                            check=NON_NEGATIVE, part_of=FOR_IMPACT)
  normalize_advantages: Optional[bool] = preset_setting(
      IMPACT_TOPIC, "Standardise the surrogate's advantages over each batch (mean 0, standard "
      "deviation 1), as PPO's implementations do, so that --entropy_cost weighs the same against "
      "the policy gradient whatever the rewards' scale.", part_of=FOR_IMPACT,
      source="not in the IMPACT paper: Stable-Baselines3's normalize_advantage, CleanRL's norm_adv")
  kl_target: Optional[float] = setting(
      None, IMPACT_TOPIC, "The KL(pi_target || pi) an adaptive --kl_cost steers towards: at each "
      "target-network refresh the coefficient is scaled by 1.5 when the step's mean KL exceeds "
      "twice this, by 0.5 below half of it (PPO's adaptive penalty as RLlib, the paper's code "
      "base, applies it; --kl_cost is the start). Default: a fixed --kl_cost (MuJoCo levels: Table "
      "2's 0.04).", source="IMPACT Table 1: none; Table 2: 0.04", check=POSITIVE)


@dataclasses.dataclass(frozen=True)
class ClusterSettings:
  """Where this process sits in a cluster (distributed.py); not part of the experiment."""
  job_name: str = setting(
      "", CLUSTER, "Role in a cluster: the learner, or an actor process. Empty: everything in "
      "this process, unless TF_CONFIG names a task.", choices=JOB_NAMES)
  task: Optional[int] = setting(None, CLUSTER, "Actor process number (0, 1, ...); default: "
                                "TF_CONFIG's task index, else 0.", check=NON_NEGATIVE)
  cluster: str = setting("", CLUSTER, 'The cluster as JSON, e.g. \'{"learner": ["host:8001"], '
                         '"actor": ["host2:8002"]}\'; default: TF_CONFIG\'s "cluster", else the '
                         "learner on localhost:8001 (loopback only).")
  cluster_secret_file: str = setting(
      "", CLUSTER, "A file holding the cluster's shared secret (any text; readable by you "
      "alone): every call to the learner or a replay service must prove it, so processes "
      "without it can neither read parameters nor send anything. Default: the environment "
      "variable IMPALA_CLUSTER_SECRET (the secret itself; the launcher sets it for its own "
      "processes), else none: a learner then listens on a loopback address only.")
  insecure_open_cluster: bool = setting(
      False, CLUSTER, "Let a learner without a secret listen on a non-loopback address: "
      "anyone who reaches the port can read the model and train it. Only on a network you "
      "trust completely; the learner says so at start.")


# The learner's fixed V-trace settings (LearnerConfig fields without a flag).
VTRACE_CONSTANTS = (
    ("clip_rho_threshold", 1.0),     # rho_bar, section 5.2.1.
    ("clip_pg_rho_threshold", 1.0),  # rho_bar of the policy gradient, section 5.2.1.
    ("clip_c_threshold", 1.0),       # c_bar, section 5.2.1.
    ("vtrace_lambda", 1.0),          # Remark 2's lambda.
)
IMPACT_SETTINGS = tuple(f.name for f in dataclasses.fields(ExperimentSettings)
                        if f.metadata["topic"] == IMPACT_TOPIC)
TABLES = (ExperimentSettings, ClusterSettings)  # experiment.py's.


def all_settings():
  """Every setting's dataclasses.Field, in --help's order within each topic."""
  return [field for table in TABLES for field in dataclasses.fields(table)]


def fields_part_of(derived):
  """The settings that are also fields of a derived config (FOR_LEARNER, FOR_IMPACT)."""
  return [f for f in dataclasses.fields(ExperimentSettings) if f.metadata["part_of"] == derived]


def check_value(name, value, field=None, flag=True):
  """Raises ValueError naming the setting when `value` fails its choices or check."""
  field = field or {f.name: f for f in all_settings()}[name]
  label = f"--{name}" if flag else name
  choices, check = field.metadata["choices"], field.metadata["check"]
  if value is None:
    return
  if choices is not None and value not in choices:
    raise ValueError(f"{label} must be one of {choices}, got {value!r}.")
  if check is not None and not check.holds(value):
    raise ValueError(f"{label} must be {check.requirement}, got {value!r}.")


def check_values(values, table=None, flag=True):
  """Checks the fields of `table` (default: the dataclass of `values`) in `values` (an instance or
  an argparse Namespace), a derived config's by their settings'; ValueError as check_value's."""
  settings = {f.name: f for f in all_settings()}
  for field in dataclasses.fields(table or values):
    if "check" in field.metadata or field.name in settings:
      check_value(field.name, getattr(values, field.name),
                  field if "check" in field.metadata else settings[field.name], flag)
