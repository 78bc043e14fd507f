"""RayFleet joining a local 2-CPU Ray cluster that this module starts (127.0.0.1) and stops.

Skipped when Ray is not installed (``pip install fleetgym[ray]``). At most 2 actors: one
CPU each on the 2-CPU cluster. Fleets that start their own cluster, and node loss on a
two-node cluster, are in test_fleet_ray_cluster.py.
"""

from __future__ import annotations

import logging
import os
import signal
import sys
import time

import numpy as np
import pytest

from fleetgym.agents.fleet import InProcessFleet, make_fleet
from fleetgym.agents.types import ActorFleet
from fleetgym.agents.workloads import get_workload
from fleetgym.errors import FleetError

ray = pytest.importorskip("ray")
from fleetgym.agents.fleet.ray_backend import RayFleet  # noqa: E402

pytestmark = [pytest.mark.ray, pytest.mark.timeout(240)]

WORKLOAD = "CartPole-v1"


def _wait_gone(pid: int, polls: int = 600) -> None:
    for _ in range(polls):
        try:
            with open(f"/proc/{pid}/stat") as stat:
                if stat.read().rsplit(")", 1)[1].split()[0] == "Z":
                    return
        except FileNotFoundError:
            return
        time.sleep(0.05)
    raise AssertionError(f"Ray actor process {pid} is still running: an orphan")


@pytest.fixture(scope="module")
def cluster():
    from fleetgym.agents.fleet.ray_actor import init_local_ray

    # ray.init(num_cpus=2, include_dashboard=False) with every server on 127.0.0.1.
    init_local_ray(num_cpus=2, object_store_memory=80 * 2**20, log_to_driver=False)
    yield
    ray.shutdown()


@pytest.fixture(scope="module")
def weights():
    return get_workload(WORKLOAD).make_policy().get_weights()


def test_local_cluster_binds_loopback(cluster):
    assert {node["NodeManagerAddress"] for node in ray.nodes()} == {"127.0.0.1"}


def test_round_matches_the_in_process_backend(cluster, weights):
    with make_fleet(WORKLOAD, "ray", max_actors=2, seed=11) as fleet:
        assert isinstance(fleet, ActorFleet) and not fleet.owns_ray
        fleet.prewarm(2)
        result = fleet.run_round(weights, 2, 30, policy_version=4)
        again = fleet.run_round(weights, 1, 30, policy_version=5)
    reference = InProcessFleet(WORKLOAD, max_actors=2, seed=11)
    expected = reference.run_round(weights, 2, 30, policy_version=4)
    assert result.complete and result.failures == []
    assert [t.actor_id for t in result.trajectories] == [0, 1]
    for ours, theirs in zip(result.trajectories, expected.trajectories, strict=True):
        np.testing.assert_array_equal(ours.obs, theirs.obs)
        np.testing.assert_array_equal(ours.actions, theirs.actions)
        assert ours.policy_version == 4
    assert [t.cold_start for t in result.timings] == [False, False]
    assert all(t.compute_s > 0 and t.transfer_s > 0 for t in result.timings)
    # Slot 0 kept its environment: round 2 continues round 1.
    np.testing.assert_array_equal(
        again.trajectories[0].obs, reference.run_round(weights, 1, 30).trajectories[0].obs
    )


def test_killed_and_hung_actors_are_replaced_and_rerun(cluster, weights):
    # One round, two faults: actor 0 hangs (SIGSTOP) and actor 1 dies (SIGKILL). 8 s is far
    # above a 10-step rollout on a warm actor, so only the stopped one times out.
    with make_fleet(WORKLOAD, "ray", max_actors=2, seed=0, actor_timeout=8.0) as fleet:
        fleet.prewarm(2)
        pids = fleet.worker_pids()
        os.kill(pids[0], signal.SIGSTOP)
        os.kill(pids[1], signal.SIGKILL)
        result = fleet.run_round(weights, 2, 10)
        assert result.complete
        assert [t.actor_id for t in result.trajectories] == [0, 1]
        assert all(len(t) == 10 for t in result.trajectories)
        assert [(f.actor_id, f.kind, f.restarted, f.rerun) for f in result.failures] == [
            (0, "timeout", True, True),
            (1, "crash", True, True),
        ]
        assert fleet.incarnations == {0: 1, 1: 1}
        assert all(t.cold_start and t.startup_s > 0 for t in result.timings)


