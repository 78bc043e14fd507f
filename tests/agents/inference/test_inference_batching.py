"""The batching rule, the adaptive wait's maths and the config checks (pure, fake clock)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from fleetgym.agents.inference.batching import (
    DeadlineController,
    InferenceConfig,
    RequestQueue,
    auto_wait,
    percentile,
)


def test_full_batch_is_due_at_once_oldest_first():
    q = RequestQueue(max_batch=3)
    for i in range(5):
        q.push(float(i) * 1e-3, "a", i)
    assert q.due(now=0.004, wait_s=1.0, connected=2)
    assert [r.item for r in q.take()] == [0, 1, 2]
    assert not q.due(now=0.004, wait_s=1.0, connected=2)  # 2 left, b may still send
    assert [r.item for r in q.take()] == [3, 4]


def test_oldest_request_deadline_exact():
    q = RequestQueue(max_batch=256)
    q.push(1.000, "a", 0)
    q.push(1.003, "b", 1)
    assert q.deadline(0.005) == pytest.approx(1.005)
    assert not q.due(now=1.0049999, wait_s=0.005, connected=3)
    assert q.due(now=1.005, wait_s=0.005, connected=3)


def test_every_connected_client_waiting_fires_without_timeout():
    q = RequestQueue(max_batch=256)
    for c in range(16):
        q.push(0.0, c, c)
        assert q.due(now=0.0, wait_s=3600.0, connected=16) == (c == 15)
    # several requests of one client still count it once
    q2 = RequestQueue(max_batch=256)
    q2.push(0.0, "a", 0)
    q2.push(0.0, "a", 1)
    assert not q2.due(0.0, 3600.0, connected=2)
    q2.push(0.0, "b", 2)
    assert q2.due(0.0, 3600.0, connected=2)


def test_remove_client_keeps_others_in_order():
    q = RequestQueue(max_batch=8)
    for i, c in enumerate("abab"):
        q.push(float(i), c, i)
    assert [r.item for r in q.remove_client("a")] == [0, 2]
    assert q.clients_waiting == 1
    assert [r.item for r in q.take()] == [1, 3]
    assert q.remove_client("zz") == []


def test_empty_queue_is_never_due():
    q = RequestQueue(max_batch=1)
    assert not q.due(100.0, 0.0, connected=0)
    assert q.deadline(0.005) is None


def _utilisation(lam: float, a: float, c: float, w: float) -> float:
    b = (1 + lam * (w + a)) / (1 - lam * c)
    return lam * (a / b + c)


def test_auto_wait_maths():
    budget = 0.1
    # the smallest wait that brings the compute share down to the target, exactly
    w = auto_wait(2000.0, 5e-3, 1e-4, 256, budget)
    assert w > 0 and _utilisation(2000.0, 5e-3, 1e-4, w) == pytest.approx(0.8)
    assert _utilisation(2000.0, 5e-3, 1e-4, 0.0) > 0.8
    # the batches that form during passes already suffice: no wait
    assert auto_wait(1000.0, 1e-3, 1e-5, 256, budget) == 0.0
    assert auto_wait(10.0, 1e-3, 1e-5, 256, budget) == 0.0
    # saturated (lam * c >= rho*): as long as the latency budget allows
    lam, a, c = 9000.0, 1e-3, 1e-4
    keep = 1 - lam * c
    b0 = (1 + lam * a) / keep
    expected = (budget - 2 * a - 2 * c * b0) / (1 + 2 * c * lam / keep)
    assert auto_wait(lam, a, c, 4096, budget) == pytest.approx(expected)
    # never longer than a full batch takes to arrive
    assert auto_wait(2000.0, 5e-3, 1e-4, 14, budget) == pytest.approx((14 * 0.8 - 1) / 2000 - 5e-3)
    # the latency bound holds for the returned wait
    for rate in (1e2, 1e3, 2e3, 5e3):  # where the budget is attainable at all
        w = auto_wait(rate, 5e-3, 1e-4, 256, budget)
        b = (1 + rate * (w + 5e-3)) / (1 - rate * 1e-4)
        assert w + 2 * (5e-3 + 1e-4 * b) <= budget + 1e-12
    assert auto_wait(0.0, a, c, 256, budget) == 0.0


def test_controller_fits_forward_time_and_rate():
    ctl = DeadlineController(InferenceConfig(max_wait_ms="auto"), smoothing=0.2)
    now = 0.0
    for i in range(200):
        size = 1 + (i % 16)
        ctl.arrived(size)
        now += 0.001 * size  # 1000 requests/s
        ctl.batch_done(now, size, 2e-3 + 1e-5 * size)
    a, c = ctl.forward_model()
    assert a == pytest.approx(2e-3, rel=1e-6) and c == pytest.approx(1e-5, rel=1e-4)
    assert ctl.rate == pytest.approx(1000.0, rel=1e-6)
    assert ctl.wait_s == pytest.approx(auto_wait(1000.0, a, c, 256, 0.05), rel=1e-6)


def test_fixed_controller_keeps_its_wait():
    ctl = DeadlineController(InferenceConfig(max_wait_ms=7.0))
    for i in range(5):
        ctl.arrived(4)
        assert ctl.batch_done(0.01 * (i + 1), 4, 1e-3) == pytest.approx(0.007)


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"max_batch": 0}, ValueError, "max_batch: expected an int in"),
        ({"max_batch": 2.0}, TypeError, "max_batch: expected an int"),
        ({"max_wait_ms": "soon"}, ValueError, "max_wait_ms: expected one of"),
        ({"max_wait_ms": math.nan}, ValueError, "max_wait_ms"),
        ({"latency_budget_ms": 0.0}, ValueError, "latency_budget_ms"),
        ({"device": "tpu"}, ValueError, "device: expected"),
        ({"target_utilisation": 1.0}, ValueError, "target_utilisation"),
    ],
)
def test_config_rejects_bad_values(kwargs, error, match):
    with pytest.raises(error, match=match):
        InferenceConfig(**kwargs)


def test_config_is_frozen():
    config = InferenceConfig()
    with pytest.raises(AttributeError):
        config.max_batch = 3  # type: ignore[misc]
    assert config.wait_s == 0.005 and not config.adaptive


def test_percentile_nearest_rank():
    values = sorted(np.arange(1, 101, dtype=float).tolist())
    assert percentile(values, 0.99) == 99.0 and percentile(values, 0.5) == 50.0
    assert math.isnan(percentile([], 0.5))
