"""The ``heartwire`` command: ``demo``, ``publish``, ``fail``, ``silence``, ``unsilence``,
``watch``, ``status`` and ``report``.

``fail`` sends one *down* beat (an explicit failure, ``docs/explicit-failure.md``): monitors
fail the topic at once with the reason; the publisher's next regular beat resumes it.
``silence`` and ``unsilence`` send one signed control message (:mod:`heartwire.control`): every
monitor subscribed to the control topic with the key silences the pattern, or lifts the
silence of that id (``docs/silences.md``).

``publish`` and ``watch`` print one JSON object per event, times on the wall clock: ``at`` (and
a failure's ``since``) in Unix seconds, the same as ISO 8601 in UTC in ``at_iso``
(``since_iso``); ``watch`` adds the monitor's clock reading (``at_monotonic``,
``since_monotonic``), exact for intervals. See :func:`heartwire.events.wall_fields`.
``status`` runs a monitor as ``watch`` does and shows a live table instead (needs
``heartwire[status]``: see :mod:`heartwire.status_view`).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import signal
import sys
import threading
from collections.abc import Callable
from typing import Any

#: The HMAC key's environment variable: a key given as --key shows in ``ps``.
KEY_ENV = "HEARTWIRE_KEY"
KEY_HELP = f"HMAC key beats are signed with (default: ${KEY_ENV}, which keeps it out of ps)"
BROKER_HELP = (
    "broker URL: memory:// (in-process, the default), stomp://host:port, "
    "stomp+ssl://host:port?ssl_ca_file=ca.pem, or failover:(stomp://a:61613,stomp://b:61614)?...; "
    "credentials from $HEARTWIRE_BROKER_LOGIN and $HEARTWIRE_BROKER_PASSCODE"
)


def _positive(kind: Callable[[str], Any]) -> Callable[[str], Any]:
    def parse(text: str) -> Any:
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
        if not value > 0:
            raise argparse.ArgumentTypeError(f"must be > 0, got {text}")
        return value

    return parse


def _finite_positive(text: str) -> float:
    """A number of seconds: finite (``inf`` would reach ``Event.wait`` and overflow) and > 0."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not (value > 0 and math.isfinite(value)):
        raise argparse.ArgumentTypeError(f"must be a finite number > 0, got {text}")
    return value


def _wait_seconds(text: str) -> float:
    """``status --group --wait``: a number of seconds > 0, at most one day (as the URL's time
    options: beyond it a wait overflows the platform's sleep)."""
    from heartwire.transport.urls import MAX_SECONDS

    value = _finite_positive(text)
    if value > MAX_SECONDS:
        raise argparse.ArgumentTypeError(f"must be at most {MAX_SECONDS:g} seconds (one day)")
    return value


def _shown(text: str) -> str:
    """``text`` from a message, safe to print: what is not printable ASCII escaped (no newline
    to forge a line with, no terminal escape sequence)."""
    return "".join(c if " " <= c <= "~" else ascii(c)[1:-1] for c in text)


def _control_topic(text: str) -> str | None:
    """--control: a topic name, or ``none``."""
    if text.strip().lower() == "none":
        return None
    from heartwire.transport.patterns import validate_topic

    try:
        return validate_topic(text, "topic")
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


CONTROL_HELP = (
    "with --key: the topic signed silences arrive on ('heartwire silence'; default _hw.control; "
    "none: not listened to)"
)


