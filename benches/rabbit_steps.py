"""N topics beating at 1 Hz over RabbitMQ, N stepped up: which reader keeps up with how many.

::

    .venv/bin/python benches/rabbit_steps.py          # N = 10k, 20k, 30k, 35k, 40k (~9 min)
    .venv/bin/python benches/rabbit_steps.py --steps 2000,5000 --warmup 2 --window 5 --no-write

For each N and each reader (one at a time, each in its own process, same broker), a raw-socket
publisher (``wire.py``: not heartwire, pre-built SEND frames) beats N topics ``<prefix>.<i>`` once
a second, spread evenly over the second, for ``warmup + window`` seconds, and the reader counts.
Readers: ``raw`` (a raw socket, frames split on NUL, the body read with ``bytes.find``),
``stomppy`` (a plain ``stomp.Connection12`` listener, ``json.loads`` in ``on_message``) and
``monitor`` (``heartwire.HeartbeatMonitor`` on ``<prefix>.>``, period 1 s, default grace 0.1 s).
Every run has a fresh topic prefix, so no run sees another's beats.

Per run (figures over the measured window unless said):

- **counted**: beats the reader counted, of all the publisher sent (warm-up included), by the end
  of the schedule plus ``--settle`` seconds;
- **false failures** (monitor): topics named by a ``failed`` event whose outage began (its first
  missed deadline) before the end of the schedule plus the grace. Every topic beats until then,
  so each is a live topic reported failed; failures after it are the end of the run (every
  topic stops). The JSON has the events too (``false_failed_events``, ``failed_events``);
- **p99 transit**: receive time minus the beat's ``sent`` (raw, stomppy: exact, every beat in the
  window); **p99 lag**: for every reader, estimated from counts (when its count reached c, minus
  when the publisher had sent c beats; sampled every 10 ms, so up to 10 ms over). The monitor has
  only the estimate; the other two show how close it is to the exact figure;
- **CPU µs per beat**: the reader process's CPU time over the window per beat counted in it;
- **RSS**: the reader's peak resident set, and in brackets its growth over the window (a reader
  that falls behind and buffers what it cannot process grows);
- the publisher's own lag (send time minus due time, p99): over ``--publisher-bound`` ms the run
  is publisher-bound: the broker did not take the beats as fast as they were due. That is the
  broker's or the machine's ceiling when every reader shows it at that N; when only one reader
  does, it is RabbitMQ's flow control pushing back from that reader's growing queue (a slow
  reader holds the publisher back), and the reader is the limit;
- the broker's CPU (% of one core) and the whole machine's busy share over the window.

A reader **keeps up** at N when it counted every beat sent, reported no false failure, and its
p99 transit (the monitor: its p99 lag) is under the grace. Writes a JSON file and a section of
``benches/results.md`` (between ``rabbit_steps:begin``/``end`` markers) with the command.
"""

from __future__ import annotations

import argparse
import datetime
import itertools
import json
import os
import platform
import secrets
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
if str(HERE) not in sys.path:
    sys.path.insert(0, str(HERE))

import wire  # noqa: E402
from measure import machine_jiffies  # noqa: E402

READERS = ("raw", "stomppy", "monitor")
LABELS = {"raw": "raw socket", "stomppy": "stomp.py", "monitor": "HeartbeatMonitor"}


def spawn(what: str, params: dict[str, Any]) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, str(HERE / "wire.py"), what, json.dumps(params)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=ROOT,
    )


def result_of(proc: subprocess.Popen[str], timeout: float, who: str) -> dict[str, Any]:
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        out, err = proc.communicate()
        return {"error": f"{who} did not finish in {timeout:.0f} s"}
    for line in reversed(out.strip().splitlines()):
        if line.startswith("{"):
            return json.loads(line)  # type: ignore[no-any-return]
    return {"error": f"{who} exited {proc.returncode}: {(err or out)[-1500:]}"}


def sleep_until(t: float) -> None:
    delay = t - time.time()
    if delay > 0:
        time.sleep(delay)


