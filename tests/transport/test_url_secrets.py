"""Passwords in URLs never show (issue 14, item 8), whatever characters they hold.

Passwords are drawn from the characters that split URLs (``/ ? # @ : % space ! ( ) , &``) and
non-ASCII letters, written raw or percent-encoded, in single URLs, in ``failover:(...)`` lists
and as ``passcode=`` in the query. For each, ``redact()``, the error of every URL that does not
parse, the reprs and ``url`` of what parses, and every log record of a failed connection attempt
(to a closed port) must hold no non-trivial part of the password: none of its non-ASCII letters,
raw or percent-encoded, and no run of two or more percent escapes of it.
"""

from __future__ import annotations

import logging
import re
import traceback
from urllib.parse import quote

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from heartwire.transport import ConnectFailed, connect
from heartwire.transport.urls import parse_url, redact

AWKWARD = "/?#@:% !(),&=+"
LETTERS = "λжé密€ßΩ"  # never in a user, host, option or message: any of them shown is a leak
QUICK = "connect_timeout=0.5&keepalive_interval=0&heartbeat=0"

passwords = st.text(alphabet=AWKWARD + LETTERS, min_size=1, max_size=16).filter(
    lambda p: any(c in LETTERS for c in p)
)


def _escapes(text: str) -> list[str]:
    """Runs of two percent escapes of ``text``'s percent-encoded form (both letter cases)."""
    encoded = quote(text, safe="")
    triplets = re.findall(r"%[0-9A-F]{2}", encoded)
    runs = ["".join(triplets[i : i + 2]) for i in range(len(triplets) - 1)]
    return runs + [r.lower() for r in runs]


def assert_hidden(password: str, *texts: str) -> None:
    letters = [c for c in password if c in LETTERS]
    encoded = [quote(c, safe="") for c in letters]
    for text in texts:
        for c, e in zip(letters, encoded, strict=True):
            assert c not in text, f"{c!r} of the password shown: {text!r}"
            assert e not in text and e.lower() not in text, f"{e} shown: {text!r}"
        for run in _escapes(password):
            assert run not in text, f"{run} (the encoded password) shown: {text!r}"


def urls_for(password: str) -> list[str]:
    enc = quote(password, safe="")
    return [
        f"stomp://svc:{password}@127.0.0.1:1?{QUICK}",
        f"stomp://svc:{enc}@127.0.0.1:1?{QUICK}",
        f"stomp://svc:{password}@127.0.0.1:1",
        f"stomp+ssl://svc:{password}@127.0.0.1:1/",
        f"failover:(stomp://svc:{password}@127.0.0.1:1,stomp://127.0.0.1:2)?{QUICK}",
        f"failover:(stomp://127.0.0.1:2,stomp://svc:{password}@127.0.0.1:1)?{QUICK}",
        f"failover:(stomp://svc:{enc}@127.0.0.1:1,stomp://u:{password}@127.0.0.1:2)",
        f"stomp://127.0.0.1:1?passcode={password}&{QUICK}",
        f"stomp://127.0.0.1:1?{QUICK}&passcode={enc}",
        f"failover:(stomp://127.0.0.1:1)?passcode={password}",
        f"tcp://svc:{password}@127.0.0.1:1",
        f"memory://svc:{password}@x",
        f"svc:{password}@127.0.0.1:1",
    ]


def _exception_text(exc: BaseException) -> str:
    parts = [str(exc), repr(exc), "".join(traceback.format_exception(exc))]
    parts += [repr(a) for a in exc.args]
    return "\n".join(parts)