def _positive_or_inf(text: str) -> float:
    """A number of seconds > 0, or ``inf`` where it means "no bound"."""
    return math.inf if text.strip().lower() in ("inf", "infinity") else _finite_positive(text)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="heartwire", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True)

    demo = commands.add_parser("demo", help="a simulated fleet with a live status view")
    demo.add_argument("--topics", type=_positive(int), default=300, help="services (default 300)")
    demo.add_argument("--period", type=_finite_positive, default=0.2, help="beat period, s")
    demo.add_argument("--duration", type=_finite_positive, default=10.0, help="run time, s")
    demo.add_argument("--seed", type=int, default=7, help="chaos seed")

    publish = commands.add_parser("publish", help="publish heartbeats to a topic")
    publish.add_argument("topic", help="topic to beat on, e.g. svc.a")
    publish.add_argument("--broker", default=None, help=BROKER_HELP)
    publish.add_argument("--period", type=_finite_positive, default=1.0, help="beat period, s")
    publish.add_argument("--count", type=_positive(int), default=None, help="stop after N beats")
    publish.add_argument("--duration", type=_finite_positive, default=None, help="run time, s")
    publish.add_argument("--key", default=os.environ.get(KEY_ENV) or None, help=KEY_HELP)

    fail = commands.add_parser(
        "fail", help="send one down beat: monitors fail the topic at once, with the reason"
    )
    fail.add_argument("topic", help="topic to fail, e.g. svc.a")
    fail.add_argument("--reason", required=True, help="why (1 to 256 characters)")
    fail.add_argument("--broker", default=None, help=BROKER_HELP)
    fail.add_argument(
        "--period",
        type=_finite_positive,
        default=None,
        help="the topic's period, s, carried by the beat (default: none, the monitor's own)",
    )
    fail.add_argument("--key", default=os.environ.get(KEY_ENV) or None, help=KEY_HELP)

    silence = commands.add_parser(
        "silence",
        help="silence a topic pattern on every monitor with the key (a signed control message)",
    )
    silence.add_argument("pattern", help="topic pattern to silence, e.g. 'svc.db.>'")
    when = silence.add_mutually_exclusive_group(required=True)
    when.add_argument(
        "--for", dest="duration", help="how long: 30s, 30m, 2h, 1d (or seconds); at most 30d"
    )
    when.add_argument(
        "--until", help="when it ends: ISO date-time, UTC unless it carries an offset"
    )
    silence.add_argument("--reason", default="", help="why (at most 256 characters)")
    _control_options(silence)

    unsilence = commands.add_parser(
        "unsilence", help="lift silences sent by 'heartwire silence', by the id it printed"
    )
    unsilence.add_argument("ids", nargs="+", metavar="ID", help="a silence's id")
    _control_options(unsilence)

    watch = commands.add_parser("watch", help="watch topics and print events as JSON lines")
    watch.add_argument("pattern", help="topic or wildcard pattern, e.g. svc.> or svc.*")
    watch.add_argument("--broker", default=None, help=BROKER_HELP)
    watch.add_argument("--period", type=_finite_positive, default=1.0, help="default period, s")
    watch.add_argument("--allowed-misses", type=_positive(int), default=1)
    watch.add_argument("--expect", action="append", default=[], help="a topic to expect")
    watch.add_argument("--received", action="store_true", help="also print every beat")
    watch.add_argument("--duration", type=_finite_positive, default=None, help="run time, s")
    watch.add_argument(
        "--flap-threshold",
        type=_positive(int),
        default=None,
        help="a topic with more outages than this within --flap-window is flapping: one "
        "flapping event instead of its failures (give both; default: off)",
    )
    watch.add_argument(
        "--flap-window", type=_finite_positive, default=None, help="flapping window, s"
    )
    watch.add_argument("--key", default=os.environ.get(KEY_ENV) or None, help=KEY_HELP)
    watch.add_argument(
        "--max-beat-age",
        type=_positive_or_inf,
        default=None,
        help="with --key: refuse signed beats sent further than this many seconds from this "
        "host's wall clock (default: 3 periods + 60 s; inf: no bound)",
    )
    watch.add_argument("--control", type=_control_topic, default="_hw.control", help=CONTROL_HELP)
    watch.add_argument(
        "--metrics-port",
        type=int,
        default=None,
        help="serve Prometheus metrics at http://ADDR:PORT/metrics (0: any free port; "
        "needs heartwire[metrics])",
    )
    watch.add_argument(
        "--metrics-addr", default="0.0.0.0", help="address for --metrics-port (default 0.0.0.0)"
    )
    watch.add_argument(
        "--group-depth",
        type=_positive(int),
        default=1,
        help="metrics: group topics by their first N name segments (default 1)",
    )
    watch.add_argument(
        "--max-groups",
        type=int,
        default=100,
        help="metrics: groups with a label of their own; the rest are 'other' (default 100)",
    )
    watch.add_argument(
        "--per-topic-metrics",
        action="store_true",
        help="metrics: also heartwire_topic_*{topic} gauges (bounded topic sets only)",
    )
    watch.add_argument(
        "--max-topic-series",
        type=int,
        default=1000,
        help="with --per-topic-metrics: topics given series at most (FAILED first; default 1000)",
    )

    status = commands.add_parser(
        "status",
        help="watch topics and show a live table: states, worst offenders, recent events "
        "(needs heartwire[status])",
    )
    status.add_argument(
        "pattern",
        nargs="?",
        help="topic or wildcard pattern, e.g. svc.> or svc.* (not with --group)",
    )
    status.add_argument("--broker", default=None, help=BROKER_HELP)
    status.add_argument(
        "--group",
        default=None,
        help="show the monitor group NAME instead (its members, the shards each owns, the "
        "group's counts; read from the members' status messages) and exit",
    )
    status.add_argument(
        "--topic", action="append", default=[], help="with --group: which member owns TOPIC"
    )
    status.add_argument(
        "--wait",
        type=_wait_seconds,
        default=None,
        help="with --group: listen this long for the members' status (at most one day; "
        "default 2.5 s, up to 10 s until a first status, and 1.25 times the longest period "
        "heard, up to 60 s)",
    )
    status.add_argument("--period", type=_finite_positive, default=1.0, help="default period, s")
    status.add_argument("--allowed-misses", type=_positive(int), default=1)
    status.add_argument("--expect", action="append", default=[], help="a topic to expect")
    status.add_argument("--key", default=os.environ.get(KEY_ENV) or None, help=KEY_HELP)
    status.add_argument(
        "--max-beat-age",
        type=_positive_or_inf,
        default=None,
        help="as for watch (default: 3 periods + 60 s; inf: no bound)",
    )
    status.add_argument("--control", type=_control_topic, default="_hw.control", help=CONTROL_HELP)
    status.add_argument(
        "--refresh", type=_finite_positive, default=1.0, help="redraw every N seconds (default 1)"
    )
    status.add_argument(
        "--top", type=_positive(int), default=10, help="worst offenders shown (default 10)"
    )
    status.add_argument(
        "--events", type=_positive(int), default=10, help="recent events shown (default 10)"
    )
    status.add_argument("--duration", type=_finite_positive, default=None, help="run time, s")
    status.add_argument(
        "--flap-threshold",
        type=_positive(int),
        default=None,
        help="a topic with more outages than this within --flap-window is flapping: one "
        "flapping event instead of its failures (give both; default: off)",
    )
    status.add_argument(
        "--flap-window", type=_finite_positive, default=None, help="flapping window, s"
    )

    report = commands.add_parser(
        "report", help="availability report (HTML + PNG timeline) of an event log, on Spark"
    )
    report.add_argument("--events", required=True, help="event log directory (EventLog)")
    report.add_argument(
        "--start", required=True, help="window start: ISO date/time, UTC unless an offset is given"
    )
    report.add_argument("--end", required=True, help="window end (exclusive), same format")
    report.add_argument("--out", required=True, help="HTML file to write; the PNG goes beside it")
    report.add_argument("--period", type=_finite_positive, required=True, help="beat period, s")
    report.add_argument("--allowed-misses", type=_positive(int), default=1)
    report.add_argument("--master", default="local[*]", help="Spark master (default local[*])")
    return parser


