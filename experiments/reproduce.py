"""``fleetgym reproduce``: the headline experiments, small by default, and one report.

Runs, in order:

1. the CALF experiment on CartPole
   (:func:`fleetgym.experiments.calf.experiment.run_calf`): how a network hurts a policy
   trained without one, what network-aware training with compensation wins back, and
   what the compensation that works gives the clean policy itself, untrained for the
   network (``baseline+best``: the predictive compensation with the true dynamics and the
   prior derived from the network) and with scheduled action chunks (``baseline+sched``:
   a playout buffer at the env, D and k chosen from the network; :data:`CALF_REGIMES`);
2. the actor-scheduling comparison
   (:func:`fleetgym.experiments.schedule.compare.quick_scheduler_report`): the shipped
   learned scheduler against every baseline, with the actors-per-round and time-cost
   plots;
3. AcceRL's asynchronous training (:mod:`fleetgym.experiments.async_compare`,
   :mod:`fleetgym.experiments.lag_sweep`): asynchronous against synchronous PPO on the
   long-tail workload whose actors wait (env steps/s, wall time to the target, learner
   utilisation), and final return against an injected policy lag: a short live lag sweep
   on CartPole (the lag sweep's quick grid, lags that its 100 updates hold), shown beside
   the committed Hopper-v5 grid read from ``docs/results/data`` of a source checkout
   (:func:`fleetgym.experiments.lag_sweep_results.committed_grid`; not rerun: hours of CPU), each
   labelled as what it is.

Each part writes into its own folder under ``--out`` (default ``fleetgym-out/reproduce``);
``report.md`` links them all. ``--full`` runs the paper-scale versions (hours on a laptop).
Every part shows progress bars (``--no-progress``: none, for logs).
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import Any

from fleetgym.experiments.argtypes import UsageError, check_output_dir, output_path
from fleetgym.experiments.calf import conditions as calf_conditions
from fleetgym.experiments.calf import experiment as calf_experiment

__all__ = ["ACCERL_SCALES", "CALF_REGIMES", "PARTS", "configure", "run"]

PARTS = ("calf", "schedule", "accerl")
#: The ``calf`` part's regimes: ``calf --quick``'s and, beside them, the clean policy with
#: the best causal compensation (no training of its own: the clean policy's evaluation).
CALF_REGIMES: tuple[str, ...] = (*calf_conditions.QUICK_REGIMES, "baseline+best", "baseline+sched")
#: The ``accerl`` part's budgets: the comparison's workloads, seeds and env-step budget
#: (runs stop at the target), and the lag sweep's arguments.
ACCERL_SCALES: dict[str, dict[str, Any]] = {
    "quick": dict(
        kinds=["heterogeneous"], seeds=1, steps=150_000, lag_sweep=["--quick", "--jobs", "2"]
    ),
    "full": dict(
        kinds=["heterogeneous", "uniform"],
        seeds=5,
        steps=150_000,
        lag_sweep=["--seeds", "3", "--steps", "9600", "--lags", "0", "10", "50", "200"]
        + ["--jobs", "2"],
    ),
}


def configure(parser: argparse.ArgumentParser) -> None:
    """Add this subcommand's arguments."""
    parser.add_argument(
        "--out",
        type=output_path,
        default="fleetgym-out/reproduce",
        metavar="DIR",
        help="output folder: report.md and one folder per part (default: %(default)s)",
    )
    parser.add_argument(
        "--full", action="store_true", help="paper-scale budgets instead of the quick ones"
    )
    parser.add_argument(
        "--only",
        default=",".join(PARTS),
        help=f"comma-separated parts to run, of {', '.join(PARTS)}",
    )
    parser.add_argument("--no-progress", action="store_true", help="no progress bars (for logs)")


def _parts(text: str) -> list[str]:
    parts = [p.strip() for p in text.split(",") if p.strip()]
    unknown = [p for p in parts if p not in PARTS]
    if not parts or unknown:
        raise UsageError(f"--only: expected names of {', '.join(PARTS)}, actual {text!r}")
    return parts


