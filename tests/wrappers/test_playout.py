"""Tests of scheduled actions: the playout buffer at the env side (fleetgym.wrappers.playout),
the agent side's chunks (fleetgym.wrappers.chunking) and the choice of D and k."""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np
import pytest

import fleetgym  # noqa: F401  (registers fleetgym/NetShim-v0)
from fleetgym.errors import InvalidActionError, UnsupportedSpaceError
from fleetgym.wrappers import (
    ActionPacket,
    GaussianChannel,
    GilbertElliottChannel,
    NetworkProfile,
    NetworkShimWrapper,
    PendulumDynamics,
    Playout,
    Schedule,
    ScheduledChunks,
    choose_schedule,
)
from fleetgym.wrappers.channels import FixedDelay
from fleetgym.wrappers.playout import PlayoutBuffer

STEP_MS = 20.0


def shim(down_ticks: int = 0, up_ticks: int = 0, env_id: str = "CartPole-v1", **kwargs: Any):
    # Under the loop a delay of n whole periods is used exactly n ticks late.
    playout = kwargs.pop("playout", Playout())
    return NetworkShimWrapper(
        gym.make(env_id),
        uplink=FixedDelay(up_ticks * STEP_MS),
        downlink=kwargs.pop("downlink", FixedDelay(down_ticks * STEP_MS)),
        step_ms=STEP_MS,
        info="full",
        playout=playout,
        **kwargs,
    )


def controller(obs: Any) -> int:
    """A hand-made CartPole controller (holds the pole for 500 steps without a network)."""
    return int(obs[2] + 0.5 * obs[3] + 0.05 * obs[1] > 0)


# -- the packet and the rules ------------------------------------------------------------
def test_packet_validates_its_fields():
    assert len(ActionPacket(0, [1])) == 1
    with pytest.raises(ValueError, match="tick"):
        ActionPacket(-1, [1])
    with pytest.raises(TypeError, match="tick"):
        ActionPacket(1.5, [1])  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="tick"):
        ActionPacket(True, [1])
    with pytest.raises(ValueError, match="at least one"):
        ActionPacket(3, [])
    with pytest.raises(TypeError, match="sequence"):
        ActionPacket(3, 1)


def test_playout_rules_are_checked():
    with pytest.raises(ValueError, match="start"):
        Playout(start="push")
    with pytest.raises(ValueError, match="underrun"):
        Playout(underrun="guess")
    with pytest.raises(TypeError, match="fallback"):
        Playout(underrun="fallback")
    with pytest.raises(ValueError, match="max_ahead"):
        Playout(max_ahead=0)
    # A Discrete space has no neutral action: "safe" needs one named.
    with pytest.raises(ValueError, match="safe_action"):
        shim(1, playout=Playout(start="safe"))
    with pytest.raises(ValueError, match="safe_action"):
        shim(1, playout=Playout(underrun="safe", safe_action=5))
    with pytest.raises(TypeError, match="playout"):
        NetworkShimWrapper(gym.make("CartPole-v1"), "ethernet", playout="wait")  # type: ignore[arg-type]


def test_buffer_keeps_the_newest_packet_per_tick():
    buf = PlayoutBuffer()
    assert buf.receive(5, ActionPacket(8, ["a5", "b5", "c5"]), now=6) == 3
    assert buf.receive(4, ActionPacket(7, ["a4", "b4", "c4", "d4"]), now=6) == 4  # older, late
    assert buf.take(7) == (4, "a4")  # only the older one covers 7
    assert buf.take(8) == (5, "a5")  # the newer one wins where both cover
    assert buf.take(10) == (5, "c5")
    assert buf.receive(2, ActionPacket(3, ["x", "y"]), now=9) == 0  # all its ticks passed
    assert buf.late == 1
    assert buf.take(11) is None


def test_buffer_takes_packets_sent_out_of_order():
    buf = PlayoutBuffer()
    buf.receive(9, ActionPacket(10, ["n0", "n1"]), now=8)  # newer, short
    buf.receive(7, ActionPacket(9, list("abcdef")), now=8)  # older, longer: arrives later
    buf.receive(8, ActionPacket(10, ["m0"]), now=8)  # between the two, covered by 9's
    taken = [buf.take(t) for t in range(8, 16)]
    assert taken == [None, (7, "a"), (9, "n0"), (9, "n1"), (7, "d"), (7, "e"), (7, "f"), None]
    assert len(buf) == 0


