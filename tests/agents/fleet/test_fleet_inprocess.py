"""InProcessFleet (sequential and lockstep-batched), plus make_fleet and the shared checks."""

from __future__ import annotations

import numpy as np
import pytest

from fleetgym.agents.fleet import BACKENDS, InProcessFleet, make_fleet
from fleetgym.agents.rollout import RolloutWorker
from fleetgym.agents.types import ActorFleet
from fleetgym.agents.workloads import get_workload
from fleetgym.errors import FleetError, UnknownWorkloadError

WORKLOAD = "CartPole-v1"
FIELDS = ("obs", "actions", "log_probs", "values", "rewards", "terminated", "truncated")


@pytest.fixture(scope="module")
def weights():
    return get_workload(WORKLOAD).make_policy().get_weights()


def _same(a, b) -> None:
    for name in FIELDS:
        np.testing.assert_array_equal(getattr(a, name), getattr(b, name), err_msg=name)
    assert a.episode_returns == b.episode_returns and a.last_value == b.last_value


def test_round_shape_and_timing(weights):
    fleet = InProcessFleet(WORKLOAD, max_actors=4, seed=0)
    assert isinstance(fleet, ActorFleet)
    result = fleet.run_round(weights, 3, 20, policy_version=2)
    assert result.complete and result.failures == []
    assert [t.actor_id for t in result.trajectories] == [0, 1, 2]
    assert all(len(t) == 20 and t.policy_version == 2 for t in result.trajectories)
    first = result.timings
    assert all(t.cold_start and t.startup_s > 0 and t.compute_s > 0 for t in first)
    assert all(t.transfer_s == 0.0 and t.num_steps == 20 for t in first)
    # Sequential: the round's wall time contains every actor's start-up and compute.
    assert result.wall_s >= sum(t.startup_s + t.compute_s for t in first)
    second = fleet.run_round(weights, 3, 20).timings
    assert [(t.cold_start, t.startup_s) for t in second] == [(False, 0.0)] * 3
    fleet.close()


def test_same_seed_same_round_other_seed_another(weights):
    rounds = [
        InProcessFleet(WORKLOAD, max_actors=2, seed=s).run_round(weights, 2, 50) for s in (4, 4, 5)
    ]
    for a, b in zip(rounds[0].trajectories, rounds[1].trajectories, strict=True):
        _same(a, b)
    assert not np.array_equal(rounds[0].trajectories[0].obs, rounds[2].trajectories[0].obs)
    # Slots are independent streams: slot 0 and slot 1 of one fleet differ.
    assert not np.array_equal(rounds[0].trajectories[0].obs, rounds[0].trajectories[1].obs)


def test_environments_persist_between_rounds(weights):
    # Two rounds of 30 steps on a slot are the first and second halves of one 60-step
    # rollout: the env (and the sampling stream) carries over, episodes span rounds.
    split = InProcessFleet(WORKLOAD, max_actors=1, seed=3)
    halves = [split.run_round(weights, 1, 30).trajectories[0] for _ in range(2)]
    whole = InProcessFleet(WORKLOAD, max_actors=1, seed=3).run_round(weights, 1, 60)
    [full] = whole.trajectories
    for name in FIELDS:
        np.testing.assert_array_equal(
            np.concatenate([getattr(h, name) for h in halves]), getattr(full, name)
        )
    assert halves[0].episode_returns + halves[1].episode_returns == full.episode_returns


def test_batched_matches_sequential_and_apportions_time(weights):
    sequential = InProcessFleet(WORKLOAD, max_actors=4, seed=9).run_round(weights, 4, 40)
    batched = InProcessFleet(WORKLOAD, max_actors=4, seed=9, batched=True).run_round(weights, 4, 40)
    assert batched.complete
    for a, b in zip(sequential.trajectories, batched.trajectories, strict=True):
        # Same envs and random streams; only the batched forward's float rounding
        # differs (~1e-7), far too little to flip a sampled action over 40 steps.
        np.testing.assert_array_equal(a.actions, b.actions)
        np.testing.assert_array_equal(a.obs, b.obs)
        np.testing.assert_allclose(a.log_probs, b.log_probs, atol=1e-5)
        np.testing.assert_allclose(a.values, b.values, atol=1e-5)
    # The lockstep time is split equally: every slot did the same number of steps.
    assert len({t.compute_s for t in batched.timings}) == 1
    assert batched.timings[0].compute_s > 0


