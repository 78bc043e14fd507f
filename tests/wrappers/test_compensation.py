"""Tests of fleetgym.wrappers.compensation: exact contents on a counter env, k from profiles."""

from __future__ import annotations

import warnings
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
from gymnasium import spaces
from gymnasium.utils.env_checker import check_env as gym_check_env

from fleetgym.errors import UnsupportedSpaceError
from fleetgym.wrappers import HistoryCompensation, StallRule
from fleetgym.wrappers.channels import GaussianChannel
from fleetgym.wrappers.compensation import make_robust_env
from fleetgym.wrappers.delay_features import (
    ObservationAgeFeatures,
    ObservationHistory,
    SentActionHistory,
    compensate,
)
from fleetgym.wrappers.network_shim import NetworkShimWrapper
from fleetgym.wrappers.staleness import (
    history_length_for_env,
    history_length_for_profile,
    staleness_quantile,
)

STEP_MS = 20.0


class CounterEnv(gym.Env[np.ndarray, Any]):
    """Observation = number of steps since reset; fixed episode length; any action space."""

    metadata: dict[str, Any] = {"render_modes": []}

    def __init__(self, action_space: spaces.Space[Any] | None = None, length: int = 50) -> None:
        self.observation_space = spaces.Box(0.0, 1e6, shape=(1,), dtype=np.float32)
        self.action_space = action_space if action_space is not None else spaces.Discrete(3)
        self.length = length
        self.t = 0

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        super().reset(seed=seed)
        self.t = 0
        return np.array([0.0], dtype=np.float32), {}

    def step(self, action: Any):
        self.t += 1
        obs = np.array([float(self.t)], dtype=np.float32)
        return obs, 1.0, False, self.t >= self.length, {}


def fixed(ms: float, loss: float = 0.0) -> GaussianChannel:
    return GaussianChannel(mean_ms=ms, std_ms=0.0, loss=loss)


def shim(env: gym.Env[Any, Any] | None = None, **kwargs: Any) -> NetworkShimWrapper:
    kwargs.setdefault("step_ms", STEP_MS)
    return NetworkShimWrapper(env if env is not None else CounterEnv(), **kwargs)


# ---------------------------------------------------------------- k from the channel model
def test_k_perfect_and_ethernet_is_one():
    # 2±0.5 ms on a 20 ms loop: every packet arrives within its own period (no staleness).
    assert history_length_for_profile("perfect", STEP_MS) == 1
    assert history_length_for_profile("ethernet", STEP_MS) == 1


def test_k_fixed_delay_is_exact():
    # 40 ms one way on a 20 ms loop: every observation is floor(40/20 + 0.5) = 2 ticks old
    # (the loop's half-period wait for the agent's tick; see fleetgym.wrappers.timeline).
    assert staleness_quantile(None, STEP_MS, 0.99, uplink=fixed(40), downlink=fixed(0)) == 2
    assert history_length_for_profile(None, STEP_MS, uplink=fixed(40), downlink=fixed(0)) == 3
    # Round trip adds the action path: 2 + floor(20/20 + 0.5) = 3.
    assert (
        staleness_quantile(
            None, STEP_MS, 0.99, path="round_trip", uplink=fixed(40), downlink=fixed(20)
        )
        == 3
    )
    # Per direction (a whole period each way), 50 ms is floor(50/20) = 2 ticks old.
    assert (
        staleness_quantile(
            None, STEP_MS, 0.99, uplink=fixed(50), downlink=fixed(0), timing="per-direction"
        )
        == 2
    )


@pytest.mark.parametrize(("loss", "expected"), [(0.2, 2), (0.5, 6)])
def test_k_loss_only_matches_geometric_law(loss, expected):
    # No delay, i.i.d. loss p: the delivered observation is a ticks old iff the last a
    # packets were lost and the one before arrived, so P(age <= a) = 1 - p^(a+1).
    # p=0.2: P(age<=1)=0.96 < 0.99 <= P(age<=2)=0.992 -> quantile 2.
    # p=0.5: P(age<=5)=0.984 < 0.99 <= P(age<=6)=0.992 -> quantile 6.
    # Margin to 0.99 is >= 0.0019, ~3 standard errors of the 20 000-sample CDF estimate
    # (sqrt(0.99*0.01/20000) = 0.0007): safe at the fixed seed and at most others.
    assert (
        staleness_quantile(None, STEP_MS, 0.99, uplink=fixed(0, loss), downlink=fixed(0))
        == expected
    )


