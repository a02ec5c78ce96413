"""Atari 2600 games as "atari/<game>" (the 57 games of the paper's Table C.1, lower_snake_case).

Presets: Table G.1 (ATARI), the multi-task agent's deep network and 57 x 200M frames (Appendix
G, section 5.3.2). Environments: at Table G.1's 84x84 frames and action repeat 4 without
sticky actions, a C++ vector of games stepped by ale-py's threads in the training process
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

  def listed_levels(self):
    return suites.ATARI57_LEVELS

  def presets(self, level_name, levels, algorithm, num_cores, given=None):
    # Frames: 200M per game, the multi-task agent 57 x 200M (section 5.3.2); Appendix G: the
    # multi-task agent uses the deep (residual) network.
    del algorithm, given
    values = dict(ATARI, total_environment_frames=ATARI["total_environment_frames"]
                  * len(levels))
    values.update(atari_actor_layout(num_cores))
    if suites.is_suite(level_name):
      values["torso"] = settings.DEEP
    return values

  def preset_citations(self, level_name, levels, algorithm, num_cores, given=None):
    del algorithm, given
    cited = dict(ATARI_CITED, **base.actor_layout_cited(ATARI_ENVIRONMENTS, num_cores,
                                                        "Table 1"))
    if len(levels) > 1:
      cited["total_environment_frames"] = (
          f"Table G.1 and section 5.3.2, 200M per game: {len(levels) * 200}M")
    if suites.is_suite(level_name):
      cited["torso"] = "Appendix G (the multi-task agent): deep"
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
