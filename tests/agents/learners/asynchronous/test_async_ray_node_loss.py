"""AsyncPPO with actors="ray" on a two-node cluster whose second node is lost mid-learn.

The cluster is started here with ``ray start`` on 127.0.0.1: a head of 2 CPUs and a second
node of 1 CPU, each with its own temp dir; 3 actor slots of one CPU each fill it, so one
slot's Ray actor is on the second node. Its raylet is killed by PID mid-``learn``: that
slot's rollout fails (counted), its replacement has no room (the two survivors hold the
head's CPUs), so the slot is parked, the lost capacity logged, and training goes on with
two slots. As in tests/agents/fleet/test_fleet_ray_cluster.py (whose helpers this copies),
the test runs in a child interpreter that never started a local cluster (token
authentication), and teardown kills the nodes' processes by PID, never ``ray stop``.
"""

from __future__ import annotations

import logging
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pytest

from fleetgym.agents.learners.asynchronous.trainer import AsyncPPO
from fleetgym.agents.workloads import get_workload

ray = pytest.importorskip("ray")

pytestmark = pytest.mark.ray

#: Set in the child interpreter that runs the two-node test.
FRESH = "FLEETGYM_TEST_FRESH_INTERPRETER"


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def _pids_under(directory: str) -> list[int]:
    """A node's processes: those whose command line names its temp dir, and descendants."""
    named, parent = set(), {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as cmdline:
                if directory.encode() in cmdline.read():
                    named.add(int(entry))
            with open(f"/proc/{entry}/stat") as stat:
                fields = stat.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if fields[0] != "Z":
            parent[int(entry)] = int(fields[1])
    found = named & set(parent)
    while True:
        children = {pid for pid, ppid in parent.items() if ppid in found} - found
        if not children:
            return sorted(found)
        found |= children


def _raylet_pid(directory: str) -> int:
    for pid in _pids_under(directory):
        with open(f"/proc/{pid}/cmdline", "rb") as cmdline:  # noqa: PTH123
            if Path(cmdline.read().split(b"\0")[0].decode()).name == "raylet":
                return pid
    raise AssertionError(f"no raylet found for the node in {directory}")


def _ray_start(ray_cli: str, args: list[str], env: dict[str, str], tries: int = 3) -> None:
    for attempt in range(tries):
        port = ["--dashboard-agent-listen-port", str(_free_port())]
        done = subprocess.run(
            [ray_cli, "start", *args, *port], env=env, capture_output=True, text=True, timeout=150
        )
        if done.returncode == 0:
            return
        if attempt == tries - 1:
            raise AssertionError(f"ray start {' '.join(args)} failed:\n{done.stderr[-3000:]}")


@pytest.fixture
def two_node_cluster(monkeypatch):
    """A head of 2 CPUs and a second node of 1 CPU on 127.0.0.1; yields (address, dirs)."""
    if not os.environ.get(FRESH):
        pytest.skip("runs in a child interpreter (test_node_loss_in_a_fresh_interpreter)")
    ray_cli = str(Path(sys.executable).parent / "ray")
    env = {
        **os.environ,
        "RAY_AUTH_MODE": "disabled",
        "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "1",
        "RAY_USAGE_STATS_ENABLED": "0",
        "RAY_health_check_period_ms": "500",
        "RAY_health_check_timeout_ms": "500",
        "RAY_health_check_failure_threshold": "3",
    }
    monkeypatch.setenv("RAY_AUTH_MODE", "disabled")
    dirs = [
        tempfile.mkdtemp(prefix="fleetgym-ray-head-"),
        tempfile.mkdtemp(prefix="fleetgym-ray-node-"),
    ]
    port = _free_port()
    common = ["--node-ip-address", "127.0.0.1", "--disable-usage-stats"]
    common += ["--include-log-monitor", "false"]
    head = ["--head", "--port", str(port), "--include-dashboard", "false", "--num-cpus", "2"]
    head += ["--ray-client-server-port", str(_free_port())]
    node = ["--address", f"127.0.0.1:{port}", "--num-cpus", "1"]
    try:
        for directory, args in zip(dirs, (head, node), strict=True):
            _ray_start(ray_cli, [*args, "--temp-dir", directory, *common], env)
        yield f"127.0.0.1:{port}", dirs
    finally:
        for directory in reversed(dirs):
            for pid in _pids_under(directory):
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
        for _ in range(200):
            if not any(_pids_under(d) for d in dirs):
                break
            time.sleep(0.05)
        left = [pid for d in dirs for pid in _pids_under(d)]
        for directory in dirs:
            shutil.rmtree(directory, ignore_errors=True)
        assert left == [], f"Ray processes left running: {left}"


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
        actors="ray",
        address=address,
        n_actors=3,
        steps_per_actor=32,
        max_policy_lag=1,
        epochs=1,
        minibatch_size=32,
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
            node_pids = set(_pids_under(dirs[1]))
            lost.extend(s for s, a in model.slots._actors.items() if a.pid in node_pids)
            os.kill(_raylet_pid(dirs[1]), signal.SIGKILL)
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
