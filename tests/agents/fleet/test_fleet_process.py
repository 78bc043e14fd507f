"""ProcessFleet: real RolloutWorkers in local processes; elasticity, faults, shared memory.

Kept light for 2-core CI: at most 3 workers, rollouts of tens of steps. Fault tests use
the fleet's own generous timeouts; no test asserts on wall-clock time.
"""

from __future__ import annotations

import logging
import os
import signal
import time

import numpy as np
import pytest

from fleetgym.agents.fleet import InProcessFleet, ProcessFleet, make_fleet
from fleetgym.agents.types import ActorFleet
from fleetgym.agents.workloads import get_workload
from fleetgym.errors import FleetError

WORKLOAD = "CartPole-v1"


@pytest.fixture(scope="module")
def weights():
    return get_workload(WORKLOAD).make_policy().get_weights()


@pytest.fixture
def fleet():
    with ProcessFleet(WORKLOAD, max_actors=4, seed=7, actor_timeout=120.0) as pool:
        yield pool


def _wait_gone(pid: int) -> None:
    """Block until ``pid`` no longer exists (the forkserver reaps its children)."""
    for _ in range(2000):
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return
        time.sleep(0.005)
    raise AssertionError(f"process {pid} did not exit")


def _check_round(result, num_actors: int, steps: int) -> None:
    """Every requested actor exactly once, each with exactly ``steps`` steps."""
    assert result.complete
    assert [t.actor_id for t in result.trajectories] == list(range(num_actors))
    assert [t.actor_id for t in result.timings] == list(range(num_actors))
    assert all(len(t) == steps and t.obs.shape[0] == steps for t in result.trajectories)
    assert all(timing.num_steps == steps for timing in result.timings)


def test_round_returns_one_trajectory_per_actor(fleet, weights):
    assert isinstance(fleet, ActorFleet)
    assert fleet.prewarm(2) >= 0.0
    result = fleet.run_round(weights, 2, 16, policy_version=5)
    _check_round(result, 2, 16)
    assert result.failures == []
    assert all(t.policy_version == 5 for t in result.trajectories)
    # Pre-warmed slots are warm: no start-up billed to the round.
    assert [(t.cold_start, t.startup_s) for t in result.timings] == [(False, 0.0), (False, 0.0)]
    assert all(t.compute_s > 0 and t.cpu_s > 0 and t.transfer_s > 0 for t in result.timings)
    # A slot first used in a round is a cold start with its start-up measured.
    grown = fleet.run_round(weights, 3, 16, policy_version=6)
    _check_round(grown, 3, 16)
    assert [t.cold_start for t in grown.timings] == [False, False, True]
    assert grown.timings[2].startup_s > 0.0


def test_trajectories_match_the_in_process_backend(fleet, weights):
    # Same fleet seed, same slots, same weights: the same envs and random streams, so the
    # process backend reproduces the deterministic in-process backend exactly, also over
    # two rounds (episodes continue across rounds in both).
    reference = InProcessFleet(WORKLOAD, max_actors=4, seed=7)
    for version in (0, 1):
        ours = fleet.run_round(weights, 2, 40, policy_version=version)
        theirs = reference.run_round(weights, 2, 40, policy_version=version)
        for a, b in zip(ours.trajectories, theirs.trajectories, strict=True):
            for name in ("obs", "actions", "log_probs", "values", "rewards", "terminated"):
                np.testing.assert_array_equal(getattr(a, name), getattr(b, name), err_msg=name)
            assert a.episode_returns == b.episode_returns
            assert a.last_value == b.last_value
    reference.close()


def test_shrinking_parks_workers_and_growing_reuses_them(fleet, weights):
    fleet.prewarm(3)
    pids = fleet.worker_pids()
    assert sorted(pids) == [0, 1, 2]
    fleet.resize(1)
    assert fleet.num_workers == 3  # parked, not stopped
    small = fleet.run_round(weights, 1, 8)
    _check_round(small, 1, 8)
    fleet.resize(3)
    assert fleet.worker_pids() == pids  # the same processes: nothing rebuilt
    assert fleet.incarnations == {0: 0, 1: 0, 2: 0}
    big = fleet.run_round(weights, 3, 8)
    assert [t.cold_start for t in big.timings] == [False, False, False]


