"""Time and cost of one distributed training round: pricing presets and the billing models.

What this module models (DESIGN.md Part B):

* **Pricing presets** (:data:`PRICING_PRESETS`): list prices of serverless containers per
  vCPU-second and GB-second, a per-request fee, the learner priced per second (a V100 VM in
  ``aci`` and ``lambda``, a CPU container in ``aci-cpu``), and the VMs of a server-based cluster. Every price carries its source and the date it
  was read; every field can be overridden (:func:`get_pricing`).
* **The time model** (:class:`TimeModel`): what this machine cannot show -- a container's
  cold start (300 ms per actor, 1500 ms for a GPU learner, as measured by MinionsRL on
  Azure Container Instances), pre-warming that hides it, the transfer of weights to every
  actor and of its trajectory back (latency + bytes / bandwidth) and a learner speed factor
  (a GPU runs the update ``learner_speed_factor`` times faster than this CPU).
* **The compute model** (:class:`ComputeCostModel`): for ``timing="modeled"``, the compute
  of a rollout and of an update as a deterministic function of the step and sample counts,
  with an optional seeded per-actor slowdown (stragglers), so an episode is reproducible.
* **Billing** (:class:`ServerlessCostModel`, :class:`ServerClusterCostModel`): serverless
  bills each actor only for its own busy seconds and the learner for its update (cold
  starts included); pre-warmed containers are billed for the whole round; the server-based
  cluster is billed for the whole wall time, idle included.

All times are seconds and all prices US dollars.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field, fields, replace
from typing import Any

import numpy as np

from fleetgym.agents.checks import check_number

__all__ = [
    "PRICING_PRESETS",
    "ActorTimeBreakdown",
    "ComputeCostModel",
    "LearnerTimeBreakdown",
    "PricingPreset",
    "RoundCost",
    "ServerClusterCostModel",
    "ServerlessCostModel",
    "TimeModel",
    "get_pricing",
    "trajectory_nbytes",
    "weights_nbytes",
]

_HOUR = 3600.0


@dataclass(frozen=True)
class PricingPreset:
    """The prices of one deployment: serverless actors, a learner, a server cluster.

    Models the per-resource-second billing of MinionsRL: an actor container has
    ``actor_vcpus`` vCPUs and ``actor_memory_gb`` GB and costs
    ``actor_vcpus * vcpu_second + actor_memory_gb * gb_second`` per second plus
    ``actor_request`` per invocation (one invocation per actor per round). The learner is
    one container (a GPU one in MinionsRL) priced per second (``learner_second``). The server-based cluster is
    one learner VM plus ``ceil(actors / server_actor_vm_cores)`` actor VMs, billed per hour
    for the whole wall time.

    Example:
        >>> aci = get_pricing("aci")
        >>> round(aci.actor_price_per_s * 1e6, 3)  # micro-dollars per actor-second
        12.5
        >>> round(aci.server_cluster_price_per_s(32) * 3600, 3)  # $/h for 32 actor cores
        7.092

    Args:
        name: preset name.
        vcpu_second: $ per vCPU-second of an actor container.
        gb_second: $ per GB-second of an actor container.
        actor_request: $ per actor invocation.
        actor_vcpus: vCPUs of one actor container (MinionsRL: 1).
        actor_memory_gb: memory of one actor container in GB.
        learner_second: $ per second of the learner container.
        learner_request: $ per learner invocation.
        server_learner_vm_hour: $ per hour of the server cluster's learner VM.
        server_actor_vm_hour: $ per hour of one actor VM of the server cluster.
        server_actor_vm_cores: actor cores per actor VM.
        source: where the prices come from.
        date: when they were read.

    Raises:
        TypeError: a price that is not a number.
        ValueError: a negative or non-finite price, or a non-positive size.
    """

    name: str
    vcpu_second: float
    gb_second: float
    actor_request: float
    actor_vcpus: float
    actor_memory_gb: float
    learner_second: float
    learner_request: float
    server_learner_vm_hour: float
    server_actor_vm_hour: float
    server_actor_vm_cores: int
    source: str = ""
    date: str = ""

    def __post_init__(self) -> None:
        for f in fields(self):
            if f.name in ("name", "source", "date"):
                continue
            value = getattr(self, f.name)
            if f.name in ("actor_vcpus", "actor_memory_gb"):
                check_number(f.name, value)
            elif f.name == "server_actor_vm_cores":
                if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
                    raise ValueError(
                        f"server_actor_vm_cores: expected an integer >= 1, actual {value!r}"
                    )
            else:
                check_number(f.name, value)

    @property
    def actor_price_per_s(self) -> float:
        """$ per second of one running actor container."""
        return self.actor_vcpus * self.vcpu_second + self.actor_memory_gb * self.gb_second

    def server_actor_vms(self, actors: int) -> int:
        """Actor VMs a server cluster needs for ``actors`` one-core actors."""
        return max(1, math.ceil(actors / self.server_actor_vm_cores))

    def server_cluster_price_per_s(self, actors: int) -> float:
        """$ per second of the whole server-based cluster (learner VM + actor VMs)."""
        hourly = self.server_learner_vm_hour + self.server_actor_vms(actors) * (
            self.server_actor_vm_hour
        )
        return hourly / _HOUR


# The V100 learner VM (Azure Standard_NC6s_v3: 6 vCPU, 112 GB, 1x V100) and the actor VM of
# the server cluster (Azure Standard_E16-8s_v5, 8 active cores), pay-as-you-go Linux,
# East US; both are what MinionsRL's server baselines ran on.
_NC6S_V3_HOUR = 3.06
_E16_8S_V5_HOUR = 1.008
_D4S_V5_HOUR = 0.192
_VM_SOURCE = (
    "Azure Linux VM pay-as-you-go list prices, East US: Standard_NC6s_v3 $3.06/h, "
    "Standard_E16-8s_v5 $1.008/h (https://azure.microsoft.com/pricing/details/virtual-machines/linux/)"
)

_ACI = PricingPreset(
    name="aci",
    vcpu_second=0.0000113,
    gb_second=0.0000012,
    actor_request=0.0,
    actor_vcpus=1.0,
    actor_memory_gb=1.0,
    learner_second=_NC6S_V3_HOUR / _HOUR,
    learner_request=0.0,
    server_learner_vm_hour=_NC6S_V3_HOUR,
    server_actor_vm_hour=_E16_8S_V5_HOUR,
    server_actor_vm_cores=8,
    source="Azure Container Instances pricing, Linux, East US "
    "(https://azure.microsoft.com/pricing/details/container-instances/); " + _VM_SOURCE,
    date="2024-06",
)

#: Named pricing presets. Prices are list prices as read on the date given; clouds change
#: them, so treat them as defaults to override (see :func:`get_pricing`).
PRICING_PRESETS: dict[str, PricingPreset] = {
    # Azure Container Instances, Linux, East US: $0.0000113 per vCPU-s and $0.0000012 per
    # GB-s (= $0.04068 per vCPU-h and $0.00432 per GB-h); no per-request fee. Actor: 1 vCPU,
    # 1 GB, as MinionsRL's actor containers. ACI's own GPU SKUs are retired, so the learner
    # is priced per second from the V100 VM.
    "aci": _ACI,
    # The same Azure prices with the learner on CPU, for MLP workloads (CartPole, MuJoCo),
    # whose updates a GPU does not speed up (``learner_speed_factor`` 1.0 in the scheduling
    # presets): the learner is an ACI container of 2 vCPU + 4 GB, and the server cluster's
    # learner VM a Standard_D4s_v5 (4 vCPU, 16 GB, $0.192/h); actors as in "aci".
    "aci-cpu": replace(
        _ACI,
        name="aci-cpu",
        learner_second=2 * 0.0000113 + 4 * 0.0000012,
        server_learner_vm_hour=_D4S_V5_HOUR,
        source=_ACI.source + ", Standard_D4s_v5 $0.192/h",
    ),
    # AWS Lambda, x86, us-east-1: $0.0000166667 per GB-s (CPU is allocated in proportion to
    # memory, one full vCPU at 1769 MB, so an actor is 1.769 GB and has no separate vCPU
    # price) plus $0.20 per million requests. Lambda has no GPU: the learner is the V100 VM
    # priced per second.
    "lambda": replace(
        _ACI,
        name="lambda",
        vcpu_second=0.0,
        gb_second=0.0000166667,
        actor_request=0.20 / 1e6,
        actor_memory_gb=1.769,
        source="AWS Lambda pricing, x86, us-east-1 (https://aws.amazon.com/lambda/pricing/); "
        "1 vCPU per 1769 MB (AWS Lambda developer guide, memory and computing power); "
        + _VM_SOURCE,
    ),
}


def get_pricing(pricing: str | PricingPreset = "aci", **overrides: Any) -> PricingPreset:
    """A pricing preset by name (or as given), with any field overridden.

    Example:
        >>> get_pricing("lambda", actor_memory_gb=2.0).actor_memory_gb
        2.0

    Args:
        pricing: a name of :data:`PRICING_PRESETS` or a :class:`PricingPreset`.
        **overrides: fields of :class:`PricingPreset` to replace.

    Raises:
        ValueError: an unknown preset name or field, or an invalid price.
        TypeError: ``pricing`` of another type.
    """
    if isinstance(pricing, PricingPreset):
        preset = pricing
    elif isinstance(pricing, str):
        if pricing not in PRICING_PRESETS:
            raise ValueError(
                f"pricing: expected one of {sorted(PRICING_PRESETS)}, actual {pricing!r}"
            )
        preset = PRICING_PRESETS[pricing]
    else:
        raise TypeError(
            f"pricing: expected a preset name or PricingPreset, actual {type(pricing).__name__}"
        )
    known = {f.name for f in fields(PricingPreset)}
    unknown = sorted(set(overrides) - known)
    if unknown:
        raise ValueError(f"pricing overrides: expected fields of {sorted(known)}, actual {unknown}")
    return replace(preset, **overrides) if overrides else preset


def weights_nbytes(weights: dict[str, np.ndarray]) -> int:
    """Bytes on the wire of a weights dict (the raw arrays)."""
    return int(sum(np.asarray(a).nbytes for a in weights.values()))


def trajectory_nbytes(trajectory: Any) -> int:
    """Bytes on the wire of a :class:`~fleetgym.agents.types.Trajectory` (its arrays)."""
    total = 0
    for name in (
        "obs",
        "actions",
        "log_probs",
        "values",
        "rewards",
        "terminated",
        "truncated",
        "truncation_values",
    ):
        array = getattr(trajectory, name, None)
        if array is not None:
            total += int(np.asarray(array).nbytes)
    return total


@dataclass(frozen=True)
class ActorTimeBreakdown:
    """One actor's modelled time in one round (seconds)."""

    cold_start_s: float
    transfer_s: float
    compute_s: float

    @property
    def total_s(self) -> float:
        return self.cold_start_s + self.transfer_s + self.compute_s


