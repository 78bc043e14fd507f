"""Fit a network profile to a captured trace: delay marginal, AR(1) drift, loss bursts.

Per direction (a trace file holds one; without a downlink trace the uplink's fit is used
both ways). The rules, with the figures on the shipped trace, are in
``docs/profile-fit.md``:

- **Delay** of delivered packets: a Gaussian (what a ``GaussianChannel`` profile would
  be), a shifted log-normal (shift minimising the Kolmogorov-Smirnov (KS) distance, median
  and sigma by maximum likelihood given it) and a 105-row empirical quantile table. The
  profile takes the log-normal when its KS distance is within sampling noise (below the
  5 % critical value ``1.358 / sqrt(n_eff)``, ``n_eff = n (1 - rho) / (1 + rho)``), else
  the table.
- **Correlation** rho: lag-1 correlation of successive delivered packets' normal scores
  (``Phi^-1(rank / (n + 1))``), the AR(1) coefficient of the channels' Gaussian copula per
  trace packet (negative values become 0). The Gaussian's rho is that of the raw delays.
- **Loss**: Bernoulli (i.i.d.) or Gilbert (a Markov chain on lost/delivered, mean burst
  1 / P(B->G)), chosen when losses cluster (P(lost | lost) > P(lost | delivered)) and the
  likelihood-ratio statistic exceeds 10.83 (chi-square(1), 0.1 %).
- **Direction model**: a trace of one-way delays is one direction (the same fit both ways
  unless a downlink trace is given). Round trips (raw ``ping`` output, or ``rtt=True``)
  are halved into one-way delays for both directions (symmetric paths assumed), and the
  round trips' loss rate ``L`` is split so that a round trip through the two fitted
  directions is lost as often: ``1 - sqrt(1 - L)`` each (a Gilbert chain keeps its mean
  burst length).

Example:
    >>> fit = fit_profile("wifi-office.csv")
    >>> fit.uplink.delay.chosen, fit.uplink.loss.chosen, fit.same_both_ways
    ('lognormal', 'gilbert', True)
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
from scipy.special import kolmogi, ndtr, ndtri, xlogy

from fleetgym.errors import FleetgymError
from fleetgym.traces.loaders import load_trace
from fleetgym.traces.trace_data import TraceData
from fleetgym.validation import check_choice, quote
from fleetgym.wrappers.channels import Channel, GaussianChannel, GilbertElliottChannel
from fleetgym.wrappers.fitted_channels import MAX_SIGMA, EmpiricalChannel, LogNormalChannel
from fleetgym.wrappers.profiles import NetworkProfile

__all__ = [
    "DELAY_MODELS",
    "LOSS_MODELS",
    "DelayFit",
    "DirectionFit",
    "LossFit",
    "ProfileFit",
    "TraceFitError",
    "fit_direction",
    "fit_profile",
    "split_round_trip_loss",
]

#: Fewest packets a trace must hold, and fewest delivered ones, to be fitted.
MIN_PACKETS, MIN_DELIVERED = 50, 20
#: sqrt(n) times the KS distance at the 5 % level (the Kolmogorov distribution).
KS_CRITICAL = float(kolmogi(0.05))
#: Upper 0.1 % point of chi-square with 1 degree of freedom (Gilbert vs Bernoulli).
LR_CRITICAL = 10.828
#: ``delay_model`` / ``loss_model`` choices (``"auto"``: the selection rules above).
DELAY_MODELS = ("auto", "lognormal", "empirical")
LOSS_MODELS = ("auto", "bernoulli", "gilbert")
#: Cumulative probabilities of the empirical table's rows.
TABLE_PROBABILITIES = (0.0, 0.001, 0.005, *(k / 100 for k in range(1, 100)), 0.995, 0.999, 1.0)
#: Burst-length bins of the loss-run histogram (inclusive; None = no upper end).
RUN_BINS: tuple[tuple[int, int | None], ...] = ((1, 1), (2, 2), (3, 3), (4, 4), (5, 9), (10, None))
_MAX_RHO = 0.9999


class TraceFitError(FleetgymError, ValueError):
    """A trace a profile cannot be fitted to; the message names the trace and the reason."""

    def __init__(self, source: str, reason: str) -> None:
        super().__init__(f"cannot fit a profile to {source}: {reason}")
        self.source = source
        self.reason = reason


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


def _fit_delay(trace: TraceData, step: float, delay_model: str) -> DelayFit:
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


def _fit_loss(lost: np.ndarray, loss_model: str) -> LossFit:
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


@dataclass(frozen=True, eq=False)
class DirectionFit:
    """Everything fitted to one direction's trace, and the channel that results.

    ``kind``, ``interval_source`` and ``origin`` are the trace's (:class:`TraceData`):
    what its delays are (``"half-rtt"``: round trips halved), how its packet spacing was
    found and what the file held. ``loss_per_direction`` is the channel's loss rate: the
    trace's, or for round trips the split of :func:`split_round_trip_loss`.
    """

    source: str
    packets: int
    delivered: int
    interval_ms: float
    delay: DelayFit
    loss: LossFit
    channel: Channel
    kind: str = "one-way"
    interval_source: str = ""
    origin: str = ""
    loss_per_direction: float = 0.0

    @property
    def round_trip_loss_split(self) -> bool:
        """Whether the trace's losses are round trips split over two directions."""
        return self.kind == "half-rtt"


