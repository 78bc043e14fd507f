"""The delay and loss models a trace is fitted with, and the rules that choose between them.

:func:`fit_delay` fits delivered packets' delays (a Gaussian, a shifted log-normal and an
empirical quantile table; the log-normal when its Kolmogorov-Smirnov distance is within
sampling noise, else the table) and :func:`fit_loss` the loss pattern (Bernoulli, or
Gilbert when losses cluster and the likelihood ratio says so).
:func:`fleetgym.wrappers.profile_fit.fit_direction` puts them together per direction; the
rules, with their figures on the shipped trace, are in ``docs/profile-fit.md``.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
from scipy.special import kolmogi, ndtr, ndtri, xlogy

from fleetgym.traces.trace_data import TraceData
from fleetgym.wrappers.channels import GaussianChannel, GilbertElliottChannel
from fleetgym.wrappers.fitted_channels import MAX_SIGMA, EmpiricalChannel, LogNormalChannel

__all__ = [
    "KS_CRITICAL",
    "LR_CRITICAL",
    "RUN_BINS",
    "TABLE_PROBABILITIES",
    "DelayFit",
    "LossFit",
    "fit_delay",
    "fit_loss",
    "gaussian_cdf",
    "split_round_trip_loss",
]

#: sqrt(n) times the KS distance at the 5 % level (the Kolmogorov distribution).
KS_CRITICAL = float(kolmogi(0.05))
#: Upper 0.1 % point of chi-square with 1 degree of freedom (Gilbert vs Bernoulli).
LR_CRITICAL = 10.828
#: Cumulative probabilities of the empirical table's rows.
TABLE_PROBABILITIES = (0.0, 0.001, 0.005, *(k / 100 for k in range(1, 100)), 0.995, 0.999, 1.0)
#: Burst-length bins of the loss-run histogram (inclusive; None = no upper end).
RUN_BINS: tuple[tuple[int, int | None], ...] = ((1, 1), (2, 2), (3, 3), (4, 4), (5, 9), (10, None))
_MAX_RHO = 0.9999


CDF = Callable[..., np.ndarray]


class _Sample:
    """The empirical CDF of delivered delays, at its distinct values (both one-sided limits)."""

    def __init__(self, delays: np.ndarray) -> None:
        self.values, counts = np.unique(delays, return_counts=True)
        self.right = np.cumsum(counts) / delays.size
        self.left = self.right - counts / delays.size

    def ks(self, cdf: CDF) -> float:
        """sup |F_trace - F_model|; exact for any non-decreasing model CDF."""
        upper = np.abs(self.right - cdf(self.values, left=False))
        lower = np.abs(self.left - cdf(self.values, left=True))
        return float(max(upper.max(), lower.max()))


def gaussian_cdf(channel: GaussianChannel) -> CDF:
    """CDF of the delay max(0, N(mean, std^2)) of a :class:`GaussianChannel`."""
    m, s = channel.mean_ms, channel.std_ms

    def cdf(x: Any, *, left: bool = False) -> np.ndarray:
        x = np.asarray(x, dtype=np.float64)
        if s == 0.0:
            at = max(m, 0.0)
            return np.asarray(x > at if left else x >= at, dtype=np.float64)
        f = ndtr((x - m) / s)
        return np.asarray(np.where(x <= 0.0 if left else x < 0.0, 0.0, f))

    return cdf


def _lag1(x: np.ndarray) -> float:
    """Lag-1 correlation over successive pairs where both are finite, clipped to [0, 0.9999]."""
    a, b = x[:-1], x[1:]
    ok = np.isfinite(a) & np.isfinite(b)
    if ok.sum() < 10:
        return 0.0
    a, b = a[ok], b[ok]
    sa, sb = float(a.std()), float(b.std())
    if sa == 0.0 or sb == 0.0:
        return 0.0
    r = float(np.mean((a - a.mean()) * (b - b.mean()))) / (sa * sb)
    return float(np.clip(r, 0.0, _MAX_RHO))


def _normal_scores(d: np.ndarray) -> np.ndarray:
    """Phi^-1(rank / (n + 1)), tied values sharing their average rank."""
    order = np.argsort(d, kind="stable")
    _, first, counts = np.unique(d[order], return_index=True, return_counts=True)
    ranks = np.empty(d.size)
    ranks[order] = np.repeat(first + (counts + 1) / 2.0, counts)
    return np.asarray(ndtri(ranks / (d.size + 1)))


def _fit_lognormal(d: np.ndarray, sample: _Sample, rho: float, step: float) -> LogNormalChannel:
    """Shift by KS over a grid (then a finer one), median and sigma by ML given the shift."""
    pos = d[d > 0.0]
    if pos.size < 2 or pos.min() == pos.max():
        return LogNormalChannel(float(np.median(d)), 0.0, 0.0, rho, 0.0, step)
    low = float(pos.min())

    def channel(c: float) -> LogNormalChannel:
        y = np.log(pos - c)
        sigma = min(float(y.std()), MAX_SIGMA)
        return LogNormalChannel(float(np.exp(y.mean())), sigma, c, rho, 0.0, step)

    grid = low * (1.0 - np.geomspace(1.0, 1e-6, 48))
    q_lo, m, q_hi = np.quantile(pos, [0.05, 0.5, 0.95])
    if q_hi + q_lo - 2 * m > 0:  # the three-quantile estimate of the shift
        c0 = (q_hi * q_lo - m * m) / (q_hi + q_lo - 2 * m)
        if 0.0 <= c0 < low:
            grid = np.sort(np.append(grid, c0))
    scores = [sample.ks(channel(float(c)).cdf) for c in grid]
    i = int(np.argmin(scores))
    fine = np.linspace(grid[max(i - 1, 0)], grid[min(i + 1, grid.size - 1)], 17)
    fine_scores = [sample.ks(channel(float(c)).cdf) for c in fine]
    j = int(np.argmin(fine_scores))
    best = float(fine[j]) if fine_scores[j] < scores[i] else float(grid[i])
    return channel(best)


@dataclass(frozen=True, eq=False)
class DelayFit:
    """The delay models fitted to one direction (delay parts only, loss 0) and their KS."""

    gaussian: GaussianChannel
    lognormal: LogNormalChannel
    empirical: EmpiricalChannel
    ks: dict[str, float]
    chosen: str
    n_eff: float
    ks_critical: float
    trace_quantiles_ms: dict[str, float]
    delivered_ms: np.ndarray  # the delivered packets' delays, sorted

    @property
    def correlation(self) -> float:
        """The copula's AR(1) coefficient per trace packet."""
        return self.lognormal.correlation

    @property
    def channel(self) -> LogNormalChannel | EmpiricalChannel:
        """The chosen model."""
        return self.lognormal if self.chosen == "lognormal" else self.empirical

    def model_quantile_ms(self, model: str, q: float) -> float:
        if model == "gaussian":
            g = self.gaussian
            return max(0.0, g.mean_ms + g.std_ms * float(ndtri(q)))
        return float(getattr(self, model).quantile_ms(q))


