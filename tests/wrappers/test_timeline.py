"""One timeline (fleetgym.wrappers.timeline): the loop's offsets, ``perfect`` still the bare
env under it, and one freshest-packet rule for the shim (Mode 2) and the socket (Mode 3)."""

from __future__ import annotations

import math

import gymnasium as gym
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import fleetgym  # noqa: F401  (registers the IDs)
from fleetgym.traces import TraceData
from fleetgym.wrappers import NetworkShimWrapper, TraceChannel
from fleetgym.wrappers.links import FifoLink, PacketLink
from fleetgym.wrappers.remote.conditions import FreshestBox
from fleetgym.wrappers.remote.wire import Frame, MessageType
from fleetgym.wrappers.timeline import TIMINGS, LoopTiming, check_uplink_share, freshest
from fleetgym.wrappers.vector import NetworkShimVectorWrapper

P = 20.0


@pytest.mark.parametrize("share", [0.5, 0.25, 0.9])
def test_the_loop_shares_one_period_for_the_round_trip(share):
    loop = LoopTiming("loop", share)
    assert loop.uplink_offset + loop.downlink_offset == pytest.approx(1.0)
    up_ms, down_ms = loop.budgets_ms(P)
    assert up_ms == pytest.approx(share * P) and down_ms == pytest.approx((1 - share) * P)
    assert loop.env_step_ns(1_000_000, 100_000) == 1_000_000 - int(share * 100_000)
    per = LoopTiming("per-direction", share)
    assert (per.uplink_offset, per.downlink_offset) == (0.0, 0.0)
    assert per.budgets_ms(P) == (P, P)


@pytest.mark.parametrize("bad", [0.0, 1.0, -0.5, 1.5, math.nan, math.inf])
def test_uplink_share_outside_the_open_interval_is_refused(bad):
    with pytest.raises(ValueError, match=r"uplink_share: expected a number in \(0, 1\)"):
        check_uplink_share(bad)
    with pytest.raises(ValueError, match="uplink_share"):
        NetworkShimWrapper(gym.make("CartPole-v1"), "wifi-normal", uplink_share=bad)
    with pytest.raises(ValueError, match="uplink_share"):
        gym.make("fleetgym/NetShim-v0", env_id="CartPole-v1", uplink_share=bad)


@pytest.mark.parametrize("bad", ["0.5", True, None, [0.5]])
def test_uplink_share_of_the_wrong_type_is_refused(bad):
    with pytest.raises(TypeError, match="uplink_share"):
        NetworkShimWrapper(gym.make("CartPole-v1"), "wifi-normal", uplink_share=bad)


def test_an_unknown_timing_is_refused():
    with pytest.raises(ValueError, match="timing: expected one of"):
        NetworkShimWrapper(gym.make("CartPole-v1"), "wifi-normal", timing="whole-step")


@pytest.mark.parametrize("env_id", ["CartPole-v1", "Pendulum-v1"])
@pytest.mark.parametrize("share", [0.5, 0.01, 0.99])
def test_perfect_is_bit_identical_to_the_bare_env_under_the_loop(env_id, share):
    bare = gym.make(env_id)
    shim = NetworkShimWrapper(gym.make(env_id), "perfect", uplink_share=share, info="full")
    assert shim.timing.timing == "loop"
    obs_b, _ = bare.reset(seed=4)
    obs_s, info = shim.reset(seed=4)
    assert np.array_equal(obs_b, obs_s)
    bare.action_space.seed(1)
    for _ in range(300):
        action = bare.action_space.sample()
        out_b, out_s = bare.step(action), shim.step(action)
        assert np.array_equal(out_b[0], out_s[0])
        assert out_b[1:4] == out_s[1:4]
        info = out_s[4]
        assert info["obs_age_steps"] == 0 and info["action_age_steps"] == 0
        assert not info["action_held"]
        if out_b[2] or out_b[3]:
            obs_b, _ = bare.reset(seed=5)
            obs_s, _ = shim.reset(seed=5)
            assert np.array_equal(obs_b, obs_s)


def test_perfect_vector_shim_is_the_bare_vector_env_under_the_loop():
    bare = gym.make_vec("CartPole-v1", num_envs=4, vectorization_mode="sync")
    shim = NetworkShimVectorWrapper(
        gym.make_vec("CartPole-v1", num_envs=4, vectorization_mode="sync"), "perfect"
    )
    a, _ = bare.reset(seed=0)
    b, _ = shim.reset(seed=0)
    assert np.array_equal(a, b)
    rng = np.random.default_rng(0)
    for _ in range(200):
        actions = rng.integers(0, 2, 4)
        for x, y in zip(bare.step(actions)[:4], shim.step(actions)[:4], strict=True):
            assert np.array_equal(x, y)


def test_the_default_is_the_loop_everywhere():
    env = gym.make("fleetgym/NetShim-v0", env_id="CartPole-v1", profile="wifi-normal")
    assert env.unwrapped is not env and env.get_wrapper_attr("timing") == LoopTiming()
    vec = NetworkShimVectorWrapper(
        gym.make_vec("CartPole-v1", num_envs=2, vectorization_mode="sync"), "wifi-normal"
    )
    assert vec.timing == LoopTiming()


def _frame(seq: int, t_recv: int) -> Frame:
    return Frame(MessageType.OBS, 1, seq, 0, 0, {"ep": 0}, [], t_recv)


