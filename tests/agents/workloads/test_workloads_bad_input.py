"""Bad input to ``get_workload`` and ``Workload.from_env``: always a typed error naming it.

Wrong types, unknown IDs, overrides out of range, env kwargs the env rejects, callables and
env constructors that raise, envs whose spaces no policy fits: each ends in a TypeError, a
ValueError or a typed fleetgym error whose message names the argument (``workload``,
``env_kwargs``, the field, the space), never the env's own raw exception.
"""

from __future__ import annotations

import math
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fleetgym.agents.workloads import COUNT_LIMITS, Workload, get_workload, workload_spaces
from fleetgym.errors import EnvAPIError, FleetgymError, UnknownWorkloadError, UnsupportedSpaceError

FAST = settings(max_examples=25, deadline=None, suppress_health_check=list(HealthCheck))


class _Fine(gym.Env[Any, Any]):
    observation_space = gym.spaces.Box(-1.0, 1.0, (2,), np.float32)
    action_space = gym.spaces.Discrete(2)

    def reset(self, *, seed: int | None = None, options: Any = None) -> Any:
        super().reset(seed=seed)
        return np.zeros(2, np.float32), {}

    def step(self, action: Any) -> Any:
        return np.zeros(2, np.float32), 0.0, False, False, {}


class _RaisesInInit(_Fine):
    def __init__(self) -> None:
        raise RuntimeError("no simulator licence")


class _NoSpaces(gym.Env[Any, Any]):
    pass


class _GraphObservation(_Fine):
    observation_space = gym.spaces.Graph(node_space=gym.spaces.Box(0, 1, (2,)), edge_space=None)


class _MatrixAction(_Fine):
    action_space = gym.spaces.Box(-1.0, 1.0, (2, 2), np.float32)


class _HugeJointAction(_Fine):
    action_space = gym.spaces.MultiDiscrete([100, 100, 100])


class _OldStepAPI(_Fine):
    def step(self, action: Any) -> Any:
        return np.zeros(2, np.float32), 0.0, False, {}  # obs, reward, done, info


class _OldResetAPI(_Fine):
    def reset(self, *, seed: int | None = None, options: Any = None) -> Any:
        super().reset(seed=seed)
        return np.zeros(2, np.float32)  # obs only


class _NoSeedReset(_Fine):
    def reset(self) -> Any:  # type: ignore[override]
        return np.zeros(2, np.float32)


class _WrongShapeStep(_Fine):
    def step(self, action: Any) -> Any:
        return np.zeros(3, np.float32), 0.0, False, False, {}


class _WrongShapeReset(_Fine):
    def reset(self, *, seed: int | None = None, options: Any = None) -> Any:
        super().reset(seed=seed)
        return np.zeros((2, 1), np.float32), {}


class _WrongDictKeys(_Fine):
    observation_space = gym.spaces.Dict({"pos": gym.spaces.Box(-1.0, 1.0, (2,), np.float32)})

    def step(self, action: Any) -> Any:
        return {"position": np.zeros(2, np.float32)}, 0.0, False, False, {}

    def reset(self, *, seed: int | None = None, options: Any = None) -> Any:
        super().reset(seed=seed)
        return {"pos": np.zeros(2, np.float32)}, {}


class _CountingFine(_Fine):
    """Counts the instances built and draws from NumPy's global generator when stepped."""

    built = 0

    def __init__(self) -> None:
        type(self).built += 1

    def step(self, action: Any) -> Any:
        np.random.random()  # noqa: NPY002 - an env that draws from the global generator
        return super().step(action)


def old_api_builder() -> gym.Env[Any, Any]:
    """A module-level builder of an env with the old Gym step API."""
    return _OldStepAPI()


def raising_builder() -> gym.Env[Any, Any]:
    """A module-level env builder that raises."""
    raise OSError("the simulator's socket is gone")


def not_an_env() -> Any:
    return 42


ENVS = {
    "fleetgym-test/BadInit-v0": _RaisesInInit,
    "fleetgym-test/BadNoSpaces-v0": _NoSpaces,
    "fleetgym-test/BadGraph-v0": _GraphObservation,
    "fleetgym-test/BadMatrix-v0": _MatrixAction,
    "fleetgym-test/BadJoint-v0": _HugeJointAction,
    "fleetgym-test/BadFine-v0": _Fine,
    "fleetgym-test/BadOldStep-v0": _OldStepAPI,
    "fleetgym-test/BadOldReset-v0": _OldResetAPI,
    "fleetgym-test/BadNoSeed-v0": _NoSeedReset,
    "fleetgym-test/BadShapeStep-v0": _WrongShapeStep,
    "fleetgym-test/BadShapeReset-v0": _WrongShapeReset,
    "fleetgym-test/BadDictKeys-v0": _WrongDictKeys,
    "fleetgym-test/CountingFine-v0": _CountingFine,
}


@pytest.fixture(scope="module", autouse=True)
def _registered():
    for env_id, cls in ENVS.items():
        gym.register(env_id, entry_point=cls)
    yield
    for env_id in ENVS:
        gym.registry.pop(env_id, None)


