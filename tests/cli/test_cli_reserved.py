"""``heartwire publish`` and ``heartwire fail`` refuse heartwire's own topics (``_hw.``): no
monitor takes them for beats, and keyed monitors would count each as a malformed control
message (second review of issue 17, finding 4)."""

from __future__ import annotations

import pytest

from tests.cli.test_cli_args import run_cli


@pytest.mark.parametrize(
    "args",
    [
        ["publish", "_hw.control", "--count", "1"],
        ["fail", "_hw.control", "--reason", "x"],
    ],
)
def test_reserved_topics_are_refused_with_exit_2_naming_them(args: list[str]) -> None:
    proc = run_cli(*args)
    assert proc.returncode == 2, (proc.returncode, proc.stderr[-500:])
    assert "topic '_hw.control' is under '_hw.'" in proc.stderr, proc.stderr[-500:]
    assert "Traceback" not in proc.stderr
