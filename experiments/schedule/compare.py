"""Scheduling experiments: the learned scheduler against every baseline, and transfer.

* :func:`compare_schedulers`: learned scheduler(s) against every heuristic and the
  Fixed(n) frontier (table, plots, ratios, budget sweep);
* :func:`quick_scheduler_report`: the scheduling part of ``fleetgym reproduce`` (the
  shipped scheduler, no training);
* :func:`transfer_experiment`: fine-tuning on a new workload against training from
  scratch.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import gymnasium as gym
from tqdm.auto import tqdm

from fleetgym.agents.schedulers import make_baseline
from fleetgym.experiments.schedule.checkpoint import (
    load_learned_scheduler,
    read_scheduler_meta,
    shipped_scheduler_path,
)
from fleetgym.experiments.schedule.config import (
    CARTPOLE_MODELED_ENV_ID,
    SchedulerPPOConfig,
    stored_config,
    validate_env_kwargs,
)
from fleetgym.experiments.schedule.evaluate import EpisodeResult, evaluate_scheduler
from fleetgym.experiments.schedule.phases import PhaseSchedule, PhaseScheduler
from fleetgym.experiments.schedule.report import (
    markdown_table,
    plot_schedules,
    plot_time_cost,
    plot_training_curve,
    ratios,
    summarize,
)
from fleetgym.experiments.schedule.train import finetune_scheduler, train_scheduler
from fleetgym.experiments.tables import group_by, write_csv

__all__ = [
    "FIXED_SWEEP",
    "HEURISTICS",
    "SEARCH_BEST_CARTPOLE",
    "compare_schedulers",
    "quick_scheduler_report",
    "transfer_experiment",
]

#: The best schedule that really changed size in ``fleetgym schedule search`` on the
#: modelled CartPole-v1 env (16 actors for 15 rounds, then 8; docs/explanation/schedule-headroom.md).
SEARCH_BEST_CARTPOLE = PhaseSchedule((16, 8), (16,))

#: The Fixed(n) sweep that draws the static frontier of the time-cost picture.
FIXED_SWEEP: tuple[int, ...] = (1, 2, 4, 8, 16, 32)
#: MinionsRL's heuristic baselines besides the Fixed(n) sweep.
HEURISTICS: tuple[str, ...] = ("max", "increase", "decrease", "adapt", "server")


def compare_schedulers(
    out_dir: str | Path,
    *,
    learned: Mapping[str, str | Path] | None = None,
    extra: Mapping[str, Any] | None = None,
    env_id: str = CARTPOLE_MODELED_ENV_ID,
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
        extra: table name -> any other predictor to evaluate alongside (e.g. a searched
            :class:`~fleetgym.experiments.schedule.phases.PhaseScheduler`).
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
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    kwargs = validate_env_kwargs(env_kwargs)
    seeds = [int(s) for s in seeds]
    probe = gym.make(env_id, **kwargs)
    max_actors = int(getattr(probe.action_space, "n", 0))
    target = _env_attr(probe, "target_return")
    probe.close()
    heuristics = list(HEURISTICS if heuristics is None else heuristics)
    sweep = [n for n in (FIXED_SWEEP if fixed_sweep is None else fixed_sweep) if n <= max_actors]
    schedulers: dict[str, Any] = {}
    for name, path in (learned or {}).items():
        schedulers[name] = load_learned_scheduler(path)
    schedulers.update(extra or {})
    for spec in heuristics:
        sched = make_baseline(spec, max_actors=max_actors)
        schedulers[sched.name] = sched
    frontier = []
    for n in sweep:
        # Fixed(max_actors) is Max: evaluated once, drawn on the frontier too.
        sched = make_baseline("max" if n == max_actors else f"fixed:{n}", max_actors=max_actors)
        schedulers.setdefault(sched.name, sched)
        frontier.append(sched.name)

    def run_all(
        table: Mapping[str, Any], env_kw: Mapping[str, Any], desc: str
    ) -> list[EpisodeResult]:
        episodes: list[EpisodeResult] = []
        with tqdm(total=len(table) * len(seeds), desc=desc, unit="ep", disable=not progress) as bar:
            for name, sched in table.items():
                episodes += evaluate_scheduler(
                    sched, env_kw, seeds, env_id=env_id, name=name, progress=bar
                )
        return episodes

    episodes = run_all(schedulers, kwargs, "evaluate schedulers")
    rows = summarize(episodes)
    by_scheduler = group_by(episodes, key=lambda e: e.scheduler)
    result: dict[str, Any] = {"env_id": env_id, "env_kwargs": kwargs, "seeds": seeds}
    result["rows"] = rows
    budget_rows: list[dict[str, Any]] = []
    first = next(iter(learned or {}), None)
    reward_of = {r["scheduler"]: r["total_reward_mean"] for r in rows}
    if frontier:
        result["best_fixed"] = max(frontier, key=lambda n: reward_of[n])
    if first is not None:
        refs = ["max", "server", "adapt", *heuristics, *frontier, *(extra or {})]
        result["ratios"] = ratios(rows, first, list(dict.fromkeys(refs)))
        for budget in budgets:
            b_rows = summarize(
                run_all(
                    {first: schedulers[first]},
                    {**kwargs, "budget": float(budget)},
                    f"budget {float(budget):.3g}",
                )
            )
            budget_rows.append({"budget": float(budget), **b_rows[0]})
        result["budget_rows"] = budget_rows
        if budget_rows:
            write_csv(out / "learned_by_budget.csv", budget_rows)
    write_csv(out / "schedulers.csv", rows)
    write_csv(
        out / "episodes.csv",
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
    )
    table = markdown_table(rows)
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
    out = Path(out_dir)
    stored = read_scheduler_meta(checkpoint)
    fine = finetune_scheduler(
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
    scratch = train_scheduler(
        out / "scratch",
        env_id=env_id,
        env_kwargs=env_kwargs,
        episodes=episodes,
        seed=seed,
        config=SchedulerPPOConfig(**stored_config(stored)),
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
        n = read_scheduler_meta(scratch_checkpoint).get("episodes", "?")
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
    scheduling env it records in its metadata) against every baseline, the Fixed(n)
    frontier and the best dynamic schedule ``fleetgym schedule search`` found
    (:data:`SEARCH_BEST_CARTPOLE`) on that env, and writes ``schedulers.md``, ``schedulers.csv``,
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
    path = Path(checkpoint) if checkpoint is not None else shipped_scheduler_path()
    meta = read_scheduler_meta(path)
    env_kwargs = meta.get("env_kwargs", {})
    extra: dict[str, Any] = {}
    # The searched schedule belongs to the CartPole env it was found on (16 actors at most).
    if env_kwargs.get("workload", "CartPole-v1") == "CartPole-v1" and int(
        env_kwargs.get("max_actors", 32)
    ) >= max(SEARCH_BEST_CARTPOLE.sizes):
        searched = PhaseScheduler(SEARCH_BEST_CARTPOLE)
        extra[f"search best {searched.name}"] = searched
    result = compare_schedulers(
        out_dir,
        learned={"learned": path},
        extra=extra,
        env_id=meta.get("env_id", CARTPOLE_MODELED_ENV_ID),
        env_kwargs=env_kwargs,
        seeds=seeds,
        fixed_sweep=fixed_sweep,
        progress=progress,
        title="CartPole (modeled timing)",
    )
    result["checkpoint"] = str(path)
    result["trained_episodes"] = meta.get("episodes")
    return result