def fit_direction(
    trace: TraceData, *, delay_model: str = "auto", loss_model: str = "auto"
) -> DirectionFit:
    """Fit one direction's channel to ``trace`` (see the module docstring for the rules).

    Args:
        trace: The trace (``np.inf`` = lost packet).
        delay_model: ``"auto"``, or force ``"lognormal"`` / ``"empirical"``.
        loss_model: ``"auto"``, or force ``"bernoulli"`` / ``"gilbert"``.

    Raises:
        TraceFitError: Too few packets, too few delivered (all lost), or no spacing
            between send times (every packet sent at the same time).
        TypeError, ValueError: For a bad argument.
    """
    if not isinstance(trace, TraceData):
        raise TypeError(f"trace: expected a TraceData, actual {type(trace).__name__}")
    check_choice("delay_model", delay_model, DELAY_MODELS)
    check_choice("loss_model", loss_model, LOSS_MODELS)
    source = trace.source
    n = len(trace)
    if n < MIN_PACKETS:
        raise TraceFitError(source, f"too few packets: expected at least {MIN_PACKETS}, actual {n}")
    lost = np.isinf(trace.delay_ms)
    delivered = int(n - lost.sum())
    if delivered == 0:
        raise TraceFitError(source, f"every packet is lost ({n} of {n}): no delay to fit")
    if delivered < MIN_DELIVERED:
        raise TraceFitError(
            source,
            f"too few delivered packets: expected at least {MIN_DELIVERED}, actual {delivered} "
            f"of {n}",
        )
    gaps = np.diff(trace.send_ms)
    if not np.any(gaps > 0):
        raise TraceFitError(source, "every packet has the same send time: no packet spacing")
    step = float(np.median(gaps[gaps > 0]))
    delay = _fit_delay(trace, step, delay_model)
    loss = _fit_loss(lost, loss_model)
    model = loss.model
    if trace.kind == "half-rtt" and loss.chosen != "none":
        model = split_round_trip_loss(model)
    rate = model.loss_rate if isinstance(model, GilbertElliottChannel) else float(model)
    channel = replace(delay.channel, loss=model)
    return DirectionFit(
        source,
        n,
        delivered,
        step,
        delay,
        loss,
        channel,
        trace.kind,
        trace.interval_source,
        trace.origin,
        rate,
    )


