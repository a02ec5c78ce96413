"""The interface of an environment family, and what the paper's families share.

A family owns a kind of level end to end (docs/ENVIRONMENTS.md): which names are its levels,
the settings its levels take when a flag leaves them PRESET, how one environment is built (in
training and in test mode), how an actor's environments run (one process each, a group in the
training process, a C++ vector), what its observations are (so the network can be chosen) and
the checks of a run's settings that only it knows. The registry (families/__init__.py) finds a
level's family by its name; nothing else in the project branches on the kind of level.

No TensorFlow here, and no family's heavy dependency (gymnasium, ale_py, deepmind_lab): a
family imports those inside the methods that build environments.
"""
from scalable_agent_tf2.configuration import settings

# The learner's settings Tables D.3 and G.1 share: gamma 0.99, baseline cost 0.5, action
# repeat 4, RMSProp momentum 0 (decay 0.99 and the accumulator starting at 1: released code,
# TF1's RMSPropOptimizer); V-trace (section 5.2.1) without LASER's trust region; the learning
# rate annealed linearly to 0 (Tables D.3, G.1); values in the rewards' own scale (no PopArt:
# the paper clips rewards instead, Table G.1, Figure D.1).
PAPER_SHARED = dict(discounting=0.99, baseline_cost=0.5, num_action_repeats=4, decay=0.99,
                    momentum=0.0, rmsprop_initial_mean_square=1.0,
                    off_policy_correction=settings.VTRACE, trust_region_threshold=float("inf"),
                    envs_per_actor=1, learning_rate_schedule=settings.LINEAR, popart=False)

# Where each of PAPER_SHARED's values comes from, as --show_settings cites it ("<source>:
# <the value>", then why where it differs from a paper's); each family's table of citations
# has the keys of its presets (tests/configuration/test_show_settings.py holds them equal).
PAPER_SHARED_CITED = dict(
    discounting="Tables G.1 and D.3: 0.99", baseline_cost="Tables G.1 and D.3: 0.5",
    num_action_repeats="Tables G.1 and D.3: 4", decay="released code (TF1 RMSProp): 0.99",
    momentum="Tables G.1 and D.3: 0",
    rmsprop_initial_mean_square="released code (TF1's RMSPropOptimizer): 1",
    off_policy_correction="section 4, Table 2: vtrace",
    trust_region_threshold="IMPALA (LASER section 4.3's trust region is not its): inf",
    envs_per_actor="released code: 1 (an environment per actor)",
    learning_rate_schedule="Tables G.1 and D.3 (released code's polynomial_decay): linear",
    popart="the paper (it clips rewards instead, Table G.1, Figure D.1): off")

# IMPACT paper, Table 1 (discrete environments, IMPACT column): value function coefficient 1.0;
# "Minibatch Buffer Size (N)" 4 and "Num SGD Iterations (K)" 2 (section 4.3 reports N = 1, K = 2
# as the best discrete setting); clip parameter 0.3, target-worker clipping 2.0, lambda 0.995,
# KL coefficient 0. Its learning rate (1e-4) and gradient clipping (10) go with averaged losses
# (Algorithm 1's 1/M) and an optimizer the paper does not name; ours are summed and trained with
# IMPALA's RMSProp, so the level's IMPALA values stay (Table 1 gives IMPACT and IMPALA the same
# learning rate; impact.ImpactLearner). So do the level's batch, unroll and reward clipping.
# configuration/config.py adds them to a family's presets unless the family owns its algorithm
# presets (owns_algorithm_presets: MuJoCo's and gymnasium's, both Table 2's).
IMPACT_PRESET = dict(baseline_cost=1.0, circular_buffer_size=4, circular_buffer_max_uses=2,
                     ppo_clip=0.3, target_worker_clipping=2.0, gae_lambda=0.995, kl_cost=0.0,
                     normalize_advantages=False)

IMPACT_PRESET_CITED = dict(
    baseline_cost="IMPACT Table 1: 1.0", circular_buffer_size="IMPACT Table 1 (N): 4",
    circular_buffer_max_uses="IMPACT Table 1 (K): 2", ppo_clip="IMPACT Table 1: 0.3",
    target_worker_clipping="IMPACT Table 1: 2.0", gae_lambda="IMPACT Table 1: 0.995",
    kl_cost="IMPACT Table 1: 0.0",
    normalize_advantages="the IMPACT paper (its code, RLlib's APPO, does not): off")

