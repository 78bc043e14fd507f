"""The configs of the asynchronous trainers: checked when built, round-tripped through
``dataclasses.asdict`` -> JSON -> back and through ``save``/``load``; 1.x keywords name
their 2.0 place; settings files of 1.x (flat) still load."""

from __future__ import annotations

import dataclasses
import json

import pytest

from fleetgym.agents.learners.asynchronous.config import (
    AsyncPPOConfig,
    AsyncTopology,
    TokenAsyncPPOConfig,
)
from fleetgym.agents.learners.asynchronous.trainer import AsyncPPO
from fleetgym.agents.learners.token_config import TokenPPOConfig
from fleetgym.agents.world_model import ImaginationConfig

HP = {"epochs": 1, "minibatch_size": 16}


@pytest.mark.parametrize(
    "config",
    [
        AsyncPPOConfig(),
        AsyncPPOConfig(
            loss="gipo",
            sigma=0.5,
            target_kl=None,
            max_policy_lag=None,
            batch_trajectories=3,
            hyperparameters={"lr": 1e-3},
            imagination={"warmup": 64},
        ),  # fmt: skip
        AsyncPPOConfig(proximal_clip=True, lag_injection=2, target_kl=0.05),
        TokenAsyncPPOConfig(),
        TokenAsyncPPOConfig(TokenPPOConfig(ratio_level="chunk", chunk=2, target_kl=0.0), 2),
        AsyncTopology(),
        AsyncTopology(n_actors=2, envs_per_actor=3, load_balancing=True, steps_per_actor=8),
        AsyncTopology(inference="server", server_batch=4, server_wait_ms="auto"),
        AsyncTopology(backend="ray", address="127.0.0.1:6379", ray_actor_options={"num_cpus": 1}),
    ],
)
def test_configs_round_trip_through_json(config):
    text = json.dumps(dataclasses.asdict(config))
    assert type(config)(**json.loads(text)) == config
    assert json.loads(json.dumps(config.as_dict())) == json.loads(text)


def test_an_imagination_config_is_written_as_json_values():
    algo = AsyncPPOConfig(imagination=ImaginationConfig(warmup=64, hidden_sizes=(16,)))
    again = AsyncPPOConfig(**json.loads(json.dumps(algo.as_dict())))
    assert ImaginationConfig.from_value(again.imagination) == algo.imagination


@pytest.mark.parametrize(
    ("build", "error", "match"),
    [
        (lambda: AsyncPPOConfig(target_kl="big"), ValueError, "target_kl: expected"),
        (lambda: AsyncPPOConfig(hyperparameters=[]), TypeError, "hyperparameters: expected"),
        (lambda: AsyncPPOConfig(imagination=5), TypeError, "imagination: expected"),
        (lambda: AsyncPPOConfig(proximal_clip=True, loss="gipo"), ValueError, "proximal_clip"),
        (lambda: TokenAsyncPPOConfig(token=5), TypeError, "token: expected"),
        (lambda: TokenAsyncPPOConfig(learner_device="tpu"), ValueError, "learner_device"),
        (lambda: AsyncTopology(backend="processes"), ValueError, "renamed 'process'"),
        (lambda: AsyncTopology(inference="remote"), ValueError, "inference: expected"),
        (lambda: AsyncTopology(server_batch=0), ValueError, "server_batch: expected"),
        (lambda: AsyncTopology(server_wait_ms=-1.0), ValueError, "server_wait_ms: expected"),
        (lambda: AsyncTopology(concurrent="no"), TypeError, "concurrent: expected"),
        (lambda: AsyncPPO("CartPole-v1", algo=AsyncTopology()), TypeError, "algo: expected"),
        (lambda: AsyncPPO("CartPole-v1", topology={"actors": 2}), TypeError, "topology: expected"),
        (lambda: AsyncPPO("CartPole-v1", "ppo"), TypeError, "algo: expected"),
    ],
)
def test_bad_configs_get_clear_errors(build, error, match):
    with pytest.raises(error, match=match):
        build()


