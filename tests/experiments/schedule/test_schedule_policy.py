"""The step scheduler's first-move prior (FirstMovePolicy): exact initial probabilities."""

from __future__ import annotations

import math

import numpy as np
import pytest

pytest.importorskip("stable_baselines3")

import torch  # noqa: E402

import fleetgym  # noqa: E402,F401
from fleetgym.agents.schedulers.actions import STEP_KEEP  # noqa: E402
from fleetgym.agents.schedulers.observation import OBS_ROUND  # noqa: E402
from fleetgym.experiments.schedule import config, train  # noqa: E402
from fleetgym.experiments.schedule.policy import (  # noqa: E402
    FirstMovePolicy,
    first_move_offset,
    set_keep_prior,
)

TINY = {"workload": "CartPole-v1", "timing": "modeled", "max_rounds": 3, "steps_per_actor": 16}


def _model(keep: float, first_keep: float | None):
    from stable_baselines3 import PPO

    cfg = config.SchedulerPPOConfig(
        n_steps=4, batch_size=4, keep_prior=keep, first_keep_prior=first_keep, paired_seeds=0
    )
    venv = train.make_scheduler_vec_env(config.GENERAL_ENV_ID, TINY, actions="step")
    kwargs = cfg.ppo_kwargs()
    policy = "MlpPolicy"
    if first_keep is not None:
        policy = FirstMovePolicy
        kwargs["policy_kwargs"]["first_offset"] = first_move_offset(keep, first_keep)
    model = PPO(policy, venv, seed=0, device="cpu", **kwargs)
    set_keep_prior(model, keep)
    with torch.no_grad():  # the head's small random weights out of the way: exact priors
        model.policy.action_net.weight.zero_()
    return model


def _probs(model) -> np.ndarray:
    obs = np.zeros((2, 8), np.float32)
    obs[:, -1] = 0.6  # 8 actors of 1..32
    obs[1, OBS_ROUND] = 1 / 3  # after the first round
    with torch.no_grad():
        dist = model.policy.get_distribution(torch.as_tensor(obs))
    return dist.distribution.probs.numpy()


def test_the_first_move_is_explored_with_its_own_prior_and_later_rounds_keep():
    probs = _probs(_model(0.9, 1 / 3))
    np.testing.assert_allclose(probs[0], [1 / 3, 1 / 3, 1 / 3], atol=1e-6)
    np.testing.assert_allclose(probs[1], [0.05, 0.9, 0.05], atol=1e-6)
    # without it, the keep prior holds the first decision too
    np.testing.assert_allclose(_probs(_model(0.9, None))[0], [0.05, 0.9, 0.05], atol=1e-6)
    assert first_move_offset(0.9, 0.9) == 0.0
    assert first_move_offset(0.9, 1 / 3) == pytest.approx(-math.log(18))


def test_the_offset_survives_save_and_load(tmp_path):
    from stable_baselines3 import PPO

    model = _model(0.8, 0.5)
    model.save(tmp_path / "m.zip")
    loaded = PPO.load(tmp_path / "m.zip", device="cpu")
    assert isinstance(loaded.policy, FirstMovePolicy)
    assert loaded.policy.first_offset == pytest.approx(first_move_offset(0.8, 0.5))
    np.testing.assert_allclose(_probs(loaded), _probs(model), atol=1e-7)
    assert _probs(loaded)[0][STEP_KEEP] == pytest.approx(0.5, abs=1e-6)


def test_first_keep_prior_is_checked_and_trains(tmp_path):
    for bad in (0, 1, 1.5, True, "x"):
        with pytest.raises(ValueError, match="first_keep_prior: expected None or a number"):
            config.SchedulerPPOConfig(first_keep_prior=bad)
    with pytest.raises(ValueError, match="first_keep_prior: needs a first move"):
        config.SchedulerPPOConfig(actions="pow2", first_keep_prior=0.5)
    with pytest.raises(ValueError, match="first_keep: expected a number in"):
        first_move_offset(0.9, 0.0)
    cfg = config.SchedulerPPOConfig(n_steps=3, batch_size=3, first_keep_prior=0.5, paired_seeds=0)
    result = train.train_scheduler(
        tmp_path,
        env_id=config.GENERAL_ENV_ID,
        env_kwargs=TINY,
        episodes=2,
        config=cfg,
        progress=False,
        tensorboard=False,
    )
    from fleetgym.experiments.schedule.checkpoint import load_learned_scheduler

    scheduler = load_learned_scheduler(result.model_path)
    action, _ = scheduler.predict(np.zeros(7, np.float32), episode_start=np.array([True]))
    assert 1 <= int(np.asarray(action).reshape(-1)[0]) + 1 <= 32
