"""Griffe extension for the documentation site: marl_note's docstrings as Markdown that renders well.

marl_note's docstrings are Google style, and their runnable examples sit under ``Example:``, the
singular spelling that Google's guide and Sphinx's napoleon accept. Griffe knows only
``Examples:`` as a section and reads ``Example:`` as an admonition of Markdown text, in which the
``>>>`` prompts become nested block quotes and ``x["key"]`` becomes a link reference. This turns
the heading into ``Examples:`` when griffe loads a docstring, so the doctests render as Python
sessions. It also shows the docstrings' Sphinx roles (``:class:`~marl_note.types.EnvSpec```) as the
code spans they stand for (``EnvSpec``; the full path without the ``~``), since Markdown has no roles.
The docstrings themselves are not changed (tests/test_docstrings.py runs them as they are).

Used from mkdocs.yml: ``extensions: [tools/griffe_docstrings.py:MarkdownDocstrings]``.
"""
from __future__ import annotations

import re
from typing import Any

import griffe

_EXAMPLE_HEADING = re.compile(r"^(\s*)Example:[ \t]*$", re.MULTILINE)
_SPHINX_ROLE = re.compile(r":(?:class|func|meth|mod|attr|exc|data|obj):`(~?)([^`]+)`")


def _role_as_code(match: re.Match) -> str:
    target = match.group(2)
    return f"``{target.rsplit('.', 1)[-1] if match.group(1) else target}``"


class MarkdownDocstrings(griffe.Extension):
    """Spell each ``Example:`` heading ``Examples:`` and each Sphinx role as code before griffe parses a docstring."""

    def on_object(self, *, obj: griffe.Object, loader: griffe.GriffeLoader, **kwargs: Any) -> None:
        if obj.docstring is not None:
            value = _EXAMPLE_HEADING.sub(r"\1Examples:", obj.docstring.value)
            obj.docstring.value = _SPHINX_ROLE.sub(_role_as_code, value)
