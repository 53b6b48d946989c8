"""Type stubs for the native core, ``heartwire._core``."""

from collections.abc import Iterable, Sequence
from typing import Any, ClassVar, Literal, final

__all__ = [
    "BEAT_AGE_PERIODS",
    "BEAT_AGE_SKEW",
    "MAX_BEAT_PERIOD",
    "MAX_NAME_LEN",
    "MAX_SHARDS",
    "MAX_TOPICS",
    "MIN_BEAT_PERIOD",
    "REPLAY_BOOTS",
    "ArrowArray",
    "DeadlineQueue",
    "DedupWindow",
    "Detector",
    "Event",
    "EventBatch",
    "EventBatchIterator",
    "EventQueue",
    "FrameReader",
    "Intake",
    "ManualClock",
    "Newest",
    "Phi",
    "Routes",
    "TopicStatus",
    "__version__",
    "availability_kernel",
    "decode_beat",
    "freshness_kernel",
    "outages_kernel",
    "partition_kernel",
    "shard_of",
    "split_frames",
]

__version__: str
MAX_TOPICS: int
MAX_NAME_LEN: int
MIN_BEAT_PERIOD: float
MAX_BEAT_PERIOD: float
BEAT_AGE_PERIODS: float
BEAT_AGE_SKEW: float
REPLAY_BOOTS: int
MAX_SHARDS: int

_Topic = str | int
_Overflow = Literal["block", "drop-oldest", "drop-newest", "coalesce"]

@final
class ManualClock:
    """A clock that moves only when told to; ``advance`` runs every attached detector and
    deadline queue. ``advance(seconds, stalled=True)`` moves it without running them (the process
    was frozen): the next ordinary advance wakes them at the reading the stall ended at, and a
    detector sees the gap as a local pause."""

    def __new__(cls, start: float = 0.0) -> ManualClock: ...
    def now(self) -> float: ...
    def now_ns(self) -> int: ...
    def advance(self, seconds: float, stalled: bool = False) -> float: ...
    def set(self, seconds: float) -> float: ...

@final
class Phi:
    """Phi-accrual settings (Akka's defaults); times in seconds."""

    def __new__(
        cls,
        threshold: float = 8.0,
        max_samples: int = 1000,
        min_std_dev: float = 0.1,
        acceptable_pause: float = 3.0,
    ) -> Phi: ...
    @property
    def threshold(self) -> float: ...
    @property
    def max_samples(self) -> int: ...
    @property
    def min_std_dev(self) -> float: ...
    @property
    def acceptable_pause(self) -> float: ...

@final
class Event:
    """One detector event; times are seconds on the detector's clock.

    A ``"local_pause"`` event is about no topic (``topic == ""``, ``handle == -1``): the
    detector itself was not running for ``duration`` seconds, up to ``at`` (the wake-up), and
    re-based the deadlines that fell inside instead of firing them. Every queue gets it.

    ``"lagging"`` and ``"caught_up"`` are about no topic either: the monitor's own intake fell
    behind its feed by ``lag`` seconds (more than ``lag_threshold``), and later (``caught_up``)
    read its backlog after ``duration`` seconds, the largest lag being ``max_lag``.
    """

    @property
    def kind(
        self,
    ) -> Literal[
        "failed", "resumed", "received", "local_pause", "lagging", "caught_up", "flapping"
    ]: ...
    @property
    def topic(self) -> str: ...
    @property
    def handle(self) -> int: ...
    @property
    def missed(self) -> int: ...
    @property
    def at(self) -> float: ...
    @property
    def since(self) -> float | None: ...
    @property
    def downtime(self) -> float | None: ...
    @property
    def seq(self) -> int | None: ...
    @property
    def latency(self) -> float | None: ...
    @property
    def duration(self) -> float | None: ...
    @property
    def lag(self) -> float | None: ...
    @property
    def max_lag(self) -> float | None: ...
    @property
    def reason(self) -> str | None:
        """failed: the sender's reason, for an explicit failure (a ``down`` beat); None when
        periods were missed."""
    @property
    def flapping(self) -> bool | None: ...
    @property
    def silenced(self) -> bool: ...
    @property
    def suppressed_by(self) -> str | None: ...

