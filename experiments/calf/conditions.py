"""The CALF experiment's network conditions and training regimes (plain data).

Three training regimes (CALF's), each with and without compensation:

- ``baseline``: Mode 1, no network (the ``perfect`` profile, bit-identical to the bare env);
- ``delay-only``: a fixed 50 ms each way, no jitter, no loss;
- ``net-aware``: delay + jitter + loss (``wifi-normal``); ``net-aware-mix`` draws the
  profile per episode from ``perfect``/``ethernet``/``wifi-normal``/``wifi-degraded``.

Every policy is evaluated under each :class:`NetworkCondition` of :data:`EVAL_CONDITIONS`
(and the ablation and degraded-variant tables); the gap of a condition is
``1 - return(condition) / return(sim-clean)`` of the same policies.
"""

from __future__ import annotations

import functools
import os
import re
from dataclasses import dataclass
from typing import Any

from fleetgym.wrappers import profiles
from fleetgym.wrappers.channels import GaussianChannel

__all__ = [
    "ABLATION_CONDITIONS",
    "COMPENSATIONS",
    "CONDITIONS",
    "DEFAULT_REGIMES",
    "DEGRADED_VARIANTS",
    "EVAL_CONDITIONS",
    "QUICK_REGIMES",
    "REGIMES",
    "VARIANT_REGIMES",
    "NetworkCondition",
    "Regime",
    "network_profile",
    "regime_by_name",
    "resolve_condition",
    "shipped_trace_condition",
]

#: (mean_ms, std_ms, loss, correlation) of one Gaussian channel.
ChannelSpec = tuple[float, float, float, float]


@dataclass(frozen=True)
class NetworkCondition:
    """One network configuration: a named profile, or explicit Gaussian channels.

    Models what the shim is built with. A condition is plain data (picklable, hashable);
    :meth:`shim_kwargs` turns it into the shim's keyword arguments.

    Args:
        name: Label used in tables.
        profile: Profile name (or profile file, or trace file: :func:`network_profile`),
            or a tuple of names drawn per episode.
        uplink: Observation channel ``(mean_ms, std_ms, loss, correlation)`` when no profile.
        downlink: Action channel, same form.
        delivery: ``"fifo"``/``"latest"``, or ``None`` for the shim's default.
        step_ms: Control period override (``None`` = the env setup's).
        description: One line for the report.

    Example:
        >>> c = NetworkCondition("fixed-50ms", uplink=(50.0, 0.0, 0.0, 0.0), downlink=(50.0, 0.0, 0.0, 0.0))
        >>> sorted(c.shim_kwargs())
        ['downlink', 'uplink']

    Raises:
        ValueError: if neither or both of ``profile`` and the channels are given.
    """

    name: str
    profile: str | tuple[str, ...] | None = None
    uplink: ChannelSpec | None = None
    downlink: ChannelSpec | None = None
    delivery: str | None = None
    step_ms: float | None = None
    description: str = ""

    def __post_init__(self) -> None:
        has_channels = self.uplink is not None or self.downlink is not None
        if (self.profile is None) == (not has_channels):
            raise ValueError(
                f"NetworkCondition {self.name!r}: expected a profile or uplink/downlink "
                f"channels (exactly one of the two), actual profile={self.profile!r}, "
                f"uplink={self.uplink!r}, downlink={self.downlink!r}"
            )

    def shim_kwargs(self) -> dict[str, Any]:
        """Keyword arguments for :class:`~fleetgym.wrappers.network_shim.NetworkShimWrapper`."""
        kwargs: dict[str, Any] = {}
        if self.profile is not None:
            kwargs["profile"] = (
                network_profile(self.profile)
                if isinstance(self.profile, str)
                else [network_profile(p) for p in self.profile]
            )
        else:
            for key, spec in (("uplink", self.uplink), ("downlink", self.downlink)):
                mean, std, loss, corr = spec if spec is not None else (0.0, 0.0, 0.0, 0.0)
                kwargs[key] = GaussianChannel(mean_ms=mean, std_ms=std, loss=loss, correlation=corr)
        if self.delivery is not None:
            kwargs["delivery"] = self.delivery
        return kwargs


def _gauss(mean: float, std: float = 0.0, loss: float = 0.0, corr: float = 0.0) -> ChannelSpec:
    return (float(mean), float(std), float(loss), float(corr))


