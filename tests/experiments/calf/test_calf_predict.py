"""Tests of the CALF predictive regimes: names, delay-sweep conditions, the oracle, the
learned predictor's adapter (tiny model), the reuse of the clean policy."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest

from fleetgym.agents.world_model.predictor import WorldModelPredictor
from fleetgym.errors import UnsupportedSpaceError
from fleetgym.experiments.calf.conditions import regime_by_name, resolve_condition
from fleetgym.experiments.calf.experiment import _clean_identity
from fleetgym.experiments.calf.predict import TrueStateObservation, median_action_age
from fleetgym.experiments.calf.setup import InputLayout, env_setup, layout_for, make_condition_env
from fleetgym.wrappers.network_shim import NetworkShimWrapper
from fleetgym.wrappers.predictive import PredictiveObservation


@pytest.mark.parametrize(
    ("name", "condition", "compensation"),
    [
        ("net-aware+ceiling", "wifi-normal", "predictive"),
        ("net-aware+ceiling-dist", "wifi-normal", "predictive-dist"),
        ("baseline+ceiling-ahead", "sim-clean", "predictive-ahead"),
        ("wifi-degraded+ceiling-noid", "wifi-degraded", "predictive-noid"),
        ("net-aware+predict", "wifi-normal", "learned"),
        ("net-aware+predict-dist", "wifi-normal", "learned-dist"),
        ("baseline+predict-ahead", "sim-clean", "learned-ahead"),
        ("net-aware+ceiling-ahead-dist", "wifi-normal", "predictive-ahead-dist"),
        ("net-aware+aug", "wifi-normal", "augmented"),
        ("baseline+oracle", "sim-clean", "oracle"),
        ("baseline+sched", "sim-clean", "scheduled"),
        ("net-aware+sched-learned", "wifi-normal", "scheduled-learned"),
    ],
)
def test_regime_suffixes(name: str, condition: str, compensation: str):
    regime = regime_by_name(name)
    assert (regime.train_condition, regime.compensation, regime.compensated) == (
        condition,
        compensation,
        True,
    )
    assert _clean_identity(regime) == (condition == "sim-clean" and compensation != "augmented")


def test_delay_sweep_conditions_give_exact_ages():
    for ticks in (0, 1, 4, 7):
        cond = resolve_condition(f"rtt-{ticks}")
        env = NetworkShimWrapper(gym.make("CartPole-v1"), **cond.shim_kwargs())
        env.reset(seed=0)
        for t in range(12):
            _, _, terminated, truncated, info = env.step(t % 2)
            if t >= ticks:
                assert info["obs_age_steps"] + info["action_age_steps"] == ticks
            if terminated or truncated:
                break
    assert resolve_condition("rtt-3-jitter").uplink == (40.0, 10.0, 0.0, 0.0)
    assert median_action_age(resolve_condition("rtt-5").shim_kwargs()) == 2


def test_the_oracle_sees_the_true_state():
    setup = env_setup("CartPole-v1")
    env = make_condition_env(
        setup, resolve_condition("wifi-degraded"), InputLayout(True, compensation="oracle")
    )
    assert isinstance(env.env, TrueStateObservation)
    env.reset(seed=0)
    for _ in range(10):
        obs, _, terminated, truncated, info = env.step(1)
        assert np.array_equal(obs, info["true_obs"]) and info["obs_age_steps"] == 0
        if terminated or truncated:
            break


def test_the_world_model_adapter_rolls_the_model_and_checks_spaces():
    from fleetgym.agents.world_model import WorldModel, collect_transitions

    data = collect_transitions("CartPole-v1", 200, seed=0)
    cartpole = gym.make("CartPole-v1")
    model = WorldModel(
        cartpole.observation_space,
        cartpole.action_space,
        ensemble_size=2,
        elites=1,
        hidden_sizes=(16,),
        seed=0,
    )
    model.fit(data, epochs=1)
    predictor = WorldModelPredictor(model)
    est, unc = predictor(data.obs[:3], np.array([[0, 1], [1, 1], [0, 0]]), None)
    assert est.shape == (3, 4) and unc.shape == (3,) and np.all(unc >= 0)
    env = PredictiveObservation(
        NetworkShimWrapper(gym.make("CartPole-v1"), profile="wifi-normal"),
        predictor,
        uncertainty=True,
    )
    env.reset(seed=0)
    obs, *_ = env.step(1)
    assert obs.shape == (5,) and np.all(np.isfinite(obs))
    with pytest.raises(UnsupportedSpaceError, match="observation_space"):
        PredictiveObservation(NetworkShimWrapper(gym.make("Acrobot-v1")), predictor)


@pytest.mark.parametrize(
    ("compensation", "samples", "ahead"),
    [
        ("predictive-dist", 16, False),
        ("learned-ahead", 0, True),
        ("predictive-ahead-dist", 16, True),
    ],
)
def test_variants_set_the_wrappers_options(compensation: str, samples: int, ahead: bool):
    from fleetgym.wrappers.dynamics import CartPoleDynamics

    setup = env_setup("CartPole-v1")
    learned = CartPoleDynamics() if compensation.startswith("learned") else None
    layout = InputLayout(True, compensation=compensation, predictor=learned)
    env = make_condition_env(setup, resolve_condition("wifi-normal"), layout)
    while not isinstance(env, PredictiveObservation):
        env = env.env
    assert env.samples == samples and (env.lookahead is None) == ahead
    if learned is not None:
        assert env.predictor is learned


def test_unknown_variants_and_a_missing_predictor_are_refused():
    setup = env_setup("CartPole-v1")
    wifi = resolve_condition("wifi-normal")
    with pytest.raises(ValueError, match="predictive-sideways"):
        make_condition_env(setup, wifi, InputLayout(True, compensation="predictive-sideways"))
    with pytest.raises(ValueError, match="layout.predictor"):
        make_condition_env(setup, wifi, InputLayout(True, compensation="learned-dist"))


def test_best_is_make_robust_envs_predictive_defaults():
    # trace-wifi-office: the most frequent action age (the derived prior) is 0, the
    # study's median 1; +best takes the former, +ceiling-ahead-dist the latter.
    from fleetgym.experiments.calf import conditions, setup

    task = setup.env_setup("CartPole-v1")
    network = conditions.resolve_condition("trace-wifi-office")
    priors = {}
    for suffix in ("+best", "+ceiling-ahead-dist"):
        layout = setup.layout_for(conditions.regime_by_name("baseline" + suffix), task)
        env = setup.make_condition_env(task, network, layout)
        priors[suffix] = env.get_wrapper_attr("action_delay")
        assert env.get_wrapper_attr("samples") == 16
        env.close()
    assert priors == {"+best": 0, "+ceiling-ahead-dist": 1}


def test_scheduled_regime_makes_its_chunks_with_the_policy_in_its_slot():
    from fleetgym.experiments.calf.predict import PolicySlot
    from fleetgym.wrappers import ScheduledChunks

    setup = env_setup("CartPole-v1")
    layout = layout_for(regime_by_name("baseline+sched"), setup)
    assert isinstance(layout.policy_slot, PolicySlot)
    env = make_condition_env(setup, resolve_condition("wifi-degraded"), layout)
    chunks = env.get_wrapper_attr("chunk")
    assert chunks > 1 and isinstance(env.env, ScheduledChunks)
    obs, _ = env.reset(seed=0)
    with pytest.raises(RuntimeError, match="no model set"):
        env.step(0)

    class Controller:
        def predict(self, obs, deterministic=True):
            return int(obs[2] + 0.5 * obs[3] > 0), None

    layout.policy_slot.model = Controller()
    obs, _ = env.reset(seed=0)
    _, _, _, _, info = env.step(0)
    assert len(info["chunk"]) == chunks