@pytest.mark.parametrize("env_id", ["MountainCar-v0", "Pendulum-v1"])
@pytest.mark.parametrize("chunk", [1, 3])
def test_fifo_fast_path_matches_the_reference_path(env_id, chunk):
    """The FifoLink path (the default) and the ArrivalLink path (which copied observations
    take) apply the same action at every tick and report the same info on a lossy, jittery
    link."""
    lossy = NetworkProfile(
        "lossy-jitter",
        uplink=GaussianChannel(40.0, 25.0),
        downlink=GilbertElliottChannel(0.05, 0.3, 0.0, 0.8, mean_ms=60.0, std_ms=30.0),
    )

    def make(copy: bool) -> NetworkShimWrapper:
        env = gym.make(env_id, max_episode_steps=10_000)
        return NetworkShimWrapper(
            env, lossy, step_ms=STEP_MS, info="full", playout=Playout(), copy_observations=copy
        )

    rng = np.random.default_rng(1)
    box = env_id == "Pendulum-v1"
    plans = [
        (int(rng.integers(1, 5)), rng.uniform(-2, 2, (chunk, 1)).astype(np.float32))
        if box
        else (int(rng.integers(1, 5)), rng.integers(0, 3, chunk).tolist())
        for _ in range(400)
    ]
    keys = ("action_source", "obs_age_steps", "action_age_steps", "uplink_lost")
    keys += ("downlink_lost", "lost_packets", "action_holds")
    runs = []
    for copy in (False, True):
        env = make(copy)
        assert env._fifo_playout is not copy
        obs, _ = env.reset(seed=5)
        out = []
        for t, (d, acts) in enumerate(plans):
            obs, reward, term, trunc, info = env.step(ActionPacket(t + d, acts))
            out.append((obs.tolist(), float(reward), *(info[k] for k in keys)))
            out.append(np.asarray(info["applied_action"]).tolist())
            if term or trunc:
                break
        runs.append((out, env.network_stats()))
    assert runs[0] == runs[1]
    assert runs[0][1]["underruns"] > 0 and runs[0][1]["late_packets"] > 0


# -- the env side -------------------------------------------------------------------------
def test_waits_for_the_first_action_then_applies_each_at_its_tick():
    env = shim(down_ticks=2)
    obs0, _ = env.reset(seed=0)
    applied, rewards = [], []
    for t in range(12):
        obs, reward, term, trunc, info = env.step(ActionPacket(t + 3, [t % 2]))
        applied.append(
            info["action_source"]
            if info["action_source"] == "wait"
            else int(info["applied_action"])
        )
        rewards.append(reward)
        if t < 3:  # physics paused: the same state, reward 0
            np.testing.assert_array_equal(info["true_obs"], obs0)
    # Packet t (stamped t + 3, arriving 2 ticks late) applies at tick t + 3 exactly.
    assert applied == ["wait"] * 3 + [t % 2 for t in range(9)]
    assert rewards[:3] == [0.0] * 3 and rewards[3:] == [1.0] * 9
    assert env.network_stats()["wait_ticks"] == 3
    assert env.network_stats()["underruns"] == 0


def test_a_jittery_link_becomes_a_constant_delay():
    # Delays of 0-3 ticks, never later than D = 4: every action applies at t + D.
    jitter = GaussianChannel(mean_ms=30.0, std_ms=12.0)
    env = NetworkShimWrapper(
        gym.make("CartPole-v1", max_episode_steps=10_000),
        uplink=jitter,
        downlink=GaussianChannel(30.0, 8.0),
        step_ms=STEP_MS,
        playout=Playout(),
        info="full",
    )
    env.reset(seed=3)
    sent = np.random.default_rng(0).integers(2, size=300)
    got = []
    for t in range(300):
        _, _, term, trunc, info = env.step(ActionPacket(t + 4, [int(sent[t])]))
        got.append(info["applied_action"])
        if term:
            break
    n = len(got)
    assert n > 20
    assert [int(a) for a in got[4:]] == [int(a) for a in sent[: n - 4]]


