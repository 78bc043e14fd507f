"""Tests of the learned scheduler's training, resume, fine-tuning and reports.

Every training here runs on the real ActorSchedulingEnv (real fleet and PPO learner,
modelled timing) shrunk to a few rounds of a few actors, with tiny budgets: these tests
check the machinery (episode counting, checkpoints, resume, metadata, files), never
learning quality.
"""

from __future__ import annotations

import zipfile
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("stable_baselines3")

from fleetgym import cli  # noqa: E402
from fleetgym.experiments import scheduler_training as st  # noqa: E402

ENV_ID = st.GENERAL_ENV_ID
# CartPole cannot reach J=195 within 3 rounds of 3 actors x 16 steps, so every episode
# is truncated after exactly max_rounds rounds: episode lengths are known exactly.
TINY = {
    "workload": "CartPole-v1",
    "timing": "modeled",
    "max_actors": 3,
    "steps_per_actor": 16,
    "max_rounds": 3,
}
TINY_PPO = st.SchedulerPPOConfig(n_steps=4, batch_size=4, n_epochs=2)


def _train(tmp_path: Path, episodes: int = 2, **kwargs):
    return st.train_scheduler(
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


# --------------------------------------------------------------------------- config
def test_config_is_the_papers_architecture():
    cfg = st.SchedulerPPOConfig()
    kwargs = cfg.ppo_kwargs()
    assert kwargs["learning_rate"] == 0.005
    assert kwargs["policy_kwargs"]["net_arch"] == {"pi": [64, 64], "vf": [64, 64]}
    import torch.nn as nn

    assert kwargs["policy_kwargs"]["activation_fn"] is nn.Tanh
    # 64 steps per update: 100 episodes of tens of rounds give dozens of updates.
    assert cfg.rollout_size == 64


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"n_steps": 0}, "n_steps: expected a positive int"),
        ({"batch_size": 128}, "batch_size: expected at most"),
        ({"learning_rate": -1.0}, "learning_rate: expected a positive"),
        ({"gamma": 1.5}, r"gamma: expected a number in \(0, 1\]"),
        ({"gae_lambda": 2.0}, "gae_lambda"),
        ({"ent_coef": -0.1}, "ent_coef"),
        ({"n_envs": True}, "n_envs: expected a positive int"),
        ({"hidden": ()}, "hidden: expected positive layer sizes"),
    ],
)
def test_config_rejects_bad_values(kwargs, match):
    with pytest.raises(ValueError, match=match):
        st.SchedulerPPOConfig(**kwargs)


# --------------------------------------------------------------------------- training
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
    meta = st.read_scheduler_meta(trained.model_path)
    assert meta["episodes"] == 2 and meta["env_id"] == ENV_ID
    # No path of the training machine in the checkpoint.
    with zipfile.ZipFile(trained.model_path) as z:
        assert str(out) not in z.read("data").decode()
    assert meta["env_kwargs"] == TINY
    assert meta["config"]["n_steps"] == 4


def test_trained_model_is_the_papers_network(trained):
    model = st.load_scheduler(trained.model_path)
    layers = [type(m).__name__ for m in model.policy.mlp_extractor.policy_net]
    assert layers == ["Linear", "Tanh", "Linear", "Tanh"]
    assert model.policy.mlp_extractor.policy_net[0].in_features == 7
    assert model.policy.mlp_extractor.value_net[2].out_features == 64
    assert model.policy.action_net.out_features == 3
    action, _ = model.predict(np.zeros(7, dtype=np.float32), deterministic=True)
    assert 0 <= int(action) < 3


def test_episode_budget_is_exact_with_several_envs(tmp_path):
    cfg = st.SchedulerPPOConfig(n_steps=4, batch_size=4, n_epochs=1, n_envs=2)
    result = _train(tmp_path, episodes=3, config=cfg, tensorboard=False)
    # Two envs finish their episodes together; learning stops at the third episode.
    assert result.episodes == 3
    assert len(result.records) == 3


def test_resume_continues_the_episode_count(trained, tmp_path):
    first = trained.checkpoints[0]
    assert st.read_scheduler_meta(first)["episodes"] == 1
    resumed = st.train_scheduler(
        tmp_path, env_id=ENV_ID, resume_from=first, episodes=3, progress=False, tensorboard=False
    )
    assert resumed.episodes == 3 and resumed.episodes_this_run == 2
    assert [r.episode for r in resumed.records] == [2, 3]
    meta = st.read_scheduler_meta(resumed.model_path)
    assert meta["episodes"] == 3 and meta["resumed_from"] == first.name
    # The stored env and hyperparameters were used: 3-round episodes, n_steps 4.
    assert [r.rounds for r in resumed.records] == [3, 3]
    assert st.load_scheduler(resumed.model_path).n_steps == 4


