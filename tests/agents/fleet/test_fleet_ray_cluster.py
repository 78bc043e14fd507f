"""RayFleet on clusters other than a shared test cluster: its own local one, and node loss.

* A fleet that starts its own local 2-CPU cluster sizes its actors so that ``max_actors``
  fit (4 and 32 actors complete a round).
* A two-node cluster started here with ``ray start`` on loopback (one CPU per node, each
  node with its own temp dir): the second node's raylet is killed mid-round; the lost
  actor cannot be replaced (the survivor holds the only CPU left), so its rollout re-runs
  on the surviving actor and the round completes with both trajectories.

Teardown kills the processes of the two nodes by PID (found through their temp dirs):
``ray stop`` would stop every Ray process of the machine, other users' clusters included.
Ray start-ups take seconds on a 2-core machine, so the module keeps to two tests.
"""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys
import threading

import pytest
from ray_nodes import pids_under, ray_nodes, raylet_pid

from fleetgym.agents.workloads import get_workload

ray = pytest.importorskip("ray")
from fleetgym.agents.fleet.ray_backend import RayFleet  # noqa: E402

pytestmark = pytest.mark.ray

WORKLOAD = "CartPole-v1"


@pytest.fixture(scope="module")
def weights():
    return get_workload(WORKLOAD).make_policy().get_weights()


@pytest.mark.timeout(600)
@pytest.mark.parametrize(
    "max_actors",
    # 32 Ray actor processes start a few at a time: minutes on a busy 2-core machine.
    [4, pytest.param(32, marks=pytest.mark.slow)],
)
def test_own_local_cluster_fits_max_actors(weights, caplog, max_actors):
    assert not ray.is_initialized()
    with caplog.at_level(logging.INFO, logger="fleetgym.agents.fleet.ray_backend"):
        with RayFleet(
            WORKLOAD,
            max_actors=max_actors,
            init_kwargs={"num_cpus": 2, "object_store_memory": 100 * 2**20},
        ) as fleet:
            assert fleet.owns_ray
            assert fleet.actor_options == {"num_cpus": 2 / max_actors}
            result = fleet.run_round(weights, max_actors, 8)
    assert result.complete and result.failures == []
    assert [t.actor_id for t in result.trajectories] == list(range(max_actors))
    assert not ray.is_initialized()  # the fleet stopped the cluster it started
    sizing = [r.getMessage() for r in caplog.records if "num_cpus=" in r.getMessage()]
    assert sizing == [
        f"Ray actors get num_cpus={2 / max_actors:g} each, so max_actors={max_actors} fit "
        "the 2 CPUs (actor_options={'num_cpus': ...} sets it)"
    ]
    assert "started a local Ray cluster at " in caplog.text


# -- a two-node cluster on loopback -------------------------------------------------------
#: Set in the child interpreter that runs the two-node test (see the test below).
FRESH = "FLEETGYM_TEST_FRESH_INTERPRETER"


@pytest.fixture
def two_node_cluster(monkeypatch):
    """``ray start`` a head and a second node on 127.0.0.1, one CPU each; yields the address."""
    if not os.environ.get(FRESH):
        pytest.skip("runs in a child interpreter (test_lost_node_in_a_fresh_interpreter)")
    monkeypatch.setenv("RAY_AUTH_MODE", "disabled")
    with ray_nodes([1, 1]) as cluster:
        yield cluster


@pytest.mark.timeout(480)
def test_lost_node_in_a_fresh_interpreter():
    """A child interpreter starts clean: once this process has run a local cluster, Ray has
    set ``RAY_AUTH_MODE=token`` in its environment and read it at import, and a driver in
    token mode cannot use the token-less test cluster (its actors are cancelled)."""
    if os.environ.get(FRESH):
        pytest.skip("already in the child interpreter")
    test = f"{__file__}::test_lost_node_rollout_reruns_on_the_surviving_actor"
    done = subprocess.run(
        [sys.executable, "-m", "pytest", test, "-q", "-p", "no:cacheprovider"],
        env={**os.environ, FRESH: "1", "RAY_AUTH_MODE": "disabled"},
        capture_output=True,
        text=True,
        timeout=450,
    )
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]


@pytest.mark.timeout(420)
def test_lost_node_rollout_reruns_on_the_surviving_actor(two_node_cluster, weights, caplog):
    address, dirs = two_node_cluster
    with RayFleet(WORKLOAD, max_actors=2, address=address, actor_options={"num_cpus": 1}) as fleet:
        fleet.prewarm(2)  # one actor per node: each needs its node's only CPU
        node_pids = set(pids_under(dirs[1]))
        [lost] = [s for s, pid in fleet.worker_pids().items() if pid in node_pids]
        raylet = raylet_pid(dirs[1])
        steps = 20_000  # seconds of work per actor here, so the kill lands mid-round
        killer = threading.Timer(0.5, os.kill, (raylet, signal.SIGKILL))
        killer.start()
        try:
            with caplog.at_level(logging.WARNING, logger="fleetgym.agents.fleet"):
                result = fleet.run_round(weights, 2, steps)
        finally:
            killer.cancel()
        assert result.complete
        assert [(t.actor_id, len(t)) for t in result.trajectories] == [(0, steps), (1, steps)]
        assert [(f.actor_id, f.kind, f.restarted, f.rerun) for f in result.failures] == [
            (lost, "crash", True, True)
        ]
        survivor = 1 - lost
        assert fleet.capacity == 1 and fleet.shared_slots == {lost: survivor}
        assert f"its rollouts run on actor {survivor}" in caplog.text
        # Later rounds keep running both slots on the one actor left.
        again = fleet.run_round(weights, 2, 16)
        assert again.complete and again.failures == []
    assert not ray.is_initialized()
