"""``fleetgym lag-sweep`` on a tiny grid: the table, the CSV and the figure are written."""

from __future__ import annotations

import csv
import dataclasses
import math

import pytest

from fleetgym.cli import main
from fleetgym.experiments.lag_sweep import check_run_shape
from fleetgym.experiments.lag_sweep_results import (
    HOP_VELOCITY,
    SETTINGS,
    SweepRun,
    committed_grid,
    read_runs,
    report,
    updates_in,
)
from fleetgym.experiments.lag_sweep_train import evaluate, make_model, run_one
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
            "128",
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
    assert all(int(r["steps"]) == 128 and int(r["updates"]) == 4 for r in rows)
    assert all(r["velocity"] == "nan" for r in rows)  # CartPole reports no x_velocity
    assert (out / "lag_sweep.png").stat().st_size > 1000
    assert "lag sweep on CartPole-v1: 4 runs of 128 env steps (4 updates of 32)" in (
        capsys.readouterr().out
    )


def test_run_one_is_deterministic_for_a_seed():
    a = run_one("CartPole-v1", "vtrace", "plain", 2, 0, 96, 1)
    b = run_one("CartPole-v1", "vtrace", "plain", 2, 0, 96, 1)
    assert (a.final_return, a.train_return, a.updates) == (b.final_return, b.train_return, 3)


def test_run_one_keeps_its_best_checkpoint():
    # 3200 env steps of 32 are 100 updates: a checkpoint every 100 // 32 = 3 updates, and
    # the final one; the best is one of them and, scored on the final evaluation's
    # episodes, equals the final policy's score when it is the final policy.
    a = run_one("CartPole-v1", "ppo", "compensated", 0, 0, 3200, 2)
    b = run_one("CartPole-v1", "ppo", "compensated", 0, 0, 3200, 2)
    assert a.updates == 100
    assert a.best_update == 100 or (a.best_update % 3 == 0 and 3 <= a.best_update <= 99)
    assert 8 <= a.best_return <= 500 and math.isnan(a.best_velocity)
    if a.best_update == a.updates:
        assert a.best_return == a.final_return
    assert (a.best_update, a.best_return) == (b.best_update, b.best_return)


def test_report_writes_the_best_checkpoint_tables(tmp_path):
    base = SweepRun("Hopper-v5", "ppo", "plain", 0, 0, 64, 2, 900.0, 9.0, 1.0, 1.0)
    runs = [
        dataclasses.replace(base, best_return=2500.0, best_velocity=1.5, best_update=2),
        dataclasses.replace(base, seed=1, best_return=2100.0, best_velocity=0.2, best_update=1),
        dataclasses.replace(base, seed=2),  # an older run: no best checkpoint
    ]
    assert runs[0].best_hops and not runs[1].best_hops and not runs[2].best_hops
    text = report(runs, tmp_path, "t")[0].read_text()
    assert "| ppo | plain | 2300 ± 200 |" in text
    assert "| ppo | plain | 1/2 |" in text  # of the two seeds that recorded one
    assert "| ppo | plain | 0/3 |" in text  # the final policies


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
    argv += ["--seeds", "1", "--first-seed", "5", "--steps", "96", "--eval-episodes", "1"]
    assert main([*argv, "--jobs", "2", "--no-progress", "--out", str(out)]) == 0
    with (out / "lag_sweep.csv").open() as fh:
        rows = list(csv.DictReader(fh))
    assert sorted((r["lag"], r["seed"]) for r in rows) == [("0", "5"), ("2", "5")]
    err = capsys.readouterr().err
    assert "ppo plain lag 0 seed 5: final return" in err
    assert "ppo plain lag 2 seed 5: final return" in err


