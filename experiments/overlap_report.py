"""Tables and a figure of the asynchronous/synchronous comparison
(:mod:`fleetgym.experiments.async_compare`, the ``accerl`` part of ``fleetgym reproduce``).

A *run* is one dict of :func:`~fleetgym.experiments.async_compare.run_mode` (mode, backend,
inference, actors, seed, steps, wall time, env steps/s, learner utilisation, CPU
seconds, final return, whether it reached the target); results are ``{workload kind:
[runs]}``. :func:`table` gives one row per workload, trainer and number of actors (means
± std over seeds); :func:`ratio_table` the paired per-seed ratios of every
asynchronous trainer against each synchronous one run on the same seeds (env steps/s, and
the wall time to the target where both runs reached it); :func:`figure` plots env
steps/s, wall time to the target and learner utilisation against the number of actors.

Example:
    >>> run = dict(mode="async", backend="inprocess", inference="local", actors=8, seed=0,
    ...            steps=100, wall_s=2.0, steps_per_s=50.0, learner_utilisation=0.9,
    ...            cpu_s=1.0, final_return=500.0, reached_target=True)
    >>> sync = dict(run, mode="sync-default", backend="inprocess", wall_s=4.0,
    ...             steps_per_s=25.0, learner_utilisation=0.5)
    >>> print(ratio_table({"heterogeneous": [sync, run]})[2])
    | heterogeneous | 8 | async | sync-default | 2.00 (2.00-2.00) | 2.00 (2.00-2.00), 1/1 | 1/1 |
"""

from __future__ import annotations

import math
import statistics
from pathlib import Path
from typing import Any

from fleetgym.agents.backends import BACKENDS
from fleetgym.experiments.tables import markdown_table

#: Trainers of the comparison, synchronous references first.
MODES = ("sync-default", "sync-fleet", "sync-threads", "async")
#: The synchronous references a ratio is taken against.
REFERENCES = ("sync-default", "sync-threads")
_ACTOR_NOTES = {"process": "process actors", "ray": "Ray actors"}


def backend_of(run: dict[str, Any]) -> str:
    """Where a run's actors ran, in the one backend vocabulary (results of 1.x recorded it
    as ``actor_mode``, ``"thread"`` for ``"inprocess"``)."""
    backend = run.get("backend", run.get("actor_mode", "inprocess"))
    return "inprocess" if backend == "thread" else str(backend)


def _fmt(values: list[float], spec: str) -> str:
    values = [v for v in values if not math.isnan(v)]
    if not values:
        return "-"
    mean = statistics.fmean(values)
    if len(values) < 2:
        return format(mean, spec)
    return f"{format(mean, spec)} ± {format(statistics.pstdev(values), spec)}"


def label(run: dict[str, Any]) -> str:
    """A table row's trainer: the mode, then where its actors run and act, if not the default."""
    mode = run["mode"]
    if mode in ("sync-fleet", "sync-default"):
        return mode
    backend = backend_of(run)
    notes = [_ACTOR_NOTES[backend]] if backend in _ACTOR_NOTES else []
    notes += ["served"] if run.get("inference") == "server" else []
    return f"{mode} ({', '.join(notes)})" if notes else mode


def _order(run: dict[str, Any]) -> tuple[int, int, int]:
    backend = backend_of(run)
    return (
        int(run.get("actors", 0)),
        MODES.index(run["mode"]),
        BACKENDS.index(backend) if backend in BACKENDS else -1,
    )


def _groups(runs: list[dict[str, Any]]) -> dict[tuple[int, str], list[dict[str, Any]]]:
    groups: dict[tuple[int, str], list[dict[str, Any]]] = {}
    for run in sorted(runs, key=_order):
        groups.setdefault((int(run.get("actors", 0)), label(run)), []).append(run)
    return groups


def table(results: dict[str, list[dict[str, Any]]]) -> list[str]:
    """Markdown lines: per workload, trainer and number of actors, means ± std over seeds."""
    rows = []
    for kind, runs in results.items():
        for (actors, name), mine in _groups(runs).items():
            reached = [r["wall_s"] for r in mine if r["reached_target"]]
            rows.append(
                [
                    kind,
                    name,
                    str(actors),
                    _fmt([r["steps_per_s"] for r in mine], ".0f"),
                    _fmt([r["learner_utilisation"] for r in mine], ".2f"),
                    _fmt([r.get("cpu_s", math.nan) for r in mine], ".0f"),
                    _fmt([r["final_return"] for r in mine], ".0f"),
                    f"{len(reached)}/{len(mine)}"
                    + (f" ({_fmt(reached, '.1f')} s)" if reached else ""),
                ]
            )
    header = ["workload", "trainer", "actors", "env steps/s", "learner utilisation", "CPU s"]
    return markdown_table([*header, "final return", "reached target (wall)"], rows)