# How an actor's environments run (Family.runs_as).
OWN_PROCESS = "one environment process per actor"
IN_PROCESS_GROUP = "a group stepped in the training process"
VECTOR = "a C++ vector stepped in the training process"


class UnknownLevelName(ValueError):
  """A name a family owns (by its prefix) that is none of its levels. The registry
  (families/__init__.py, family_of) answers it with the closest valid names."""


# Measured here (2 cores, Python 3.11): an environment process of any family but DeepMind Lab
# (its interpreter, numpy, gymnasium and one game or task) holds about 65 MB, counted as 0.1 GB;
# an environment stepped inside the training process (an Atari game of a vector group, a MuJoCo
# task) about 1 MB (48 Pong games in one vector group: 47 MB), counted as 2 MB; the training
# process about 2.5 GB at batch 32, unroll 100, shallow or deep (BUILD.md, "DeepMind Lab").
ENVIRONMENT_PROCESS_GB = 0.1
IN_PROCESS_ENVIRONMENT_GB = 0.002
TRAINING_PROCESS_GB = 2.5


def check_environment_memory(config, memory_gb):
  """Refuses, before anything starts, actors whose environments would not fit in the machine's
  memory (a mistyped --num_actors=100000 would otherwise start that many processes until the
  machine swaps or the kernel kills them). DeepMind Lab levels: dmlab.check_dmlab_memory."""
  environments = config.num_actors * config.envs_per_actor
  if config.uses_environment_groups:
    each, kind = IN_PROCESS_ENVIRONMENT_GB, "environments stepped in the training process"
  else:
    each, kind = ENVIRONMENT_PROCESS_GB, "environment processes"
  need = environments * each + TRAINING_PROCESS_GB
  if need <= memory_gb:
    return
  fits = max(1, int((memory_gb - TRAINING_PROCESS_GB) / each / config.envs_per_actor))
  raise ValueError(
      f"--num_actors={config.num_actors} x --envs_per_actor={config.envs_per_actor}: "
      f"{environments:,} {kind} and the training process need about {need:,.0f} GB of "
      f"memory ({each} GB each + {TRAINING_PROCESS_GB} GB), and this machine has "
      f"{memory_gb:.0f} GB. Pass --num_actors={fits} or fewer.")


