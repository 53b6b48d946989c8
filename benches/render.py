"""The suite's output: the results table (each heartwire figure beside its baseline), the
thread-ladder tables and the generated part of ``results.md``.
"""

from __future__ import annotations

import os
import platform
import subprocess
from pathlib import Path
from typing import Any

from measure import median
from runner import ROOT
from scenarios.e2e import E2E_READERS


def fmt_rate(x: float | None) -> str:
    if x is None:
        return "-"
    for unit, scale in (("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if x >= scale:
            return f"{x / scale:.3g} {unit}/s"
    return f"{x:.3g} /s"


def fmt(x: float | None, unit: str, digits: int = 3) -> str:
    return "-" if x is None else f"{x:.{digits}g} {unit}"


class Table:
    def __init__(self) -> None:
        self.rows: list[dict[str, str]] = []
        self.goals: list[tuple[str, bool | None]] = []

    def add(
        self,
        figure: str,
        hw: str,
        baseline: str,
        ratio: float | None,
        goal: str = "",
        met: bool | None = None,
    ) -> None:
        status = "" if met is None else ("met" if met else "**missed**")
        self.rows.append(
            {
                "figure": figure,
                "heartwire": hw,
                "baseline": baseline,
                "ratio": "-" if ratio is None else f"{ratio:.3g}x",
                "goal": goal,
                "met": status,
            }
        )

    def markdown(self) -> str:
        cols = ["figure", "heartwire", "baseline", "ratio", "goal", "met"]
        head = "| figure | heartwire | baseline | advantage | goal | met |"
        lines = [head, "| --- | --- | --- | ---: | --- | --- |"]
        for r in self.rows:
            lines.append("| " + " | ".join(r[c] for c in cols) + " |")
        return "\n".join(lines)


def ok(x: Any) -> bool:
    return isinstance(x, dict) and "error" not in x and "skipped" not in x


def figures(res: dict[str, Any]) -> Table:
    """The results table: advantage = how many times better heartwire is than the baseline
    (rates: heartwire / baseline; times, CPU, memory: baseline / heartwire)."""
    t = Table()
    _beats_rows(t, res)
    _steady_rows(t, res)
    _rss_rows(t, res)
    _tick_rows(t, res)
    _handoff_rows(t, res)
    _publishers_rows(t, res)
    _e2e_rows(t, res)
    _spark_rows(t, res)
    return t


def _beats_rows(t: Table, res: dict[str, Any]) -> None:
    """Rows for beats/s from Python: single calls and batches, against the heap monitor."""
    for b in res.get("beats", []):
        if not ok(b):
            continue
        n = b["n"]
        scale = f"{n // 1000}k" if n < 1_000_000 else f"{n // 1_000_000}M"
        s, bt = b["single"], b["batch"]
        base = s["HeapMonitor.beat(name)"]
        for key, label in (
            ("hw.Detector.beat(handle)", "Detector.beat(handle)"),
            ("hw.Detector.beat(name)", "Detector.beat(name)"),
            ("hw.HeartbeatMonitor.beat(name)", "HeartbeatMonitor.beat(name)"),
        ):
            if key in s:
                r = s[key] / base
                t.add(
                    f"single beats, {scale} topics: {label}",
                    fmt_rate(s[key]),
                    f"HeapMonitor.beat {fmt_rate(base)}",
                    r,
                    ">= 1.5x",
                    r >= 1.5,
                )
        if "AsyncioMonitor.beat(name)" in s:
            a = s["AsyncioMonitor.beat(name)"]
            t.add(
                f"single beats, {scale} topics: Detector.beat(name) vs asyncio",
                fmt_rate(s["hw.Detector.beat(name)"]),
                f"asyncio call_at re-arm {fmt_rate(a)}",
                s["hw.Detector.beat(name)"] / a,
            )
        if "pypi PhiAccrualFailureDetector.heartbeat()" in s:
            p = s["pypi PhiAccrualFailureDetector.heartbeat()"]
            h = s["hw.Detector.beat(name) [phi]"]
            t.add(
                f"single beats, {scale} topics, phi-accrual",
                fmt_rate(h),
                f"PyPI phi-accrual-failure-detector {fmt_rate(p)}",
                h / p,
            )
        loop = bt["HeapMonitor.beat_many(names)"]
        for key, label, goal in (
            ("hw.Detector.beat_handles(numpy)", "beat_handles (NumPy handles)", 50),
            ("hw.Detector.beat_many(list)", "beat_many (list of names)", 5),
            ("hw.Detector.beat_many(arrow)", "beat_many (Arrow names)", 5),
        ):
            r = bt[key] / loop
            t.add(
                f"batch beats, {scale} topics: {label}",
                fmt_rate(bt[key]),
                f"HeapMonitor.beat_many loop {fmt_rate(loop)}",
                r,
                f">= {goal}x",
                r >= goal,
            )
        fr = b.get("batch_fresh")
        if fr:
            base_f = fr["HeapMonitor.beat_many(names)"]
            hw_f = fr["hw.Detector.beat_many(list)"]
            t.add(
                f"batch beats, {scale} topics: beat_many (list of names fresh off the wire)",
                fmt_rate(hw_f),
                f"HeapMonitor.beat_many loop, same fresh names {fmt_rate(base_f)}",
                hw_f / base_f,
                ">= 5x",
                hw_f / base_f >= 5,
            )


def _steady_rows(t: Table, res: dict[str, Any]) -> None:
    """Rows for steady-state CPU and lateness (and thread per subscriber per 1000 topics)."""
    st = res.get("steady", {})
    hw_s = st.get("heartwire")
    bases = {k: v for k, v in st.items() if k in ("heap", "asyncio") and ok(v)}
    if ok(hw_s) and bases:
        best_name, best = min(bases.items(), key=lambda kv: kv[1]["cpu_pct"])
        r = best["cpu_pct"] / hw_s["cpu_pct"]
        null = st.get("null")
        note = f"; feeder alone {null['cpu_pct']:.2g}%" if ok(null) else ""
        t.add(
            "CPU, whole monitor, 100k topics at 1 Hz, 1% failing (% of one core)",
            f"{hw_s['cpu_pct']:.3g}%",
            f"{best_name} monitor {best['cpu_pct']:.3g}%{note}",
            r,
            ">= 10x less",
            r >= 10,
        )
        if ok(null):
            f = null["cpu_pct"]
            hn, bn = hw_s["cpu_pct"] - f, best["cpu_pct"] - f
            t.add(
                "CPU, same, less the feeder loop's own cost (null run)",
                f"{hn:.3g}%",
                f"{best_name} monitor {bn:.3g}%",
                bn / hn if hn > 0 else None,
                ">= 10x less",
                hn > 0 and bn / hn >= 10,
            )
        for k, v in bases.items():
            if k != best_name:
                t.add(
                    "CPU, same, vs the other pure-Python monitor",
                    f"{hw_s['cpu_pct']:.3g}%",
                    f"{k} monitor {v['cpu_pct']:.3g}%",
                    v["cpu_pct"] / hw_s["cpu_pct"],
                )
        th = [r for r in res.get("threads", {}).get("ladder", []) if "cpu_pct" in r]
        kept = [r for r in th if not r.get("broken")]
        if kept:
            big = kept[-1]
            gone = [r for r in res["threads"]["ladder"] if r.get("broken")]
            where = f"; breaks at {gone[0]['n']}" if gone else ""
            per_h = 1000 * hw_s["cpu_pct"] / hw_s["n"]
            per_b = 1000 * big["cpu_pct"] / big["started"]
            t.add(
                "CPU per 1000 topics, same feed, vs thread per subscriber",
                f"{per_h:.3g}% at {hw_s['n']}",
                f"{per_b:.3g}% at {big['started']} threads{where}",
                per_b / per_h,
            )
        hl, bl = hw_s["lateness"], best["lateness"]
        if hl["p99_ms"] is not None and bl["p99_ms"] is not None:
            for q in ("p50", "p99"):
                h, b = hl[f"{q}_ms"], bl[f"{q}_ms"]
                t.add(
                    f"detection lateness {q}, 100k topics, real clock, 10 ms tick",
                    fmt(h, "ms"),
                    f"{best_name} monitor {fmt(b, 'ms')}",
                    b / h if h > 0 else None,
                    "<= 10 ms (one tick)" if q == "p99" else "",
                    (h <= 10.0) if q == "p99" else None,
                )


def _rss_rows(t: Table, res: dict[str, Any]) -> None:
    """Rows for RSS per topic at 1M."""
    rs = res.get("rss", {})
    for kind, label in (("hw_detector", "Detector"), ("hw_monitor", "HeartbeatMonitor")):
        h = rs.get(kind)
        b = rs.get("heap")
        if ok(h) and ok(b):
            t.add(
                f"RSS per topic at 1M topics ({label})",
                f"{h['bytes_per_topic']:.0f} B ({h['rss_mb']:.0f} MiB)",
                f"HeapMonitor {b['bytes_per_topic']:.0f} B ({b['rss_mb']:.0f} MiB)",
                b["bytes_per_topic"] / h["bytes_per_topic"],
                "<= 128 MB for 1M",
                h["rss_mb"] * 2**20 <= 128e6,
            )
    if ok(rs.get("asyncio")) and ok(rs.get("hw_detector")):
        a, h = rs["asyncio"], rs["hw_detector"]
        t.add(
            "RSS per topic at 1M topics (Detector) vs asyncio",
            f"{h['bytes_per_topic']:.0f} B",
            f"asyncio timers {a['bytes_per_topic']:.0f} B ({a['rss_mb']:.0f} MiB)",
            a["bytes_per_topic"] / h["bytes_per_topic"],
        )


def _tick_rows(t: Table, res: dict[str, Any]) -> None:
    """Rows for a tick with 1M expiries."""
    tk = res.get("tick")
    if ok(tk):
        r = tk["heap_fail"] / tk["hw_fail"]
        rearm = "hw_rearm" in tk
        t.add(
            "tick with 1M topics expiring at once (all fail)",
            fmt(tk["hw_fail"] * 1e3, "ms"),
            f"heapq tick {fmt(tk['heap_fail'] * 1e3, 'ms')}",
            r,
            ">= 50x and <= 100 ms",
            r >= 50 and tk["hw_fail"] <= 0.1,
        )
        if "mon_fail" in tk:
            m = tk["mon_fail"]
            got = tk["mon_delivered"]
            lost = "" if got == tk["n"] else f"; the listener counted {got} of {tk['n']}"
            t.add(
                f"1M topics expiring at once through a HeartbeatMonitor, to one listener "
                f"({tk['mon_api']})",
                fmt(m * 1e3, "ms") + lost,
                f"heapq tick {fmt(tk['heap_fail'] * 1e3, 'ms')}",
                tk["heap_fail"] / m,
                ">= 20x and <= 150 ms",
                got == tk["n"] and tk["heap_fail"] / m >= 20 and m <= 0.15,
            )
        if rearm:
            t.add(
                "tick with 1M topics due at once (all beaten: re-arm only)",
                fmt(tk["hw_rearm"] * 1e3, "ms"),
                f"heapq tick {fmt(tk['heap_rearm'] * 1e3, 'ms')}",
                tk["heap_rearm"] / tk["hw_rearm"],
            )


def _handoff_rows(t: Table, res: dict[str, Any]) -> None:
    """Rows for listener hand-off."""
    ho = res.get("handoff", {})
    for slow in ("", "+slow"):
        h, b = ho.get("heartwire" + slow), ho.get("queue" + slow)
        if ok(h) and ok(b) and h["handoff"]["n"] and b["handoff"]["n"]:
            what = "with a 1 s listener beside" if slow else "one fast listener"
            for q in ("p50", "p99"):
                hv, bv = h["handoff"][f"{q}_ms"], b["handoff"][f"{q}_ms"]
                t.add(
                    f"listener hand-off {q}, {what}",
                    fmt(hv, "ms"),
                    f"SimpleQueue + thread {fmt(bv, 'ms')}",
                    bv / hv if hv > 0 else None,
                    "<= 1 ms" + (", unmoved" if slow else "") if q == "p99" else "",
                    (hv <= 1.0) if q == "p99" else None,
                )


def _publishers_rows(t: Table, res: dict[str, Any]) -> None:
    """Rows for 10 000 publishers against thread per publisher."""
    pb = res.get("publishers", {})
    h = pb.get("heartwire")
    steps = pb.get("threads", {}).get("ladder", [])
    if ok(h) and steps:
        same = [r for r in steps if r.get("n") == h["n"]]
        healthy = [r for r in steps if not r.get("broken") and "cpu_pct" in r]
        b = same[0] if same else None
        if b is not None:
            cpu = b.get("cpu_pct", b.get("cpu_pct_at_end"))
            note = f"; broken: {b['broken']}" if b.get("broken") else ""
            t.add(
                f"{h['n']} publishers at 1 Hz: CPU (% of one core)",
                f"{h['cpu_pct']:.3g}% ({h['sends_per_s']:.0f} sends/s)",
                f"{b['n']} threads {fmt(cpu, '%').replace(' ', '')}"
                + (f" ({b['sends_per_s']:.0f} sends/s)" if "sends_per_s" in b else "")
                + note,
                None if cpu is None else cpu / h["cpu_pct"],
            )
        if healthy:
            best = healthy[-1]
            per_h = h["cpu_pct"] / h["n"]
            per_b = best["cpu_pct"] / best["n"]
            t.add(
                "publishers: CPU per 1000 publishers (% of one core)",
                f"{1000 * per_h:.3g}% at {h['n']}",
                f"thread per publisher {1000 * per_b:.3g}% at {best['n']} (largest that kept up)",
                per_b / per_h,
            )
            for q in ("p50", "p99"):
                hv, bv = h["jitter"][f"{q}_ms"], best["jitter"][f"{q}_ms"]
                t.add(
                    f"publishers: send-time jitter {q}",
                    f"{fmt(hv, 'ms')} at {h['n']}",
                    f"thread per publisher {fmt(bv, 'ms')} at {best['n']}",
                    bv / hv if hv and hv > 0 else None,
                )


def _e2e_rows(t: Table, res: dict[str, Any]) -> None:
    """Rows for end to end over STOMP."""
    e = res.get("e2e")
    if isinstance(e, dict) and "runs" in e:  # a results.json from before issue 15
        runs = [r for r in e["runs"] if "rate" in r]
        raw = [r for r in runs if r["impl"] == "raw"]  # stomp.py, then
        mon = [r for r in runs if r["impl"] == "monitor"]
        if raw and mon:
            rr, mr = median([r["rate"] for r in raw]), median([r["rate"] for r in mon])
            rc = median([r["cpu_us_per_msg"] for r in raw])
            mc = median([r["cpu_us_per_msg"] for r in mon])
            t.add(
                "end to end over ActiveMQ STOMP (stomp.py sender): receiver CPU per message",
                f"{mc:.0f} us ({mr:.0f} msg/s)",
                f"raw stomp.py {rc:.0f} us ({rr:.0f} msg/s)",
                rc / mc,
            )
    for broker, b in (e.get("brokers", {}) if isinstance(e, dict) else {}).items():
        done = [r for r in b.get("runs", []) if "rate" in r]
        by = {
            impl: [r for r in done if r["impl"] == impl]
            for impl in E2E_READERS
            if any(r["impl"] == impl for r in done)
        }
        if "monitor" not in by:
            continue
        cpu = {impl: median([r["cpu_us_per_msg"] for r in rs]) for impl, rs in by.items()}
        rate = {impl: median([r["rate"] for r in rs]) for impl, rs in by.items()}
        lost = sum(r["sent"] - r["counted"] for r in by["monitor"])
        note = f"; {lost} beats not counted" if lost else ""
        where = f"flood over {broker} ({e['total'] // 1000}k beats)"
        for impl in ("stomppy", "raw"):
            if impl not in by:
                continue
            label = E2E_READERS[impl]
            t.add(
                f"{where}: HeartbeatMonitor receive CPU per beat",
                f"{cpu['monitor']:.3g} us{note}",
                f"{label} {cpu[impl]:.3g} us",
                cpu[impl] / cpu["monitor"],
                "<= 3 us" if impl == "stomppy" else "",
                cpu["monitor"] <= 3 and not lost if impl == "stomppy" else None,
            )
            t.add(
                f"{where}: HeartbeatMonitor receive rate",
                f"{rate['monitor']:.0f} msg/s",
                f"{label} {rate[impl]:.0f} msg/s",
                rate["monitor"] / rate[impl],
            )


def _spark_rows(t: Table, res: dict[str, Any]) -> None:
    """Rows for Spark freshness, outages and availability."""
    sp = res.get("spark")
    if ok(sp):
        fr = sp.get("freshness", {})
        rust = fr.get("rust arrow_udf")
        for key, label in (
            ("native", "native expressions"),
            ("pandas_udf", "pandas_udf (NumPy)"),
            ("arrow_udf floor (identity)", "any arrow_udf's floor (identity)"),
        ):
            if rust and fr.get(key):
                t.add(
                    f"Spark freshness, {sp['rows'] / 1e6:g}M rows: engine rust (arrow_udf)",
                    fmt(rust, "s"),
                    f"{label} {fmt(fr[key], 's')}",
                    fr[key] / rust,
                )
        og = sp.get("outages", {})
        for fn in ("outages", "availability"):
            hw_t, nat = og.get(f"{fn} rust"), og.get(f"{fn} native")
            if hw_t and nat:
                t.add(
                    f"Spark {fn}, {sp['events'] / 1e6:g}M beats: engine rust (mapInArrow)",
                    fmt(hw_t, "s"),
                    f"native lag() window {fmt(nat, 's')}",
                    nat / hw_t,
                )


def ladder_table(steps: list[dict[str, Any]], what: str) -> str:
    lines = [
        f"| {what} | started in | CPU (% of one core) | p50 | p99 | kept up? |",
        "| ---: | ---: | ---: | ---: | ---: | --- |",
    ]
    for r in steps:
        n = r.get("n")
        if "skipped" in r:
            lines.append(f"| {n} | | | | | skipped: {r['skipped']} |")
            continue
        if "error" in r:
            cpu = r.get("cpu_pct_at_end")
            lines.append(f"| {n} | | {fmt(cpu, '%')} | | | **no**: {r.get('broken')} |")
            continue
        d = r.get("lateness") or r.get("jitter") or {}
        lines.append(
            f"| {r.get('started', n)} | {r['start_s']:.2f} s | {r['cpu_pct']:.3g}% | "
            f"{fmt(d.get('p50_ms'), 'ms')} | {fmt(d.get('p99_ms'), 'ms')} | "
            + ("yes" if not r.get("broken") else f"**no**: {r['broken']}")
            + " |"
        )
    return "\n".join(lines)


def threads_table(res: dict[str, Any]) -> str:
    out = []
    th = res.get("threads")
    if th:
        out += [
            "Thread per subscriber (baseline 3), 1 Hz, 1% failing, same feed as the CPU row; "
            "p50/p99 are detection lateness:",
            "",
            ladder_table(th["ladder"], "subscriber threads"),
        ]
    pb = res.get("publishers", {}).get("threads")
    if pb:
        out += [
            "",
            "Thread per publisher (baseline 3), 1 Hz, phases spread over the second; "
            "p50/p99 are send-time jitter:",
            "",
            ladder_table(pb["ladder"], "publisher threads"),
        ]
    if th or pb:
        limit = (th or pb)["pid_max"]
        out += [
            "",
            f"Thread counts are capped by this machine's pid_max ({limit}, shared with every "
            "other process), less 8192 left to the other sessions; no run came near it.",
        ]
    return "\n".join(out)


def machine() -> str:
    cpus = os.cpu_count()
    load = os.getloadavg()
    rev = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, cwd=ROOT
    ).stdout.strip()
    dirty = subprocess.run(
        ["git", "status", "--porcelain", "--", "rust", "python"],
        capture_output=True,
        text=True,
        cwd=ROOT,
    ).stdout.strip()
    note = " (rust/ or python/ had uncommitted changes by others)" if dirty else ""
    return (
        f"{platform.node() or 'host'}: {cpus} shared cores, Python {platform.python_version()}, "
        f"load average {load[0]:.2f} at the end; heartwire at {rev}{note}"
    )


BEGIN, END = "<!-- suite:begin -->", "<!-- suite:end -->"


def write_markdown(path: Path, res: dict[str, Any], table: str, threads: str) -> None:
    """Replace the generated part of ``path`` (between the markers) and keep the notes around
    it; a new file gets the generated part alone."""
    meta = res["meta"]
    parts = [
        BEGIN,
        f"Command: `.venv/bin/python {meta['command']}`, {meta['date']}, "
        f"{meta['wall_s']:.0f} s in all.  ",
        f"Machine: {meta['machine']}.",
        "",
        table,
    ]
    if threads:
        parts += ["", threads]
    e = res.get("e2e")
    for broker, b in (e.get("brokers", {}) if isinstance(e, dict) else {}).items():
        if "skipped" in b:
            parts += ["", f"Flood over {broker}: skipped ({b['skipped']})."]
    sp = res.get("spark")
    if isinstance(sp, dict) and ("skipped" in sp or "error" in sp):
        why = sp.get("skipped") or str(sp["error"]).strip().splitlines()[-1]
        parts += ["", f"Spark: not measured ({why})."]
    cargo = res.get("cargo")
    if cargo:
        parts += ["", "Cargo benches (context, Rust only):", "", "```text"]
        for label, c in cargo.items():
            # criterion's "change since the last run" lines say nothing about this run
            lines = [ln for ln in c["lines"] if "%" not in ln]
            parts += [f"# {label} (exit {c['rc']})", *lines]
        parts += ["```"]
    parts.append(END)
    generated = "\n".join(parts)
    old = path.read_text() if path.exists() else ""
    if BEGIN in old and END in old:
        head, rest = old.split(BEGIN, 1)
        tail = rest.split(END, 1)[1]
        text = head + generated + tail
    else:
        text = old + ("\n" if old else "") + generated + "\n"
    path.write_text(text)