def _geomean(values: list[float]) -> float:
    return math.exp(statistics.fmean(math.log(v) for v in values))


def _summary(values: list[float]) -> str:
    if not values:
        return "-"
    return f"{_geomean(values):.2f} ({min(values):.2f}-{max(values):.2f})"


def paired_ratios(
    runs: list[dict[str, Any]], name: str, reference: str, actors: int
) -> dict[str, list[float]]:
    """Per seed, ``name`` against ``reference`` at ``actors``: ``speed`` (env steps/s
    ratio), ``wall`` (reference wall time / own, both runs at the target), ``pairs``."""
    by_seed: dict[str, dict[int, dict[str, Any]]] = {name: {}, reference: {}}
    for run in runs:
        if int(run.get("actors", 0)) == actors and label(run) in by_seed:
            by_seed[label(run)][int(run["seed"])] = run
    seeds = sorted(set(by_seed[name]) & set(by_seed[reference]))
    pairs = [(by_seed[name][s], by_seed[reference][s]) for s in seeds]
    return {
        "speed": [own["steps_per_s"] / ref["steps_per_s"] for own, ref in pairs],
        "wall": [
            ref["wall_s"] / own["wall_s"]
            for own, ref in pairs
            if own["reached_target"] and ref["reached_target"]
        ],
        "pairs": [float(s) for s in seeds],
    }


def ratio_table(results: dict[str, list[dict[str, Any]]]) -> list[str]:
    """Markdown lines: each asynchronous trainer against each synchronous reference, paired
    by seed: the geometric mean (min-max) of the env steps/s ratios and of the wall-time
    ratios to the target (where both reached it; ``k/n`` pairs), and how many pairs reach
    1.5x in wall time (empty when no reference ran)."""
    rows = []
    for kind, runs in results.items():
        groups = _groups(runs)
        for (actors, name), mine in groups.items():
            if mine[0]["mode"] != "async":
                continue
            for reference in REFERENCES:
                if (actors, reference) not in groups:
                    continue
                r = paired_ratios(runs, name, reference, actors)
                if not r["pairs"]:
                    continue
                n = len(r["pairs"])
                fast = sum(w >= 1.5 for w in r["wall"])
                rows.append(
                    [
                        kind,
                        str(actors),
                        name,
                        reference,
                        _summary(r["speed"]),
                        f"{_summary(r['wall'])}, {len(r['wall'])}/{n}",
                        f"{fast}/{n}",
                    ]
                )
    if not rows:
        return []
    header = ["workload", "actors", "trainer", "against", "env steps/s ratio"]
    return markdown_table(
        [*header, "wall-time ratio to target (pairs)", "pairs >= 1.5x faster"], rows
    )


def figure(results: dict[str, list[dict[str, Any]]], path: Path, workload: str) -> Path:
    """Env steps/s, wall time to the target and learner utilisation against the number of
    actors, one line per trainer (solid: long tail, dashed: uniform), means over seeds."""
    from matplotlib.figure import Figure

    fig = Figure(figsize=(13, 4.8))
    axes = fig.subplots(1, 3)
    metrics = (
        ("env steps/s", lambda rs: [r["steps_per_s"] for r in rs]),
        ("wall time to target (s)", lambda rs: [r["wall_s"] for r in rs if r["reached_target"]]),
        ("learner utilisation", lambda rs: [r["learner_utilisation"] for r in rs]),
    )
    colours: dict[str, str] = {}
    for kind, runs in results.items():
        style, marker = ("--", "s") if kind == "uniform" else ("-", "o")
        by_name: dict[str, list[tuple[int, list[dict[str, Any]]]]] = {}
        for (actors, name), mine in _groups(runs).items():
            by_name.setdefault(name, []).append((actors, mine))
        for name, points in by_name.items():
            colour = colours.setdefault(name, f"C{len(colours) % 10}")
            for ax, (_, values) in zip(axes, metrics, strict=True):
                xs, ys = [], []
                for actors, mine in points:
                    got = values(mine)
                    if got:
                        xs.append(actors)
                        ys.append(statistics.fmean(got))
                if xs:
                    ax.plot(xs, ys, style, marker=marker, color=colour, label=f"{name}, {kind}")
    for ax, (title, _) in zip(axes, metrics, strict=True):
        ax.set_xscale("log", base=2)
        ax.set_xlabel("actors")
        ax.set_title(title)
        ax.grid(alpha=0.3)
    axes[1].set_yscale("log")
    axes[2].set_ylim(0, 1.05)
    handles, labels = axes[0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="lower center", ncol=4, fontsize=8, frameon=False)
    fig.suptitle(f"{workload}: asynchronous against synchronous training (means over seeds)")
    fig.tight_layout(rect=(0, 0.04 + 0.035 * math.ceil(len(labels) / 4), 1, 1))
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    return path


__all__ = ["MODES", "REFERENCES", "backend_of", "figure", "label", "ratio_table", "table"]
