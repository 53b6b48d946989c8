"""Parity of the native beat decoder (``heartwire._core.decode_beat``) with ``BeatCodec.decode``.

The contract, for every body: a native ``beat`` only where Python returns a ``Beat`` with the same
fields (floats bit-equal), a native ``reject`` only where Python raises ``DecodeError`` with the
same reason, else ``defer``. What heartwire's own publisher writes must never defer.
"""

from __future__ import annotations

import itertools
import json
import random
import struct
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from heartwire._core import decode_beat
from heartwire.beat import MAX_SEQ, Beat, BeatCodec, DecodeError
from tests.fuzz.targets import mutated_frames

KEY = b"s3cret-key"
OTHER = b"other-key"

_PLAIN = BeatCodec()
_SIGNED = BeatCodec(key=KEY)


def _bits(x: float | None) -> bytes | None:
    return None if x is None else struct.pack("<d", x)


def check(
    body: bytes, key: bytes | None = None, destination: str | None = None, max_size: int = 65536
) -> str:
    """Assert the contract for one body; return what the native decoder did."""
    native = decode_beat(body, key, max_size, destination)
    try:
        beat = BeatCodec(key=key, max_size=max_size).decode(body, destination)
    except DecodeError as exc:
        python: tuple[Any, ...] = ("reject", exc.reason)
    else:
        python = ("beat", beat)
    shown = f"body={body[:120]!r} key={key!r} destination={destination!r}"
    if native[0] == "beat":
        assert python[0] == "beat", f"native beat, Python {python}: {shown}"
        b = python[1]
        _, topic, seq, boot, sent, period, legacy, state, reason = native
        assert (topic, seq, boot, legacy) == (b.topic, b.seq, b.boot_id, b.legacy), shown
        assert (state, reason) == (b.state, b.reason), shown
        assert _bits(sent) == _bits(b.sent_at), (sent, b.sent_at, shown)
        assert _bits(period) == _bits(b.period), (period, b.period, shown)
        assert type(seq) is type(b.seq), shown
    elif native[0] == "reject":
        assert python == ("reject", native[1]), f"native {native}, Python {python}: {shown}"
        assert len(native[2]) <= 300, native
    else:
        assert native == ("defer",), native
    return str(native[0])


def signed(beat: Beat, key: bytes = KEY) -> bytes:
    return BeatCodec(key=key).encode(beat)


def obj(**fields: Any) -> bytes:
    return json.dumps(fields).encode()


def resign(text: bytes, key: bytes = KEY) -> bytes:
    """``text`` (a JSON object without sig) plus a sig member computed the way Python checks it
    (over the canonical form), appended as the last member of the text as written."""
    canonical = json.dumps(
        json.loads(text), sort_keys=True, separators=(",", ":"), ensure_ascii=True
    ).encode()
    import hashlib
    import hmac

    sig = hmac.new(key, canonical, hashlib.sha256).hexdigest()
    return text.rstrip()[:-1] + b',"sig":"' + sig.encode() + b'"}'


_GOOD = signed(Beat("svc.a", seq=7, boot_id="b1", sent_at=1718000000.25, period=1.0))
_GOOD_SIG = json.loads(_GOOD)["sig"]
_HEAD = _GOOD[: _GOOD.index(b',"sig"')]  # the canonical text without the closing brace

