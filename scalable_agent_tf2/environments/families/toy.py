"""The diagnostic levels (environments/toy.py; not from the paper): point at the lit half of a
20x20 frame ("toy/lit_side"; "toy/lit_side_delayed" pays at the episode's end), and the
reward-scale diagnostics of suites: "toy/lit_side_x1000" (toy/lit_side paying 1,000 a success),
"toy/unlit_side" and "toy/unlit_side_x1000" (point at the dark half of a dimmer frame, paying 1
and 1,000).

Presets: TOY, Table G.1's learner with a small batch and short unrolls. Environments: one
process per actor (cheap, but the fault-injection tests rely on processes). Observations: one
grey 20x20 frame; Atari's feed-forward agent.
"""
from scalable_agent_tf2.configuration import settings
from scalable_agent_tf2.environments.families import atari
from scalable_agent_tf2.environments.families import base

PREFIX = "toy/"
# Each level's environments.toy.LitSideEnvironment options.
LEVEL_OPTIONS = {
    "toy/lit_side": {},
    "toy/lit_side_delayed": dict(delayed_reward=True),
    "toy/lit_side_x1000": dict(reward_scale=1000.0),
    "toy/unlit_side": dict(unlit=True),
    "toy/unlit_side_x1000": dict(unlit=True, reward_scale=1000.0),
}
LEVELS = tuple(LEVEL_OPTIONS)
# The reward-scale diagnostics of per-task PopArt (Hessel et al. 2019; environments/toy.py's
# docstring), as suites a user names (--level_name=toy/lit_side,toy/lit_side_x1000). One level
# at two reward scales, 1 and 1,000 per success: one policy serves both.
REWARD_SCALE_LEVELS = ("toy/lit_side", "toy/lit_side_x1000")
# Two tasks in conflict (opposite answers, frames that tell them apart) at one scale (they learn
# at one pace) and at scales 1 and 1,000 (without a scale per task the second takes the gradient).
CONFLICT_LEVELS = ("toy/lit_side", "toy/unlit_side")
CONFLICT_SCALE_LEVELS = ("toy/lit_side", "toy/unlit_side_x1000")
# Not from the paper: Table G.1's learner (Atari) with a small batch and short unrolls, so a run
# takes a minute or two on a CPU. The environment repeats no actions, so frames are agent steps.
# Rewards are not clipped: the delayed level's reward (0-10) carries how many choices were right.
TOY = dict(atari.ATARI, reward_clipping=settings.NO_CLIPPING, unroll_length=10, batch_size=8,
           num_action_repeats=1, width=20, height=20, total_environment_frames=25_000,
           num_actors=4)

TOY_CITED = dict(atari.ATARI_CITED, reward_clipping="not in the paper: none",
                 unroll_length="not in the paper: 10", batch_size="not in the paper: 8",
                 num_action_repeats="not in the paper: 1", width="not in the paper: 20",
                 height="not in the paper: 20", total_environment_frames="not in the paper: 25k",
                 num_actors="not in the paper: 4",
                 torso="Atari's experts (Appendix G): shallow")


class ToyFamily(base.Family):
  """See the module docstring."""
  name = "toy"
  title = "Diagnostic levels (not from the paper)"
  prefixes = (PREFIX,)
  forms_suites = True  # One frame and action set: the reward-scale diagnostics of suites.

  def listed_levels(self):
    return LEVELS

  def presets(self, level_name, levels, algorithm, num_cores, given=None):
    del level_name, levels, algorithm, num_cores, given
    return dict(TOY)

  def preset_citations(self, level_name, levels, algorithm, num_cores, given=None):
    del level_name, levels, algorithm, num_cores, given
    return dict(TOY_CITED)

  def environment_constructor(self, level_name, seed, test_mode, options):
    from scalable_agent_tf2.environments import toy  # pylint: disable=g-import-not-at-top
    del test_mode  # The same level in test mode.
    return toy.LitSideEnvironment, dict(seed=seed, **LEVEL_OPTIONS[level_name], **options)

  def network_config(self, config, spec):
    """Atari's feed-forward agent on one grey 20x20 frame."""
    return base.frame_network_config(config, spec.num_actions, 1, use_lstm=False,
                                     use_instruction=False)


FAMILY = ToyFamily()