def test_stop_idle_stops_extras_and_regrows_only_missing_slots(weights):
    with ProcessFleet(WORKLOAD, max_actors=3, seed=0, stop_idle=True) as fleet:
        fleet.prewarm(3)
        first = fleet.worker_pids()
        fleet.run_round(weights, 1, 8)
        for pid in (first[1], first[2]):
            _wait_gone(pid)
        assert fleet.num_workers == 1
        result = fleet.run_round(weights, 3, 8)
        _check_round(result, 3, 8)
        assert [t.cold_start for t in result.timings] == [False, True, True]
        assert fleet.worker_pids()[0] == first[0]
        assert fleet.incarnations == {0: 0, 1: 1, 2: 1}


class _KillOnDispatch(logging.Handler):
    """SIGKILLs a worker right after the fleet has sent it its rollout command.

    Hooks the fleet's debug record ``worker %d dispatched to pid %s (actors %s)``.
    """

    def __init__(self, worker: int) -> None:
        super().__init__(logging.DEBUG)
        self.worker, self.killed = worker, []

    def emit(self, record: logging.LogRecord) -> None:
        if self.killed or record.args[0] != self.worker:  # type: ignore[index]
            return
        pid = record.args[1]  # type: ignore[index]
        os.kill(pid, signal.SIGKILL)
        self.killed.append(pid)


def _round_killing(fleet, worker: int, *args, **kwargs):
    """``fleet.run_round(*args)`` with worker ``worker`` SIGKILLed right after dispatch."""
    process_logger = logging.getLogger("fleetgym.agents.fleet.process")
    handler = _KillOnDispatch(worker)
    previous = process_logger.level
    process_logger.setLevel(logging.DEBUG)
    process_logger.addHandler(handler)
    try:
        result = fleet.run_round(*args, **kwargs)
    finally:
        process_logger.removeHandler(handler)
        process_logger.setLevel(previous)
    assert len(handler.killed) == 1
    return result, handler


def test_actor_killed_mid_round_is_replaced_and_rerun(fleet, weights):
    fleet.prewarm(3)
    result, handler = _round_killing(fleet, 1, weights, 3, 200, policy_version=3)
    # All three trajectories, none twice, each exactly 200 steps.
    _check_round(result, 3, 200)
    assert len({id(t) for t in result.trajectories}) == 3
    [failure] = result.failures
    assert (failure.actor_id, failure.kind, failure.restarted, failure.rerun) == (
        1,
        "crash",
        True,
        True,
    )
    assert "-9" in failure.message
    # The re-run happened on a new incarnation (fresh env, cold start) of slot 1 only.
    assert fleet.incarnations == {0: 0, 1: 1, 2: 0}
    assert [t.cold_start for t in result.timings] == [False, True, False]
    assert fleet.worker_pids()[1] != handler.killed[0]
    # The pool keeps working.
    _check_round(fleet.run_round(weights, 3, 10), 3, 10)


def test_hung_actor_times_out_and_is_rerun(weights):
    # actor_timeout of 5 s: far above a 16-step CartPole rollout, so only the stopped
    # (SIGSTOP) worker can exceed it.
    with ProcessFleet(WORKLOAD, max_actors=2, seed=1, actor_timeout=5.0) as fleet:
        fleet.prewarm(2)
        hung = fleet.worker_pids()[0]
        os.kill(hung, signal.SIGSTOP)
        result = fleet.run_round(weights, 2, 16)
        _check_round(result, 2, 16)
        [failure] = result.failures
        assert (failure.actor_id, failure.kind, failure.rerun) == (0, "timeout", True)
        assert "actor_timeout=5.0" in failure.message
        _wait_gone(hung)  # the straggler was killed, not left behind


def test_worker_killed_while_parked_is_restarted_before_its_rollout(fleet, weights):
    fleet.prewarm(2)
    victim = fleet.worker_pids()[1]
    os.kill(victim, signal.SIGKILL)
    _wait_gone(victim)
    result = fleet.run_round(weights, 2, 12)
    _check_round(result, 2, 12)
    [failure] = result.failures
    assert (failure.actor_id, failure.kind, failure.restarted, failure.rerun) == (
        1,
        "crash",
        True,
        False,
    )
    assert "between rounds" in failure.message
    assert result.timings[1].cold_start


