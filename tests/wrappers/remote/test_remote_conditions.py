"""Socket-level network conditions (DelayedSender), the freshest-packet box, the recorder,
the space codec and the netem mapping."""

from __future__ import annotations

import math
import threading
import time

import numpy as np
import pytest
from gymnasium import spaces

from fleetgym.errors import ProtocolError, UnsupportedSpaceError
from fleetgym.traces import load_trace
from fleetgym.wrappers.channels import FixedDelay, GaussianChannel, GilbertElliottChannel
from fleetgym.wrappers.profiles import get_profile
from fleetgym.wrappers.remote.conditions import DelayedSender, FreshestBox
from fleetgym.wrappers.remote.netem import netem_available, netem_command
from fleetgym.wrappers.remote.parity import channel_reference, delay_summary
from fleetgym.wrappers.remote.recorder import PacketRecorder
from fleetgym.wrappers.remote.spaces import build_space, describe_space, from_wire, to_wire
from fleetgym.wrappers.remote.wire import Frame, MessageType
from fleetgym.wrappers.shim_config import ShimStreams


class _Collect:
    def __init__(self) -> None:
        self.items: list[tuple[bytes, int]] = []
        self.done = threading.Event()
        self.want = 0

    def __call__(self, data: bytes) -> None:
        self.items.append((data, time.time_ns()))
        if len(self.items) >= self.want:
            self.done.set()


@pytest.mark.timeout(120)
def test_sender_draws_the_shims_schedule_and_drops_its_losses():
    channel = GaussianChannel(3.0, 1.0, 0.3)
    sink = _Collect()
    sender = DelayedSender(sink)
    sender.set_sampler(channel.sampler(np.random.default_rng(5)))
    expected = channel.sampler(np.random.default_rng(5)).next(512)[:40]
    sink.want = int(np.isfinite(expected).sum())
    t0 = time.time_ns()
    lost = [sender.submit(i, lambda tw, i=i: bytes([i]), t0 + i * 1_000_000) for i in range(40)]
    assert lost == list(np.isinf(expected))
    assert sink.done.wait(10)
    sender.close()
    assert [d[0] for d, _ in sink.items] == [i for i in range(40) if np.isfinite(expected[i])]
    assert sender.lost == int(np.isinf(expected).sum())
    # Each packet left no earlier than its send time plus its delay (FIFO may add more).
    for data, when in sink.items:
        i = data[0]
        assert when >= t0 + i * 1_000_000 + int(expected[i] * 1e6)


@pytest.mark.timeout(120)
def test_sender_fifo_and_latest_orders():
    for fifo, want in ((True, [0, 1]), (False, [1, 0])):
        sink = _Collect()
        sink.want = 2
        sender = DelayedSender(sink, fifo=fifo)
        sampler = FixedDelay(0.0).sampler(np.random.default_rng(0))
        sender.set_sampler(sampler)
        sender._buf, sender._pos = [30.0, 1.0] * 256, 0  # a slow packet then a fast one
        now = time.time_ns()
        sender.submit(0, lambda tw: b"\x00", now)
        sender.submit(1, lambda tw: b"\x01", now)
        assert sink.done.wait(10)
        sender.close()
        assert [d[0] for d, _ in sink.items] == want


def test_sender_without_sampler_sends_at_once_and_close_drops_held():
    sink = _Collect()
    sender = DelayedSender(sink)
    assert sender.submit(0, lambda tw: b"a", time.time_ns()) is False
    assert sink.items and sender.sent == 1
    sender.set_sampler(FixedDelay(10_000.0).sampler(np.random.default_rng(0)))
    sender.submit(1, lambda tw: b"b", time.time_ns())
    sender.close()
    assert len(sink.items) == 1 and sender.submit(2, lambda tw: b"c", 0) is True


def _frame(seq: int, t_recv: int, ep: int = 0) -> Frame:
    return Frame(MessageType.OBS, 1, seq, 0, 0, {"ep": ep}, [], t_recv)


