"""docs/POLICY_API.md's examples run as written: the Python API's episode (play_episode.py) on
the shipped agents, scoring within their test-mode range, and the SavedModel's gymnasium loop
in a process where scalable_agent_tf2 cannot be imported."""
import json
import os
import re
import subprocess
import sys

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PAGE = os.path.join(REPO, "docs", "POLICY_API.md")


def _block(first_line_start):
  """The page's Python block whose first line starts with first_line_start."""
  with open(PAGE, encoding="utf-8") as f:
    blocks = re.findall(r"```python\n(.*?)```", f.read(), re.S)
  found = [b for b in blocks if b.startswith(first_line_start)]
  assert len(found) == 1, f"{PAGE}: {len(found)} Python blocks start with {first_line_start!r}"
  return found[0]


def _shipped(name):
  with open(os.path.join(REPO, "benchmarks", "agents", name, "shipped.json")) as f:
    return json.load(f)


def _within_test_mode_range(score, shipped):
  """One game within two standard deviations of the shipped test score, above random."""
  low = shipped["test_score"] - 2 * shipped["test_score_std"]
  high = shipped["test_score"] + 2 * shipped["test_score_std"]
  return score > shipped["random_score"] and low <= score <= high


def _play_episode(tmp_path, name):
  script = tmp_path / "play_episode.py"
  script.write_text(_block("# play_episode.py"))
  env = dict(os.environ, PYTHONPATH=REPO)  # The repository root, where the page saves it.
  done = subprocess.run([sys.executable, str(script), f"benchmarks/agents/{name}"], cwd=REPO,
                        env=env, capture_output=True, text=True, timeout=900)
  assert done.returncode == 0, done.stderr[-3000:]
  match = re.fullmatch(r"(\S+): (-?\d+) points in (\d+) steps", done.stdout.strip())
  assert match, done.stdout
  return match.group(1), float(match.group(2)), int(match.group(3))


@pytest.mark.timeout(900)
@pytest.mark.parametrize("game", ["breakout", pytest.param("boxing", marks=pytest.mark.slow)])
def test_the_api_example_plays_an_episode_within_test_mode_s_range(tmp_path, game):
  level, score, steps = _play_episode(tmp_path, game)
  shipped = _shipped(game)
  assert level == shipped["level_name"] and steps > 100
  assert _within_test_mode_range(score, shipped), (score, shipped)


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_the_saved_model_example_plays_without_the_project(tmp_path):
  script = tmp_path / "saved_model_episode.py"
  script.write_text(_block("# saved_model_episode.py"))
  blocked = ("import sys; sys.modules['scalable_agent_tf2'] = None; "
             f"exec(compile(open({str(script)!r}).read(), {str(script)!r}, 'exec'))")
  env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
  done = subprocess.run([sys.executable, "-c", blocked], cwd=REPO, env=env,
                        capture_output=True, text=True, timeout=900)
  assert done.returncode == 0, done.stderr[-3000:]
  match = re.fullmatch(r"Breakout: (-?\d+) points", done.stdout.strip())
  assert match, done.stdout
  assert _within_test_mode_range(float(match.group(1)), _shipped("breakout"))
