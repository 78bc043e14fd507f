"""One-way packet channels: per-packet loss and delay, sampled in numpy blocks.

A channel is an immutable description (picklable, comparable, usable as a
``gym.make`` keyword). Randomness lives in a :class:`DelaySampler` made by
:meth:`Channel.sampler` from a ``np.random.Generator``: it is stateful (AR(1) delay
drift, Gilbert-Elliott state, trace position) and hands out the delays of the next
``n`` packets, one packet per control period, as one numpy array.

Convention everywhere: delays are in milliseconds, ``np.inf`` marks a lost packet.

Example:
    >>> import numpy as np
    >>> ch = GaussianChannel(mean_ms=30, std_ms=10, loss=0.02)
    >>> d = ch.sample_delays(np.random.default_rng(0), 10_000)
    >>> d.shape, bool(np.all(d >= 0))
    ((10000,), True)
    >>> round(float(np.mean(np.isinf(d))), 2)
    0.02

This module holds the parametric models (Gaussian, Gilbert-Elliott). The interface
(:class:`Channel`, :class:`DelaySampler`, the limits) is defined in
:mod:`fleetgym.wrappers.channel_base` and the trace replay (:class:`TraceChannel`) in
:mod:`fleetgym.wrappers.trace_channel`; both are re-exported here, so import channels
from this module.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from fleetgym.validation import check_float
from fleetgym.wrappers.channel_base import (
    MAX_DELAY_MS,
    Channel,
    DelaySampler,
    _check_rng,
    _real,
    check_step_ms,
)

__all__ = ["FixedDelay", "GaussianChannel", "GilbertElliottChannel"]


def _ar1_filter(eps: np.ndarray, rho: float, z_prev: float | None) -> np.ndarray:
    """z_k = rho z_{k-1} + sqrt(1 - rho^2) eps_k: an AR(1) with N(0, 1) marginal."""
    from scipy.signal import lfilter  # about 1 s to import: paid by the first jittered block

    c = math.sqrt(1.0 - rho * rho)
    if z_prev is None:
        # Start in the stationary law: z_0 = eps_0 (divide so that c * x_0 == eps_0).
        x = eps.copy()
        x[0] = eps[0] / c
        return np.asarray(lfilter([c], [1.0, -rho], x))
    return np.asarray(lfilter([c], [1.0, -rho], eps, zi=[rho * z_prev])[0])


class _NormalDelays:
    """max(0, N(mean, std^2)) delays, optionally AR(1)-correlated, with carried state."""

    __slots__ = ("_mean", "_std", "_rho", "_rng", "_z")

    def __init__(self, mean: float, std: float, rho: float, rng: np.random.Generator) -> None:
        self._mean, self._std, self._rho, self._rng = mean, std, rho, rng
        self._z: float | None = None

    def draw(self, n: int) -> np.ndarray:
        if n == 0:
            return np.empty(0)
        if self._std == 0.0:
            return np.full(n, max(self._mean, 0.0))
        z = self._rng.standard_normal(n)
        if self._rho > 0.0:
            z = _ar1_filter(z, self._rho, self._z)
            self._z = float(z[-1])
        # In place (z is ours): the same floats as mean + std * z, fewer temporaries.
        z *= self._std
        z += self._mean
        np.maximum(z, 0.0, out=z)
        return z


@dataclass(frozen=True)
class GaussianChannel(Channel):
    """Bernoulli loss, then a delay max(0, N(mean_ms, std_ms^2)), optionally drifting.

    Models a link with a typical one-way delay and jitter. With ``correlation`` rho > 0
    the latent normal of successive packets is an AR(1) process
    z_k = rho z_{k-1} + sqrt(1 - rho^2) e_k, so each delay has the same marginal as
    without correlation but delays drift instead of jumping (what netem's correlation
    aims at, without netem's shrinking of the variance). Loss is i.i.d. Bernoulli(loss).
    ``FixedDelay(ms)`` is ``GaussianChannel(ms, 0)``.

    Stream API: :meth:`sampler` ``(rng, step_ms)`` and :meth:`sample_delays`
    ``(rng, n, step_ms=20.0)`` (ms, ``np.inf`` = lost), see :class:`Channel`.

    Args:
        mean_ms: Mean of the normal before clipping at 0, ``>= 0``.
        std_ms: Its standard deviation, ``>= 0`` (0 gives a fixed delay).
        loss: Probability that a packet is lost, in [0, 1].
        correlation: AR(1) coefficient of successive delays, in [0, 1).

    Example:
        >>> import numpy as np
        >>> ch = GaussianChannel(mean_ms=80, std_ms=40, loss=0.1, correlation=0.9)
        >>> d = ch.sample_delays(np.random.default_rng(1), 50_000)
        >>> ok = d[np.isfinite(d)]
        >>> round(float(ok.mean()) / 10), round(float(np.mean(np.isinf(d))), 1)
        (8, 0.1)

    Raises:
        TypeError: If an argument is not a real number.
        ValueError: If an argument is outside its range.
    """

    mean_ms: float = 0.0
    std_ms: float = 0.0
    loss: float = 0.0
    correlation: float = 0.0

    def __post_init__(self) -> None:
        object.__setattr__(self, "mean_ms", _real("mean_ms", self.mean_ms, 0.0, MAX_DELAY_MS))
        object.__setattr__(self, "std_ms", _real("std_ms", self.std_ms, 0.0, MAX_DELAY_MS))
        object.__setattr__(self, "loss", _real("loss", self.loss, 0.0, 1.0))
        object.__setattr__(
            self, "correlation", _real("correlation", self.correlation, 0.0, 1.0, hi_open=True)
        )

    @property
    def loss_rate(self) -> float:
        return self.loss

    def describe(self) -> str:
        text = f"Gaussian {self.mean_ms:g}±{self.std_ms:g} ms, loss {self.loss:.0%}"
        return text + (f", AR(1) rho={self.correlation:g}" if self.correlation else "")

    def sampler(self, rng: np.random.Generator, step_ms: float = 20.0) -> DelaySampler:
        check_step_ms(step_ms)  # unused by an i.i.d. channel, but checked like the others
        return _GaussianSampler(self, _check_rng(rng))


class _GaussianSampler(DelaySampler):
    def __init__(self, channel: GaussianChannel, rng: np.random.Generator) -> None:
        self._loss = channel.loss
        self._rng = rng
        self._delays = _NormalDelays(channel.mean_ms, channel.std_ms, channel.correlation, rng)

    def next(self, n: int) -> np.ndarray:
        lost = self._rng.random(n) < self._loss if self._loss > 0.0 else None
        d = self._delays.draw(n)
        if lost is not None:
            np.copyto(d, np.inf, where=lost)
        return d


def FixedDelay(delay_ms: float = 0.0, loss: float = 0.0) -> GaussianChannel:  # noqa: N802
    """A channel with a constant delay (a :class:`GaussianChannel` with ``std_ms=0``).

    Args:
        delay_ms: The one-way delay of every delivered packet in ms, ``>= 0`` (default 0:
            every packet arrives at once).
        loss: Probability that a packet is lost (i.i.d.), in [0, 1] (default 0).

    Example:
        >>> FixedDelay(40).sample_delays(np.random.default_rng(0), 3).tolist()
        [40.0, 40.0, 40.0]
    """
    return GaussianChannel(mean_ms=delay_ms, std_ms=0.0, loss=loss)


@dataclass(frozen=True)
class GilbertElliottChannel(Channel):
    """Bursty loss from a two-state (Good/Bad) Markov chain, plus a Gaussian delay.

    Per packet the chain moves Good->Bad with ``p_good_to_bad`` and Bad->Good with
    ``p_bad_to_good``; a packet is lost with ``loss_good`` in Good and ``loss_bad`` in
    Bad. With the defaults (0 and 1, the Gilbert model) losses come in bursts whose
    length is geometric with mean ``1 / p_bad_to_good``, and the loss rate is
    ``p_good_to_bad / (p_good_to_bad + p_bad_to_good)``. Build it from those two
    figures with :meth:`from_loss_and_burst`. Delivered packets get a delay
    max(0, N(mean_ms, std_ms^2)), AR(1)-correlated if ``correlation > 0``.

    Stream API: :meth:`sampler` ``(rng, step_ms)`` and :meth:`sample_delays`
    ``(rng, n, step_ms=20.0)`` (ms, ``np.inf`` = lost), see :class:`Channel`.

    Args:
        p_good_to_bad: Per-packet probability Good -> Bad, in [0, 1].
        p_bad_to_good: Per-packet probability Bad -> Good, in [0, 1].
        loss_good: Loss probability in Good, in [0, 1].
        loss_bad: Loss probability in Bad, in [0, 1].
        mean_ms: Delay mean (ms) before clipping at 0, ``>= 0``.
        std_ms: Delay standard deviation (ms), ``>= 0``.
        correlation: AR(1) coefficient of successive delays, in [0, 1).

    Example:
        >>> import numpy as np
        >>> ch = GilbertElliottChannel.from_loss_and_burst(0.1, 4.0, mean_ms=30, std_ms=10)
        >>> round(ch.p_good_to_bad, 4), ch.p_bad_to_good, round(ch.loss_rate, 3)
        (0.0278, 0.25, 0.1)
        >>> d = ch.sample_delays(np.random.default_rng(0), 200_000)
        >>> round(float(np.mean(np.isinf(d))), 2)
        0.1

    Raises:
        TypeError: If an argument is not a real number.
        ValueError: If an argument is outside its range, or both transition
            probabilities are 0 (the chain would never mix).
    """

    p_good_to_bad: float = 0.0
    p_bad_to_good: float = 1.0
    loss_good: float = 0.0
    loss_bad: float = 1.0
    mean_ms: float = 0.0
    std_ms: float = 0.0
    correlation: float = 0.0

    def __post_init__(self) -> None:
        for name in ("p_good_to_bad", "p_bad_to_good", "loss_good", "loss_bad"):
            object.__setattr__(self, name, _real(name, getattr(self, name), 0.0, 1.0))
        object.__setattr__(self, "mean_ms", _real("mean_ms", self.mean_ms, 0.0, MAX_DELAY_MS))
        object.__setattr__(self, "std_ms", _real("std_ms", self.std_ms, 0.0, MAX_DELAY_MS))
        object.__setattr__(
            self, "correlation", _real("correlation", self.correlation, 0.0, 1.0, hi_open=True)
        )
        if self.p_good_to_bad == 0.0 and self.p_bad_to_good == 0.0:
            raise ValueError(
                "p_bad_to_good: expected p_good_to_bad + p_bad_to_good > 0, actual both 0 "
                "(a chain that never moves)"
            )

    @classmethod
    def from_loss_and_burst(
        cls,
        loss_rate: float,
        mean_burst_length: float,
        *,
        mean_ms: float = 0.0,
        std_ms: float = 0.0,
        correlation: float = 0.0,
    ) -> GilbertElliottChannel:
        """A Gilbert channel (no loss in Good, all lost in Bad) from two observable figures.

        Args:
            loss_rate: Long-run fraction of lost packets, in [0, 1).
            mean_burst_length: Mean number of consecutive losses, ``>= 1``.
            mean_ms: Mean of the delivered packets' delay in ms before clipping at 0,
                ``>= 0`` (default 0).
            std_ms: Standard deviation of that delay in ms, ``>= 0`` (default 0: fixed).
            correlation: AR(1) coefficient of successive delays, in [0, 1) (default 0:
                independent).

        Raises:
            ValueError: If the figures are out of range or inconsistent (they would need
                a Good -> Bad probability above 1).
        """
        rate = _real("loss_rate", loss_rate, 0.0, 1.0, hi_open=True)
        burst = check_float("mean_burst_length", mean_burst_length, 1.0)
        r = 1.0 / burst
        # Stationary P(Bad) = p / (p + r) = rate  =>  p = rate * r / (1 - rate).
        p = rate * r / (1.0 - rate)
        if p > 1.0:
            raise ValueError(
                f"loss_rate: expected loss_rate / (1 - loss_rate) <= mean_burst_length, actual "
                f"loss_rate={loss_rate}, mean_burst_length={mean_burst_length} (needs P(G->B)={p:.3g} > 1)"
            )
        return cls(p, r, 0.0, 1.0, mean_ms, std_ms, correlation)

    @property
    def bad_fraction(self) -> float:
        """Stationary probability of the Bad state."""
        return self.p_good_to_bad / (self.p_good_to_bad + self.p_bad_to_good)

    @property
    def loss_rate(self) -> float:
        pb = self.bad_fraction
        return (1.0 - pb) * self.loss_good + pb * self.loss_bad

    def describe(self) -> str:
        return (
            f"Gilbert-Elliott loss {self.loss_rate:.1%} (P(G->B)={self.p_good_to_bad:g}, "
            f"P(B->G)={self.p_bad_to_good:g}), delay {self.mean_ms:g}±{self.std_ms:g} ms"
        )

    def sampler(self, rng: np.random.Generator, step_ms: float = 20.0) -> DelaySampler:
        check_step_ms(step_ms)  # unused by a per-packet chain, but checked like the others
        return _GilbertElliottSampler(self, _check_rng(rng))


class _GilbertElliottSampler(DelaySampler):
    def __init__(self, ch: GilbertElliottChannel, rng: np.random.Generator) -> None:
        self._rng = rng
        self._leave = (ch.p_good_to_bad, ch.p_bad_to_good)
        self._loss = np.array([ch.loss_good, ch.loss_bad])
        self._bad_fraction = ch.bad_fraction
        self._state: int | None = None  # state of the last packet handed out
        self._delays = _NormalDelays(ch.mean_ms, ch.std_ms, ch.correlation, rng)

    def _run_lengths(self, leave: float, k: int, cap: int) -> np.ndarray:
        if leave <= 0.0:
            return np.full(k, cap, dtype=np.int64)
        # Only the first `cap` packets are used, so longer runs are cut (a tiny leave
        # probability would otherwise make np.repeat allocate huge arrays).
        return np.minimum(self._rng.geometric(leave, size=k), cap)

    def _states(self, n: int) -> np.ndarray:
        if self._state is None:
            first = int(self._rng.random() < self._bad_fraction)
        else:
            # Markov step from the last packet of the previous block. Sojourns are
            # memoryless, so restarting a fresh geometric run here is exact.
            first = self._state ^ int(self._rng.random() < self._leave[self._state])
        runs: list[np.ndarray] = []
        covered = 0
        # Draw sojourn lengths in vectorised pairs (current state, other state).
        mean_pair = sum(1.0 / p if p > 0 else n for p in self._leave)
        while covered < n:
            k = int((n - covered) / mean_pair) + 4
            a = self._run_lengths(self._leave[first], k, n)
            b = self._run_lengths(self._leave[first ^ 1], k, n)
            pair = np.empty(2 * k, dtype=np.int64)
            pair[0::2], pair[1::2] = a, b
            runs.append(pair)
            covered += int(pair.sum())
        lengths = np.concatenate(runs)
        labels = np.empty(lengths.size, dtype=np.int8)
        labels[0::2], labels[1::2] = first, first ^ 1
        states = np.repeat(labels, lengths)[:n]
        self._state = int(states[-1])
        return states

    def next(self, n: int) -> np.ndarray:
        if n == 0:
            return np.empty(0)
        states = self._states(n)
        lost = self._rng.random(n) < self._loss[states]
        d = self._delays.draw(n)
        d[lost] = np.inf
        return d
