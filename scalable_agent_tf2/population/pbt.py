"""Population-based training (IMPALA Appendix F; Jaderberg et al. 2017): the decisions.

Pure functions and records, no processes (driver.py runs the members):

  * `sample_hyperparameters`: Table D.1's sweep distributions (the initial population).
  * `fitness`: mean capped human-normalised score of recent episodes (suites; Table G.1's
    formula), the mean raw return for a single level.
  * `is_ready`: burn-in over, and enough new episodes since the member's last evolution.
  * `evolve`: Appendix F's step for one ready member: pick another member at random; if its
    fitness is more than 5 absolute points higher, copy its weights and hyperparameters;
    then multiply each adapted hyperparameter by 1.2 or 1/1.2 with probability 1/3.
  * `LineageRecord`, `read_lineage`, `ancestry`, `reconstruct_curve`: every generation of
    every member is one line of <population logdir>/pbt_lineage.jsonl; a member's learning
    curve is rebuilt by walking back through the members it copied ("We reconstruct the
    learning curves of the PBT runs in Figure 5 by backtracking through the ancestry of
    copied checkpoints", Appendix F).

Numpy only: the driver does not need TensorFlow for its decisions.
"""
import dataclasses
import json
import math
import os
import time
from typing import Optional

import numpy as np

from scalable_agent_tf2.configuration import command_settings
from scalable_agent_tf2.environments import suites
from scalable_agent_tf2.runfiles import runlog

# Appendix F: "each parameter ... is permuted with 33% probability by multiplying with either
# 1.2 or 1/1.2" (unbiased, unlike Jaderberg et al.'s 1.2 or 0.8), "no matter if a copy
# happened or not".
PERTURB_PROBABILITY = 1.0 / 3.0
PERTURB_FACTOR = 1.2

# Appendix F: the adapted hyperparameters (RMSProp epsilon, learning rate, entropy cost);
# Atari-57 adds the global gradient-norm clipping threshold (section 5.3.2, Table G.1).
# Names are experiment.py's flags.
ADAPTED = ("entropy_cost", "learning_rate", "epsilon")
ADAPTED_ATARI = ADAPTED + ("max_grad_norm",)

# Table D.1: entropy [5e-5, 1e-2] and learning rate [5e-6, 5e-3] log-uniform, RMSProp
# epsilon categorical. Table G.1: the Atari population starts from the same distributions.
ENTROPY_COST_RANGE = (5e-5, 1e-2)
LEARNING_RATE_RANGE = (5e-6, 5e-3)
EPSILON_CHOICES = (1e-1, 1e-3, 1e-5, 1e-7)

LINEAGE_FILE = "pbt_lineage.jsonl"


def sample_hyperparameters(rng):
  """One draw from Table D.1: {"entropy_cost", "learning_rate", "epsilon"}.

  Args:
    rng: numpy Generator.
  """
  log_uniform = lambda low, high: float(math.exp(rng.uniform(math.log(low), math.log(high))))
  return dict(entropy_cost=log_uniform(*ENTROPY_COST_RANGE),
              learning_rate=log_uniform(*LEARNING_RATE_RANGE),
              epsilon=float(EPSILON_CHOICES[rng.integers(len(EPSILON_CHOICES))]))


def perturb(hyperparameters, names, rng, probability=PERTURB_PROBABILITY,
            factor=PERTURB_FACTOR):
  """Appendix F's explore step: each of `names` is multiplied by `factor` or 1/`factor`
  (equally likely) with `probability`, independently; the rest are unchanged.

  Args:
    hyperparameters: dict name -> float.
    names: the adapted names (ADAPTED or ADAPTED_ATARI), all in `hyperparameters`.
    rng: numpy Generator.

  Returns:
    A new dict.
  """
  result = dict(hyperparameters)
  for name in names:
    if rng.random() < probability:
      result[name] = float(result[name] * (factor if rng.random() < 0.5 else 1.0 / factor))
  return result


