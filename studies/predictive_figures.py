"""The figures of docs/explanation/predictive.md that are not a ``fleetgym calf`` table.

Two parts:

``sweep OUT_PNG SUMMARY_CSV [SUMMARY_CSV ...] [--regimes R1,R2,...]``
    Return of every compensation against the round-trip delay (0 ... 10 ticks, constant
    ``rtt-N`` and jittered ``rtt-N-jitter``), read from the ``calf_<env>_summary.csv`` of a
    ``fleetgym calf`` run over those conditions.

``error OUT_PNG``
    Prediction error of :class:`fleetgym.wrappers.PredictiveObservation`
    against the true current observation (``info["true_obs"]``), on CartPole-v1 with a
    balancing controller (a linear state feedback, so episodes are long and the states
    those a policy visits): against the round-trip delay (constant and jittered, true
    dynamics and world models), and against the world model's Mode 1 training data size
    under a constant 4-tick round trip (model error only) and ``wifi-normal``.

Run (about 3 minutes on one busy core for ``error``)::

    python studies/predictive_figures.py sweep docs/predictive-sweep.png fleetgym-out/sweep/calf_CartPole-v1_summary.csv
    python studies/predictive_figures.py sweep docs/predictive_sweep_minigrid.png fleetgym-out/minigrid_sweep/calf_MiniGrid-Empty-5x5-v0_summary.csv
    python studies/predictive_figures.py error docs/predictive-error.png
"""

from __future__ import annotations

import argparse
import csv
import re
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np

from fleetgym.agents.world_model.predictor import WorldModelPredictor
from fleetgym.experiments.calf.conditions import resolve_condition
from fleetgym.experiments.calf.predict import _fit_world_model, median_action_age
from fleetgym.wrappers import NetworkShimWrapper, PredictiveObservation

_RTT = re.compile(r"rtt-(\d+)(-jitter)?")


def sweep(summaries: list[Path], out: Path, only: list[str] | None = None) -> None:
    from matplotlib.figure import Figure

    rows = [r for path in summaries for r in csv.DictReader(path.open()) if r["table"] == "grid"]
    regimes = only or list(dict.fromkeys(r["regime"] for r in rows))
    fig = Figure(figsize=(11.0, 4.8))
    ax = fig.subplots()
    for i, regime in enumerate(regimes):
        color = f"C{i}"
        for jitter, style in ((False, "-"), (True, "--")):
            pts = []
            for r in rows:
                m = _RTT.fullmatch(r["condition"])
                if r["regime"] == regime and m and bool(m.group(2)) == jitter:
                    pts.append((int(m.group(1)), float(r["mean"]), float(r["std"])))
            if not pts:
                continue
            x, y, s = (np.array(v) for v in zip(*sorted(pts), strict=True))
            label = regime + (" (jittered)" if jitter else "")
            ax.errorbar(
                x, y, yerr=s, fmt=style, color=color, marker="o", ms=3, capsize=2, label=label
            )
    ax.set_xlabel("round-trip delay (ticks of 20 ms)")
    # calf_<env>_summary.csv: the env's name is in the file's.
    env = summaries[0].stem.removeprefix("calf_").removesuffix("_summary")
    ax.set_ylabel(f"{env} return (mean ± seed std)")
    ax.set_title("Return of each compensation against delay (dashed: ±10 ms jitter each way)")
    ax.legend(fontsize="x-small", loc="upper left", bbox_to_anchor=(1.01, 1.0))
    fig.tight_layout()
    fig.savefig(out, dpi=120)


def _controller(obs: np.ndarray) -> int:
    # A linear state feedback that balances CartPole: long episodes, realistic states.
    return int(obs[2] + 0.5 * obs[3] + 0.05 * obs[1] > 0)


