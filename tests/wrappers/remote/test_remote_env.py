"""The remote env end to end on loopback: API, timing rule, faults, security, recording."""

from __future__ import annotations

import socket
import struct
import threading
import time

import gymnasium as gym
import numpy as np
import pytest

import fleetgym  # noqa: F401  (registers fleetgym/Remote-v0)
from fleetgym.errors import RemoteEnvError
from fleetgym.traces import load_trace
from fleetgym.wrappers.remote import RemoteEnvServer
from fleetgym.wrappers.remote.wire import MessageType, WireCodec
from fleetgym.wrappers.shim_config import STEP_INFO_KEYS
from fleetgym.wrappers.trace_channel import TraceChannel

SECRET = b"a-test-secret-of-32-bytes-length"


def _addr(server: RemoteEnvServer) -> str:
    return f"{server.address[0]}:{server.address[1]}"


@pytest.fixture
def server():
    srv = RemoteEnvServer("CartPole-v1", step_ms=10.0).start()
    yield srv
    srv.stop()


@pytest.fixture
def make_client():
    envs = []

    def make(address, **kwargs):
        if isinstance(address, str):
            env = gym.make("fleetgym/Remote-v0", address=address, **kwargs)
        else:
            env = gym.make(address, **kwargs)  # an EnvSpec
        envs.append(env)
        return env

    yield make
    for env in envs:
        env.close()


def _wait_for(pred, timeout=10.0):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if pred():
            return True
        time.sleep(0.02)
    return False


@pytest.mark.timeout(120)
def test_gymnasium_check_env(server, make_client):
    from gymnasium.utils.env_checker import check_env

    env = make_client(_addr(server))
    check_env(env.unwrapped, skip_render_check=True)


@pytest.mark.timeout(120)
@pytest.mark.parametrize("transport", ["udp", "tcp"])
def test_trajectory_is_the_bare_envs_under_the_applied_actions(server, make_client, transport):
    env = make_client(_addr(server), transport=transport)
    assert env.observation_space == gym.make("CartPole-v1").observation_space
    obs, info = env.reset(seed=3)
    bare = gym.make("CartPole-v1")
    bare_obs, _ = bare.reset(seed=3)
    np.testing.assert_array_equal(obs, bare_obs)
    truth = [bare_obs]
    for t in range(30):
        obs, reward, terminated, truncated, info = env.step(t % 2)
        assert tuple(k for k in info if k in STEP_INFO_KEYS) == STEP_INFO_KEYS
        # The env received what info says it applied: the bare env replays it exactly.
        bare_obs, bare_r, bare_term, _, _ = bare.step(int(info["applied_action"]))
        truth.append(bare_obs)
        np.testing.assert_array_equal(info["true_obs"], bare_obs)
        assert (reward, terminated) == (bare_r, bare_term)
        # The agent sees the true state of the tick its observation was emitted at.
        np.testing.assert_array_equal(obs, truth[t + 1 - info["obs_age_steps"]])
        assert info["action_age_steps"] >= 0 and info["obs_age_steps"] >= 0
        if terminated:
            break


@pytest.mark.timeout(120)
def test_perfect_profile_is_mostly_on_time(make_client):
    srv = RemoteEnvServer("CartPole-v1", step_ms=50.0).start()  # 25 ms per direction
    env = make_client(_addr(srv))
    env.reset(seed=0)
    ages = []
    for _ in range(20):
        _, _, term, trunc, info = env.step(1)
        ages.append(info["obs_age_steps"] + info["action_age_steps"])
        if term or trunc:
            env.reset()
    srv.stop()
    # On loopback with no profile a packet misses a 25 ms share only under a scheduler stall.
    assert np.median(ages) == 0


