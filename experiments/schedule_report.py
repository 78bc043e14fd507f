"""Per-round traces of schedulers, their summary table, and the scheduling plots.

What a reader wants to see of a scheduler (MinionsRL's Table 2 and Figures 5-7):

* :func:`run_schedule` runs one episode (one whole workload training run) with any
  scheduler that has SB3's ``predict`` interface and records every round: actors,
  mean return R̄, round time, round cost.
* :func:`summarize` turns traces into mean ± std of time to target, cost, success rate,
  rounds and total scheduler reward; :func:`markdown_table` prints them.
* :func:`plot_schedules` draws actors per round and R̄ per round for every scheduler
  (the paper's three-phase picture), :func:`plot_time_cost` the (time, cost) plane with
  the Fixed(n) frontier and the learned scheduler's point for several budgets.

"Time" of an episode is the sum of its round times P_k, i.e. the time to target when the
target was reached (the episode ends there) and the whole run otherwise; "cost" is the
total billed cost. Both are the env's figures (modelled or measured, as configured).

Example:
    >>> t = ScheduleTrace("fixed-4", 0, num_actors=[4, 4], mean_return=[10.0, 30.0],
    ...                   round_time=[1.0, 1.5], round_cost=[0.1, 0.2], rewards=[-0.1, -0.15],
    ...                   success=True)
    >>> t.time, round(t.cost, 2), t.rounds
    (2.5, 0.3, 2)
"""

from __future__ import annotations

import csv
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import numpy as np


class Predictor(Protocol):
    """Anything with SB3's ``predict`` (a trained PPO, or a baseline scheduler)."""

    def predict(
        self,
        observation: Any,
        state: Any = None,
        episode_start: Any = None,
        deterministic: bool = False,
    ) -> tuple[Any, Any]: ...


@dataclass
class ScheduleTrace:
    """The rounds of one scheduling episode.

    Models one whole training run of a workload under one scheduler: per round k, the
    number of actors I_k, the mean final return R̄_k, the round time P_k, the round cost
    C_k and the scheduler's reward r_k.

    Example:
        >>> ScheduleTrace("max", 1, [32], [500.0], [2.0], [0.5], [-0.2], True).mean_actors
        32.0

    Args:
        scheduler: the scheduler's name.
        seed: the episode's seed.
        num_actors: I_k per round.
        mean_return: R̄_k per round.
        round_time: P_k per round (seconds).
        round_cost: C_k per round (dollars).
        rewards: r_k per round (including the terminal penalty, if any).
        success: the target was reached within the budget.
        total_cost: the env's total cost (defaults to the sum of round costs).
    """

    scheduler: str
    seed: int
    num_actors: list[int]
    mean_return: list[float]
    round_time: list[float]
    round_cost: list[float]
    rewards: list[float]
    success: bool
    total_cost: float | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def rounds(self) -> int:
        return len(self.num_actors)

    @property
    def time(self) -> float:
        """Sum of round times (the time to target when :attr:`success`)."""
        return float(np.sum(self.round_time))

    @property
    def cost(self) -> float:
        return (
            float(self.total_cost)
            if self.total_cost is not None
            else float(np.sum(self.round_cost))
        )

    @property
    def total_reward(self) -> float:
        return float(np.sum(self.rewards))

    @property
    def mean_actors(self) -> float:
        return float(np.mean(self.num_actors)) if self.num_actors else 0.0


