"""Tables and plots of the scheduling experiments (nothing here trains or runs episodes).

* :func:`summarize` and :func:`markdown_table`: mean ± std per scheduler over seeds;
* :func:`ratios`: time and cost of one scheduler as multiples of others';
* :func:`write_report`: the files of ``fleetgym schedule evaluate``;
* :func:`plot_schedules`: actors per round and R̄ per round of every scheduler (the
  paper's three-phase picture);
* :func:`plot_time_cost`: the (time, cost) plane with the Fixed(n) frontier, every
  scheduler's point and the learned scheduler's point under several budgets;
* :func:`plot_training_curve`: the scheduler's training episodes.

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

import math
from collections.abc import Mapping, Sequence
from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from fleetgym.experiments.schedule.evaluate import EpisodeResult
from fleetgym.experiments.tables import group_by, mean_std, write_csv
from fleetgym.experiments.tables import markdown_table as table_lines

if TYPE_CHECKING:
    from matplotlib.figure import Figure

__all__ = [
    "markdown_table",
    "plot_evaluation",
    "plot_schedules",
    "plot_time_cost",
    "plot_training_curve",
    "ratios",
    "summarize",
    "write_report",
]


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


def summarize(results: Sequence[EpisodeResult]) -> list[dict[str, Any]]:
    """Mean ± std per scheduler (population std over seeds), in first-seen order."""
    rows = []
    for sched, rs in group_by(results, key=lambda r: r.scheduler).items():
        row: dict[str, Any] = {"scheduler": sched, "episodes": len(rs)}
        row["success_rate"] = sum(r.success for r in rs) / len(rs)
        for key, values in (
            ("time_s", [r.time_s for r in rs]),
            ("time_to_target_s", [r.time_to_target_s for r in rs]),
            ("cost", [r.cost for r in rs]),
            ("rounds", [float(r.rounds) for r in rs]),
            ("total_reward", [r.total_reward for r in rs]),
            ("mean_actors", [r.mean_actors for r in rs]),
            ("wall_s", [r.wall_s for r in rs]),
        ):
            mean, std = mean_std(values)
            row[f"{key}_mean"], row[f"{key}_std"] = mean, std
        rows.append(row)
    return rows


def _pm(mean: float, std: float, digits: int) -> str:
    if math.isnan(mean):
        return "n/a"
    return f"{mean:.{digits}f} ± {std:.{digits}f}"


def markdown_table(rows: Sequence[Mapping[str, Any]]) -> str:
    """The summary as a Markdown table (mean ± std over seeds).

    "wall" is this machine's wall-clock time per episode (the cost of the simulation
    itself, not a modelled figure).
    """
    header = [
        "scheduler",
        "success",
        "time to target (s)",
        "time (s)",
        "cost ($)",
        "rounds",
        "total reward",
        "mean actors",
        "wall (s)",
    ]
    cells = [
        [
            str(r["scheduler"]),
            f"{r['success_rate']:.0%}",
            _pm(r["time_to_target_s_mean"], r["time_to_target_s_std"], 1),
            _pm(r["time_s_mean"], r["time_s_std"], 1),
            _pm(r["cost_mean"], r["cost_std"], 4),
            _pm(r["rounds_mean"], r["rounds_std"], 1),
            _pm(r["total_reward_mean"], r["total_reward_std"], 2),
            _pm(r["mean_actors_mean"], r["mean_actors_std"], 1),
            _pm(r["wall_s_mean"], r["wall_s_std"], 1),
        ]
        for r in rows
    ]
    return "\n".join(table_lines(header, cells))


def write_report(
    results: Sequence[EpisodeResult], out: str | Path, *, title: str = "scheduler evaluation"
) -> dict[str, Path]:
    """Write episodes.csv, summary.csv, summary.md and schedules.png into ``out``."""
    if not results:
        raise ValueError("results: expected at least one episode, actual none")
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    episode_rows = []
    for r in results:
        row = asdict(r)
        row["time_to_target_s"] = r.time_to_target_s
        row["num_actors"] = " ".join(str(n) for n in r.num_actors)
        row["mean_return"] = " ".join(f"{v:.2f}" for v in r.mean_return)
        episode_rows.append(row)
    rows = summarize(results)
    table = markdown_table(rows)
    files = {
        "episodes": write_csv(out / "episodes.csv", episode_rows),
        "summary_csv": write_csv(out / "summary.csv", rows),
        "summary_md": out / "summary.md",
        "plot": plot_evaluation(results, out / "schedules.png", title),
    }
    files["summary_md"].write_text(f"# {title}\n\n{table}\n")
    return files


# --------------------------------------------------------------------------- plots
def _save(fig: Figure, path: str | Path) -> Path:
    fig.tight_layout()
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    return path


def plot_evaluation(results: Sequence[EpisodeResult], path: Path, title: str) -> Path:
    """Actors (left) and mean return (right) per round of every evaluated episode."""
    from matplotlib.figure import Figure

    fig = Figure(figsize=(12, 4))
    ax_a, ax_r = fig.subplots(1, 2)
    colours: dict[str, Any] = {}
    for r in results:
        first = r.scheduler not in colours
        if first:
            colours[r.scheduler] = f"C{len(colours) % 10}"
        style = {"color": colours[r.scheduler], "lw": 1, "alpha": 0.8}
        rounds = range(1, len(r.num_actors) + 1)
        ax_a.step(rounds, r.num_actors, where="post", label=r.scheduler if first else None, **style)
        ax_r.plot(rounds, r.mean_return, **style)
    ax_a.set_xlabel("round k")
    ax_a.set_ylabel("actors I_k")
    ax_r.set_xlabel("round k")
    ax_r.set_ylabel("mean return R̄_k")
    for ax in (ax_a, ax_r):
        ax.grid(alpha=0.3)
    ax_a.legend(fontsize=7, ncol=2)
    fig.suptitle(title)
    return _save(fig, path)


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
    from matplotlib import colormaps
    from matplotlib.figure import Figure

    fig = Figure(figsize=(9, 7))
    ax_a, ax_r = fig.subplots(2, 1, sharex=True)
    cmap = colormaps["tab10"]
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
    return _save(fig, path)


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
            ``success_rate``) as :func:`summarize` makes them; one point each,
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
    from matplotlib import colormaps
    from matplotlib.figure import Figure

    fig = Figure(figsize=(8, 6))
    ax = fig.subplots()
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
    cmap = colormaps["tab10"]
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
        for i, r in enumerate(budget_rows):
            ax.annotate(
                # A run the budget stopped has no time to target: say how many reached it.
                f"B={r['budget']:.3g}"
                + (
                    ""
                    if r.get("success_rate", 1.0) >= 1.0
                    else f" ({r['success_rate']:.0%} reach J)"
                ),
                (r["time_s_mean"], r["cost_mean"]),
                fontsize=7,
                color="crimson",
                xytext=(4, 4 + 9 * i),  # stacked: budgets that do not bind share a point
                textcoords="offset points",
            )
    ax.set_xlabel("time (s, sum of round times; to the target where it is reached)")
    ax.set_ylabel("cost ($)")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.grid(alpha=0.3, which="both")
    ax.legend(fontsize=7)
    ax.set_title(title)
    return _save(fig, path)


def plot_training_curve(
    records: Sequence[Any] | Mapping[str, Sequence[Any]],
    path: str | Path,
    *,
    title: str = "scheduler training",
) -> Path:
    """Scheduler episode reward, cost and mean actors against episodes.

    Args:
        records: :class:`~fleetgym.experiments.schedule.callbacks.EpisodeRecord` rows (or
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
    from matplotlib.figure import Figure

    fig = Figure(figsize=(13, 3.8))
    axes = fig.subplots(1, 3)
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
    return _save(fig, path)
