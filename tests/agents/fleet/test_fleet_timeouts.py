"""Every wait of a fleet is bounded and visible: an actor that never answers ends the round.

The in-process and process backends here; the Ray backend's case is in test_fleet_ray.py
(it needs the Ray cluster that module starts). Each hung actor is a real one that stops
answering: a rollout blocked on an event (in-process) or a worker stopped with SIGSTOP.
No test asserts on wall-clock time; the timeouts are the fleets' own.
"""

from __future__ import annotations

import logging
import os
import signal
import threading
import time

import pytest

from fleetgym.agents.fleet import InProcessFleet, ProcessFleet, waiting
from fleetgym.agents.workloads import get_workload
from fleetgym.errors import FleetError

WORKLOAD = "CartPole-v1"


@pytest.fixture(scope="module")
def weights():
    return get_workload(WORKLOAD).make_policy().get_weights()


@pytest.fixture
def quick_wait_log(monkeypatch):
    """Report waits after 0.2 s (instead of seconds), so a short test sees the log line."""
    monkeypatch.setattr(waiting, "WAIT_LOG_AFTER_S", 0.2)
    monkeypatch.setattr(waiting, "WAIT_LOG_EVERY_S", 0.5)


def process_gone(pid: int) -> bool:
    """True once ``pid`` has exited (a zombie waiting to be reaped counts as exited)."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] == "Z"
    except (FileNotFoundError, ProcessLookupError):
        return True


def wait_gone(pid: int, polls: int = 600) -> None:
    """Poll (0.05 s apart) until ``pid`` has exited; fail if it never does."""
    for _ in range(polls):
        if process_gone(pid):
            return
        time.sleep(0.05)
    raise AssertionError(f"process {pid} is still running: an orphan")


class _SilentActor:
    """An actor whose rollout never answers until the test releases it."""

    release = threading.Event()

    def __init__(self, workload, actor_id, seed, incarnation):
        self.actor_id = actor_id

    def rollout(self, weights, steps, policy_version):
        _SilentActor.release.wait()
        raise RuntimeError("released by the test")


@pytest.mark.timeout(60)
def test_in_process_actor_that_never_answers_times_out(weights, quick_wait_log, caplog):
    _SilentActor.release.clear()
    fleet = InProcessFleet(
        WORKLOAD, max_actors=2, actor_factory=_SilentActor, actor_timeout=1.0, max_retries=0
    )
    try:
        with caplog.at_level(logging.INFO, logger="fleetgym.agents.fleet"):
            result = fleet.run_round(weights, 1, 8)
        assert not result.complete and result.trajectories == []
        [failure] = result.failures
        assert (failure.actor_id, failure.kind, failure.restarted) == (0, "timeout", False)
        assert "did not finish its rollout within actor_timeout=1.0 s" in failure.message
        assert "waiting for 1 of 1 rollout of actor 0" in caplog.text
        assert fleet.num_workers == 0  # the hung actor is never reused
        raising = InProcessFleet(
            WORKLOAD,
            max_actors=1,
            actor_factory=_SilentActor,
            actor_timeout=0.5,
            max_retries=0,
            on_incomplete="raise",
        )
        with pytest.raises(FleetError, match=r"actor_timeout=0\.5 s"):
            raising.run_round(weights, 1, 8)
    finally:
        _SilentActor.release.set()
    # No process was started; the abandoned threads end once their rollouts return.
    for thread in threading.enumerate():
        if thread.name.startswith("fleetgym rollout"):
            thread.join(30)
            assert not thread.is_alive()


class _SlowToBuild:
    def __init__(self, workload, actor_id, seed, incarnation):
        _SilentActor.release.wait()


@pytest.mark.timeout(60)
def test_in_process_actor_that_never_starts_raises(weights):
    _SilentActor.release.clear()
    fleet = InProcessFleet(WORKLOAD, max_actors=1, actor_factory=_SlowToBuild, startup_timeout=0.5)
    try:
        with pytest.raises(FleetError, match=r"actor 0: start of actor 0 did not finish within "):
            fleet.run_round(weights, 1, 8)
    finally:
        _SilentActor.release.set()


@pytest.mark.timeout(120)
def test_process_worker_that_never_answers_times_out_and_is_killed(weights, quick_wait_log, caplog):
    with ProcessFleet(
        WORKLOAD, max_actors=1, actor_timeout=2.0, max_retries=0, on_incomplete="raise"
    ) as fleet:
        fleet.prewarm(1)
        pid = fleet.worker_pids()[0]
        os.kill(pid, signal.SIGSTOP)
        try:
            with caplog.at_level(logging.INFO, logger="fleetgym.agents.fleet"):
                with pytest.raises(
                    FleetError, match=r"did not finish its rollout within actor_timeout=2\.0 s"
                ):
                    fleet.run_round(weights, 1, 8)
        finally:
            if not process_gone(pid):
                os.kill(pid, signal.SIGCONT)
        assert "waiting for 1 of 1 worker processes to return their rollouts" in caplog.text
        wait_gone(pid)
        assert fleet.num_workers == 0


@pytest.mark.timeout(30)
@pytest.mark.parametrize(
    ("cls", "name", "value", "error", "match"),
    [
        (InProcessFleet, "actor_timeout", 0, ValueError, r"actor_timeout: expected a finite"),
        (InProcessFleet, "startup_timeout", "60", TypeError, r"startup_timeout: expected a n"),
        (ProcessFleet, "actor_timeout", float("inf"), ValueError, r"actor_timeout: expected"),
    ],
)
def test_timeouts_are_validated(cls, name, value, error, match):
    with pytest.raises(error, match=match):
        cls(WORKLOAD, **{name: value})
