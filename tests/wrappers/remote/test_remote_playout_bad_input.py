"""Bad action packets sent straight to an env server with a playout: each one is a counted
drop (``packets_dropped_<reason>``), never applied, never the end of the session or the
server. The frames are written by hand, past the client's own checks."""

from __future__ import annotations

import socket
from typing import Any

import gymnasium as gym
import numpy as np
import pytest

import fleetgym  # noqa: F401  (registers fleetgym/Remote-v0)
from fleetgym.wrappers import ActionPacket, Playout
from fleetgym.wrappers.remote import RemoteEnvServer
from fleetgym.wrappers.remote.playout_host import DROP_REASONS, MAX_PENDING_PACKETS
from fleetgym.wrappers.remote.wire import HEADER, MAX_PAYLOAD, MessageType, WireCodec

GOOD = 0.25  # what the honest packets schedule
BAD = 1.5  # what a bad packet carries: it would show in the applied actions


@pytest.fixture
def server():
    srv = RemoteEnvServer("Pendulum-v1").start()
    yield srv
    srv.stop()


@pytest.fixture
def client(server):
    envs: list[Any] = []

    def make(**kwargs: Any) -> Any:
        env = gym.make(
            "fleetgym/Remote-v0",
            address="{}:{}".format(*server.address),
            playout=Playout(max_ahead=20, max_chunk=4),
            **kwargs,
        )
        envs.append(env)
        return env

    yield make
    for env in envs:
        env.close()


def _bad_frames(session: int, t: int) -> dict[str, list[bytes]]:
    """Frames sent after the agent's tick ``t`` (sequence number ``t``), by drop reason."""
    codec = WireCodec()
    bad = np.full((1, 1), BAD, np.float32)

    def action(meta: dict[str, Any], *arrays: np.ndarray, seq: int = t) -> bytes:
        return codec.encode(MessageType.ACTION, session, seq, meta, list(arrays))

    ok = {"ep": 0, "tick": t + 1}
    return {
        "meta": [
            action({"ep": 0}, bad),  # no tick
            action({"ep": 0, "tick": str(t + 1)}, bad),
            action({"ep": 0, "tick": -1}, bad),
            action({"ep": 0, "tick": True}, bad),
            action({"ep": 0, "tick": 2**70}, bad),
            action({"ep": "0", "tick": t + 1}, bad),
            action({"tick": t + 1}, bad),
            action({"ep": [0, {"x": None}], "tick": t + 1}, bad),
        ],
        "shape": [
            action(ok),  # no array
            action(ok, bad, bad),  # two
            action(ok, bad[0]),  # no chunk axis
            action(ok, np.full((1, 2), BAD, np.float32)),  # a wrong action shape
            action(ok, bad.astype(np.float64)),  # not the space's dtype
            action(ok, np.full((1, 1, 1), BAD, np.float32)),
        ],
        "chunk": [
            action(ok, np.empty((0, 1), np.float32)),
            action(ok, np.full((5, 1), BAD, np.float32)),  # max_chunk 4
        ],
        "past": [action({"ep": 0, "tick": t - 1}, bad)],
        "ahead": [action({"ep": 0, "tick": t + 21}, bad)],  # max_ahead 20
        "action": [
            action(ok, np.full((1, 1), np.nan, np.float32)),
            action(ok, np.full((1, 1), np.inf, np.float32)),
            action(ok, np.array([[GOOD], [np.nan]], np.float32)),  # one bad action of two
        ],
        # Valid on arrival, but sent at a tick the env has not reached: dropped at its tick.
        "future": [action({"ep": 0, "tick": t + 50}, bad, seq=t + 50)],
    }


def _run(env: Any, ticks: int, send_bad: Any) -> list[Any]:
    env.reset(seed=0)
    applied = []
    for t in range(ticks):
        _, _, _, _, info = env.step(ActionPacket(t + 1, [[GOOD]]))
        applied.append((info["action_source"], info["applied_action"]))
        if 1 <= t < ticks - 1:  # after ticks 1 .. ticks - 2: each batch counted by the next
            send_bad(t)
    return applied


def test_bad_packets_on_the_sessions_stream_are_dropped_by_reason(server, client):
    """Over TCP the frames reach the server in order, before the next TICK: exact counts."""
    env = client(transport="tcp")
    session = env.unwrapped.session
    ticks = 6

    def send_bad(t: int) -> None:
        for frames in _bad_frames(session, t).values():
            for data in frames:
                env.unwrapped._write(data)

    applied = _run(env, ticks, send_bad)
    assert applied[0] == ("wait", None)
    assert all(s == "packet" and a.tolist() == [GOOD] for s, a in applied[1:]), applied
    stats = server.stats()
    sample = _bad_frames(session, 1)
    for reason in DROP_REASONS:
        want = len(sample.get(reason, ())) * (ticks - 2)
        assert stats.get(f"packets_dropped_{reason}", 0) == want, (reason, stats)
    assert stats["sessions_open"] == 1 and stats.get("tcp_rejected", 0) == 0


