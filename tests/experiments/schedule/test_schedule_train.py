"""Training, resuming and fine-tuning the learned scheduler at tiny budgets.

Every training here runs on the real ActorSchedulingEnv (real fleet and PPO learner,
modelled timing) shrunk to a few rounds of a few actors: these tests check the machinery
(episode counting, checkpoints, resume, metadata, files), never learning quality.
"""

from __future__ import annotations

import zipfile
from pathlib import Path

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


def _train(tmp_path: Path, episodes: int = 2, **kwargs):
    return train.train_scheduler(
        tmp_path,
        env_id=ENV_ID,
        env_kwargs=kwargs.pop("env_kwargs", TINY),
        episodes=episodes,
        config=kwargs.pop("config", TINY_PPO),
        progress=False,
        **kwargs,
    )


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """One tiny trained scheduler (2 episodes, a checkpoint after each)."""
    out = tmp_path_factory.mktemp("trained")
    return _train(out, episodes=2, checkpoint_every=1)


def test_train_counts_episodes_and_saves_everything(trained):
    assert trained.episodes == 2 and trained.episodes_this_run == 2
    assert [r.episode for r in trained.records] == [1, 2]
    # Truncated after max_rounds=3: 3 rounds and 3 timesteps per episode.
    assert [r.rounds for r in trained.records] == [3, 3]
    assert trained.timesteps == 6
    # n_steps=4: one full rollout (one update) within the 6 steps.
    assert trained.updates == 1
    for rec in trained.records:
        assert rec.cost > 0 and rec.train_time > 0 and 1 <= rec.mean_actors <= 3
        assert not rec.success
    out = trained.model_path.parent
    assert trained.model_path.is_file()
    assert (out / "scheduler_episodes.csv").read_text().count("\n") == 3  # header + 2
    assert list((out / "tb").rglob("events.out.tfevents.*"))
    # One checkpoint per episode before the last (the last is the final model).
    assert [p.name for p in trained.checkpoints] == ["scheduler_ep0001.zip"]
    meta = checkpoint.read_scheduler_meta(trained.model_path)
    assert meta["episodes"] == 2 and meta["env_id"] == ENV_ID
    # No path of the training machine in the checkpoint.
    with zipfile.ZipFile(trained.model_path) as z:
        assert str(out) not in z.read("data").decode()
    assert meta["env_kwargs"] == TINY
    assert meta["config"]["n_steps"] == 4


def test_trained_model_is_the_papers_network(trained):
    model = checkpoint.load_scheduler(trained.model_path)
    layers = [type(m).__name__ for m in model.policy.mlp_extractor.policy_net]
    assert layers == ["Linear", "Tanh", "Linear", "Tanh"]
    # The default "step" actions: the 7-dim state plus the fleet size; halve, keep, double.
    assert model.policy.mlp_extractor.policy_net[0].in_features == 8
    assert model.policy.mlp_extractor.value_net[2].out_features == 64
    assert model.policy.action_net.out_features == 3
    action, _ = model.predict(np.zeros(8, dtype=np.float32), deterministic=True)
    assert 0 <= int(action) < 3


def test_episode_budget_is_exact_with_several_envs(tmp_path):
    cfg = config.SchedulerPPOConfig(n_steps=4, batch_size=4, n_epochs=1, n_envs=2)
    result = _train(tmp_path, episodes=3, config=cfg, tensorboard=False)
    # Two envs finish their episodes together; learning stops at the third episode.
    assert result.episodes == 3
    assert len(result.records) == 3


def test_resume_continues_the_episode_count(trained, tmp_path):
    first = trained.checkpoints[0]
    assert checkpoint.read_scheduler_meta(first)["episodes"] == 1
    resumed = train.train_scheduler(
        tmp_path, env_id=ENV_ID, resume_from=first, episodes=3, progress=False, tensorboard=False
    )
    assert resumed.episodes == 3 and resumed.episodes_this_run == 2
    assert [r.episode for r in resumed.records] == [2, 3]
    meta = checkpoint.read_scheduler_meta(resumed.model_path)
    assert meta["episodes"] == 3 and meta["resumed_from"] == first.name
    # The stored env and hyperparameters were used: 3-round episodes, n_steps 4.
    assert [r.rounds for r in resumed.records] == [3, 3]
    assert checkpoint.load_scheduler(resumed.model_path).n_steps == 4


def test_resume_needs_a_larger_budget(trained, tmp_path):
    with pytest.raises(ValueError, match="expected more than the 2 episodes"):
        train.train_scheduler(tmp_path, resume_from=trained.model_path, episodes=2, progress=False)


def test_finetune_on_another_env_config(trained, tmp_path):
    other = {**TINY, "max_rounds": 2}
    result = train.finetune_scheduler(
        trained.model_path,
        tmp_path,
        env_id=ENV_ID,
        env_kwargs=other,
        episodes=1,
        learning_rate=1e-3,
        progress=False,
        tensorboard=False,
    )
    assert result.episodes == 3 and result.episodes_this_run == 1
    assert [r.rounds for r in result.records] == [2]
    meta = checkpoint.read_scheduler_meta(result.model_path)
    assert meta["env_kwargs"] == other
    assert checkpoint.load_scheduler(result.model_path).learning_rate == 1e-3


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"episodes": 0}, ValueError, "episodes: expected an int >= 1"),
        ({"checkpoint_every": -1}, ValueError, "checkpoint_every: expected an int >= 0"),
        ({"seed": 1.5}, TypeError, "seed: expected an int"),
        ({"config": {"n_steps": 4}}, TypeError, "config: expected SchedulerPPOConfig"),
        ({"env_kwargs": [1]}, TypeError, "env_kwargs: expected a mapping"),
        ({"env_id": "fleetgym/Nope-v0"}, ValueError, "expected a registered scheduling env"),
    ],
)
def test_train_rejects_bad_arguments(tmp_path, kwargs, error, match):
    args = {"env_id": ENV_ID, "env_kwargs": TINY, "episodes": 1, "progress": False}
    args.update(kwargs)
    with pytest.raises(error, match=match):
        train.train_scheduler(tmp_path, **args)
