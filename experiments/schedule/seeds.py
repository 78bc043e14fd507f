"""Is the learned scheduler worth using from any training seed, at any stated trade-off?

:func:`seed_study` trains (or reuses) one scheduler per training seed and per
``cost_weight``, evaluates each on held-out workload seeds next to every ``Fixed(n)`` of
the action ladder, and reports how far each seed's schedule is from the best fixed fleet
for that trade-off. It answers three questions of the scheduler's users:

* **From any seed?** For each ``cost_weight``: every training seed's total reward, its gap
  to the best ``Fixed(n)`` (in %, of the best's magnitude), how many seeds land within
  :data:`WITHIN` of it, the median and the worst.
* **On the frontier?** Every learned point and every ``Fixed(n)`` in the (time, cost)
  plane, with the ``Fixed(n)`` Pareto frontier (``frontier.png``).
* **Transfer:** with ``finetune_from``, each seed fine-tunes that checkpoint instead of
  training from scratch; ``scratch_checkpoint`` evaluates a from-scratch run's checkpoint
  of an earlier episode (e.g. ``checkpoints/ep10.zip``) without training again.

Time and cost of an episode do not depend on ``cost_weight`` (it enters the reward only),
and the scheduler's observation does not contain it, so every episode is run once under
``cost_weight`` 0 and its reward under a weight ``w`` is ``reward_0 - w * cost``, exactly
(the terminal penalty does not depend on ``w`` either).

Layout of ``out_dir``: ``cw<w>/seed<s>/scheduler.zip`` (a run found there is reused, so a
study can be resumed or fed by runs trained elsewhere), ``episodes.csv``, ``fixed.json``
(the ``Fixed(n)`` episodes, reused when the env and seeds match), ``seeds.md``,
``seeds.json``, ``schedules.png`` and ``frontier.png``.

Example:
    >>> shape_label([8, 8, 16, 16, 16])
    '8x2>16x3'
    >>> round(reward_gap(-0.37, -0.35), 4)
    0.0571
"""

from __future__ import annotations

import json
import logging
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np
from tqdm.auto import tqdm

from fleetgym.agents.schedulers import FixedScheduler
from fleetgym.agents.schedulers.actions import fleet_sizes
from fleetgym.experiments.schedule.checkpoint import load_learned_scheduler
from fleetgym.experiments.schedule.config import GENERAL_ENV_ID, SchedulerPPOConfig
from fleetgym.experiments.schedule.evaluate import EpisodeResult, evaluate_scheduler
from fleetgym.experiments.schedule.train import finetune_scheduler, train_scheduler
from fleetgym.experiments.tables import markdown_table, write_csv

__all__ = [
    "WITHIN",
    "SeedStudy",
    "StudyRow",
    "pareto_front",
    "reward_gap",
    "seed_study",
    "shape_label",
]

logger = logging.getLogger(__name__)

#: A training seed "lands" when its total reward is within this share of the best fixed.
WITHIN = 0.05


def shape_label(num_actors: Sequence[int]) -> str:
    """A schedule as ``size x rounds`` phases joined by ``>``."""
    phases: list[list[int]] = []
    for n in num_actors:
        if phases and phases[-1][0] == n:
            phases[-1][1] += 1
        else:
            phases.append([int(n), 1])
    return ">".join(f"{n}x{k}" for n, k in phases)


def reward_gap(reward: float, best: float) -> float:
    """How far ``reward`` falls short of ``best``, as a share of ``|best|`` (0: equal)."""
    return (best - reward) / abs(best) if best else float(best - reward)


def pareto_front(points: Mapping[str, tuple[float, float]]) -> list[str]:
    """Names of the (time, cost) points no other point beats on both, by time.

    Example:
        >>> pareto_front({"a": (1.0, 3.0), "b": (2.0, 1.0), "c": (2.5, 2.0), "d": (3.0, 0.5)})
        ['a', 'b', 'd']
    """
    names = sorted(points, key=lambda n: (points[n][0], points[n][1]))
    front: list[str] = []
    best_cost = math.inf
    for name in names:
        if points[name][1] < best_cost:
            front.append(name)
            best_cost = points[name][1]
    return front


@dataclass
class StudyRow:
    """One scheduler (a training seed's, or a ``Fixed(n)``) under one ``cost_weight``."""

    cost_weight: float
    scheduler: str
    train_seed: int | None
    reward: float
    time_s: float
    cost: float
    success_rate: float
    mean_actors: float
    gap: float  # to the best Fixed(n) under this cost_weight (share of its |reward|)
    shape: str  # on the first evaluation seed