def test_bad_datagrams_are_dropped_and_the_session_goes_on(server, client):
    env = client()
    session = env.unwrapped.session
    udp = env.unwrapped._udp
    sent: dict[str, int] = {}

    def send_bad(t: int) -> None:
        if t == 1:
            for reason, frames in _bad_frames(session, t).items():
                for data in frames:
                    udp.send(data)
                sent[reason] = len(frames)

    applied = _run(env, 4, send_bad)
    # The datagrams race the TICK: tick on until the server has counted them all.
    for t in range(4, 200):
        counted = {r: server.stats().get(f"packets_dropped_{r}", 0) for r in sent}
        if counted == sent:
            break
        _, _, _, _, info = env.step(ActionPacket(t + 1, [[GOOD]]))
        applied.append((info["action_source"], info["applied_action"]))
    assert counted == sent
    assert all(s == "packet" and a.tolist() == [GOOD] for s, a in applied[1:]), applied


def test_a_flood_of_packets_between_two_ticks_is_bounded(server, client):
    env = client(transport="tcp")
    session = env.unwrapped.session
    codec = WireCodec()
    env.reset(seed=0)
    env.step(ActionPacket(1, [[GOOD]]))
    flood = codec.encode(
        MessageType.ACTION, session, 0, {"ep": 0, "tick": 2}, [np.full((1, 1), GOOD, np.float32)]
    )
    extra = 50
    for _ in range(MAX_PENDING_PACKETS + extra):
        env.unwrapped._write(flood)
    _, _, _, _, info = env.step(ActionPacket(2, [[GOOD]]))  # it queues behind the flood
    assert info["action_source"] == "packet"  # the flood's own plan for tick 2
    assert server.stats()["packets_dropped_overflow"] == extra + 1
    assert env.step(ActionPacket(3, [[GOOD]]))[4]["action_source"] == "packet"


def test_oversized_frames_are_dropped_not_fatal(server, client):
    """A frame over the payload limit: read past on the session's stream, rejected as a
    datagram; the session and the server serve on."""
    env = client(transport="tcp")
    session = env.unwrapped.session
    env.reset(seed=0)
    env.step(ActionPacket(1, [[GOOD]]))
    length = MAX_PAYLOAD + 1
    head = HEADER.pack(b"FGRE", 1, int(MessageType.ACTION), 0, session, 1, 0, 0, length)
    env.unwrapped._write(head + b"\x00" * length)
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as udp:
        udp.sendto(head, server.address)
    for t in range(1, 4):
        _, _, _, _, info = env.step(ActionPacket(t + 1, [[GOOD]]))
        assert info["action_source"] == "packet" and info["applied_action"].tolist() == [GOOD]
    stats = server.stats()
    assert stats["tcp_oversized_dropped"] == 1 and stats.get("tcp_rejected", 0) == 0
    assert stats["rejected_oversized"] >= 1 and stats["sessions_open"] == 1
    # A header announcing more than a reader will skip still ends that connection only.
    with socket.create_connection(server.address) as stranger:
        stranger.sendall(HEADER.pack(b"FGRE", 1, 7, 0, 0, 0, 0, 0, 2**32 - 1))
        stranger.settimeout(30)
        assert stranger.recv(4096)[:4] == b"FGRE"  # an ERROR frame, then the close
    assert env.step(ActionPacket(5, [[GOOD]]))[4]["action_source"] == "packet"


def test_packets_without_a_playout_are_plain_bad_actions(server):
    """A session without a playout counts a chunk as a bad action, as before."""
    env = gym.make("fleetgym/Remote-v0", address="{}:{}".format(*server.address), transport="tcp")
    try:
        env.reset(seed=0)
        env.step(np.array([GOOD], np.float32))
        chunk = np.full((3, 1), BAD, np.float32)
        data = WireCodec().encode(
            MessageType.ACTION, env.unwrapped.session, 5, {"ep": 0, "tick": 5}, [chunk]
        )
        env.unwrapped._write(data)
        _, _, _, _, info = env.step(np.array([GOOD], np.float32))
        assert "action_source" not in info
        assert server.stats()["bad_actions"] == 1
    finally:
        env.close()