def one_run(
    reader: str,
    n: int,
    *,
    host: str,
    port: int,
    run_id: str,
    warmup: float,
    window: float,
    settle: float,
    grace: float,
    ready_budget: float,
    sample: float,
    broker_pid: int | None,
    period: float = 1.0,
    attempt: int = 0,
) -> dict[str, Any]:
    """One reader against one publisher of ``n`` topics beating once a ``period`` for
    ``warmup + window`` seconds; the figures of the run."""
    prefix = f"bench{run_id}n{n}{reader}{attempt}"  # a fresh prefix: no run sees another's
    total = round(n * (warmup + window) / period)
    t0 = time.time() + ready_budget
    end = t0 + warmup + window
    rdr = spawn(
        "read",
        {
            "impl": reader,
            "host": host,
            "port": port,
            "prefix": prefix,
            "n": n,
            "expected": total,
            "until": end + settle,
            "period": period,
            "window": [int(warmup / period), 1 << 62],
            "sample": sample,
            "max_topics": None,
            "false_before": end + grace,
        },
    )
    assert rdr.stdout is not None
    line = rdr.stdout.readline()
    if "READY" not in line or time.time() > t0 - 0.2:
        rdr.kill()
        _, err = rdr.communicate()
        why = "late" if "READY" in line else "no READY"
        return {"reader": reader, "n": n, "error": f"reader did not start ({why}): {err[-800:]}"}
    pub = spawn(
        "publish",
        {"host": host, "port": port, "prefix": prefix, "n": n, "period": period, "t0": t0,
         "beats": total},
    )  # fmt: skip
    ws, we = t0 + warmup, end
    sleep_until(ws)
    m0 = machine_jiffies()
    b0 = wire.proc_cpu_s(broker_pid) if broker_pid else None
    sleep_until(we)
    m1 = machine_jiffies()
    b1 = wire.proc_cpu_s(broker_pid) if broker_pid else None
    p = result_of(pub, warmup + window + 120, "publisher")
    r = result_of(rdr, settle + 120, "reader")
    out: dict[str, Any] = {"reader": reader, "n": n, "prefix": prefix, "t0": t0, "period": period}
    if "error" in p or "error" in r:
        out["error"] = p.get("error") or r.get("error")
        return out
    busy = (m1[0] - m0[0]) / max(1, m1[1] - m0[1])
    broker_pct = None if b0 is None or b1 is None else 100 * (b1 - b0) / (we - ws)
    c0, cpu0, rss0 = wire.at_time(r["samples"], ws)
    c1, cpu1, rss1 = wire.at_time(r["samples"], we)
    est = wire.weighted_summary(
        *wire.transit_from_curves(p["curve"], r["samples"], round(n * warmup / period), total)
    )
    false_failures = r.get("false_failed_topics")  # None: not a monitor
    exact = r["transit"]["p99_ms"] if r["transit"]["n"] else None
    p99 = exact if exact is not None else est["p99_ms"]
    out.update(
        sent=p["sent"],
        counted=r["counted"],
        counted_pct=100.0 * r["counted"] / max(1, p["sent"]),
        false_failures=false_failures,
        transit=r["transit"],
        lag_est=est,
        p99_ms=p99,
        p99_exact=exact is not None,
        cpu_us_per_beat=1e6 * (cpu1 - cpu0) / (c1 - c0) if c1 > c0 else None,
        reader_cpu_pct=100 * (cpu1 - cpu0) / (we - ws),
        rss_mb=r["rss_max"] / 2**20,
        rss_growth_mb=rss1 - rss0,  # over the window: a reader buffering what it cannot process
        hwm_mb=r["hwm"] / 2**20,
        publisher_lag=p["lag"],
        publisher_cpu_pct=100 * p["cpu_s"] / max(1e-9, p["seconds"]),
        publisher_receipt=p["receipt"],
        broker_cpu_pct=broker_pct,
        machine_busy_pct=100 * busy,
        load=os.getloadavg()[0],
        errors=r.get("errors"),
    )
    for key in ("learned", "topics", "rejected", "dropped", "listener_dropped", "lagging",
                "caught_up", "ingest_lag_s", "failed_stat", "failed_events",
                "false_failed_events"):  # fmt: skip
        if key in r:
            out[key] = r[key]
    out["keeps_up"] = bool(
        not out["errors"]
        and out["counted"] >= out["sent"]
        and not false_failures
        and p99 is not None
        and p99 < grace * 1e3
    )
    return out