def test_resume_needs_a_larger_budget(trained, tmp_path):
    with pytest.raises(ValueError, match="expected more than the 2 episodes"):
        st.train_scheduler(tmp_path, resume_from=trained.model_path, episodes=2, progress=False)


def test_finetune_on_another_env_config(trained, tmp_path):
    other = {**TINY, "max_rounds": 2}
    result = st.finetune_scheduler(
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
    meta = st.read_scheduler_meta(result.model_path)
    assert meta["env_kwargs"] == other
    assert st.load_scheduler(result.model_path).learning_rate == 1e-3


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"episodes": 0}, ValueError, "episodes: expected a positive int"),
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
        st.train_scheduler(tmp_path, **args)


def test_export_keeps_the_model_and_metadata(trained, tmp_path):
    dst = st.export_scheduler(trained.model_path, tmp_path / "shipped.zip")
    assert st.read_scheduler_meta(dst)["episodes"] == 2
    a = st.load_scheduler(trained.model_path).policy.state_dict()
    b = st.load_scheduler(dst).policy.state_dict()
    assert all(np.array_equal(a[k].numpy(), b[k].numpy()) for k in a)


def test_checkpoint_errors(tmp_path):
    with pytest.raises(FileNotFoundError, match="expected an existing file"):
        st.read_scheduler_meta(tmp_path / "missing.zip")
    with pytest.raises(FileNotFoundError, match="expected an existing file"):
        st.load_scheduler(tmp_path / "missing.zip")
    plain = tmp_path / "plain.zip"
    with zipfile.ZipFile(plain, "w") as z:
        z.writestr("data", "{}")
    with pytest.raises(ValueError, match="expected a fleetgym scheduler checkpoint"):
        st.read_scheduler_meta(plain)


# --------------------------------------------------------------------------- shipped
def test_shipped_scheduler_loads_and_acts():
    try:
        path = st.shipped_scheduler_path()
    except FileNotFoundError:
        pytest.skip("no shipped scheduler in this checkout")
    assert path.stat().st_size < 1_000_000
    meta = st.read_scheduler_meta(path)
    assert meta["episodes"] >= 1
    from fleetgym.experiments.scheduling import load_learned_scheduler

    scheduler = load_learned_scheduler(path)  # acts in the env's Discrete(max_actors)
    action, _ = scheduler.predict(np.zeros(7, dtype=np.float32), deterministic=True)
    assert 0 <= int(np.asarray(action).reshape(-1)[0]) < meta["env_kwargs"].get("max_actors", 32)


# --------------------------------------------------------------------------- CLI
def _tiny_cli_env() -> list[str]:
    return [
        "--max-actors",
        "3",
        "--env-kwarg",
        "steps_per_actor=16",
        "--env-kwarg",
        "max_rounds=2",
    ]


def test_cli_train_then_finetune(tmp_path, capsys):
    out = tmp_path / "train"
    rc = cli.main(
        [
            "schedule",
            "train",
            "--episodes",
            "1",
            "--n-steps",
            "2",
            "--batch-size",
            "2",
            "--out",
            str(out),
            "--no-tensorboard",
            *_tiny_cli_env(),
        ]
    )
    assert rc == 0
    assert (out / "scheduler.zip").is_file() and (out / "scheduler_training.png").is_file()
    meta = st.read_scheduler_meta(out / "scheduler.zip")
    assert meta["env_kwargs"]["max_actors"] == 3 and meta["env_kwargs"]["max_rounds"] == 2
    ft = tmp_path / "ft"
    rc = cli.main(
        [
            "schedule",
            "finetune",
            "--from",
            str(out / "scheduler.zip"),
            "--episodes",
            "1",
            "--out",
            str(ft),
            "--no-tensorboard",
            *_tiny_cli_env(),
        ]
    )
    assert rc == 0
    assert st.read_scheduler_meta(ft / "finetuned.zip")["episodes"] == 2
    assert '"episodes": 2' in capsys.readouterr().out


def test_cli_rejects_a_bad_env_kwarg():
    with pytest.raises(SystemExit):
        cli.main(["schedule", "train", "--env-kwarg", "no-equals-sign"])