#: Every named condition: evaluation grid, ablation, degraded variants.
CONDITIONS: dict[str, NetworkCondition] = {
    c.name: c
    for c in (
        NetworkCondition("sim-clean", profile="perfect", description="no network (Mode 1)"),
        NetworkCondition("ethernet", profile="ethernet", description="2±0.5 ms"),
        NetworkCondition("wifi-normal", profile="wifi-normal", description="30±10 ms, 2 % loss"),
        NetworkCondition(
            "wifi-degraded", profile="wifi-degraded", description="80±40 ms, 10 % loss"
        ),
        NetworkCondition(
            "fixed-50ms",
            uplink=_gauss(50),
            downlink=_gauss(50),
            description="50 ms each way, no jitter, no loss",
        ),
        NetworkCondition(
            "fixed-30ms",
            uplink=_gauss(30),
            downlink=_gauss(30),
            description="30 ms each way, no jitter, no loss",
        ),
        NetworkCondition(
            "jitter-only",
            uplink=_gauss(30, 10),
            downlink=_gauss(30, 10),
            description="30±10 ms each way, no loss",
        ),
        NetworkCondition(
            "loss-only",
            uplink=_gauss(0, 0, 0.02),
            downlink=_gauss(0, 0, 0.02),
            description="2 % loss each way, no delay",
        ),
        NetworkCondition(
            "jitter+loss",
            uplink=_gauss(30, 10, 0.02),
            downlink=_gauss(30, 10, 0.02),
            description="30±10 ms, 2 % loss each way (= wifi-normal)",
        ),
        NetworkCondition(
            "degraded-latest",
            profile="wifi-degraded",
            delivery="latest",
            description="wifi-degraded, independent delays (reordering)",
        ),
        NetworkCondition(
            "degraded-corr0.9",
            uplink=_gauss(80, 40, 0.10, 0.9),
            downlink=_gauss(80, 40, 0.10, 0.9),
            description="wifi-degraded with AR(1) delay correlation 0.9",
        ),
        NetworkCondition(
            "degraded-uplink-only",
            uplink=_gauss(80, 40, 0.10),
            downlink=_gauss(0),
            description="wifi-degraded on observations only, actions local",
        ),
        # Wi-Fi latency figures are usually ping round trips: 80±40 ms RTT and ~10 %
        # loss per round trip is 40±28 ms (28 = 40/sqrt 2) and 5 % loss each way.
        NetworkCondition(
            "degraded-rtt",
            uplink=_gauss(40, 28.3, 0.05),
            downlink=_gauss(40, 28.3, 0.05),
            description="wifi-degraded read as round trip: 40±28 ms, 5 % loss each way",
        ),
        NetworkCondition(
            "degraded-100ms-loop",
            profile="wifi-degraded",
            step_ms=100.0,
            description="wifi-degraded with a 100 ms control period",
        ),
    )
}

#: The paper's evaluation grid (the shipped trace is appended at run time).
EVAL_CONDITIONS: tuple[str, ...] = ("sim-clean", "ethernet", "wifi-normal", "wifi-degraded")
#: The paper's ablation, each against a clean-trained policy.
ABLATION_CONDITIONS: tuple[str, ...] = (
    "sim-clean",
    "fixed-50ms",
    "fixed-30ms",
    "jitter-only",
    "loss-only",
    "jitter+loss",
)
#: Physically meaningful changes to wifi-degraded (which brings the paper's pattern back?).
DEGRADED_VARIANTS: tuple[str, ...] = (
    "wifi-degraded",
    "degraded-latest",
    "degraded-corr0.9",
    "degraded-uplink-only",
    "degraded-rtt",
)


def shipped_trace_condition() -> NetworkCondition | None:
    """The first packaged trace profile (``trace-<file>``) as a condition, if any."""
    traces = [n for n in profiles.list_profiles() if n.startswith("trace-")]
    if not traces:
        return None
    return NetworkCondition(
        traces[0], profile=traces[0], description=f"replay of the shipped trace {traces[0]}"
    )


#: The control period the delay-sweep conditions are written for (CartPole's 20 ms).
SWEEP_PERIOD_MS = 20.0
_SWEEP = re.compile(r"rtt-(\d{1,2})(-jitter)?")


def _delay_sweep_condition(name: str) -> NetworkCondition | None:
    """``rtt-N``: a constant round trip of N ticks at 20 ms (ceil(N/2) ticks on the
    observation path, floor(N/2) on the action path; each delay a whole number of
    periods, so under the loop each packet is used exactly that many ticks late);
    ``rtt-N-jitter``: the same means with 10 ms (half a period) of Gaussian jitter."""
    match = _SWEEP.fullmatch(name)
    if match is None:
        return None
    ticks = int(match.group(1))
    std = SWEEP_PERIOD_MS / 2 if match.group(2) else 0.0
    up, down = (ticks + 1) // 2 * SWEEP_PERIOD_MS, ticks // 2 * SWEEP_PERIOD_MS
    return NetworkCondition(
        name,
        uplink=_gauss(up, std),
        downlink=_gauss(down, std),
        description=f"round trip {ticks} ticks ({up:g} + {down:g} ms"
        + (f", ±{std:g} ms each way)" if std else ", constant)"),
    )


