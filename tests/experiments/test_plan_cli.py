"""``fleetgym plan``: predict on a tiny grid, validate on one tiny run, and its bad input."""

from __future__ import annotations

import json

import pytest

from fleetgym.cli import main


def fake_calibration(rollout_steps: int = 4) -> dict:
    """A calibration whose figures are round numbers (nothing measured)."""
    return {
        "workload": "CartPole-v1",
        "rollout_steps": rollout_steps,
        "step_s": [1e-4, 2e-4],
        "policy_s": 1e-4,
        "update_fixed_s": 1e-3,
        "update_per_sample_s": 1e-5,
        "server_batch_sizes": [1, 64],
        "server_forward_s": [1e-4, 2e-4],
        "weight_bytes": 1000,
        "obs_bytes": 16,
        "step_bytes": 40,
    }


@pytest.fixture
def calibration_file(tmp_path):
    path = tmp_path / "cal.json"
    path.write_text(json.dumps({"workloads": {"CartPole-v1": fake_calibration()}}))
    return path


def test_predict_prints_the_table_and_writes_the_png(tmp_path, calibration_file, capsys):
    out = tmp_path / "plan"
    argv = [
        "plan",
        "predict",
        "--calibration",
        str(calibration_file),
        "--workloads",
        "CartPole-v1",
        "--actors",
        "2",
        "4",
        "--updates",
        "3",
        "--out",
        str(out),
    ]
    assert main(argv) == 0
    text = capsys.readouterr().out
    assert "| workload | kind | shape | actors | mode | env steps/s |" in text
    assert "| CartPole-v1 | long-tail | AcceRL | 1000 | async |" in text
    assert (out / "plan.png").stat().st_size > 1000
    records = json.loads((out / "plan.json").read_text())
    assert {r["shape"] for r in records} == {"grid", "AcceRL"}
    assert len(records) == 2 * 2 * 2 + 2 * 2  # kinds x actors x modes, + AcceRL kinds x modes
    for record in records:
        assert 0.0 <= record["learner_utilisation"] <= 1.0
        assert record["env_steps_per_s"] > 0


def test_predict_with_the_shipped_calibration(tmp_path, capsys):
    argv = [
        "plan",
        "predict",
        "--workloads",
        "CartPole-v1",
        "--actors",
        "8",
        "--updates",
        "3",
        "--no-accerl",
        "--out",
        str(tmp_path),
    ]
    assert main(argv) == 0
    assert "| CartPole-v1 | uniform | grid | 8 | sync |" in capsys.readouterr().out
    assert (tmp_path / "plan.md").is_file()


def test_predict_reads_the_calibration_folder_measure_writes(tmp_path, calibration_file, capsys):
    folder = tmp_path / "measured"
    folder.mkdir()
    (folder / "calibration.json").write_text(calibration_file.read_text())
    argv = ["plan", "predict", "--calibration", str(folder), "--workloads", "CartPole-v1"]
    argv += ["--actors", "2", "--updates", "3", "--no-accerl", "--no-progress"]
    assert main([*argv, "--out", str(tmp_path / "out")]) == 0
    assert "| CartPole-v1 | uniform | grid | 2 | sync |" in capsys.readouterr().out
    empty = tmp_path / "empty"
    empty.mkdir()
    argv[3] = str(empty)
    assert main([*argv, "--out", str(tmp_path / "out")]) == 2
    assert "--calibration: expected an existing file" in capsys.readouterr().err


def test_validate_one_tiny_run(tmp_path, capsys):
    argv = [
        "plan",
        "validate",
        "--actors",
        "2",
        "--kinds",
        "uniform",
        "--seeds",
        "1",
        "--first-seed",
        "3",
        "--steps",
        "1024",
        "--out",
        str(tmp_path),
        "--no-progress",
    ]
    assert main(argv) == 0
    text = capsys.readouterr().out
    assert "| workload | actors | trainer | seed | measured steps/s | predicted |" in text
    data = json.loads((tmp_path / "plan_validate.json").read_text())
    assert [r["mode"] for r in data["rows"]] == ["sync-threads", "async"]
    assert [r["seed"] for r in data["rows"]] == [3, 3]
    assert all(r["predicted_steps_per_s"] > 0 for r in data["rows"])