@final
class ArrowArray:
    """An Arrow array (``__arrow_c_array__``): ``pyarrow.array(x)`` and other Arrow libraries
    take it without a copy; ``len(x)`` is its length."""

    def __arrow_c_array__(self, requested_schema: object | None = None) -> tuple[object, object]:
        """The Arrow C data interface's (schema, array) capsules. ``requested_schema`` is not
        acted on: the interface lets a producer that does not cast hand its own type, and the
        consumer casts if it needs another (with pyarrow 26, cast after importing:
        ``pyarrow.array(x).cast(t)``; its own fallback for ``pyarrow.array(x, type=t)`` fails)."""

    def __len__(self) -> int: ...

@final
class EventBatch:
    """Detector events popped together, oldest first. ``len(batch)``; ``batch[i]`` and
    iteration give :class:`Event` objects (built on access); the columns give every event's
    field at once.

    Columns are read-only ``memoryview`` objects over a copy made at each access (keep one in
    a local rather than reading the attribute in a loop); ``numpy.asarray(col)`` takes one
    without a further copy, and ``col.tolist()`` gives Python numbers. A field an event does not
    have is NaN (floats), ``NO_SEQ`` (``seq``) or -1 (``handles`` of a local pause). ``topics``
    is an Arrow string array (``__arrow_c_array__``: ``pyarrow.array(batch.topics)`` takes it
    without a copy); :meth:`topic_list` gives the names as a ``list[str]``.
    """

    NO_SEQ: ClassVar[int]
    KINDS: ClassVar[tuple[str, ...]]
    def __len__(self) -> int: ...
    def __getitem__(self, index: int, /) -> Event: ...
    def __iter__(self) -> EventBatchIterator: ...
    def count(self, kind: str) -> int:
        """How many events of ``kind`` (``"failed"``...) the batch holds."""

    @property
    def kinds(self) -> memoryview:
        """Each event's kind as a code (``"B"``: unsigned bytes); ``KINDS[code]`` is its name."""

    @property
    def handles(self) -> memoryview:
        """The topics' handles (``"q"``; -1 for a local pause)."""

    @property
    def missed(self) -> memoryview:
        """Consecutive missed periods (``"I"``; 0 for ``received`` and ``local_pause``)."""

    @property
    def at(self) -> memoryview:
        """``at`` of each event, seconds on the detector's clock (``"d"``)."""

    @property
    def since(self) -> memoryview:
        """failed: when the outage began (``"d"``; NaN for other kinds)."""

    @property
    def downtime(self) -> memoryview:
        """resumed: how long the outage lasted (``"d"``; NaN for other kinds)."""

    @property
    def duration(self) -> memoryview:
        """local_pause: how long the monitor was not running (``"d"``; NaN for other kinds)."""

    @property
    def latency(self) -> memoryview:
        """received: the beat's transit time, seconds (``"d"``; NaN when unknown or another
        kind)."""

    @property
    def seq(self) -> memoryview:
        """received: the beat's sequence number (``"Q"``; ``NO_SEQ`` when it carried none or
        for another kind)."""

    @property
    def topics(self) -> ArrowArray:
        """The topics' names as an Arrow string array (``""`` for a local pause), shared, not
        copied: ``pyarrow.array(batch.topics)``."""

    def outages_by_prefix(
        self, depth: int, bounds: Sequence[float]
    ) -> dict[str, tuple[int, int, list[int], float]]:
        """``failed`` and ``resumed`` events by the first ``depth`` segments of their topics:
        ``{prefix: (failed, resumed, downtime buckets by bounds (+Inf last), downtime sum)}``."""

    def topic_list(self) -> list[str]:
        """The topics' names as a list (``""`` for a local pause)."""

    def reason_list(self) -> list[str | None]:
        """Each event's reason (``failed`` by a ``down`` beat: the sender's reason; None
        otherwise) as a list."""

    def of_kinds(self, kinds: list[str]) -> EventBatch:
        """The events of the given kinds (names), in order; the same batch when it holds no
        other kind."""

    def slice(self, start: int, stop: int) -> EventBatch:
        """The events ``start`` to ``stop`` (clamped to the batch, as a slice is)."""

    @property
    def silenced(self) -> memoryview:
        """failed/resumed: 1 if the topic is silenced, else 0 (``"B"``)."""

    def suppressed_by_list(self) -> list[str]:
        """The parent each event is suppressed by, ``""`` for none."""

    def without_marked(self, *, silenced: bool, suppressed: bool) -> EventBatch:
        """The events without those marked ``silenced`` (when ``silenced``) or suppressed
        (when ``suppressed``), in order; the same batch when none is left out."""

    def fresh(self, newest: Newest, feed: int) -> EventBatch:
        """The events feed number ``feed`` should hand over, filtered through ``newest``
        (which notes them): duplicates and stale events of a feed switch left out (see
        :class:`Newest`). The same batch when nothing is left out."""

