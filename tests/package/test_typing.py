"""``mypy --strict`` on what users write: ``typing_user.py``, the examples of
``docs/asyncio.md``, and misuses it must refuse (the events and statuses are typed precisely,
not as ``Any``)."""

from __future__ import annotations

import asyncio
import os
import re
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

import heartwire
from tests.package import typing_user

pytest.importorskip("mypy", reason="mypy is in the dev extras")

HERE = Path(__file__).resolve().parent
DOCS = HERE.parents[1] / "docs"
BLOCK = re.compile(r"^```python\n(.*?)^```", re.S | re.M)
PACKAGE_ROOT = Path(heartwire.__file__).resolve().parents[1]  # the heartwire checked
INSTALLED = {Path(p).resolve() for k in ("purelib", "platlib") if (p := sysconfig.get_path(k))}

# Each line that must fail, with the error code mypy must give it.
MISUSE = """\
import heartwire as hw


async def misuse(mon: hw.HeartbeatMonitor, event: hw.StreamEvent) -> None:
    await mon.wait_for("svc.a", hw.State.PAUSED)  # error: arg-type
    print(event.missed)  # error: union-attr
    mon.events(overflow="lossy")  # error: arg-type
    status = mon.status("svc.a")
    print(status.last_seen + 1.0)  # error: operator
    if isinstance(event, hw.Failed):
        print(event.missed + 1, event.reason + "!")  # error: operator
"""


def mypy(
    files: list[Path], cache: Path, *, strict: bool = True, modules: tuple[str, ...] = ()
) -> list[tuple[str, int, str]]:
    """mypy's errors (``--strict`` unless told) on ``files`` and ``modules``: (file name,
    line, code)."""
    env = dict(os.environ)
    # The source tree (PYTHONPATH) is pointed at; an installed heartwire (CI's venv) mypy finds
    # by itself, and refuses site-packages in MYPYPATH.
    if PACKAGE_ROOT not in INSTALLED:
        env["MYPYPATH"] = str(PACKAGE_ROOT)
    args = [sys.executable, "-m", "mypy", *(["--strict"] if strict else [])]
    args += ["--follow-imports=silent", "--cache-dir", str(cache), "--show-error-codes"]
    args += ["--no-pretty", *(a for m in modules for a in ("-m", m))]
    run = subprocess.run(
        [*args, *map(str, files)], capture_output=True, text=True, env=env, timeout=300
    )
    errors = re.findall(r"^(.*?):(\d+): error: .*\[([a-z-]+)\]$", run.stdout, re.M)
    if run.returncode not in (0, 1) or (run.returncode == 1 and not errors):
        raise AssertionError(f"mypy did not run: {run.returncode}\n{run.stdout}{run.stderr}")
    return [(Path(f).name, int(line), code) for f, line, code in errors]


def test_mypy_strict_passes_on_user_code_and_refuses_misuse(tmp_path: Path) -> None:
    files = [HERE / "typing_user.py"]
    blocks = BLOCK.findall((DOCS / "asyncio.md").read_text())
    assert len(blocks) >= 2, "docs/asyncio.md lost its examples"
    for i, code in enumerate(blocks):
        files.append(tmp_path / f"asyncio_md_{i + 1}.py")
        files[-1].write_text(code)
    misuse = tmp_path / "misuse.py"
    misuse.write_text(MISUSE)
    files.append(misuse)
    errors = mypy(files, tmp_path / "cache")
    clean = [e for e in errors if e[0] != "misuse.py"]
    assert not clean, f"mypy --strict errors in user code: {clean}"
    expected = {
        (n + 1, m.group(1))
        for n, text in enumerate(MISUSE.splitlines())
        if (m := re.search(r"# error: ([a-z-]+)$", text))
    }
    assert {(line, code) for _, line, code in errors} == expected


def test_mypy_passes_on_the_publisher_module(tmp_path: Path) -> None:
    """The publisher's own code type-checks: its sharded send goes through the
    ``ShardedPublish`` protocol (mypy said ``"Transport" has no attribute "publish_sharded"``)."""
    errors = mypy([], tmp_path / "cache", strict=False, modules=("heartwire.publisher",))
    assert errors == [], f"mypy errors in heartwire.publisher: {errors}"


def test_the_user_module_runs() -> None:
    assert asyncio.run(typing_user.main()) == [
        "svc.db failed (1 missed)",
        "svc.api failed (1 missed, svc.db)",
        "svc.db: FAILED since 1.0",
        "[(<State.FAILED: 'FAILED'>, 2)]",
    ]
