"""benchmarks/peers: the --game of sample_factory_pong.py and learning_side_by_side.py (any
Atari game, Pong by default): the environment each system plays, the games both have, the
refusal of an unknown one, and what follows the game (figure, output directories, runs of
another game). Without Sample Factory and without training."""
import glob
import inspect
import json
import os
import re
import sys
import types

import pytest

from benchmarks.peers import learning_side_by_side as lsbs
from benchmarks.peers import sample_factory_pong as sfp
from scalable_agent_tf2.environments import suites


def _peer_argv(*flags):
  return sfp.sample_factory_argv(sfp.parse_args(list(flags)), "/tmp/train", "learning")


def test_the_peer_plays_the_games_sample_factory_environment():
  assert "--env=atari_pong" in _peer_argv()  # The default: Pong, as before --game.
  assert "--env=atari_boxing" in _peer_argv("--game=boxing")
  assert "--env=atari_spaceinvaders" in _peer_argv("--game=space_invaders")
  assert sfp.sf_env_name("kung_fu_master") == "atari_kongfumaster"
  assert sfp.env_name_of(_peer_argv("--game=boxing")) == "atari_boxing"
  assert sfp.default_output_dir(sfp.parse_args(["--mode=learning", "--game=boxing"]),
                                "t") == "/tmp/sf_boxing/learning_seed1_t"
  assert sfp.default_output_dir(sfp.parse_args([]), "t") == "/tmp/sf_pong/throughput_seed1_t"


def test_the_games_are_ours_and_each_is_sample_factorys_environment_of_the_same_rom():
  assert sfp.GAMES == suites.ATARI57_GAMES
  # Sample Factory's list, read (not imported) from its venv where there is one.
  venvs = [os.environ.get("SF_VENV", ""), "/work/runs/sf_venv", "/tmp/sf_venv"]
  paths = [path for venv in venvs if venv for path in glob.glob(os.path.join(
      venv, "lib", "python*", "site-packages", "sf_examples", "atari", "atari_utils.py"))]
  if not paths:
    pytest.skip("no Sample Factory venv here (benchmarks/peers/setup_sample_factory.sh)")
  with open(paths[0]) as f:
    roms = dict(re.findall(r'AtariSpec\("(atari_\w+)", "(\w+)NoFrameskip-v4"', f.read()))
  assert len(roms) == 57
  for game in sfp.GAMES:
    assert roms[sfp.sf_env_name(game)].lower() == game.replace("_", ""), game


def test_the_child_registers_the_logged_game_under_the_environment_of_its_argv(monkeypatch):
  calls = []
  fakes = {
      "sample_factory.cfg.arguments": dict(
          parse_sf_args=lambda argv: (calls.append(("parse", argv)) or "parser",
                                      types.SimpleNamespace(env=sfp.env_name_of(argv))),
          parse_full_cfg=lambda parser, argv: ("cfg", argv)),
      "sample_factory.envs.env_utils": dict(
          register_env=lambda name, make: calls.append(("register", name, make))),
      "sample_factory.train": dict(run_rl=lambda cfg: calls.append(("run", cfg)) or 0),
      "sf_examples.atari.atari_params": dict(
          atari_override_defaults=lambda env, parser: calls.append(("defaults", env)))}
  for name in ("sample_factory", "sample_factory.cfg", "sample_factory.envs", "sf_examples",
               "sf_examples.atari", *fakes):
    module = types.ModuleType(name)
    module.__dict__.update(fakes.get(name, {}))
    monkeypatch.setitem(sys.modules, name, module)
  argv = _peer_argv("--game=boxing")
  assert sfp.main(["--sf_child", *argv]) == 0
  assert ("register", "atari_boxing", sfp.make_logged_game) in calls
  assert ("defaults", "atari_boxing") in calls and ("run", ("cfg", argv)) in calls


def test_our_run_plays_the_game():
  assert "--level_name=atari/boxing" in lsbs.ours_command("/tmp/x", 1, "boxing")
  assert "--level_name=atari/pong" in lsbs.ours_command("/tmp/x", 1)


def test_the_peers_command_passes_the_game_on_to_its_environment():
  command = lsbs.peer_command("/tmp/sf/seed_1", 1, 1000, "/tmp/venv", "boxing")
  assert command[1] == lsbs.PEER_SCRIPT and "--game=boxing" in command
  assert "--env=atari_boxing" in sfp.sample_factory_argv(sfp.parse_args(command[2:]),
                                                         "/tmp/train", "learning")
  assert "--game=pong" in lsbs.peer_command("/tmp/sf/seed_1", 1, 1000, "/tmp/venv")


