"""Bad-input audit of the scheduling env (constructor, ``step``) and the schedulers.

Every bad value ends in a TypeError, a ValueError or a fleetgym error naming the argument;
accepted extreme-but-finite values give finite rewards and observations.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fleetgym.agents.schedulers import (
    AdaptScheduler,
    DecreaseScheduler,
    FixedScheduler,
    IncreaseScheduler,
    MaxScheduler,
    ServerBasedScheduler,
)
from fleetgym.errors import FleetgymError
from fleetgym.meta_env import ActorSchedulingEnv, make_actor_scheduling_env

FAST = settings(max_examples=20, deadline=None, suppress_health_check=list(HealthCheck))

NOT_NUMBERS = st.sampled_from([None, "1", "abc", [1], {}, True, object(), np.array([1.0, 2.0])])
BAD_REALS = st.sampled_from([math.nan, math.inf, -math.inf, -1.0, -1e300])
BAD_SIZES = st.one_of(
    st.sampled_from([0, -1, 10**12, 10**30, 1.5, math.nan, "4", True]),
    st.integers(max_value=0),
    st.integers(min_value=10**7 + 1),
)


def expect_clean_error(call: Callable[[], Any], argument: str | None = None) -> BaseException:
    """Run ``call``: it must raise a clean error (naming ``argument`` when given)."""
    try:
        call()
    except (FleetgymError, TypeError, ValueError) as error:
        message = str(error)
        assert len(message) < 2000, f"unbounded message ({len(message)} characters)"
        assert "could not convert" not in message, message
        if argument is not None:
            assert argument in message, f"{argument!r} not named in {message!r}"
        return error
    raise AssertionError(f"accepted a bad value for {argument}")


def make_env(**kwargs: Any) -> ActorSchedulingEnv:
    return make_actor_scheduling_env("CartPole-v1", timing="modeled", max_actors=4, **kwargs)


ENV_BAD: dict[str, st.SearchStrategy[Any]] = {
    "max_actors": BAD_SIZES,
    "steps_per_actor": BAD_SIZES,
    "max_rounds": BAD_SIZES,
    "target_return": st.one_of(NOT_NUMBERS.filter(lambda v: v is not None), st.just(math.nan)),
    "beta": st.one_of(NOT_NUMBERS.filter(lambda v: v is not None), BAD_REALS),
    "penalty_scale": st.one_of(NOT_NUMBERS.filter(lambda v: v is not None), BAD_REALS),
    "cost_weight": st.one_of(NOT_NUMBERS, BAD_REALS),
    "cold_start_actor_s": st.one_of(NOT_NUMBERS.filter(lambda v: v is not None), BAD_REALS),
    "cold_start_learner_s": st.one_of(NOT_NUMBERS.filter(lambda v: v is not None), BAD_REALS),
    "keep_alive_s": st.one_of(NOT_NUMBERS.filter(lambda v: v is not None), BAD_REALS),
    "bandwidth_bytes_per_s": st.one_of(
        NOT_NUMBERS.filter(lambda v: v is not None), BAD_REALS, st.just(0.0)
    ),
    "latency_s": st.one_of(NOT_NUMBERS.filter(lambda v: v is not None), BAD_REALS),
    "learner_speed_factor": st.one_of(
        NOT_NUMBERS.filter(lambda v: v is not None), BAD_REALS, st.just(0.0)
    ),
    "preset": st.one_of(NOT_NUMBERS, st.just("nope")),
    "timing": st.one_of(NOT_NUMBERS, st.just("nope")),
    "billing": st.one_of(NOT_NUMBERS, st.just("nope")),
    "normalize_obs": st.sampled_from(["no", 1, None]),
    "prewarm": st.sampled_from(["no", 1, 2.0]),
    "warm_pool": st.one_of(st.sampled_from([-1, 1.5, "2", True, 10**12])),
    "budget": st.one_of(st.sampled_from(["nope", math.nan, -1.0, [1], True])),
    "pricing": st.one_of(st.sampled_from(["nope", 12, [], True])),
    "workload": st.sampled_from(["nope", "", 12, None, object()]),
}


@FAST
@given(data=st.data(), name=st.sampled_from(sorted(ENV_BAD)))
def test_env_constructor_rejects_bad_values(data: Any, name: str) -> None:
    value = data.draw(ENV_BAD[name])
    kwargs: dict[str, Any] = {"timing": "modeled", "max_actors": 4, name: value}
    workload = kwargs.pop("workload", "CartPole-v1")
    expect_clean_error(lambda: make_actor_scheduling_env(workload, **kwargs).close(), name)


EXTREME = {
    "cold_start_actor_s": 1e300,
    "cold_start_learner_s": 1e300,
    "latency_s": 1e300,
    "bandwidth_bytes_per_s": 5e-324,
    "learner_speed_factor": 1e300,
    "keep_alive_s": 1e300,
}


@FAST
@given(name=st.sampled_from(sorted(EXTREME)), cost_weight=st.sampled_from([0.0, 1.0]))
def test_extreme_finite_values_give_finite_numbers_or_an_error(
    name: str, cost_weight: float
) -> None:
    """Huge but finite times: either refused up front, or every number stays finite."""
    try:
        env = make_env(**{name: EXTREME[name]}, cost_weight=cost_weight, max_rounds=2)
    except (FleetgymError, TypeError, ValueError) as error:
        assert name in str(error)
        return
    try:
        obs, info = env.reset(seed=0)
        assert np.all(np.isfinite(obs))
        for _ in range(2):
            try:
                obs, reward, terminated, truncated, info = env.step(1)
            except (FleetgymError, ValueError) as error:  # a named non-finite result
                assert "finite" in str(error)
                return
            assert np.all(np.isfinite(obs)) and math.isfinite(float(reward))
            for key, value in info.items():
                if isinstance(value, float):
                    assert not math.isnan(value), key
            if terminated or truncated:
                break
    finally:
        env.close()


@pytest.fixture(scope="module")
def env() -> Any:
    e = make_env(max_rounds=3)
    e.reset(seed=0)
    yield e
    e.close()


@FAST
@given(
    action=st.sampled_from(
        [1e300, -1, 4, 2.5, math.nan, math.inf, "1", None, [[5]], np.array([1, 2]), 10**30, True]
    )
)
def test_env_step_rejects_bad_actions(env: Any, action: Any) -> None:
    """Refused; a one-element array of an integer value (SB3's form) is accepted on purpose."""
    expect_clean_error(lambda: env.step(action), "action")


SCHEDULERS = [
    lambda: FixedScheduler(2, max_actors=4),
    lambda: MaxScheduler(4),
    lambda: IncreaseScheduler(max_actors=4),
    lambda: DecreaseScheduler(max_actors=4),
    lambda: AdaptScheduler(4),
    lambda: AdaptScheduler(4, target_return=200.0),
    lambda: ServerBasedScheduler(4, max_actors=4),
]


@FAST
@given(
    which=st.integers(0, len(SCHEDULERS) - 1),
    obs=st.sampled_from(
        [
            "abc",
            np.full(7, math.nan),
            np.full(7, math.inf),
            np.array(["a"] * 7),
            np.zeros(6),
            np.zeros((2, 3)),
            None,
            [object()] * 7,
            {},
            np.zeros(7, dtype=object),
        ]
    ),
)
def test_scheduler_predict_rejects_bad_observations(which: int, obs: Any) -> None:
    scheduler = SCHEDULERS[which]()
    if isinstance(obs, np.ndarray) and obs.dtype == object and obs.shape == (7,):
        action, _ = scheduler.predict(obs)  # numbers in an object array: accepted
        assert 0 <= int(action) < 4
        return
    expect_clean_error(lambda: scheduler.predict(obs), "observation")


@FAST
@given(
    target=st.one_of(NOT_NUMBERS.filter(lambda v: v is not None), st.sampled_from([0.0, math.nan])),
    window=BAD_SIZES,
)
def test_adapt_arguments(target: Any, window: Any) -> None:
    expect_clean_error(lambda: AdaptScheduler(4, target_return=target), "target_return")
    expect_clean_error(lambda: AdaptScheduler(4, window=window), "window")


@FAST
@given(
    cls=st.sampled_from([MaxScheduler, IncreaseScheduler, DecreaseScheduler, AdaptScheduler]),
    max_actors=BAD_SIZES,
)
def test_scheduler_max_actors(cls: Any, max_actors: Any) -> None:
    expect_clean_error(lambda: cls(max_actors=max_actors), "max_actors")


@FAST
@given(num=BAD_SIZES)
def test_fixed_scheduler_num_actors(num: Any) -> None:
    expect_clean_error(lambda: FixedScheduler(num, max_actors=4), "num_actors")
