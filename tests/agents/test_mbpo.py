"""MBPO (SB3's SAC on model rollouts branched from real states): tiny real runs.

Pendulum-v1 and a short Hopper-v5 budget, real SB3 SAC and a real world model each time:
end to end, seeds, the batch mix, the rollout schedules, save/load, bad input and the
fallback to real data when the model diverges.
"""

from __future__ import annotations

import dataclasses
import json

import gymnasium as gym
import numpy as np
import pytest
import torch

from fleetgym.agents.world_model import MBPO, MBPOConfig, MBPOModelConfig
from fleetgym.errors import UnsupportedSpaceError

#: A run small enough for a unit test: 200 random steps, then a fit and a rollout every
#: 100 real steps.
TINY_MODEL = MBPOModelConfig(
    every=100, ensemble_size=2, elites=1, hidden_sizes=(32, 32), max_epochs=3,
    learn_termination=False,
)  # fmt: skip
TINY = MBPOConfig(rollout_batch=20, updates_per_step=1, model=TINY_MODEL)
#: SB3 SAC's settings of the tiny run.
SAC_TINY = {"learning_starts": 200, "batch_size": 64, "policy_kwargs": {"net_arch": [32, 32]}}


def tiny(model: dict | None = None, **changes) -> MBPOConfig:
    """TINY with some MBPO fields (and some of its model's) changed."""
    return dataclasses.replace(
        TINY, model=dataclasses.replace(TINY_MODEL, **(model or {})), **changes
    )


def pendulum(seed=0, model=None, **changes):
    return MBPO("MlpPolicy", gym.make("Pendulum-v1"), tiny(model, **changes), seed=seed, **SAC_TINY)


def actor_params(agent):
    return torch.cat([p.detach().flatten() for p in agent.actor.parameters()])


def test_learns_end_to_end_on_pendulum():
    agent = pendulum(rollout_length=3).learn(400)
    assert agent.num_timesteps == 400
    # Fits at real steps 201 and 301 (train runs once learning_starts is passed).
    assert [r["step"] for r in agent.mbpo_log] == [201, 301]
    assert agent.model_version == 2
    assert len(agent.real_transitions) == 301  # synced at each fit
    # Pendulum never ends: each of the two rollouts adds rollout_batch * k rows.
    assert agent.model_replay.total_added == 2 * 20 * 3
    assert set(agent.model_replay.versions[: len(agent.model_replay)]) == {1, 2}
    # SAC trained on the mix: round(0.05 * 64) = 3 real rows per batch.
    assert agent.mixed_replay.last_split == (3, 61)
    action, _ = agent.predict(np.zeros(3, np.float32), deterministic=True)
    assert action.shape == (1,) and np.all(np.abs(action) <= 2.0)


def test_learns_end_to_end_on_a_tiny_hopper_budget():
    config = tiny({"learn_termination": True}, rollout_length=5)
    agent = MBPO("MlpPolicy", gym.make("Hopper-v5"), config, seed=1, **SAC_TINY).learn(400)
    assert agent.model_version == 2
    # Rollouts stop where the model predicts termination: at most rollout_batch * k rows.
    assert 0 < agent.model_replay.total_added <= 2 * 20 * 5
    rows = len(agent.model_replay)
    assert np.isfinite(agent.model_replay.next_obs[:rows]).all()
    summary = agent.summary()
    assert summary["imagination_enabled"] and summary["model_fit_s"] > 0


def test_a_seed_reproduces_and_another_differs():
    a, b = pendulum(rollout_length=2).learn(300), pendulum(rollout_length=2).learn(300)
    c = pendulum(rollout_length=2, seed=1).learn(300)
    assert torch.equal(actor_params(a), actor_params(b))
    n = len(a.model_replay)
    assert n and np.array_equal(a.model_replay.next_obs[:n], b.model_replay.next_obs[:n])
    assert not torch.equal(actor_params(a), actor_params(c))


def _membership(batch, buffer_rows):
    keys = {row.tobytes() for row in buffer_rows}
    return sum(row.tobytes() in keys for row in batch.next_observations.numpy())


