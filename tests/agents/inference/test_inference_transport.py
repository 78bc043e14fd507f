"""Clients in other processes: shared-memory slots and fixed-size control messages.

Remote answers equal local ones; bad input, malformed messages and a client SIGKILLed
mid-request affect that client only. The model is the EchoModel (conftest).
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import threading
import time
from multiprocessing import shared_memory

import numpy as np
import pytest
from conftest import request

from fleetgym.agents.inference import InferenceError, InferenceServer, RemoteClient
from fleetgym.agents.inference.transport import (
    CLIENT_MSG,
    HELLO,
    MAGIC,
    PROTOCOL,
    REQUEST,
    SERVER_HEAD,
    SERVER_MSG_BYTES,
    WELCOME,
    SlotLayout,
)

NEVER_MS = 60_000.0

CHILD = """
import sys, time
import numpy as np
from fleetgym.agents.inference import RemoteClient
client = RemoteClient(("127.0.0.1", int(sys.argv[1])), slots=2)
client.submit(np.array([7.0, 0.0]))
print("submitted", flush=True)
time.sleep(600)
"""


def _wait_for(predicate, what: str) -> None:
    for _ in range(30_000):
        if predicate():
            return
        time.sleep(0.001)
    raise AssertionError(f"never happened: {what}")


def _child(port: int) -> subprocess.Popen:
    child = subprocess.Popen(
        [sys.executable, "-c", CHILD, str(port)], stdout=subprocess.PIPE, text=True
    )
    assert child.stdout is not None
    assert child.stdout.readline().strip() == "submitted"
    return child


def _kill(child: subprocess.Popen) -> None:
    os.kill(child.pid, signal.SIGKILL)
    child.wait()


@pytest.mark.timeout(60)
def test_remote_answers_match_local_with_double_buffering(echo_model):
    with InferenceServer(echo_model, max_batch=64, max_wait_ms=1.0) as server:
        with RemoteClient(server.listen(), slots=6) as remote:
            local = server.connect()
            first = remote.submit(np.stack([request(1, n) for n in range(3)]), noise=[0.5] * 3)
            second = remote.submit(request(1, 3))  # a second group while the first waits
            late = remote.wait(second)
            early = remote.wait(first)
            np.testing.assert_array_equal(late.outputs["echo"], [request(1, 3) * 2])
            np.testing.assert_array_equal(
                early.outputs["echo"], np.stack([request(1, n) * 2 + 0.5 for n in range(3)])
            )
            np.testing.assert_array_equal(
                local.infer(request(2, 0)).outputs["echo"], [request(2, 0) * 2]
            )
            assert early.policy_versions.tolist() == [0, 0, 0]
            server.set_weights({"tag": np.array(5)}, version=5)
            reply = remote.infer(request(1, 4))
            assert reply.policy_versions.tolist() == [5] and reply.outputs["version"][0] == 5
            local.close()


@pytest.mark.timeout(60)
def test_remote_bad_input_and_closed_client(echo_model):
    with InferenceServer(echo_model, max_batch=64, max_wait_ms=1.0) as server:
        address = server.listen()
        other = RemoteClient(address, slots=2)
        client = RemoteClient(address, slots=2)
        with pytest.raises(ValueError, match=r"obs: expected shape \(2,\)"):
            client.submit(np.zeros((1, 5)))
        with pytest.raises(TypeError, match="obs: expected dtype float64, actual int64"):
            client.submit(np.zeros(2, np.int64))
        with pytest.raises(ValueError, match="at most 2 observations in flight"):
            client.submit(np.zeros((3, 2)))
        np.testing.assert_array_equal(client.infer(request(3, 1)).outputs["echo"], [[6.0, 2.0]])
        client.close()
        with pytest.raises(InferenceError, match="expected an open client, actual closed"):
            client.submit(request(3, 2))
        np.testing.assert_array_equal(other.infer(request(4, 1)).outputs["echo"], [[8.0, 2.0]])
        other.close()


@pytest.mark.timeout(60)
def test_malformed_messages_drop_only_that_connection(echo_model):
    with InferenceServer(echo_model, max_batch=64, max_wait_ms=1.0) as server:
        address = server.listen()
        good = RemoteClient(address, slots=2)
        with socket.create_connection(address) as raw:
            raw.sendall(HELLO.pack(b"NOPE", PROTOCOL, 2))
            magic, status, length = WELCOME.unpack(raw.recv(WELCOME.size, socket.MSG_WAITALL))
            assert status == 1 and b"hello: expected magic" in raw.recv(length)
        with socket.create_connection(address) as raw:
            raw.sendall(HELLO.pack(MAGIC, PROTOCOL, 100_000))
            assert WELCOME.unpack(raw.recv(WELCOME.size, socket.MSG_WAITALL))[1] == 1
        with socket.create_connection(address) as raw:
            raw.sendall(HELLO.pack(MAGIC, PROTOCOL, 2))
            _, status, length = WELCOME.unpack(raw.recv(WELCOME.size, socket.MSG_WAITALL))
            assert status == 0
            raw.recv(length, socket.MSG_WAITALL)
            raw.sendall(CLIENT_MSG.pack(REQUEST, 1, 5))  # slots 1..5 of 2
            message = raw.recv(SERVER_MSG_BYTES, socket.MSG_WAITALL)
            kind, code, *_ = SERVER_HEAD.unpack_from(message)
            assert (kind, code) == (2, 2) and b"expected a range within 0..1" in message
            assert raw.recv(1) == b""  # disconnected
        np.testing.assert_array_equal(good.infer(request(1, 1)).outputs["echo"], [[2.0, 2.0]])
        good.close()


@pytest.mark.timeout(120)
def test_sigkilled_client_while_queued_does_not_stall_others(echo_model):
    with InferenceServer(echo_model, max_batch=64, max_wait_ms=NEVER_MS) as server:
        port = server.listen()[1]
        local = server.connect()
        child = _child(port)
        _wait_for(lambda: server.metrics()["queued"] == 1, "the child's request queued")
        _kill(child)
        # the server learns of the kill when the socket closes: wait for that (on a loaded
        # machine it can come after the next request)
        _wait_for(lambda: server.metrics()["connected_clients"] == 1, "the killed client dropped")
        # only "every connected client waiting" can run this batch: the killed client
        # must no longer count as connected, and its request must be gone
        reply = local.infer(request(1, 0))
        assert echo_model.batches == [(1, 0)] and reply.outputs["echo"][0][0] == 2.0
        assert server.metrics()["connected_clients"] == 1
        local.close()


@pytest.mark.timeout(120)
def test_sigkilled_client_during_forward_pass(echo_model):
    gate = echo_model.gate = threading.Event()
    with InferenceServer(echo_model, max_batch=64, max_wait_ms=NEVER_MS) as server:
        port = server.listen()[1]
        local = server.connect()
        child = _child(port)
        _wait_for(lambda: server.metrics()["queued"] == 1, "the child's request queued")
        ticket = local.submit(request(1, 0))
        _wait_for(echo_model.entered.is_set, "the forward pass with both requests")
        _kill(child)
        _wait_for(lambda: server.metrics()["connected_clients"] == 1, "the child dropped")
        gate.set()
        assert local.wait(ticket).outputs["echo"][0][0] == 2.0
        assert echo_model.batches == [(2, 0)]
        # the server goes on serving
        assert local.infer(request(1, 1)).outputs["echo"][0][1] == 2.0
        local.close()


@pytest.mark.timeout(60)
def test_segment_freed_when_the_client_leaves(echo_model):
    with InferenceServer(echo_model, max_batch=64, max_wait_ms=1.0) as server:
        client = RemoteClient(server.listen(), slots=3)
        client.infer(request(0, 0))
        name = client._segment.name
        client.close()
        _wait_for(lambda: server.metrics()["connected_clients"] == 0, "the client dropped")

        def gone() -> bool:
            try:
                shared_memory.SharedMemory(name=name).close()
            except FileNotFoundError:
                return True
            return False

        _wait_for(gone, "the segment unlinked")


@pytest.mark.timeout(60)
def test_server_close_fails_remote_waits(echo_model):
    server = InferenceServer(echo_model, max_batch=64, max_wait_ms=NEVER_MS)
    address = server.listen()
    client, _idle = RemoteClient(address, slots=2), server.connect()
    ticket = client.submit(request(0, 0))
    _wait_for(lambda: server.metrics()["queued"] == 1, "the request queued")
    server.close()
    with pytest.raises(InferenceError, match="closed"):
        client.wait(ticket)
    client.close()


def test_slot_layout_blocks_do_not_overlap(echo_model):
    layout = SlotLayout(echo_model.spec, slots=5)
    ends = []
    for name, shape, dtype in layout.arrays:
        start = layout.offsets[name]
        assert start % 64 == 0
        ends.append((start, start + 5 * int(np.prod(shape)) * np.dtype(dtype).itemsize))
    ends.sort()
    assert all(a[1] <= b[0] for a, b in zip(ends, ends[1:], strict=False))
    assert layout.size >= ends[-1][1]


@pytest.mark.timeout(60)
def test_a_bad_welcome_is_a_protocol_error_of_the_one_family():
    from fleetgym.agents.inference import InferenceProtocolError
    from fleetgym.agents.inference.transport import HELLO, WELCOME
    from fleetgym.errors import ProtocolError

    listener = socket.create_server(("127.0.0.1", 0))

    def impostor() -> None:  # answers the handshake with another protocol's magic
        conn, _ = listener.accept()
        with conn:
            conn.recv(HELLO.size)
            conn.sendall(WELCOME.pack(b"HTTP", 0, 2) + b"{}")

    thread = threading.Thread(target=impostor)
    thread.start()
    try:
        with pytest.raises(ProtocolError, match="welcome: expected magic") as caught:
            RemoteClient(listener.getsockname(), slots=1, timeout=30.0)
    finally:
        thread.join()
        listener.close()
    assert isinstance(caught.value, InferenceProtocolError) and isinstance(caught.value, ValueError)
    assert issubclass(InferenceProtocolError, InferenceError)


@pytest.mark.timeout(120)
def test_idle_and_half_hello_connections_never_block_the_listener(echo_model):
    """Connections that send nothing, or half a HELLO, wait in their own handshake: a client
    that connects after them is served while they are still pending, and they are refused
    once their deadline passes (no wall-clock bound is asserted)."""
    with InferenceServer(echo_model, max_batch=64, max_wait_ms=1.0) as server:
        address = server.listen()
        idle = socket.create_connection(address)
        half = socket.create_connection(address)
        half.sendall(HELLO.pack(MAGIC, PROTOCOL, 2)[:5])
        listener = server._listener
        _wait_for(lambda: len(listener._handshakes) == 2, "both connections accepted")
        good = RemoteClient(address, slots=2)
        assert len(listener._handshakes) == 2  # served while both still wait for their HELLO
        np.testing.assert_array_equal(good.infer(request(1, 1)).outputs["echo"], [[2.0, 2.0]])
        for raw, sent in ((idle, 0), (half, 5)):
            raw.settimeout(60)
            _, status, length = WELCOME.unpack(raw.recv(WELCOME.size, socket.MSG_WAITALL))
            text = raw.recv(length, socket.MSG_WAITALL)
            assert status == 1 and f"actual {sent}".encode() in text and b"hello" in text
            raw.close()
        assert listener._handshakes == {}
        good.close()


@pytest.mark.timeout(60)
def test_a_refusal_names_the_limit_that_refused(echo_model):
    with InferenceServer(echo_model, max_batch=64, max_wait_ms=1.0, max_client_slots=8) as server:
        address = server.listen()
        with socket.create_connection(address) as raw:
            raw.sendall(HELLO.pack(MAGIC, PROTOCOL, 16))
            _, status, length = WELCOME.unpack(raw.recv(WELCOME.size, socket.MSG_WAITALL))
            text = raw.recv(length, socket.MSG_WAITALL)
            assert status == 1 and b"expected 1 to 8 (max_client_slots=8), actual 16" in text


ANSWERED_CHILD = """
import sys
import numpy as np
from fleetgym.agents.inference import RemoteClient
if len(sys.argv) > 2:
    sys.stdin.readline()  # connect when told