def verdict(r: dict[str, Any], grace: float, bound_ms: float) -> str:
    if "error" in r:
        return f"**error**: {r['error'][:120]}"
    why = []
    if r["counted"] < r["sent"]:
        why.append(f"missed {r['sent'] - r['counted']}")
    if r.get("false_failures"):
        why.append(f"{r['false_failures']} live topics reported failed")
    if r["p99_ms"] is None or r["p99_ms"] >= grace * 1e3:
        why.append("late")
    if r["errors"]:
        why.append("errors")
    pub = r["publisher_lag"]["p99_ms"]
    notes = []
    if pub is not None and pub > bound_ms:
        notes.append("publisher-bound")
    if r.get("lagging"):  # the monitor's ingest-lag guard (issue 15), when it has one
        notes.append(f"lagging reported {r['lagging']}x")
    note = f" ({'; '.join(notes)})" if notes else ""
    return ("yes" if r["keeps_up"] else "**no**: " + ", ".join(why)) + note


def fmt(x: float | None, digits: int = 3) -> str:
    return "" if x is None else f"{x:.{digits}g}"


def table(runs: list[dict[str, Any]], grace: float, bound_ms: float) -> str:
    lines = [
        "| N | reader | counted | false failures | p99 transit | p99 lag (est.) | "
        "CPU/beat | reader CPU | RSS | publisher lag p99 | broker CPU | machine busy | "
        "keeps up? |",
        "| ---: | --- |" + " ---: |" * 10 + " --- |",
    ]
    for r in runs:
        if "error" in r:
            lines.append(
                f"| {r['n']} | {LABELS[r['reader']]} | | | | | | | | | | | "
                f"{verdict(r, grace, bound_ms)} |"
            )
            continue
        ff = "n/a" if r["false_failures"] is None else str(r["false_failures"])
        exact = r["transit"]["p99_ms"]
        lines.append(
            f"| {r['n']} | {LABELS[r['reader']]} | {r['counted_pct']:.2f}% | {ff} | "
            f"{fmt(exact) + ' ms' if exact is not None else 'n/a'} | "
            f"{fmt(r['lag_est']['p99_ms'])} ms | {fmt(r['cpu_us_per_beat'])} µs | "
            f"{r['reader_cpu_pct']:.0f}% | {r['rss_mb']:.0f} MB ({r['rss_growth_mb']:+.0f}) | "
            f"{fmt(r['publisher_lag']['p99_ms'])} ms | {fmt(r['broker_cpu_pct'])}% | "
            f"{r['machine_busy_pct']:.0f}% | {verdict(r, grace, bound_ms)} |"
        )
    return "\n".join(lines)


def kept_up(runs: list[dict[str, Any]], reader: str, n: int) -> tuple[int, int]:
    """(runs that kept up, runs) of ``reader`` at ``n``."""
    mine = [r for r in runs if r["reader"] == reader and r["n"] == n]
    return sum(1 for r in mine if r.get("keeps_up")), len(mine)


def capacity(runs: list[dict[str, Any]], readers: list[str]) -> dict[str, int | None]:
    """Per reader, the largest N it kept up with (in at least half its runs at that N: the
    broker is shared, and one stalled run is not the reader's capacity)."""
    out: dict[str, int | None] = {}
    for reader in readers:
        steps = sorted({r["n"] for r in runs if r["reader"] == reader})
        kept = [n for n in steps if 2 * kept_up(runs, reader, n)[0] >= kept_up(runs, reader, n)[1]]
        out[reader] = max(kept) if kept else None
    return out