# (id, body, key, destination, expected native outcome: "beat", "reject", "defer" or None)
VECTORS: list[tuple[str, bytes, bytes | None, str | None, str | None]] = [
    # -- good beats ----------------------------------------------------------------------
    ("minimal", b'{"v":1,"topic":"svc.a"}', None, None, "beat"),
    ("minimal-dest", b'{"v":1,"topic":"svc.a"}', None, "svc.a", "beat"),
    ("v-float", b'{"v":1.0,"topic":"svc.a"}', None, None, "beat"),
    ("v-exp", b'{"v":1e0,"topic":"svc.a"}', None, None, "beat"),
    ("v-rounds-to-1", b'{"v":1.0000000000000001,"topic":"svc.a"}', None, None, "beat"),
    ("seq-minus-zero", b'{"v":1,"topic":"a","seq":-0}', None, None, "beat"),
    ("seq-max", b'{"v":1,"topic":"a","seq":18446744073709551615}', None, None, "beat"),
    ("sent-int", b'{"v":1,"topic":"a","sent":1718000000}', None, None, "beat"),
    ("sent-int-minus-zero", b'{"v":1,"topic":"a","sent":-0}', None, None, "beat"),
    ("sent-float-minus-zero", b'{"v":1,"topic":"a","sent":-0.0}', None, None, "beat"),
    ("sent-big-int", b'{"v":1,"topic":"a","sent":' + b"9" * 300 + b"}", None, None, "beat"),
    ("period-tiny", b'{"v":1,"topic":"a","period":5e-324}', None, None, "beat"),
    ("period-int", b'{"v":1,"topic":"a","period":2}', None, None, "beat"),
    (
        "nulls-are-absent",
        b'{"v":1,"topic":"a","seq":null,"boot":null,"sent":null,"period":null}',
        None,
        None,
        "beat",
    ),
    (
        "unknown-fields",
        b'{"v":1,"topic":"a","x":{"y":[1,2,{"z":null}]},"w":"\\u00e9"}',
        None,
        None,
        "beat",
    ),
    ("spaces", b' \n{ "v" : 1 ,\t"topic" : "svc.a" , "seq" : 3 }\r\n ', None, None, "beat"),
    ("python-space-ends", b'\x1c\x0b{"v":1,"topic":"a"}\x1f\x0c', None, None, "beat"),
    ("dup-last-wins", b'{"v":2,"topic":"x","v":1,"topic":"svc.b"}', None, None, "beat"),
    (
        "surrogate-payload",
        b'{"v":1,"topic":"a","payload":"\\ud800\\udc00\\udfff"}',
        None,
        None,
        "beat",
    ),
    ("raw-non-ascii-boot", '{"v":1,"topic":"a","boot":"é€😀"}'.encode(), None, None, "beat"),
    ("escaped-boot", b'{"v":1,"topic":"a","boot":"\\u00e9\\n\\ud83d\\ude00"}', None, None, "beat"),
    ("boot-256", b'{"v":1,"topic":"a","boot":"' + b"x" * 256 + b'"}', None, None, "beat"),
    ("del-in-string", b'{"v":1,"topic":"a","boot":"\x7f"}', None, None, "beat"),
    (
        "nested-50",
        b'{"v":1,"topic":"a","payload":' + b"[" * 50 + b"]" * 50 + b"}",
        None,
        None,
        "beat",
    ),
    ("sig-ignored-without-key", b'{"v":1,"topic":"a","sig":5}', None, None, "beat"),
    ("signed", _GOOD, KEY, "svc.a", "beat"),
    (
        "signed-upper-hex",
        _GOOD.replace(_GOOD_SIG.encode(), _GOOD_SIG.upper().encode()),
        KEY,
        None,
        "beat",
    ),
    (
        "signed-sig-first",
        b'{"sig":"' + _GOOD_SIG.encode() + b'",' + _HEAD[1:] + b"}",
        KEY,
        None,
        "beat",
    ),
    (
        "signed-sig-middle",
        _HEAD.replace(b',"period"', b',"sig":"' + _GOOD_SIG.encode() + b'","period"') + b"}",
        KEY,
        None,
        "beat",
    ),
    (
        "signed-escaped-sig",
        _GOOD.replace(
            b'"sig":"' + _GOOD_SIG[:1].encode(), b'"sig":"\\u00' + b"%02x" % ord(_GOOD_SIG[0])
        ),
        KEY,
        None,
        "beat",
    ),
    ("legacy", b"svc.a HEARTBEAT", None, None, "beat"),
    ("nbsp-end", '{"v":1,"topic":"a"}\u00a0'.encode(), None, None, "beat"),
    (
        "unicode-spaces",
        '\u3000\u2028\x85{"v":1,"topic":"a"}\u205f\u1680'.encode(),
        None,
        None,
        "beat",
    ),
    ("em-space-legacy", "\u2003svc.a HEARTBEAT\u2029".encode(), None, None, "beat"),
    ("legacy-spaces", b" \t svc.a HEARTBEAT\r\n", None, "svc.a", "beat"),
    # -- rejections ------------------------------------------------------------------------
    ("too-large", b"x" * 65537, None, None, "reject"),
    ("not-utf8", b'{"v":1,"topic":"\xff"}', None, None, "reject"),
    ("not-utf8-surrogate", b'{"v":1,"topic":"\xed\xa0\x80"}', None, None, "reject"),
    ("empty", b"", None, None, "reject"),
    ("blank", b" \n\t", None, None, "reject"),
    ("open-brace", b"{", None, None, "reject"),
    ("extra-data", b'{"v":1,"topic":"a"} x', None, None, "reject"),
    ("two-objects", b'{"v":1,"topic":"a"}{}', None, None, "reject"),
    ("trailing-comma", b'{"v":1,"topic":"a",}', None, None, "reject"),
    ("array-trailing-comma", b'{"v":1,"topic":"a","x":[1,]}', None, None, "reject"),
    ("single-quotes", b"{'v':1}", None, None, "reject"),
    ("nan", b'{"v":1,"topic":"a","sent":NaN}', None, None, "reject"),
    ("infinity", b'{"v":1,"topic":"a","sent":Infinity}', None, None, "reject"),
    ("minus-infinity", b'{"v":1,"topic":"a","sent":-Infinity}', None, None, "reject"),
    ("float-overflow", b'{"v":1,"topic":"a","sent":1e400}', None, None, "reject"),
    ("float-overflow-nested", b'{"v":1,"topic":"a","p":[-1.5e999]}', None, None, "reject"),
    ("raw-control", b'{"v":1,"topic":"a","boot":"a\x01b"}', None, None, "reject"),
    ("raw-newline", b'{"v":1,"topic":"a","boot":"a\nb"}', None, None, "reject"),
    ("bad-escape", b'{"v":1,"topic":"a","boot":"\\x41"}', None, None, "reject"),
    ("short-u-escape", b'{"v":1,"topic":"a","boot":"\\u12"}', None, None, "reject"),
    ("leading-zero", b'{"v":01,"topic":"a"}', None, None, "reject"),
    ("dot-no-digit", b'{"v":1.,"topic":"a"}', None, None, "reject"),
    ("leading-dot", b'{"v":.5,"topic":"a"}', None, None, "reject"),
    ("plus", b'{"v":+1,"topic":"a"}', None, None, "reject"),
    ("exp-no-digit", b'{"v":1e,"topic":"a"}', None, None, "reject"),
    ("bare-minus", b'{"v":-,"topic":"a"}', None, None, "reject"),
    ("bad-literal", b'{"v":1,"topic":"a","x":tru}', None, None, "reject"),
    ("missing-comma", b'{"v":1 "topic":"a"}', None, None, "reject"),
    ("unterminated", b'{"v":1,"topic":"a', None, None, "reject"),
    ("not-object", b"[1,2]", None, None, "reject"),
    ("number", b"7", None, None, "reject"),
    ("v-missing", b'{"topic":"a"}', None, None, "reject"),
    ("v-2", b'{"v":2,"topic":"a"}', None, None, "reject"),
    ("v-str", b'{"v":"1","topic":"a"}', None, None, "reject"),
    ("v-true", b'{"v":true,"topic":"a"}', None, None, "reject"),
    ("v-null", b'{"v":null,"topic":"a"}', None, None, "reject"),
    ("v-huge", b'{"v":100000000000000000000000000001,"topic":"a"}', None, None, "reject"),
    ("topic-missing", b'{"v":1}', None, None, "reject"),
    ("topic-null", b'{"v":1,"topic":null}', None, None, "reject"),
    ("topic-int", b'{"v":1,"topic":5}', None, None, "reject"),
    ("topic-empty", b'{"v":1,"topic":""}', None, None, "reject"),
    ("topic-wildcard", b'{"v":1,"topic":"svc.*"}', None, None, "reject"),
    ("topic-empty-segment", b'{"v":1,"topic":"svc..a"}', None, None, "reject"),
    ("topic-non-ascii", '{"v":1,"topic":"své"}'.encode(), None, None, "reject"),
    ("topic-escaped-bad", b'{"v":1,"topic":"a\\nb"}', None, None, "reject"),
    ("topic-list", b'{"v":1,"topic":["a"]}', None, None, "reject"),
    ("seq-negative", b'{"v":1,"topic":"a","seq":-1}', None, None, "reject"),
    ("seq-2-64", b'{"v":1,"topic":"a","seq":18446744073709551616}', None, None, "reject"),
    ("seq-float", b'{"v":1,"topic":"a","seq":1.0}', None, None, "reject"),
    ("seq-true", b'{"v":1,"topic":"a","seq":true}', None, None, "reject"),
    ("seq-str", b'{"v":1,"topic":"a","seq":"1"}', None, None, "reject"),
    ("seq-object", b'{"v":1,"topic":"a","seq":{}}', None, None, "reject"),
    ("boot-empty", b'{"v":1,"topic":"a","boot":""}', None, None, "reject"),
    ("boot-257", b'{"v":1,"topic":"a","boot":"' + b"x" * 257 + b'"}', None, None, "reject"),
    ("boot-int", b'{"v":1,"topic":"a","boot":5}', None, None, "reject"),
    ("sent-str", b'{"v":1,"topic":"a","sent":"1"}', None, None, "reject"),
    ("sent-false", b'{"v":1,"topic":"a","sent":false}', None, None, "reject"),
    ("sent-int-overflow", b'{"v":1,"topic":"a","sent":' + b"9" * 400 + b"}", None, None, "reject"),
    ("period-zero", b'{"v":1,"topic":"a","period":0}', None, None, "reject"),
    ("period-zero-float", b'{"v":1,"topic":"a","period":0.0}', None, None, "reject"),
    ("period-minus-zero", b'{"v":1,"topic":"a","period":-0.0}', None, None, "reject"),
    ("period-negative", b'{"v":1,"topic":"a","period":-1}', None, None, "reject"),
    (
        "period-int-overflow",
        b'{"v":1,"topic":"a","period":' + b"9" * 400 + b"}",
        None,
        None,
        "reject",
    ),
    ("period-list", b'{"v":1,"topic":"a","period":[1]}', None, None, "reject"),
    ("topic-mismatch", b'{"v":1,"topic":"svc.a"}', None, "svc.b", "reject"),
    ("topic-mismatch-legacy", b"svc.a HEARTBEAT", None, "svc.b", "reject"),
    ("legacy-bad-topic", b"svc..a HEARTBEAT", None, None, "reject"),
    ("legacy-wildcard", b"svc.* HEARTBEAT", None, None, "reject"),
    ("legacy-space-in-name", b"svc a HEARTBEAT", None, None, "reject"),
    ("legacy-two-spaces", b"svc.a  HEARTBEAT", None, None, "reject"),
    ("legacy-no-name", b"HEARTBEAT", None, None, "reject"),
    ("legacy-lowercase", b"svc.a heartbeat", None, None, "reject"),
    ("legacy-tab", b"svc.a\tHEARTBEAT", None, None, "reject"),
    ("legacy-signed", b"svc.a HEARTBEAT", KEY, None, "reject"),
    ("legacy-non-ascii", "é HEARTBEAT".encode(), None, None, "reject"),
    ("legacy-non-ascii-signed", "é HEARTBEAT".encode(), KEY, None, "reject"),
    ("legacy-unicode-space-inside", "svc\u2000a HEARTBEAT".encode(), None, None, "reject"),
    ("legacy-bom", "\ufeffsvc.a HEARTBEAT".encode(), None, None, "reject"),
    ("json-bom", '\ufeff{"v":1,"topic":"a"}'.encode(), None, None, "reject"),
    ("json-zwsp", '\u200b{"v":1,"topic":"a"}'.encode(), KEY, None, "reject"),
    ("legacy-signed-bad-topic", b"svc..a HEARTBEAT", KEY, None, "reject"),
    ("unsigned", b'{"v":1,"topic":"a"}', KEY, None, "reject"),
    ("sig-null", b'{"v":1,"topic":"a","sig":null}', KEY, None, "reject"),
    ("sig-int", b'{"v":1,"topic":"a","sig":5}', KEY, None, "reject"),
    ("sig-short", b'{"v":1,"topic":"a","sig":"abc"}', KEY, None, "reject"),
    ("sig-not-hex", b'{"v":1,"topic":"a","sig":"' + b"g" * 64 + b'"}', KEY, None, "reject"),
    ("sig-65", b'{"v":1,"topic":"a","sig":"' + b"a" * 65 + b'"}', KEY, None, "reject"),
    ("sig-wrong", _GOOD.replace(_GOOD_SIG.encode(), b"0" * 64), KEY, None, "reject"),
    ("sig-other-key", _GOOD, OTHER, None, "reject"),
    ("sig-tampered", _GOOD.replace(b'"seq":7', b'"seq":8'), KEY, None, "reject"),
    ("signed-then-bad-field", resign(b'{"topic":"a","v":2}'), KEY, None, "reject"),
    ("signed-mismatch", _GOOD, KEY, "svc.b", "reject"),
    ("signed-bad-json", _GOOD[:-1], KEY, None, "reject"),
    # -- signed but not in heartwire's own form: the canonical text is rebuilt natively --------
    (
        "signed-json-dumps-wrong-sig",
        json.dumps({"v": 1, "topic": "a", "sig": "ab" * 32}).encode(),
        KEY,
        None,
        "reject",
    ),
    (
        "signed-unsorted-wrong-sig",
        b'{"v":1,"topic":"a","sig":"' + b"AB" * 32 + b'"}',
        KEY,
        None,
        "reject",
    ),
    (
        "signed-dups-wrong-sig",
        b'{"v":1,"v":1,"topic":"a","sig":"' + b"0" * 64 + b'"}',
        KEY,
        None,
        "reject",
    ),
    (
        "signed-deep-canonical",
        resign(
            b'{"p":' + b'[{"b":1,"a":2.50,"c":' * 40 + b"null" + b"}]" * 40 + b',"topic":"a","v":1}'
        ),
        KEY,
        None,
        "beat",
    ),
    (
        "signed-surrogates",
        resign(b'{"p":{"\\ud800":"\\udbff\\udfff","\\ue000":1},"topic":"a","v":1}'),
        KEY,
        None,
        "beat",
    ),
    # -- explicit failure: state and reason ---------------------------------------------------
    ("down-reason", b'{"v":1,"topic":"a","state":"down","reason":"db gone"}', None, None, "beat"),
    ("down-no-reason", b'{"v":1,"topic":"a","state":"down"}', None, None, "beat"),
    ("state-up", b'{"v":1,"topic":"a","state":"up"}', None, None, "beat"),
    ("state-null", b'{"v":1,"topic":"a","state":null,"reason":null}', None, None, "beat"),
    ("reason-with-up", b'{"v":1,"topic":"a","reason":"fine"}', None, None, "beat"),
    ("state-escaped", b'{"v":1,"topic":"a","state":"\\u0064own"}', None, None, "beat"),
    (
        "reason-escaped",
        b'{"v":1,"topic":"a","state":"down","reason":"a\\n\\"b\\u00e9"}',
        None,
        None,
        "beat",
    ),
    ("reason-256", b'{"v":1,"topic":"a","reason":"' + b"r" * 256 + b'"}', None, None, "beat"),
    (
        "reason-256-wide",
        ('{"v":1,"topic":"a","reason":"' + "😀" * 256 + '"}').encode(),
        None,
        None,
        "beat",
    ),
    (
        "reason-256-pairs",
        b'{"v":1,"topic":"a","reason":"' + b"\\ud83d\\ude00" * 256 + b'"}',
        None,
        None,
        "beat",
    ),
    ("reason-257", b'{"v":1,"topic":"a","reason":"' + b"r" * 257 + b'"}', None, None, "reject"),
    (
        "reason-257-wide",
        ('{"v":1,"topic":"a","reason":"' + "é" * 257 + '"}').encode(),
        None,
        None,
        "reject",
    ),
    ("reason-empty", b'{"v":1,"topic":"a","state":"down","reason":""}', None, None, "reject"),
    ("reason-int", b'{"v":1,"topic":"a","state":"down","reason":7}', None, None, "reject"),
    ("reason-list", b'{"v":1,"topic":"a","reason":["x"]}', None, None, "reject"),
    ("state-sideways", b'{"v":1,"topic":"a","state":"sideways"}', None, None, "reject"),
    ("state-upper", b'{"v":1,"topic":"a","state":"DOWN"}', None, None, "reject"),
    ("state-padded", b'{"v":1,"topic":"a","state":"down "}', None, None, "reject"),
    ("state-empty", b'{"v":1,"topic":"a","state":""}', None, None, "reject"),
    ("state-true", b'{"v":1,"topic":"a","state":true}', None, None, "reject"),
    ("state-int", b'{"v":1,"topic":"a","state":0}', None, None, "reject"),
    ("state-lone-surrogate", b'{"v":1,"topic":"a","state":"\\ud800"}', None, None, "reject"),
    ("state-bad-before-reason", b'{"v":1,"topic":"a","state":1,"reason":""}', None, None, "reject"),
    ("seq-bad-before-state", b'{"v":1,"topic":"a","seq":-1,"state":"x"}', None, None, "reject"),
    ("signed-down", resign(b'{"reason":"db","state":"down","topic":"a","v":1}'), KEY, None, "beat"),
    (
        "signed-down-tampered",
        resign(b'{"reason":"db","state":"down","topic":"a","v":1}').replace(b'"db"', b'"dc"'),
        KEY,
        None,
        "reject",
    ),
    (
        "signed-up-made-down",
        resign(b'{"topic":"a","v":1}').replace(b'{"topic"', b'{"state":"down","topic"'),
        KEY,
        None,
        "reject",
    ),
    (
        "unsigned-down-keyed",
        b'{"reason":"x","state":"down","topic":"a","v":1}',
        KEY,
        None,
        "reject",
    ),
    (
        "signed-down-unsorted",
        resign(b'{"v":1,"topic":"a","state":"down","reason":"x"}'),
        KEY,
        None,
        "beat",
    ),
    # -- deferred: only Python can tell ------------------------------------------------------
    ("lone-surrogate-reason", b'{"v":1,"topic":"a","reason":"\\udc00x"}', None, None, "defer"),
    ("huge-int-seq", b'{"v":1,"topic":"a","seq":' + b"9" * 5000 + b"}", None, None, "defer"),
    ("huge-int-payload", b'{"v":1,"topic":"a","p":' + b"1" * 700 + b"}", None, None, "defer"),
    (
        "deep-nesting",
        b'{"v":1,"topic":"a","payload":' + b"[" * 3000 + b"]" * 3000 + b"}",
        None,
        None,
        "defer",
    ),
    ("escaped-key", b'{"\\u0076":1,"topic":"a"}', None, None, "defer"),
    ("escaped-topic-valid", b'{"v":1,"topic":"\\u0061"}', None, None, "defer"),
    ("lone-surrogate-boot", b'{"v":1,"topic":"a","boot":"\\ud800"}', None, None, "defer"),
    ("signed-spaces", resign(b'{"v": 1, "topic": "a"}'), KEY, None, "beat"),
    ("signed-unsorted", resign(b'{"v":1,"topic":"a"}'), KEY, None, "beat"),
    ("signed-float-form", resign(b'{"period":1.50,"topic":"a","v":1}'), KEY, None, "beat"),
    ("signed-float-exp", resign(b'{"period":1E0,"topic":"a","v":1}'), KEY, None, "beat"),
    ("signed-escape-ascii", resign(b'{"p":"\\u0061","topic":"a","v":1}'), KEY, None, "beat"),
    ("signed-escape-slash", resign(b'{"p":"\\/","topic":"a","v":1}'), KEY, None, "beat"),
    ("signed-upper-u", resign(b'{"p":"\\u00E9","topic":"a","v":1}'), KEY, None, "beat"),
    ("signed-raw-non-ascii", resign('{"p":"é","topic":"a","v":1}'.encode()), KEY, None, "beat"),
    ("signed-minus-zero-int", resign(b'{"p":-0,"topic":"a","v":1}'), KEY, None, "beat"),
    ("signed-dup-key", resign(b'{"topic":"b","topic":"a","v":1}'), KEY, None, "beat"),
    ("signed-two-sigs", b'{"sig":"' + b"0" * 64 + b'",' + _GOOD[1:], KEY, None, "beat"),
    (
        "signed-canonical-by-hand",
        resign(b'{"p":{"a":1,"b":[true,null,1.5]},"topic":"a","v":1}'),
        KEY,
        None,
        "beat",
    ),
    (
        "signed-escapes-canonical",
        resign(b'{"p":"\\u00e9\\n\\"\\\\\\u001f\\u007f","topic":"a","v":1}'),
        KEY,
        None,
        "beat",
    ),
]


