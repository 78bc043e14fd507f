"""``fleetgym calf`` at tiny budgets."""

from __future__ import annotations

import pytest

from fleetgym.cli import main as cli_main


def test_cli_calf_quick(tmp_path, capsys):
    code = cli_main(
        [
            "calf",
            "--quick",
            "--timesteps",
            "256",
            "--episodes",
            "2",
            "--regimes",
            "baseline",
            "--conditions",
            "sim-clean,wifi-normal",
            "--no-ablation",
            "--variants",
            "",
            "--out",
            str(tmp_path),
            "--no-progress",
        ]
    )
    assert code == 0
    out = capsys.readouterr().out
    assert "# CALF on CartPole-v1" in out and "wrote" in out
    assert (tmp_path / "calf_CartPole-v1_summary.csv").exists()


def test_cli_calf_bad_arguments_end_with_one_line(tmp_path, capsys):
    with pytest.raises(SystemExit) as stop:  # an argparse usage error
        cli_main(["calf", "--seeds", "0", "--out", str(tmp_path), "--no-progress"])
    assert stop.value.code == 2
    err = capsys.readouterr().err
    assert "--seeds: expected an integer >= 1" in err and len(err.strip().splitlines()) == 1


def test_cli_calf_unknown_name_is_a_usage_error_before_training(tmp_path, capsys, monkeypatch):
    from fleetgym.experiments.calf import experiment

    def no_training(*args, **kwargs):
        raise AssertionError("training started before the arguments were checked")

    monkeypatch.setattr(experiment, "train_regime", no_training)
    for flag, value in (("--regimes", "nowhere+comp"), ("--variant-regimes", "nope")):
        code = cli_main(["calf", flag, value, "--out", str(tmp_path), "--no-progress"])
        assert code == 2
        err = capsys.readouterr().err
        assert err.startswith("fleetgym calf: error: ") and len(err.strip().splitlines()) == 1
    assert not list(tmp_path.iterdir())


def test_cli_calf_error_inside_the_run_is_a_crash_with_traceback(tmp_path, capsys, monkeypatch):
    from fleetgym.experiments.calf import experiment

    def diverged(*args, **kwargs):
        raise ValueError("the update diverged")

    monkeypatch.setattr(experiment, "train_regime", diverged)
    argv = ["calf", "--quick", "--regimes", "baseline", "--out", str(tmp_path), "--no-progress"]
    assert cli_main(argv) == 3
    err = capsys.readouterr().err
    assert "Traceback" in err and "ValueError: the update diverged" in err


def test_cli_calf_first_seed_is_honoured(tmp_path, capsys, monkeypatch):
    from fleetgym.experiments.calf import experiment

    seen = []

    def record(setup, regime, seed, total):
        seen.append(seed)
        raise KeyboardInterrupt  # stop at the first policy

    monkeypatch.setattr(experiment, "train_regime", record)
    argv = ["calf", "--quick", "--seeds", "2", "--first-seed", "7", "--regimes", "baseline"]
    assert cli_main([*argv, "--out", str(tmp_path), "--no-progress"]) == 130
    assert seen == [7]
