"""Any gymnasium environment as "gym:<id>": a registered id ("gym:CartPole-v1",
"gym:LunarLander-v3", "gym:Pendulum-v1"), or gymnasium's own "module:Id" form for a user's
package ("gym:my_package.envs:MyEnv-v0" imports my_package.envs, which registers MyEnv-v0).
--env_kwargs (a JSON object) goes to gymnasium.make.

Observations and actions (environments/gym_env.py converts them): Box observations of one
dimension (float32 vectors, normalised by the run's MeanStdFilter as the MuJoCo path does) or
of three (uint8 frames [H, W, C], or bool feature planes such as MinAtar's, stored as 0 / 1);
Discrete observations (their index); a Dict of one image and at most one text, e.g. MiniGrid
and BabyAI's (image, direction, mission) (the image is the frame, the text the instruction the paper's encoder reads, as DeepMind Lab's; other entries
are not observed and gym_spaces.Description.ignored_keys names them); Discrete actions,
MultiDiscrete actions of one dimension (a categorical policy per choice), or Box actions of
one dimension (a diagonal Gaussian policy, clipped to the bounds only when sent). Anything
else is refused with the list of what is supported.

How they run, by the step's cost measured when the level is first described (runs_as,
OWN_PROCESS_STEP_SECONDS): a step dearer than 2 ms (rendered frames, e.g. CarRacing's 20 ms) in
a process of its own per actor, one actor per core, so that the steps run in parallel; a
cheaper one (classic control, Box2D vectors, MiniGrid's grid encoding, MinAtar's planes: tens
to hundreds of microseconds) in groups stepped in the training process, where a process's
round trip would cost more than it saves (benchmarks/speed/gym_overhead.py;
benchmarks/RESULTS.md, "A dictionary observation").

Presets (PRESETS_DOCUMENTATION; docs/ENVIRONMENTS.md): an environment the papers did not run
has no published setting. Its defaults are this project's, chosen by measurement on a
development set (CartPole-v1, LunarLander-v3 discrete and continuous, Pendulum-v1, MiniGrid
Empty-8x8 and Unlock; benchmarks/RESULTS.md, "Defaults for environments nobody tuned") and
judged on Acrobot-v1, which nobody tuned for. One set for every observation and action kind
(GYM_CHANGES): IMPACT (Luo et al. 2020) on its paper's continuous-control setting (Table 2,
mujoco_presets.py: a circular buffer of 16 batches, each used up to 20 times, the clipped
target-worker surrogate, GAE lambda 0.995, an adaptive KL term towards 0.04, learning rate
3e-4, no entropy bonus, advantages as they come), with these changes:
  * batches of 4 unrolls of 64 steps: the first update after 256 steps (Table 2's 32 x 1,024
    waited 32,768: minutes on a 20 ms environment), and, since each batch is trained on at
    most 20 times, one update per 12.8 steps where Table 2's batches allowed one per 1,638
    (measured: CartPole-v1 at 475 in 61k steps with 4 x 64, 114k with 4 x 256; Acrobot-v1 at
    -100 in 50k and 178k; Pendulum-v1 at -200 in 81k and 295k, medians of 3 seeds; the
    others seed 1);
  * values learned in a normalised scale (PopArt, Hessel et al. 2019, learning/popart.py), so
    that returns of any size and sign (-1 a step, +-100 events, 1 once an episode) give
    gradients of one size; rewards unclipped (Table G.1 clips Atari's to [-1, 1], which would
    change the task of an environment whose rewards carry their size);
  * for discrete actions, an entropy bonus of 0.01 against advantages standardised over each
    batch (DISCRETE_ACTION_CHANGES: CleanRL's discrete PPO pair; without a bonus
    MiniGrid-Unlock never finds its door again), no global gradient clip, and on feed-forward
    networks a value torso of its own (separate_value_torso), so that the rare large value
    errors of a sparse task do not steer the policy's features or shrink its step;
  * for Box actions, a Gaussian whose log std is one learned vector, the same in every state
    (LOG_STD; --log_std=state gives the policy layer's second half that IMPACT's code base
    ran): on Walker2d-v5 it reached PPO's return in 3 seeds of 5, the state-dependent one in 1;
  * a constant learning rate (a shorter --total_environment_frames trains exactly as the start
    of the default run);
  * discount 0.99 (Table 2's 0.995 is MuJoCo's);
  * one agent step is one gymnasium step (num_action_repeats 1: the environment fixes its own
    frame skip); a budget of 10M agent steps (mujoco_presets.TOTAL_ENVIRONMENT_FRAMES).
Why IMPACT and not IMPALA's learner: IMPALA uses each step once (one update per 640 steps at
Table G.1's 32 x 20); no variant of it tried left random play on Pendulum-v1 in 1M steps, and
on CartPole-v1 it needed 2.1x the steps of Stable-Baselines3's PPO. IMPACT's reuse of each
batch is what PPO's epochs do. --algorithm=impala gives the IMPALA set (UNTUNED): Table G.1's
learner with PopArt, a constant rate 0.0006, RMSProp at full step (epsilon 1e-5, the
accumulator starting at 0), entropy cost 0.001 and Table 1's 48 environments.
"""
import dataclasses
import functools
import json