def fit_delay(trace: TraceData, step: float, delay_model: str) -> DelayFit:
    d_all = trace.delay_ms
    ok = np.isfinite(d_all)
    d = d_all[ok]
    sample = _Sample(d)
    gaussian = GaussianChannel(
        float(d.mean()), float(d.std(ddof=1)), 0.0, _lag1(np.where(ok, d_all, np.nan))
    )
    scores = np.full(d_all.size, np.nan)
    scores[ok] = _normal_scores(d)
    rho = _lag1(scores)
    lognormal = _fit_lognormal(d, sample, rho, step)
    table = np.quantile(d, TABLE_PROBABILITIES)
    empirical = EmpiricalChannel(tuple(table.tolist()), TABLE_PROBABILITIES, rho, 0.0, step)
    ks = {
        "gaussian": sample.ks(gaussian_cdf(gaussian)),
        "lognormal": sample.ks(lognormal.cdf),
        "empirical": sample.ks(empirical.cdf),
    }
    n_eff = max(d.size * (1.0 - rho) / (1.0 + rho), 1.0)
    critical = KS_CRITICAL / math.sqrt(n_eff)
    chosen = delay_model
    if delay_model == "auto":
        chosen = "lognormal" if ks["lognormal"] <= critical else "empirical"
    quantiles = {
        "mean_ms": float(d.mean()),
        "std_ms": float(d.std(ddof=1)),
        "p50_ms": float(np.quantile(d, 0.5)),
        "p99_ms": float(np.quantile(d, 0.99)),
    }
    return DelayFit(
        gaussian, lognormal, empirical, ks, chosen, n_eff, critical, quantiles, np.sort(d)
    )


def _geometric_bin(end: float, lo: int, hi: int | None) -> float:
    """P(lo <= L <= hi) for a burst length L ~ Geometric(end) on 1, 2, ..."""
    stay = 1.0 - end
    upper = 0.0 if hi is None else stay**hi
    return float(stay ** (lo - 1) - upper)


