"""``fleetgym calf``: train under the network and measure the sim-to-real gap (CALF).

Trains every regime of :mod:`fleetgym.agents.calf` for each seed, evaluates each policy
under the evaluation grid (sim-clean, ethernet, wifi-normal, wifi-degraded, a shipped
trace), the clean-trained policy under the paper's ablation, and selected policies under
physically meaningful variants of wifi-degraded; then writes into the output folder:

- ``calf_<env>.md``: Markdown tables, mean ± seed std and the gap per condition;
- ``calf_<env>_records.csv``: one row per (table, regime, seed, condition);
- ``calf_<env>_summary.csv``: one row per aggregated cell;
- ``calf_<env>.png``: bar chart of return per regime × condition.

``--quick`` is a few minutes on 2 cores (1 seed, three regimes, small budgets); the
default is the full experiment (5 seeds, six regimes). :func:`run_calf` is the same
thing as a function (``fleetgym reproduce`` calls it).
"""

from __future__ import annotations

import argparse
import csv
import dataclasses
import math
import os
import re
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

__all__ = ["CalfResults", "configure", "run", "run_calf"]

QUICK_REGIMES = ("baseline", "net-aware", "net-aware+comp")
#: Regimes evaluated under the wifi-degraded variants (eval only; training elsewhere).
VARIANT_REGIMES = ("baseline", "net-aware+comp", "net-aware-mix+comp")


@dataclass
class CalfResults:
    """What :func:`run_calf` measured and wrote.

    Args:
        env_id: Task.
        records: Per-seed :class:`~fleetgym.agents.calf.EvalRecord` list.
        cells: Aggregated :class:`~fleetgym.agents.calf.Cell` list.
        files: Paths written.
        wall_s: Wall time of the whole run.
        train_wall_s: Training wall time per (regime, seed).
        layouts: Input layout (k, m) per regime.
    """

    env_id: str
    records: list[Any]
    cells: list[Any]
    files: list[Path]
    wall_s: float
    train_wall_s: dict[str, float] = field(default_factory=dict)
    layouts: dict[str, tuple[int, int]] = field(default_factory=dict)

    def cell(self, regime: str, condition: str, table: str = "grid") -> Any:
        """The aggregated cell of (table, regime, condition)."""
        for c in self.cells:
            if (c.table, c.regime, c.condition) == (table, regime, condition):
                return c
        raise KeyError(f"expected a cell ({table}, {regime}, {condition}); not measured")


def _split(text: str | None) -> list[str] | None:
    if text is None:
        return None
    return [t.strip() for t in text.split(",") if t.strip()]


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "_", text)


