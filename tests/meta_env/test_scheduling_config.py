"""The ActorSchedulingEnv's configs: validation, the JSON round trip, the flat entry point.

The rollouts below were recorded with the 30-keyword constructor before the configs
existed (seed 3, actions 3, 0, 2): the configs and the flat ``gym.make`` keywords must
give the same observations, rewards and costs.
"""

from __future__ import annotations

import dataclasses
import json
from typing import Any

import gymnasium as gym
import pytest

import fleetgym  # noqa: F401  (registers the IDs)
from fleetgym.meta_env import (
    ActorSchedulingEnv,
    CostConfig,
    EpisodeConfig,
    FleetConfig,
    TrainingConfig,
    make_actor_scheduling_env,
)
from fleetgym.meta_env.pricing import get_pricing
from fleetgym.meta_env.scheduling_kwargs import configs_from_kwargs
from fleetgym.meta_env.time_model import ComputeCostModel, TimeModel

pytest.importorskip("torch")

ENV_ID = "fleetgym/ActorScheduling-v0"
#: The flat keywords of each recorded rollout.
CASES: dict[str, dict[str, Any]] = {
    "default": {
        "workload": "CartPole-v1",
        "timing": "modeled",
        "max_actors": 4,
        "steps_per_actor": 16,
        "max_rounds": 3,
    },
    "server": {
        "workload": "CartPole-v1",
        "timing": "modeled",
        "max_actors": 3,
        "steps_per_actor": 16,
        "max_rounds": 3,
        "billing": "server",
        "server_actors": 2,
        "cost_weight": 100.0,
        "budget": None,
        "beta": 0.5,
        "penalty_scale": 2.0,
        "pricing": "aci",
        "pricing_overrides": {"actor_request": 1e-6},
        "cold_start_actor_s": 0.5,
        "prewarm": False,
        "latency_s": 0.01,
        "learner_speed_factor": 2.0,
        "compute": {"actor_jitter_cv": 0.3},
        "normalize_obs": False,
        "learner_overrides": {"minibatch_size": 32},
        "fleet_kwargs": {"batched": False},
        "target_return": 30.0,
    },
}
#: The same as configs, for the constructor.
CONFIGS: dict[str, dict[str, Any]] = {
    "default": {
        "timing": "modeled",
        "training": TrainingConfig(steps_per_actor=16),
        "fleet": FleetConfig(max_actors=4),
        "episode": EpisodeConfig(max_rounds=3),
    },
    "server": {
        "timing": "modeled",
        "normalize_obs": False,
        "training": TrainingConfig(
            steps_per_actor=16,
            compute={"actor_jitter_cv": 0.3},
            learner_overrides={"minibatch_size": 32},
        ),
        "fleet": FleetConfig(max_actors=3, options={"batched": False}),
        "costs": CostConfig(
            pricing="aci",
            pricing_overrides={"actor_request": 1e-6},
            billing="server",
            server_actors=2,
            time_model={
                "cold_start_actor_s": 0.5,
                "prewarm": False,
                "latency_s": 0.01,
                "learner_speed_factor": 2.0,
            },
        ),
        "episode": EpisodeConfig(
            target_return=30.0,
            max_rounds=3,
            budget=None,
            beta=0.5,
            penalty_scale=2.0,
            cost_weight=100.0,
        ),
    },
}
GOLDEN = {
    "default": {
        "obs": [
            [0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 1.0],
            [
                0.3333333432674408,
                2.4411323070526123,
                0.07179487496614456,
                0.40047487616539,
                1.0,
                1.1227909326553345,
                0.9768217206001282,
            ],
            [
                0.6666666865348816,
                2.575695276260376,
                0.07179487496614456,
                0.003688246477395296,
                0.707317054271698,
                0.9230206608772278,
                0.9762853980064392,
            ],
            [
                1.0,
                2.029170036315918,
                0.09743589907884598,
                0.33987870812416077,
                0.9024389982223511,
                0.9934168457984924,
                0.9756317138671875,
            ],
        ],
        "rewards": [-0.002384632755578133, -0.0017322728261794978, -17.602111443962524],
        "costs": [5.7945705752817476e-05, 5.9286484920280404e-05, 6.0920742547273336e-05],
    },
    "server": {
        "obs": [
            [0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0],
            [
                1.0,
                9.374505996704102,
                14.0,
                0.0007298304699361324,
                0.007400000002235174,
                0.026386279612779617,
                0.0,
            ],
            [
                2.0,
                12.172998428344727,
                14.0,
                1.460240309825167e-05,
                0.005799999926239252,
                0.024669667705893517,
                0.0,
            ],
            [
                3.0,
                5.844352722167969,
                19.0,
                0.005030794534832239,
                0.007400000002235174,
                0.023058712482452393,
                0.0,
            ],
        ],
        "rewards": [-0.021533947700456822, -0.018677906342089854, -5.519092206062671],
        "costs": [3.969553165010801e-05, 7.412625622851181e-05, 0.00010932069807323904],
    },
}


