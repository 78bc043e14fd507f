"""Tests of fleetgym.wrappers.network_shim: the control-loop rules, exactly, and the gym contract."""

from __future__ import annotations

import math
import subprocess
import sys
import warnings

import gymnasium as gym
import numpy as np
import pytest
from gymnasium import spaces
from hypothesis import given, settings
from hypothesis import strategies as st
from shim_envs import BufferReuseEnv, CounterEnv, FullInfoShim, SpacesEnv

import fleetgym  # noqa: F401  (registers the IDs)
from fleetgym.errors import UnknownProfileError, UnsupportedSpaceError
from fleetgym.traces import TraceData
from fleetgym.wrappers import (
    FixedDelay,
    GaussianChannel,
    NetworkProfile,
    NetworkShimWrapper,
    TraceChannel,
    get_profile,
)

P = 20.0
#: Periods added to each (uplink, downlink) delay: the waits for the receiving clock's next
#: tick (fleetgym.wrappers.timeline; the agent's phase 0.5 for "loop").
OFFSETS = {"loop": (0.5, 0.5), "per-direction": (0.0, 0.0)}
TIMINGS = tuple(OFFSETS)


def pattern(delays: list[float]) -> TraceChannel:
    """A channel replaying ``delays`` (ms, inf = lost) for packets 0, 1, 2, ... cyclically."""
    n = len(delays)
    data = TraceData(np.arange(n) * P, np.asarray(delays, dtype=float), n * P, "pattern")
    return TraceChannel(data, random_start=False)


def run(env: NetworkShimWrapper, actions: list[int]) -> tuple[list[float], list[dict]]:
    obs, _ = env.reset(seed=0)
    seen, infos = [], []
    for a in actions:
        obs, _, _, _, info = env.step(a)
        seen.append(float(obs[0]))
        infos.append(info)
    return seen, infos


def arrival_ticks(
    delays: list[float], first_tick: int, n: int, fifo: bool, offset: float = 0.0
) -> list[float]:
    """Tick at which stream packets 0..n-1 (sent at first_tick + k) are usable, by the loop
    model's formula (docs/explanation/network-shim.md): floor(send + d / P + offset), FIFO-ordered."""
    out, last = [], -math.inf
    for k in range(n):
        d = delays[k % len(delays)]
        if math.isinf(d):
            out.append(math.inf)
            continue
        a = first_tick + k + d / P + offset
        if fifo:
            a = max(a, last)
            last = a
        out.append(math.floor(a))
    return out


def oracle(
    up: list[float], down: list[float], n: int, fifo: bool, start: int, timing: str = "loop"
):
    """Returned obs and applied action per step, straight from the loop model's definitions."""
    up_off, down_off = OFFSETS[timing]
    # o_0 is there at reset; o_j is emitted by the env's step j - 1 (tick j, offset up_off).
    up_arr = [0] + arrival_ticks(up, 1, n, fifo, up_off)
    down_arr = arrival_ticks(down, 0, n, fifo, down_off)  # a_i sent at tick i
    returned, applied = [], []
    for t in range(n):
        ok = [i for i in range(t + 1) if down_arr[i] <= t]
        applied.append(max(ok) if ok else start)
        returned.append(float(max(j for j in range(t + 2) if up_arr[j] <= t + 1)))
    return returned, applied, up_arr, down_arr


# -- exact loop rules on the counter env ----------------------------------------------


@pytest.mark.parametrize("timing", TIMINGS)
@pytest.mark.parametrize("delay_ms", [0.0, 5.0, 9.99, 10.0, 19.99, 20.0, 30.0, 45.0, 100.0])
def test_fixed_uplink_delay_returns_obs_from_t_minus_d(delay_ms, timing):
    k = math.floor(delay_ms / P + OFFSETS[timing][0])
    env = FullInfoShim(CounterEnv(), uplink=FixedDelay(delay_ms), step_ms=P, timing=timing)
    seen, infos = run(env, list(range(30)))
    for t, (value, info) in enumerate(zip(seen, infos, strict=True)):
        assert value == max(0, t + 1 - k)  # the obs emitted k ticks ago (o_0 before that)
        assert info["obs_age_steps"] == t + 1 - value
        assert info["obs_age_ms"] == pytest.approx(info["obs_age_steps"] * P)
        assert info["true_obs"][0] == t + 1
        assert not info["action_held"] and info["action_age_steps"] == 0


