"""Load balancing of env instances across actors (AsyncPPO envs_per_actor, load_balancing)."""

from __future__ import annotations

import threading
import time

import numpy as np
import pytest

from fleetgym.agents.learners.asynchronous.balancing import InstanceScheduler
from fleetgym.agents.learners.asynchronous.config import AsyncPPOConfig, AsyncTopology
from fleetgym.agents.learners.asynchronous.trainer import AsyncPPO
from fleetgym.agents.rollout import RolloutWorker

TINY = dict(n_actors=2, steps_per_actor=16, epochs=1, minibatch_size=16)
#: Instances that live on actor 0 at the start (envs_per_actor=3): its env steps sleep.
SLOW = frozenset({0, 1, 2})


class _SlowHome(RolloutWorker):
    """Instances 0-2 (actor 0's at the start) cost 2 ms per env step (a sleep, no CPU)."""

    def rollout(self, weights, steps, policy_version):
        if self.actor_id in SLOW:
            time.sleep(0.002 * steps)
        return super().rollout(weights, steps, policy_version)


def _spy(model: AsyncPPO) -> list[list]:
    seen: list[list] = []
    update = model.learner.update

    def spy(batch):
        seen.append(list(batch))
        return update(batch)

    model.learner.update = spy  # type: ignore[method-assign]
    return seen


def test_scheduler_steals_only_from_an_actor_that_is_behind():
    s = InstanceScheduler(2, 3, load_balancing=True)
    assert s.acquire(0) == 0
    s.release(0, 0, steps=10, seconds=1.0)  # actor 0: 10 steps/s
    assert s.acquire(0) == 1
    for instance in (3, 4, 5):
        assert s.acquire(1) == instance
        s.release(1, instance, steps=10, seconds=0.01)  # actor 1: 1000 steps/s
    # Actor 1 is idle and actor 0 would start instance 2 about 1.5 s from now: it steals it.
    assert s.acquire(1) == 2
    assert (s.migrations, s.home) == (1, [0, 0, 1, 1, 1, 1])
    s.release(1, 2, steps=10, seconds=0.01)
    assert s.acquire(1) is None  # nothing queued, 1 still runs: the round is not over
    s.release(0, 1, steps=10, seconds=1.0)
    # Next round: instance 2 is queued on its new home.
    assert s.queued(0) == [0, 1] and s.queued(1) == [2, 3, 4, 5]
    assert s.rollouts == [1] * 6


def test_scheduler_a_slow_thief_does_not_steal_and_static_never_does():
    s = InstanceScheduler(2, 2, load_balancing=True)
    assert [s.acquire(0), s.acquire(1)] == [0, 2]
    s.release(0, 0, steps=10, seconds=0.01)  # actor 0 fast
    s.release(1, 2, steps=10, seconds=1.0)  # actor 1 slow
    assert s.acquire(1) == 3
    assert s.acquire(0) == 1
    s.release(0, 1, steps=10, seconds=0.01)
    assert s.acquire(0) is None  # actor 1 has nothing queued
    static = InstanceScheduler(2, 2, load_balancing=False)
    assert [static.acquire(1), static.acquire(1), static.acquire(1)] == [2, 3, None]
    assert static.migrations == 0


