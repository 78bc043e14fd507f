"""Pricing presets: what serverless actors, the learner and a server cluster cost.

A :class:`PricingPreset` lists the prices of one deployment -- serverless containers per
vCPU-second and GB-second, a per-request fee, the learner priced per second (a V100 VM in
``aci`` and ``lambda``, a CPU container in ``aci-cpu``) and the VMs of a server-based
cluster. Every price carries its source and the date it was read; every field can be
overridden (:func:`get_pricing`). Prices are US dollars.

Every price is bounded by :data:`MAX_PRICE`, so that no finite but absurd price can make a
round's cost (price x seconds x actors) overflow to infinity.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields, replace
from typing import Any

from fleetgym.validation import check_choice, check_float, check_int

__all__ = [
    "MAX_CORES",
    "MAX_PRICE",
    "PRICING_PRESETS",
    "SECONDS_PER_HOUR",
    "PricingPreset",
    "get_pricing",
]

#: Seconds per hour, to turn hourly VM prices into per-second ones.
SECONDS_PER_HOUR = 3600.0
#: Largest accepted price or size ($ per second, per hour or per request; vCPUs, GB).
MAX_PRICE = 1e9
#: Largest accepted number of cores of one actor VM.
MAX_CORES = 1_000_000


@dataclass(frozen=True)
class PricingPreset:
    """The prices of one deployment: serverless actors, a learner, a server cluster.

    Models the per-resource-second billing of MinionsRL: an actor container has
    ``actor_vcpus`` vCPUs and ``actor_memory_gb`` GB and costs
    ``actor_vcpus * vcpu_second + actor_memory_gb * gb_second`` per second plus
    ``actor_request`` per invocation (one invocation per actor per round). The learner is
    one container (a GPU one in MinionsRL) priced per second (``learner_second``). The
    server-based cluster is one learner VM plus ``ceil(actors / server_actor_vm_cores)``
    actor VMs, billed per hour for the whole wall time.

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

    Example:
        >>> aci = get_pricing("aci")
        >>> round(aci.actor_price_per_s * 1e6, 3)  # micro-dollars per actor-second
        12.5
        >>> round(aci.server_cluster_price_per_s(32) * 3600, 3)  # $/h for 32 actor cores
        7.092

    Raises:
        TypeError: a price or size that is not a number (cores: not an int).
        ValueError: a price or size that is negative, non-finite or above
            :data:`MAX_PRICE`, or cores outside ``[1, MAX_CORES]``.
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
            if f.name == "server_actor_vm_cores":
                check_int(f.name, self.server_actor_vm_cores, low=1, high=MAX_CORES)
            else:
                check_float(f.name, getattr(self, f.name), low=0.0, high=MAX_PRICE)

    @property
    def actor_price_per_s(self) -> float:
        """$ per second of one running actor container."""
        return self.actor_vcpus * self.vcpu_second + self.actor_memory_gb * self.gb_second

    def server_actor_vms(self, actors: int) -> int:
        """Actor VMs a server cluster needs for ``actors`` one-core actors.

        Args:
            actors: Actor cores wanted; rounded up to whole VMs of
                ``server_actor_vm_cores`` cores, at least one VM (even for 0).
        """
        return max(1, math.ceil(actors / self.server_actor_vm_cores))

    def server_cluster_price_per_s(self, actors: int) -> float:
        """$ per second of the whole server-based cluster (learner VM + actor VMs).

        Args:
            actors: Actor cores of the cluster, as for :meth:`server_actor_vms`.
        """
        hourly = self.server_learner_vm_hour + self.server_actor_vms(actors) * (
            self.server_actor_vm_hour
        )
        return hourly / SECONDS_PER_HOUR


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
    learner_second=_NC6S_V3_HOUR / SECONDS_PER_HOUR,
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

    Args:
        pricing: a name of :data:`PRICING_PRESETS` or a :class:`PricingPreset`.
        **overrides: fields of :class:`PricingPreset` to replace.

    Example:
        >>> get_pricing("lambda", actor_memory_gb=2.0).actor_memory_gb
        2.0

    Raises:
        ValueError: an unknown preset name or field, or an invalid price.
        TypeError: ``pricing`` of another type.
    """
    if isinstance(pricing, PricingPreset):
        preset = pricing
    elif isinstance(pricing, str):
        preset = PRICING_PRESETS[check_choice("pricing", pricing, sorted(PRICING_PRESETS))]
    else:
        raise TypeError(
            f"pricing: expected a preset name or PricingPreset, actual {type(pricing).__name__}"
        )
    known = {f.name for f in fields(PricingPreset)}
    unknown = sorted(set(overrides) - known)
    if unknown:
        raise ValueError(f"pricing overrides: expected fields of {sorted(known)}, actual {unknown}")
    return replace(preset, **overrides) if overrides else preset
