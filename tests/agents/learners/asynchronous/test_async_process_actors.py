"""AsyncPPO with actors in worker processes: training, identity, SIGKILL, learner faults."""

from __future__ import annotations

import dataclasses
import json
import multiprocessing
import os
import signal
import threading
from pathlib import Path

import numpy as np
import pytest

from fleetgym.agents.learners.asynchronous.config import AsyncPPOConfig, AsyncTopology
from fleetgym.agents.learners.asynchronous.trainer import AsyncPPO
from fleetgym.agents.workloads import get_workload

TINY = dict(n_actors=2, steps_per_actor=16, epochs=1, minibatch_size=16)


def _running(pid: int) -> bool:
    """Whether ``pid`` is a live process (a zombie counts as gone)."""
    stat = Path(f"/proc/{pid}/stat")
    try:
        state = stat.read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError):
        return False
    return state != "Z"


def _worker_pids(model: AsyncPPO) -> list[int]:
    return [a.pid for a in list(model.slots._actors.values()) if getattr(a, "pid", None)]


def _actor_threads() -> list[str]:
    return [t.name for t in threading.enumerate() if t.name.startswith("actor-")]


def _spy(model: AsyncPPO) -> list[tuple[int, list]]:
    """Record (learner version, batch) of every update the learner is handed."""
    seen: list[tuple[int, list]] = []
    update = model.learner.update

    def spy(batch):
        seen.append((model.learner.policy_version, list(batch)))
        return update(batch)

    model.learner.update = spy  # type: ignore[method-assign]
    return seen


@pytest.mark.timeout(180)
def test_process_actors_train_with_their_own_slot_ids_and_versions():
    model = AsyncPPO(
        "CartPole-v1",
        algo=AsyncPPOConfig(max_policy_lag=2, hyperparameters={"epochs": 1, "minibatch_size": 16}),
        topology=AsyncTopology(backend="process", n_actors=2, steps_per_actor=16),
        seed=0,
    )
    seen = _spy(model)
    try:
        model.prewarm()
        pids = _worker_pids(model)
        assert len(pids) == 2 and len(set(pids)) == 2 and os.getpid() not in pids
        model.learn(256)
        assert _worker_pids(model) == pids  # the prewarmed workers did the rollouts
        assert all(_running(pid) for pid in pids)  # kept warm for the next learn
    finally:
        model.close()
    assert not any(_running(pid) for pid in pids)
    assert multiprocessing.active_children() == []
    assert model.num_timesteps >= 256 and model.actor_failures == 0
    assert all(np.isfinite(r.stats.mean_return) for r in model.history)
    ids = set()
    for version, batch in seen:
        for traj in batch:
            ids.add(traj.actor_id)
            assert len(traj) == 16
            assert 0 <= version - traj.policy_version  # never a version from the future
            assert traj.next_obs is not None and traj.next_obs.shape == (4,)
    assert ids == {0, 1}
    for record in model.history:
        s = record.stats
        assert int((s.lags > 2).sum()) == s.dropped_samples
        assert s.num_samples + s.dropped_samples == 32


@pytest.mark.timeout(180)
@pytest.mark.parametrize("inference", ["local", "server"])
def test_process_actors_collect_what_thread_actors_collect(inference):
    """Same seed and weights: slot i steps the same env stream in a process as in a thread
    (served: the same actions from the server, answered by the same versions)."""
    batches = {}
    for backend in ("inprocess", "process"):
        model = AsyncPPO(
            "CartPole-v1",
            algo=AsyncPPOConfig(
                max_policy_lag=0, hyperparameters={"epochs": 1, "minibatch_size": 16}
            ),
            topology=AsyncTopology(
                backend=backend,
                inference=inference,
                concurrent=False,
                n_actors=2,
                steps_per_actor=16,
            ),
            seed=3,
        )
        seen = _spy(model)
        with model:
            model.learn(32)
        batches[backend] = seen[0][1]
    for a, b in zip(batches["inprocess"], batches["process"], strict=True):
        assert a.actor_id == b.actor_id
        np.testing.assert_allclose(a.obs, b.obs, rtol=1e-6)
        np.testing.assert_array_equal(a.actions, b.actions)
        np.testing.assert_allclose(a.next_obs, b.next_obs, rtol=1e-6)
        if inference == "server":
            np.testing.assert_array_equal(a.policy_versions, b.policy_versions)
    # the two slots are different env streams
    assert not np.allclose(batches["process"][0].obs, batches["process"][1].obs)


@pytest.mark.timeout(180)
def test_process_actors_act_through_the_inference_server():
    """Worker processes send observations to the trainer's server; samples carry its version."""
    model = AsyncPPO(
        "CartPole-v1",
        algo=AsyncPPOConfig(max_policy_lag=1, hyperparameters={"epochs": 1, "minibatch_size": 16}),
        topology=AsyncTopology(
            backend="process", inference="server", n_actors=2, steps_per_actor=16
        ),
        seed=0,
    )
    seen = _spy(model)
    try:
        model.prewarm()
        pids = _worker_pids(model)
        assert len(pids) == 2 and os.getpid() not in pids
        model.learn(256)
        metrics = model.slots.server.metrics()
    finally:
        model.close()
    assert not any(_running(pid) for pid in pids)
    assert multiprocessing.active_children() == []
    assert metrics["connected_clients"] == 2 and metrics["errors"] == 0
    # every action and every bootstrap value was answered by the server
    assert metrics["requests"] >= model.num_timesteps >= 256
    ids = set()
    for version, batch in seen:
        for traj in batch:
            ids.add(traj.actor_id)
            assert len(traj) == 16 and traj.next_obs.shape == (4,)
            versions = np.asarray(traj.policy_versions)
            assert versions.shape == (16,) and (versions <= version).all()
    assert ids == {0, 1}
    for record in model.history:
        s = record.stats
        assert int((s.lags > 1).sum()) == s.dropped_samples


