"""Clients in other processes: shared-memory request slots, fixed-size control messages.

A :class:`RemoteClient` connects to the server's loopback socket
(:meth:`~fleetgym.agents.inference.InferenceServer.listen`). The server creates one
shared-memory segment per client with ``slots`` request slots (:class:`SlotLayout`: an
observation, its noise and every output of the model's spec per slot). Observations and
answers only ever travel through that segment; the socket carries

* one handshake each way: ``HELLO`` (magic, protocol, slots) and ``WELCOME`` (status and a
  length-prefixed JSON text: the segment's name and the model spec, at most
  :data:`MAX_JSON` bytes);
* then fixed-size binary messages (:mod:`struct`): the client's ``REQUEST(start, count)``
  ("slots ``start..start+count-1`` hold new requests") and ``BYE``; the server's
  ``ANSWER(start, count, version, batch)`` and ``ERROR(start, count, code, text)``.

Nothing is pickled. The server checks every message (magic, slot range, a slot already in
flight, an unknown kind) and answers a malformed one with an ``ERROR`` and a disconnect,
without affecting any other client. A client that disconnects, even killed mid-request,
is dropped: its queued requests are discarded, a batch in flight skips it, and its segment
is freed once no forward pass still reads it. The segment belongs to the server, which
unlinks it; a client only attaches.
"""

from __future__ import annotations

import json
import logging
import selectors
import socket
import struct
import sys
import threading
import time
from multiprocessing import shared_memory
from typing import Any

import numpy as np

from fleetgym.agents.inference.channels import (
    Channel,
    InferenceError,
    InferenceProtocolError,
    Request,
)
from fleetgym.agents.inference.model import ModelSpec
from fleetgym.validation import check_int

logger = logging.getLogger(__name__)

MAGIC = b"FGIS"
PROTOCOL = 1
HELLO = struct.Struct("<4sHI")  # magic, protocol, slots
WELCOME = struct.Struct("<4sHI")  # magic, status (0 ok, 1 refused), JSON length
CLIENT_MSG = struct.Struct("<BxxxII")  # kind, start, count
SERVER_HEAD = struct.Struct("<BxHIIqq")  # kind, code, start, count, version, batch
#: Every server message has this size (an ERROR's text fills the rest, UTF-8, padded).
SERVER_MSG_BYTES = 256
TEXT_BYTES = SERVER_MSG_BYTES - SERVER_HEAD.size
REQUEST, BYE = 1, 2
ANSWER, ERROR = 1, 2
#: ERROR codes: the request failed (the client goes on) / the connection is closed.
CODE_REQUEST, CODE_FATAL = 1, 2
MAX_JSON = 65536
#: Most slots of one remote client (its unread answers must fit a socket buffer).
MAX_REMOTE_SLOTS = 1024
#: Seconds a blocked send may take before the peer is dropped.
IO_TIMEOUT_S = 10.0
#: Seconds a new connection has to send its whole HELLO; the listener never waits for it.
HANDSHAKE_TIMEOUT_S = 5.0
#: Most connections still in their handshake at once; more are refused at accept.
MAX_PENDING_HANDSHAKES = 64


class _Handshake:
    """A connection accepted but not yet through its HELLO (read as it arrives)."""

    __slots__ = ("sock", "buffer", "deadline")

    def __init__(self, sock: socket.socket, deadline: float) -> None:
        self.sock = sock
        self.buffer = b""
        self.deadline = deadline


def _attach(name: str) -> shared_memory.SharedMemory:
    """Open the server's segment without registering it with this process's tracker
    (the server unlinks it; before Python 3.13 attaching registers it for unlinking)."""
    if sys.version_info >= (3, 13):
        return shared_memory.SharedMemory(name=name, track=False)  # type: ignore[call-arg]
    from multiprocessing import resource_tracker

    register = resource_tracker.register
    resource_tracker.register = lambda *args, **kwargs: None  # type: ignore[assignment]
    try:
        return shared_memory.SharedMemory(name=name)
    finally:
        resource_tracker.register = register  # type: ignore[assignment]