#: Suffixes that make a name a file name (a missing file is then reported as such).
_FILE_SUFFIXES = (".json", ".csv", ".txt", ".log", ".ping", ".up", ".down", ".mahimahi", ".mm")


@functools.lru_cache(maxsize=32)
def _trace_file_profile(path: str) -> Any:
    from fleetgym.wrappers import NetworkProfile, TraceChannel

    channel = TraceChannel.from_file(path)
    stem = os.path.splitext(os.path.basename(path))[0] or "trace"
    return NetworkProfile(
        stem, channel, channel, f"replay of trace file {path} (both ways, independent offsets)"
    )


def network_profile(name: str) -> Any:
    """What the shim is given for a condition's profile ``name``: a registered name or a
    ``.json`` profile file as is (the shim reads them), any other existing file as a trace
    replayed both ways from independent offsets (a :class:`~fleetgym.wrappers.NetworkProfile`
    of :class:`~fleetgym.wrappers.TraceChannel`, loaded once; raw ``ping`` output has its
    round trips halved, with the whole round-trip loss on each path; ``fleetgym profiles
    fit`` splits it)."""
    if name in profiles.list_profiles() or name.lower().endswith(".json"):
        return name
    if os.path.isfile(name):
        return _trace_file_profile(os.path.abspath(name))
    return name


def _file_condition(name: str) -> NetworkCondition | None:
    """A condition for a profile file or trace file ``name``; None if it names no file.

    Raises:
        ValueError: for a missing file (a name with a file suffix or a folder), or a file
            that does not read as a profile or a trace (the reader's message).
    """
    if os.path.isfile(name):
        profile = profiles.get_profile(name) if name.lower().endswith(".json") else None
        if profile is None:
            profile = network_profile(name)
        return NetworkCondition(name, profile=name, description=profile.description or name)
    if name.lower().endswith(_FILE_SUFFIXES) or os.sep in name or "/" in name:
        raise ValueError(
            f"condition: expected a profile name, a profile file (.json) or a trace file, "
            f"actual {name!r} (no such file)"
        )
    return None


def resolve_condition(name: str) -> NetworkCondition:
    """A condition by name: a table entry, ``rtt-N`` / ``rtt-N-jitter`` (N = 0..99 ticks
    of round trip, the delay sweep), any registered profile name, a profile file (``.json``,
    as ``fleetgym profiles fit`` writes) or a trace file (any format of
    ``traces/README.md``, replayed both ways).

    Raises:
        ValueError: for a name that is none of these, a missing file or a malformed one.
    """
    if name in CONDITIONS:
        return CONDITIONS[name]
    sweep = _delay_sweep_condition(name)
    if sweep is not None:
        return sweep
    if name in profiles.list_profiles():
        return NetworkCondition(
            name, profile=name, description=profiles.get_profile(name).description
        )
    from_file = _file_condition(name)
    if from_file is not None:
        return from_file
    raise ValueError(
        f"condition: expected one of {sorted(CONDITIONS)}, a profile name "
        f"{profiles.list_profiles()}, a profile file (.json) or a trace file, actual {name!r}"
    )


@dataclass(frozen=True)
class Regime:
    """A training regime: the network trained under, and whether inputs are compensated.

    Args:
        name: Label (``<regime>`` or ``<regime>+comp``).
        train_condition: Name of the :class:`NetworkCondition` trained under.
        compensated: Whether the policy gets the compensation stack.

    Example:
        >>> REGIMES["net-aware+comp"].compensated, REGIMES["net-aware+comp"].train_condition
        (True, 'wifi-normal')
    """

    name: str
    train_condition: str
    compensated: bool
    compensation: str = "history"

    def __post_init__(self) -> None:
        if self.compensation not in COMPENSATIONS.values():
            raise ValueError(
                f"Regime {self.name!r}: expected a compensation in "
                f"{sorted(set(COMPENSATIONS.values()))}, actual {self.compensation!r}"
            )

    @property
    def base(self) -> str:
        """The regime without its compensation suffix (``+comp``, ``+ceiling``, ...)."""
        suffix = _suffix(self.name)
        return self.name.removesuffix(suffix) if suffix else self.name