def test_k_grows_with_the_profile_and_takes_the_max_of_a_mix():
    ks = [
        history_length_for_profile(p, STEP_MS)
        for p in ("perfect", "ethernet", "wifi-normal", "wifi-degraded")
    ]
    assert ks == sorted(ks)
    assert ks[2] >= 2 and ks[3] > ks[2]
    assert history_length_for_profile(["perfect", "wifi-degraded"], STEP_MS) == ks[3]
    # Same seed, same answer (and the cache does not change it).
    assert history_length_for_profile("wifi-normal", STEP_MS) == ks[2]


def test_k_one_way_profile_has_no_action_path():
    # wifi-degraded-uplink has a perfect downlink: the round trip adds nothing.
    k = history_length_for_profile("wifi-degraded-uplink", STEP_MS)
    assert k == history_length_for_profile("wifi-degraded-uplink", STEP_MS, path="round_trip")
    assert k == history_length_for_profile("wifi-degraded", STEP_MS)


def test_k_from_the_shim_inside_an_env():
    env = shim(uplink=fixed(40), downlink=fixed(0))
    assert history_length_for_env(env) == 3
    assert ObservationHistory(env).stack_size == 3
    with pytest.raises(ValueError, match="expected an env stack containing a NetworkShimWrapper"):
        history_length_for_env(CounterEnv())


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"quantile": 0.0}, ValueError, "quantile: expected a finite number > 0 and <= 1"),
        ({"quantile": 1.5}, ValueError, "quantile: expected a finite number >= 0 and <= 1"),
        ({"quantile": "high"}, TypeError, "quantile: expected a number"),
        ({"step_ms": 0.0}, ValueError, "step_ms: expected a finite number > 0"),
        ({"step_ms": "20"}, TypeError, "step_ms: expected a number"),
        ({"profile": []}, TypeError, "profile: expected a profile name"),
        ({"path": "sideways"}, ValueError, "path: expected one of \\('uplink', 'round_trip'\\)"),
    ],
)
def test_history_length_rejects_bad_arguments(kwargs, error, match):
    args: dict[str, Any] = {"profile": "wifi-normal", "step_ms": STEP_MS}
    args.update(kwargs)
    with pytest.raises(error, match=match):
        history_length_for_profile(**args)


def test_unknown_profile_lists_the_known_ones():
    with pytest.raises(ValueError, match="wifi-normal"):
        history_length_for_profile("carrier-pigeon", STEP_MS)


# ---------------------------------------------------------------- exact contents on a counter
def test_age_features_are_the_packet_age_and_newness():
    # Uplink 40 ms: observation o_j arrives at tick j + 2; the counter value of the
    # delivered observation is its send tick, so age must equal t - value.
    env = ObservationAgeFeatures(shim(uplink=fixed(40), downlink=fixed(0)), max_age_steps=4)
    obs, _ = env.reset(seed=0)
    assert obs.tolist() == [0.0, 0.0, 1.0]
    previous = 0.0
    for t in range(1, 12):
        obs, *_ = env.step(0)
        value, age_feature, new = obs.tolist()
        assert age_feature == pytest.approx(min(t - value, 4) / 4)
        assert new == (1.0 if value > previous else 0.0)
        previous = max(previous, value)
    assert obs[0] == 11 - 2  # steady state: exactly two ticks old


