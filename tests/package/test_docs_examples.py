"""Every ```python example of the docs site runs: each page under docs/ (subfolders included) and
the README (the site's home page includes it), each block in a fresh namespace.

Examples that talk to the test brokers (a ``stomp://`` or ``failover:`` URL on 127.0.0.1) get
the ``brokers`` fixture, those that use a TLS broker URL the ``tls_broker`` one (so they carry
the ``brokers`` mark: ``-m "not brokers"`` leaves them out), and those that start Spark the
session ``spark`` fixture (skipped without Java), whose session their ``getOrCreate`` returns.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.brokers import brokers, tls_broker  # noqa: F401  (the session fixtures)

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
BLOCK = re.compile(r"^```python\n(.*?)^```", re.S | re.M)
#: What in an example's code needs which fixture.
NEEDS = (
    (re.compile(r"stomp\+ssl://127\.0\.0\.1"), "tls_broker"),
    (re.compile(r"(stomp://|failover:\(stomp://)127\.0\.0\.1"), "brokers"),
    (re.compile(r"\bSparkSession\b"), "spark"),
)


def pages() -> list[Path]:
    return [ROOT / "README.md", *sorted(DOCS.glob("**/*.md"))]


def examples() -> list[tuple[str, str]]:
    found = []
    for page in pages():
        for i, code in enumerate(BLOCK.findall(page.read_text())):
            found.append((f"{page.relative_to(ROOT)}#{i + 1}", code))
    return found


def fixtures(code: str) -> list[str]:
    return [name for pattern, name in NEEDS if pattern.search(code)]


def needing(fixture: str | None) -> list[tuple[str, str]]:
    """The examples whose first need (:data:`NEEDS` order) is ``fixture``; None: those with none."""
    return [(w, c) for w, c in examples() if (fixtures(c) or [None])[0] == fixture]


def run(where: str, code: str) -> None:
    exec(compile(code, where, "exec"), {"__name__": "docs_example"})


@pytest.mark.parametrize(("where", "code"), needing(None), ids=[w for w, _ in needing(None)])
def test_example_runs(where: str, code: str) -> None:
    run(where, code)


@pytest.mark.usefixtures("brokers")
@pytest.mark.parametrize(
    ("where", "code"), needing("brokers"), ids=[w for w, _ in needing("brokers")]
)
def test_broker_example_runs(where: str, code: str) -> None:
    run(where, code)


@pytest.mark.usefixtures("brokers", "tls_broker")
@pytest.mark.parametrize(
    ("where", "code"), needing("tls_broker"), ids=[w for w, _ in needing("tls_broker")]
)
def test_tls_example_runs(where: str, code: str) -> None:
    run(where, code)


@pytest.mark.parametrize(("where", "code"), needing("spark"), ids=[w for w, _ in needing("spark")])
def test_spark_example_runs(where: str, code: str, spark: object) -> None:
    run(where, code)


def test_there_are_examples() -> None:
    found = {where.split("#")[0] for where, _ in examples()}
    # the pages whose examples this session's docs rely on, subfolders and the README included
    for page in ("README.md", "docs/concepts.md", "docs/howto/embedded.md", "docs/howto/spark.md"):
        assert page in found, f"no python example found in {page}"


def test_broker_examples_get_the_brokers() -> None:
    """The fixture choice is what marks them: a broker URL in the code asks for the brokers."""
    assert fixtures('hw.connect("stomp://127.0.0.1:61613")') == ["brokers"]
    assert fixtures('hw.connect("failover:(stomp://127.0.0.1:1,stomp://127.0.0.1:61613)")') == [
        "brokers"
    ]
    assert fixtures('hw.connect("stomp+ssl://127.0.0.1:61612", ssl_ca_file=CA)') == ["tls_broker"]
    assert fixtures("hw.connect()") == []
