"""MkDocs hooks for the docs site (mkdocs.yml's ``hooks``).

- ``<!-- heartwire-help: SUBCOMMAND -->`` in a page becomes the ``heartwire SUBCOMMAND --help``
  text, taken from the CLI's own argparse parser (``heartwire.cli._parser``) at build time, so the
  CLI page cannot drift from the code; ``<!-- heartwire-help -->`` is the top-level help.
- ``<!-- heartwire-include: PATH -->`` (PATH from the repository's root; ``shift=1`` puts its
  headings one level down) becomes that file's text, so the README and ``benches/*.md`` are
  shown as they are, one copy. Their relative links are
  mapped: to a page under ``docs/``, to the page that includes the file (:data:`INCLUDED`), or,
  for any other file of the repository (a script, a source file), to its path as code text (the
  site has no copy of it).
- Pages named in :data:`OPTIONAL` are dropped from the nav while their file does not exist (other
  branches add them), so the strict build passes before and after they land.
- The docstrings use Sphinx roles (``:class:`~heartwire.Failed```); mkdocstrings renders them
  as ``:class:<code>~heartwire.Failed</code>``: the role is dropped and ``~`` shortens the name,
  as Sphinx would.

``heartwire`` is imported from the environment that runs mkdocs (``scripts/docs`` uses ``.venv``,
where ``scripts/setup`` installed it; in a work tree, ``PYTHONPATH=python``).
"""

from __future__ import annotations

import argparse
import os
import posixpath
import re
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
HELP = re.compile(r"<!-- heartwire-help(?::\s*([a-z-]+))?\s*-->")
INCLUDE = re.compile(r"^<!-- heartwire-include:\s*(\S+)(?:\s+shift=(\d))?\s*-->$", re.M)
HEADING = re.compile(r"^(#{1,5}) ", re.M)
LINK = re.compile(r"(!?)\[([^\]]*)\]\(([^)\s]+)\)")
ROLE = re.compile(r":(?:class|func|meth|mod|data|attr|exc|obj):<code>(~?)([^<]+)</code>")
#: The width the help text is wrapped at (argparse reads $COLUMNS): what a code block shows.
WIDTH = "78"
#: Files outside docs/ that a page includes whole: links to them go to that page.
INCLUDED = {
    "README.md": "index.md",
    "benches/results.md": "benchmarks.md",
    "benches/README.md": "benchmarks-howto.md",
}
#: Nav entries that other branches add: left out of the nav while the file is missing.
OPTIONAL = frozenset({"asyncio.md", "failover.md"})


def _help(command: str | None) -> str:
    from heartwire.cli import _parser

    old = os.environ.get("COLUMNS")
    os.environ["COLUMNS"] = WIDTH
    try:
        parser = _parser()
        if command is not None:
            sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
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


def subcommands() -> list[str]:
    """Every subcommand of ``heartwire``, in the parser's order (tests/package checks the CLI
    page shows each one's help)."""
    from heartwire.cli import _parser

    sub = next(a for a in _parser()._actions if isinstance(a, argparse._SubParsersAction))
    return list(sub.choices)


def _map_link(target: str, source: str, page: str) -> str | None:
    """Where a link ``target`` written in the repository file ``source`` goes from the docs page
    ``page`` (both paths from the root); None when it is not a page of the site."""
    path, _, anchor = target.partition("#")
    if not path or re.match(r"^[a-z][a-z0-9+.-]*:", path) or path.startswith("/"):
        return target  # an anchor, a URL, an absolute path: as written
    resolved = posixpath.normpath(posixpath.join(posixpath.dirname(source), path))
    if resolved.startswith("docs/"):
        dest = resolved[len("docs/") :]
    elif resolved in INCLUDED:
        dest = INCLUDED[resolved]
    else:
        return None
    rel = posixpath.relpath(dest, posixpath.dirname(page) or ".")
    return rel + (f"#{anchor}" if anchor else "")


def include(source: str, page: str, shift: int = 0) -> str:
    """The text of the repository file ``source`` as the docs page ``page`` shows it, its headings
    ``shift`` levels down (under a page's own title)."""
    text = (ROOT / source).read_text()

    def link(m: re.Match[str]) -> str:
        bang, label, target = m.groups()
        mapped = _map_link(target, source, page)
        if mapped is not None:
            return f"{bang}[{label}]({mapped})"
        path = posixpath.normpath(posixpath.join(posixpath.dirname(source), target))
        plain = label.strip("`")
        if plain in (target, path, posixpath.basename(path)):
            return f"`{path}`"
        return f"{label} (`{path}`)"

    # fenced code is copied as it is: only the prose's links are mapped
    parts = re.split(r"(^```.*?^```)", text, flags=re.S | re.M)

    def prose(part: str) -> str:
        part = LINK.sub(link, part)
        return HEADING.sub(lambda m: "#" * (len(m.group(1)) + shift) + " ", part) if shift else part

    return "".join(p if p.startswith("```") else prose(p) for p in parts)


def _prune(nav: list[Any], docs: Path) -> list[Any]:
    out: list[Any] = []
    for item in nav:
        value = next(iter(item.values())) if isinstance(item, dict) else item
        if isinstance(value, list):
            value = _prune(value, docs)
            if value:
                out.append({next(iter(item)): value})
        elif value in OPTIONAL and not (docs / value).exists():
            continue
        else:
            out.append(item)
    return out


def on_config(config: Any, **kwargs: Any) -> Any:
    if config.nav:
        config.nav = _prune(config.nav, Path(config.docs_dir))
    return config


def on_page_markdown(markdown: str, page: Any, **kwargs: Any) -> str:
    where = page.file.src_uri
    markdown = INCLUDE.sub(lambda m: include(m.group(1), where, int(m.group(2) or 0)), markdown)
    return HELP.sub(lambda m: _help(m.group(1)), markdown)


def _role(match: re.Match[str]) -> str:
    name = match.group(2)
    if match.group(1):
        name = name.rsplit(".", 1)[-1]
    return f"<code>{name}</code>"


def on_page_content(html: str, **kwargs: Any) -> str:
    return ROLE.sub(_role, html)
