"""TokenAsyncPPO: every ratio level x loss trains through AsyncPPO's loop; the inference
server serves the token policy (its behaviour log-probs are the learner's at the same
weights, its batches hold several actors); the lag bound holds; worker processes;
determinism without threads; save and the learner's load; bad input."""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest
import torch

import fleetgym.agents.learners.token_ppo as token_ppo
from fleetgym.agents.learners.asynchronous.config import (
    AsyncPPOConfig,
    AsyncTopology,
    TokenAsyncPPOConfig,
)
from fleetgym.agents.learners.asynchronous.token_actor import TokenTrajectory
from fleetgym.agents.learners.asynchronous.token_trainer import TokenAsyncPPO
from fleetgym.agents.learners.token_config import TokenPPOConfig

TINY = dict(hidden_size=16, layers=1, heads=2, vocab_size=64, num_bins=16, epochs=1,
            minibatch_size=16)  # fmt: skip


def _params(model):
    return [p.detach().clone() for p in model.learner.policy.parameters()]


@pytest.mark.parametrize("loss", ["ppo", "gipo", "vtrace"])
@pytest.mark.parametrize("level", ["token", "action", "chunk"])
def test_every_level_and_loss_trains_through_the_async_loop(monkeypatch, level, loss):
    """Each update (one minibatch: 2 actors x 8 decisions) lowers its own policy loss."""
    model = TokenAsyncPPO(
        "Hopper-v5",
        algo=TokenAsyncPPOConfig(
            token=TokenPPOConfig(
                ratio_level=level, loss=loss, chunk=2, vf_coef=0.0, lr=1e-4, **TINY
            )
        ),
        topology=AsyncTopology(n_actors=2, steps_per_actor=8, concurrent=False),
        seed=0,
    )
    policy, calls = model.learner.policy, []
    evaluate, loss_fn = policy.evaluate, token_ppo.level_policy_loss

    def spy_evaluate(*args, **kwargs):
        calls.append({"evaluate": (args, kwargs)})
        return evaluate(*args, **kwargs)

    def spy_loss(new, old, adv, **kwargs):
        value = loss_fn(new, old, adv, **kwargs)
        calls[-1].update(old=old, adv=adv, kwargs=kwargs, before=float(value[0].detach()))
        return value

    monkeypatch.setattr(policy, "evaluate", spy_evaluate)
    monkeypatch.setattr(token_ppo, "level_policy_loss", spy_loss)
    model.learn(40)
    assert model.ratio_level == level and model.learner.config.loss == loss
    assert model.learner.policy_version == len(model.history) >= 2
    # Env steps, not decisions: K = 2 actions per decision (fewer where an episode ended).
    record = model.history[-1]
    assert 16 < record.total_steps - model.history[-2].total_steps <= 32
    minibatches = [c for c in calls if "old" in c]  # V-trace's targets evaluate too
    assert len(minibatches) == len(model.history)
    last = minibatches[-1]
    assert last["kwargs"]["level"] == level and last["kwargs"]["loss"] == loss
    with torch.no_grad():
        new = evaluate(*last["evaluate"][0], **last["evaluate"][1]).log_probs
        # V-trace's loss is -w A log pi with w = min(1, rho) held fixed (1 on-policy).
        old = new if loss == "vtrace" else last["old"]
        after = float(loss_fn(new, old, last["adv"], **last["kwargs"])[0])
    assert after < last["before"] - 1e-4
    model.close()


def test_the_server_answers_the_learners_log_probs_at_the_same_weights():
    model = TokenAsyncPPO(
        "Hopper-v5",
        algo=TokenAsyncPPOConfig(token=TokenPPOConfig(chunk=2, **TINY)),
        topology=AsyncTopology(inference="server", n_actors=3, steps_per_actor=6, concurrent=False),
        seed=1,
    )
    model.slots.start_server()
    batch = model.slots.next_batch(None)
    assert all(isinstance(t, TokenTrajectory) for t in batch)
    for traj in batch:
        assert traj.policy_versions.tolist() == [0] * 6
        with torch.no_grad():
            ev = model.learner.policy.evaluate(
                torch.from_numpy(traj.obs), torch.from_numpy(traj.actions),
                step=torch.from_numpy(traj.steps),
            )  # fmt: skip
        np.testing.assert_allclose(traj.log_probs, ev.log_probs.numpy(), atol=1e-5)
        np.testing.assert_allclose(traj.values, ev.values.numpy(), atol=1e-5)
    model.close()


