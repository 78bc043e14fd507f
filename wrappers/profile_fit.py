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
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from fleetgym.errors import FleetgymError
from fleetgym.traces.loaders import load_trace
from fleetgym.traces.trace_data import TraceData
from fleetgym.validation import check_choice, quote
from fleetgym.wrappers.channel_base import Channel
from fleetgym.wrappers.channels import GilbertElliottChannel
from fleetgym.wrappers.fit_models import (
    LR_CRITICAL,
    DelayFit,
    LossFit,
    fit_delay,
    fit_loss,
    split_round_trip_loss,
)
from fleetgym.wrappers.profiles import NetworkProfile

__all__ = [
    "DELAY_MODELS",
    "LOSS_MODELS",
    "DirectionFit",
    "ProfileFit",
    "TraceFitError",
    "fit_direction",
    "fit_profile",
]

#: Fewest packets a trace must hold, and fewest delivered ones, to be fitted.
MIN_PACKETS, MIN_DELIVERED = 50, 20
#: ``delay_model`` / ``loss_model`` choices (``"auto"``: the selection rules above).
DELAY_MODELS = ("auto", "lognormal", "empirical")
LOSS_MODELS = ("auto", "bernoulli", "gilbert")


class TraceFitError(FleetgymError, ValueError):
    """A trace a profile cannot be fitted to; the message names the trace and the reason.

    Args:
        source: The trace's source (its file path or shipped name); kept as ``source``.
        reason: Why it cannot be fitted, in words; kept as ``reason``.
    """

    def __init__(self, source: str, reason: str) -> None:
        super().__init__(f"cannot fit a profile to {source}: {reason}")
        self.source = source
        self.reason = reason


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
    delay = fit_delay(trace, step, delay_model)
    loss = fit_loss(lost, loss_model)
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
    """The fitted profile, the fit of each direction, and whether both share one trace.

    What :func:`fit_profile` returns.

    Attributes:
        profile: The fitted :class:`~fleetgym.wrappers.profiles.NetworkProfile` (save it
            with :func:`~fleetgym.wrappers.profiles.save_profile_file`).
        uplink: The uplink's fit (figures, tests and the resulting channel).
        downlink: The downlink's fit; the uplink's own object when ``same_both_ways``.
        same_both_ways: True when no downlink trace was given, so one fit serves both
            directions (round trips included); then :meth:`to_dict` writes only the uplink.
        direction_model: One sentence on what the fit took each direction's delays to be
            (one-way, round trips halved, ...) and why; empty by default.
    """

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
