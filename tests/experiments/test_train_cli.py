"""``fleetgym train``: what ``--save``, ``--log`` and ``--plot`` write into ``--out``, and
the crash contract (usage errors exit 2 before any actor starts, a failure during training
exits 3 with its traceback)."""

from __future__ import annotations

import pytest

from fleetgym.cli import main

SMALL = ["--workload", "CartPole-v1", "--actors", "2", "--rounds", "2"]
SMALL += ["--steps-per-actor", "16", "--no-progress"]


def test_train_writes_model_log_and_plot_into_out(tmp_path, capsys):
    from fleetgym.agents.policies import ActorCriticPolicy

    out = tmp_path / "run"
    argv = ["train", *SMALL, "--out", str(out), "--save", "--log", "--plot"]
    assert main([*argv, "--eval-episodes", "1"]) == 1  # 64 steps cannot reach 475
    printed = capsys.readouterr().out
    assert "did not reach target 475: mean return" in printed
    assert "after 64 env steps, 2 rounds" in printed
    assert "evaluating the final policy over 1 episodes" in printed
    assert (out / "learner.pt").is_file() and (out / "curves.png").is_file()
    assert len((out / "log.csv").read_text().splitlines()) == 3
    assert ActorCriticPolicy.load(out / "learner.policy.pt").config["workload"] == "CartPole-v1"


def test_train_writes_nothing_unless_asked(tmp_path, capsys):
    out = tmp_path / "run"
    assert main(["train", *SMALL, "--out", str(out)]) == 1
    assert not out.exists()


def test_train_refuses_an_unwritable_out_before_training(tmp_path, capsys, monkeypatch):
    from fleetgym.experiments import train as train_command

    def no_training(*args, **kwargs):
        raise AssertionError("training started before the arguments were checked")

    monkeypatch.setattr(train_command, "train", no_training)
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder\n")
    assert main(["train", *SMALL, "--out", str(blocker), "--log"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("fleetgym train: error: --out: expected a writable folder")
    assert len(err.strip().splitlines()) == 1


@pytest.mark.timeout(120)
def test_train_error_inside_the_run_is_a_crash_with_traceback(tmp_path, capsys, monkeypatch):
    from fleetgym.experiments import train as train_command

    def diverged(*args, **kwargs):
        raise ValueError("the update diverged")

    monkeypatch.setattr(train_command, "train", diverged)
    assert main(["train", *SMALL]) == 3
    err = capsys.readouterr().err
    assert "Traceback" in err and "ValueError: the update diverged" in err