def _named(error: BaseException, *names: str) -> None:
    text = str(error)
    assert text.startswith(tuple(f"{name}:" for name in names)), text
    assert len(text) < 3000, text[:200]


@FAST
@given(
    name=st.one_of(
        st.integers(),
        st.floats(allow_nan=True),
        st.binary(max_size=10),
        st.sampled_from([None, True, ["CartPole-v1"], {"CartPole-v1": 1}, 2j]),
    )
)
def test_a_workload_of_the_wrong_type_is_a_type_error(name: Any) -> None:
    with pytest.raises(TypeError) as caught:
        get_workload(name)
    _named(caught.value, "workload")


@FAST
@given(
    name=st.one_of(
        st.text(max_size=40).filter(lambda t: t not in gym.registry),
        st.sampled_from(["", ":", "a:", ":b", "os:", "no_such_module_xyz:Thing-v0", "x" * 5000]),
    )
)
def test_an_unknown_name_is_an_unknown_workload_error(name: str) -> None:
    with pytest.raises((UnknownWorkloadError, ValueError, TypeError)) as caught:
        get_workload(name)
    _named(caught.value, "workload")


@pytest.mark.parametrize(
    ("source", "error", "prefix"),
    [
        ("fleetgym-test/BadInit-v0", ValueError, "workload:"),
        ("fleetgym-test/BadNoSpaces-v0", ValueError, "workload:"),
        ("fleetgym-test/BadGraph-v0", UnsupportedSpaceError, "observation_space:"),
        ("fleetgym-test/BadMatrix-v0", UnsupportedSpaceError, "action_space:"),
        ("fleetgym-test/BadJoint-v0", UnsupportedSpaceError, "action_space:"),
        (raising_builder, ValueError, "workload:"),
        (not_an_env, TypeError, "workload:"),
        (lambda: _Fine(), ValueError, "env:"),  # not importable from another process
        ("builtins:print", (TypeError, ValueError), "workload:"),
    ],
)
def test_envs_that_cannot_be_a_workload(source: Any, error: Any, prefix: str) -> None:
    with pytest.raises(error) as caught:
        get_workload(source)
    assert str(caught.value).startswith(prefix), caught.value
    assert "Traceback" not in str(caught.value)


def test_the_env_error_is_quoted_and_chained() -> None:
    with pytest.raises(ValueError, match="RuntimeError: 'no simulator licence'") as caught:
        Workload.from_env("fleetgym-test/BadInit-v0")
    assert isinstance(caught.value.__cause__, RuntimeError)


@FAST
@given(
    env_kwargs=st.one_of(
        st.sampled_from([5, "a=1", [("a", 1)], (1,)]),
        st.sampled_from([{1: 2}, {"": 1}, {"not a name": 1}, {None: 1}]),
        st.sampled_from([{"x": object()}, {"x": {1, 2}}, {"x": b"bytes"}]),
        st.dictionaries(
            st.sampled_from(["foo", "bar", "render_mode", "sutton_barto_reward"]),
            st.sampled_from([3, "nope", None, [1], {"a": 1}]),
            min_size=1,
            max_size=2,
        ),
    )
)
def test_env_kwargs_the_env_rejects(env_kwargs: Any) -> None:
    try:
        Workload.from_env("CartPole-v1", env_kwargs=env_kwargs)
    except (TypeError, ValueError) as error:
        _named(error, "env_kwargs", "workload")
    # else: kwargs CartPole takes (render_mode=None, sutton_barto_reward=...) are accepted


#: Field -> values it never accepts (NaN, infinity, bools, strings, out of range).
BAD_FIELDS: dict[str, list[Any]] = {
    "name": [5, None, "", "  "],
    "env_id": [5, None, ""],
    "kind": ["board", None, 1, ["classic"], np.array(["a", "b"])],
    "network": ["resnet", None],
    "activation": ["gelu", 1],
    "reward_transform": ["log", None],
    "preprocessing": ["crop", 5],
    "target_return": [math.nan, "100", None, True],
    "normalize_obs": ["no", 1, None],
    "hidden_sizes": [5, (), ("wide",), (0,), (10**9,), (True,), "64", None, (1.5,)],
    "max_episode_steps": [0, -1, 1.5, "10", True],
    "env_kwargs_json": ["[1]", "{", 5, '"x"'],
    "entry_point": [5, None],
    **{
        name: [0, -1, 1.5, True, "8", high + 1, 10**30, None] for name, high in COUNT_LIMITS.items()
    },
    **{
        name: [math.nan, math.inf, -math.inf, -1.0, "0.1", True, None, 10**400]
        for name in ("gamma", "gae_lambda", "ent_coef", "vf_coef", "step_delay_s")
    },
    **{name: [0.0, -1.0, math.nan, math.inf, "x"] for name in ("lr", "clip_coef", "max_grad_norm")},
    "log_std_init": [math.nan, math.inf, 100.0, "0"],
    "step_delay_sigma": [math.nan, -0.5, 50.0],
}