from scalable_agent_tf2.configuration import settings
from scalable_agent_tf2.environments import gym_env
from scalable_agent_tf2.environments import gym_spaces
from scalable_agent_tf2.environments.families import atari as atari_family
from scalable_agent_tf2.environments.families import base
from scalable_agent_tf2.environments.families import mujoco_presets

PREFIX = gym_env.LEVEL_PREFIX
# Above this cost of one step an environment runs in processes (runs_as). A process's round
# trip costs about 150-250 us here (benchmarks/RESULTS.md, "The adapter's cost per step"), and
# on 2 cores MiniGrid's 570 us steps ran faster in groups (573 us a step) than in processes
# (833 us; "A dictionary observation"): the parallel steps repay the round trip only well
# above it. Measured here (gym_env.measure_step_seconds, the median of single steps): idle,
# CartPole 10 us, MiniGrid-Unlock 173, CarRacing 8,400; under a load of about 10, CartPole
# 23 us, LunarLander 50, MinAtar Breakout 11, MiniGrid-Unlock 566, BipedalWalker 908 (groups)
# and CarRacing 21,700 (processes).
OWN_PROCESS_STEP_SECONDS = 2e-3
# Table G.1's learner (atari_family.ATARI) for a gymnasium environment: one gymnasium step per
# agent step, unclipped rewards, the project's 10M-step budget (UNTUNED's base).
DISCRETE_PRESET = dict(atari_family.ATARI, num_action_repeats=1,
                       reward_clipping=settings.NO_CLIPPING,
                       total_environment_frames=mujoco_presets.TOTAL_ENVIRONMENT_FRAMES,
                       width=None, height=None, torso=None)
# Table 1's 48 environments (as Atari's), laid out by base.actor_layout.
DISCRETE_ENVIRONMENTS = atari_family.ATARI_ENVIRONMENTS
# --algorithm=impala's set for an environment nobody tuned for (module docstring), any
# observation and action kind.
UNTUNED = dict(DISCRETE_PRESET, learning_rate_schedule=settings.CONSTANT, popart=True,
               epsilon=1e-5, rmsprop_initial_mean_square=0.0, entropy_cost=0.001)
# The defaults of every gymnasium environment (IMPACT; module docstring): the IMPACT paper's
# continuous-control setting (Table 2, mujoco_presets.py) with these changes, measured on the
# development set (benchmarks/RESULTS.md, "One set of defaults: IMPACT with batches of 4 x 64").
GYM_CHANGES = dict(popart=True, learning_rate_schedule=settings.CONSTANT, discounting=0.99,
                   batch_size=4, unroll_length=64)
