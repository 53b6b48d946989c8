"""Review of issue 17: a failing check's reason leaves the host in a down beat (remote, plain
text to every subscriber of the topic: a signature is no encryption). The publisher keeps other
exceptions' text local because it may hold a secret; the stock sql check does not."""

from __future__ import annotations

import pytest

from heartwire import checks


def test_sql_check_reason_does_not_carry_a_dsn_password() -> None:
    def connect() -> object:
        # What psycopg2 says for a malformed DSN: it quotes the whole DSN.
        raise RuntimeError(
            'invalid dsn: missing "=" after "postgresql://app:s3cret@db:5432/orders" '
            "in connection info string"
        )

    with pytest.raises(checks.CheckFailed) as err:
        checks.sql(connect)()
    assert "s3cret" not in err.value.reason, err.value.reason


def test_sql_query_failure_reason_hides_a_keyword_dsn_password() -> None:
    """The same rule for the query step: a driver quoting ``password=...`` (a libpq DSN)."""

    class Cursor:
        def execute(self, query: str) -> None:
            raise RuntimeError("bad conninfo host=db password='s3 cret' user=app")

        def close(self) -> None:
            pass

    class Conn:
        def cursor(self) -> Cursor:
            return Cursor()

        def close(self) -> None:
            pass

    with pytest.raises(checks.CheckFailed) as err:
        checks.sql(Conn)()
    reason = err.value.reason
    assert "s3" not in reason and "cret" not in reason, reason
    assert reason == "sql 'SELECT 1': RuntimeError: bad conninfo host=db password=*** user=app"


@pytest.mark.parametrize(
    ("text", "shown"),
    [
        (
            "connect https://u:pw@h/x?api_key=k1&n=2 failed",
            "connect https://u:***@h/x?api_key=***&n=2 failed",
        ),
        ('token="a b" next', "token=*** next"),
        ("SESSION_ID=abc;x=1", "SESSION_ID=***;x=1"),
        (
            'FATAL:  password authentication failed for user "app"',
            'FATAL:  password authentication failed for user "app"',
        ),
        ("[Errno 111] Connection refused", "[Errno 111] Connection refused"),
    ],
)
def test_every_stock_check_describes_an_exception_by_one_scrubbing_rule(
    text: str, shown: str
) -> None:
    assert checks._describe(ValueError(text)) == f"ValueError: {shown}"


def test_tcp_check_reason_goes_through_the_same_rule(monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(*args: object) -> object:
        raise OSError("proxy socks5://u:hunter2@proxy:1080 refused")

    monkeypatch.setattr(checks, "_connect", refuse)
    with pytest.raises(checks.CheckFailed) as err:
        checks.tcp("db", 5432)()
    assert err.value.reason == "tcp db:5432: OSError: proxy socks5://u:***@proxy:1080 refused"


def test_a_factory_raising_its_own_check_failed_keeps_its_reason() -> None:
    def connect() -> object:
        raise checks.CheckFailed("orders db in maintenance")

    with pytest.raises(checks.CheckFailed) as err:
        checks.sql(connect)()
    assert err.value.reason == "orders db in maintenance"


@pytest.mark.parametrize(
    ("text", "shown"),
    [
        # Second review of issue 17: the forms a driver's or a client's error takes.
        ("{'host': 'db', 'password': 's3cr3t'}", "{'host': 'db', 'password': ***}"),
        ('{"password": "s3cr3t", "port": 5432}', '{"password": ***, "port": 5432}'),
        ("password: s3cr3t", "password: ***"),
        ("bob/s3cr3t@db:1521/orcl refused", "bob/***@db:1521/orcl refused"),
        ("Authorization: Bearer abc.def next", "Authorization: *** next"),
        ("{'api_key': 'k1', 'user': 'app'}", "{'api_key': ***, 'user': 'app'}"),
        ("client_secret:xyz", "client_secret:***"),
        # Left alone: no secret there.
        ("KeyError: 'host'", "KeyError: 'host'"),
        ("open /usr/lib/x@2 failed", "open /usr/lib/x@2 failed"),
        ("token expired at 10:30", "token expired at 10:30"),
    ],
)
def test_colon_quoted_and_slash_login_forms_are_scrubbed(text: str, shown: str) -> None:
    assert checks._scrub(text) == shown


def test_an_ezconnect_login_with_a_double_slash_hides_its_password() -> None:
    """Third review of issue 17, finding 3: Oracle's EZConnect ``user/password@//host:port/
    service`` (its documented syntax) went on the wire whole."""

    def connect() -> object:
        raise RuntimeError("ORA-12154: cannot connect with bob/s3cr3t@//db:1521/orcl")

    with pytest.raises(checks.CheckFailed) as err:
        checks.sql(connect)()
    assert err.value.reason == (
        "sql connect: RuntimeError: ORA-12154: cannot connect with bob/***@//db:1521/orcl"
    )


@pytest.mark.parametrize(
    ("text", "shown"),
    [
        ("bob:s3cr3t@db:5432 refused", "bob:***@db:5432 refused"),  # schemeless user:pass@host
        ("login app:hunter2@10.0.0.5 failed", "login app:***@10.0.0.5 failed"),
        ("scott/tiger@db.example.com/orcl", "scott/***@db.example.com/orcl"),
        ("session: s3cr3t", "session: ***"),
        ("password: hunter2 was refused", "password: *** was refused"),
    ],
)
def test_schemeless_logins_and_secret_values_are_still_hidden(text: str, shown: str) -> None:
    assert checks._scrub(text) == shown


@pytest.mark.parametrize(
    "text",
    [
        # Third review of issue 17, finding 5: no secret in any of these.
        "pull access denied for library/redis@sha256:0a1b2c",  # an image digest reference
        "npm ERR! 404 @scope/pkg@1.2.3 not found",
        "Retries 3/5@10s exhausted",
        "missing keys: host, port",
        "session: expired after 30 s",
        "at 12:30@host ok",
        "see docs/setup@v2.1",
    ],
)
def test_ordinary_text_is_left_alone(text: str) -> None:
    assert checks._scrub(text) == text


@pytest.mark.parametrize(
    ("text", "shown"),
    [
        # Ambiguous: taken for a login, the secret hidden (docs/explicit-failure.md says so).
        ("docs/guide@home", "docs/***@home"),
        ("From:alice@example.com", "From:***@example.com"),
        # A password's name: hidden even when prose follows.
        ("password: letmein was refused", "password: *** was refused"),
    ],
)
def test_ambiguous_forms_hide_the_would_be_secret(text: str, shown: str) -> None:
    assert checks._scrub(text) == shown