def rollout(env: gym.Env[Any, Any]) -> dict[str, list[Any]]:
    """Seed 3, actions 3, 0, 2 (clipped to the action space): observations, rewards, costs."""
    obs, _ = env.reset(seed=3)
    record: dict[str, list[Any]] = {"obs": [obs.tolist()], "rewards": [], "costs": []}
    for action in (3, 0, 2):
        obs, reward, terminated, truncated, info = env.step(min(action, env.action_space.n - 1))
        record["obs"].append(obs.tolist())
        record["rewards"].append(reward)
        record["costs"].append(info["total_cost"])
        if terminated or truncated:
            break
    env.close()
    return record


def assert_golden(record: dict[str, list[Any]], name: str) -> None:
    golden = GOLDEN[name]
    assert len(record["obs"]) == len(golden["obs"])
    for got, want in zip(record["obs"], golden["obs"], strict=True):
        assert got == pytest.approx(want, rel=1e-9, abs=1e-12)
    assert record["rewards"] == pytest.approx(golden["rewards"], rel=1e-9, abs=1e-12)
    assert record["costs"] == pytest.approx(golden["costs"], rel=1e-9, abs=1e-12)


@pytest.mark.parametrize("name", sorted(GOLDEN))
def test_flat_gym_make_keeps_the_recorded_rollout(name):
    assert_golden(rollout(gym.make(ENV_ID, **CASES[name])), name)


@pytest.mark.parametrize("name", sorted(GOLDEN))
def test_configs_give_the_recorded_rollout(name):
    env = ActorSchedulingEnv("CartPole-v1", **CONFIGS[name])
    assert_golden(rollout(env), name)


def test_configs_from_kwargs_builds_the_configs_the_constructor_takes():
    for name, flat in CASES.items():
        kwargs = dict(flat)
        kwargs.pop("workload")
        configs = configs_from_kwargs(**kwargs)
        for key, value in CONFIGS[name].items():
            assert configs[key] == value, key


def test_spec_round_trips_through_json():
    env = gym.make(ENV_ID, **CASES["server"])
    spec = gym.envs.registration.EnvSpec.from_json(env.spec.to_json())
    assert spec.kwargs == CASES["server"]
    env.close()
    assert_golden(rollout(gym.make(spec)), "server")


def test_dict_forms_of_the_configs_are_accepted():
    dicts = {k: v.to_dict() if hasattr(v, "to_dict") else v for k, v in CONFIGS["server"].items()}
    env = ActorSchedulingEnv("CartPole-v1", **json.loads(json.dumps(dicts)))
    assert env.cost_config == CONFIGS["server"]["costs"]
    assert env.max_actors == 3 and env.fleet_kwargs == {"backend": "inprocess", "batched": False}
    env.close()


CONFIG_OBJECTS = [
    TrainingConfig(),
    TrainingConfig(steps_per_actor=8, compute={"actor_step_s": 1e-4}, learner_overrides={"a": 1}),
    TrainingConfig(compute=ComputeCostModel(1e-4, 1e-3, 1e-4, 1e-2, 0.1)),
    FleetConfig(),
    FleetConfig(max_actors=8, backend="process", inference="server", options={"x": [1, 2]}),
    CostConfig(),
    CostConfig(pricing="lambda", pricing_overrides={"actor_memory_gb": 2.0}),
    CostConfig(pricing=get_pricing("aci"), billing="server", server_actors=4),
    CostConfig(time_model=TimeModel(prewarm=True, warm_pool=2)),
    CostConfig(time_model={"latency_s": 0.01}),
    EpisodeConfig(),
    EpisodeConfig(target_return=-5.0, max_rounds=7, budget=None, beta=0.0, cost_weight=2.0),
    EpisodeConfig(budget=0.5, penalty_scale=1.0),
]


