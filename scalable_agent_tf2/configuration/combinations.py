"""The settings that depend on each other: the checks that involve more than one setting, and the
defaults that follow from others (--envs_per_actor, LASER section 5.1's). config.explain runs them
after every setting's own check; each message names the flags to change."""
from scalable_agent_tf2.configuration import settings
from scalable_agent_tf2.environments import families


def _check_levels(config):
  """What can be known about the levels before any environment starts."""
  excluded = config.excluded_level_names
  if excluded:
    if not config.is_multi_task:
      raise ValueError("--excluded_levels leaves levels out of a suite; --level_name="
                       f"{config.level_name} is one level. Drop --excluded_levels.")
    suite_levels = families.level_names(config.level_name)
    unknown = [name for name in excluded if name not in suite_levels]
    if unknown:
      raise ValueError(f"--excluded_levels: {', '.join(unknown)} not in {config.level_name}; "
                       f"`{families.LIST_LEVELS_COMMAND}` lists its levels.")
    if not config.levels:
      raise ValueError(f"--excluded_levels leaves none of {config.level_name}'s levels.")


def resolve_envs_per_actor(config, given):
  """--envs_per_actor, 1 where environments do not run in groups (an error if asked for)."""
  if config.uses_environment_groups or config.envs_per_actor == 1:
    return config.envs_per_actor
  if "envs_per_actor" in given:
    raise ValueError(f"--envs_per_actor={config.envs_per_actor}: only MuJoCo tasks and Atari games "
                     "at 84x84, action repeat 4 and without sticky actions (and gymnasium "
                     f"environments without frames) run in groups; {config.level_name} with these "
                     "settings runs one environment process per actor. Drop --envs_per_actor (or "
                     "set it to 1).")
  return 1


def check_combinations(config):
  """The checks of one resolved config that involve more than one setting."""
  _check_levels(config)
  if config.env_kwargs and not config.family.takes_env_kwargs:
    raise ValueError("--env_kwargs are keyword arguments of gymnasium.make, for gym:<id> levels; "
                     f"{config.level_name} is not one ({config.family.title}). Drop --env_kwargs.")
  for name, given in (("value_torso", config.value_torso != settings.AUTO),
                      ("log_std", config.log_std is not None),  # The gym family's choices.
                      ("initial_log_std", config.initial_log_std is not None)):
    if given and not config.family.takes_network_choices:
      raise ValueError(f"--{name}={getattr(config, name)} chooses a part of gym:<id> levels' "
                       f"networks; {config.level_name}'s network ({config.family.title}) is "
                       f"fixed by its paper. Drop --{name}.")
  config.family.check_config(config)
  if config.record_video_episodes and config.mode != settings.TEST:
    raise ValueError(f"--record_video_episodes records test episodes: add --mode=test, or "
                     f"drop it (got --mode={config.mode}).")
  if config.torso == settings.IMPACT_CNN and (config.width, config.height) != (42, 42):
    raise ValueError(f"--torso={settings.IMPACT_CNN} is the IMPACT paper's network for 42x42 "
                     f"frames (section 4.3), got {config.width}x{config.height}: add "
                     "--width=42 --height=42, or use --preset=impact_paper.")
  if config.num_actors < config.num_learners:
    raise ValueError(f"Each learner trains on its own actors' trajectories: --num_actors "
                     f"({config.num_actors}) must be at least --num_learners "
                     f"({config.num_learners}).")
  if config.queue_capacity < config.batch_size:
    raise ValueError(f"--queue_capacity ({config.queue_capacity}) must hold at least one "
                     f"batch (--batch_size {config.batch_size}).")
  if config.num_learners > 1 and (config.replay_fraction > 0
                                 or config.algorithm == settings.IMPACT):
    raise ValueError("--num_learners > 1 trains each learner on its own actors' "
                     "trajectories; experience replay and --algorithm=impact are built for "
                     "one learner so far. Use --num_learners=1.")
  if config.popart and config.num_learners > 1:
    raise ValueError("--popart keeps one learner's statistics; use --num_learners=1 with it.")
  if config.repeatable:
    _check_repeatable(config)


def _check_repeatable(config):
  """--repeatable's refusals: what it cannot make repeat (run/repeatable.py; a cluster's
  learner is refused when it starts, training.train)."""
  if config.mode != settings.TRAIN:
    raise ValueError("--repeatable is for --mode=train: a test run with a --seed repeats "
                     "already (its policy is frozen). Drop --repeatable.")
  if config.num_learners > 1:
    raise ValueError(f"--repeatable with --num_learners={config.num_learners}: the mode "
                     "schedules one learner's batches (several learners each take their own "
                     "actors' unrolls and sum gradients across devices). Use --num_learners=1.")
  if config.shared_replay_address:
    raise ValueError("--repeatable cannot repeat a run whose LASER replay is shared "
                     "(--shared_replay_address): the other runs add episodes whenever they are "
                     "ready. Drop one of the two flags.")


def resolve_laser(config):
  """Checks the replay settings; {entropy_on_online_only: by default laser_replay,
  replay_mixing: by default added with laser_replay (LASER section 5.1), else within_batch}."""
  replays = config.replay_fraction > 0
  _ = config.num_replayed_per_batch  # Checks --replay_fraction against the batch.
  if config.replay_mixing is not None and not replays:
    raise ValueError(f"--replay_mixing={config.replay_mixing} says where replayed "
                     "trajectories go: set --replay_fraction in (0, 1), or drop the flag.")
  if config.laser_replay and not replays:
    raise ValueError("--laser_replay mixes replayed episodes into every batch: set "
                     "--replay_fraction in (0, 1), e.g. LASER's 0.875 (7 replayed "
                     "trajectories for each online one, section 5.3).")
  if config.laser_replay and config.algorithm == settings.IMPACT:
    raise ValueError("--laser_replay is built for IMPALA's learner; drop --algorithm=impact "
                     "or --laser_replay.")
  online_only = (config.laser_replay if config.entropy_on_online_only is None
                 else config.entropy_on_online_only)
  if online_only and not replays:
    raise ValueError("--entropy_on_online_only needs replayed data to leave out: set "
                     "--replay_fraction > 0, or drop the flag.")
  if online_only and config.algorithm == settings.IMPACT:
    raise ValueError("--entropy_on_online_only is built for IMPALA's learner; drop "
                     "--algorithm=impact or the flag.")
  if config.shared_replay_address:
    if not config.laser_replay:
      raise ValueError("--shared_replay_address shares LASER's episode replay: add "
                       "--laser_replay (and --replay_fraction, e.g. 0.875).")
    host, _, port = config.shared_replay_address.rpartition(":")
    if not host or not port.isdigit():
      raise ValueError(f"--shared_replay_address must be host:port, e.g. localhost:8010; got "
                       f"{config.shared_replay_address!r}.")
  elif config.agent_tag:
    raise ValueError("--agent_tag names this run in a shared replay: add --shared_replay_address.")
  mixing = None  # No replay: nothing to mix (and a resolved config resolves again).
  if replays:
    mixing = settings.REPLAY_ADDED if config.replays_added else settings.REPLAY_WITHIN_BATCH
  return dict(entropy_on_online_only=bool(online_only), replay_mixing=mixing)
