"""Fleets on the inference server: same rounds as the synchronous path (up to float
rounding), per-sample policy versions, faults, and the heterogeneous-actor workload."""

from __future__ import annotations

import os
import signal
import threading
import time

import numpy as np
import pytest

from fleetgym.agents.fleet import make_fleet
from fleetgym.agents.inference.rollout import ServedTrajectory
from fleetgym.agents.workloads import StepDelay, get_workload
from fleetgym.errors import FleetError

WORKLOAD = "CartPole-v1"


@pytest.fixture(scope="module")
def weights():
    return get_workload(WORKLOAD).make_policy().get_weights()


def _same_as_sync(result, reference) -> None:
    """Same observations, actions and episodes; log-probs and values to float32 rounding
    (the batched forward may sum in another order)."""
    assert result.complete and len(result.trajectories) == len(reference.trajectories)
    for got, ref in zip(result.trajectories, reference.trajectories, strict=True):
        assert isinstance(got, ServedTrajectory)
        assert got.actor_id == ref.actor_id and got.seed == ref.seed
        np.testing.assert_array_equal(got.obs, ref.obs)
        np.testing.assert_array_equal(got.actions, ref.actions)
        np.testing.assert_array_equal(got.rewards, ref.rewards)
        np.testing.assert_array_equal(got.terminated, ref.terminated)
        np.testing.assert_array_equal(got.truncated, ref.truncated)
        np.testing.assert_allclose(got.log_probs, ref.log_probs, atol=1e-5)
        np.testing.assert_allclose(got.values, ref.values, atol=1e-5)
        np.testing.assert_allclose(got.last_value, ref.last_value, atol=1e-5)
        assert got.episode_returns == ref.episode_returns
    assert [t.actor_id for t in result.timings] == list(range(result.num_actors))
    assert all(t.num_steps == result.steps_per_actor for t in result.timings)


@pytest.mark.timeout(120)
def test_inprocess_server_round_matches_synchronous(weights):
    reference = make_fleet(WORKLOAD, "inprocess", max_actors=4, seed=5).run_round(
        weights, 3, 40, policy_version=2
    )
    with make_fleet(WORKLOAD, "inprocess", max_actors=4, seed=5, inference="server") as fleet:
        result = fleet.run_round(weights, 3, 40, policy_version=2)
        assert [t.cold_start for t in result.timings] == [True] * 3
        again = fleet.run_round(weights, 3, 8, policy_version=9)
        metrics = fleet.metrics()
    _same_as_sync(result, reference)
    assert all(t.policy_versions.tolist() == [2] * 40 for t in result.trajectories)
    assert all(t.policy_versions.tolist() == [9] * 8 for t in again.trajectories)
    assert [t.cold_start for t in again.timings] == [False] * 3
    assert metrics["policy_version"] == 9 and metrics["requests"] >= 3 * 48


@pytest.mark.timeout(240)
@pytest.mark.parametrize("actors_per_worker", [1, 2])
def test_process_server_round_matches_synchronous(weights, actors_per_worker):
    reference = make_fleet(WORKLOAD, "inprocess", max_actors=4, seed=6).run_round(
        weights, 4, 32, policy_version=1
    )
    with make_fleet(
        WORKLOAD,
        "process",
        max_actors=4,
        seed=6,
        inference="server",
        actors_per_worker=actors_per_worker,
        inference_options={"max_wait_ms": 2.0},
    ) as fleet:
        result = fleet.run_round(weights, 4, 32, policy_version=1)
    _same_as_sync(result, reference)
    assert all(set(t.policy_versions.tolist()) == {1} for t in result.trajectories)


@pytest.mark.timeout(240)
def test_process_server_worker_killed_mid_round_is_replaced(weights):
    slow = get_workload(WORKLOAD).with_overrides(step_delay_s=0.005)
    with make_fleet(
        slow, "process", max_actors=2, seed=1, inference="server", actor_timeout=120.0
    ) as fleet:
        fleet.prewarm(2)
        victim = fleet.worker_pids()[0]

        def kill_when_serving() -> None:
            for _ in range(60_000):
                if fleet.metrics()["requests"] >= 10:
                    break
                time.sleep(0.001)
            os.kill(victim, signal.SIGKILL)

        killer = threading.Thread(target=kill_when_serving)
        killer.start()
        result = fleet.run_round(weights, 2, 200, policy_version=4)
        killer.join()
        assert result.complete
        assert [(f.actor_id, f.kind, f.rerun) for f in result.failures] == [(0, "crash", True)]
        assert all(len(t) == 200 for t in result.trajectories)
        # the next round runs on the replacement, through the same server
        assert fleet.run_round(weights, 2, 8, policy_version=5).complete


