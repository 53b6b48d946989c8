"""Remote text made safe to show on a terminal: :func:`terminal_safe`.

A reason, a silence's reason, a topic name, a broker's disconnect text all come from other
hosts. Printed as they are, an ESC starts a terminal escape sequence (a title change, cursor
moves, an OSC-8 link), a U+202E (right-to-left override) reorders what follows, and a U+2028
(line separator) or a newline breaks a line a reader trusts to be one row.
"""

from __future__ import annotations

__all__ = ["terminal_safe"]


def _escape(ch: str) -> str:
    code = ord(ch)
    if code < 0x100:
        return f"\\x{code:02x}"
    if code < 0x10000:
        return f"\\u{code:04x}"
    return f"\\U{code:08x}"


def terminal_safe(text: str) -> str:
    """``text`` with every character Python does not call printable shown escaped, as
    ``\\xNN``, ``\\uNNNN`` or ``\\UNNNNNNNN``: the C0 and C1 controls (ESC, NUL, newline, tab,
    DEL...), the bidi overrides and other format characters (U+202A-U+202E, U+2066-U+2069,
    zero-width ones), the line and paragraph separators (U+2028, U+2029), lone surrogates and
    unassigned code points. Printable text (the common case) is returned as it is, after one
    ``str.isprintable`` scan."""
    if text.isprintable():
        return text
    return "".join(ch if ch.isprintable() else _escape(ch) for ch in text)