# And for discrete actions (Discrete, MultiDiscrete): an entropy bonus of 0.01 against advantages
# standardised per batch, CleanRL's ppo.py pair (ent_coef 0.01, norm_adv) for discrete actions
# (its continuous-action PPO has no entropy bonus, nor have Table 2 and our Box actions).
# Measured (benchmarks/RESULTS.md, "Small frames and an entropy bonus that means the same
# everywhere"):
# without a bonus, MiniGrid-Unlock's policy leaves the random play that finds the door now and
# then (0.04) for one that never does (0.00 from 75k steps on); 0.01 on PopArt's advantages
# alone (their scale set by the returns' spread) reaches Unlock's 0.8 at 77k steps but holds
# CartPole-v1 under 400; standardised, 0.01 reaches both (85k and 63k steps).
# With them, no global gradient clip and a value torso of its own (separate_value_torso): on
# MiniGrid-Unlock PopArt's tiny scale made each rare success a value error of 25-50 whose
# gradient, through Table 2's global clip, shrank the policy's in that step (gradient norms of
# 1,000-2,600 against the clip of 128); either change alone reached the threshold on one seed of
# two, both together on the third seed, which had failed both.
DISCRETE_ACTION_CHANGES = dict(entropy_cost=0.01, normalize_advantages=True, max_grad_norm=0,
                               mean_loss_max_grad_norm=None)
PRESETS_DOCUMENTATION = __doc__[__doc__.index("Presets"):]

# A Box action Gaussian's log std (agent/heads.py GaussianPolicyHead), stored with each run so
# that it resumes with the head its checkpoint holds (a settings.json from before it was stored
# means its algorithm's head then: checkpoints.LOG_STD_BEFORE_IT_WAS_STORED). Under both
# algorithms one free vector, not the policy layer's second half that IMPACT's code base ran
# (RLlib's free_log_std=False): on Walker2d-v5 the state-dependent head reached PPO's return in
# 1 of 5 seeds (its episodes ending in a fall after 190-200 steps), the free one in 3 of 5;
# HalfCheetah's and Hopper's medians higher, Pendulum-v1 as fast, LunarLanderContinuous-v3 slower
# but within 1.5x PPO's steps (benchmarks/RESULTS.md, "Box actions through gym ids: both Gaussian
# heads").
LOG_STD = settings.FREE
LOG_STD_CITED = {
    settings.IMPACT: "this project's: free (one vector, Stable-Baselines3 PPO's head; "
                     "benchmarks/RESULTS.md, 'Box actions through gym ids: both Gaussian "
                     "heads': state, IMPACT section 4.3's (RLlib's free_log_std=False), measured "
                     "beside it)",
    settings.IMPALA: "this project's: free (one vector, Stable-Baselines3 PPO's head)"}
# Where the free log std starts: 0, a standard deviation of 1 per action dimension, as
# Stable-Baselines3's PPO (log_std_init=0) and RLlib's free_log_std start. With no entropy bonus
# for Box actions the learned scale only falls, so the start sets how much a run explores: -1
# learned HalfCheetah-v5 3x further and LunarLanderContinuous-v3 3x faster but left one Hopper-v5
# seed of two and three Walker2d-v5 seeds of five falling, and -2 (RL Baselines3 Zoo's
# HalfCheetah and Hopper entries) kept Pendulum-v1 from its swing-up (benchmarks/RESULTS.md,
# "Box actions through gym ids: where the free log std starts").
INITIAL_LOG_STD = 0.0
INITIAL_LOG_STD_CITED = ("Stable-Baselines3 PPO's log_std_init (0: a standard deviation of 1); "
                         "-1 and -2 measured beside it: benchmarks/RESULTS.md, 'Box actions "
                         "through gym ids: where the free log std starts'")