@pytest.mark.parametrize(
    ("body", "key", "destination", "expected"),
    [v[1:] for v in VECTORS],
    ids=[v[0] for v in VECTORS],
)
def test_vector(body: bytes, key: bytes | None, destination: str | None, expected: str) -> None:
    got = check(body, key, destination)
    assert got == expected, f"decided {got}, expected {expected}"


def test_vector_ids_are_unique() -> None:
    ids = [v[0] for v in VECTORS]
    assert len(ids) == len(set(ids))


def test_max_size_is_the_byte_size() -> None:
    body = b'{"v":1,"topic":"svc.a"}'
    assert check(body, max_size=len(body)) == "beat"
    assert check(body, max_size=len(body) - 1) == "reject"
    # 10 characters but 20 bytes: the limit is on bytes
    assert check("é".encode() * 10, max_size=16) == "reject"


def test_every_field_combination_signed_and_unsigned_decodes_natively() -> None:
    seqs = [None, 0, 7, MAX_SEQ]
    boots = [None, "b", "3f2c" * 8, "x" * 256, 'é😀\n"\\']
    sents = [
        None,
        0.0,
        -0.0,
        1718000000.25,
        1e-05,
        0.0001,
        1.5e16,
        1e16,
        5e-324,
        1.7976931348623157e308,
    ]
    periods = [None, 1.0, 0.5, 1e-300, 60.0, 1e22]
    payloads = [None, {"load": 0.3, "tags": ["a", "é"], "n": None, "ok": True, "big": 2**70}]
    n = 0
    for seq, boot, sent, period, payload in itertools.product(
        seqs, boots, sents, periods, payloads
    ):
        beat = Beat(
            "svc.a-1:x", seq=seq, boot_id=boot, sent_at=sent, period=period, payload=payload
        )
        for codec, key in ((_PLAIN, None), (_SIGNED, KEY)):
            assert check(codec.encode(beat), key, "svc.a-1:x") == "beat"
            n += 1
    assert n == 2 * 4 * 5 * 10 * 6 * 2