@dataclass(frozen=True)
class LearnerTimeBreakdown:
    """The learner's modelled time in one round (seconds)."""

    cold_start_s: float
    update_s: float

    @property
    def total_s(self) -> float:
        return self.cold_start_s + self.update_s


@dataclass(frozen=True)
class TimeModel:
    """What a round costs in time beyond the compute: cold starts, transfers, GPU speed.

    An actor's time is ``cold start (unless warm) + 2 * latency + (weight bytes +
    trajectory bytes) / bandwidth + compute``: it downloads the weights, runs its rollout
    and uploads its trajectory. The learner's time is ``cold start (unless warm) +
    update / learner_speed_factor``. With ``prewarm`` the learner is kept warm across rounds
    and so are actor containers (no cold start on the critical path; warm containers are
    billed for the whole round, see :class:`ServerlessCostModel`): with ``warm_pool=None``
    the *keep-alive* policy keeps the previous round's ``I_k-1`` actors alive (the first
    round's actors are warmed before training starts), with ``warm_pool=N`` a fixed pool
    of slots ``0..N-1`` is kept alive whether used or not. Under keep-alive, containers a
    round no longer needs stay warm (and billed) for ``keep_alive_s`` more seconds before
    they are released, as serverless platforms keep idle instances for a while: a fleet
    that shrinks and grows back within that time pays no cold start for it.

    Example:
        >>> tm = TimeModel(bandwidth_bytes_per_s=1e6, latency_s=0.01)
        >>> round(tm.actor_time(0.5, weight_bytes=10_000, trajectory_bytes=40_000).total_s, 3)
        0.87
        >>> tm.learner_time(0.2).total_s
        1.7

    Args:
        cold_start_actor_s: start-up of one actor container (MinionsRL: ~0.3 s).
        cold_start_learner_s: start-up of the GPU learner container (~1.5 s).
        prewarm: keep the learner and actor containers warm between rounds.
        warm_pool: with ``prewarm``, a fixed pool of warm actor slots; None: keep-alive
            (the previous round's actors stay warm).
        keep_alive_s: under keep-alive, how long an idle actor container stays warm
            (billed) before it is released (0: at the start of the next round).
        bandwidth_bytes_per_s: actor <-> learner bandwidth (default 1 Gbit/s).
        latency_s: one-way latency of one transfer.
        learner_speed_factor: how many times faster the learner's device runs the update
            than this machine's CPU (1.0: as measured or modelled).

    Raises:
        TypeError, ValueError: a non-numeric, negative or zero (bandwidth, speed) value.
    """

    cold_start_actor_s: float = 0.3
    cold_start_learner_s: float = 1.5
    prewarm: bool = False
    warm_pool: int | None = None
    keep_alive_s: float = 0.0
    bandwidth_bytes_per_s: float = 125e6
    latency_s: float = 0.001
    learner_speed_factor: float = 1.0

    def __post_init__(self) -> None:
        check_number("cold_start_actor_s", self.cold_start_actor_s)
        check_number("cold_start_learner_s", self.cold_start_learner_s)
        check_number("latency_s", self.latency_s)
        check_number("keep_alive_s", self.keep_alive_s)
        check_number("bandwidth_bytes_per_s", self.bandwidth_bytes_per_s, strict=True)
        check_number("learner_speed_factor", self.learner_speed_factor, strict=True)
        if not isinstance(self.prewarm, (bool, np.bool_)):
            raise TypeError(f"prewarm: expected a bool, actual {self.prewarm!r}")
        if self.warm_pool is not None and (
            isinstance(self.warm_pool, bool)
            or not isinstance(self.warm_pool, (int, np.integer))
            or self.warm_pool < 0
        ):
            raise ValueError(
                f"warm_pool: expected None or an integer >= 0, actual {self.warm_pool!r}"
            )

    @property
    def keep_alive(self) -> bool:
        """Pre-warming by keeping the previous round's actors alive."""
        return bool(self.prewarm) and self.warm_pool is None

    def pool_size(self, max_actors: int, previous_actors: int = 0) -> int:
        """Warm actor slots in a round (0 without ``prewarm``).

        Args:
            max_actors: the fleet's size.
            previous_actors: actors of the previous round (keep-alive).
        """
        if not self.prewarm:
            return 0
        if self.warm_pool is None:
            return min(int(previous_actors), max_actors)
        return min(int(self.warm_pool), max_actors)

    def transfer_s(self, nbytes: int) -> float:
        """Seconds to move ``nbytes`` in one transfer."""
        return self.latency_s + nbytes / self.bandwidth_bytes_per_s

    def actor_time(
        self, compute_s: float, *, weight_bytes: int, trajectory_bytes: int, warm: bool = False
    ) -> ActorTimeBreakdown:
        """One actor's time: cold start, weights down + trajectory up, compute."""
        return ActorTimeBreakdown(
            cold_start_s=0.0 if warm else self.cold_start_actor_s,
            transfer_s=self.transfer_s(weight_bytes) + self.transfer_s(trajectory_bytes),
            compute_s=float(compute_s),
        )

    def learner_time(self, update_s: float, *, warm: bool = False) -> LearnerTimeBreakdown:
        """The learner's time: cold start and the update on the learner's device."""
        return LearnerTimeBreakdown(
            cold_start_s=0.0 if warm else self.cold_start_learner_s,
            update_s=float(update_s) / self.learner_speed_factor,
        )


