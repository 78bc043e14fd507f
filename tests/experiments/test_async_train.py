"""``fleetgym train --mode async``: the asynchronous trainer from the command line."""

from __future__ import annotations

import pytest

from fleetgym.agents.learners.asynchronous.trainer import AsyncPPO
from fleetgym.cli import main


@pytest.mark.timeout(180)
def test_train_async_runs_saves_and_reloads(tmp_path, capsys):
    path = tmp_path / "learner.pt"
    code = main(
        [
            "train",
            "--mode",
            "async",
            "--loss",
            "gipo",
            "--actors",
            "2",
            "--steps-per-actor",
            "16",
            "--max-steps",
            "64",
            "--max-policy-lag",
            "2",
            "--no-progress",
            "--out",
            str(tmp_path),
            "--save",
        ]
    )
    out = capsys.readouterr().out
    assert code == 1  # 64 steps do not reach 475
    assert "asynchronously: 2 actor threads" in out and "gipo(sigma=0.8)" in out
    assert "64 env steps, 2 updates" in out
    model = AsyncPPO.load(path)
    assert model.learner.policy_version == 2 and model.config.loss == "gipo"


def test_train_async_rejects_a_bad_sigma(capsys):
    code = main(["train", "--mode", "async", "--sigma", "0", "--max-steps", "16"])
    assert code == 2
    assert "sigma: expected a finite number > 0" in capsys.readouterr().err


@pytest.mark.timeout(180)
@pytest.mark.parametrize("inference", ["local", "server"])
def test_train_async_backend_process_runs_actor_processes(capsys, inference):
    code = main(
        [
            "train",
            "--mode",
            "async",
            "--backend",
            "process",
            "--inference",
            inference,
            "--actors",
            "2",
            "--steps-per-actor",
            "16",
            "--max-steps",
            "64",
            "--no-progress",
        ]
    )
    out = capsys.readouterr().out
    assert code == 1  # 64 steps do not reach 475
    served = " through an inference server" if inference == "server" else ""
    assert f"asynchronously: 2 actor processes{served} x 16 steps" in out
    assert "64 env steps, 2 updates" in out


@pytest.mark.timeout(180)
def test_train_async_proximal_clip_runs_and_is_saved(tmp_path, capsys):
    path = tmp_path / "learner.pt"
    argv = ["train", "--mode", "async", "--proximal-clip", "--actors", "2"]
    argv += ["--steps-per-actor", "16", "--max-steps", "32", "--no-progress"]
    argv += ["--out", str(tmp_path), "--save"]
    assert main(argv) == 1
    assert "loss ppo-proximal+recompute+global-norm" in capsys.readouterr().out
    assert AsyncPPO.load(path).config.proximal_clip


def test_train_async_proximal_clip_needs_ppo(capsys):
    code = main(["train", "--mode", "async", "--loss", "gipo", "--proximal-clip"])
    assert code == 2
    assert "proximal_clip: expected loss 'ppo', actual 'gipo'" in capsys.readouterr().err


@pytest.mark.ray
@pytest.mark.timeout(240)
def test_train_async_backend_ray_runs_ray_actors(capsys):
    pytest.importorskip("ray")
    argv = ["train", "--mode", "async", "--backend", "ray", "--actors", "2"]
    argv += ["--steps-per-actor", "16", "--max-steps", "64", "--no-progress"]
    assert main(argv) == 1  # 64 steps do not reach 475
    out = capsys.readouterr().out
    assert "asynchronously: 2 actor slots as Ray actors x 16 steps" in out
    assert "64 env steps, 2 updates" in out


def test_train_async_backend_ray_refuses_the_inference_server(capsys):
    argv = ["train", "--mode", "async", "--backend", "ray", "--inference", "server"]
    assert main([*argv, "--max-steps", "16", "--no-progress"]) == 2
    assert "inference: expected 'local' with backend='ray'" in capsys.readouterr().err
