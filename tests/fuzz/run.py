"""Run the fuzz targets under atheris (coverage-guided, libFuzzer): ``scripts/fuzz --help``.

Each target runs in a child process of its own (atheris ends its process when done), seeded
with :data:`~tests.fuzz.targets.SEEDS` / ``URL_SEEDS`` and keeping its corpus in
``--corpus`` (default ``/tmp/heartwire-fuzz``). A finding is an uncaught exception: libFuzzer
prints it, writes the input as ``crash-<target>-*`` beside the corpus, and the run fails.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
from pathlib import Path

NAMES = ("decode", "url", "frame")


def _child(name: str, runs: int, max_len: int, corpus: Path) -> None:
    import atheris

    with atheris.instrument_imports(include=["heartwire", "tests.fuzz"]):
        from tests.fuzz import targets

    corpus.mkdir(parents=True, exist_ok=True)
    seeds = {
        "decode": targets.SEEDS,
        "url": [s.encode() for s in targets.URL_SEEDS],
        "frame": targets.FRAME_SEEDS,
    }[name]
    for i, seed in enumerate(seeds):
        (corpus / f"seed-{i}").write_bytes(seed)
    target = targets.TARGETS[name]
    executed = [0]

    def one(data: bytes) -> None:
        executed[0] += 1
        target(data)
        if executed[0] == runs or executed[0] % 100_000 == 0:
            summary()  # libFuzzer ends the process without running atexit hooks

    def summary() -> None:
        line = f"fuzz {name}: {executed[0]} inputs run"
        rig = targets._RIG
        if rig is not None:
            stats = rig.mon.stats()
            line += (
                f"; frames {rig.frames}: {stats['beats']} beats recorded, rejected "
                f"{dict(sorted(stats['rejected'].items()))}, topics {len(rig.mon)} "
                f"(max_topics {targets.MAX_TOPICS})"
            )
        print(line, flush=True)

    argv = [sys.argv[0], f"-runs={runs}", f"-max_len={max_len}", "-print_final_stats=1"]
    argv.append(f"-artifact_prefix={corpus.parent}/crash-{name}-")
    atheris.Setup([*argv, str(corpus)], one)
    atheris.Fuzz()


def main() -> int:
    ap = argparse.ArgumentParser(prog="scripts/fuzz", description=__doc__)
    ap.add_argument("--runs", type=int, default=100_000, help="inputs per target (default 1e5)")
    ap.add_argument("--target", choices=(*NAMES, "all"), default="all")
    ap.add_argument("--max-len", type=int, default=4096, help="longest input, bytes")
    ap.add_argument("--corpus", type=Path, default=Path("/tmp/heartwire-fuzz"))
    ap.add_argument("--child", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        _child(args.child, args.runs, args.max_len, args.corpus / args.child)
        return 0
    failed = []
    for name in NAMES if args.target == "all" else (args.target,):
        t0 = time.monotonic()
        cmd = [sys.executable, "-m", "tests.fuzz.run", "--child", name, "--runs", str(args.runs)]
        cmd += ["--max-len", str(args.max_len), "--corpus", str(args.corpus)]
        rc = subprocess.call(cmd)
        print(f"fuzz {name}: exit {rc} in {time.monotonic() - t0:.1f} s", flush=True)
        if rc != 0:
            failed.append(name)
    if failed:
        print(f"fuzz: findings in {', '.join(failed)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