def test_age_features_ignore_ground_truth_keys():
    class Poison(gym.Wrapper):
        """Overwrites the analysis-only keys with garbage."""

        def step(self, action):
            obs, r, term, trunc, info = self.env.step(action)
            info = dict(info, applied_action=99, true_obs=np.full(1, -7.0))
            return obs, r, term, trunc, info

    def rollout(env: gym.Env[Any, Any]) -> list[list[float]]:
        env.reset(seed=3)
        return [env.step(i % 3)[0].tolist() for i in range(30)]

    make = lambda: shim(profile="wifi-degraded")  # noqa: E731
    clean = SentActionHistory(ObservationAgeFeatures(make()), 3)
    poisoned = SentActionHistory(ObservationAgeFeatures(Poison(make())), 3)
    assert rollout(clean) == rollout(poisoned)


def test_observation_history_stacks_the_delivered_observations():
    env = ObservationHistory(shim(uplink=fixed(40), downlink=fixed(0)), 3)
    obs, _ = env.reset(seed=0)
    assert obs.shape == (3, 1)
    assert obs.ravel().tolist() == [0.0, 0.0, 0.0]  # padded with the reset observation
    delivered = [0.0]
    for _ in range(10):
        obs, *_ = env.step(0)
        inner_obs = env.env.unwrapped  # the counter, for its tick
        delivered.append(float(max(0, inner_obs.t - 2)))
        assert obs.ravel().tolist() == (([0.0] * 3) + delivered)[-3:]


def test_sent_action_history_discrete_is_one_hot_of_what_was_sent():
    # Downlink loses every packet: the applied action is always the start action, yet
    # the history must hold the actions *sent*.
    env = SentActionHistory(shim(uplink=fixed(0), downlink=fixed(0, loss=1.0)), 3)
    obs, _ = env.reset(seed=0)
    assert obs.tolist() == [0.0] + [0.0] * 9
    obs, *_ = env.step(2)
    obs, _, _, _, info = env.step(0)
    assert obs[1:].tolist() == [0, 0, 0, 0, 0, 1, 1, 0, 0]
    obs, *_ = env.step(1)
    assert obs[1:].tolist() == [0, 0, 1, 1, 0, 0, 0, 1, 0]
    obs, _ = env.reset(seed=1)
    assert obs[1:].tolist() == [0.0] * 9  # reset clears the history


def test_sent_action_history_box_and_multidiscrete():
    box = spaces.Box(-1.0, 1.0, shape=(2,), dtype=np.float32)
    env = SentActionHistory(CounterEnv(box), 2)
    env.reset(seed=0)
    obs, *_ = env.step(np.array([0.5, 3.0], dtype=np.float32))
    assert obs[1:].tolist() == [0.0, 0.0, 0.5, 1.0]  # raw, clipped to the bounds
    md = spaces.MultiDiscrete([2, 3])
    env = SentActionHistory(CounterEnv(md), 1)
    env.reset(seed=0)
    obs, *_ = env.step(np.array([1, 2]))
    assert obs[1:].tolist() == [0, 1, 0, 0, 1]


def test_sent_action_history_rejects_unsupported_spaces():
    with pytest.raises(
        UnsupportedSpaceError, match="expected an action space that flattens to a vector"
    ):
        SentActionHistory(CounterEnv(spaces.Text(5)), 2)

    class DictObs(CounterEnv):
        def __init__(self) -> None:
            super().__init__()
            self.observation_space = spaces.Dict({"x": spaces.Discrete(2)})

    with pytest.raises(UnsupportedSpaceError, match="expected a Box observation space"):
        SentActionHistory(DictObs(), 2)
    with pytest.raises(UnsupportedSpaceError, match="expected a Box observation space"):
        ObservationAgeFeatures(DictObs())
    with pytest.raises(ValueError, match="history_length: expected an int in \\[1, 10000\\]"):
        SentActionHistory(CounterEnv(), 0)
    with pytest.raises(TypeError, match="max_age_steps: expected an int"):
        ObservationAgeFeatures(CounterEnv(), max_age_steps=2.5)


