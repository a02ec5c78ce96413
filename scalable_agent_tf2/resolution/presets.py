"""The paper's settings for each kind of level: what `config.resolve` fills in for every
setting left PRESET (None).

    presets.presets("atari/pong")            # Table G.1, Table 1's 48 actors.
    presets.presets("dmlab30", settings.IMPACT)  # Table D.3 and IMPACT's Table 1.

Each environment family's values live beside it (environments/families/<family>.py: DMLab-30
and Atari's tables, the toy levels', the MuJoCo tasks' in mujoco_presets.py, the gymnasium
family's documented set) and cite the paper's table or section they come from; this module
adds the algorithms' own (IMPACT Table 1, kept beside the families in families/base.py since
gymnasium's family adds it too; the IMPACT paper's Atari setting; LASER). A value
given on the command line always wins over these (config.resolve). No TensorFlow here.
"""
import os

from scalable_agent_tf2.configuration import settings
from scalable_agent_tf2.configuration.settings import IMPACT
from scalable_agent_tf2.configuration.settings import IMPALA
from scalable_agent_tf2.environments import families
from scalable_agent_tf2.environments import suites
from scalable_agent_tf2.environments.families import atari as atari_family
from scalable_agent_tf2.environments.families import base as family_base

# A gradient-norm clip that a paper set on a loss averaged over the batch's T x B steps (the
# IMPACT paper's Algorithm 1 and RLlib's APPO, which ran IMPACT), where this project's learners
# sum the loss (impact.ImpactLearner), which scales every gradient by T x B. A preset gives it
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
IMPACT_PAPER_IMPALA = dict(atari_family.ATARI, learning_rate=1e-4, entropy_cost=0.01,
                           max_grad_norm=40.0, discounting=0.99, baseline_cost=0.5,
                           unroll_length=50, batch_size=10, width=42, height=42,
                           torso=settings.IMPACT_CNN, num_actors=32)
# Table 1, IMPACT column: as IMPALA's, and value function coefficient 1.0, gradient clipping 10
# (on the mean loss: MEAN_LOSS_MAX_GRAD_NORM), clip parameter 0.3, N 4, K 2, lambda 0.995, KL
# coefficient 0, target-worker clipping 2.0. The learning rate needs no rescaling for our summed
# loss: RMSProp divides the step by the gradient's root mean square, and Table G.1's epsilon
# 0.01 under the root is 0.01 / 500**2 = 4e-8 on the mean's scale (T x B = 500), as negligible
# as the 1e-8 of RLlib's Adam.
IMPACT_PAPER_IMPACT = dict(
    IMPACT_PAPER_IMPALA, baseline_cost=1.0, ppo_clip=0.3, circular_buffer_size=4,
    circular_buffer_max_uses=2, gae_lambda=0.995, kl_cost=0.0, target_worker_clipping=2.0,
    normalize_advantages=False, max_grad_norm=None, mean_loss_max_grad_norm=10.0)


# Where each value comes from, as --show_settings cites it (the comments above, in words).
_TABLE1 = "IMPACT Table 1, IMPALA column"
IMPACT_PAPER_IMPALA_CITED = dict(
    atari_family.ATARI_CITED, learning_rate=f"{_TABLE1}: 1e-4",
    entropy_cost=f"{_TABLE1}: 0.01", max_grad_norm=f"{_TABLE1}: 40",
    discounting=f"{_TABLE1}: 0.99", baseline_cost=f"{_TABLE1}: 0.5",
    unroll_length=f"{_TABLE1}, sample batch: 50", batch_size=f"{_TABLE1}, 500 / 50 steps: 10",
    width="IMPACT section 4.3: 42", height="IMPACT section 4.3: 42",
    torso="IMPACT section 4.3: impact_cnn", num_actors="IMPACT section 4.3, 32 CPUs: 32")
_TABLE1_IMPACT = "IMPACT Table 1, IMPACT column"
IMPACT_PAPER_IMPACT_CITED = dict(
    IMPACT_PAPER_IMPALA_CITED, baseline_cost=f"{_TABLE1_IMPACT}: 1.0",
    ppo_clip=f"{_TABLE1_IMPACT}: 0.3", circular_buffer_size=f"{_TABLE1_IMPACT} (N): 4",
    circular_buffer_max_uses=f"{_TABLE1_IMPACT} (K): 2", gae_lambda=f"{_TABLE1_IMPACT}: 0.995",
    kl_cost=f"{_TABLE1_IMPACT}: 0.0", target_worker_clipping=f"{_TABLE1_IMPACT}: 2.0",
    normalize_advantages="the IMPACT paper (nor RLlib's APPO): off",
    max_grad_norm=f"{_TABLE1_IMPACT}, on the mean loss: 10",
    mean_loss_max_grad_norm=f"{_TABLE1_IMPACT}: 10")
