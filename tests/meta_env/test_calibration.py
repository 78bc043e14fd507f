"""Tests of fleetgym.meta_env.calibration and of scheduling envs that have no table entry."""

from __future__ import annotations

import json
import math

import gymnasium as gym
import numpy as np
import pytest

from fleetgym.agents.workloads import get_workload
from fleetgym.meta_env import (
    ActorSchedulingEnv,
    EpisodeConfig,
    FleetConfig,
    TrainingConfig,
    make_actor_scheduling_env,
)
from fleetgym.meta_env.calibration import (
    CACHE_ENV_VAR,
    CalibrationError,
    cache_dir,
    cache_path,
    calibrate,
)
from fleetgym.meta_env.presets import scheduling_defaults

#: A tiny budget: the model's numbers are noise, the tests check the plumbing.
BUDGET = 0.02


@pytest.fixture(autouse=True)
def _cache_in_tmp(tmp_path, monkeypatch):
    monkeypatch.setenv(CACHE_ENV_VAR, str(tmp_path / "cache"))


class RaisingEnv(gym.Env):
    """Raises in ``step`` (or in the constructor with ``fail_init``)."""

    observation_space = gym.spaces.Box(-1.0, 1.0, (2,), np.float32)
    action_space = gym.spaces.Discrete(2)

    def __init__(self, fail_init: bool = False, fail_step: bool = True) -> None:
        self.fail_init, self.fail_step = fail_init, fail_step

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        if self.fail_init:
            raise RuntimeError("no simulator licence")
        return np.zeros(2, np.float32), {}

    def step(self, action):
        if self.fail_step:
            raise RuntimeError("simulator crashed")
        return np.zeros(2, np.float32), 0.0, False, False, {}


class TinyImageEnv(gym.Env):
    """uint8 (16, 16, 3) frames, 2 actions, episodes of 4 steps, reward threshold 3."""

    observation_space = gym.spaces.Box(0, 255, (16, 16, 3), np.uint8)
    action_space = gym.spaces.Discrete(2)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.t = 0
        return np.zeros((16, 16, 3), np.uint8), {}

    def step(self, action):
        self.t += 1
        return np.full((16, 16, 3), self.t, np.uint8), float(action), self.t >= 4, False, {}


@pytest.fixture(scope="module")
def test_envs():
    gym.register("fleetgym-test/CalRaise-v0", entry_point=RaisingEnv)
    gym.register(
        "fleetgym-test/CalInitRaise-v0", entry_point=RaisingEnv, kwargs={"fail_init": True}
    )
    gym.register("fleetgym-test/CalImage-v0", entry_point=TinyImageEnv, reward_threshold=3.0)
    yield
    for env_id in ("CalRaise-v0", "CalInitRaise-v0", "CalImage-v0"):
        gym.registry.pop(f"fleetgym-test/{env_id}", None)


def test_cache_dir_follows_the_env_var(tmp_path, monkeypatch):
    assert cache_dir() == tmp_path / "cache"
    monkeypatch.delenv(CACHE_ENV_VAR)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert cache_dir() == tmp_path / "xdg" / "fleetgym"


def test_calibration_is_measured_once_then_read_from_the_cache(tmp_path):
    first = calibrate("Acrobot-v1", budget_s=BUDGET)
    assert not first.cached and first.path.is_file()
    assert first.path.parent == tmp_path / "cache" / "calibration"
    model = first.model
    assert model.actor_step_s > 0 and model.learner_sample_s > 0
    assert model.actor_overhead_s >= 0 and model.learner_overhead_s >= 0
    record = json.loads(first.path.read_text())
    assert record["key"]["env_id"] == "Acrobot-v1" and "gymnasium" in record["key"]["versions"]
    again = calibrate("Acrobot-v1", budget_s=BUDGET)
    assert again.cached and again.model == model and again.path == first.path
    forced = calibrate("Acrobot-v1", budget_s=BUDGET, force=True)
    assert not forced.cached


