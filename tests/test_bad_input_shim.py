"""Bad-input audit of the channels, trace loaders, profiles, shims and compensation wrappers.

Every generated bad value must end in a typed fleetgym error, a TypeError or a ValueError
whose message names the argument (never a raw OverflowError, ZeroDivisionError, IndexError,
KeyError or MemoryError, never a 10-million-character message), and every accepted value
must give finite outputs.
"""

from __future__ import annotations

import functools
import math
import os
import stat
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fleetgym.errors import FleetgymError, InvalidActionError, TraceFormatError
from fleetgym.traces import load_trace, read_csv_trace, read_delay_list, read_mahimahi
from fleetgym.wrappers import (
    GaussianChannel,
    GilbertElliottChannel,
    HistoryCompensation,
    NetworkShimVectorWrapper,
    NetworkShimWrapper,
    ObservationAgeFeatures,
    ObservationHistory,
    SentActionHistory,
    TraceChannel,
    make_robust_env,
    register_profile,
)
from fleetgym.wrappers.channel_base import MAX_STEP_MS, MIN_STEP_MS

FAST = settings(max_examples=25, deadline=None, suppress_health_check=list(HealthCheck))

#: Values that are not a number of any kind, or a number of the wrong kind.
NOT_NUMBERS = st.sampled_from(
    [None, "1", "abc", b"1", [1.0], {}, (1,), object(), True, False, np.array([1.0, 2.0])]
)
BAD_FLOATS = st.sampled_from([math.nan, math.inf, -math.inf, 1e308 * 10, -1e300, -1.0])
#: Sizes no caller means: negative, zero, absurdly large, or not integers.
BAD_SIZES = st.one_of(
    st.sampled_from([0, -1, -(10**9), 10**12, 10**30, 2**63, 1.5, math.nan, "4", True, None]),
    st.integers(max_value=0),
    st.integers(min_value=10**12),
)


@functools.cache
def _office_trace() -> Any:
    return load_trace("wifi-office.csv")


def expect_clean_error(call: Callable[[], Any], argument: str | None = None) -> BaseException:
    """Run ``call``: it must raise a clean error (naming ``argument`` when given)."""
    try:
        call()
    except (FleetgymError, TypeError, ValueError) as error:
        message = str(error)
        assert len(message) < 2000, f"unbounded message ({len(message)} characters)"
        assert "could not convert" not in message, message
        assert not isinstance(error, (OverflowError, ZeroDivisionError)), repr(error)
        if argument is not None:
            assert argument in message, f"{argument!r} not named in {message!r}"
        return error
    raise AssertionError(f"accepted a bad value for {argument}")


# -- channels ----------------------------------------------------------------------------


CHANNEL_FIELDS = {
    GaussianChannel: ("mean_ms", "std_ms", "loss", "correlation"),
    GilbertElliottChannel: (
        "p_good_to_bad",
        "p_bad_to_good",
        "loss_good",
        "loss_bad",
        "mean_ms",
        "std_ms",
        "correlation",
    ),
}


@FAST
@given(
    cls=st.sampled_from(list(CHANNEL_FIELDS)),
    data=st.data(),
    bad=st.one_of(NOT_NUMBERS, BAD_FLOATS, st.floats(min_value=1e12, allow_infinity=False)),
)
def test_channel_fields_reject_bad_numbers(cls: Any, data: Any, bad: Any) -> None:
    field = data.draw(st.sampled_from(CHANNEL_FIELDS[cls]))
    expect_clean_error(lambda: cls(**{field: bad}), field)


@FAST
@given(step_ms=st.one_of(NOT_NUMBERS, BAD_FLOATS, st.sampled_from([0.0, -20.0, 5e-324, 1e300])))
def test_samplers_reject_bad_step_ms(step_ms: Any) -> None:
    rng = np.random.default_rng(0)
    trace = TraceChannel(_office_trace())
    for channel in (GaussianChannel(10, 2), GilbertElliottChannel(0.1, 0.5), trace):
        expect_clean_error(lambda ch=channel: ch.sampler(rng, step_ms=step_ms), "step_ms")
        expect_clean_error(lambda ch=channel: ch.sample_delays(rng, 4, step_ms=step_ms), "step_ms")