def test_states_and_reasons_signed_and_unsigned_decode_natively() -> None:
    reasons = [None, "x", "r" * 256, 'é😀\n"\\', "tcp 127.0.0.1:1: connection refused"]
    for state, reason in itertools.product(("up", "down"), reasons):
        beat = Beat(
            "svc.a", seq=3, boot_id="b", sent_at=1.5, period=2.0, state=state, reason=reason
        )
        for codec, key in ((_PLAIN, None), (_SIGNED, KEY)):
            body = codec.encode(beat)
            assert (b'"state":"down"' in body) == (state == "down"), body  # up is left out
            assert check(body, key, "svc.a") == "beat"
            assert codec.decode(body) == beat


# -- generated beats ----------------------------------------------------------------------

_topics = st.from_regex(r"[A-Za-z0-9_:\-]{1,12}(\.[A-Za-z0-9_:\-]{1,12}){0,3}", fullmatch=True)
_json_leaf = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**200), max_value=2**200)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=12)
)
_payloads = st.recursive(
    _json_leaf,
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=6), inner, max_size=4)
    ),
    max_leaves=12,
)
_positive = st.floats(min_value=5e-324, allow_nan=False, allow_infinity=False)
_beats = st.builds(
    Beat,
    topic=_topics,
    seq=st.none() | st.integers(min_value=0, max_value=MAX_SEQ),
    boot_id=st.none() | st.text(min_size=1, max_size=256),
    sent_at=st.none() | st.floats(allow_nan=False, allow_infinity=False),
    period=st.none() | _positive,
    payload=st.none() | _payloads,
    state=st.sampled_from(("up", "down")),
    reason=st.none() | st.text(min_size=1, max_size=256),
)


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_beats, st.booleans())
def test_encoded_beats_decode_natively_never_defer(beat: Beat, with_key: bool) -> None:
    key = KEY if with_key else None
    body = BeatCodec(key=key).encode(beat)
    assert check(body, key, beat.topic) == "beat"
    legacy = Beat(beat.topic, legacy=True)
    assert check(_PLAIN.encode(legacy), None, beat.topic) == "beat"