@dataclass(frozen=True, eq=False)
class ProfileFit:
    """The fitted profile, the fit of each direction, and whether both share one trace."""

    profile: NetworkProfile
    uplink: DirectionFit
    downlink: DirectionFit
    same_both_ways: bool
    direction_model: str = ""

    def to_dict(self) -> dict[str, Any]:
        """The fit's figures as plain JSON data (stored under ``"fit"`` in the profile file)."""
        directions = [("uplink", self.uplink)]
        if not self.same_both_ways:
            directions.append(("downlink", self.downlink))
        out: dict[str, Any] = {
            "same_both_ways": self.same_both_ways,
            "direction_model": self.direction_model,
        }
        for name, fit in directions:
            out[name] = _direction_dict(fit)
        return _json_safe(out)


def _direction_dict(fit: DirectionFit) -> dict[str, Any]:
    d, loss = fit.delay, fit.loss
    g, ln = d.gaussian, d.lognormal
    models: dict[str, Any] = {
        "gaussian": {"mean_ms": g.mean_ms, "std_ms": g.std_ms, "correlation": g.correlation},
        "lognormal": {"median_ms": ln.median_ms, "sigma": ln.sigma, "shift_ms": ln.shift_ms},
        "empirical": {"rows": len(d.empirical.quantiles_ms)},
    }
    for name, entry in models.items():
        entry["ks"] = d.ks[name]
        entry["p50_ms"] = d.model_quantile_ms(name, 0.5)
        entry["p99_ms"] = d.model_quantile_ms(name, 0.99)
    ge = loss.gilbert
    gilbert: dict[str, Any] | None = None
    if ge is not None:
        gilbert = {"p_good_to_bad": ge.p_good_to_bad, "p_bad_to_good": ge.p_bad_to_good}
        gilbert.update(rate=ge.loss_rate, mean_burst=loss.model_mean_burst("gilbert"))
    return {
        "source": fit.source,
        "format": fit.origin,
        "delays": fit.kind,
        "packets": fit.packets,
        "interval_ms": fit.interval_ms,
        "interval_source": fit.interval_source,
        "delay": {
            "trace": d.trace_quantiles_ms,
            "delivered": fit.delivered,
            "correlation": d.correlation,
            "models": models,
            "n_eff": d.n_eff,
            "ks_critical": d.ks_critical,
            "chosen": d.chosen,
        },
        "loss": {
            "rate": loss.rate,
            "bursts": int(loss.bursts.size),
            "mean_burst": loss.mean_burst,
            "models": {
                "bernoulli": {"rate": loss.rate, "mean_burst": loss.model_mean_burst("bernoulli")},
                "gilbert": gilbert,
            },
            "likelihood_ratio": loss.likelihood_ratio,
            "lr_critical": LR_CRITICAL,
            "chosen": loss.chosen,
            "burst_table": loss.burst_table(),
            "per_direction": fit.loss_per_direction,
            "split_from_round_trips": fit.round_trip_loss_split,
        },
        "channel": fit.channel.describe(),
    }


