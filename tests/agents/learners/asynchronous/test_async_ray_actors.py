"""AsyncPPO with backend="ray": training, identity, a killed Ray actor, bad input.

Joins a local 2-CPU Ray cluster that this module starts (127.0.0.1) and stops, as
tests/agents/fleet/test_fleet_ray.py does: 2 actor slots of one CPU each. Skipped when
Ray is not installed (``pip install fleetgym[ray]``).
"""

from __future__ import annotations

import threading
import time

import numpy as np
import pytest

from fleetgym.agents.learners.asynchronous.config import AsyncPPOConfig, AsyncTopology
from fleetgym.agents.learners.asynchronous.trainer import AsyncPPO
from fleetgym.agents.workloads import get_workload
from fleetgym.errors import FleetError

ray = pytest.importorskip("ray")

pytestmark = [pytest.mark.ray, pytest.mark.timeout(240)]

TINY = dict(n_actors=2, steps_per_actor=16, epochs=1, minibatch_size=16)


@pytest.mark.timeout(60)
def test_an_address_nothing_answers_at_is_refused_at_once():
    if ray.is_initialized():  # the module's cluster: this test runs first
        pytest.skip("needs Ray not initialised")
    with pytest.raises(
        FleetError,
        match=r"address: expected a Ray cluster to join at "
        r"'127\.0\.0\.1:1', actual nothing answers there",
    ):
        AsyncPPO("CartPole-v1", topology=AsyncTopology(backend="ray", address="127.0.0.1:1"))
    assert not ray.is_initialized()


@pytest.fixture(scope="module")
def cluster():
    from fleetgym.agents.fleet.ray_actor import init_local_ray

    init_local_ray(num_cpus=2, object_store_memory=80 * 2**20, log_to_driver=False)
    yield
    ray.shutdown()


def _spy(model: AsyncPPO) -> list[tuple[int, list]]:
    """Record (learner version, batch) of every update the learner is handed."""
    seen: list[tuple[int, list]] = []
    update = model.learner.update

    def spy(batch):
        seen.append((model.learner.policy_version, list(batch)))
        return update(batch)

    model.learner.update = spy  # type: ignore[method-assign]
    return seen


def _actor_threads() -> list[str]:
    return [t.name for t in threading.enumerate() if t.name.startswith("actor-")]


def test_ray_actors_train_with_their_slot_ids_versions_and_one_put_per_update(cluster):
    model = AsyncPPO(
        "CartPole-v1",
        algo=AsyncPPOConfig(max_policy_lag=2, hyperparameters={"epochs": 1, "minibatch_size": 16}),
        topology=AsyncTopology(backend="ray", n_actors=2, steps_per_actor=16),
        seed=0,
    )
    seen = _spy(model)
    with model:
        assert not model.slots.ray_group.owns_ray  # joined the module's cluster
        assert model.slots.ray_group.actor_options == {"num_cpus": 1}
        model.prewarm()
        pids = {slot: actor.pid for slot, actor in model.slots._actors.items()}
        model.learn(256)
        assert {s: a.pid for s, a in model.slots._actors.items()} == pids
        puts = model.slots.ray_group.puts
    assert model.num_timesteps >= 256 and model.actor_failures == 0
    assert model.max_outstanding <= model.capacity
    assert 1 <= puts <= len(model.history) + 1  # each published version put at most once
    assert len(seen) == len(model.history)
    for (version, batch), record in zip(seen, model.history, strict=True):
        for traj in batch:
            assert traj.actor_id in (0, 1) and len(traj) == 16
            assert 0 <= version - traj.policy_version
            assert traj.next_obs.shape == (4,)
        # Admission bounds the lag when a rollout starts; a rollout that ends after more
        # updates than the bound (a loaded machine) reaches the learner, which drops it.
        stale = sum(len(t) for t in batch if version - t.policy_version > 2)
        assert record.stats.dropped_samples == stale
    record = model.history[-1]
    assert np.isfinite(record.stats.loss) and record.learner_utilisation > 0
    assert _actor_threads() == []
    assert ray.is_initialized()  # a joined cluster is left running


def test_ray_actors_collect_what_thread_actors_collect_and_seeds_reproduce(cluster):
    """concurrent=False: slot i steps the same env stream in a Ray actor as in a thread."""
    batches, losses = {}, {}
    for run, backend in enumerate(("inprocess", "ray", "ray")):
        model = AsyncPPO(
            "CartPole-v1",
            algo=AsyncPPOConfig(
                max_policy_lag=0, hyperparameters={"epochs": 1, "minibatch_size": 16}
            ),
            topology=AsyncTopology(
                backend=backend, concurrent=False, n_actors=2, steps_per_actor=16
            ),
            seed=3,
        )
        seen = _spy(model)
        with model:
            model.learn(64)
        batches[run] = [t for _, batch in seen for t in batch]
        losses[run] = [r.stats.loss for r in model.history]
    for other in (1, 2):
        assert losses[other] == pytest.approx(losses[0], rel=1e-5)
        for a, b in zip(batches[0], batches[other], strict=True):
            assert a.actor_id == b.actor_id and a.policy_version == b.policy_version
            np.testing.assert_allclose(a.obs, b.obs, rtol=1e-6)
            np.testing.assert_array_equal(a.actions, b.actions)
            np.testing.assert_allclose(a.next_obs, b.next_obs, rtol=1e-6)
    assert not np.allclose(batches[1][0].obs, batches[1][1].obs)  # two env streams


