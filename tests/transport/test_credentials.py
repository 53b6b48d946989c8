"""Broker credentials: from the URL, the options or the environment, and never shown.

Every test that touches a broker captures all logging at DEBUG level (stomp.py's own logger
included, which logs each frame it sends) and looks for the secret in the log records, the
exception (message, repr, reasons, its causes and formatted traceback), and the reprs, URLs and
stats of what was built. A failed login (RabbitMQ checks passwords), an accepted one (ActiveMQ
takes any password), a refused port and a failover list are covered.
"""

from __future__ import annotations

import logging
import traceback
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import heartwire as hw
from heartwire.transport import ConnectFailed, connect
from heartwire.transport.urls import (
    LOGIN_ENV,
    PASSCODE_ENV,
    PASSCODE_FILTER,
    PasscodeFilter,
    parse_url,
)
from tests import brokers as B
from tests.brokers import brokers, wait_for  # noqa: F401  (brokers: the session fixture)

SECRET = "S3cr3t-" + uuid.uuid4().hex[:8]
QUICK = "connect_timeout=2&reconnect_period=0&keepalive_interval=0&heartbeat=1"


@pytest.fixture
def clean_env(monkeypatch: pytest.MonkeyPatch) -> pytest.MonkeyPatch:
    monkeypatch.delenv(LOGIN_ENV, raising=False)
    monkeypatch.delenv(PASSCODE_ENV, raising=False)
    return monkeypatch


@pytest.fixture
def logs(caplog: pytest.LogCaptureFixture) -> Iterator[pytest.LogCaptureFixture]:
    caplog.set_level(logging.DEBUG)
    caplog.set_level(logging.DEBUG, logger="stomp.py")
    caplog.set_level(logging.DEBUG, logger="heartwire")
    yield caplog


def _exception_text(exc: BaseException) -> str:
    parts = [str(exc), repr(exc), "".join(traceback.format_exception(exc))]
    parts += [repr(a) for a in exc.args]
    reasons = getattr(exc, "reasons", None)
    if reasons is not None:
        parts.append(repr(reasons))
    return "\n".join(parts)


def assert_no_secret(logs: pytest.LogCaptureFixture, *texts: str) -> None:
    assert logs.records, "nothing was logged: the capture is not working"
    for record in logs.records:
        text = record.getMessage()
        assert SECRET not in text, f"secret logged by {record.name}: {text[:300]}"
        if record.exc_info and record.exc_info[1] is not None:
            assert SECRET not in _exception_text(record.exc_info[1])
    assert SECRET not in logs.text
    for text in texts:
        assert SECRET not in text


# -- configuration ------------------------------------------------------------------------------


def test_credentials_from_the_environment(clean_env: pytest.MonkeyPatch) -> None:
    clean_env.setenv(LOGIN_ENV, "svc")
    clean_env.setenv(PASSCODE_ENV, SECRET)
    o = parse_url("failover:(stomp://a:1,stomp://own:pw@b:2)")
    a, b = o.brokers
    assert o.credentials(a) == ("svc", SECRET)
    assert o.credentials(b) == ("own", "pw")  # a broker's own userinfo wins
    assert parse_url("stomp://a:1", passcode="kw").credentials(a) == ("svc", "kw")
    assert parse_url("stomp://a:1?login=q").credentials(a) == ("q", SECRET)
    assert SECRET not in repr(o) and SECRET not in o.url
    clean_env.delenv(PASSCODE_ENV)
    assert parse_url("stomp://a:1").credentials(a) == ("svc", None)
    clean_env.setenv(PASSCODE_ENV, "")  # empty: as if unset
    assert parse_url("stomp://a:1").passcode is None


def test_a_bad_passcode_from_the_environment_is_named_not_shown(
    clean_env: pytest.MonkeyPatch,
) -> None:
    clean_env.setenv(PASSCODE_ENV, SECRET + "\n")
    with pytest.raises(ValueError) as info:
        parse_url("stomp://a:1")
    assert PASSCODE_ENV in str(info.value) and SECRET not in _exception_text(info.value)


def test_passcode_filter_cuts_the_header() -> None:
    assert PASSCODE_FILTER in logging.getLogger("stomp.py").filters
    record = logging.LogRecord(
        "stomp.py", logging.DEBUG, __file__, 1, "sending frame: %s",
        (f"[b'CONNECT', b'login:u\\n', b'passcode:{SECRET}\\n', b'\\n']",), None,
    )  # fmt: skip
    assert PasscodeFilter().filter(record)
    assert SECRET not in record.getMessage()
    assert record.getMessage().startswith("sending frame: [b'CONNECT', b'login:u\\n', b'passcode:")


@settings(max_examples=300, deadline=None)
@given(secret=st.text(min_size=1, max_size=40).filter(lambda x: "\n" not in x and "\0" not in x))
def test_passcode_filter_hides_any_password(secret: str) -> None:
    # What stomp.py logs: the repr of the frame's encoded lines.
    lines = [b"CONNECT", b"\n", b"login:u\n", b"passcode:" + secret.encode() + b"\n", b"\n"]
    record = logging.LogRecord(
        "stomp.py", logging.DEBUG, __file__, 1, "sending frame: %s", (str(lines),), None
    )
    original = record.getMessage()
    PasscodeFilter().filter(record)
    cut = original.index("passcode:") + len("passcode:")  # the header's: nothing before it
    assert record.getMessage() == original[:cut] + "*** (rest of the message not shown)"
    assert "login:u" in record.getMessage()