def _control_options(command: argparse.ArgumentParser) -> None:
    """--broker, --key/--key-file, --destination: where a control message goes, signed how."""
    command.add_argument("--broker", default=None, help=BROKER_HELP)
    keys = command.add_mutually_exclusive_group()
    keys.add_argument("--key", default=None, help=KEY_HELP)
    keys.add_argument(
        "--key-file", default=None, help="a file holding the HMAC key (a final newline is cut)"
    )
    command.add_argument(
        "--destination",
        default=None,
        help="the monitors' control topic (default: heartwire.control.CONTROL_TOPIC, _hw.control)",
    )


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if args.command == "demo":
        from heartwire.demo import run_demo

        report = run_demo(args.topics, args.period, args.duration, args.seed)
        print("\n".join(["", "summary:", *("  " + line for line in report.lines())]))
        return 0 if report.outages_detected >= report.outages_due else 1
    try:
        if args.command == "publish":
            return _publish(args)
        if args.command == "fail":
            return _fail(args)
        if args.command in ("silence", "unsilence"):
            return _control(args)
        if args.command == "report":
            from heartwire.report_cmd import run_report

            return run_report(
                events=args.events,
                start=args.start,
                end=args.end,
                out=args.out,
                period=args.period,
                allowed_misses=args.allowed_misses,
                master=args.master,
            )
        if args.command == "status":
            return _status(args)
        return _watch(args)
    except (ValueError, OSError) as exc:
        print(f"heartwire {args.command}: {exc}", file=sys.stderr)
        return 2