@FAST
@given(n=BAD_SIZES)
def test_sample_delays_rejects_bad_sizes(n: Any) -> None:
    if isinstance(n, int) and not isinstance(n, bool) and n == 0:
        return  # zero delays is a documented, empty answer
    expect_clean_error(lambda: GaussianChannel(1.0).sample_delays(np.random.default_rng(0), n))


@FAST
@given(
    std_ms=st.floats(min_value=0.0, max_value=1e7),
    mean_ms=st.floats(min_value=0.0, max_value=1e7),
    step_ms=st.floats(min_value=MIN_STEP_MS, max_value=MAX_STEP_MS),
)
def test_no_loss_without_loss(std_ms: float, mean_ms: float, step_ms: float) -> None:
    """loss=0 never reports a lost packet, whatever the delay spread or the period."""
    delays = GaussianChannel(mean_ms, std_ms, 0.0).sample_delays(
        np.random.default_rng(1), 64, step_ms=step_ms
    )
    assert np.all(np.isfinite(delays)) and np.all(delays >= 0.0)


def test_rng_of_wrong_type() -> None:
    expect_clean_error(lambda: GaussianChannel(1.0).sampler("seed"), "rng")  # type: ignore[arg-type]


# -- traces ------------------------------------------------------------------------------


def test_trace_loaders_reject_a_fifo(tmp_path: Path) -> None:
    fifo = tmp_path / "pipe.csv"
    os.mkfifo(fifo)
    for loader in (load_trace, read_csv_trace, read_mahimahi, read_delay_list):
        expect_clean_error(lambda f=loader: f(fifo), "pipe.csv")


@pytest.mark.skipif(not Path("/dev/zero").exists(), reason="no /dev/zero")
def test_trace_loaders_reject_devices() -> None:
    assert stat.S_ISCHR(os.stat("/dev/zero").st_mode)
    for loader in (load_trace, read_csv_trace, read_mahimahi, read_delay_list):
        expect_clean_error(lambda f=loader: f("/dev/zero"))


@pytest.mark.timeout(60)
def test_a_hung_fifo_never_blocks(tmp_path: Path) -> None:
    """Even with a writer that never writes, the loader returns (with an error) at once."""
    fifo = tmp_path / "slow.log"
    os.mkfifo(fifo)
    done = threading.Event()

    def load() -> None:
        try:
            load_trace(fifo, format="delays", interval_ms=10)
        except (FleetgymError, ValueError, TypeError):
            done.set()

    thread = threading.Thread(target=load, daemon=True)
    thread.start()
    thread.join(20)
    if not done.is_set():  # unblock the reader before failing
        with open(fifo, "w"):
            pass
    assert done.is_set()


LINES = st.sampled_from(
    [
        "x" * 2_000_000,
        "9" * 4000,
        "1e400",
        "nan",
        "inf",
        "-5",
        "1,2,3,4,5,6",
        "\x00\x01",
        "",
        "1e300",
        "12,abc",
        str(2**70),
    ]
)


@FAST
@given(
    first=LINES,
    fmt=st.sampled_from(["csv", "mahimahi", "delays"]),
)
def test_trace_lines_give_bounded_errors_naming_the_file(
    tmp_path_factory: pytest.TempPathFactory, first: str, fmt: str
) -> None:
    path = tmp_path_factory.mktemp("t") / "bad.txt"
    header = "send_time_ms,delay_ms\n" if fmt == "csv" else ""
    path.write_text(header + "0\n" + first + "\n10\n")
    try:
        trace = load_trace(path, format=fmt, interval_ms=10 if fmt == "delays" else None)
    except TraceFormatError as error:
        assert "bad.txt" in str(error) and len(str(error)) < 2000
        return
    except (FleetgymError, TypeError, ValueError) as error:
        assert len(str(error)) < 2000 and "bad.txt" in str(error), str(error)
        return
    # accepted: every number of the trace must be finite or a lost packet
    delays = np.asarray(trace.delay_ms, dtype=float)
    assert np.all(np.isnan(delays) | np.isinf(delays) | (delays >= 0))


@FAST
@given(
    fmt=st.one_of(NOT_NUMBERS, st.sampled_from(["nope", "", "CSV "])),
    interval=st.one_of(NOT_NUMBERS.filter(lambda v: v is not None), BAD_FLOATS, st.just(0.0)),
)
def test_load_trace_arguments(
    tmp_path_factory: pytest.TempPathFactory, fmt: Any, interval: Any
) -> None:
    expect_clean_error(lambda: load_trace("wifi-office.csv", format=fmt), "format")
    path = tmp_path_factory.mktemp("d") / "delays.log"
    path.write_text("10\n12\n")
    expect_clean_error(
        lambda: load_trace(path, format="delays", interval_ms=interval), "interval_ms"
    )


