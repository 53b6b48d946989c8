"""The suite's scenarios, one module each. A scenario that runs in a child process of its own
registers itself here with :func:`scenario`; ``suite.py --child NAME`` looks it up in
:data:`SCENARIOS`. ``e2e``, ``spark`` and ``cargo`` run from the parent and spawn their own
processes."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

SCENARIOS: dict[str, Callable[..., dict[str, Any]]] = {}


def scenario(fn: Callable[..., dict[str, Any]]) -> Callable[..., dict[str, Any]]:
    SCENARIOS[fn.__name__] = fn
    return fn
