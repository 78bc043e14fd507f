"""A learned world model as a delay-compensation predictor, fitted from Mode 1 data.

The predictor protocol of :mod:`fleetgym.wrappers.predictive` (``predictor(obs, actions,
ages)``, batched) is what :class:`~fleetgym.wrappers.predictive.PredictiveObservation` and
:class:`~fleetgym.wrappers.ScheduledChunks` roll an observation forward with.
:class:`WorldModelPredictor` puts a fitted :class:`~fleetgym.agents.world_model.WorldModel`
behind it, and :func:`fit_predictor` fits one from the user's own undelayed (Mode 1)
transitions, so an env without known equations gets a predictor too.

Example:
    >>> pred = fit_predictor("CartPole-v1", steps=500, seed=0, hidden_sizes=(16,), ensemble_size=2, elites=1, epochs=2)
    >>> import numpy as np
    >>> est, unc = pred(np.zeros((1, 4), np.float32), np.array([[1, 0, 1]]), None)
    >>> est.shape, unc.shape
    ((1, 4), (1,))
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import gymnasium as gym
import numpy as np

from fleetgym.validation import check_int

__all__ = ["WorldModelPredictor", "fit_predictor"]


class WorldModelPredictor:
    """A learned world model as a batched predictor: its elites' mean, step after step.

    Rolls :meth:`~fleetgym.agents.world_model.WorldModel.predict` through the actions
    (one model call per step for the whole batch) and reports, per case, the sum of the
    elites' disagreement over the steps as the uncertainty. The spaces are the model's,
    so the compensation wrappers refuse a model fitted on another env.

    Args:
        model: A fitted :class:`~fleetgym.agents.world_model.WorldModel`.
    """

    batched = True

    def __init__(self, model: Any) -> None:
        self.model = model
        self.observation_space = model.observation_space
        self.action_space = model.action_space

    def __call__(self, obs: np.ndarray, actions: np.ndarray, ages: Any) -> Any:
        state = np.asarray(obs, dtype=np.float32).reshape(len(obs), -1)
        acts = np.asarray(actions)
        unc = np.zeros(len(state))
        for i in range(acts.shape[1]):
            step = self.model.predict(state, acts[:, i])
            state = np.asarray(step.next_obs, dtype=np.float32)
            unc += np.asarray(step.uncertainty, dtype=np.float64)
        return state.reshape(np.shape(obs)), unc


def fit_predictor(
    env: str | gym.Env[Any, Any],
    steps: int = 20_000,
    *,
    seed: int = 0,
    policy: Callable[[np.ndarray], Any] | None = None,
    epochs: int | None = None,
    **model_kwargs: Any,
) -> WorldModelPredictor:
    """A :class:`WorldModelPredictor` fitted on ``steps`` Mode 1 transitions of ``env``.

    Args:
        env: A Gymnasium ID or an env instance (undelayed: the data is the env's own).
        steps: Transitions to collect.
        seed: Seeds the data collection and the model.
        policy: What acts while collecting (``obs -> action``; default random actions).
            The deployed policy with some exploration covers the states it will meet.
        epochs: The model's training epochs (default: the model's own).
        **model_kwargs: :class:`~fleetgym.agents.world_model.WorldModel` settings
            (default an ensemble of 5 with 3 elites and two hidden layers of 64).

    Raises:
        TypeError, ValueError: For a bad argument.
    """
    import torch

    from fleetgym.agents.world_model.buffer import collect_transitions
    from fleetgym.agents.world_model.model import WorldModel

    steps = check_int("steps", steps, 10, 10**8)
    torch.manual_seed(seed)
    data = collect_transitions(env, steps, seed=seed, policy=policy)
    made = gym.make(env) if isinstance(env, str) else env
    try:
        settings = {"ensemble_size": 5, "elites": 3, "hidden_sizes": (64, 64), **model_kwargs}
        model = WorldModel(made.observation_space, made.action_space, seed=seed, **settings)
    finally:
        if isinstance(env, str):
            made.close()
    if epochs is None:
        model.fit(data)
    else:
        model.fit(data, epochs=check_int("epochs", epochs, 1, 10**6))
    return WorldModelPredictor(model)