def _until_stopped(duration: float | None, done: threading.Event) -> None:
    """Wait for ``done``, ``duration`` seconds, or SIGINT/SIGTERM, whichever comes first."""
    if threading.current_thread() is threading.main_thread():
        for sig in (signal.SIGINT, signal.SIGTERM):
            signal.signal(sig, lambda *_: done.set())
    done.wait(duration)


def _publish(args: argparse.Namespace) -> int:
    from heartwire.events import ExceptionEvent, Sent, wall_fields
    from heartwire.listeners import PublisherListener
    from heartwire.publisher import HeartbeatPublisher
    from heartwire.transport import connect

    done = threading.Event()

    class Report(PublisherListener):
        def on_sent(self, event: Sent) -> None:
            print(json.dumps({"event": "sent", **wall_fields(event)}), flush=True)
            if args.count is not None and event.seq >= args.count:
                done.set()

        def on_exception(self, event: ExceptionEvent) -> None:
            print(f"heartwire publish: {event.reason}: {event.error}", file=sys.stderr)

    broker = connect(args.broker)
    pub = HeartbeatPublisher(broker, args.topic, args.period, listeners=[Report()], key=args.key)
    try:
        pub.start()
        _until_stopped(args.duration, done)
    finally:
        pub.stop()
        broker.close()
    return 0


def _fail(args: argparse.Namespace) -> int:
    """One signed (with a key) down beat, then exit: 0 if the broker took it, 1 if not."""
    import time
    import uuid

    from heartwire.beat import MAX_REASON_LEN, Beat, BeatCodec
    from heartwire.control import RESERVED_PREFIX
    from heartwire.transport import connect

    if args.topic.startswith(RESERVED_PREFIX):  # as HeartbeatPublisher refuses it
        raise ValueError(
            f"topic {args.topic!r} is under {RESERVED_PREFIX!r}: heartwire's own topics "
            "(control messages, keep-alive pings) are never beats"
        )
    if not 1 <= len(args.reason) <= MAX_REASON_LEN:
        raise ValueError(
            f"--reason must be 1 to {MAX_REASON_LEN} characters, got {len(args.reason)}"
        )
    codec = BeatCodec(args.key)
    # A boot id of its own (and seq 1): with a key, monitors check replays per boot.
    beat = Beat(
        args.topic,
        seq=1,
        boot_id=uuid.uuid4().hex,
        sent_at=time.time(),
        period=args.period,
        state="down",
        reason=args.reason,
    )
    body = codec.encode(beat)  # ValueError naming the field (e.g. a bad topic)
    broker = connect(args.broker)
    try:
        broker.publish(args.topic, body, {}, timeout=10.0)
    except Exception as exc:
        print(f"heartwire fail: send failed: {exc!r}", file=sys.stderr)
        return 1
    finally:
        broker.close()
    print(json.dumps({"event": "down", "topic": args.topic, "reason": args.reason}), flush=True)
    return 0


