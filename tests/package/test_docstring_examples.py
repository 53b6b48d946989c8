"""The code the API reference shows from docstrings runs too, as the docs pages' examples do.

The reference pages (``::: name`` lines in docs/reference/*.md) render those objects' docstrings
and their public members'; a Sphinx literal block (a paragraph ending in ``::``, then an indented
block) in any of them is a code example on the site. Each runs in a fresh namespace holding the
names such sketches take as given (``hw``, ``broker``, ``mon``, ``spark``, ``path``...), in a
temporary directory.
"""

from __future__ import annotations

import importlib
import inspect
import re
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import heartwire as hw

ROOT = Path(__file__).resolve().parents[2]
LITERAL = re.compile(r"::\n\n((?:(?:    .*)?\n)+)")
DIRECTIVE = re.compile(r"^::: ([\w.]+)$", re.M)


def _resolve(name: str) -> Any:
    parts = name.split(".")
    for i in range(len(parts), 0, -1):
        try:
            obj: Any = importlib.import_module(".".join(parts[:i]))
        except ImportError:
            continue
        for attr in parts[i:]:
            obj = getattr(obj, attr)
        return obj
    raise ImportError(name)


def _rendered(obj: Any, depth: int = 0) -> Iterator[tuple[str, Any]]:
    """``obj`` and the public members mkdocstrings renders with it (modules: what they define)."""
    yield getattr(obj, "__qualname__", getattr(obj, "__name__", repr(obj))), obj
    if depth >= 2 or not (inspect.ismodule(obj) or inspect.isclass(obj)):
        return
    for name, member in vars(obj).items():
        if name.startswith("_"):
            continue
        if inspect.ismodule(obj) and getattr(member, "__module__", None) != obj.__name__:
            continue  # an import, rendered where it is defined if at all
        if inspect.isclass(member) or inspect.isfunction(member) or inspect.ismethod(member):
            yield from _rendered(member, depth + 1)


def examples() -> list[tuple[str, str]]:
    found: dict[str, str] = {}
    for page in sorted((ROOT / "docs" / "reference").glob("*.md")):
        for name in DIRECTIVE.findall(page.read_text()):
            for where, obj in _rendered(_resolve(name)):
                doc = inspect.getdoc(obj) or ""
                for i, block in enumerate(LITERAL.findall(doc + "\n")):
                    found.setdefault(f"{name}:{where}#{i + 1}", textwrap.dedent(block))
    # one object reached from two pages (a class and its module) is one example
    unique: dict[str, str] = {}
    for where, code in found.items():
        if code not in unique.values():
            unique[where] = code
    return sorted(unique.items())


def _namespace(tmp_path: Path) -> dict[str, Any]:
    broker = hw.connect()
    return {
        "__name__": "docstring_example",
        "hw": hw,
        "broker": broker,
        "mon": hw.HeartbeatMonitor(broker, "svc.>", period=1.0),
        "HeartbeatPublisher": hw.HeartbeatPublisher,
        "checks": hw.checks,
        "path": str(tmp_path / "heartbeats"),
    }


@pytest.mark.parametrize(
    ("where", "code"),
    [e for e in examples() if "spark" not in e[1]],
    ids=[w for w, c in examples() if "spark" not in c],
)
def test_docstring_example_runs(
    where: str, code: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    exec(compile(code, where, "exec"), _namespace(tmp_path))


@pytest.mark.parametrize(
    ("where", "code"),
    [e for e in examples() if "spark" in e[1]],
    ids=[w for w, c in examples() if "spark" in c],
)
def test_docstring_spark_example_runs(
    where: str, code: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, spark: Any
) -> None:
    from heartwire import spark as hw_spark
    from heartwire.eventlog import EventLog

    monkeypatch.chdir(tmp_path)
    ns = _namespace(tmp_path)
    ns.update(spark=spark, EventLog=EventLog, read_events=hw_spark.read_events)
    ns.update(outages=hw_spark.outages, availability=hw_spark.availability)
    exec(compile(code, where, "exec"), ns)


def test_the_reference_shows_examples() -> None:
    found = {where.split(":")[0] for where, _ in examples()}
    assert {"heartwire.core", "heartwire.checks", "heartwire.metrics"} <= found, found
