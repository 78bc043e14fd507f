"""Scheduled action packets in Mode 3: the negotiation, the env host's playout, and
Mode 2 = Mode 3 (the same packets and the same delays give the same applied actions)."""

from __future__ import annotations

import collections
from typing import Any

import gymnasium as gym
import numpy as np
import pytest

import fleetgym  # noqa: F401  (registers fleetgym/Remote-v0)
from fleetgym.errors import InvalidActionError, RemoteEnvError
from fleetgym.traces import TraceData
from fleetgym.wrappers import ActionPacket, NetworkProfile, NetworkShimWrapper, Playout
from fleetgym.wrappers.channels import FixedDelay
from fleetgym.wrappers.chunking import ScheduledChunks
from fleetgym.wrappers.playout import ArrivalLink
from fleetgym.wrappers.remote import RemoteEnvServer
from fleetgym.wrappers.remote.parity import measure_playout_parity, tick_replay
from fleetgym.wrappers.remote.playout_host import (
    ClientPlayout,
    PlayoutHost,
    playout_from_wire,
    playout_to_wire,
)
from fleetgym.wrappers.remote.wire import MessageType, WireCodec
from fleetgym.wrappers.trace_channel import TraceChannel

STEP_MS = 50.0  # Pendulum's own period (dt = 0.05 s)


def _addr(server: RemoteEnvServer) -> str:
    return "{}:{}".format(*server.address)


@pytest.fixture
def make_server():
    servers: list[RemoteEnvServer] = []

    def make(env_id: str = "CartPole-v1", **kwargs: Any) -> RemoteEnvServer:
        server = RemoteEnvServer(env_id, **kwargs).start()
        servers.append(server)
        return server

    yield make
    for server in servers:
        server.stop()


@pytest.fixture
def make_client():
    envs: list[Any] = []

    def make(server: RemoteEnvServer, **kwargs: Any) -> Any:
        env = gym.make("fleetgym/Remote-v0", address=_addr(server), **kwargs)
        envs.append(env)
        return env

    yield make
    for env in envs:
        env.close()


def _designed_trace(n: int, seed: int, lost: float = 0.15) -> TraceData:
    """Delays of whole ticks of lateness (0, 1, 2, 3 or 5 under the loop's half-period
    offset), each at least 12 ms inside its tick's window, some lost. Two packets that
    arrive within one tick (at most 5 apart) arrive at least 2 ms apart, so that a real
    socket keeps their order."""
    rng = np.random.default_rng(seed)
    late = rng.choice([0, 1, 2, 3, 5], size=n, p=[0.4, 0.25, 0.15, 0.1, 0.1])
    delays = late * STEP_MS + 1.0 + 2.0 * (np.arange(n) % 7)
    delays[rng.random(n) < lost] = np.inf
    return TraceData(np.arange(n) * STEP_MS, delays.astype(np.float64), n * STEP_MS, "designed")


def _packets(n: int, seed: int, space: gym.Space[Any], delay: int, chunk: int) -> list[Any]:
    """An open-loop schedule: packet t for ticks t + delay .. t + delay + chunk - 1."""
    rng = np.random.default_rng(seed)
    out = []
    for t in range(n):
        if isinstance(space, gym.spaces.Discrete):
            actions: Any = [int(a) for a in rng.integers(space.n, size=chunk)]
        else:
            actions = rng.uniform(space.low, space.high, (chunk, *space.shape)).astype(space.dtype)
        out.append(ActionPacket(t + delay, actions))
    return out


def _fallback(obs: Any) -> Any:
    return np.clip(np.array([-0.5 * obs[2]], np.float32), -2.0, 2.0)


