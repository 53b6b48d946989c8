"""Smoke test of an installed heartwire: ``python wheel_smoke.py`` (no pytest needed).

``scripts/wheel`` runs it in a fresh venv holding only the built wheel and its dependencies, with
no Rust toolchain on the PATH; ``tests/package/test_wheel_smoke.py`` runs the same checks against
the development build. It checks what a user of the wheel meets first: the package and its native
core import, the typing files ship (``py.typed``, ``_core.pyi``), the console script answers
``--help``, and a monitor watching a publisher over the embedded broker sees one failure and one
resume on the real clock (the native driver thread detects the failure), each within a bounded
wait. Exit status 0 when every check passed; an ``AssertionError`` saying which failed otherwise.
"""

from __future__ import annotations

import os
import queue
import shutil
import subprocess
import sys
import time
from pathlib import Path

import heartwire as hw
import heartwire.core

#: The longest any one step may take before the smoke test fails (seconds); a loaded CI machine
#: needs far less: a failure is due 2 periods (0.1 s each) after the publisher pauses.
WAIT = 10.0


def check_files() -> Path:
    """The package directory, after checking its typing files and native core ship in it."""
    package = Path(hw.__file__).resolve().parent
    for name in ("py.typed", "_core.pyi"):
        assert (package / name).is_file(), f"{name} is missing from {package}"
    cores = sorted(p.name for p in package.glob("_core*.so"))
    assert cores == ["_core.abi3.so"], f"expected one abi3 native core in {package}, got {cores}"
    assert heartwire.core.Detector.__module__.startswith("heartwire"), heartwire.core.Detector
    return package


def check_cli() -> None:
    """``heartwire --help`` from the console script beside this interpreter (or on the PATH)."""
    beside = Path(sys.executable).parent / "heartwire"
    script = str(beside) if beside.exists() else shutil.which("heartwire")
    assert script, "the heartwire console script is neither beside python nor on the PATH"
    done = subprocess.run(
        [script, "--help"], capture_output=True, text=True, timeout=WAIT, check=False
    )
    assert done.returncode == 0, f"heartwire --help exited {done.returncode}: {done.stderr}"
    for command in ("demo", "publish", "watch"):
        assert command in done.stdout, f"heartwire --help does not list {command!r}"


class Events(hw.SubscriberListener):
    """Failed and resumed events as they arrive, for bounded waits."""

    def __init__(self) -> None:
        self.seen: queue.Queue[hw.Failed | hw.Resumed] = queue.Queue()

    def on_failed(self, ev: hw.Failed) -> None:
        self.seen.put(ev)

    def on_resumed(self, ev: hw.Resumed) -> None:
        self.seen.put(ev)

    def next(self, what: str) -> hw.Failed | hw.Resumed:
        try:
            return self.seen.get(timeout=WAIT)
        except queue.Empty:
            raise AssertionError(f"no {what} event within {WAIT} s") from None


def check_failure_and_resume() -> None:
    """A publisher paused and resumed: the monitor reports one failure, then one resume."""
    broker = hw.connect()
    events = Events()
    mon = hw.HeartbeatMonitor(broker, "smoke.>", period=0.1, allowed_misses=2, listeners=[events])
    pub = hw.HeartbeatPublisher(broker, "smoke.svc", period=0.1)
    with mon.start(), pub.start():
        # The monitor learns the topic from its first beat: poll for it, within WAIT.
        deadline = time.monotonic() + WAIT
        while not any(s.topic == "smoke.svc" for s in mon.statuses()):
            assert time.monotonic() < deadline, f"smoke.svc not heard within {WAIT} s"
            time.sleep(0.02)
        assert mon.status("smoke.svc").state is hw.State.ALIVE, mon.status("smoke.svc")
        pub.pause()
        failed = events.next("failed")
        assert isinstance(failed, hw.Failed) and failed.topic == "smoke.svc", failed
        assert mon.status("smoke.svc").state is hw.State.FAILED, mon.status("smoke.svc")
        pub.resume()
        resumed = events.next("resumed")
        assert isinstance(resumed, hw.Resumed) and resumed.topic == "smoke.svc", resumed
        assert resumed.downtime > 0, resumed
    broker.close()


def main() -> int:
    package = check_files()
    check_cli()
    check_failure_and_resume()
    print(f"smoke: heartwire {hw.__version__} from {package} (Python {sys.version.split()[0]}):")
    print("smoke: imports, py.typed and _core.pyi, --help, one failure and one resume: ok")
    if os.environ.get("HEARTWIRE_SMOKE_NO_CARGO"):
        assert shutil.which("cargo") is None, "cargo is on the PATH of a no-Rust smoke run"
    return 0


if __name__ == "__main__":
    sys.exit(main())
