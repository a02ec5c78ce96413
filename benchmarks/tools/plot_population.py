"""Learning curves of a population-based training run (IMPALA Appendix F), as a PNG.

    python -m benchmarks.tools.plot_population --logdir=/tmp/pbt --output=pbt.png

Every member's curve is rebuilt across its ancestors
(scalable_agent_tf2.population.pbt.reconstruct_curve: the members whose checkpoints it copied,
as in the paper's Figure 5). Top: the mean of the last --window episode returns of each
member's lineage (the fittest member's line is thick). Bottom: the learning rate along each
lineage (the schedule PBT found, as in Figure F.1; the effective rate is this times the linear
decay to 0 over --total_environment_frames).
"""
import argparse

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # pylint: disable=g-import-not-at-top,wrong-import-position
import numpy as np

# pylint: disable-next=g-import-not-at-top,wrong-import-position
from scalable_agent_tf2.population import pbt

# pylint: disable-next=g-import-not-at-top,wrong-import-position
from scalable_agent_tf2.runfiles import runlog


def running_mean(values, window):
  """Mean of the last `window` values at each position (fewer at the start)."""
  cumulative = np.cumsum(np.insert(np.asarray(values, np.float64), 0, 0.0))
  ends = np.arange(1, len(values) + 1)
  starts = np.maximum(ends - window, 0)
  return (cumulative[ends] - cumulative[starts]) / (ends - starts)


def lineage_learning_rates(records, member):
  """[(start frames, end frames, learning rate)] along a member's ancestry."""
  by_key = {(r.member, r.generation): r for r in records}
  segments = pbt.ancestry(records, member)
  starts = [by_key[(s.member, s.generation)] for s in segments]
  return [(record.frames, following.frames if following is not None else None,
           record.hyperparameters["learning_rate"])
          for record, following in zip(starts, starts[1:] + [None])]


def main():
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  parser.add_argument("--logdir", required=True, help="The population's --logdir.")
  parser.add_argument("--output", required=True)
  parser.add_argument("--window", type=int, default=100)
  parser.add_argument("--title", default="")
  args = parser.parse_args()

  records = pbt.read_lineage(args.logdir)
  if not records:
    raise SystemExit(f"No {pbt.LINEAGE_FILE} in {args.logdir}.")
  members = sorted(pbt.latest_generations(records))
  curves = {}
  for member in members:
    episodes = runlog.of_kind(pbt.reconstruct_curve(args.logdir, member), runlog.EPISODE)
    if episodes:
      frames = np.array([e["frames"] for e in episodes])
      curves[member] = (frames, running_mean([e["episode_return"] for e in episodes],
                                             args.window))
  if not curves:
    raise SystemExit(f"No episodes logged under {args.logdir}.")
  best = max(curves, key=lambda m: curves[m][1][-1])

  figure, (top, bottom) = plt.subplots(2, 1, figsize=(8, 7), sharex=True)
  for member, (frames, mean) in sorted(curves.items()):
    top.plot(frames / 1e6, mean, linewidth=2.5 if member == best else 1.0,
             label=f"member {member}" + (" (best)" if member == best else ""))
    last_frames = frames[-1]
    for start, end, learning_rate in lineage_learning_rates(records, member):
      end = last_frames if end is None else end
      bottom.hlines(learning_rate, start / 1e6, max(start, end) / 1e6,
                    linewidth=2.5 if member == best else 1.0,
                    color=top.lines[-1].get_color())
  top.set_ylabel(f"episode return (mean of last {args.window})")
  top.set_title(args.title or "Population-based training: each member's return and learning rate")
  top.grid(alpha=0.3)
  top.legend(loc="lower right", fontsize="small")
  bottom.set_yscale("log")
  bottom.set_ylabel("learning rate (before linear decay)")
  bottom.set_xlabel("environment frames per member (millions)")
  bottom.grid(alpha=0.3)
  figure.tight_layout()
  figure.savefig(args.output, dpi=100)
  copies = sum(r.copied for r in records)
  generations = sum(r.generation > 0 for r in records)
  print(f"{len(members)} members, {generations} evolution steps, {copies} copies; best member "
        f"{best}: mean of last {args.window} returns {curves[best][1][-1]:.2f} at "
        f"{curves[best][0][-1]:,} frames.")


if __name__ == "__main__":
  main()