def _rmse(condition: str, predictor: Any, steps: int = 3000, seed: int = 0) -> float:
    cond = resolve_condition(condition)
    shim = NetworkShimWrapper(gym.make("CartPole-v1"), info="full", **cond.shim_kwargs())
    # The prior action age is the network's median, as in the CALF regimes.
    env = PredictiveObservation(shim, predictor, action_delay=median_action_age(cond.shim_kwargs()))
    obs, _ = env.reset(seed=seed)
    errors = []
    for _ in range(steps):
        obs, _, terminated, truncated, info = env.step(_controller(obs))
        errors.append(np.asarray(obs, np.float64) - info["true_obs"])
        if terminated or truncated:
            obs, _ = env.reset()
    # RMSE per dimension, averaged over the four dimensions.
    err = np.asarray(errors)
    return float(np.sqrt(np.mean(err**2, axis=0)).mean())


def error(out: Path) -> None:
    from matplotlib.figure import Figure

    delays = list(range(0, 11))
    models = {
        n: WorldModelPredictor(_fit_world_model("CartPole-v1", 0, n)) for n in (1000, 5000, 20000)
    }
    fig = Figure(figsize=(10.0, 4.0))
    ax1, ax2 = fig.subplots(1, 2)
    for name, predictor, color in (
        ("true dynamics", "true-dynamics", "C0"),
        ("world model, 20k steps", models[20000], "C1"),
        ("world model, 1k steps", models[1000], "C2"),
    ):
        for jitter, style in (("", "-"), ("-jitter", "--")):
            ys = [_rmse(f"rtt-{d}{jitter}", predictor, 1500) for d in delays]
            print(name, jitter or "constant", np.round(ys, 4).tolist(), flush=True)
            ax1.plot(
                delays,
                ys,
                style,
                color=color,
                marker="o",
                ms=3,
                label=name + (" (jittered)" if jitter else ""),
            )
    stale = [_rmse(f"rtt-{d}", lambda o, a, g: o, 1500) for d in delays]
    print("no prediction", np.round(stale, 4).tolist(), flush=True)
    ax1.plot(delays, stale, ":", color="grey", label="delivered observation (no prediction)")
    ax1.set_xlabel("round-trip delay (ticks of 20 ms)")
    ax1.set_ylabel("RMSE against the true current obs (mean over dims)")
    ax1.set_yscale("symlog", linthresh=1e-3)  # the true dynamics are exact (0) at constant delays
    ax1.set_ylim(bottom=0)
    ax1.legend(fontsize="x-small")
    sizes = [500, 1000, 2000, 5000, 10000, 20000]
    for condition, color in (("rtt-4", "C1"), ("wifi-normal", "C3")):
        ys = [
            _rmse(condition, WorldModelPredictor(_fit_world_model("CartPole-v1", 0, n)))
            for n in sizes
        ]
        truth = _rmse(condition, "true-dynamics")
        print(
            "data size",
            condition,
            sizes,
            np.round(ys, 4).tolist(),
            "true",
            round(truth, 4),
            flush=True,
        )
        ax2.plot(sizes, ys, marker="o", color=color, label=f"world model, {condition}")
        ax2.axhline(truth, color=color, ls=":", label=f"true dynamics, {condition}")
    ax2.set_xscale("log")
    ax2.set_xlabel("Mode 1 transitions the world model was fitted on")
    ax2.set_ylabel("RMSE against the true current obs")
    ax2.set_yscale("symlog", linthresh=1e-3)
    ax2.set_ylim(bottom=0)
    ax2.legend(fontsize="x-small")
    fig.suptitle("CartPole-v1: prediction error of PredictiveObservation")
    fig.tight_layout()
    fig.savefig(out, dpi=120)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="part", required=True)
    p = sub.add_parser("sweep")
    p.add_argument("out", type=Path)
    p.add_argument("summary", type=Path, nargs="+")
    p.add_argument("--regimes", default=None, help="comma-separated regimes to plot (default all)")
    p = sub.add_parser("error")
    p.add_argument("out", type=Path)
    args = parser.parse_args()
    if args.part == "sweep":
        only = args.regimes.split(",") if args.regimes else None
        sweep(args.summary, args.out, only)
    else:
        error(args.out)


if __name__ == "__main__":
    main()
