"""The pipeline simulation on cases whose figures are computable by hand.

Every case uses deterministic step times (one measured value), so a round's time, the
throughput and the learner's utilisation follow from the module docstring's loop; the
tolerances are float rounding, not tuned.
"""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from fleetgym.agents.planning import (
    ActorTimes,
    LearnerTimes,
    NetworkLinks,
    PipelineShape,
    ServerTimes,
    simulate,
)


def _actor(step_s: float = 0.001, delays: tuple[float, ...] | None = None) -> ActorTimes:
    return ActorTimes(step_s=(step_s,), delays_s=delays)


def test_sync_round_is_the_slowest_actor_plus_the_update():
    # Rollouts of 100 steps: 0.1 s, 0.2 s and 0.4 s; update 0.1 s -> 0.5 s per round.
    shape = PipelineShape(n_actors=3, steps_per_actor=100)
    actor = _actor(delays=(0.0, 0.001, 0.003))
    result = simulate(shape, actor, LearnerTimes(0.1, 0.0), updates=6, warmup_updates=2)
    assert result.env_steps_per_s == pytest.approx(300 / 0.5)
    assert result.learner_utilisation == pytest.approx(0.1 / 0.5)
    assert result.wall_s == pytest.approx(4 * 0.5)
    assert result.lag_samples == {0: 4 * 300}  # a barrier: every sample fresh
    assert result.dropped_fraction == 0.0
    assert result.max_outstanding <= shape.capacity


def test_sync_from_the_start_counts_the_first_round():
    shape = PipelineShape(n_actors=2, steps_per_actor=10)
    result = simulate(shape, _actor(), LearnerTimes(0.01, 1e-3), updates=3, warmup_updates=0)
    round_s = 10 * 0.001 + 0.01 + 1e-3 * 20
    assert result.env_steps_per_s == pytest.approx(20 / round_s)
    assert result.updates == 3


def test_async_learner_bound_keeps_the_learner_busy_at_the_bound():
    # Rollouts of 10 ms, updates of 1 s: the learner is the bottleneck.
    shape = PipelineShape(n_actors=2, steps_per_actor=10, max_policy_lag=4)
    result = simulate(shape, _actor(), LearnerTimes(1.0, 0.0), updates=12, warmup_updates=6)
    assert result.env_steps_per_s == pytest.approx(20 / 1.0)
    assert result.learner_utilisation == pytest.approx(1.0)
    # Consumed in admission order, every trajectory is exactly max_policy_lag old.
    assert set(result.lag_samples) == {4}
    assert result.dropped_fraction == 0.0
    assert result.max_outstanding == shape.capacity == 10
    assert result.actor_wait_fraction > 0.9  # actors wait for tickets almost always


def test_async_actor_bound_sums_the_actors_rates():
    # 1,000 and 500 steps/s; the learner is instantaneous.
    shape = PipelineShape(n_actors=2, steps_per_actor=100, max_policy_lag=4)
    actor = _actor(delays=(0.0, 0.001))
    result = simulate(shape, actor, LearnerTimes(0.0, 0.0), updates=40, warmup_updates=10)
    assert result.env_steps_per_s == pytest.approx(1500, rel=0.02)
    assert result.learner_utilisation == 0.0


def test_async_beats_sync_on_a_long_tail_and_utilisation_stays_below_one():
    actor = ActorTimes(step_s=(2e-4, 5e-4, 1e-3), delay_s=0.002, delay_sigma=1.0)
    learner = LearnerTimes(0.01, 2e-5)
    results = {}
    for lag in (0, 4):
        shape = PipelineShape(n_actors=16, steps_per_actor=64, max_policy_lag=lag)
        results[lag] = simulate(shape, actor, learner, updates=10, seed=3)
        assert 0.0 <= results[lag].learner_utilisation <= 1.0
        assert results[lag].max_outstanding <= shape.capacity
    assert results[4].env_steps_per_s > 1.5 * results[0].env_steps_per_s
    assert results[4].learner_utilisation > results[0].learner_utilisation


def test_same_seed_same_result_other_seed_other_draws():
    shape = PipelineShape(n_actors=4, steps_per_actor=32, max_policy_lag=2)
    actor = ActorTimes(step_s=(1e-4, 1e-3), delay_s=1e-3, delay_sigma=0.5)
    learner = LearnerTimes(0.005, 1e-5)
    first = simulate(shape, actor, learner, updates=8, seed=7)
    assert simulate(shape, actor, learner, updates=8, seed=7) == first
    assert simulate(shape, actor, learner, updates=8, seed=8) != first


