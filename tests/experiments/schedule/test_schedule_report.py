"""Tables and plots of the scheduling experiments."""

from __future__ import annotations

import pytest

from fleetgym.experiments.schedule import evaluate, report


def test_summary_statistics():
    def rec(name, seed, success, time_s):
        return evaluate.EpisodeResult(
            name, seed, success, success, time_s, 1.0, 3, -1.0, 2.0, 10.0, 10.0, 0.1
        )

    rows = report.summarize([rec("a", 0, True, 10.0), rec("a", 1, False, 30.0)])
    (row,) = rows
    assert row["success_rate"] == 0.5
    assert row["time_s_mean"] == 20.0 and row["time_s_std"] == 10.0  # population std
    assert row["time_to_target_s_mean"] == 10.0 and row["time_to_target_s_std"] == 0.0
    assert "50%" in report.markdown_table(rows)


def test_ratios_and_errors():
    rows = [
        {"scheduler": "a", "time_s_mean": 10.0, "cost_mean": 1.0, "total_reward_mean": -1.0},
        {"scheduler": "b", "time_s_mean": 20.0, "cost_mean": 4.0, "total_reward_mean": -3.0},
    ]
    assert report.ratios(rows, "a", ["b", "zzz"]) == {
        "b": {"time": 0.5, "cost": 0.25, "reward_diff": 2.0}
    }
    with pytest.raises(ValueError, match="subject: expected one of"):
        report.ratios(rows, "c", ["a"])
    with pytest.raises(ValueError, match="expected at least one"):
        report.plot_time_cost([], "x.png")
    with pytest.raises(ValueError, match="expected at least one"):
        report.plot_schedules({}, "x.png")
    with pytest.raises(ValueError, match="expected at least one"):
        report.plot_training_curve([], "x.png")
