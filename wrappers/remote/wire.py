"""The remote env's wire format: framed, versioned messages with raw numpy payloads.

Every message, on the TCP control channel and in a UDP datagram alike, is one frame::

    header (40 bytes, network byte order)
        magic      4s   b"FGRE"
        version    u8   WIRE_VERSION
        type       u8   a MessageType
        flags      u16  bit 0: an HMAC-SHA256 tag follows the payload; other bits 0
        session    u32  the session the message belongs to (0 before one exists)
        seq        u64  tick index of an observation or action, else a request number
        t_send_ns  i64  when the sender produced the message (wall clock, ns)
        t_wire_ns  i64  when it went on the wire (after any profile hold)
        length     u32  payload bytes
    payload (length bytes)
        meta_len   u32, then a UTF-8 JSON object of plain data (numbers, strings, lists)
        n_arrays   u8, then per array: dtype code u8, ndim u8, ndim x u32 dims,
                   the C-order little-endian bytes
    tag (32 bytes, only with flag bit 0): HMAC-SHA256(secret, header + payload)

Nothing on the wire is executable: the JSON part holds data only and arrays are
rebuilt from a whitelist of dtypes, so a decoder never runs code of the sender's
choosing. :class:`WireCodec` rejects (and counts, by reason) frames that are
oversized, truncated, of another version, malformed or not authenticated, raising
:class:`fleetgym.errors.ProtocolError`.

Example:
    >>> import numpy as np
    >>> codec = WireCodec(secret=b"k" * 16)
    >>> buf = codec.encode(MessageType.OBS, 7, 3, {"r": 1.0}, [np.arange(4, dtype=np.float32)])
    >>> frame = codec.decode(buf)
    >>> frame.type.name, frame.session, frame.seq, frame.meta, frame.arrays[0].tolist()
    ('OBS', 7, 3, {'r': 1.0}, [0.0, 1.0, 2.0, 3.0])
"""

from __future__ import annotations

import enum
import hashlib
import hmac
import json
import math
import socket
import struct
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from fleetgym.errors import ProtocolError

__all__ = [
    "DATAGRAM_LIMIT",
    "HEADER",
    "MAX_PAYLOAD",
    "REJECT_REASONS",
    "WIRE_VERSION",
    "Frame",
    "MessageType",
    "WireCodec",
    "plain_info",
]

MAGIC = b"FGRE"
WIRE_VERSION = 1
HEADER = struct.Struct("!4sBBHIQqqI")
TAG_BYTES = 32
FLAG_AUTH = 0x0001
#: Largest payload of a TCP frame (a space description with image bounds fits).
MAX_PAYLOAD = 16 * 1024 * 1024
#: Largest datagram: the UDP maximum less IP and UDP headers.
DATAGRAM_LIMIT = 65_507
MAX_META = 1024 * 1024
#: Most bytes of an oversized frame a stream reader reads past
#: (:meth:`WireCodec.read_frame_or_skip`).
MAX_SKIP = 4 * MAX_PAYLOAD
MAX_ARRAYS = 16
MAX_NDIM = 8
#: Reasons a frame is rejected (the keys of :attr:`WireCodec.rejected`).
REJECT_REASONS = ("oversized", "truncated", "version", "malformed", "unauthenticated")

_DTYPES: tuple[np.dtype[Any], ...] = tuple(
    np.dtype(name).newbyteorder("<")
    for name in (
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
    )
)
_DTYPE_CODE = {dt.str.lstrip("<|="): code for code, dt in enumerate(_DTYPES)}
_U32 = struct.Struct("!I")
_ARRAY_HEAD = struct.Struct("!BB")