def _control_key(args: argparse.Namespace) -> bytes:
    """The key from --key, --key-file or $HEARTWIRE_KEY; errors never show it."""
    if args.key_file is not None:
        try:
            with open(args.key_file, "rb") as f:
                key = f.read()
        except OSError as exc:
            raise ValueError(f"--key-file: cannot read {args.key_file!r}: {exc.strerror}") from None
        key = key[:-2] if key.endswith(b"\r\n") else key[:-1] if key.endswith(b"\n") else key
        if not key:
            raise ValueError(f"--key-file: {args.key_file!r} holds no key")
        return key
    key_text = args.key if args.key is not None else os.environ.get(KEY_ENV)
    if not key_text:
        raise ValueError(
            f"a key is required: --key, --key-file or ${KEY_ENV} (monitors honour only "
            "signed control messages)"
        )
    return key_text.encode("utf-8")


def _control(args: argparse.Namespace) -> int:
    """One signed control message per silence or id, then exit: 0 if the broker took them all,
    1 if not (after the rest were tried), 2 for bad arguments (nothing sent)."""
    import datetime as dt

    from heartwire.control import CONTROL_TOPIC, MAX_CONTROL_SILENCE, ControlMessage
    from heartwire.events import iso_utc
    from heartwire.policy import parse_duration
    from heartwire.report import parse_time
    from heartwire.transport import connect
    from heartwire.transport.patterns import validate_topic

    key = _control_key(args)
    destination = CONTROL_TOPIC if args.destination is None else args.destination
    validate_topic(destination, "--destination")
    messages: list[ControlMessage] = []
    if args.command == "silence":
        if args.duration is not None:
            seconds = parse_duration(args.duration, "--for")
            if seconds > MAX_CONTROL_SILENCE:
                raise ValueError(f"--for must be at most 30d, got {args.duration!r}")
            messages.append(
                ControlMessage.silence(
                    args.pattern, duration=seconds, reason=args.reason, destination=destination
                )
            )
        else:
            until = parse_time(args.until, "--until")
            ahead = (until - dt.datetime.now(dt.timezone.utc)).total_seconds()
            if ahead <= 0:
                raise ValueError(f"--until must be in the future, got {args.until!r}")
            if ahead > MAX_CONTROL_SILENCE - 1.0:
                raise ValueError(f"--until must be at most 30 days ahead, got {args.until!r}")
            messages.append(
                ControlMessage.silence(
                    args.pattern, until=until, reason=args.reason, destination=destination
                )
            )
    else:
        messages.extend(ControlMessage.unsilence(i, destination=destination) for i in args.ids)
    bodies = [m.encode(key) for m in messages]  # before connecting: bad input sends nothing
    broker = connect(args.broker)
    failed = 0
    try:
        for message, body in zip(messages, bodies, strict=True):
            try:
                broker.publish(destination, body, {}, timeout=10.0)  # type: ignore[attr-defined]
            except Exception as exc:
                failed += 1
                print(f"heartwire {args.command}: send failed: {exc!r}", file=sys.stderr)
                continue
            out: dict[str, Any] = {"event": message.op, "id": message.id}
            if message.op == "silence":
                out.update(pattern=message.pattern, reason=message.reason)
                assert message.until is not None
                out.update(until=message.until, until_iso=iso_utc(message.until))
            out["destination"] = destination
            print(json.dumps(out), flush=True)
    finally:
        broker.close()  # type: ignore[attr-defined]
    return 1 if failed else 0