@final
class EventBatchIterator:
    """Iterates a batch's events as :class:`Event` objects."""

    def __iter__(self) -> EventBatchIterator: ...
    def __next__(self) -> Event: ...

@final
class Newest:
    """What a monitor's dispatch feeds delivered, so that a feed switch hands no event over
    twice (see :meth:`EventBatch.fresh`): per topic, the newest ``failed``/``resumed`` (a
    topic's have strictly increasing ``at``), the newest ``local_pause``, and the ``received``
    events a replaced feed popped (skipped only as exact repeats: same topic, ``at`` and
    ``seq``)."""

    def __new__(cls) -> Newest: ...
    def open_feed(self) -> int:
        """A new feed is opened: its number. Call it before subscribing the feed's queue;
        feeds with lower numbers are replaced from then on."""

    @property
    def carried(self) -> int:
        """``received`` events noted by replaced feeds, not yet forgotten."""

@final
class TopicStatus:
    """A snapshot of one topic."""

    @property
    def topic(self) -> str: ...
    @property
    def handle(self) -> int: ...
    @property
    def state(self) -> Literal["PENDING", "ALIVE", "FAILED", "PAUSED", "STOPPED", "REMOVED"]: ...
    @property
    def missed(self) -> int: ...
    @property
    def last_seen(self) -> float | None: ...
    @property
    def period(self) -> float: ...
    @property
    def allowed_misses(self) -> int: ...
    @property
    def grace(self) -> float: ...
    @property
    def failed_since(self) -> float | None: ...
    @property
    def next_deadline(self) -> float | None: ...
    @property
    def phi(self) -> float | None: ...

@final
class DedupWindow:
    """The last ``capacity`` distinct message ids; ``seen(id)`` is True for a duplicate within
    the window and records a new id (the oldest is forgotten beyond ``capacity``)."""

    def __new__(cls, capacity: int) -> DedupWindow: ...
    @property
    def capacity(self) -> int: ...
    def seen(self, id: str) -> bool: ...
    def seen_many(self, ids: list[str]) -> list[bool]: ...
    def clear(self) -> None: ...
    def stats(self) -> dict[str, int]: ...
    def __len__(self) -> int: ...
    def __contains__(self, id: str, /) -> bool: ...

@final
class EventQueue:
    """A bounded queue of events for one consumer; ``pop`` waits with the GIL released."""

    def pop(self, max: int = 1024, timeout: float | None = None) -> list[Event]: ...
    def try_pop(self, max: int = 1024) -> list[Event]: ...
    def pop_batch(self, max: int = 65536, timeout: float | None = None) -> EventBatch:
        """:meth:`pop` as one :class:`EventBatch` (columns, events built on access) of up to
        ``max`` events (at most 4194304); empty on timeout or when closed and empty."""

    def try_pop_batch(self, max: int = 65536) -> EventBatch:
        """:meth:`try_pop` as one :class:`EventBatch`."""

    def close(self) -> None: ...
    @property
    def closed(self) -> bool: ...
    @property
    def overflow(self) -> _Overflow: ...
    def stats(self) -> dict[str, int]: ...
    def __len__(self) -> int: ...

