"""The paper's settings for each kind of level: what `config.resolve` fills in for every
setting left PRESET (None).

    presets.presets("atari/pong")            # Table G.1, Table 1's 48 actors.
    presets.presets("dmlab30", settings.IMPACT)  # Table D.3 and IMPACT's Table 1.

Every value cites the paper's table or section it comes from (the MuJoCo tasks' are in
mujoco_presets.py). A value given on the command line always wins over these (config.resolve).
This module imports no TensorFlow.
"""
import math
import os

from scalable_agent_tf2 import mujoco_presets
from scalable_agent_tf2 import settings
from scalable_agent_tf2 import suites
from scalable_agent_tf2.settings import IMPACT, IMPALA

# The learner's settings Tables D.3 and G.1 share: gamma 0.99, baseline cost 0.5, action
# repeat 4, RMSProp momentum 0 (decay 0.99 and the accumulator starting at 1: released code,
# TF1's RMSPropOptimizer); V-trace (section 5.2.1) without LASER's trust region.
_SHARED = dict(discounting=0.99, baseline_cost=0.5, num_action_repeats=4, decay=0.99,
               momentum=0.0, rmsprop_initial_mean_square=1.0,
               off_policy_correction=settings.VTRACE, trust_region_threshold=math.inf,
               envs_per_actor=1)
# DMLab-30. Table D.3: unroll 100, 96x72 frames, Figure D.1's optimistic asymmetric reward
# clipping. Released code: batch 32, RMSProp epsilon 0.1, no gradient clipping, entropy cost and
# learning rate of the Table D.1 sweep's best agent, 10e9 frames (Figure 5); 150 actors
# (section 5.3.1, "IMPALA, deep").
DMLAB30 = dict(_SHARED, entropy_cost=0.0033391318945337044, learning_rate=0.00031866995608948655,
               epsilon=0.1, max_grad_norm=0.0, reward_clipping=settings.OPTIMISTIC_ASYMMETRIC,
               total_environment_frames=int(10e9), unroll_length=100, batch_size=32, width=96,
               height=72, torso=settings.DEEP, num_actors=150)
# One DMLab level. Table D.3: rewards clipped to [-1, 1]; released code: 1e9 frames (Figure 4);
# Table 1's 48 actors.
DMLAB_LEVEL = dict(DMLAB30, reward_clipping=settings.ABS_ONE, total_environment_frames=int(1e9),
                   num_actors=48)
# One Atari game, Table G.1: entropy 0.01, learning rate 0.0006, RMSProp epsilon 0.01, gradient
# norm clipped at 40, rewards clipped to [-1, 1], unroll 20, batch 32, 84x84, 200M frames;
# Appendix G: the experts use the shallow network. Actors: not given for Atari; Table 1's 48.
ATARI = dict(_SHARED, entropy_cost=0.01, learning_rate=0.0006, epsilon=0.01, max_grad_norm=40.0,
             reward_clipping=settings.ABS_ONE, total_environment_frames=int(200e6),
             unroll_length=20, batch_size=32, width=84, height=84, torso=settings.SHALLOW,
             num_actors=48)
# Not from the paper: Table G.1's learner (Atari) with a small batch and short unrolls, so a run
# takes a minute or two on a CPU. The environment repeats no actions, so frames are agent steps.
# Rewards are not clipped: the delayed level's reward (0-10) carries how many choices were right.
TOY = dict(ATARI, reward_clipping=settings.NO_CLIPPING, unroll_length=10, batch_size=8,
           num_action_repeats=1, width=20, height=20, total_environment_frames=25_000,
           num_actors=4)
# IMPACT paper, Table 1 (discrete environments, IMPACT column): value function coefficient 1.0;
# "Minibatch Buffer Size (N)" 4 and "Num SGD Iterations (K)" 2 (section 4.3 reports N = 1, K = 2
# as the best discrete setting); clip parameter 0.3, target-worker clipping 2.0, lambda 0.995,
# KL coefficient 0. Its learning rate (1e-4) and gradient clipping (10) go with averaged losses
# (Algorithm 1's 1/M) and an optimizer the paper does not name; ours are summed and trained with
# IMPALA's RMSProp, so the level's IMPALA values stay (Table 1 gives IMPACT and IMPALA the same
# learning rate; learner.ImpactLearner). So do the level's batch, unroll and reward clipping.
IMPACT_PRESET = dict(baseline_cost=1.0, circular_buffer_size=4, circular_buffer_max_uses=2,
                     ppo_clip=0.3, target_worker_clipping=2.0, gae_lambda=0.995, kl_cost=0.0)


# A gradient-norm clip that a paper set on a loss averaged over the batch's T x B steps (the
# IMPACT paper's Algorithm 1 and RLlib's APPO, which ran IMPACT), where this project's learners
# sum the loss (learner.ImpactLearner), which scales every gradient by T x B. A preset gives it
# under this key instead of max_grad_norm, and config.resolve sets max_grad_norm = it x T x B
# with the run's own unroll and batch: the same clipping at the paper's batch and at any other
# (a --max_grad_norm given still wins).
MEAN_LOSS_MAX_GRAD_NORM = "mean_loss_max_grad_norm"