@pytest.mark.timeout(120)
def test_profile_on_the_socket_loses_and_delays(make_client):
    srv = RemoteEnvServer("CartPole-v1", step_ms=10.0, profile="wifi-degraded").start()
    try:
        env = make_client(_addr(srv))
        env.reset(seed=1)
        infos = []
        for _ in range(60):
            _, _, term, trunc, info = env.step(0)
            infos.append(info)
            if term or trunc:
                env.reset()
        # 80 +- 40 ms at a 10 ms period: observations are several ticks old on average.
        assert np.mean([i["obs_age_steps"] for i in infos]) > 2
        assert any(i["action_held"] for i in infos)
        assert env.unwrapped.profile.name == "wifi-degraded"
    finally:
        srv.stop()


@pytest.mark.timeout(120)
def test_dead_server_gives_a_clear_error_not_a_hang(make_client):
    srv = RemoteEnvServer("CartPole-v1", step_ms=10.0).start()
    env = make_client(_addr(srv), timeout_s=2.0)
    env.reset(seed=0)
    srv.stop()
    with pytest.raises(RemoteEnvError, match="env server at"):
        for _ in range(5):
            env.step(0)
    with pytest.raises(RemoteEnvError):
        env.reset()


@pytest.mark.timeout(120)
def test_no_server_gives_a_clear_error():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with pytest.raises(RemoteEnvError, match="cannot connect"):
        gym.make("fleetgym/Remote-v0", address=f"127.0.0.1:{port}", timeout_s=1.0)


@pytest.mark.timeout(120)
def test_server_survives_a_client_vanishing_mid_episode(server, make_client):
    first = make_client(_addr(server)).unwrapped
    first.reset(seed=0)
    first.step(0)
    first._tcp.shutdown(socket.SHUT_RDWR)  # the client disappears without CLOSE
    first._closed = True
    assert _wait_for(lambda: server.stats()["sessions_open"] == 0)
    second = make_client(_addr(server))
    second.reset(seed=0)
    second.step(1)
    assert server.stats()["sessions_closed"] >= 1


@pytest.mark.timeout(120)
def test_bad_input_is_counted_and_others_keep_being_served(server, make_client):
    env = make_client(_addr(server))
    env.reset(seed=0)
    host, port = server.address
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as udp:
        udp.sendto(b"garbage", (host, port))
        udp.sendto(WireCodec().encode(MessageType.ACTION, 999, 0, {"ep": 0}), (host, port))
    with socket.create_connection((host, port), timeout=5) as bad:
        bad.sendall(b"\x00" * 64)  # not a frame: this session ends, the server goes on
        bad.settimeout(5)
        try:
            while bad.recv(4096):
                pass
        except OSError:
            pass
    assert _wait_for(
        lambda: (
            server.stats().get("udp_rejected", 0) == 1
            and server.stats().get("udp_unexpected", 0) == 1
            and server.stats().get("tcp_rejected", 0) == 1
        )
    )
    for _ in range(3):
        env.step(0)


@pytest.mark.timeout(120)
def test_env_errors_are_reported_and_the_session_continues(server, make_client):
    env = make_client(_addr(server)).unwrapped
    with pytest.raises(RemoteEnvError, match="refused TICK"):
        env._t = 0  # a TICK before any RESET on the server side
        env._episode = 5
        env.step(0)
    env.reset(seed=0)
    env.step(0)


def test_non_loopback_bind_requires_a_secret():
    with pytest.raises(ValueError, match="secret"):
        RemoteEnvServer("CartPole-v1", bind="0.0.0.0:0")
    with pytest.raises(ValueError, match="host:port"):
        RemoteEnvServer("CartPole-v1", bind="nonsense")


@pytest.mark.timeout(120)
def test_hmac_sessions(make_client, tmp_path):
    srv = RemoteEnvServer("CartPole-v1", step_ms=10.0, secret=SECRET).start()
    try:
        secret_file = tmp_path / "secret"
        secret_file.write_bytes(SECRET + b"\n")
        env = make_client(_addr(srv), secret_file=str(secret_file))
        env.reset(seed=0)
        env.step(0)
        with pytest.raises(RemoteEnvError):
            make_client(_addr(srv), timeout_s=1.0)  # no secret: dropped, counted
        with pytest.raises(RemoteEnvError):
            make_client(_addr(srv), secret=b"the-wrong-secret-but-long", timeout_s=1.0)
        assert srv.stats()["rejected_unauthenticated"] >= 2
        env.step(1)
    finally:
        srv.stop()


