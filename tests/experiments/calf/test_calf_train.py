"""Training and evaluating one CALF policy per regime, at tiny budgets (no quality thresholds)."""

from __future__ import annotations

import dataclasses

import pytest

from fleetgym.experiments.calf import conditions, evaluate, train
from fleetgym.experiments.calf import setup as calf_setup

# One PPO update (8 envs x 32 steps) and a single epoch keep each training to a second.
TINY = {"n_epochs": 1}


def tiny_setup(env_id: str = "CartPole-v1", **kw):
    setup = calf_setup.env_setup(env_id, **kw)
    params = dict(setup.hyperparams, **TINY)
    if setup.algo == "recurrent-ppo":
        params.update(n_steps=16, batch_size=32)
    return dataclasses.replace(setup, hyperparams=params)


@pytest.mark.parametrize("regime", conditions.DEFAULT_REGIMES + ("net-aware-mix+comp",))
def test_each_cartpole_regime_trains_and_evaluates(regime):
    setup = tiny_setup()
    policy = train.train_regime(setup, conditions.REGIMES[regime], seed=0, total_timesteps=256)
    assert policy.timesteps >= 256
    rec = evaluate.evaluate_policy(setup, policy, conditions.CONDITIONS["wifi-degraded"], 3, seed=1)
    assert rec.n_episodes == 3 and rec.regime == regime and rec.condition == "wifi-degraded"
    assert 1.0 <= rec.mean_return <= 500.0


def test_minigrid_recurrent_regime_trains_and_evaluates():
    setup = tiny_setup("MiniGrid-Empty-5x5-v0")
    assert setup.algo == "recurrent-ppo" and setup.period_ms == 20.0
    policy = train.train_regime(
        setup, conditions.REGIMES["net-aware+comp"], seed=0, total_timesteps=128, n_envs=2
    )
    rec = evaluate.evaluate_policy(setup, policy, conditions.CONDITIONS["wifi-normal"], 2, seed=0)
    assert rec.n_episodes == 2 and 0.0 <= rec.mean_return <= 1.0
