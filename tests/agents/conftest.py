"""Fixtures of the world model tests: data and a trained model of an exact linear system."""

from __future__ import annotations

import pytest
import torch
from world_model_systems import LinearEnv

from fleetgym.agents.world_model import TransitionBuffer, WorldModel


@pytest.fixture(scope="session")
def linear_data() -> TransitionBuffer:
    return TransitionBuffer.collect(LinearEnv(), 1000, seed=0)


@pytest.fixture(scope="session")
def linear_model(linear_data: TransitionBuffer) -> WorldModel:
    """A model of the linear system, trained well (about a second); do not mutate it."""
    env = LinearEnv()
    model = WorldModel(
        env.observation_space,
        env.action_space,
        ensemble_size=3,
        elites=2,
        hidden_sizes=(32,),
        lr=3e-3,
        learn_termination=False,
        seed=0,
    )
    # Session fixtures run before the per-test one-thread fixture: limit threads here too.
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        model.fit(linear_data, epochs=100, batch_size=64)
    finally:
        torch.set_num_threads(threads)
    return model
