"""Griffe extension for the documentation site: render marl_note's ``Example:`` doctests as code.

marl_note's docstrings are Google style, and their runnable examples sit under ``Example:``, the
singular spelling that Google's guide and Sphinx's napoleon accept. Griffe knows only
``Examples:`` as a section and reads ``Example:`` as an admonition of Markdown text, in which the
``>>>`` prompts become nested block quotes and ``x["key"]`` becomes a link reference. This turns
the heading into ``Examples:`` when griffe loads a docstring, so the doctests render as Python
sessions. The docstrings themselves are not changed (tests/test_docstrings.py runs them as they are).

Used from mkdocs.yml: ``extensions: [tools/griffe_examples.py:ExampleSections]``.
"""
from __future__ import annotations

import re
from typing import Any

import griffe

_EXAMPLE_HEADING = re.compile(r"^(\s*)Example:[ \t]*$", re.MULTILINE)


class ExampleSections(griffe.Extension):
    """Spell each ``Example:`` section heading ``Examples:`` before griffe parses the docstring."""

    def on_object(self, *, obj: griffe.Object, loader: griffe.GriffeLoader, **kwargs: Any) -> None:
        if obj.docstring is not None:
            obj.docstring.value = _EXAMPLE_HEADING.sub(r"\1Examples:", obj.docstring.value)