@pytest.mark.parametrize("timing", TIMINGS)
@pytest.mark.parametrize("delay_ms", [0.0, 9.0, 10.0, 19.0, 20.0, 50.0, 110.0])
def test_fixed_downlink_delay_applies_action_from_t_minus_d_else_start(delay_ms, timing):
    k = math.floor(delay_ms / P + OFFSETS[timing][1])
    base = CounterEnv()
    env = FullInfoShim(
        base, downlink=FixedDelay(delay_ms), step_ms=P, start_action=9999, timing=timing
    )
    _, infos = run(env, list(range(25)))
    expected = [t - k if t >= k else 9999 for t in range(25)]
    assert base.applied == expected
    assert [i["applied_action"] for i in infos] == expected
    assert [i["action_held"] for i in infos] == [t < k for t in range(25)]
    assert [i["action_age_steps"] for i in infos] == [min(k, t + 1) for t in range(25)]
    assert infos[-1]["action_holds"] == min(k, 25)


@pytest.mark.parametrize(("timing", "delay_ms"), [("loop", 20.0), ("per-direction", 30.0)])
def test_docstring_timeline(timing, delay_ms):
    """The class docstring's timeline: one period each way under "loop" (1.5 periods
    under "per-direction") makes both ages one tick."""
    base = CounterEnv()
    env = FullInfoShim(
        base,
        uplink=FixedDelay(delay_ms),
        downlink=FixedDelay(delay_ms),
        step_ms=P,
        start_action=7777,
        timing=timing,
    )
    seen, infos = run(env, [100, 101, 102, 103])
    assert base.applied == [7777, 100, 101, 102]
    assert seen == [0.0, 1.0, 2.0, 3.0]
    assert [i["obs_age_steps"] for i in infos] == [1, 1, 1, 1]


def test_default_start_action_is_the_zero_action_and_reset_obs_is_returned_as_is():
    base = CounterEnv()
    env = FullInfoShim(base, downlink=FixedDelay(45), step_ms=P)
    obs, info = env.reset(seed=3)
    assert obs[0] == 0.0 and info["obs_age_steps"] == 0 and info["profile"] == "custom"
    env.step(5)
    env.step(6)
    env.step(7)
    assert base.applied == [0, 0, 5]  # action 0 = Discrete's start until a_0 lands at tick 2


def test_losses_hold_the_last_obs_and_action():
    base = CounterEnv()
    lose_every_other = pattern([0.0, math.inf])
    env = FullInfoShim(base, uplink=lose_every_other, downlink=lose_every_other, step_ms=P)
    seen, infos = run(env, [10, 11, 12, 13, 14, 15])
    # Downlink: a_0, a_2, a_4 arrive; a_1, a_3, a_5 are lost -> the previous one is held.
    assert base.applied == [10, 10, 12, 12, 14, 14]
    assert [i["downlink_lost"] for i in infos] == [False, True] * 3
    assert [i["action_held"] for i in infos] == [False, True] * 3
    # Uplink packets: o_1 (delay 0), o_2 lost, o_3, o_4 lost, ...
    assert seen == [1.0, 1.0, 3.0, 3.0, 5.0, 5.0]
    assert [i["uplink_lost"] for i in infos] == [False, True] * 3
    assert infos[-1]["lost_packets"] == 6