@dataclass
class SeedStudy:
    """The outcome of :func:`seed_study`."""

    rows: list[StudyRow]
    best_fixed: dict[float, str]
    out_dir: Path

    def learned(self, cost_weight: float) -> list[StudyRow]:
        """The training seeds' rows under ``cost_weight``."""
        return [r for r in self.rows if r.cost_weight == cost_weight and r.train_seed is not None]

    def summary(self) -> dict[str, Any]:
        """Per ``cost_weight``: seeds within :data:`WITHIN`, median and worst gap."""
        out: dict[str, Any] = {}
        for w, best in self.best_fixed.items():
            gaps = [r.gap for r in self.learned(w)]
            out[f"{w:g}"] = {
                "best_fixed": best,
                "seeds": len(gaps),
                "within": sum(g <= WITHIN for g in gaps),
                "median_gap": float(np.median(gaps)) if gaps else math.nan,
                "worst_gap": max(gaps) if gaps else math.nan,
            }
        return out


def _reweighted(episodes: Sequence[EpisodeResult], w: float) -> float:
    return float(np.mean([e.total_reward - w * e.cost for e in episodes]))


def _row(
    w: float, name: str, seed: int | None, episodes: Sequence[EpisodeResult], best: float
) -> StudyRow:
    reward = _reweighted(episodes, w)
    return StudyRow(
        cost_weight=w,
        scheduler=name,
        train_seed=seed,
        reward=reward,
        time_s=float(np.mean([e.time_s for e in episodes])),
        cost=float(np.mean([e.cost for e in episodes])),
        success_rate=float(np.mean([e.success for e in episodes])),
        mean_actors=float(np.mean([e.mean_actors for e in episodes])),
        gap=reward_gap(reward, best),
        shape=shape_label(episodes[0].num_actors),
    )


def _fixed_episodes(
    path: Path,
    env_id: str,
    env_kwargs: Mapping[str, Any],
    seeds: Sequence[int],
    sizes: Sequence[int],
    max_actors: int,
    progress: bool = False,
) -> dict[int, list[EpisodeResult]]:
    key = {"env_id": env_id, "env_kwargs": dict(env_kwargs), "seeds": list(seeds)}
    cached: dict[str, Any] = json.loads(path.read_text()) if path.is_file() else {}
    if cached.get("key") != key:
        cached = {"key": key, "episodes": {}}
    episodes = cached["episodes"]
    todo = [n for n in sizes if str(n) not in episodes]
    with tqdm(
        total=len(todo) * len(seeds), desc="Fixed(n)", unit="ep", disable=not progress or not todo
    ) as bar:
        for n in todo:
            runs = evaluate_scheduler(
                FixedScheduler(n, max_actors=max_actors),
                env_kwargs,
                seeds,
                env_id=env_id,
                name=f"Fixed({n})",
                progress=bar,
            )
            episodes[str(n)] = [asdict(e) for e in runs]
            path.write_text(json.dumps(cached))
    return {n: [EpisodeResult(**e) for e in episodes[str(n)]] for n in sizes}


