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

from dataclasses import dataclass
from typing import Any

from fleetgym.wrappers import profiles
from fleetgym.wrappers.channels import GaussianChannel

__all__ = [
    "ABLATION_CONDITIONS",
    "CONDITIONS",
    "DEFAULT_REGIMES",
    "DEGRADED_VARIANTS",
    "EVAL_CONDITIONS",
    "QUICK_REGIMES",
    "REGIMES",
    "VARIANT_REGIMES",
    "NetworkCondition",
    "Regime",
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

    Example:
        >>> c = NetworkCondition("fixed-50ms", uplink=(50.0, 0.0, 0.0, 0.0), downlink=(50.0, 0.0, 0.0, 0.0))
        >>> sorted(c.shim_kwargs())
        ['downlink', 'uplink']

    Args:
        name: Label used in tables.
        profile: Profile name, or a tuple of names drawn per episode.
        uplink: Observation channel ``(mean_ms, std_ms, loss, correlation)`` when no profile.
        downlink: Action channel, same form.
        delivery: ``"fifo"``/``"latest"``, or ``None`` for the shim's default.
        step_ms: Control period override (``None`` = the env setup's).
        description: One line for the report.

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
                self.profile if isinstance(self.profile, str) else list(self.profile)
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


def resolve_condition(name: str) -> NetworkCondition:
    """A condition by name: a table entry or any registered profile name.

    Raises:
        ValueError: for a name that is none of these.
    """
    if name in CONDITIONS:
        return CONDITIONS[name]
    if name in profiles.list_profiles():
        return NetworkCondition(
            name, profile=name, description=profiles.get_profile(name).description
        )
    raise ValueError(
        f"condition: expected one of {sorted(CONDITIONS)} or a profile name "
        f"{profiles.list_profiles()}, actual {name!r}"
    )


@dataclass(frozen=True)
class Regime:
    """A training regime: the network trained under, and whether inputs are compensated.

    Example:
        >>> REGIMES["net-aware+comp"].compensated, REGIMES["net-aware+comp"].train_condition
        (True, 'wifi-normal')

    Args:
        name: Label (``<regime>`` or ``<regime>+comp``).
        train_condition: Name of the :class:`NetworkCondition` trained under.
        compensated: Whether the policy gets the compensation stack.
    """

    name: str
    train_condition: str
    compensated: bool

    @property
    def base(self) -> str:
        """The regime without the ``+comp`` suffix."""
        return self.name.removesuffix("+comp")


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
    REGIMES[_base + "+comp"] = Regime(_base + "+comp", _cond, True)

#: The regimes of the default experiment (the paper's three, with and without compensation).
DEFAULT_REGIMES: tuple[str, ...] = (
    "baseline",
    "baseline+comp",
    "delay-only",
    "delay-only+comp",
    "net-aware",
    "net-aware+comp",
)

#: The regimes of ``--quick``.
QUICK_REGIMES: tuple[str, ...] = ("baseline", "net-aware", "net-aware+comp")
#: Regimes evaluated under the wifi-degraded variants.
VARIANT_REGIMES: tuple[str, ...] = ("baseline", "net-aware+comp", "net-aware-mix+comp")


def regime_by_name(name: str) -> Regime:
    """A regime of :data:`REGIMES`, or ``<condition>`` / ``<condition>+comp`` for any condition.

    Example:
        >>> regime_by_name("wifi-degraded+comp")
        Regime(name='wifi-degraded+comp', train_condition='wifi-degraded', compensated=True)

    Raises:
        ValueError: for a name that is neither a regime nor a condition.
    """
    if name in REGIMES:
        return REGIMES[name]
    base = name.removesuffix("+comp")
    resolve_condition(base)  # raises with the list of known names
    return Regime(name, base, name.endswith("+comp"))
