"""Atari 2600 games as "atari/<game>" (the 57 games of the paper's Table C.1, lower_snake_case).

Presets: Table G.1 (ATARI), the multi-task agent's deep network and 57 x 200M frames (Appendix
G, section 5.3.2); --preset=impact_paper: the IMPACT paper's own setting (IMPACT_PAPER_*).
Environments: at Table G.1's 84x84 frames and action repeat 4 without sticky actions, a C++
vector of games stepped by ale-py's threads in the training process
(environments/atari_vector.py); otherwise one process per actor (environments/atari.py).
Observations: 4 stacked 84x84 grey frames, no instruction; the feed-forward agent.
"""
from scalable_agent_tf2.configuration import settings
from scalable_agent_tf2.environments import suites
from scalable_agent_tf2.environments.families import base

PREFIX = suites.ATARI_LEVEL_PREFIX
# One Atari game, Table G.1: entropy 0.01, learning rate 0.0006, RMSProp epsilon 0.01, gradient
# norm clipped at 40, rewards clipped to [-1, 1], unroll 20, batch 32, 84x84, 200M frames;
# Appendix G: the experts use the shallow network. Actors: not given for Atari; Table 1's 48.
ATARI = dict(base.PAPER_SHARED, entropy_cost=0.01, learning_rate=0.0006, epsilon=0.01,
             max_grad_norm=40.0, reward_clipping=settings.ABS_ONE,
             total_environment_frames=int(200e6), unroll_length=20, batch_size=32, width=84,
             height=84, torso=settings.SHALLOW, num_actors=48)
ATARI_CITED = dict(
    base.PAPER_SHARED_CITED, entropy_cost="Table G.1: 0.01", learning_rate="Table G.1: 0.0006",
    epsilon="Table G.1: 0.01", max_grad_norm="Table G.1: 40",
    reward_clipping="Table G.1: abs_one", total_environment_frames="Table G.1: 200M",
    unroll_length="Table G.1: 20", batch_size="Table G.1: 32", width="Table G.1: 84",
    height="Table G.1: 84", torso="Appendix G (the experts): shallow",
    num_actors="Table 1: 48")
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
                           discounting=0.99, baseline_cost=0.5, unroll_length=50,
                           batch_size=10, width=42, height=42, torso=settings.IMPACT_CNN,
                           num_actors=32)
# Table 1, IMPACT column: as IMPALA's, and value function coefficient 1.0, gradient clipping 10
# (on the mean loss: mean_loss_max_grad_norm, config.py), clip parameter 0.3, N 4, K 2, lambda
# 0.995, KL coefficient 0, target-worker clipping 2.0. The learning rate needs no rescaling for
# our summed loss: RMSProp divides the step by the gradient's root mean square, and Table G.1's
# epsilon 0.01 under the root is 0.01 / 500**2 = 4e-8 on the mean's scale (T x B = 500), as
# negligible as the 1e-8 of RLlib's Adam.
IMPACT_PAPER_IMPACT = dict(
    IMPACT_PAPER_IMPALA, baseline_cost=1.0, ppo_clip=0.3, circular_buffer_size=4,
    circular_buffer_max_uses=2, gae_lambda=0.995, kl_cost=0.0, target_worker_clipping=2.0,
    normalize_advantages=False, max_grad_norm=None, mean_loss_max_grad_norm=10.0)
