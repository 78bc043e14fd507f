"""``fleetgym imagination`` and ``fleetgym train --imagination``: tiny budgets, real runs."""

from __future__ import annotations

import dataclasses
import json

import pytest

from fleetgym import cli


def test_study_runs_an_arm_and_writes_its_report(tmp_path):
    code = cli.main(
        [
            "imagination",
            "--env",
            "CartPole-v1",
            "--seeds",
            "1",
            "--arms",
            "ppo+imagination",
            "--budget",
            "2048",
            "--out",
            str(tmp_path),
            "--no-progress",
        ]
    )
    # Two evaluations (every 1,024 steps) cannot make the three in a row at 475 needs.
    assert code == 1
    results = json.loads((tmp_path / "results_CartPole-v1.json").read_text())
    assert [r["arm"] for r in results] == ["ppo+imagination"]
    run = results[0]
    assert run["real_steps"] >= 2048 and run["curve"], run
    # The imagination arm recorded what its rules chose once the model was fitted.
    assert any(h > 0 for _, h in run["horizons"])
    assert (tmp_path / "summary_CartPole-v1.md").read_text().startswith("### CartPole-v1")
    assert (tmp_path / "imagination_curves_cartpole.png").stat().st_size > 0
    assert (tmp_path / "imagination_error_cartpole.png").stat().st_size > 0


def test_study_refuses_an_unknown_arm(tmp_path, capsys):
    assert cli.main(["imagination", "--arms", "nope", "--out", str(tmp_path)]) == 2
    assert "--arms: expected names among" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("share=1.5", "share: expected a finite number >= 0 and <= 1"),
        ("horizon=0", "horizon: expected an int in [1, 100000]"),
        ("colour=red", "expected names among"),
        ("share", "expected name=value items"),
        ("reward=shaped", "reward: expected one of"),
        ("schedule=cosine", "schedule: expected one of"),
        ("source=dream", "source: expected one of"),
        ("success_share=1.5", "success_share: expected a finite number >= 0 and <= 1"),
        ("max_imagination_lag=-1", "max_imagination_lag: expected"),
        ("updates_per_round=0", "updates_per_round: expected"),
        ("min_horizon=0", "min_horizon: expected an int in [1, 100000]"),
        ("source=replay,share=auto", "share: expected a number in [0, 1] with source='replay'"),
    ],
)
def test_train_refuses_a_bad_imagination_spec(spec, message, capsys):
    assert cli.main(["train", "--imagination", spec, "--no-progress"]) == 2
    assert message in capsys.readouterr().err


def test_the_imagination_spec_chooses_the_horizon_schedule():
    from fleetgym.agents.world_model.config import parse_imagination_spec

    for name in ("validation", "linear", "error"):
        assert parse_imagination_spec(f"schedule={name}").schedule == name


def test_train_with_imagination_saves_the_world_model(tmp_path, capsys):
    code = cli.main(
        [
            "train",
            "--actors",
            "2",
            "--steps-per-actor",
            "64",
            "--max-steps",
            "1024",
            "--imagination",
            "warmup=100,max_fit_updates=20,share=0.5",
            "--out",
            str(tmp_path),
            "--tensorboard",
            "--save",
            "--no-progress",
        ]
    )
    assert code == 1  # 1,024 steps do not reach 475
    assert (tmp_path / "learner.world_model.pt").is_file()
    assert any((tmp_path / "tb").iterdir())


