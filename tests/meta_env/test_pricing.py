"""Pricing presets: the list prices, their sources, overrides and range checks."""

from __future__ import annotations

import pytest

from fleetgym.meta_env.pricing import PRICING_PRESETS, get_pricing


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