def capacity_lines(runs: list[dict[str, Any]], readers: list[str]) -> list[str]:
    cap = capacity(runs, readers)
    lines = []
    for reader in readers:
        steps = sorted({r["n"] for r in runs if r["reader"] == reader})
        tally = {n: kept_up(runs, reader, n) for n in steps}
        record = ", ".join(f"{n}: {k}/{m}" for n, (k, m) in tally.items())
        below = [n for n, (k, m) in tally.items() if n < (cap[reader] or 0) and 2 * k < m]
        note = f", but not at {', '.join(map(str, below))}" if below else ""
        largest = "none of the steps" if cap[reader] is None else f"{cap[reader]} topics"
        lines.append(
            f"- {LABELS[reader]}: keeps up with {largest}{note} (runs kept up, per N: {record})"
        )
    if "monitor" in cap and "raw" in cap:
        met = (cap["monitor"] or 0) >= (cap["raw"] or 0) and cap["raw"] is not None
        lines.append(
            "- Goal, `HeartbeatMonitor` keeps up wherever the raw-socket reader does: "
            + ("met" if met else "**missed**")
        )
    return lines


def write_section(path: Path, body: str, name: str = "rabbit_steps") -> None:
    """Replace the section between the ``<name>:begin``/``end`` markers in ``path``, or append
    it."""
    begin, end = f"<!-- {name}:begin -->", f"<!-- {name}:end -->"
    block = f"{begin}\n{body}\n{end}"
    old = path.read_text() if path.exists() else ""
    if begin in old and end in old:
        head, rest = old.split(begin, 1)
        text = head + block + rest.split(end, 1)[1]
    else:
        text = old.rstrip("\n") + "\n\n" + block + "\n"
    path.write_text(text)


def machine_line() -> str:
    """The results' machine line: host, cores, load now, and the heartwire measured."""
    return (
        f"Machine: {platform.node() or 'host'}, {os.cpu_count()} shared cores, load average "
        f"{os.getloadavg()[0]:.2f} at the end; heartwire at {git_rev()}."
    )


def save(args: argparse.Namespace, text: str, res: dict[str, Any], name: str, section: str) -> None:
    """Print the markdown ``text``; write ``res`` to ``--json`` (default benches/<name>.json)
    and ``text`` to the ``section`` of ``--write``, neither with ``--no-write`` (but an explicit
    ``--json``)."""
    print()
    print(text)
    json_path = args.json or (None if args.no_write else str(HERE / f"{name}.json"))
    if json_path:
        Path(json_path).write_text(json.dumps(res, indent=1) + "\n")
        print(f"wrote {json_path}")
    if not args.no_write:
        write_section(Path(args.write), text, section)
        print(f"wrote {args.write}")