def test_study_refuses_bad_combinations_and_unreadable_results(tmp_path, capsys):
    assert cli.main(["imagination", "--async", "--arms", "ppo", "--out", str(tmp_path)]) == 2
    assert "--arms: expected no --arms with --async" in capsys.readouterr().err
    (tmp_path / "results_CartPole-v1.json").write_text("{not json")
    assert cli.main(["imagination", "--out", str(tmp_path), "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert "--out:" in err and "results_CartPole-v1.json" in err and "Traceback" not in err


def _reached(env, setup, arm, seed, progress=None):
    """A stand-in for a finished run (the study's loop itself is tested above)."""
    from fleetgym.experiments.imagination.study import RunResult

    steps = 3 * setup.eval_every
    curve = [(setup.eval_every * k, setup.target + 1.0) for k in (1, 2, 3)]
    return RunResult(env, arm.name, seed, steps, steps, 3, curve=curve)


@pytest.mark.parametrize("arm", ["ppo+imagination-7x", "ppo", "ppo+replay", "ppo+epochs"])
def test_the_exit_status_is_that_of_the_arms_asked_for(arm, tmp_path, monkeypatch):
    from fleetgym.experiments.imagination import study

    monkeypatch.setattr(study, "run_arm", _reached)
    monkeypatch.setattr(study, "random_score", lambda *args: 9.0)
    argv = ["imagination", "--seeds", "1", "--out", str(tmp_path), "--no-progress"]
    assert cli.main([*argv, "--arms", arm]) == 0  # every run asked for reached the target
    # An earlier run of another arm that did not reach it does not change that.
    path = tmp_path / "results_CartPole-v1.json"
    results = json.loads(path.read_text())
    path.write_text(json.dumps([*results, {**results[0], "arm": "ppo-small-rounds",
                                           "steps_to_target": None}]))  # fmt: skip
    assert cli.main([*argv, "--arms", arm]) == 0


def test_the_exit_status_is_1_when_an_arm_asked_for_misses(tmp_path, monkeypatch):
    from fleetgym.experiments.imagination import study

    def missed(env, setup, arm, seed, progress=None):
        result = _reached(env, setup, arm, seed)
        if arm.name == "ppo":
            result.steps_to_target = None
        return result

    monkeypatch.setattr(study, "run_arm", missed)
    monkeypatch.setattr(study, "random_score", lambda *args: 9.0)
    argv = ["imagination", "--seeds", "1", "--out", str(tmp_path), "--no-progress"]
    assert cli.main([*argv, "--arms", "ppo,ppo+imagination"]) == 1


def test_reaching_the_target_takes_three_evaluations_in_a_row():
    from fleetgym.experiments.imagination.study import TARGET_STREAK, steps_to_target

    assert TARGET_STREAK == 3
    curve = [(1, 480.0), (2, 470.0), (3, 475.0), (4, 500.0), (5, 476.0), (6, 490.0)]
    assert steps_to_target(curve, 475.0) == 5  # 3, 4, 5: the first three in a row
    assert steps_to_target(curve[:4], 475.0) is None  # a single good evaluation is not it
    assert steps_to_target([(1, 480.0), (2, 480.0)], 475.0) is None


@pytest.mark.parametrize("env", ["CartPole-v1", "Hopper-v5", "MiniGrid-DoorKey-5x5-v0"])
def test_the_study_has_a_matched_replay_arm(env):
    from fleetgym.agents.world_model import ImaginationConfig
    from fleetgym.experiments.imagination.study import ENVS

    arms = {a.name: a for a in ENVS[env].arms}
    model, replay = arms["ppo+imagination"], arms["ppo+replay"]
    # The same real steps per round and samples per update: the same gradient steps per
    # real step; the extra samples are replayed real data instead of imagined.
    assert replay.steps_per_actor == model.steps_per_actor
    config, matched = (
        ImaginationConfig(**model.imagination),
        ImaginationConfig(**replay.imagination),
    )
    assert (matched.share, matched.warmup, matched.updates_per_round) == (
        config.share,
        config.warmup,
        config.updates_per_round,
    )
    assert matched.source == "replay" and config.source == "model"


def test_the_async_table_scores_the_evaluation_not_the_training_window():
    from fleetgym.experiments.imagination.asynchronous import async_table

    row = {"steps_per_s": 900.0, "updates": 10, "lag_mean": 1.0, "lag_p50": 1.0,
           "lag_p99": 3.0, "learner_utilisation": 0.5, "imagined_share": 0.0,
           "mean_return": 37.0, "eval_return": 412.0}  # fmt: skip
    runs = [{**row, "seed": 0, "imagination": False}, {**row, "seed": 0, "imagination": True}]
    table = async_table(runs, 2.0, 1.0)
    assert "evaluation return" in table and "| 412 |" in table and "| 37 |" not in table


def test_an_async_run_is_scored_by_the_synchronous_evaluator(monkeypatch):
    from fleetgym.agents.learners import training
    from fleetgym.experiments.imagination import asynchronous

    seen = {}
    evaluate_policy = training.evaluate_policy

    def spy(policy, workload, episodes, seed=0, deterministic=True, **kwargs):
        seen.update(episodes=episodes, seed=seed, deterministic=deterministic)
        return evaluate_policy(policy, workload, episodes, seed, deterministic, **kwargs)

    monkeypatch.setattr(training, "evaluate_policy", spy)
    run = asynchronous._one(4, 256, 0.0, 0.0, None)  # one AsyncPPO update, no delay
    assert seen == {"episodes": 20, "seed": 10_004, "deterministic": False}
    assert run["eval_return"] > 0 and run["real_steps"] >= 256


def _mbpo_study(out, *extra):
    return cli.main(
        [
            "imagination", "--mbpo", "--env", "Pendulum-v1", "--seeds", "1", "--budget", "1200",
            "--eval-every", "600", "--updates-per-step", "1", "--ensemble-size", "2",
            "--out", str(out), "--no-progress", *extra,
        ]
    )  # fmt: skip


def test_mbpo_study_runs_both_arms_and_writes_its_report(tmp_path):
    code = _mbpo_study(tmp_path)
    # 700 SAC updates cannot hold Pendulum at -200 for three evaluations (two are made).
    assert code == 1
    results = json.loads((tmp_path / "results_mbpo_Pendulum-v1.json").read_text())
    assert [(r["arm"], r["seed"]) for r in results] == [("mbpo", 0), ("sac", 0)]
    mbpo, sac = results
    assert [s for s, _, _ in mbpo["curve"]] == [600, 1200] == [s for s, _, _ in sac["curve"]]
    # The learner settings match apart from the model; only MBPO fitted and imagined.
    assert mbpo["mbpo"]["model_version"] >= 1 and mbpo["mbpo"]["imagined_rows"] > 0
    assert mbpo["setup"]["updates_per_step"] == sac["setup"]["updates_per_step"] == 1
    assert mbpo["setup"]["net_arch"] == sac["setup"]["net_arch"] == [64, 64]
    assert sac["model_fit_s"] == 0.0 and mbpo["model_fit_s"] > 0
    assert mbpo["final_velocity"] is None  # Pendulum reports no forward velocity
    table = (tmp_path / "summary_mbpo_Pendulum-v1.md").read_text()
    assert table.startswith("### Pendulum-v1: MBPO against SAC")
    assert "seed 0 neither" in table and "Trivial policies: random" in table
    assert (tmp_path / "mbpo_Pendulum-v1.png").stat().st_size > 0
    # Two runs side by side, each in its own process, train exactly as one after the other.
    assert _mbpo_study(tmp_path / "jobs", "--jobs", "2") == 1
    again = json.loads((tmp_path / "jobs" / "results_mbpo_Pendulum-v1.json").read_text())
    assert {r["arm"]: r["curve"] for r in again} == {r["arm"]: r["curve"] for r in results}


def test_an_mbpo_run_stops_at_the_target_when_asked(tmp_path):
    from fleetgym.experiments.imagination.mbpo import MBPO_ENVS, run_mbpo_arm

    setup = dataclasses.replace(
        MBPO_ENVS["Pendulum-v1"], budget=2000, learning_starts=1000, eval_every=100,
        eval_episodes=1, target=-1e9,
    )  # fmt: skip
    run = run_mbpo_arm("Pendulum-v1", setup, "sac", 0)
    # Every evaluation is above the target: the third in a row ends the run.
    assert run["steps_to_target"] == run["real_steps"] == 300
    assert [s for s, _, _ in run["curve"]] == [100, 200, 300]
    full = run_mbpo_arm("Pendulum-v1", dataclasses.replace(setup, stop_at_target=False), "sac", 0)
    assert full["real_steps"] == 2000 and full["steps_to_target"] == 300


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--real-ratio", "0.5"], "--real-ratio: expected --mbpo"),
        (["--env", "Pendulum-v1"], "--env: expected one of"),
        (["--mbpo", "--env", "CartPole-v1"], "--env: expected one of ['Hopper-v5'"),
        (["--jobs", "2"], "--jobs: expected --mbpo"),
        (["--mbpo", "--real-ratio", "1.5"], "--real-ratio"),
        (["--mbpo", "--updates-per-step", "0"], "--updates-per-step"),
        (["--mbpo", "--rollout-length", "0"], "--rollout-length"),
        (["--mbpo", "--env", "Hopper-v5", "--arms", "ppo"], "--arms: expected names among"),
        (["--mbpo", "--async"], "--mbpo: expected no --async"),
    ],
)
def test_mbpo_bad_input_is_a_usage_error(tmp_path, capsys, argv, message):
    try:
        code = cli.main(["imagination", *argv, "--out", str(tmp_path / "out")])
    except SystemExit as stop:  # argparse's own type errors
        code = stop.code
    assert code == 2
    assert message in capsys.readouterr().err
    assert not (tmp_path / "out").exists() or not list((tmp_path / "out").iterdir())
