"""The example Prometheus files in docs/prometheus/ (issue 17): the alerting rules pass
``promtool check rules`` and their unit tests (``promtool test rules``), the Alertmanager
snippet passes ``amtool check-config``, and every heartwire series the rules name is one the
monitor exports. ``scripts/tools`` (called by ``scripts/test``) installs promtool and amtool
from Debian's packages; without them those checks skip, saying so."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

from heartwire.metrics import PER_TOPIC, SERIES

DOCS = Path(__file__).resolve().parents[2] / "docs" / "prometheus"
MISSING = "not installed: run scripts/tools (Debian packages prometheus, prometheus-alertmanager)"


def run(tool: str, *args: str) -> str:
    exe = shutil.which(tool)
    if exe is None:
        pytest.skip(f"{tool} {MISSING}")
    done = subprocess.run(
        [exe, *args], cwd=DOCS, capture_output=True, text=True, timeout=60, check=False
    )
    out = done.stdout + done.stderr
    assert done.returncode == 0, f"{tool} {' '.join(args)} failed:\n{out}"
    return out


def test_rules_pass_promtool_check() -> None:
    out = run("promtool", "check", "rules", "rules.yml")
    assert "SUCCESS" in out


def test_rules_fire_as_their_unit_tests_expect() -> None:
    out = run("promtool", "test", "rules", "rules_test.yml")
    assert "SUCCESS" in out


def test_alertmanager_snippet_passes_amtool() -> None:
    out = run("amtool", "check-config", "alertmanager.yml")
    assert "SUCCESS" in out and "2 inhibit rules" in out


def test_rules_name_only_exported_series() -> None:
    exported: set[str] = set()
    for name, (kind, _) in {**SERIES, **PER_TOPIC}.items():
        if kind == "histogram":
            exported |= {f"{name}_bucket", f"{name}_count", f"{name}_sum"}
        else:
            exported.add(name)
    text = (DOCS / "rules.yml").read_text() + (DOCS / "rules_test.yml").read_text()
    named = set(re.findall(r"\bheartwire_[a-z_]+(?![a-z_:])", text))  # not the label
    assert named, "no heartwire series in the rules"
    assert named <= exported, f"not exported: {sorted(named - exported)}"
