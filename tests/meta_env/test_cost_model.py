"""Both billing models and the round accountant: exact arithmetic."""

from __future__ import annotations

import math

import pytest

from fleetgym.meta_env.cost_model import (
    RoundAccountant,
    ServerClusterCostModel,
    ServerlessCostModel,
)
from fleetgym.meta_env.pricing import PricingPreset, get_pricing
from fleetgym.meta_env.time_model import ComputeCostModel, TimeModel


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


# ----------------------------------------------------------------- the round accountant
def _accountant(**time_kwargs) -> RoundAccountant:
    pricing = get_pricing(
        "aci",
        vcpu_second=1e-3,
        gb_second=0.0,
        actor_request=0.0,
        learner_second=1e-2,
        learner_request=0.0,
    )
    tm = TimeModel(latency_s=0.0, **time_kwargs)
    return RoundAccountant(tm, pricing, max_actors=4)


def test_accountant_cold_round_is_time_and_busy_seconds():
    acc = _accountant()
    bill = acc.account(actor_compute_s=[1.0, 2.0], learner_update_s=0.5)
    assert bill.actor_times.tolist() == pytest.approx([1.3, 2.3])
    assert bill.learner.total_s == pytest.approx(2.0)
    assert bill.round_time == pytest.approx(2.0 + 2.3)
    assert bill.cost.learner == pytest.approx(2.0 * 1e-2)
    assert bill.cost.actors == pytest.approx((1.3 + 2.3) * 1e-3)
    assert bill.prewarm_cost == 0.0
    assert acc.rounds == 1 and acc.elapsed_s == pytest.approx(4.3)
    assert acc.total_cost == pytest.approx(bill.total_cost)
    acc.reset()
    assert (acc.rounds, acc.elapsed_s, acc.total_cost) == (0, 0.0, 0.0)


def test_accountant_keep_alive_pool_and_ttl():
    ttl = 1.0
    acc = _accountant(prewarm=True, keep_alive_s=ttl)
    # Round 1: its 4 actors (and the learner) are warmed before training, paid once.
    bill = acc.account(actor_compute_s=[0.5] * 4, learner_update_s=0.2)
    assert bill.actor_times.tolist() == pytest.approx([0.5] * 4)
    p1 = 0.2 + 0.5
    assert bill.round_time == pytest.approx(p1)
    assert bill.prewarm_cost == pytest.approx(4 * 0.3 * 1e-3 + 1.5 * 1e-2)
    assert bill.cost.actors == pytest.approx(4 * p1 * 1e-3)  # alive to the end of the round
    # Round 2 with 1 actor: slots 1-3 idle, billed for min(round, ttl left).
    bill = acc.account(actor_compute_s=[0.5], learner_update_s=0.2)
    p2 = 0.7
    assert bill.cost.warm_pool == pytest.approx(3 * min(p2, ttl) * 1e-3)
    assert bill.prewarm_cost == 0.0
    # Round 3: 4 actors again within the ttl: all warm, no cold start.
    assert acc.warm_slots(4) == 4
    bill = acc.account(actor_compute_s=[0.5] * 4, learner_update_s=0.2)
    assert bill.actor_times.tolist() == pytest.approx([0.5] * 4)
    # Rounds 4-6 with 1 actor run past the ttl; then 3 of 4 slots are cold again.
    for _ in range(3):
        acc.account(actor_compute_s=[0.5], learner_update_s=0.2)
    assert acc.warm_slots(4) == 1
    bill = acc.account(actor_compute_s=[0.5] * 4, learner_update_s=0.2)
    assert bill.actor_times.tolist() == pytest.approx([0.5, 0.8, 0.8, 0.8])
    assert acc.rounds == 7


def test_accountant_requested_slots_stay_warm_when_a_trajectory_is_lost():
    acc = _accountant(prewarm=True, keep_alive_s=0.0)
    # 3 actors were asked for, one failed: slots 0 and 2 returned, all 3 are kept alive.
    acc.account(actor_compute_s=[0.5, 0.5], actor_ids=[0, 2], num_actors=3, learner_update_s=0.2)
    assert acc.warm_slots(3) == 3


def test_accountant_fixed_pool_and_server_billing():
    pooled = _accountant(prewarm=True, warm_pool=2)
    bill = pooled.account(actor_compute_s=[0.5] * 3, learner_update_s=0.2)
    assert bill.actor_times.tolist() == pytest.approx([0.5, 0.5, 0.8])
    server = RoundAccountant(
        TimeModel(latency_s=0.0), get_pricing("aci"), max_actors=32, billing="server"
    )
    bill = server.account(actor_compute_s=[0.5] * 32, learner_update_s=0.2)
    assert bill.actor_times.tolist() == pytest.approx([0.5] * 32)  # VMs: no cold start
    assert bill.learner.cold_start_s == 0.0
    assert bill.total_cost == pytest.approx(0.7 * (3.06 + 4 * 1.008) / 3600)
    assert server.warm_slots(32) == 0  # no serverless pool to keep


