"""A calibration (what :mod:`~fleetgym.experiments.plan.measure` wrote) as simulation parts.

The shipped calibrations (``calibration.json`` beside this module) were measured on this
2-core machine while other experiments ran on it (the load average is in the file);
``fleetgym plan measure`` measures again and writes a file ``--calibration`` reads.
"""

from __future__ import annotations

import json
from importlib import resources
from pathlib import Path
from typing import Any

from fleetgym.agents.planning import ActorTimes, LearnerTimes, NetworkLinks, ServerTimes

__all__ = [
    "REQUIRED_KEYS",
    "actor_times",
    "learner_times",
    "links",
    "load_calibrations",
    "server_times",
]

#: The keys every workload's calibration holds.
REQUIRED_KEYS = (
    "workload",
    "rollout_steps",
    "step_s",
    "policy_s",
    "update_fixed_s",
    "update_per_sample_s",
    "server_batch_sizes",
    "server_forward_s",
    "weight_bytes",
    "obs_bytes",
    "step_bytes",
)


def load_calibrations(path: Path | None = None) -> dict[str, Any]:
    """The calibration file (the shipped one if ``path`` is None): workloads and hand-over.

    Raises:
        FileNotFoundError: If ``path`` does not exist.
        ValueError: Naming the file, if it is not JSON of the expected shape.
    """
    if path is None:
        text = resources.files("fleetgym.experiments.plan").joinpath("calibration.json")
        name, raw = "the shipped calibration.json", text.read_text(encoding="utf-8")
    else:
        name, raw = str(path), Path(path).read_text(encoding="utf-8")
    try:
        data = json.loads(raw)
    except json.JSONDecodeError as error:
        raise ValueError(f"{name}: expected JSON, actual {error}") from None
    workloads = data.get("workloads") if isinstance(data, dict) else None
    if not isinstance(workloads, dict) or not workloads:
        raise ValueError(
            f"{name}: expected an object with 'workloads', actual {type(data).__name__}"
        )
    for key, entry in workloads.items():
        missing = [k for k in REQUIRED_KEYS if not isinstance(entry, dict) or k not in entry]
        if missing:
            raise ValueError(f"{name}: workload {key!r}: expected keys {missing}, actual missing")
    return data


def actor_times(
    cal: dict[str, Any], delays_s: tuple[float, ...] | None = None, **kw: Any
) -> ActorTimes:
    """The actors' step times of one workload's calibration (waits from ``kw`` or given)."""
    return ActorTimes(
        step_s=tuple(cal["step_s"]), policy_s=cal["policy_s"], delays_s=delays_s, **kw
    )


def learner_times(cal: dict[str, Any], n_trainers: int = 1, speedup: float = 1.0) -> LearnerTimes:
    """The update time of one workload's calibration."""
    return LearnerTimes(
        fixed_s=cal["update_fixed_s"],
        per_sample_s=cal["update_per_sample_s"],
        n_trainers=n_trainers,
        speedup=speedup,
    )


def server_times(cal: dict[str, Any], **kw: Any) -> ServerTimes:
    """The server's forward time per batch size of one workload's calibration."""
    return ServerTimes(
        batch_sizes=tuple(cal["server_batch_sizes"]),
        forward_s=tuple(cal["server_forward_s"]),
        **kw,
    )


def links(cal: dict[str, Any], **kw: Any) -> NetworkLinks:
    """Network links carrying this workload's weights, observations and trajectories."""
    return NetworkLinks(
        weight_bytes=cal["weight_bytes"],
        obs_bytes=cal["obs_bytes"],
        step_bytes=cal["step_bytes"],
        **kw,
    )
