"""Network conditions and training regimes of the CALF experiment."""

from __future__ import annotations

import pytest

from fleetgym.experiments.calf import conditions


def test_conditions_build_shim_arguments():
    cond = conditions.CONDITIONS["fixed-50ms"]
    kwargs = cond.shim_kwargs()
    assert kwargs["uplink"].mean_ms == 50.0 and kwargs["uplink"].std_ms == 0.0
    assert conditions.CONDITIONS["wifi-normal"].shim_kwargs() == {"profile": "wifi-normal"}
    assert conditions.CONDITIONS["degraded-latest"].shim_kwargs()["delivery"] == "latest"
    with pytest.raises(ValueError, match="expected a profile or uplink/downlink"):
        conditions.NetworkCondition("both", profile="perfect", uplink=(1.0, 0.0, 0.0, 0.0))
    with pytest.raises(ValueError, match="expected a profile or uplink/downlink"):
        conditions.NetworkCondition("neither")
    with pytest.raises(ValueError, match="condition: expected one of"):
        conditions.resolve_condition("carrier-pigeon")
    trace = conditions.shipped_trace_condition()
    assert trace is not None and conditions.resolve_condition(trace.name).profile == trace.profile


def test_regime_by_name_trains_under_any_condition():
    assert conditions.regime_by_name("baseline") is conditions.REGIMES["baseline"]
    regime = conditions.regime_by_name("wifi-degraded+comp")
    assert (regime.train_condition, regime.compensated) == ("wifi-degraded", True)
    with pytest.raises(ValueError, match="condition: expected one of"):
        conditions.regime_by_name("nowhere+comp")
