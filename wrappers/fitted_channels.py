"""Channels fitted to traces: a log-normal and an empirical-table delay, AR(1)-correlated.

Both channels draw each packet's delay as ``F^-1(Phi(z_k))``: ``z`` is an AR(1) process
``z_k = rho z_{k-1} + sqrt(1 - rho^2) e_k`` with a N(0, 1) marginal (a Gaussian copula),
mapped through the fitted marginal ``F``, so successive delays drift together and every
delay still has the marginal ``F``. Loss is composed in: a probability (Bernoulli, i.i.d.)
or a loss-only :class:`~fleetgym.wrappers.channels.GilbertElliottChannel` (bursts).

With ``interval_ms`` set, ``correlation`` and the Gilbert-Elliott transition probabilities
are per packet of a stream ``interval_ms`` apart (the trace's packet spacing); a sampler
for another control period ``step_ms`` rescales them in time (``rho ** (step_ms /
interval_ms)``, the two-state chain's matrix to the same power), so a profile fitted to a
10 ms trace drifts and bursts at the same speed in seconds under a 20 ms control loop.
Without it they are per packet, like :class:`~fleetgym.wrappers.channels.GaussianChannel`.

:func:`channel_to_dict` / :func:`channel_from_dict` turn the parametric channels into plain
JSON data and back (the profile files of :mod:`fleetgym.wrappers.profiles`).

Example:
    >>> import numpy as np
    >>> ch = LogNormalChannel(median_ms=6.0, sigma=0.6, shift_ms=2.0, correlation=0.9, loss=0.05)
    >>> d = ch.sample_delays(np.random.default_rng(0), 100_000)
    >>> round(float(np.median(d[np.isfinite(d)]))), round(float(np.mean(np.isinf(d))), 2)
    (8, 0.05)
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Callable, Sequence
from dataclasses import dataclass, fields, replace
from typing import Any

import numpy as np
from scipy.special import ndtr, ndtri

from fleetgym.validation import check_float, quote
from fleetgym.wrappers.channel_base import (
    MAX_DELAY_MS,
    MAX_STEP_MS,
    MIN_STEP_MS,
    Channel,
    DelaySampler,
    _check_rng,
    _real,
    check_step_ms,
)
from fleetgym.wrappers.channels import GaussianChannel, GilbertElliottChannel, _ar1_filter

__all__ = [
    "CHANNEL_TYPES",
    "EmpiricalChannel",
    "LogNormalChannel",
    "channel_from_dict",
    "channel_to_dict",
    "rescale_gilbert_elliott",
]

#: Largest log-normal sigma (a wider one would overflow to an infinite, i.e. lost, delay).
MAX_SIGMA = 10.0
#: Most rows of an empirical quantile table.
MAX_TABLE_ROWS = 10_000
#: Largest AR(1) coefficient after rescaling to a control period (keeps sqrt(1 - rho^2) > 0).
_MAX_RHO = 1.0 - 1e-12

Loss = float | GilbertElliottChannel


def _check_loss(loss: Any) -> Loss:
    if isinstance(loss, GilbertElliottChannel):
        if loss.mean_ms or loss.std_ms or loss.correlation:
            raise ValueError(
                "loss: expected a GilbertElliottChannel describing loss only "
                f"(mean_ms = std_ms = correlation = 0), actual {loss!r}"
            )
        return loss
    if isinstance(loss, bool) or not isinstance(loss, numbers.Real):
        raise TypeError(
            "loss: expected a loss probability or a GilbertElliottChannel, "
            f"actual {type(loss).__name__} {quote(loss)}"
        )
    return _real("loss", loss, 0.0, 1.0)


def _check_interval(value: Any) -> float | None:
    if value is None:
        return None
    return check_float("interval_ms", value, MIN_STEP_MS, MAX_STEP_MS)


def rescale_gilbert_elliott(channel: GilbertElliottChannel, t: float) -> GilbertElliottChannel:
    """The chain of ``channel`` observed every ``t`` packets (``t > 0``, not necessarily whole).

    A two-state chain with per-packet matrix P has P^t = stationary law + lambda^t
    (I - stationary law), lambda = 1 - P(G->B) - P(B->G); the stationary law and so the
    loss rate are kept. A chain with lambda <= 0 (one that alternates) is treated as
    memoryless at the new spacing.

    Example:
        >>> ge = GilbertElliottChannel(0.01, 0.25)
        >>> r = rescale_gilbert_elliott(ge, 2.0)
        >>> round(r.p_bad_to_good, 4), round(r.loss_rate, 4) == round(ge.loss_rate, 4)
        (0.435, True)
    """
    t = check_float("t", t, 0.0, strict=True)
    if t == 1.0:
        return channel
    a, b = channel.p_good_to_bad, channel.p_bad_to_good
    lam = 1.0 - a - b
    lam_t = min(lam**t, _MAX_RHO) if lam > 0.0 else 0.0
    bad = a / (a + b)
    return replace(
        channel, p_good_to_bad=bad * (1.0 - lam_t), p_bad_to_good=(1 - bad) * (1 - lam_t)
    )


def _loss_text(loss: Loss) -> str:
    if isinstance(loss, float):
        return f"loss {loss:.1%}"
    burst = f", mean burst {1.0 / loss.p_bad_to_good:.2g}" if loss.p_bad_to_good > 0 else ""
    if loss.loss_good == 0.0 and loss.loss_bad == 1.0:
        return f"Gilbert loss {loss.loss_rate:.1%}{burst}"
    return (
        f"Gilbert-Elliott loss {loss.loss_rate:.1%} (P(G->B)={loss.p_good_to_bad:.3g}, "
        f"P(B->G)={loss.p_bad_to_good:.3g}, loss {loss.loss_good:g} / {loss.loss_bad:g})"
    )


class _CopulaSampler(DelaySampler):
    """Loss pattern, then delays ``marginal(z)`` of an AR(1) latent normal z (state kept)."""

    def __init__(
        self,
        marginal: Callable[[np.ndarray], np.ndarray],
        correlation: float,
        interval_ms: float | None,
        loss: Loss,
        rng: np.random.Generator,
        step_ms: float,
    ) -> None:
        t = 1.0 if interval_ms is None else step_ms / interval_ms
        self._rho = min(correlation**t, _MAX_RHO) if correlation > 0.0 else 0.0
        self._marginal = marginal
        self._rng = rng
        self._z: float | None = None
        self._p = loss if isinstance(loss, float) else 0.0
        self._bursts = (
            None
            if isinstance(loss, float)
            else rescale_gilbert_elliott(loss, t).sampler(rng, step_ms)
        )

    def next(self, n: int) -> np.ndarray:
        if n == 0:
            return np.empty(0)
        lost: np.ndarray | None = None
        if self._bursts is not None:
            lost = np.isinf(self._bursts.next(n))
        elif self._p > 0.0:
            lost = self._rng.random(n) < self._p
        z = self._rng.standard_normal(n)
        if self._rho > 0.0:
            z = _ar1_filter(z, self._rho, self._z)
            self._z = float(z[-1])
        d = self._marginal(z)
        if lost is not None:
            d[lost] = np.inf
        return d


@dataclass(frozen=True)
class LogNormalChannel(Channel):
    """Delay ``shift_ms + median_ms * exp(sigma * z)``, z an AR(1) N(0, 1); loss composed in.

    The delay is a three-parameter (shifted) log-normal: a floor ``shift_ms`` (propagation)
    plus a log-normal queueing part with median ``median_ms``; the delays' median is
    ``shift_ms + median_ms``. See the module docstring for ``correlation``, ``loss`` and
    ``interval_ms``.

    Args:
        median_ms: Median of the log-normal part (ms), ``>= 0``.
        sigma: Standard deviation of its logarithm, in [0, 10].
        shift_ms: Constant added to every delay (ms), ``>= 0``.
        correlation: AR(1) coefficient of the latent normal, in [0, 1).
        loss: Loss probability (i.i.d.) or a loss-only GilbertElliottChannel.
        interval_ms: Packet spacing the per-packet parameters refer to, or None.

    Example:
        >>> ch = LogNormalChannel(6.0, 0.6, shift_ms=2.0)
        >>> round(float(ch.quantile_ms(0.5)), 3), round(float(ch.cdf(8.0)), 3)
        (8.0, 0.5)

    Raises:
        TypeError: If an argument has the wrong type.
        ValueError: If an argument is out of its range.
    """

    median_ms: float = 0.0
    sigma: float = 0.0
    shift_ms: float = 0.0
    correlation: float = 0.0
    loss: Loss = 0.0
    interval_ms: float | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "median_ms", _real("median_ms", self.median_ms, 0, MAX_DELAY_MS))
        object.__setattr__(self, "sigma", _real("sigma", self.sigma, 0.0, MAX_SIGMA))
        object.__setattr__(self, "shift_ms", _real("shift_ms", self.shift_ms, 0, MAX_DELAY_MS))
        object.__setattr__(
            self, "correlation", _real("correlation", self.correlation, 0.0, 1.0, hi_open=True)
        )
        object.__setattr__(self, "loss", _check_loss(self.loss))
        object.__setattr__(self, "interval_ms", _check_interval(self.interval_ms))

    @property
    def loss_rate(self) -> float:
        return self.loss if isinstance(self.loss, float) else self.loss.loss_rate

    def quantile_ms(self, u: Any) -> np.ndarray:
        """The delay (ms) at cumulative probability ``u`` (array-like in [0, 1]).

        Args:
            u: Probabilities in [0, 1], a scalar or an array (the result has its shape):
                the share of delivered packets whose delay is at most the result.
        """
        z = ndtri(np.asarray(u, dtype=np.float64))
        with np.errstate(invalid="ignore"):  # sigma = 0 at u = 0 or 1: 0 * inf
            out = self.shift_ms + self.median_ms * np.exp(self.sigma * z)
        return np.asarray(np.where(np.isnan(out), self.shift_ms + self.median_ms, out))

    def cdf(self, x_ms: Any, *, left: bool = False) -> np.ndarray:
        """P(delay <= x) (or P(delay < x) with ``left``) of a delivered packet.

        Args:
            x_ms: Delays in ms, a scalar or an array (the result has its shape).
            left: Return P(delay < x) instead of P(delay <= x); they differ only where the
                delay has an atom (``sigma`` or ``median_ms`` 0). Default False.
        """
        x = np.asarray(x_ms, dtype=np.float64)
        if self.sigma == 0.0 or self.median_ms == 0.0:
            at = self.shift_ms + self.median_ms
            return np.asarray(x > at if left else x >= at, dtype=np.float64)
        with np.errstate(divide="ignore", invalid="ignore"):
            z = (np.log(np.maximum(x - self.shift_ms, 0.0)) - math.log(self.median_ms)) / self.sigma
        return np.asarray(ndtr(z))

    def describe(self) -> str:
        text = (
            f"log-normal {self.shift_ms:.3g} + {self.median_ms:.3g}·e^({self.sigma:.3g} Z) ms "
            f"(p50 {float(self.quantile_ms(0.5)):.1f}, p99 {float(self.quantile_ms(0.99)):.1f} ms)"
        )
        return text + _extras(self.correlation, self.interval_ms, self.loss)

    def sampler(self, rng: np.random.Generator, step_ms: float = 20.0) -> DelaySampler:
        shift, median, sigma = self.shift_ms, self.median_ms, self.sigma

        def marginal(z: np.ndarray) -> np.ndarray:
            z *= sigma
            np.exp(z, out=z)
            z *= median
            z += shift
            return z

        return _CopulaSampler(
            marginal,
            self.correlation,
            self.interval_ms,
            self.loss,
            _check_rng(rng),
            check_step_ms(step_ms),
        )


def _extras(correlation: float, interval_ms: float | None, loss: Loss) -> str:
    text = ""
    if correlation:
        per = f" per {interval_ms:g} ms" if interval_ms is not None else ""
        text += f", AR(1) rho={correlation:.3g}{per}"
    return f"{text}, {_loss_text(loss)}"


def _table(name: str, values: Any, lo: float, hi: float) -> tuple[float, ...]:
    if isinstance(values, (str, bytes)) or not isinstance(values, (Sequence, np.ndarray)):
        raise TypeError(f"{name}: expected a sequence of numbers, actual {type(values).__name__}")
    if not 2 <= len(values) <= MAX_TABLE_ROWS:
        raise ValueError(
            f"{name}: expected 2 to {MAX_TABLE_ROWS} values, actual {len(values)} values"
        )
    out = tuple(check_float(f"{name}[{i}]", v, lo, hi) for i, v in enumerate(values))
    for i in range(1, len(out)):
        if out[i] < out[i - 1]:
            raise ValueError(
                f"{name}[{i}]: expected non-decreasing values, actual {out[i]} after {out[i - 1]}"
            )
    return out


@dataclass(frozen=True)
class EmpiricalChannel(Channel):
    """Delay from a quantile table (linear between rows), z an AR(1) N(0, 1); loss composed in.

    Row ``i`` says: a fraction ``probabilities[i]`` of delivered packets is at most
    ``quantiles_ms[i]`` ms; between rows the quantile function is linear, so a delay is
    ``interp(Phi(z), probabilities, quantiles_ms)``. See the module docstring for
    ``correlation``, ``loss`` and ``interval_ms``.

    Args:
        quantiles_ms: Non-decreasing delays (ms), 2 to 10 000 rows, each in [0, 1e7].
        probabilities: Strictly increasing, from 0 to 1, one per row; None = evenly spaced.
        correlation: AR(1) coefficient of the latent normal, in [0, 1).
        loss: Loss probability (i.i.d.) or a loss-only GilbertElliottChannel.
        interval_ms: Packet spacing the per-packet parameters refer to, or None.

    Example:
        >>> ch = EmpiricalChannel((2.0, 5.0, 40.0), (0.0, 0.5, 1.0))
        >>> float(ch.quantile_ms(0.75)), float(ch.cdf(5.0))
        (22.5, 0.5)

    Raises:
        TypeError: If an argument has the wrong type.
        ValueError: If an argument is out of its range.
    """

    quantiles_ms: tuple[float, ...] = (0.0, 0.0)
    probabilities: tuple[float, ...] | None = None
    correlation: float = 0.0
    loss: Loss = 0.0
    interval_ms: float | None = None

    def __post_init__(self) -> None:
        q = _table("quantiles_ms", self.quantiles_ms, 0.0, MAX_DELAY_MS)
        if self.probabilities is None:
            p = tuple(float(v) for v in np.linspace(0.0, 1.0, len(q)))
        else:
            p = _table("probabilities", self.probabilities, 0.0, 1.0)
            if len(p) != len(q):
                raise ValueError(
                    f"probabilities: expected one per quantile ({len(q)}), actual {len(p)}"
                )
            if (
                p[0] != 0.0
                or p[-1] != 1.0
                or any(b <= a for a, b in zip(p[:-1], p[1:], strict=True))
            ):
                raise ValueError(
                    "probabilities: expected strictly increasing values from 0 to 1, "
                    f"actual {quote(p)}"
                )
        object.__setattr__(self, "quantiles_ms", q)
        object.__setattr__(self, "probabilities", p)
        object.__setattr__(
            self, "correlation", _real("correlation", self.correlation, 0.0, 1.0, hi_open=True)
        )
        object.__setattr__(self, "loss", _check_loss(self.loss))
        object.__setattr__(self, "interval_ms", _check_interval(self.interval_ms))

    def _arrays(self) -> tuple[np.ndarray, np.ndarray]:
        return np.asarray(self.probabilities, dtype=np.float64), np.asarray(self.quantiles_ms)

    @property
    def loss_rate(self) -> float:
        return self.loss if isinstance(self.loss, float) else self.loss.loss_rate

    def quantile_ms(self, u: Any) -> np.ndarray:
        """The delay (ms) at cumulative probability ``u`` (array-like in [0, 1]).

        Args:
            u: Probabilities in [0, 1], a scalar or an array (the result has its shape):
                the share of delivered packets whose delay is at most the result.
        """
        p, q = self._arrays()
        return np.asarray(np.interp(np.asarray(u, dtype=np.float64), p, q))

    def cdf(self, x_ms: Any, *, left: bool = False) -> np.ndarray:
        """P(delay <= x) (or P(delay < x) with ``left``): the inverse of the linear table.

        Args:
            x_ms: Delays in ms, a scalar or an array (the result has its shape).
            left: Return P(delay < x) instead of P(delay <= x); they differ only where the
                table has repeated delays (an atom). Default False.
        """
        p, q = self._arrays()
        x = np.asarray(x_ms, dtype=np.float64)
        j = np.searchsorted(q, x, side="left" if left else "right")  # rows below (or at) x
        lo = np.clip(j - 1, 0, q.size - 1)
        hi = np.clip(j, 0, q.size - 1)
        width = q[hi] - q[lo]
        with np.errstate(divide="ignore", invalid="ignore"):
            frac = np.where(width > 0, (x - q[lo]) / width, 1.0)
        inside = p[lo] + np.clip(frac, 0.0, 1.0) * (p[hi] - p[lo])
        return np.asarray(np.where(j == 0, 0.0, np.where(j >= q.size, 1.0, inside)))

    def describe(self) -> str:
        text = (
            f"empirical table of {len(self.quantiles_ms)} quantiles "
            f"(p50 {float(self.quantile_ms(0.5)):.1f}, p99 {float(self.quantile_ms(0.99)):.1f} ms)"
        )
        return text + _extras(self.correlation, self.interval_ms, self.loss)

    def sampler(self, rng: np.random.Generator, step_ms: float = 20.0) -> DelaySampler:
        p, q = self._arrays()

        def marginal(z: np.ndarray) -> np.ndarray:
            return np.asarray(np.interp(ndtr(z), p, q))

        return _CopulaSampler(
            marginal,
            self.correlation,
            self.interval_ms,
            self.loss,
            _check_rng(rng),
            check_step_ms(step_ms),
        )


# --------------------------------------------------------------------------------------
# Plain data (JSON) for the parametric channels
# --------------------------------------------------------------------------------------
_TYPES: dict[str, type[Channel]] = {
    "gaussian": GaussianChannel,
    "gilbert_elliott": GilbertElliottChannel,
    "lognormal": LogNormalChannel,
    "empirical": EmpiricalChannel,
}
#: The ``"type"`` values of a channel in a profile file.
CHANNEL_TYPES = tuple(_TYPES)
_GE_LOSS_KEYS = ("p_good_to_bad", "p_bad_to_good", "loss_good", "loss_bad")


def _loss_to_data(loss: Loss) -> dict[str, Any]:
    if isinstance(loss, float):
        return {"type": "bernoulli", "rate": loss}
    return {"type": "gilbert_elliott", **{k: getattr(loss, k) for k in _GE_LOSS_KEYS}}


def _keys(where: str, data: dict[str, Any], allowed: Sequence[str]) -> None:
    unknown = sorted(str(k) for k in data if k not in allowed)
    if unknown:
        raise ValueError(f"{where}: unknown keys {unknown}, expected some of {list(allowed)}")


def _loss_from_data(data: Any, where: str) -> Loss:
    if isinstance(data, numbers.Real) and not isinstance(data, bool):
        return float(data)
    if not isinstance(data, dict) or data.get("type") not in ("bernoulli", "gilbert_elliott"):
        raise ValueError(
            f"{where}: expected a probability or an object with \"type\" 'bernoulli' or "
            f"'gilbert_elliott', actual {quote(data)}"
        )
    if data["type"] == "bernoulli":
        _keys(where, data, ("type", "rate"))
        if "rate" not in data:
            raise ValueError(f'{where}: expected a "rate" for Bernoulli loss, actual none')
        return data["rate"]  # checked by the channel's constructor
    _keys(where, data, ("type", *_GE_LOSS_KEYS))
    try:
        return GilbertElliottChannel(**{k: v for k, v in data.items() if k != "type"})
    except (TypeError, ValueError) as exc:
        raise type(exc)(f"{where}.{exc}") from None


def channel_to_dict(channel: Channel) -> dict[str, Any]:
    """Plain data (JSON-able) describing ``channel``: ``{"type": ..., parameters}``.

    Example:
        >>> channel_to_dict(GaussianChannel(30, 10, 0.02))
        {'type': 'gaussian', 'mean_ms': 30.0, 'std_ms': 10.0, 'loss': 0.02, 'correlation': 0.0}

    Raises:
        TypeError: For a channel that has no plain-data form (a trace replay, a custom class).
    """
    for name, cls in _TYPES.items():
        if type(channel) is cls:
            out: dict[str, Any] = {"type": name}
            for field in fields(cls):  # type: ignore[arg-type]
                value = getattr(channel, field.name)
                if field.name == "loss" and name in ("lognormal", "empirical"):
                    value = _loss_to_data(value)
                elif isinstance(value, tuple):
                    value = list(value)
                out[field.name] = value
            return out
    raise TypeError(
        f"channel: expected one of the channel types {list(CHANNEL_TYPES)}, actual "
        f"{type(channel).__name__} (a trace replay is kept as its trace file, not as data)"
    )


def channel_from_dict(data: Any, where: str = "channel") -> Channel:
    """The channel that :func:`channel_to_dict` described (``where`` prefixes messages).

    Example:
        >>> channel_from_dict({"type": "lognormal", "median_ms": 6, "sigma": 0.5})
        LogNormalChannel(median_ms=6.0, sigma=0.5, shift_ms=0.0, correlation=0.0, loss=0.0, interval_ms=None)

    Raises:
        TypeError, ValueError: For data that is not an object, an unknown type or key, or a
            parameter of the wrong type or out of range (the message names the key).
    """
    if not isinstance(data, dict):
        raise TypeError(f'{where}: expected an object with a "type", actual {quote(data)}')
    kind = data.get("type")
    if kind not in _TYPES:
        raise ValueError(
            f"{where}.type: expected one of {list(CHANNEL_TYPES)}, actual {quote(kind)}"
        )
    cls = _TYPES[kind]
    names = [f.name for f in fields(cls)]  # type: ignore[arg-type]
    _keys(where, data, ("type", *names))
    kwargs = {k: v for k, v in data.items() if k != "type"}
    if "loss" in kwargs and kind in ("lognormal", "empirical"):
        kwargs["loss"] = _loss_from_data(kwargs["loss"], f"{where}.loss")
    try:
        return cls(**kwargs)
    except (TypeError, ValueError) as exc:
        raise type(exc)(f"{where}.{exc}") from None
