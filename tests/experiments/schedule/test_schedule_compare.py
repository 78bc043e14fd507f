"""The learned scheduler against the baselines; the scheduling part of reproduce."""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("stable_baselines3")

from fleetgym.experiments.schedule import compare, config, report, train  # noqa: E402

ENV_ID = config.GENERAL_ENV_ID


TINY = {
    "workload": "CartPole-v1",
    "timing": "modeled",
    "max_actors": 3,
    "steps_per_actor": 16,
    "max_rounds": 3,
}


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """A tiny scheduler trained for 2 episodes of 3 rounds."""
    out: Path = tmp_path_factory.mktemp("trained")
    return train.train_scheduler(
        out,
        env_id=ENV_ID,
        env_kwargs=TINY,
        episodes=2,
        config=config.SchedulerPPOConfig(n_steps=4, batch_size=4, n_epochs=2),
        progress=False,
        tensorboard=False,
    )


def test_compare_schedulers_writes_table_plots_and_budget_points(trained, tmp_path):
    result = compare.compare_schedulers(
        tmp_path,
        learned={"learned": trained.model_path},
        env_id=ENV_ID,
        env_kwargs=TINY,
        seeds=[0],
        heuristics=["max", "adapt", "server"],
        fixed_sweep=(1, 3),
        budgets=[0.00005],
        progress=False,
    )
    names = [r["scheduler"] for r in result["rows"]]
    # Fixed(3) is Max here (max_actors=3): evaluated once.
    assert names == ["learned", "max", "adapt", "server", "fixed:1"]
    assert set(result["ratios"]) == {"max", "adapt", "server", "fixed:1"}
    for name in ("schedulers.md", "schedulers.csv", "episodes.csv", "comparison.json"):
        assert (tmp_path / name).is_file()
    for name in ("actors_per_round.png", "time_cost.png"):
        assert (tmp_path / name).read_bytes()[:4] == b"\x89PNG"
    (budget_row,) = result["budget_rows"]
    # A $0.00005 budget (about what warming the learner costs) is spent within the first
    # round or two: the run stops early.
    assert budget_row["budget"] == 0.00005 and budget_row["rounds_mean"] < 3
    assert "| learned |" in result["markdown"]


def test_training_curve_plot(trained, tmp_path):
    path = report.plot_training_curve(
        {"a": trained.records, "b": trained.records}, tmp_path / "curve.png"
    )
    assert path.read_bytes()[:4] == b"\x89PNG"


def test_quick_report_with_a_given_checkpoint(trained, tmp_path):
    result = compare.quick_scheduler_report(
        tmp_path, checkpoint=trained.model_path, seeds=(0,), fixed_sweep=(1,), progress=False
    )
    assert result["checkpoint"] == str(trained.model_path)
    assert result["trained_episodes"] == 2
    assert "| learned |" in result["markdown"]
    assert (tmp_path / "time_cost.png").is_file()
