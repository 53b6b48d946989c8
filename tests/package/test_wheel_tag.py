"""``scripts/wheel``'s tag check (``--check-tag FILE``) refuses what a package index would: a
``linux_x86_64`` wheel, and a tag ``auditwheel show`` disagrees with. Run on copies of the wheel
``scripts/wheel`` built (``target/dist``; CI builds it before pytest), renamed."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
VENV = Path(sys.executable).parent.parent
BUILT = sorted((ROOT / "target" / "dist").glob("heartwire-*-cp310-abi3-manylinux*.whl"))

pytestmark = [
    pytest.mark.skipif(not BUILT, reason="no wheel in target/dist: run scripts/wheel first"),
    pytest.mark.skipif(
        not (VENV / "bin" / "auditwheel").exists(), reason=f"auditwheel not in {VENV}"
    ),
]


def check_tag(wheel: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(ROOT / "scripts" / "wheel"), "--check-tag", str(wheel)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        env={**os.environ, "VENV": str(VENV)},
    )


def renamed(tmp_path: Path, platform: str) -> Path:
    copy = tmp_path / f"heartwire-0.1.0-cp310-abi3-{platform}.whl"
    shutil.copyfile(BUILT[-1], copy)
    return copy


def test_the_built_wheel_passes() -> None:
    done = check_tag(BUILT[-1])
    assert done.returncode == 0, done.stderr
    assert "auditwheel show: consistent with manylinux_" in done.stdout, done.stdout


def test_a_linux_tag_is_refused(tmp_path: Path) -> None:
    done = check_tag(renamed(tmp_path, "linux_x86_64"))
    assert done.returncode == 1, (done.stdout, done.stderr)
    assert "platform tag linux_x86_64 is not manylinux" in done.stderr, done.stderr


def test_a_tag_auditwheel_disagrees_with_is_refused(tmp_path: Path) -> None:
    done = check_tag(renamed(tmp_path, "manylinux_2_5_x86_64"))
    assert done.returncode == 1, (done.stdout, done.stderr)
    assert "the wheel is tagged manylinux_2_5_x86_64" in done.stderr, done.stderr
