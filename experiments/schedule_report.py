"""Plots and ratios of the scheduling experiments (learned scheduler against baselines).

The episodes themselves are run by :func:`fleetgym.experiments.scheduling.evaluate_scheduler`
(one :class:`~fleetgym.experiments.scheduling.EpisodeResult` per seed, with actors and
mean return R̄ per round) and tabulated by its ``summarize``; this module draws them:

* :func:`plot_schedules`: actors per round and R̄ per round of every scheduler (the
  paper's three-phase picture);
* :func:`plot_time_cost`: the (time, cost) plane with the Fixed(n) frontier, every
  scheduler's point and the learned scheduler's point under several budgets;
* :func:`plot_training_curve`: the scheduler's training episodes;
* :func:`ratios`: time and cost of one scheduler as multiples of others'.

"Time" is the sum of an episode's round times P_k (the time to target when the target
was reached, since the episode ends there), "cost" the total billed cost, both as the env
accounts them (modelled or measured).

Example:
    >>> rows = [{"scheduler": "learned", "time_s_mean": 40.0, "cost_mean": 0.02,
    ...          "total_reward_mean": -4.0},
    ...         {"scheduler": "max", "time_s_mean": 38.0, "cost_mean": 0.03,
    ...          "total_reward_mean": -3.8}]
    >>> r = ratios(rows, "learned", ["max"])["max"]
    >>> round(r["time"], 3), round(r["cost"], 3), round(r["reward_diff"], 2)
    (1.053, 0.667, -0.2)
"""

from __future__ import annotations

import csv
import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np


def ratios(
    rows: Sequence[Mapping[str, Any]], subject: str, references: Sequence[str]
) -> dict[str, dict[str, float]]:
    """Time and cost of ``subject`` as multiples of each reference's, and the reward gap.

    Args:
        rows: summary rows (``scheduler``, ``time_s_mean``, ``cost_mean``,
            ``total_reward_mean``); references missing from them are skipped.
        subject: the scheduler compared.
        references: the schedulers compared against.

    Raises:
        ValueError: ``subject`` is not in ``rows``.
    """
    by_name = {r["scheduler"]: r for r in rows}
    if subject not in by_name:
        raise ValueError(f"subject: expected one of {sorted(by_name)}, actual {subject!r}")
    s = by_name[subject]
    out = {}
    for ref in references:
        if ref not in by_name or ref == subject:
            continue
        r = by_name[ref]
        out[ref] = {
            "time": s["time_s_mean"] / r["time_s_mean"] if r["time_s_mean"] else math.nan,
            "cost": s["cost_mean"] / r["cost_mean"] if r["cost_mean"] else math.nan,
            "reward_diff": s["total_reward_mean"] - r["total_reward_mean"],
        }
    return out


def write_csv(rows: Sequence[Mapping[str, Any]], path: str | Path) -> Path:
    """Write rows (the keys of the first row, in order) to CSV.

    Raises:
        ValueError: no rows.
    """
    if not rows:
        raise ValueError("rows: expected at least one row, actual none")
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    keys = list(rows[0])
    with path.open("w", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=keys, extrasaction="ignore")
        writer.writeheader()
        for r in rows:
            writer.writerow({k: r.get(k) for k in keys})
    return path