@dataclass(frozen=True, eq=False)
class LossFit:
    """The loss models fitted to one direction, and the trace's loss bursts."""

    packets: int
    rate: float
    bursts: np.ndarray
    gilbert: GilbertElliottChannel | None
    likelihood_ratio: float
    chosen: str

    @property
    def model(self) -> float | GilbertElliottChannel:
        """The chosen loss: a probability, or a loss-only Gilbert-Elliott channel."""
        if self.chosen == "gilbert" and self.gilbert is not None:
            return self.gilbert
        return self.rate

    @property
    def mean_burst(self) -> float:
        """Mean length of the trace's loss runs (0 if nothing was lost)."""
        return float(self.bursts.mean()) if self.bursts.size else 0.0

    def _end(self, model: str) -> float | None:
        """Per-packet probability that a burst ends, under ``model``."""
        if model == "bernoulli":
            return 1.0 - self.rate if self.rate < 1.0 else None
        return self.gilbert.p_bad_to_good if self.gilbert is not None else None

    def model_mean_burst(self, model: str) -> float | None:
        """Mean burst length under ``"bernoulli"`` or ``"gilbert"`` (None if undefined)."""
        end = self._end(model)
        return 1.0 / end if end else None

    def burst_table(self) -> list[dict[str, Any]]:
        """Per burst-length bin: the trace's fraction of bursts and each model's probability."""
        rows = []
        for lo, hi in RUN_BINS:
            inside = (self.bursts >= lo) & (self.bursts <= (hi if hi is not None else np.inf))
            row: dict[str, Any] = {
                "length": str(lo) if hi == lo else (f"{lo}-{hi}" if hi else f"{lo}+"),
                "trace": float(inside.mean()) if self.bursts.size else None,
            }
            for model in ("bernoulli", "gilbert"):
                end = self._end(model)
                row[model] = _geometric_bin(end, lo, hi) if end else None
            rows.append(row)
        return rows


def split_round_trip_loss(
    loss: float | GilbertElliottChannel,
) -> float | GilbertElliottChannel:
    """The per-direction loss whose two independent directions lose a round trip as often.

    A round trip is lost when either direction loses its packet: rate ``L = 1 - (1 - l)^2``,
    so each direction gets ``l = 1 - sqrt(1 - L)``. A loss-only Gilbert chain keeps its
    P(B->G) (the mean burst length) and gets P(G->B) for the stationary rate ``l``.

    Example:
        >>> round(split_round_trip_loss(0.0199), 4)
        0.01
    """
    if isinstance(loss, GilbertElliottChannel):
        rate = loss.p_good_to_bad / (loss.p_good_to_bad + loss.p_bad_to_good)
        one_way = 1.0 - math.sqrt(1.0 - rate)
        p_good_to_bad = one_way * loss.p_bad_to_good / (1.0 - one_way)
        return GilbertElliottChannel(min(p_good_to_bad, 1.0), loss.p_bad_to_good, 0.0, 1.0)
    return 1.0 - math.sqrt(1.0 - float(loss))


def fit_loss(lost: np.ndarray, loss_model: str) -> LossFit:
    n = lost.size
    rate = float(lost.mean())
    edges = np.diff(np.concatenate(([0], lost.astype(np.int8), [0])))
    bursts = np.flatnonzero(edges == -1) - np.flatnonzero(edges == 1)
    prev, nxt = lost[:-1], lost[1:]
    n01 = int(np.sum(~prev & nxt))
    n00 = int(np.sum(~prev & ~nxt))
    n10 = int(np.sum(prev & ~nxt))
    n11 = int(np.sum(prev & nxt))
    if n01 + n00 == 0 or n10 + n11 == 0 or n01 == 0:
        return LossFit(n, rate, bursts, None, 0.0, "bernoulli" if rate else "none")
    a, b = n01 / (n01 + n00), n10 / (n10 + n11)
    m1 = n01 + n11
    p1 = m1 / (n - 1)
    ll_markov = xlogy(n00, 1 - a) + xlogy(n01, a) + xlogy(n10, b) + xlogy(n11, 1 - b)
    ll_bernoulli = xlogy(m1, p1) + xlogy(n - 1 - m1, 1 - p1)
    lr = max(2.0 * float(ll_markov - ll_bernoulli), 0.0)
    gilbert = GilbertElliottChannel(a, b, 0.0, 1.0)
    clusters = 1.0 - b > a
    chosen = loss_model
    if loss_model == "auto":
        chosen = "gilbert" if clusters and lr > LR_CRITICAL else "bernoulli"
    return LossFit(n, rate, bursts, gilbert, lr, chosen)