@final
class Detector:
    """Watches topics for missed periods (see the module docs for the event semantics).

    ``grace`` (seconds >= 0, per topic; the constructor's is the default) is slack added to
    every deadline: with the last beat at ``last``, the n-th period counts as missed once the
    clock is past ``last + n * period + grace``. Phi-accrual topics ignore it.

    A handle is a topic's slot (low 32 bits) and the slot's generation (the bits above). A
    removed topic's slot is reused once no queued event can name it any more (every queue
    has been found empty since); the new topic gets a new generation, so the old handle
    raises ``KeyError`` (or beats with it are counted unknown) and never reaches the new one.

    A topic gets at most 64 ``failed`` events from one run of the detector: after a long gap
    (a long ``advance``, a stall with ``max_local_pause=None``) the first 63 missed periods
    fire one by one, then one for the latest deadline passed, with the exact count.

    ``stop()`` then ``start()`` keeps each topic as it was: a FAILED topic stays FAILED (count
    and ``since`` kept) until a beat is heard, a paused one stays paused. A beat stamped at or
    before a FAILED topic's latest missed deadline (``now=`` in the past) is old news: it raises
    ``last_seen`` but does not end the outage.
    """

    def __new__(
        cls,
        *,
        period: float = 1.0,
        allowed_misses: int = 1,
        grace: float = 0.0,
        clock: ManualClock | None = None,
        resolution: float = 0.001,
        tick: float = 0.01,
        auto_add: bool = False,
        max_local_pause: float | None = 5.0,
        lag_threshold: float | None = 1.0,
        max_ingest_lag: float | None = 60.0,
    ) -> Detector: ...
    def add(
        self,
        name: str,
        period: float | None = None,
        allowed_misses: int | None = None,
        phi: Phi | None = None,
        *,
        grace: float | None = None,
        now: float | None = None,
    ) -> int: ...
    def add_many(
        self,
        names: Iterable[str] | Any,
        period: float | None = None,
        allowed_misses: int | None = None,
        phi: Phi | None = None,
        *,
        grace: float | None = None,
        now: float | None = None,
    ) -> list[int]: ...
    def adopt(
        self,
        name: str,
        *,
        since: float | None = None,
        missed: int = 1,
        reason: str | None = None,
        alerted: bool = True,
        silenced: bool = False,
        suppressed_by: str | None = None,
        flapping: bool = False,
        period: float | None = None,
        now: float | None = None,
    ) -> int:
        """Take ``name`` over from another monitor at ``now``: ``since=None`` is a fresh start
        (as :meth:`add`); with ``since`` (this clock's seconds, may be before this detector
        started) its outage is carried over: FAILED with no ``failed`` event, ``missed`` kept,
        the next ``failed(missed + 1)`` one period after ``now`` (with ``reason``, an explicit
        failure's, at every missed period), its next beat a ``resumed``
        with the downtime from ``since``. ``alerted``/``silenced``/``suppressed_by``: what the
        old owner's listeners were told; ``flapping``: it flaps on here. Its handle."""

    def adopt_many(
        self,
        names: Iterable[str] | Any,
        *,
        since: Sequence[float | None] | Any | None = None,
        missed: Sequence[int | None] | Any | None = None,
        reason: Sequence[str | None] | Any | None = None,
        alerted: Sequence[bool | None] | Any | None = None,
        silenced: Sequence[bool | None] | Any | None = None,
        suppressed_by: Sequence[str | None] | Any | None = None,
        flapping: Sequence[bool | None] | Any | None = None,
        period: Sequence[float | None] | Any | None = None,
        now: float | None = None,
    ) -> list[int]:
        """:meth:`adopt` by columns as long as ``names`` (lists, Arrow or NumPy arrays; None
        or a None item: the default; a None or NaN ``since``: a fresh start), in one call.
        A bad row raises naming it and changes nothing. The handles in order."""

    def marks(self) -> list[tuple[str, bool, bool, str | None, bool]]:
        """``(name, alerted, silenced, suppressed_by, flapping)`` of each FAILED topic whose
        outage's events all went out marked (or held back while flapping) and each flapping
        topic: what :meth:`adopt` carries. Empty while no silence, dependency or flapping was
        declared."""

    def handle(self, name: str) -> int | None: ...
    def handles(self) -> list[int]:
        """The handles of every topic held (not removed)."""

    def name(self, handle: int) -> str: ...
    def __len__(self) -> int:
        """Topics held: added and not removed."""

    def __contains__(self, name: str, /) -> bool: ...
    def remove(self, topic: _Topic) -> None: ...
    def pause(self, topic: _Topic) -> bool: ...
    def resume(self, topic: _Topic, *, now: float | None = None) -> bool: ...
    def set_period(self, topic: _Topic, period: float, *, now: float | None = None) -> None: ...
    def configure(
        self,
        topic: _Topic,
        *,
        period: float | None = None,
        allowed_misses: int | None = None,
        phi: Phi | Literal[False] | None = None,
        grace: float | None = None,
        now: float | None = None,
    ) -> None: ...
    def beat(
        self,
        topic: _Topic,
        *,
        now: float | None = None,
        seq: int | None = None,
        latency: float | None = None,
    ) -> bool: ...
    def beat_many(self, names: Iterable[str] | Any, *, now: float | None = None) -> int: ...
    def beat_handles(self, handles: Iterable[int] | Any, *, now: float | None = None) -> int: ...
    def silence(
        self, pattern: str, end: float, *, start: float | None = None, reason: str = ""
    ) -> int: ...
    def unsilence(self, id: int) -> bool: ...
    def silences(self) -> list[tuple[int, str, float, float, str]]: ...
    def depends(self, child_pattern: str, on: str) -> None: ...
    def dependencies(self) -> list[tuple[str, str]]: ...
    def set_flapping(self, threshold: int, window: float, *, hold: bool = True) -> None: ...
    def flapping(self) -> tuple[int, float, bool]: ...
    def flapping_topics(self) -> int: ...
    def advance(self, now: float | None = None) -> int: ...
    def start(self, *, now: float | None = None) -> None: ...
    def stop(self) -> None: ...
    def push_unpushed(self) -> None:
        """Push what :meth:`pause` and :meth:`remove` put aside (the ``failed`` of dependents a
        FAILED topic suppressed, with a ``"block"`` queue subscribed: those calls never wait for
        room). May wait for room: not from a ``"block"`` queue's consumer, nor holding a lock
        that it needs. Else the next :meth:`advance` or :meth:`stop` pushes them."""

    def outbox_mark(self) -> int: ...
    def wait_pushed(self, mark: int, timeout: float | None = None) -> bool: ...
    @property
    def running(self) -> bool: ...
    auto_add: bool
    max_local_pause: float | None
    def note_intake(
        self, backlogged: bool, transit: float | None = None, *, now: float | None = None
    ) -> None:
        """One read of the intake: ``backlogged`` (the read filled its buffer), ``transit``
        (seconds, wall now minus the freshest beat's send time, None if none carried one).
        While backlogged, deadlines are judged against the watermark ``now - transit`` (held
        where it was without a transit, never more than ``max_ingest_lag`` behind the clock);
        a read not backlogged releases it."""

    @property
    def lag(self) -> float:
        """How far behind the clock the intake's watermark is now, seconds (0.0: not backlogged)."""

    lag_threshold: float | None
    max_ingest_lag: float | None
    @property
    def lagging(self) -> bool:
        """Whether an ingest-lag episode has reported ``lagging`` and not yet ``caught_up``."""

    count_intervals: bool
    """Whether beat inter-arrival times are counted (off by default; a monitor turns it on)."""
    def interval_histogram(self) -> tuple[list[float], list[int], float]:
        """``(bounds, counts, sum)``: bucket upper bounds (seconds, inclusive), per-bucket
        counts (not cumulative; the last is ``+Inf``), the sum of the intervals (seconds)."""

    def counts_by_prefix(self, depth: int) -> dict[str, tuple[int, int, int, int, int, int]]:
        """Topics in each state (PENDING, ALIVE, FAILED, PAUSED, STOPPED, REMOVED) by the first
        ``depth`` segments of their names; removed topics left out."""

    def now(self) -> float: ...
    def status(self, topic: _Topic) -> TopicStatus: ...
    def worst(self, n: int) -> list[TopicStatus]:
        """The ``n`` worst topics, worst first: FAILED, then missed periods not failed yet;
        most missed, then longest down, then handle order. Healthy, paused, stopped: left out."""
    def series_topics(self, n: int) -> tuple[list[TopicStatus], int]:
        """At most ``n`` topics, FAILED first, then by name; and how many topics there are."""
    def statuses(self) -> list[TopicStatus]: ...
    def counts(self) -> dict[str, int]: ...
    def stats(self) -> dict[str, int]: ...
    def heap_bytes(self) -> int: ...
    def subscribe(
        self, capacity: int = 65536, overflow: _Overflow = "coalesce", received: bool = False
    ) -> EventQueue: ...
    def unsubscribe(self, queue: EventQueue) -> bool: ...