def run_calf(
    env: str = "CartPole-v1",
    *,
    quick: bool = False,
    seeds: int | Sequence[int] | None = None,
    out_dir: str | os.PathLike[str] = "fleetgym-out/calf",
    regimes: Sequence[str] | None = None,
    conditions: Sequence[str] | None = None,
    timesteps: int | None = None,
    episodes: int | None = None,
    ablation: bool = True,
    variants: Sequence[str] | None = None,
    variant_regimes: Sequence[str] | None = None,
    step_ms: float | None = None,
    algo: str | None = None,
    progress: bool = True,
) -> CalfResults:
    """Runs the CALF experiment and writes its report (see the module docstring).

    Args:
        env: ``CartPole-v1`` or a MiniGrid ID (e.g. ``MiniGrid-Empty-5x5-v0``).
        quick: Small budgets: 1 seed, regimes baseline / net-aware / net-aware+comp.
        seeds: Number of seeds (0..N-1) or explicit seeds; default 1 quick, 5 full.
        out_dir: Output folder (created).
        regimes: Regime names (see :data:`fleetgym.agents.calf.REGIMES`; also
            ``<condition>+comp`` / ``<condition>`` to train under any condition).
        conditions: Evaluation grid (default sim-clean, ethernet, wifi-normal,
            wifi-degraded and the first shipped trace).
        timesteps: Training steps per policy (default from the task's setup).
        episodes: Evaluation episodes per (policy, condition): default 50 (20 quick).
        ablation: Evaluate the clean-trained policy under the paper's ablation.
        variants: wifi-degraded variants to evaluate (default
            :data:`~fleetgym.agents.calf.DEGRADED_VARIANTS`, none with ``quick``; empty
            to skip).
        variant_regimes: Regimes evaluated under the variants.
        step_ms: Control period override (MiniGrid's default is 20 ms).
        algo: ``"ppo"`` or ``"recurrent-ppo"`` override.
        progress: Show tqdm progress bars.

    Returns:
        The :class:`CalfResults`.

    Raises:
        ValueError, TypeError: on a bad argument.
    """
    from tqdm.auto import tqdm

    from fleetgym.agents import calf

    if not isinstance(quick, bool):
        raise TypeError(f"quick: expected a bool, actual {quick!r}")
    setup = calf.env_setup(env, algo=algo, step_ms=step_ms)
    if seeds is None:
        seed_list = [0] if quick else list(range(5))
    elif isinstance(seeds, int) and not isinstance(seeds, bool):
        if seeds < 1:
            raise ValueError(f"seeds: expected a positive count, actual {seeds!r}")
        seed_list = list(range(seeds))
    elif isinstance(seeds, Sequence) and not isinstance(seeds, str):
        seed_list = [int(s) for s in seeds]
        if not seed_list or any(s < 0 for s in seed_list):
            raise ValueError(f"seeds: expected non-negative seeds, actual {seeds!r}")
    else:
        raise TypeError(f"seeds: expected a count or a sequence of seeds, actual {seeds!r}")
    regime_objs = [
        _regime(name) for name in (regimes or (QUICK_REGIMES if quick else calf.DEFAULT_REGIMES))
    ]
    if conditions is None:
        cond_objs = [calf.CONDITIONS[c] for c in calf.EVAL_CONDITIONS]
        trace = calf.shipped_trace_condition()
        if trace is not None:
            cond_objs.append(trace)
    else:
        cond_objs = [calf.resolve_condition(c) for c in conditions]
    if "sim-clean" not in [c.name for c in cond_objs]:
        cond_objs.insert(0, calf.CONDITIONS["sim-clean"])
    if variants is None:
        variants = () if quick else calf.DEGRADED_VARIANTS
    variant_objs = [calf.resolve_condition(c) for c in variants]
    v_regimes = set(VARIANT_REGIMES if variant_regimes is None else variant_regimes)
    total = (
        timesteps
        if timesteps is not None
        else (setup.quick_timesteps if quick else setup.total_timesteps)
    )
    n_episodes = episodes if episodes is not None else (20 if quick else 50)
    if isinstance(n_episodes, bool) or not isinstance(n_episodes, int) or n_episodes < 1:
        raise ValueError(f"episodes: expected a positive int, actual {episodes!r}")
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)

    start = time.perf_counter()
    records: list[Any] = []
    train_wall: dict[str, float] = {}
    layouts: dict[str, tuple[int, int]] = {}
    jobs = [(s, r) for s in seed_list for r in regime_objs]
    bar = tqdm(jobs, desc=f"calf {env}", unit="policy", disable=not progress)
    for seed, regime in bar:
        bar.set_postfix_str(f"train {regime.name} seed {seed}")
        policy = calf.train_regime(setup, regime, seed, total)
        train_wall[f"{regime.name}/{seed}"] = policy.wall_s
        layouts[regime.name] = (policy.layout.history_length, policy.layout.action_history_length)
        evals: list[tuple[str, Any]] = [("grid", c) for c in cond_objs]
        if ablation and regime.name == "baseline":
            evals += [("ablation", calf.CONDITIONS[c]) for c in calf.ABLATION_CONDITIONS]
        if regime.name in v_regimes:
            evals += [("degraded", c) for c in variant_objs]
        for table, cond in evals:
            bar.set_postfix_str(f"eval {regime.name} seed {seed} {cond.name}")
            records.append(
                calf.evaluate_policy(
                    setup,
                    policy,
                    cond,
                    n_episodes,
                    seed=calf.eval_seed(seed, cond.name),
                    table=table,
                )
            )
        # Rewrite the report after every policy: a long run stopped early keeps what
        # it finished.
        done = seed_list[: seed_list.index(seed) + 1]
        results = CalfResults(
            env,
            records,
            calf.aggregate(records),
            [],
            time.perf_counter() - start,
            train_wall,
            layouts,
        )
        results.files = _write_outputs(
            results, out, setup, done, total, n_episodes, [c.name for c in cond_objs]
        )
    bar.close()
    return results


