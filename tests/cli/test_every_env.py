"""Every env the installed packages list trains from the command line (a few env steps, one update).

The names come from :func:`marl_note.cli.envs.known_envs` (PettingZoo's family packages, mpe2 and
Gymnasium's registry), so a new release's envs are tested without editing this file. Skipped by
name only: the envs that need an optional package that is not installed (each skip names it).
Episodes are kept short (Gymnasium's ``max_episode_steps``, PettingZoo's ``max_cycles``, a 3x3
go board, fewer pistons and pursuers), one agent learns (random players in the other seats) and
pixel observations are shrunk with ``--wrapper``, so that each env takes about a second. Of the
OpenSpiel games (``openspiel/...``, two-player zero-sum, listed while pyspiel and shimmy are
installed) only Kuhn and Leduc poker train here, to keep the test bounded; the env itself is the same
Shimmy bridge for all of them (tests/envs/test_openspiel.py).
"""
from __future__ import annotations

import importlib.util
import json
import re

import pytest

from marl_note.cli import main
from marl_note.cli.common import parse_assignments
from marl_note.cli.envs import known_envs, resolve_env

pytest.importorskip("torch")

# a name pattern -> the optional module its envs need (skipped, with the module named, only while it is missing)
NEEDS = {
    r"(Ant|HalfCheetah|Hopper|Humanoid|HumanoidStandup|InvertedDoublePendulum|InvertedPendulum|Pusher|Reacher"
    r"|Swimmer|Walker2d)-v[45]": "mujoco",
    r"(Ant|HalfCheetah|Hopper|Humanoid|HumanoidStandup|InvertedDoublePendulum|InvertedPendulum|Pusher|Reacher"
    r"|Swimmer|Walker2d)-v[23]": "mujoco_py",
    r"(phys2d|tabular)/.*": "jax",
    r"GymV2[16]Environment-v0": "gym",  # Shimmy registers them; they wrap the old gym package
    r"chess_v\d+": "chess",
    r"hanabi_v\d+": "pyspiel",
}
ATARI_NEEDS = "multi_agent_ale_py"  # every atari env (and its ROMs)
PIXELS = ("cooperative_pong_v", "pistonball_v", "CarRacing-v")  # image observations: shrunk to keep the test fast
OPENSPIEL_TRAINED = {"openspiel/kuhn_poker", "openspiel/leduc_poker",  # of the ~50 listed two-player zero-sum games
                     "openspiel/tiny_hanabi"}  # and of the 4 fully cooperative ones (Parallel envs)
ENV_ARGS = {"go_v5": ["board_size=3"], "pistonball_v6": ["n_pistons=4"],
            "pursuit_v5": ["n_pursuers=2", "n_evaders=2"]}


def _needs(name: str, family: str) -> str | None:
    if family == "atari":
        return ATARI_NEEDS
    return next((module for pattern, module in NEEDS.items() if re.fullmatch(pattern, name)), None)


def _missing(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is None
    except (ImportError, ValueError):
        return True


@pytest.mark.parametrize("name", sorted(n for n in known_envs()
                                         if not known_envs()[n].startswith("openspiel") or n in OPENSPIEL_TRAINED))
def test_every_listed_env_trains_a_few_steps_from_the_command_line(name, tmp_path, capsys):
    family = known_envs()[name]
    module = _needs(name, family)
    if module is not None and _missing(module):
        pytest.skip(f"{name} needs the optional package {module!r}, which is not installed")
    episode = (["max_episode_steps=8"] if family == "gymnasium"
               else [] if family == "classic" or family.startswith("openspiel") else ["max_cycles=8"])
    args = ["train", "--env", name, "--algo", "ppo", "--env-steps", "16", "--update-freq", "16", "--batch-size", "4",
            "--num-envs", "1", "--test-episodes", "1", "--eval-episodes", "0", "--quiet",
            "--out", str(tmp_path / "run"), "--agent-arg", "n_steps=4", "--agent-arg", "n_epochs=1",
            "--agent-arg", "hidden_sizes=[8]"]
    env_args = episode + ENV_ARGS.get(name, [])
    for item in env_args:
        args += ["--env-arg", item]
    env = resolve_env(name, parse_assignments(env_args, "--env-arg")).make()
    seats = len(getattr(env, "possible_agents", [None]))
    env.close()
    if seats > 1:  # one learner (in the first seat) and random players: one agent to build and update
        args += ["--opponent", "random"]
    if name.startswith(PIXELS):
        args += ["--wrapper", "resize_v1:x_size=36,y_size=36"]
    status = main(args)
    captured = capsys.readouterr()
    assert status == 0, captured.err[-2000:]
    record = json.loads((tmp_path / "run" / "marl_note_run.json").read_text())
    assert record["env_steps"] >= 16 and record["gradient_steps"] > 0, record
