"""The soak's verdict: leak slopes, the env-step accounting, the summary and the plot.

**Leaks.** Each process's resident memory and open file descriptors are fitted by least
squares against time, after a warm-up (imports, allocator arenas and the first rollouts
grow any fresh process). A fitted slope is a leak when it exceeds its budget by more than
three standard errors of the fit (so a short or noisy series cannot fail on noise alone,
and a leak larger than the budget is found once the series is long enough to show it):

* memory: :data:`RSS_BUDGET_MIB_PER_MIN`, 256 MiB a day (0.18 MiB/min): ten processes
  growing at that rate would take 2.5 GiB, a tenth of this machine's memory, in a day;
* descriptors: :data:`FD_BUDGET_PER_MIN`, one an hour: at the default limit of 1,024 a
  process would run out after about 40 days.

**Accounting.** Every update consumes ``actors * steps_per_actor`` env steps; the final
log must hold updates ``0 .. n-1`` with ``total_steps = (i + 1) * B`` each, so no update
is lost or counted twice across the learner's restarts.
"""

from __future__ import annotations

import csv
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

__all__ = [
    "FD_BUDGET_PER_MIN",
    "RSS_BUDGET_MIB_PER_MIN",
    "check_accounting",
    "fit_slope",
    "leak_report",
    "plot_soak",
]

RSS_BUDGET_MIB_PER_MIN = 256.0 / (24 * 60)
FD_BUDGET_PER_MIN = 1.0 / 60
#: Standard errors a slope must clear above its budget to count as a leak.
LEAK_SIGMAS = 3.0
#: The fewest samples (after the warm-up) a fitted series needs.
MIN_SAMPLES = 4


def fit_slope(t_s: Sequence[float], values: Sequence[float]) -> tuple[float, float] | None:
    """The least-squares slope of ``values`` per minute and its standard error (None with
    fewer than :data:`MIN_SAMPLES` points or no spread in time)."""
    n = len(t_s)
    if n < MIN_SAMPLES:
        return None
    t = [x / 60.0 for x in t_s]
    t_mean, y_mean = sum(t) / n, sum(values) / n
    sxx = sum((x - t_mean) ** 2 for x in t)
    if sxx <= 0:
        return None
    slope = sum((x - t_mean) * (y - y_mean) for x, y in zip(t, values, strict=True)) / sxx
    residual = sum((y - y_mean - slope * (x - t_mean)) ** 2 for x, y in zip(t, values, strict=True))
    return slope, math.sqrt(residual / (n - 2) / sxx)


def leak_report(samples: Sequence[Any], warmup_s: float) -> list[dict[str, Any]]:
    """One row per process with a fitted series: its role, pid, samples, RSS and fd slopes
    with their standard errors, and whether either is a leak."""
    series: dict[int, list[Any]] = {}
    for sample in samples:
        if sample.role != "soak" and sample.age_s >= warmup_s:
            series.setdefault(sample.pid, []).append(sample)
    rows = []
    for pid, points in sorted(series.items()):
        t = [p.t_s for p in points]
        rss = fit_slope(t, [p.rss_mib for p in points])
        fds = fit_slope(t, [p.fds for p in points])
        if rss is None or fds is None:
            continue
        rss_leak = rss[0] - LEAK_SIGMAS * rss[1] > RSS_BUDGET_MIB_PER_MIN
        fd_leak = fds[0] - LEAK_SIGMAS * fds[1] > FD_BUDGET_PER_MIN
        rows.append(
            {
                "role": points[0].role,
                "pid": pid,
                "samples": len(points),
                "minutes": round((t[-1] - t[0]) / 60, 2),
                "rss_mib_start": points[0].rss_mib,
                "rss_mib_end": points[-1].rss_mib,
                "rss_slope_mib_per_min": round(rss[0], 4),
                "rss_slope_se": round(rss[1], 4),
                "fd_start": points[0].fds,
                "fd_end": points[-1].fds,
                "fd_slope_per_min": round(fds[0], 4),
                "fd_slope_se": round(fds[1], 4),
                "leak": rss_leak or fd_leak,
            }
        )
    return rows