def test_freshest_box_rule_and_counters():
    box = FreshestBox()
    box.reset(0, 0)
    for seq, t in ((9, 5), (2, 10), (1, 12), (5, 25), (3, 30)):  # in arrival order
        box.put(_frame(seq, t, ep=0 if seq != 9 else 1))  # seq 9: another episode, ignored
    assert box.take(9) is None  # nothing arrived by t=9
    got = box.take(26)
    assert got is not None and got.seq == 5 and box.stale == 2  # 2 and 1 never used
    # 1 came after 2 but by the same deadline: not reordered (the shim's definition)
    assert box.reordered == 0
    assert box.take(40) is None and box.stale == 3  # 3 arrived after the newer 5
    assert box.reordered == 1  # ... which had arrived by an earlier deadline
    assert box.best_seq == 5


def test_packet_recorder_writes_a_trace_the_loader_reads(tmp_path):
    rec = PacketRecorder("uplink")
    for i in range(10):
        rec.expect((0, i), i * 20_000_000)
        if i % 3:
            rec.arrived((0, i), i * 20_000_000 + 5, i * 20_000_000 + 5 + 7_000_000)
    assert rec.write(tmp_path / "t.csv") == 10
    trace = load_trace(tmp_path / "t.csv")
    assert trace.send_ms.tolist() == [i * 20.0 for i in range(10)] or trace.send_ms[1] > 19.9
    assert np.isinf(trace.delay_ms[[0, 3, 6, 9]]).all()
    assert np.allclose(trace.delay_ms[[1, 2, 4]], 7.0)
    assert math.isclose(trace.loss_rate, 0.4)


@pytest.mark.parametrize(
    "space",
    [
        spaces.Box(-1.0, 2.0, (2, 3)),
        spaces.Box(0, 255, (4,), dtype=np.uint8),
        spaces.Discrete(5, start=-2),
        spaces.MultiDiscrete([3, 4]),
        spaces.MultiBinary(3),
        spaces.MultiBinary([2, 2]),
    ],
)
def test_space_codec_round_trip(space):
    meta, arrays = describe_space(space)
    rebuilt = build_space(meta, arrays)
    assert rebuilt == space
    x = space.sample()
    back = from_wire(rebuilt, to_wire(space, x))
    assert rebuilt.contains(back) and np.array_equal(np.asarray(back), np.asarray(x))


def test_space_codec_rejections():
    with pytest.raises(UnsupportedSpaceError):
        describe_space(spaces.Dict({"a": spaces.Discrete(2)}))
    with pytest.raises(ProtocolError, match="supported"):
        build_space({"kind": "Graph"}, [])
    with pytest.raises(ProtocolError, match="Box"):
        build_space({"kind": "Box", "dtype": "object"}, [np.zeros(2), np.ones(2)])
    with pytest.raises(ProtocolError, match="shape"):
        from_wire(spaces.Box(0, 1, (2,)), np.zeros(3, np.float32))
    with pytest.raises(ProtocolError, match="0-d"):
        from_wire(spaces.Discrete(2), np.zeros(1, np.int64))


def test_same_seed_same_schedule_as_the_shim():
    """Client and server derive their samplers as the shim does: same seed, same delays."""
    profile = get_profile("wifi-degraded")
    _, up_a, down_a = ShimStreams(7).draw((profile,), 20.0)
    _, up_b, down_b = ShimStreams(7).draw((profile,), 20.0)
    assert np.array_equal(up_a.next(512), up_b.next(512))
    assert np.array_equal(down_a.next(512), down_b.next(512))


def test_channel_reference_and_summary():
    ref = channel_reference(FixedDelay(30.0, 0.5), 10_000, 20.0, seed=0)
    s = delay_summary(ref)
    assert abs(s["loss"] - 0.5) < 0.02 and s["p50_ms"] == 30.0
    jitter = channel_reference(GaussianChannel(30.0, 20.0), 10_000, 5.0, seed=0)
    assert np.all(np.diff(np.arange(10_000) * 5.0 + jitter) >= 0)  # FIFO keeps the order


