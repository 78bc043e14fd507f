"""The wire format: round trips, every rejection reason, HMAC, and a fuzzed decoder."""

from __future__ import annotations

import struct

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fleetgym.errors import ProtocolError
from fleetgym.wrappers.remote.wire import HEADER, MAX_ARRAYS, MessageType, WireCodec

SECRET = b"0123456789abcdef"


def _frame(codec: WireCodec, **meta: object) -> bytes:
    return codec.encode(
        MessageType.OBS, 3, 9, dict(meta), [np.arange(6, dtype=np.float32).reshape(2, 3)]
    )


@pytest.mark.parametrize(
    "dtype",
    [
        "bool",
        "int8",
        "uint8",
        "int16",
        "uint16",
        "int32",
        "uint32",
        "int64",
        "uint64",
        "float16",
        "float32",
        "float64",
    ],
)
def test_arrays_round_trip_every_dtype(dtype):
    codec = WireCodec()
    a = (np.arange(12) % 2).astype(dtype).reshape(3, 4)
    frame = codec.decode(codec.encode(MessageType.ACTION, 1, 2, {}, [a, a[0]]))
    assert [x.dtype for x in frame.arrays] == [a.dtype, a.dtype]
    np.testing.assert_array_equal(frame.arrays[0], a)
    assert frame.arrays[1].shape == (4,)


def test_header_fields_and_timestamps():
    codec = WireCodec()
    buf = codec.encode(MessageType.TICK, 7, 2**40, {"x": [1, "a", None]}, t_send_ns=5, t_wire_ns=6)
    f = codec.decode(buf)
    assert (f.type, f.session, f.seq, f.t_send_ns, f.t_wire_ns, f.meta) == (
        MessageType.TICK,
        7,
        2**40,
        5,
        6,
        {"x": [1, "a", None]},
    )
    assert f.arrays == []


def test_big_endian_and_zero_d_arrays():
    codec = WireCodec()
    a = np.arange(3, dtype=">f8")
    f = codec.decode(codec.encode(MessageType.OBS, 0, 0, {}, [a, np.asarray(5, np.int64)]))
    assert f.arrays[0].tolist() == [0.0, 1.0, 2.0] and f.arrays[1].shape == ()


@pytest.mark.parametrize(
    ("mutate", "reason"),
    [
        (lambda b: b[:30], "truncated"),
        (lambda b: b[:-3], "truncated"),
        (lambda b: b + b"x", "malformed"),
        (lambda b: b"XXXX" + b[4:], "malformed"),
        (lambda b: b[:4] + bytes([99]) + b[5:], "version"),
        (lambda b: b[:5] + bytes([200]) + b[6:], "malformed"),
        (lambda b: b[:6] + struct.pack("!H", 4) + b[8:], "malformed"),
        (lambda b: b[:36] + struct.pack("!I", 2**31) + b[40:], "oversized"),
    ],
)
def test_bad_frames_are_rejected_and_counted(mutate, reason):
    codec = WireCodec()
    with pytest.raises(ProtocolError, match=reason):
        codec.decode(mutate(_frame(codec)))
    assert codec.rejected[reason] == 1
    assert sum(codec.rejected.values()) == 1


def test_malformed_payloads():
    codec = WireCodec()
    head = _frame(codec)[: HEADER.size]

    def with_payload(p: bytes) -> bytes:
        return head[:36] + struct.pack("!I", len(p)) + p

    for payload, match in [
        (struct.pack("!I", 3) + b"[1]" + b"\x00", "JSON object"),
        (struct.pack("!I", 3) + b"{x}" + b"\x00", "not JSON"),
        (struct.pack("!I", 3) + b"NaN" + b"\x00", "not JSON"),
        (struct.pack("!I", 2) + b"{}" + bytes([MAX_ARRAYS + 1]), "arrays"),
        (
            struct.pack("!I", 2) + b"{}" + b"\x01" + bytes([77, 1]) + struct.pack("!I", 1),
            "dtype code",
        ),
        (
            struct.pack("!I", 2) + b"{}" + b"\x01" + bytes([10, 1]) + struct.pack("!I", 2**30),
            "needs",
        ),
        (
            struct.pack("!I", 2) + b"{}" + b"\x01" + bytes([0, 1]) + struct.pack("!I", 1) + b"\x07",
            "bool",
        ),
        (struct.pack("!I", 99) + b"{}", "meta_len"),
    ]:
        with pytest.raises(ProtocolError, match=match):
            codec.decode(with_payload(payload))


