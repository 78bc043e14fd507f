"""Pricing presets, the time model, the compute model and both billing models: exact arithmetic."""

from __future__ import annotations

import math

import numpy as np
import pytest

from fleetgym.meta_env.cost_model import (
    PRICING_PRESETS,
    ComputeCostModel,
    PricingPreset,
    ServerClusterCostModel,
    ServerlessCostModel,
    TimeModel,
    get_pricing,
    trajectory_nbytes,
    weights_nbytes,
)


def test_presets_carry_source_date_and_the_issue_prices():
    for preset in PRICING_PRESETS.values():
        assert preset.source and preset.date
    aci, lam = PRICING_PRESETS["aci"], PRICING_PRESETS["lambda"]
    # Lambda: $0.0000166667 per GB-s at 1769 MB (one vCPU), $0.20 per million requests.
    assert lam.actor_price_per_s == pytest.approx(1.769 * 0.0000166667, rel=1e-12)
    assert lam.actor_request == pytest.approx(0.2e-6)
    # GPU learner: the $3.06/h V100 VM per second; cluster: + 4 x $1.008/h for 32 actors.
    assert aci.learner_second == pytest.approx(3.06 / 3600)
    assert aci.server_cluster_price_per_s(32) == pytest.approx((3.06 + 4 * 1.008) / 3600)
    assert aci.server_actor_vms(32) == 4 and aci.server_actor_vms(33) == 5
    assert aci.actor_price_per_s == pytest.approx(0.0000113 + 0.0000012)
    # CPU learner: an ACI container of 2 vCPU + 4 GB; its cluster's learner VM a D4s_v5.
    cpu = PRICING_PRESETS["aci-cpu"]
    assert cpu.actor_price_per_s == aci.actor_price_per_s
    assert cpu.learner_second == pytest.approx(2 * 0.0000113 + 4 * 0.0000012)
    assert cpu.server_cluster_price_per_s(32) == pytest.approx((0.192 + 4 * 1.008) / 3600)


def test_get_pricing_overrides_and_errors():
    p = get_pricing("aci", vcpu_second=1.0, gb_second=0.0)
    assert p.actor_price_per_s == 1.0
    assert get_pricing(p) is p
    with pytest.raises(ValueError, match="expected one of"):
        get_pricing("gcp")
    with pytest.raises(ValueError, match="expected fields"):
        get_pricing("aci", price=1.0)
    with pytest.raises(ValueError, match="expected a finite number >= 0"):
        get_pricing("aci", learner_second=-1.0)
    with pytest.raises(TypeError, match="expected a number"):
        get_pricing("aci", gb_second="cheap")
    with pytest.raises(TypeError, match="expected a preset name"):
        get_pricing(3)


def test_time_model_actor_and_learner_time_exact():
    tm = TimeModel(
        cold_start_actor_s=0.3,
        cold_start_learner_s=1.5,
        bandwidth_bytes_per_s=1e6,
        latency_s=0.01,
        learner_speed_factor=4.0,
    )
    a = tm.actor_time(0.1, weight_bytes=2000, trajectory_bytes=3000)
    assert a.cold_start_s == 0.3
    assert a.transfer_s == pytest.approx(0.01 + 0.002 + 0.01 + 0.003)
    assert a.total_s == pytest.approx(0.3 + 0.025 + 0.1)
    assert tm.actor_time(0.1, weight_bytes=0, trajectory_bytes=0, warm=True).cold_start_s == 0.0
    lt = tm.learner_time(2.0)
    assert lt.update_s == 0.5 and lt.total_s == 2.0
    assert tm.learner_time(2.0, warm=True).total_s == 0.5
    assert tm.pool_size(32) == 0
    keep_alive = TimeModel(prewarm=True)
    assert keep_alive.keep_alive and keep_alive.pool_size(32, previous_actors=5) == 5
    assert keep_alive.pool_size(32, previous_actors=40) == 32
    assert not TimeModel(prewarm=True, warm_pool=4).keep_alive
    assert TimeModel(prewarm=True, warm_pool=4).pool_size(32) == 4
    assert TimeModel(prewarm=True, warm_pool=40).pool_size(32) == 32


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"cold_start_actor_s": -0.1}, "cold_start_actor_s"),
        ({"bandwidth_bytes_per_s": 0.0}, "bandwidth_bytes_per_s"),
        ({"learner_speed_factor": 0}, "learner_speed_factor"),
        ({"latency_s": math.nan}, "latency_s"),
        ({"warm_pool": -1}, "warm_pool"),
    ],
)
def test_time_model_rejects_bad_values(kwargs, match):
    with pytest.raises(ValueError, match=match):
        TimeModel(**kwargs)


def test_compute_model_is_exact_without_jitter_and_mean_one_with_it():
    cm = ComputeCostModel(
        actor_step_s=1e-3, actor_overhead_s=0.05, learner_sample_s=1e-4, learner_overhead_s=0.2
    )
    rng = np.random.default_rng(0)
    assert cm.actor_compute_s(100, rng, 3).tolist() == pytest.approx([0.15] * 3)
    assert cm.learner_update_s(1000) == pytest.approx(0.3)
    jittery = ComputeCostModel(1e-3, 0.0, 0.0, 0.0, actor_jitter_cv=0.2)
    draws = jittery.actor_compute_s(100, np.random.default_rng(1), 20_000) / 0.1
    # The slowdown is log-normal with mean 1 and CV 0.2: the sample mean of 20 000 draws has
    # standard error 0.2 / sqrt(20 000) = 0.0014, so 5 standard errors is 0.007.
    assert abs(draws.mean() - 1.0) < 0.007
    assert abs(draws.std() / draws.mean() - 0.2) < 0.01
    same = jittery.actor_compute_s(100, np.random.default_rng(1), 20_000) / 0.1
    np.testing.assert_array_equal(draws, same)
    with pytest.raises(ValueError, match="actor_step_s"):
        ComputeCostModel(-1.0, 0.0, 0.0, 0.0)