# -- the negotiation ----------------------------------------------------------------------
def test_playout_crosses_the_wire_as_plain_data():
    space = gym.spaces.Box(-2.0, 2.0, (1,), np.float32)
    playout = Playout(start="safe", underrun="safe", safe_action=np.array([0.5], np.float32))
    wire = playout_to_wire(playout)
    assert wire == {
        "start": "safe",
        "underrun": "safe",
        "safe_action": [0.5],
        "max_wait": 1000,
        "max_ahead": 1000,
        "max_chunk": 256,
    }
    assert playout_from_wire(wire, space, None) == playout
    # A callable never crosses: the server's own fallback stands in for the client's.
    asked = Playout(underrun="fallback", fallback=print)
    assert "fallback" not in playout_to_wire(asked)
    rebuilt = playout_from_wire(playout_to_wire(asked), space, _fallback)
    assert rebuilt.fallback is _fallback
    with pytest.raises(ValueError, match=r"^playout: underrun: .*this env server has none"):
        playout_from_wire(playout_to_wire(asked), space, None)
    for meta, kind, name in [
        ([1], TypeError, "a JSON object"),
        ({"start": "push"}, ValueError, "start"),
        ({"max_chunk": 1.5}, TypeError, "max_chunk"),
        ({"max_ahead": 10**9}, ValueError, "max_ahead"),
        ({"safe_action": [[1, 2]], "start": "safe"}, ValueError, "safe_action"),
        ({"safe_action": "x", "start": "safe"}, ValueError, "safe_action"),
        ({"code": "print(1)"}, ValueError, "expected the fields"),
    ]:
        with pytest.raises(kind, match=rf"^playout: .*{name}"):
            playout_from_wire(meta, space, None)
    with pytest.raises(ValueError, match="safe_action"):
        playout_to_wire(Playout(start="safe", safe_action=[np.nan]))
    with pytest.raises(TypeError, match="^playout:"):
        playout_to_wire("wait")


def test_the_server_refuses_what_it_cannot_apply_at_hello(make_server, make_client):
    server = make_server(step_ms=20.0)
    with pytest.raises(RemoteEnvError, match=r"refused HELLO: ValueError: playout: safe_action"):
        make_client(server, playout=Playout(start="safe"), timeout_s=2.0)  # Discrete: none
    asked = Playout(underrun="fallback", fallback=lambda obs: 0)
    with pytest.raises(RemoteEnvError, match=r"playout: underrun: .*this env server has none"):
        make_client(server, playout=asked, timeout_s=2.0)
    with pytest.raises(TypeError, match="^playout:"):
        make_client(server, playout="wait")  # before connecting
    # The refused sessions closed nothing but themselves.
    env = make_client(server, playout=Playout())
    assert env.unwrapped._playout.playout == Playout()
    env.reset(seed=0)
    assert env.step(ActionPacket(1, [0]))[4]["action_source"] == "wait"


def test_a_server_fallback_policy_covers_the_gaps(make_server, make_client):
    server = make_server("Pendulum-v1", fallback=_fallback)
    env = make_client(server, playout=Playout(underrun="fallback", fallback=lambda obs: None))
    true_obs, _ = env.reset(seed=0)
    sources = []
    for t in range(6):  # packets for ticks 1 and 2 only: the rest is the server's fallback
        actions = np.ones((2, 1), np.float32) if t == 0 else [[0.0]]
        _, _, _, _, info = env.step(ActionPacket(t + 1 if t == 0 else 99, actions))
        sources.append(info["action_source"])
        if info["action_source"] == "fallback":  # of the env's state before the tick
            np.testing.assert_array_equal(info["applied_action"], _fallback(true_obs))
        true_obs = info["true_obs"]
    assert sources == ["wait", "packet", "packet", "fallback", "fallback", "fallback"]


# -- the env host against the shim, tick by tick (no sockets, no clock) --------------------
CASES = {
    "wait-hold": (Playout(), "latest"),
    "safe-safe": (
        Playout(start="safe", underrun="safe", safe_action=np.array([0.5], np.float32)),
        "latest",
    ),
    "fallback-fifo": (Playout(underrun="fallback", fallback=_fallback, max_chunk=4), "fifo"),
    "timeout": (Playout(max_wait=2), "latest"),
}


