"""The per-seed study of the learned scheduler (fleetgym.experiments.schedule.seeds)."""

from __future__ import annotations

import json

import pytest

from fleetgym import cli
from fleetgym.experiments.schedule.config import SchedulerPPOConfig
from fleetgym.experiments.schedule.evaluate import evaluate_scheduler
from fleetgym.experiments.schedule.seeds import (
    WITHIN,
    pareto_front,
    reward_gap,
    seed_study,
    shape_label,
)

TINY = {
    "workload": "CartPole-v1",
    "timing": "modeled",
    "max_actors": 4,
    "steps_per_actor": 16,
    "max_rounds": 3,
}
CONFIG = SchedulerPPOConfig(n_steps=4, batch_size=4, n_epochs=1)


def test_labels_gaps_and_the_frontier():
    assert shape_label([2]) == "2x1"
    assert shape_label([4, 4, 2, 4]) == "4x2>2x1>4x1"
    assert reward_gap(-0.35, -0.35) == 0.0
    assert reward_gap(-0.30, -0.35) < 0  # better than the best fixed fleet
    assert reward_gap(-0.3675, -0.35) == pytest.approx(WITHIN)
    # Dominated points (slower and dearer than another) are left out.
    assert pareto_front({"a": (2.0, 2.0), "b": (1.0, 1.0), "c": (3.0, 0.5)}) == ["b", "c"]


@pytest.mark.timeout(600)
def test_seed_study_trains_compares_and_reuses(tmp_path):
    study = seed_study(
        tmp_path,
        env_kwargs=TINY,
        train_seeds=[0, 1],
        eval_seeds=[7],
        cost_weights=[0.0, 500.0],
        episodes=2,
        config=CONFIG,
        fixed_sizes=[1, 4],
        progress=False,
    )
    assert len(study.rows) == 2 * (2 + 2)
    for w in (0.0, 500.0):
        best = study.best_fixed[w]
        best_row = next(r for r in study.rows if r.cost_weight == w and r.scheduler == best)
        assert best_row.gap == 0.0
        fixed_rows = [r for r in study.rows if r.cost_weight == w and r.train_seed is None]
        assert all(r.reward <= best_row.reward for r in fixed_rows)
        assert len(study.learned(w)) == 2
    # The reward under a cost weight is the time-only reward minus weight x cost, exactly:
    # the same episode run in an env with that weight gives the same number.
    fixed4 = next(r for r in study.rows if r.cost_weight == 500.0 and r.scheduler == "Fixed(4)")
    from fleetgym.agents.schedulers import FixedScheduler

    (episode,) = evaluate_scheduler(
        FixedScheduler(4, max_actors=4), {**TINY, "cost_weight": 500.0}, [7]
    )
    assert fixed4.reward == pytest.approx(episode.total_reward, rel=1e-9, abs=1e-12)
    for name in ("seeds.md", "seeds.json", "episodes.csv", "schedules.png", "frontier.png"):
        assert (tmp_path / name).is_file()
    summary = json.loads((tmp_path / "seeds.json").read_text())["summary"]
    assert summary["0"]["seeds"] == 2 and 0 <= summary["0"]["within"] <= 2
    # A second study over the same folder trains nothing and evaluates the same models.
    model = tmp_path / "cw0" / "seed0" / "scheduler.zip"
    stamp = model.stat().st_mtime_ns
    again = seed_study(
        tmp_path,
        env_kwargs=TINY,
        train_seeds=[0],
        eval_seeds=[7],
        episodes=2,
        config=CONFIG,
        fixed_sizes=[1, 4],
        progress=False,
    )
    assert model.stat().st_mtime_ns == stamp
    assert again.learned(0.0)[0].reward == study.learned(0.0)[0].reward


@pytest.mark.timeout(600)
def test_seed_study_fine_tunes_and_reads_checkpoints(tmp_path):
    first = tmp_path / "first"
    seed_study(
        first,
        env_kwargs=TINY,
        train_seeds=[0],
        eval_seeds=[7],
        episodes=2,
        config=SchedulerPPOConfig(n_steps=4, batch_size=4, n_epochs=1),
        fixed_sizes=[4],
        progress=False,
    )
    source = first / "cw0" / "seed0" / "scheduler.zip"
    tuned = seed_study(
        tmp_path / "tuned",
        env_kwargs=TINY,
        train_seeds=[0],
        eval_seeds=[7],
        episodes=1,
        fixed_sizes=[4],
        finetune_from=lambda seed: source,
        progress=False,
    )
    assert (tmp_path / "tuned" / "cw0" / "seed0" / "scheduler.zip").is_file()
    assert len(tuned.learned(0.0)) == 1
    with pytest.raises(FileNotFoundError, match="scratch_checkpoint"):
        seed_study(
            first,
            env_kwargs=TINY,
            train_seeds=[0],
            eval_seeds=[7],
            fixed_sizes=[4],
            scratch_checkpoint="checkpoints/ep99.zip",
            progress=False,
        )
    with pytest.raises(ValueError, match="expected no cost_weight"):
        seed_study(tmp_path, env_kwargs={**TINY, "cost_weight": 1.0})


@pytest.mark.timeout(600)
def test_seeds_command(tmp_path, capsys):
    args = ["schedule", "seeds", "--max-actors", "2", "--env-kwarg", "steps_per_actor=16"]
    args += ["--env-kwarg", "max_rounds=2", "--train-seeds", "1", "--episodes", "1"]
    args += ["--n-steps", "2", "--batch-size", "2", "--n-epochs", "1", "--eval-seeds", "1"]
    args += ["--fixed", "1", "2", "--cost-weights", "0", "100", "--no-progress"]
    status = cli.main([*args, "--out", str(tmp_path / "out")])
    assert status == 0
    printed = capsys.readouterr().out
    assert "cost_weight 100 (best fixed fleet" in printed and '"within"' in printed
    status = cli.main([*args, "--env-kwarg", "cost_weight=3", "--out", str(tmp_path / "x")])
    assert status == 2
    assert "--cost-weights instead" in capsys.readouterr().err