def test_load_trace_missing_and_directory(tmp_path: Path) -> None:
    expect_clean_error(lambda: load_trace(tmp_path / "none.csv"), "none.csv")
    expect_clean_error(lambda: load_trace(tmp_path))
    expect_clean_error(lambda: load_trace(12))  # type: ignore[arg-type]


def test_trace_channel_constructor() -> None:
    expect_clean_error(lambda: TraceChannel("wifi-office.csv"), "trace")  # type: ignore[arg-type]
    trace = _office_trace()
    expect_clean_error(lambda: TraceChannel(trace, random_start="no"), "random_start")  # type: ignore[arg-type]


# -- profiles ----------------------------------------------------------------------------


@FAST
@given(overwrite=st.sampled_from(["no", "yes", 0, 1, None, [], 1.0]))
def test_register_profile_overwrite_must_be_bool(overwrite: Any) -> None:
    expect_clean_error(
        lambda: register_profile("ethernet", GaussianChannel(1.0), overwrite=overwrite),
        "overwrite",
    )


@FAST
@given(name=st.one_of(NOT_NUMBERS.filter(lambda v: not isinstance(v, str)), st.just("")))
def test_register_profile_name(name: Any) -> None:
    expect_clean_error(lambda: register_profile(name, GaussianChannel(1.0)), "name")


def test_register_profile_channel_types() -> None:
    expect_clean_error(lambda: register_profile("bad-x", "wifi"), "uplink")  # type: ignore[arg-type]


# -- shims -------------------------------------------------------------------------------

SHIM_KWARGS = {
    "step_ms": st.one_of(NOT_NUMBERS.filter(lambda v: v is not None), BAD_FLOATS, st.just(0.0)),
    "delivery": st.one_of(NOT_NUMBERS, st.just("lifo")),
    "copy_observations": st.sampled_from(["no", 1, None]),
    "block_size": BAD_SIZES,
    "profile": st.one_of(st.sampled_from([12, "nope", "", ["nope"], [], object()])),
}


@FAST
@given(data=st.data(), name=st.sampled_from(sorted(SHIM_KWARGS)))
def test_shim_constructor_arguments(data: Any, name: str) -> None:
    value = data.draw(SHIM_KWARGS[name])
    env = gym.make("CartPole-v1")
    expect_clean_error(lambda: NetworkShimWrapper(env, **{name: value}), name)


VECTOR_KWARGS = {**SHIM_KWARGS, "max_delay_steps": BAD_SIZES}
VECTOR_KWARGS.pop("copy_observations")


@FAST
@given(data=st.data(), name=st.sampled_from(sorted(VECTOR_KWARGS)))
def test_vector_shim_constructor_arguments(data: Any, name: str) -> None:
    value = data.draw(VECTOR_KWARGS[name])
    envs = gym.make_vec("CartPole-v1", num_envs=2, vectorization_mode="sync")
    try:
        expect_clean_error(lambda: NetworkShimVectorWrapper(envs, **{name: value}), name)
    finally:
        envs.close()


BAD_DISCRETE = st.sampled_from(
    [2, -1, 0.7, 1.9, "0", None, np.array([0, 1]), math.nan, 10**30, np.array(0.5), [0]]
)
BAD_BOX = st.sampled_from(
    [
        np.array([math.nan], dtype=np.float32),
        np.array([math.inf], dtype=np.float32),
        np.array([5.0], dtype=np.float32),
        np.zeros(3, dtype=np.float32),
        "0",
        None,
        np.array(["a"], dtype=object),
        np.array([0.0], dtype=object),
    ]
)


#: Every action lost on the way (it must still be checked when it is sent).
LOST = {"uplink": GaussianChannel(loss=1.0), "downlink": GaussianChannel(loss=1.0)}
DELAYED = {"uplink": GaussianChannel(1.0), "downlink": GaussianChannel(45.0)}