def test_netem_command_mapping():
    assert netem_command(get_profile("wifi-degraded").uplink, "veth1") == (
        "tc qdisc replace dev veth1 root netem limit 100000 delay 80ms 40ms "
        "distribution normal loss 10%"
    )
    ge = GilbertElliottChannel(0.01, 0.25, 0.0, 0.5, mean_ms=5.0)
    assert "loss gemodel 1% 25% 50% 0%" in netem_command(ge)
    assert "delay" not in netem_command(get_profile("perfect").uplink)
    with pytest.raises(ValueError, match="channel"):
        netem_command(get_profile("trace-wifi-office").uplink)


_CLIENT = """
import sys, gymnasium as gym, fleetgym
env = gym.make("fleetgym/Remote-v0", address=sys.argv[1], profile="perfect",
               secret_file=sys.argv[2], record_path=sys.argv[3])
env.reset(seed=0)
for t in range(int(sys.argv[4])):
    *_, term, trunc, _ = env.step(t % 2)
    if term or trunc:
        env.reset()
import time; time.sleep(0.5); env.close()
"""


@pytest.mark.timeout(300)
def test_netem_parity_across_a_veth_pair(tmp_path):
    """Mode 3 across two network namespaces joined by a veth pair, the profile in netem:
    the observations' loss and delay quantiles match the shim's as on the socket."""
    import os
    import shutil
    import subprocess
    import sys

    ok, reason = netem_available()
    if not ok:
        pytest.skip(f"netem unavailable: {reason}")
    if os.geteuid() != 0 or shutil.which("ip") is None:
        pytest.skip("the veth harness needs root and iproute2's ip")
    profile = get_profile("wifi-normal")
    a, b = "fgtest_env", "fgtest_agent"

    def sh(*cmd: str) -> None:
        subprocess.run(cmd, check=True, capture_output=True, timeout=30)

    secret = tmp_path / "secret"
    secret.write_bytes(b"netem-parity-secret-0123456789")
    server = None
    try:
        sh("ip", "netns", "add", a)
        sh("ip", "netns", "add", b)
        sh("ip", "link", "add", "fgveth0", "type", "veth", "peer", "name", "fgveth1")
        sh("ip", "link", "set", "fgveth0", "netns", a)
        sh("ip", "link", "set", "fgveth1", "netns", b)
        for ns, dev, ip in ((a, "fgveth0", "10.231.0.1/24"), (b, "fgveth1", "10.231.0.2/24")):
            sh("ip", "-n", ns, "addr", "add", ip, "dev", dev)
            sh("ip", "-n", ns, "link", "set", dev, "up")
            sh("ip", "-n", ns, "link", "set", "lo", "up")
        sh("ip", "netns", "exec", a, *netem_command(profile.uplink, "fgveth0").split())
        sh("ip", "netns", "exec", b, *netem_command(profile.downlink, "fgveth1").split())
        port_file = tmp_path / "port"
        server = subprocess.Popen(
            [
                "ip",
                "netns",
                "exec",
                a,
                sys.executable,
                "-m",
                "fleetgym",
                "serve-env",
                "--env-id",
                "CartPole-v1",
                "--bind",
                "10.231.0.1:0",
                "--secret-file",
                str(secret),
                "--port-file",
                str(port_file),
            ]
        )
        end = time.monotonic() + 60
        while not (port_file.exists() and port_file.read_text().strip()):
            assert time.monotonic() < end and server.poll() is None
            time.sleep(0.2)
        address = f"10.231.0.1:{int(port_file.read_text())}"
        trace_file = tmp_path / "up.csv"
        subprocess.run(
            [
                "ip",
                "netns",
                "exec",
                b,
                sys.executable,
                "-c",
                _CLIENT,
                address,
                str(secret),
                str(trace_file),
                "3000",
            ],
            check=True,
            timeout=200,
        )
        got = delay_summary(np.asarray(load_trace(trace_file).delay_ms))
        want = delay_summary(channel_reference(profile.uplink, 200_000, 20.0, fifo=False))
        assert abs(got["loss"] - want["loss"]) <= 0.01
        for key in ("p10_ms", "p50_ms", "p90_ms", "p99_ms"):
            assert abs(got[key] - want[key]) <= max(2.0, 0.1 * want[key]), key
    finally:
        if server is not None:
            server.terminate()
            server.wait(timeout=20)
        for ns in (a, b):
            subprocess.run(["ip", "netns", "del", ns], capture_output=True, timeout=30)