@dataclass(frozen=True)
class ComputeCostModel:
    """Deterministic compute of rollouts and updates, for ``timing="modeled"``.

    A rollout of ``n`` steps takes ``actor_overhead_s + n * actor_step_s`` on one vCPU
    (environment step + policy forward), times a per-actor slowdown drawn from a
    log-normal with coefficient of variation ``actor_jitter_cv`` (mean 1) from the
    generator the caller passes, so the slowest of many actors gates the round as on a
    real cloud and the same seed draws the same slowdowns. An update over ``m`` samples
    takes ``learner_overhead_s + m * learner_sample_s`` on this CPU (all epochs included).

    Example:
        >>> cm = ComputeCostModel(actor_step_s=1e-4, actor_overhead_s=0.01,
        ...                       learner_sample_s=2e-5, learner_overhead_s=0.05)
        >>> cm.actor_compute_s(100, np.random.default_rng(0), 3).tolist()
        [0.02, 0.02, 0.02]
        >>> round(cm.learner_update_s(1000), 3)
        0.07

    Args:
        actor_step_s: seconds per environment step of one actor.
        actor_overhead_s: fixed seconds per rollout.
        learner_sample_s: seconds per sample of an update (all epochs).
        learner_overhead_s: fixed seconds per update.
        actor_jitter_cv: coefficient of variation of the per-actor slowdown (0: none).

    Raises:
        TypeError, ValueError: a non-numeric or negative value.
    """

    actor_step_s: float
    actor_overhead_s: float
    learner_sample_s: float
    learner_overhead_s: float
    actor_jitter_cv: float = 0.0

    def __post_init__(self) -> None:
        for f in fields(self):
            check_number(f.name, getattr(self, f.name))

    def actor_compute_s(self, steps: int, rng: np.random.Generator, num_actors: int) -> np.ndarray:
        """Compute seconds of ``num_actors`` rollouts of ``steps`` steps each."""
        base = self.actor_overhead_s + steps * self.actor_step_s
        if self.actor_jitter_cv == 0.0:
            return np.full(num_actors, base)
        # Log-normal with mean 1 and the requested CV: sigma^2 = log(1 + cv^2), mu = -sigma^2/2.
        sigma2 = math.log1p(self.actor_jitter_cv**2)
        slowdown = rng.lognormal(mean=-sigma2 / 2.0, sigma=math.sqrt(sigma2), size=num_actors)
        return base * slowdown

    def learner_update_s(self, num_samples: int) -> float:
        """Compute seconds of one update over ``num_samples`` samples."""
        return self.learner_overhead_s + num_samples * self.learner_sample_s