@pytest.mark.parametrize(
    ("keyword", "place"),
    [
        ("loss", r"algo=AsyncPPOConfig\(loss=...\)"),
        ("max_policy_lag", r"algo=AsyncPPOConfig\(max_policy_lag=...\)"),
        ("imagination", r"algo=AsyncPPOConfig\(imagination=...\)"),
        ("epochs", r"algo=AsyncPPOConfig\(hyperparameters=\{'epochs': ...\}\)"),
        ("n_actors", r"topology=AsyncTopology\(n_actors=...\)"),
        ("backend", r"topology=AsyncTopology\(backend=...\)"),
        ("address", r"topology=AsyncTopology\(address=...\)"),
    ],
)
def test_a_1x_keyword_names_its_2_0_place(keyword, place):
    with pytest.raises(
        TypeError, match=rf"AsyncPPO: the keyword '{keyword}' moved .*: pass {place}"
    ):
        AsyncPPO("CartPole-v1", **{keyword: 1})
    with pytest.raises(TypeError, match=r"keywords among algo, .* actual unknown 'bogus'"):
        AsyncPPO("CartPole-v1", bogus=1)


def test_save_and_load_round_trip_the_configs(tmp_path):
    algo = AsyncPPOConfig(loss="vtrace", max_policy_lag=3, lag_injection=1, hyperparameters=HP)
    topology = AsyncTopology(n_actors=2, envs_per_actor=2, steps_per_actor=8, concurrent=False)
    with AsyncPPO("CartPole-v1", algo, topology, seed=7) as model:
        model.learn(32)
        path = model.save(tmp_path / "m.pt")
    saved = json.loads(path.with_suffix(".json").read_text())
    assert saved["version"] == 2 and saved["algo"] == dataclasses.asdict(algo)
    with AsyncPPO.load(path) as loaded:
        assert (loaded.algo, loaded.topology, loaded.seed) == (algo, topology, 7)
        assert loaded.config.label == model.config.label == "vtrace+recompute+global-norm+kl<=0.02"
        assert loaded.num_timesteps == model.num_timesteps
    with AsyncPPO.load(path, topology={"n_actors": 1}, algo={"max_policy_lag": 4}) as other:
        assert other.topology == dataclasses.replace(topology, n_actors=1)
        assert other.algo == dataclasses.replace(algo, max_policy_lag=4)
        assert other.batch_trajectories == 2  # follows the topology: 1 actor x 2 envs
    with pytest.raises(TypeError, match="the keyword 'n_actors' moved .*with overrides"):
        AsyncPPO.load(path, n_actors=1)


def test_a_flat_settings_file_of_1x_still_loads(tmp_path):
    with AsyncPPO(
        "CartPole-v1", AsyncPPOConfig(loss="gipo", hyperparameters=HP), {"steps_per_actor": 8}
    ) as model:
        path = model.save(tmp_path / "m.pt")
    flat = {
        "format": "fleetgym.AsyncPPO", "workload": "CartPole-v1", "loss": "gipo", "sigma": 0.8,
        "max_policy_lag": 8, "n_actors": 4, "steps_per_actor": 8, "batch_trajectories": 4,
        "recompute_values": True, "global_advantage_norm": True, "target_kl": 0.02,
        "proximal_clip": False, "lag_injection": 0, "concurrent": True, "inference": "local",
        "actors": "thread", "seed": 0, "imagination": None, "envs_per_actor": 1,
        "load_balancing": False, "hyperparameters": HP, "num_timesteps": 5,
    }  # fmt: skip
    path.with_suffix(".json").write_text(json.dumps(flat))
    with AsyncPPO.load(path) as loaded:
        assert loaded.algo == AsyncPPOConfig(
            loss="gipo", target_kl=0.02, max_policy_lag=8, batch_trajectories=4,
            hyperparameters=HP,
        )  # fmt: skip
        assert loaded.topology == AsyncTopology(steps_per_actor=8)
        assert loaded.num_timesteps == 5 and loaded.config.label == model.config.label
