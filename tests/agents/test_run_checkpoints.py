"""Checkpoints of the synchronous trainer: atomic files, bad input, bit-identical resume.

The in-process resume is checked bit for bit (the learner's tensors, the histories'
steps and returns) against an uninterrupted run, through :func:`train` and through the
real ``fleetgym train`` command killed with SIGKILL mid-run.
"""

from __future__ import annotations

import hashlib
import logging
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import torch

from fleetgym.agents.fleet import InProcessFleet
from fleetgym.agents.learners import CheckpointConfig, PPOLearner, train
from fleetgym.agents.learners.checkpoint_store import CheckpointStore, actors_path, atomic_write
from fleetgym.agents.learners.run_checkpoints import read_checkpoint
from fleetgym.agents.learners.training import RoundRecord, TrainingHistory
from fleetgym.cli import main
from fleetgym.errors import CheckpointError

WORKLOAD = "CartPole-v1"
STEPS = 64
INF = float("inf")


@pytest.fixture(autouse=True)
def _one_thread() -> Any:
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def _run(
    rounds: int,
    folder: Path | None = None,
    *,
    stop_after: int | None = None,
    resume: Path | None = None,
    fleet_cls: type[InProcessFleet] = InProcessFleet,
    batched: bool = True,
    seed: int = 0,
    actors: int = 2,
    steps: int = STEPS,
    **learner_options: Any,
) -> tuple[PPOLearner, TrainingHistory, InProcessFleet]:
    """A fresh learner and fleet, trained (or resumed) for ``rounds`` rounds."""
    learner = PPOLearner(WORKLOAD, seed=seed, **learner_options)
    fleet = fleet_cls(WORKLOAD, max_actors=2, seed=seed, batched=batched)
    callback = None if stop_after is None else (lambda record: record.round + 1 >= stop_after)
    checkpoints = None if folder is None else CheckpointConfig(folder, every_rounds=1)
    with fleet:
        history = train(
            WORKLOAD,
            fleet,
            learner,
            actors,
            rounds,
            target=INF,
            callback=callback,
            steps_per_actor=steps,
            checkpoints=checkpoints,
            resume=resume,
        )
    return learner, history, fleet


