"""The cross-entropy search over dynamic schedules, and ``fleetgym schedule search``."""

from __future__ import annotations

import csv
import json

import numpy as np
import pytest

from fleetgym import cli
from fleetgym.experiments.schedule import search, search_report
from fleetgym.experiments.schedule.evaluate import EpisodeResult
from fleetgym.experiments.schedule.phases import PhaseSchedule, PhaseScheduler

TINY = {
    "workload": "CartPole-v1",
    "timing": "modeled",
    "max_actors": 4,
    "steps_per_actor": 16,
    "max_rounds": 3,
}


def test_phase_schedule_rounds_labels_and_merging():
    s = PhaseSchedule((4, 4, 2), (3, 5))
    assert [s.actors_at(k) for k in range(1, 7)] == [4, 4, 4, 4, 2, 2]
    assert s.canonical() == PhaseSchedule((4, 2), (5,))
    assert s.canonical().label == "4x4>2"
    assert PhaseSchedule((8, 8), (2,)).canonical().label == "fixed:8"


@pytest.mark.parametrize(
    ("sizes", "switches", "match"),
    [
        ((4, 2), (), "switches: expected len"),
        ((4, 2, 1), (5, 3), "increasing"),
        ((4, 2), (1,), "switches"),
        ((0,), (), "sizes"),
    ],
)
def test_phase_schedule_rejects_bad_phases(sizes, switches, match):
    with pytest.raises(ValueError, match=match):
        PhaseSchedule(sizes, switches)


def test_phase_scheduler_counts_rounds_and_restarts():
    sched = PhaseScheduler(PhaseSchedule((4, 1), (3,)))
    obs, state, actions = np.zeros(7), None, []
    for _ in range(4):
        action, state = sched.predict(obs, state)
        actions.append(int(action) + 1)
    assert actions == [4, 4, 1, 1]
    action, _ = sched.predict(obs, state, episode_start=np.ones(1, dtype=bool))
    assert int(action) + 1 == 4


def test_cross_entropy_update_moves_to_the_elites():
    cem = search.CrossEntropySearch((1, 2, 4), max_phases=3, smoothing=1.0, elite_frac=0.5)
    genomes = [cem.sample()[1] for _ in range(4)]
    cem.update(genomes, rewards=[0.0, -1.0, -2.0, -3.0])  # elites: genomes 0 and 1
    counts = [int(g[0]) for g in genomes[:2]]
    expected = [np.mean([c == k for c in counts]) for k in (2, 3)]
    assert cem.p_phases == pytest.approx(expected)
    first_sizes = [int(g[1]) for g in genomes[:2]]
    assert cem.p_sizes[0] == pytest.approx(np.bincount(first_sizes, minlength=3) / 2)
    assert cem.p_phases.sum() == pytest.approx(1.0) and np.all(cem.sigma >= cem.min_std)


def test_search_runs_and_its_accounting_holds(tmp_path):
    result = search.search_schedules(
        tmp_path / "s",
        env_id="fleetgym/ActorScheduling-v0",
        env_kwargs=TINY,
        seeds=[0],
        confirm_seeds=[1],
        population=2,
        iterations=1,
        budget=2,
        progress=False,
    )
    acc = result["accounting"]
    sizes = result["search"]["sizes"]
    assert sizes == [1, 2, 4]
    assert acc["sampled"] == 2 and acc["candidate_evaluations"] + acc["cache_hits"] == 2
    held_out_episodes = len(result["held_out"])
    assert acc["episodes"] == len(sizes) + acc["candidate_evaluations"] + held_out_episodes
    candidates = result["candidates"]
    assert len(candidates) == len(sizes) + acc["candidate_evaluations"]
    fixed = [c for c in candidates if c["schedule"].startswith("fixed:")]
    dynamic = [c for c in candidates if c["realized_phases"] > 1]
    assert all(c["realized_phases"] == 1 for c in fixed)
    best_fixed = max(fixed, key=lambda c: c["total_reward_mean"])
    assert result["best_fixed"] == best_fixed
    if dynamic:
        assert result["best"] == max(dynamic, key=lambda c: c["total_reward_mean"])
    gain = result["gain"]
    assert gain["reward"] == pytest.approx(
        result["best"]["total_reward_mean"] - best_fixed["total_reward_mean"]
    )
    assert gain["time_ratio"] == pytest.approx(
        result["best"]["time_s_mean"] / best_fixed["time_s_mean"]
    )
    # Every candidate really ran: max_rounds rounds each (J is out of reach in 3 rounds).
    assert all(c["rounds_mean"] == 3 for c in candidates)
    out = tmp_path / "s"
    with (out / "candidates.csv").open() as fh:
        assert len(list(csv.DictReader(fh))) == len(candidates)
    assert json.loads((out / "search.json").read_text())["accounting"] == acc
    assert "gain of the best schedule" in (out / "search.md").read_text()
    if "held_out_gain" in result:  # the best schedule and the best Fixed(n), seed by seed
        held = result["held_out_gain"]
        assert held["seeds"] == 1 and held["better"] in (0, 1)
        assert held["diff_mean"] == pytest.approx(held["reward"])
    for png in ("schedule.png", "progress.png"):
        assert (out / png).stat().st_size > 1000


