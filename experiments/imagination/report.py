"""The summary table and figures of ``fleetgym imagination`` (one env's runs)."""

from __future__ import annotations

import statistics
from pathlib import Path
from typing import Any

__all__ = ["fmt_steps", "plot", "summarise"]


def fmt_steps(steps: Any) -> str:
    return "—" if steps is None else f"{int(steps):,}"


def summarise(results: list[dict[str, Any]], env: str, target: float, trivial: float) -> str:
    """The Markdown summary of one env's runs."""
    arms: dict[str, list[dict[str, Any]]] = {}
    for r in results:
        arms.setdefault(r["arm"], []).append(r)
    baselines = [name for name in arms if "imagination" not in name]
    lines = [
        f"### {env}: real env steps to an evaluation mean of {target:g} "
        "(three evaluations in a row)",
        "",
        f"Uniform random actions score {trivial:.1f} on the evaluation seeds.",
        "",
        "| arm | seeds | steps to target per seed | median | "
        + " | ".join(f"ratio vs {b} (paired: median, min)" for b in baselines)
        + " | wall s (median) | CPU s (median) | model fit + imagine s (median) |",
        "|---|---|---|---|" + "---|" * len(baselines) + "---|---|---|",
    ]
    for name, runs in arms.items():
        runs = sorted(runs, key=lambda r: r["seed"])
        steps = [r["steps_to_target"] for r in runs]
        reached = [s for s in steps if s is not None]
        median = statistics.median(reached) if len(reached) == len(steps) else None
        cells = []
        for b in baselines:
            base = {r["seed"]: r for r in arms[b]}
            ratios = [
                base[r["seed"]]["steps_to_target"] / r["steps_to_target"]
                for r in runs
                if r["seed"] in base and base[r["seed"]]["steps_to_target"] and r["steps_to_target"]
            ]
            ok = bool(ratios) and name != b
            cells.append(f"{statistics.median(ratios):.2f}×, {min(ratios):.2f}×" if ok else "—")
        lines.append(
            f"| {name} | {len(runs)} | {', '.join(fmt_steps(s) for s in steps)} | {fmt_steps(median)} | "
            f"{' | '.join(cells)} | "
            f"{statistics.median(r['wall_s'] for r in runs):.0f} | {statistics.median(r['cpu_s'] for r in runs):.0f} | "
            f"{statistics.median(r['model_fit_s'] + r['imagine_s'] for r in runs):.0f} |"
        )
    checkpoints = sorted({k for r in results for k in r["at_checkpoints"]}, key=int)
    if checkpoints:
        lines += [
            "",
            "| arm | "
            + " | ".join(f"return at {int(c):,} steps (mean ± sd)" for c in checkpoints)
            + " |",
            "|---" * (len(checkpoints) + 1) + "|",
        ]
        for name, runs in arms.items():
            cells = []
            for c in checkpoints:
                vals = [r["at_checkpoints"][c] for r in runs if c in r["at_checkpoints"]]
                sd = statistics.pstdev(vals) if len(vals) > 1 else 0.0
                cells.append(
                    f"{statistics.mean(vals):.0f} ± {sd:.0f} ({len(vals)})" if vals else "—"
                )
            lines.append(f"| {name} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def plot(results: list[dict[str, Any]], env: str, target: float, out: Path) -> list[Path]:
    """The three figures of one env; returns their paths."""
    from matplotlib.figure import Figure

    slug = env.split("-v")[0].lower().replace("minigrid-", "")
    paths = []
    fig = Figure(figsize=(7, 4))
    ax = fig.subplots()
    colours: dict[str, Any] = {}
    for r in results:
        c = colours.setdefault(r["arm"], f"C{len(colours)}")
        xs, ys = zip(*r["curve"], strict=True) if r["curve"] else ((), ())
        ax.plot(
            xs,
            ys,
            color=c,
            alpha=0.6,
            lw=1,
            label=r["arm"]
            if r["seed"] == min(x["seed"] for x in results if x["arm"] == r["arm"])
            else None,
        )
    ax.axhline(target, color="grey", ls="--", lw=1)
    ax.set_xlabel("real env steps")
    ax.set_ylabel("evaluation return (sampled actions)")
    ax.set_title(f"{env}: with and without imagination (one line per seed)")
    ax.grid(alpha=0.3)
    ax.legend(loc="lower right")
    fig.tight_layout()
    paths.append(out / f"imagination_curves_{slug}.png")
    fig.savefig(paths[-1], dpi=110)
    imagined = [r for r in results if r["errors"]]
    if imagined:
        fig = Figure(figsize=(11, 4))
        ax1, ax2 = fig.subplots(1, 2)
        run = max(imagined, key=lambda r: len(r["errors"]))
        marks = run["errors"]
        picks = sorted({round(i * (len(marks) - 1) / 3) for i in range(4)})
        for steps, err in (marks[i] for i in picks):
            ax1.semilogy(
                range(1, len(err) + 1),
                [max(e, 1e-9) for e in err],
                marker=".",
                label=f"after {steps:,} real steps",
            )
        ax1.set_xlabel("horizon h (steps)")
        ax1.set_ylabel("normalised h-step error on new real data")
        ax1.set_title(
            f"{env}: model error against horizon ({run['arm']}, seed {run['seed']})", fontsize=9
        )
        ax1.grid(alpha=0.3)
        ax1.legend()
        for r in imagined:
            if r["horizons"]:
                xs, hs = zip(*r["horizons"], strict=True)
                ax2.plot(xs, hs, lw=1, alpha=0.7, label=f"horizon, seed {r['seed']}")
        ax2.set_xlabel("real env steps")
        ax2.set_ylabel("horizon chosen")
        ax3 = ax2.twinx()
        xs, ss = zip(*imagined[0]["shares"], strict=True)
        ax3.plot(
            xs, ss, color="k", ls=":", lw=1, label=f"imagined share (seed {imagined[0]['seed']})"
        )
        ax3.set_ylabel("imagined share of the update")
        ax3.set_ylim(0, 1)
        ax2.set_title("what the error-driven rules chose")
        ax2.grid(alpha=0.3)
        fig.tight_layout()
        paths.append(out / f"imagination_error_{slug}.png")
        fig.savefig(paths[-1], dpi=110)
    return paths