def _equal(a: Any, b: Any) -> bool:
    """Bit-identical: tensors by ``torch.equal`` (dtype and shape too), the rest by ``==``."""
    if isinstance(a, torch.Tensor) or isinstance(b, torch.Tensor):
        return (
            isinstance(a, torch.Tensor)
            and isinstance(b, torch.Tensor)
            and a.dtype == b.dtype
            and torch.equal(a, b)
        )
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_equal(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        return len(a) == len(b) and all(_equal(x, y) for x, y in zip(a, b, strict=True))
    return bool(a == b)


@pytest.fixture(scope="module")
def saved_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A real checkpoint folder: 2 rounds of 2 actors x 32 steps, one checkpoint a round."""
    folder = tmp_path_factory.mktemp("saved") / "checkpoints"
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        _run(2, folder, steps=32)
    finally:
        torch.set_num_threads(threads)
    assert [p.name for p in CheckpointStore(folder).checkpoints()] == [
        "ckpt-00000001.pt",
        "ckpt-00000002.pt",
    ]
    return folder


# -- the config ------------------------------------------------------------------------------
def test_config_defaults_and_validation(tmp_path: Path) -> None:
    config = CheckpointConfig(tmp_path / "c")
    assert (config.every_rounds, config.every_minutes, config.keep) == (None, 10.0, 3)
    assert config.folder == tmp_path / "c" and not config.folder.exists()
    assert not config.due(1000, 599.0) and config.due(0, 600.0)
    assert CheckpointConfig(str(tmp_path), every_rounds=2, every_minutes=None).due(2, 0.0)
    with pytest.raises(ValueError, match="at least one of them"):
        CheckpointConfig(tmp_path, every_rounds=None, every_minutes=None)
    for bad in (0, -1):
        with pytest.raises(ValueError, match="every_rounds"):
            CheckpointConfig(tmp_path, every_rounds=bad)
        with pytest.raises(ValueError, match="keep"):
            CheckpointConfig(tmp_path, keep=bad)
    for bad_minutes in (0.0, -1.0, float("nan"), INF):
        with pytest.raises(ValueError, match="every_minutes"):
            CheckpointConfig(tmp_path, every_minutes=bad_minutes)
    for bad_type in ({"every_rounds": 1.5}, {"every_rounds": True}, {"keep": "3"}):
        with pytest.raises(TypeError):
            CheckpointConfig(tmp_path, **bad_type)
    with pytest.raises(TypeError, match="folder"):
        CheckpointConfig(3)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="folder"):
        CheckpointConfig("  ")


def test_train_refuses_bad_checkpoint_arguments(tmp_path: Path) -> None:
    learner = PPOLearner(WORKLOAD, seed=0)
    with InProcessFleet(WORKLOAD, max_actors=2, seed=0) as fleet:
        with pytest.raises(TypeError, match="checkpoints"):
            train(WORKLOAD, fleet, learner, 2, 1, checkpoints=str(tmp_path))  # type: ignore[arg-type]
        with pytest.raises(TypeError, match="resume"):
            train(WORKLOAD, fleet, learner, 2, 1, resume=3)  # type: ignore[arg-type]
        (tmp_path / "file").write_text("x")
        with pytest.raises(ValueError, match="folder"):
            train(WORKLOAD, fleet, learner, 2, 1, checkpoints=CheckpointConfig(tmp_path / "file"))
        assert fleet.rounds_run == 0


# -- the store -------------------------------------------------------------------------------
def _state(n: int) -> dict[str, Any]:
    return {"round": n, "weights": torch.full((3,), float(n))}


def test_store_writes_atomically_keeps_k_and_finds_the_latest(tmp_path: Path) -> None:
    folder = tmp_path / "ckpts"
    store = CheckpointStore(folder, keep=2)
    assert store.latest() is None and not folder.exists()  # nothing is created before a write
    store.write(1, _state(1), b"actors-1")
    store.write(2, _state(2))
    # A crash mid-write leaves a temporary file (and maybe an actors file): both ignored.
    (folder / ".ckpt-00000009.pt.abc123.tmp").write_bytes(b"half a checkpoint")
    (folder / "ckpt-00000009.pt.tmp").write_bytes(b"")
    assert store.latest() == folder / "ckpt-00000002.pt"
    path = store.write(3, _state(3), b"actors-3")
    assert path == folder / "ckpt-00000003.pt" == store.latest()
    names = sorted(p.name for p in folder.iterdir() if not p.name.endswith(".tmp"))
    assert names == ["ckpt-00000002.pt", "ckpt-00000003.actors.pkl", "ckpt-00000003.pt"]
    loaded = torch.load(path, weights_only=True)
    assert loaded["round"] == 3 and torch.equal(loaded["weights"], torch.full((3,), 3.0))
    assert loaded["actors"]["saved"] is True
    assert loaded["actors"]["sha256"] == hashlib.sha256(b"actors-3").hexdigest()
    assert actors_path(path).read_bytes() == b"actors-3"
    assert [p.name for p in store.checkpoints()] == ["ckpt-00000002.pt", "ckpt-00000003.pt"]


def test_atomic_write_keeps_the_old_file_when_writing_fails(tmp_path: Path) -> None:
    target = tmp_path / "ckpt-00000001.pt"
    atomic_write(target, lambda file: file.write(b"old"))

    def broken(file: Any) -> None:
        file.write(b"partial")
        raise RuntimeError("disk full")

    with pytest.raises(RuntimeError, match="disk full"):
        atomic_write(target, broken)
    assert target.read_bytes() == b"old"
    assert [p.name for p in tmp_path.iterdir()] == [target.name]  # no temporary file left


def test_a_checkpoint_round_trips(saved_run: Path) -> None:
    checkpoint = read_checkpoint(saved_run)  # the folder: its newest
    assert checkpoint.path == saved_run / "ckpt-00000002.pt"
    assert checkpoint.header["format"] == "fleetgym-train-checkpoint"
    assert checkpoint.header["format_version"] == 1
    from fleetgym import __version__

    assert checkpoint.header["fleetgym_version"] == __version__
    commit = checkpoint.header["commit"]
    assert commit is None or len(commit) >= 40
    assert checkpoint.rounds == 2 and checkpoint.counters["total_steps"] == 2 * 2 * 32
    assert checkpoint.counters["policy_version"] == 2
    assert checkpoint.config["workload"] == WORKLOAD and checkpoint.config["num_actors"] == 2
    assert (
        checkpoint.config["steps_per_actor"] == 32
        and checkpoint.config["backend"] == "InProcessFleet"
    )
    assert checkpoint.config["hyperparameters"]["lr"] == PPOLearner(WORKLOAD).workload.lr
    assert checkpoint.actors is not None and checkpoint.actors_note == ""
    # Tensors and plain values only: the main file loads with weights_only=True.
    torch.load(checkpoint.path, weights_only=True)
    history = TrainingHistory.from_dict(
        {"workload": WORKLOAD, "target": INF, "rounds": checkpoint.history, "stop_reason": ""}
    )
    assert [r.round for r in history.rounds] == [0, 1] and history.total_steps == 128
    assert TrainingHistory.from_dict(history.to_dict()) == history
    record = history.rounds[0]
    assert RoundRecord.from_dict(record.to_dict()) == record
    with pytest.raises(ValueError, match="round record"):
        RoundRecord.from_dict({**record.to_dict(), "steps": "many"})


# -- bad input -------------------------------------------------------------------------------
def _copy(saved_run: Path, dest: Path) -> Path:
    """The newest checkpoint of ``saved_run`` and its actors file, copied into ``dest``."""
    dest.mkdir(parents=True, exist_ok=True)
    source = CheckpointStore(saved_run).latest()
    assert source is not None
    target = dest / source.name
    target.write_bytes(source.read_bytes())
    actors_path(target).write_bytes(actors_path(source).read_bytes())
    return target


def _edited(saved_run: Path, dest: Path, **changes: Any) -> Path:
    target = _copy(saved_run, dest)
    state = torch.load(target, weights_only=True)
    state.update(changes)
    torch.save(state, target)
    return target


def _refused(path: Path, *words: str, named: Path | None = None) -> str:
    with pytest.raises(CheckpointError) as caught:
        read_checkpoint(path)
    message = str(caught.value)
    assert str(named or path) in message, message
    for word in words:
        assert word in message, message
    assert "weights_only=False" not in message
    return message


def test_a_truncated_checkpoint_is_refused(saved_run: Path, tmp_path: Path) -> None:
    target = _copy(saved_run, tmp_path)
    data = target.read_bytes()
    target.write_bytes(data[: len(data) // 2])
    _refused(target, "not a fleetgym checkpoint")


def test_foreign_files_are_refused(saved_run: Path, tmp_path: Path) -> None:
    noise = tmp_path / "ckpt-00000001.pt"
    noise.write_bytes(os.urandom(4096))
    _refused(noise, "not a fleetgym checkpoint")
    other = tmp_path / "other.pt"
    torch.save({"weights": torch.zeros(3), "step": 7}, other)
    _refused(other, "expected a fleetgym train checkpoint")
    learner_file = PPOLearner(WORKLOAD, seed=0).save(tmp_path / "learner.pt")
    _refused(learner_file, "expected a fleetgym train checkpoint")
    empty = tmp_path / "empty.pt"
    empty.write_bytes(b"")
    _refused(empty)


def test_newer_formats_and_versions_are_refused(saved_run: Path, tmp_path: Path) -> None:
    newer_format = _edited(saved_run, tmp_path / "a", format_version=2)
    _refused(newer_format, "format_version 2", "upgrade fleetgym")
    newer_version = _edited(saved_run, tmp_path / "b", fleetgym_version="99.0.0")
    _refused(newer_version, "fleetgym 99.0.0", "newer than the installed", "upgrade fleetgym")
    bad_version = _edited(saved_run, tmp_path / "c", fleetgym_version=None)
    _refused(bad_version, "fleetgym_version")


def test_a_missing_or_altered_actors_file_is_refused(saved_run: Path, tmp_path: Path) -> None:
    target = _copy(saved_run, tmp_path / "a")
    actors_path(target).unlink()
    _refused(target, "missing", target.name, named=actors_path(target))
    target = _copy(saved_run, tmp_path / "b")
    actors_path(target).write_bytes(actors_path(target).read_bytes()[:-1] + b"!")
    _refused(target, "sha256", target.name, named=actors_path(target))


def test_nothing_to_resume_from_is_refused(tmp_path: Path) -> None:
    (tmp_path / "empty").mkdir()
    for path in (tmp_path / "empty", tmp_path / "missing"):
        _refused(path)


@pytest.mark.parametrize(
    ("options", "field"),
    [
        ({"seed": 1}, "seed"),
        ({"actors": 1}, "num_actors"),
        ({"steps": 16}, "steps_per_actor"),
        ({"lr": 5e-4}, "hyperparameters.lr"),
    ],
)
def test_a_checkpoint_of_another_run_is_refused_before_any_round(
    saved_run: Path, options: dict[str, Any], field: str
) -> None:
    options = {"steps": 32, "actors": 2, "seed": 0, **options}
    overrides = {"lr": options["lr"]} if "lr" in options else {}
    learner = PPOLearner(WORKLOAD, seed=options["seed"], **overrides)
    fleet = InProcessFleet(WORKLOAD, max_actors=2, seed=learner.seed)
    before = {k: v.clone() for k, v in learner.policy.state_dict().items()}
    with fleet, pytest.raises(CheckpointError) as caught:
        train(
            WORKLOAD,
            fleet,
            learner,
            options["actors"],
            5,
            target=INF,
            steps_per_actor=options["steps"],
            resume=saved_run,
        )
    message = str(caught.value)
    assert "another run" in message and f"{field}:" in message, message
    assert str(saved_run / "ckpt-00000002.pt") in message
    assert fleet.rounds_run == 0 and fleet.num_workers == 0
    assert learner.policy_version == 0 and _equal(learner.policy.state_dict(), before)


# -- resume ----------------------------------------------------------------------------------
@pytest.mark.parametrize("batched", [True, False], ids=["lockstep", "sequential"])
def test_an_in_process_resume_is_bit_identical(tmp_path: Path, batched: bool) -> None:
    rounds = 6
    whole, whole_history, _ = _run(rounds, batched=batched)
    _, cut_history, _ = _run(rounds, tmp_path, stop_after=3, batched=batched)
    assert len(cut_history) == 3 and cut_history.stop_reason == "callback"
    resumed, history, fleet = _run(rounds, tmp_path, resume=tmp_path, batched=batched)
    assert _equal(resumed.state(), whole.state())
    assert len(history) == rounds and history.stop_reason == "max_rounds"
    assert [r.round for r in history.rounds] == list(range(rounds))
    for field in ("steps", "total_steps", "num_actors"):
        assert [getattr(r, field) for r in history.rounds] == [
            getattr(r, field) for r in whole_history.rounds
        ]
    assert [r.stats.mean_return for r in history.rounds] == [
        r.stats.mean_return for r in whole_history.rounds
    ]
    assert [r.stats.episodes_completed for r in history.rounds] == [
        r.stats.episodes_completed for r in whole_history.rounds
    ]
    assert fleet.rounds_run == rounds  # restored with the actors, then 3 more rounds
    assert [p.name for p in CheckpointStore(tmp_path).checkpoints()] == [
        "ckpt-00000004.pt",
        "ckpt-00000005.pt",
        "ckpt-00000006.pt",
    ]


def test_a_resume_past_the_budget_trains_nothing(tmp_path: Path) -> None:
    _run(2, tmp_path)
    learner, history, fleet = _run(2, tmp_path, resume=tmp_path)
    assert len(history) == 2 and history.stop_reason == "max_rounds"
    assert learner.policy_version == 2 and fleet.rounds_run == 2  # restored, none run


def test_two_runs_never_share_a_checkpoint_folder(saved_run: Path, tmp_path: Path) -> None:
    learner = PPOLearner(WORKLOAD, seed=0)
    with InProcessFleet(WORKLOAD, max_actors=2, seed=0) as fleet:
        with pytest.raises(CheckpointError, match="another run") as caught:
            train(WORKLOAD, fleet, learner, 2, 3, target=INF, steps_per_actor=32,
                  checkpoints=CheckpointConfig(saved_run))  # fmt: skip
        assert str(saved_run) in str(caught.value) and "ckpt-00000002.pt" in str(caught.value)
        other = _copy(saved_run, tmp_path / "elsewhere")
        with pytest.raises(CheckpointError, match="another run"):
            train(WORKLOAD, fleet, learner, 2, 3, target=INF, steps_per_actor=32,
                  checkpoints=CheckpointConfig(saved_run), resume=other)  # fmt: skip
        assert fleet.rounds_run == 0 and learner.policy_version == 0


class _ForgetfulFleet(InProcessFleet):
    """An in-process fleet that cannot save its actors, as the process and Ray fleets."""

    def actor_state(self) -> bytes | None:
        return None


def test_a_fleet_without_actor_state_restarts_its_actors(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    _run(2, tmp_path, fleet_cls=_ForgetfulFleet)
    checkpoint = read_checkpoint(tmp_path)
    assert checkpoint.actors is None and "not bit-identical" in checkpoint.actors_note
    assert not actors_path(checkpoint.path).exists()
    assert checkpoint.incarnations == {0: 0, 1: 0}
    with caplog.at_level(logging.WARNING, logger="fleetgym.agents.learners.training"):
        learner, history, fleet = _run(3, tmp_path, resume=tmp_path, fleet_cls=_ForgetfulFleet)
    assert "episodes restart" in caplog.text and "not bit-identical" in caplog.text
    assert len(history) == 3 and learner.policy_version == 3
    # Every slot restarted as a new incarnation: a fresh random stream, not a replay.
    assert fleet.incarnations == {0: 1, 1: 1}


def test_the_folder_appears_with_the_first_checkpoint(tmp_path: Path) -> None:
    folder = tmp_path / "later"
    learner = PPOLearner(WORKLOAD, seed=0)
    with InProcessFleet(WORKLOAD, max_actors=2, seed=0) as fleet:
        train(WORKLOAD, fleet, learner, 2, 2, target=INF, steps_per_actor=16,
              checkpoints=CheckpointConfig(folder))  # fmt: skip
    assert not folder.exists()  # two short rounds never reach 10 minutes


def test_restore_actor_state_refuses_foreign_bytes() -> None:
    with InProcessFleet(WORKLOAD, max_actors=2, seed=0) as fleet:
        with pytest.raises(ValueError, match="do not unpickle"):
            fleet.restore_actor_state(b"not a pickle")
        with pytest.raises(TypeError):
            fleet.restore_actor_state("text")  # type: ignore[arg-type]
        other = InProcessFleet(WORKLOAD, max_actors=2, seed=1)
        other.prewarm(1)
        data = other.actor_state()
        other.close()
        assert data is not None
        with pytest.raises(ValueError, match="seed"):
            fleet.restore_actor_state(data)
        assert fleet.num_workers == 0


# -- the command line ------------------------------------------------------------------------
def _command(out: Path, *extra: str, rounds: int = 30) -> list[str]:
    return [
        sys.executable, "-m", "fleetgym", "train", "--workload", WORKLOAD, "--actors", "2",
        "--steps-per-actor", str(STEPS), "--rounds", str(rounds), "--target", "inf",
        "--out", str(out), "--save", "--no-progress", *extra,
    ]  # fmt: skip


def _learner_file(path: Path) -> dict[str, Any]:
    state = torch.load(path, weights_only=True)
    assert isinstance(state, dict) and {"policy", "optimizer", "generator", "meta"} <= set(state)
    return state


def test_the_command_resumes_a_killed_run_bit_identically(tmp_path: Path) -> None:
    env = {**os.environ, "PYTHONWARNINGS": "ignore"}
    reference = subprocess.run(
        _command(tmp_path / "whole", "--no-checkpoints"),
        capture_output=True, text=True, timeout=600, env=env, check=False,
    )  # fmt: skip
    assert reference.returncode == 1, reference.stderr[-3000:]  # the budget ran out (inf)
    assert not (tmp_path / "whole" / "checkpoints").exists()

    out = tmp_path / "killed"
    folder = out / "checkpoints"
    proc = subprocess.Popen(
        _command(out, "--checkpoint-every", "1"),
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
    assert not (out / "learner.pt").exists()
    saved = read_checkpoint(out).rounds
    assert 2 <= saved < 30

    resumed = subprocess.run(
        _command(out, "--checkpoint-every", "1", "--resume", str(out)),
        capture_output=True, text=True, timeout=600, env=env, check=False,
    )  # fmt: skip
    assert resumed.returncode == 1, resumed.stderr[-3000:]
    assert f"after {saved} rounds" in resumed.stdout, resumed.stdout
    assert _equal(
        _learner_file(out / "learner.pt"), _learner_file(tmp_path / "whole" / "learner.pt")
    )


def _usage_error(argv: list[str], capsys: pytest.CaptureFixture[str]) -> str:
    capsys.readouterr()
    status = main(argv)
    out, err = capsys.readouterr()
    lines = [line for line in err.splitlines() if line.strip() and "Warning" not in line]
    assert status == 2, (argv, out[-1000:], err[-2000:])
    assert len(lines) == 1 and "Traceback" not in err, err
    assert "training" not in out, out  # refused before the run started
    return lines[0]


def test_the_command_refuses_what_cannot_be_resumed(
    saved_run: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "out"
    base = ["train", "--actors", "2", "--steps-per-actor", "32", "--rounds", "4",
            "--target", "inf", "--no-progress", "--save", "--out", str(out)]  # fmt: skip
    empty = tmp_path / "empty"
    empty.mkdir()
    corrupt = _copy(saved_run, tmp_path / "corrupt")
    corrupt.write_bytes(corrupt.read_bytes()[:1000])
    newer = _edited(saved_run, tmp_path / "newer", fleetgym_version="99.0.0")
    cases = {
        str(empty): "none in this folder",
        str(tmp_path / "missing"): "nothing there",
        str(corrupt): "not a fleetgym checkpoint",
        str(newer): "newer than the installed",
    }
    for path, words in cases.items():
        line = _usage_error([*base, "--resume", path], capsys)
        assert "--resume" in line and path in line and words in line, line
    line = _usage_error([*base, "--workload", "Acrobot-v1", "--resume", str(saved_run)], capsys)
    assert str(saved_run) in line and "another run" in line and "--workload" in line, line
    line = _usage_error([*base, "--seed", "3", "--resume", str(saved_run.parent)], capsys)
    assert "--seed: the checkpoint has 0, the command line 3" in line, line
    # A fresh run into a folder holding another run's checkpoints.
    line = _usage_error([*base, "--checkpoint-dir", str(saved_run)], capsys)
    assert "--checkpoint-dir" in line and str(saved_run) in line and "--resume" in line, line
    assert not out.exists() or not any(out.iterdir())  # nothing trained, nothing written


def test_the_command_refuses_checkpoint_options_that_cannot_work(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # --mode async takes the checkpoint options too (tests/agents/learners/test_async_checkpoints.py).
    line = _usage_error(
        ["train", "--mode", "async", "--max-steps", "16", "--resume", str(tmp_path)], capsys
    )
    assert "--resume" in line and "none in this folder" in line, line
    line = _usage_error(["train", "--no-checkpoints", "--keep", "2", "--rounds", "1"], capsys)
    assert "--no-checkpoints" in line and "--keep" in line, line
    (tmp_path / "file").write_text("x")
    line = _usage_error(
        ["train", "--checkpoint-dir", str(tmp_path / "file"), "--rounds", "1"], capsys
    )
    assert "--checkpoint-dir" in line, line


def test_a_short_command_run_writes_no_checkpoint(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["train", "--actors", "2", "--steps-per-actor", "16", "--rounds", "2", "--target",
            "inf", "--no-progress", "--out", str(tmp_path / "out")]  # fmt: skip
    assert main(argv) == 1
    assert not (tmp_path / "out").exists()  # on by default, but 10 minutes never passed
    capsys.readouterr()