def seed_study(
    out_dir: str | Path,
    *,
    env_id: str = GENERAL_ENV_ID,
    env_kwargs: Mapping[str, Any] | None = None,
    train_seeds: Sequence[int] = range(5),
    eval_seeds: Sequence[int] = range(1000, 1005),
    cost_weights: Sequence[float] = (0.0,),
    episodes: int = 100,
    config: SchedulerPPOConfig | None = None,
    fixed_sizes: Sequence[int] | None = None,
    finetune_from: str | Path | Callable[[int], str | Path] | None = None,
    scratch_checkpoint: str | None = None,
    progress: bool = True,
    title: str = "",
) -> SeedStudy:
    """Train (or reuse) a scheduler per seed and cost weight; compare each with Fixed(n).

    Args:
        out_dir: output folder (runs already in it are reused).
        env_id: the scheduling env.
        env_kwargs: its keyword arguments, without ``cost_weight`` (set per weight).
        train_seeds: the scheduler's training seeds.
        eval_seeds: workload seeds of the evaluation (one episode each).
        cost_weights: the trade-offs to train for (reward per dollar).
        episodes: training (or fine-tuning) episodes per run.
        config: the scheduler's PPO configuration (default :class:`SchedulerPPOConfig`).
        fixed_sizes: the ``Fixed(n)`` to compare with (default: the action ladder).
        finetune_from: a checkpoint (or ``seed -> checkpoint``) each run fine-tunes for
            ``episodes`` instead of training from scratch.
        scratch_checkpoint: evaluate ``seed<s>/<scratch_checkpoint>`` of each run (e.g.
            ``"checkpoints/ep10.zip"``) instead of its final model; nothing is trained.
        progress: tqdm bars.
        title: heading of ``seeds.md``.

    Raises:
        ValueError: no seeds or cost weights, or ``cost_weight`` in ``env_kwargs``.
        FileNotFoundError: a ``scratch_checkpoint`` that is not there.
    """
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    kwargs = dict(env_kwargs or {})
    if "cost_weight" in kwargs:
        raise ValueError("env_kwargs: expected no cost_weight (give cost_weights=), actual one")
    if not train_seeds or not cost_weights or not eval_seeds:
        raise ValueError("train_seeds, cost_weights, eval_seeds: expected at least one each")
    config = config or SchedulerPPOConfig()
    max_actors = int(kwargs.get("max_actors", 32))
    sizes = list(fixed_sizes or fleet_sizes(max_actors))
    eval_kwargs = {**kwargs, "cost_weight": 0.0}
    fixed = _fixed_episodes(
        out / "fixed.json", env_id, eval_kwargs, eval_seeds, sizes, max_actors, progress
    )

    learned: dict[tuple[float, int], list[EpisodeResult]] = {}
    for w in cost_weights:
        for seed in train_seeds:
            run_dir = out / f"cw{w:g}" / f"seed{seed}"
            model = _trained_model(
                run_dir,
                env_id,
                {**kwargs, "cost_weight": float(w)},
                seed,
                episodes,
                config,
                finetune_from,
                scratch_checkpoint,
                progress,
            )
            with tqdm(
                total=len(eval_seeds),
                desc=f"evaluate cw{w:g} seed {seed}",
                unit="ep",
                disable=not progress,
            ) as bar:
                learned[(w, seed)] = evaluate_scheduler(
                    load_learned_scheduler(model),
                    eval_kwargs,
                    eval_seeds,
                    env_id=env_id,
                    name=f"learned seed {seed}",
                    progress=bar,
                )

    rows: list[StudyRow] = []
    best_fixed: dict[float, str] = {}
    for w in cost_weights:
        fixed_reward = {n: _reweighted(runs, w) for n, runs in fixed.items()}
        best_n = max(fixed_reward, key=lambda n: fixed_reward[n])
        best_fixed[float(w)] = f"Fixed({best_n})"
        best = fixed_reward[best_n]
        rows.extend(_row(w, f"Fixed({n})", None, fixed[n], best) for n in sizes)
        rows.extend(_row(w, f"learned seed {s}", s, learned[(w, s)], best) for s in train_seeds)
    study = SeedStudy(rows=rows, best_fixed=best_fixed, out_dir=out)
    _write(study, fixed, learned, title or str(kwargs.get("workload", env_id)))
    return study


def _trained_model(
    run_dir: Path,
    env_id: str,
    env_kwargs: dict[str, Any],
    seed: int,
    episodes: int,
    config: SchedulerPPOConfig,
    finetune_from: str | Path | Callable[[int], str | Path] | None,
    scratch_checkpoint: str | None,
    progress: bool,
) -> Path:
    if scratch_checkpoint is not None:
        path = run_dir / scratch_checkpoint
        if not path.is_file():
            raise FileNotFoundError(f"scratch_checkpoint: expected {path}, actual missing")
        return path
    final = run_dir / "scheduler.zip"
    if final.is_file():
        logger.info("reusing %s", final)
        return final
    if finetune_from is not None:
        source = finetune_from(seed) if callable(finetune_from) else finetune_from
        result = finetune_scheduler(
            source,
            run_dir,
            env_id=env_id,
            env_kwargs=env_kwargs,
            episodes=episodes,
            seed=seed,
            tensorboard=False,
            progress=progress,
            name="scheduler",
        )
    else:
        result = train_scheduler(
            run_dir,
            env_id=env_id,
            env_kwargs=env_kwargs,
            episodes=episodes,
            seed=seed,
            config=config,
            tensorboard=False,
            progress=progress,
        )
    return result.model_path