def _run_calf(out: Path, full: bool, progress: bool) -> list[str]:
    regimes = (
        [*calf_conditions.DEFAULT_REGIMES, "baseline+best", "baseline+sched"]
        if full
        else list(CALF_REGIMES)
    )
    results = calf_experiment.run_calf(
        "CartPole-v1", quick=not full, out_dir=out, progress=progress, regimes=regimes
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
        "`baseline+best` is the clean policy, trained without a network, behind each "
        "synthetic profile with the compensation that works: `make_robust_env`'s predictive "
        'compensation with CartPole\'s true dynamics, `lookahead="action"`, 16 samples, '
        'the prior action age derived from the profile and `stall="predict"`; '
        "the env applies whatever action arrived last. `baseline+sched` is the same clean "
        "policy with scheduled action chunks: each packet is stamped for the tick D ahead "
        "and carries k actions planned with the true dynamics and the policy itself, and "
        "the env applies them from a playout buffer (D and k chosen from each profile). "
        "For your own network: `fleetgym profiles assess PROFILE --env CartPole-v1` "
        "(a profile name, a `profiles fit` file or a trace file).",
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


def _body(md: Path) -> list[str]:
    """A part's Markdown, its own title dropped and its headings one level down."""
    lines = md.read_text().splitlines()
    if lines and lines[0].startswith("# "):
        lines = lines[1:]
    while lines and not lines[0].strip():
        lines = lines[1:]
    return [("##" + line) if line.startswith("#") else line for line in lines]


def _run_accerl(out: Path, full: bool, progress: bool) -> list[str]:
    from fleetgym.experiments import async_compare, lag_sweep
    from fleetgym.experiments.overlap_report import paired_ratios

    scale = ACCERL_SCALES["full" if full else "quick"]
    rel = out.relative_to(out.parent).as_posix()
    compare = [
        "--kinds", *scale["kinds"], "--seeds", str(scale["seeds"]), "--steps",
        str(scale["steps"]), "--actors", "8", "--modes", "sync-default", "sync-threads",
        "async", "--out", str(out / "overlap"),
    ]  # fmt: skip
    async_compare.main(compare + ([] if progress else ["--no-progress"]))
    results = json.loads((out / "overlap" / "async_compare.json").read_text())
    lines = [
        "## Asynchronous training (AcceRL): overlap on the long tail, and policy lag",
        "",
        "Actors that wait: CartPole-v1 whose env steps each sleep a log-normal delay drawn "
        "once per actor (median 1 ms, sigma 1; `heterogeneous`), 8 actors x 128 env steps "
        "per rollout, one update per 8 rollouts, every run until the target 475 (mean "
        f"return of the last 100 episodes) or {scale['steps']:,} env steps, "
        f"{scale['seeds']} seed(s). `sync-default` is what `fleetgym train` runs by default "
        "(in-process lockstep fleet); `sync-threads` the same actor threads as `async`, "
        "waiting for every update; `async` is AsyncPPO (PPO-clip, `max_policy_lag=4`).",
        "",
        "Command: `python -m fleetgym.experiments.async_compare " + " ".join(compare[:-2]) + "`",
        "",
        *_body(out / "overlap" / "async_compare.md"),
        "",
    ]
    for kind, runs in results.items():
        for reference in ("sync-default", "sync-threads"):
            ratios = paired_ratios(runs, "async", reference, 8)
            wall = ratios["wall"]
            if wall:
                spread = f"{min(wall):.2f}x" + (f"-{max(wall):.2f}x" if len(wall) > 1 else "")
                lines.append(
                    f"- {kind}: async reached the target in {spread} less wall time than "
                    f"{reference} ({len(wall)} paired seed{'s' if len(wall) > 1 else ''})."
                )
    lines += ["", f"![async against sync]({rel}/overlap/async_compare.png)", ""]
    parser = argparse.ArgumentParser()
    lag_sweep.configure(parser)
    sweep = ["--env", "CartPole-v1", *scale["lag_sweep"], "--out", str(out / "lag")]
    lag_sweep.run(parser.parse_args(sweep + ([] if progress else ["--no-progress"])))
    lines += [
        "### Final return against an injected policy lag",
        "",
        "**This run (live, short):** CartPole-v1, one actor, 32 env steps and 2 epochs per "
        "update; at this budget the cells differ within their seed spread, so this table "
        "shows that the sweep runs, not whether the lag claim holds (that is the committed "
        "grid below).",
        "",
        "Command: `fleetgym lag-sweep " + " ".join(sweep[:-2]) + "`",
        "",
        *_body(out / "lag" / "lag_sweep.md"),
        "",
        f"![final return against the injected lag, this run]({rel}/lag/lag_sweep.png)",
        "",
        *_committed_lag_grid(out / "lag-committed", rel),
    ]
    return lines


def _committed_lag_grid(out: Path, rel: str) -> list[str]:
    """The committed Hopper lag grid (not rerun), or where to find it."""
    from fleetgym.experiments import lag_sweep_results

    runs, files = lag_sweep_results.committed_grid()
    heading = "**The committed grid (not rerun here):** Hopper-v5"
    if not runs:
        return [
            f"{heading}: its parts (`{lag_sweep_results.COMMITTED_GRID}`) and the page that explains "
            "them (`docs/results/async.md`) are in the source tree, not beside this "
            "installation.",
            "",
        ]
    out.mkdir(parents=True, exist_ok=True)
    lag_sweep_results.report(runs, out, f"{runs[0].env}: committed grid (not rerun)")
    names = ", ".join(f"`{path.name}`" for path in files)
    return [
        f"{heading}, {len(runs)} runs read from {names} (`docs/results/data`; the commit "
        "and command of each part are in `docs/results/async.md`).",
        "",
        *_body(out / "lag_sweep.md"),
        "",
        f"![final return against the injected lag, committed grid]({rel}/{out.name}/lag_sweep.png)",
        "",
    ]


def run(args: argparse.Namespace) -> int:
    """Run the selected parts and write ``report.md``."""
    parts = _parts(args.only)
    out = check_output_dir("--out", args.out)
    progress = not args.no_progress
    runners = {"calf": _run_calf, "schedule": _run_schedule, "accerl": _run_accerl}
    scale = "full" if args.full else "quick"
    report = [
        f"# fleetgym reproduce ({scale})",
        "",
        "Command: `fleetgym reproduce"
        + (" --full" if args.full else "")
        + (f" --only {','.join(parts)}" if parts != list(PARTS) else "")
        + "`.",
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
