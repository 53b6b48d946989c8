"""The beat codec: JSON beats, legacy text, signatures, strict fields, and fuzzing."""

from __future__ import annotations

import json
import math
import pickle

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from heartwire.beat import DECODE_REASONS, MAX_SEQ, Beat, BeatCodec, DecodeError

KEY = b"shared secret"

topics = st.lists(
    st.text(
        alphabet="abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-:",
        min_size=1,
        max_size=8,
    ),
    min_size=1,
    max_size=4,
).map(".".join)
json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(2**70), 2**70)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=20),
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=8), children, max_size=4)
    ),
    max_leaves=12,
)
beats = st.builds(
    Beat,
    topic=topics,
    seq=st.none() | st.integers(0, MAX_SEQ),
    boot_id=st.none() | st.text(min_size=1, max_size=40),
    sent_at=st.none() | st.floats(allow_nan=False, allow_infinity=False),
    period=st.none() | st.floats(min_value=1e-9, max_value=1e9),
    payload=json_values,
)


def _normal(beat: Beat) -> Beat:
    """What a beat decodes to: numbers as floats (-0.0 and 0.0 compare equal anyway)."""
    return Beat(
        beat.topic,
        beat.seq,
        beat.boot_id,
        None if beat.sent_at is None else float(beat.sent_at),
        None if beat.period is None else float(beat.period),
        beat.payload,
    )


# -- round trips ----------------------------------------------------------------------------


@given(beats)
def test_unsigned_beats_round_trip(beat: Beat) -> None:
    codec = BeatCodec()
    assert codec.decode(codec.encode(beat), destination=beat.topic) == _normal(beat)


@given(beats)
def test_signed_beats_round_trip_and_verify(beat: Beat) -> None:
    codec = BeatCodec(KEY)
    body = codec.encode(beat)
    assert json.loads(body)["sig"]
    assert codec.decode(body) == _normal(beat)
    # An unsigned receiver still reads a signed beat.
    assert BeatCodec().decode(body) == _normal(beat)


def test_encoding_is_compact_json_with_known_field_names() -> None:
    beat = Beat("svc.a", seq=7, boot_id="b00t", sent_at=12.5, period=1, payload={"load": 0.3})
    body = BeatCodec().encode(beat)
    assert body == (
        b'{"boot":"b00t","payload":{"load":0.3},"period":1.0,"sent":12.5,"seq":7,'
        b'"topic":"svc.a","v":1}'
    )
    assert BeatCodec().encode(Beat("svc.a")) == b'{"topic":"svc.a","v":1}'


def test_a_minimal_json_beat_decodes_with_unknown_fields_ignored() -> None:
    beat = BeatCodec().decode(b' {"v": 1, "topic": "svc.a", "future": [1, 2]}\n')
    assert beat == Beat("svc.a")


# -- legacy text ----------------------------------------------------------------------------


@pytest.mark.parametrize("body", [b"svc.a HEARTBEAT", b"svc.a HEARTBEAT\n", "svc.a HEARTBEAT"])
def test_legacy_text_beats_are_accepted(body: bytes | str) -> None:
    beat = BeatCodec().decode(body, destination="svc.a")
    assert beat == Beat("svc.a", legacy=True)
    assert BeatCodec().encode(beat) == b"svc.a HEARTBEAT"


def test_legacy_text_is_checked() -> None:
    codec = BeatCodec()
    with pytest.raises(DecodeError) as info:
        codec.decode(b"svc.a heartbeat")
    assert info.value.reason == "bad_json"
    with pytest.raises(DecodeError) as info:
        codec.decode(b"svc.* HEARTBEAT")
    assert info.value.reason == "bad_field"
    assert "svc.*" in info.value.detail
    with pytest.raises(DecodeError) as info:
        codec.decode(b"svc.a HEARTBEAT", destination="svc.b")
    assert info.value.reason == "topic_mismatch"


# -- signatures -----------------------------------------------------------------------------


def test_with_a_key_unsigned_and_legacy_beats_are_rejected() -> None:
    codec = BeatCodec(KEY)
    for body in (BeatCodec().encode(Beat("svc.a", seq=1)), b"svc.a HEARTBEAT"):
        with pytest.raises(DecodeError) as info:
            codec.decode(body)
        assert info.value.reason == "unsigned"


