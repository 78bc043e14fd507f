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
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import pytest

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
def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def _pids_under(directory: str) -> list[int]:
    """A node's processes: those whose command line names ``directory`` (its temp dir), and
    their descendants (Ray workers retitle themselves ``ray::...``)."""
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
        if fields[0] != "Z":  # a zombie has exited already
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
    """``ray start`` with a fresh agent port per try: a port found free can be taken by
    another process before Ray binds it, which fails the start on a busy machine."""
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
    """``ray start`` a head and a second node on 127.0.0.1, one CPU each; yields the address."""
    if not os.environ.get(FRESH):
        pytest.skip("runs in a child interpreter (test_lost_node_in_a_fresh_interpreter)")
    ray_cli = str(Path(sys.executable).parent / "ray")
    # A loopback test cluster: no token to share between its nodes; a node death is
    # noticed within about 2 s instead of Ray's default tens of seconds.
    env = {
        **os.environ,
        "RAY_AUTH_MODE": "disabled",
        "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "1",  # a multi-node cluster, on any OS
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
    common = ["--node-ip-address", "127.0.0.1", "--num-cpus", "1", "--disable-usage-stats"]
    common += ["--include-log-monitor", "false"]
    head = ["--head", "--port", str(port), "--include-dashboard", "false"]
    head += ["--ray-client-server-port", str(_free_port())]
    node = ["--address", f"127.0.0.1:{port}"]
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


#: Set in the child interpreter that runs the two-node test (see the test below).
FRESH = "FLEETGYM_TEST_FRESH_INTERPRETER"


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
        node_pids = set(_pids_under(dirs[1]))
        [lost] = [s for s, pid in fleet.worker_pids().items() if pid in node_pids]
        raylet = _raylet_pid(dirs[1])
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