@pytest.mark.parametrize("case", sorted(CASES))
@pytest.mark.parametrize("env_id", ["Pendulum-v1", "CartPole-v1"])
def test_the_env_host_applies_what_the_shim_applies(case, env_id):
    playout, delivery = CASES[case]
    if env_id == "CartPole-v1":
        if playout.safe_action is not None or playout.underrun == "fallback":
            pytest.skip("a Pendulum rule")
    n, seed = 120, 3
    trace = _designed_trace(n, seed=7)
    if case == "timeout":  # the first packets lost: the env waits, then gives up
        trace = TraceData(trace.send_ms, np.r_[[np.inf] * 5, trace.delay_ms[5:]], trace.period_ms)
    packets = _packets(n, 11, gym.make(env_id).action_space, delay=2, chunk=3)

    shim = NetworkShimWrapper(
        gym.make(env_id, max_episode_steps=100),
        uplink=FixedDelay(0.0),
        downlink=TraceChannel(trace, random_start=False),
        step_ms=STEP_MS,
        delivery=delivery,
        info="full",
        playout=playout,
    )
    shim.reset(seed=seed)
    mode2 = []
    for t in range(n):
        _, reward, term, trunc, info = shim.step(packets[t])
        mode2.append(
            (
                info["action_source"],
                info["applied_action"],
                info["action_age_steps"],
                reward,
                info["true_obs"],
                term,
                trunc,
            )
        )
        if term or trunc:
            stats2 = info["network"]
            break

    # Mode 3's env host, fed the same packets through the wire format, delivered at the
    # ticks the shim's downlink delivers them (the same trace through the same link).
    env = gym.make(env_id, max_episode_steps=100)
    space = env.action_space
    counts: collections.Counter[str] = collections.Counter()
    rules = playout_from_wire(playout_to_wire(playout), space, playout.fallback)
    host = PlayoutHost(rules, space, lambda key: counts.update([key]))
    obs, _ = env.reset(seed=seed)
    host.start(0, obs)
    client = ClientPlayout(playout)
    client.accept({"playout": rules}, space, "test")
    codec = WireCodec()
    link = ArrivalLink(
        TraceChannel(trace, random_start=False).sampler(np.random.default_rng(0), STEP_MS),
        STEP_MS,
        512,
        delivery == "fifo",
        0.5,
    )
    mode3 = []
    for t in range(n):
        meta, chunk = client.encode(packets[t], t, 0, codec, 1, True)
        _, arrived = link.tick(t, codec.encode(MessageType.ACTION, 1, t, meta, [chunk]))
        deadline = 1_000 * t
        for _, data in arrived:
            host.on_frame(codec.decode(data, t_recv_ns=deadline))
        step = host.tick(env, t, deadline)
        meta = host.step_meta(step)
        age = t - meta["action_seq"]
        mode3.append(
            (step.source, step.action, age, step.reward, step.obs, step.terminated, step.truncated)
        )
        if step.terminated or step.truncated:
            stats3 = {
                **meta["playout"],
                "downlink_reordered": meta["down_reordered"],
                "action_holds": meta["holds"],
            }
            break
    assert not counts  # nothing dropped
    assert len(mode3) == len(mode2)
    for t, (a, b) in enumerate(zip(mode2, mode3, strict=True)):
        assert a[0] == b[0], (t, a[0], b[0])
        if a[1] is None:
            assert b[1] is None
        else:
            np.testing.assert_array_equal(np.asarray(a[1]), np.asarray(b[1]), err_msg=f"tick {t}")
        assert a[2:4] == b[2:4] and a[5:] == b[5:], t
        np.testing.assert_array_equal(a[4], b[4])
    assert {k: stats2[k] for k in stats3} == stats3
    sources = collections.Counter(s for s, *_ in mode2)
    if case != "timeout":
        assert len(mode2) // 2 < sources["packet"] < len(mode2)  # and gaps, by the rules
    else:
        assert sources == {"wait": 2} and mode2[-1][-1]


# -- over real sockets ----------------------------------------------------------------------
def test_mode_3_applies_what_mode_2_applies_for_the_recorded_delays(make_server, tmp_path):
    """The same packets, and in Mode 2 the per-packet delays the server recorded in Mode 3:
    every tick the same action source, applied action, action age, reward and state."""
    n, limit = 80, 40
    designed = _designed_trace(n, seed=0)
    profile = NetworkProfile(
        "designed", FixedDelay(0.0), TraceChannel(designed, random_start=False)
    )
    server = make_server(
        "Pendulum-v1", env_kwargs={"max_episode_steps": limit}, record_dir=str(tmp_path)
    )
    space = gym.make("Pendulum-v1").action_space
    packets = _packets(n, 2, space, delay=2, chunk=3)
    report = measure_playout_parity(
        server, packets, Playout(max_chunk=4), seed=4, profile=profile, delivery="latest"
    )
    assert report["ticks"] == limit + report["mode3"]["wait_ticks"]
    assert report["mismatches"] == [], report
    net2, net3 = report["mode2"], report["mode3"]
    keys = ("ticks", "action_holds", "wait_ticks", "underruns", "late_packets")
    keys += ("downlink_reordered",)
    assert {k: net2[k] for k in keys} == {k: net3[k] for k in keys}, report
    assert set(net2) == set(net3)
    # The recorded trace counts the packets still in flight at the end as lost, too.
    assert net3["downlink_lost"] == np.isinf(designed.delay_ms[: report["ticks"]]).sum()
    assert net2["downlink_lost"] >= net3["downlink_lost"]
    # The designed delays made every rule fire.
    assert net3["wait_ticks"] and net3["underruns"] and net3["late_packets"]
    assert net3["downlink_lost"] and net3["downlink_reordered"]


