"""Every ```python example under docs/ runs (each file's examples in order, in one namespace)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

DOCS = Path(__file__).resolve().parents[2] / "docs"
BLOCK = re.compile(r"^```python\n(.*?)^```", re.S | re.M)


def examples() -> list[tuple[str, str]]:
    found = []
    for page in sorted(DOCS.glob("**/*.md")):
        for i, code in enumerate(BLOCK.findall(page.read_text())):
            found.append((f"{page.relative_to(DOCS)}#{i + 1}", code))
    return found


@pytest.mark.parametrize(("where", "code"), examples(), ids=[w for w, _ in examples()])
def test_example_runs(where: str, code: str, capsys: pytest.CaptureFixture[str]) -> None:
    exec(compile(code, where, "exec"), {"__name__": "docs_example"})


def test_there_are_examples() -> None:
    assert examples(), "no python examples found under docs/"