def test_encode_refuses_what_it_cannot_send():
    codec = WireCodec(max_payload=1024)
    with pytest.raises(ProtocolError, match="payload"):
        codec.encode(MessageType.OBS, 0, 0, {}, [np.zeros(1000)])
    with pytest.raises(ProtocolError, match="dtype"):
        codec.encode(MessageType.OBS, 0, 0, {}, [np.array(["a"])])
    with pytest.raises(ProtocolError, match="meta"):
        codec.encode(MessageType.OBS, 0, 0, {"f": float("nan")})
    with pytest.raises(ProtocolError, match="meta"):
        codec.encode(MessageType.OBS, 0, 0, {"f": object()})


def test_hmac_authentication():
    signer, other, plain = WireCodec(SECRET), WireCodec(b"another secret!!"), WireCodec()
    buf = _frame(signer, r=1)
    assert signer.decode(buf).meta == {"r": 1}
    with pytest.raises(ProtocolError, match="unauthenticated"):
        other.decode(buf)
    with pytest.raises(ProtocolError, match="unauthenticated"):
        signer.decode(_frame(plain))  # no tag
    with pytest.raises(ProtocolError, match="unauthenticated"):
        plain.decode(buf)  # a tag it cannot check
    tampered = bytearray(buf)
    tampered[HEADER.size + 10] ^= 1
    with pytest.raises(ProtocolError, match="unauthenticated"):
        signer.decode(bytes(tampered))
    assert signer.rejected["unauthenticated"] == 2


def test_bad_codec_arguments():
    with pytest.raises(ValueError, match="secret"):
        WireCodec(b"short")
    with pytest.raises(TypeError, match="secret"):
        WireCodec("a string secret!!")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="max_payload"):
        WireCodec(max_payload=1)


@settings(max_examples=150, deadline=None)
@given(st.binary(max_size=200))
def test_fuzz_random_bytes_only_raise_protocol_error(data):
    for codec in (WireCodec(), WireCodec(SECRET)):
        try:
            codec.decode(data)
        except ProtocolError:
            pass


@settings(max_examples=150, deadline=None)
@given(st.data())
def test_fuzz_mutated_frames(data):
    codec = WireCodec()
    buf = bytearray(_frame(codec, k=[1, 2]))
    for _ in range(data.draw(st.integers(1, 4))):
        i = data.draw(st.integers(0, len(buf) - 1))
        buf[i] = data.draw(st.integers(0, 255))
    cut = data.draw(st.integers(0, len(buf)))
    try:
        frame = codec.decode(bytes(buf[:cut]))
    except ProtocolError:
        return
    assert isinstance(frame.meta, dict)
    assert all(isinstance(a, np.ndarray) for a in frame.arrays)


@settings(max_examples=100, deadline=None)
@given(
    st.sampled_from(["uint8", "int32", "float32", "float64", "bool"]),
    st.lists(st.integers(0, 4), max_size=3),
    st.integers(0, 2**32 - 1),
)
def test_round_trip_property(dtype, shape, session):
    codec = WireCodec(SECRET)
    a = np.ones(shape, dtype=dtype)
    f = codec.decode(codec.encode(MessageType.OBS, session, 1, {}, [a]))
    assert (
        f.session == session and f.arrays[0].shape == tuple(shape) and f.arrays[0].dtype == a.dtype
    )


def _raw_frame(payload: bytes, *, mtype: int = int(MessageType.ACTION), session: int = 1) -> bytes:
    """A frame built by hand (header fields as given), for what an encoder never writes."""
    return HEADER.pack(b"FGRE", 1, mtype, 0, session, 0, 0, 0, len(payload)) + payload


def _array_payload(code: int, shape: tuple[int, ...], data: bytes = b"") -> bytes:
    head = bytes([code, len(shape)]) + struct.pack(f"!{len(shape)}I", *shape)
    return struct.pack("!I", 2) + b"{}" + b"\x01" + head + data


@pytest.mark.parametrize(
    "shape",
    [(0, 2**32 - 1, 2**32 - 1), (2**32 - 1, 0, 2**32 - 1, 2**32 - 1), (0,) * 7 + (2**32 - 1,)],
)
def test_absurd_shapes_of_empty_arrays_are_malformed(shape):
    """An empty array whose other dimensions overflow numpy: a counted rejection, not a crash."""
    codec = WireCodec()
    with pytest.raises(ProtocolError, match="malformed"):
        codec.decode(_raw_frame(_array_payload(10, shape)))
    assert codec.rejected["malformed"] == 1


@settings(max_examples=300, deadline=None)
@given(
    st.integers(0, 255),
    st.lists(st.sampled_from([0, 1, 2, 3, 255, 65536, 2**31, 2**32 - 1]), max_size=9),
    st.binary(max_size=64),
)
def test_any_array_header_only_raises_protocol_error(code, shape, data):
    """Every dtype code, rank and dimension a header can declare decodes or is rejected."""
    codec = WireCodec()
    try:
        frame = codec.decode(_raw_frame(_array_payload(code, tuple(shape), data)))
    except ProtocolError:
        return
    assert frame.arrays[0].shape == tuple(shape)