# Where each value comes from, as --show_settings cites it: the sets above, in words.
_MEASURED = "benchmarks/RESULTS.md, 'One set of defaults: IMPACT with batches of 4 x 64'"
_NOBODY_TUNED = "benchmarks/RESULTS.md, 'Defaults for environments nobody tuned'"
_SMALL_FRAMES = ("benchmarks/RESULTS.md, 'Small frames and an entropy bonus that means the same "
                 "everywhere'")
_BUDGET = "this project's budget (mujoco_presets.TOTAL_ENVIRONMENT_FRAMES): 10M"
GYM_CHANGES_CITED = dict(
    popart=f"this project's: on (PopArt, Hessel et al. 2019; {_NOBODY_TUNED})",
    learning_rate_schedule=f"this project's: constant ({_NOBODY_TUNED})",
    discounting="this project's: 0.99 (IMPACT Table 2's 0.995 is MuJoCo's)",
    batch_size=(f"this project's: 4 unrolls, measured ({_MEASURED}; IMPACT Table 2's 32 of "
                "1,024 steps waited minutes for a first update)"),
    unroll_length=f"this project's: 64 steps, measured ({_MEASURED}; IMPACT Table 2: 1,024)",
    total_environment_frames=_BUDGET)
DISCRETE_ACTION_CHANGES_CITED = dict(
    entropy_cost=f"CleanRL's discrete PPO (ent_coef): 0.01, measured ({_SMALL_FRAMES})",
    normalize_advantages=f"CleanRL's discrete PPO (norm_adv): on, measured ({_SMALL_FRAMES})",
    max_grad_norm=(f"this project's for discrete actions: 0 (no clip), measured "
                   f"({_SMALL_FRAMES}; IMPACT Table 2 clips 0.5 on the mean loss)"),
    mean_loss_max_grad_norm="this project's for discrete actions: none")
_UNTUNED_SET = f"this project's --algorithm=impala set (families/gym.py UNTUNED; {_NOBODY_TUNED})"
UNTUNED_CITED = dict(
    atari_family.ATARI_CITED,
    num_action_repeats="a gymnasium step is an agent step: 1",
    reward_clipping="rewards carry their size here: none (Table G.1 clips Atari's)",
    total_environment_frames=_BUDGET, width="a gymnasium environment's frames: none",
    height="a gymnasium environment's frames: none",
    learning_rate_schedule=f"{_UNTUNED_SET}: constant", popart=f"{_UNTUNED_SET}: on",
    epsilon=(f"{_UNTUNED_SET}: 1e-5 (RMSProp at full step; Table G.1's 0.01 swamps small "
             "gradients)"),
    rmsprop_initial_mean_square=f"{_UNTUNED_SET}: 0 (TF1's 1 holds the first steps small)",
    entropy_cost=f"{_UNTUNED_SET}: 0.001")


def parse_env_kwargs(text):
  """--env_kwargs as a dict (empty for ""); ValueError naming what is wrong."""
  if not text:
    return {}
  try:
    value = json.loads(text)
  except json.JSONDecodeError as error:
    raise ValueError(f"--env_kwargs must be a JSON object (keyword arguments of "
                     f"gymnasium.make), e.g. '{{\"continuous\": true}}'; {error.msg} at "
                     f"character {error.pos} of {text!r}.") from None
  if not isinstance(value, dict):
    raise ValueError(f"--env_kwargs must be a JSON object, e.g. '{{\"continuous\": true}}'; "
                     f"got {type(value).__name__} {text!r}.")
  return value