def _mutate(rng: random.Random, body: bytes) -> bytes:
    b = bytearray(body)
    for _ in range(rng.randrange(1, 4)):
        op, at = rng.randrange(4), rng.randrange(len(b) + 1)
        if op == 0 and at < len(b):
            b[at] = rng.randrange(256)
        elif op == 1:
            b[at:at] = bytes(
                rng.choice(b'{}[]",:\\ 0123456789.eE-+tfnu\x00\x80')
                for _ in range(rng.randrange(1, 4))
            )
        elif op == 2:
            del b[at : at + rng.randrange(1, 6)]
        elif at < len(b):
            b[at] = ord(rng.choice('"{}0a\\'))
    return bytes(b)


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_beats, st.booleans(), st.integers(min_value=0, max_value=2**32))
def test_mutated_beats_keep_the_contract(beat: Beat, with_key: bool, seed: int) -> None:
    key = KEY if with_key else None
    body = _mutate(random.Random(seed), BeatCodec(key=key).encode(beat))
    for k in (key, OTHER, None):
        check(body, k, beat.topic)
        check(body, k, None)


def _dumps_any_form(rng: random.Random, obj: Any) -> bytes:
    """``obj`` as JSON in one of the many forms json.dumps writes (spaces, indents, key order,
    raw non-ASCII)."""
    text = json.dumps(
        obj,
        sort_keys=rng.random() < 0.3,
        ensure_ascii=rng.random() < 0.5,
        indent=rng.choice([None, None, 0, 2, "\t"]),
        separators=rng.choice([None, (",", ":"), (", ", ": "), (" ,", " : ")]),
    )
    return text.encode()


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_beats, st.integers(min_value=0, max_value=2**32))
def test_signed_beats_in_any_json_form_decide_natively(beat: Beat, seed: int) -> None:
    """A beat signed correctly (or not) but written in another form than heartwire's: the
    native decoder rebuilds Python's canonical text and decides, never defers."""
    rng = random.Random(seed)
    obj = json.loads(_SIGNED.encode(beat))
    if rng.random() < 0.3:
        obj["sig"] = obj["sig"].upper() if rng.random() < 0.5 else "0" * 64
    items = list(obj.items())
    rng.shuffle(items)
    body = _dumps_any_form(rng, dict(items))
    assert check(body, KEY, beat.topic) in ("beat", "reject")


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=300))
def test_arbitrary_bytes_keep_the_contract(body: bytes) -> None:
    check(body)
    check(body, KEY)


def test_fuzz_corpus_keeps_the_contract_and_rarely_defers() -> None:
    outcomes: dict[str, int] = {"beat": 0, "reject": 0, "defer": 0}
    for message in mutated_frames(random.Random(15), 3000):
        body = message.body if isinstance(message.body, bytes) else str(message.body).encode()
        dest = message.destination if isinstance(message.destination, str) else None
        for key in (None, KEY):
            outcomes[check(body, key, dest)] += 1
    print(f"fuzz corpus outcomes: {outcomes}")
    assert outcomes["beat"] > 0 and outcomes["reject"] > 0
    # the corpus holds a few deliberately odd bodies (deep nesting, huge numbers): a few percent
    assert outcomes["defer"] < 0.05 * sum(outcomes.values()), outcomes


def test_deferral_count_is_reported(capsys: pytest.CaptureFixture[str]) -> None:
    deferred = [v[0] for v in VECTORS if v[4] == "defer"]
    with capsys.disabled():
        print(f"\nnative decode vectors: {len(VECTORS)}, deferred: {len(deferred)}: {deferred}")
    assert len(deferred) < len(VECTORS) // 4
