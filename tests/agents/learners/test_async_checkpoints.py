"""Periodic checkpoints and resume of the asynchronous trainer (``AsyncPPO``).

Asynchronous actors are not deterministic, so a resume is checked for its accounting, not
bit for bit: the resumed run's env steps are the checkpoint's plus those consumed after
the resume, and the budget counts the steps before the checkpoint; through
``AsyncPPO.learn(checkpoints=, resume=)`` and through ``fleetgym train --mode async``
killed with SIGKILL mid-run.
"""

from __future__ import annotations

import csv
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import torch

from fleetgym.agents.learners import (
    AsyncPPO,
    AsyncPPOConfig,
    AsyncTopology,
    CheckpointConfig,
    TokenAsyncPPO,
    TokenAsyncPPOConfig,
)
from fleetgym.agents.learners.asynchronous.settings import read_async_checkpoint
from fleetgym.agents.learners.checkpoint_store import FORMAT, CheckpointStore
from fleetgym.agents.learners.token_config import TokenPPOConfig
from fleetgym.cli import main
from fleetgym.errors import CheckpointError

WORKLOAD = "CartPole-v1"
STEPS = 16  # per rollout; 2 actors, 2 trajectories per update: 32 env steps an update
PER_UPDATE = 32
BUDGET = 12 * PER_UPDATE


@pytest.fixture(autouse=True)
def _one_thread() -> Any:
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def _model(seed: int = 0, **algo: Any) -> AsyncPPO:
    return AsyncPPO(
        WORKLOAD,
        algo=AsyncPPOConfig(hyperparameters={"epochs": 1}, **algo),
        topology=AsyncTopology(n_actors=2, steps_per_actor=STEPS, backend="inprocess"),
        seed=seed,
    )


def _stop_after(updates: int) -> Any:
    return lambda record: record.update + 1 >= updates