def test_paired_difference_pairs_by_seed_and_rejects_other_seeds():
    def ep(seed, reward):
        return EpisodeResult(
            "x", seed, True, True, time_s=1.0, cost=0.0, rounds=3, total_reward=reward,
            mean_actors=1.0, max_return=0.0, final_return=0.0, wall_s=0.0,
        )  # fmt: skip

    ours = [ep(1, -1.0), ep(2, -2.0), ep(3, -3.0)]
    theirs = [ep(3, -3.5), ep(1, -0.5), ep(2, -3.0)]  # other order: paired by seed
    d = search_report.paired_difference(ours, theirs)
    diffs = np.array([-0.5, 1.0, 0.5])
    assert d["diff_mean"] == pytest.approx(diffs.mean())
    assert d["diff_stderr"] == pytest.approx(diffs.std(ddof=1) / np.sqrt(3))
    assert (d["better"], d["seeds"]) == (2, 3)
    with pytest.raises(ValueError, match="expected the same seeds"):
        search_report.paired_difference(ours, theirs[:2])


def test_search_samples_are_reproducible_from_the_seed():
    def samples(seed):
        cem = search.CrossEntropySearch((1, 2, 4, 8), rng=np.random.default_rng(seed))
        return [cem.sample()[0] for _ in range(6)]

    assert samples(3) == samples(3) and samples(3) != samples(4)


def test_search_command(tmp_path, capsys):
    out = tmp_path / "cli"
    status = cli.main(
        [
            "schedule",
            "search",
            "--max-actors",
            "2",
            "--env-kwarg",
            "steps_per_actor=16",
            "--env-kwarg",
            "max_rounds=2",
            "--seeds",
            "1",
            "--confirm-seeds",
            "0",
            "--population",
            "1",
            "--iterations",
            "1",
            "--budget",
            "1",
            "--cost-weight",
            "200",
            "--no-progress",
            "--out",
            str(out),
        ]
    )
    assert status == 0
    printed = capsys.readouterr().out
    assert "cost_weight 200" in printed and '"accounting"' in printed
    assert json.loads((out / "search.json").read_text())["env"]["cost_weight"] == 200.0


def test_search_command_rejects_bad_phases(tmp_path, capsys):
    status = cli.main(
        ["schedule", "search", "--min-phases", "3", "--max-phases", "2", "--out", str(tmp_path)]
    )
    assert status == 2 and "--min-phases" in capsys.readouterr().err


def _episode(n, returns, time_s):
    return EpisodeResult(
        f"fixed:{n}",
        0,
        True,
        True,
        time_s,
        1e-4,
        len(returns),
        -0.1 * time_s,
        n,
        0.0,
        0.0,
        0.0,
        [n] * len(returns),
        list(returns),
    )


def test_stage_oracle_takes_the_fastest_size_of_each_stage():
    # Fixed(2): 1 s per round, reaches J=100 in rounds 1, 2, 4, 8; Fixed(8): 2 s per round,
    # rounds 2, 3, 4, 5. Stage times: Fixed(2) 1, 1, 2, 4; Fixed(8) 4, 2, 2, 2.
    small = _episode(2, [25, 50, 60, 75, 80, 85, 90, 100], 8.0)
    large = _episode(8, [10, 25, 50, 75, 100], 10.0)
    rows = search_report.stage_rows({2: [small], 8: [large]}, 100.0)
    times = {(r["actors"], r["stage"]): r["time_s"] for r in rows}
    assert [times[(2, s)] for s in ("0-25%", "25-50%", "50-75%", "75-100%")] == [1, 1, 2, 4]
    assert [times[(8, s)] for s in ("0-25%", "25-50%", "50-75%", "75-100%")] == [4, 2, 2, 2]
    oracle = search_report.stage_oracle(rows, seeds=1)
    assert oracle["stages"] == {"0-25%": 2, "25-50%": 2, "50-75%": 2, "75-100%": 8}
    assert oracle["time_s"] == pytest.approx(1 + 1 + 2 + 2)
    unfinished = search_report.stage_rows({2: [_episode(2, [10, 30], 2.0)]}, 100.0)
    assert np.isnan(search_report.stage_oracle(unfinished, seeds=1)["time_s"])
