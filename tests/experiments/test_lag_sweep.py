"""``fleetgym lag-sweep`` on a tiny grid: the table, the CSV and the figure are written."""

from __future__ import annotations

import csv

import pytest

from fleetgym.cli import main
from fleetgym.experiments.lag_sweep import SweepRun, report, run_one
from fleetgym.experiments.tables import write_csv


@pytest.mark.timeout(240)
def test_lag_sweep_writes_table_csv_and_png(tmp_path, capsys):
    out = tmp_path / "sweep"
    code = main(
        [
            "lag-sweep",
            "--env",
            "CartPole-v1",
            "--quick",
            "--lags",
            "0",
            "3",
            "--seeds",
            "1",
            "--steps",
            "64",
            "--eval-episodes",
            "1",
            "--out",
            str(out),
        ]
    )
    assert code == 0
    table = (out / "lag_sweep.md").read_text()
    assert "| ppo | compensated |" in table and "lag 3" in table
    with (out / "lag_sweep.csv").open() as fh:
        rows = list(csv.DictReader(fh))
    assert {(r["loss"], r["lag"]) for r in rows} == {
        ("ppo", "0"),
        ("ppo", "3"),
        ("gipo-0.8", "0"),
        ("gipo-0.8", "3"),
    }
    assert all(int(r["steps"]) == 64 and int(r["updates"]) == 2 for r in rows)
    assert (out / "lag_sweep.png").stat().st_size > 1000
    assert "lag sweep on CartPole-v1: 4 runs" in capsys.readouterr().out


def test_run_one_is_deterministic_for_a_seed():
    a = run_one("CartPole-v1", "vtrace", "plain", 2, 0, 96, 1)
    b = run_one("CartPole-v1", "vtrace", "plain", 2, 0, 96, 1)
    assert (a.final_return, a.train_return, a.updates) == (b.final_return, b.train_return, 3)


def test_report_marks_missing_cells(tmp_path):
    runs = [
        SweepRun("CartPole-v1", "ppo", "plain", 0, s, 64, 2, 10.0 + s, 9.0, 1.0) for s in (0, 1)
    ]
    runs.append(SweepRun("CartPole-v1", "gipo-0.5", "plain", 5, 0, 64, 2, 20.0, 9.0, 1.0))
    md, png = report(runs, tmp_path, "t")
    text = md.read_text()
    assert "| ppo | plain | 10 ± 0 | - |" in text
    assert "| gipo-0.5 | plain | - | 20 ± 0 |" in text
    assert png.exists()


def test_unknown_env_is_rejected(capsys):
    with pytest.raises(SystemExit):
        main(["lag-sweep", "--env", "Pong"])
    assert "invalid choice" in capsys.readouterr().err


def _sweep_folder(path, runs):
    write_csv(path / "lag_sweep.csv", runs)
    return path


def test_merge_combines_earlier_sweeps_without_training(tmp_path, capsys):
    first = _sweep_folder(
        tmp_path / "a",
        [
            SweepRun("Hopper-v5", "ppo", "plain", lag, 0, 64, 1, 10.0 + lag, 9.0, 1.0)
            for lag in (0, 10)
        ],
    )
    second = _sweep_folder(
        tmp_path / "b",
        [
            SweepRun("Hopper-v5", "ppo", "plain", 10, 0, 64, 1, 99.0, 9.0, 1.0),  # replaces a's
            SweepRun("Hopper-v5", "vtrace", "compensated", 0, 0, 64, 1, 30.0, 9.0, 1.0),
        ],
    )
    out = tmp_path / "all"
    assert main(["lag-sweep", "--merge", str(first), str(second), "--out", str(out)]) == 0
    table = (out / "lag_sweep.md").read_text()
    assert "| ppo | plain | 10 ± 0 | 99 ± 0 |" in table
    assert "| vtrace | compensated | 30 ± 0 | - |" in table
    with (out / "lag_sweep.csv").open() as fh:
        assert len(list(csv.DictReader(fh))) == 3
    assert (out / "lag_sweep.png").stat().st_size > 1000
    assert "merged 3 runs from 2 folders" in capsys.readouterr().out


def test_merge_rejects_a_folder_without_a_sweep_and_mixed_envs(tmp_path, capsys):
    assert main(["lag-sweep", "--merge", str(tmp_path / "none"), "--out", str(tmp_path / "o")]) == 2
    assert "lag_sweep.csv is missing" in capsys.readouterr().err
    hopper = _sweep_folder(
        tmp_path / "h", [SweepRun("Hopper-v5", "ppo", "plain", 0, 0, 64, 1, 1.0, 1.0, 1.0)]
    )
    cartpole = _sweep_folder(
        tmp_path / "c", [SweepRun("CartPole-v1", "ppo", "plain", 0, 0, 64, 1, 1.0, 1.0, 1.0)]
    )
    assert (
        main(["lag-sweep", "--merge", str(hopper), str(cartpole), "--out", str(tmp_path / "o")])
        == 2
    )
    assert "expected the runs of one env" in capsys.readouterr().err
    bad = tmp_path / "bad"
    bad.mkdir()
    (bad / "lag_sweep.csv").write_text("env,loss\nHopper-v5,ppo\n")
    assert main(["lag-sweep", "--merge", str(bad), "--out", str(tmp_path / "o")]) == 2
    assert "expected the columns" in capsys.readouterr().err


@pytest.mark.timeout(300)
def test_lag_sweep_jobs_and_first_seed(tmp_path, capsys):
    """Two child processes share the grid; their runs come back as they finish."""
    out = tmp_path / "sweep"
    argv = ["lag-sweep", "--losses", "ppo", "--variants", "plain", "--lags", "0", "2"]
    argv += ["--seeds", "1", "--first-seed", "5", "--steps", "64", "--eval-episodes", "1"]
    assert main([*argv, "--jobs", "2", "--no-progress", "--out", str(out)]) == 0
    with (out / "lag_sweep.csv").open() as fh:
        rows = list(csv.DictReader(fh))
    assert sorted((r["lag"], r["seed"]) for r in rows) == [("0", "5"), ("2", "5")]
    err = capsys.readouterr().err
    assert "ppo plain lag 0 seed 5: final return" in err
    assert "ppo plain lag 2 seed 5: final return" in err