with RemoteClient(("127.0.0.1", int(sys.argv[1])), slots=2, timeout=20) as client:
    print(client.infer(np.array([3.0, 1.0])).outputs["echo"].tolist(), flush=True)
"""


@pytest.mark.timeout(120)
def test_a_channel_released_by_the_batcher_does_not_end_the_listener(echo_model):
    # The batching thread releases a client whose answer could not be delivered (its
    # socket closed while the listener still watches it); the next connection then gets the
    # closed socket's descriptor. Found by `fleetgym soak` (connections reset with ss -K):
    # the listener thread died on the selector's KeyError, and no worker could reconnect.
    with InferenceServer(echo_model, max_batch=64, max_wait_ms=1.0) as server:
        port = server.listen()[1]
        for _ in range(3):
            first = subprocess.run([sys.executable, "-c", ANSWERED_CHILD, str(port)],
                                   capture_output=True, text=True, timeout=60)  # fmt: skip
            assert first.stdout.strip() == "[[6.0, 2.0]]", first.stderr[-2000:]
        holder = subprocess.Popen([sys.executable, "-c", CHILD, str(port)],
                                  stdout=subprocess.PIPE, text=True)  # fmt: skip
        try:
            assert holder.stdout is not None and holder.stdout.readline().strip() == "submitted"
            _wait_for(lambda: server.metrics()["connected_clients"] == 1, "the holder connected")
            (channel,) = [c for c in server._channels if hasattr(c, "sock")]
            descriptor = channel.sock.fileno()
            # Started before the release: its pipes must not take the freed descriptor.
            late = subprocess.Popen([sys.executable, "-c", ANSWERED_CHILD, str(port), "wait"],
                                    stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                    stderr=subprocess.PIPE, text=True)  # fmt: skip
            server._unregister(channel, "answer could not be delivered")  # as _settle does
            channel.release()
            # Hold every free descriptor below the closed one, so the next connection gets it.
            fillers = []
            while (fd := os.open(os.devnull, os.O_RDONLY)) != descriptor:
                fillers.append(fd)
            os.close(fd)
            try:
                out, err = late.communicate("go\n", timeout=60)
            finally:
                for fd in fillers:
                    os.close(fd)
            assert out.strip() == "[[6.0, 2.0]]", err[-2000:]
            assert server._listener is not None and server._listener._thread.is_alive()
        finally:
            _kill(holder)
