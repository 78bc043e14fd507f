"""Checkpoints and resume of a DataParallelPPO run: ``train(..., checkpoints=, resume=)``.

One uninterrupted run (2 ranks, 5 rounds of 2 actors x 32 CartPole steps, a checkpoint a
round, the newest 3 kept) is the reference; a second group resumes it from its third
checkpoint. Tiny budgets; no test asserts on wall-clock time.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

import fleetgym
from fleetgym.agents.fleet import InProcessFleet
from fleetgym.agents.learners import CheckpointConfig, DataParallelPPO, PPOLearner, train
from fleetgym.agents.learners.checkpoint_store import CheckpointStore
from fleetgym.agents.learners.data_parallel.group import free_port
from fleetgym.agents.learners.data_parallel.rank import group_generators
from fleetgym.agents.learners.run_checkpoints import read_checkpoint
from fleetgym.errors import CheckpointError

WORKLOAD = "CartPole-v1"
STEPS = 32
ROUNDS = 5
INF = float("inf")
#: Two minibatches per round: the ranks' shuffle generators matter.
OPTIONS = {"epochs": 1, "minibatch_size": 32}

pytestmark = pytest.mark.timeout(300)


@pytest.fixture(autouse=True)
def _one_thread() -> Any:
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def _group(world_size: int = 2, **options: Any) -> DataParallelPPO:
    return DataParallelPPO(
        WORKLOAD, world_size=world_size, seed=0, port=free_port(), **{**OPTIONS, **options}
    )


def _train(
    learner: Any,
    rounds: int,
    folder: Path | None = None,
    *,
    resume: Path | None = None,
    actors: int = 2,
    steps: int = STEPS,
) -> Any:
    checkpoints = None if folder is None else CheckpointConfig(folder, every_rounds=1, keep=3)
    with InProcessFleet(WORKLOAD, max_actors=2, seed=0) as fleet:
        return train(
            WORKLOAD,
            fleet,
            learner,
            actors,
            rounds,
            target=INF,
            steps_per_actor=steps,
            checkpoints=checkpoints,
            resume=resume,
        )


def _equal(a: Any, b: Any) -> bool:
    """Bit-identical: tensors by ``torch.equal`` (dtype too), the rest by ``==``."""
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


def _without_generator(state: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in state.items() if k != "generator"}


@pytest.fixture(scope="module")
def reference(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """The uninterrupted run: its checkpoint folder, history and every rank's final state."""
    folder = tmp_path_factory.mktemp("dp") / "checkpoints"
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        with _group() as group:
            history = _train(group, ROUNDS, folder)
            return {
                "folder": folder,
                "history": history,
                "weights": group.get_weights(),
                "replicas": group.replica_states(),
                "policy_version": group.policy_version,
            }
    finally:
        torch.set_num_threads(threads)


@pytest.fixture(scope="module")
def idle_group() -> Any:
    """A 2-rank group that never updates (bad resumes are refused before any round)."""
    with _group() as group:
        yield group


# -- writing ---------------------------------------------------------------------------------
def test_a_checkpoint_each_round_the_newest_keep_kept(reference: dict[str, Any]) -> None:
    folder = reference["folder"]
    assert [p.name for p in CheckpointStore(folder).checkpoints()] == [
        f"ckpt-{n:08d}.pt" for n in (3, 4, 5)
    ]
    assert not [p for p in folder.iterdir() if p.name.endswith(".tmp")]
    checkpoint = read_checkpoint(folder)  # the newest
    assert checkpoint.header["fleetgym_version"] == fleetgym.__version__
    assert checkpoint.config["learner"] == "DataParallelPPO"
    assert checkpoint.config["world_size"] == 2
    assert checkpoint.config["hyperparameters"]["minibatch_size"] == 32
    assert checkpoint.counters["rounds"] == ROUNDS
    assert checkpoint.counters["policy_version"] == ROUNDS == reference["policy_version"]
    assert checkpoint.counters["total_steps"] == reference["history"].total_steps
    assert checkpoint.actors is not None  # an InProcessFleet saves its actors
    # rank 0's learner state, every rank's shuffle generator
    learner = checkpoint.learner
    replicas = reference["replicas"]
    expected = {**_without_generator(replicas[0]), "data_parallel": learner["data_parallel"]}
    assert _equal(_without_generator(learner), expected)
    assert learner["data_parallel"]["world_size"] == 2
    assert _equal(learner["data_parallel"]["rank_generators"], [r["generator"] for r in replicas])
    assert not torch.equal(replicas[0]["generator"], replicas[1]["generator"])