def git_rev() -> str:
    """The commit of the heartwire the readers import (this interpreter, this environment's
    PYTHONPATH), which need not be this checkout's."""
    found = subprocess.run(
        [sys.executable, "-c", "import heartwire; print(heartwire.__file__)"],
        capture_output=True,
        text=True,
        cwd=ROOT,
    )
    if found.returncode != 0:
        return "(heartwire not importable)"
    where = Path(found.stdout.strip()).parent

    def git(*args: str) -> str:
        done = subprocess.run(["git", *args], capture_output=True, text=True, cwd=where)
        return done.stdout.strip() if done.returncode == 0 else ""

    rev = git("rev-parse", "--short", "HEAD")
    if not rev:
        return f"(installed, {where})"
    top = Path(git("rev-parse", "--show-toplevel"))
    dirty = git("status", "--porcelain", "--", str(top / "rust"), str(top / "python"))
    note = ", rust/ or python/ changed, uncommitted" if dirty else ""
    return f"{rev} ({top}{note})"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--steps", default="10000,20000,30000,35000,40000", help="topic counts N")
    ap.add_argument("--readers", default=",".join(READERS), help=f"some of {READERS}")
    ap.add_argument("--warmup", type=int, default=5, help="seconds before the window")
    ap.add_argument("--window", type=int, default=20, help="measured seconds")
    ap.add_argument("--repeat", type=int, default=1, help="runs per N and reader, interleaved")
    ap.add_argument("--settle", type=float, default=3.0, help="seconds to count after the end")
    ap.add_argument("--grace", type=float, default=0.1, help="p99 transit bound to keep up, s")
    ap.add_argument("--publisher-bound", type=float, default=50.0, help="publisher p99 lag, ms")
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, default=61623, help="RabbitMQ's STOMP port")
    ap.add_argument("--ready-budget", type=float, default=5.0, help="seconds for a reader to start")
    ap.add_argument("--pause", type=float, default=2.0, help="seconds between runs")
    ap.add_argument("--sample", type=float, default=0.01, help="reader sampling interval, s")
    ap.add_argument("--json", default=None, help="raw results (default benches/rabbit_steps.json)")
    ap.add_argument("--write", default=str(HERE / "results.md"), help="markdown file to update")
    ap.add_argument("--section", default="rabbit_steps", help="results.md section (markers)")
    ap.add_argument("--no-write", action="store_true", help="print only (and no default JSON)")
    args = ap.parse_args()
    steps = [int(x) for x in args.steps.split(",") if x.strip()]
    readers = [x.strip() for x in args.readers.split(",") if x.strip()]
    bad = [r for r in readers if r not in READERS] + [str(n) for n in steps if n < 1]
    if bad or args.window < 1 or args.warmup < 1:
        ap.error(f"bad --readers/--steps/--window/--warmup: {bad or (args.window, args.warmup)}")
    if not wire.find_broker_pid("rabbit"):
        print("note: RabbitMQ's process not found; broker CPU is left out", flush=True)
    wire.check_body()
    run_id = secrets.token_hex(3)
    started = datetime.datetime.now(datetime.timezone.utc)
    t_start = time.monotonic()
    runs: list[dict[str, Any]] = []
    for n, attempt, reader in itertools.product(steps, range(args.repeat), readers):
        label = f"N={n} {reader}"
        print(f"  - {label} ...", end="", flush=True)
        r = one_run(
            reader,
            n,
            host=args.host,
            port=args.port,
            run_id=run_id,
            warmup=args.warmup,
            window=args.window,
            settle=args.settle,
            grace=args.grace,
            ready_budget=args.ready_budget,
            sample=args.sample,
            broker_pid=wire.find_broker_pid("rabbit"),
            attempt=attempt,
        )
        runs.append(r)
        if "error" in r:
            print(f" ERROR {r['error'][:300]}", flush=True)
        else:
            print(
                f" counted {r['counted_pct']:.2f}%, p99 {fmt(r['p99_ms'])} ms, "
                f"{fmt(r['cpu_us_per_beat'])} us/beat, "
                f"{verdict(r, args.grace, args.publisher_bound)}",
                flush=True,
            )
        time.sleep(args.pause)
    wall = time.monotonic() - t_start
    command = " ".join(["benches/rabbit_steps.py", *sys.argv[1:]])
    md = [
        "## End to end over RabbitMQ at 1 Hz, N stepped (`benches/rabbit_steps.py`)",
        "",
        f"Command: `.venv/bin/python {command}`, {started:%Y-%m-%d %H:%M} UTC, {wall:.0f} s; "
        f"{args.warmup} s warm-up, {args.window} s window per run, grace {args.grace} s.  ",
        machine_line(),
        "",
        table(runs, args.grace, args.publisher_bound),
        "",
        *capacity_lines(runs, readers),
        "",
        "Counted: of all beats sent, by the end plus the settle time. p99 transit: exact (receive "
        "minus `sent`); p99 lag: from counts, sampled every 10 ms (the only figure for the "
        "monitor, which does not expose each beat's `sent`). CPU per beat and reader CPU: the "
        "reader process over the window. RSS: the reader's peak (its growth over the window). "
        "Publisher-bound: the publisher's own p99 lag was over "
        f"{args.publisher_bound:g} ms (the broker's or machine's ceiling if every reader shows "
        "it at that N; else RabbitMQ's flow control pushing back from that reader's queue). "
        "Columns explained in the script's docstring.",
    ]
    res = {
        "meta": {"command": command, "date": f"{started:%Y-%m-%d %H:%M UTC}", "wall_s": wall},
        "args": vars(args),
        "runs": runs,
        "capacity": capacity(runs, readers),
    }
    save(args, "\n".join(md), res, "rabbit_steps", args.section)
    return 0


if __name__ == "__main__":
    sys.exit(main())