@pytest.mark.parametrize(
    "argv, message",
    [
        (["plan", "predict", "--actors", "0"], "--actors: expected an integer >= 1, actual 0"),
        (["plan", "predict", "--updates", "2"], "--updates: expected an integer >= 3, actual 2"),
        (
            ["plan", "predict", "--learner-speedup", "-1"],
            "--learner-speedup: expected a finite number > 0",
        ),
        (["plan", "predict", "--delay-ms", "-2"], "--delay-ms: expected a finite number > 0"),
        (["plan", "predict", "--calibration", "no-such.json"], "expected an existing file"),
        (
            ["plan", "validate", "--actors", "65"],
            "--actors: expected an integer in [1, 64], actual 65",
        ),
        (["plan", "validate", "--steps", "10"], "--steps: expected an integer >= 1024, actual 10"),
    ],
)
def test_bad_arguments_exit_2(argv, message, tmp_path, capsys):
    argv = [*argv, "--out", str(tmp_path)]
    try:
        code = main(argv)
    except SystemExit as stop:  # argparse refuses the value before any work
        code = stop.code
    assert code == 2
    assert message in capsys.readouterr().err


def test_bad_calibration_files_exit_2(tmp_path, capsys):
    bad = tmp_path / "bad.json"
    bad.write_text("not json")
    out = ["--out", str(tmp_path / "out")]
    assert main(["plan", "predict", "--calibration", str(bad), *out]) == 2
    err = capsys.readouterr().err
    assert "--calibration:" in err and "expected JSON" in err
    partial = tmp_path / "partial.json"
    partial.write_text(json.dumps({"workloads": {"CartPole-v1": fake_calibration()}}))
    argv = ["plan", "predict", "--calibration", str(partial), "--workloads", "Hopper-v5", *out]
    assert main(argv) == 2
    assert "expected workloads of the calibration ['CartPole-v1']" in capsys.readouterr().err
    missing = tmp_path / "missing.json"
    missing.write_text(json.dumps({"workloads": {"CartPole-v1": {"workload": "x"}}}))
    assert main(["plan", "predict", "--calibration", str(missing), *out]) == 2
    assert "expected keys" in capsys.readouterr().err


def test_plan_without_an_action_prints_help(capsys):
    assert main(["plan"]) == 2
    assert "measure" in capsys.readouterr().out


def test_measure_refuses_an_unwritable_out(tmp_path, capsys):
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder\n")
    assert main(["plan", "measure", "--out", str(blocker)]) == 2  # a file, not a folder
    assert "--out: expected a writable folder" in capsys.readouterr().err
    (tmp_path / "calibration.json").mkdir()
    assert main(["plan", "measure", "--out", str(tmp_path)]) == 2  # its file is a folder
    assert "calibration.json" in capsys.readouterr().err


@pytest.mark.slow
def test_measure_writes_a_calibration_predict_reads(tmp_path, capsys):
    out = tmp_path / "cal"
    assert main(["plan", "measure", "--workloads", "CartPole-v1", "--out", str(out)]) == 0
    data = json.loads((out / "calibration.json").read_text())
    assert set(data["workloads"]) == {"CartPole-v1"} and data["workloads"]["CartPole-v1"]
    argv = [
        "plan",
        "predict",
        "--calibration",
        str(out),
        "--workloads",
        "CartPole-v1",
        "--actors",
        "4",
        "--updates",
        "3",
        "--no-accerl",
        "--out",
        str(tmp_path / "plan"),
    ]
    assert main(argv) == 0
