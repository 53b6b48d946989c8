"""heartwire.transport: URLs and credentials, the embedded broker, STOMP (plain, TLS, keep-alive,
stalled writes), the native read loop.
"""