@dataclass(frozen=True)
class RoundCost:
    """What one round was billed, by resource ($)."""

    learner: float
    actors: float
    warm_pool: float
    requests: float
    per_actor: tuple[float, ...] = field(default_factory=tuple)

    @property
    def total(self) -> float:
        return self.learner + self.actors + self.warm_pool + self.requests


class ServerlessCostModel:
    """Serverless billing: pay per busy resource-second, cold starts included.

    Models MinionsRL's ``C_k = c (P^l_k d^l + sum_i P^a_k,i d^a)``: the learner is billed
    for its time ``P^l_k`` (cold start included) and each actor for its own time
    ``P^a_k,i`` (cold start, transfers and compute), released when done; plus one request
    fee per invocation. With pre-warming, the learner and the ``pool`` warm actor slots
    stay alive for the whole round ``P_k`` and are billed for all of it, busy or idle
    (used pool slots therefore cost ``P_k`` rather than ``P^a_k,i``); actors beyond the
    pool are billed as cold ones, and unused pool slots idle at a cost. With
    ``keep_alive`` (pre-warming by keeping the last fleet alive) every actor of the round
    stays alive until the round ends, ready for the next one, so each is billed ``P_k``;
    containers the next round does not need are released at its start. Warming containers
    up before the first round costs one cold start each (:meth:`prewarm_cost`).

    Example:
        >>> pricing = get_pricing("aci")
        >>> cm = ServerlessCostModel(pricing)
        >>> cost = cm.round_cost(learner_s=2.0, actor_s=[1.0, 1.5], round_s=3.5)
        >>> round(cost.total * 1e6, 2)  # micro-dollars: 2 s of V100 + 2.5 actor-seconds
        1731.25

    Args:
        pricing: the prices.

    Raises:
        TypeError: ``pricing`` is not a :class:`PricingPreset`.
    """

    def __init__(self, pricing: PricingPreset) -> None:
        if not isinstance(pricing, PricingPreset):
            raise TypeError(f"pricing: expected a PricingPreset, actual {type(pricing).__name__}")
        self.pricing = pricing

    def round_cost(
        self,
        *,
        learner_s: float,
        actor_s: Sequence[float],
        round_s: float,
        pool: int = 0,
        learner_warm: bool = False,
        keep_alive: bool = False,
        idle_s: Sequence[float] = (),
    ) -> RoundCost:
        """Bill one round.

        Args:
            learner_s: the learner's time ``P^l_k``.
            actor_s: each actor's time ``P^a_k,i``, slot order (slots ``< pool`` are warm).
            round_s: the round's wall time ``P_k``.
            pool: warm actor slots kept alive for the whole round.
            learner_warm: the learner is kept alive for the whole round.
            keep_alive: every actor stays alive to the end of the round (billed ``P_k``)
                and no pool slot idles unused.
            idle_s: seconds each idle warm container (kept alive after its last round,
                unused in this one) is billed in this round.
        """
        p = self.pricing
        price_a = p.actor_price_per_s
        learner = (round_s if learner_warm else learner_s) * p.learner_second
        per_actor = tuple(
            (round_s if keep_alive or i < pool else float(t)) * price_a
            for i, t in enumerate(actor_s)
        )
        # Pool slots this round did not use idle for the whole round, billed all the same.
        idle_pool = 0 if keep_alive else max(0, pool - len(actor_s))
        warm_pool = (idle_pool * round_s + float(sum(idle_s))) * price_a
        # A warm container is one long invocation (billed once, at warm-up), not one per round.
        cold_actors = max(0, len(actor_s) - pool)
        requests = cold_actors * p.actor_request + (0.0 if learner_warm else p.learner_request)
        return RoundCost(
            learner=learner,
            actors=float(sum(per_actor)),
            warm_pool=warm_pool,
            requests=requests,
            per_actor=per_actor,
        )

    def prewarm_cost(self, time_model: TimeModel, pool: int, learner_warm: bool) -> float:
        """One-off cost of warming ``pool`` actors (and the learner) before round 1."""
        p = self.pricing
        cost = pool * (time_model.cold_start_actor_s * p.actor_price_per_s + p.actor_request)
        if learner_warm:
            cost += time_model.cold_start_learner_s * p.learner_second + p.learner_request
        return cost


