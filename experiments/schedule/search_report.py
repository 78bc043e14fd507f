"""Tables and plots of the schedule search (:mod:`~fleetgym.experiments.schedule.search`).

* :func:`gain`: the best schedule against the best fixed fleet;
* :func:`progress_rows`: what each ``Fixed(n)`` needs to reach the target (rounds,
  samples, time per round and per 1,000 samples): the measurement behind the headroom;
* :func:`stage_rows`, :func:`stage_oracle`: the time each ``Fixed(n)`` spends in each
  stage of learning (R̄ from one quarter of J to the next), and the time a fleet that
  took the fastest size of every stage would need (an optimistic bound on what phases
  can gain);
* :func:`search_markdown`, :func:`search_summary`: the record as Markdown and as the
  short summary the CLI prints;
* :func:`plot_best_schedule`, :func:`plot_learning_progress`: the two PNGs.

Example:
    >>> a = {"total_reward_mean": -0.35, "time_s_mean": 3.4, "cost_mean": 0.0008}
    >>> b = {"total_reward_mean": -0.36, "time_s_mean": 3.6, "cost_mean": 0.0008}
    >>> {k: round(v, 3) for k, v in gain(a, b).items()}
    {'reward': 0.01, 'time_ratio': 0.944, 'cost_ratio': 1.0}
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from fleetgym.experiments.schedule.evaluate import EpisodeResult

__all__ = [
    "STAGES",
    "gain",
    "paired_difference",
    "plot_best_schedule",
    "plot_learning_progress",
    "progress_rows",
    "search_markdown",
    "search_summary",
    "stage_oracle",
    "stage_rows",
]

#: Stage ends as fractions of the target J (the last stage ends at J).
STAGES: tuple[float, ...] = (0.25, 0.5, 0.75, 1.0)


def gain(subject: Mapping[str, Any], reference: Mapping[str, Any]) -> dict[str, float]:
    """Reward difference and time and cost ratios of ``subject`` over ``reference``."""
    return {
        "reward": subject["total_reward_mean"] - reference["total_reward_mean"],
        "time_ratio": subject["time_s_mean"] / reference["time_s_mean"],
        "cost_ratio": subject["cost_mean"] / reference["cost_mean"],
    }


def paired_difference(
    subject: Sequence[EpisodeResult], reference: Sequence[EpisodeResult]
) -> dict[str, Any]:
    """Seed-by-seed total-reward difference of ``subject`` over ``reference``.

    Both ran on the same workload seeds, so the seed-to-seed spread of a schedule cancels
    out of each difference: the mean's standard error is that of the differences.

    Raises:
        ValueError: the two did not run on the same seeds.

    Example:
        >>> from types import SimpleNamespace as E
        >>> a = [E(seed=1, total_reward=-1.0), E(seed=2, total_reward=-2.0)]
        >>> b = [E(seed=2, total_reward=-2.5), E(seed=1, total_reward=-1.5)]
        >>> d = paired_difference(a, b)
        >>> d["diff_mean"], d["diff_stderr"], d["better"], d["seeds"]
        (0.5, 0.0, 2, 2)
    """
    ours = {int(e.seed): float(e.total_reward) for e in subject}
    theirs = {int(e.seed): float(e.total_reward) for e in reference}
    if sorted(ours) != sorted(theirs):
        raise ValueError(
            f"paired_difference: expected the same seeds, actual {sorted(ours)} "
            f"and {sorted(theirs)}"
        )
    diffs = np.array([ours[s] - theirs[s] for s in sorted(ours)])
    stderr = float(diffs.std(ddof=1) / np.sqrt(len(diffs))) if len(diffs) > 1 else float("nan")
    return {
        "diff_mean": float(diffs.mean()),
        "diff_stderr": stderr,
        "better": int(np.count_nonzero(diffs > 0)),
        "seeds": len(diffs),
    }


def progress_rows(
    fixed: Mapping[int, Sequence[EpisodeResult]], steps_per_actor: int
) -> list[dict[str, Any]]:
    """What each Fixed(n) needs to reach J: samples, rounds, time per round and per sample.

    Args:
        fixed: fleet size -> its episodes.
        steps_per_actor: env steps per actor per round.
    """
    rows = []
    for n, eps in fixed.items():
        samples = [e.rounds * n * steps_per_actor for e in eps]
        rows.append(
            {
                "actors": n,
                "success_rate": float(np.mean([e.success for e in eps])),
                "rounds": float(np.mean([e.rounds for e in eps])),
                "samples": float(np.mean(samples)),
                "time_per_round_s": float(np.mean([e.time_s / e.rounds for e in eps])),
                "ms_per_1k_samples": float(
                    np.mean([1e6 * e.time_s / s for e, s in zip(eps, samples, strict=True)])
                ),
                "time_s": float(np.mean([e.time_s for e in eps])),
                "cost": float(np.mean([e.cost for e in eps])),
                "total_reward": float(np.mean([e.total_reward for e in eps])),
            }
        )
    return rows


def search_markdown(result: Mapping[str, Any]) -> str:
    """The search's result as Markdown: best vs best fixed, gains, the progress table."""
    head = ["schedule", "seeds", "success", "time (s)", "cost ($)", "rounds", "total reward"]

    def line(name: str, r: Mapping[str, Any], seeds: str) -> str:
        return (
            f"| {name} | {seeds} | {r['success_rate']:.0%} | {r['time_s_mean']:.2f} ± "
            f"{r['time_s_std']:.2f} | {r['cost_mean']:.5f} | {r['rounds_mean']:.1f} | "
            f"{r['total_reward_mean']:.4f} ± {r['total_reward_std']:.4f} |"
        )

    s, a = result["search"], result["accounting"]
    seeds = f"{result['seeds'][0]}-{result['seeds'][-1]}"
    lines = [
        f"cost_weight {result['env']['cost_weight']}; cross-entropy search, population "
        f"{s['population']}, {s['n_elite']} elites, {s['iterations_run']} iterations, "
        f"{a['candidate_evaluations']} candidate evaluations ({a['cache_hits']} cache hits), "
        f"{a['episodes']} episodes in all",
        "",
        "| " + " | ".join(head) + " |",
        "|" + "---|" * len(head),
        line(f"best: {result['best']['schedule']}", result["best"], seeds),
        line(f"best fixed: {result['best_fixed']['schedule']}", result["best_fixed"], seeds),
    ]
    confirm = result["confirm_seeds"]
    for name, row in result["held_out"].items():
        lines.append(line(name, row, f"{confirm[0]}-{confirm[-1]} (held out)"))
    g = result["gain"]
    lines += [
        "",
        f"gain of the best schedule over the best fixed fleet: total reward "
        f"{g['reward']:+.4f}, time x{g['time_ratio']:.3f}, cost x{g['cost_ratio']:.3f}",
    ]
    if "held_out_gain" in result:
        h = result["held_out_gain"]
        lines.append(
            f"on the held-out seeds: total reward {h['reward']:+.4f}, time "
            f"x{h['time_ratio']:.3f}, cost x{h['cost_ratio']:.3f}"
        )
        if "diff_stderr" in h:
            lines.append(
                f"paired by seed: {h['diff_mean']:+.4f} +- {h['diff_stderr']:.4f} (standard "
                f"error), better on {h['better']} of {h['seeds']} held-out seeds"
            )
    lines += [
        "",
        "| actors | success | rounds to J | samples to J | time/round (s) | ms per 1k samples "
        "| time (s) | cost ($) | total reward |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in result["learning_progress"]:
        lines.append(
            f"| {r['actors']} | {r['success_rate']:.0%} | {r['rounds']:.1f} | "
            f"{r['samples']:.0f} | {r['time_per_round_s']:.3f} | {r['ms_per_1k_samples']:.1f} | "
            f"{r['time_s']:.2f} | {r['cost']:.5f} | {r['total_reward']:.4f} |"
        )
    stages = result.get("stages", [])
    if stages:
        sizes = list(dict.fromkeys(r["actors"] for r in stages))
        names = list(dict.fromkeys(r["stage"] for r in stages))
        cell = {(r["stage"], r["actors"]): r for r in stages}
        lines += [
            "",
            "time (s) each Fixed(n) spends in each stage of R̄/J (rounds in brackets):",
            "",
            "| stage | " + " | ".join(f"Fixed({n})" for n in sizes) + " |",
            "|---|" + "---|" * len(sizes),
        ]
        for name in names:
            values = [cell[(name, n)] for n in sizes]
            lines.append(
                f"| {name} | "
                + " | ".join(f"{v['time_s']:.2f} ({v['rounds']:.1f})" for v in values)
                + " |"
            )
        oracle = result["stage_oracle"]
        lines += [
            "",
            f"fastest size per stage {oracle['stages']}: {oracle['time_s']:.2f} s in all, "
            f"against {result['best_fixed']['time_s_mean']:.2f} s for the best fixed fleet "
            "(optimistic: no cold start on growth, and a stage's start taken as equally good)",
        ]
    return "\n".join(lines)


def plot_best_schedule(
    traces: Mapping[str, Sequence[EpisodeResult]],
    path: str | Path,
    *,
    target: float | None,
    title: str,
) -> Path:
    """Actors per round (top) and R̄ per round (bottom), every seed of each schedule."""
    from matplotlib.figure import Figure

    fig = Figure(figsize=(9, 6.5))
    ax_a, ax_r = fig.subplots(2, 1, sharex=True)
    for i, (name, episodes) in enumerate(traces.items()):
        for j, e in enumerate(episodes):
            rounds = np.arange(1, len(e.num_actors) + 1)
            style = {"color": f"C{i}", "alpha": 1.0 if j == 0 else 0.45, "lw": 1.5}
            label = name if j == 0 else None
            ax_a.step(rounds, e.num_actors, where="post", label=label, **style)
            ax_r.plot(rounds, e.mean_return, **style)
    if target is not None:
        ax_r.axhline(float(target), color="k", ls="--", lw=1, label="target J")
    ax_a.set_ylabel("actors I_k")
    ax_a.set_yscale("log", base=2)
    ax_a.legend(fontsize=8)
    ax_r.set_xlabel("round k")
    ax_r.set_ylabel("mean return R̄_k")
    ax_r.legend(fontsize=8)
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    path = Path(path)
    fig.savefig(path, dpi=110)
    return path


def plot_learning_progress(
    fixed: Mapping[int, Sequence[EpisodeResult]],
    path: str | Path,
    *,
    steps_per_actor: int,
    target: float | None,
    title: str,
) -> Path:
    """R̄ against env samples (left) and modelled time (right) for every Fixed(n)."""
    from matplotlib.figure import Figure

    fig = Figure(figsize=(11, 4))
    ax_s, ax_t = fig.subplots(1, 2, sharey=True)
    for i, (n, episodes) in enumerate(fixed.items()):
        e = episodes[0]
        rounds = np.arange(1, len(e.mean_return) + 1)
        style = {"color": f"C{i}", "lw": 1.5, "label": f"Fixed({n})"}
        ax_s.plot(rounds * n * steps_per_actor, e.mean_return, **style)
        ax_t.plot(rounds * e.time_s / e.rounds, e.mean_return, **style)
    for ax in (ax_s, ax_t):
        if target is not None:
            ax.axhline(float(target), color="k", ls="--", lw=1)
    ax_s.set_xscale("log")
    ax_s.set_xlabel("env samples")
    ax_s.set_ylabel("mean return R̄")
    ax_t.set_xlabel("modelled time (s, mean round time x rounds)")
    ax_t.legend(fontsize=8)
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    path = Path(path)
    fig.savefig(path, dpi=110)
    return path


def search_summary(result: Mapping[str, Any]) -> dict[str, Any]:
    """The short record the CLI prints: best, best fixed, gains, accounting."""
    return {
        "best": result["best"]["schedule"],
        "best_fixed": result["best_fixed"]["schedule"],
        "gain": result["gain"],
        "held_out_gain": result.get("held_out_gain"),
        "accounting": result["accounting"],
        "cost_weight": result["env"]["cost_weight"],
    }


def _first_round_at(returns: Sequence[float], level: float) -> int | None:
    """1-based round at which R̄ first reaches ``level`` (None: never)."""
    for k, value in enumerate(returns, start=1):
        if value >= level:
            return k
    return None


def stage_rows(fixed: Mapping[int, Sequence[EpisodeResult]], target: float) -> list[dict[str, Any]]:
    """Rounds and time each ``Fixed(n)`` spends in each stage of learning, mean over seeds.

    Stage ``i`` runs from the round after R̄ first reached ``STAGES[i-1] * J`` to the
    round it first reached ``STAGES[i] * J``; its time is its rounds times the episode's
    mean round time (a fixed fleet's rounds differ only by straggler jitter). Episodes
    that never reach a stage's end leave it out (``seeds`` counts those that did).

    Example:
        >>> e = EpisodeResult("fixed:2", 0, True, True, 4.0, 1e-4, 4, -0.4, 2.0, 200.0,
        ...                   200.0, 1.0, [2] * 4, [10.0, 60.0, 120.0, 200.0])
        >>> [(r["stage"], r["rounds"], r["time_s"]) for r in stage_rows({2: [e]}, 200.0)]
        [('0-25%', 2.0, 2.0), ('25-50%', 1.0, 1.0), ('50-75%', 1.0, 1.0), ('75-100%', 0.0, 0.0)]
    """
    rows = []
    for n, episodes in fixed.items():
        start = 0.0
        for end in STAGES:
            rounds, times = [], []
            for e in episodes:
                k0 = 0 if start == 0.0 else _first_round_at(e.mean_return, start * target)
                k1 = _first_round_at(e.mean_return, end * target)
                if k0 is None or k1 is None:
                    continue
                rounds.append(float(k1 - k0))
                times.append((k1 - k0) * e.time_s / e.rounds)
            rows.append(
                {
                    "actors": n,
                    "stage": f"{start:.0%}-{end:.0%}".replace("%-", "-"),
                    "seeds": len(rounds),
                    "rounds": float(np.mean(rounds)) if rounds else float("nan"),
                    "time_s": float(np.mean(times)) if times else float("nan"),
                }
            )
            start = end
    return rows


def stage_oracle(rows: Sequence[Mapping[str, Any]], seeds: int) -> dict[str, Any]:
    """The fastest size of each stage (over sizes every seed finished) and its total time.

    The total is optimistic: it assumes the policy a small fleet reaches a stage with is
    as good a start for the next stage as a large fleet's, and it leaves out the cold start
    a fleet pays when it grows.
    """
    best: dict[str, Mapping[str, Any]] = {}
    for r in rows:
        if r["seeds"] < seeds:
            continue
        if r["stage"] not in best or r["time_s"] < best[r["stage"]]["time_s"]:
            best[r["stage"]] = r
    complete = len(best) == len({r["stage"] for r in rows})
    return {
        "stages": {stage: r["actors"] for stage, r in best.items()},
        # A stage no size finished on every seed has no fastest size: no total.
        "time_s": float(sum(r["time_s"] for r in best.values())) if complete else float("nan"),
    }
