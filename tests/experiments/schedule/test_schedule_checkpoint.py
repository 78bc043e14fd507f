"""Saving, reading, loading and exporting a scheduler checkpoint; the shipped one."""

from __future__ import annotations

import zipfile

import numpy as np
import pytest

pytest.importorskip("stable_baselines3")

from fleetgym.experiments.schedule import checkpoint, config, train  # noqa: E402

ENV_ID = config.GENERAL_ENV_ID


# CartPole cannot reach J=195 within 3 rounds of 3 actors x 16 steps, so every episode
# is truncated after exactly max_rounds rounds: episode lengths are known exactly.
TINY = {
    "workload": "CartPole-v1",
    "timing": "modeled",
    "max_actors": 3,
    "steps_per_actor": 16,
    "max_rounds": 3,
}


TINY_PPO = config.SchedulerPPOConfig(n_steps=4, batch_size=4, n_epochs=2)


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """One tiny trained scheduler (2 episodes, a checkpoint after each)."""
    out = tmp_path_factory.mktemp("trained")
    return train.train_scheduler(
        out,
        env_id=ENV_ID,
        env_kwargs=TINY,
        episodes=2,
        config=TINY_PPO,
        progress=False,
        tensorboard=False,
    )


def test_export_keeps_the_model_and_metadata(trained, tmp_path):
    dst = checkpoint.export_scheduler(trained.model_path, tmp_path / "shipped.zip")
    assert checkpoint.read_scheduler_meta(dst)["episodes"] == 2
    a = checkpoint.load_scheduler(trained.model_path).policy.state_dict()
    b = checkpoint.load_scheduler(dst).policy.state_dict()
    assert all(np.array_equal(a[k].numpy(), b[k].numpy()) for k in a)


def test_checkpoint_errors(tmp_path):
    with pytest.raises(FileNotFoundError, match="expected an existing file"):
        checkpoint.read_scheduler_meta(tmp_path / "missing.zip")
    with pytest.raises(FileNotFoundError, match="expected an existing file"):
        checkpoint.load_scheduler(tmp_path / "missing.zip")
    plain = tmp_path / "plain.zip"
    with zipfile.ZipFile(plain, "w") as z:
        z.writestr("data", "{}")
    with pytest.raises(ValueError, match="expected a fleetgym scheduler checkpoint"):
        checkpoint.read_scheduler_meta(plain)


def test_shipped_scheduler_loads_and_acts():
    try:
        path = checkpoint.shipped_scheduler_path()
    except FileNotFoundError:
        pytest.skip("no shipped scheduler in this checkout")
    assert path.stat().st_size < 1_000_000
    meta = checkpoint.read_scheduler_meta(path)
    assert meta["episodes"] >= 1
    scheduler = checkpoint.load_learned_scheduler(path)  # acts in the env's Discrete(max_actors)
    action, _ = scheduler.predict(np.zeros(7, dtype=np.float32), deterministic=True)
    assert 0 <= int(np.asarray(action).reshape(-1)[0]) < meta["env_kwargs"].get("max_actors", 32)