@final
class Intake:
    """A monitor's intake: every rule a beat passes before the detector records it (period
    bounds, running, signed-beat age, learning with pattern and ``max_topics`` (never a topic
    under ``"_hw."``: ``bad_topic``), replays, re-tuning), however the beat arrives. Refusals
    are counted by reason; the first 1024 not yet taken are kept with details
    (:meth:`take_refusals`). ``shard=(shards, k)`` (:meth:`ingest`, :meth:`record`): the beat
    came from shard ``k``'s queue of a monitor group of ``shards`` shards, and a beat of
    another shard's topic is refused (``wrong_shard``)."""

    running: bool
    paused_all: bool
    def __new__(
        cls,
        detector: Detector,
        pattern: str,
        period: float,
        *,
        grace: float | None = None,
        key: bytes | None = None,
        max_topics: int | None = None,
        max_beat_age: float | None = None,
        max_size: int = 65536,
    ) -> Intake: ...
    def pause_name(self, name: str) -> bool: ...
    def unpause_name(self, name: str) -> bool: ...
    def is_paused_name(self, name: str) -> bool: ...
    def paused_names(self) -> list[str]: ...
    def expect(
        self,
        name: str,
        period: float | None = None,
        allowed_misses: int | None = None,
        phi: Phi | None = None,
        grace: float | None = None,
    ) -> int: ...
    def remove(self, name: str) -> bool: ...
    def matches(self, topic: str) -> bool: ...
    def beat(self, topic: str, *, seq: int | None = None, latency: float | None = None) -> bool: ...
    def beat_many(self, names: Any) -> int: ...
    def ingest(
        self,
        body: bytes | bytearray | memoryview,
        destination: str | None = None,
        *,
        shard: tuple[int, int] | None = None,
    ) -> bool | None: ...
    def record(
        self,
        topic: str,
        seq: int | None = None,
        boot: str | None = None,
        sent: float | None = None,
        period: float | None = None,
        down: bool = False,
        reason: str | None = None,
        *,
        shard: tuple[int, int] | None = None,
    ) -> bool: ...
    def refuse(self, reason: str, detail: str) -> None: ...
    @property
    def pending(self) -> bool: ...
    def take_refusals(self) -> list[tuple[str, str, int]]: ...
    def stats(self) -> dict[str, Any]: ...
    def tracked(self, handle: int) -> tuple[float, bool, float] | None: ...
    def heap_bytes(self) -> int: ...

