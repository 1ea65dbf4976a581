"""A Griffe extension for the API reference: anb's docstrings are Sphinx-style reST, rendered as
Markdown. Inline roles (:func:`~anb.x.y`, :class:`...`) become code spans (not links: many name
private or re-exported objects a cross-reference could not resolve), and doctest lines (``>>>``,
which Markdown reads as nested quotes) become a fenced ``pycon`` block. The docstrings
themselves are unchanged; mkdocs.yml loads this file by path."""
from __future__ import annotations

import re
from typing import Any

import griffe

ROLE = re.compile(r":(?:func|class|meth|mod|attr|data|exc|obj|const):`~?([^`]+)`")
LITERAL = re.compile(r"``([^`]+)``")


def markdown(text: str) -> str:
    """One docstring's reST roles, literals and doctest blocks in Markdown."""
    text = LITERAL.sub(r"`\1`", ROLE.sub(r"`\1`", text))
    out: list[str] = []
    in_doctest = False
    for line in text.splitlines():
        stripped = line.lstrip()
        doctest = stripped.startswith(">>>") or (in_doctest and stripped.startswith("..."))
        if doctest and not in_doctest:
            out.append("```pycon")
        elif in_doctest and not doctest:
            out.append("```")
        in_doctest = doctest
        out.append(line)
    if in_doctest:
        out.append("```")
    return "\n".join(out)


class SphinxToMarkdown(griffe.Extension):
    def on_object(self, *, obj: griffe.Object, **kwargs: Any) -> None:
        if obj.docstring is not None:
            obj.docstring.value = markdown(obj.docstring.value)
