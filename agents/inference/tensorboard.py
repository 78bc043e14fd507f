"""TensorBoard scalars of an inference server's metrics, for a trainer that logs.

:func:`log_server_metrics` writes one ``metrics()`` dict (of an
:class:`~fleetgym.agents.inference.InferenceServer`, or of a fleet on the server, whose
``metrics()`` is the server's) to a ``torch.utils.tensorboard.SummaryWriter``:
requests/s, mean batch size and the batch-size histogram, queue wait p50/p95/p99,
latency p50/p99, mean forward time, utilisation (the share of wall time in forward
passes) and errors, under ``inference/``. :class:`ServerMetricsLogger` does it per call
and starts a new measurement window after each, so every point describes the interval
since the last one. :class:`~fleetgym.agents.learners.asynchronous.trainer.AsyncPPO` with
``inference="server"`` and ``tensorboard_log`` logs them after every update.

This module imports numpy only; the writer is the caller's.
"""

from __future__ import annotations

from typing import Any

import numpy as np

#: ``metrics()`` keys written as scalars (tag ``<prefix>/<key>``).
SCALAR_KEYS = (
    "requests_per_s",
    "mean_batch",
    "queue_wait_ms_p50",
    "queue_wait_ms_p95",
    "queue_wait_ms_p99",
    "latency_ms_p50",
    "latency_ms_p99",
    "forward_ms_mean",
    "utilisation",
    "errors",
)


def log_server_metrics(
    writer: Any, metrics: dict[str, Any], step: int, prefix: str = "inference"
) -> list[str]:
    """Write an inference server's ``metrics()`` to a TensorBoard writer.

    Args:
        writer: A ``torch.utils.tensorboard.SummaryWriter`` (or anything with its
            ``add_scalar`` and ``add_histogram_raw``).
        metrics: ``InferenceServer.metrics()`` (keys it lacks are skipped).
        step: The global step (e.g. environment steps so far).
        prefix: Tag prefix.

    Example:
        >>> class Writer:  # what a SummaryWriter is asked for
        ...     def __init__(self): self.scalars, self.histograms = {}, {}
        ...     def add_scalar(self, tag, value, step): self.scalars[tag] = value
        ...     def add_histogram_raw(self, tag, **raw): self.histograms[tag] = raw
        >>> writer = Writer()
        >>> tags = log_server_metrics(writer, {"utilisation": 0.5, "mean_batch": 3.0,
        ...                                     "batch_histogram": {2: 1, 4: 1}}, step=10)
        >>> tags, writer.histograms["inference/batch_size"]["bucket_counts"]
        (['inference/mean_batch', 'inference/utilisation', 'inference/batch_size'], [1, 1])

    Returns:
        The tags written.
    """
    tags = []
    for key in SCALAR_KEYS:
        if key in metrics:
            tag = f"{prefix}/{key}"
            writer.add_scalar(tag, float(metrics[key]), step)
            tags.append(tag)
    histogram = metrics.get("batch_histogram") or {}
    if histogram:
        sizes = np.array(sorted(histogram), np.float64)
        counts = np.array([histogram[s] for s in sorted(histogram)], np.int64)
        tag = f"{prefix}/batch_size"
        writer.add_histogram_raw(
            tag,
            min=float(sizes[0]),
            max=float(sizes[-1]),
            num=int(counts.sum()),
            sum=float((sizes * counts).sum()),
            sum_squares=float((sizes**2 * counts).sum()),
            bucket_limits=sizes.tolist(),
            bucket_counts=counts.tolist(),
            global_step=step,
        )
        tags.append(tag)
    return tags


class ServerMetricsLogger:
    """Logs a server's metrics at each call, each point over the interval since the last.

    Args:
        source: An :class:`~fleetgym.agents.inference.InferenceServer` (or anything with
            ``metrics()``; ``reset_metrics()`` is called after each write when it has one).
        writer: A TensorBoard ``SummaryWriter``.
        prefix: Tag prefix.
        reset: Start a new measurement window after each write.
    """

    def __init__(self, source: Any, writer: Any, prefix: str = "inference", reset: bool = True):
        if not callable(getattr(source, "metrics", None)):
            raise TypeError(
                f"source: expected an object with metrics(), actual {type(source).__name__}"
            )
        self.source = source
        self.writer = writer
        self.prefix = prefix
        self.reset = reset

    def __call__(self, step: int) -> dict[str, Any]:
        """Write the metrics at ``step``; returns them."""
        metrics: dict[str, Any] = self.source.metrics()
        log_server_metrics(self.writer, metrics, step, self.prefix)
        if self.reset and callable(getattr(self.source, "reset_metrics", None)):
            self.source.reset_metrics()
        return metrics