def test_the_replay_keeps_the_recorded_arrivals_on_the_tick_clock():
    recorded = TraceData(
        np.array([0.0, 50.4, 100.2, 151.0]), np.array([10.0, np.inf, 60.0, 3.0]), 200.0
    )
    replay = tick_replay(recorded, 50.0)
    assert replay.send_ms.tolist() == [0.0, 50.0, 100.0, 150.0]
    np.testing.assert_allclose(replay.delay_ms, [10.0, np.inf, 60.2, 4.0])


def test_scheduled_chunks_drive_a_remote_env(make_server, make_client):
    server = make_server(step_ms=20.0, profile="wifi-normal")
    remote = make_client(server, playout=Playout())

    def policy(obs: Any) -> int:
        return int(obs[2] + 0.5 * obs[3] + 0.05 * obs[1] > 0)

    env = ScheduledChunks(remote, "true-dynamics", delay=3, chunk=4, policy=policy)
    obs, _ = env.reset(seed=0)
    sources = []
    for t in range(25):
        obs, _, term, trunc, info = env.step(policy(obs))
        assert isinstance(info["chunk"], ActionPacket) and len(info["chunk"]) == 4
        assert info["chunk"].tick == t + 3
        sources.append(info["action_source"])
        if term or trunc:
            break
    assert sources[:3] == ["wait"] * 3 and "packet" in sources


class _WideAction(gym.Env[Any, Any]):
    """A Box action of 256 floats: a chunk of them outgrows a datagram."""

    metadata: dict[str, Any] = {"render_modes": []}
    observation_space = gym.spaces.Box(-1.0, 1.0, (2,), np.float32)
    action_space = gym.spaces.Box(-1.0, 1.0, (256,), np.float32)

    def reset(self, *, seed: int | None = None, options: Any = None) -> Any:
        super().reset(seed=seed)
        return np.zeros(2, np.float32), {}

    def step(self, action: Any) -> Any:
        return np.full(2, float(action[0]), np.float32), 0.0, False, False, {}


gym.register("fleetgym-test/RemotePlayoutWide-v0", entry_point=_WideAction)


def test_the_client_refuses_bad_packets_with_a_typed_error(make_server, make_client):
    server = make_server("Pendulum-v1")
    env = make_client(server, playout=Playout(max_ahead=10, max_chunk=4))
    env.reset(seed=0)
    env.step(ActionPacket(1, [[0.5]]))
    bad = {
        "not a packet": [0.5],
        "in the past": ActionPacket(0, [[0.5]]),
        "too far ahead": ActionPacket(12, [[0.5]]),
        "too long": ActionPacket(2, [[0.5]] * 5),
        "NaN": ActionPacket(2, [[np.nan]]),
        "wrong shape": ActionPacket(2, [[0.5, 0.5]]),
        "beyond float32": ActionPacket(2, np.array([[1e300]])),
    }
    for what, packet in bad.items():
        with pytest.raises(InvalidActionError, match="step 1"):
            env.step(packet)
        assert env.unwrapped._t == 1, what  # nothing sent, no tick
    _, _, _, _, info = env.step(ActionPacket(2, [[0.5]]))
    assert info["action_source"] == "packet" and not any(
        k.startswith("packets_dropped") for k in server.stats()
    )
    wide = make_server("fleetgym-test/RemotePlayoutWide-v0", step_ms=20.0)
    chunk = np.zeros((100, 256), np.float32)  # 100 KB: more than a datagram holds
    udp = make_client(wide, playout=Playout())
    udp.reset(seed=0)
    with pytest.raises(InvalidActionError, match="transport='tcp'"):
        udp.step(ActionPacket(1, chunk))
    tcp = make_client(wide, playout=Playout(), transport="tcp")
    tcp.reset(seed=0)
    tcp.step(ActionPacket(1, chunk + 0.5))
    assert tcp.step(ActionPacket(2, chunk[:1]))[4]["applied_action"][0] == 0.5


def test_the_server_refuses_a_fallback_that_is_not_callable():
    with pytest.raises(TypeError, match="^fallback: expected a callable"):
        RemoteEnvServer("CartPole-v1", fallback="policy.zip")  # type: ignore[arg-type]
