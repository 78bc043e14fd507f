"""Plots and ratios of the scheduling experiments (learned scheduler against baselines).

The episodes themselves are run by :func:`fleetgym.experiments.scheduling.evaluate_scheduler`
(one :class:`~fleetgym.experiments.scheduling.EpisodeResult` per seed, with actors and
mean return R̄ per round) and tabulated by its ``summarize``; this module draws them:

* :func:`plot_schedules`: actors per round and R̄ per round of every scheduler (the
  paper's three-phase picture);
* :func:`plot_time_cost`: the (time, cost) plane with the Fixed(n) frontier, every
  scheduler's point and the learned scheduler's point under several budgets;
* :func:`plot_training_curve`: the scheduler's training episodes;
* :func:`ratios`: time and cost of one scheduler as multiples of others';
* :func:`compare_schedulers`: learned scheduler(s) against every baseline and the
  Fixed(n) frontier (table, plots, ratios, budget sweep); :func:`transfer_experiment`:
  fine-tuning against training from scratch; :func:`quick_scheduler_report`: the part of
  ``fleetgym reproduce``.

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
import json
import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

#: The Fixed(n) sweep that draws the static frontier of the time-cost picture.
FIXED_SWEEP: tuple[int, ...] = (1, 2, 4, 8, 16, 32)
#: MinionsRL's heuristic baselines besides the Fixed(n) sweep.
HEURISTICS: tuple[str, ...] = ("max", "increase", "decrease", "adapt", "server")


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
    fig.tight_layout()
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def plot_training_curve(
    records: Sequence[Any] | Mapping[str, Sequence[Any]],
    path: str | Path,
    *,
    title: str = "scheduler training",
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


# --------------------------------------------------------------------------- experiments
def compare_schedulers(
    out_dir: str | Path,
    *,
    learned: Mapping[str, str | Path] | None = None,
    env_id: str = "fleetgym/ActorScheduling-CartPole-Modeled-v0",
    env_kwargs: Mapping[str, Any] | None = None,
    seeds: Sequence[int] = (0, 1, 2, 3, 4),
    heuristics: Sequence[str] | None = None,
    fixed_sweep: Sequence[int] | None = None,
    budgets: Sequence[float] = (),
    plot_seed_traces: bool = True,
    progress: bool = True,
    title: str = "",
) -> dict[str, Any]:
    """The learned scheduler(s) against every baseline: table, ratios, and the two plots.

    Writes ``schedulers.md``/``schedulers.csv`` (mean ± std over ``seeds``),
    ``actors_per_round.png`` (actors and R̄ per round), ``time_cost.png`` (the Fixed(n)
    frontier with every scheduler's point and, for ``budgets``, the learned scheduler's
    point under each budget) and ``comparison.json`` (rows, ratios of the first learned
    scheduler against Max, the server-based fleet, Adapt and every heuristic).

    Args:
        out_dir: output directory.
        learned: table name -> checkpoint zip (e.g. ``{"learned": "runs/scheduler.zip"}``).
        env_id: scheduling env ID.
        env_kwargs: its keyword arguments.
        seeds: evaluation seeds (the paper's protocol: >= 5).
        heuristics: baseline names (default: Max, Increase, Decrease, Adapt, server).
        fixed_sweep: Fixed(n) sizes of the frontier (default 1, 2, 4, 8, 16, 32, capped at
            the env's ``max_actors``).
        budgets: budgets (dollars) under which to re-evaluate the first learned scheduler.
        plot_seed_traces: draw the per-round plot.
        progress: tqdm bars.
        title: prefix of the figure titles.

    Raises:
        ValueError: no seeds; FileNotFoundError: a missing checkpoint.
    """
    import gymnasium as gym
    from tqdm.auto import tqdm

    from fleetgym.agents.schedulers import make_baseline
    from fleetgym.experiments import scheduling as sch

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    if env_kwargs is not None and not isinstance(env_kwargs, Mapping):
        raise TypeError(f"env_kwargs: expected a mapping, actual {type(env_kwargs).__name__}")
    kwargs = dict(env_kwargs or {})
    seeds = [int(s) for s in seeds]
    probe = gym.make(env_id, **kwargs)
    max_actors = int(getattr(probe.action_space, "n", 0))
    target = _env_attr(probe, "target_return")
    probe.close()
    heuristics = list(HEURISTICS if heuristics is None else heuristics)
    sweep = [n for n in (FIXED_SWEEP if fixed_sweep is None else fixed_sweep) if n <= max_actors]
    schedulers: dict[str, Any] = {}
    for name, path in (learned or {}).items():
        schedulers[name] = sch.load_learned_scheduler(path)
    for spec in heuristics:
        sched = make_baseline(spec, max_actors=max_actors)
        schedulers[sched.name] = sched
    frontier = []
    for n in sweep:
        # Fixed(max_actors) is Max: evaluated once, drawn on the frontier too.
        sched = make_baseline("max" if n == max_actors else f"fixed:{n}", max_actors=max_actors)
        schedulers.setdefault(sched.name, sched)
        frontier.append(sched.name)

    def run_all(table: Mapping[str, Any], env_kw: Mapping[str, Any], desc: str) -> list[Any]:
        episodes: list[Any] = []
        with tqdm(total=len(table) * len(seeds), desc=desc, unit="ep", disable=not progress) as bar:
            for name, sched in table.items():
                episodes += sch.evaluate_scheduler(
                    sched, env_kw, seeds, env_id=env_id, name=name, progress=bar
                )
        return episodes

    episodes = run_all(schedulers, kwargs, "evaluate schedulers")
    rows = sch.summarize(episodes)
    by_scheduler: dict[str, list[Any]] = {}
    for ep in episodes:
        by_scheduler.setdefault(ep.scheduler, []).append(ep)
    result: dict[str, Any] = {"env_id": env_id, "env_kwargs": kwargs, "seeds": seeds}
    result["rows"] = rows
    budget_rows: list[dict[str, Any]] = []
    first = next(iter(learned or {}), None)
    if first is not None:
        refs = ["max", "server", "adapt", *heuristics, *frontier]
        result["ratios"] = ratios(rows, first, list(dict.fromkeys(refs)))
        for budget in budgets:
            b_rows = sch.summarize(
                run_all(
                    {first: schedulers[first]},
                    {**kwargs, "budget": float(budget)},
                    f"budget {float(budget):.3g}",
                )
            )
            budget_rows.append({"budget": float(budget), **b_rows[0]})
        result["budget_rows"] = budget_rows
        if budget_rows:
            write_csv(budget_rows, out / "learned_by_budget.csv")
    write_csv(rows, out / "schedulers.csv")
    write_csv(
        [
            {
                "scheduler": e.scheduler,
                "seed": e.seed,
                "success": e.success,
                "time_s": e.time_s,
                "cost": e.cost,
                "rounds": e.rounds,
                "total_reward": e.total_reward,
                "num_actors": " ".join(map(str, e.num_actors)),
            }
            for e in episodes
        ],
        out / "episodes.csv",
    )
    table = sch.markdown_table(rows)
    (out / "schedulers.md").write_text(table + "\n")
    prefix = f"{title}: " if title else ""
    if plot_seed_traces:
        shown = {
            k: v for k, v in by_scheduler.items() if k not in frontier or k in ("fixed:8", "max")
        }
        plot_schedules(
            shown,
            out / "actors_per_round.png",
            target=None if target is None else float(target),
            title=f"{prefix}actors and mean return per round (seed {seeds[0]})",
        )
    plot_time_cost(
        rows,
        out / "time_cost.png",
        frontier=frontier,
        budget_rows=budget_rows,
        title=f"{prefix}time vs cost, mean ± std over {len(seeds)} seeds",
    )
    result["markdown"] = table
    result["episodes"] = [
        {
            "scheduler": e.scheduler,
            "seed": e.seed,
            "num_actors": e.num_actors,
            "mean_return": e.mean_return,
        }
        for e in episodes
    ]
    (out / "comparison.json").write_text(json.dumps(result, indent=1, default=float))
    return result


def _env_attr(env: Any, name: str) -> Any:
    try:
        return env.get_wrapper_attr(name)
    except AttributeError:
        return None


def transfer_experiment(
    checkpoint: str | Path,
    out_dir: str | Path,
    *,
    env_id: str,
    env_kwargs: Mapping[str, Any],
    episodes: int = 10,
    seed: int = 0,
    learning_rate: float | None = None,
    scratch_checkpoint: str | Path | None = None,
    eval_seeds: Sequence[int] = (1000, 1001, 1002, 1003, 1004),
    heuristics: Sequence[str] | None = None,
    fixed_sweep: Sequence[int] | None = None,
    tensorboard: bool = True,
    progress: bool = True,
) -> dict[str, Any]:
    """Fine-tune for ``episodes`` vs from scratch for ``episodes`` (vs a given long run).

    Trains both short runs on the new workload's env, then evaluates them (and
    ``scratch_checkpoint``, e.g. 100 episodes from scratch, if given) against the
    baselines with :func:`compare_schedulers`. Writes ``finetuned/``, ``scratch/``,
    ``evaluation/``, ``transfer_training.png`` and ``transfer.json`` under ``out_dir``.

    Args:
        checkpoint: the trained scheduler to fine-tune.
        out_dir: output directory.
        env_id: the new workload's scheduling env ID.
        env_kwargs: its keyword arguments.
        episodes: episodes of both the fine-tuning and the short run from scratch.
        seed: seed of both runs.
        learning_rate: fine-tuning learning rate (None: the stored one).
        scratch_checkpoint: a (longer) run from scratch on the new workload to compare.
        eval_seeds: evaluation seeds.
        heuristics: baselines of the comparison (None: all).
        fixed_sweep: Fixed(n) sizes (None: 1..32; ``()``: none).
        tensorboard: write TensorBoard logs.
        progress: tqdm bars.

    Raises:
        FileNotFoundError: a missing checkpoint.
    """
    from fleetgym.experiments import scheduler_training as st

    out = Path(out_dir)
    stored = st.read_scheduler_meta(checkpoint)
    fine = st.finetune_scheduler(
        checkpoint,
        out / "finetuned",
        env_id=env_id,
        env_kwargs=env_kwargs,
        episodes=episodes,
        seed=seed,
        learning_rate=learning_rate,
        tensorboard=tensorboard,
        progress=progress,
    )
    scratch = st.train_scheduler(
        out / "scratch",
        env_id=env_id,
        env_kwargs=env_kwargs,
        episodes=episodes,
        seed=seed,
        config=st.SchedulerPPOConfig(**st._stored_config(stored)),
        checkpoint_every=0,
        tensorboard=tensorboard,
        progress=progress,
        name=f"scratch{episodes}",
    )
    learned = {
        f"learned-finetuned{episodes}": fine.model_path,
        f"learned-scratch{episodes}": scratch.model_path,
    }
    if scratch_checkpoint is not None:
        n = st.read_scheduler_meta(scratch_checkpoint).get("episodes", "?")
        learned[f"learned-scratch{n}"] = Path(scratch_checkpoint)
    comparison = compare_schedulers(
        out / "evaluation",
        learned=learned,
        env_id=env_id,
        env_kwargs=env_kwargs,
        seeds=eval_seeds,
        heuristics=heuristics,
        fixed_sweep=fixed_sweep,
        progress=progress,
        title="transfer",
    )
    plot_training_curve(
        {"fine-tuned": fine.records, "from scratch": scratch.records},
        out / "transfer_training.png",
        title=f"fine-tune vs from scratch, {episodes} episodes",
    )
    result = {
        "finetune": fine.summary(),
        "scratch": scratch.summary(),
        "rows": comparison["rows"],
        "markdown": comparison["markdown"],
    }
    (out / "transfer.json").write_text(json.dumps(result, indent=1, default=float))
    return result


# --------------------------------------------------------------------------- reproduce
def quick_scheduler_report(
    out_dir: str | Path,
    *,
    seeds: Sequence[int] = (1000, 1001, 1002),
    fixed_sweep: Sequence[int] | None = None,
    progress: bool = True,
    checkpoint: str | Path | None = None,
) -> dict[str, Any]:
    """The quick scheduling experiment of ``fleetgym reproduce``.

    Evaluates the shipped learned scheduler (trained on the deterministic CartPole
    scheduling env it records in its metadata) against every baseline and the Fixed(n)
    frontier on that env, and writes ``schedulers.md``, ``schedulers.csv``,
    ``actors_per_round.png``, ``time_cost.png`` and ``comparison.json`` to ``out_dir``.

    Args:
        out_dir: output directory.
        seeds: evaluation seeds (not used in training).
        fixed_sweep: Fixed(n) sizes (default 1, 2, 4, 8, 16, 32).
        progress: tqdm bars.
        checkpoint: another scheduler zip instead of the shipped one.

    Returns:
        The :func:`compare_schedulers` result plus ``markdown`` (the table) and
        ``checkpoint`` (the zip evaluated).

    Raises:
        FileNotFoundError: no shipped scheduler and no ``checkpoint``.
    """
    from fleetgym.experiments import scheduler_training as st

    path = Path(checkpoint) if checkpoint is not None else st.shipped_scheduler_path()
    meta = st.read_scheduler_meta(path)
    result = compare_schedulers(
        out_dir,
        learned={"learned": path},
        env_id=meta.get("env_id", st.DEFAULT_ENV_ID),
        env_kwargs=meta.get("env_kwargs", {}),
        seeds=seeds,
        fixed_sweep=fixed_sweep,
        progress=progress,
        title="CartPole (modeled timing)",
    )
    result["checkpoint"] = str(path)
    result["trained_episodes"] = meta.get("episodes")
    return result