@pytest.mark.parametrize(
    ("timing", "reordered"),
    [
        # o_1 (50 ms) usable at tick floor(1 + 2.5) = 3, o_2 (0 ms) at 2, o_3 at 5, o_4 at 4
        ("per-direction", [0, 0, 1, 1, 2, 2]),
        # half a period later each: o_1 at floor(1 + 2.5 + 0.5) = 4, o_2 at 2, o_3 at 6, ...
        ("loop", [0, 0, 0, 1, 1, 2]),
    ],
)
def test_latest_discards_a_late_older_packet_and_counts_it(timing, reordered):
    env = FullInfoShim(
        CounterEnv(), uplink=pattern([50.0, 0.0]), step_ms=P, delivery="latest", timing=timing
    )
    seen, infos = run(env, [0] * 6)
    assert seen == [0.0, 2.0, 2.0, 4.0, 4.0, 6.0]
    assert [i["reordered_packets"] for i in infos] == reordered
    assert infos[-1]["stale_packets"] == 2


@pytest.mark.parametrize(
    ("timing", "expected"),
    [
        # o_1 arrives at 1 + 2.5 -> tick 3; o_2 would arrive at 2 but waits behind o_1.
        ("per-direction", [0.0, 0.0, 2.0, 2.0, 4.0, 4.0]),
        # o_1 at 1 + 2.5 + 0.5 -> tick 4, o_2 behind it; o_3 and o_4 at tick 6.
        ("loop", [0.0, 0.0, 0.0, 2.0, 2.0, 4.0]),
    ],
)
def test_fifo_never_reorders_a_late_packet_holds_back_the_next(timing, expected):
    env = FullInfoShim(
        CounterEnv(), uplink=pattern([50.0, 0.0]), step_ms=P, delivery="fifo", timing=timing
    )
    seen, infos = run(env, [0] * 6)
    assert seen == expected
    assert infos[-1]["reordered_packets"] == 0
    assert infos[-1]["stale_packets"] == 2  # o_1, o_3 arrive together with a newer packet


delays_strategy = st.lists(
    st.sampled_from([0.0, 3.0, 19.5, 20.0, 21.0, 39.0, 55.0, 61.0, 90.0, math.inf]),
    min_size=1,
    max_size=12,
)


@settings(max_examples=80, deadline=None)
@given(
    up=delays_strategy,
    down=delays_strategy,
    fifo=st.booleans(),
    n=st.integers(1, 40),
    timing=st.sampled_from(TIMINGS),
)
def test_wrapper_matches_the_design_formula(up, down, fifo, n, timing):
    """Freshest arrived obs / action at every tick equals the loop model's definition."""
    base = CounterEnv()
    env = FullInfoShim(
        base,
        uplink=pattern(up),
        downlink=pattern(down),
        step_ms=P,
        delivery="fifo" if fifo else "latest",
        start_action=9999,
        timing=timing,
    )
    seen, infos = run(env, list(range(n)))
    returned, applied, up_arr, down_arr = oracle(up, down, n, fifo, 9999, timing)
    assert seen == returned
    assert base.applied == applied

    # Counters: reordered = arrived after a newer packet arrived at an earlier tick; stale =
    # arrived but never the freshest.
    def counts(arr: list[float], last_tick: int) -> tuple[int, int]:
        got = [(i, a) for i, a in enumerate(arr) if a <= last_tick]
        reordered = sum(any(j > i and b < a for j, b in got) for i, a in got)
        stale = sum(any(j > i and b <= a for j, b in got) for i, a in got)
        return reordered, stale

    stats = env.network_stats()
    assert (stats["uplink_reordered"], stats["uplink_stale"]) == counts(up_arr[1:], n)
    assert (stats["downlink_reordered"], stats["downlink_stale"]) == counts(down_arr, n - 1)
    if fifo:
        assert infos[-1]["reordered_packets"] == 0


@settings(max_examples=40, deadline=None)
@given(
    mean=st.floats(0, 200),
    std=st.floats(0, 100),
    loss=st.floats(0, 1),
    fifo=st.booleans(),
    seed=st.integers(0, 2**32 - 1),
)
def test_invariants_nothing_from_the_future_nothing_twice_never_backwards(
    mean, std, loss, fifo, seed
):
    ch = GaussianChannel(mean, std, loss)
    base = CounterEnv()
    env = FullInfoShim(
        base,
        uplink=ch,
        downlink=ch,
        step_ms=P,
        delivery="fifo" if fifo else "latest",
        start_action=9999,
    )
    env.reset(seed=seed)
    last_obs, last_act = 0.0, -1
    for t in range(60):
        obs, _, _, _, info = env.step(t)
        value = float(obs[0])
        assert value <= t + 1 and value >= last_obs  # sent before, freshest never regresses
        assert info["obs_age_steps"] == t + 1 - value >= 0
        applied = base.applied[-1]
        if applied != 9999:
            assert last_act <= applied <= t  # an action that was sent, never older than before
            # a newly delivered action is applied exactly once as "not held"
            assert info["action_held"] == (applied == last_act)
            last_act = applied
        last_obs = value