def test_cache_key_covers_workload_fields_and_learner_overrides():
    w = get_workload("Acrobot-v1")
    base = cache_path(w)
    assert cache_path(w.with_overrides(epochs=2)) != base
    assert cache_path(w, {"minibatch_size": 64}) != base
    assert cache_path("Acrobot-v1") == base


def test_unreadable_cache_file_is_measured_again():
    path = cache_path("Acrobot-v1")
    path.parent.mkdir(parents=True)
    path.write_text("{not json")
    result = calibrate("Acrobot-v1", budget_s=BUDGET)
    assert not result.cached and json.loads(path.read_text())["model"]


@pytest.mark.parametrize(
    ("env_id", "step"),
    [
        ("fleetgym-test/CalRaise-v0", "stepping the env"),
        ("fleetgym-test/CalInitRaise-v0", "building the env"),
    ],
)
def test_env_raising_during_calibration_names_the_step(test_envs, env_id, step):
    # The inference resets nothing, so the broken env still becomes a workload.
    w = get_workload(env_id)
    with pytest.raises(CalibrationError, match=f"{env_id}.*failed while {step}.*RuntimeError"):
        calibrate(w, budget_s=BUDGET)


def test_target_that_cannot_be_inferred_is_a_clear_error():
    assert math.isinf(get_workload("Pendulum-v1").target_return)
    with pytest.raises(ValueError, match=r"target_return: expected a number .*'Pendulum-v1'"):
        ActorSchedulingEnv("Pendulum-v1")
    assert scheduling_defaults("Pendulum-v1", target_return=-200.0).target_return == -200.0


def test_shipped_tables_stay_for_the_papers_workloads():
    d = scheduling_defaults("CartPole-v1", calibrate=True)
    assert d.compute.actor_step_s == 2.0e-4  # the table's, no calibration
    assert not any(cache_dir().rglob("*.json"))


@pytest.mark.timeout(300)
@pytest.mark.parametrize(
    ("workload", "kwargs", "discrete"),
    [
        ("Acrobot-v1", {}, True),
        ("Pendulum-v1", {"target_return": -300.0}, False),
        ("fleetgym-test/CalImage-v0", {}, True),
    ],
)
def test_modelled_scheduling_of_envs_without_a_table_entry(test_envs, workload, kwargs, discrete):
    w = get_workload(workload).with_overrides(minibatch_size=16, epochs=1)
    calibrated = calibrate(w, budget_s=BUDGET).model
    env = ActorSchedulingEnv(
        w,
        timing="modeled",
        training=TrainingConfig(steps_per_actor=8),
        fleet=FleetConfig(max_actors=3),
        episode=EpisodeConfig(max_rounds=2, **kwargs),
    )
    assert env.compute == calibrated  # the env found the cached calibration
    obs, _ = env.reset(seed=0)
    assert obs.shape == (7,)
    assert env.learner is not None and env.learner.policy.discrete == discrete
    total_time = total_cost = 0.0
    done, rounds = False, 0
    while not done:
        action = 2 if rounds == 0 else 0
        obs, reward, terminated, truncated, info = env.step(action)
        rounds += 1
        done = terminated or truncated
        assert info["num_actors"] == action + 1 and info["num_samples"] == 8 * (action + 1)
        expected = [calibrated.actor_overhead_s + 8 * calibrated.actor_step_s] * (action + 1)
        # Modelled compute: the calibrated line times each actor's straggler draw (CV 0.1).
        assert np.all(np.asarray(info["actor_compute_times"]) > 0)
        assert np.mean(info["actor_compute_times"]) == pytest.approx(np.mean(expected), rel=1.0)
        total_time += info["round_time"]
        total_cost += info["round_cost"]
        assert reward == pytest.approx(
            -env.beta * info["round_time"] + info["terminal_penalty"], rel=1e-9
        )
    assert rounds == 2 and truncated
    assert info["total_time"] == pytest.approx(total_time)
    assert env.total_cost == pytest.approx(total_cost)
    env.close()


def test_measured_timing_does_not_calibrate(tmp_path):
    env = make_actor_scheduling_env(
        "Acrobot-v1", timing="measured", max_actors=2, steps_per_actor=8
    )
    assert not any((tmp_path / "cache").rglob("*.json"))
    env.close()