#: Regime name suffix -> the policy's input stack (``setup.make_condition_env``):
#: ``history`` k frames + ages + m sent actions; ``augmented`` the same with k = 1 (the
#: delayed-RL literature's augmented state); ``predictive*`` the delivered observation
#: rolled forward to the current tick with the true dynamics (the causal ceiling:
#: ``predictive`` the most likely schedule of the actions in flight, ``-dist`` 16
#: schedules drawn from the action ages seen, ``-noid`` without the applied action's id
#: in the observation packet, ``-ahead`` further, to the tick the next action meets);
#: ``-ahead-dist`` both; ``predictive-best`` (``+best``) the best causal compensation the
#: library builds by itself: ``make_robust_env``'s predictive defaults (true dynamics,
#: ``lookahead="action"``, 16 samples, the prior action age derived from the network,
#: ``stall="predict"``); ``learned`` the same with the learned world model (and its
#: ``-dist`` / ``-ahead`` variants); ``oracle`` the true current
#: state (non-causal); ``scheduled`` (``+sched``) scheduled action chunks with the true
#: dynamics (a playout buffer at the env, D and k chosen from the network the policy runs
#: behind, the chunk's actions from the policy itself), ``scheduled-learned`` the same with
#: the learned world model.
COMPENSATIONS: dict[str, str] = {
    "+comp": "history",
    "+aug": "augmented",
    "+ceiling": "predictive",
    "+ceiling-dist": "predictive-dist",
    "+ceiling-noid": "predictive-noid",
    "+ceiling-ahead": "predictive-ahead",
    "+ceiling-ahead-dist": "predictive-ahead-dist",
    "+best": "predictive-best",
    "+predict": "learned",
    "+predict-dist": "learned-dist",
    "+predict-ahead": "learned-ahead",
    "+oracle": "oracle",
    "+sched": "scheduled",
    "+sched-learned": "scheduled-learned",
}


def _suffix(name: str) -> str:
    # Longest first: "+ceiling-dist" before "+ceiling".
    for suffix in sorted(COMPENSATIONS, key=len, reverse=True):
        if name.endswith(suffix):
            return suffix
    return ""


CONDITIONS["net-aware-mix"] = NetworkCondition(
    "net-aware-mix",
    profile=("perfect", "ethernet", "wifi-normal", "wifi-degraded"),
    description="profile drawn per episode",
)

REGIMES: dict[str, Regime] = {}
for _base, _cond in (
    ("baseline", "sim-clean"),
    ("delay-only", "fixed-50ms"),
    ("net-aware", "wifi-normal"),
    ("net-aware-mix", "net-aware-mix"),
):
    REGIMES[_base] = Regime(_base, _cond, False)
    for _suffix_name, _compensation in COMPENSATIONS.items():
        REGIMES[_base + _suffix_name] = Regime(_base + _suffix_name, _cond, True, _compensation)

#: The regimes of the default experiment (the paper's three, with and without compensation).
DEFAULT_REGIMES: tuple[str, ...] = (
    "baseline",
    "baseline+comp",
    "delay-only",
    "delay-only+comp",
    "net-aware",
    "net-aware+comp",
)

#: The regimes of ``--quick`` (and of ``fleetgym reproduce``): the paper's three, the
#: causal ceiling of prediction and the learned predictor.
QUICK_REGIMES: tuple[str, ...] = (
    "baseline",
    "net-aware",
    "net-aware+comp",
    "net-aware+ceiling",
    "net-aware+predict",
)
#: Regimes evaluated under the wifi-degraded variants.
VARIANT_REGIMES: tuple[str, ...] = ("baseline", "net-aware+comp", "net-aware-mix+comp")


def regime_by_name(name: str) -> Regime:
    """A regime of :data:`REGIMES`, or ``<regime or condition><suffix>`` with a suffix of
    :data:`COMPENSATIONS` (``net-aware+ceiling``, ``wifi-degraded+comp``).

    Example:
        >>> regime_by_name("wifi-degraded+comp")
        Regime(name='wifi-degraded+comp', train_condition='wifi-degraded', compensated=True, compensation='history')
        >>> regime_by_name("net-aware+ceiling").compensation
        'predictive'

    Raises:
        ValueError: for a name that is neither a regime nor a condition.
    """
    if name in REGIMES:
        return REGIMES[name]
    suffix = _suffix(name)
    base = name.removesuffix(suffix) if suffix else name
    if base in REGIMES:
        base = REGIMES[base].train_condition
    resolve_condition(base)  # raises with the list of known names
    if not suffix:
        return Regime(name, base, False)
    return Regime(name, base, True, COMPENSATIONS[suffix])
