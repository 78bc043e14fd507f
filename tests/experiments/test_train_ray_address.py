"""``fleetgym train --backend ray --address HOST:PORT``: join a running Ray cluster.

A one-node cluster is started with ``ray start --head`` on 127.0.0.1 (tests/ray_nodes.py);
the command runs in a child interpreter (one that never started a local cluster, with
token authentication off, as a user's shell would) and must train on that cluster, not
start one of its own. An address nothing answers at is refused at once, in both modes.
"""

from __future__ import annotations

import subprocess
import sys

import pytest
from ray_nodes import NODE_ENV, ray_nodes

from fleetgym.cli import main

pytestmark = pytest.mark.ray

SMALL = ["--actors", "2", "--steps-per-actor", "16", "--max-steps", "64", "--no-progress"]


def _train(*argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "fleetgym", "train", *argv, *SMALL],
        env=NODE_ENV,
        capture_output=True,
        text=True,
        timeout=240,
    )


@pytest.mark.timeout(420)
def test_train_joins_the_cluster_at_address_in_both_modes():
    pytest.importorskip("ray")
    with ray_nodes([2]) as (address, _):
        run = _train("--mode", "async", "--backend", "ray", "--address", address)
        assert run.returncode == 1, run.stdout[-3000:] + run.stderr[-3000:]  # 64 steps < 475
        # Ray names the head by the address it reports (maybe not the loopback one asked)
        port = address.rpartition(":")[2]
        assert f":{port}; each actor slot {{'num_cpus': 1}}" in run.stdout
        assert "joined the Ray cluster at " in run.stdout and "started a local" not in run.stdout
        assert "64 env steps, 2 updates" in run.stdout
        run = _train("--backend", "ray", "--address", address)
        assert run.returncode == 1, run.stdout[-3000:] + run.stderr[-3000:]
        assert "backend ray" in run.stdout and "after 64 env steps, 2 rounds" in run.stdout


@pytest.mark.timeout(120)
@pytest.mark.parametrize("mode", ["async", "sync"])
def test_an_address_nothing_answers_at_is_refused(mode, capsys):
    pytest.importorskip("ray")
    argv = ["train", "--mode", mode, "--backend", "ray", "--address", "127.0.0.1:1", *SMALL]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "address: expected a Ray cluster to join at '127.0.0.1:1', actual nothing answers" in err


def test_address_needs_the_ray_backend(capsys):
    argv = ["train", "--mode", "async", "--address", "127.0.0.1:6379", *SMALL]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "--address: expected --backend ray, actual --backend inprocess" in err
