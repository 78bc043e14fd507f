"""AsyncPPO with imagination: imagined samples in its updates, records, files."""

from __future__ import annotations

import json

import numpy as np
import pytest

from fleetgym.agents.learners.asynchronous.config import AsyncPPOConfig, AsyncTopology
from fleetgym.agents.learners.asynchronous.trainer import AsyncPPO

SMALL = {"warmup": 64, "max_fit_updates": 10, "share": 0.5, "hidden_sizes": (16,)}


def _model(tmp_path=None):
    return AsyncPPO(
        "CartPole-v1",
        algo=AsyncPPOConfig(hyperparameters={"epochs": 1}, imagination=dict(SMALL)),
        topology=AsyncTopology(n_actors=2, steps_per_actor=32, concurrent=False),
        seed=0,
        tensorboard_log=None if tmp_path is None else tmp_path / "tb",
    )


def test_async_updates_mix_imagined_samples_and_record_them(tmp_path):
    model = _model(tmp_path)
    model.learn(256, progress_bar=False)
    records = [r.imagination for r in model.history]
    assert all(r is not None for r in records)
    active = [r for r in records if r.active]
    assert active, "the model was fitted after 64 real transitions: later updates imagine"
    for record, update in zip(records, model.history, strict=True):
        # share 0.5: one imagined sample per real one, rounded to whole episodes x steps.
        if record.active:
            assert record.imagined_samples >= record.real_samples
            assert update.stats.num_samples == record.real_samples + record.imagined_samples
    # Real env steps are what the trainer counts, never the imagined ones.
    assert model.num_timesteps == sum(r.real_samples for r in records)
    assert any((tmp_path / "tb").iterdir())


def test_async_save_load_keeps_the_world_model_bit_identical(tmp_path):
    model = _model()
    model.learn(192, progress_bar=False)
    path = model.save(tmp_path / "run.pt")
    settings = json.loads(path.with_suffix(".json").read_text())
    assert settings["algo"]["imagination"]["share"] == 0.5
    again = AsyncPPO.load(path)
    a, b = model.learner.imagination.model, again.learner.imagination.model
    assert a.version == b.version > 0
    for key, value in a.net.state_dict().items():
        assert np.array_equal(value.numpy(), b.net.state_dict()[key].numpy()), key
    obs = np.random.default_rng(0).normal(size=(8, 4)).astype(np.float32)
    actions = np.arange(8) % 2
    assert np.array_equal(a.predict(obs, actions).next_obs, b.predict(obs, actions).next_obs)


def test_async_load_refuses_a_checkpoint_without_its_world_model(tmp_path):
    model = _model()
    model.learn(128, progress_bar=False)
    path = model.save(tmp_path / "run.pt")
    (tmp_path / "run.world_model.pt").unlink()
    with pytest.raises(FileNotFoundError, match="world model"):
        AsyncPPO.load(path)