def _regime(name: str) -> Any:
    from fleetgym.agents import calf

    if name in calf.REGIMES:
        return calf.REGIMES[name]
    base = name.removesuffix("+comp")
    calf.resolve_condition(base)  # raises with the list of known names
    return calf.Regime(name, base, name.endswith("+comp"))


def _fmt(mean: float, std: float, env_id: str) -> str:
    if env_id.startswith("MiniGrid"):
        return f"{mean:.2f} ± {std:.2f}"
    return f"{mean:.0f} ± {std:.0f}"


def _pct(x: float) -> str:
    return "–" if math.isnan(x) else f"{100 * x:.0f} %"


def _table(results: CalfResults, table: str, conditions: list[str]) -> list[str]:
    regimes: list[str] = []
    for c in results.cells:
        if c.table == table and c.regime not in regimes:
            regimes.append(c.regime)
    present = [
        cond
        for cond in conditions
        if any(c.table == table and c.condition == cond for c in results.cells)
    ]
    header = ["regime", *present, *[f"gap {c}" for c in present if c != "sim-clean"]]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for regime in regimes:
        row = [regime]
        gaps = []
        for cond in present:
            try:
                cell = results.cell(regime, cond, table)
            except KeyError:
                row.append("")
                if cond != "sim-clean":
                    gaps.append("")
                continue
            row.append(_fmt(cell.mean, cell.std, results.env_id))
            if cond != "sim-clean":
                gaps.append(_pct(cell.gap))
        lines.append("| " + " | ".join(row + gaps) + " |")
    return lines


def _write_outputs(
    results: CalfResults,
    out: Path,
    setup: Any,
    seeds: list[int],
    total: int,
    n_episodes: int,
    grid_conditions: list[str],
) -> list[Path]:
    from fleetgym.agents import calf

    slug = _slug(results.env_id)
    md_path = out / f"calf_{slug}.md"
    rec_path = out / f"calf_{slug}_records.csv"
    sum_path = out / f"calf_{slug}_summary.csv"
    png_path = out / f"calf_{slug}.png"

    with rec_path.open("w", newline="") as fh:
        writer = csv.writer(fh)
        fields = [f.name for f in dataclasses.fields(calf.EvalRecord)]
        writer.writerow(fields)
        for r in results.records:
            writer.writerow([getattr(r, f) for f in fields])
    with sum_path.open("w", newline="") as fh:
        writer = csv.writer(fh)
        fields = [f.name for f in dataclasses.fields(calf.Cell)]
        writer.writerow(fields)
        for c in results.cells:
            writer.writerow([getattr(c, f) for f in fields])

    lines = [
        f"# CALF on {results.env_id}",
        "",
        f"{setup.algo} ({'MlpLstmPolicy' if setup.algo == 'recurrent-ppo' else 'MlpPolicy'}), "
        f"{total} training steps per policy, seeds {seeds}, {n_episodes} evaluation "
        f"episodes per policy and condition, control period {setup.period_ms:g} ms. "
        "Cells: mean ± std over seeds of each seed's mean return; gap = 1 − "
        "return(condition) / return(sim-clean) of the same policies. "
        f"Wall time {results.wall_s / 60:.1f} min.",
        "",
        "Compensated input lengths (k frames, m sent actions): "
        + ", ".join(
            f"{r} k={k} m={m}" for r, (k, m) in results.layouts.items() if r.endswith("+comp")
        ),
        "",
        "## Evaluation grid",
        "",
        *_table(results, "grid", grid_conditions),
    ]
    if any(c.table == "ablation" for c in results.cells):
        lines += [
            "",
            "## Ablation (clean-trained policy)",
            "",
            *_table(results, "ablation", list(calf.ABLATION_CONDITIONS)),
        ]
        lines += [
            "",
            *[f"- {n}: {calf.CONDITIONS[n].description}" for n in calf.ABLATION_CONDITIONS],
        ]
    degraded = [c.condition for c in results.cells if c.table == "degraded"]
    if degraded:
        names = list(dict.fromkeys(degraded))
        lines += ["", "## wifi-degraded variants", "", *_table(results, "degraded", names)]
        lines += ["", *[f"- {n}: {calf.resolve_condition(n).description}" for n in names]]
    md_path.write_text("\n".join(lines) + "\n")
    _plot(results, png_path, grid_conditions)
    return [md_path, rec_path, sum_path, png_path]