def actor_layout(num_environments, num_cores):
  """num_actors and envs_per_actor for about num_environments environments stepped in groups
  in the training process on a machine with num_cores cores: one actor thread per core (at
  least 2, so that one group's forward pass overlaps another's stepping), the environments
  shared out among them (rounded up): 48 on 2 cores are 2 x 24. benchmarks/RESULTS.md
  ("Throughput") has the measurements behind the choice."""
  num_actors = min(max(2, num_cores), num_environments)
  return dict(num_actors=num_actors, envs_per_actor=-(-num_environments // num_actors))


def actor_layout_cited(num_environments, num_cores, whose):
  """The citations of actor_layout's num_actors and envs_per_actor for `whose` (a paper's
  table or section) num_environments environments."""
  layout = actor_layout(num_environments, num_cores)
  return dict(
      num_actors=(f"one actor thread per core ({num_cores} here) stepping {whose}'s "
                  f"{num_environments} environments in groups (families.base.actor_layout; "
                  f"benchmarks/RESULTS.md, 'Throughput'): {layout['num_actors']}"),
      envs_per_actor=(f"{whose}'s {num_environments} environments shared among the actor "
                      f"threads (families.base.actor_layout): {layout['envs_per_actor']}"))


class Family:
  """One kind of level. Subclasses set the attributes and override what differs.

  Attributes:
    name: short id ("atari"); the registry lists families by it.
    title: a heading for `python -m scalable_agent_tf2.environments.families`.
    prefixes: level-name prefixes this family owns ("atari/"); a name with one of them is
      this family's (or refused by it: never another family's).
    name_forms: the open-ended forms of its names, for the listing ("gym:<id>").
    owns_algorithm_presets: its `presets` handles --algorithm=impact itself (MuJoCo: IMPACT
      Table 2); otherwise config.preset_values adds IMPACT Table 1's own settings.
    pbt_adapts_max_grad_norm: population-based training adapts --max_grad_norm too (Atari:
      section 5.3.2, Table G.1), where the run clips gradients.
    takes_env_kwargs: its environments take --env_kwargs (gymnasium.make's).
    has_test_levels: test scores are measured on `test_level(level)` (DMLab-30), which the
      result tables show.
    forms_suites: its levels share one observation and action space (the paper's multi-task
      agents: DMLab-30's Table D.2 actions, Atari's full 18, Appendix G), so a user may name
      a suite of them ("atari/pong,atari/breakout"); its presets then are its suite's.
    how_to_fix: what a user does about one of its levels that cannot run (its environments
      do not start, or keep failing), completed by "or choose another level" or by the
      --excluded_levels that leaves it out (training.LevelsCannotRun).
  """
  name = ""
  title = ""
  prefixes = ()
  name_forms = ()
  owns_algorithm_presets = False
  takes_env_kwargs = False
  takes_network_choices = False  # --value_torso, --log_std: the gym family's networks.
  has_test_levels = False
  forms_suites = False
  pbt_adapts_max_grad_norm = False
  # Whether a step may take as long as a reset: the environment resets inside its step at an
  # episode's end, and a reset can be slow (DeepMind Lab compiles a new map). Such a step gets
  # --env_reset_timeout_secs instead of --env_step_timeout_secs.
  steps_may_reset_slowly = False
  how_to_fix = "Fix the level's environment"

  # --- Names. ---------------------------------------------------------------------------

  def listed_levels(self):
    """The levels printed by the listing and matched by suggestions (tuple of str)."""
    return ()

  def owns(self, level_name):
    """Whether level_name is this family's (valid or not): a prefix, or a listed name."""
    return (level_name.startswith(tuple(self.prefixes))
            or level_name in self.listed_levels())

  def check_level(self, level_name):
    """Raises ValueError (what is wrong, what to do) when an owned name is not a level:
    UnknownLevelName where the registry's suggestions say it best."""
    if level_name not in self.listed_levels():
      raise UnknownLevelName(level_name)

  def level_identity(self, level_name):
    """What two names of one level share (a suite a user names holds each level once)."""
    return level_name

  def suggestions(self, name):
    """Level names this family offers for an unknown `name` (e.g. "gym:CartPole-v1" for
    "CartPole-v1"); checked before the listing's close matches."""
    del name
    return []

  def test_level(self, level_name):
    """The level a level's test score is measured on (DMLab-30's held-out variants)."""
    return level_name

  # --- Settings. ------------------------------------------------------------------------

  def default_algorithm(self, levels, given=None):
    """The learning algorithm when --algorithm is not given: IMPALA (the papers' levels).

    Args:
      levels: the run's levels. given: as `presets`'.
    """
    del levels, given
    return settings.IMPALA

  def presets(self, level_name, levels, algorithm, num_cores, given=None):
    """dict setting -> value for the settings a flag left PRESET (each value cited).

    Args:
      level_name: the --level_name (a suite or a level); levels: its levels.
      algorithm: settings.IMPALA or settings.IMPACT. num_cores: this machine's.
      given: dict of the settings the flags give (a family whose presets depend on one, e.g.
        gymnasium's on --env_kwargs); never to be copied into the result (flags win anyway).
    """
    raise NotImplementedError

  def preset_citations(self, level_name, levels, algorithm, num_cores, given=None):
    """dict setting -> where `presets`' value for it comes from, in --show_settings' words
    ("<source>: <the value>", then why it differs where it does): the keys of `presets`'
    result for the same arguments (every family of this project's; tests/configuration/
    test_show_settings.py). A setting left out shows the settings table's general note."""
    del level_name, levels, algorithm, num_cores, given
    return {}

  def intra_op_threads_cited(self, torso, num_cores):
    """Where intra_op_threads' value comes from (--show_settings)."""
    del torso, num_cores
    return "not in the paper: 0 (TensorFlow's own choice)"

  # The default --algorithm's citation (default_algorithm).
  algorithm_cited = "the papers' learner for their levels: impala"

  def preset_sources(self, level_name):
    """Where each preset value comes from, in words (printed at start); None: the paper's
    tables cited in the family's module."""
    del level_name
    return None

  def preset_summary(self, config):
    """One line for a run's start: which defaults apply to `config` and why; None: the
    paper's tables (cited in the family's module and by --show_settings)."""
    del config
    return None

  def intra_op_threads(self, torso, num_cores):
    """TensorFlow threads per op; 0: TensorFlow's default (config.explain applies it)."""
    del torso, num_cores
    return 0

  def check_config(self, config):
    """The checks of a resolved config that only this family knows; raises ValueError."""
    del config

  def check_can_run(self, config, memory_gb):
    """What can be known before any environment starts (a missing module, memory)."""
    check_environment_memory(config, memory_gb)

  # --- Environments. --------------------------------------------------------------------

  def environment_options(self, config):
    """Keyword arguments for environment_constructor, from a run's settings."""
    del config
    return {}

  def environment_constructor(self, level_name, seed, test_mode, options):
    """(constructor, kwargs) that build one environment (a base.Environment); nothing is
    started yet. constructor must be picklable (it may run in an environment process)."""
    raise NotImplementedError

  def runs_as(self, config):
    """How an actor's environments run: OWN_PROCESS, IN_PROCESS_GROUP or VECTOR."""
    del config
    return OWN_PROCESS

  def vector_group(self, config, level_name, seeds, test_mode):
    """A VECTOR family's group of len(seeds) environments (AtariVectorGroup's interface)."""
    raise NotImplementedError

  # --- Observations and the network. ----------------------------------------------------

  def network_in_words(self, config):
    """The network a run of `config` will build, in base.network_in_words's words, known
    without TensorFlow (--show_settings prints it); None where the settings say it (the
    paper's families: --torso)."""
    del config
    return None

  def network_config(self, config, spec):
    """The network for a run of this family, given its first environment's spec (an EnvSpec,
    a ContinuousEnvSpec or a MultiDiscreteEnvSpec; frame families read only
    spec.num_actions). Imports TensorFlow: call it from the TF side."""
    raise NotImplementedError


def network_in_words(torso, use_lstm, num_actions=None, action_size=None, nvec=None,
                     observation_shape=(), instruction=False, separate_value=False,
                     free_log_std=False):
  """The start banner's and --show_settings's line for a network (one wording, so that the two
  cannot differ): its torso, core, action head and observation shape. The action sizes are
  the action distribution family's layout (num_actions, action_size or nvec), so the line
  names the action kind."""
  core = "LSTM" if use_lstm else "no LSTM"
  if num_actions is not None:
    actions = f"{num_actions} actions"
  elif nvec is not None:
    actions = f"MultiDiscrete actions {list(nvec)} (a categorical per choice)"
  else:
    log_std = "one free log std" if free_log_std else "their log std from the state"
    actions = f"Gaussian actions of {action_size} dimensions, {log_std}"
  shape = "x".join(str(n) for n in observation_shape) or "an index (one-hot)"
  encoder = ", the instruction encoder (a text mission)" if instruction else ""
  value = ", a value torso of its own" if separate_value else ""
  return f"network: {torso} torso{encoder}{value}, {core}, {actions}, observations {shape}"


def frame_network_config(config, num_actions, channels, use_lstm, use_instruction):
  """networks.NetworkConfig for uint8 frames [--height, --width, channels] and --torso."""
  from scalable_agent_tf2.agent import networks  # pylint: disable=g-import-not-at-top
  return networks.NetworkConfig(
      num_actions=num_actions, frame_shape=(config.height, config.width, channels),
      torso=config.torso, use_lstm=use_lstm, use_instruction=use_instruction)


def continuous_network_config(spec, state_dependent_log_std=True):
  """The IMPACT paper's continuous-control network (section 4.3) for a ContinuousEnvSpec
  (state_dependent_log_std: RLlib's default, which ran it; networks.continuous_vector_config)."""
  from scalable_agent_tf2.agent import networks  # pylint: disable=g-import-not-at-top
  from scalable_agent_tf2.agent import torsos  # pylint: disable=g-import-not-at-top
  return networks.network_config_for_spec(spec, torsos.VECTOR,
                                          state_dependent_log_std=state_dependent_log_std)
