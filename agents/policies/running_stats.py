"""Running mean and variance of a stream of batches (parallel Welford), in float64.

One implementation for the learner's return scaling (a scalar stream) and the policy's
observation statistics (one value per observation entry). Stable-Baselines3 has a class of
the same name, but it starts from a pseudo-count of ``1e-4`` with variance 1, so its
statistics after the first batches differ from these (which start from count 0).

Example:
    >>> stats = RunningMeanStd()
    >>> stats.update(np.array([1.0, 2.0, 3.0]))
    >>> stats.update(np.array([4.0]))
    >>> float(stats.mean), float(stats.var), stats.count
    (2.5, 1.25, 4.0)
"""

from __future__ import annotations

from typing import Any

import numpy as np

__all__ = ["RunningMeanStd", "combine_moments"]


def combine_moments(
    mean: Any, var: Any, count: float, batch: np.ndarray
) -> tuple[np.ndarray, np.ndarray, float]:
    """Mean, variance and count after folding ``batch`` (samples along axis 0) in.

    Chan et al.'s parallel update: with ``delta = mean_b - mean``, ``n = count + n_b``,
    ``mean' = mean + delta * n_b / n`` and
    ``var' = (var * count + var_b * n_b + delta^2 * count * n_b / n) / n``.
    An empty batch leaves everything as it was.

    Args:
        mean, var: The running mean and (population) variance so far, scalars or arrays of
            one sample's shape.
        count: Samples folded in so far (0: ``mean`` and ``var`` are replaced by the
            batch's own moments).
        batch: New samples, stacked along axis 0.

    Returns:
        ``(mean, var, count)`` in float64, the count a float.
    """
    batch = np.asarray(batch, dtype=np.float64)
    if batch.shape[0] == 0:
        return np.asarray(mean, np.float64), np.asarray(var, np.float64), float(count)
    b_mean, b_var, b_count = batch.mean(axis=0), batch.var(axis=0), float(batch.shape[0])
    total = count + b_count
    delta = b_mean - mean
    new_mean = mean + delta * (b_count / total)
    m2 = var * count + b_var * b_count + np.square(delta) * (count * b_count / total)
    return np.asarray(new_mean, np.float64), np.asarray(m2 / total, np.float64), total


class RunningMeanStd:
    """Running mean and variance of samples of shape ``shape`` (``()``: a scalar stream).

    Args:
        shape: Shape of one sample; ``update`` takes batches of shape ``(n, *shape)`` (for
            a scalar stream, any array: it is flattened).
    """

    def __init__(self, shape: tuple[int, ...] = ()) -> None:
        self.shape = tuple(shape)
        self.mean: Any = np.zeros(self.shape, np.float64)
        self.var: Any = np.ones(self.shape, np.float64)
        self.count = 0.0

    def update(self, x: np.ndarray) -> None:
        """Fold a batch of samples in.

        Args:
            x: Samples of shape ``(n, *shape)``; for a scalar stream any array, flattened
                (every entry is one sample).
        """
        batch = np.asarray(x, np.float64)
        batch = batch.ravel() if self.shape == () else batch.reshape((-1, *self.shape))
        self.mean, self.var, self.count = combine_moments(self.mean, self.var, self.count, batch)
