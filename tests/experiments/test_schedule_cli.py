"""``fleetgym schedule``: the evaluation loop, scheduler names, the files evaluate writes."""

from __future__ import annotations

import argparse
import csv

import numpy as np
import pytest

from fleetgym import cli
from fleetgym.agents.schedulers import AdaptScheduler, FixedScheduler, ServerBasedScheduler
from fleetgym.experiments import scheduling

TINY = {
    "workload": "CartPole-v1",
    "timing": "modeled",
    "max_actors": 4,
    "steps_per_actor": 16,
    "max_rounds": 2,
}
TINY_ARGS = [
    "--max-actors",
    "4",
    "--env-kwarg",
    "steps_per_actor=16",
    "--env-kwarg",
    "max_rounds=2",
    "--no-progress",
]


def test_evaluate_command_writes_its_files(tmp_path, capsys):
    out = tmp_path / "eval"
    status = cli.main(
        ["schedule", "evaluate", "--scheduler", "fixed:2,adapt", "--seeds", "2"]
        + TINY_ARGS
        + ["--out", str(out)]
    )
    assert status == 0
    printed = capsys.readouterr().out
    assert "| fixed:2 |" in printed and "| adapt |" in printed
    with (out / "episodes.csv").open() as fh:
        episodes = list(csv.DictReader(fh))
    assert [(e["scheduler"], e["seed"]) for e in episodes] == [
        ("fixed:2", "0"),
        ("fixed:2", "1"),
        ("adapt", "0"),
        ("adapt", "1"),
    ]
    assert episodes[0]["num_actors"] == "2 2" and episodes[0]["rounds"] == "2"
    with (out / "summary.csv").open() as fh:
        summary = list(csv.DictReader(fh))
    assert [s["scheduler"] for s in summary] == ["fixed:2", "adapt"]
    assert float(summary[0]["rounds_mean"]) == 2.0
    md = (out / "summary.md").read_text()
    assert "time to target (s)" in md and "| adapt |" in md
    assert (out / "schedules.png").stat().st_size > 1000


def test_evaluate_scheduler_records_and_determinism():
    first = scheduling.evaluate_scheduler(FixedScheduler(3, 4), TINY, [5, 6])
    again = scheduling.evaluate_scheduler(FixedScheduler(3, 4), TINY, [5])
    assert [r.seed for r in first] == [5, 6]
    r = first[0]
    assert r.num_actors == [3, 3] and r.rounds == 2 and r.mean_actors == 3.0
    assert not r.success and np.isnan(r.time_to_target_s)  # 2 rounds never reach J
    assert r.time_s > 0 and r.cost > 0 and r.total_reward < 0
    # Modeled timing: the same seed gives the same episode, whatever else ran before.
    assert (again[0].time_s, again[0].cost, again[0].total_reward, again[0].mean_return) == (
        r.time_s,
        r.cost,
        r.total_reward,
        r.mean_return,
    )


def test_server_baseline_is_billed_as_the_cluster():
    cold = {**TINY, "prewarm": False}
    serverless = scheduling.evaluate_scheduler(FixedScheduler(4, 4), cold, [0])[0]
    server = scheduling.evaluate_scheduler(ServerBasedScheduler(4, 4), cold, [0])[0]
    assert server.num_actors == serverless.num_actors
    assert server.cost != serverless.cost
    assert server.time_s < serverless.time_s  # VMs are up: no container cold starts


def test_learned_scheduler_from_an_sb3_zip(tmp_path):
    import gymnasium as gym
    from stable_baselines3 import PPO

    env = gym.make("fleetgym/ActorScheduling-v0", **TINY)
    model = PPO("MlpPolicy", env, n_steps=8, batch_size=8, seed=0, device="cpu")
    model.save(tmp_path / "sched.zip")
    env.close()
    table = scheduling.resolve_schedulers(
        [f"learned:{tmp_path / 'sched.zip'}", "max"], max_actors=4
    )
    assert list(table) == ["learned", "max"]
    records = scheduling.evaluate_scheduler(table["learned"], TINY, [0], name="learned")
    assert records[0].scheduler == "learned" and records[0].rounds == 2
    assert all(1 <= n <= 4 for n in records[0].num_actors)


def test_resolve_all_and_errors():
    table = scheduling.resolve_schedulers("all")
    assert list(table) == [
        "fixed:1",
        "fixed:4",
        "fixed:8",
        "fixed:16",
        "max",
        "increase",
        "decrease",
        "adapt",
        "server",
    ]
    raw = scheduling.resolve_schedulers("adapt", target_return=200.0)["adapt"]
    assert isinstance(raw, AdaptScheduler) and raw.target_return == 200.0
    with pytest.raises(ValueError, match="expected one of"):
        scheduling.resolve_schedulers("random")
    with pytest.raises(FileNotFoundError, match="no file"):
        scheduling.resolve_schedulers("learned:/nonexistent/sched.zip")
    with pytest.raises(TypeError, match="predict"):
        scheduling.evaluate_scheduler(object(), TINY, [0])
    with pytest.raises(ValueError, match="at least one seed"):
        scheduling.evaluate_scheduler(FixedScheduler(1), TINY, [])


def test_summary_statistics():
    def rec(name, seed, success, time_s):
        return scheduling.EpisodeResult(
            name, seed, success, success, time_s, 1.0, 3, -1.0, 2.0, 10.0, 10.0, 0.1
        )

    rows = scheduling.summarize([rec("a", 0, True, 10.0), rec("a", 1, False, 30.0)])
    (row,) = rows
    assert row["success_rate"] == 0.5
    assert row["time_s_mean"] == 20.0 and row["time_s_std"] == 10.0  # population std
    assert row["time_to_target_s_mean"] == 10.0 and row["time_to_target_s_std"] == 0.0
    assert "50%" in scheduling.markdown_table(rows)


def test_train_and_finetune_delegate(monkeypatch, capsys):
    calls = []

    class Training:
        @staticmethod
        def train(args):
            calls.append("train")
            return 0

    monkeypatch.setattr(scheduling, "_training_module", lambda: Training)
    assert scheduling.run(argparse.Namespace(schedule_command="train")) == 0
    assert calls == ["train"]
    monkeypatch.setattr(scheduling, "_training_module", lambda: None)
    assert scheduling.run(argparse.Namespace(schedule_command="finetune")) == 2
    assert "not available yet" in capsys.readouterr().err


@pytest.mark.parametrize("args", [["--seeds", "0"], ["--first-seed", "-1"], ["--seeds", "x"]])
def test_cli_rejects_bad_seeds(args, capsys):
    with pytest.raises(SystemExit):
        cli.main(["schedule", "evaluate", *args])
    assert "expected an integer" in capsys.readouterr().err


@pytest.mark.parametrize(
    "args, match",
    [
        (["--scheduler", "random"], "expected one of"),
        (["--workload", "Pong-v99"], "CartPole-v1"),
        (["--env-kwarg", "budget=-1"], "budget"),
        (["--scheduler", "learned:/nonexistent.zip"], "no file"),
    ],
)
def test_cli_reports_bad_input_in_one_line(args, match, capsys, tmp_path):
    status = cli.main(["schedule", "evaluate", *args, "--out", str(tmp_path), "--no-progress"])
    assert status == 2
    err = capsys.readouterr().err
    assert "fleetgym schedule evaluate:" in err and match in err
