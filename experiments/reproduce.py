"""``fleetgym reproduce``: the headline experiments, small by default, and one report.

Runs, in order:

1. the CALF experiment on CartPole
   (:func:`fleetgym.experiments.calf.experiment.run_calf`): how a network hurts a policy
   trained without one and what network-aware training with compensation wins back;
2. the actor-scheduling comparison
   (:func:`fleetgym.experiments.schedule.compare.quick_scheduler_report`): the shipped
   learned scheduler against every baseline, with the actors-per-round and time-cost
   plots.

Each part writes into its own folder under ``--out``; ``report.md`` links them all.
``--full`` runs the paper-scale versions (hours on a laptop).
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path
from typing import Any

from fleetgym.experiments.argtypes import UsageError, check_output_dir, output_path
from fleetgym.experiments.calf import experiment as calf_experiment

PARTS = ("calf", "schedule")


def configure(parser: argparse.ArgumentParser) -> None:
    """Add this subcommand's arguments."""
    parser.add_argument(
        "--out",
        type=output_path,
        default="fleetgym-out",
        help="output folder (default: %(default)s)",
    )
    parser.add_argument(
        "--full", action="store_true", help="paper-scale budgets instead of the quick ones"
    )
    parser.add_argument(
        "--only",
        default=",".join(PARTS),
        help=f"comma-separated parts to run, of {', '.join(PARTS)} (default: all)",
    )
    parser.add_argument("--no-progress", action="store_true", help="no progress bars (for logs)")


def _parts(text: str) -> list[str]:
    parts = [p.strip() for p in text.split(",") if p.strip()]
    unknown = [p for p in parts if p not in PARTS]
    if not parts or unknown:
        raise UsageError(f"--only: expected names of {', '.join(PARTS)}, actual {text!r}")
    return parts


def _run_calf(out: Path, full: bool, progress: bool) -> list[str]:
    results = calf_experiment.run_calf(
        "CartPole-v1", quick=not full, out_dir=out, progress=progress
    )
    md = next(p for p in results.files if p.suffix == ".md")
    png = next(p for p in results.files if p.suffix == ".png")
    body = md.read_text().splitlines()
    # Drop the part's own title: the report gives it a section heading.
    if body and body[0].startswith("# "):
        body = body[1:]
    body = [("#" + line) if line.startswith("#") else line for line in body]
    return [
        "## Network shim: the CALF experiment (CartPole-v1)",
        "",
        *body,
        "",
        f"![return per regime and condition]({png.relative_to(out.parent).as_posix()})",
        "",
    ]


def _run_schedule(out: Path, full: bool, progress: bool) -> list[str]:
    import torch

    # The scheduling comparison pulls in SB3: imported only when that part runs.
    from fleetgym.experiments.schedule.compare import quick_scheduler_report

    torch.set_num_threads(1)
    seeds = tuple(range(1000, 1010)) if full else (1000, 1001, 1002)
    result: dict[str, Any] = quick_scheduler_report(out, seeds=seeds, progress=progress)
    rel = out.relative_to(out.parent).as_posix()
    lines = [
        "## Actor scheduling: learned scheduler against the baselines",
        "",
        f"Scheduler `{Path(result['checkpoint']).name}` "
        f"(trained for {result.get('trained_episodes')} episodes), evaluated on seeds "
        f"{list(seeds)}; mean ± std over seeds.",
        "",
        result["markdown"].rstrip(),
        "",
    ]
    ratios = result.get("ratios", {})
    parts = [
        f"vs {ref}: time {r['time']:.2f}x, cost {r['cost']:.2f}x"
        for ref, r in ratios.items()
        if ref in ("max", "server")
    ]
    if parts:
        lines += ["Learned scheduler " + "; ".join(parts) + ".", ""]
    rewards = {r["scheduler"]: r["total_reward_mean"] for r in result.get("rows", [])}
    best = result.get("best_fixed")
    if best in rewards and "learned" in rewards:
        gap = (rewards[best] - rewards["learned"]) / abs(rewards[best])
        searched = [n for n in rewards if n.startswith("search best")]
        lines += [
            f"Total reward (higher is better): learned {rewards['learned']:.3f}, best fixed "
            f"fleet {best} {rewards[best]:.3f} (the learned scheduler is "
            + (f"{gap:.1%} short of it)" if gap >= 0 else f"{-gap:.1%} ahead of it)")
            + "".join(f", {n} {rewards[n]:.3f}" for n in searched)
            + ".",
            "",
        ]
    for name, title in (
        ("actors_per_round.png", "actors and mean return per round"),
        ("time_cost.png", "time and cost of every scheduler against the Fixed(n) frontier"),
    ):
        if (out / name).is_file():
            lines += [f"![{title}]({rel}/{name})", ""]
    return lines


def run(args: argparse.Namespace) -> int:
    """Run the selected parts and write ``report.md``."""
    parts = _parts(args.only)
    out = check_output_dir("--out", args.out)
    progress = not args.no_progress
    runners = {"calf": _run_calf, "schedule": _run_schedule}
    scale = "full" if args.full else "quick"
    report = [
        f"# fleetgym reproduce ({scale})",
        "",
        "Command: `fleetgym reproduce" + (" --full" if args.full else "") + "`.",
        "",
    ]
    timings: list[str] = []
    for part in parts:
        start = time.perf_counter()
        print(f"fleetgym reproduce: {part} ({scale}) ...", flush=True)
        report += runners[part](out / part, args.full, progress)
        wall = time.perf_counter() - start
        timings.append(f"- {part}: {wall / 60:.1f} min")
        print(f"fleetgym reproduce: {part} done in {wall / 60:.1f} min", flush=True)
    report += ["## Wall time", "", *timings, ""]
    path = out / "report.md"
    path.write_text("\n".join(report))
    print(f"fleetgym reproduce: report written to {path}")
    return 0
