"""The scheduler's periodic checkpoints: atomic writes, the newest kept, a time trigger,
resume from a file or a folder, and refused checkpoints (library and ``fleetgym schedule
train``). Tiny budgets (3-round CartPole episodes); no test asserts on wall-clock time.
"""

from __future__ import annotations

import json
import zipfile
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("stable_baselines3")

import fleetgym  # noqa: E402
from fleetgym import cli  # noqa: E402
from fleetgym.errors import CheckpointError  # noqa: E402
from fleetgym.experiments.schedule import checkpoint, config, train  # noqa: E402

ENV_ID = config.GENERAL_ENV_ID
TINY = {
    "workload": "CartPole-v1",
    "timing": "modeled",
    "max_actors": 3,
    "steps_per_actor": 16,
    "max_rounds": 3,
}
TINY_PPO = config.SchedulerPPOConfig(n_steps=4, batch_size=4, n_epochs=1)
TINY_CLI = ["--max-actors", "3", "--env-kwarg", "steps_per_actor=16", "--env-kwarg"]
TINY_CLI += ["max_rounds=2", "--n-steps", "2", "--batch-size", "2", "--no-tensorboard"]
TINY_CLI += ["--no-progress", "--no-check-moves", "--start-search", "none"]


def _train(out: Path, episodes: int, **kwargs: Any) -> train.TrainingResult:
    return train.train_scheduler(
        out,
        env_id=ENV_ID,
        env_kwargs=TINY,
        episodes=episodes,
        config=TINY_PPO,
        progress=False,
        tensorboard=False,
        **kwargs,
    )


def _names(folder: Path) -> list[str]:
    return [p.name for p in checkpoint.scheduler_checkpoints(folder)]


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> train.TrainingResult:
    """4 episodes, a checkpoint after each but the last, the newest 2 kept."""
    return _train(tmp_path_factory.mktemp("run"), 4, checkpoint_every=1, keep=2)


def _rewrite(src: Path, dst: Path, **meta: Any) -> Path:
    """A copy of the zip ``src`` whose fleetgym metadata has ``meta`` changed."""
    with zipfile.ZipFile(src) as old, zipfile.ZipFile(dst, "w") as new:
        for item in old.infolist():
            data = old.read(item.filename)
            if item.filename == "data":
                content = json.loads(data)
                content[checkpoint.META_ATTR].update(meta)
                data = json.dumps(content).encode()
            new.writestr(item, data)
    return dst


# -- writing ---------------------------------------------------------------------------------
def test_the_newest_keep_checkpoints_are_kept(run: train.TrainingResult) -> None:
    folder = run.model_path.parent / "checkpoints"
    assert _names(folder) == ["scheduler_ep0002.zip", "scheduler_ep0003.zip"]
    assert [p.name for p in run.checkpoints] == _names(folder)
    assert not [p for p in folder.iterdir() if p.name.endswith(".tmp")]
    meta = checkpoint.read_scheduler_meta(folder / "scheduler_ep0003.zip")
    assert meta["episodes"] == 3 and meta["fleetgym_version"] == fleetgym.__version__
    assert "commit" in meta


def test_a_time_trigger_checkpoints_without_an_episode_one(tmp_path: Path) -> None:
    # A trigger already due at every episode end (no wall-clock assumption).
    result = _train(tmp_path, 3, checkpoint_every=0, checkpoint_minutes=1e-9)
    assert _names(tmp_path / "checkpoints") == ["scheduler_ep0001.zip", "scheduler_ep0002.zip"]
    assert [p.name for p in result.checkpoints] == _names(tmp_path / "checkpoints")
    none = _train(tmp_path / "none", 2, checkpoint_every=0)
    assert none.checkpoints == [] and not _names(tmp_path / "none" / "checkpoints")


class _FailingModel:
    """Writes half a zip, then fails: what a crash mid-save leaves behind."""

    num_timesteps = 7

    def save(self, file: Any, exclude: Any = None) -> None:
        file.write(b"PK\x03\x04half a zip")
        raise OSError("disk full")


def test_a_failed_save_leaves_the_previous_file_whole(run: train.TrainingResult) -> None:
    folder = run.model_path.parent / "checkpoints"
    path = folder / "scheduler_ep0003.zip"
    before = path.read_bytes()
    with pytest.raises(OSError, match="disk full"):
        checkpoint.save_scheduler(_FailingModel(), path, {}, 3)  # type: ignore[arg-type]
    assert path.read_bytes() == before
    assert not [p for p in folder.iterdir() if p.name.endswith(".tmp")]


def test_pruning_deletes_an_abandoned_runs_newer_checkpoints(tmp_path: Path) -> None:
    for n in (1, 2, 3, 8, 9):
        (tmp_path / f"scheduler_ep{n:04d}.zip").write_bytes(b"x")
    (tmp_path / "other.zip").write_bytes(b"x")
    newest = tmp_path / "scheduler_ep0003.zip"
    deleted = checkpoint.prune_checkpoints(tmp_path, 2, newest)
    assert sorted(p.name for p in deleted) == [
        "scheduler_ep0001.zip",
        "scheduler_ep0008.zip",
        "scheduler_ep0009.zip",
    ]
    assert _names(tmp_path) == ["scheduler_ep0002.zip", "scheduler_ep0003.zip"]
    assert (tmp_path / "other.zip").is_file()


