"""The asynchronous/synchronous comparison: a run saves, reloads and scores its policy."""

from __future__ import annotations

import json

import pytest

from fleetgym.experiments import async_compare


@pytest.mark.timeout(180)
def test_async_run_saves_reloads_and_scores_the_same(tmp_path, capsys):
    code = async_compare.main(
        [
            "--steps",
            "256",
            "--actors",
            "2",
            "--seeds",
            "1",
            "--kinds",
            "uniform",
            "--modes",
            "async",
            "--save-dir",
            str(tmp_path / "models"),
            "--eval-episodes",
            "2",
            "--proximal-clip",
            "--out",
            str(tmp_path / "out"),
        ]
    )
    assert code == 0
    runs = json.loads((tmp_path / "out" / "async_compare.json").read_text())["uniform"]
    (run,) = runs
    assert run["mode"] == "async" and run["steps"] >= 256
    assert run["loss"] == "ppo-proximal+recompute+global-norm"
    assert run["reloaded_return"] == run["eval_return"]  # same weights, same episodes
    assert (tmp_path / "models" / "uniform" / "async-0.pt").is_file()
    assert "| uniform | async |" in capsys.readouterr().out


@pytest.mark.timeout(180)
def test_actor_modes_run_async_with_threads_and_with_processes(capsys):
    code = async_compare.main(
        [
            "--steps",
            "128",
            "--actors",
            "2",
            "--kinds",
            "uniform",
            "--modes",
            "async",
            "--actor-modes",
            "thread",
            "process",
        ]
    )
    assert code == 0
    out = capsys.readouterr().out
    runs = [json.loads(line) for line in out.splitlines() if line.startswith("{")]
    assert [r["actor_mode"] for r in runs] == ["thread", "process"]
    assert all(r["steps"] >= 128 for r in runs)
    assert "| uniform | async |" in out and "| uniform | async (process actors) |" in out


def test_proximal_clip_needs_ppo(capsys):
    with pytest.raises(SystemExit):
        async_compare.main(["--loss", "gipo", "--proximal-clip"])
    assert "--proximal-clip: expected --loss ppo, actual gipo" in capsys.readouterr().err
