"""``fleetgym schedule``: evaluate, train and fine-tune from the command line."""

from __future__ import annotations

import csv

import pytest

pytest.importorskip("stable_baselines3")

from fleetgym import cli  # noqa: E402
from fleetgym.experiments.schedule import checkpoint  # noqa: E402

TINY_ARGS = [
    "--max-actors",
    "4",
    "--env-kwarg",
    "steps_per_actor=16",
    "--env-kwarg",
    "max_rounds=2",
    "--no-progress",
]


def test_evaluate_command_writes_its_files(tmp_path, capsys):
    out = tmp_path / "eval"
    status = cli.main(
        ["schedule", "evaluate", "--scheduler", "fixed:2,adapt", "--seeds", "2"]
        + TINY_ARGS
        + ["--out", str(out)]
    )
    assert status == 0
    printed = capsys.readouterr().out
    assert "| fixed:2 |" in printed and "| adapt |" in printed
    with (out / "episodes.csv").open() as fh:
        episodes = list(csv.DictReader(fh))
    assert [(e["scheduler"], e["seed"]) for e in episodes] == [
        ("fixed:2", "0"),
        ("fixed:2", "1"),
        ("adapt", "0"),
        ("adapt", "1"),
    ]
    assert episodes[0]["num_actors"] == "2 2" and episodes[0]["rounds"] == "2"
    with (out / "summary.csv").open() as fh:
        summary = list(csv.DictReader(fh))
    assert [s["scheduler"] for s in summary] == ["fixed:2", "adapt"]
    assert float(summary[0]["rounds_mean"]) == 2.0
    md = (out / "summary.md").read_text()
    assert "time to target (s)" in md and "| adapt |" in md
    assert (out / "schedules.png").stat().st_size > 1000


@pytest.mark.parametrize("args", [["--seeds", "0"], ["--first-seed", "-1"], ["--seeds", "x"]])
def test_cli_rejects_bad_seeds(args, capsys):
    with pytest.raises(SystemExit):
        cli.main(["schedule", "evaluate", *args])
    assert "expected an integer" in capsys.readouterr().err


@pytest.mark.parametrize(
    "args, match",
    [
        (["--scheduler", "random"], "expected one of"),
        (["--workload", "Pong-v99"], "CartPole-v1"),
        (["--env-kwarg", "budget=-1"], "budget"),
        (["--scheduler", "learned:/nonexistent.zip"], "no file"),
    ],
)
def test_cli_reports_bad_input_in_one_line(args, match, capsys, tmp_path):
    status = cli.main(["schedule", "evaluate", *args, "--out", str(tmp_path), "--no-progress"])
    assert status == 2
    err = capsys.readouterr().err
    assert "fleetgym schedule evaluate:" in err and match in err


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
    meta = checkpoint.read_scheduler_meta(out / "scheduler.zip")
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
    assert checkpoint.read_scheduler_meta(ft / "finetuned.zip")["episodes"] == 2
    assert '"episodes": 2' in capsys.readouterr().out


def test_cli_rejects_a_bad_env_kwarg():
    with pytest.raises(SystemExit):
        cli.main(["schedule", "train", "--env-kwarg", "no-equals-sign"])


def test_cli_train_stores_exploring_starts_and_gae_lambda(tmp_path, capsys):
    out = tmp_path / "train"
    args = ["schedule", "train", "--episodes", "2", "--n-steps", "2", "--batch-size", "2"]
    args += ["--train-starts", "1", "3", "--gae-lambda", "0.9", "--out", str(out)]
    rc = cli.main([*args, "--no-tensorboard", *_tiny_cli_env()])
    assert rc == 0
    config = checkpoint.read_scheduler_meta(out / "scheduler.zip")["config"]
    assert config["train_starts"] == [1, 3] and config["gae_lambda"] == 0.9
    # a start off the ladder (1, 2, 3 of max_actors 3) is a usage error, not a traceback
    for flag in ("--train-starts", "--start-actors", "--start-search"):
        bad = ["schedule", "train", flag, "4", "--out", str(tmp_path / "off")]
        assert cli.main([*bad, "--no-tensorboard", *_tiny_cli_env()]) == 2
        assert (
            f"{flag}: start_actors: expected one of (1, 2, 3), actual 4" in capsys.readouterr().err
        )
    bad = ["schedule", "train", "--gae-lambda", "1.5", "--out", str(tmp_path / "bad")]
    with pytest.raises(SystemExit):
        cli.main(bad)
    assert "--gae-lambda: expected a number in [0, 1]" in capsys.readouterr().err