def test_argument_errors(cluster, weights, monkeypatch):
    from fleetgym.agents.fleet.ray_actor import _import_ray

    with pytest.raises(TypeError, match=r"actor_options: expected a dict or None, actual list"):
        RayFleet(WORKLOAD, actor_options=[])
    with pytest.raises(ValueError, match=r"actor_timeout: expected a finite number > 0"):
        RayFleet(WORKLOAD, actor_timeout=-1)
    with RayFleet(WORKLOAD, max_actors=1) as fleet:
        with pytest.raises(ValueError, match=r"num_actors: expected an int in \[1, 1\], actual 2"):
            fleet.run_round(weights, 2, 5)
    monkeypatch.setitem(sys.modules, "ray", None)
    with pytest.raises(ImportError, match=r"pip install 'fleetgym\[ray\]'"):
        _import_ray()


def test_interrupted_round_kills_its_in_flight_actors(cluster, weights, monkeypatch):
    # Ctrl-C during a round: the actors still running it would run that stale rollout
    # before the next round's (their calls queue in order), so they are killed; the next
    # round restarts them cold and completes.
    with make_fleet(WORKLOAD, "ray", max_actors=2, seed=0) as fleet:
        fleet.prewarm(2)

        def interrupted(*args, **kwargs):
            raise KeyboardInterrupt

        monkeypatch.setattr(fleet._ray, "wait", interrupted)
        with pytest.raises(KeyboardInterrupt):
            fleet.run_round(weights, 2, 10)
        monkeypatch.undo()
        assert fleet.num_workers == 0
        result = fleet.run_round(weights, 2, 10)
        assert result.complete and all(t.cold_start for t in result.timings)
        assert fleet.incarnations == {0: 1, 1: 1}


@pytest.mark.timeout(30, func_only=True)
def test_cluster_that_cannot_place_the_fleet_fails_before_the_first_round(cluster, caplog):
    # Default one CPU per actor on a joined cluster: 4 actors do not fit its 2 CPUs.
    with caplog.at_level(logging.INFO, logger="fleetgym.agents.fleet.ray_backend"):
        with pytest.raises(
            FleetError,
            match=r"2 CPUs available on 1 node\(s\), 4 CPUs requested .*pass "
            r"actor_options=\{'num_cpus': 0\.5\} or max_actors=2",
        ):
            RayFleet(WORKLOAD, max_actors=4)
    assert "joined the Ray cluster at " in caplog.text
    with pytest.raises(FleetError, match=r"actual room for 0 .*smaller \['accelerator'\]"):
        RayFleet(WORKLOAD, max_actors=1, actor_options={"resources": {"accelerator": 1}})
    assert ray.is_initialized()  # a cluster the fleet joined is left running


@pytest.mark.timeout(120)
def test_ray_actor_that_never_answers_times_out_and_is_killed(cluster, weights):
    with RayFleet(
        WORKLOAD, max_actors=1, actor_timeout=3.0, max_retries=0, on_incomplete="raise"
    ) as fleet:
        fleet.prewarm(1)
        pid = fleet.worker_pids()[0]
        os.kill(pid, signal.SIGSTOP)
        with pytest.raises(
            FleetError, match=r"did not finish its rollout within actor_timeout=3\.0 s"
        ):
            fleet.run_round(weights, 1, 8)
        assert fleet.num_workers == 0
    _wait_gone(pid)