class MessageType(enum.IntEnum):
    """What a frame carries (control messages on TCP, OBS/ACTION/PING on UDP or TCP).

    Args:
        value: The header's type code (1-13): ``MessageType(8)`` is ``MessageType.OBS``;
            a code that is no member raises :class:`ValueError`.
    """

    HELLO = 1  # client -> server: open a session (meta: udp_port, transport)
    WELCOME = 2  # server -> client: session id, spaces, control period, profile
    RESET = 3  # client -> server: env seed, network seed
    RESET_DONE = 4  # server -> client: first observation, info
    TICK = 5  # client -> server: the env's deadline for tick seq
    STEP_DONE = 6  # server -> client: reward, terminated, truncated, true obs of tick seq
    ACTION = 7  # client -> server (datagram): the action sent at tick seq
    OBS = 8  # server -> client (datagram): the observation emitted at tick seq
    CLOSE = 9  # client -> server: end the session
    BYE = 10  # server -> client: session closed
    ERROR = 11  # either way: a request failed (meta: message)
    PING = 12  # either way: echo request (round-trip measurement)
    PONG = 13  # the echo


@dataclass
class Frame:
    """One decoded message."""

    type: MessageType
    session: int
    seq: int
    t_send_ns: int
    t_wire_ns: int
    meta: dict[str, Any] = field(default_factory=dict)
    arrays: list[np.ndarray] = field(default_factory=list)
    t_recv_ns: int = 0


def _finite_json(value: str) -> Any:
    raise ValueError(f"non-finite number {value}")