# -- profiles, determinism, randomness ------------------------------------------------


def test_perfect_is_bit_identical_to_the_bare_env():
    bare = gym.make("CartPole-v1")
    shim = FullInfoShim(gym.make("CartPole-v1"), "perfect")
    rng = np.random.default_rng(0)
    for episode in range(5):
        ob, _ = bare.reset(seed=episode)
        os_, _ = shim.reset(seed=episode)
        assert np.array_equal(ob, os_) and ob.dtype == os_.dtype
        done = False
        while not done:
            a = int(rng.integers(2))
            rb, rs = bare.step(a), shim.step(a)
            assert np.array_equal(rb[0], rs[0]) and rb[1:4] == rs[1:4]
            done = rb[2] or rb[3]


def test_ethernet_costs_no_staleness_on_cartpole():
    env = FullInfoShim(gym.make("CartPole-v1"), "ethernet")
    assert env.step_ms == pytest.approx(20.0)  # from CartPole's tau
    env.reset(seed=0)
    for _ in range(2000):
        _, _, term, trunc, info = env.step(1)
        assert info["obs_age_steps"] == 0 and info["action_age_steps"] == 0
        assert not info["action_held"]
        if term or trunc:
            env.reset()


def schedule(env: NetworkShimWrapper, seed: int, n: int = 300) -> list[tuple]:
    env.reset(seed=seed)
    out = []
    for t in range(n):
        _, _, term, trunc, info = env.step(t % int(env.action_space.n))
        out.append((info["obs_age_steps"], info["action_age_steps"], info["uplink_lost"]))
        if term or trunc:
            env.reset()
    return out


def test_same_seed_same_packet_schedule_other_seed_differs():
    env = FullInfoShim(CounterEnv(), "wifi-degraded", step_ms=P)
    a, b, c = schedule(env, 5), schedule(env, 5), schedule(env, 6)
    assert a == b and a != c
    other = FullInfoShim(CounterEnv(), "wifi-degraded", step_ms=P, delivery="latest")
    assert schedule(other, 5) == schedule(other, 5)


def test_env_dynamics_unchanged_and_env_rng_untouched():
    """The env sees exactly the applied actions; its own np_random is not consumed."""
    shim = FullInfoShim(gym.make("CartPole-v1"), "wifi-degraded")
    shim.reset(seed=11)
    state_before = shim.unwrapped.np_random.bit_generator.state
    applied, true_obs = [], []
    for t in range(40):
        _, _, term, trunc, info = shim.step(t % 2)
        applied.append(info["applied_action"])
        true_obs.append(info["true_obs"])
        if term or trunc:
            break
    assert shim.unwrapped.np_random.bit_generator.state == state_before
    bare = gym.make("CartPole-v1")
    bare.reset(seed=11)
    for a, o in zip(applied, true_obs, strict=True):
        assert np.array_equal(bare.step(a)[0], o)


def test_profile_sequence_draws_one_per_episode_reproducibly():
    names = ["perfect", "wifi-normal", "wifi-degraded"]
    env = FullInfoShim(CounterEnv(horizon=3), names, step_ms=P)
    drawn = [env.reset(seed=9)[1]["profile"]] + [env.reset()[1]["profile"] for _ in range(59)]
    assert set(drawn) == set(names)
    again = [env.reset(seed=9)[1]["profile"]] + [env.reset()[1]["profile"] for _ in range(59)]
    assert drawn == again
    mixed = FullInfoShim(CounterEnv(), [get_profile("ethernet"), "perfect"], step_ms=P)
    assert {p.name for p in mixed.profiles} == {"ethernet", "perfect"}