# -- resuming --------------------------------------------------------------------------------
def test_a_resumed_run_continues_the_counters_and_matches_the_uninterrupted_one(
    reference: dict[str, Any], tmp_path: Path
) -> None:
    folder = tmp_path / "checkpoints"
    shutil.copytree(reference["folder"], folder)
    start = folder / "ckpt-00000003.pt"
    saved = read_checkpoint(start)
    with _group() as group:
        # restore_state alone: every rank at the checkpoint's state, in step
        group.restore_state(saved.learner, start)
        replicas = group.replica_states()
        assert group.policy_version == 3
        for rank, replica in enumerate(replicas):
            assert _equal(_without_generator(replica), _without_generator(replicas[0]))
            assert _equal(
                replica["generator"], saved.learner["data_parallel"]["rank_generators"][rank]
            )
            assert _equal(replica["optimizer"], saved.learner["optimizer"])
        # train(resume=): rounds 3 and 4 on top of the checkpoint, checkpoints continued
        history = _train(group, ROUNDS, folder, resume=start)
        weights = group.get_weights()
        replicas = group.replica_states()
        version = group.policy_version
    expected = reference["history"]
    assert [r.round for r in history.rounds] == list(range(ROUNDS))
    after = [r.steps for r in history.rounds[3:]]
    assert history.total_steps == saved.counters["total_steps"] + sum(after)
    assert history.total_steps == expected.total_steps
    assert [r.total_steps for r in history.rounds] == [r.total_steps for r in expected.rounds]
    assert version == ROUNDS == read_checkpoint(folder).counters["policy_version"]
    # Actors and every rank's generator saved: bit-identical to the uninterrupted run.
    assert all(np.array_equal(weights[k], reference["weights"][k]) for k in weights)
    assert _equal(replicas, reference["replicas"])
    assert [p.name for p in CheckpointStore(folder).checkpoints()] == [
        f"ckpt-{n:08d}.pt" for n in (3, 4, 5)
    ]


# -- refused ---------------------------------------------------------------------------------
def _refused(group: DataParallelPPO, resume: Path, match: str, **kwargs: Any) -> None:
    before = group.get_weights()
    with pytest.raises(CheckpointError, match=match):
        _train(group, ROUNDS, resume=resume, **kwargs)
    # before any round: no rank did any work
    assert group.policy_version == 0
    after = group.replica_weights()
    assert all(np.array_equal(before[k], replica[k]) for replica in after for k in before)


def test_an_empty_folder_is_refused(idle_group: DataParallelPPO, tmp_path: Path) -> None:
    _refused(idle_group, tmp_path, rf"{tmp_path}: expected a checkpoint .* actual none")


def test_a_missing_path_is_refused(idle_group: DataParallelPPO, tmp_path: Path) -> None:
    _refused(idle_group, tmp_path / "nothing", "actual nothing there")


@pytest.mark.parametrize("cut", [0, 100, -50])
def test_a_truncated_checkpoint_is_refused_naming_it(
    idle_group: DataParallelPPO, reference: dict[str, Any], tmp_path: Path, cut: int
) -> None:
    data = (reference["folder"] / "ckpt-00000005.pt").read_bytes()
    bad = tmp_path / "ckpt-00000005.pt"
    bad.write_bytes(data[:cut])
    _refused(idle_group, bad, str(bad))


