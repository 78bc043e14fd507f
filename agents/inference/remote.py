"""The client of an inference server in another process (see
:mod:`fleetgym.agents.inference.transport` for the wire format)."""

from __future__ import annotations

import json
import socket
from typing import Any

import numpy as np

from fleetgym.agents.inference.channels import (
    InferenceClient,
    InferenceError,
    InferenceProtocolError,
    Reply,
    Ticket,
    check_request,
)
from fleetgym.agents.inference.model import ModelSpec
from fleetgym.agents.inference.transport import (
    ANSWER,
    BYE,
    CLIENT_MSG,
    CODE_FATAL,
    ERROR,
    HELLO,
    MAGIC,
    MAX_JSON,
    MAX_REMOTE_SLOTS,
    PROTOCOL,
    REQUEST,
    SERVER_HEAD,
    SERVER_MSG_BYTES,
    WELCOME,
    SlotLayout,
    _attach,
    _recv_exact,
)
from fleetgym.validation import check_int, check_timeout


class RemoteClient(InferenceClient):
    """A client of an :class:`~fleetgym.agents.inference.InferenceServer` in another process.

    Same API as the in-process client (:class:`~fleetgym.agents.inference.InferenceClient`):
    observations are written into this client's shared-memory slots and only small
    fixed-size control messages cross the socket. Used by one thread.

    Args:
        address: ``(host, port)`` from the server's ``listen()``.
        slots: Most observations in flight at once (the segment's size).
        timeout: Seconds to connect and handshake.

    Example:
        >>> import numpy as np
        >>> from fleetgym.agents.inference import InferenceServer
        >>> from fleetgym.agents.workloads import get_workload
        >>> with InferenceServer(get_workload("CartPole-v1").make_policy()) as server:
        ...     with RemoteClient(server.listen(), slots=4) as client:
        ...         reply = client.infer(np.zeros((2, 4), np.float32))
        >>> reply.outputs["value"].shape, reply.policy_versions.tolist()
        ((2,), [0, 0])

    Raises:
        ConnectionError: If the server cannot be reached or refuses the client.
        TypeError, ValueError: On an argument of the wrong type or range.
    """

    def __init__(
        self, address: tuple[str, int], slots: int = 64, timeout: float | None = 30.0
    ) -> None:
        self.slots = check_int("slots", slots, 1, MAX_REMOTE_SLOTS)
        timeout = check_timeout("timeout", timeout)
        host, port = address
        self._sock = socket.create_connection(
            (str(host), check_int("port", port, 1, 65535)), timeout
        )
        self._sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self._closed = False
        self._broken: str | None = None
        self._segment: Any = None
        try:
            self._sock.sendall(HELLO.pack(MAGIC, PROTOCOL, self.slots))
            magic, status, length = WELCOME.unpack(_recv_exact(self._sock, WELCOME.size))
            if magic != MAGIC or length > MAX_JSON:
                raise InferenceProtocolError(f"welcome: expected magic {MAGIC!r}, actual {magic!r}")
            data = json.loads(_recv_exact(self._sock, length))
            if status != 0:
                raise ConnectionError(f"inference server refused the client: {data.get('error')}")
            self.spec = ModelSpec.from_json(data["spec"])
            self._segment = _attach(str(data["segment"]))
        except BaseException:
            self._sock.close()
            raise
        self._sock.settimeout(None)
        self._layout = SlotLayout(self.spec, self.slots)
        self._views: dict[str, np.ndarray] | None = self._layout.views(self._segment.buf)
        self._outputs = {name: self._views[name] for name in self.spec.output_names}
        self._owner: list[tuple[Ticket, int] | None] = [None] * self.slots
        self._used = np.zeros(self.slots, bool)

    def submit(self, obs: np.ndarray, noise: np.ndarray | None = None) -> Ticket:
        if self._closed:
            raise InferenceError("submit: expected an open client, actual closed")
        if self._broken is not None:
            raise InferenceError(f"submit: expected a connected client, actual {self._broken}")
        obs, noise_array = check_request(self.spec, obs, noise, int((~self._used).sum()))
        count = obs.shape[0]
        start = self._free_run(count)
        assert self._views is not None
        self._views["obs"][start : start + count] = obs
        self._views["noise"][start : start + count] = noise_array
        ticket = Ticket(self.spec, count, first_slot=start)
        for row in range(count):
            self._owner[start + row] = (ticket, row)
        self._used[start : start + count] = True
        try:
            self._sock.sendall(CLIENT_MSG.pack(REQUEST, start, count))
        except OSError as exc:
            self._fail_all(f"connection lost: {exc}")
        return ticket

    def wait(self, ticket: Ticket, timeout: float | None = None) -> Reply:
        self._sock.settimeout(timeout)
        try:
            while not ticket.done.is_set():
                if self._broken is not None:
                    ticket.fail(self._broken)
                    break
                try:
                    message = _recv_exact(self._sock, SERVER_MSG_BYTES)
                except TimeoutError:
                    raise TimeoutError(
                        f"wait: expected answers within {timeout} s, actual none yet"
                    ) from None
                except (OSError, ConnectionError) as exc:
                    self._fail_all(f"the inference server closed the connection ({exc})")
                    continue
                self._handle(message)
        finally:
            if not self._closed:
                self._sock.settimeout(None)
        return ticket.reply()

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        try:
            self._sock.sendall(CLIENT_MSG.pack(BYE, 0, 0))
        except OSError:
            pass
        self._sock.close()
        self._views = self._outputs = None  # type: ignore[assignment]
        if self._segment is not None:
            self._segment.close()
        self._fail_all("the client closed")

    def __del__(self) -> None:
        if not getattr(self, "_closed", True):
            try:
                self.close()
            except Exception:  # pragma: no cover - interpreter shutdown
                pass

    # -- internals ------------------------------------------------------------------------
    def _free_run(self, count: int) -> int:
        """First slot of ``count`` contiguous free slots."""
        free = ~self._used
        run = 0
        for slot in range(self.slots):
            run = run + 1 if free[slot] else 0
            if run == count:
                return slot - count + 1
        raise ValueError(
            f"obs: expected {count} contiguous free slots of {self.slots}, actual none "
            "(wait for answers first, or connect with more slots)"
        )

    def _handle(self, message: bytes) -> None:
        kind, code, start, count, version, batch = SERVER_HEAD.unpack_from(message)
        if kind == ERROR and code == CODE_FATAL:
            text = message[SERVER_HEAD.size :].rstrip(b"\0").decode("utf-8", "replace")
            self._fail_all(f"the inference server dropped the client: {text}")
            return
        if kind not in (ANSWER, ERROR) or start + count > self.slots:
            self._fail_all(
                f"malformed message from the server (kind {kind}, slots {start}+{count})"
            )
            return
        text = message[SERVER_HEAD.size :].rstrip(b"\0").decode("utf-8", "replace")
        for slot in range(start, start + count):
            owner = self._owner[slot]
            self._owner[slot] = None
            self._used[slot] = False
            if owner is None:
                continue
            ticket, row = owner
            if kind == ANSWER:
                ticket.fill(row, self._outputs, slot, version, batch)
            else:
                ticket.fail(text)

    def _fail_all(self, reason: str) -> None:
        self._broken = self._broken or reason
        for slot, owner in enumerate(self._owner):
            if owner is not None:
                owner[0].fail(reason)
                self._owner[slot] = None
        self._used[:] = False