@pytest.mark.parametrize("ratio", [0.0, 0.25, 1.0])
def test_the_batch_mix_honours_real_ratio(ratio):
    agent = pendulum(rollout_length=2, real_ratio=ratio).learn(300)
    real_next = agent.replay_buffer.next_observations[: agent.replay_buffer.pos, 0]
    model_next = agent.model_replay.next_obs[: len(agent.model_replay)]
    batch = agent.mixed_replay.sample(400)
    assert batch.observations.shape == (400, 3) and batch.rewards.shape == (400, 1)
    # Imagined next observations are predictions, never a real row bit for bit.
    assert _membership(batch, real_next.astype(np.float32)) == round(400 * ratio)
    assert _membership(batch, model_next) == 400 - round(400 * ratio)


def test_an_empty_model_buffer_means_real_batches_only():
    agent = pendulum()
    assert agent.mixed_replay.split(256) == (256, 0)


def test_linear_schedule_rises_from_min_to_max_over_its_steps():
    agent = pendulum(min_rollout_length=1, max_rollout_length=15)
    lengths = {}
    for step in (0, 20_000, 60_000, 100_000, 150_000):
        agent.num_timesteps = step
        lengths[step] = agent.current_rollout_length()
    assert lengths == {0: 1, 20_000: 1, 60_000: 8, 100_000: 15, 150_000: 15}


def test_error_schedule_takes_the_longest_horizon_within_tolerance():
    agent = pendulum(
        rollout_length="error", max_rollout_length=4, error_tolerance=1e9, rollout_batch=10
    ).learn(400)
    # The second fit measured the first model's error on the 100 steps it had not seen.
    errors = agent.mbpo_log[1]["errors"]
    assert len(errors) == 4 and all(np.isfinite(errors))
    assert agent.mbpo_log[1]["rollout_length"] == 4  # every error within a huge tolerance
    strict = pendulum(rollout_length="error", max_rollout_length=4, error_tolerance=1e-12)
    strict._errors = errors
    assert strict.current_rollout_length() == 1  # none within: the minimum
    strict._errors = [0.0, 0.0, 1.0, 0.0]
    strict.config = dataclasses.replace(strict.config, error_tolerance=0.5)
    assert strict.current_rollout_length() == 2  # the first horizon over it ends the run


def test_a_diverging_model_stops_imagination_and_training_goes_on():
    agent = pendulum(model={"lr": 1e300})
    with pytest.warns(RuntimeWarning, match="imagination stopped at real step 201"):
        agent.learn(300)
    before = actor_params(agent)
    agent.learn(100, reset_num_timesteps=False)
    assert not agent.imagination_enabled
    assert "diverged" in agent.disabled_reason
    assert len(agent.model_replay) == 0 and agent.model_version == 0
    assert agent.mixed_replay.split(64) == (64, 0)
    assert not torch.equal(before, actor_params(agent))  # SAC kept training on real data


def test_save_and_load_keep_the_policy_and_the_settings(tmp_path):
    agent = pendulum(rollout_length=2, real_ratio=0.2).learn(300)
    agent.save(tmp_path / "mbpo.zip")
    loaded = MBPO.load(tmp_path / "mbpo.zip", env=gym.make("Pendulum-v1"))
    assert torch.equal(actor_params(agent), actor_params(loaded))
    assert (loaded.real_ratio, loaded.rollout_length, loaded.updates_per_step) == (0.2, 2, 1)
    assert loaded.config == agent.config == tiny(rollout_length=2, real_ratio=0.2)
    # The world model is refit from real data once learning resumes.
    loaded.learn(200, reset_num_timesteps=False)
    assert loaded.model_version >= 1 and len(loaded.model_replay) > 0