def test_make_fleet_inference_arguments():
    with pytest.raises(ValueError, match="inference: expected one of"):
        make_fleet(WORKLOAD, "inprocess", inference="remote")
    with pytest.raises(ValueError, match="backend: expected one of"):
        make_fleet(WORKLOAD, "thread", inference="server")
    with pytest.raises(ValueError, match="batched: expected False"):
        make_fleet(WORKLOAD, "inprocess", inference="server", batched=True)
    with pytest.raises(TypeError, match="inference_options: expected keys"):
        make_fleet(WORKLOAD, "inprocess", inference="server", inference_options={"wait": 1})


def test_heterogeneous_workload_delays_are_per_actor_lognormal():
    base = get_workload(WORKLOAD)
    assert not isinstance(base.make_env(seed=0), StepDelay)  # off by default
    w = base.with_overrides(step_delay_s=0.002, step_delay_sigma=0.5)
    delays = np.array([w.actor_step_delay(seed) for seed in range(2000)])
    assert w.actor_step_delay(7) == w.actor_step_delay(7)  # a seed's delay is fixed
    # log(delay) ~ N(log 0.002, 0.5^2): mean within 4 standard errors (0.5/sqrt(2000))
    assert abs(np.log(delays).mean() - np.log(0.002)) < 4 * 0.5 / np.sqrt(2000)
    assert abs(np.log(delays).std() - 0.5) < 0.05  # 6 standard errors (0.5/sqrt(2n))
    env = w.make_env(seed=3)
    assert isinstance(env, StepDelay) and env.delay_s == w.actor_step_delay(3)
    env.close()
    with pytest.raises(ValueError, match=r"step_delay_s: expected a float in \[0, 60\]"):
        base.with_overrides(step_delay_s=-1.0)


def _hang_first_incarnation_of(monkeypatch, slot: int, release: threading.Event) -> None:
    """Slot ``slot``'s first actor blocks (never answers) until ``release`` is set."""
    import fleetgym.agents.inference.rollout as rollout_module

    real = rollout_module.served_rollout

    def served_rollout(workers, client, steps, policy_version, groups=2):
        if workers[0].actor_id == slot and workers[0].incarnation == 0:
            release.wait()
        return real(workers, client, steps, policy_version, groups)

    monkeypatch.setattr(rollout_module, "served_rollout", served_rollout)


@pytest.mark.timeout(120)
@pytest.mark.parametrize("max_retries", [1, 0])
def test_inprocess_server_actor_timeout_bounds_a_hung_thread(weights, monkeypatch, max_retries):
    release = threading.Event()
    _hang_first_incarnation_of(monkeypatch, 1, release)
    try:
        with make_fleet(
            WORKLOAD,
            "inprocess",
            max_actors=3,
            seed=2,
            inference="server",
            actor_timeout=0.5,
            max_retries=max_retries,
        ) as fleet:
            result = fleet.run_round(weights, 3, 16, policy_version=3)
            expected = "did not finish its rollout within actor_timeout=0.5 s"
            assert [(f.actor_id, f.kind, f.message) for f in result.failures] == [
                (1, "timeout", expected)
            ]
            if max_retries:  # replaced by a new incarnation, re-run within the round
                assert result.complete and result.failures[0].rerun
                assert [t.actor_id for t in result.trajectories] == [0, 1, 2]
                assert fleet.incarnations[1] == fleet.incarnations[0] + 1
            else:
                assert not result.complete and not result.failures[0].rerun
                assert [t.actor_id for t in result.trajectories] == [0, 2]
            # the next round runs, the hung thread's client no longer counts
            assert fleet.run_round(weights, 3, 4, policy_version=4).complete
            assert fleet.metrics()["connected_clients"] == 0
    finally:
        release.set()


@pytest.mark.timeout(120)
def test_inprocess_server_actor_timeout_raise(weights, monkeypatch):
    release = threading.Event()
    _hang_first_incarnation_of(monkeypatch, 0, release)
    try:
        with make_fleet(
            WORKLOAD,
            "inprocess",
            max_actors=2,
            inference="server",
            actor_timeout=0.3,
            max_retries=0,
            on_incomplete="raise",
        ) as fleet:
            with pytest.raises(FleetError, match="actor_timeout=0.3 s"):
                fleet.run_round(weights, 2, 8)
    finally:
        release.set()