def check_accounting(log: Path, steps_per_update: int) -> dict[str, Any]:
    """Check the final per-update log: updates ``0 .. n-1``, ``total_steps = (i + 1) * B``."""
    problems: list[str] = []
    updates, steps = [], []
    try:
        with log.open(newline="") as fh:
            for row in csv.DictReader(fh):
                updates.append(int(row["update"]))
                steps.append(int(row["total_steps"]))
    except (OSError, KeyError, ValueError) as error:
        return {"exact": False, "updates": 0, "env_steps": 0, "expected": 0,
                "problems": [f"{log}: {error}"]}  # fmt: skip
    for i, (update, total) in enumerate(zip(updates, steps, strict=True)):
        if update != i:
            problems.append(f"row {i}: update {update}, expected {i} (lost or repeated)")
            break
        if total != (i + 1) * steps_per_update:
            problems.append(
                f"update {i}: total_steps {total}, expected {(i + 1) * steps_per_update}"
            )
            break
    expected = len(updates) * steps_per_update
    found = steps[-1] if steps else 0
    return {
        "exact": not problems and bool(updates) and found == expected,
        "updates": len(updates),
        "env_steps": found,
        "expected": expected,
        "problems": problems,
    }


_COLOURS = {
    "learner": "tab:blue",
    "actor-worker": "tab:orange",
    "forkserver": "tab:green",
    "resource-tracker": "tab:grey",
    "mode3-server": "tab:purple",
    "soak": "black",
    "other": "tab:brown",  # "other (program)"
}


def plot_soak(path: Path, samples: Sequence[Any], faults: Sequence[Any], title: str) -> None:
    """RSS, descriptors, threads (per process, coloured by role) and processes by role over
    time, with the faults as vertical lines (the learner's kills dashed)."""
    from matplotlib.figure import Figure

    fig = Figure(figsize=(12, 8))
    axes = fig.subplots(2, 2, sharex=True).ravel()
    by_pid: dict[int, list[Any]] = {}
    for s in samples:
        by_pid.setdefault(s.pid, []).append(s)
    seen: set[str] = set()
    for points in by_pid.values():
        role = points[0].role
        t = [p.t_s / 60 for p in points]
        label = None if role in seen else role
        seen.add(role)
        colour = _COLOURS.get(role, _COLOURS["other"])
        for ax, field in zip(axes[:3], ("rss_mib", "fds", "threads"), strict=True):
            ax.plot(t, [getattr(p, field) for p in points], color=colour, lw=1,
                    marker="." if len(points) < 3 else None, label=label)  # fmt: skip
    counts: dict[float, dict[str, int]] = {}
    for s in samples:
        counts.setdefault(s.t_s, {}).setdefault(s.role, 0)
        counts[s.t_s][s.role] += 1
    times = sorted(counts)
    minutes = [t / 60 for t in times]
    axes[3].step(minutes, [sum(counts[t].values()) for t in times], where="post",
                 color="black", label="all")  # fmt: skip
    for role in ("actor-worker", "learner"):
        axes[3].step(minutes, [counts[t].get(role, 0) for t in times], where="post",
                     color=_COLOURS[role], label=role)  # fmt: skip
    for ax, label in zip(axes, ("RSS (MiB)", "open file descriptors", "threads", "processes"),
                         strict=True):  # fmt: skip
        for fault in faults:
            ax.axvline(fault.t_s / 60, color="red" if fault.kind == "learner-kill" else "grey",
                       ls="--" if fault.kind == "learner-kill" else ":", lw=0.8, alpha=0.6)  # fmt: skip
        ax.set_ylabel(label)
        ax.grid(alpha=0.3)
    axes[2].set_xlabel("minutes")
    axes[3].set_xlabel("minutes")
    axes[0].legend(fontsize=7, loc="upper left")
    axes[3].legend(fontsize=7, loc="upper left")
    fig.suptitle(title + " (dotted: a fault; dashed red: the learner killed)")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