def test_copy_observations_protects_against_envs_that_reuse_their_buffer():
    env = FullInfoShim(BufferReuseEnv(), uplink=FixedDelay(45), step_ms=P, copy_observations=True)
    seen, _ = run(env, [0] * 6)
    assert seen == [0.0, 0.0, 1.0, 2.0, 3.0, 4.0]


def test_repeated_observation_is_a_new_object():
    env = FullInfoShim(CounterEnv(), uplink=pattern([0.0, math.inf]), step_ms=P)
    env.reset(seed=0)
    first = env.step(0)[0]
    again = env.step(0)[0]  # o_2 was lost: o_1 again, as a new array
    assert again is not first and np.array_equal(again, first)


# -- spaces and the gym / SB3 contract ------------------------------------------------

SPACES = {
    "box-discrete": (spaces.Box(-1, 1, (3,)), spaces.Discrete(3)),
    "box-box": (spaces.Box(-1, 1, (2, 2)), spaces.Box(-2, -1, (2,))),
    "multidiscrete": (spaces.MultiDiscrete([3, 4]), spaces.MultiDiscrete([2, 5], start=[1, 1])),
    "dict": (
        spaces.Dict({"pos": spaces.Box(-1, 1, (2,)), "mode": spaces.Discrete(4)}),
        spaces.Dict({"move": spaces.Discrete(2), "force": spaces.Box(0, 1, (1,))}),
    ),
    "tuple": (
        spaces.Tuple((spaces.Discrete(3), spaces.Box(-1, 1, (2,)))),
        spaces.Tuple((spaces.Discrete(2), spaces.MultiBinary(3))),
    ),
}


@pytest.mark.parametrize("name", list(SPACES))
@pytest.mark.parametrize("profile", ["perfect", "wifi-degraded"])
def test_gymnasium_check_env_passes_for_every_space(name, profile):
    from gymnasium.utils.env_checker import check_env

    obs_space, act_space = SPACES[name]
    env = FullInfoShim(SpacesEnv(obs_space, act_space), profile, step_ms=P)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        check_env(env, skip_render_check=True)
    assert act_space.contains(env.step(act_space.sample())[4]["applied_action"])


@pytest.mark.parametrize("name", ["box-discrete", "box-box", "multidiscrete", "dict"])
def test_sb3_check_env_passes(name):
    from stable_baselines3.common.env_checker import check_env

    obs_space, act_space = SPACES[name]
    if name == "dict":
        act_space = spaces.Box(-1, 1, (2,))  # SB3 has no Dict action spaces
    env = FullInfoShim(SpacesEnv(obs_space, act_space), "wifi-normal", step_ms=P)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        check_env(env)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        check_env(FullInfoShim(gym.make("CartPole-v1"), "wifi-degraded"))


def test_gym_make_spec_round_trip_rebuilds_the_shim():
    env = FullInfoShim(gym.make("CartPole-v1"), "wifi-normal", delivery="latest")
    rebuilt = gym.make(env.spec)
    shim = rebuilt
    while not isinstance(shim, NetworkShimWrapper):
        shim = shim.env
    assert shim.profile.name == "wifi-normal" and shim.delivery == "latest"
    assert schedule(env, 3, 50) == schedule(shim, 3, 50)

    made = gym.make(
        "fleetgym/NetShim-v0", env_id="CartPole-v1", profile="wifi-normal", delivery="latest"
    )
    again = gym.make(made.spec)
    for e in (made, again):
        e.reset(seed=3)
    assert [made.step(t % 2)[4]["obs_age_steps"] for t in range(8)] == [
        again.step(t % 2)[4]["obs_age_steps"] for t in range(8)
    ]
    channels = FullInfoShim(gym.make("CartPole-v1"), uplink=GaussianChannel(30, 5, 0.1))
    assert isinstance(gym.make(channels.spec).unwrapped, type(channels.unwrapped))


def wrapper_stack(env: gym.Env) -> list[str]:
    names = []
    while isinstance(env, gym.Wrapper):
        names.append(type(env).__name__)
        env = env.env
    return names