class _BrokenActor:
    """A throwaway actor whose rollout always raises (the fleet must report, not hang)."""

    def __init__(self, workload, actor_id, seed, incarnation):
        self.actor_id = actor_id

    def rollout(self, weights, steps, policy_version):
        raise RuntimeError(f"actor {self.actor_id} is broken")


def test_actor_that_keeps_failing_gives_a_documented_partial_round(weights):
    with ProcessFleet(WORKLOAD, max_actors=2, seed=0, actor_factory=_BrokenActor) as fleet:
        result = fleet.run_round(weights, 1, 8)
    assert not result.complete
    assert result.trajectories == [] and result.timings == []
    # One failure per attempt: the first restarted the actor, the re-run failed too.
    assert [(f.kind, f.restarted, f.rerun) for f in result.failures] == [
        ("error", True, False),
        ("error", False, False),
    ]
    assert "actor 0 is broken" in result.failures[0].message


def test_on_incomplete_raise(weights):
    with ProcessFleet(
        WORKLOAD, max_actors=1, actor_factory=_BrokenActor, max_retries=0, on_incomplete="raise"
    ) as fleet:
        with pytest.raises(FleetError, match=r"expected 1 trajectories, actual 0"):
            fleet.run_round(weights, 1, 8)


class _BrokenAtStart:
    def __init__(self, workload, actor_id, seed, incarnation):
        raise OSError("no such device")


def test_worker_that_cannot_start_raises_on_prewarm():
    with ProcessFleet(WORKLOAD, max_actors=1, actor_factory=_BrokenAtStart) as fleet:
        with pytest.raises(FleetError, match=r"(?s)worker 0 failed to start.*no such device"):
            fleet.prewarm(1)


@pytest.mark.parametrize("shared_obs", [True, False])
def test_atari_frames_travel_through_shared_memory(shared_obs):
    # 4x84x84 uint8 stacked frames: through a per-slot shared-memory buffer, or the pipe.
    workload = get_workload("QbertNoFrameskip-v4")
    weights = workload.make_policy().get_weights()
    with ProcessFleet(workload, max_actors=1, seed=2, shared_obs=shared_obs) as fleet:
        result = fleet.run_round(weights, 1, 6)
        snapshot = result.trajectories[0].obs.copy()
        later = fleet.run_round(weights, 1, 6)
        if shared_obs:
            assert fleet._obs_segments[0].size >= 6 * 4 * 84 * 84
        else:
            assert fleet._obs_segments == {}
    reference = InProcessFleet(workload, max_actors=1, seed=2).run_round(weights, 1, 6)
    [ours], [theirs] = result.trajectories, reference.trajectories
    assert ours.obs.shape == (6, 4, 84, 84) and ours.obs.dtype == np.uint8
    np.testing.assert_array_equal(ours.obs, theirs.obs)
    # The next round reuses the buffer; the first round's frames must be a copy of it.
    assert not np.array_equal(later.trajectories[0].obs, snapshot)
    np.testing.assert_array_equal(ours.obs, snapshot)