def _printer(received: bool = False) -> Any:
    """``heartwire watch``'s listener, printing one JSON line per event on stdout:
    ``{"event": kind, ...}`` with :func:`~heartwire.events.wall_fields`. A ``failed`` or
    ``resumed`` the alerting policy marked carries ``"silenced": true`` or
    ``"suppressed_by": parent`` (watch prints every event, marked or not); a topic that starts
    or stops flapping prints ``"event": "flapping"`` (``"flapping": true``/``false``). With
    ``received``, every beat too."""
    from heartwire.events import (
        CaughtUp,
        ExceptionEvent,
        Failed,
        Flapping,
        Lagging,
        LocalPause,
        Received,
        Resumed,
        Started,
        Stopped,
        wall_fields,
    )
    from heartwire.listeners import SubscriberListener

    def emit(kind: str, event: Any) -> None:
        print(json.dumps({"event": kind, **wall_fields(event)}, default=str), flush=True)

    class Printer(SubscriberListener):
        def on_started(self, event: Started) -> None:
            emit("started", event)

        def on_stopped(self, event: Stopped) -> None:
            emit("stopped", event)

        def on_failed(self, event: Failed) -> None:
            emit("failed", event)

        def on_resumed(self, event: Resumed) -> None:
            emit("resumed", event)

        def on_flapping(self, event: Flapping) -> None:
            emit("flapping", event)

        def on_local_pause(self, event: LocalPause) -> None:
            emit("local_pause", event)

        def on_lagging(self, event: Lagging) -> None:
            emit("lagging", event)

        def on_caught_up(self, event: CaughtUp) -> None:
            emit("caught_up", event)

        def on_exception(self, event: ExceptionEvent) -> None:
            emit("exception", event)

    class PrinterWithBeats(Printer):
        def on_received(self, event: Received) -> None:
            emit("received", event)

    return PrinterWithBeats() if received else Printer()


def _flap_options(args: argparse.Namespace) -> dict[str, Any]:
    """The monitor's flapping settings from ``--flap-threshold`` and ``--flap-window``."""
    if (args.flap_threshold is None) != (args.flap_window is None):
        raise ValueError(
            f"give --flap-threshold and --flap-window together, got --flap-threshold "
            f"{args.flap_threshold!r}, --flap-window {args.flap_window!r}"
        )
    return {"flap_threshold": args.flap_threshold, "flap_window": args.flap_window}


def _watch(args: argparse.Namespace) -> int:
    from heartwire.monitor import HeartbeatMonitor
    from heartwire.transport import connect

    flap = _flap_options(args)
    listener = _printer(args.received)
    serve: Any = None
    if args.metrics_port is not None:
        from heartwire.metrics import MetricsUnavailable, require, serve

        try:
            require()  # before connecting: a missing prometheus_client is a usage error
        except MetricsUnavailable as exc:
            print(f"heartwire watch: {exc}", file=sys.stderr)
            return 2
    broker = connect(args.broker)
    mon = HeartbeatMonitor(
        broker,
        args.pattern,
        period=args.period,
        allowed_misses=args.allowed_misses,
        listeners=[listener],
        key=args.key,
        max_beat_age=args.max_beat_age,
        control=args.control,
        group_depth=args.group_depth,
        max_groups=args.max_groups,
        **flap,
    )
    server = None
    try:
        for topic in args.expect:
            mon.expect(topic)
        mon.start()
        if serve is not None:
            server = serve(
                mon,
                args.metrics_port,
                args.metrics_addr,
                per_topic=args.per_topic_metrics,
                max_topic_series=args.max_topic_series,
            )
            where = f"http://{args.metrics_addr}:{server.port}/metrics"
            print(f"heartwire watch: metrics at {where}", file=sys.stderr, flush=True)
        _until_stopped(args.duration, threading.Event())
        if not mon.drain(timeout=5.0):
            print("heartwire watch: listeners did not drain in 5 s", file=sys.stderr)
    finally:
        if server is not None:
            server.close()
        mon.stop()
        broker.close()
    return 0