def test_a_lag_the_run_cannot_hold_is_refused_naming_its_updates(tmp_path, capsys):
    """Lag counts updates: at a lag >= the run's updates the actors never leave the initial
    policy, so the sweep refuses it before any work, saying how many updates the run has."""
    out = tmp_path / "sweep"
    argv = ["lag-sweep", "--losses", "ppo", "--variants", "plain", "--seeds", "1"]
    # CartPole: 32 samples per update, so 320 steps are 10 updates (lags 0-9 fit).
    assert main([*argv, "--steps", "320", "--lags", "0", "10", "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert "--lags: expected lags below the run's 10 updates" in err and "[10]" in err
    assert "at least 321" in err  # 11 updates, the last one partial, hold lag 10
    assert not out.exists()
    # A lag of 1000 at the default Hopper budget: 512 updates of 512.
    assert main([*argv, "--env", "Hopper-v5", "--lags", "0", "1000", "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert "the run's 512 updates (262144 env steps, 512 per update" in err
    assert "[1000]" in err
    assert not out.exists()


def test_a_budget_below_one_update_is_refused(tmp_path, capsys):
    out = tmp_path / "sweep"
    argv = ["lag-sweep", "--env", "Hopper-v5", "--lags", "0", "--steps", "511"]
    assert main([*argv, "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert "--steps: expected at least one update's env steps on Hopper-v5, 512" in err
    assert "actual 511" in err
    assert not out.exists()


def test_check_run_shape_counts_updates_with_a_partial_last_one():
    assert updates_in("CartPole-v1", 32) == 1
    assert updates_in("CartPole-v1", 33) == 2  # learn() finishes the update it started
    assert updates_in("Hopper-v5", 262_144) == 512
    assert check_run_shape("CartPole-v1", 320, [0, 9]) == 10


def test_evaluate_reports_hopper_forward_velocity_and_hops():
    """The velocity is the mean of info["x_velocity"]; an untrained policy neither hops
    nor moves forward at 0.5 m/s, and CartPole has no velocity."""
    from fleetgym.agents.workloads import get_workload

    policy = get_workload("Hopper-v5").make_policy()
    returns, velocity = evaluate(policy, "Hopper-v5", 2, seed=0)
    assert len(returns) == 2 and all(0 < r < 1000 for r in returns)
    assert math.isfinite(velocity) and abs(velocity) < HOP_VELOCITY
    cart = get_workload("CartPole-v1").make_policy()
    assert math.isnan(evaluate(cart, "CartPole-v1", 1, seed=0)[1])
    run = SweepRun("Hopper-v5", "ppo", "plain", 0, 0, 1, 1, 2500.0, 0.0, 1.0, velocity=0.6)
    assert run.hops
    assert not dataclasses.replace(run, velocity=0.4).hops  # balancing fast, not moving
    assert not dataclasses.replace(run, final_return=1999.0).hops


def test_report_writes_velocity_and_hop_tables_for_hopper(tmp_path):
    runs = [
        SweepRun("Hopper-v5", "ppo", "compensated", 0, 0, 64, 2, 2500.0, 9.0, 1.0, 1.2),
        SweepRun("Hopper-v5", "ppo", "compensated", 0, 1, 64, 2, 1000.0, 9.0, 1.0, 0.1),
        SweepRun("Hopper-v5", "ppo", "compensated", 10, 0, 64, 2, 3000.0, 9.0, 1.0, 1.0),
    ]
    text = report(runs, tmp_path, "t")[0].read_text()
    assert "2 seeds, 64 env steps = 2 updates per run" in text
    assert "| ppo | compensated | 1750 ± 750 | 3000 ± 0 |" in text
    assert "| ppo | compensated | 0.65 ± 0.55 | 1.00 ± 0.00 |" in text
    assert "| ppo | compensated | 1/2 | 1/1 |" in text


def test_merge_reads_sweeps_written_before_the_velocity_column(tmp_path):
    folder = tmp_path / "old"
    folder.mkdir()
    (folder / "lag_sweep.csv").write_text(
        "env,loss,variant,lag,seed,steps,updates,final_return,train_return,wall_s\n"
        "Hopper-v5,ppo,plain,0,0,64,1,1000.0,900.0,1.0\n"
    )
    (run,) = read_runs(folder)
    assert math.isnan(run.velocity) and not run.hops
    assert math.isnan(run.best_return) and run.best_update == 0 and not run.best_hops


def test_committed_grid_merges_the_parts_of_a_source_tree(tmp_path):
    data = tmp_path / "docs" / "results" / "data"
    assert committed_grid(tmp_path) == ([], [])
    first = [SweepRun("Hopper-v5", "ppo", "plain", lag, 0, 64, 2, 5.0, 1.0, 1.0) for lag in (0, 1)]
    write_csv(data / "lag_sweep_hopper_gait_a.csv", first)
    second = [SweepRun("Hopper-v5", "ppo", "plain", 1, 0, 64, 2, 7.0, 1.0, 1.0, 0.9)]
    write_csv(data / "lag_sweep_hopper_gait_b.csv", second)
    write_csv(data / "other.csv", second)  # not a part
    runs, files = committed_grid(tmp_path)
    assert [f.name for f in files] == ["lag_sweep_hopper_gait_a.csv", "lag_sweep_hopper_gait_b.csv"]
    assert sorted((r.lag, r.final_return) for r in runs) == [(0, 5.0), (1, 7.0)]


def test_every_env_default_and_quick_lags_fit_their_budget():
    for env, setting in SETTINGS.items():
        assert check_run_shape(env, setting["budget"], list(setting["lags"])) > max(setting["lags"])
        quick = check_run_shape(env, setting["quick_budget"], list(setting["quick_lags"]))
        assert quick > max(setting["quick_lags"])


def test_set_overrides_reach_the_learner_the_policy_and_the_kl_target():
    model = make_model(
        "Hopper-v5", "ppo", "plain", 0, 0,
        {"gamma": 0.995, "ent_coef": 0.01, "log_std_init": -0.5, "target_kl": 0.02},
    )  # fmt: skip
    try:
        learner = model.learner
        assert learner.workload.gamma == 0.995 and learner.workload.ent_coef == 0.01
        assert learner.config.target_kl == 0.02
        assert learner.policy.log_std.detach().tolist() == [-0.5, -0.5, -0.5]
        assert model.workload.log_std_init == -0.5  # the actors build the same policy
    finally:
        model.close()
    plain = make_model("Hopper-v5", "ppo", "plain", 0, 0)
    try:  # no overrides: the workload's defaults and PPO-clip's (no KL target)
        assert plain.learner.workload.gamma == 0.99 and plain.learner.config.target_kl is None
        assert plain.learner.policy.log_std.detach().tolist() == [0.0, 0.0, 0.0]
    finally:
        plain.close()


@pytest.mark.timeout(240)
def test_set_is_recorded_per_run_and_kept_apart_in_tables(tmp_path):
    out = tmp_path / "set"
    argv = ["lag-sweep", "--losses", "ppo", "--variants", "plain", "--lags", "0"]
    argv += ["--seeds", "1", "--steps", "96", "--eval-episodes", "1", "--no-progress"]
    assert main([*argv, "--set", "gamma=0.9", "--set", "ent_coef=0", "--out", str(out)]) == 0
    (run,) = read_runs(out)
    assert run.settings == "ent_coef=0.0,gamma=0.9"
    default = _sweep_folder(tmp_path / "d", [dataclasses.replace(run, settings="")])
    merged = tmp_path / "m"
    assert main(["lag-sweep", "--merge", str(out), str(default), "--out", str(merged)]) == 0
    text = (merged / "lag_sweep.md").read_text()
    assert "| ppo | plain | ent_coef=0.0,gamma=0.9 |" in text
    assert "| ppo | plain | defaults |" in text
    assert len(read_runs(merged)) == 2  # the same cell and seed, set differently: both kept


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--set", "gamma=1.5"], "gamma: expected a number > 0 and <= 1, actual 1.5"),
        (["--set", "ent_coef=-1"], "ent_coef: expected a number >= 0"),
        (["--set", "lr=nan"], "expected NAME=VALUE with a number"),
        (["--set", "depth=3"], "expected a name among"),
        (["--set", "gamma"], "expected NAME=VALUE with a number"),
        (["--set", ""], "expected NAME=VALUE"),
        (["--set", "gamma=0.9", "--set", "gamma=0.8"], "expected each name once"),
    ],
)
def test_bad_set_is_refused_before_any_work(tmp_path, capsys, argv, message):
    out = tmp_path / "sweep"
    try:  # argparse refuses a bad value, the sweep a name given twice: status 2 either way
        status = main(["lag-sweep", "--losses", "ppo", *argv, "--out", str(out)])
    except SystemExit as exc:
        status = exc.code
    assert status == 2
    assert message in capsys.readouterr().err
    assert not out.exists()


def test_merge_refuses_a_malformed_settings_cell(tmp_path, capsys):
    run = SweepRun("Hopper-v5", "ppo", "plain", 0, 0, 64, 1, 1.0, 1.0, 1.0, settings="gamma=7")
    folder = _sweep_folder(tmp_path / "bad", [run])
    assert main(["lag-sweep", "--merge", str(folder), "--out", str(tmp_path / "o")]) == 2
    assert "settings: gamma: expected a number > 0 and <= 1, actual 7.0" in capsys.readouterr().err


def test_report_tables_the_ess_and_draws_hop_share_and_ess_against_the_lag(tmp_path):
    base = SweepRun("Hopper-v5", "decoupled", "compensated", 0, 0, 64, 8, 2500.0, 9.0, 1.0)
    runs = [
        dataclasses.replace(
            base,
            lag=lag,
            seed=seed,
            velocity=1.0,
            ess=1.0 - 0.1 * lag,
            final_return=2500.0 if seed < 2 - lag else 900.0,
        )  # fmt: skip
        for lag in (0, 1, 2)
        for seed in (0, 1)
    ]
    md, _ = report(runs, tmp_path, "Hopper-v5: final return vs injected policy lag")
    text = md.read_text()
    assert "Effective sample size" in text
    assert "| decoupled | compensated | 1.00 ± 0.00 | 0.90 ± 0.00 | 0.80 ± 0.00 |" in text
    assert "| decoupled | compensated | 2/2 | 1/2 | 0/2 |" in text
    assert (tmp_path / "lag_sweep_hops.png").stat().st_size > 5_000