@FAST
@given(data=st.data(), field=st.sampled_from(sorted(BAD_FIELDS)))
def test_bad_overrides_are_named(data: Any, field: str) -> None:
    value = data.draw(st.sampled_from(BAD_FIELDS[field]))
    with pytest.raises((TypeError, ValueError)) as caught:
        Workload.from_env("CartPole-v1", **{field: value})
    _named(caught.value, field)
    with pytest.raises((TypeError, ValueError)):
        get_workload("CartPole-v1").with_overrides(**{field: value})


def test_unknown_override_names_the_fields() -> None:
    with pytest.raises(TypeError, match="unknown.*'learning_rate'"):
        Workload.from_env("CartPole-v1", learning_rate=1e-3)


def test_numpy_counts_and_list_widths_are_normalised() -> None:
    w = Workload.from_env(
        "fleetgym-test/BadFine-v0", rollout_steps=np.int64(32), hidden_sizes=[np.int32(16), 8]
    )
    assert type(w.rollout_steps) is int and w.hidden_sizes == (16, 8)
    hash(w)  # still hashable: its spaces are cached by workload
    observation_space, _ = workload_spaces(w)
    assert observation_space.shape == (2,)


def test_a_workload_whose_env_cannot_be_built_names_it_when_its_spaces_are_read() -> None:
    w = Workload(
        name="broken",
        env_id="fleetgym-test/BadInit-v0",
        kind="classic",
        target_return=1.0,
        rollout_steps=8,
    )
    with pytest.raises(ValueError, match="^workload: expected an env that can be built"):
        workload_spaces(w)


def test_a_wide_delay_spread_stays_a_sleep_that_can_be_slept() -> None:
    w = get_workload("CartPole-v1").with_overrides(step_delay_s=60.0, step_delay_sigma=5.0)
    assert all(0.0 < w.actor_step_delay(seed) <= 3600.0 for seed in range(200))


@pytest.mark.parametrize(
    ("source", "what"),
    [
        (
            "fleetgym-test/BadOldStep-v0",
            r"its step returns 4 values \(obs, reward, done, info: the old Gym API\)",
        ),
        (
            old_api_builder,
            r"its step returns 4 values \(obs, reward, done, info: the old Gym API\)",
        ),
        (
            "fleetgym-test/BadOldReset-v0",
            r"its reset returns a single ndarray \(the old Gym API: obs alone\), not the two",
        ),
        ("fleetgym-test/BadNoSeed-v0", r"its reset takes no seed= \(the old Gym API"),
        (
            "fleetgym-test/BadShapeStep-v0",
            r"step has shape \(3,\), expected \(2,\) by its observation_space",
        ),
        ("fleetgym-test/BadShapeReset-v0", r"reset has shape \(2, 1\), expected \(2,\)"),
        ("fleetgym-test/BadDictKeys-v0", r"step has keys \['position'\], expected \['pos'\]"),
    ],
)
def test_an_env_off_the_gymnasium_api_is_refused_naming_it(source: Any, what: str) -> None:
    for call in (get_workload, Workload.from_env):
        with pytest.raises(EnvAPIError, match=what) as caught:
            call(source)
        _named(caught.value, "workload")
        name = source if isinstance(source, str) else "old_api_builder"
        assert name in str(caught.value) and "Gymnasium API" in str(caught.value)
        assert isinstance(caught.value, FleetgymError) and isinstance(caught.value, ValueError)


def test_the_api_probe_leaves_the_generators_alone() -> None:
    built = _CountingFine.built
    shared = _CountingFine.action_space.np_random  # a class attribute: every instance's
    state = np.random.get_state()  # noqa: NPY002
    before = shared.bit_generator.state, state[1].copy(), state[2]
    Workload.from_env("fleetgym-test/CountingFine-v0")
    assert _CountingFine.built == built + 1  # one probe instance, closed again
    assert shared.bit_generator.state == before[0]
    state = np.random.get_state()  # noqa: NPY002
    np.testing.assert_array_equal(state[1], before[1])
    assert state[2] == before[2]


def test_max_episode_steps_in_env_kwargs_is_checked_and_honoured() -> None:
    for bad in (0, -1, 2.5, True, "20"):
        with pytest.raises(
            ValueError, match=r"^env_kwargs\['max_episode_steps'\]: expected an int"
        ) as caught:
            Workload.from_env("Pendulum-v1", env_kwargs={"max_episode_steps": bad})
        assert f"actual {type(bad).__name__} {bad!r}" in str(caught.value)
    w = Workload.from_env("Pendulum-v1", env_kwargs={"max_episode_steps": 7})
    assert w.max_episode_steps == 7 and "max_episode_steps" not in w.env_kwargs_json
    env = w.make_env(seed=0)
    env.reset(seed=0)
    truncated = [env.step(env.action_space.sample())[3] for _ in range(7)]
    assert truncated == [False] * 6 + [True]
    env.close()
    assert (
        Workload.from_env("Pendulum-v1", env_kwargs={"max_episode_steps": None}).max_episode_steps
        == 200
    )
