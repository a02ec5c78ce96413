"""Where each preset and derived setting of a resolved run gets its value, in the words of
experiment.py --show_settings' brackets: "<source>: <the value printed>", then, where a paper
gives another value, why this one differs.

    cited = citations.of(config, given, preset_values)   # dict setting -> text

The presets' citations are their families' (Family.preset_citations, beside each family's
values; presets.citations adds the algorithms' own); the derived settings' are worked out
here from the same numbers config.resolve derives them from (a clip on the paper's mean loss
on our summed loss, IMPACT's N x K, a short budget's batch, the threads per op, LASER's
defaults). No TensorFlow here.
"""
import os

from scalable_agent_tf2.configuration import settings
from scalable_agent_tf2.resolution import presets


def _source_of(text):
  """A citation without its value: what comes before its last ": "."""
  return text.rpartition(": ")[0]


def _max_grad_norm(config, given, values, cited):
  """The citation of a gradient clip set on a paper's mean loss (presets'
  MEAN_LOSS_MAX_GRAD_NORM), as config.resolve scales it to our summed loss."""
  mean_clip = values.get(presets.MEAN_LOSS_MAX_GRAD_NORM)
  if "max_grad_norm" in given or mean_clip is None:
    return None
  unroll = given.get("unroll_length", values["unroll_length"])
  batch = given.get("batch_size", values["batch_size"])
  source = _source_of(cited[presets.MEAN_LOSS_MAX_GRAD_NORM])
  return (f"{source}'s {mean_clip:g} on the mean loss x T x B = {unroll} x {batch} steps "
          f"(this project's loss is summed over them): {config.max_grad_norm}")


def _derived(config, given, values, cited):
  """{setting: citation} of the settings config.resolve derives from the others."""
  derived = {}
  clip = _max_grad_norm(config, given, values, cited)
  if clip:
    derived["max_grad_norm"] = clip
  if "intra_op_threads" not in given:
    derived["intra_op_threads"] = config.family.intra_op_threads_cited(
        values.get("torso"), os.cpu_count() or 1)
  preset_batch = values.get("batch_size")
  if "batch_size" not in given and config.batch_size != preset_batch:
    derived["batch_size"] = (
        f"fewer unrolls than the preset's {preset_batch}, as --total_environment_frames="
        f"{config.total_environment_frames} is less than one batch of them "
        f"(config.short_run_batch_size): {config.batch_size}")
  if config.algorithm == settings.IMPACT and "target_update_period" not in values:
    derived["target_update_period"] = (
        f"IMPACT section 4.1.1, n = N x K = {config.circular_buffer_size} x "
        f"{config.circular_buffer_max_uses}: {config.target_update_period}")
  if "envs_per_actor" not in given and config.envs_per_actor != values.get("envs_per_actor"):
    derived["envs_per_actor"] = (f"these environments run as {config.runs_as} "
                                 f"(combinations.resolve_envs_per_actor): {config.envs_per_actor}")
  if "entropy_on_online_only" not in given:
    derived["entropy_on_online_only"] = (
        "LASER section 5.1, with --laser_replay: on" if config.entropy_on_online_only
        else "LASER section 5.1's, without --laser_replay: off")
  if config.replay_mixing is not None and "replay_mixing" not in given:
    derived["replay_mixing"] = (
        f"LASER section 5.1, with --laser_replay: {config.replay_mixing}"
        if config.laser_replay else f"IMPALA section 5.2.2: {config.replay_mixing}")
  return derived


def of(config, given, values):
  """dict setting -> citation for every preset and derived setting of a resolved `config`.

  Args:
    config: the resolved config.ExperimentConfig.
    given: dict of the settings the command line gave, by name.
    values: config.preset_values(config, given): what the presets gave.
  """
  cited = presets.citations(config.level_name, values["algorithm"], config.preset,
                            given=given)
  if config.preset == settings.IMPACT_PAPER:
    cited["algorithm"] = ("the IMPACT paper's setting names none (--algorithm=impact: its "
                          "IMPACT column): impala")
  else:
    cited["algorithm"] = config.family.algorithm_cited
  if config.laser_replay:
    cited.update(presets.LASER_PRESET_CITED)
  cited.update(_derived(config, given, values, cited))
  return cited