def test_served_actors_train_concurrently_within_the_lag_bound():
    model = TokenAsyncPPO(
        "CartPole-v1",
        algo=TokenAsyncPPOConfig(token=TokenPPOConfig(**TINY), max_policy_lag=1),
        topology=AsyncTopology(inference="server", n_actors=4, steps_per_actor=16),
        seed=0,
    )
    model.learn(256)
    metrics = model.slots.server.metrics() if model.slots.server is not None else None
    assert model.num_timesteps >= 256 and model.actor_failures == 0
    for record in model.history:
        s = record.stats
        kept_lags = s.lags[s.lags <= 1]
        assert len(kept_lags) + s.dropped_samples == len(s.lags)
        assert s.num_samples == len(s.lags) - s.dropped_samples
    assert metrics is None or metrics["requests"] > 0
    model.close()


def test_the_server_batches_several_actors_decisions():
    model = TokenAsyncPPO(
        "CartPole-v1",
        algo=TokenAsyncPPOConfig(token=TokenPPOConfig(**TINY)),
        topology=AsyncTopology(inference="server", n_actors=4, steps_per_actor=32),
        seed=0,
    )
    model.slots.start_server()
    server = model.slots.server
    model.learn(256)
    figures = server.metrics()
    assert figures["requests"] >= 256 and figures["mean_batch"] > 1.0
    assert max(figures["batch_histogram"]) <= 4
    model.close()


def test_a_llama_backbone_trains_through_the_server():
    pytest.importorskip("transformers")
    model = TokenAsyncPPO(
        "Hopper-v5",
        algo=TokenAsyncPPOConfig(token=TokenPPOConfig(backbone="llama", **TINY)),
        topology=AsyncTopology(inference="server", n_actors=2, steps_per_actor=8),
        seed=0,
    )
    model.learn(32)
    assert model.num_timesteps >= 32 and np.isfinite(model.history[-1].stats.loss)
    model.close()


def test_injected_lag_tensorboard_and_larger_batches(tmp_path):
    model = TokenAsyncPPO(
        "CartPole-v1",
        algo=TokenAsyncPPOConfig(
            token=TokenPPOConfig(**TINY), batch_trajectories=3, lag_injection=1, max_policy_lag=1
        ),
        topology=AsyncTopology(n_actors=2, steps_per_actor=8, concurrent=False),
        tensorboard_log=tmp_path / "tb",
        seed=0,
    )
    model.learn(72)
    assert [r.stats.num_samples for r in model.history] == [24, 24, 24]
    # Actors act with the weights from one update ago: lag 1 from the second update on.
    assert [r.stats.lag_max for r in model.history] == [0, 1, 1]
    assert any((tmp_path / "tb").iterdir())
    model.close()


def test_without_threads_a_seed_is_deterministic():
    runs = []
    for _ in range(2):
        model = TokenAsyncPPO(
            "CartPole-v1",
            algo=TokenAsyncPPOConfig(token=TokenPPOConfig(**TINY)),
            topology=AsyncTopology(n_actors=2, steps_per_actor=16, concurrent=False),
            seed=3,
        )
        model.learn(64)
        runs.append((_params(model), [r.stats.loss for r in model.history]))
        model.close()
    assert runs[0][1] == runs[1][1]
    assert all(torch.equal(a, b) for a, b in zip(runs[0][0], runs[1][0], strict=True))


@pytest.mark.parametrize("inference", ["local", "server"])
def test_worker_processes_collect_for_the_token_learner(inference):
    model = TokenAsyncPPO(
        "Hopper-v5",
        algo=TokenAsyncPPOConfig(token=TokenPPOConfig(**TINY)),
        topology=AsyncTopology(
            backend="process", inference=inference, n_actors=2, steps_per_actor=16
        ),
        seed=0,
    )
    try:
        model.learn(64)
        assert model.num_timesteps >= 64 and model.actor_failures == 0
        assert all(np.isfinite(r.stats.loss) for r in model.history)
        if inference == "server":
            assert model.slots.server.metrics()["requests"] >= 64
    finally:
        model.close()


def test_save_writes_the_policy_the_learner_loads(tmp_path):
    model = TokenAsyncPPO(
        "CartPole-v1",
        algo=TokenAsyncPPOConfig(token=TokenPPOConfig(**TINY)),
        topology=AsyncTopology(n_actors=1, steps_per_actor=8, concurrent=False),
    )
    model.learn(16)
    path = model.save(tmp_path / "token.pt")
    other = TokenAsyncPPO(
        "CartPole-v1",
        algo=TokenAsyncPPOConfig(token=TokenPPOConfig(**TINY)),
        topology=AsyncTopology(n_actors=1, steps_per_actor=8),
        seed=5,
    )
    other.learner.load(path)
    obs = np.array([0.01, -0.02, 0.03, 0.0], np.float32)
    assert model.predict(obs)[0] == other.predict(obs)[0]
    model.close()
    other.close()