# What this project cannot run exactly as the paper (RLlib) did, and what it runs instead:
#   * the optimizer: the paper names none; RLlib's default for both algorithms was Adam with a
#     constant learning rate. Here: Table G.1's RMSProp (decay 0.99, epsilon 0.01, momentum 0),
#     whose mean square starts at 1 (TF1), so the first few hundred updates take small steps
#     (--rmsprop_initial_mean_square=0 removes that warm-up), and the learning rate decays
#     linearly to 0 at --total_environment_frames (200M, Table G.1; a run stopped by a
#     wall-clock budget ends at 1e-4 x (1 - frames reached / 200M));
#   * averaged against summed losses: IMPACT's loss is summed here, its gradient clip scaled
#     to match (mean_loss_max_grad_norm: 10 x T x B, with the run's own T and B); IMPALA's
#     loss was summed in RLlib too;
#   * the unroll: RLlib learns from 49 steps of each 50-step fragment, the 50th one's value
#     bootstrapping; here all 50 steps, bootstrapped from the 51st observation;
#   * the network: its heads also see the clipped reward and the previous action, and its
#     weights start from another initialiser (torsos.ImpactTorso);
#   * the frames: RLlib's came from the OpenAI Baselines DeepMind wrappers (wrap_deepmind with
#     dim=42): up to 30 no-ops, action repeat 4 with a max over the last 2 frames, a life loss
#     ending training episodes, grey frames resized to 42x42, 4 stacked, as
#     environments/atari.py does (Table G.1); only FIRE pressed at each reset (its
#     FireResetEnv) is not done here, the agent learns to press it.
_TABLE1 = "IMPACT Table 1, IMPALA column"
IMPACT_PAPER_IMPALA_CITED = dict(
    ATARI_CITED, learning_rate=f"{_TABLE1}: 1e-4", entropy_cost=f"{_TABLE1}: 0.01",
    max_grad_norm=f"{_TABLE1}: 40", discounting=f"{_TABLE1}: 0.99",
    baseline_cost=f"{_TABLE1}: 0.5", unroll_length=f"{_TABLE1}, sample batch: 50",
    batch_size=f"{_TABLE1}, 500 / 50 steps: 10", width="IMPACT section 4.3: 42",
    height="IMPACT section 4.3: 42", torso="IMPACT section 4.3: impact_cnn",
    num_actors="IMPACT section 4.3, 32 CPUs: 32")
_TABLE1_IMPACT = "IMPACT Table 1, IMPACT column"
IMPACT_PAPER_IMPACT_CITED = dict(
    IMPACT_PAPER_IMPALA_CITED, baseline_cost=f"{_TABLE1_IMPACT}: 1.0",
    ppo_clip=f"{_TABLE1_IMPACT}: 0.3", circular_buffer_size=f"{_TABLE1_IMPACT} (N): 4",
    circular_buffer_max_uses=f"{_TABLE1_IMPACT} (K): 2", gae_lambda=f"{_TABLE1_IMPACT}: 0.995",
    kl_cost=f"{_TABLE1_IMPACT}: 0.0", target_worker_clipping=f"{_TABLE1_IMPACT}: 2.0",
    normalize_advantages="the IMPACT paper (nor RLlib's APPO): off",
    max_grad_norm=f"{_TABLE1_IMPACT}, on the mean loss: 10",
    mean_loss_max_grad_norm=f"{_TABLE1_IMPACT}: 10")
# With --popart on a suite, per-task PopArt (Hessel et al. 2019, "Multi-task Deep Reinforcement
# Learning with PopArt"): it trained its multi-task Atari-57 agent on unclipped rewards (its
# Table 1, the unclipped column), the scales PopArt learns per task taking clipping's place.
POPART_SUITE_CLIPPING_CITED = ("Hessel et al. 2019, Table 1 (PopArt-IMPALA on Atari-57, "
                               "unclipped rewards), with --popart on a suite: none")
# Environments of an Atari run: Table 1's 48 actors, one environment each.
ATARI_ENVIRONMENTS = 48
# What atari_vector.AtariVectorGroup implements: Table G.1's 84x84 frames and action repeat 4
# (tests/environments/test_families.py checks these equal environments/atari.py's defaults).
VECTOR_FRAME_SIZE = 84
VECTOR_NUM_ACTION_REPEATS = 4
# Machines with at most this many cores run Atari's shallow network with one TensorFlow
# thread per op (intra_op_threads).
SMALL_MACHINE_CORES = 2


def atari_actor_layout(num_cores):
  """The Atari preset's layout: Table 1's 48 environments (base.actor_layout)."""
  return base.actor_layout(ATARI_ENVIRONMENTS, num_cores)


