"""What the package ships beside its modules."""
from pathlib import Path

import marl_note


def test_package_is_marked_typed():
    # PEP 561: without py.typed next to the modules, type checkers of user code ignore marl_note's annotations
    assert (Path(marl_note.__file__).parent / "py.typed").is_file()
