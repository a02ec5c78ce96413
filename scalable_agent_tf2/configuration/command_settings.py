"""The settings tables of the commands beside experiment.py: the population driver (IMPALA Appendix
F), LASER's replay service (Schmitt et al. 2019, section 5.4) and the launcher, whose parsers and
--help are generated from them (command_line.CommandParser). A flag that also is experiment.py's
(--seed, --replay_capacity, ...) is that setting reused (setting_fields.reuse): its type, choices,
check and source, with the command's own default and help. No TensorFlow."""
import dataclasses
from typing import Optional

from scalable_agent_tf2.configuration import settings
from scalable_agent_tf2.configuration.setting_fields import A_NUMBER
from scalable_agent_tf2.configuration.setting_fields import NON_NEGATIVE
from scalable_agent_tf2.configuration.setting_fields import OFF_OR_POSITIVE
from scalable_agent_tf2.configuration.setting_fields import PORT
from scalable_agent_tf2.configuration.setting_fields import POSITIVE
from scalable_agent_tf2.configuration.setting_fields import POSITIVE_INT
from scalable_agent_tf2.configuration.setting_fields import REQUIRED
from scalable_agent_tf2.configuration.setting_fields import reuse
from scalable_agent_tf2.configuration.setting_fields import setting
from scalable_agent_tf2.configuration.settings import ClusterSettings
from scalable_agent_tf2.configuration.settings import ExperimentSettings

# Appendix F: "a 'burn-in' period of 20 million frames where no evolution is done".
BURN_IN_FRAMES = 20_000_000
# Appendix F: "After collecting 5,000 episode rewards in total, the mean capped human
# normalised score is calculated": the ready interval and the fitness window.
READY_EPISODES = 5_000
# Appendix F: "If the score of the selected instance is more than an absolute 5% higher"
# (score in percent; for a single level we compare raw returns with the same number).
EXPLOIT_THRESHOLD = 5.0
# Table D.1 ("Sweep size and population size are 24"), Table G.1 ("Population size 24").
POPULATION_SIZE = 24
# Loopback: a replay service listens on this machine only unless told otherwise.
DEFAULT_REPLAY_ADDRESS = "localhost:8010"
TABLE_D1, FLAGS_INITIAL = "table_d1", "flags"
INITIAL_HYPERPARAMETERS = (TABLE_D1, FLAGS_INITIAL)
# The commands' topics, in their --help's order (a command lists the topics it has).
POPULATION_TOPIC, EVOLUTION, MEMBERS = "population", "evolution", "members"
SHARED_REPLAY, REPLAY_SERVICE, LAUNCH = "shared_replay", "replay_service", "launch"
COMMAND_TOPICS = {
    POPULATION_TOPIC: "Population: where, how many members, how they start (IMPALA Appendix F)",
    EVOLUTION: "Evolution: when a member is ready, whom it copies (Appendix F)",
    MEMBERS: "Members: how their processes run and are watched",
    SHARED_REPLAY: "LASER's shared replay (Schmitt et al., 2019, section 5.4)",
    REPLAY_SERVICE: "Replay service: LASER's shared replay (Schmitt et al., 2019, section 5.4)",
    LAUNCH: "Launcher: one learner and N actor processes on this machine",
}
ALL_TOPICS = {**settings.TOPICS, **COMMAND_TOPICS}