@pytest.mark.parametrize("config", CONFIG_OBJECTS, ids=lambda c: type(c).__name__)
def test_every_config_round_trips_through_json(config):
    for data in (config.to_dict(), dataclasses.asdict(config)):
        back = type(config).from_dict(json.loads(json.dumps(data)))
        assert back == config
        assert type(back.to_dict()) is dict


def test_every_config_field_is_documented():
    for cls in (TrainingConfig, FleetConfig, CostConfig, EpisodeConfig):
        for field in dataclasses.fields(cls):
            assert f"{field.name}:" in (cls.__doc__ or ""), (cls.__name__, field.name)


@pytest.mark.parametrize(
    ("build", "exc", "match"),
    [
        (lambda: TrainingConfig(steps_per_actor=0), ValueError, "steps_per_actor: expected"),
        (lambda: TrainingConfig(compute={"nope": 1}), ValueError, "compute: expected fields"),
        (lambda: TrainingConfig(compute={"actor_step_s": -1.0}), ValueError, "actor_step_s"),
        (lambda: TrainingConfig(compute=3), TypeError, "compute: expected a ComputeCostModel"),
        (lambda: TrainingConfig(learner_overrides=[1]), TypeError, "learner_overrides: expected"),
        (lambda: FleetConfig(max_actors=0), ValueError, "max_actors: expected"),
        (lambda: FleetConfig(max_actors=10**6), ValueError, "max_actors: expected"),
        (lambda: FleetConfig(backend=""), TypeError, "backend: expected a non-empty string"),
        (lambda: FleetConfig(options={"seed": 1}), ValueError, r"options: expected no keys.*seed"),
        (lambda: CostConfig(pricing="nope"), ValueError, "pricing: expected"),
        (lambda: CostConfig(pricing_overrides={"vcpu_second": -1.0}), ValueError, "vcpu_second"),
        (lambda: CostConfig(pricing="aci", pricing_overrides={"x": 1}), ValueError, "overrides"),
        (lambda: CostConfig(billing="vm"), ValueError, "billing: expected"),
        (lambda: CostConfig(server_actors=0), ValueError, "server_actors: expected"),
        (lambda: CostConfig(time_model={"latency_s": -1.0}), ValueError, "latency_s: expected"),
        (lambda: CostConfig(time_model={"x": 1}), ValueError, "time_model: expected fields"),
        (lambda: CostConfig(time_model=1), TypeError, "time_model: expected a TimeModel"),
        (lambda: EpisodeConfig(max_rounds=0), ValueError, "max_rounds: expected"),
        (lambda: EpisodeConfig(budget="all"), ValueError, "budget: expected"),
        (lambda: EpisodeConfig(budget=-1.0), ValueError, "budget: expected"),
        (lambda: EpisodeConfig(beta=float("nan")), ValueError, "beta: expected"),
        (lambda: EpisodeConfig(penalty_scale=0.0), ValueError, "penalty_scale: expected"),
        (lambda: EpisodeConfig(cost_weight=None), TypeError, "cost_weight: expected"),
        (lambda: EpisodeConfig(target_return=1e300), ValueError, "target_return: expected"),
        (lambda: EpisodeConfig.from_dict({"rounds": 3}), ValueError, r"unknown \['rounds'\]"),
        (lambda: EpisodeConfig.from_dict([1]), TypeError, "expected a mapping"),
        (lambda: ActorSchedulingEnv(fleet=4), TypeError, "fleet: expected a FleetConfig"),
        (lambda: configs_from_kwargs(max_actor=4), TypeError, r"unknown \['max_actor'\]"),
        (lambda: make_actor_scheduling_env(fleet={}), TypeError, r"unknown \['fleet'\]"),
        (lambda: configs_from_kwargs(fleet_kwargs=[1]), TypeError, "fleet_kwargs: expected"),
    ],
)
def test_configs_reject_bad_fields_clearly(build, exc, match):
    with pytest.raises(exc, match=match):
        build()


def test_configs_are_frozen():
    with pytest.raises(dataclasses.FrozenInstanceError):
        FleetConfig().max_actors = 3  # type: ignore[misc]
