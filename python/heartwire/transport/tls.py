"""TLS to STOMP brokers (``stomp+ssl://host:port``): stomp.py set-up and failure reasons.

:func:`configure` turns TLS on in a stomp.py connection for a ``stomp+ssl`` broker, from the
``ssl_*`` options of :class:`~heartwire.transport.urls.StompOptions`:

- ``ssl_ca_file``: PEM file of the CAs to trust; without it, the system's default CAs;
- ``ssl_verify`` (default true): check the broker's certificate chain *and* that it names the
  host of the URL (an IP address must be in the certificate's subjectAltName). ``false``
  encrypts without knowing who answers: for tests only;
- ``ssl_cert_file``, ``ssl_key_file``, ``ssl_key_password``: a client certificate for brokers
  that require one (``needClientAuth=true`` on ActiveMQ's connector).

stomp.py reports a failed handshake only as "could not connect"; :func:`explain` repeats the
handshake once, on its own, to say why (a certificate that does not verify, a rejected client
certificate, an unreadable key), for :class:`~heartwire.transport.ConnectFailed`'s reasons.
Neither function ever puts a password in a message.
"""

from __future__ import annotations

import contextlib
import socket
import ssl
from typing import Any

from heartwire.transport.urls import BrokerAddress, StompOptions

__all__ = ["configure", "context", "explain"]

# How long explain() waits for a broker's verdict on the client certificate after the handshake
# (TLS 1.3 sends it after the client thinks the handshake is done).
_VERDICT_WAIT = 1.0


def configure(conn: Any, broker: BrokerAddress, options: StompOptions) -> None:
    """Turn on TLS for ``broker`` in the stomp.py connection ``conn`` (before it connects);
    does nothing for a plain ``stomp://`` broker."""
    if not broker.tls:
        return
    conn.set_ssl(
        for_hosts=[(broker.host, broker.port)],
        ca_certs=options.ssl_ca_file,
        verify=options.ssl_verify,
        cert_file=options.ssl_cert_file,
        key_file=options.ssl_key_file,
        password=options.ssl_key_password,
        ssl_version=ssl.PROTOCOL_TLS_CLIENT,
    )


def context(options: StompOptions) -> ssl.SSLContext:
    """The client :class:`ssl.SSLContext` that stomp.py builds from ``options`` (same rules)."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    if options.ssl_ca_file:
        ctx.load_verify_locations(options.ssl_ca_file)
    else:
        ctx.load_default_certs()
    if options.ssl_cert_file:
        ctx.load_cert_chain(
            options.ssl_cert_file,
            options.ssl_key_file or options.ssl_cert_file,
            options.ssl_key_password,
        )
    if not options.ssl_verify:
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE
    return ctx


def _ssl_reason(exc: BaseException) -> str:
    if isinstance(exc, ssl.SSLCertVerificationError):
        return f"TLS certificate verification failed: {exc.verify_message or exc.reason}"
    if isinstance(exc, ssl.SSLError):
        reason = exc.reason or str(exc)
        if "ALERT" in reason and "CERTIFICATE" in reason:
            return f"TLS handshake failed: the broker refused the client certificate ({reason})"
        return f"TLS handshake failed: {reason}"
    return f"TLS handshake failed: {exc}"


def explain(
    broker: BrokerAddress, options: StompOptions, timeout: float | None = None
) -> str | None:
    """Why a TLS connection to ``broker`` fails, found by trying one; None when it is not a TLS
    broker, when the TCP connection itself fails (the caller's reason stands), or when the
    handshake works (the failure lay elsewhere). ``timeout``: default ``connect_timeout``."""
    if not broker.tls:
        return None
    wait = options.connect_timeout if timeout is None else timeout
    try:
        ctx = context(options)
    except ssl.SSLError as exc:  # a key that does not match, a wrong key password, bad PEM
        return f"TLS set-up failed (ssl_cert_file/ssl_key_file/ssl_ca_file): {exc.reason or exc}"
    except OSError as exc:
        return f"TLS set-up failed: {exc.strerror or exc}"
    try:
        raw = socket.create_connection((broker.host, broker.port), timeout=wait)
    except OSError:
        return None
    with contextlib.closing(raw):
        try:
            tls = ctx.wrap_socket(raw, server_hostname=broker.host)
        except (ssl.SSLError, OSError) as exc:
            return _ssl_reason(exc)
        with contextlib.closing(tls):
            tls.settimeout(min(wait, _VERDICT_WAIT))
            try:
                tls.recv(1)  # a broker rejecting our certificate answers with an alert
            except TimeoutError:
                return None
            except (ssl.SSLError, OSError) as exc:
                return _ssl_reason(exc)
    return None
