"""Both billing models and the round accountant: exact arithmetic."""

from __future__ import annotations

import pytest

from fleetgym.meta_env.cost_model import (
    ServerClusterCostModel,
    ServerlessCostModel,
)
from fleetgym.meta_env.pricing import PricingPreset, get_pricing
from fleetgym.meta_env.time_model import TimeModel


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