@final
class Routes:
    """Which STOMP subscription id feeds which :class:`Intake` (one per transport).
    ``from_body``: each beat's topic is its body's (a shard queue); ``shard=(shards, k)`` (with
    ``from_body``): the queue is shard ``k``'s, a beat of another shard's topic is refused
    (``wrong_shard``)."""

    def __new__(cls) -> Routes: ...
    def add(
        self,
        sub_id: str,
        intake: Intake,
        *,
        from_body: bool = False,
        shard: tuple[int, int] | None = None,
    ) -> None: ...
    def remove(self, sub_id: str) -> bool: ...
    def __len__(self) -> int: ...

@final
class FrameReader:
    """One connection's reader: :meth:`feed` takes the bytes read from the socket, records the
    beats of routed subscriptions, and returns the other frames, whole and in order."""

    def __new__(cls, routes: Routes) -> FrameReader: ...
    def feed(self, data: bytes, backlogged: bool = False) -> bytes: ...
    @property
    def pending(self) -> int: ...
    def stats(self) -> dict[str, Any]: ...

@final
class DeadlineQueue:
    """Deadlines per integer key on the core's timer wheel, for publishers (it runs nothing: the
    publishers' executor pops due keys and runs their tasks).

    With the real clock (the default) a driver thread, started at once, moves it every ``tick``
    seconds; a :class:`ManualClock`'s ``advance`` drives it instead. A key is due once the
    queue has been moved past its deadline (rounded up to ``resolution``); ``pop`` hands due
    keys out in deadline order (ties by key) with the exact deadline each was given.
    Keys are ints in ``[0, 2**24)``.
    """

    def __new__(
        cls, clock: ManualClock | None = None, resolution: float = 0.001, tick: float = 0.01
    ) -> DeadlineQueue: ...
    def schedule(self, key: int, at: float) -> None: ...
    def cancel(self, key: int) -> bool: ...
    def pop(self, max: int = 1024, timeout: float | None = None) -> list[tuple[int, float]]: ...
    def try_pop(self, max: int = 1024) -> list[tuple[int, float]]: ...
    def now(self) -> float: ...
    def start(self) -> None: ...
    def stop(self) -> None: ...
    def close(self) -> None: ...
    def __len__(self) -> int: ...