class GymFamily(base.Family):
  """See the module docstring."""
  name = "gym"
  title = "gymnasium environments"
  prefixes = (PREFIX,)
  name_forms = ("gym:<id> (any registered gymnasium environment, e.g. gym:CartPole-v1, "
                "gym:Pendulum-v1; --env_kwargs for gymnasium.make)",
                "gym:<module>:<id> (a user's package that registers <id> when imported)")
  owns_algorithm_presets = True
  # A gymnasium environment is the user's (or gymnasium's) code, not this project's build.
  how_to_fix = ("Fix the environment's own code (the last failure above says what went wrong, "
                "and where)")
  takes_env_kwargs = True
  takes_network_choices = True

  def check_level(self, level_name):
    if not gym_env.split_id(gym_env.gym_id(level_name))[1]:
      raise ValueError(f"{level_name!r}: after {PREFIX!r} comes a gymnasium id, e.g. "
                       "gym:CartPole-v1 or gym:my_package.envs:MyEnv-v0.")
    gym_env.check_registered(gym_env.gym_id(level_name))

  def suggestions(self, name):
    """"CartPole-v1" or "gym/CartPole-v1" -> "gym:CartPole-v1" when gymnasium has the id."""
    candidate = name.split("/", 1)[1] if name.startswith(("gym/", "gymnasium/")) else name
    if not candidate or " " in candidate:
      return []
    import gymnasium  # pylint: disable=g-import-not-at-top
    return [PREFIX + candidate] if candidate in gymnasium.registry else []

  def describe(self, level_name, env_kwargs=None):
    """gym_spaces.Description (spaces, kinds) of the level, made once per process."""
    return gym_env.describe(gym_env.gym_id(level_name), env_kwargs or {})

  def default_algorithm(self, levels, given=None):
    """IMPACT for every action kind: its reuse of each batch is what learns environments
    nobody tuned for (GYM_CHANGES, the module docstring)."""
    del levels, given
    return settings.IMPACT

  def presets(self, level_name, levels, algorithm, num_cores, given=None):
    env_kwargs = parse_env_kwargs((given or {}).get("env_kwargs", ""))
    description = self.describe(levels[0], env_kwargs)
    if algorithm == settings.IMPACT:
      values = dict(mujoco_presets.presets(mujoco_presets.TABLE2_TASK, algorithm),
                    **GYM_CHANGES)
      if not description.continuous_actions:
        values.update(DISCRETE_ACTION_CHANGES)
      values.update(base.actor_layout(values["num_actors"], num_cores))
    else:
      values = dict(UNTUNED)
      values.update(base.actor_layout(DISCRETE_ENVIRONMENTS, num_cores))
    # The torso the run builds (network_config reads it): frames only; a vector or an index
    # takes its own torso, which no setting names.
    values["torso"] = (frame_torso(description.observation_shape)
                       if description.observation_kind == gym_spaces.FRAME else None)
    values["log_std"] = LOG_STD if description.continuous_actions else None
    values["initial_log_std"] = (INITIAL_LOG_STD if _free_log_std(description, given) else None)
    return values

  algorithm_cited = f"this project's: impact, measured ({_MEASURED})"

  def preset_citations(self, level_name, levels, algorithm, num_cores, given=None):
    description = self.describe(levels[0], parse_env_kwargs((given or {}).get("env_kwargs",
                                                                              "")))
    if algorithm == settings.IMPACT:
      cited = dict(mujoco_presets.citations(mujoco_presets.TABLE2_TASK, algorithm),
                   **GYM_CHANGES_CITED)
      if not description.continuous_actions:
        cited.update(DISCRETE_ACTION_CHANGES_CITED)
      cited.update(base.actor_layout_cited(mujoco_presets.IMPACT_TABLE2["num_actors"],
                                           num_cores, "IMPACT section 4.3"))
    else:
      cited = dict(UNTUNED_CITED, **base.actor_layout_cited(DISCRETE_ENVIRONMENTS, num_cores,
                                                            "Table 1"))
    cited["torso"] = torso_cited(description)
    cited["log_std"] = (LOG_STD_CITED[algorithm] if description.continuous_actions else
                        "none (discrete actions: no Gaussian)")
    cited["initial_log_std"] = (INITIAL_LOG_STD_CITED if _free_log_std(description, given) else
                                "none (no free log std)")
    return cited

  def preset_sources(self, level_name):
    return PRESETS_DOCUMENTATION

  def preset_summary(self, config):
    if config.algorithm == settings.IMPACT:
      return ("defaults: this project's for an environment the papers did not run (one set for "
              "every gymnasium environment, chosen by measurement: IMPACT's continuous-control "
              "setting, Table 2, with PopArt, a constant learning rate and batches of 4 x 64 "
              "steps; --show_settings lists them); docs/TROUBLESHOOTING.md if it does not learn")
    return ("defaults: this project's IMPALA set for an environment the papers did not run "
            "(--algorithm=impala: Table G.1's learner with PopArt, a constant learning rate "
            "and RMSProp at full step; --show_settings lists them); docs/TROUBLESHOOTING.md if "
            "it does not learn")

  def check_config(self, config):
    env_kwargs = parse_env_kwargs(config.env_kwargs)
    continuous = self.describe(config.levels[0], env_kwargs).continuous_actions
    if config.value_torso != settings.AUTO and continuous:
      raise ValueError(f"--value_torso={config.value_torso}: {config.levels[0]} has Box "
                       "actions, whose networks are the IMPACT paper's (a value MLP of its "
                       "own on vectors, the shared torso on frames). Drop --value_torso.")
    if config.log_std is not None and not continuous:
      raise ValueError(f"--log_std={config.log_std} chooses a Gaussian's log std; "
                       f"{config.levels[0]} has discrete actions. Drop --log_std.")
    if config.initial_log_std is not None and config.log_std != settings.FREE:
      raise ValueError(f"--initial_log_std={config.initial_log_std} is where a free log std "
                       f"starts; {config.levels[0]} has "
                       + (f"--log_std={config.log_std}, the policy layer's outputs. Add "
                          "--log_std=free or drop --initial_log_std." if continuous else
                          "discrete actions. Drop --initial_log_std."))
    frame_settings = [name for name in ("width", "height") if getattr(config, name)
                      is not None]
    if frame_settings:
      raise ValueError(f"{', '.join('--' + n for n in frame_settings)}: a gymnasium "
                       "environment's observations keep the size it gives them. Drop the "
                       "flag(s) (or resize in the environment, e.g. with a wrapper in your "
                       "own package).")

  def environment_options(self, config):
    return dict(env_kwargs=parse_env_kwargs(config.env_kwargs))

  def environment_constructor(self, level_name, seed, test_mode, options):
    # Test mode plays the same environment (the observation filter, if any, frozen).
    del test_mode
    return gym_env.GymEnvironment, dict(level_name=level_name, seed=seed, **options)

  def runs_as(self, config):
    """By the step's measured cost (gym_env.measure_step_seconds): one that costs more than
    OWN_PROCESS_STEP_SECONDS runs in a process of its own per actor, one actor per core
    (base.actor_layout), so that the steps run in parallel; a cheaper one in groups stepped in
    the training process, where a process's round trip would cost more than it saves. Where
    the step could not be measured: rendered frames in processes, everything else in groups."""
    description = self.describe(config.levels[0], parse_env_kwargs(config.env_kwargs))
    if description.step_seconds is None:
      rendered = description.observation_kind == "frame" and description.image_key is None
      return base.OWN_PROCESS if rendered else base.IN_PROCESS_GROUP
    return (base.OWN_PROCESS if description.step_seconds > OWN_PROCESS_STEP_SECONDS
            else base.IN_PROCESS_GROUP)

  def network_in_words(self, config):
    """network_config's choice (below) from the environment's description, without
    TensorFlow: tests/environments/test_gym_family.py holds the two equal."""
    description = self.describe(config.levels[0], parse_env_kwargs(config.env_kwargs))
    kind, continuous = description.observation_kind, description.continuous_actions
    torso = {gym_spaces.VECTOR: "mlp", gym_spaces.INDEX: "one_hot"}.get(kind, config.torso)
    return base.network_in_words(
        torso, use_lstm=uses_lstm(kind, continuous, config.torso),
        **description.action_layout(), observation_shape=description.observation_shape,
        instruction=description.has_instruction,
        separate_value=separate_value_torso(kind, continuous, config.torso,
                                            config.value_torso),
        free_log_std=config.log_std == settings.FREE)

  def network_config(self, config, spec):
    """The network follows the first environment's spec, for any supported combination
    (torsos.torso_for_observation picks the torso, the action space the head):

      vectors [O]:   the MLP torso (IMPACT section 4.3's two tanh layers of 256); Box actions:
                     the IMPACT paper's separate policy and value MLPs
                     (networks.continuous_vector_config);
                     Discrete: IMPALA's agent (networks.vector_config), feed-forward;
      frames:        Figure 3's frame torso (--torso; shallow by default; frames too small
                     for its VALID convolutions flattened into the MLP, frame_torso);
                     Discrete: IMPALA's agent with its LSTM 256 on a convolutional torso
                     (feed-forward on the MLP, uses_lstm) and, for an image with a text
                     mission (a dict observation), the paper's instruction encoder (Figure
                     3); Box: the frame torso with a diagonal Gaussian head
                     (networks.continuous_frame_config);
      Discrete(n):   the one-hot [n] torso (networks.index_config), feed-forward.

    MultiDiscrete actions take the Discrete ones' network, with a categorical head per choice
    (agent/distributions.MultiCategoricalFamily, chosen from the spec).
    """
    from scalable_agent_tf2.agent import networks  # pylint: disable=g-import-not-at-top
    from scalable_agent_tf2.agent import torsos  # pylint: disable=g-import-not-at-top
    from scalable_agent_tf2.environments import base as env_base  # pylint: disable=g-import-not-at-top
    env_kwargs = parse_env_kwargs(config.env_kwargs)
    description = self.describe(config.levels[0], env_kwargs)
    kind = description.observation_kind
    continuous = isinstance(spec, env_base.ContinuousEnvSpec)
    if kind != torsos.FRAME and config.torso:
      raise ValueError(f"{config.levels[0]}: --torso={config.torso} is for image frames; its "
                       f"{kind} observations of shape {tuple(spec.frame_shape)} take the "
                       f"{torsos.MLP if kind == torsos.VECTOR else torsos.ONE_HOT} torso. "
                       "Drop --torso.")
    if kind == torsos.INDEX and continuous:
      raise ValueError(f"{config.levels[0]}: Box actions on a Discrete observation: no "
                       "network takes this pair (wrap the environment to one-hot its "
                       "observation as a Box (n,) vector).")
    network = networks.network_config_for_spec(
        spec, kind, torso=config.torso if kind == torsos.FRAME else None,
        use_lstm=uses_lstm(kind, continuous, config.torso),
        use_instruction=description.has_instruction, frame_max=description.frame_max,
        num_observation_values=(observation_values(config.levels[0], env_kwargs)
                                if kind == torsos.INDEX else None),
        state_dependent_log_std=config.log_std == settings.STATE,
        separate_value_torso=separate_value_torso(kind, continuous, config.torso,
                                                  config.value_torso))
    if config.initial_log_std is None:
      return network
    return dataclasses.replace(network, initial_log_std=config.initial_log_std)