class SlotLayout:
    """Where each slot's arrays sit in a client's segment (one block per array).

    Args:
        spec: The served model's request layout.
        slots: Requests the client may have in flight.

    Example:
        >>> from fleetgym.agents.inference import ArraySpec, ModelSpec
        >>> spec = ModelSpec(ArraySpec((4,), "float32"), ArraySpec((1,), "float64"),
        ...                  (("value", ArraySpec((), "float32")),))
        >>> layout = SlotLayout(spec, slots=8)
        >>> layout.offsets, layout.size
        ({'obs': 0, 'noise': 128, 'value': 192}, 224)
    """

    def __init__(self, spec: ModelSpec, slots: int) -> None:
        self.spec = spec
        self.slots = check_int("slots", slots, 1, MAX_REMOTE_SLOTS)
        self.arrays = [("obs", spec.obs.shape, spec.obs.dtype)]
        self.arrays.append(("noise", spec.noise.shape, spec.noise.dtype))
        self.arrays += [(name, a.shape, a.dtype) for name, a in spec.outputs]
        self.offsets: dict[str, int] = {}
        offset = 0
        for name, shape, dtype in self.arrays:
            offset = (offset + 63) // 64 * 64  # every block aligned for any dtype
            self.offsets[name] = offset
            offset += slots * int(np.prod(shape, dtype=np.int64)) * np.dtype(dtype).itemsize
        self.size = max(offset, 1)

    def views(self, buf: Any) -> dict[str, np.ndarray]:
        """Numpy views of the blocks: ``obs``, ``noise`` and each output, ``(slots, ...)``."""
        return {
            name: np.ndarray((self.slots, *shape), np.dtype(dtype), buf, self.offsets[name])
            for name, shape, dtype in self.arrays
        }


def _recv_exact(sock: socket.socket, size: int) -> bytes:
    data = bytearray()
    while len(data) < size:
        chunk = sock.recv(size - len(data))
        if not chunk:
            raise ConnectionError("connection closed by the peer")
        data += chunk
    return bytes(data)


def _server_message(
    kind: int,
    start: int,
    count: int,
    version: int = 0,
    batch: int = 0,
    code: int = 0,
    text: str = "",
) -> bytes:
    head = SERVER_HEAD.pack(kind, code, start, count, version, batch)
    body = text.encode("utf-8", "replace")[:TEXT_BYTES]
    return head + body.ljust(TEXT_BYTES, b"\0")


def _runs(slots: list[int]) -> list[tuple[int, int]]:
    """Contiguous ``(start, count)`` runs of sorted slot numbers."""
    runs: list[tuple[int, int]] = []
    for slot in sorted(slots):
        if runs and runs[-1][0] + runs[-1][1] == slot:
            runs[-1] = (runs[-1][0], runs[-1][1] + 1)
        else:
            runs.append((slot, 1))
    return runs


# ---------------------------------------------------------------------------------------
# server side
# ---------------------------------------------------------------------------------------
class _RemoteChannel(Channel):
    """The server's side of one remote client: its socket, segment and busy slots."""

    def __init__(self, name: str, sock: socket.socket, layout: SlotLayout) -> None:
        super().__init__(name=name)
        self.sock = sock
        self.layout = layout
        self.segment: shared_memory.SharedMemory | None = shared_memory.SharedMemory(
            create=True, size=layout.size
        )
        self.views: dict[str, np.ndarray] | None = layout.views(self.segment.buf)
        self.busy = np.zeros(layout.slots, bool)
        self.buffer = b""
        self._send_lock = threading.Lock()

    def send(self, payload: bytes) -> None:
        with self._send_lock:
            self.sock.sendall(payload)

    def deliver(
        self,
        requests: list[Request],
        outputs: dict[str, np.ndarray],
        rows: list[int],
        version: int,
        batch: int,
    ) -> None:
        assert self.views is not None  # a released channel is never alive
        slots = [int(r.tag) for r in requests]
        for name, _ in self.layout.spec.outputs:
            self.views[name][slots] = outputs[name][rows]
        self.busy[slots] = False  # before the answer: the client may reuse them at once
        self.send(b"".join(_server_message(ANSWER, s, n, version, batch) for s, n in _runs(slots)))

    def reject(self, requests: list[Request], message: str) -> None:
        slots = [int(r.tag) for r in requests]
        self.busy[slots] = False
        try:
            self.send(
                b"".join(
                    _server_message(ERROR, s, n, code=CODE_REQUEST, text=message)
                    for s, n in _runs(slots)
                )
            )
        except OSError:  # the client is gone: nobody to tell
            pass

    def release(self) -> None:
        try:
            self.sock.close()
        except OSError:  # pragma: no cover - already closed
            pass
        self.views = None
        if self.segment is not None:
            segment, self.segment = self.segment, None
            segment.close()
            try:
                segment.unlink()
            except FileNotFoundError:  # pragma: no cover - already gone
                pass


