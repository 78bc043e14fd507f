"""The CALF report: Markdown tables, CSV files and the bar chart (no training here).

Files written by :func:`write_outputs` into the output folder:

- ``calf_<env>.md``: Markdown tables, mean ± seed std and the gap per condition;
- ``calf_<env>_records.csv``: one row per (table, regime, seed, condition);
- ``calf_<env>_summary.csv``: one row per aggregated cell;
- ``calf_<env>.png``: bar chart of return per regime × condition.
"""

from __future__ import annotations

import dataclasses
import math
import re
from pathlib import Path

import numpy as np

from fleetgym.experiments.calf.conditions import (
    ABLATION_CONDITIONS,
    CONDITIONS,
    resolve_condition,
)
from fleetgym.experiments.calf.evaluate import CalfResults, Cell, EvalRecord
from fleetgym.experiments.calf.setup import EnvSetup
from fleetgym.experiments.tables import markdown_table, write_csv

__all__ = ["calf_table", "plot_returns", "slug", "write_outputs"]


def slug(text: str) -> str:
    """``text`` made safe for a file name.

    Example:
        >>> slug("MiniGrid-Empty-5x5-v0"), slug("a/b c")
        ('MiniGrid-Empty-5x5-v0', 'a_b_c')
    """
    return re.sub(r"[^A-Za-z0-9._-]+", "_", text)


def _fmt(mean: float, std: float, env_id: str) -> str:
    if env_id.startswith("MiniGrid"):
        return f"{mean:.2f} ± {std:.2f}"
    return f"{mean:.0f} ± {std:.0f}"


def _pct(x: float) -> str:
    return "–" if math.isnan(x) else f"{100 * x:.0f} %"


def calf_table(results: CalfResults, table: str, conditions: list[str]) -> list[str]:
    """One table of the report: a row per regime, mean ± seed std and gap per condition."""
    cells = [c for c in results.cells if c.table == table]
    regimes = list(dict.fromkeys(c.regime for c in cells))
    present = [cond for cond in conditions if any(c.condition == cond for c in cells)]
    header = ["regime", *present, *[f"gap {c}" for c in present if c != "sim-clean"]]
    rows = []
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
        rows.append(row + gaps)
    return markdown_table(header, rows)


def write_outputs(
    results: CalfResults,
    out: Path,
    setup: EnvSetup,
    seeds: list[int],
    total: int,
    n_episodes: int,
    grid_conditions: list[str],
) -> list[Path]:
    """Write the report's four files (see the module docstring); returns their paths."""
    name = slug(results.env_id)
    md_path = out / f"calf_{name}.md"
    rec_path = out / f"calf_{name}_records.csv"
    sum_path = out / f"calf_{name}_summary.csv"
    png_path = out / f"calf_{name}.png"

    write_csv(rec_path, results.records, fieldnames=_fields(EvalRecord))
    write_csv(sum_path, results.cells, fieldnames=_fields(Cell))

    lines = [
        f"# CALF on {results.env_id}",
        "",
        f"{setup.algo} ({'MlpLstmPolicy' if setup.algo == 'recurrent-ppo' else 'MlpPolicy'}, "
        f"hyperparameters: {setup.hyperparams_source or 'SB3 defaults'}; {setup.n_envs} "
        f"parallel envs), {total} training steps per policy, seeds {seeds}, {n_episodes} evaluation "
        f"episodes per policy and condition, control period {setup.period_ms:g} ms, "
        f"{setup.shim_kwargs.get('timing', 'loop')} timing. "
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
        *calf_table(results, "grid", grid_conditions),
    ]
    if any(c.table == "ablation" for c in results.cells):
        lines += [
            "",
            "## Ablation (clean-trained policy)",
            "",
            *calf_table(results, "ablation", list(ABLATION_CONDITIONS)),
        ]
        lines += ["", *[f"- {n}: {CONDITIONS[n].description}" for n in ABLATION_CONDITIONS]]
    degraded = [c.condition for c in results.cells if c.table == "degraded"]
    if degraded:
        names = list(dict.fromkeys(degraded))
        lines += ["", "## wifi-degraded variants", "", *calf_table(results, "degraded", names)]
        lines += ["", *[f"- {n}: {resolve_condition(n).description}" for n in names]]
    md_path.write_text("\n".join(lines) + "\n")
    plot_returns(results, png_path, grid_conditions)
    return [md_path, rec_path, sum_path, png_path]


def _fields(cls: type) -> list[str]:
    return [f.name for f in dataclasses.fields(cls)]


def plot_returns(results: CalfResults, path: Path, conditions: list[str]) -> None:
    """Bar chart of the grid: return per regime and condition, seed std as error bars."""
    from matplotlib.figure import Figure

    grid = [c for c in results.cells if c.table == "grid"]
    regimes = list(dict.fromkeys(c.regime for c in grid))
    conds = [c for c in conditions if any(g.condition == c for g in grid)]
    fig = Figure(figsize=(max(6.0, 1.6 * len(conds) + 2), 4.0))
    ax = fig.subplots()
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
