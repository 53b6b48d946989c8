"""The public surface: ``heartwire`` holds the user API, ``heartwire.core`` the native core's
types, and names that left the top level say where they went."""

from __future__ import annotations

import importlib

import pytest

import heartwire as hw
from heartwire import _core

# The user API, in one place: adding or removing a public name is a decision, made here.
USER_API = {
    # publishing and watching
    "HeartbeatPublisher",
    "HeartbeatMonitor",
    "HeartbeatSubscriber",
    "ManualClock",
    "checks",
    "CheckFailed",
    # listeners and what they are given
    "SubscriberListener",
    "PublisherListener",
    "Started",
    "Stopped",
    "Sent",
    "Received",
    "Failed",
    "Resumed",
    "Flapping",
    "ExceptionEvent",
    "Disconnected",
    "Reconnected",
    "LocalPause",
    "MaintenanceWindow",
    "Lagging",
    "CaughtUp",
    "EventBatch",
    "State",
    # asyncio: what mon.events() gives, and what it yields
    "EventStream",
    "StreamEvent",
    "TopicStatus",
    # alerting policy
    "Silence",
    "send_silence",
    "send_unsilence",
    # transports and their errors
    "connect",
    "Transport",
    "ConnectFailed",
    "SendTimeout",
    "TransportClosed",
    # reliable delivery
    "ReliableSender",
    "SenderListener",
    "FlushAck",
    "DeliveryRefused",
    "Consumer",
    "ReceivedMessage",
    "Transaction",
    "TransactionFailed",
    "AlertListener",
    # the core, as a namespace
    "core",
}

CORE_API = {
    "Detector",
    "Phi",
    "TopicStatus",
    "Event",
    "EventBatch",
    "EventQueue",
    "Dispatcher",
    "ManualClock",
    "DeadlineQueue",
    "DedupWindow",
    "freshness_kernel",
    "outages_kernel",
    "availability_kernel",
    "partition_kernel",
    "MAX_TOPICS",
    "MAX_NAME_LEN",
}


def test_the_top_level_is_the_user_api() -> None:
    assert set(hw.__all__) == USER_API
    assert len(hw.__all__) == len(USER_API)  # no name twice
    for name in hw.__all__:
        assert getattr(hw, name) is not None, name


def test_a_star_import_brings_no_internals() -> None:
    namespace: dict[str, object] = {}
    exec("from heartwire import *", namespace)
    names = {n for n in namespace if not n.startswith("__")}
    assert names == USER_API
    assert not {"Detector", "Dispatcher", "BeatCodec", "PublisherExecutor"} & names


def test_core_re_exports_the_native_types() -> None:
    from heartwire import core
    from heartwire.dispatch import Dispatcher

    assert set(core.__all__) == CORE_API
    for name in core.__all__:
        expected = Dispatcher if name == "Dispatcher" else getattr(_core, name)
        assert getattr(core, name) is expected, name
    assert core.__doc__ and "Detector" in core.__doc__
    assert hw.ManualClock is core.ManualClock


def test_the_core_example_runs() -> None:
    from heartwire import core

    clock = core.ManualClock()
    det = core.Detector(clock=clock, period=1.0, allowed_misses=2)
    events = det.subscribe(capacity=1024)
    det.add("prices.feed")
    det.beat("prices.feed")
    clock.advance(2.5)
    assert [(e.kind, e.topic, e.missed) for e in events.try_pop()] == [("failed", "prices.feed", 2)]


@pytest.mark.parametrize(
    ("name", "module"),
    [
        ("Detector", "heartwire.core"),
        ("Dispatcher", "heartwire.core"),
        ("EventQueue", "heartwire.core"),
        ("MAX_TOPICS", "heartwire.core"),
        ("BeatCodec", "heartwire.beat"),
        ("KeepAliveMonitor", "heartwire.transport"),
        ("MemoryBroker", "heartwire.transport.memory"),
    ],
)
def test_a_name_that_left_the_top_level_says_where_it_is(name: str, module: str) -> None:
    with pytest.raises(AttributeError, match=rf"heartwire\.{name} .* from {module}$"):
        getattr(hw, name)
    assert getattr(importlib.import_module(module), name) is not None
    with pytest.raises(ImportError):
        exec(f"from heartwire import {name}", {})


@pytest.mark.parametrize(
    ("old", "new"), [("AlertPublisher", "AlertListener"), ("DeliveryError", "DeliveryRefused")]
)
def test_a_renamed_name_says_its_new_name(old: str, new: str) -> None:
    with pytest.raises(AttributeError, match=rf"heartwire\.{old} was renamed heartwire\.{new}$"):
        getattr(hw, old)


def test_an_unknown_name_is_an_ordinary_attribute_error() -> None:
    with pytest.raises(AttributeError, match=r"^module 'heartwire' has no attribute 'Nope'$"):
        _ = hw.Nope
    assert not hasattr(hw, "Nope")


@pytest.mark.parametrize(
    ("old", "module", "new"),
    [
        ("Scheduler", "heartwire.core", "DeadlineQueue"),
        ("PublisherScheduler", "heartwire.executor", "PublisherExecutor"),
        ("shared_scheduler", "heartwire.executor", "shared_executor"),
    ],
)
def test_a_name_that_left_the_top_level_renamed_says_what_it_is_now(
    old: str, module: str, new: str
) -> None:
    with pytest.raises(
        AttributeError, match=rf"heartwire\.{old} .* renamed {new}: .* from {module}$"
    ):
        getattr(hw, old)
    imported = importlib.import_module(module)
    assert getattr(imported, new) is not None
    assert not hasattr(imported, old)  # no alias: the old name is gone
    with pytest.raises(ImportError):
        exec(f"from heartwire import {old}", {})


def test_names_the_layering_moved_or_removed_say_so() -> None:
    # Before: a bare "has no attribute" for heartwire.reliable.AlertListener (in reliable's
    # __all__ before issue 16) and heartwire.transport.is_stomp.
    import heartwire.reliable
    import heartwire.transport

    with pytest.raises(
        AttributeError,
        match=r"^heartwire\.reliable\.AlertListener moved: import it from heartwire "
        r"\(heartwire\.AlertListener, defined in heartwire\.alerts\)$",
    ):
        _ = heartwire.reliable.AlertListener
    assert not hasattr(heartwire.reliable, "AlertListener")  # no alias
    with pytest.raises(AttributeError, match=r"^heartwire\.transport\.is_stomp was removed: "):
        _ = heartwire.transport.is_stomp
    assert not hasattr(heartwire.transport, "is_stomp")
    with pytest.raises(AttributeError, match=r"^module 'heartwire\.reliable' has no attribute"):
        _ = heartwire.reliable.Nope