def test_a_corrupt_checkpoint_is_refused_naming_it(
    idle_group: DataParallelPPO, tmp_path: Path
) -> None:
    bad = tmp_path / "ckpt-00000001.pt"
    bad.write_bytes(np.random.default_rng(0).bytes(4096))
    _refused(idle_group, tmp_path, str(bad))


def test_a_foreign_torch_file_is_refused(idle_group: DataParallelPPO, tmp_path: Path) -> None:
    other = tmp_path / "ckpt-00000001.pt"
    torch.save({"weights": torch.zeros(3)}, other)
    _refused(idle_group, other, rf"{other}: expected a fleetgym train checkpoint .* another torch")


def test_a_newer_fleetgym_checkpoint_is_refused(
    idle_group: DataParallelPPO, reference: dict[str, Any], tmp_path: Path
) -> None:
    state = torch.load(reference["folder"] / "ckpt-00000005.pt", weights_only=True)
    newer = tmp_path / "ckpt-00000005.pt"
    torch.save({**state, "fleetgym_version": "99.0.0"}, newer)
    _refused(idle_group, newer, rf"{newer}: written by fleetgym 99.0.0, newer than")
    torch.save({**state, "format_version": 2}, newer)
    _refused(idle_group, newer, rf"{newer}: written in checkpoint format_version 2, newer")


def test_a_checkpoint_of_another_run_names_each_field(
    idle_group: DataParallelPPO, reference: dict[str, Any]
) -> None:
    start = reference["folder"] / "ckpt-00000003.pt"
    _refused(
        idle_group,
        start,
        r"a checkpoint of another run \(num_actors: the checkpoint has 2, this run 1; "
        r"steps_per_actor: the checkpoint has 32, this run 16\)",
        actors=1,
        steps=16,
    )


def test_another_world_size_or_hyperparameter_is_refused(reference: dict[str, Any]) -> None:
    start = reference["folder"] / "ckpt-00000003.pt"
    with _group(world_size=1, lr=5e-4) as group:
        _refused(
            group,
            start,
            r"hyperparameters.lr: the checkpoint has 0.001, this run 0.0005; "
            r"world_size: the checkpoint has 2, this run 1",
        )


def test_a_one_learner_checkpoint_is_refused(idle_group: DataParallelPPO, tmp_path: Path) -> None:
    _train(PPOLearner(WORKLOAD, seed=0, **OPTIONS), 1, tmp_path)
    _refused(
        idle_group,
        tmp_path,
        r"learner: the checkpoint has 'PPOLearner', this run 'DataParallelPPO'; world_size: "
        r"the checkpoint has None, this run 2",
    )


def test_restore_state_refuses_another_group_before_any_rank_changes(
    idle_group: DataParallelPPO, reference: dict[str, Any]
) -> None:
    state = read_checkpoint(reference["folder"]).learner
    before = idle_group.get_weights()
    entry = state["data_parallel"]
    for bad, match in [
        ({**entry, "world_size": 3}, r"world_size: expected 2 \(this group's\), actual 3"),
        ({**entry, "rank_generators": entry["rank_generators"][:1]}, "rank_generators"),
        ("nope", "data_parallel: expected a dict"),
    ]:
        with pytest.raises(ValueError, match=match):
            idle_group.restore_state({**state, "data_parallel": bad}, "here.pt")
    with pytest.raises(ValueError, match=r"^here.pt: "):
        idle_group.restore_state({**state, "policy": {}}, "here.pt")  # refused by each rank
    assert idle_group.policy_version == 0
    assert all(np.array_equal(before[k], w[k]) for w in idle_group.replica_weights() for k in w)


def test_group_generators_reads_a_one_learner_state_as_none() -> None:
    state = PPOLearner(WORKLOAD).state()
    assert group_generators(state, 2, "x") is None