def _free_log_std(description, given):
  """Box actions whose Gaussian has one free log std vector (--log_std, LOG_STD if not given)."""
  return (description.continuous_actions
          and (given or {}).get("log_std", LOG_STD) == settings.FREE)


def frame_torso(frame_shape):
  """--torso's preset for frames: Figure 3's shallow torso on pixels; on frames smaller than
  its VALID convolutions take (settings.SHALLOW_MIN_FRAME_SIZE), which are a grid's symbolic
  encoding rather than pixels (MiniGrid's 7x7 view of object codes, MinAtar's 10x10 planes),
  the frame flattened into the IMPACT paper's MLP (settings.FLAT_MLP), as Stable-Baselines3's
  defaults and RL Baselines3 Zoo's MiniGrid wrapper feed such a grid. Measured on
  MiniGrid-Empty-8x8 (benchmarks/RESULTS.md, "Small frames and an entropy bonus that means
  the same everywhere"): the deep torso with its LSTM cost 77 ms a learner update of 4 x 64
  steps, the learner held the run to about 200 steps/s."""
  if min(frame_shape[:2]) < settings.SHALLOW_MIN_FRAME_SIZE:
    return settings.FLAT_MLP
  return settings.SHALLOW


def torso_cited(description):
  """Where --torso's preset (GymFamily.presets) comes from, for a level's description."""
  if description.observation_kind != gym_spaces.FRAME:
    torso = "mlp" if description.observation_kind == gym_spaces.VECTOR else "one_hot"
    return (f"families/gym.py: none (--torso is for frames; these {description.observation_kind}"
            f" observations take the {torso} torso, which no setting names: the network line "
            "above)")
  if frame_torso(description.observation_shape) == settings.FLAT_MLP:
    return (f"frames under {settings.SHALLOW_MIN_FRAME_SIZE}x{settings.SHALLOW_MIN_FRAME_SIZE}"
            f" (a grid's symbolic encoding) flattened into the IMPACT paper's MLP: mlp "
            f"({_SMALL_FRAMES})")
  return "Figure 3 (pixels; families/gym.py frame_torso): shallow"