def test_save_and_load_round_trip_the_trainer(tmp_path):
    model = TokenAsyncPPO(
        "Pendulum-v1",
        algo=TokenAsyncPPOConfig(
            token=TokenPPOConfig(
                ratio_level="action",
                loss="gipo",
                sigma=0.5,
                chunk=2,
                target_kl=0.0,
                value_head="mean",
                **TINY,
            )
        ),
        topology=AsyncTopology(
            n_actors=2,
            steps_per_actor=8,
            concurrent=False,
            inference="server",
            server_batch=3,
            server_wait_ms=1.5,
        ),
        seed=4,
    )
    model.learn(32)
    path = model.save(tmp_path / "token.pt")
    loaded = TokenAsyncPPO.load(path)
    try:
        assert loaded.token_config == model.token_config
        assert loaded.token_config.target_kl == 0.0  # None (no budget) survives the trip
        assert (loaded.ratio_level, loaded.inference, loaded.n_actors) == ("action", "server", 2)
        assert (loaded.server_batch, loaded.server_wait_ms, loaded.seed) == (3, 1.5, 4)
        assert loaded.num_timesteps == model.num_timesteps
        assert loaded.learner.num_updates == model.learner.num_updates
        mine, theirs = model.learner.get_weights(), loaded.learner.get_weights()
        assert mine.keys() == theirs.keys()
        assert all(np.array_equal(mine[k], theirs[k]) for k in mine)
        obs = np.array([0.3, -0.2, 0.1], np.float32)
        np.testing.assert_array_equal(model.predict(obs)[0], loaded.predict(obs)[0])
        loaded.learn(16)  # and it trains on
        assert loaded.learner.num_updates == model.learner.num_updates + 1
    finally:
        loaded.close()
    overridden = TokenAsyncPPO.load(path, topology={"inference": "local", "n_actors": 1})
    assert overridden.inference == "local" and overridden.n_actors == 1
    overridden.close()
    model.close()
    path.with_suffix(".json").write_text('{"format": "fleetgym.AsyncPPO"}')
    with pytest.raises(ValueError, match="expected 'fleetgym.TokenAsyncPPO' settings"):
        TokenAsyncPPO.load(path)
    path.with_suffix(".json").unlink()
    with pytest.raises(FileNotFoundError, match="settings file"):
        TokenAsyncPPO.load(path)


def test_the_server_batch_wait_and_device_are_the_users():
    model = TokenAsyncPPO(
        "Hopper-v5",
        algo=TokenAsyncPPOConfig(token=TokenPPOConfig(chunk=2, **TINY)),
        topology=AsyncTopology(
            inference="server",
            n_actors=2,
            steps_per_actor=4,
            concurrent=False,
            server_batch=16,
            server_wait_ms=0.5,
            server_device="cpu",
        ),
    )
    model.slots.start_server()
    config = model.slots.server.config
    assert (config.max_batch, config.max_wait_ms, config.device) == (16, 0.5, "cpu")
    assert model.slots.server.model.device == "cpu"
    model.close()
    default = TokenAsyncPPO(
        "CartPole-v1",
        algo=TokenAsyncPPOConfig(token=TokenPPOConfig(**TINY)),
        topology=AsyncTopology(inference="server", n_actors=3, concurrent=False),
    )
    default.slots.start_server()
    assert default.slots.server.config.max_batch == 3  # n_actors unless given
    default.close()
    with pytest.raises(ValueError, match="server_batch"):
        TokenAsyncPPO(
            "CartPole-v1",
            algo=TokenAsyncPPOConfig(token=TokenPPOConfig(**TINY)),
            topology=AsyncTopology(server_batch=0),
        )
    with pytest.raises(ValueError, match="server_device: expected 'cpu' or 'cuda"):
        TokenAsyncPPO(
            "CartPole-v1",
            algo=TokenAsyncPPOConfig(token=TokenPPOConfig(**TINY)),
            topology=AsyncTopology(server_device="tpu"),
        )
    with pytest.raises(ValueError, match="learner_device: expected 'cpu' or 'cuda"):
        TokenAsyncPPO(
            "CartPole-v1",
            algo=TokenAsyncPPOConfig(token=TokenPPOConfig(**TINY), learner_device="tpu"),
        )
    learner = TokenAsyncPPO(
        "CartPole-v1",
        algo=TokenAsyncPPOConfig(token=TokenPPOConfig(**TINY), learner_device="cpu"),
        topology=AsyncTopology(concurrent=False),
    )
    assert learner.learner.policy.device.type == "cpu"
    assert learner.settings()["algo"]["learner_device"] == "cpu"
    learner.close()


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_on_a_gpu_the_learner_and_the_server_run_there():  # pragma: no cover - GPU only
    model = TokenAsyncPPO(
        "CartPole-v1",
        algo=TokenAsyncPPOConfig(token=TokenPPOConfig(**TINY), learner_device="cuda"),
        topology=AsyncTopology(
            inference="server",
            n_actors=2,
            steps_per_actor=8,
            concurrent=False,
            server_device="cuda",
        ),
    )
    model.learn(64)
    assert model.learner.policy.device.type == "cuda"
    assert model.slots.server.model.policy.device.type == "cuda"
    assert all(np.isfinite(v).all() for v in model.learner.get_weights().values())
    model.close()