@settings(
    max_examples=150,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.filter_too_much],
)
@given(password=passwords)
@example(password="S3cr/t!λ")
@example(password="p@ssw0rdλ")
@example(password="a bλ?c")
@example(password="(λ),x")
def test_no_part_of_a_password_shows(password: str, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    caplog.set_level(logging.DEBUG, logger="stomp.py")
    caplog.clear()
    shown: list[str] = []
    for url in urls_for(password):
        shown.append(redact(url))
        try:
            options = parse_url(url)
        except (ValueError, TypeError) as exc:
            shown.append(_exception_text(exc))
        else:
            shown += [repr(options), options.url, *map(repr, options.brokers)]
            shown += [str(b) for b in options.brokers]
        try:
            connect(url)
        except (ValueError, TypeError, ConnectFailed) as exc:
            shown.append(_exception_text(exc))
            shown.append(repr(getattr(exc, "reasons", None)))
    shown += [r.getMessage() for r in caplog.records]
    assert_hidden(password, *shown)


@pytest.mark.parametrize(
    ("url", "login", "passcode", "host", "port"),
    [
        ("stomp://svc:S3cr/t!@h:61613", "svc", "S3cr/t!", "h", 61613),
        ("stomp://svc:p@ssw0rd@h:1?heartbeat=1", "svc", "p@ssw0rd", "h", 1),
        ("stomp://svc:a b?c#d@h", "svc", "a b?c#d", "h", 61613),
        ("stomp://svc:a%40b@h:2", "svc", "a@b", "h", 2),
        ("stomp://h:1?login=a@b&heartbeat=1", "a@b", None, "h", 1),  # an '@' in a query value
        ("failover:(stomp://u:x),y@h:3,stomp://v:w@g:4)", "u", "x),y", "h", 3),
        ("stomp://h:5?passcode=a&b%26c&heartbeat=1", None, "a&b&c", "h", 5),
    ],
)
def test_awkward_passwords_parse(
    url: str, login: str | None, passcode: str | None, host: str, port: int
) -> None:
    options = parse_url(url)
    broker = options.brokers[0]
    assert (broker.host, broker.port) == (host, port)
    assert options.credentials(broker) == (login, passcode)
    if passcode:
        assert passcode not in redact(url) and passcode not in repr(options)


def test_redact_keeps_what_is_not_a_password() -> None:
    assert redact("failover:(stomp://u:pw@a:1,stomp://v:p(w@b:2)?heartbeat=1") == (
        "failover:(stomp://u:***@a:1,stomp://v:***@b:2)?heartbeat=1"
    )
    assert redact("stomp://h:1?passcode=x&heartbeat=2") == "stomp://h:1?passcode=***&heartbeat=2"
    assert redact("stomp://u@h:1") == "stomp://u@h:1"


def test_a_comma_after_a_host_and_port_ends_the_broker() -> None:
    # 'stomp://a:1,u:pw@b:2' is two brokers (the second without a scheme), not the login 'a'
    # with the password '1,u:pw' at b:2; that password is written with %2C.
    with pytest.raises(ValueError, match=r"not a URL.*%2C") as info:
        parse_url("failover:(stomp://a:1,u:Pw-8f3kq@b:2)")
    assert "Pw-8f3kq" not in str(info.value)
    options = parse_url("failover:(stomp://a:1%2Cu:Pw-8f3kq@b:2,stomp://c:3)")
    assert options.credentials(options.brokers[0]) == ("a", "1,u:Pw-8f3kq")
    assert [str(b) for b in options.brokers] == ["stomp://b:2", "stomp://c:3"]


@pytest.mark.parametrize(
    "url",
    [
        "failover:(stomp://svc:Secret,x://Tail@h:1,stomp://g:2)",
        "failover:(stomp://svc:Sec, ftp://Tail@h:1)",
        "failover:(stomp://svc:Secret,stomp://Tail@h:1,stomp://g:2)",
        "failover:(stomp://svc:Secret,STOMP+SSL://Tail@h:1)",
        "failover:(stomp://svc:Secret,stomp://b,stomp://Tail@h:1)",
        "failover:(stomp://svc:1,Tail@h:1,stomp://g:2)",  # the password '1,Tail'
        "failover:(stomp://svc:@,stomp+ssl://Tail@h:1)",  # the password '@,stomp+ssl://Tail'
    ],
)
def test_a_scheme_inside_a_password_of_a_failover_list_never_shows_it(url: str) -> None:
    # R4 F3: any 'scheme://' after a ',' started a list entry, so the password showed whole.
    texts = [redact(url)]
    try:
        options = parse_url(url)
    except ValueError as exc:
        texts.append(str(exc))
    else:
        texts += [repr(options), options.url]
    for text in texts:
        assert "Sec" not in text and "Tail" not in text, text


def test_only_stomp_schemes_start_a_failover_entry() -> None:
    options = parse_url("failover:(stomp://svc:Sec,x://Tail@h:1,stomp://g:2)")
    assert options.credentials(options.brokers[0]) == ("svc", "Sec,x://Tail")
    assert [str(b) for b in options.brokers] == ["stomp://h:1", "stomp://g:2"]
    # a port is a port: the second broker and its credentials keep their places
    assert (
        redact("failover:(stomp://h:1,stomp://u:p@g:2)")
        == "failover:(stomp://h:1,stomp://u:***@g:2)"
    )


@pytest.mark.parametrize(
    "url",
    [
        "stomp://svc:,)@h:1?passcode=&heartbeat=1QZ@h:1",
        "stomp://svc:,)@h:1?passcode=&failover_check_count=QZ@h:1",
        "stomp://svc:,)@h:1?passcode=&ssl_verify=QZ@h:1",
        "stomp://svc:,)@h:1?passcode=&dialect=QZ@h:1",
    ],
)
def test_an_option_error_shows_no_query_value_that_redact_hides(url: str) -> None:
    # R4 F7: the option checkers echoed the query reading's value, part of the other
    # reading's password ('QZ').
    assert "QZ" not in redact(url)
    with pytest.raises(ValueError) as info:
        parse_url(url)
    assert "QZ" not in str(info.value)