@pytest.mark.timeout(120)
def test_recorded_traces_replay_in_mode_2(make_client, tmp_path):
    srv = RemoteEnvServer(
        "CartPole-v1", step_ms=10.0, profile="wifi-normal", record_dir=str(tmp_path)
    ).start()
    try:
        env = make_client(_addr(srv), record_path=str(tmp_path / "up.csv"))
        env.reset(seed=0)
        for _ in range(40):
            *_, term, trunc, _ = env.step(1)
            if term or trunc:
                env.reset()
        time.sleep(0.3)
        env.close()
        assert _wait_for(lambda: (tmp_path / "session1-downlink.csv").exists())
    finally:
        srv.stop()
    for name in ("up.csv", "session1-downlink.csv"):
        trace = load_trace(tmp_path / name)
        assert len(trace) == 40
        ok = trace.delay_ms[np.isfinite(trace.delay_ms)]
        assert ok.min() > 0 and np.median(ok) > 10  # 30 +- 10 ms on the socket
        shim = gym.make(
            "fleetgym/NetShim-v0",
            env_id="CartPole-v1",
            profile=None,
            uplink=TraceChannel(trace),
            downlink=TraceChannel(trace),
        )
        shim.reset(seed=0)
        shim.step(0)


@pytest.mark.timeout(120)
def test_sb3_evaluate_policy(server, make_client):
    from stable_baselines3.common.evaluation import evaluate_policy

    class Constant:
        def predict(self, obs, state=None, episode_start=None, deterministic=True):
            return np.zeros(len(obs), dtype=np.int64), None

    env = make_client(_addr(server))
    mean, std = evaluate_policy(Constant(), env, n_eval_episodes=2)
    assert 5 <= mean <= 50


@pytest.mark.timeout(120)
def test_short_soak_four_clients(server):
    results, errors = {}, []

    def client(i: int) -> None:
        try:
            env = gym.make("fleetgym/Remote-v0", address=_addr(server))
            try:
                env.reset(seed=i)
                n = 0
                for _ in range(50):
                    *_, term, trunc, _ = env.step(i % 2)
                    n += 1
                    if term or trunc:
                        env.reset()
                results[i] = n
            finally:
                env.close()
        except Exception as exc:  # reported below
            errors.append(exc)

    threads = [threading.Thread(target=client, args=(i,)) for i in range(4)]
    for th in threads:
        th.start()
    for th in threads:
        th.join(timeout=60)
    assert not errors and results == {i: 50 for i in range(4)}
    assert _wait_for(lambda: server.stats()["sessions_open"] == 0)
    assert server.stats()["sessions_opened"] == 4


@pytest.mark.timeout(120)
def test_sb3_check_env_spec_round_trip_and_vector_use(server, make_client):
    from stable_baselines3.common.env_checker import check_env as sb3_check_env

    env = make_client(_addr(server))
    sb3_check_env(env.unwrapped, warn=False)
    again = make_client(env.spec)  # gym.make(env.spec) rebuilds the same client
    assert again.unwrapped.session != env.unwrapped.session
    vec = gym.make_vec(
        "fleetgym/Remote-v0", num_envs=2, vectorization_mode="sync", address=_addr(server)
    )
    try:
        obs, _ = vec.reset(seed=[0, 1])
        obs2, *_ = vec.step(np.array([0, 1]))
        assert obs.shape == obs2.shape == (2, 4)
    finally:
        vec.close()


