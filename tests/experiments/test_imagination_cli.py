"""``fleetgym imagination`` and ``fleetgym train --imagination``: tiny budgets, real runs."""

from __future__ import annotations

import json

import pytest

from fleetgym import cli


def test_study_runs_an_arm_and_writes_its_report(tmp_path):
    code = cli.main(
        [
            "imagination",
            "--env",
            "CartPole-v1",
            "--seeds",
            "1",
            "--arms",
            "ppo+imagination",
            "--budget",
            "2048",
            "--out",
            str(tmp_path),
            "--no-progress",
        ]
    )
    assert code in (0, 1)  # 2,048 real steps may or may not reach 475
    results = json.loads((tmp_path / "results_CartPole-v1.json").read_text())
    assert [r["arm"] for r in results] == ["ppo+imagination"]
    run = results[0]
    assert run["real_steps"] >= 2048 and run["curve"], run
    # The imagination arm recorded what its rules chose once the model was fitted.
    assert any(h > 0 for _, h in run["horizons"])
    assert (tmp_path / "summary_CartPole-v1.md").read_text().startswith("### CartPole-v1")
    assert (tmp_path / "imagination_curves_cartpole.png").stat().st_size > 0
    assert (tmp_path / "imagination_error_cartpole.png").stat().st_size > 0


def test_study_refuses_an_unknown_arm(tmp_path, capsys):
    assert cli.main(["imagination", "--arms", "nope", "--out", str(tmp_path)]) == 2
    assert "--arms: expected names among" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("share=1.5", "share: expected a finite number >= 0 and <= 1"),
        ("horizon=0", "horizon: expected an int in [1, 100000]"),
        ("colour=red", "expected names among"),
        ("share", "expected name=value items"),
        ("reward=shaped", "reward: expected one of"),
    ],
)
def test_train_refuses_a_bad_imagination_spec(spec, message, capsys):
    assert cli.main(["train", "--imagination", spec, "--no-progress"]) == 2
    assert message in capsys.readouterr().err


def test_train_with_imagination_saves_the_world_model(tmp_path, capsys):
    code = cli.main(
        [
            "train",
            "--actors",
            "2",
            "--steps-per-actor",
            "64",
            "--max-steps",
            "1024",
            "--imagination",
            "warmup=100,max_fit_updates=20,share=0.5",
            "--out",
            str(tmp_path),
            "--tensorboard",
            "--save",
            "--no-progress",
        ]
    )
    assert code == 1  # 1,024 steps do not reach 475
    assert (tmp_path / "learner.world_model.pt").is_file()
    assert any((tmp_path / "tb").iterdir())


def test_study_refuses_bad_combinations_and_unreadable_results(tmp_path, capsys):
    assert cli.main(["imagination", "--async", "--arms", "ppo", "--out", str(tmp_path)]) == 2
    assert "--arms: expected no --arms with --async" in capsys.readouterr().err
    (tmp_path / "results_CartPole-v1.json").write_text("{not json")
    assert cli.main(["imagination", "--out", str(tmp_path), "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert "--out:" in err and "results_CartPole-v1.json" in err and "Traceback" not in err