def test_bad_input_is_refused():
    algo = TokenAsyncPPOConfig(token=TokenPPOConfig(**TINY))
    with pytest.raises(ValueError, match="backend: expected one of"):
        TokenAsyncPPO("CartPole-v1", algo, topology=AsyncTopology(backend="ray"))
    with pytest.raises(ValueError, match="ratio_level: expected one of"):
        TokenAsyncPPOConfig(token=TokenPPOConfig(ratio_level="joint", **TINY))
    with pytest.raises(ValueError, match="loss: expected one of"):
        TokenAsyncPPOConfig(token=TokenPPOConfig(loss="a2c", **TINY))
    with pytest.raises(ValueError, match="address: expected None unless backend='ray'"):
        AsyncTopology(address="127.0.0.1:6379")
    with pytest.raises(TypeError, match=r"algo: expected a TokenAsyncPPOConfig"):
        TokenAsyncPPO("CartPole-v1", algo=AsyncPPOConfig())
    with pytest.raises(TypeError, match=r"keywords among .*actual unknown 'not_a_setting'"):
        TokenAsyncPPO("CartPole-v1", algo, not_a_setting=1)


@pytest.mark.parametrize(
    ("keyword", "place"),
    [
        ("chunk", r"algo=TokenAsyncPPOConfig\(token=TokenPPOConfig\(chunk=...\)\)"),
        ("ratio_level", r"token=TokenPPOConfig\(ratio_level=...\)"),
        ("target_kl", r"TokenPPOConfig\(target_kl=...\)\) \(None: the loss's default"),
        ("token_config", r"algo=TokenAsyncPPOConfig\(token=...\)"),
        ("max_policy_lag", r"algo=TokenAsyncPPOConfig\(max_policy_lag=...\)"),
        ("n_actors", r"topology=AsyncTopology\(n_actors=...\)"),
        ("server_batch", r"topology=AsyncTopology\(server_batch=...\)"),
    ],
)
def test_a_1x_keyword_names_its_2_0_place(keyword, place):
    with pytest.raises(TypeError, match=rf"TokenAsyncPPO: the keyword '{keyword}' moved .*{place}"):
        TokenAsyncPPO("CartPole-v1", **{keyword: 1})


def test_a_1x_settings_file_still_loads(tmp_path):
    algo = TokenAsyncPPOConfig(token=TokenPPOConfig(loss="gipo", **TINY), max_policy_lag=2)
    model = TokenAsyncPPO("CartPole-v1", algo, AsyncTopology(n_actors=1, steps_per_actor=4))
    path = model.save(tmp_path / "tok.pt")
    model.close()
    token = dataclasses.asdict(algo.token)
    for name in ("ratio_level", "loss", "sigma", "target_kl"):
        token.pop(name)
    old = {
        "format": "fleetgym.TokenAsyncPPO", "workload": "CartPole-v1", "ratio_level": "token",
        "loss": "gipo", "sigma": 0.8, "max_policy_lag": 2, "n_actors": 1,
        "steps_per_actor": 4, "batch_trajectories": 1, "target_kl": "auto", "lag_injection": 0,
        "concurrent": True, "inference": "local", "actors": "thread", "seed": 0,
        "server_batch": None, "server_wait_ms": 5.0, "server_device": "cpu",
        "learner_device": "cpu", "token_hyperparameters": token, "num_timesteps": 7,
    }  # fmt: skip
    path.with_suffix(".json").write_text(json.dumps(old))
    loaded = TokenAsyncPPO.load(path)
    try:
        assert loaded.token_config == algo.token  # 1.x target_kl='auto': None, the loss's
        assert (loaded.backend, loaded.num_timesteps, loaded.max_policy_lag) == ("inprocess", 7, 2)
    finally:
        loaded.close()