def run_schedule(
    env: Any,
    scheduler: Predictor,
    *,
    seed: int,
    name: str = "scheduler",
    deterministic: bool = True,
) -> ScheduleTrace:
    """Run one scheduling episode and record every round.

    Args:
        env: a scheduling env (``gym.make`` of an ActorScheduling ID).
        scheduler: an object with SB3's ``predict``.
        seed: reset seed of the episode.
        name: the scheduler's name in the trace.
        deterministic: passed to ``predict`` (the mode of a learned policy).

    Raises:
        TypeError: ``scheduler`` has no ``predict``.
    """
    if not callable(getattr(scheduler, "predict", None)):
        raise TypeError(
            f"scheduler: expected an object with SB3's predict(), actual {type(scheduler).__name__}"
        )
    obs, info = env.reset(seed=int(seed))
    state = None
    episode_start = np.ones((1,), dtype=bool)
    actors: list[int] = []
    returns: list[float] = []
    times: list[float] = []
    costs: list[float] = []
    rewards: list[float] = []
    success = False
    total_cost: float | None = None
    while True:
        action, state = scheduler.predict(
            obs, state=state, episode_start=episode_start, deterministic=deterministic
        )
        episode_start = np.zeros((1,), dtype=bool)
        action = int(np.asarray(action).reshape(-1)[0])
        obs, reward, terminated, truncated, info = env.step(action)
        actors.append(int(info.get("num_actors", action + 1)))
        returns.append(float(info.get("mean_return", float("nan"))))
        times.append(float(info.get("round_time", float("nan"))))
        costs.append(float(info.get("round_cost", float("nan"))))
        rewards.append(float(reward))
        if "total_cost" in info:
            total_cost = float(info["total_cost"])
        if terminated or truncated:
            success = bool(info.get("success", False))
            break
    return ScheduleTrace(
        scheduler=name,
        seed=int(seed),
        num_actors=actors,
        mean_return=returns,
        round_time=times,
        round_cost=costs,
        rewards=rewards,
        success=success,
        total_cost=total_cost,
    )


# --------------------------------------------------------------------------- tables
SUMMARY_COLUMNS = (
    "scheduler",
    "episodes",
    "success",
    "time_mean",
    "time_std",
    "cost_mean",
    "cost_std",
    "rounds_mean",
    "actors_mean",
    "reward_mean",
    "reward_std",
)


def summarize(traces: Mapping[str, Sequence[ScheduleTrace]]) -> list[dict[str, Any]]:
    """Mean ± std over seeds of each scheduler's time, cost, rounds and reward.

    Args:
        traces: scheduler name -> its episodes.

    Raises:
        ValueError: a scheduler with no episodes.
    """
    rows = []
    for name, runs in traces.items():
        if not runs:
            raise ValueError(f"traces[{name!r}]: expected at least one episode, actual none")
        t = np.array([r.time for r in runs])
        c = np.array([r.cost for r in runs])
        w = np.array([r.total_reward for r in runs])
        rows.append(
            {
                "scheduler": name,
                "episodes": len(runs),
                "success": float(np.mean([r.success for r in runs])),
                "time_mean": float(t.mean()),
                "time_std": float(t.std()),
                "cost_mean": float(c.mean()),
                "cost_std": float(c.std()),
                "rounds_mean": float(np.mean([r.rounds for r in runs])),
                "actors_mean": float(np.mean([r.mean_actors for r in runs])),
                "reward_mean": float(w.mean()),
                "reward_std": float(w.std()),
            }
        )
    return rows


def ratios(
    rows: Sequence[Mapping[str, Any]], subject: str, references: Sequence[str]
) -> dict[str, dict[str, float]]:
    """Time and cost of ``subject`` as multiples of each reference scheduler's."""
    by_name = {r["scheduler"]: r for r in rows}
    if subject not in by_name:
        raise ValueError(f"subject: expected one of {sorted(by_name)}, actual {subject!r}")
    out = {}
    for ref in references:
        if ref not in by_name:
            continue
        s, r = by_name[subject], by_name[ref]
        out[ref] = {
            "time": s["time_mean"] / r["time_mean"] if r["time_mean"] else math.nan,
            "cost": s["cost_mean"] / r["cost_mean"] if r["cost_mean"] else math.nan,
            "reward_diff": s["reward_mean"] - r["reward_mean"],
        }
    return out


def markdown_table(rows: Sequence[Mapping[str, Any]]) -> str:
    """The summary as a Markdown table (mean ± std)."""
    lines = [
        "| scheduler | success | time to target (s) | cost ($) | rounds | mean actors | total reward |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        lines.append(
            f"| {r['scheduler']} | {r['success']:.0%} | {r['time_mean']:.1f} ± {r['time_std']:.1f} "
            f"| {r['cost_mean']:.4f} ± {r['cost_std']:.4f} | {r['rounds_mean']:.1f} "
            f"| {r['actors_mean']:.1f} | {r['reward_mean']:.2f} ± {r['reward_std']:.2f} |"
        )
    return "\n".join(lines) + "\n"


