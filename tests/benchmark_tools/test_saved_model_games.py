"""benchmarks/tools/saved_model_games.py: the gymnasium id of a level, and one clear line for a
folder that is no policy SavedModel or not an Atari game's (the games themselves:
tests/project/test_policy_example.py plays docs/POLICY_API.md's same loop)."""
import json

from benchmarks.tools import saved_model_games


def test_a_level_names_its_ale_v5_game():
  assert saved_model_games.game_id("atari/breakout") == "ALE/Breakout-v5"
  assert saved_model_games.game_id("atari/space_invaders") == "ALE/SpaceInvaders-v5"


def test_a_folder_without_policy_json_or_of_another_level_gets_one_line(tmp_path, capsys):
  assert saved_model_games.main([f"--saved_model={tmp_path}"]) == 2
  error = capsys.readouterr().err.strip()
  assert error.startswith("error: ") and "policy.json is missing" in error and "\n" not in error
  (tmp_path / "policy.json").write_text(json.dumps({"level_name": "gym:CartPole-v1"}))
  assert saved_model_games.main([f"--saved_model={tmp_path}"]) == 2
  assert "gym:CartPole-v1 is not an Atari game" in capsys.readouterr().err
