"""Aggregation of CALF evaluation records over seeds."""

from __future__ import annotations

import pytest

from fleetgym.experiments.calf import evaluate


def test_aggregate_means_seed_spread_and_gap():
    rec = evaluate.EvalRecord
    records = [
        rec("E", "r", 0, "sim-clean", 400.0, 0.0, 5),
        rec("E", "r", 1, "sim-clean", 500.0, 0.0, 5),
        rec("E", "r", 0, "wifi-normal", 200.0, 0.0, 5),
        rec("E", "r", 1, "wifi-normal", 400.0, 0.0, 5),
        rec("E", "r", 0, "jitter-only", 100.0, 0.0, 5, "ablation"),
    ]
    cells = {(c.table, c.condition): c for c in evaluate.aggregate(records)}
    wifi = cells[("grid", "wifi-normal")]
    assert (wifi.mean, wifi.std, wifi.n_seeds) == (300.0, 100.0, 2)
    assert wifi.gap == pytest.approx(1 - 300 / 450)
    assert wifi.gap_std == pytest.approx(0.15)  # per-seed gaps 0.5 and 0.2
    assert cells[("grid", "sim-clean")].gap == 0.0
    # Ablation rows borrow the grid's clean return of the same regime and seed.
    assert cells[("ablation", "jitter-only")].gap == pytest.approx(0.75)