def test_shared_slot_serialises_the_actors():
    # One slot (threads under the GIL): 2 x 10 steps of 1 ms one after the other.
    actor = _actor()
    learner = LearnerTimes(0.1, 0.0)
    one = PipelineShape(n_actors=2, steps_per_actor=10, cpu_slots=1)
    two = PipelineShape(n_actors=2, steps_per_actor=10, cpu_slots=2)
    r1 = simulate(one, actor, learner, updates=4, warmup_updates=1)
    r2 = simulate(two, actor, learner, updates=4, warmup_updates=1)
    assert r1.env_steps_per_s == pytest.approx(20 / (0.02 + 0.1))
    assert r2.env_steps_per_s == pytest.approx(20 / (0.01 + 0.1))


def test_hand_over_cost_applies_to_woken_steps_only():
    # Async, one slot: the learner always holds a piece, so every woken step waits.
    learner = LearnerTimes(1.0, 0.0)
    woken = PipelineShape(2, 10, max_policy_lag=1, cpu_slots=1, switch_s=1e-3)
    running = PipelineShape(2, 10, max_policy_lag=1, cpu_slots=1, switch_s=1e-3)
    waiting_actor = _actor(delays=(1e-4, 1e-4))
    slow = simulate(woken, waiting_actor, learner, updates=4)
    fast = simulate(running, _actor(), learner, updates=4)
    # Woken steps each add 1 ms to the slot; steps that run on add nothing.
    assert slow.env_steps_per_s < fast.env_steps_per_s


def test_server_batches_every_waiting_actor_at_once():
    # 4 actors on one server; env steps free; every forward 1 ms whatever its size.
    server = ServerTimes(batch_sizes=(1, 256), forward_s=(0.001, 0.001))
    shape = PipelineShape(n_actors=4, steps_per_actor=10, inference="server")
    result = simulate(shape, _actor(0.0), LearnerTimes(0.0, 0.0), server, updates=4)
    assert result.server_batches == {4: 2 * 10}  # the window's 2 rounds of 10 steps
    assert result.mean_server_batch == 4.0
    assert result.env_steps_per_s == pytest.approx(40 / 0.010)


def test_server_max_batch_splits_the_queue():
    server = ServerTimes(batch_sizes=(1, 256), forward_s=(0.001, 0.001), max_batch=2)
    shape = PipelineShape(n_actors=4, steps_per_actor=10, inference="server")
    result = simulate(shape, _actor(0.0), LearnerTimes(0.0, 0.0), server, updates=4)
    assert set(result.server_batches) == {2}
    assert result.env_steps_per_s == pytest.approx(40 / 0.020)


def test_server_waits_for_a_batch_to_fill_up_to_max_wait():
    # One of two actors sleeps 100 ms a step: the other's request waits the 5 ms window.
    server = ServerTimes(batch_sizes=(1,), forward_s=(0.001,), max_wait_s=0.005)
    shape = PipelineShape(n_actors=2, steps_per_actor=5, max_policy_lag=1, inference="server")
    actor = _actor(0.0, delays=(0.0, 0.1))
    result = simulate(shape, actor, LearnerTimes(0.0, 0.0), server, updates=6)
    assert result.server_batches.get(1, 0) > 0


def test_network_transfer_adds_latency_and_serialisation():
    links = NetworkLinks(latency_s=0.005, actor_bandwidth_Bps=1e4, step_bytes=100.0)
    shape = PipelineShape(n_actors=1, steps_per_actor=10)
    result = simulate(shape, _actor(), LearnerTimes(0.01, 0.0), links=links, updates=5)
    # weights fetch (latency) + 10 ms rollout + 1000 B at 10 kB/s + latency + update
    round_s = 0.005 + 0.010 + 0.1 + 0.005 + 0.01
    assert result.env_steps_per_s == pytest.approx(10 / round_s)


def test_data_parallel_update_all_reduces():
    links = NetworkLinks(trainer_bandwidth_Bps=1e9, weight_bytes=1e6)
    learner = LearnerTimes(0.0, 1e-4, n_trainers=4)
    assert learner.update_s(1000, links) == pytest.approx(1000 * 1e-4 / 4 + 1.5 * 1e6 / 1e9)
    assert learner.update_s(1000) == pytest.approx(0.025)


