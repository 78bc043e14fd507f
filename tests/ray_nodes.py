"""Ray clusters of real nodes on 127.0.0.1 for tests: ``ray start`` a head (and more nodes),
each with its own temp dir, and kill every process of theirs by PID afterwards (never
``ray stop``, which would stop other clusters on the machine).

A driver that joins such a cluster must run with ``RAY_AUTH_MODE=disabled`` in an
interpreter that never started a local cluster (Ray then sets token authentication in
its environment); :data:`NODE_ENV` is that environment for a child process.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

#: The environment of ``ray start`` and of a driver joining the test cluster: no token to
#: share between nodes; a node death noticed within about 2 s.
NODE_ENV = {
    **os.environ,
    "RAY_AUTH_MODE": "disabled",
    "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "1",
    "RAY_USAGE_STATS_ENABLED": "0",
    "RAY_health_check_period_ms": "500",
    "RAY_health_check_timeout_ms": "500",
    "RAY_health_check_failure_threshold": "3",
}


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def pids_under(directory: str) -> list[int]:
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


def raylet_pid(directory: str) -> int:
    """The PID of the raylet of the node whose temp dir is ``directory``."""
    for pid in pids_under(directory):
        with open(f"/proc/{pid}/cmdline", "rb") as cmdline:  # noqa: PTH123
            if Path(cmdline.read().split(b"\0")[0].decode()).name == "raylet":
                return pid
    raise AssertionError(f"no raylet found for the node in {directory}")


def _ray_start(args: list[str], tries: int = 3) -> None:
    ray_cli = str(Path(sys.executable).parent / "ray")
    for attempt in range(tries):
        port = ["--dashboard-agent-listen-port", str(free_port())]
        done = subprocess.run(
            [ray_cli, "start", *args, *port],
            env=NODE_ENV,
            capture_output=True,
            text=True,
            timeout=150,
        )
        if done.returncode == 0:
            return
        if attempt == tries - 1:
            raise AssertionError(f"ray start {' '.join(args)} failed:\n{done.stderr[-3000:]}")


@contextlib.contextmanager
def ray_nodes(cpus: list[int]) -> Iterator[tuple[str, list[str]]]:
    """Nodes of ``cpus[i]`` CPUs each (the first is the head); yields ``(address, dirs)``.

    Raises:
        AssertionError: If a node does not start, or a process of theirs outlives teardown.
    """
    dirs = [tempfile.mkdtemp(prefix=f"fleetgym-ray-node{i}-") for i in range(len(cpus))]
    port = free_port()
    common = ["--node-ip-address", "127.0.0.1", "--disable-usage-stats"]
    common += ["--include-log-monitor", "false"]
    try:
        for i, (directory, n) in enumerate(zip(dirs, cpus, strict=True)):
            if i == 0:
                role = ["--head", "--port", str(port), "--include-dashboard", "false"]
                role += ["--ray-client-server-port", str(free_port())]
            else:
                role = ["--address", f"127.0.0.1:{port}"]
            _ray_start([*role, "--num-cpus", str(n), "--temp-dir", directory, *common])
        yield f"127.0.0.1:{port}", dirs
    finally:
        for directory in reversed(dirs):
            for pid in pids_under(directory):
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
        for _ in range(200):
            if not any(pids_under(d) for d in dirs):
                break
            time.sleep(0.05)
        left = [pid for d in dirs for pid in pids_under(d)]
        for directory in dirs:
            shutil.rmtree(directory, ignore_errors=True)
        assert left == [], f"Ray processes left running: {left}"