def test_chunks_cover_lost_packets_and_gaps_follow_the_rule():
    env = shim(down_ticks=0, env_id="Pendulum-v1")  # Pendulum: no episode end to hit
    env.reset(seed=0)
    # Packets at ticks 0..4 cover ticks 1..10 (chunks of 6); then every packet is stamped
    # for tick 20: ticks 5..10 come from packet 4's chunk, 11..19 from the underrun rule.
    one = np.ones((6, 1), np.float32)
    for t in range(5):
        env.step(ActionPacket(t + 1, one * t))
    sources, applied = [], []
    for _ in range(5, 20):
        _, _, _, _, info = env.step(ActionPacket(20, one[:1]))
        sources.append(info["action_source"])
        applied.append(float(info["applied_action"][0]))
    assert sources == ["packet"] * 6 + ["hold"] * 9
    assert applied == [4.0] * 15  # packet 4's plan, then held
    assert env.network_stats()["underruns"] == 9


@pytest.mark.parametrize("rule", ["safe", "fallback"])
def test_underrun_rules(rule):
    seen: list[Any] = []

    def fallback(obs: Any) -> int:
        seen.append(obs)
        return 0

    env = shim(0, playout=Playout(underrun=rule, safe_action=0, fallback=fallback))
    env.reset(seed=0)
    env.step(ActionPacket(0, [1, 1]))
    infos = [env.step(ActionPacket(10, [1]))[-1] for _ in range(4)]
    assert [i["action_source"] for i in infos] == ["packet", rule, rule, rule]
    assert [int(i["applied_action"]) for i in infos] == [1, 0, 0, 0]
    if rule == "fallback":  # the env side's policy sees the env's own current state
        assert len(seen) == 3
        np.testing.assert_array_equal(seen[-1], infos[-2]["true_obs"])


def test_safe_start_applies_the_safe_action():
    env = shim(0, env_id="Pendulum-v1", playout=Playout(start="safe"))
    env.reset(seed=0)
    _, reward, _, _, info = env.step(ActionPacket(2, np.ones((1, 1), np.float32)))
    assert info["action_source"] == "start"
    np.testing.assert_array_equal(info["applied_action"], [0.0])
    assert reward != 0.0  # the env stepped


def test_a_dead_downlink_truncates_the_wait():
    env = shim(0, downlink=GaussianChannel(20.0, 0.0, loss=0.99), playout=Playout(max_wait=5))
    env.reset(seed=1)
    for t in range(10):
        _, _, term, trunc, info = env.step(ActionPacket(t, [1]))
        if trunc:
            break
    assert trunc and info["playout_timeout"] and t == 4


@pytest.mark.parametrize(
    ("packet", "match"),
    [
        (1, "ActionPacket"),
        (ActionPacket(0, [1]), "not in the past"),  # sent at tick 1: tick 0 has passed
        (ActionPacket(10_000, [1]), "max_ahead"),
        (ActionPacket(3, [1] * 300), "max_chunk"),
        (ActionPacket(3, [1, 2]), "Discrete"),
    ],
)
def test_bad_packets_are_typed_errors(packet, match):
    env = shim(1)
    env.reset(seed=0)
    env.step(ActionPacket(2, [1]))
    with pytest.raises(InvalidActionError, match=match):
        env.step(packet)
    # The env keeps working after a refused packet.
    env.step(ActionPacket(3, [0]))


def test_nan_and_wrong_shape_box_actions_are_refused():
    env = shim(1, env_id="Pendulum-v1")
    env.reset(seed=0)
    with pytest.raises(InvalidActionError):
        env.step(ActionPacket(2, np.full((2, 1), np.nan, np.float32)))
    with pytest.raises(InvalidActionError):
        env.step(ActionPacket(2, np.zeros((2, 3), np.float32)))


def test_same_seed_same_schedule_and_gym_make():
    def run(env: gym.Env) -> list[Any]:
        env.reset(seed=7)
        out = []
        for t in range(60):
            _, _, term, trunc, info = env.step(ActionPacket(t + 3, [t % 2, 1 - t % 2]))
            out.append((info["action_source"], info["obs_age_steps"], info["action_age_steps"]))
            if term or trunc:
                break
        return out

    made = gym.make(
        "fleetgym/NetShim-v0", env_id="CartPole-v1", profile="wifi-degraded", playout=Playout()
    )
    direct = NetworkShimWrapper(gym.make("CartPole-v1"), "wifi-degraded", playout=Playout())
    assert run(made) == run(direct) == run(made)