# -- resuming --------------------------------------------------------------------------------
@pytest.mark.parametrize("where", ["out", "checkpoints", "file"])
def test_resume_from_a_folder_takes_its_newest_checkpoint(
    run: train.TrainingResult, tmp_path: Path, where: str
) -> None:
    out = run.model_path.parent
    source = {
        "out": out,
        "checkpoints": out / "checkpoints",
        "file": out / "checkpoints" / "scheduler_ep0003",  # .zip may be left out
    }[where]
    assert checkpoint.find_scheduler_checkpoint(source).name == "scheduler_ep0003.zip"
    resumed = train.train_scheduler(
        tmp_path, resume_from=source, episodes=5, progress=False, tensorboard=False
    )
    assert resumed.episodes == 5 and resumed.episodes_this_run == 2
    assert [r.episode for r in resumed.records] == [4, 5]
    meta = checkpoint.read_scheduler_meta(resumed.model_path)
    assert meta["episodes"] == 5 and meta["resumed_from"] == "scheduler_ep0003.zip"


# -- refused ---------------------------------------------------------------------------------
def _bad_files(run: train.TrainingResult, folder: Path) -> dict[str, tuple[Path, str]]:
    """name -> (file, what its error says), each next to a real checkpoint's bytes."""
    good = (run.model_path.parent / "checkpoints" / "scheduler_ep0003.zip").read_bytes()
    truncated = folder / "truncated.zip"
    truncated.write_bytes(good[: len(good) // 2])
    corrupt = folder / "corrupt.zip"
    middle = len(good) // 2
    corrupt.write_bytes(
        good[:middle] + bytes(b ^ 0xFF for b in good[middle : middle + 64]) + good[middle + 64 :]
    )
    text = folder / "text.zip"
    text.write_text("not a zip\n")
    foreign = folder / "foreign.zip"
    with zipfile.ZipFile(foreign, "w") as z:
        z.writestr("weights.bin", b"\x00" * 16)
    no_meta = folder / "no_meta.zip"
    with zipfile.ZipFile(no_meta, "w") as z:
        z.writestr("data", "{}")
    newer = _rewrite(run.model_path, folder / "newer.zip", fleetgym_version="99.0.0")
    return {
        "truncated": (truncated, "truncated or corrupt"),
        "corrupt": (corrupt, "corrupt"),
        "text": (text, "truncated or corrupt"),
        "foreign": (foreign, "a zip without SB3's 'data'"),
        "no_meta": (no_meta, "no fleetgym_meta"),
        "newer": (newer, "written by fleetgym 99.0.0, newer than the installed fleetgym"),
    }


def test_bad_checkpoints_are_refused_naming_the_file(
    run: train.TrainingResult, tmp_path: Path
) -> None:
    for name, (path, message) in _bad_files(run, tmp_path).items():
        with pytest.raises(CheckpointError, match=message) as caught:
            train.train_scheduler(
                tmp_path / f"out-{name}", resume_from=path, episodes=9, progress=False
            )
        assert str(caught.value).startswith(str(path)), name
        assert not (tmp_path / f"out-{name}" / "scheduler.zip").exists()
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(CheckpointError, match=rf"{empty}: expected a scheduler checkpoint"):
        train.train_scheduler(tmp_path / "o", resume_from=empty, episodes=9, progress=False)
    with pytest.raises(FileNotFoundError, match="expected an existing file"):
        train.train_scheduler(tmp_path / "o", resume_from=tmp_path / "x", episodes=9)


def test_the_command_refuses_a_bad_resume_before_any_work(
    run: train.TrainingResult, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    files = _bad_files(run, tmp_path)
    empty = tmp_path / "empty"
    empty.mkdir()
    cases = [*files.values(), (empty, "expected a scheduler checkpoint")]
    for path, message in cases:
        out = tmp_path / "out"
        argv = ["schedule", "train", "--episodes", "9", "--resume", str(path), "--out", str(out)]
        assert cli.main([*argv, *TINY_CLI]) == 2, path
        err = capsys.readouterr().err
        assert f"fleetgym schedule train: error: --resume: {path}: " in err, err
        assert message in err and len(err.strip().splitlines()) == 1, err
        assert not out.exists()  # before any work


def test_the_command_resumes_a_folder_and_keeps_k(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "out"
    base = ["schedule", "train", "--out", str(out), "--checkpoint-every", "1", "--keep", "1"]
    assert cli.main([*base, "--episodes", "3", *TINY_CLI]) == 0
    assert _names(out / "checkpoints") == ["scheduler_ep0002.zip"]
    assert cli.main([*base, "--episodes", "5", "--resume", str(out), *TINY_CLI]) == 0
    assert _names(out / "checkpoints") == ["scheduler_ep0004.zip"]
    meta = checkpoint.read_scheduler_meta(out / "scheduler.zip")
    assert meta["episodes"] == 5 and meta["resumed_from"] == "scheduler_ep0002.zip"
    argv = [*base, "--episodes", "4", "--checkpoint-every", "0", "--checkpoint-minutes", "1e-9"]
    assert cli.main([*argv, "--out", str(tmp_path / "timed"), *TINY_CLI]) == 0
    assert _names(tmp_path / "timed" / "checkpoints") == ["scheduler_ep0003.zip"]
    capsys.readouterr()