# ---------------------------------------------------------------- the robust stack
def test_make_robust_env_layout_and_contents():
    env = make_robust_env(
        CounterEnv(), None, step_ms=STEP_MS, shim={"uplink": fixed(40), "downlink": fixed(0)}
    )
    # k = 3 (uplink staleness 2 + 1); m = round trip 2 + 0 + 1 = 3; each frame 1 + 2 ages.
    assert env.observation_space.shape == (3 * 3 + 3 * 3,)
    obs, _ = env.reset(seed=0)
    for a in (1, 2, 0, 1):
        obs, *_ = env.step(a)
    frames = obs[:9].reshape(3, 3)
    assert frames[:, 0].tolist() == [0.0, 1.0, 2.0]  # delivered counters at t=2,3,4
    assert frames[:, 1].tolist() == pytest.approx([2 / 3, 2 / 3, 2 / 3])  # two ticks old
    assert obs[9:].tolist() == [0, 0, 1, 1, 0, 0, 0, 1, 0]  # sent: 2, 0, 1


def test_make_robust_env_reset_clears_everything():
    env = make_robust_env(
        "CartPole-v1",
        "wifi-degraded",
        compensation=HistoryCompensation(history_length=4, action_history_length=5),
    )
    first, _ = env.reset(seed=7)
    for i in range(20):
        if any(env.step(i % 2)[2:4]):
            break
    again, _ = env.reset(seed=7)
    np.testing.assert_array_equal(first, again)


def test_make_robust_env_passes_gymnasium_and_sb3_checks():
    from stable_baselines3.common.env_checker import check_env as sb3_check_env

    env = make_robust_env(
        "CartPole-v1",
        "wifi-normal",
        compensation=HistoryCompensation(history_length=3, action_history_length=4),
    )
    gym_check_env(env, skip_render_check=True)
    sb3_check_env(
        make_robust_env(
            "CartPole-v1",
            "wifi-normal",
            compensation=HistoryCompensation(history_length=3, action_history_length=4),
        ),
        warn=True,
    )


def test_make_robust_env_rebuilds_from_its_spec_and_is_deterministic():
    env = make_robust_env(
        "CartPole-v1",
        "wifi-normal",
        compensation=HistoryCompensation(history_length=3, action_history_length=2),
    )
    again = gym.make(env.spec)
    assert again.observation_space == env.observation_space
    o1, _ = env.reset(seed=5)
    o2, _ = again.reset(seed=5)
    np.testing.assert_array_equal(o1, o2)
    for i in range(30):
        s1 = env.step(i % 2)
        s2 = again.step(i % 2)
        np.testing.assert_array_equal(s1[0], s2[0])
        if s1[2] or s1[3]:
            break


def test_make_robust_env_in_vector_envs():
    from stable_baselines3.common.vec_env import DummyVecEnv

    def factory():
        return make_robust_env(
            "CartPole-v1",
            "wifi-normal",
            compensation=HistoryCompensation(history_length=3, action_history_length=2),
        )

    vec = gym.vector.SyncVectorEnv([factory, factory])
    obs, _ = vec.reset(seed=0)
    assert obs.shape == (2, 3 * 6 + 2 * 2)
    obs, *_ = vec.step(np.array([0, 1]))
    assert obs.shape == (2, 22)
    vec.close()
    sb3_vec = DummyVecEnv([factory, factory])
    assert sb3_vec.reset().shape == (2, 22)
    sb3_vec.close()
    made = gym.make_vec(
        "CartPole-v1",
        num_envs=2,
        vectorization_mode="sync",
        wrappers=[
            lambda e: make_robust_env(
                e,
                "wifi-normal",
                compensation=HistoryCompensation(history_length=2, action_history_length=2),
            )
        ],
    )
    assert made.reset(seed=0)[0].shape == (2, 2 * 6 + 2 * 2)
    made.close()