def test_evaluate_usage_error_exits_2_before_any_episode(tmp_path, capsys, monkeypatch):
    from fleetgym.experiments.schedule import cli as schedule_cli

    def no_episode(*args, **kwargs):
        raise AssertionError("an episode ran before the arguments were checked")

    monkeypatch.setattr(schedule_cli, "evaluate_scheduler", no_episode)
    argv = ["schedule", "evaluate", "--scheduler", "fixed:2,nope", "--out", str(tmp_path / "o")]
    assert cli.main([*argv, *TINY_ARGS]) == 2
    err = capsys.readouterr().err
    assert err.startswith("fleetgym schedule evaluate: error: --scheduler:")
    assert len(err.strip().splitlines()) == 1


def test_evaluate_error_inside_the_run_is_a_crash_with_traceback(tmp_path, capsys, monkeypatch):
    from fleetgym.experiments.schedule import cli as schedule_cli

    def diverged(*args, **kwargs):
        raise ValueError("a bug an hour in")

    monkeypatch.setattr(schedule_cli, "evaluate_scheduler", diverged)
    argv = ["schedule", "evaluate", "--scheduler", "fixed:2", "--out", str(tmp_path)]
    assert cli.main([*argv, *TINY_ARGS]) == 3
    err = capsys.readouterr().err
    assert "Traceback" in err and "ValueError: a bug an hour in" in err


def test_train_error_inside_the_run_is_a_crash_with_traceback(tmp_path, capsys, monkeypatch):
    from fleetgym.experiments.schedule import train as schedule_train

    def diverged(*args, **kwargs):
        raise ValueError("the update diverged")

    monkeypatch.setattr(schedule_train, "train_scheduler", diverged)
    argv = ["schedule", "train", "--episodes", "1", "--out", str(tmp_path), "--no-tensorboard"]
    assert cli.main([*argv, *_tiny_cli_env(), "--no-progress"]) == 3
    err = capsys.readouterr().err
    assert "Traceback" in err and "ValueError: the update diverged" in err


def test_train_usage_errors_exit_2_before_training(tmp_path, capsys, monkeypatch):
    from fleetgym.experiments.schedule import train as schedule_train

    def no_training(*args, **kwargs):
        raise AssertionError("training started before the arguments were checked")

    monkeypatch.setattr(schedule_train, "train_scheduler", no_training)
    not_a_zip = tmp_path / "bogus.zip"
    not_a_zip.write_text("not a zip\n")
    cases = {
        ("--resume", str(not_a_zip)): f"--resume: {not_a_zip}: expected a fleetgym scheduler "
        "checkpoint",
        ("--resume", str(tmp_path / "none")): "--resume: expected a scheduler checkpoint",
        ("--start-search", "none", "8"): "--start-search: expected 'none' alone",
        ("--name", " "): "--name: expected a non-empty file stem",
    }
    for extra, message in cases.items():
        argv = ["schedule", "train", *extra, "--out", str(tmp_path / "o"), "--no-progress"]
        assert cli.main([*argv, *_tiny_cli_env()]) == 2, extra
        err = capsys.readouterr().err
        assert f"fleetgym schedule train: error: {message}" in err, err
        assert len(err.strip().splitlines()) == 1


def test_start_search_none_turns_the_race_off(tmp_path, capsys):
    out = tmp_path / "train"
    argv = ["schedule", "train", "--episodes", "1", "--n-steps", "2", "--batch-size", "2"]
    argv += ["--start-search", "none", "--no-check-moves", "--out", str(out)]
    assert cli.main([*argv, "--no-tensorboard", "--no-progress", *_tiny_cli_env()]) == 0
    config = checkpoint.read_scheduler_meta(out / "scheduler.zip")["config"]
    assert config["start_search"] == []
    assert not (out / "scheduler_start_search.csv").exists()