def separate_value_torso(observation_kind, continuous_actions, torso, choice=settings.AUTO):
  """Whether the baseline reads a torso of its own (on the observation alone) rather than the
  policy's: the IMPACT paper's networks for Box actions on vectors (section 4.3: "the same
  architecture, not shared"), and, for discrete actions, every feed-forward network (vectors,
  indices, flattened small frames), as Stable-Baselines3's MlpPolicy has one. Measured on
  MiniGrid-Unlock (benchmarks/RESULTS.md, "Small frames and an entropy bonus that means the
  same everywhere"): with PopArt's tiny scale on a sparse task, each rare success's value error
  drove the shared torso away from the policy that had found it. Figure 3's agent with its LSTM
  (pixels) keeps one torso and core for both, as the paper's. choice: --value_torso (auto:
  this rule; shared or separate: that, for discrete actions)."""
  if continuous_actions:  # The IMPACT paper's networks; --value_torso is refused for them.
    return observation_kind == gym_spaces.VECTOR
  if choice != settings.AUTO:
    return choice == settings.SEPARATE
  return not uses_lstm(observation_kind, continuous_actions, torso)


def uses_lstm(observation_kind, continuous_actions, torso):
  """Figure 3's LSTM core for Discrete actions on pixels (conv torsos); none for vectors,
  indices and flattened small frames, whose observation is the state (or, for MiniGrid's
  view, carries what the agent holds), nor for Box actions (the IMPACT paper's feed-forward
  networks)."""
  return (observation_kind == gym_spaces.FRAME and not continuous_actions
          and torso != settings.FLAT_MLP)


@functools.lru_cache(maxsize=64)
def _observation_values(level_name, env_kwargs_json):
  env = gym_env.make(gym_env.gym_id(level_name), json.loads(env_kwargs_json))
  try:
    return int(env.observation_space.n)
  finally:
    env.close()


def observation_values(level_name, env_kwargs):
  """n of a level's Discrete(n) observation space (the one-hot torso's size), read from the
  environment once per process (gym_spaces.Description records the kind, not n)."""
  return _observation_values(level_name, json.dumps(env_kwargs, sort_keys=True))


FAMILY = GymFamily()