def test_make_robust_env_rejects_bad_arguments():
    with pytest.raises(TypeError, match="env: expected an env ID or a gymnasium.Env"):
        make_robust_env(42, "wifi-normal")
    with pytest.raises(ValueError, match="history_length: expected an int in \\[1, 10000\\]"):
        make_robust_env(
            "CartPole-v1", "wifi-normal", compensation=HistoryCompensation(history_length=0)
        )
    with pytest.raises(
        ValueError, match="action_history_length: expected an int in \\[0, 10000\\]"
    ):
        make_robust_env(
            "CartPole-v1", "wifi-normal", compensation=HistoryCompensation(action_history_length=-1)
        )
    with pytest.raises(TypeError, match="age_features: expected a bool"):
        make_robust_env(
            "CartPole-v1", "wifi-normal", compensation=HistoryCompensation(age_features="yes")
        )
    with pytest.raises(ValueError, match="env_kwargs: expected None"):
        make_robust_env(CounterEnv(), "perfect", step_ms=STEP_MS, env_kwargs={"x": 1})


def test_compensate_is_make_robust_envs_stack_around_a_networked_env():
    """The stack alone, around an env that already has its network (here a shim; Mode 3's
    remote env reports the same ages), gives make_robust_env's observations."""
    made = make_robust_env(
        "CartPole-v1",
        "wifi-normal",
        compensation=HistoryCompensation(history_length=3, action_history_length=4),
    )
    stacked = compensate(NetworkShimWrapper(gym.make("CartPole-v1"), "wifi-normal"), 3, 4)
    assert stacked.observation_space == made.observation_space
    a, _ = made.reset(seed=2)
    b, _ = stacked.reset(seed=2)
    for t in range(40):
        assert np.array_equal(a, b)
        a, *_ = made.step(t % 2)
        b, *_ = stacked.step(t % 2)


# ---------------------------------------------------------------- networks with stalls
def stall_channel(stall_from_ms: float = 200.0, stall_to_ms: float = 600.0) -> Any:
    """20 ms packets, 2 ms late, except those sent in [from, to): they wait for its end
    (a link that buffers through a stall, then delivers in one burst); repeats every 2 s."""
    from fleetgym.traces import TraceData
    from fleetgym.wrappers import TraceChannel

    send = np.arange(100) * 20.0
    delay = np.full(100, 2.0)
    inside = (send >= stall_from_ms) & (send < stall_to_ms)
    delay[inside] += stall_to_ms - send[inside]
    return TraceChannel(TraceData(send, delay, 2000.0), random_start=False)


def stall_profile() -> Any:
    """Stalls of 4 s in every 5 s on both paths: the 0.99 quantile is ~200 ticks."""
    from fleetgym.wrappers import NetworkProfile

    channel = stall_channel(0.0, 4000.0)
    channel = type(channel)(
        type(channel.trace)(channel.trace.send_ms, channel.trace.delay_ms, 5000.0), True
    )
    return NetworkProfile("stalls", channel, channel)


def test_automatic_lengths_are_capped_with_a_warning_under_stalls():
    profile = stall_profile()
    assert history_length_for_profile(profile, STEP_MS) > 100  # what it would ask for
    with pytest.warns(UserWarning, match="more than max_history=16: capped at 16") as caught:
        env = make_robust_env("CartPole-v1", profile)
    assert {str(w.message).split(":")[0] for w in caught} >= {
        "history_length",
        "action_history_length",
    }
    # 16 frames x (4 + age, new, stall) + 16 one-hot actions x 2, not hundreds of frames.
    assert env.observation_space.shape == (16 * 7 + 16 * 2,)
    obs, _ = env.reset(seed=0)
    assert obs.shape == (144,)
    with pytest.warns(UserWarning, match="more than max_history=8: capped at 8"):
        small = make_robust_env(
            "CartPole-v1",
            profile,
            compensation=HistoryCompensation(max_history=8, stall_features=False),
        )
    assert small.observation_space.shape == (8 * 6 + 8 * 2,)
    with pytest.warns(UserWarning, match="stack_size: the network of the shim asks for"):
        assert ObservationHistory(shim(profile=profile)).stack_size == 16
    # Explicit lengths, and networks without stalls, are left alone (no warning either).
    with warnings.catch_warnings():
        warnings.simplefilter("error", UserWarning)
        env = make_robust_env(
            "CartPole-v1",
            profile,
            compensation=HistoryCompensation(history_length=20, action_history_length=3),
        )
        assert env.observation_space.shape == (20 * 6 + 3 * 2,)  # no flag: nothing capped
        assert make_robust_env("CartPole-v1", "wifi-normal").observation_space.shape == (36,)