def test_a_ray_actor_killed_mid_learn_is_replaced_and_counted(cluster):
    # 2 ms per env step: a 32-step rollout takes ~64 ms, so a kill often lands mid-rollout.
    workload = get_workload("CartPole-v1").with_overrides(step_delay_s=0.002)
    model = AsyncPPO(
        workload,
        algo=AsyncPPOConfig(max_policy_lag=1, hyperparameters={"epochs": 1, "minibatch_size": 32}),
        topology=AsyncTopology(backend="ray", n_actors=2, steps_per_actor=32),
        seed=0,
    )
    seen = _spy(model)
    killed: list[int] = []

    def kill_once(record):
        if record.update == 1:
            # Under load slot 0's Ray actor may still be starting when the first update
            # (made from slot 1's rollout alone) lands: wait, bounded, until it exists.
            deadline = time.monotonic() + 120
            while 0 not in model.slots._actors:
                assert time.monotonic() < deadline, "slot 0 had no Ray actor within 120 s"
                time.sleep(0.05)
            actor = model.slots._actors[0]
            killed.append(actor.pid)
            ray.kill(actor.handle, no_restart=True)
            # The learner waits (bounded) until slot 0 runs on a new Ray actor.
            deadline = time.monotonic() + 120
            while getattr(model.slots._actors.get(0), "incarnation", 0) != 1:
                assert time.monotonic() < deadline, "slot 0 was not replaced within 120 s"
                time.sleep(0.05)

    with model:
        model.learn(64 * 10, callback=kill_once)
        survivor = model.slots._actors.get(0)
        assert survivor is None or survivor.pid not in killed
    assert killed and model.actor_failures == 1
    assert model.slots._incarnations == {0: 1, 1: 0}
    assert model.history[-1].actor_failures == 1
    assert model.num_timesteps >= 640
    for version, batch in seen:
        for traj in batch:  # only whole trajectories reached the learner
            assert len(traj) == 32 and traj.actor_id in (0, 1)
            assert 0 <= version - traj.policy_version
            assert np.isfinite(traj.rewards).all()


def test_a_callback_exception_kills_the_ray_actors_and_joins_the_threads(cluster):
    workload = get_workload("CartPole-v1").with_overrides(step_delay_s=0.02)
    model = AsyncPPO(
        workload,
        algo=AsyncPPOConfig(hyperparameters={"epochs": 1}),
        topology=AsyncTopology(backend="ray", n_actors=2, steps_per_actor=32),
        seed=0,
    )
    handles: list = []

    def boom(record):
        handles.extend(a.handle for a in model.slots._actors.values())
        raise ArithmeticError("callback blew up")

    with model, pytest.raises(ArithmeticError, match="callback blew up"):
        model.learn(10_000, callback=boom)
    assert _actor_threads() == []
    assert model.slots._actors == {} and model.actor_failures == 0  # a stop is not a fault
    for handle in handles:
        with pytest.raises(ray.exceptions.RayActorError):
            ray.get(handle.ready.remote(), timeout=30)


@pytest.mark.timeout(60)
def test_a_cluster_that_cannot_place_n_actors_is_refused_at_once(cluster):
    # Joined: one CPU per actor, the cluster has 2.
    with pytest.raises(
        FleetError,
        match=r"places n_actors=3 actors of \{'CPU': 1\.0\}, actual "
        r"room for 2 .*2 CPUs available.*'num_cpus': 0\.6666.* or n_actors=2",
    ):
        AsyncPPO("CartPole-v1", topology=AsyncTopology(backend="ray", n_actors=3))
    with pytest.raises(
        FleetError, match=r"n_actors=2 actors of \{'CPU': 4\.0\}, actual room for 0"
    ):
        AsyncPPO(
            "CartPole-v1",
            topology=AsyncTopology(backend="ray", n_actors=2, ray_actor_options={"num_cpus": 4}),
        )


def test_ray_options_are_checked():
    with pytest.raises(ValueError, match=r"inference: expected 'local' with backend='ray'"):
        AsyncPPO("CartPole-v1", topology=AsyncTopology(backend="ray", inference="server"))
    with pytest.raises(ValueError, match=r"address: expected None unless backend='ray'"):
        AsyncPPO("CartPole-v1", topology=AsyncTopology(address="127.0.0.1:6379"))
    with pytest.raises(TypeError, match=r"address: expected a Ray address \(str\) or None"):
        AsyncPPO("CartPole-v1", topology=AsyncTopology(backend="ray", address=6379))
    with pytest.raises(TypeError, match=r"ray_actor_options: expected a dict or None"):
        AsyncPPO(
            "CartPole-v1", topology=AsyncTopology(backend="ray", ray_actor_options=["num_cpus"])
        )
