"""STOMP broker URLs and connection options: parsing and validation.

Two URL forms::

    stomp://host:port[?option=value&...]
    failover:(stomp://host1:port1,stomp://host2:port2,...)[?option=value&...]

``stomp+ssl://host:port`` is a broker reached over TLS (alone or inside ``failover:(...)``, where
plain and TLS brokers may be mixed); the ``ssl_*`` options configure it (see
:mod:`heartwire.transport.tls`) and are refused for a URL without a TLS broker. A broker URL
may carry credentials (``stomp://user:secret@host:61613``); the port defaults to 61613 (61612,
ActiveMQ's ``stomp+ssl`` port, for ``stomp+ssl``); IPv6 hosts go in brackets
(``stomp://[::1]:61613``). Options may be given in the query string or as keyword arguments to
:func:`heartwire.connect`; a keyword wins over the query. Times are in seconds (fractions
allowed). See :data:`OPTIONS` for every option and its default; the failover options
(``randomize``, ``priority_backup``, the back-off, the attempt limits) and how they combine with
``reconnect_interval`` and ``reconnect_period`` are in ``docs/failover.md``. ActiveMQ's
camelCase names (:data:`ACTIVEMQ_NAMES`) are refused with ours named.

Credentials: a broker's own ``user:secret@`` wins, then ``login=`` / ``passcode=`` (keyword,
then query), then the environment variables :data:`LOGIN_ENV` (``HEARTWIRE_BROKER_LOGIN``) and
:data:`PASSCODE_ENV` (``HEARTWIRE_BROKER_PASSCODE``), which keep the password out of URLs,
command lines and config files. The login and the passcode are taken separately: a broker's
``user@`` without ``:secret`` uses the passcode given there. Importing this module also
installs a filter on stomp.py's logger that cuts the ``passcode`` header out of the frames it
logs at DEBUG level.

Every error is a :class:`ValueError` (or :class:`TypeError` for a keyword of the wrong type) that
names the option and the value, except that passwords are never repeated: a URL is shown with
its password as ``***``, a bad ``passcode`` is described, not echoed, and a query value shows
only as written in the URL, and only where :func:`redact` shows it.

Passwords are best percent-encoded, but raw ``/ ? # @ : , ( )`` and spaces work too: a broker's
password runs from the first ``:`` after its ``scheme://`` to the last ``@`` before the next
broker of a failover list. The next broker starts after a ``,`` followed by ``stomp://`` or
``stomp+ssl://`` (any case), or after a ``,`` right after a broker's ``host:port``:
``failover:(stomp://a:1,u:pw@b:2)`` is two brokers, the second malformed, not the password
``1,u:pw``. A ``passcode=`` value in the query keeps a raw ``&`` unless an option's ``name=``
follows. Only where a URL reads two ways (an ``@`` in a query value:
``stomp://h:1?login=a@b``, or ``,stomp://`` in a password:
``failover:(stomp://u:Sec,stomp://ret@h)``) the query reading, or the list reading, wins, and
:func:`redact` hides both readings. A password that holds a whole ``@host:port,stomp://``
always reads as a list: percent-encode it.
"""

from __future__ import annotations

import logging
import math
import os
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, fields
from typing import Any
from urllib.parse import parse_qsl, unquote, unquote_plus

from heartwire import _validate

__all__ = [
    "ACTIVEMQ_NAMES",
    "DEFAULT_PORT",
    "DEFAULT_TLS_PORT",
    "LOGIN_ENV",
    "MAX_SECONDS",
    "OPTIONS",
    "PASSCODE_ENV",
    "PASSCODE_FILTER",
    "BrokerAddress",
    "PasscodeFilter",
    "StompOptions",
    "parse_url",
    "redact",
]

#: The port of a ``stomp://`` URL that names none.
DEFAULT_PORT = 61613
#: The port of a ``stomp+ssl://`` URL that names none (ActiveMQ's STOMP+SSL connector's).
DEFAULT_TLS_PORT = 61612
#: Environment variables read for the login and passcode when the URL and options give none.
LOGIN_ENV = "HEARTWIRE_BROKER_LOGIN"
PASSCODE_ENV = "HEARTWIRE_BROKER_PASSCODE"

DIALECTS = ("auto", "activemq", "rabbitmq")

#: The most any time option may be, seconds (one day): a wait beyond threading.TIMEOUT_MAX
#: (about 292 years) cannot even be waited for, and a day is already no reconnection schedule.
MAX_SECONDS = 86400.0
#: The least ``reconnect_interval`` may be with ``priority_backup`` or
#: ``use_exponential_back_off`` (0 would try back to back: a busy loop).
MIN_BACKED_OFF_INTERVAL = 0.01