def test_accountant_reference_times():
    acc = _accountant(prewarm=True)
    compute = ComputeCostModel(0.01, 0.0, 0.001, 0.1)
    learner_s, actor_s = acc.reference_times(compute, steps_per_actor=10)
    assert learner_s == pytest.approx(0.1 + 4 * 10 * 0.001)
    assert actor_s == pytest.approx(10 * 0.01)


@pytest.mark.parametrize(
    ("call", "exc", "match"),
    [
        (
            lambda: RoundAccountant("fast", get_pricing("aci"), max_actors=4),  # type: ignore[arg-type]
            TypeError,
            "time_model: expected a TimeModel",
        ),
        (
            lambda: RoundAccountant(TimeModel(), "aci", max_actors=4),  # type: ignore[arg-type]
            TypeError,
            "pricing: expected a PricingPreset",
        ),
        (
            lambda: RoundAccountant(TimeModel(), get_pricing("aci"), max_actors=4, billing="x"),
            ValueError,
            "billing: expected one of",
        ),
        (
            lambda: RoundAccountant(TimeModel(), get_pricing("aci"), max_actors=0),
            ValueError,
            "max_actors: expected an int >= 1",
        ),
        (
            lambda: _accountant().account(
                actor_compute_s=[1.0], actor_ids=[0, 1], learner_update_s=1
            ),
            ValueError,
            "expected 1 entries",
        ),
        (
            lambda: _accountant().account(actor_compute_s=[1.0], num_actors=5, learner_update_s=1),
            ValueError,
            r"num_actors: expected an int in \[0, 4\]",
        ),
    ],
)
def test_accountant_errors(call, exc, match):
    with pytest.raises(exc, match=match):
        call()


_BAD_TIMES = [(-1.0, ValueError), (math.nan, ValueError), (math.inf, ValueError), ("1", TypeError)]


@pytest.mark.parametrize(("value", "exc"), _BAD_TIMES)
@pytest.mark.parametrize(
    ("name", "call"),
    [
        ("learner_s", lambda cm, v: cm.round_cost(learner_s=v, actor_s=[1.0], round_s=2.0)),
        (
            r"actor_s\[1\]",
            lambda cm, v: cm.round_cost(learner_s=1.0, actor_s=[1.0, v], round_s=2.0),
        ),
        ("round_s", lambda cm, v: cm.round_cost(learner_s=1.0, actor_s=[1.0], round_s=v)),
        (
            r"idle_s\[0\]",
            lambda cm, v: cm.round_cost(learner_s=1.0, actor_s=[], round_s=2.0, idle_s=[v]),
        ),
    ],
)
def test_serverless_refuses_negative_nan_and_infinite_times(name, call, value, exc):
    with pytest.raises(exc, match=rf"^{name}: expected .*, actual "):
        call(ServerlessCostModel(_unit_pricing()), value)


@pytest.mark.parametrize(("value", "exc"), _BAD_TIMES)
def test_server_cluster_and_accountant_refuse_bad_times(value, exc):
    with pytest.raises(exc, match=r"^round_s: expected a"):
        ServerClusterCostModel(_unit_pricing(), actors=4).round_cost(round_s=value)
    with pytest.raises(exc, match=r"^actor_compute_s\[0\]: expected a"):
        _accountant().account(actor_compute_s=[value], learner_update_s=1.0)
    with pytest.raises(exc, match=r"^learner_update_s: expected a"):
        _accountant().account(actor_compute_s=[1.0], learner_update_s=value)


def test_serverless_refuses_bad_counts_and_flags():
    cm = ServerlessCostModel(_unit_pricing())
    with pytest.raises(ValueError, match=r"^pool: expected an int >= 0, actual -1"):
        cm.round_cost(learner_s=1.0, actor_s=[1.0], round_s=2.0, pool=-1)
    with pytest.raises(TypeError, match=r"^actor_s: expected a sequence of seconds, actual float"):
        cm.round_cost(learner_s=1.0, actor_s=1.0, round_s=2.0)
    with pytest.raises(TypeError, match=r"^keep_alive: expected a bool, actual str"):
        cm.round_cost(learner_s=1.0, actor_s=[1.0], round_s=2.0, keep_alive="no")
    with pytest.raises(ValueError, match=r"^pool: expected an int >= 0, actual -2"):
        cm.prewarm_cost(TimeModel(), -2, False)
    with pytest.raises(TypeError, match=r"^time_model: expected a TimeModel, actual str"):
        cm.prewarm_cost("fast", 2, False)  # type: ignore[arg-type]
