"""Errors raised by transports (besides :class:`~heartwire.transport.TransportClosed`)."""

from __future__ import annotations

__all__ = ["ConnectFailed", "LinkRejected", "SendTimeout", "names"]


def names(detail: str, name: str) -> bool:
    """Whether a broker's ERROR text ``detail`` names ``name`` itself, quoted as RabbitMQ
    quotes queues and exchanges (``'name'``) and transactions (``"name"``). A name that is only
    part of a quoted one (``alert`` in ``'alerts-archive'``) does not count."""
    return bool(name) and (f"'{name}'" in detail or f'"{name}"' in detail)


class SendTimeout(TimeoutError):
    """A send waited ``request_blocking_time`` for a broker connection and none came.

    ``message_id`` is the id the message would have carried (the ``hw-message-id`` header),
    ``topic`` where it was going, ``waited`` the seconds spent, ``url`` the transport's URL
    (without credentials) and ``last_error`` the last send failure seen meanwhile, if any. The
    message was not sent (or, if ``last_error`` is set, may have been lost with the connection).
    """

    def __init__(
        self,
        message_id: str,
        topic: str,
        waited: float,
        url: str,
        last_error: BaseException | None = None,
    ) -> None:
        why = f"; last error: {last_error!r}" if last_error is not None else ""
        super().__init__(
            f"message {message_id} to {topic!r} not sent: no broker connection on {url} "
            f"within {waited:.3g} s{why}"
        )
        self.message_id = message_id
        self.topic = topic
        self.waited = waited
        self.url = url
        self.last_error = last_error

    def __reduce__(self) -> tuple[object, ...]:
        return (type(self), (self.message_id, self.topic, self.waited, self.url, self.last_error))


class ConnectFailed(ConnectionError):
    """No broker of the URL accepted a connection; ``reasons`` maps each broker
    (``"stomp://host:port"``) to why (its last try's). ``attempts``: how many tries were made,
    when more than one per broker was allowed (``startup_max_reconnect_attempts``), else 0.
    Never contains credentials."""

    def __init__(self, url: str, reasons: dict[str, str], attempts: int = 0) -> None:
        detail = "; ".join(f"{b}: {r}" for b, r in reasons.items())
        tries = f" in {attempts} tries" if attempts else ""
        super().__init__(f"could not connect to {url}{tries}: {detail}")
        self.url = url
        self.reasons = reasons
        self.attempts = attempts

    def __reduce__(self) -> tuple[object, ...]:
        return (type(self), (self.url, self.reasons, self.attempts))


class LinkRejected(Exception):
    """A connection was rejected by the layer above: an observer's ``method`` (``on_attached``
    before the link is published, ``on_published`` after) raised (``errors``: what each one
    raised, the first named in the message). The transport ends the connection and connects
    again; the connector logs it once."""

    def __init__(self, errors: list[Exception], method: str = "on_attached") -> None:
        more = f" (and {len(errors) - 1} more)" if len(errors) > 1 else ""
        super().__init__(f"a connection observer's {method} raised {errors[0]!r}{more}")
        self.errors = errors
        self.method = method