@dataclasses.dataclass(frozen=True)
class PopulationSettings:
  """python -m scalable_agent_tf2.population's flags (population.py); the members' own flags
  (after "--") are experiment.py's."""
  logdir: str = reuse(ExperimentSettings, "logdir", default=REQUIRED, topic=POPULATION_TOPIC,
                      doc="The population's directory (each member's is <logdir>/member_NN).")
  population_size: int = setting(POPULATION_SIZE, POPULATION_TOPIC, "Members.",
                                 source="Tables D.1 and G.1: 24", check=POSITIVE_INT)
  initial_hyperparameters: str = setting(
      TABLE_D1, POPULATION_TOPIC, "table_d1: each member draws entropy cost, learning rate and "
      "RMSProp epsilon from Table D.1 (the paper); flags: every member starts from the level's "
      "presets and the flags.", source="Table D.1", choices=INITIAL_HYPERPARAMETERS)
  seed: int = reuse(ExperimentSettings, "seed", topic=POPULATION_TOPIC,
                    doc="Seeds the sampling, the decisions and the members' seeds.")
  curve_of: Optional[int] = setting(
      None, POPULATION_TOPIC, "Do not train: print member K's learning curve across its "
      "ancestors (JSON lines, log.jsonl records) and exit.", check=NON_NEGATIVE)
  burn_in_frames: int = setting(
      BURN_IN_FRAMES, EVOLUTION, "No evolution before a member has trained this many "
      "frames.", source="Appendix F: 20M", check=NON_NEGATIVE)
  ready_episodes: int = setting(
      READY_EPISODES, EVOLUTION, "A member evolves after this many new episodes; its fitness is "
      "measured on its last this many.", source="Appendix F: 5,000", check=POSITIVE_INT)
  exploit_threshold: float = setting(
      EXPLOIT_THRESHOLD, EVOLUTION, "Copy a member whose fitness is more than this higher "
      "(mean capped human-normalised score; raw return on a single level).",
      source="Appendix F: 5 points", check=A_NUMBER)
  poll_secs: float = setting(10.0, MEMBERS, "Seconds between checks of the members.",
                             check=POSITIVE)
  stop_timeout_secs: float = setting(
      300.0, MEMBERS, "A stopping member has this long to write its checkpoint.", check=POSITIVE)
  max_crashes: int = setting(3, MEMBERS, "Stop when a member crashes this many times in a row "
                             "without a new checkpoint.", check=POSITIVE_INT)
  member_prefix: str = setting(
      "", MEMBERS, 'Command put before each member\'s "python -m '
      'scalable_agent_tf2.run.experiment_main ..." (a cluster launcher, e.g. "srun --nodes=1 '
      '--ntasks=1"); {member} is replaced by the member\'s index.')
  shared_replay_capacity: int = setting(
      0, SHARED_REPLAY, "Unrolls of one LASER episode replay shared by every member, served by a "
      "replay service process the driver runs on a free loopback port; members get --laser_replay, "
      "--shared_replay_address and --agent_tag=member_NN (give --replay_fraction after '--'). 0: "
      "off.", source="LASER section 5.4", check=OFF_OR_POSITIVE)


@dataclasses.dataclass(frozen=True)
class ReplayServiceSettings:
  """python -m scalable_agent_tf2.transport.replay_service's flags (replay_service.py)."""
  address: str = setting(DEFAULT_REPLAY_ADDRESS, REPLAY_SERVICE,
                         "host:port to listen on (default: loopback only).")
  replay_capacity: int = reuse(
      ExperimentSettings, "replay_capacity", topic=REPLAY_SERVICE, doc="Unrolls held, oldest "
      "episodes removed first (LASER section 5.3 counts observations: capacity x T).")
  seed: int = reuse(ExperimentSettings, "seed", default=0, topic=REPLAY_SERVICE,
                    doc="Seeds the uniform sampling.")
  log_secs: float = reuse(ExperimentSettings, "log_secs", default=30.0, topic=REPLAY_SERVICE,
                          doc="Seconds between console lines of the replay's contents.")
  cluster_secret_file: str = reuse(
      ClusterSettings, "cluster_secret_file",
      doc="A file holding the secret every agent must prove (the same as their "
      "--cluster_secret_file). Default: the environment variable IMPALA_CLUSTER_SECRET (the "
      "secret itself), else none: then the service listens on loopback only.")
  insecure_open_cluster: bool = reuse(
      ClusterSettings, "insecure_open_cluster", doc="Let a service without a secret listen beyond "
      "loopback: anyone who reaches it can read and fill the replay.")


@dataclasses.dataclass(frozen=True)
class LaunchSettings:
  """python -m scalable_agent_tf2.run.launch's flags (launch.py); the flags after "--" are every
  process's experiment flags."""
  num_actor_processes: int = setting(2, LAUNCH, "Actor processes next to the learner.",
                                     check=POSITIVE_INT)
  port: Optional[int] = setting(None, LAUNCH, "Learner port (default: free).", check=PORT)


ALL_TABLES = settings.TABLES + (PopulationSettings, ReplayServiceSettings, LaunchSettings)