def test_the_stall_flag_is_set_during_a_stall():
    # Observations sent at ticks 10..29 wait for the stall's end at 600 ms (tick 30).
    env = ObservationAgeFeatures(
        shim(uplink=stall_channel(), downlink=fixed(0)), max_age_steps=8, stall_steps=5
    )
    assert env.observation_space.shape == (4,)
    obs, _ = env.reset(seed=0)
    assert obs.tolist() == [0.0, 0.0, 1.0, 0.0]
    flags, ages = [], []
    for t in range(45):
        obs, *_, info = env.step(0)
        value, age_feature, new, stall = obs.tolist()
        age = info["obs_age_steps"]
        assert age == t + 1 - value
        assert age_feature == pytest.approx(min(age, 8) / 8)  # saturates
        assert stall == (1.0 if age >= 5 else 0.0)
        flags.append(stall)
        ages.append(age)
    assert max(ages) == 20 and flags[14:30] == [1.0] * 16 and flags[30:] == [0.0] * 15
    assert flags[:14] == [0.0] * 14
    # make_robust_env turns the flag on exactly when it capped a length.
    profile = stall_profile()
    with pytest.warns(UserWarning):
        robust = make_robust_env(CounterEnv(length=400), profile, step_ms=STEP_MS)
    robust.reset(seed=0)
    frames = []
    for _ in range(300):
        obs, *_, info = robust.step(0)
        frames.append((info["obs_age_steps"], obs[: 16 * 4].reshape(16, 4)[-1, 3]))
    assert any(age >= 16 for age, _ in frames) and any(age < 16 for age, _ in frames)
    assert all(flag == (1.0 if age >= 16 else 0.0) for age, flag in frames)


@pytest.mark.parametrize(
    ("build", "error", "match"),
    [
        (
            lambda: StallRule("brake"),
            ValueError,
            r"action: expected one of \('hold', 'safe', 'predict'\), actual 'brake'",
        ),
        (lambda: StallRule(1), TypeError, r"action: expected one of \('hold', 'safe'"),
        (lambda: StallRule(safe_action=1), ValueError, "safe_action: expected None unless"),
        (lambda: StallRule(steps=0), ValueError, r"steps: expected an int in \[1, 100000\]"),
        (
            lambda: HistoryCompensation(max_history=0),
            ValueError,
            r"max_history: expected an int in \[1, 10000\]",
        ),
        (
            lambda: HistoryCompensation(stall_features="yes"),  # type: ignore[arg-type]
            TypeError,
            "stall_features: expected a bool",
        ),
        (
            lambda: HistoryCompensation(stall_features=True, age_features=False),
            ValueError,
            "stall_features",
        ),
        (
            lambda: make_robust_env("CartPole-v1", "wifi-normal", stall="predict"),
            ValueError,
            "stall: expected 'hold' or 'safe'",
        ),
        (
            lambda: make_robust_env("CartPole-v1", "wifi-normal", stall=StallRule("safe", 3, 5)),
            ValueError,
            "safe_action: expected an",
        ),
        (
            lambda: make_robust_env("CartPole-v1", "wifi-normal", stall=3),
            TypeError,
            "stall: expected a StallRule",
        ),
    ],
)
def test_the_stall_options_are_validated(build, error, match):
    with pytest.raises(error, match=match):
        build()


def test_stall_action_safe_puts_the_watchdog_under_the_stack():
    from fleetgym.wrappers import StallWatchdog

    env = make_robust_env(
        "CartPole-v1",
        "wifi-normal",
        compensation=HistoryCompensation(history_length=2),
        stall=StallRule(action="safe", steps=3),
    )
    layer = env
    while not isinstance(layer, StallWatchdog):
        layer = layer.env
    assert layer.stall_steps == 3 and layer.safe_action == 0
    env.reset(seed=0)
    assert "safe_action" in env.step(1)[-1]
