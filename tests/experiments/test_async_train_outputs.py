"""``fleetgym train --mode async --log --plot``: one CSV row and one curve point per update."""

from __future__ import annotations

import csv

import pytest

from fleetgym.cli import main


@pytest.mark.timeout(180)
def test_train_async_writes_the_log_and_the_plot(tmp_path, capsys):
    log, plot = tmp_path / "runs" / "log.csv", tmp_path / "runs" / "curves.png"
    argv = ["train", "--mode", "async", "--actors", "2", "--steps-per-actor", "16"]
    argv += ["--max-steps", "64", "--no-progress", "--out", str(tmp_path / "runs")]
    argv += ["--log", "--plot"]
    assert main(argv) == 1  # 64 steps do not reach 475
    out = capsys.readouterr().out
    assert f"wrote the per-update log to {log}" in out and f"learning curves to {plot}" in out
    with log.open() as fh:
        rows = list(csv.DictReader(fh))
    assert [int(r["update"]) for r in rows] == [0, 1]
    assert {"total_steps", "wall_s", "mean_return", "lag_p99", "learner_utilisation"} <= set(
        rows[0]
    )
    assert plot.stat().st_size > 1000
