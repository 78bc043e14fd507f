"""The network figures of ``fleetgym profiles assess``, measured on the shim's timeline.

:func:`assess_network` runs the real shim on a counter env and reports the round trip in
ticks, stalls (runs of ticks without news on a path) and loss bursts per path; the module
docstring of :mod:`fleetgym.experiments.assess` defines each figure.
"""

from __future__ import annotations

from typing import Any

import numpy as np

__all__ = ["assess_network"]


def _runs(flags: np.ndarray) -> np.ndarray:
    """Lengths of the runs of True in a boolean array."""
    padded = np.concatenate(([0], flags.astype(np.int8), [0]))
    edges = np.flatnonzero(np.diff(padded))
    return edges[1::2] - edges[::2]


def _gaps(news: np.ndarray) -> np.ndarray:
    """Per tick, the length of the run of ticks without news it lies in (0 at news; the
    episode's start, before the first packet arrives, is not a stall)."""
    out = np.zeros(news.size, dtype=np.int64)
    quiet = ~news
    first = np.flatnonzero(news)
    quiet[: first[0] if first.size else news.size] = False
    padded = np.concatenate(([0], quiet.astype(np.int8), [0]))
    edges = np.flatnonzero(np.diff(padded))
    for start, stop in zip(edges[::2], edges[1::2], strict=True):
        out[start:stop] = stop - start
    return out


def _burst_stats(lost: np.ndarray) -> dict[str, Any]:
    bursts = _runs(lost)
    return {
        "loss_rate": float(lost.mean()) if lost.size else 0.0,
        "bursts": int(bursts.size),
        "mean_burst": float(bursts.mean()) if bursts.size else 0.0,
        "max_burst": int(bursts.max()) if bursts.size else 0,
    }


def assess_network(
    profile: Any,
    step_ms: float,
    *,
    ticks: int = 20_000,
    stall_ticks: int = 5,
    seed: int = 0,
) -> dict[str, Any]:
    """The network figures of ``profile`` at ``step_ms`` (see the module docstring).

    Runs ``ticks`` control periods of the real shim (``info="full"``) on a counter env
    whose observation is the tick index.
    """
    from fleetgym.wrappers import NetworkShimWrapper
    from fleetgym.wrappers.staleness import TickEnv

    shim = NetworkShimWrapper(TickEnv(), profile=profile, step_ms=step_ms, info="full")
    shim.reset(seed=seed)
    obs_age = np.empty(ticks, dtype=np.int64)
    action_age = np.empty(ticks, dtype=np.int64)
    up_lost = np.empty(ticks, dtype=bool)
    down_lost = np.empty(ticks, dtype=bool)
    for i in range(ticks):
        _, _, _, _, info = shim.step(0)
        obs_age[i] = info["obs_age_steps"]
        action_age[i] = info["action_age_steps"]
        up_lost[i] = info["uplink_lost"]
        down_lost[i] = info["downlink_lost"]
    shim.close()
    t = np.arange(ticks)
    # The freshest observation at the agent was sent at tick t + 1 - obs_age (the reset's
    # at 0), the action the env applies at t - action_age (the start action's at -1):
    # news is a newer one than the tick before's.
    obs_sent = t + 1 - obs_age
    act_sent = t - action_age
    obs_news = np.diff(obs_sent, prepend=0) > 0
    act_news = np.diff(act_sent, prepend=-1) > 0
    gap_obs, gap_act = _gaps(obs_news), _gaps(act_news)
    gap = np.maximum(gap_obs, gap_act)
    long = gap > stall_ticks
    stalls = np.concatenate([_runs(gap_obs > 0), _runs(gap_act > 0)])
    round_trip = obs_age + action_age
    # Time-weighted stall lengths: each tick counts the stall it lies in.
    stalled = gap[gap > 0]
    return {
        "step_ms": float(step_ms),
        "ticks": int(ticks),
        "seed": int(seed),
        "round_trip_ticks": {
            "median": float(np.median(round_trip)),
            "p95": float(np.quantile(round_trip, 0.95)),
            "p99": float(np.quantile(round_trip, 0.99)),
            "max": int(round_trip.max()),
        },
        "obs_age_ticks_median": float(np.median(obs_age)),
        "action_age_ticks_median": float(np.median(action_age)),
        "stall_ticks": int(stall_ticks),
        "stall_share": float(long.mean()),
        "stall_share_uplink": float((gap_obs > stall_ticks).mean()),
        "stall_share_downlink": float((gap_act > stall_ticks).mean()),
        "longest_stall_s": float(stalls.max() * step_ms / 1000.0) if stalls.size else 0.0,
        "stall_p95_s": float(np.quantile(stalled, 0.95) * step_ms / 1000.0)
        if stalled.size
        else 0.0,
        "loss": {"uplink": _burst_stats(up_lost), "downlink": _burst_stats(down_lost)},
        "_series": {"round_trip": round_trip, "gap": gap},
    }