def summed_loss_max_grad_norm(values):
  """The max_grad_norm of a preset's values (with the run's unroll_length and batch_size):
  MEAN_LOSS_MAX_GRAD_NORM x T x B when the preset clips a mean loss, else its own."""
  mean_clip = values.get(MEAN_LOSS_MAX_GRAD_NORM)
  if mean_clip is None:
    return values.get("max_grad_norm")
  return mean_clip * values["unroll_length"] * values["batch_size"]


# The IMPACT paper's Atari setting (--preset=impact_paper): Figure 6 (Pong, SpaceInvaders,
# Breakout) as published, for both of its algorithms. Section 4.3: its network on "a stack of
# four 42x42 down-sampled images" (torsos.ImpactTorso), no LSTM (Table 1 lists none), "32 CPUs
# and 1 GPU", one actor per CPU (Figure 7 scales the workers up to 32). Table 1, IMPALA column:
# learning rate 1e-4, entropy 0.01, gradient clipping 40, discount 0.99, value function
# coefficient 0.5; sample batch 50 and train batch 500, which are RLlib's fragment of 50 agent
# steps (our unroll) and 500 steps per update (500 / 50 = 10 unrolls). The rest is Table G.1's
# (ATARI): action repeat 4, rewards clipped to [-1, 1] (the sign, for these games' integer
# rewards), 200M frames.
IMPACT_PAPER_IMPALA = dict(ATARI, learning_rate=1e-4, entropy_cost=0.01, max_grad_norm=40.0,
                           discounting=0.99, baseline_cost=0.5, unroll_length=50, batch_size=10,
                           width=42, height=42, torso=settings.IMPACT_CNN, num_actors=32)
# Table 1, IMPACT column: as IMPALA's, and value function coefficient 1.0, gradient clipping 10
# (on the mean loss: MEAN_LOSS_MAX_GRAD_NORM), clip parameter 0.3, N 4, K 2, lambda 0.995, KL
# coefficient 0, target-worker clipping 2.0. The learning rate needs no rescaling for our summed
# loss: RMSProp divides the step by the gradient's root mean square, and Table G.1's epsilon
# 0.01 under the root is 0.01 / 500**2 = 4e-8 on the mean's scale (T x B = 500), as negligible
# as the 1e-8 of RLlib's Adam.
IMPACT_PAPER_IMPACT = dict(
    IMPACT_PAPER_IMPALA, baseline_cost=1.0, ppo_clip=0.3, circular_buffer_size=4,
    circular_buffer_max_uses=2, gae_lambda=0.995, kl_cost=0.0, target_worker_clipping=2.0,
    max_grad_norm=None, mean_loss_max_grad_norm=10.0)


def impact_paper_presets(level_name, algorithm):
  """The IMPACT paper's Atari setting (Figure 6) for IMPALA or IMPACT: Table 1's column.

  What this project cannot run exactly as the paper (RLlib) did, and what it runs instead:
    * the optimizer: the paper names none; RLlib's default for both algorithms was Adam with a
      constant learning rate. Here: Table G.1's RMSProp (decay 0.99, epsilon 0.01, momentum 0),
      whose mean square starts at 1 (TF1), so the first few hundred updates take small steps
      (--rmsprop_initial_mean_square=0 removes that warm-up), and the learning rate decays
      linearly to 0 at --total_environment_frames (200M, Table G.1; a run stopped by a
      wall-clock budget ends at 1e-4 x (1 - frames reached / 200M));
    * averaged against summed losses: IMPACT's loss is summed here, its gradient clip scaled
      to match (MEAN_LOSS_MAX_GRAD_NORM: 10 x T x B, with the run's own T and B); IMPALA's
      loss was summed in RLlib too;
    * the unroll: RLlib learns from 49 steps of each 50-step fragment, the 50th one's value
      bootstrapping; here all 50 steps, bootstrapped from the 51st observation;
    * the network: its heads also see the clipped reward and the previous action, and its
      weights start from another initialiser (torsos.ImpactTorso);
    * the frames: RLlib's came from the OpenAI Baselines DeepMind wrappers (wrap_deepmind with
      dim=42): up to 30 no-ops, action repeat 4 with a max over the last 2 frames, a life loss
      ending training episodes, grey frames resized to 42x42, 4 stacked, as
      environments/atari.py does (Table G.1); only FIRE pressed at each reset (its
      FireResetEnv) is not done here, the agent learns to press it.

  Raises:
    ValueError: not one Atari game (the paper's discrete experiments are single games).
  """
  levels = suites.level_names(level_name)
  if suites.is_suite(level_name) or not suites.is_atari_level(levels[0]):
    raise ValueError(f"--preset={settings.IMPACT_PAPER} is the IMPACT paper's setting for one "
                     f"Atari game (Figure 6, e.g. --level_name=atari/pong); --level_name="
                     f"{level_name} is not one. Drop --preset or pick a game.")
  values = dict(IMPACT_PAPER_IMPACT if algorithm == IMPACT else IMPACT_PAPER_IMPALA)
  values["queue_capacity"] = 4 * values["batch_size"]  # As for the other presets.
  return values