# -- Spark kernels (heartwire.spark) ----------------------------------------------------------
# Times: Arrow timestamps (any unit, rounded down to ms; without a time zone: UTC wall-clock
# time) or integers (epoch ms); periods: ms.
# Arrays come in through the Arrow PyCapsule interface and are computed with the GIL released.

def decode_beat(
    body: bytes,
    key: bytes | None = None,
    max_size: int = 65536,
    destination: str | None = None,
) -> (
    tuple[
        Literal["beat"],
        str,
        int | None,
        str | None,
        float | None,
        float | None,
        bool,
        Literal["up", "down"],
        str | None,
    ]
    | tuple[Literal["reject"], str, str]
    | tuple[Literal["defer"]]
):
    """Decode one message body natively, as ``BeatCodec(key, max_size).decode(body,
    destination)`` would: ``("beat", topic, seq, boot, sent, period, legacy, state, reason)``,
    ``("reject", reason, detail)``, or ``("defer",)`` when only the Python codec can tell."""

def shard_of(topic: str, shards: int) -> int:
    """The shard in ``[0, shards)`` of ``topic`` in a monitor group of ``shards`` (1 to
    :data:`MAX_SHARDS`) shards, as ``heartwire.transport.shards.shard_of`` computes it:
    ``jump_hash(crc32(topic as UTF-8), shards)`` (``topic`` is hashed, not validated)."""

def split_frames(
    chunks: list[bytes], subscription: bytes
) -> tuple[list[tuple[bytes | None, bytes, bool]], bytes, int, int]:
    """Split a STOMP byte stream read as ``chunks`` with the native splitter, consuming the
    well-formed MESSAGE frames on ``subscription``: ``(consumed, out, pending, eols)``, where
    ``consumed`` lists ``(destination, body, escaped)``, ``out`` holds every other frame's bytes
    as received, ``pending`` the bytes of an incomplete frame, ``eols`` the heart-beats dropped.
    For framing tests."""

def freshness_kernel(last_seen: Any, period_ms: Any, as_of: Any, allowed_misses: int = 1) -> Any:
    """Freshness of every row of ``last_seen`` (an Arrow array): a ``pyarrow.StructArray``
    ``struct<status: string, missed: int64, staleness_ms: int64>``. ``period_ms`` and
    ``as_of``: Arrow arrays of the same length, or an int or None for every row."""

def outages_kernel(
    ts: Any,
    period_ms: Any,
    allowed_misses: int,
    end_ms: int,
    start_ms: int | None = None,
    expect_from_start: bool = True,
) -> tuple[int, Any] | None:
    """Outages of one topic from its beat times ``ts`` (an Arrow array, chunked array or list
    of arrays, any order) over ``[start_ms, end_ms)``: ``(window_start_ms, batch)``, the
    ``pyarrow.RecordBatch`` with columns ``down_from_ms``, ``down_to_ms``, ``missed``,
    ``open``, ``began_in_window``, ``last_beat_ms``, ``period_ms`` (the deadlines are
    ``last_beat_ms + k * period_ms``); None if no beat is before ``end_ms``. ``period_ms``: an int,
    or arrays chunked like ``ts`` (each beat's period). ``expect_from_start``: a topic with no
    beat before ``start_ms`` is expected from it (False: judged from its first beat)."""

def availability_kernel(
    ts: Any,
    period_ms: Any,
    allowed_misses: int,
    end_ms: int,
    start_ms: int | None = None,
    expect_from_start: bool = True,
) -> tuple[int, int, float, int, int, float | None, float | None] | None:
    """Availability of one topic (arguments as :func:`outages_kernel`): ``(window_start_ms,
    window_end_ms, uptime_pct, outages, downtime_ms, mttr_ms, mtbf_ms)``; None if no beat is
    before ``end_ms``."""

def partition_kernel(
    topics: Any,
    ts: Any,
    period_ms: Any,
    allowed_misses: int,
    end_ms: int,
    start_ms: int | None = None,
    availability: bool = False,
    expect_from_start: bool = True,
) -> Any:
    """Outages (or with ``availability=True`` availability rows) of every topic in beats of
    many topics in any order: ``topics`` (Arrow string arrays) and ``ts`` chunked alike. A
    ``pyarrow.RecordBatch``: ``topic, down_from_ms, down_to_ms, missed, open,
    began_in_window, last_beat_ms, period_ms`` or ``topic,
    window_start_ms, window_end_ms, uptime_pct, outages, downtime_ms, mttr_ms, mtbf_ms``."""