class Listener:
    """The server's loopback socket and its I/O thread (started by ``server.listen()``).

    Args:
        server: The :class:`~fleetgym.agents.inference.InferenceServer` whose queue
            requests go to (typed loosely: the server module imports this one).
        host: Address to bind (``127.0.0.1`` by default: loopback only).
        port: Port (0: any free one).
    """

    def __init__(self, server: Any, host: str = "127.0.0.1", port: int = 0) -> None:
        self.server = server
        self._sock = socket.create_server((host, check_int("port", port, 0, 65535)))
        self.address: tuple[str, int] = self._sock.getsockname()[:2]
        self._selector = selectors.DefaultSelector()
        self._selector.register(self._sock, selectors.EVENT_READ, None)
        self._wake_r, self._wake_w = socket.socketpair()
        self._selector.register(self._wake_r, selectors.EVENT_READ, "wake")
        self._closing = False
        self._count = 0
        self._handshakes: dict[socket.socket, _Handshake] = {}
        self._thread = threading.Thread(target=self._loop, name="InferenceListener", daemon=True)
        self._thread.start()

    def close(self) -> None:
        """Stop accepting and reading; connected clients are dropped by the server."""
        self._closing = True
        try:
            self._wake_w.send(b"x")
        except OSError:  # pragma: no cover - already closed
            pass
        self._thread.join()
        for key in list(self._selector.get_map().values()):
            if isinstance(key.data, _RemoteChannel):
                self.server._unregister(key.data, "the inference server closed")
            elif isinstance(key.data, _Handshake):
                key.data.sock.close()
        self._selector.close()
        for sock in (self._sock, self._wake_r, self._wake_w):
            sock.close()

    def _loop(self) -> None:
        while not self._closing:
            timeout = None
            if self._handshakes:
                soonest = min(h.deadline for h in self._handshakes.values())
                timeout = max(0.0, soonest - time.monotonic())
            for key, _ in self._selector.select(timeout):
                if key.data is None:
                    self._accept()
                elif isinstance(key.data, _RemoteChannel):
                    self._read(key.data)
                elif isinstance(key.data, _Handshake):
                    self._read_hello(key.data)
            self._expire_handshakes()

    def _accept(self) -> None:
        """Take a new connection; its HELLO is read as it arrives, never waited for here."""
        try:
            sock, _ = self._sock.accept()
        except OSError:  # pragma: no cover - a connection reset before accept
            return
        if len(self._handshakes) >= MAX_PENDING_HANDSHAKES:
            self._refuse(
                sock,
                f"handshakes: expected at most {MAX_PENDING_HANDSHAKES} connections in their "
                "handshake at once, actual one more",
            )
            return
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        sock.setblocking(False)
        pending = _Handshake(sock, time.monotonic() + HANDSHAKE_TIMEOUT_S)
        self._handshakes[sock] = pending
        self._watch(sock, pending)

    def _watch(self, sock: socket.socket, data: Any) -> None:
        """Register ``sock`` with the selector, first forgetting the sockets that were closed
        while registered: the server releases a channel whose answer could not be delivered
        from its batching thread, and the kernel then gives the next connection the closed
        socket's descriptor, which the selector would still hold (a ``KeyError`` that ended
        this thread, and with it every new connection)."""
        for key in list(self._selector.get_map().values()):
            if isinstance(key.fileobj, socket.socket) and key.fileobj.fileno() == -1:
                self._selector.unregister(key.fileobj)
        self._selector.register(sock, selectors.EVENT_READ, data)

    def _expire_handshakes(self) -> None:
        now = time.monotonic()
        for pending in [h for h in self._handshakes.values() if h.deadline <= now]:
            self._end_handshake(pending)
            logger.debug("inference listener: a connection sent no whole HELLO in time")
            self._refuse(
                pending.sock,
                f"hello: expected {HELLO.size} bytes within {HANDSHAKE_TIMEOUT_S:g} s, "
                f"actual {len(pending.buffer)}",
            )

    def _end_handshake(self, pending: _Handshake) -> None:
        self._handshakes.pop(pending.sock, None)
        try:
            self._selector.unregister(pending.sock)
        except (KeyError, ValueError):  # pragma: no cover - already unregistered
            pass

    def _read_hello(self, pending: _Handshake) -> None:
        try:
            chunk = pending.sock.recv(HELLO.size - len(pending.buffer))
        except BlockingIOError:  # pragma: no cover - a spurious wake-up
            return
        except OSError:
            chunk = b""
        if not chunk:
            self._end_handshake(pending)
            pending.sock.close()
            return
        pending.buffer += chunk
        if len(pending.buffer) < HELLO.size:
            return
        self._end_handshake(pending)
        sock = pending.sock
        sock.settimeout(IO_TIMEOUT_S)
        limit = min(MAX_REMOTE_SLOTS, self.server.config.max_client_slots)
        try:
            magic, protocol, slots = HELLO.unpack(pending.buffer)
            if magic != MAGIC or protocol != PROTOCOL:
                raise InferenceProtocolError(
                    f"hello: expected magic {MAGIC!r} protocol {PROTOCOL}, "
                    f"actual {magic!r} protocol {protocol}"
                )
            if not 1 <= slots <= limit:
                which = (
                    f"max_client_slots={self.server.config.max_client_slots}"
                    if limit == self.server.config.max_client_slots
                    else f"the remote limit {MAX_REMOTE_SLOTS}"
                )
                raise InferenceProtocolError(
                    f"slots: expected 1 to {limit} ({which}), actual {slots}"
                )
            self._count += 1
            channel = _RemoteChannel(
                f"remote-{self._count}", sock, SlotLayout(self.server.spec, slots)
            )
        except (OSError, InferenceProtocolError, struct.error) as exc:
            self._refuse(sock, str(exc))
            return
        assert channel.segment is not None
        welcome = json.dumps({"segment": channel.segment.name, "spec": self.server.spec.to_json()})
        try:
            self.server._register(channel)
            sock.sendall(WELCOME.pack(MAGIC, 0, len(welcome)) + welcome.encode())
        except (OSError, InferenceError) as exc:
            self.server._unregister(channel, str(exc))
            channel.release()
            return
        self._watch(sock, channel)

    @staticmethod
    def _refuse(sock: socket.socket, reason: str) -> None:
        text = json.dumps({"error": reason}).encode()[:MAX_JSON]
        try:
            sock.sendall(WELCOME.pack(MAGIC, 1, len(text)) + text)
        except OSError:
            pass
        sock.close()

    def _drop(self, channel: _RemoteChannel, reason: str, tell: str | None = None) -> None:
        if tell is not None:
            try:
                channel.send(_server_message(ERROR, 0, 0, code=CODE_FATAL, text=tell))
            except OSError:
                pass
        try:
            self._selector.unregister(channel.sock)
        except (KeyError, ValueError):  # pragma: no cover - already unregistered
            pass
        logger.debug("inference client %s dropped: %s", channel.name, reason)
        self.server._unregister(channel, reason)

    def _read(self, channel: _RemoteChannel) -> None:
        try:
            data = channel.sock.recv(65536)
        except OSError:
            data = b""
        if not data:
            self._drop(channel, "the client disconnected")
            return
        channel.buffer += data
        size = CLIENT_MSG.size
        while len(channel.buffer) >= size:
            message, channel.buffer = channel.buffer[:size], channel.buffer[size:]
            kind, start, count = CLIENT_MSG.unpack(message)
            if kind == BYE:
                self._drop(channel, "the client closed")
                return
            problem = self._check(channel, kind, start, count)
            if problem is not None:
                self._drop(channel, problem, tell=problem)
                return
            assert channel.views is not None
            obs, noise = channel.views["obs"], channel.views["noise"]
            channel.busy[start : start + count] = True
            requests = [Request(channel, obs[s], noise[s], s) for s in range(start, start + count)]
            try:
                self.server._enqueue(channel, requests)
            except InferenceError as exc:
                channel.reject(requests, str(exc))

    @staticmethod
    def _check(channel: _RemoteChannel, kind: int, start: int, count: int) -> str | None:
        slots = channel.layout.slots
        if kind != REQUEST:
            return f"message kind: expected {REQUEST} or {BYE}, actual {kind}"
        if count < 1 or start + count > slots:
            return f"request slots: expected a range within 0..{slots - 1}, actual {start}+{count}"
        if channel.busy[start : start + count].any():
            return f"request slots {start}+{count}: expected free slots, actual some in flight"
        return None