def _unit_pricing() -> PricingPreset:
    return get_pricing(
        "aci",
        vcpu_second=1e-3,
        gb_second=0.0,
        actor_request=1e-5,
        learner_second=1e-2,
        learner_request=1e-4,
    )


def test_serverless_bills_each_actor_its_own_seconds():
    cm = ServerlessCostModel(_unit_pricing())
    cost = cm.round_cost(learner_s=2.0, actor_s=[1.0, 3.0], round_s=5.0)
    assert cost.learner == pytest.approx(2.0 * 1e-2)
    assert cost.per_actor == pytest.approx((1e-3, 3e-3))
    assert cost.actors == pytest.approx(4e-3)
    assert cost.warm_pool == 0.0
    assert cost.requests == pytest.approx(2 * 1e-5 + 1e-4)
    assert cost.total == pytest.approx(0.02 + 0.004 + 0.0001 + 0.00002)


def test_serverless_warm_pool_is_billed_for_the_whole_round():
    cm = ServerlessCostModel(_unit_pricing())
    # Pool of 3 slots, 2 actors used (slot 0 warm, slot 1 warm), one pooled slot idle.
    cost = cm.round_cost(learner_s=2.0, actor_s=[1.0, 3.0], round_s=5.0, pool=3, learner_warm=True)
    assert cost.learner == pytest.approx(5.0 * 1e-2)  # kept alive for the whole round
    assert cost.per_actor == pytest.approx((5e-3, 5e-3))
    assert cost.warm_pool == pytest.approx(1 * 5.0 * 1e-3)
    assert cost.requests == 0.0
    # Pool of 1: slot 1 is an ordinary cold actor.
    cost = cm.round_cost(learner_s=2.0, actor_s=[1.0, 3.0], round_s=5.0, pool=1)
    assert cost.per_actor == pytest.approx((5e-3, 3e-3))
    assert cost.requests == pytest.approx(1e-5 + 1e-4)
    tm = TimeModel(cold_start_actor_s=0.5, cold_start_learner_s=2.0, prewarm=True)
    assert cm.prewarm_cost(tm, 3, True) == pytest.approx(3 * (0.5e-3 + 1e-5) + 2.0e-2 + 1e-4)


def test_serverless_keep_alive_bills_every_actor_the_whole_round():
    cm = ServerlessCostModel(_unit_pricing())
    # Previous round had 1 actor: slot 0 warm, slot 1 cold; both stay alive to the end.
    cost = cm.round_cost(
        learner_s=2.0, actor_s=[1.0, 3.0], round_s=5.0, pool=1, learner_warm=True, keep_alive=True
    )
    assert cost.per_actor == pytest.approx((5e-3, 5e-3))
    assert cost.warm_pool == 0.0
    assert cost.requests == pytest.approx(1e-5)  # one cold invocation, warm learner
    assert cost.learner == pytest.approx(5.0 * 1e-2)
    # A pool larger than the round: nothing idles under keep-alive (released at start).
    cost = cm.round_cost(learner_s=2.0, actor_s=[1.0], round_s=5.0, pool=4, keep_alive=True)
    assert cost.warm_pool == 0.0 and cost.per_actor == pytest.approx((5e-3,))


def test_server_cluster_bills_wall_time_idle_included():
    p = get_pricing("aci")
    cm = ServerClusterCostModel(p, actors=32)
    cost = cm.round_cost(round_s=10.0)
    assert cost.learner == pytest.approx(10.0 * 3.06 / 3600)
    assert cost.actors == pytest.approx(10.0 * 4 * 1.008 / 3600)
    assert cost.total == pytest.approx(10.0 * cm.price_per_s)
    assert ServerClusterCostModel(p, actors=8).price_per_s == pytest.approx((3.06 + 1.008) / 3600)
    with pytest.raises(ValueError, match="actors"):
        ServerClusterCostModel(p, actors=0)
    with pytest.raises(TypeError, match="PricingPreset"):
        ServerlessCostModel("aci")  # type: ignore[arg-type]


def test_byte_counts():
    from fleetgym.agents.types import Trajectory

    w = {"a": np.zeros((2, 3), np.float32), "b": np.zeros(4, np.float64)}
    assert weights_nbytes(w) == 24 + 32
    n = 5
    traj = Trajectory(
        obs=np.zeros((n, 4), np.float32),
        actions=np.zeros(n, np.int64),
        log_probs=np.zeros(n, np.float32),
        values=np.zeros(n, np.float32),
        rewards=np.zeros(n, np.float32),
        terminated=np.zeros(n, bool),
        truncated=np.zeros(n, bool),
        truncation_values=np.zeros(n, np.float32),
        last_value=0.0,
        episode_returns=[],
        episode_lengths=[],
        actor_id=0,
        policy_version=0,
        seed=0,
    )
    assert trajectory_nbytes(traj) == 80 + 40 + 20 + 20 + 20 + 5 + 5 + 20
