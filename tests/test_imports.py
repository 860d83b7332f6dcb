"""The dependency rule (docs/ARCHITECTURE.md): envs, replay and trainers never import torch or tensorflow."""
import subprocess
import sys


def test_core_packages_import_no_framework():
    code = ("import sys, marl_note.envs, marl_note.replay, marl_note.trainers, marl_note.agents; "
            "bad = [m for m in ('torch', 'tensorflow', 'keras', 'ray') if m in sys.modules]; "
            "assert not bad, bad")
    subprocess.run([sys.executable, "-c", code], check=True)
