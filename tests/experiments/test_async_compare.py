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
def test_backends_run_async_with_threads_and_with_processes(capsys):
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
            "--backends",
            "inprocess",
            "process",
        ]
    )
    assert code == 0
    out = capsys.readouterr().out
    runs = [json.loads(line) for line in out.splitlines() if line.startswith("{")]
    assert [r["backend"] for r in runs] == ["inprocess", "process"]
    assert all(r["steps"] >= 128 for r in runs)
    assert "| uniform | async |" in out and "| uniform | async (process actors) |" in out


def test_proximal_clip_needs_ppo(capsys):
    with pytest.raises(SystemExit):
        async_compare.main(["--loss", "gipo", "--proximal-clip"])
    assert "--proximal-clip: expected --loss ppo, actual gipo" in capsys.readouterr().err


@pytest.mark.timeout(240)
def test_actor_count_sweep_against_the_default_sync_trainer(tmp_path, capsys):
    out = tmp_path / "out"
    argv = ["--steps", "64", "--actor-counts", "1", "2", "--kinds", "heterogeneous"]
    argv += ["--modes", "sync-default", "sync-threads", "async", "--delay-ms", "0.1"]
    assert async_compare.main([*argv, "--out", str(out)]) == 0
    runs = json.loads((out / "async_compare.json").read_text())["heterogeneous"]
    assert [(r["actors"], r["mode"]) for r in runs] == [
        (n, mode) for n in (1, 2) for mode in ("sync-default", "sync-threads", "async")
    ]
    assert all(r["steps"] >= 64 and r["cpu_s"] > 0 for r in runs)
    assert runs[0]["backend"] == "inprocess"
    printed = capsys.readouterr().out
    assert "| heterogeneous | sync-default | 2 |" in printed
    # the paired ratios: the async trainer against both synchronous references, per count
    for n in (1, 2):
        for reference in ("sync-default", "sync-threads"):
            assert f"| heterogeneous | {n} | async | {reference} |" in printed
    assert (out / "async_compare.png").stat().st_size > 0


@pytest.mark.ray
@pytest.mark.timeout(240)
def test_ray_actors_run_beside_a_thread_reference_once(capsys):
    pytest.importorskip("ray")
    argv = ["--steps", "64", "--actors", "2", "--kinds", "uniform", "--modes", "sync-threads"]
    argv += ["async", "--backends", "inprocess", "ray", "--sync-backends", "inprocess"]
    assert async_compare.main(argv) == 0
    runs = [json.loads(x) for x in capsys.readouterr().out.splitlines() if x.startswith("{")]
    assert [(r["mode"], r["backend"]) for r in runs] == [
        ("sync-threads", "inprocess"),
        ("async", "inprocess"),
        ("async", "ray"),
    ]
    assert runs[2]["cpu_s"] > 0  # the Ray actors' processes are counted


def test_tree_cpu_seconds_counts_this_process():
    before = async_compare.tree_cpu_seconds()
    sum(i * i for i in range(2_000_000))
    assert async_compare.tree_cpu_seconds() > before


def test_merge_combines_earlier_runs(tmp_path, capsys):
    run = dict(mode="async", actor_mode="thread", inference="local", seed=0, steps=10)
    run.update(wall_s=1.0, steps_per_s=10.0, learner_utilisation=0.9, cpu_s=1.0)
    run.update(final_return=500.0, reached_target=True)
    for name, actors in (("a", 8), ("b", 16)):
        (tmp_path / name).mkdir()
        body = {"heterogeneous": [dict(run, actors=actors)]}
        (tmp_path / name / "async_compare.json").write_text(json.dumps(body))
    argv = ["--merge", str(tmp_path / "a"), str(tmp_path / "b"), "--out", str(tmp_path / "all")]
    assert async_compare.main(argv) == 0
    merged = json.loads((tmp_path / "all" / "async_compare.json").read_text())
    assert [r["actors"] for r in merged["heterogeneous"]] == [8, 16]
    assert "| heterogeneous | async | 16 |" in capsys.readouterr().out
    assert (tmp_path / "all" / "async_compare.png").is_file()
    with pytest.raises(FileNotFoundError, match="expected .*async_compare.json"):
        async_compare.main(["--merge", str(tmp_path / "none"), "--out", str(tmp_path / "x")])