# --------------------------------------------------------------------------- plots
def _pyplot() -> Any:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def plot_schedules(
    traces: Mapping[str, Sequence[Any]],
    path: str | Path,
    *,
    target: float | None = None,
    title: str = "actors per round and mean return R̄ per round",
) -> Path:
    """Actors per round (top) and R̄ per round (bottom) of each scheduler's first episode.

    Args:
        traces: scheduler name -> episodes (objects with ``num_actors`` and
            ``mean_return`` lists, e.g. ``EpisodeResult``); the first episode of each is
            drawn, a learned scheduler's others faintly to show the spread.
        path: PNG to write.
        target: the target return J, drawn as a dashed line.
        title: figure title.

    Raises:
        ValueError: no traces.
    """
    if not traces:
        raise ValueError("traces: expected at least one scheduler, actual none")
    plt = _pyplot()
    fig, (ax_a, ax_r) = plt.subplots(2, 1, figsize=(9, 7), sharex=True)
    cmap = plt.get_cmap("tab10")
    for i, (name, runs) in enumerate(traces.items()):
        color = cmap(i % 10)
        learned = name.startswith("learned")
        for j, run in enumerate(runs if learned else runs[:1]):
            rounds = np.arange(1, len(run.num_actors) + 1)
            alpha = 1.0 if j == 0 else 0.25
            lw = 2.2 if learned else 1.3
            label = name if j == 0 else None
            ax_a.step(
                rounds, run.num_actors, where="mid", color=color, alpha=alpha, lw=lw, label=label
            )
            ax_r.plot(rounds, run.mean_return, color=color, alpha=alpha, lw=lw, label=label)
    if target is not None:
        ax_r.axhline(target, color="k", ls="--", lw=1, label=f"target J={target:g}")
    ax_a.set_ylabel("actors I_k")
    ax_r.set_ylabel("mean final return R̄_k")
    ax_r.set_xlabel("round k")
    ax_a.legend(fontsize=8, ncol=3)
    ax_r.legend(fontsize=8, ncol=3)
    ax_a.grid(alpha=0.3)
    ax_r.grid(alpha=0.3)
    fig.suptitle(title)
    fig.tight_layout()
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def plot_time_cost(
    rows: Sequence[Mapping[str, Any]],
    path: str | Path,
    *,
    frontier: Sequence[str] = (),
    budget_rows: Sequence[Mapping[str, Any]] = (),
    title: str = "time to target vs cost",
) -> Path:
    """The (time, cost) plane: every scheduler's point, the Fixed(n) frontier, budgets.

    Args:
        rows: summary rows (``scheduler``, ``time_s_mean``/``_std``, ``cost_mean``/``_std``,
            ``success_rate``) as ``scheduling.summarize`` makes them; one point each,
            with std error bars.
        path: PNG to write.
        frontier: names of the rows that form the static frontier (Fixed(n) for n = 1..32),
            joined by a line in the given order.
        budget_rows: rows of the learned scheduler under different budgets; each needs a
            ``budget`` key, and they are joined and labelled by budget.
        title: figure title.

    Raises:
        ValueError: no rows.
    """
    if not rows:
        raise ValueError("rows: expected at least one summary row, actual none")
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(8, 6))
    by_name = {r["scheduler"]: r for r in rows}
    front = [by_name[n] for n in frontier if n in by_name]
    if front:
        ax.plot(
            [r["time_s_mean"] for r in front],
            [r["cost_mean"] for r in front],
            "-o",
            color="0.55",
            lw=1.5,
            label="Fixed(n) frontier",
            zorder=1,
        )
        for r in front:
            ax.annotate(
                r["scheduler"],
                (r["time_s_mean"], r["cost_mean"]),
                fontsize=7,
                color="0.4",
                xytext=(4, -10),
                textcoords="offset points",
            )
    cmap = plt.get_cmap("tab10")
    others = [r for r in rows if r["scheduler"] not in set(frontier)]
    for i, r in enumerate(others):
        marker = "*" if r["scheduler"].startswith("learned") else "s"
        size = 14 if marker == "*" else 7
        ax.errorbar(
            r["time_s_mean"],
            r["cost_mean"],
            xerr=r["time_s_std"],
            yerr=r["cost_std"],
            fmt=marker,
            ms=size,
            color=cmap(i % 10),
            label=f"{r['scheduler']} ({r['success_rate']:.0%} success)",
            zorder=3,
        )
    if budget_rows:
        ax.plot(
            [r["time_s_mean"] for r in budget_rows],
            [r["cost_mean"] for r in budget_rows],
            ":*",
            color="crimson",
            ms=9,
            label="learned, by budget",
            zorder=2,
        )
        for r in budget_rows:
            ax.annotate(
                f"B={r['budget']:.3g}",
                (r["time_s_mean"], r["cost_mean"]),
                fontsize=7,
                color="crimson",
                xytext=(4, 4),
                textcoords="offset points",
            )
    ax.set_xlabel("time to target (s, sum of round times)")
    ax.set_ylabel("cost ($)")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.grid(alpha=0.3, which="both")
    ax.legend(fontsize=7)
    ax.set_title(title)
    fig.tight_layout()
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def plot_training_curve(
    records: Sequence[Any], path: str | Path, *, title: str = "scheduler training"
) -> Path:
    """Scheduler episode reward, cost and mean actors against episodes.

    Args:
        records: :class:`~fleetgym.experiments.scheduler_training.EpisodeRecord` rows (or
            several runs as a mapping name -> rows).
        path: PNG to write.
        title: figure title.

    Raises:
        ValueError: no records.
    """
    runs: Mapping[str, Sequence[Any]] = (
        records if isinstance(records, Mapping) else {"run": records}
    )
    if not any(runs.values()):
        raise ValueError("records: expected at least one episode record, actual none")
    plt = _pyplot()
    fig, axes = plt.subplots(1, 3, figsize=(13, 3.8))
    for name, recs in runs.items():
        ep = [r.episode for r in recs]
        for ax, key in zip(axes, ("reward", "cost", "mean_actors"), strict=True):
            ax.plot(ep, [getattr(r, key) for r in recs], lw=1, label=name)
    for ax, label in zip(axes, ("episode reward", "episode cost ($)", "mean actors"), strict=True):
        ax.set_xlabel("scheduler episode")
        ax.set_ylabel(label)
        ax.grid(alpha=0.3)
    if len(runs) > 1:
        axes[0].legend(fontsize=8)
    fig.suptitle(title)
    fig.tight_layout()
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
