"""The inference server as a Ray actor: ``make_fleet(..., backend="ray", inference="server")``
on a local 2-CPU Ray cluster (127.0.0.1) that this module starts and stops.

Skipped when Ray is not installed. Few tests: starting Ray costs seconds.
"""

from __future__ import annotations

import logging
import threading
import time

import numpy as np
import pytest

from fleetgym.agents.fleet import make_fleet
from fleetgym.agents.inference import InferenceError
from fleetgym.agents.inference.rollout import ServedTrajectory
from fleetgym.agents.workloads import get_workload

ray = pytest.importorskip("ray")

pytestmark = [pytest.mark.ray, pytest.mark.timeout(240)]

WORKLOAD = "CartPole-v1"


@pytest.fixture(scope="module")
def cluster():
    from fleetgym.agents.fleet.ray_actor import init_local_ray

    init_local_ray(num_cpus=2, object_store_memory=80 * 2**20, log_to_driver=False)
    yield
    ray.shutdown()


@pytest.fixture(scope="module")
def weights():
    return get_workload(WORKLOAD).make_policy().get_weights()


def test_ray_server_round_matches_synchronous(cluster, weights):
    reference = make_fleet(WORKLOAD, "inprocess", max_actors=2, seed=5).run_round(
        weights, 2, 24, policy_version=3
    )
    with make_fleet(
        WORKLOAD, "ray", max_actors=2, seed=5, inference="server",
        inference_options={"max_wait_ms": 2.0},
    ) as fleet:  # fmt: skip
        assert type(fleet).__name__ == "ServedRayFleet" and not fleet.owns_ray
        result = fleet.run_round(weights, 2, 24, policy_version=3)
        again = fleet.run_round(weights, 1, 6, policy_version=4)
        metrics = fleet.metrics()
        server = fleet.server
    assert result.complete and result.failures == []
    for got, ref in zip(result.trajectories, reference.trajectories, strict=True):
        assert isinstance(got, ServedTrajectory) and got.actor_id == ref.actor_id
        np.testing.assert_array_equal(got.obs, ref.obs)
        np.testing.assert_array_equal(got.actions, ref.actions)
        np.testing.assert_array_equal(got.rewards, ref.rewards)
        # batched forward passes may sum in another order: float32 rounding
        np.testing.assert_allclose(got.log_probs, ref.log_probs, atol=1e-5)
        np.testing.assert_allclose(got.values, ref.values, atol=1e-5)
        assert got.policy_versions.tolist() == [3] * 24
    assert [t.num_steps for t in result.timings] == [24, 24]
    assert again.trajectories[0].policy_versions.tolist() == [4] * 6
    # every action and every bootstrap value went through the server actor
    assert metrics["requests"] >= 2 * 24 + 6 and metrics["policy_version"] == 4
    assert metrics["connected_clients"] == 2
    # closing killed the server actor; ray.kill is asynchronous, so a call made at once may
    # still be served: ask until the actor is gone (bounded, so a live actor fails the test)
    with pytest.raises(ray.exceptions.RayActorError):
        for _ in range(60):
            ray.get(server.metrics.remote(), timeout=60)
            time.sleep(0.5)


def test_ray_client_errors_reach_that_client_only(cluster):
    from fleetgym.agents.inference.ray_service import RayClient, RayInferenceHost

    host = ray.remote(RayInferenceHost).options(num_cpus=0, max_concurrency=8)
    server = host.remote(get_workload(WORKLOAD), {"max_wait_ms": 1.0})
    try:
        bad, good = RayClient(server, 0), RayClient(server, 1)
        with pytest.raises(TypeError, match="obs: expected dtype float32"):
            bad.submit(np.zeros((1, 4), np.float64))
        ray.get(server.set_weights.remote(get_workload(WORKLOAD).make_policy().get_weights(), 6))
        first, second = (
            good.submit(np.zeros((2, 4), np.float32)),
            good.submit(np.ones((1, 4), np.float32)),
        )  # two submits in flight (double buffering)
        assert good.wait(second).policy_versions.tolist() == [6]
        assert good.wait(first).outputs["value"].shape == (2,)
        replacement = RayClient(server, 1)  # a new actor of slot 1 takes the old one's place
        good.close()  # the old one's late goodbye leaves it connected
        assert replacement.infer(np.zeros(4, np.float32)).policy_versions.tolist() == [6]
        assert ray.get(server.metrics.remote())["connected_clients"] == 2
        bad.close()
        with pytest.raises(InferenceError, match="closed"):
            bad.submit(np.zeros((1, 4), np.float32))
    finally:
        ray.kill(server)


def _kill_when_served(server, requests: int) -> threading.Thread:
    """A thread that kills ``server`` once it has answered ``requests`` requests (so the
    kill lands inside a round that makes far more)."""

    def watch() -> None:
        while ray.get(server.metrics.remote(), timeout=60)["requests"] < requests:
            time.sleep(0.01)
        ray.kill(server, no_restart=True)

    thread = threading.Thread(target=watch, daemon=True)
    thread.start()
    return thread


def test_a_dead_server_actor_is_replaced_and_the_round_goes_on(cluster, weights, caplog):
    with make_fleet(
        WORKLOAD, "ray", max_actors=2, seed=5, inference="server",
        inference_options={"max_wait_ms": 1.0},
    ) as fleet:  # fmt: skip
        assert fleet.run_round(weights, 2, 8, policy_version=1).complete
        first = fleet.server
        steps = 1500  # 3,000 requests in the round; the server dies after 100
        killer = _kill_when_served(first, 100)
        with caplog.at_level(logging.WARNING, logger="fleetgym.agents.fleet"):
            result = fleet.run_round(weights, 2, steps, policy_version=2)
        killer.join(timeout=60)
        assert not killer.is_alive()
        # detected, replaced once, the round's weights published to the new server
        assert fleet.server is not first and fleet.server_restarts == 1
        assert "the inference server actor died" in caplog.text
        # the broken rollouts are the round's faults, re-run through the new server
        assert result.complete and len(result.trajectories) == 2
        assert result.failures and {f.kind for f in result.failures} <= {"error", "crash"}
        assert all(f.restarted for f in result.failures)
        for trajectory in result.trajectories:
            assert len(trajectory) == steps and trajectory.policy_versions.tolist() == [2] * steps
        metrics = fleet.metrics()
        assert metrics["server_restarts"] == 1 and metrics["policy_version"] == 2
        # the next round runs on the new server without a fault
        after = fleet.run_round(weights, 2, 8, policy_version=3)
        assert after.complete and after.failures == []
        assert {int(v) for t in after.trajectories for v in t.policy_versions} == {3}

        # killed between rounds: the round's weights do not reach it; replaced before any
        # rollout, so no rollout fails
        second = fleet.server
        ray.kill(second, no_restart=True)
        with pytest.raises(ray.exceptions.RayActorError):
            for _ in range(60):  # ray.kill is asynchronous
                ray.get(second.spec.remote(), timeout=60)
                time.sleep(0.5)
        again = fleet.run_round(weights, 2, 8, policy_version=4)
        assert fleet.server_restarts == 2 and again.complete and again.failures == []
        assert {int(v) for t in again.trajectories for v in t.policy_versions} == {4}