def test_scheduler_threads_lose_and_duplicate_nothing():
    # 4 actor threads, 3 instances each; actor 0's instances sleep. Each round every
    # instance runs exactly once, whoever runs it.
    s = InstanceScheduler(4, 3, load_balancing=True)
    log: list[tuple[int, int]] = []  # (round, instance)
    lock = threading.Lock()

    def lane(actor: int) -> None:
        while (instance := s.acquire(actor, block=True)) is not None:
            with lock:
                log.append((s.round, instance))
            if instance < 3:
                time.sleep(0.01)
            s.release(actor, instance, steps=10)
            with lock:
                if len(log) >= 12 * 5:
                    s.stop()

    threads = [threading.Thread(target=lane, args=(a,)) for a in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not any(t.is_alive() for t in threads)
    for r in range(5):
        assert sorted(i for rr, i in log if rr == r) == list(range(12))
    assert s.migrations > 0  # the idle actors took instances off actor 0


@pytest.mark.timeout(120)
def test_async_ppo_migrates_instances_off_a_slow_actor_and_keeps_their_episodes():
    model = AsyncPPO(
        "CartPole-v1",
        algo=AsyncPPOConfig(max_policy_lag=1, hyperparameters={"epochs": 1, "minibatch_size": 16}),
        topology=AsyncTopology(
            envs_per_actor=3, load_balancing=True, n_actors=2, steps_per_actor=16
        ),
        seed=0,
        actor_factory=_SlowHome,
    )
    seen = _spy(model)
    model.learn(6 * 16 * 4)
    model.close()
    assert model.batch_trajectories == 6
    assert model.slots.scheduler is not None and model.slots.scheduler.migrations > 0
    # Every update holds one rollout of every instance (nothing lost, nothing twice).
    for batch in seen:
        assert sorted(t.actor_id for t in batch) == list(range(6))
    # Each instance's rollouts continue one another (the episode crosses migrations).
    by_instance: dict[int, list] = {}
    for batch in seen:
        for t in batch:
            by_instance.setdefault(t.actor_id, []).append(t)
    for trajs in by_instance.values():
        for before, after in zip(trajs, trajs[1:], strict=False):
            np.testing.assert_array_equal(after.obs[0], before.next_obs)


@pytest.mark.timeout(120)
def test_balanced_and_static_give_each_instance_the_same_trajectories():
    # Without threads the rounds run in turn: every instance's rollout of round r is
    # acted with the weights of update r, wherever it runs, so the data per instance
    # are the same with and without balancing, and the same for the same seed.
    def run(balancing: bool) -> dict[int, list[np.ndarray]]:
        model = AsyncPPO(
            "CartPole-v1",
            algo=AsyncPPOConfig(hyperparameters={"epochs": 1, "minibatch_size": 16}),
            topology=AsyncTopology(
                envs_per_actor=2,
                load_balancing=balancing,
                concurrent=False,
                n_actors=2,
                steps_per_actor=16,
            ),
            seed=3,
        )
        seen = _spy(model)
        model.learn(4 * 16 * 3)
        model.close()
        out: dict[int, list[np.ndarray]] = {}
        for batch in seen:
            for t in batch:
                out.setdefault(t.actor_id, []).append(t.actions)
        return out

    a, b, c = run(True), run(True), run(False)
    assert sorted(a) == [0, 1, 2, 3]
    for instance in a:
        assert all(np.array_equal(x, y) for x, y in zip(a[instance], b[instance], strict=True))
        assert all(np.array_equal(x, y) for x, y in zip(a[instance], c[instance], strict=True))


@pytest.mark.timeout(180)
def test_process_actors_balance_too():
    model = AsyncPPO(
        "CartPole-v1",
        algo=AsyncPPOConfig(max_policy_lag=1, hyperparameters={"epochs": 1, "minibatch_size": 16}),
        topology=AsyncTopology(
            backend="process", envs_per_actor=2, load_balancing=True, n_actors=2, steps_per_actor=16
        ),
        seed=0,
    )
    seen = _spy(model)
    model.learn(4 * 16 * 2)
    model.close()
    for batch in seen:
        assert sorted(t.actor_id for t in batch) == [0, 1, 2, 3]


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"envs_per_actor": 0}, "envs_per_actor"),
        ({"envs_per_actor": 2.5}, "envs_per_actor"),
        ({"load_balancing": "yes"}, "load_balancing"),
        ({"n_actors": 1024, "envs_per_actor": 8}, "<= 4096 env instances"),
    ],
)
def test_bad_balancing_arguments(kwargs, match):
    with pytest.raises((TypeError, ValueError), match=match):
        AsyncPPO("CartPole-v1", topology=AsyncTopology(**kwargs))


@pytest.mark.ray
@pytest.mark.timeout(240)
def test_ray_actors_balance_too():
    ray = pytest.importorskip("ray")
    from fleetgym.agents.fleet.ray_actor import init_local_ray

    started = not ray.is_initialized()
    if started:  # a local 2-CPU cluster on 127.0.0.1, as the other Ray tests start
        init_local_ray(num_cpus=2, object_store_memory=80 * 2**20, log_to_driver=False)
    try:
        model = AsyncPPO(
            "CartPole-v1",
            algo=AsyncPPOConfig(
                max_policy_lag=1, hyperparameters={"epochs": 1, "minibatch_size": 16}
            ),
            topology=AsyncTopology(
                backend="ray",
                envs_per_actor=2,
                load_balancing=True,
                ray_actor_options={"num_cpus": 0.25},
                n_actors=2,
                steps_per_actor=16,
            ),
            seed=0,
        )
        seen = _spy(model)
        model.learn(4 * 16 * 2)
        model.close()
        assert seen
        for batch in seen:
            assert sorted(t.actor_id for t in batch) == [0, 1, 2, 3]
    finally:
        if started:
            ray.shutdown()


@pytest.mark.timeout(120)
def test_served_instances_balance_too():
    model = AsyncPPO(
        "CartPole-v1",
        algo=AsyncPPOConfig(max_policy_lag=1, hyperparameters={"epochs": 1, "minibatch_size": 16}),
        topology=AsyncTopology(
            inference="server",
            envs_per_actor=2,
            load_balancing=True,
            n_actors=2,
            steps_per_actor=16,
        ),
        seed=0,
    )
    seen = _spy(model)
    model.learn(4 * 16 * 2)
    model.close()
    assert seen
    for batch in seen:
        assert sorted(t.actor_id for t in batch) == [0, 1, 2, 3]


def test_save_load_keeps_the_balancing_options(tmp_path):
    model = AsyncPPO(
        "CartPole-v1",
        algo=AsyncPPOConfig(hyperparameters={"epochs": 1, "minibatch_size": 16}),
        topology=AsyncTopology(
            envs_per_actor=2, load_balancing=True, n_actors=2, steps_per_actor=16
        ),
        seed=0,
    )
    model.save(tmp_path / "m.pt")
    model.close()
    loaded = AsyncPPO.load(tmp_path / "m.pt")
    assert (loaded.envs_per_actor, loaded.load_balancing, loaded.batch_trajectories) == (2, True, 4)
    assert loaded.slots.scheduler is not None and loaded.slots.scheduler.n_instances == 4
    loaded.close()
