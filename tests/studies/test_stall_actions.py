"""Tests of studies/stall_actions.py's parts that need no trained policy: the
synthetic network with stalls, the envs of every row, the tables."""

from __future__ import annotations

import numpy as np
import pytest


@pytest.fixture(scope="module")
def study(load_study):
    return load_study("stall_actions")


def test_the_stall_trace_has_short_delays_and_long_stalls(study):
    trace = study.stall_trace(duration_s=120.0, seed=3)
    delays = trace.delay_ms
    assert np.all(np.isfinite(delays)) and delays.max() <= 6000.0 + 10.0
    assert 2.0 < np.median(delays) < 3.5  # the usual one-way delay
    assert 0.2 < np.mean(delays > 100.0) < 0.45  # packets caught in a stall
    again = study.stall_trace(duration_s=120.0, seed=3)
    assert np.array_equal(again.delay_ms, delays)


def test_every_row_runs_and_the_tables_print(study):
    profile = study.stall_profile(duration_s=60.0)
    result = study.run("stall", [0], 1, actor=lambda seed: lambda obs: 0, profile=profile)
    rows = result["rows"]
    assert [(r["input"], r["stall_action"], r["prior"]) for r in rows] == [
        (i, s, p) for i, s, _, p in study.STALL_ROWS
    ]
    assert all(r["mean"] >= 1 and r["std"] == 0 for r in rows)
    table = study.markdown(result)
    assert table.splitlines()[0].startswith(
        "| input | stall_action | stall_steps | prior | return |"
    )
    prior = study.run("prior", [0, 1], 1, actor=lambda seed: lambda obs: 1)
    assert [r["condition"] for r in prior["rows"]] == ["fixed-75ms"] * 2 + ["wifi-normal"] * 2
    assert "| fixed-75ms | derived (default) |" in study.markdown(prior)
    with pytest.raises(ValueError, match="table"):
        study.run("sideways", [0], 1, actor=lambda seed: lambda obs: 0)
