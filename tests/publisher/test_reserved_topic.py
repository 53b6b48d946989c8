"""A publisher may not beat on heartwire's own topics (``_hw.``): no monitor takes them for
beats, and on a control topic every keyed monitor would count each beat as a malformed control
message (second review of issue 17, finding 4)."""

from __future__ import annotations

import pytest

import heartwire as hw


@pytest.mark.parametrize("topic", ["_hw.control", "_hw.keepalive.x", "_hw.x.y"])
def test_a_publisher_to_a_reserved_topic_is_refused(topic: str) -> None:
    broker = hw.connect()
    try:
        with pytest.raises(ValueError, match=rf"topic .*{topic!r}"):
            hw.HeartbeatPublisher(broker, topic, period=1.0)
    finally:
        broker.close()


def test_a_topic_merely_containing_the_prefix_is_fine() -> None:
    broker = hw.connect()
    try:
        pub = hw.HeartbeatPublisher(broker, "svc._hw.x", period=1.0)
        assert pub.topic == "svc._hw.x"
    finally:
        broker.close()