@pytest.mark.parametrize(
    ("name", "shape", "dtype"),
    [
        ("CartPole-v1", (4,), np.float32),
        ("Hopper-v5", (11,), np.float64),
        ("QbertNoFrameskip-v4", (4, 84, 84), np.uint8),
    ],
)
@pytest.mark.parametrize("batched", [False, True])
def test_observations_of_every_workload_family(name, shape, dtype, batched):
    workload = get_workload(name)
    weights = workload.make_policy().get_weights()
    with InProcessFleet(workload, max_actors=2, seed=0, batched=batched) as fleet:
        result = fleet.run_round(weights, 2, 4)
    assert result.complete
    for trajectory in result.trajectories:
        assert trajectory.obs.shape == (4, *shape) and trajectory.obs.dtype == dtype


class _FlakyOnce:
    """Incarnation 0 of slot 1 raises; everything else is a real RolloutWorker."""

    def __init__(self, workload, actor_id, seed, incarnation):
        self.fail = actor_id == 1 and incarnation == 0
        self.worker = RolloutWorker(workload, actor_id, seed, incarnation)

    def rollout(self, weights, steps, policy_version):
        if self.fail:
            raise RuntimeError("env lost")
        return self.worker.rollout(weights, steps, policy_version)


def test_failing_actor_is_rebuilt_and_rerun(weights):
    fleet = InProcessFleet(WORKLOAD, max_actors=3, seed=0, actor_factory=_FlakyOnce)
    result = fleet.run_round(weights, 3, 10)
    assert result.complete
    assert [t.actor_id for t in result.trajectories] == [0, 1, 2]
    [failure] = result.failures
    assert (failure.actor_id, failure.kind, failure.restarted, failure.rerun) == (
        1,
        "error",
        True,
        True,
    )
    assert failure.message == "RuntimeError: env lost"
    assert fleet.incarnations == {0: 0, 1: 1, 2: 0}
    # The re-run is slot 1's incarnation 1: it equals a fresh worker of that incarnation.
    fresh = RolloutWorker(WORKLOAD, 1, 0, incarnation=1).rollout(weights, 10, 0)
    _same(result.trajectories[1], fresh)


class _AlwaysFails:
    def __init__(self, workload, actor_id, seed, incarnation):
        pass

    def rollout(self, weights, steps, policy_version):
        raise ValueError("broken actor")


def test_partial_round_or_raise(weights):
    result = InProcessFleet(WORKLOAD, actor_factory=_AlwaysFails).run_round(weights, 2, 5)
    assert not result.complete and result.trajectories == []
    assert [(f.actor_id, f.restarted, f.rerun) for f in result.failures] == [
        (0, True, False),
        (0, False, False),
        (1, True, False),
        (1, False, False),
    ]
    strict = InProcessFleet(WORKLOAD, actor_factory=_AlwaysFails, on_incomplete="raise")
    with pytest.raises(FleetError, match=r"expected 2 trajectories, actual 0 \(actors \[0, 1\]"):
        strict.run_round(weights, 2, 5)


def test_batched_fault_rebuilds_the_batch_and_reruns(weights):
    fleet = InProcessFleet(WORKLOAD, max_actors=2, seed=0, batched=True)
    fleet.prewarm(2)
    broken_env = fleet._actors[1].env  # type: ignore[attr-defined]

    def broken_step(action):
        raise RuntimeError("simulator fault")

    broken_env.step = broken_step
    result = fleet.run_round(weights, 2, 8)
    assert result.complete
    assert [(f.actor_id, f.kind, f.rerun) for f in result.failures] == [
        (0, "error", True),
        (1, "error", True),
    ]
    assert fleet.incarnations == {0: 1, 1: 1}
    assert all(t.cold_start for t in result.timings)