def test_netshim_spec_round_trip_keeps_one_time_limit():
    # The spec carries the inner env's limit; the rebuilt stack has it once, outside the
    # shim, and the inner env is rebuilt without its own (env_kwargs max_episode_steps=-1).
    made = gym.make("fleetgym/NetShim-v0", env_id="CartPole-v1", profile="wifi-normal")
    assert made.spec.max_episode_steps == 500 and made.spec.reward_threshold == 475.0
    rebuilt = gym.make(made.spec)
    assert wrapper_stack(made).count("TimeLimit") == 1
    assert wrapper_stack(rebuilt).count("TimeLimit") == 1
    assert wrapper_stack(rebuilt)[0] == "TimeLimit"
    assert rebuilt.spec == made.spec and gym.make(rebuilt.spec).spec == made.spec
    # An explicit outer limit is part of the spec and survives the round trip.
    limited = gym.make("fleetgym/NetShim-v0", env_id="CartPole-v1", max_episode_steps=7)
    again = gym.make(limited.spec)
    assert wrapper_stack(again).count("TimeLimit") == 1 and again.spec.max_episode_steps == 7
    again.reset(seed=0)
    steps = 0
    while True:
        steps += 1
        _, _, term, trunc, _ = again.step(0)
        if term or trunc:
            break
    assert steps <= 7
    # A shim put around an env by hand keeps the env's own limit in its spec.
    by_hand = FullInfoShim(gym.make("CartPole-v1"), "wifi-normal")
    assert by_hand.spec.max_episode_steps == 500
    assert wrapper_stack(gym.make(by_hand.spec)) == wrapper_stack(by_hand)


def test_netshim_id_passes_kwargs_through():
    env = gym.make(
        "fleetgym/NetShim-v0",
        env_id="CartPole-v1",
        profile="ethernet",
        env_kwargs={"sutton_barto_reward": True},
        delivery="latest",
        step_ms=10.0,
    )
    _, info = env.reset(seed=0)
    assert info["profile"] == "ethernet"
    assert env.get_wrapper_attr("step_ms") == 10.0
    assert env.unwrapped._sutton_barto_reward is True
    explicit = gym.make("fleetgym/NetShim-v0", env_id="CartPole-v1", uplink=FixedDelay(30))
    assert explicit.reset(seed=0)[1]["profile"] == "custom"


def test_works_in_gym_make_vec_and_sb3_vec_envs():
    vec = gym.make_vec(
        "fleetgym/NetShim-v0", num_envs=3, env_id="CartPole-v1", profile="wifi-normal"
    )
    obs, _ = vec.reset(seed=0)
    for _ in range(30):
        obs, _, _, _, info = vec.step(vec.action_space.sample())
    assert obs.shape == (3, 4) and info["obs_age_steps"].shape == (3,)
    vec.close()

    from stable_baselines3.common.vec_env import DummyVecEnv

    sb3 = DummyVecEnv([lambda: FullInfoShim(gym.make("CartPole-v1"), "wifi-degraded")] * 2)
    sb3.seed(0)
    sb3.reset()
    for _ in range(60):
        _, _, _, infos = sb3.step(np.array([0, 1]))
    assert all("obs_age_steps" in i for i in infos)


def test_tiny_sb3_ppo_learns_through_the_shim():
    from stable_baselines3 import PPO

    env = FullInfoShim(gym.make("CartPole-v1"), "wifi-normal")
    model = PPO("MlpPolicy", env, n_steps=64, batch_size=32, n_epochs=1, seed=0, device="cpu")
    model.learn(128)  # runs end to end; learning quality belongs to the CLI experiments


