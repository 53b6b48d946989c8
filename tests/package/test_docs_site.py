"""The docs site: ``mkdocs build --strict`` passes (broken links, pages missing from the nav and
docstrings mkdocstrings cannot read fail it), and the generated parts stay true to the code: the
CLI page shows every subcommand's help, the concepts page's timeline is what the monitor does,
its events table names every field, the included files' links are mapped.
"""

from __future__ import annotations

import contextlib
import dataclasses
import importlib.util
import io
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

import heartwire as hw

ROOT = Path(__file__).resolve().parents[2]


def _script(name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(name, ROOT / "scripts" / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


hooks = _script("docs_hooks")


def test_site_builds_strict(tmp_path: Path) -> None:
    pytest.importorskip("mkdocs", reason="the docs extra (pip install '.[docs]') is not installed")
    pytest.importorskip("mkdocstrings_handlers.python", reason="mkdocstrings[python] missing")
    site = tmp_path / "site"
    env = dict(os.environ, NO_MKDOCS_2_WARNING="1")
    # the hooks import the heartwire this test runs against (the work tree's, or the installed one)
    env["PYTHONPATH"] = os.pathsep.join(
        [str(Path(hw.__file__).parents[1]), *filter(None, [env.get("PYTHONPATH")])]
    )
    done = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(site)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    cli = (site / "cli" / "index.html").read_text()
    for command in hooks.subcommands():
        assert f"usage: heartwire {command}" in cli, f"the CLI page lacks {command}'s help"
    api = (site / "reference" / "api" / "index.html").read_text()
    assert 'id="heartwire.HeartbeatMonitor"' in api
    assert ":class:" not in api, "a Sphinx role was left in the API reference"
    core = (site / "reference" / "core" / "index.html").read_text()
    assert 'id="heartwire.core.Detector"' in core  # documented from the _core.pyi stub
    bench = (site / "benchmarks" / "index.html").read_text()
    assert "Benchmark results" in bench and "<table>" in bench  # benches/results.md, rendered
    home = (site / "index.html").read_text()
    assert "Quick start" in home and 'href="getting-started/"' in home
    assert (site / "img" / "timeline.svg").exists()


def test_api_reference_has_every_public_name() -> None:
    page = (ROOT / "docs" / "reference" / "api.md").read_text()
    modules = {"checks": "checks.md", "core": "core.md"}  # pages of their own
    for name in hw.__all__:
        if name in modules:
            assert (
                f"::: heartwire.{name}\n"
                in (ROOT / "docs" / "reference" / modules[name]).read_text()
            )
        else:
            assert f"::: heartwire.{name}\n" in page, f"docs/reference/api.md lacks hw.{name}"


def test_cli_page_has_every_subcommand() -> None:
    page = (ROOT / "docs" / "cli.md").read_text()
    missing = [c for c in hooks.subcommands() if f"<!-- heartwire-help: {c} -->" not in page]
    assert not missing, f"docs/cli.md shows no help for {missing}"


def test_documented_command_lines_parse() -> None:
    """Every ``heartwire ...`` line of a shell block in the docs and the README is accepted by the
    CLI's parser (optional parts in brackets taken as given): no option the CLI does not have."""
    from heartwire.cli import _parser

    block = re.compile(r"^```(?:bash|sh|console|text)\n(.*?)^```", re.S | re.M)
    lines = []
    for page in [ROOT / "README.md", *sorted((ROOT / "docs").glob("**/*.md"))]:
        for code in block.findall(page.read_text()):
            for line in code.replace("\\\n", " ").splitlines():
                if line.strip().startswith("heartwire "):
                    lines.append((page.relative_to(ROOT), line.strip()))
    assert len(lines) >= 15, lines
    for page, line in lines:
        args = shlex.split(line.replace("[", " ").replace("]", " "), comments=True)[1:]
        args = args[:-1] if args[-1:] == ["&"] else args
        err = io.StringIO()
        try:
            with contextlib.redirect_stderr(err):
                _parser().parse_args(args)
        except SystemExit:
            why = err.getvalue().strip().splitlines()[-1:]
            pytest.fail(f"{page}: {line!r} does not parse: {why}")


def test_help_block_is_the_parsers() -> None:
    block = hooks.HELP.sub(lambda m: hooks._help(m.group(1)), "<!-- heartwire-help: fail -->")
    assert block.startswith("```text\nusage: heartwire fail") and "--reason REASON" in block
    with pytest.raises(ValueError, match="no subcommand 'nope'"):
        hooks._help("nope")


def test_timeline_is_what_the_monitor_does() -> None:
    timeline = _script("docs_timeline")
    story = timeline.run()
    assert [kind for _, kind, _ in story.events] == ["failed", "failed", "resumed"]
    assert story.deadlines == [1.5, 2.5] and story.beats == [0.5, 3.0]
    assert (ROOT / "docs" / "img" / "timeline.svg").read_text() == timeline.draw(story), (
        "docs/img/timeline.svg is out of date: run scripts/docs_timeline.py"
    )


def test_concepts_table_names_every_event_field() -> None:
    page = (ROOT / "docs" / "concepts.md").read_text()
    lines = [line for line in page.splitlines() if line.startswith("| `")]
    rows = {line.split("|")[1].strip(): line for line in lines}
    events = (
        hw.Started, hw.Stopped, hw.Received, hw.Failed, hw.Resumed, hw.Flapping, hw.LocalPause,
        hw.Lagging, hw.CaughtUp, hw.Disconnected, hw.Reconnected, hw.ExceptionEvent, hw.Sent,
    )  # fmt: skip
    for event in events:
        row = next((r for key, r in rows.items() if f"`{event.__name__}`" in key), None)
        assert row is not None, f"docs/concepts.md has no row for {event.__name__}"
        for field in dataclasses.fields(event):
            if field.name != "wall_offset":  # shown as ev.wall_at, said above the table
                assert f"`{field.name}`" in row, f"{event.__name__}.{field.name} not in its row"
    for state in hw.State:
        assert f"`{state.value}`" in rows, f"docs/concepts.md has no row for State.{state.name}"


def test_included_links_are_mapped() -> None:
    text = hooks.include("benches/results.md", "benchmarks.md")
    assert "](README.md)" not in text and "](benchmarks-howto.md)" in text
    howto = hooks.include("benches/README.md", "benchmarks-howto.md")
    assert "](benchmarks.md)" in howto  # results.md: the page that includes it
    assert "`benches/wire.py`" in howto  # a source file: its path as code, no link
    home = hooks.include("README.md", "index.md")
    assert "](concepts.md)" in home and "](howto/embedded.md)" in home
    assert "```python\nimport threading" in home  # code blocks are copied as they are
    assert hooks.include("benches/results.md", "benchmarks.md", shift=1).startswith("## ")


def test_optional_pages_leave_the_nav_while_missing(tmp_path: Path) -> None:
    (tmp_path / "index.md").write_text("# home\n")
    (tmp_path / "failover.md").write_text("# failover\n")
    nav = [
        {"Home": "index.md"},
        {"asyncio": "asyncio.md"},
        {"How-to": [{"Failover options": "failover.md"}, {"asyncio again": "asyncio.md"}]},
    ]
    assert hooks._prune(nav, tmp_path) == [
        {"Home": "index.md"},
        {"How-to": [{"Failover options": "failover.md"}]},
    ]
    assert {"asyncio.md", "failover.md"} <= hooks.OPTIONAL