class AtariFamily(base.Family):
  """See the module docstring."""
  name = "atari"
  title = "Atari games"
  prefixes = (PREFIX,)
  pbt_adapts_max_grad_norm = True  # Section 5.3.2, Table G.1: the clip is adapted on Atari.
  forms_suites = True  # Appendix G: one policy layer of the full 18 actions for every game.

  def listed_levels(self):
    return suites.ATARI57_LEVELS

  def presets(self, level_name, levels, algorithm, num_cores, given=None):
    # Frames: 200M per game, the multi-task agent 57 x 200M (section 5.3.2); Appendix G: the
    # multi-task agent uses the deep (residual) network.
    del algorithm
    values = dict(ATARI, total_environment_frames=ATARI["total_environment_frames"]
                  * len(levels))
    values.update(atari_actor_layout(num_cores))
    if suites.is_suite(level_name):
      values["torso"] = settings.DEEP
      if (given or {}).get("popart"):  # PopArt-IMPALA's Atari-57 rewards: unclipped.
        values["reward_clipping"] = settings.NO_CLIPPING
    return values

  def preset_citations(self, level_name, levels, algorithm, num_cores, given=None):
    del algorithm
    cited = dict(ATARI_CITED, **base.actor_layout_cited(ATARI_ENVIRONMENTS, num_cores,
                                                        "Table 1"))
    if len(levels) > 1:
      cited["total_environment_frames"] = (
          f"Table G.1 and section 5.3.2, 200M per game: {len(levels) * 200}M")
    if suites.is_suite(level_name):
      cited["torso"] = "Appendix G (the multi-task agent): deep"
      if (given or {}).get("popart"):
        cited["reward_clipping"] = POPART_SUITE_CLIPPING_CITED
    return cited

  def intra_op_threads_cited(self, torso, num_cores):
    threads = self.intra_op_threads(torso, num_cores)
    return (f"not in the paper, measured (benchmarks/RESULTS.md, 'Side by side with a peer'): "
            f"{threads} (1 for the shallow network on at most {SMALL_MACHINE_CORES} cores, "
            "where TensorFlow's own threads spin on the actors' cores; else TensorFlow's "
            "choice, 0)")

  def intra_op_threads(self, torso, num_cores):
    """1 with the shallow network on a machine of at most SMALL_MACHINE_CORES cores: TensorFlow's
    intra-op threads spin on the cores the actor threads and ale-py's stepping threads need
    (benchmarks/RESULTS.md, "Side by side with a peer": 1.08x on README's Pong quick start;
    the deep network: 0.95x, so it keeps the default)."""
    return 1 if torso == settings.SHALLOW and num_cores <= SMALL_MACHINE_CORES else 0

  def check_config(self, config):
    if config.width != config.height:
      raise ValueError(f"Atari frames are square: --width ({config.width}) and --height "
                       f"({config.height}) must be equal.")

  def environment_options(self, config):
    # Appendix G: the multi-task agent plays all games with the full 18 actions.
    return dict(full_action_space=config.is_multi_task, sticky_actions=config.sticky_actions,
                num_action_repeats=config.num_action_repeats, frame_size=config.width)

  def environment_constructor(self, level_name, seed, test_mode, options):
    from scalable_agent_tf2.environments import atari  # pylint: disable=g-import-not-at-top
    options = dict(options)
    options.setdefault("terminal_on_life_loss", not test_mode)
    return atari.AtariEnvironment, dict(game=suites.atari_game(level_name), seed=seed,
                                        **options)

  def runs_as(self, config):
    """A vector group at what AtariVectorGroup implements (Table G.1's 84x84 frames and action
    repeat 4, no sticky actions); otherwise one environment process per actor."""
    if (not config.sticky_actions and config.num_action_repeats == VECTOR_NUM_ACTION_REPEATS
        and config.width == config.height == VECTOR_FRAME_SIZE):
      return base.VECTOR
    return base.OWN_PROCESS

  def vector_group(self, config, level_name, seeds, test_mode):
    from scalable_agent_tf2.environments import atari_vector  # pylint: disable=g-import-not-at-top
    return atari_vector.AtariVectorGroup(suites.atari_game(level_name), seeds,
                                         full_action_space=config.is_multi_task,
                                         terminal_on_life_loss=not test_mode)

  def network_config(self, config, spec):
    """Table G.1: 4 stacked grey frames, feed-forward ("the deep network (without the LSTM)",
    section 5.3.2), no language."""
    return base.frame_network_config(config, spec.num_actions, 4, use_lstm=False,
                                     use_instruction=False)


FAMILY = AtariFamily()