@settings(max_examples=120, deadline=None)
@given(
    st.lists(
        st.one_of(st.floats(0.0, 6.0, allow_nan=False), st.just(math.inf)),
        min_size=1,
        max_size=40,
    )
)
def test_the_shim_and_the_socket_receiver_pick_the_same_packet(delays):
    """The same packets (delays in periods, inf = lost), once through the shim's link
    ("latest": packets independent, as datagrams are) and once through Mode 3's receiver
    box at each tick's deadline: the same freshest packet at every tick, the same
    stale and reordered counts."""
    n = len(delays)
    trace = TraceData(np.arange(n) * P, np.asarray(delays) * P, n * P, "pattern")
    link = PacketLink(
        TraceChannel(trace, random_start=False).sampler(np.random.default_rng(0), P),
        P,
        block=n,
        fifo=False,
    )
    box = FreshestBox()
    box.reset(0, -1)
    # Mode 3 in integer time: tick t's deadline is at (t + 1) * SCALE - 1 (strictly before
    # the next tick), packet i arrives at (i + d_i) * SCALE.
    scale = 1_000_000
    # (floor, not round: a delay a hair under a whole number of periods, 1.9999999999999991,
    # arrives before that tick's deadline in the shim's float time too)
    arrivals = sorted(
        (math.floor((i + d) * scale), i) for i, d in enumerate(delays) if math.isfinite(d)
    )
    filed = 0
    for t in range(n + 8):
        link_code = link.tick(t, t) if t < n else link_code_after(link, t)
        while filed < len(arrivals) and arrivals[filed][0] < (t + 1) * scale:
            box.put(_frame(arrivals[filed][1], arrivals[filed][0]))
            filed += 1
        got = box.take((t + 1) * scale - 1)
        assert (got.seq if got is not None else None) == (
            link.best_idx if link_code >= 2 else None
        ), t
        assert (box.stale, box.reordered, box.best_seq) == (
            link.stale,
            link.reordered,
            link.best_idx,
        )


def link_code_after(link: PacketLink, t: int) -> int:
    """Process tick ``t`` of a link whose packets were all sent (no new packet)."""
    if link.next_due >= t + 1:
        return 0
    return 2 if link._deliver(t + 1) else 0


#: Delays (in periods) where floating point decides the tick: a hair under a whole number
#: (i + d rounds up to the next tick from some i on), and the smallest ones.
_TRICKY = [1.0 - 2.0**-30, 2.0 - 2.0**-50, 3.0 - 2.0**-21, 2.0 - 2.0**-19, 2.0**-53, 0.5, 1.0]


@settings(max_examples=150, deadline=None)
@given(
    delays=st.lists(
        st.one_of(
            st.floats(0.0, 8.0, allow_nan=False), st.sampled_from(_TRICKY), st.just(math.inf)
        ),
        min_size=1,
        max_size=30,
    ),
    offset=st.sampled_from([0.0, 0.5, 0.25]),
    block=st.integers(1, 9),
    restarts=st.sets(st.integers(1, 59), max_size=4),
    first=st.sampled_from([0, 1, 9, 2**30 - 25, 2**44 + 3]),
)
def test_the_fifo_link_is_the_packet_links_fifo_rule(delays, offset, block, restarts, first):
    """FifoLink (the scalar shim's fifo path: due ticks precomputed per block) against
    PacketLink's fifo rule in float time: the same code, freshest packet and counters at
    every tick, across block refills and episode restarts (the draws go on, the episode's
    ticks start again at ``first``)."""
    n = len(delays)
    trace = TraceData(np.arange(n) * P, np.asarray(delays) * P, n * P, "pattern")
    channel = TraceChannel(trace, random_start=False)
    ref = PacketLink(channel.sampler(np.random.default_rng(0), P), P, block, True, offset)
    fast = FifoLink(channel.sampler(np.random.default_rng(0), P), P, block, offset)
    k, idx = block, first
    for step in range(60):
        if step in restarts:
            idx = first
            ref.clear()
            ref.best_idx, ref.best_payload = idx - 1, "start"
            fast.start(idx - 1, "start")
        if k == block:
            fast.refill(idx)
            k = 0
        code = fast.tick(k, idx, ("packet", idx))
        k += 1
        assert code == ref.tick(idx, ("packet", idx)), (step, idx)
        assert (fast.best_idx, fast.best_payload) == (ref.best_idx, ref.best_payload)
        assert (fast.stale, fast.lost, fast.reordered) == (ref.stale, ref.lost, ref.reordered)
        idx += 1


def test_freshest_rule_counts():
    assert freshest([], 3) == (-1, 0, 0)
    assert freshest([1, 2], 3) == (-1, 2, 2)  # both older than the freshest used: stale
    assert freshest([4, 6, 5], 3) == (1, 2, 0)
    assert TIMINGS == ("loop", "per-direction")


def test_a_profile_file_works_as_a_path_too(tmp_path):
    from fleetgym.wrappers.profiles import get_profile, save_profile_file

    path = save_profile_file(get_profile("wifi-normal"), tmp_path / "lab.json")
    for profile in (path, str(path)):
        shim = NetworkShimWrapper(gym.make("CartPole-v1"), profile)
        assert shim.reset(seed=0)[1]["profile"] == "wifi-normal"  # the name in the file
