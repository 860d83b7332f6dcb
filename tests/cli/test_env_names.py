"""Env names on the command line: the installed packages' names, PettingZoo's registry ids, and the releases
that had a name the installed PettingZoo lacks (each failed on 705780f: a bare "unknown env")."""
from __future__ import annotations

import importlib.util

import pytest

from marl_note.cli import main
from marl_note.cli.common import CLIError
from marl_note.cli.envs import known_envs, resolve_env


def test_names_are_discovered_from_every_installed_family():
    known = known_envs()
    families = set(known.values())
    assert {"classic", "butterfly", "sisl", "gymnasium"} <= families
    assert known["tictactoe_v3"] == "classic" and known["pistonball_v6"] == "butterfly"
    assert known["pursuit_v5"] == "sisl" and known["CartPole-v1"] == "gymnasium"
    if importlib.util.find_spec("pettingzoo.atari") is not None:  # PettingZoo ships the atari modules itself
        assert known["pong_v3"] == "atari"


@pytest.mark.parametrize("typed, name, family", [
    ("butterfly/pistonball-v6", "pistonball_v6", "butterfly"),  # pettingzoo.make's registry id
    ("butterfly/pistonball", "pistonball_v6", "butterfly"),  # no version: the newest installed
    ("classic/tictactoe-v3", "tictactoe_v3", "classic"),
    ("classic/tictactoe_v3", "tictactoe_v3", "classic"),
    ("sisl/pursuit-v5", "pursuit_v5", "sisl"),
])
def test_pettingzoo_registry_ids_resolve_to_the_same_env(typed, name, family):
    choice = resolve_env(typed)
    assert (choice.name, choice.family) == (name, family)
    assert choice.factory is resolve_env(name).factory  # the very same factory as the module name's


def test_a_removed_name_says_which_releases_had_it_and_the_nearest_installed_names():
    with pytest.raises(CLIError) as err:
        resolve_env("waterworld_v4")
    text = str(err.value)
    assert "waterworld_v4 (sisl) was in PettingZoo 1.18.1 to 1.25.0" in text
    assert "pip install 'pettingzoo==1.25.0'" in text
    assert "nearest installed names: " in text and "pursuit_v5" in text  # the installed sisl envs
    with pytest.raises(CLIError, match=r"gin_rummy_v4 \(classic\) was in PettingZoo 1\.11\.0 to 1\.26\.1"):
        resolve_env("gin_rummy_v4")


def test_an_older_version_suffix_points_to_the_installed_version():
    with pytest.raises(CLIError) as err:
        resolve_env("cooperative_pong_v5")
    assert "cooperative_pong_v5 (butterfly) was in PettingZoo 1.15.0 to 1.25.0" in str(err.value)
    assert "nearest installed names: cooperative_pong_v6" in str(err.value)
    with pytest.raises(CLIError, match="pistonball_v5 .* nearest installed names: pistonball_v6"):
        resolve_env("butterfly/pistonball-v5")  # the registry id of an older version too


def test_moved_families_name_their_new_package():
    with pytest.raises(CLIError, match=r"mpe envs left PettingZoo after 1\.25\.0 for the mpe2 package"):
        resolve_env("simple_spread_v2")
    with pytest.raises(CLIError, match="magent envs left PettingZoo after 1.22.0 for the magent2 package"):
        resolve_env("battle_v4")


def test_a_name_in_another_family_and_unknown_names_are_refused_clearly(capsys):
    with pytest.raises(CLIError, match=r"pistonball_v6 is a butterfly env, not classic \(butterfly/pistonball_v6\)"):
        resolve_env("classic/pistonball_v6")
    assert main(["train", "--env", "conect_four_v3", "--algo", "dqn"]) == 2
    assert "did you mean connect_four_v3" in capsys.readouterr().err


def test_the_history_table_knows_old_names_only_as_data():
    from marl_note.cli.env_history import releases

    assert releases("tictactoe_v3") == ("classic", "1.8.0", "1.26.1")
    assert releases("CartPole-v1") is None and releases("no_such_v1") is None


def test_an_env_whose_package_is_missing_names_what_installs_it():
    if importlib.util.find_spec("pettingzoo.atari") is None or importlib.util.find_spec("multi_agent_ale_py"):
        pytest.skip("needs PettingZoo's atari modules without multi_agent_ale_py installed")
    with pytest.raises(CLIError, match=r"env pong_v3 \(atari\) needs the package 'multi_agent_ale_py', which is not "
                                       r"installed: pip install 'pettingzoo\[atari\]'"):
        resolve_env("atari/pong-v3")