def test_main_runs_and_reports_the_game(tmp_path, monkeypatch):
  made = []
  monkeypatch.setattr(lsbs, "run_ours", lambda *args: made.append(("ours", args[-1])))
  monkeypatch.setattr(lsbs, "run_peer", lambda *args: made.append(("peer", args[-1])))
  real_report = lsbs.report

  def report(*args, **kwargs):  # Reads the game as report's own signature binds it.
    bound = inspect.signature(real_report).bind(*args, **kwargs)
    made.append(("report", bound.arguments["game"], bound.arguments.get("ours_table")))
    return []

  monkeypatch.setattr(lsbs, "report", report)
  lsbs.main([f"--output_dir={tmp_path}", "--seeds=1", "--systems=ours", "--game=boxing"])
  assert made == [("ours", "boxing"), ("report", "boxing", None)]


@pytest.mark.parametrize("main, flags", [
    (sfp.parse_args, []), (lsbs.main, ["--output_dir=/tmp/x", "--report_only"])])
def test_an_unknown_game_is_refused_naming_the_valid_ones(main, flags, capsys):
  with pytest.raises(SystemExit):
    main(flags + ["--game=spaceinvaders"])
  error = capsys.readouterr().err
  assert "--game=spaceinvaders" in error and "Did you mean space_invaders?" in error
  assert "boxing" in error and "pong" in error and "zaxxon" in error
  with pytest.raises(SystemExit):
    main(flags + ["--game=atari/boxing"])
  assert "Valid games" in capsys.readouterr().err


def test_the_default_figure_names_the_game(tmp_path):
  assert lsbs.parse_args([f"--output_dir={tmp_path}", "--report_only"]).figure == str(
      tmp_path / "pong_vs_sf.png")
  assert lsbs.parse_args([f"--output_dir={tmp_path}", "--report_only",
                          "--game=boxing"]).figure == str(tmp_path / "boxing_vs_sf.png")
  assert lsbs.parse_args([f"--output_dir={tmp_path}", "--report_only", "--game=boxing",
                          f"--figure={tmp_path / 'f.png'}"]).figure == str(tmp_path / "f.png")
  assert lsbs.game_title("space_invaders") == "Space Invaders"
  assert lsbs.game_title("pong") == "Pong"


def test_runs_of_another_game_are_refused(tmp_path):
  # Ours: a log of Pong's episodes is not Boxing's.
  logdir = tmp_path / "ours"
  logdir.mkdir()
  with open(logdir / "log.jsonl", "w") as f:
    for record in (dict(kind="start", time=0.0, frames=0),
                   dict(kind="episode", frames=100, level="atari/pong", episode_return=-21.0,
                        episode_length=100),
                   dict(kind="progress", time=60.0, frames=100, updates=1)):
      f.write(json.dumps(record) + "\n")
  assert len(lsbs.read_ours(str(logdir))["returns"]) == 1
  with pytest.raises(ValueError, match="not atari/boxing alone"):
    lsbs.read_ours(str(logdir), "boxing")
  # The peer: the environment of its command.json; a mark without a game is Pong's.
  peer = tmp_path / "peer"
  peer.mkdir()
  with open(peer / "command.json", "w") as f:
    json.dump(["python", "sample_factory_pong.py", "--sf_child", *_peer_argv()], f)
  with open(peer / "episodes.csv", "w") as f:
    f.write("seconds,frames,episode_return,episode_frames,seed\n10.0,100,-21,900,1\n")
  with open(peer / lsbs.COMPLETE_FILE, "w") as f:
    json.dump(dict(frames=1000), f)
  assert lsbs.peer_complete(str(peer), 1000) and not lsbs.peer_complete(str(peer), 1000,
                                                                        "boxing")
  assert lsbs.read_peer(str(peer), 1000)["reached"] == 1000
  with pytest.raises(ValueError, match="run of atari_pong, not atari_boxing"):
    lsbs.read_peer(str(peer), 1000, "boxing")
  with pytest.raises(SystemExit, match="Choose another --output_dir"):
    lsbs.run_peer(str(peer), 1, 1000, "/tmp/venv", print, "boxing")
  assert os.path.exists(peer / "episodes.csv")  # Refused, not moved aside.
