"""The prediction figure: env steps/s and learner utilisation against actors, per workload."""

from __future__ import annotations

from pathlib import Path
from typing import Any

__all__ = ["plot_predictions"]

_STYLE = {
    ("uniform", "sync"): ("tab:blue", "--"),
    ("uniform", "async"): ("tab:blue", "-"),
    ("long-tail", "sync"): ("tab:red", "--"),
    ("long-tail", "async"): ("tab:red", "-"),
}


def plot_predictions(points: list[Any], path: Path) -> Path:
    """Write the figure of ``points`` (grid lines, AcceRL's shape as stars) to ``path``."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    workloads = list(dict.fromkeys(p.workload for p in points))
    fig, axes = plt.subplots(
        2, len(workloads), figsize=(4.2 * len(workloads), 6.4), squeeze=False, sharex=True
    )
    for col, name in enumerate(workloads):
        top, bottom = axes[0][col], axes[1][col]
        for (kind, mode), (color, line) in _STYLE.items():
            mine = sorted(
                (
                    p
                    for p in points
                    if (p.workload, p.kind, p.mode, p.shape) == (name, kind, mode, "grid")
                ),
                key=lambda p: p.n_actors,
            )
            if mine:
                xs = [p.n_actors for p in mine]
                label = f"{kind}, {mode}"
                top.plot(
                    xs, [p.result.env_steps_per_s for p in mine], line, color=color, label=label
                )
                bottom.plot(xs, [p.result.learner_utilisation for p in mine], line, color=color)
            for p in points:
                if (p.workload, p.kind, p.mode) == (name, kind, mode) and p.shape != "grid":
                    matched = p.shape != "AcceRL"  # at the matched device speed-up
                    marker = ("D" if matched else "*") if mode == "async" else "x"
                    top.plot([p.n_actors], [p.result.env_steps_per_s], marker, color=color, ms=10)
                    bottom.plot(
                        [p.n_actors], [p.result.learner_utilisation], marker, color=color, ms=10
                    )
        top.set_title(name)
        top.set_xscale("log")
        top.set_yscale("log")
        bottom.set_ylim(0, 1.05)
        bottom.set_xlabel("actors")
        if col == 0:
            top.set_ylabel("env steps/s")
            bottom.set_ylabel("learner utilisation")
            top.legend(fontsize=7)
    fig.suptitle(
        "Simulated pipeline (calibrated on this machine); markers: AcceRL's shape (8 trainers, "
        "16 servers; x sync, * async, diamond async at the devices matching its 23 %)",
        fontsize=9,
    )
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
