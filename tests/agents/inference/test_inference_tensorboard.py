"""TensorBoard scalars of the inference server's metrics, written and read back."""

from __future__ import annotations

import numpy as np
import pytest

from fleetgym.agents.inference import InferenceServer
from fleetgym.agents.inference.tensorboard import (
    SCALAR_KEYS,
    ServerMetricsLogger,
    log_server_metrics,
)
from fleetgym.agents.learners.asynchronous.config import AsyncPPOConfig, AsyncTopology

pytest.importorskip("tensorboard")


def _read(folder):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    events = EventAccumulator(str(folder), size_guidance={"scalars": 0, "histograms": 0})
    events.Reload()
    return events


@pytest.mark.timeout(60)
def test_server_metrics_reach_tensorboard(tmp_path, echo_model):
    from torch.utils.tensorboard import SummaryWriter

    writer = SummaryWriter(str(tmp_path))
    with InferenceServer(echo_model, max_batch=4, max_wait_ms=1.0) as server:
        logger = ServerMetricsLogger(server, writer)
        with server.connect() as client:
            client.infer(np.zeros((3, 2)))  # one batch of 3 requests
            first = logger(step=1)
            client.infer(np.zeros((2, 2)))
            second = logger(step=2)
    writer.close()
    # each point covers the window since the last one
    assert (first["requests"], first["batch_histogram"]) == (3, {3: 1})
    assert (second["requests"], second["batch_histogram"]) == (2, {2: 1})
    events = _read(tmp_path)
    scalars = set(events.Tags()["scalars"])
    assert scalars == {f"inference/{key}" for key in SCALAR_KEYS}
    mean_batch = [(e.step, e.value) for e in events.Scalars("inference/mean_batch")]
    assert mean_batch == [(1, 3.0), (2, 2.0)]
    utilisation = [e.value for e in events.Scalars("inference/utilisation")]
    assert all(0.0 < u <= 1.0 for u in utilisation)
    histogram = events.Histograms("inference/batch_size")
    assert [(h.step, h.histogram_value.num, h.histogram_value.sum) for h in histogram] == [
        (1, 1, 3.0),
        (2, 1, 2.0),
    ]


def test_missing_keys_are_skipped_and_bad_sources_refused():
    class Writer:
        def __init__(self):
            self.tags = []

        def add_scalar(self, tag, value, step):
            self.tags.append(tag)

    writer = Writer()
    assert log_server_metrics(writer, {"requests_per_s": 5.0}, step=0, prefix="x") == [
        "x/requests_per_s"
    ]
    assert writer.tags == ["x/requests_per_s"]
    with pytest.raises(TypeError, match="source: expected an object with metrics"):
        ServerMetricsLogger(object(), writer)


@pytest.mark.timeout(120)
def test_async_ppo_on_the_server_logs_its_metrics(tmp_path):
    from fleetgym.agents.learners.asynchronous.trainer import AsyncPPO

    model = AsyncPPO(
        "CartPole-v1",
        algo=AsyncPPOConfig(hyperparameters={"epochs": 1, "minibatch_size": 16}),
        topology=AsyncTopology(inference="server", n_actors=2, steps_per_actor=16),
        seed=0,
        tensorboard_log=tmp_path,
    )
    try:
        model.learn(64)
    finally:
        model.close()
    events = _read(tmp_path)
    assert "inference/utilisation" in events.Tags()["scalars"]
    assert "inference/batch_size" in events.Tags()["histograms"]
    assert all(e.value > 0 for e in events.Scalars("inference/requests_per_s"))