@FAST
@given(action=BAD_DISCRETE, network=st.sampled_from(["ethernet", "wifi-degraded", "lost", "late"]))
def test_shim_checks_discrete_actions_when_sent(action: Any, network: str) -> None:
    kwargs: dict[str, Any] = {"lost": LOST, "late": DELAYED}.get(network, {"profile": network})
    shim = NetworkShimWrapper(gym.make("CartPole-v1"), step_ms=20.0, **kwargs)
    shim.reset(seed=0)
    shim.step(0)
    error = expect_clean_error(lambda: shim.step(action), "action")
    assert isinstance(error, InvalidActionError)


@FAST
@given(action=BAD_BOX.filter(lambda a: not (isinstance(a, np.ndarray) and a.tolist() == [5.0])))
def test_shim_checks_box_actions_when_sent(action: Any) -> None:
    """NaN, inf, wrong shapes and types are refused; a finite Box action outside the bounds
    is accepted on purpose (the env clips it, as Pendulum and MuJoCo do)."""
    shim = NetworkShimWrapper(gym.make("Pendulum-v1"), profile="wifi-degraded")
    shim.reset(seed=0)
    expect_clean_error(lambda: shim.step(action), "action")


@FAST
@given(
    action=st.sampled_from(
        [
            np.array([0.7, 1.9]),
            np.array([0, 2]),
            0,
            np.array([0]),
            np.array([[0, 1]]),
            np.array(["0", "1"]),
            None,
            np.array([0, 1], dtype=object),
            np.array([-1, 0]),
        ]
    )
)
def test_vector_shim_checks_actions_when_sent(action: Any) -> None:
    envs = gym.make_vec("CartPole-v1", num_envs=2, vectorization_mode="sync")
    shim = NetworkShimVectorWrapper(envs, profile="wifi-degraded")
    try:
        shim.reset(seed=0)
        expect_clean_error(lambda: shim.step(action), "action")
    finally:
        shim.close()


@FAST
@given(
    wrapper=st.sampled_from(["history", "sent", "age", "robust"]),
    action=BAD_DISCRETE,
)
def test_compensation_wrappers_check_actions(wrapper: str, action: Any) -> None:
    base = NetworkShimWrapper(gym.make("CartPole-v1"), step_ms=20.0, **LOST)
    env: gym.Env[Any, Any]
    if wrapper == "history":
        env = ObservationHistory(base, stack_size=2)
    elif wrapper == "sent":
        env = SentActionHistory(base, history_length=2)
    elif wrapper == "age":
        env = ObservationAgeFeatures(base)
    else:
        env = make_robust_env(
            "CartPole-v1", "wifi-degraded", compensation=HistoryCompensation(history_length=2)
        )
    env.reset(seed=0)
    expect_clean_error(lambda: env.step(action), "action")


COMPENSATION_SIZES = {
    "stack_size": (ObservationHistory, BAD_SIZES.filter(lambda v: v is not None)),
    "history_length": (SentActionHistory, BAD_SIZES),
    "max_age_steps": (ObservationAgeFeatures, BAD_SIZES),
}


@FAST
@given(data=st.data(), name=st.sampled_from(sorted(COMPENSATION_SIZES)))
def test_compensation_sizes(data: Any, name: str) -> None:
    cls, strategy = COMPENSATION_SIZES[name]
    value = data.draw(strategy)
    base = NetworkShimWrapper(gym.make("CartPole-v1"), profile="ethernet")
    expect_clean_error(lambda: cls(base, **{name: value}), name)


@FAST
@given(
    name=st.sampled_from(["history_length", "action_history_length", "max_age_steps"]),
    value=BAD_SIZES.filter(lambda v: v is not None),
)
def test_make_robust_env_sizes(name: str, value: Any) -> None:
    if name == "action_history_length" and type(value) is int and value == 0:
        return  # documented: no action history
    expect_clean_error(lambda: HistoryCompensation(**{name: value}), name)


@FAST
@given(
    quantile=st.one_of(NOT_NUMBERS, BAD_FLOATS, st.sampled_from([0.0, 1.5])),
    padding=st.sampled_from(["nope", 1, None]),
)
def test_observation_history_options(quantile: Any, padding: Any) -> None:
    base = NetworkShimWrapper(gym.make("CartPole-v1"), profile="ethernet")
    expect_clean_error(lambda: ObservationHistory(base, quantile=quantile), "quantile")
    expect_clean_error(lambda: ObservationHistory(base, 2, padding_type=padding), "padding_type")
