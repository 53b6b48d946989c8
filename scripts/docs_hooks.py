"""MkDocs hooks for the docs site (mkdocs.yml's ``hooks``).

- ``<!-- heartwire-help: SUBCOMMAND -->`` in a page becomes the ``heartwire SUBCOMMAND --help``
  text, taken from the CLI's own argparse parser (``heartwire.cli._parser``) at build time, so the
  CLI page cannot drift from the code; ``<!-- heartwire-help -->`` is the top-level help.
- The docstrings use Sphinx roles (``:class:`~heartwire.Failed```); mkdocstrings renders them
  as ``:class:<code>~heartwire.Failed</code>``: the role is dropped and ``~`` shortens the name,
  as Sphinx would.
"""

from __future__ import annotations

import argparse
import os
import re
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "python"))

HELP = re.compile(r"<!-- heartwire-help(?::\s*([a-z-]+))?\s*-->")
ROLE = re.compile(r":(?:class|func|meth|mod|data|attr|exc|obj):<code>(~?)([^<]+)</code>")
#: The width the help text is wrapped at (argparse reads $COLUMNS).
WIDTH = "100"


def _help(command: str | None) -> str:
    from heartwire.cli import _parser

    old = os.environ.get("COLUMNS")
    os.environ["COLUMNS"] = WIDTH
    try:
        parser = _parser()
        if command is not None:
            sub = next(
                a for a in parser._actions if isinstance(a, argparse._SubParsersAction)
            )
            if command not in sub.choices:
                raise ValueError(f"docs: heartwire has no subcommand {command!r}")
            parser = sub.choices[command]
        text = parser.format_help()
    finally:
        if old is None:
            del os.environ["COLUMNS"]
        else:
            os.environ["COLUMNS"] = old
    return f"```text\n{text.rstrip()}\n```"


def on_page_markdown(markdown: str, **kwargs: Any) -> str:
    return HELP.sub(lambda m: _help(m.group(1)), markdown)


def _role(match: re.Match[str]) -> str:
    name = match.group(2)
    if match.group(1):
        name = name.rsplit(".", 1)[-1]
    return f"<code>{name}</code>"


def on_page_content(html: str, **kwargs: Any) -> str:
    return ROLE.sub(_role, html)