def test_argument_errors(weights):
    fleet = InProcessFleet(WORKLOAD, max_actors=2)
    with pytest.raises(ValueError, match=r"num_actors: expected an int in \[1, 2\], actual 3"):
        fleet.run_round(weights, 3, 5)
    with pytest.raises(TypeError, match=r"steps_per_actor: expected an int, actual float"):
        fleet.run_round(weights, 1, 5.0)
    with pytest.raises(ValueError, match=r"policy_version: expected an int >= 0, actual -1"):
        fleet.run_round(weights, 1, 5, policy_version=-1)
    with pytest.raises(ValueError, match=r"weights: expected the CartPole-v1 policy's state_dict"):
        fleet.run_round({k: v for k, v in list(weights.items())[1:]}, 1, 5)
    with pytest.raises(TypeError, match=r"batched: expected a bool, actual int"):
        InProcessFleet(WORKLOAD, batched=1)
    with pytest.raises(ValueError, match=r"batched: expected the default actor factory"):
        InProcessFleet(WORKLOAD, batched=True, actor_factory=_AlwaysFails)
    with pytest.raises(TypeError, match=r"actor_factory: expected a callable"):
        InProcessFleet(WORKLOAD, actor_factory=3)
    with pytest.raises(TypeError, match=r"max_retries: expected an int"):
        InProcessFleet(WORKLOAD, max_retries=None)
    with pytest.raises(UnknownWorkloadError, match=r"unknown workload"):
        InProcessFleet("Pong-v9")
    with pytest.raises(TypeError, match=r"workload: expected a name"):
        InProcessFleet(42)
    fleet.close()
    with pytest.raises(FleetError, match=r"InProcessFleet is closed"):
        fleet.run_round(weights, 1, 5)


def test_make_fleet_builds_each_local_backend():
    assert BACKENDS == ("inprocess", "process", "ray")
    with make_fleet(WORKLOAD, max_actors=3, seed=1, batched=True) as fleet:
        assert type(fleet).__name__ == "InProcessFleet" and fleet.batched
        assert (fleet.max_actors, fleet.seed) == (3, 1)
    with make_fleet(WORKLOAD, "process", max_actors=2, stop_idle=True) as fleet:
        assert type(fleet).__name__ == "ProcessFleet" and fleet.stop_idle
    with pytest.raises(TypeError, match=r"unexpected keyword argument 'batched'"):
        make_fleet(WORKLOAD, "process", batched=True)


class _FirstIncarnationFails:
    """Slot 0's first incarnation always raises; every other actor is a real worker."""

    def __init__(self, workload, actor_id, seed, incarnation):
        self.broken = actor_id == 0 and incarnation == 0
        self.worker = RolloutWorker(workload, actor_id, seed, incarnation)

    def rollout(self, weights, steps, policy_version):
        if self.broken:
            raise RuntimeError("broken for good")
        return self.worker.rollout(weights, steps, policy_version)


def test_slot_that_failed_for_good_starts_fresh_next_round(weights):
    # With no retry left the slot is left out of the round; like a crashed worker process,
    # its broken actor must not be reused: the next round starts a new incarnation (cold).
    fleet = InProcessFleet(WORKLOAD, max_actors=2, seed=0, max_retries=0,
                           actor_factory=_FirstIncarnationFails)  # fmt: skip
    first = fleet.run_round(weights, 2, 6)
    assert [t.actor_id for t in first.trajectories] == [1]
    assert [(f.actor_id, f.restarted) for f in first.failures] == [(0, False)]
    second = fleet.run_round(weights, 2, 6)
    assert second.complete and second.failures == []
    assert fleet.incarnations == {0: 1, 1: 0}
    assert [t.cold_start for t in second.timings] == [True, False]


def test_batched_fleet_that_failed_for_good_starts_fresh_next_round(weights):
    fleet = InProcessFleet(WORKLOAD, max_actors=2, seed=0, batched=True, max_retries=0)
    fleet.prewarm(2)

    def broken_step(action):
        raise RuntimeError("simulator fault")

    fleet._actors[1].env.step = broken_step  # type: ignore[attr-defined]
    assert fleet.run_round(weights, 2, 8).trajectories == []
    second = fleet.run_round(weights, 2, 8)
    assert second.complete and second.failures == []
    assert fleet.incarnations == {0: 1, 1: 1}
    assert all(t.cold_start for t in second.timings)


class _CloseFails(_FirstIncarnationFails):
    closed: list[int] = []

    def close(self):
        if self.worker.actor_id == 0:
            raise RuntimeError("env already gone")
        self.worker.close()
        _CloseFails.closed.append(self.worker.actor_id)


def test_close_releases_every_actor_even_if_one_fails_to_close(weights):
    fleet = InProcessFleet(WORKLOAD, max_actors=3, seed=0, actor_factory=_CloseFails)
    fleet.prewarm(3)
    fleet.close()  # slot 0's close raises: logged, the others are still closed
    assert fleet.closed and fleet.num_workers == 0 and sorted(_CloseFails.closed) == [1, 2]