def test_results_report_lag_percentiles():
    shape = PipelineShape(n_actors=2, steps_per_actor=10, max_policy_lag=4)
    result = simulate(shape, _actor(), LearnerTimes(1.0, 0.0), updates=12, warmup_updates=6)
    assert result.lag_percentile(0.5) == 4.0 and result.mean_lag == 4.0
    empty = simulate(shape, _actor(), LearnerTimes(1.0, 0.0), updates=2, warmup_updates=1)
    assert math.isnan(empty.mean_server_batch)


# ---------------------------------------------------------------------- bad input
@pytest.mark.parametrize(
    "kwargs, error, match",
    [
        (dict(updates=0), ValueError, r"updates: expected an int in \[1, "),
        (
            dict(updates=3, warmup_updates=3),
            ValueError,
            r"warmup_updates: expected an int in \[0, 2\]",
        ),
        (dict(seed=-1), ValueError, "seed: expected an int >= 0"),
        (dict(updates=2.0), TypeError, "updates: expected an int, actual float"),
    ],
)
def test_bad_simulation_arguments(kwargs, error, match):
    shape = PipelineShape(n_actors=1, steps_per_actor=1)
    with pytest.raises(error, match=match):
        simulate(shape, _actor(), LearnerTimes(0.0, 0.0), **kwargs)


def test_bad_parts_are_named():
    shape = PipelineShape(n_actors=1, steps_per_actor=1, inference="server")
    with pytest.raises(ValueError, match="server: expected a ServerTimes with inference='server'"):
        simulate(shape, _actor(), LearnerTimes(0.0, 0.0))
    with pytest.raises(TypeError, match="shape: expected a PipelineShape, actual dict"):
        simulate({}, _actor(), LearnerTimes(0.0, 0.0))  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="links: expected a NetworkLinks or None, actual int"):
        simulate(PipelineShape(1, 1), _actor(), LearnerTimes(0.0, 0.0), links=3)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="delays_s: expected at least 3 per-actor waits, actual 2"):
        simulate(PipelineShape(3, 1), _actor(delays=(0.0, 0.0)), LearnerTimes(0.0, 0.0))


# ---------------------------------------------------------------------- invariants


@given(
    n_actors=st.integers(1, 12),
    steps=st.integers(1, 20),
    lag=st.integers(0, 3),
    served=st.booleans(),
    slots=st.sampled_from([None, 1, 2]),
    sigma=st.sampled_from([0.0, 1.0]),
    fixed=st.sampled_from([0.0, 1e-3, 0.05]),
    seed=st.integers(0, 3),
)
def test_invariants_hold_on_any_small_pipeline(
    n_actors, steps, lag, served, slots, sigma, fixed, seed
):
    shape = PipelineShape(
        n_actors,
        steps,
        max_policy_lag=lag,
        inference="server" if served else "local",
        cpu_slots=slots,
        switch_s=1e-4,
    )
    actor = ActorTimes(step_s=(1e-4, 5e-4, 2e-3), policy_s=1e-4, delay_s=5e-4, delay_sigma=sigma)
    server = ServerTimes(batch_sizes=(1, 16), forward_s=(1e-4, 4e-4), max_batch=8)
    links = NetworkLinks(
        latency_s=1e-4,
        actor_bandwidth_Bps=1e7,
        step_bytes=100.0,
        weight_bytes=1e4,
        actors_per_node=3,
    )
    result = simulate(
        shape,
        actor,
        LearnerTimes(fixed, 1e-5),
        server if served else None,
        links,
        updates=4,
        warmup_updates=1,
        seed=seed,
    )
    assert 0.0 <= result.learner_utilisation <= 1.0 + 1e-9
    assert result.env_steps == 3 * n_actors * steps and result.env_steps_per_s > 0
    assert result.max_outstanding <= shape.capacity
    assert min(result.lag_samples) >= 0 and sum(result.lag_samples.values()) == result.env_steps
    stale = sum(n for k, n in result.lag_samples.items() if k > lag)
    assert result.dropped_fraction == pytest.approx(stale / result.env_steps)
    if lag == 0 and not served:
        assert set(result.lag_samples) == {0}  # a barrier: nothing is ever stale
    assert all(1 <= b <= server.max_batch for b in result.server_batches)