def _json_safe(x: Any) -> Any:
    """NaN and infinity (which JSON lacks) become None."""
    if isinstance(x, float) and not math.isfinite(x):
        return None
    if isinstance(x, dict):
        return {k: _json_safe(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_json_safe(v) for v in x]
    return x


Trace = TraceData | str | os.PathLike[str]


def _load(
    trace: Trace,
    format: str,
    interval_ms: float | None,
    base_delay_ms: float,
    rtt: bool | None,
) -> TraceData:
    if isinstance(trace, TraceData):
        if (rtt is None and trace.kind == "rtt") or (rtt and trace.kind != "half-rtt"):
            return trace.halved()
        return trace
    return load_trace(trace, format, interval_ms=interval_ms, base_delay_ms=base_delay_ms, rtt=rtt)


def _direction_model(up: TraceData, down: TraceData | None, rtt: bool | None) -> str:
    """One sentence: what the fit took each direction's delays to be, and why."""
    if up.kind == "half-rtt":
        why = "--rtt / rtt=True" if rtt else "detected: ping output holds round-trip times"
        return (
            f"round trips halved into one-way delays ({why}; symmetric paths assumed): "
            "the same fit for the uplink and the downlink, each with the loss rate that "
            "loses a round trip as often as the capture did"
        )
    if up.kind == "rtt":
        return (
            "whole round-trip times taken as one-way delays (rtt=False): the same fit for "
            "the uplink and the downlink, so a round trip takes about twice the capture's"
        )
    if down is None:
        return (
            "one-way delays as captured, one direction: the same fit for the uplink and "
            "the downlink (give --downlink TRACE for a separate one)"
        )
    return "one-way delays as captured: the uplink and the downlink fitted to their own traces"


def fit_profile(
    trace: Trace,
    downlink: Trace | None = None,
    *,
    name: str | None = None,
    format: str = "auto",
    interval_ms: float | None = None,
    base_delay_ms: float = 0.0,
    delay_model: str = "auto",
    loss_model: str = "auto",
    rtt: bool | None = None,
) -> ProfileFit:
    """Fit a :class:`NetworkProfile` to a trace (file, shipped name or :class:`TraceData`).

    ``trace`` is the uplink (observations); ``downlink`` the actions' trace, if captured
    separately; without it the uplink's fit is used for both directions. Save the result
    with :func:`fleetgym.wrappers.profiles.save_profile_file` (``fit.to_dict()`` as
    ``fit=``).

    Args:
        trace: The uplink's trace, or the only one.
        downlink: The downlink's trace, or None.
        name: The profile's name; default ``fit-<trace file stem>``.
        format, interval_ms, base_delay_ms: How to read the files (see
            :func:`fleetgym.traces.load_trace`).
        delay_model, loss_model: See :func:`fit_direction`.
        rtt: Whether the trace holds round-trip times (see
            :func:`fleetgym.traces.load_trace`): ``None`` halves ``ping`` output (and a
            :class:`TraceData` of ``kind "rtt"``), ``True`` halves any trace's delays,
            ``False`` takes them as they are. Round trips are fitted once for both
            directions (symmetric paths), so they do not go with ``downlink``.

    Raises:
        TraceFormatError: If a file cannot be read or parsed (names file and line).
        TraceFitError: If a trace cannot be fitted (names the trace and the reason), or
            round trips come with a ``downlink`` trace.
    """
    up_trace = _load(trace, format, interval_ms, base_delay_ms, rtt)
    down_trace = None
    if downlink is not None:
        down_trace = _load(downlink, format, interval_ms, base_delay_ms, rtt)
        round_trip = next((t for t in (up_trace, down_trace) if t.kind != "one-way"), None)
        if round_trip is not None:
            raise TraceFitError(
                round_trip.source,
                "it holds round-trip times (ping output or --rtt), which give both "
                "directions at once; a separate downlink trace (--downlink) must be a "
                "one-way capture, and so must the uplink's",
            )
    up = fit_direction(up_trace, delay_model=delay_model, loss_model=loss_model)
    down = up
    if down_trace is not None:
        down = fit_direction(down_trace, delay_model=delay_model, loss_model=loss_model)
    stem = os.path.splitext(os.path.basename(up_trace.source))[0] or "trace"
    if name is None:
        name = f"fit-{stem}"
    if not isinstance(name, str) or not name.strip():
        raise ValueError(f"name: expected a non-empty str, actual {quote(name)}")
    what = "uplink and downlink" if downlink is None else f"downlink: {down.source}"
    if up.kind == "half-rtt":
        what = "round trips halved, uplink and downlink"
    description = (
        f"fitted to {os.path.basename(up.source)} ({what}): {up.delay.chosen} delay, "
        f"{up.loss.chosen} loss"
    )
    profile = NetworkProfile(name, up.channel, down.channel, description)
    model = _direction_model(up_trace, down_trace, rtt)
    return ProfileFit(profile, up, down, downlink is None, model)