@dataclass(frozen=True)
class BrokerAddress:
    """One broker of a URL. ``str()`` gives ``stomp://host:port`` or ``stomp+ssl://host:port``
    (never the credentials); ``tls``: reached over TLS."""

    host: str
    port: int
    login: str | None = None
    passcode: str | None = field(default=None, repr=False)
    tls: bool = False

    def __str__(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        scheme = "stomp+ssl" if self.tls else "stomp"
        return f"{scheme}://{host}:{self.port}"


@dataclass(frozen=True)
class StompOptions:
    """A parsed URL and its options (defaults as in :data:`OPTIONS`)."""

    brokers: tuple[BrokerAddress, ...]
    #: Whether the URL was a ``failover:(...)`` list.
    failover: bool = False
    login: str | None = None
    passcode: str | None = field(default=None, repr=False)
    #: The CONNECT frame's ``host`` header: RabbitMQ's virtual host (ActiveMQ ignores it).
    vhost: str = "/"
    #: ``"activemq"``, ``"rabbitmq"``, or ``"auto"``: from the CONNECTED frame's ``server``.
    dialect: str = "auto"
    #: STOMP heart-beating, both ways, seconds (0: off). A silent broker is dropped after 2x.
    heartbeat: float = 4.0
    #: Bound on opening one connection (name lookup, TCP connect, CONNECT/CONNECTED), seconds.
    connect_timeout: float = 5.0
    #: Wait between reconnection attempts, seconds.
    reconnect_interval: float = 1.0
    #: Give up reconnecting after this many seconds without a broker (0: never give up).
    reconnect_period: float = 0.0
    #: Shuffle the list anew for each pass over it (False: the URL's order; see below).
    randomize: bool = False
    #: While connected to any broker but the first of the list, keep trying the first and
    #: move back to it as soon as it accepts (a planned switch, not an outage).
    priority_backup: bool = False
    #: Multiply each wait between reconnection tries by ``back_off_multiplier`` ...
    use_exponential_back_off: bool = False
    back_off_multiplier: float = 2.0
    #: ... up to this many seconds.
    max_reconnect_delay: float = 30.0
    #: Take a random fraction, up to this one, off each wait (0: none; 1: down to nothing).
    reconnect_jitter: float = 0.0
    #: Connection tries after a loss before the transport gives up and closes (-1: no limit;
    #: 0: none, give up at the first loss).
    max_reconnect_attempts: int = -1
    #: Tries beyond one per broker before the first connection fails (-1: until one connects).
    startup_max_reconnect_attempts: int = 0
    #: How long a send waits for a connection during an outage before SendTimeout, seconds;
    #: also how long a frame's write may make no progress before the link is dropped.
    request_blocking_time: float = 10.0
    #: A lost broker is confirmed dead after this many failed reconnection checks ...
    failover_check_count: int = 1
    #: ... this many seconds apart; only then is the next broker of the list tried.
    failover_check_timeout: float = 1.0
    #: Self-ping through the broker every this many seconds while subscribed (0: off).
    keepalive_interval: float = 5.0
    #: Tear the connection down and reconnect after this many pings in a row did not come back.
    keepalive_allowed: int = 3
    #: TLS (``stomp+ssl://`` brokers): PEM file of the CAs to trust (None: the system's).
    ssl_ca_file: str | None = None
    #: Verify the broker's certificate and host name (False: encrypt without authenticating).
    ssl_verify: bool = True
    #: PEM client certificate (for brokers that require one); its key too unless ssl_key_file.
    ssl_cert_file: str | None = None
    #: PEM private key of the client certificate.
    ssl_key_file: str | None = None
    #: Password of an encrypted client key.
    ssl_key_password: str | None = field(default=None, repr=False)

    @property
    def url(self) -> str:
        """The URL without credentials or options."""
        if self.failover:
            return "failover:(" + ",".join(map(str, self.brokers)) + ")"
        return str(self.brokers[0])

    def credentials(self, broker: BrokerAddress) -> tuple[str | None, str | None]:
        """``(login, passcode)`` for ``broker``: its own from the URL, else the options'. A
        broker with a login but no password (``stomp://svc@host``) takes the options' passcode
        (keyword, query or :data:`PASSCODE_ENV`)."""
        if broker.login is not None:
            passcode = broker.passcode if broker.passcode is not None else self.passcode
            return broker.login, passcode
        return self.login, self.passcode


# How a checker shows a value in its errors: repr() for a keyword's; for a value from the URL's
# query, its text as redact() shows it, if it does (see parse_url).
_Show = Callable[[Any], str]


def _seconds(*, positive: bool = False) -> Callable[[str, Any], float]:
    def check(name: str, value: Any, show: _Show = repr) -> float:
        raw = value
        if isinstance(value, str):
            text = value.strip()
            try:
                value = float(text)
            except ValueError:
                raise ValueError(f"option {name}={show(text)} is not a number of seconds") from None
        field = f"option {name}"
        seconds = _validate.seconds(value, field, allow_zero=not positive, shown=show(raw))
        if seconds > MAX_SECONDS:
            raise ValueError(
                f"{field}={show(raw)} must be at most {MAX_SECONDS:g} seconds (one day)"
            )
        return seconds

    return check


def _count(minimum: int) -> Callable[[str, Any], int]:
    def check(name: str, value: Any, show: _Show = repr) -> int:
        if isinstance(value, str):
            text = value.strip()
            if not re.fullmatch(r"[+-]?\d+", text):
                raise ValueError(f"option {name}={show(text)} is not a whole number")
            value = int(text)
        return _validate.count(value, f"option {name}", minimum, shown=show(value))

    return check


def _number(minimum: float, maximum: float | None = None) -> Callable[..., float]:
    # A plain finite number (not a time) in [minimum, maximum].
    bound = f">= {minimum:g}" if maximum is None else f"from {minimum:g} to {maximum:g}"

    def check(name: str, value: Any, show: _Show = repr) -> float:
        raw = value
        if isinstance(value, str):
            try:
                value = float(value.strip())
            except ValueError:
                raise ValueError(f"option {name}={show(raw)} is not a number") from None
        elif isinstance(value, bool) or not isinstance(value, int | float):
            raise TypeError(f"option {name} must be a number, got {type(value).__name__} {raw!r}")
        number = float(value)
        if not (math.isfinite(number) and number >= minimum) or (
            maximum is not None and number > maximum
        ):
            raise ValueError(f"option {name}={show(raw)} must be a finite number {bound}")
        return number

    return check


def _text(name: str, value: Any, show: _Show = repr) -> str:
    if not isinstance(value, str):
        raise TypeError(f"option {name} must be a str, got {type(value).__name__} {value!r}")
    if "\n" in value or "\r" in value or "\0" in value:
        raise ValueError(f"option {name}={show(value)} must not contain line breaks or NUL")
    return value


def _secret(name: str, value: Any, show: _Show = repr) -> str:
    # Never repeat the value: it is a password.
    if not isinstance(value, str):
        raise TypeError(f"option {name} must be a str, got a {type(value).__name__}")
    if "\n" in value or "\r" in value or "\0" in value:
        raise ValueError(f"option {name} must not contain line breaks or NUL (value not shown)")
    return value


def _flag(name: str, value: Any, show: _Show = repr) -> bool:
    if isinstance(value, bool):
        return value
    if not isinstance(value, str):
        raise TypeError(f"option {name} must be a bool, got {type(value).__name__} {value!r}")
    text = value.strip().lower()
    if text in ("1", "true", "yes", "on"):
        return True
    if text in ("0", "false", "no", "off"):
        return False
    raise ValueError(f"option {name}={show(value)} is not a boolean (true/false, 1/0, yes/no)")


def _file(name: str, value: Any, show: _Show = repr) -> str:
    path = _text(name, value, show)
    if not path:
        raise ValueError(f"option {name} is empty; expected the path of a PEM file")
    if not os.path.isfile(path):
        raise ValueError(f"option {name}={show(path)}: no such file")
    if not os.access(path, os.R_OK):
        raise ValueError(f"option {name}={show(path)}: the file is not readable")
    return path


def _dialect(name: str, value: Any, show: _Show = repr) -> str:
    if not isinstance(value, str):
        raise TypeError(f"option {name} must be a str, got {type(value).__name__} {value!r}")
    dialect = value.strip().lower()
    if dialect not in DIALECTS:
        raise ValueError(f"option {name}={show(value)} is not one of {', '.join(DIALECTS)}")
    return dialect


#: Every option: name -> (checker, description). Defaults are the :class:`StompOptions` fields'.
OPTIONS: Mapping[str, tuple[Callable[..., Any], str]] = {
    "login": (_text, "user name sent in CONNECT"),
    "passcode": (_secret, "password sent in CONNECT"),
    "vhost": (_text, "CONNECT host header (RabbitMQ virtual host)"),
    "dialect": (_dialect, "broker dialect: auto, activemq or rabbitmq"),
    "heartbeat": (_seconds(), "STOMP heart-beat interval, seconds (0: off)"),
    "connect_timeout": (_seconds(positive=True), "bound on opening one connection, seconds"),
    "reconnect_interval": (_seconds(), "wait between reconnection attempts, seconds"),
    "reconnect_period": (_seconds(), "give up reconnecting after this long, seconds (0: never)"),
    "randomize": (_flag, "shuffle the failover list for each pass over it (default false)"),
    "priority_backup": (_flag, "come back to the list's first broker when it returns"),
    "use_exponential_back_off": (_flag, "grow the wait between reconnection tries"),
    "back_off_multiplier": (_number(1.0), "factor of each wait over the one before (>= 1)"),
    "max_reconnect_delay": (_seconds(positive=True), "cap on a backed-off wait, seconds"),
    "reconnect_jitter": (_number(0.0, 1.0), "random fraction (0 to 1) taken off each wait"),
    "max_reconnect_attempts": (_count(-1), "tries after a loss before giving up (-1: no limit)"),
    "startup_max_reconnect_attempts": (
        _count(-1),
        "tries beyond one per broker at start-up (-1: until one connects)",
    ),
    "request_blocking_time": (_seconds(), "how long a send waits during an outage, seconds"),
    "failover_check_count": (_count(1), "failed checks that confirm a broker dead"),
    "failover_check_timeout": (_seconds(), "seconds between those checks"),
    "keepalive_interval": (_seconds(), "self-ping interval while subscribed, seconds (0: off)"),
    "keepalive_allowed": (_count(1), "missed self-pings that force a reconnect"),
    "ssl_ca_file": (_file, "TLS: PEM file of the CAs to trust (default: the system's)"),
    "ssl_verify": (_flag, "TLS: verify the broker's certificate and host name (default true)"),
    "ssl_cert_file": (_file, "TLS: PEM client certificate (and key, unless ssl_key_file)"),
    "ssl_key_file": (_file, "TLS: PEM private key of the client certificate"),
    "ssl_key_password": (_secret, "TLS: password of an encrypted client key"),
}

_DEFAULTS = {f.name: f.default for f in fields(StompOptions)}

#: ActiveMQ failover transport option names -> ours (an unknown option named like one of these
#: gets a hint; the values mean the same, times in seconds rather than milliseconds).
ACTIVEMQ_NAMES: Mapping[str, str] = {
    "initialReconnectDelay": "reconnect_interval",
    "maxReconnectDelay": "max_reconnect_delay",
    "useExponentialBackOff": "use_exponential_back_off",
    "backOffMultiplier": "back_off_multiplier",
    "reconnectDelayExponent": "back_off_multiplier",
    "maxReconnectAttempts": "max_reconnect_attempts",
    "startupMaxReconnectAttempts": "startup_max_reconnect_attempts",
    "priorityBackup": "priority_backup",
}

# Where the passwords of a URL are. They are found before the URL is split anywhere, on the
# whole text, so that no character in a password ('/', '?', '#', '@', ',', ')', a space...)
# can move a split into it; the parser then works on a copy with each password replaced by a
# token (``_hide``), and every message shows only text that ``redact()`` shows too.
_SCHEME = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*://")
_FAILOVER = re.compile(r"failover:(?://)?\(", re.IGNORECASE)
# The scheme of a failover list's next broker (its ',' and blanks included): only the schemes
# a broker may have, so that ',x://' in a password does not end it.
_LIST_SCHEME = re.compile(r",\s*stomp(?:\+ssl)?://", re.IGNORECASE)
# A whole broker without credentials ('host', 'host:port', '[v6]:port'): a ',' after it ends
# the broker, whatever follows ('stomp://a:1,u:pw@b:2' is two brokers, the second malformed).
_HOSTPORT = re.compile(r"\s*(?:\[[A-Za-z0-9._:%-]*\]|[A-Za-z0-9._%-]+)(?::\d+)?/?\s*")
_TOKEN = re.compile("\x00(\\d+)\x00")


def _secret_name(name: str) -> bool:
    # A query option whose value is a password (passcode, ssl_key_password, or a misspelling).
    return "pass" in unquote_plus(name).lower()


def _entry_starts(url: str, own_scheme: bool = True) -> list[tuple[int, int]]:
    # (start, end) of each broker's text (after its 'scheme://'; for a malformed URL without
    # one, from the start of the URL or of the failover list, or after its ','). In a failover
    # list a ',' ends a broker where the next broker's scheme follows it, or where the broker's
    # text so far is a whole 'host[:port]' (no credentials): elsewhere a ',' is a password's.
    # A broker's scheme counts only at the start of the URL or of the list, or after such a
    # ',': a password may hold '://'.
    head = _FAILOVER.match(url)
    first = head.end() if head else 0
    own = _SCHEME.match(url, first) if own_scheme else None
    starts, ends = [own.end() if own else first], []
    if head:
        for comma in (i for i in range(first, len(url)) if url[i] == ","):
            if not (_LIST_SCHEME.match(url, comma) or _HOSTPORT.fullmatch(url, starts[-1], comma)):
                continue
            ends.append(comma)
            after = comma + 1
            while after < len(url) and url[after].isspace():
                after += 1
            scheme = _SCHEME.match(url, after)
            starts.append(scheme.end() if scheme else after)
    ends.append(len(url))
    return list(zip(starts, ends, strict=True))


def _strict_query(rest: str, failover: bool) -> bool:
    # Whether ``rest`` (from the first '/', '?', '#' or ')' after a broker's host) reads as the
    # end of a URL: [')'] ['/'] '?' then name=value pairs naming known options only (a
    # password option's value may hold raw '&', as _query_secret_spans reads it).
    if failover:
        if not rest.startswith(")"):
            return False
        rest = rest[1:]
    if rest.startswith("/"):
        rest = rest[1:]
    if not rest.startswith("?"):
        return False
    in_secret = False
    for piece in rest[1:].split("&"):
        name, eq, _ = piece.partition("=")
        if eq and unquote_plus(name) in OPTIONS:
            in_secret = _secret_name(name)
        elif not in_secret:
            return False
    return True


def _password_spans(url: str, lenient: bool) -> list[tuple[int, int]]:
    """(start, end) of each broker's password in ``url``: the text after the first ':' of the
    broker's text, up to the last '@' before the next broker. Only for the last broker, when
    the text after its host reads as a query of known options (``stomp://h:1?login=a@b``), an
    '@' there is the query's, unless ``lenient`` (``redact()``: hide both readings)."""
    spans = []
    entries = _entry_starts(url)
    if lenient and not re.match(r"(?i)(failover:(//)?\()?\s*stomp(\+ssl)?://", url):
        # An unknown scheme: 'svc://x@h' may be a user 'svc' with the password '//x'.
        entries += _entry_starts(url, own_scheme=False)[:1]
    failover = _FAILOVER.match(url) is not None
    if lenient and failover:
        # The other reading of a ',' inside a password: a broker's password may run on from
        # its first ':' to the last '@' of the next broker that has one, unless the broker
        # ends in a whole 'host[:port]' followed by ',stomp://' ('stomp://h:1,stomp://u:p@g:2'
        # keeps its port and second broker). Where no such scheme follows, the list reading
        # does not parse anyway ('svc:1,pw@h' is 'svc:1' and 'pw@h', without a scheme).
        for k, (s, e) in enumerate(entries[:-1]):
            region = url[s:e]
            colon = region.find(":")
            if colon < 0:
                continue
            tail = region[region.rfind("@") + 1 :]
            if _HOSTPORT.fullmatch(tail) and _LIST_SCHEME.match(url, e):
                continue
            for s2, e2 in entries[k + 1 :]:
                at = url.rfind("@", s2, e2)
                if at >= 0:
                    spans.append((s + colon + 1, at))
                    break
    for s, e in entries:
        last = e == len(url)
        region = url[s:e]
        at = region.rfind("@")
        if at < 0:
            continue
        if last and not lenient:
            cut = re.search(r"[/?#)]" if failover else r"[/?#]", region)
            if (
                cut is not None
                and cut.start() < at
                and _strict_query(region[cut.start() :], failover)
            ):
                at = region.rfind("@", 0, cut.start())
                if at < 0:
                    continue
        colon = region.find(":", 0, at)
        if colon >= 0 and colon + 1 < at:
            spans.append((s + colon + 1, s + at))
    return spans


def _query_secret_spans(url: str, query_at: int) -> list[tuple[int, int]]:
    # The values of password options in the query starting at ``query_at`` (after the '?'). A
    # raw '&' inside such a value is kept in it unless a known option's 'name=' follows.
    spans = []
    pos = query_at
    pieces = url[query_at:].split("&")
    i = 0
    while i < len(pieces):
        piece = pieces[i]
        name, eq, _ = piece.partition("=")
        start = pos + len(name) + 1
        end = pos + len(piece)
        pos = end + 1
        i += 1
        if not (eq and _secret_name(name)):
            continue
        while i < len(pieces):
            nxt, nxt_eq, _ = pieces[i].partition("=")
            if nxt_eq and unquote_plus(nxt) in OPTIONS:
                break
            end = pos + len(pieces[i])
            pos = end + 1
            i += 1
        if end > start:
            spans.append((start, end))
    return spans


def _query_start(masked: str) -> int | None:
    # Where the query of a URL whose passwords are masked begins (after its '?'), if any.
    head = _FAILOVER.match(masked)
    if head:
        close = masked.find(")", head.end())
        if close < 0:
            return None
        q = masked.find("?", close)
    else:
        q = masked.find("?")
    return None if q < 0 else q + 1


def _mask(url: str, spans: list[tuple[int, int]], token: Callable[[int, str], str]) -> str:
    merged: list[list[int]] = []
    for a, b in sorted(spans):
        if merged and a <= merged[-1][1]:  # overlapping: one span
            merged[-1][1] = max(merged[-1][1], b)
        else:
            merged.append([a, b])
    out, pos = [], 0
    for n, (a, b) in enumerate(merged):
        out.append(url[pos:a])
        out.append(token(n, url[a:b]))
        pos = b
    out.append(url[pos:])
    return "".join(out)


def _secrets(url: str, lenient: bool) -> list[tuple[int, int]]:
    spans: list[tuple[int, int]] = []
    for loose in (False, True) if lenient else (False,):
        found = _password_spans(url, loose)
        # Query secrets are looked for with the passwords blanked (same length, same places).
        blank = _mask(url, found, lambda n, text: "\x01" * len(text))
        q = _query_start(blank)
        spans += found
        if q is not None:
            spans += _query_secret_spans(blank, q)
    if lenient:  # and where the query would start if no password held a '?'
        q = _query_start(url)
        if q is not None:
            spans += _query_secret_spans(url, q)
    return spans


def redact(url: str) -> str:
    """``url`` with every password replaced by ``***`` (for messages and logs): a broker's
    ``user:password@`` (whatever characters the password holds, raw or percent-encoded) and
    the value of a ``passcode=`` (any option whose name holds "pass") in the query."""
    return _mask(url, _secrets(url, lenient=True), lambda n, text: "***")


def _hide(url: str) -> tuple[str, list[str]]:
    """A copy of ``url`` with each password replaced by a token (NUL, its index, NUL), and the
    passwords."""
    secrets: list[str] = []

    def token(n: int, text: str) -> str:
        secrets.append(text)
        return f"\x00{len(secrets) - 1}\x00"

    return _mask(url, _secrets(url, lenient=False), token), secrets


def _show(text: str, whole: str) -> str:
    """A part of a hidden copy, for a message about the URL whose ``redact()`` is ``whole``:
    each token as ``***``, and only if ``whole`` shows it too (``redact()`` hides more, where
    a URL reads two ways); else a note that it is not shown."""
    text = _TOKEN.sub("***", text)
    return text if text in whole else "(not shown: it may hold a password)"


def _shown_as(text: str, whole: str) -> _Show:
    """A checker's ``show`` for a value whose text in the hidden copy is ``text``."""
    return lambda _value: repr(_show(text, whole))


def _reveal(text: str, secrets: list[str], decode: Callable[[str], str] = unquote) -> str:
    """A part of a hidden copy with its tokens replaced by the passwords, ``decode``-d."""
    return _TOKEN.sub(lambda m: decode(secrets[int(m[1])]), text)


class PasscodeFilter(logging.Filter):
    """Cuts everything after ``passcode:`` out of a log record's message.

    stomp.py logs every frame it sends at DEBUG level, the CONNECT frame's ``passcode`` header
    included: its own masking pattern wants blanks after the colon, which frames never have. The
    rest of such a message is replaced, not parsed, so no quoting in a password can defeat it.
    """

    def filter(self, record: logging.LogRecord) -> bool:
        try:
            text = record.getMessage()
        except Exception:  # a malformed record: leave it to logging's own error handling
            return True
        cut = text.find("passcode:")
        if cut >= 0:
            record.msg = text[: cut + len("passcode:")] + "*** (rest of the message not shown)"
            record.args = ()
        return True


#: The filter on stomp.py's logger (installed once, when this module is imported).
PASSCODE_FILTER = PasscodeFilter()
logging.getLogger("stomp.py").addFilter(PASSCODE_FILTER)


def _broker(text: str, whole: str, secrets: list[str], in_list: bool = False) -> BrokerAddress:
    # ``text``: one broker of the hidden copy; ``whole``: the redacted URL.
    shown = _show(text, whole)
    scheme, sep, rest = text.partition("://")
    if not sep:
        hint = " (a ',' in a password is written %2C)" if in_list else ""
        raise ValueError(
            f"url {whole!r}: broker {shown!r} is not a URL; expected 'stomp://host:port'{hint}"
        )
    if scheme.lower() not in ("stomp", "stomp+ssl"):
        raise ValueError(
            f"url {whole!r}: broker {shown!r} has the scheme {_show(scheme, whole)!r}; "
            "only 'stomp' and 'stomp+ssl' are supported"
        )
    tls = scheme.lower() == "stomp+ssl"
    if "?" in rest or "#" in rest:
        raise ValueError(
            f"url {whole!r}: broker {shown!r} has its own options; "
            "put options after the whole URL ('failover:(...)?option=value')"
        )
    rest = rest.rstrip("/")
    if "/" in rest:
        raise ValueError(f"url {whole!r}: broker {shown!r} has a path; expected host:port")
    login = passcode = None
    userinfo, at, hostport = rest.rpartition("@")
    if at:
        user, colon, password = userinfo.partition(":")
        login = unquote(user)
        passcode = _reveal(password, secrets) if colon else None
    if hostport.startswith("["):
        host, bracket, tail = hostport[1:].partition("]")
        if not bracket or (tail and not tail.startswith(":")):
            raise ValueError(f"url {whole!r}: broker {shown!r} has a malformed IPv6 host")
        port_text = tail[1:] if tail else ""
    else:
        host, colon, port_text = hostport.partition(":")
        if colon and not port_text:
            raise ValueError(f"url {whole!r}: broker {shown!r} has an empty port")
    if not host:
        raise ValueError(f"url {whole!r}: broker {shown!r} has no host")
    if not re.fullmatch(r"[A-Za-z0-9._:%-]+", host):
        raise ValueError(
            f"url {whole!r}: broker {shown!r} has an invalid host {_show(host, whole)!r}"
        )
    port = DEFAULT_TLS_PORT if tls else DEFAULT_PORT
    if port_text:
        if not port_text.isdigit() or not 0 < int(port_text) < 65536:
            # In a list, a "port" that is not a number is never shown: it may be the start of
            # a password that holds ',stomp://' ('failover:(stomp://svc:Secret,stomp://T@h)').
            what = (
                "(not shown: it may hold a password)"
                if in_list and not port_text.isdigit()
                else repr(_show(port_text, whole))
            )
            raise ValueError(
                f"url {whole!r}: broker {shown!r} has the port {what}; "
                "expected a number from 1 to 65535"
            )
        port = int(port_text)
    return BrokerAddress(host, port, login, passcode, tls)


def _split_failover(url: str, whole: str) -> tuple[list[str], str]:
    # ``url``: the hidden copy; ``whole``: the redacted URL.
    body = url[len("failover:") :]
    if body.startswith("//"):
        body = body[2:]
    if not body.startswith("("):
        raise ValueError(
            f"url {whole!r}: a failover URL lists its brokers in parentheses: "
            "'failover:(stomp://a:61613,stomp://b:61614)?option=value'"
        )
    inner, paren, query = body[1:].partition(")")
    if not paren:
        raise ValueError(f"url {whole!r}: the broker list has no closing parenthesis")
    if query and not query.startswith("?"):
        raise ValueError(
            f"url {whole!r}: unexpected {_show(query, whole)!r} after the broker list; "
            "options follow a '?'"
        )
    parts = [p.strip() for p in inner.split(",")]
    if not inner.strip() or any(not p for p in parts):
        raise ValueError(f"url {whole!r}: the broker list has an empty entry")
    return parts, query[1:]


def _query(query: str, whole: str, secrets: list[str]) -> dict[str, tuple[str, str]]:
    # name -> (value, its text in the hidden copy: for messages, through _show).
    out: dict[str, tuple[str, str]] = {}
    if not query:
        return out
    try:
        pairs = parse_qsl(query, keep_blank_values=True, strict_parsing=True)
    except ValueError:
        raise ValueError(
            f"url {whole!r}: the options {_show(query, whole)!r} are not 'name=value&...'"
        ) from None
    # parse_qsl splits on '&' only (strict: every piece is name=value), in order.
    texts = [piece.partition("=")[2] for piece in query.split("&")]
    for (name, value), text in zip(pairs, texts, strict=True):
        if name in out:
            raise ValueError(f"url {whole!r}: option {name} is given twice")
        out[name] = (_reveal(value, secrets, unquote_plus), text)
    return out


def parse_url(url: str, **options: Any) -> StompOptions:
    """Parse a ``stomp://`` or ``failover:(...)`` URL and options (see the module docs)."""
    if not isinstance(url, str):
        raise TypeError(f"url must be a str, got {type(url).__name__}")
    text = url.strip()
    # Passwords are taken out before anything is split (see _password_spans).
    hidden, secrets = _hide(text)
    shown = redact(text)
    if hidden.lower().startswith("failover:"):
        parts, query = _split_failover(hidden, shown)
        failover = True
    else:
        head, _, query = hidden.partition("?")
        parts = [head]
        failover = False
    brokers = tuple(_broker(p, shown, secrets, failover) for p in parts)
    seen: set[tuple[str, int]] = set()
    for b in brokers:
        key = (b.host.lower(), b.port)
        if key in seen:
            raise ValueError(f"url {shown!r} lists the broker {b} twice")
        seen.add(key)
    from_query = _query(query, shown, secrets)
    given: dict[str, Any] = {name: value for name, (value, _) in from_query.items()}
    given.update(options)
    values: dict[str, Any] = {}
    for name, value in given.items():
        # A value from the query shows only as redact() shows it: where the URL reads two
        # ways, it may be part of a password.
        show: _Show = repr if name in options else _shown_as(from_query[name][1], shown)
        spec = OPTIONS.get(name)
        if spec is None:
            known = ", ".join(sorted(OPTIONS))
            what = "value not shown" if "pass" in name.lower() else show(value)
            ours = ACTIVEMQ_NAMES.get(name)
            if ours is not None:
                unit = " (in seconds, not ms)" if ours.endswith(("interval", "delay")) else ""
                raise ValueError(
                    f"unknown option {name} ({what}): ActiveMQ's {name} is {ours} here{unit}"
                )
            raise ValueError(f"unknown option {name} ({what}); known options: {known}")
        values[name] = spec[0](name, value, show)
    for name, env in (("login", LOGIN_ENV), ("passcode", PASSCODE_ENV)):
        if name not in values and os.environ.get(env):
            # The checker names the variable; a passcode is never echoed.
            values[name] = OPTIONS[name][0](
                f"{name} (from the environment variable {env})", os.environ[env]
            )
    tls_given = sorted(n for n in values if n.startswith("ssl_"))
    if tls_given and not any(b.tls for b in brokers):
        raise ValueError(
            f"url {shown!r} has no stomp+ssl:// broker; the options {', '.join(tls_given)} "
            "apply only to brokers reached over TLS"
        )
    interval = values.get("keepalive_interval", _DEFAULTS["keepalive_interval"])
    connect_timeout = values.get("connect_timeout", _DEFAULTS["connect_timeout"])
    if 0 < interval < 0.01:
        raise ValueError(f"option keepalive_interval={interval!r} must be 0 (off) or >= 0.01")
    if connect_timeout < 0.01:
        raise ValueError(f"option connect_timeout={connect_timeout!r} must be >= 0.01")
    _check_failover(values, brokers, shown)
    return StompOptions(brokers=brokers, failover=failover, **values)


def _check_failover(values: dict[str, Any], brokers: tuple[BrokerAddress, ...], shown: str) -> None:
    """The failover options that only make sense together."""
    if values.get("priority_backup") and len(brokers) < 2:
        raise ValueError(
            f"option priority_backup=True needs a failover list of two brokers or more; "
            f"url {shown!r} has one"
        )
    interval = values.get("reconnect_interval", _DEFAULTS["reconnect_interval"])
    for name in ("priority_backup", "use_exponential_back_off"):
        # Each wait would be 0 (0 * multiplier ** n), or nearly: tries back to back, forever
        # (while connected to a backup, for priority_backup).
        if values.get(name, _DEFAULTS[name]) and interval < MIN_BACKED_OFF_INTERVAL:
            raise ValueError(
                f"option reconnect_interval={interval!r} must be >= "
                f"{MIN_BACKED_OFF_INTERVAL:g} with {name}=True (the first wait between its "
                "tries; a smaller one would try back to back)"
            )
    if values.get("use_exponential_back_off", _DEFAULTS["use_exponential_back_off"]):
        cap = values.get("max_reconnect_delay", _DEFAULTS["max_reconnect_delay"])
        if cap < interval:
            raise ValueError(
                f"option max_reconnect_delay={cap!r} is below reconnect_interval={interval!r} "
                "(the first wait of the exponential back-off)"
            )