# Environments of an Atari run: Table 1's 48 actors, one environment each.
ATARI_ENVIRONMENTS = 48


def actor_layout(num_environments, num_cores):
  """num_actors and envs_per_actor for about num_environments environments stepped in groups
  in the training process on a machine with num_cores cores: one actor thread per core (at
  least 2, so that one group's forward pass overlaps another's stepping), the environments
  shared out among them (rounded up): 48 on 2 cores are 2 x 24. benchmarks/RESULTS.md
  ("Throughput") has the measurements behind the choice."""
  num_actors = min(max(2, num_cores), num_environments)
  return dict(num_actors=num_actors, envs_per_actor=-(-num_environments // num_actors))


def atari_actor_layout(num_cores):
  """The Atari preset's layout: Table 1's 48 environments (actor_layout)."""
  return actor_layout(ATARI_ENVIRONMENTS, num_cores)


# Machines with at most this many cores run Atari's shallow network with one TensorFlow
# thread per op.
SMALL_MACHINE_CORES = 2


def intra_op_threads(level_name, torso, num_cores):
  """TensorFlow threads per op for a run of level_name with torso on num_cores cores: 1 for
  Atari with the shallow network on a machine of at most SMALL_MACHINE_CORES cores, else 0
  (TensorFlow's default, one per core). config.resolve applies it unless a flag gives one.

  Why (benchmarks/RESULTS.md, "Side by side with a peer"): TensorFlow's intra-op threads spin
  while they wait for work, on the cores that the actor threads and ale-py's stepping threads
  need. With the shallow network, one thread per op ran README's Pong quick start faster in
  every round on 2 cores (1.08x); with the deep network, whose convolutions are most of
  the work, it did not help (0.95x). Other levels and bigger machines are not measured and
  keep TensorFlow's default."""
  small_network_on_atari = (suites.is_atari_level(suites.level_names(level_name)[0])
                            and torso == settings.SHALLOW)
  return 1 if small_network_on_atari and num_cores <= SMALL_MACHINE_CORES else 0


def presets(level_name, algorithm=IMPALA, preset=settings.DEFAULT_PRESET):
  """The paper's settings for a level or suite, for IMPALA or IMPACT (IMPACT paper, Table 1);
  with preset=impact_paper, the IMPACT paper's own Atari setting (`impact_paper_presets`).
  The threads per op depend on the run's torso too: config.resolve sets them
  (`intra_op_threads`).

  Raises:
    ValueError: unknown level name (the message lists the valid ones).
  """
  if preset == settings.IMPACT_PAPER:
    return impact_paper_presets(level_name, algorithm)
  levels = suites.level_names(level_name)
  multi_task = suites.is_suite(level_name)
  if suites.is_atari_level(levels[0]):
    # Frames: 200M per game, the multi-task agent 57 x 200M (section 5.3.2); Appendix G: the
    # multi-task agent uses the deep (residual) network.
    values = dict(ATARI, total_environment_frames=ATARI["total_environment_frames"] * len(levels))
    values.update(atari_actor_layout(os.cpu_count() or 1))
    if multi_task:
      values["torso"] = settings.DEEP
  elif suites.is_toy_level(levels[0]):
    values = dict(TOY)
  elif suites.is_mujoco_level(levels[0]):
    # The IMPACT paper's Table 2, IMPALA or IMPACT column (IMPACT's own settings included);
    # its 16 workers (section 4.3) as 16 tasks stepped in groups by one thread per core.
    values = mujoco_presets.presets(levels[0], algorithm)
    values.update(actor_layout(values["num_actors"], os.cpu_count() or 1))
    values["queue_capacity"] = 4 * values["batch_size"]
    return values
  else:
    values = dict(DMLAB30 if multi_task else DMLAB_LEVEL)
  # Up to this many unrolls wait for the learner (4 batches): actors rarely block, and the
  # policy lag stays a few updates.
  values["queue_capacity"] = 4 * values["batch_size"]
  if algorithm == IMPACT:
    values.update(IMPACT_PRESET)  # target_update_period: N x K, once N and K are known.
  return values


# LASER section 5.1 (its Atari setting): "Differently from Espeholt et al. (2018), we do not
# use gradient clipping by norm". With --laser_replay this replaces the level's clip (Table
# G.1's 40 on Atari); a --max_grad_norm given still wins. (Its other section 5.1 defaults,
# the replay mini-batch added to the online one and the entropy cost on online data only,
# are resolved in config._resolve_laser.)
LASER_PRESET = dict(max_grad_norm=0.0)