def _write(
    study: SeedStudy,
    fixed: Mapping[int, Sequence[EpisodeResult]],
    learned: Mapping[tuple[float, int], Sequence[EpisodeResult]],
    title: str,
) -> None:
    out = study.out_dir
    write_csv(
        out / "episodes.csv",
        [
            {"cost_weight_trained": w, "train_seed": s, **asdict(e)}
            for (w, s), runs in learned.items()
            for e in runs
        ],
    )
    lines = [f"# Learned scheduler per training seed: {title}", ""]
    summary = study.summary()
    for w, best in study.best_fixed.items():
        s = summary[f"{w:g}"]
        lines += [
            f"## cost_weight {w:g} (best fixed fleet: {best})",
            "",
            f"{s['within']} of {s['seeds']} training seeds within {WITHIN:.0%} of {best}; "
            f"median gap {s['median_gap']:+.1%}, worst {s['worst_gap']:+.1%} "
            "(gap: shortfall in total reward as a share of the best fixed fleet's).",
            "",
        ]
        body = [
            [
                r.scheduler,
                f"{r.reward:.3f}",
                f"{r.gap:+.1%}",
                f"{r.time_s:.2f}",
                f"{r.cost:.5f}",
                f"{r.success_rate:.0%}",
                f"{r.mean_actors:.1f}",
                r.shape if len(r.shape) <= 40 else r.shape[:37] + "...",
            ]
            for r in study.rows
            if r.cost_weight == w
        ]
        lines += markdown_table(
            [
                "scheduler",
                "total reward",
                "gap",
                "time (s)",
                "cost ($)",
                "success",
                "mean actors",
                "schedule (first seed)",
            ],
            body,
        )
        lines.append("")
    (out / "seeds.md").write_text("\n".join(lines))
    (out / "seeds.json").write_text(
        json.dumps({"summary": summary, "rows": [asdict(r) for r in study.rows]}, indent=1)
    )
    _plot(study, fixed, learned, title)


def _plot(
    study: SeedStudy,
    fixed: Mapping[int, Sequence[EpisodeResult]],
    learned: Mapping[tuple[float, int], Sequence[EpisodeResult]],
    title: str,
) -> None:
    from matplotlib import colormaps
    from matplotlib.figure import Figure

    cmap = colormaps["tab10"]
    fig = Figure(figsize=(9, 4.5))
    ax = fig.subplots()
    for i, ((w, s), runs) in enumerate(learned.items()):
        rounds = np.arange(1, len(runs[0].num_actors) + 1)
        label = f"seed {s}" + (f", cost_weight {w:g}" if len(study.best_fixed) > 1 else "")
        ax.step(rounds, runs[0].num_actors, where="mid", color=cmap(i % 10), lw=1.8, label=label)
    ax.set_yscale("log", base=2)
    ax.set_xlabel("round k")
    ax.set_ylabel("actors I_k")
    ax.set_title(f"{title}: each training seed's schedule (first evaluation seed)")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8, ncol=3)
    fig.savefig(study.out_dir / "schedules.png", dpi=110, bbox_inches="tight")

    fig = Figure(figsize=(8, 6))
    ax = fig.subplots()
    points = {
        f"Fixed({n})": (
            float(np.mean([e.time_s for e in runs])),
            float(np.mean([e.cost for e in runs])),
        )
        for n, runs in fixed.items()
    }
    # A fleet that misses the target is no point of the frontier, however cheap.
    reached = {f"Fixed({n})" for n, runs in fixed.items() if all(e.success for e in runs)}
    front = pareto_front({k: v for k, v in points.items() if k in reached})
    ax.plot(
        [points[n][0] for n in front],
        [points[n][1] for n in front],
        "-",
        color="0.6",
        label="Fixed(n) frontier (x: misses the target on some seed)",
    )
    for name, (t, c) in points.items():
        ax.plot(t, c, "o" if name in reached else "x", color="0.4")
        ax.annotate(name, (t, c), textcoords="offset points", xytext=(4, 4), fontsize=8)
    weights = list(study.best_fixed)
    for i, w in enumerate(weights):
        xs = [r.time_s for r in study.learned(w)]
        ys = [r.cost for r in study.learned(w)]
        ax.plot(xs, ys, "*", ms=11, color=cmap(i % 10), label=f"learned, cost_weight {w:g}")
    ax.set_xlabel("time to target (s)")
    ax.set_ylabel("cost ($)")
    ax.set_title(f"{title}: learned schedulers against the Fixed(n) frontier")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.savefig(study.out_dir / "frontier.png", dpi=110, bbox_inches="tight")
