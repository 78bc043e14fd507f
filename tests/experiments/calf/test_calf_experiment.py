"""The whole CALF experiment (run_calf) at tiny budgets: files written, argument errors."""

from __future__ import annotations

import csv
import math

import pytest

from fleetgym.experiments.calf.experiment import run_calf


def test_run_calf_writes_table_csv_and_png(tmp_path):
    results = run_calf(
        "CartPole-v1",
        quick=True,
        out_dir=tmp_path,
        regimes=["baseline", "net-aware+comp"],
        timesteps=256,
        episodes=2,
        variants=["wifi-degraded", "degraded-corr0.9"],
        progress=False,
    )
    names = sorted(p.name for p in results.files)
    assert names == [
        "calf_CartPole-v1.md",
        "calf_CartPole-v1.png",
        "calf_CartPole-v1_records.csv",
        "calf_CartPole-v1_summary.csv",
    ]
    text = (tmp_path / "calf_CartPole-v1.md").read_text()
    assert "| regime | sim-clean | ethernet | wifi-normal | wifi-degraded |" in text
    assert "## Ablation" in text and "## wifi-degraded variants" in text
    with (tmp_path / "calf_CartPole-v1_records.csv").open() as fh:
        rows = list(csv.DictReader(fh))
    grid = [r for r in rows if r["table"] == "grid"]
    assert len(grid) == 2 * 5  # 2 regimes x (4 conditions + the shipped trace)
    assert {r["table"] for r in rows} == {"grid", "ablation", "degraded"}
    assert (tmp_path / "calf_CartPole-v1.png").read_bytes()[:4] == b"\x89PNG"
    cell = results.cell("baseline", "sim-clean")
    assert cell.n_seeds == 1 and not math.isnan(cell.mean)


def test_run_calf_rejects_bad_arguments(tmp_path):
    with pytest.raises(ValueError, match="seeds: expected a positive count"):
        run_calf(seeds=0, out_dir=tmp_path, progress=False)
    with pytest.raises(TypeError, match="seeds: expected a count or a sequence"):
        run_calf(seeds=True, out_dir=tmp_path, progress=False)
    with pytest.raises(ValueError, match="condition: expected one of"):
        run_calf(regimes=["nowhere+comp"], out_dir=tmp_path, progress=False)
    with pytest.raises(ValueError, match="episodes: expected an int >= 1"):
        run_calf(episodes=0, out_dir=tmp_path, progress=False)
