"""AsyncPPO with backend="ray" on a two-node cluster whose second node is lost mid-learn.

The cluster is started here with ``ray start`` on 127.0.0.1: a head of 2 CPUs and a second
node of 1 CPU, each with its own temp dir; 3 actor slots of one CPU each fill it, so one
slot's Ray actor is on the second node. Its raylet is killed by PID mid-``learn``: that
slot's rollout fails (counted), its replacement has no room (the two survivors hold the
head's CPUs), so the slot is parked, the lost capacity logged, and training goes on with
two slots. The nodes come from tests/ray_nodes.py; the test runs in a child interpreter that never
started a local cluster (token authentication), and teardown kills the nodes' processes by
PID, never ``ray stop``.
"""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys
import time

import numpy as np
import pytest
from ray_nodes import pids_under, ray_nodes, raylet_pid

from fleetgym.agents.learners.asynchronous.config import AsyncPPOConfig, AsyncTopology
from fleetgym.agents.learners.asynchronous.trainer import AsyncPPO
from fleetgym.agents.workloads import get_workload

ray = pytest.importorskip("ray")

pytestmark = pytest.mark.ray

#: Set in the child interpreter that runs the two-node test.
FRESH = "FLEETGYM_TEST_FRESH_INTERPRETER"


@pytest.fixture
def two_node_cluster(monkeypatch):
    """A head of 2 CPUs and a second node of 1 CPU on 127.0.0.1; yields (address, dirs)."""
    if not os.environ.get(FRESH):
        pytest.skip("runs in a child interpreter (test_node_loss_in_a_fresh_interpreter)")
    monkeypatch.setenv("RAY_AUTH_MODE", "disabled")
    with ray_nodes([2, 1]) as cluster:
        yield cluster


@pytest.mark.timeout(480)
def test_node_loss_in_a_fresh_interpreter():
    if os.environ.get(FRESH):
        pytest.skip("already in the child interpreter")
    test = f"{__file__}::test_lost_node_parks_its_slot_and_training_goes_on"
    done = subprocess.run(
        [sys.executable, "-m", "pytest", test, "-q", "-p", "no:cacheprovider"],
        env={**os.environ, FRESH: "1", "RAY_AUTH_MODE": "disabled"},
        capture_output=True,
        text=True,
        timeout=450,
    )
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]


@pytest.mark.timeout(420)
def test_lost_node_parks_its_slot_and_training_goes_on(two_node_cluster, caplog):
    address, dirs = two_node_cluster
    workload = get_workload("CartPole-v1").with_overrides(step_delay_s=0.002)
    model = AsyncPPO(
        workload,
        algo=AsyncPPOConfig(max_policy_lag=1, hyperparameters={"epochs": 1, "minibatch_size": 32}),
        topology=AsyncTopology(backend="ray", address=address, n_actors=3, steps_per_actor=32),
        seed=0,
    )
    seen: list = []
    update = model.learner.update

    def spy(batch):
        seen.append((model.learner.policy_version, list(batch)))
        return update(batch)

    model.learner.update = spy  # type: ignore[method-assign]
    lost: list[int] = []
    state: dict[str, float] = {}

    def kill_node(record):
        if record.update == 1:
            node_pids = set(pids_under(dirs[1]))
            lost.extend(s for s, a in model.slots._actors.items() if a.pid in node_pids)
            os.kill(raylet_pid(dirs[1]), signal.SIGKILL)
            state["killed"] = time.monotonic()
        elif record.update > 1:
            assert time.monotonic() - state["killed"] < 120, "no slot parked within 120 s"
            if model.slots.parked and "parked" not in state:
                state["parked"] = record.update
            # Five more updates after the parking, then stop.
            return record.update >= state.get("parked", np.inf) + 5
        return False

    try:
        model.prewarm()
        with caplog.at_level(logging.WARNING, logger="fleetgym.agents.learners"):
            model.learn(10**7, callback=kill_node)
        assert len(lost) == 1
        assert model.slots.parked == set(lost)
        assert model.actor_failures == 1
        assert "actual room for 2 on the alive nodes (a node was lost)" in caplog.text
        assert "training goes on with 2 of 3 actor slots" in caplog.text
        parked = int(state["parked"])
        assert len(model.history) == parked + 6
        after = [t for _, batch in seen[parked + 2 :] for t in batch]
        assert len(after) == 3 * 4 and {t.actor_id for t in after} <= {0, 1, 2} - set(lost)
        for _, batch in seen:
            for traj in batch:  # only whole trajectories reached the learner
                assert len(traj) == 32 and np.isfinite(traj.rewards).all()
    finally:
        model.close()
    assert not ray.is_initialized()  # close() disconnected the driver it connected