def test_cli_key_from_the_environment(clean_env: pytest.MonkeyPatch) -> None:
    from heartwire import cli

    clean_env.delenv(cli.KEY_ENV, raising=False)
    assert cli._parser().parse_args(["watch", "svc.>"]).key is None
    clean_env.setenv(cli.KEY_ENV, SECRET)
    assert cli._parser().parse_args(["watch", "svc.>"]).key == SECRET
    assert cli._parser().parse_args(["publish", "svc.a"]).key == SECRET
    assert cli._parser().parse_args(["publish", "svc.a", "--key", "k2"]).key == "k2"


# -- against brokers ----------------------------------------------------------------------------


@pytest.mark.usefixtures("brokers")
def test_wrong_password_on_rabbitmq(
    clean_env: pytest.MonkeyPatch, logs: pytest.LogCaptureFixture
) -> None:
    B.ensure("rabbitmq")
    url = f"{B.url('rabbitmq')}?{QUICK}"
    clean_env.setenv(LOGIN_ENV, "guest")
    clean_env.setenv(PASSCODE_ENV, SECRET)
    with pytest.raises(ConnectFailed) as info:
        connect(url)
    reason = info.value.reasons[B.url("rabbitmq")]
    assert "refused" in reason.lower()
    # The same through a keyword and through the URL, in a failover list.
    clean_env.delenv(PASSCODE_ENV)
    with pytest.raises(ConnectFailed) as kw_info:
        connect(url, passcode=SECRET)
    with pytest.raises(ConnectFailed) as url_info:
        connect(f"failover:(stomp://guest:{SECRET}@{B.HOST}:{B.PORTS['rabbitmq']})?{QUICK}")
    assert any("sending frame" in r.getMessage() for r in logs.records)  # stomp.py DEBUG is on
    assert_no_secret(
        logs,
        _exception_text(info.value),
        _exception_text(kw_info.value),
        _exception_text(url_info.value),
    )
    # The environment is really used: the right password from it connects.
    clean_env.setenv(PASSCODE_ENV, "guest")
    t = connect(url)
    assert t.connected
    t.close()


@pytest.mark.usefixtures("brokers")
def test_accepted_password_on_activemq_is_not_shown(
    clean_env: pytest.MonkeyPatch, logs: pytest.LogCaptureFixture, closing: list[Any]
) -> None:
    B.ensure("activemq")  # no authentication plugin: any password is accepted
    url = f"stomp://guest:{SECRET}@{B.HOST}:{B.PORTS['activemq']}?{QUICK}"
    t = connect(url)
    closing.append(t)
    topic = "cred" + uuid.uuid4().hex[:8]
    mon = hw.HeartbeatMonitor(t, topic, period=0.2)
    closing.append(mon)
    mon.start()
    pub = hw.HeartbeatPublisher(t, topic, period=0.2)
    closing.append(pub)
    pub.start()
    wait_for(lambda: topic in mon, 10, f"a beat of {topic}")
    link = t._connector.current
    shown = [
        repr(t), t.url, str(t.broker), repr(t.options), repr(t.stats()), repr(link),
        repr(mon), repr(mon.stats()), repr(pub), str(t.options.brokers[0]),
    ]  # fmt: skip
    assert t.url == f"stomp://{B.HOST}:{B.PORTS['activemq']}"
    assert any("sending frame: [b'CONNECT'" in r.getMessage() for r in logs.records)
    assert_no_secret(logs, *shown)


@pytest.mark.usefixtures("brokers")
def test_refused_ports_do_not_show_the_password(
    clean_env: pytest.MonkeyPatch, logs: pytest.LogCaptureFixture
) -> None:
    clean_env.setenv(PASSCODE_ENV, SECRET)
    with pytest.raises(ConnectFailed) as info:
        connect(f"failover:(stomp://u:{SECRET}@{B.HOST}:1,stomp://{B.HOST}:2)?{QUICK}")
    assert len(info.value.reasons) == 2
    with pytest.raises(ValueError) as bad:  # a malformed URL is echoed, its password is not
        connect(f"failover:(stomp://u:{SECRET}@{B.HOST}:1,stomp://h:99999)")
    assert "99999" in str(bad.value)
    logging.getLogger("heartwire.test").debug("capture check")
    assert_no_secret(logs, _exception_text(info.value), _exception_text(bad.value))


def test_a_login_without_password_takes_the_passcode_from_elsewhere(
    clean_env: pytest.MonkeyPatch,
) -> None:
    # R4 F9: 'svc@' without ':secret' sent no passcode, whatever the options said.
    def creds(url: str, **kw: Any) -> tuple[str | None, str | None]:
        o = parse_url(url, **kw)
        return o.credentials(o.brokers[0])

    assert creds("stomp://svc@h:1?passcode=pw") == ("svc", "pw")
    assert creds("stomp://svc@h:1", passcode="kw") == ("svc", "kw")
    clean_env.setenv(PASSCODE_ENV, SECRET)
    assert creds("stomp://svc@h:1") == ("svc", SECRET)
    assert creds("stomp://svc:own@h:1", passcode="kw") == ("svc", "own")  # its own still wins
    assert creds("stomp://svc:@h:1") == ("svc", "")  # an empty password is a password


@pytest.mark.usefixtures("brokers")
def test_a_login_without_password_sends_the_environment_s_passcode(
    clean_env: pytest.MonkeyPatch,
) -> None:
    B.ensure("rabbitmq")
    url = f"stomp://guest@{B.HOST}:{B.PORTS['rabbitmq']}?{QUICK}"
    clean_env.setenv(PASSCODE_ENV, SECRET)  # sent, so refused
    with pytest.raises(ConnectFailed) as info:
        connect(url)
    assert "refused" in info.value.reasons[f"stomp://{B.HOST}:{B.PORTS['rabbitmq']}"].lower()
    assert SECRET not in _exception_text(info.value)
    clean_env.setenv(PASSCODE_ENV, "guest")
    t = connect(url)
    try:
        assert t.connected
    finally:
        t.close()