def test_argument_errors(fleet, weights):
    with pytest.raises(ValueError, match=r"num_actors: expected an int in \[1, 4\], actual 5"):
        fleet.run_round(weights, 5, 8)
    with pytest.raises(ValueError, match=r"num_actors: expected an int in \[1, 4\], actual 0"):
        fleet.run_round(weights, 0, 8)
    with pytest.raises(TypeError, match=r"num_actors: expected an int, actual bool"):
        fleet.run_round(weights, True, 8)
    with pytest.raises(
        ValueError, match=r"steps_per_actor: expected an int (>= 1|in \[1, \d+\]), actual 0"
    ):
        fleet.run_round(weights, 1, 0)
    with pytest.raises(TypeError, match=r"weights: expected dict\[str, np.ndarray\], actual list"):
        fleet.run_round([], 1, 8)
    with pytest.raises(TypeError, match=r"weights\['a'\]: expected np.ndarray, actual list"):
        fleet.run_round({"a": [1.0]}, 1, 8)
    bad = dict(weights)
    key = next(iter(bad))
    bad[key] = np.zeros((3, 3), np.float32)
    with pytest.raises(ValueError, match=r"weights: expected the CartPole-v1 policy's state_dict"):
        fleet.run_round(bad, 1, 8)
    with pytest.raises(ValueError, match=r"actor_timeout: expected a finite number > 0"):
        ProcessFleet(WORKLOAD, actor_timeout=0)
    with pytest.raises(TypeError, match=r"startup_timeout: expected a number"):
        ProcessFleet(WORKLOAD, startup_timeout="60")
    with pytest.raises(ValueError, match=r"actors_per_worker: expected an int >= 1, actual 0"):
        ProcessFleet(WORKLOAD, actors_per_worker=0)
    with pytest.raises(ValueError, match=r"context: expected one of"):
        ProcessFleet(WORKLOAD, context="threads")
    with pytest.raises(ValueError, match=r"max_actors: expected an int in \[1, 4096\], actual 0"):
        ProcessFleet(WORKLOAD, max_actors=0)
    with pytest.raises(ValueError, match=r"on_incomplete: expected 'partial' or 'raise'"):
        ProcessFleet(WORKLOAD, on_incomplete="ignore")
    with pytest.raises(ValueError, match=r"backend: expected one of"):
        make_fleet(WORKLOAD, backend="threads")


def test_close_stops_every_worker_and_is_idempotent(weights):
    fleet = make_fleet(WORKLOAD, backend="process", max_actors=2, seed=0)
    fleet.prewarm(2)
    pids = list(fleet.worker_pids().values())
    fleet.close()
    fleet.close()
    for pid in pids:
        _wait_gone(pid)
    assert fleet.num_workers == 0
    with pytest.raises(FleetError, match=r"ProcessFleet is closed"):
        fleet.run_round(weights, 1, 8)


def test_grouped_workers_run_their_slots_in_lockstep(weights):
    # Two slots per process: 3 actors need 2 processes; slot 3 (in the second process)
    # is not part of the first round, so its environment must stay untouched.
    reference = InProcessFleet(WORKLOAD, max_actors=4, seed=5)
    with ProcessFleet(WORKLOAD, max_actors=4, seed=5, actors_per_worker=2) as fleet:
        fleet.prewarm(3)
        assert fleet.num_workers == 2
        pids = fleet.worker_pids()
        assert pids[0] == pids[1] != pids[2] == pids[3]
        first = fleet.run_round(weights, 3, 30)
        second = fleet.run_round(weights, 4, 30)
    _check_round(first, 3, 30)
    _check_round(second, 4, 30)
    expected_first = reference.run_round(weights, 3, 30)
    expected_second = reference.run_round(weights, 4, 30)
    for ours, theirs in [(first, expected_first), (second, expected_second)]:
        for a, b in zip(ours.trajectories, theirs.trajectories, strict=True):
            # Lockstep batching changes only float rounding of the forward (~1e-7).
            np.testing.assert_array_equal(a.obs, b.obs)
            np.testing.assert_array_equal(a.actions, b.actions)
            np.testing.assert_allclose(a.log_probs, b.log_probs, atol=1e-5)
    # Slots 0 and 1 shared one lockstep rollout: its time is split equally.
    assert first.timings[0].compute_s == first.timings[1].compute_s


def test_killed_grouped_worker_reruns_all_its_actors(weights):
    with ProcessFleet(WORKLOAD, max_actors=4, seed=5, actors_per_worker=2) as fleet:
        fleet.prewarm(4)
        result, _ = _round_killing(fleet, 0, weights, 4, 100)
        _check_round(result, 4, 100)
        assert [(f.actor_id, f.kind, f.rerun) for f in result.failures] == [
            (0, "crash", True),
            (1, "crash", True),
        ]
        assert fleet.incarnations == {0: 1, 1: 1, 2: 0, 3: 0}
        assert [t.cold_start for t in result.timings] == [True, True, False, False]