def write_csv(rows: Sequence[Mapping[str, Any]], path: str | Path) -> Path:
    """Write summary rows (any keys; the first row's order) to CSV."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    keys = list(rows[0]) if rows else list(SUMMARY_COLUMNS)
    with path.open("w", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=keys)
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
    traces: Mapping[str, Sequence[ScheduleTrace]],
    path: str | Path,
    *,
    target: float | None = None,
    title: str = "actors per round and mean return R̄ per round",
) -> Path:
    """Actors per round (top) and R̄ per round (bottom) of each scheduler's first episode.

    Args:
        traces: scheduler name -> episodes (the first one of each is drawn; the learned
            scheduler's other episodes are drawn faintly to show the spread).
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
            rounds = np.arange(1, run.rounds + 1)
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
        rows: :func:`summarize` rows (one point each, with std error bars).
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
            [r["time_mean"] for r in front],
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
                (r["time_mean"], r["cost_mean"]),
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
            r["time_mean"],
            r["cost_mean"],
            xerr=r["time_std"],
            yerr=r["cost_std"],
            fmt=marker,
            ms=size,
            color=cmap(i % 10),
            label=f"{r['scheduler']} ({r['success']:.0%} success)",
            zorder=3,
        )
    if budget_rows:
        ax.plot(
            [r["time_mean"] for r in budget_rows],
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
                (r["time_mean"], r["cost_mean"]),
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


# --------------------------------------------------------------------------- evaluation
#: The Fixed(n) sweep that draws the static frontier.
FIXED_SWEEP: tuple[int, ...] = (1, 2, 4, 8, 16, 32)
#: The heuristic baselines of MinionsRL (besides the Fixed(n) sweep).
HEURISTICS: tuple[str, ...] = ("max", "increase", "decrease", "adapt", "server")


def resolve_scheduler(spec: Any, max_actors: int) -> tuple[str, Any]:
    """A scheduler from its name: a baseline name, ``learned:PATH``, or a predictor as is.

    Args:
        spec: ``"adapt"``, ``"fixed:8"``, ``"learned:runs/scheduler.zip"``, or an object
            with ``predict``.
        max_actors: the env's ``I_max`` (baselines need it).

    Raises:
        ValueError: an unknown name; FileNotFoundError: a missing learned checkpoint.
    """
    if not isinstance(spec, str):
        if not callable(getattr(spec, "predict", None)):
            raise TypeError(
                f"scheduler: expected a name or an object with predict(), actual {type(spec).__name__}"
            )
        return getattr(spec, "name", type(spec).__name__), spec
    if spec.startswith("learned:"):
        from fleetgym.experiments.scheduler_training import load_scheduler

        path = spec.split(":", 1)[1]
        return "learned", load_scheduler(path)
    from fleetgym.agents.schedulers import make_baseline

    sched = make_baseline(spec, max_actors=max_actors)
    return sched.name, sched


def evaluate_schedulers(
    schedulers: Mapping[str, Any],
    *,
    env_id: str,
    env_kwargs: Mapping[str, Any] | None = None,
    seeds: Sequence[int] = (0, 1, 2, 3, 4),
    progress: bool = True,
    desc: str = "evaluate",
) -> dict[str, list[ScheduleTrace]]:
    """Run every scheduler on the same seeds and record every round.

    A scheduler's ``env_overrides`` (e.g. the server-based fleet's billing) are merged
    into ``env_kwargs`` for its episodes only.

    Args:
        schedulers: table name -> predictor (see :func:`resolve_scheduler`).
        env_id: scheduling env ID.
        env_kwargs: its keyword arguments.
        seeds: episode seeds (the same for every scheduler).
        progress: tqdm bar over episodes.
        desc: the bar's label.

    Raises:
        ValueError: no seeds.
    """
    import gymnasium as gym
    from tqdm.auto import tqdm

    import fleetgym  # noqa: F401  (registers the IDs)

    seeds = [int(s) for s in seeds]
    if not seeds:
        raise ValueError("seeds: expected at least one seed, actual none")
    out: dict[str, list[ScheduleTrace]] = {}
    bar = tqdm(total=len(schedulers) * len(seeds), desc=desc, unit="ep", disable=not progress)
    try:
        for name, sched in schedulers.items():
            overrides = dict(getattr(sched, "env_overrides", {}) or {})
            env = gym.make(env_id, **{**dict(env_kwargs or {}), **overrides})
            try:
                runs = []
                for seed in seeds:
                    runs.append(run_schedule(env, sched, seed=seed, name=name))
                    bar.update(1)
                    bar.set_postfix(scheduler=name)
                out[name] = runs
            finally:
                env.close()
    finally:
        bar.close()
    return out
