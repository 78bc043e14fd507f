"""The channel interface: :class:`Channel`, :class:`DelaySampler` and their limits.

What every one-way packet channel provides (a fresh, stateful delay stream per
environment and direction; the long-run loss rate; sampled delays and their quantiles)
and the argument checks and limits the channel models share. The models themselves
(Gaussian, Gilbert-Elliott, trace replay) are in :mod:`fleetgym.wrappers.channels`, which
re-exports everything here; import from there.

Convention everywhere: delays are in milliseconds, ``np.inf`` marks a lost packet.
"""

from __future__ import annotations

import abc
import math
from typing import Any

import numpy as np

from fleetgym.validation import check_float, check_int

#: Largest mean or standard deviation of a modelled delay (ms, about 2.8 hours): beyond it
#: the arithmetic of a packet's arrival tick would lose its precision.
MAX_DELAY_MS = 1e7
#: Range of the control period (ms) a channel samples for: 1 us to about 2.8 hours.
MIN_STEP_MS, MAX_STEP_MS = 1e-3, 1e7
#: Most delays one call of ``sample_delays`` returns.
MAX_SAMPLES = 100_000_000


def _real(name: str, value: Any, lo: float, hi: float, *, hi_open: bool = False) -> float:
    """A validated finite float in [lo, hi] (or [lo, hi)); TypeError/ValueError otherwise."""
    out = check_float(name, value, lo, hi)
    if hi_open and out == hi:
        raise ValueError(f"{name}: expected a finite number >= {lo:g} and < {hi:g}, actual {out}")
    return out


def check_step_ms(step_ms: Any) -> float:
    """``step_ms`` as a float in [:data:`MIN_STEP_MS`, :data:`MAX_STEP_MS`]."""
    return check_float("step_ms", step_ms, MIN_STEP_MS, MAX_STEP_MS)


def _check_rng(rng: Any) -> np.random.Generator:
    if not isinstance(rng, np.random.Generator):
        raise TypeError(f"rng: expected a np.random.Generator, actual {type(rng).__name__}")
    return rng


class DelaySampler(abc.ABC):
    """A stateful stream of per-packet delays for one direction of one environment.

    Packet ``k`` of the stream is sent at virtual time ``k * step_ms``. :meth:`next`
    returns the delays (ms, ``np.inf`` = lost) of the next ``n`` packets; successive
    calls continue the stream (AR(1) drift, burst state and trace position carry over).
    """

    @abc.abstractmethod
    def next(self, n: int) -> np.ndarray:
        """Delays (ms, float64, ``np.inf`` = lost) of the next ``n`` packets.

        Args:
            n: How many packets (an int >= 0); the stream continues from where the
                previous call left it.
        """


class Channel(abc.ABC):
    """A one-way network channel: what happens to each packet (loss, then delay).

    Subclasses are frozen value objects. The API other modules rely on:

    - :meth:`sampler` ``(rng, step_ms) -> DelaySampler``: a stateful stream of delays.
    - :meth:`sample_delays` ``(rng, n, step_ms=20.0) -> np.ndarray``: ``n`` consecutive
      packets' delays in ms from a fresh stream; ``np.inf`` for a lost packet (never NaN).
    - :meth:`delay_quantile_ms` ``(q, ...)``: a quantile of the delivered packets' delay,
      estimated from the model (used to size frame stacks).
    - :attr:`loss_rate`: the long-run fraction of lost packets.
    """

    @abc.abstractmethod
    def sampler(self, rng: np.random.Generator, step_ms: float = 20.0) -> DelaySampler:
        """A fresh delay stream drawing from ``rng`` (packets ``step_ms`` apart).

        Args:
            rng: The generator the stream draws from (the shim seeds one per direction).
            step_ms: The time between two packets' sending in ms (the control period;
                default 20); it paces the models whose state evolves in time.
        """

    @property
    @abc.abstractmethod
    def loss_rate(self) -> float:
        """Long-run fraction of packets lost."""

    @abc.abstractmethod
    def describe(self) -> str:
        """One line for listings (``fleetgym profiles``)."""

    #: True for a channel whose streams follow a vector shim's shared clock (a simulated
    #: cell): the vector shim then starts fresh streams at every episode of a sub-env, so
    #: that its packets stay on the clock, instead of continuing one stream.
    follows_clock = False

    def paired_samplers(
        self,
        downlink: Channel,
        up_rng: np.random.Generator,
        down_rng: np.random.Generator,
        step_ms: float = 20.0,
        slot: int = 0,
        clock_ms: float | None = None,
    ) -> tuple[DelaySampler, DelaySampler]:
        """Fresh (uplink, downlink) streams of one episode, this channel as the uplink.

        By default the two are independent (each draws from its own generator) and
        ``slot`` and ``clock_ms`` are unused; a channel whose two directions share one
        medium (a simulated cell) overrides it to replay both from the same stretch of the
        same station.

        Args:
            downlink: The channel carrying the actions.
            up_rng: The uplink stream's generator.
            down_rng: The downlink stream's generator.
            step_ms: The control period in ms.
            slot: Which of several loops sharing the medium this is (a vector shim's
                sub-env index; 0 for a single env).
            clock_ms: Where the episode starts on a clock that the loops sharing the
                medium have in common (a vector shim's: its sub-envs read the medium at
                the same instant on the same tick), in ms; None: the channel draws its own.
        """
        return self.sampler(up_rng, step_ms), downlink.sampler(down_rng, step_ms)

    def sample_delays(self, rng: np.random.Generator, n: int, step_ms: float = 20.0) -> np.ndarray:
        """Delays (ms) of ``n`` consecutive packets from a fresh stream; ``np.inf`` = lost.

        Args:
            rng: The ``np.random.Generator`` the stream draws from.
            n: How many packets, 0 to :data:`MAX_SAMPLES`.
            step_ms: The time between two packets in ms, in [:data:`MIN_STEP_MS`,
                :data:`MAX_STEP_MS`] (default 20).

        Raises:
            TypeError: If ``rng`` is not a ``np.random.Generator`` or ``n`` not an int.
            ValueError: If ``n`` or ``step_ms`` is out of its range.
        """
        rng = _check_rng(rng)
        n = check_int("n", n, 0, MAX_SAMPLES)
        return self.sampler(rng, check_step_ms(step_ms)).next(n)

    def delay_quantile_ms(
        self, q: float, *, n: int = 100_000, seed: int = 0, step_ms: float = 20.0
    ) -> float:
        """Quantile ``q`` of the delay of delivered packets, from ``n`` model samples.

        Returns ``inf`` if every sampled packet was lost.

        Args:
            q: The quantile, in [0, 1] (0.99: the delay 99% of delivered packets beat).
            n: Packets sampled (default 100,000); more is slower and more precise.
            seed: Seed of the sample, so the same arguments give the same estimate.
            step_ms: The time between two packets in ms (default 20).
        """
        q = _real("q", q, 0.0, 1.0)
        delays = self.sample_delays(np.random.default_rng(seed), n, step_ms)
        delivered = delays[np.isfinite(delays)]
        return float(np.quantile(delivered, q)) if delivered.size else math.inf