def test_wrong_key_and_tampering_are_bad_signatures() -> None:
    body = BeatCodec(KEY).encode(Beat("svc.a", seq=1, period=1.0))
    cases = [
        (BeatCodec(b"other key"), body),
        (BeatCodec(KEY), body.replace(b'"seq":1', b'"seq":2')),
        (BeatCodec(KEY), body.replace(b'"topic":"svc.a"', b'"topic":"svc.b"')),
        (BeatCodec(KEY), body.replace(b'"v":1', b'"v":1,"extra":true')),
        (BeatCodec(KEY), body[:-3] + b'x"}'),
        (BeatCodec(KEY), body[: body.index(b'"sig"')] + b'"sig":7}'),
    ]
    for codec, tampered in cases:
        with pytest.raises(DecodeError) as info:
            codec.decode(tampered)
        assert info.value.reason == "bad_signature", tampered


def test_signature_is_hmac_sha256_over_canonical_json_of_the_other_fields() -> None:
    import hashlib
    import hmac

    body = BeatCodec("k").encode(Beat("svc.a", seq=3))
    obj = json.loads(body)
    sig = obj.pop("sig")
    canonical = json.dumps(obj, sort_keys=True, separators=(",", ":")).encode()
    assert sig == hmac.new(b"k", canonical, hashlib.sha256).hexdigest()
    # Key order and spacing on the wire do not matter, only the fields.
    reordered = json.dumps({"sig": sig.upper(), **dict(reversed(list(obj.items())))}, indent=1)
    assert BeatCodec("k").decode(reordered.encode()) == Beat("svc.a", seq=3)


def test_legacy_beats_cannot_be_signed() -> None:
    with pytest.raises(ValueError, match="legacy"):
        BeatCodec(KEY).encode(Beat("svc.a", legacy=True))


# -- strict fields --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("fields", "detail"),
    [
        ({"v": 2}, "v must be 1"),
        ({"v": True}, "v must be 1"),
        ({"v": None}, "v must be 1"),
        ({"topic": None}, "topic must be a str"),
        ({"topic": ""}, "topic must not be empty"),
        ({"topic": "svc.>"}, "wildcard"),
        ({"seq": -1}, "seq must be in"),
        ({"seq": 2**64}, "seq must be in"),
        ({"seq": 1.0}, "seq must be an int, got float"),
        ({"seq": True}, "seq must be an int, got bool"),
        ({"seq": "1"}, "seq must be an int, got str"),
        ({"period": 0}, "period must be a positive finite"),
        ({"period": -1.0}, "period must be a positive finite"),
        ({"period": 10**400}, "period must be a positive finite"),
        ({"period": False}, "period must be a number, got bool"),
        ({"period": "1"}, "period must be a number, got str"),
        ({"sent": True}, "sent must be a number, got bool"),
        ({"sent": 10**400}, "sent must be finite"),
        ({"boot": 5}, "boot must be a str"),
        ({"boot": ""}, "boot must be 1 to"),
    ],
)
def test_bad_fields_are_rejected_naming_the_field(fields: dict[str, object], detail: str) -> None:
    obj = {"v": 1, "topic": "svc.a", **fields}
    with pytest.raises(DecodeError) as info:
        BeatCodec().decode(json.dumps(obj).encode())
    assert info.value.reason == "bad_field"
    assert detail in info.value.detail


@pytest.mark.parametrize(
    ("body", "reason"),
    [
        (b"", "bad_json"),
        (b"{", "bad_json"),
        (b"[1, 2]", "bad_json"),
        (b'{"v": 1, "topic": "svc.a", "sent": NaN}', "bad_json"),
        (b'{"v": 1, "topic": "svc.a", "sent": Infinity}', "bad_json"),
        (b'{"v": 1, "topic": "svc.a", "sent": 1e999}', "bad_json"),
        (b"[" * 100_000, "too_large"),
        (b"[" * 60_000, "bad_json"),
        (b"\xff\xfe", "not_utf8"),
        (b'{"v": 1, "topic": "svc.a\xc3"}', "not_utf8"),
        (b'{"v":1,"topic":"svc.a","seq":' + b"9" * 5000 + b"}", "bad_json"),
    ],
)
def test_bad_bodies_give_the_reason(body: bytes, reason: str) -> None:
    with pytest.raises(DecodeError) as info:
        BeatCodec().decode(body)
    assert info.value.reason == reason
    assert str(info.value).startswith(reason)


def test_size_limit_and_topic_mismatch() -> None:
    codec = BeatCodec(max_size=64)
    ok = codec.encode(Beat("svc.a"))
    assert codec.decode(ok, destination="svc.a").topic == "svc.a"
    with pytest.raises(DecodeError) as info:
        codec.decode(ok + b" " * 64)
    assert info.value.reason == "too_large"
    with pytest.raises(DecodeError) as info:
        codec.decode(ok, destination="svc.b")
    assert info.value.reason == "topic_mismatch"
    assert "svc.a" in info.value.detail and "svc.b" in info.value.detail