def _malformed_datagrams(session: int) -> dict[str, bytes]:
    """One datagram of every class the decoder rejects, plus valid frames that fit nothing."""
    from fleetgym.wrappers.remote.wire import HEADER

    codec = WireCodec()
    good = codec.encode(MessageType.ACTION, session, 1, {"ep": 0}, [np.asarray(1, np.int64)])

    def frame(payload: bytes, mtype: int = int(MessageType.ACTION), flags: int = 0) -> bytes:
        return HEADER.pack(b"FGRE", 1, mtype, flags, session, 2, 0, 0, len(payload)) + payload

    def array(code: int, shape: tuple[int, ...], data: bytes = b"") -> bytes:
        dims = struct.pack(f"!{len(shape)}I", *shape)
        return struct.pack("!I", 2) + b"{}" + b"\x01" + bytes([code, len(shape)]) + dims + data

    return {
        "empty": b"",
        "short header": good[:20],
        "truncated payload": good[:-1],
        "trailing bytes": good + b"\x00",
        "bad magic": b"XXXX" + good[4:],
        "other version": good[:4] + bytes([9]) + good[5:],
        "unknown type": good[:5] + bytes([250]) + good[6:],
        "unknown flags": good[:6] + struct.pack("!H", 6) + good[8:],
        "oversized length": good[:36] + struct.pack("!I", 2**31) + good[40:],
        "a tag without a secret": frame(good[HEADER.size :] + b"t" * 32, flags=1),
        "meta not JSON": frame(struct.pack("!I", 3) + b"{x}" + b"\x00"),
        "meta not an object": frame(struct.pack("!I", 3) + b"[1]" + b"\x00"),
        "meta NaN": frame(struct.pack("!I", 3) + b"NaN" + b"\x00"),
        "meta_len past the end": frame(struct.pack("!I", 99) + b"{}"),
        "too many arrays": frame(struct.pack("!I", 2) + b"{}" + bytes([200])),
        "unknown dtype": frame(array(77, (1,), b"\x00")),
        "rank above the limit": frame(array(10, (1,) * 9, b"\x00" * 4)),
        "array cut short": frame(array(10, (2**30,))),
        "zero-size beside huge dims": frame(array(10, (0, 2**32 - 1, 2**32 - 1))),
        "bool byte 7": frame(array(0, (1,), b"\x07")),
        "random bytes": bytes(range(256)) * 4,
        "an action for no session": codec.encode(MessageType.ACTION, 99_999, 0, {"ep": 0}),
        "an action of the wrong shape": codec.encode(
            MessageType.ACTION, session, 3, {"ep": 0}, [np.zeros((50, 50), np.float64)]
        ),
        "an action with odd meta": codec.encode(
            MessageType.ACTION, session, 4, {"ep": [1, {"x": None}]}, [np.asarray(1, np.int64)]
        ),
        "an observation sent to the server": codec.encode(MessageType.OBS, session, 5, {}),
    }


@pytest.mark.timeout(120)
def test_every_malformed_datagram_leaves_the_server_serving(server, make_client):
    """No datagram stops the server's UDP thread: each is counted and dropped, and sessions
    (the one that was open, and a new one) go on receiving their actions."""
    env = make_client(_addr(server))
    env.reset(seed=0)
    session = env.unwrapped.session
    host, port = server.address
    bad = _malformed_datagrams(session)
    undecodable = len(bad) - 4  # the last four decode: they fit no session, or not its env
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as udp:
        for data in bad.values():
            udp.sendto(data, (host, port))  # from a stranger's address
            env.unwrapped._udp.send(data)  # and from the session's own socket
    assert _wait_for(lambda: server.stats().get("udp_rejected", 0) == 2 * undecodable)
    assert server.stats().get("udp_errors", 0) == 0
    udp_threads = [t for t in server._threads if t.name.endswith("udp")]
    assert udp_threads and all(t.is_alive() for t in udp_threads)
    for env_ in (env, make_client(_addr(server))):
        if env_ is not env:
            env_.reset(seed=1)
        applied = []
        for t in range(12):
            _, _, terminated, truncated, info = env_.step(t % 2)
            applied.append(info["applied_action"])
            if terminated or truncated:
                env_.reset()
        # Actions still arrive over UDP: the env applied both values, not only the start one.
        assert set(applied) == {0, 1}
