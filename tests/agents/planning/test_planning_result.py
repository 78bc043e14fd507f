"""SimulationResult's summaries: mean server batch, lag percentiles and mean, exact."""

from __future__ import annotations

import math

from fleetgym.agents.planning import SimulationResult


def _result(**kw) -> SimulationResult:
    return SimulationResult(
        env_steps_per_s=1.0, learner_utilisation=0.5, wall_s=1.0, env_steps=1, updates=1, **kw
    )


def test_mean_server_batch_weights_sizes_by_passes():
    assert _result(server_batches={2: 3, 8: 1}).mean_server_batch == (2 * 3 + 8) / 4
    assert math.isnan(_result().mean_server_batch)


def test_lag_percentiles_and_mean_over_samples():
    r = _result(lag_samples={0: 50, 3: 40, 7: 10})
    assert r.lag_percentile(0.5) == 0.0
    assert r.lag_percentile(0.51) == 3.0
    assert r.lag_percentile(0.9) == 3.0
    assert r.lag_percentile(0.95) == 7.0
    assert r.lag_percentile(1.0) == 7.0
    assert r.mean_lag == (3 * 40 + 7 * 10) / 100
    assert math.isnan(_result().lag_percentile(0.5)) and math.isnan(_result().mean_lag)
