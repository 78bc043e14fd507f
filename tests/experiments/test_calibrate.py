"""Tests of ``fleetgym calibrate`` and of the CLI commands on an env with no table entry."""

from __future__ import annotations

import json

import pytest

from fleetgym.cli import main


@pytest.fixture(autouse=True)
def _cache_in_tmp(tmp_path, monkeypatch):
    monkeypatch.setenv("FLEETGYM_CACHE_DIR", str(tmp_path / "cache"))


def test_calibrate_prints_the_model_and_the_cache_path(tmp_path, capsys):
    argv = ["calibrate", "--workload", "Acrobot-v1", "--budget", "0.02"]
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert "Acrobot-v1: compute model (measured now" in out
    assert "actor_step_s" in out and "learner_sample_s" in out
    assert str(tmp_path / "cache" / "calibration") in out
    assert main([*argv, "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["cached"] is True and data["table"] is None
    assert data["model"]["actor_step_s"] > 0


def test_calibrate_shows_the_table_next_to_a_built_in_workload(tmp_path, capsys):
    argv = ["calibrate", "--workload", "CartPole-v1", "--budget", "0.02"]
    assert main([*argv, "--cache-dir", str(tmp_path / "elsewhere")]) == 0
    out = capsys.readouterr().out
    assert "(table: 0.0002)" in out and str(tmp_path / "elsewhere") in out


def test_calibrate_unknown_workload_lists_close_matches(capsys):
    assert main(["calibrate", "--workload", "Acrobat-v1"]) == 2
    err = capsys.readouterr().err
    assert "fleetgym calibrate: error: workload:" in err and "'Acrobot-v1'" in err
    assert len(err.strip().splitlines()) == 1


def test_calibrate_error_while_measuring_is_a_crash(tmp_path, capsys, monkeypatch):
    from fleetgym.meta_env import calibration

    def broken(*args, **kwargs):
        raise ValueError("the env raised")

    monkeypatch.setattr(calibration, "calibrate", broken)
    assert main(["calibrate", "--workload", "Acrobot-v1", "--budget", "0.02"]) == 3
    err = capsys.readouterr().err
    assert "Traceback" in err and "ValueError: the env raised" in err


@pytest.mark.timeout(300)
def test_train_and_schedule_evaluate_take_any_env(tmp_path, capsys):
    argv = ["train", "--workload", "Acrobot-v1", "--actors", "2", "--rounds", "1"]
    assert main([*argv, "--steps-per-actor", "8", "--no-progress"]) == 1  # target not reached
    assert "training Acrobot-v1" in capsys.readouterr().out
    out_dir = tmp_path / "eval"
    argv = ["schedule", "evaluate", "--workload", "Pendulum-v1", "--scheduler", "max"]
    argv += ["--seeds", "1", "--max-actors", "2", "--out", str(out_dir), "--no-progress"]
    argv += ["--env-kwarg", "max_rounds=2", "--env-kwarg", "steps_per_actor=8"]
    assert main(argv) == 2  # Pendulum has no reward threshold: J must be given
    assert "target_return: expected a number" in capsys.readouterr().err
    assert main([*argv, "--env-kwarg", "target_return=-300"]) == 0
    assert "max" in capsys.readouterr().out
    assert any(out_dir.iterdir())