@pytest.mark.timeout(240)
@pytest.mark.parametrize("inference", ["local", "server"])
def test_a_worker_killed_mid_learn_is_replaced_and_the_learner_gets_whole_trajectories(inference):
    # 2 ms per env step: a 32-step rollout takes ~64 ms, so a kill usually lands mid-rollout.
    workload = get_workload("CartPole-v1").with_overrides(step_delay_s=0.002)
    model = AsyncPPO(
        workload,
        algo=AsyncPPOConfig(max_policy_lag=1, hyperparameters={"epochs": 1, "minibatch_size": 32}),
        topology=AsyncTopology(
            backend="process", inference=inference, n_actors=2, steps_per_actor=32
        ),
        seed=0,
    )
    seen = _spy(model)
    killed: list[int] = []

    def kill_once(record):
        if record.update == 1:
            killed.extend(_worker_pids(model))
            for pid in killed:
                os.kill(pid, signal.SIGKILL)

    try:
        model.learn(64 * 10, callback=kill_once)
        survivors = _worker_pids(model)
    finally:
        model.close()
    assert len(killed) == 2
    assert model.actor_failures >= 2  # each killed worker failed one rollout
    assert not set(survivors) & set(killed)  # replaced by new processes
    assert model.num_timesteps >= 640
    for version, batch in seen:
        for traj in batch:
            assert len(traj) == 32 and traj.actor_id in (0, 1)
            assert 0 <= version - traj.policy_version
            assert np.isfinite(traj.rewards).all()
    assert not any(_running(pid) for pid in killed + survivors)
    assert multiprocessing.active_children() == []


@pytest.mark.timeout(180)
@pytest.mark.parametrize("concurrent", [True, False])
def test_a_callback_exception_leaves_no_process_and_no_thread(concurrent):
    # 20 ms per env step: rollouts of ~1.3 s are in flight when the callback raises.
    workload = get_workload("CartPole-v1").with_overrides(step_delay_s=0.02)
    model = AsyncPPO(
        workload,
        algo=AsyncPPOConfig(max_policy_lag=4, hyperparameters={"epochs": 1, "minibatch_size": 64}),
        topology=AsyncTopology(
            backend="process", concurrent=concurrent, n_actors=2, steps_per_actor=64
        ),
        seed=0,
    )
    pids: list[int] = []

    def boom(record):
        pids.extend(_worker_pids(model))
        raise ArithmeticError("callback blew up")

    with pytest.raises(ArithmeticError, match="callback blew up"):
        model.learn(10_000, callback=boom)
    assert len(pids) == 2
    assert _actor_threads() == []
    assert not any(_running(pid) for pid in pids)
    assert multiprocessing.active_children() == []
    assert model.slots._actors == {} and model.actor_failures == 0  # a stop is not a fault
    model.close()


def test_backend_is_validated_and_saved(tmp_path):
    with pytest.raises(ValueError, match="backend: expected one of"):
        AsyncPPO("CartPole-v1", topology=AsyncTopology(backend="fork"))
    with pytest.raises(ValueError, match=r"actual 'thread' \(renamed 'inprocess' in 2.0\)"):
        AsyncPPO("CartPole-v1", topology=AsyncTopology(backend="thread"))
    model = AsyncPPO(
        "CartPole-v1",
        algo=AsyncPPOConfig(hyperparameters={"epochs": 1, "minibatch_size": 16}),
        topology=AsyncTopology(backend="process", n_actors=2, steps_per_actor=16),
        seed=0,
    )
    path = model.save(tmp_path / "model.pt")
    assert AsyncPPO.load(path).backend == "process"
    assert AsyncPPO.load(path, topology={"backend": "inprocess"}).backend == "inprocess"
    # A settings file of 1.x (flat, "actors": "thread") still loads, as backend="inprocess".
    settings = path.with_suffix(".json")
    new = json.loads(settings.read_text())
    old = {"workload": new["workload"], "seed": 0, "num_timesteps": 0, "actors": "thread"}
    old.update({k: v for k, v in new["algo"].items() if k != "hyperparameters"})
    old.update({k: v for k, v in new["topology"].items() if k != "backend"})
    for key in ("address", "ray_actor_options", "server_batch", "server_wait_ms", "server_device"):
        del old[key]  # 1.x files had none of these
    old["hyperparameters"] = new["algo"]["hyperparameters"]
    settings.write_text(json.dumps(old))
    loaded = AsyncPPO.load(path)
    assert loaded.backend == "inprocess" and loaded.algo == model.algo
    assert loaded.topology == dataclasses.replace(model.topology, backend="inprocess")