class ServerClusterCostModel:
    """Server-based billing: a fixed VM cluster paid for the whole wall time, idle included.

    Models the server baselines of MinionsRL: one V100 VM for the learner plus
    ``ceil(actors / cores per VM)`` actor VMs (4 x 8 cores for 32 actors), all running for
    every second of training whether busy or idle. VMs are up before training starts (no
    per-round cold start).

    Example:
        >>> cm = ServerClusterCostModel(get_pricing("aci"), actors=32)
        >>> round(cm.round_cost(round_s=3600.0).total, 3)
        7.092

    Args:
        pricing: the prices (VM fields).
        actors: actor cores the cluster provides.

    Raises:
        TypeError: ``pricing`` is not a :class:`PricingPreset`.
        ValueError: ``actors`` < 1.
    """

    def __init__(self, pricing: PricingPreset, actors: int = 32) -> None:
        if not isinstance(pricing, PricingPreset):
            raise TypeError(f"pricing: expected a PricingPreset, actual {type(pricing).__name__}")
        if isinstance(actors, bool) or not isinstance(actors, (int, np.integer)) or actors < 1:
            raise ValueError(f"actors: expected an integer >= 1, actual {actors!r}")
        self.pricing = pricing
        self.actors = int(actors)

    @property
    def price_per_s(self) -> float:
        """$ per second of the whole cluster."""
        return self.pricing.server_cluster_price_per_s(self.actors)

    def round_cost(self, *, round_s: float) -> RoundCost:
        """Bill one round of wall time ``round_s`` (learner VM + actor VMs)."""
        p = self.pricing
        learner = round_s * p.server_learner_vm_hour / _HOUR
        actors = round_s * p.server_actor_vms(self.actors) * p.server_actor_vm_hour / _HOUR
        return RoundCost(learner=learner, actors=actors, warm_pool=0.0, requests=0.0)
