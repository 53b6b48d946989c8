"""The package's layers: read every module of ``heartwire`` with ``ast``, build the import graph
(module-level, ``TYPE_CHECKING`` and function-local imports alike) and check that no unit imports
a higher layer and that the units (the packages and modules listed in :data:`LAYERS`) import
each other in no circle.

A new module must be placed in :data:`LAYERS` (the test names it otherwise): where it goes is a
decision, made here and in docs/internals.md's list of layers.
"""

from __future__ import annotations

import ast
import itertools
from pathlib import Path

import heartwire

ROOT = Path(heartwire.__file__).parent

#: Bottom up; a unit may import units of its own layer or lower ones, never higher ones.
LAYERS: tuple[tuple[str, tuple[str, ...]], ...] = (
    # the native core and the helpers every layer shares
    (
        "base",
        (
            "heartwire._core",
            "heartwire._validate",
            "heartwire._throttle",
            "heartwire._exit",
            "heartwire._spark_session",
            "heartwire._text",
        ),
    ),
    # plain data and timing: events, the publishers' executor, the metrics' tally, silences,
    # maintenance windows
    (
        "helpers",
        (
            "heartwire.events",
            "heartwire.executor",
            "heartwire.tally",
            "heartwire.policy",
            "heartwire.maintenance",
        ),
    ),
    # brokers: the embedded one and STOMP (with its queues and link events)
    ("transport", ("heartwire.transport",)),
    # reliable delivery, on a backend per transport
    ("reliable", ("heartwire.reliable",)),
    # what travels and how events reach listeners (beat validates topics with transport)
    # (control: the signed control messages, signed as beats are; aio: the bridges from
    # listener threads and check threads to an asyncio loop, which monitors and publishers use)
    (
        "plumbing",
        (
            "heartwire.beat",
            "heartwire.control",
            "heartwire.listeners",
            "heartwire.dispatch",
            "heartwire.feed",
            "heartwire.aio",
        ),
    ),
    # the services built on them
    (
        "services",
        (
            "heartwire.publisher",
            "heartwire.monitor",
            "heartwire.groups",
            "heartwire.checks",
            "heartwire.eventlog",
            "heartwire.alerts",
            "heartwire.metrics",
            "heartwire.core",
        ),
    ),
    # tools: the command line, the demo, reports and Spark
    (
        "tools",
        (
            "heartwire.cli",
            "heartwire.__main__",
            "heartwire.demo",
            "heartwire.report",
            "heartwire.report_html",
            "heartwire.report_cmd",
            "heartwire.status",
            "heartwire.status_view",
            "heartwire.spark",
        ),
    ),
    # the package's __init__: the user API, re-exporting every layer
    ("api", ("heartwire",)),
)


#: Circles known and left, each with why (none: report.py and report_html.py were one, until
#: report_cmd.py took the command that joins them).
KNOWN_CIRCLES: set[frozenset[str]] = set()


def _modules() -> dict[str, Path]:
    out = {}
    for path in sorted(ROOT.rglob("*.py")):
        parts = list(path.relative_to(ROOT.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        out[".".join(parts)] = path
    return out


MODULES = _modules()
NATIVE = {"heartwire._core"}  # the compiled extension (its stub is _core.pyi)


def _imports(name: str, path: Path) -> set[str]:
    """The heartwire modules ``name`` imports, wherever the import statement is."""
    tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - node.level + 1]
                mod = ".".join([*base, node.module] if node.module else base)
            else:
                mod = node.module or ""
            for alias in node.names:
                sub = f"{mod}.{alias.name}"
                # ``from heartwire import checks`` imports the module heartwire.checks
                found.add(sub if sub in MODULES or sub in NATIVE else mod)
    return {m for m in found if m == "heartwire" or m.startswith("heartwire.")}


def _unit(module: str) -> str | None:
    """The entry of LAYERS holding ``module`` (the longest one that is it or a parent)."""
    best = None
    for _, units in LAYERS:
        for unit in units:
            if (module == unit or module.startswith(unit + ".")) and (
                best is None or len(unit) > len(best)
            ):
                best = unit
    return best


LEVEL = {unit: i for i, (_, units) in enumerate(LAYERS) for unit in units}
LAYER_NAME = {unit: layer for layer, units in LAYERS for unit in units}


def _unit_graph() -> dict[str, dict[str, list[str]]]:
    """unit -> imported unit -> the imports (``module -> module``) that make the edge."""
    graph: dict[str, dict[str, list[str]]] = {}
    for name, path in MODULES.items():
        src = _unit(name)
        assert src is not None
        for target in sorted(_imports(name, path)):
            dst = _unit(target)
            assert dst is not None, f"{name} imports {target}, which no layer holds"
            if dst != src:
                graph.setdefault(src, {}).setdefault(dst, []).append(f"{name} -> {target}")
    return graph


def test_every_module_has_a_layer() -> None:
    missing = sorted(m for m in MODULES if _unit(m) is None)
    assert not missing, f"modules in no layer (add them to LAYERS in {__file__}): {missing}"


def test_no_module_imports_a_higher_layer() -> None:
    upward = [
        f"{edge} ({LAYER_NAME[src]} imports {LAYER_NAME[dst]})"
        for src, targets in _unit_graph().items()
        for dst, edges in targets.items()
        if LEVEL[dst] > LEVEL[src]
        for edge in edges
    ]
    assert not upward, "imports of a higher layer:\n" + "\n".join(upward)


def test_no_circle_between_units() -> None:
    graph = {src: set(targets) for src, targets in _unit_graph().items()}
    circles: list[list[str]] = []
    state: dict[str, int] = {}  # 1: on the current path, 2: done

    def visit(unit: str, path: list[str]) -> None:
        state[unit] = 1
        for nxt in sorted(graph.get(unit, ())):
            if state.get(nxt) == 1:
                circle = path[path.index(nxt) :]
                if frozenset(circle) not in KNOWN_CIRCLES:
                    circles.append([*circle, nxt])
            elif nxt not in state:
                visit(nxt, [*path, nxt])
        state[unit] = 2

    for unit in sorted(graph):
        if unit not in state:
            visit(unit, [unit])
    edges = _unit_graph()
    shown = [
        " -> ".join(c) + ": " + "; ".join(e for a, b in itertools.pairwise(c) for e in edges[a][b])
        for c in circles
    ]
    assert not circles, "units importing each other in a circle:\n" + "\n".join(shown)


def test_the_checker_sees_every_kind_of_import(tmp_path: Path) -> None:
    # The checker itself: module-level, TYPE_CHECKING, function-local and relative imports.
    src = tmp_path / "m.py"
    src.write_text(
        "from typing import TYPE_CHECKING\n"
        "from heartwire import _validate, events\n"
        "if TYPE_CHECKING:\n"
        "    from heartwire.reliable.transaction import Transaction\n"
        "def f():\n"
        "    from heartwire.monitor import HeartbeatMonitor\n"
        "    import heartwire.cli\n"
        "from . import patterns\n"
    )
    found = _imports("heartwire.transport.m", src)
    assert found == {
        "heartwire._validate",
        "heartwire.events",
        "heartwire.reliable.transaction",
        "heartwire.monitor",
        "heartwire.cli",
        "heartwire.transport.patterns",
    }
