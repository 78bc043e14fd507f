"""The learned world model as a public predictor of the delay compensations: fitted from
Mode 1 data, it predicts CartPole's state at the tick an action lands on far better than
the delivered observation does, and drives the scheduled action chunks."""

from __future__ import annotations

import gymnasium as gym
import numpy as np

from fleetgym.agents.world_model import WorldModelPredictor, fit_predictor
from fleetgym.wrappers import CartPoleDynamics, NetworkShimWrapper, Playout, ScheduledChunks
from fleetgym.wrappers.channels import FixedDelay


def test_fitted_predictor_beats_the_stale_observation_and_drives_chunks():
    pred = fit_predictor("CartPole-v1", 3000, seed=0, hidden_sizes=(64, 64), epochs=30)
    assert isinstance(pred, WorldModelPredictor)
    truth = CartPoleDynamics()
    rng = np.random.default_rng(1)
    obs = rng.uniform(-0.05, 0.05, size=(64, 4)).astype(np.float32)
    actions = rng.integers(2, size=(64, 4))
    est, unc = pred(obs, actions, None)
    exact = truth(obs, actions, None)
    model_err = np.abs(est - exact).mean()
    stale_err = np.abs(obs - exact).mean()  # what acting on the delivered observation costs
    assert unc.shape == (64,)
    assert model_err < 0.5 * stale_err

    shim = NetworkShimWrapper(
        gym.make("CartPole-v1"),
        uplink=FixedDelay(40.0),
        downlink=FixedDelay(40.0),
        step_ms=20.0,
        playout=Playout(),
    )
    policy = lambda o: int(o[2] + 0.5 * o[3] + 0.05 * o[1] > 0)  # noqa: E731
    env = ScheduledChunks(shim, pred, delay=3, chunk=4, policy=policy)
    obs1, _ = env.reset(seed=0)
    total, done = 0.0, False
    while not done:
        obs1, reward, term, trunc, info = env.step(policy(obs1))
        total, done = total + float(reward), term or trunc
    assert len(info["chunk"]) == 4 and total > 50
