"""Names of the headers heartwire writes on the wire (STOMP and the embedded broker alike)."""

from __future__ import annotations

__all__ = ["MESSAGE_ID_HEADER"]

#: The id a sender gives each message and keeps across re-sends: consumers drop copies by it.
MESSAGE_ID_HEADER = "hw-message-id"