class WireCodec:
    """Encodes and decodes frames, authenticating them when it holds a secret.

    With a secret every frame sent carries an HMAC-SHA256 tag and every frame received
    must carry a valid one; without a secret a frame with a tag is rejected too (it
    cannot be checked). Rejections raise :class:`ProtocolError` and are counted in
    :attr:`rejected` by reason (thread-safe).

    Args:
        secret: Shared secret (at least 16 bytes), or None for no authentication.
        max_payload: Largest payload accepted or produced, in bytes.

    Raises:
        TypeError, ValueError: For a bad secret or limit.
    """

    def __init__(self, secret: bytes | None = None, max_payload: int = MAX_PAYLOAD) -> None:
        if secret is not None:
            if not isinstance(secret, (bytes, bytearray)):
                raise TypeError(f"secret: expected bytes or None, actual {type(secret).__name__}")
            if len(secret) < 16:
                raise ValueError(f"secret: expected at least 16 bytes, actual {len(secret)}")
            secret = bytes(secret)
        if not isinstance(max_payload, int) or not 64 <= max_payload <= MAX_PAYLOAD:
            raise ValueError(
                f"max_payload: expected an int in [64, {MAX_PAYLOAD}], actual {max_payload!r}"
            )
        self.secret = secret
        self.max_payload = max_payload
        self.rejected: dict[str, int] = dict.fromkeys(REJECT_REASONS, 0)
        self._lock = threading.Lock()

    # -- encoding -----------------------------------------------------------------------
    def encode(
        self,
        type: MessageType,
        session: int,
        seq: int,
        meta: dict[str, Any] | None = None,
        arrays: Sequence[np.ndarray] = (),
        *,
        t_send_ns: int | None = None,
        t_wire_ns: int | None = None,
    ) -> bytes:
        """One frame as bytes (``t_send_ns`` and ``t_wire_ns`` default to now).

        Args:
            type: What the frame carries.
            session: The session id, an unsigned 32-bit int (0 before a session exists).
            seq: The tick index of an observation or action, else a request number (an
                unsigned 64-bit int); a reply carries its request's ``seq``.
            meta: Plain JSON data (a dict of numbers, strings, lists, ...; no NaN or
                infinity); ``None`` or empty sends ``{}``.
            arrays: Up to 16 numpy arrays (bool or numeric dtypes, at most 8 dimensions),
                sent as C-order little-endian bytes.
            t_send_ns: When the sender produced the message (wall clock, ns); ``None``: now.
            t_wire_ns: When it goes on the wire, after any profile hold (wall clock, ns);
                ``None``: now.

        Raises:
            ProtocolError: If the payload would exceed ``max_payload`` or an array has a
                dtype outside the whitelist.
        """
        now = time.time_ns()
        payload = self._payload(meta or {}, arrays)
        flags = FLAG_AUTH if self.secret is not None else 0
        header = HEADER.pack(
            MAGIC,
            WIRE_VERSION,
            int(type),
            flags,
            session,
            seq,
            now if t_send_ns is None else t_send_ns,
            now if t_wire_ns is None else t_wire_ns,
            len(payload),
        )
        if self.secret is None:
            return header + payload
        tag = hmac.new(self.secret, header + payload, hashlib.sha256).digest()
        return header + payload + tag

    def _payload(self, meta: dict[str, Any], arrays: Sequence[np.ndarray]) -> bytes:
        try:
            meta_bytes = json.dumps(meta, allow_nan=False, separators=(",", ":")).encode()
        except (TypeError, ValueError) as exc:
            raise ProtocolError(f"meta: expected plain finite JSON data, actual {exc}") from exc
        if len(arrays) > MAX_ARRAYS:
            raise ProtocolError(f"arrays: expected at most {MAX_ARRAYS}, actual {len(arrays)}")
        parts = [_U32.pack(len(meta_bytes)), meta_bytes, bytes([len(arrays)])]
        for arr in arrays:
            a = np.asarray(arr)
            code = _DTYPE_CODE.get(a.dtype.str.lstrip("<>|="))
            if code is None or a.ndim > MAX_NDIM:
                raise ProtocolError(
                    f"array: expected a numeric or bool dtype and ndim <= {MAX_NDIM}, "
                    f"actual {a.dtype} with ndim {a.ndim}"
                )
            parts.append(_ARRAY_HEAD.pack(code, a.ndim))
            parts.append(struct.pack(f"!{a.ndim}I", *a.shape))
            parts.append(np.ascontiguousarray(a, dtype=_DTYPES[code]).tobytes())
        payload = b"".join(parts)
        if len(payload) > self.max_payload:
            raise ProtocolError(
                f"payload: expected at most {self.max_payload} bytes, actual {len(payload)}"
            )
        return payload

    # -- decoding -----------------------------------------------------------------------
    def _reject(self, reason: str, message: str) -> ProtocolError:
        with self._lock:
            self.rejected[reason] += 1
        return ProtocolError(f"{reason} frame: {message}")

    def parse_header(self, head: bytes) -> tuple[tuple[Any, ...], int]:
        """Check a 40-byte header; returns its fields and the bytes still to read.

        Args:
            head: The frame's first 40 bytes (more are ignored; fewer is a ``truncated``
                rejection).

        Returns:
            The unpacked header fields (magic, version, type, flags, session, seq,
            t_send_ns, t_wire_ns, length), and how many bytes (payload plus tag) follow.

        Raises:
            ProtocolError: For a short header, bad magic, other version, unknown type,
                unknown flags, a payload over the limit or a missing/unexpected tag.
        """
        if len(head) < HEADER.size:
            raise self._reject(
                "truncated", f"expected a {HEADER.size}-byte header, actual {len(head)} bytes"
            )
        fields = HEADER.unpack_from(head)
        magic, version, mtype, flags, _session, _seq, _ts, _tw, length = fields
        if magic != MAGIC:
            raise self._reject("malformed", f"expected magic {MAGIC!r}, actual {magic!r}")
        if version != WIRE_VERSION:
            raise self._reject("version", f"expected version {WIRE_VERSION}, actual {version}")
        if mtype not in MessageType._value2member_map_:
            raise self._reject("malformed", f"expected a message type, actual {mtype}")
        if flags & ~FLAG_AUTH:
            raise self._reject("malformed", f"expected flags in {{0, 1}}, actual {flags}")
        if length > self.max_payload:
            raise self._reject(
                "oversized", f"expected a payload <= {self.max_payload} bytes, actual {length}"
            )
        has_tag = bool(flags & FLAG_AUTH)
        if self.secret is not None and not has_tag:
            raise self._reject("unauthenticated", "expected an HMAC tag, actual none")
        if self.secret is None and has_tag:
            raise self._reject("unauthenticated", "a tagged frame but no secret to check it")
        return fields, length + (TAG_BYTES if has_tag else 0)

    def decode(self, buf: bytes, t_recv_ns: int | None = None) -> Frame:
        """One frame from exactly its bytes (a datagram, or header + rest from a stream).

        Args:
            buf: The whole frame: header, payload and tag if any; missing or trailing bytes
                reject it.
            t_recv_ns: The arrival time to store in the frame's ``t_recv_ns`` (wall clock,
                ns); ``None``: now, when decoding.

        Raises:
            ProtocolError: If the frame is rejected (the reason is counted).
        """
        fields, rest = self.parse_header(buf)
        if len(buf) < HEADER.size + rest:
            raise self._reject(
                "truncated", f"expected {HEADER.size + rest} bytes, actual {len(buf)}"
            )
        if len(buf) > HEADER.size + rest:
            raise self._reject(
                "malformed", f"expected {HEADER.size + rest} bytes, actual {len(buf)} (trailing)"
            )
        _magic, _version, mtype, flags, session, seq, t_send, t_wire, length = fields
        end = HEADER.size + length
        if flags & FLAG_AUTH:
            assert self.secret is not None  # parse_header checked
            want = hmac.new(self.secret, buf[:end], hashlib.sha256).digest()
            if not hmac.compare_digest(want, buf[end : end + TAG_BYTES]):
                raise self._reject("unauthenticated", "the HMAC tag does not match")
        try:
            meta, arrays = self._parse_payload(memoryview(buf)[HEADER.size : end])
        except ProtocolError:
            raise
        except (ValueError, TypeError, OverflowError, MemoryError, struct.error) as exc:
            # The checks above should leave nothing for numpy to refuse; if a frame still
            # gets past them, it is malformed, not a crash of whoever reads it.
            raise self._reject("malformed", f"{type(exc).__name__}: {exc}") from None
        return Frame(
            MessageType(mtype),
            session,
            seq,
            t_send,
            t_wire,
            meta,
            arrays,
            time.time_ns() if t_recv_ns is None else t_recv_ns,
        )

    def _parse_payload(self, view: memoryview) -> tuple[dict[str, Any], list[np.ndarray]]:
        n = len(view)
        if n < 5:
            raise self._reject("truncated", f"expected a payload of >= 5 bytes, actual {n}")
        (meta_len,) = _U32.unpack_from(view, 0)
        if meta_len > MAX_META or 4 + meta_len + 1 > n:
            raise self._reject(
                "malformed", f"expected meta_len <= {min(MAX_META, n - 5)}, actual {meta_len}"
            )
        try:
            meta = json.loads(bytes(view[4 : 4 + meta_len]), parse_constant=_finite_json)
        except (ValueError, UnicodeDecodeError, RecursionError) as exc:
            raise self._reject("malformed", f"meta is not JSON: {exc}") from None
        if not isinstance(meta, dict):
            raise self._reject("malformed", f"expected a JSON object, actual {type(meta).__name__}")
        pos = 4 + meta_len
        count = view[pos]
        pos += 1
        if count > MAX_ARRAYS:
            raise self._reject("malformed", f"expected <= {MAX_ARRAYS} arrays, actual {count}")
        arrays = []
        for _ in range(count):
            if pos + 2 > n:
                raise self._reject("truncated", "array header cut short")
            code, ndim = _ARRAY_HEAD.unpack_from(view, pos)
            pos += 2
            if code >= len(_DTYPES) or ndim > MAX_NDIM:
                raise self._reject(
                    "malformed",
                    f"expected dtype code < {len(_DTYPES)} and ndim <= {MAX_NDIM}, "
                    f"actual {code} and {ndim}",
                )
            if pos + 4 * ndim > n:
                raise self._reject("truncated", "array shape cut short")
            shape = struct.unpack_from(f"!{ndim}I", view, pos)
            pos += 4 * ndim
            dtype = _DTYPES[code]
            nbytes = dtype.itemsize * math.prod(shape)  # Python ints: no overflow
            if pos + nbytes > n:
                raise self._reject(
                    "truncated", f"array of shape {shape} needs {nbytes} bytes, {n - pos} left"
                )
            # numpy refuses a shape whose non-zero dimensions overflow its index type even
            # for an empty array: (0, 2**32-1, 2**32-1) needs 0 bytes but cannot be built.
            if not nbytes and math.prod(d for d in shape if d) * dtype.itemsize > MAX_PAYLOAD:
                raise self._reject(
                    "malformed", f"empty array of shape {shape}: expected dimensions numpy holds"
                )
            arr = np.frombuffer(view[pos : pos + nbytes], dtype=dtype).reshape(shape)
            pos += nbytes
            arr = arr.astype(dtype.newbyteorder("="), copy=True)
            if dtype.kind == "b" and arr.size and arr.view(np.uint8).max() > 1:
                raise self._reject("malformed", "bool array with a byte other than 0 or 1")
            arrays.append(arr)
        if pos != n:
            raise self._reject("malformed", f"{n - pos} bytes after the last array")
        return meta, arrays

    # -- streams ------------------------------------------------------------------------
    def read_frame(self, sock: socket.socket) -> Frame:
        """Read one frame from a stream socket (blocks up to the socket's timeout).

        Args:
            sock: A connected stream (TCP) socket, positioned at a frame's start; the frame
                gets the time it was decoded as its ``t_recv_ns``.

        Raises:
            ProtocolError: For a rejected frame (the stream is then out of sync: close it).
            ConnectionError: If the peer closed the connection.
            TimeoutError: If the socket's timeout passed.
        """
        head = _read_exact(sock, HEADER.size)
        _fields, rest = self.parse_header(head)
        body = _read_exact(sock, rest)
        return self.decode(head + body)

    def read_frame_or_skip(self, sock: socket.socket, skip_limit: int = MAX_SKIP) -> Frame | None:
        """:meth:`read_frame`, except that an oversized frame whose header is otherwise valid
        is read past and dropped (None; counted in :attr:`rejected` as ``oversized``), up to
        ``skip_limit`` bytes, so the stream stays in sync and the connection serves on.

        Args:
            sock: A connected stream (TCP) socket, positioned at a frame's start.
            skip_limit: The most bytes (payload plus tag) of one oversized frame read past
                and dropped; default ``MAX_SKIP`` (64 MiB). A larger one raises.

        Raises:
            ProtocolError: For any other rejected frame, or one over ``skip_limit``.
            ConnectionError, TimeoutError: As :meth:`read_frame`.
        """
        head = _read_exact(sock, HEADER.size)
        try:
            _fields, rest = self.parse_header(head)
        except ProtocolError as exc:
            fields = HEADER.unpack_from(head) if len(head) == HEADER.size else None
            if fields is None or not str(exc).startswith("oversized"):
                raise
            skip = fields[-1] + (TAG_BYTES if fields[3] & FLAG_AUTH else 0)
            if skip > skip_limit:
                raise
            while skip:
                chunk = sock.recv(min(skip, 1 << 20))
                if not chunk:
                    raise ConnectionError("the peer closed the connection") from None
                skip -= len(chunk)
            return None
        return self.decode(head + _read_exact(sock, rest))


def _read_exact(sock: socket.socket, n: int) -> bytes:
    chunks = []
    left = n
    while left:
        chunk = sock.recv(min(left, 1 << 20))
        if not chunk:
            raise ConnectionError("the peer closed the connection")
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)


def plain_info(info: dict[str, Any]) -> dict[str, Any]:
    """The entries of an env's ``info`` that are plain JSON scalars (the rest stay home)."""
    out: dict[str, Any] = {}
    for key, value in info.items():
        if isinstance(value, (bool, int, str)) or value is None:
            out[str(key)] = value
        elif isinstance(value, float) and np.isfinite(value):
            out[str(key)] = value
        elif isinstance(value, np.generic) and value.shape == () and value.dtype.kind in "biuf":
            item = value.item()
            if not isinstance(item, float) or np.isfinite(item):
                out[str(key)] = item
    return out