def test_encode_rejects_fields_that_would_not_decode() -> None:
    codec = BeatCodec()
    with pytest.raises(ValueError, match=r"beat.topic 'svc\.\*'"):
        codec.encode(Beat("svc.*"))
    with pytest.raises(ValueError, match=r"beat\.seq must be in"):
        codec.encode(Beat("svc.a", seq=-1))
    with pytest.raises(TypeError, match=r"beat\.seq must be an int, got bool"):
        codec.encode(Beat("svc.a", seq=True))
    with pytest.raises(ValueError, match=r"beat\.period must be a positive finite"):
        codec.encode(Beat("svc.a", period=math.nan))
    with pytest.raises(ValueError, match=r"beat\.payload is not JSON-serializable"):
        codec.encode(Beat("svc.a", payload={"x": object()}))
    with pytest.raises(ValueError, match=r"beat\.payload is not JSON-serializable"):
        codec.encode(Beat("svc.a", payload=math.inf))


def test_codec_arguments_are_checked() -> None:
    with pytest.raises(ValueError, match="key must not be empty"):
        BeatCodec(b"")
    with pytest.raises(TypeError, match="key must be bytes, str or None, got int"):
        BeatCodec(5)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="max_size must be >= 16, got 0"):
        BeatCodec(max_size=0)
    with pytest.raises(TypeError, match="max_size must be an int"):
        BeatCodec(max_size=1.5)  # type: ignore[arg-type]
    assert BeatCodec("k").signed and not BeatCodec().signed
    assert "signed=True" in repr(BeatCodec("k"))


def test_decode_error_is_a_value_error_and_pickles() -> None:
    err = DecodeError("bad_field", "seq must be an int")
    assert isinstance(err, ValueError)
    back = pickle.loads(pickle.dumps(err))
    assert (back.reason, back.detail, str(back)) == (err.reason, err.detail, str(err))


# -- fuzzing: any bytes decode or raise DecodeError with a known reason, nothing else -------


def _decode_or_reason(codec: BeatCodec, body: bytes, destination: str | None = None) -> str:
    try:
        beat = codec.decode(body, destination)
    except DecodeError as exc:
        assert exc.reason in DECODE_REASONS, exc.reason
        return exc.reason
    assert isinstance(beat, Beat)
    return "ok"


@settings(max_examples=300, suppress_health_check=[HealthCheck.too_slow])
@given(st.binary(max_size=300), st.sampled_from([None, KEY]))
@example(b'{"v":1,"topic":"a","seq":1e309}', None)
@example(b'{"v":1,"topic":"a","payload":"\\ud800"}', None)
@example(b'{"v":1,"topic":"a","payload":"\\ud800","sig":"' + b"0" * 64 + b'"}', KEY)
def test_random_bytes_decode_or_raise_decode_error(body: bytes, key: bytes | None) -> None:
    _decode_or_reason(BeatCodec(key, max_size=256), body, "a")


@st.composite
def mutated(draw: st.DrawFn) -> tuple[bytes, bytes | None]:
    key = draw(st.sampled_from([None, KEY]))
    body = bytearray(BeatCodec(key).encode(draw(beats)))
    for _ in range(draw(st.integers(1, 4))):
        op = draw(st.sampled_from(["flip", "insert", "delete", "truncate", "swap"]))
        pos = draw(st.integers(0, max(len(body) - 1, 0)))
        if op == "flip" and body:
            body[pos] ^= 1 << draw(st.integers(0, 7))
        elif op == "insert":
            chunk = draw(
                st.sampled_from([b"-", b"1e999", b"NaN", b"[", b"\xc3", b'"', b"true", b"null"])
            )
            body[pos:pos] = chunk
        elif op == "delete" and body:
            del body[pos]
        elif op == "truncate":
            del body[pos:]
        elif op == "swap":
            for a, b in ((b'"seq":', b'"seq":-'), (b'"v":1', b'"v":true'), (b"e", b"E")):
                body = bytearray(bytes(body).replace(a, b, 1))
    return bytes(body), key


@settings(max_examples=500, suppress_health_check=[HealthCheck.too_slow])
@given(mutated())
def test_mutated_beats_decode_or_raise_decode_error(case: tuple[bytes, bytes | None]) -> None:
    body, key = case
    _decode_or_reason(BeatCodec(key), body)


_FIELDS = st.sampled_from(["v", "topic", "seq", "boot", "sent", "period"])


@given(st.dictionaries(_FIELDS, json_values))
def test_random_json_objects_decode_or_raise_bad_field(obj: dict[str, object]) -> None:
    reason = _decode_or_reason(BeatCodec(), json.dumps(obj).encode())
    assert reason in ("ok", "bad_field")