@pytest.fixture(scope="module")
def saved_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A run stopped (as if killed) after 5 updates, a checkpoint every 2, keeping 2."""
    folder = tmp_path_factory.mktemp("async") / "checkpoints"
    torch.set_num_threads(1)
    with _model() as model:
        model.learn(
            BUDGET,
            callback=_stop_after(5),
            checkpoints=CheckpointConfig(folder, every_rounds=2, every_minutes=None, keep=2),
        )
    return folder


def test_periodic_checkpoints_are_atomic_and_keep_k(saved_run: Path) -> None:
    names = sorted(p.name for p in saved_run.iterdir())
    assert names == ["ckpt-00000002.pt", "ckpt-00000004.pt"]  # 2 and 4 written, 2 kept; no .tmp
    checkpoint = read_async_checkpoint(saved_run)  # the newest
    assert checkpoint.path.name == "ckpt-00000004.pt"
    counters = checkpoint.counters
    assert counters["updates"] == 4 == len(checkpoint.history)
    assert counters["num_timesteps"] == 4 * PER_UPDATE == checkpoint.history[-1].total_steps
    assert counters["call_steps"] == 4 * PER_UPDATE and counters["call_updates"] == 4
    assert counters["collected_steps"] >= counters["num_timesteps"]
    assert counters["policy_version"] == 4 == checkpoint.learner["meta"]["policy_version"]
    assert [r.update for r in checkpoint.history] == [0, 1, 2, 3]
    assert checkpoint.config["workload"] == WORKLOAD and checkpoint.config["seed"] == 0
    assert checkpoint.config["topology"]["n_actors"] == 2
    assert checkpoint.header["fleetgym_version"] and "torch" in checkpoint.rng
    state = torch.load(checkpoint.path, weights_only=True)  # tensors and plain values only
    assert state["format"] == "fleetgym-async-checkpoint"


def test_resume_continues_the_counters_exactly(saved_run: Path, tmp_path: Path) -> None:
    checkpoint = read_async_checkpoint(saved_run)
    folder = tmp_path / "copy"
    folder.mkdir()
    (folder / checkpoint.path.name).write_bytes(checkpoint.path.read_bytes())
    with _model() as model:
        model.learn(
            BUDGET,
            resume=folder,
            checkpoints=CheckpointConfig(folder, every_rounds=3, every_minutes=None, keep=5),
        )
    # The budget counts the 4 updates before the checkpoint; nothing counted twice or lost.
    assert model.num_timesteps == BUDGET
    assert len(model.history) == BUDGET // PER_UPDATE
    assert [r.update for r in model.history] == list(range(len(model.history)))
    totals = [r.total_steps for r in model.history]
    assert totals == [PER_UPDATE * (i + 1) for i in range(len(totals))]
    assert [r.total_steps for r in model.history[:4]] == [r.total_steps for r in checkpoint.history]
    assert model.learner.policy_version == len(model.history)
    assert model.history[4].wall_s >= checkpoint.history[-1].wall_s  # wall time goes on
    # The resumed run went on writing into the checkpoint's folder (updates 7 and 10).
    names = [p.name for p in CheckpointStore(folder).checkpoints()]
    assert names == ["ckpt-00000004.pt", "ckpt-00000007.pt", "ckpt-00000010.pt"]
    assert read_async_checkpoint(folder).counters["num_timesteps"] == 10 * PER_UPDATE


def test_a_stopped_run_resumed_reaches_the_budget(tmp_path: Path) -> None:
    folder = tmp_path / "checkpoints"
    config = CheckpointConfig(folder, every_rounds=1, every_minutes=None, keep=1)
    with _model(seed=1) as first:
        first.learn(BUDGET, callback=_stop_after(3), checkpoints=config)
    saved = read_async_checkpoint(folder).counters["num_timesteps"]
    assert saved == 3 * PER_UPDATE == first.num_timesteps
    with _model(seed=1) as resumed:
        resumed.learn(BUDGET, checkpoints=config, resume=folder)
    after = sum(
        b.total_steps - a.total_steps
        for a, b in zip(resumed.history[2:-1], resumed.history[3:], strict=True)
    )  # the steps of the updates after the checkpoint
    assert saved + after == resumed.num_timesteps == BUDGET
    # Resuming a run whose budget is spent trains nothing and starts no actor.
    with _model(seed=1) as again:
        again.learn(BUDGET, resume=folder)
        assert again.num_timesteps == BUDGET and len(again.history) == BUDGET // PER_UPDATE


def test_the_history_is_bounded_in_memory_and_in_checkpoints(tmp_path: Path) -> None:
    """``history_limit=3``: the trainer counts every update but keeps the newest 3 records,
    a checkpoint carries those 3, and a resumed run's log keeps the rows the file had
    before them (the file, not the trainer, holds every row)."""
    from fleetgym.experiments.async_train import LiveLog

    folder, log = tmp_path / "checkpoints", tmp_path / "log.csv"
    config = CheckpointConfig(folder, every_rounds=1, every_minutes=None, keep=1)
    with AsyncPPO(
        WORKLOAD,
        algo=AsyncPPOConfig(hyperparameters={"epochs": 1}),
        topology=AsyncTopology(n_actors=2, steps_per_actor=STEPS, backend="inprocess"),
        history_limit=3,
    ) as first:
        live = LiveLog(log, first)
        first.learn(BUDGET, callback=lambda r: live(r) or r.update + 1 >= 7, checkpoints=config)
        live.close()
    assert first.updates == 7 and [r.update for r in first.history] == [4, 5, 6]
    checkpoint = read_async_checkpoint(folder)
    assert checkpoint.counters["updates"] == 7
    assert [r.update for r in checkpoint.history] == [4, 5, 6]
    assert [len(r.stats.lags) for r in checkpoint.history] == [PER_UPDATE] * 3
    assert all((a.stats.lags == b.stats.lags).all() for a, b in zip(
        checkpoint.history, first.history, strict=True))  # fmt: skip
    with open(log, "a", newline="") as file:  # a row of the killed run after the checkpoint
        file.write("7,999\n")
    with AsyncPPO(
        WORKLOAD,
        algo=AsyncPPOConfig(hyperparameters={"epochs": 1}),
        topology=AsyncTopology(n_actors=2, steps_per_actor=STEPS, backend="inprocess"),
        history_limit=2,
    ) as resumed:
        live = LiveLog(log, resumed, resumed=True)
        resumed.learn(BUDGET, callback=live, resume=folder)
        live.close()
    assert resumed.updates == BUDGET // PER_UPDATE and resumed.num_timesteps == BUDGET
    assert [r.update for r in resumed.history] == [10, 11]
    with open(log, newline="") as file:
        rows = list(csv.DictReader(file))
    assert [int(r["update"]) for r in rows] == list(range(BUDGET // PER_UPDATE))
    assert [int(r["total_steps"]) for r in rows] == [PER_UPDATE * (i + 1) for i in range(12)]


def test_the_history_limit_is_checked() -> None:
    for bad, kind in ((0, ValueError), (-1, ValueError), (2.5, TypeError), ("3", TypeError)):
        with pytest.raises(kind, match="history_limit"):
            AsyncPPO(WORKLOAD, history_limit=bad)


def _copied(saved_run: Path, dest: Path, **changes: Any) -> Path:
    dest.mkdir(parents=True, exist_ok=True)
    source = read_async_checkpoint(saved_run).path
    target = dest / source.name
    target.write_bytes(source.read_bytes())
    if changes:
        state = torch.load(target, weights_only=True)
        state.update(changes)
        torch.save(state, target)
    return target


def _refused(path: Path, *words: str, model: AsyncPPO | None = None) -> str:
    own = model is None
    model = model or _model()
    try:
        with pytest.raises(CheckpointError) as caught:
            model.learn(BUDGET, resume=path)
        assert model.num_timesteps == 0 and not model.history
        assert model.slots._threads == []  # refused before any actor started
    finally:
        if own:
            model.close()
    message = str(caught.value)
    assert str(path) in message, message
    for word in words:
        assert word in message, message
    return message


def test_bad_checkpoints_are_refused_naming_the_file(saved_run: Path, tmp_path: Path) -> None:
    truncated = _copied(saved_run, tmp_path / "truncated")
    truncated.write_bytes(truncated.read_bytes()[:500])
    _refused(truncated, "not a fleetgym checkpoint")
    garbage = tmp_path / "garbage" / "ckpt-00000001.pt"
    garbage.parent.mkdir()
    garbage.write_bytes(os.urandom(256))
    _refused(garbage)
    sync = _copied(saved_run, tmp_path / "sync", format=FORMAT)
    _refused(sync, "fleetgym train checkpoint")
    foreign = tmp_path / "foreign.pt"
    torch.save({"weights": torch.zeros(2)}, foreign)
    _refused(foreign, "another torch file")
    _refused(_copied(saved_run, tmp_path / "newer", fleetgym_version="99.0.0"), "newer")
    _refused(_copied(saved_run, tmp_path / "format", format_version=99), "format_version")
    _refused(_copied(saved_run, tmp_path / "history", history=[]), "history")
    _refused(tmp_path / "missing", "nothing there")
    empty = tmp_path / "empty"
    empty.mkdir()
    _refused(empty, "none in this folder")


def test_a_checkpoint_of_another_run_is_refused(saved_run: Path) -> None:
    path = read_async_checkpoint(saved_run).path
    with _model(seed=3) as model:
        message = _refused(path, "another run", "seed: the checkpoint has 0", model=model)
    with _model(loss="gipo") as model:
        message = _refused(path, "algo.loss", model=model)
    with AsyncPPO(
        "Acrobot-v1", algo={"hyperparameters": {"epochs": 1}},
        topology=AsyncTopology(n_actors=2, steps_per_actor=STEPS),
    ) as model:  # fmt: skip
        message = _refused(path, "workload", model=model)
    assert "Acrobot-v1" in message


def test_resume_and_checkpoints_misuse(saved_run: Path, tmp_path: Path) -> None:
    with _model() as model:
        with pytest.raises(TypeError, match="checkpoints"):
            model.learn(BUDGET, checkpoints=str(tmp_path))  # type: ignore[arg-type]
        with pytest.raises(TypeError, match="resume"):
            model.learn(BUDGET, resume=3)  # type: ignore[arg-type]
        # A fresh run into a folder holding another run's checkpoints.
        with pytest.raises(CheckpointError, match="another run"):
            model.learn(BUDGET, checkpoints=CheckpointConfig(saved_run, every_rounds=1))
        model.learn(PER_UPDATE)
        with pytest.raises(ValueError, match="freshly built"):
            model.learn(BUDGET, resume=saved_run)
    tiny = TokenPPOConfig(hidden_size=16, layers=1, heads=2, vocab_size=64, num_bins=16, epochs=1)
    with TokenAsyncPPO(
        WORKLOAD, algo=TokenAsyncPPOConfig(tiny),
        topology=AsyncTopology(n_actors=2, steps_per_actor=4),
    ) as token:  # fmt: skip
        with pytest.raises(TypeError, match="not supported"):
            token.learn(16, checkpoints=CheckpointConfig(tmp_path / "t", every_rounds=1))


# -- the command line ------------------------------------------------------------------------
CLI_BUDGET = 400 * PER_UPDATE


def _command(out: Path, *extra: str) -> list[str]:
    return [
        sys.executable, "-m", "fleetgym", "train", "--mode", "async", "--workload", WORKLOAD,
        "--actors", "2", "--steps-per-actor", str(STEPS), "--max-steps", str(CLI_BUDGET),
        "--target", "inf", "--out", str(out), "--log", "--no-progress", *extra,
    ]  # fmt: skip


def test_the_command_resumes_a_killed_run_with_exact_accounting(tmp_path: Path) -> None:
    env = {**os.environ, "PYTHONWARNINGS": "ignore"}
    out = tmp_path / "killed"
    folder = out / "checkpoints"
    proc = subprocess.Popen(
        _command(out, "--checkpoint-every", "2", "--keep", "2"),
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 600
        while len(CheckpointStore(folder).checkpoints()) < 2:
            assert proc.poll() is None, proc.stderr.read().decode()[-3000:] if proc.stderr else ""
            assert time.monotonic() < deadline, "no checkpoint within 10 minutes"
            time.sleep(0.005)
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=60)
        if proc.stderr is not None:
            proc.stderr.close()
    assert proc.returncode == -signal.SIGKILL
    saved = read_async_checkpoint(out).counters
    with open(out / "log.csv", newline="") as file:  # written as the run went
        killed_rows = [int(r["update"]) for r in csv.DictReader(file)]
    # The checkpoint of an update is written before its row: at most that row is missing.
    assert killed_rows == list(range(len(killed_rows))) and len(killed_rows) >= saved["updates"] - 1
    assert 0 < saved["num_timesteps"] < CLI_BUDGET
    assert len(CheckpointStore(folder).checkpoints()) <= 2  # keep 2 (+ at most one being written)

    resumed = subprocess.run(
        _command(out, "--checkpoint-every", "2", "--keep", "2", "--resume", str(out)),
        capture_output=True, text=True, timeout=900, env=env, check=False,
    )  # fmt: skip
    assert resumed.returncode == 1, resumed.stderr[-3000:]  # the budget ran out (inf target)
    before = saved["num_timesteps"]
    assert f"after {saved['updates']} updates, {before} env steps" in resumed.stdout
    assert (
        f"env steps: {before} before the checkpoint + {CLI_BUDGET - before} after the resume "
        f"= {CLI_BUDGET}"
    ) in resumed.stdout, resumed.stdout
    with open(out / "log.csv", newline="") as file:
        rows = list(csv.DictReader(file))
    assert [int(r["update"]) for r in rows] == list(range(CLI_BUDGET // PER_UPDATE))
    assert [int(r["total_steps"]) for r in rows] == [PER_UPDATE * (i + 1) for i in range(len(rows))]


def _usage_error(argv: list[str], capsys: pytest.CaptureFixture[str]) -> str:
    capsys.readouterr()
    status = main(argv)
    out, err = capsys.readouterr()
    lines = [line for line in err.splitlines() if line.strip() and "Warning" not in line]
    assert status == 2, (argv, out[-1000:], err[-2000:])
    assert len(lines) == 1 and "Traceback" not in err, err
    assert "training" not in out, out  # refused before the run started
    return lines[0]


def test_the_command_refuses_bad_resume_input(
    saved_run: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "out"
    base = ["train", "--mode", "async", "--workload", WORKLOAD, "--actors", "2",
            "--steps-per-actor", str(STEPS), "--max-steps", "64", "--target", "inf",
            "--no-progress", "--out", str(out)]  # fmt: skip
    empty = tmp_path / "empty"
    empty.mkdir()
    corrupt = _copied(saved_run, tmp_path / "corrupt")
    corrupt.write_bytes(corrupt.read_bytes()[:1000])
    newer = _copied(saved_run, tmp_path / "newer", fleetgym_version="99.0.0")
    sync = _copied(saved_run, tmp_path / "sync", format=FORMAT)
    cases = {
        str(empty): "none in this folder",
        str(tmp_path / "missing"): "nothing there",
        str(corrupt): "not a fleetgym checkpoint",
        str(newer): "newer than the installed",
        str(sync): "fleetgym train checkpoint",
    }
    for path, words in cases.items():
        line = _usage_error([*base, "--resume", path], capsys)
        assert "--resume" in line and path in line and words in line, line
    line = _usage_error([*base, "--seed", "3", "--resume", str(saved_run)], capsys)
    assert "another run" in line and "--seed: the checkpoint has 0, the command line 3" in line
    line = _usage_error([*base, "--loss", "gipo", "--resume", str(saved_run)], capsys)
    assert "--loss" in line, line
    # A fresh run into a folder holding another run's checkpoints.
    line = _usage_error([*base, "--checkpoint-dir", str(saved_run)], capsys)
    assert "--checkpoint-dir" in line and str(saved_run) in line and "--resume" in line, line
    line = _usage_error([*base, "--no-checkpoints", "--keep", "2"], capsys)
    assert "--no-checkpoints" in line and "--keep" in line, line
    assert not out.exists() or not any(out.iterdir())  # nothing trained, nothing written


def test_lags_are_stored_as_runs_and_older_plain_lists_still_read() -> None:
    import numpy as np

    from fleetgym.agents.learners.asynchronous.records import lag_runs, lags_from_runs

    lags = np.array([3, 3, 0, 0, 0, 7], np.int64)
    assert lag_runs(lags) == [[3, 2], [0, 3], [7, 1]] and lag_runs(lags[:0]) == []
    assert lags_from_runs({"runs": lag_runs(lags)}).tolist() == lags.tolist()
    assert lags_from_runs([3, 3, 0]).tolist() == [3, 3, 0]  # a 2.0.0 checkpoint's list
    assert lags_from_runs({"runs": []}).dtype == np.int64
    for bad in ({"runs": [[1, 0]]}, {"runs": [[1.5, 2]]}, {"runs": "x"}):
        with pytest.raises(ValueError, match="lags"):
            lags_from_runs(bad)