def fitness(episodes, multi_task):
  """A member's fitness from its recent episodes (Appendix F, Table G.1).

  Args:
    episodes: sequence of (level name, episode return).
    multi_task: True for a suite: the mean capped human-normalised score in percent,
      (sum_l min[1, (s_l - r_l) / (h_l - r_l)]) / N with s_l the mean return on level l
      (Table G.1's "Fitness"), over the levels that have episodes here (with Appendix F's
      5,000 episodes every level of a suite has some). False: the mean raw return (a single
      level; this project's choice, the paper only ran PBT on suites).

  Returns:
    float, or None without episodes.

  Raises:
    ValueError: multi_task with a level that has no human and random reference scores.
  """
  if not len(episodes):
    return None
  if not multi_task:
    return float(np.mean([episode_return for _, episode_return in episodes]))
  by_level = {}
  for level, episode_return in episodes:
    by_level.setdefault(level, []).append(episode_return)
  capped = []
  for level, returns in sorted(by_level.items()):
    references = suites.reference_scores(level)
    if references is None:
      raise ValueError(f"Level {level!r} has no human and random reference scores; a "
                       f"population on a suite needs them for its fitness.")
    capped.append(min(1.0, float(suites.human_normalized_score(np.mean(returns),
                                                                *references))))
  return 100.0 * float(np.mean(capped))


def is_ready(frames, generation_episodes, burn_in_frames=command_settings.BURN_IN_FRAMES,
             ready_episodes=command_settings.READY_EPISODES):
  """Whether a member evolves now: past the burn-in (Appendix F: "no evolution is done"
  before 20M frames) and `ready_episodes` episodes since its last evolution (Appendix F:
  "After collecting 5,000 episode rewards in total")."""
  return frames >= burn_in_frames and generation_episodes >= ready_episodes


def should_exploit(own_fitness, other_fitness, threshold=command_settings.EXPLOIT_THRESHOLD):
  """Appendix F: copy the other member when its score is MORE than `threshold` higher."""
  if own_fitness is None or other_fitness is None:
    return False
  return other_fitness > own_fitness + threshold


@dataclasses.dataclass(frozen=True)
class Decision:
  """The outcome of `evolve` for one member.

  Attributes:
    other: the member compared against (None in a population of one).
    own_fitness, other_fitness: the two fitnesses compared (None: not measured).
    copy_from: `other` when its weights and hyperparameters are copied, else None.
    hyperparameters: the member's next hyperparameters (perturbed).
  """
  other: Optional[int]
  own_fitness: Optional[float]
  other_fitness: Optional[float]
  copy_from: Optional[int]
  hyperparameters: dict


def evolve(member, fitnesses, hyperparameters, names, rng,
           threshold=command_settings.EXPLOIT_THRESHOLD, probability=PERTURB_PROBABILITY,
           factor=PERTURB_FACTOR):
  """Appendix F's exploit-and-explore step for one ready member.

  "a random instance in the population is selected. If the score of the selected instance is
  more than an absolute 5% higher, then the selected instance weights and parameters are
  copied. No matter if a copy happened or not, each parameter ... is permuted".

  Args:
    member: index of the ready member.
    fitnesses: list, the fitness of every member (None: unknown, e.g. no episodes or no
      checkpoint to copy yet; such a member is not copied).
    hyperparameters: list, every member's current hyperparameters (dicts).
    names: the adapted hyperparameters.
    rng: numpy Generator.
    threshold, probability, factor: Appendix F's 5 points, 1/3 and 1.2.

  Returns:
    Decision.
  """
  size = len(fitnesses)
  other = None
  if size > 1:
    other = int(rng.integers(size - 1))
    other += other >= member  # Uniform over the other members.
  other_fitness = None if other is None else fitnesses[other]
  copy_from = None
  if other is not None and should_exploit(fitnesses[member], other_fitness, threshold):
    copy_from = other
  start = hyperparameters[member if copy_from is None else copy_from]
  return Decision(other=other, own_fitness=fitnesses[member], other_fitness=other_fitness,
                  copy_from=copy_from,
                  hyperparameters=perturb(start, names, rng, probability, factor))