LASER_PRESET_CITED = dict(max_grad_norm="LASER section 5.1 (no gradient clipping by norm): 0")


def citations(level_name, algorithm=IMPALA, preset=settings.DEFAULT_PRESET, given=None):
  """Where each of presets(level_name, algorithm, preset, given)'s values comes from, in
  --show_settings' words: a dict of the same keys."""
  values = presets(level_name, algorithm, preset, given)
  if preset == settings.IMPACT_PAPER:
    cited = dict(IMPACT_PAPER_IMPACT_CITED if algorithm == IMPACT else IMPACT_PAPER_IMPALA_CITED)
  else:
    levels = families.level_names(level_name)
    family = families.family_of(levels[0])
    cited = family.preset_citations(level_name, levels, algorithm, os.cpu_count() or 1,
                                    given=given)
    if algorithm == IMPACT and not family.owns_algorithm_presets:
      cited.update(family_base.IMPACT_PRESET_CITED)
  cited["queue_capacity"] = (f"not in the paper, 4 batches of {values['batch_size']} unrolls "
                             f"(actors rarely block): {values['queue_capacity']}")
  return cited


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
  if suites.is_suite(level_name) or level_family(level_name) is not atari_family.FAMILY:
    raise ValueError(f"--preset={settings.IMPACT_PAPER} is the IMPACT paper's setting for one "
                     f"Atari game (Figure 6, e.g. --level_name=atari/pong); --level_name="
                     f"{level_name} is not one. Drop --preset or pick a game.")
  values = dict(IMPACT_PAPER_IMPACT if algorithm == IMPACT else IMPACT_PAPER_IMPALA)
  values["queue_capacity"] = 4 * values["batch_size"]  # As for the other presets.
  return values


def intra_op_threads(level_name, torso, num_cores):
  """TensorFlow threads per op for a run of level_name with torso on num_cores cores, as the
  level's family chooses (Family.intra_op_threads; Atari: 1 with the shallow network on at
  most families/atari.py's SMALL_MACHINE_CORES cores, benchmarks/RESULTS.md); 0 is
  TensorFlow's default. config.resolve applies it unless a flag gives one."""
  return level_family(level_name).intra_op_threads(torso, num_cores)


def level_family(level_name):
  """The environment family of a level or suite (a suite's levels share one)."""
  return families.family_of(families.level_names(level_name)[0])


def default_algorithm(level_name, given=None):
  """The algorithm a run of level_name uses when --algorithm is not given (the family's
  choice: IMPALA, or IMPACT for a gymnasium environment)."""
  levels = families.level_names(level_name)
  return families.family_of(levels[0]).default_algorithm(levels, given=given)


def presets(level_name, algorithm=IMPALA, preset=settings.DEFAULT_PRESET, given=None):
  """The paper's settings for a level or suite, for IMPALA or IMPACT (IMPACT paper, Table 1);
  with preset=impact_paper, the IMPACT paper's own Atari setting (`impact_paper_presets`).
  The threads per op depend on the run's torso too: config.resolve sets them
  (`intra_op_threads`). given: the settings the flags give (families/base.py, presets).

  Raises:
    ValueError: unknown level name (the message lists the valid ones).
  """
  if preset == settings.IMPACT_PAPER:
    return impact_paper_presets(level_name, algorithm)
  levels = families.level_names(level_name)
  family = families.family_of(levels[0])
  values = family.presets(level_name, levels, algorithm, os.cpu_count() or 1, given=given)
  # Up to this many unrolls wait for the learner (4 batches): actors rarely block, and the
  # policy lag stays a few updates.
  values["queue_capacity"] = 4 * values["batch_size"]
  if algorithm == IMPACT and not family.owns_algorithm_presets:
    # target_update_period: N x K, once N and K are known.
    values.update(family_base.IMPACT_PRESET)
  return values


def describe_presets(level_name):
  """Where a level's presets come from, in words, for a run's first lines: the family's own
  account for levels the papers did not run (the gymnasium family's documented set), else
  None (the paper's tables, cited in the family's module)."""
  return level_family(level_name).preset_sources(families.level_names(level_name)[0])


# LASER section 5.1 (its Atari setting): "Differently from Espeholt et al. (2018), we do not
# use gradient clipping by norm". With --laser_replay this replaces the level's clip (Table
# G.1's 40 on Atari); a --max_grad_norm given still wins. (Its other section 5.1 defaults,
# the replay mini-batch added to the online one and the entropy cost on online data only,
# are resolved in combinations.resolve_laser.)
LASER_PRESET = dict(max_grad_norm=0.0)