def test_import_fleetgym_does_not_import_torch():
    code = (
        "import sys, fleetgym, fleetgym.wrappers, gymnasium as gym;"
        "gym.make('fleetgym/NetShim-v0', env_id='CartPole-v1').reset(seed=0);"
        "print('torch' in sys.modules, 'stable_baselines3' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["False", "False"]


# -- bad input ------------------------------------------------------------------------


@pytest.mark.parametrize("n, start", [(3, 0), (5, -2), (50_000, 7)])  # a set, a range test
def test_the_steps_quick_action_test_agrees_with_the_space(n, start):
    from fleetgym.errors import InvalidActionError

    space = spaces.Discrete(n, start=start)
    shim = NetworkShimWrapper(SpacesEnv(spaces.Discrete(2), space), "wifi-normal", step_ms=P)
    shim.reset(seed=0)
    for value in (start, start + n - 1, np.int64(start + 1), np.int32(start), True, 1.0):
        if space.contains(value):
            shim.step(value)
        else:
            with pytest.raises(InvalidActionError, match=r"action at step \d+"):
                shim.step(value)
    for value in (start - 1, start + n, np.int64(start + n), None):
        with pytest.raises(InvalidActionError, match=r"action at step \d+"):
            shim.step(value)


def test_bad_arguments_raise_typed_errors():
    cart = gym.make("CartPole-v1")
    with pytest.raises(UnknownProfileError, match="expected one of .*wifi-normal"):
        FullInfoShim(cart, "wifi-bad")
    with pytest.raises(ValueError, match="step_ms: expected a finite number >= 0.001"):
        FullInfoShim(cart, "perfect", step_ms=0)
    with pytest.raises(ValueError, match="step_ms: expected a finite number >= 0.001"):
        FullInfoShim(cart, "perfect", step_ms=float("nan"))
    with pytest.raises(TypeError, match="step_ms: expected a number"):
        FullInfoShim(cart, "perfect", step_ms="20")
    with pytest.raises(ValueError, match="step_ms: expected the control period.*render_fps"):
        FullInfoShim(SpacesEnv(spaces.Discrete(2), spaces.Discrete(2)), "perfect")
    with pytest.raises(ValueError, match="delivery: expected one of"):
        FullInfoShim(cart, "perfect", delivery="random")
    with pytest.raises(ValueError, match="either a profile or explicit"):
        FullInfoShim(cart, "perfect", uplink=FixedDelay(1))
    with pytest.raises(TypeError, match="uplink: expected a fleetgym Channel"):
        FullInfoShim(cart, uplink=0.5)
    with pytest.raises(ValueError, match="start_action: expected an element of the action space"):
        FullInfoShim(cart, "perfect", start_action=5)
    with pytest.raises(TypeError, match="profile: expected a name"):
        FullInfoShim(cart, 3)
    with pytest.raises(ValueError, match="at least one profile"):
        FullInfoShim(cart, [])
    with pytest.raises(ValueError, match="block_size: expected an int in"):
        FullInfoShim(cart, "perfect", block_size=0)
    with pytest.raises(TypeError, match="copy_observations: expected a bool"):
        FullInfoShim(cart, "perfect", copy_observations=1)
    with pytest.raises(TypeError, match="env: expected a gymnasium.Env"):
        FullInfoShim("CartPole-v1", "perfect")
    with pytest.raises(UnsupportedSpaceError, match="pass start_action explicitly"):
        FullInfoShim(SpacesEnv(spaces.Box(-1, 1, (1,)), spaces.Text(5)), "perfect", step_ms=P)
    with pytest.raises(ValueError, match="seed: expected an int >= 0"):
        FullInfoShim(CounterEnv(), "perfect", step_ms=P).reset(seed=-1)
    with pytest.raises(gym.error.ResetNeeded):
        FullInfoShim(CounterEnv(), "perfect", step_ms=P).step(0)
    with pytest.raises(TypeError, match="env_id: expected"):
        gym.make("fleetgym/NetShim-v0", env_id=3)
    with pytest.raises(TypeError, match="uplink: expected a fleetgym Channel"):
        NetworkProfile("x", "fast", FixedDelay(1))


def test_text_action_space_works_with_an_explicit_start_action():
    env = FullInfoShim(
        SpacesEnv(spaces.Box(-1, 1, (1,)), spaces.Text(5)),
        "wifi-normal",
        step_ms=P,
        start_action="a",
    )
    env.reset(seed=0)
    assert isinstance(env.step("hello")[4]["applied_action"], str)