# ---------------------------------------------------------------------------------------------
# Lineage.
# ---------------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class LineageRecord:
  """One generation of one member: a line of pbt_lineage.jsonl.

  A member's generation g starts from a checkpoint: its own (generation 0: none; after an
  explore-only step: its generation g-1's last one) or another member's (after a copy).

  Attributes:
    member: the member's index.
    generation: 0, 1, ...
    parent_member, parent_generation: whose checkpoint this generation started from (for
      generation 0: None). Equal to (member, generation - 1) unless copied.
    copied: True when the weights and hyperparameters came from another member.
    hyperparameters: this generation's (after the perturbation).
    frames: environment frames of the checkpoint this generation started from (0 at first).
    fitness: the member's fitness when it was judged, at the end of its previous generation.
    other_member, other_fitness: the member it was compared with, and that member's fitness.
    log_offset: byte offset in the member's log.jsonl where this generation's records begin.
    time: seconds since the epoch.
  """
  member: int
  generation: int
  parent_member: Optional[int]
  parent_generation: Optional[int]
  copied: bool
  hyperparameters: dict
  frames: int
  fitness: Optional[float]
  other_member: Optional[int]
  other_fitness: Optional[float]
  log_offset: int
  time: float = dataclasses.field(default_factory=time.time)

  def to_json(self):
    return json.dumps(dataclasses.asdict(self), sort_keys=True)


def member_dir(population_dir, member):
  """A member's logdir (experiment.py --logdir): <population logdir>/member_<NN>."""
  return os.path.join(population_dir, f"member_{member:02d}")


def append_lineage(population_dir, record):
  with open(os.path.join(population_dir, LINEAGE_FILE), "a") as f:
    f.write(record.to_json() + "\n")


def read_lineage(population_dir):
  """Every LineageRecord in pbt_lineage.jsonl, in written order ([] when there is none)."""
  path = os.path.join(population_dir, LINEAGE_FILE)
  if not os.path.exists(path):
    return []
  with open(path) as f:
    return [LineageRecord(**json.loads(line)) for line in f if line.strip()]


def latest_generations(records):
  """dict member -> its newest LineageRecord."""
  latest = {}
  for record in records:
    if record.member not in latest or record.generation > latest[record.member].generation:
      latest[record.member] = record
  return latest


@dataclasses.dataclass(frozen=True)
class Segment:
  """A stretch of one member's log.jsonl that belongs to a lineage: the records of
  (member, generation) from byte `start` to `end` (None: the end of the file) with frames
  <= max_frames (the frames at which a descendant took this generation's checkpoint)."""
  member: int
  generation: int
  start: int
  end: Optional[int]
  max_frames: float


def ancestry(records, member, generation=None):
  """The segments that make up a member's history, oldest first.

  Args:
    records: the lineage (read_lineage).
    member: the member.
    generation: its generation to end at (default: its newest).

  Returns:
    list of Segment: generation 0 of the founding member first, then each descendant up to
    (member, generation).
  """
  by_key = {(r.member, r.generation): r for r in records}
  if generation is None:
    generation = latest_generations(records)[member].generation
  segments = []
  key, max_frames = (member, generation), math.inf
  while key is not None:
    record = by_key[key]
    following = by_key.get((key[0], key[1] + 1))
    segments.append(Segment(member=key[0], generation=key[1], start=record.log_offset,
                            end=None if following is None else following.log_offset,
                            max_frames=max_frames))
    if record.parent_member is None:
      key = None
    else:
      key, max_frames = (record.parent_member, record.parent_generation), record.frames
  return segments[::-1]


def read_segment(population_dir, segment):
  """The run-log records (dicts) of one Segment (complete lines only)."""
  path = runlog.log_path(member_dir(population_dir, segment.member))
  records, _ = runlog.read_records(path, segment.start, segment.end)
  return [r for r in records if r.get("frames", 0) <= segment.max_frames]


def reconstruct_curve(population_dir, member, generation=None):
  """A member's learning curve across its ancestors (Appendix F).

  Returns:
    list of log.jsonl records (dicts: runlog.EPISODE, PROGRESS and START records),
    oldest first, each with "pbt_member" and "pbt_generation" added: whose log it came from.
  """
  records = read_lineage(population_dir)
  if not records:
    raise ValueError(f"No {LINEAGE_FILE} in {population_dir}: not a population's logdir.")
  curve = []
  for segment in ancestry(records, member, generation):
    for record in read_segment(population_dir, segment):
      curve.append(dict(record, pbt_member=segment.member, pbt_generation=segment.generation))
  return curve
