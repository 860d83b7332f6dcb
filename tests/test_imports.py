"""The dependency rule (docs/ARCHITECTURE.md): envs, replay and trainers never import torch or tensorflow."""
import subprocess
import sys


def test_core_packages_import_no_framework():
    code = ("import sys, marl_note.envs, marl_note.replay, marl_note.trainers, marl_note.agents; "
            "bad = [m for m in ('torch', 'tensorflow', 'keras', 'ray') if m in sys.modules]; "
            "assert not bad, bad")
    subprocess.run([sys.executable, "-c", code], check=True)


def test_agents_do_not_import_the_trainers():
    """agent.train() reaches marl_note.trainers only by an import inside the method (docs/ARCHITECTURE.md)."""
    code = ("import sys, marl_note.agents, marl_note.compat.rl; "
            "bad = [m for m in sys.modules if m.startswith('marl_note.trainers')]; assert not bad, bad")
    subprocess.run([sys.executable, "-c", code], check=True)