def _plot(results: CalfResults, path: Path, conditions: list[str]) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    grid = [c for c in results.cells if c.table == "grid"]
    regimes = list(dict.fromkeys(c.regime for c in grid))
    conds = [c for c in conditions if any(g.condition == c for g in grid)]
    fig, ax = plt.subplots(figsize=(max(6.0, 1.6 * len(conds) + 2), 4.0))
    width = 0.8 / max(1, len(regimes))
    x = np.arange(len(conds))
    for i, regime in enumerate(regimes):
        means, stds = [], []
        for cond in conds:
            try:
                cell = results.cell(regime, cond)
                means.append(cell.mean)
                stds.append(cell.std)
            except KeyError:
                means.append(0.0)
                stds.append(0.0)
        ax.bar(
            x + (i - (len(regimes) - 1) / 2) * width,
            means,
            width,
            yerr=stds,
            capsize=2,
            label=regime,
        )
    ax.set_xticks(x, conds, rotation=15)
    ax.set_ylabel("episode return (mean ± seed std)")
    ax.set_title(f"CALF: {results.env_id} return per training regime and network")
    ax.legend(fontsize="small", ncols=2)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def configure(parser: argparse.ArgumentParser) -> None:
    """Add this subcommand's arguments (imports nothing heavy)."""
    parser.add_argument(
        "--env",
        default="CartPole-v1",
        help="CartPole-v1 (PPO) or a MiniGrid ID, e.g. MiniGrid-Empty-5x5-v0 "
        "(RecurrentPPO); default %(default)s",
    )
    parser.add_argument(
        "--quick",
        action="store_true",
        help="a few minutes on 2 cores: 1 seed, 3 regimes, small budgets",
    )
    parser.add_argument(
        "--seeds", type=int, default=None, help="number of seeds (default 1 with --quick, else 5)"
    )
    parser.add_argument("--out", default="fleetgym-out/calf", help="output folder")
    parser.add_argument(
        "--regimes",
        default=None,
        help="comma-separated regimes (default: the paper's three, with and "
        "without compensation); any condition name also trains under it",
    )
    parser.add_argument(
        "--conditions",
        default=None,
        help="comma-separated evaluation conditions (default: sim-clean, "
        "ethernet, wifi-normal, wifi-degraded, shipped trace)",
    )
    parser.add_argument("--timesteps", type=int, default=None, help="training steps per policy")
    parser.add_argument(
        "--episodes",
        type=int,
        default=None,
        help="evaluation episodes per policy and condition (default 50)",
    )
    parser.add_argument("--no-ablation", action="store_true", help="skip the ablation table")
    parser.add_argument(
        "--variants", default=None, help="comma-separated wifi-degraded variants ('' to skip)"
    )
    parser.add_argument(
        "--variant-regimes", default=None, help="regimes evaluated under the variants"
    )
    parser.add_argument("--step-ms", type=float, default=None, help="control period override")
    parser.add_argument("--algo", choices=("ppo", "recurrent-ppo"), default=None)
    parser.add_argument("--no-progress", action="store_true", help="no progress bars")


def run(args: argparse.Namespace) -> int:
    """Run the subcommand; prints the Markdown report and where the files are."""
    import sys

    from fleetgym.errors import FleetgymError

    variants = _split(args.variants)
    try:
        results = run_calf(
            args.env,
            quick=args.quick,
            seeds=args.seeds,
            out_dir=args.out,
            regimes=_split(args.regimes),
            conditions=_split(args.conditions),
            timesteps=args.timesteps,
            episodes=args.episodes,
            ablation=not args.no_ablation,
            variants=variants,
            variant_regimes=_split(args.variant_regimes),
            step_ms=args.step_ms,
            algo=args.algo,
            progress=not args.no_progress,
        )
    except (ValueError, TypeError, FleetgymError) as exc:
        # Bad arguments end with one line, not a traceback.
        print(f"fleetgym calf: error: {exc}", file=sys.stderr)
        return 2
    print(results.files[0].read_text())
    for path in results.files:
        print(f"wrote {path}")
    return 0