def _group_status(args: argparse.Namespace) -> int:
    """``status --group``: the group's members and counts as text, once."""
    from heartwire.groups import group_status
    from heartwire.transport import connect
    from heartwire.transport.patterns import validate_topic
    from heartwire.transport.stomp import StompTransport

    if args.pattern is not None:
        print("heartwire status: give a pattern or --group, not both", file=sys.stderr)
        return 2
    try:
        validate_topic(args.group, "--group")
        for topic in args.topic:
            validate_topic(topic, "--topic")
    except ValueError as exc:
        print(f"heartwire status: {exc}", file=sys.stderr)
        return 2
    broker = connect(args.broker)
    try:
        if not isinstance(broker, StompTransport):
            print("heartwire status: --group needs a STOMP broker (--broker)", file=sys.stderr)
            return 2
        st = group_status(broker, args.group, key=args.key, wait=args.wait)
    finally:
        broker.close()
    refused = ", ".join(f"{n} {why}" for why, n in sorted(st.refused.items()))
    if len(st.refused) == 1:
        refused = next(iter(st.refused))  # "3 status messages refused (bad_signature)"
    if not st.members:
        print(f"group {args.group}: no member heard in {st.waited:.3g} s")
        if st.refused:
            n = sum(st.refused.values())
            hint = ""
            if st.refused.keys() & {"bad_signature", "unsigned"}:
                hint = ": check --key / HEARTWIRE_KEY"
            print(f"{n} status messages refused ({refused}){hint}")
        return 1
    owners = st.owners
    print(f"group {args.group}: {len(st.members)} members, {st.shards} shards, {len(owners)} owned")
    for name in sorted(st.members):
        counts = " ".join(f"{k}={v}" for k, v in sorted(st.counts_of(name).items()) if v)
        shards = ",".join(map(str, st.shards_of(name))) or "-"
        print(f"  {_shown(name)}: shards {shards}  {_shown(counts)}".rstrip())
    unowned = sorted(set(range(st.shards)) - set(owners))
    if unowned:
        print(f"  no owner: shards {','.join(map(str, unowned))}")
    print("  counts: " + _shown(" ".join(f"{k}={v}" for k, v in sorted(st.counts.items()) if v)))
    for topic in args.topic:
        shard, member = st.owner_of(topic)
        print(f"  {topic}: shard {shard}, owner {_shown(member) if member else '(none)'}")
    if st.refused:
        print(f"  refused: {sum(st.refused.values())} status messages ({refused})")
    if st.unknown_states:
        print(f"  {st.unknown_states} counts of unknown states left out")
    return 0


def _status(args: argparse.Namespace) -> int:
    if args.group is not None:
        return _group_status(args)
    if args.pattern is None:
        print("heartwire status: a pattern (or --group NAME) is required", file=sys.stderr)
        return 2
    from heartwire.status_view import StatusUnavailable, require

    try:
        require()  # before connecting: a missing rich is a usage error
    except StatusUnavailable as exc:
        print(f"heartwire status: {exc}", file=sys.stderr)
        return 2
    from heartwire import status_view
    from heartwire.monitor import HeartbeatMonitor
    from heartwire.status import RecentEvents
    from heartwire.transport import connect
    from heartwire.transport.urls import redact

    flap = _flap_options(args)
    recent = RecentEvents(max(args.events, 50))
    broker = connect(args.broker)
    mon = HeartbeatMonitor(
        broker,
        args.pattern,
        period=args.period,
        allowed_misses=args.allowed_misses,
        listeners=[recent],
        key=args.key,
        max_beat_age=args.max_beat_age,
        control=args.control,
        **flap,
    )
    done = threading.Event()
    try:
        for topic in args.expect:
            mon.expect(topic)
        mon.start()
        if threading.current_thread() is threading.main_thread():
            for sig in (signal.SIGINT, signal.SIGTERM):
                signal.signal(sig, lambda *_: done.set())
        status_view.run(
            mon,
            recent,
            refresh=args.refresh,
            duration=args.duration,
            done=done,
            top=args.top,
            events=args.events,
            source=redact(args.broker) if args.broker else "memory://",  # drawn: no password
        )
    finally:
        mon.stop()
        broker.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