def test_a_model_saved_by_1x_loads_with_its_settings(tmp_path):
    """1.x saved MBPO's settings as flat attributes (no config): written here as 1.x did
    (the zip's ``data`` JSON), they come back as the config, not as the defaults."""
    import zipfile

    agent = pendulum(rollout_length=2, real_ratio=0.2).learn(250)
    agent.save(tmp_path / "mbpo.zip")
    with zipfile.ZipFile(tmp_path / "mbpo.zip") as z:
        members = {name: z.read(name) for name in z.namelist()}
    data = json.loads(members["data"])
    data.pop("config")
    cfg = agent.config
    data.update(
        updates_per_step=cfg.updates_per_step,
        real_ratio=cfg.real_ratio,
        rollout_every=cfg.rollout_interval,
        rollout_batch=cfg.rollout_batch,
        rollout_length=cfg.rollout_length,
        min_rollout_length=cfg.min_rollout_length,
        max_rollout_length=cfg.max_rollout_length,
        rollout_schedule_steps=list(cfg.rollout_schedule_steps),
        error_tolerance=cfg.error_tolerance,
        model_buffer_size=cfg.model_buffer_rows,
        model_every=cfg.model.every,
        model_kwargs={
            "ensemble_size": 2,
            "elites": 1,
            "hidden_sizes": [32, 32],
            "lr": cfg.model.lr,
            "learn_termination": False,
        },
        model_max_epochs=cfg.model.max_epochs,
        model_max_updates=None,
    )
    members["data"] = json.dumps(data).encode()
    with zipfile.ZipFile(tmp_path / "mbpo1x.zip", "w") as z:
        for name, payload in members.items():
            z.writestr(name, payload)
    loaded = MBPO.load(tmp_path / "mbpo1x.zip", env=gym.make("Pendulum-v1"))
    expected = dataclasses.replace(
        cfg, rollout_every=cfg.rollout_interval, model_buffer_size=cfg.model_buffer_rows
    )
    assert loaded.config == expected
    assert torch.equal(actor_params(agent), actor_params(loaded))
    assert "model_kwargs" not in vars(loaded)
    loaded.learn(100, reset_num_timesteps=False)


@pytest.mark.parametrize(
    ("kwargs", "error", "message"),
    [
        ({"updates_per_step": 0}, ValueError, "updates_per_step: expected an int in"),
        ({"updates_per_step": 1.5}, TypeError, "updates_per_step: expected an int"),
        ({"rollout_length": 0}, ValueError, "rollout_length: expected an int in"),
        ({"rollout_length": "cosine"}, ValueError, "rollout_length: expected one of"),
        ({"min_rollout_length": 0}, ValueError, "min_rollout_length"),
        ({"max_rollout_length": 0}, ValueError, "max_rollout_length"),
        ({"real_ratio": 1.5}, ValueError, "real_ratio: expected a finite number >= 0"),
        ({"real_ratio": -0.1}, ValueError, "real_ratio"),
        ({"real_ratio": float("nan")}, ValueError, "real_ratio"),
        ({"rollout_schedule_steps": (5, 1)}, ValueError, "rollout_schedule_steps"),
        ({"rollout_schedule_steps": (5,)}, ValueError, "rollout_schedule_steps"),
        ({"model": {"ensemble_size": 2}}, TypeError, "model: expected an MBPOModelConfig"),
    ],
)
def test_bad_settings_are_refused_naming_them(kwargs, error, message):
    with pytest.raises(error, match=message):
        MBPOConfig(**kwargs)


@pytest.mark.parametrize(
    ("kwargs", "error", "message"),
    [
        ({"elites": 3, "ensemble_size": 2}, ValueError, "elites: expected an int in"),
        ({"hidden_sizes": (32, 0)}, ValueError, r"hidden_sizes\[1\]"),
        ({"lr": 0.0}, ValueError, "lr: expected a finite number > 0"),
        ({"every": 0}, ValueError, "every: expected an int >= 1"),
    ],
)
def test_bad_model_settings_are_refused_naming_them(kwargs, error, message):
    with pytest.raises(error, match=message):
        MBPOModelConfig(**kwargs)


def test_mbpo_refuses_a_config_of_another_type_and_sac_settings_it_fixes():
    with pytest.raises(TypeError, match="config: expected an MBPOConfig"):
        MBPO("MlpPolicy", "Pendulum-v1", {"updates_per_step": 2})
    with pytest.raises(TypeError, match="gradient_steps: expected no gradient_steps"):
        MBPO("MlpPolicy", "Pendulum-v1", gradient_steps=4)


def test_the_config_round_trips_through_json():
    config = tiny({"max_updates": 7}, rollout_length="error", rollout_every=50)
    text = json.dumps(dataclasses.asdict(config))
    assert MBPOConfig.from_dict(json.loads(text)) == config
    with pytest.raises(TypeError, match="data: expected keys among"):
        MBPOConfig.from_dict({"model_every": 100})
    with pytest.raises(TypeError, match=r"data\['model'\]: expected keys among"):
        MBPOConfig.from_dict({"model": {"model_lr": 1.0}})


@pytest.mark.parametrize("env_id", ["FrozenLake-v1", "CartPole-v1"])
def test_an_env_the_model_cannot_take_is_refused(env_id):
    with pytest.raises(UnsupportedSpaceError, match="env: expected a 1-D Box"):
        MBPO("MlpPolicy", env_id)