# -- the agent side -----------------------------------------------------------------------
def test_prediction_is_exact_under_a_constant_delay():
    env = ScheduledChunks(shim(down_ticks=2, up_ticks=3), "true-dynamics", delay=3)
    obs, _ = env.reset(seed=0)
    predicted = {3: obs}
    truth = {}
    for t in range(40):
        obs, _, term, _, info = env.step(controller(obs))
        predicted[t + 1 + 3] = obs
        truth[t + 1] = info["true_obs"]
        # From o_j through ticks j .. t + D, less the ticks the env waited.
        assert info["predicted_steps"] == (6 if t >= 5 else t + 1)
        if term:
            break
    common = [k for k in predicted if k in truth and k > 3]
    assert len(common) > 30
    for k in common:  # float32 rounding of the delivered observation only
        np.testing.assert_allclose(predicted[k], truth[k], atol=1e-4)


def test_chunks_hold_cartpole_over_a_lossy_jittery_link():
    sat = GilbertElliottChannel(p_good_to_bad=0.01, p_bad_to_good=0.2, mean_ms=75.0, std_ms=10.0)
    profile = NetworkProfile("sat-test", sat, sat)
    schedule = choose_schedule(profile, STEP_MS, ticks=20_000)
    returns = {}
    for chunk in (1, schedule.chunk):
        env = ScheduledChunks(
            NetworkShimWrapper(gym.make("CartPole-v1"), profile, playout=Playout()),
            "true-dynamics",
            delay=schedule.delay,
            chunk=chunk,
            policy=controller,
        )
        total = 0.0
        for episode in range(3):
            obs, _ = env.reset(seed=episode)
            done = False
            while not done:
                obs, reward, term, trunc, _ = env.step(controller(obs))
                total += float(reward)
                done = term or trunc
        returns[chunk] = total / 3
    # Chunks cover the loss bursts; single actions leave them to the hold rule.
    assert schedule.chunk > 1
    assert returns[schedule.chunk] > returns[1]
    assert returns[schedule.chunk] >= 400


def test_agent_side_errors():
    with pytest.raises(TypeError, match="playout"):
        ScheduledChunks(
            NetworkShimWrapper(gym.make("CartPole-v1"), "ethernet"), "true-dynamics", delay=2
        )
    with pytest.raises(ValueError, match="delay"):
        ScheduledChunks(shim(1), "true-dynamics", delay=0)
    with pytest.raises(ValueError, match="chunk"):
        ScheduledChunks(shim(1), "true-dynamics", delay=2, chunk=0, policy=controller)
    with pytest.raises(ValueError, match="policy"):
        ScheduledChunks(shim(1), "true-dynamics", delay=2, chunk=4)
    with pytest.raises(TypeError, match="predictor"):
        ScheduledChunks(shim(1), 3, delay=2)  # type: ignore[arg-type]
    with pytest.raises(UnsupportedSpaceError):
        ScheduledChunks(shim(1, env_id="FrozenLake-v1"), "true-dynamics", delay=2)


def test_a_schedule_object_sets_delay_and_chunk():
    env = ScheduledChunks(shim(1), "true-dynamics", delay=Schedule(4, 3), policy=controller)
    assert (env.delay, env.chunk) == (4, 3)


# -- D and k ------------------------------------------------------------------------------
def test_choose_schedule_on_known_links():
    fixed = NetworkProfile("fixed", FixedDelay(50.0), FixedDelay(50.0))
    s = choose_schedule(fixed, STEP_MS, ticks=1000)
    # 50 ms + the loop's half period = 3 periods: usable 3 ticks late, no gaps.
    assert (s.delay, s.chunk, s.late_share, s.underrun_share) == (3, 1, 0.0, 0.0)
    bursty = GilbertElliottChannel(p_good_to_bad=0.02, p_bad_to_good=0.25, mean_ms=50.0)
    b = choose_schedule(NetworkProfile("b", bursty, bursty), STEP_MS, ticks=50_000)
    assert b.delay == 3 and b.chunk > 8  # mean burst 4: rare long ones need a long chunk
    assert b.underrun_share <= 1e-5 or b.chunk == 64
    for bad in ({"quantile": 0.1}, {"max_chunk": 0}, {"ticks": 5}):
        with pytest.raises(ValueError):
            choose_schedule(fixed, STEP_MS, **bad)


# -- Pendulum's equations -----------------------------------------------------------------
def test_pendulum_dynamics_match_the_env():
    env = gym.make("Pendulum-v1")
    model = PendulumDynamics.from_env(env)
    obs, _ = env.reset(seed=0)
    actions = np.random.default_rng(0).uniform(-3, 3, size=(30, 1)).astype(np.float32)
    for a in actions:
        nxt, *_ = env.step(a)
        np.testing.assert_allclose(model(obs[None], a[None, None], None)[0], nxt, atol=1e-5)
        obs = nxt
