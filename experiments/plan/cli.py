"""``fleetgym plan``: the training pipeline at scale, by a simulation calibrated here.

* ``fleetgym plan measure`` -- measure each workload's env step, policy forward, update
  and server forward per batch size on this machine (the fastest of a few repeats each),
  and the GIL hand-over of actor threads, and write them as a calibration file
  (``--out``/``calibration.json``, which ``plan predict --calibration`` reads). It measures in a child process whose BLAS runs one thread, as a server
  on a core of its own would: numpy's multi-threaded BLAS on this shared 2-core machine
  made a batch of 128 a hundred times slower (the other tenants, not the model).
* ``fleetgym plan validate`` -- run the asynchronous trainer (CartPole, actor threads),
  synchronous and asynchronous, on the uniform and the long-tail workload, and print
  its env steps/s and learner utilisation beside the simulation's (each pair of runs
  calibrated just before it ran).
* ``fleetgym plan predict`` -- simulate CartPole, Hopper-v5 and the Atari CNN from 8 to
  1,000 actors and on AcceRL's cluster shape, synchronous and asynchronous; print the
  table (throughput, learner utilisation, server batch sizes, policy lag) and write it
  with a PNG.

Every argument is checked before any work starts (a bad one exits 2); an error during
the work is a crash (exit 3, with its traceback).

Example::

    fleetgym plan measure --out runs/cal
    fleetgym plan predict --calibration runs/cal --actors 8 64 1000 --out runs/plan
    fleetgym plan validate --actors 8 16 --seeds 2 --out runs/plan-validate
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
from pathlib import Path
from typing import Any

from fleetgym.experiments.argtypes import (
    UsageError,
    check_input_file,
    check_output_dir,
    int_in,
    non_negative_float,
    non_negative_int,
    output_folder,
    positive_float,
    seed_range,
)

__all__ = ["configure", "run"]

#: The workloads of the issue: classic control, MuJoCo and the Atari CNN.
WORKLOADS = ("CartPole-v1", "Hopper-v5", "QbertNoFrameskip-v4")
#: The file ``plan measure`` writes into ``--out`` (and ``plan predict`` reads in a folder).
CALIBRATION_NAME = "calibration.json"


def _add_shape(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--lag",
        type=int_in(1, 1000),
        default=4,
        help="the asynchronous runs' max policy lag (default 4)",
    )
    parser.add_argument(
        "--delay-ms",
        type=positive_float,
        default=1.0,
        help="long-tail workload: median per-step wait of an actor in ms (default 1)",
    )
    parser.add_argument(
        "--delay-sigma",
        type=non_negative_float,
        default=1.0,
        help="long-tail workload: log-normal spread of that wait across actors (default 1)",
    )


def configure(parser: argparse.ArgumentParser) -> None:
    """Add ``measure``, ``validate`` and ``predict`` (imports nothing heavy)."""
    sub = parser.add_subparsers(dest="plan_command", metavar="ACTION")
    measure = sub.add_parser("measure", help="measure the calibration on this machine")
    measure.add_argument(
        "--workloads",
        nargs="+",
        choices=WORKLOADS,
        default=list(WORKLOADS),
        help=f"workloads to measure (default: {' '.join(WORKLOADS)})",
    )
    measure.add_argument(
        "--out",
        type=output_folder,
        default=Path("fleetgym-out/plan/measure"),
        metavar="DIR",
        help=f"output folder: the calibration file DIR/{CALIBRATION_NAME}",
    )
    measure.add_argument("--no-progress", action="store_true", help="no progress bar")
    validate = sub.add_parser("validate", help="predicted against measured runs (CartPole)")
    validate.add_argument(
        "--actors",
        nargs="+",
        type=int_in(1, 64),
        default=[8, 16],
        help="actor counts (default 8 16)",
    )
    validate.add_argument(
        "--kinds",
        nargs="+",
        choices=("uniform", "heterogeneous"),
        default=["uniform", "heterogeneous"],
        help="workloads: uniform and/or long-tail (heterogeneous) (default: uniform heterogeneous)",
    )
    validate.add_argument(
        "--seeds",
        type=int_in(1, 20),
        default=2,
        help="workload seeds FIRST..FIRST+N-1 of every point (default 2)",
    )
    validate.add_argument(
        "--first-seed",
        type=non_negative_int,
        default=0,
        metavar="FIRST",
        help="the first seed: --seeds N runs FIRST..FIRST+N-1 (default 0)",
    )
    validate.add_argument(
        "--repeats", type=int_in(1, 20), default=1, help="runs of every point (default 1)"
    )
    validate.add_argument(
        "--steps",
        type=int_in(1024, 10_000_000),
        default=30_000,
        help="env steps a run (default 30000)",
    )
    _add_shape(validate)
    validate.add_argument(
        "--out",
        type=output_folder,
        default=Path("fleetgym-out/plan/validate"),
        metavar="DIR",
        help="output folder: plan_validate.md and plan_validate.json",
    )
    validate.add_argument("--no-progress", action="store_true", help="no progress bar")
    predict = sub.add_parser("predict", help="simulate 8 to 1,000 actors and AcceRL's shape")
    predict.add_argument(
        "--calibration",
        default=None,
        metavar="PATH",
        help=f"calibration file, or the folder of plan measure --out holding {CALIBRATION_NAME} "
        "(default: the shipped calibration)",
    )
    predict.add_argument(
        "--workloads",
        nargs="+",
        choices=WORKLOADS,
        default=list(WORKLOADS),
        help=f"workloads (default: {' '.join(WORKLOADS)})",
    )
    predict.add_argument(
        "--actors",
        nargs="+",
        type=int_in(1, 100_000),
        default=None,
        help="actor counts (default 8 16 32 64 128 256 512 1000)",
    )
    _add_shape(predict)
    predict.add_argument(
        "--learner-speedup",
        type=positive_float,
        default=1.0,
        help="the learner's devices are this many times this machine's core (default 1)",
    )
    predict.add_argument(
        "--server-speedup",
        type=positive_float,
        default=1.0,
        help="each inference server is this many times this machine's core (default 1)",
    )
    predict.add_argument(
        "--updates",
        type=int_in(3, 1000),
        default=6,
        help="updates simulated per point, the first 2 left out (default 6)",
    )
    predict.add_argument("--seed", type=int_in(0, 2**31), default=0, help="seed (default 0)")
    predict.add_argument("--no-accerl", action="store_true", help="leave AcceRL's shape out")
    predict.add_argument(
        "--match-accerl",
        action="store_true",
        help="also find the device speed-up where AcceRL's shape runs synchronously at 23 %% "
        "learner utilisation (AcceRL's figure) and simulate it there",
    )
    predict.add_argument(
        "--out",
        type=output_folder,
        default=Path("fleetgym-out/plan/predict"),
        metavar="DIR",
        help="output folder: plan.md, plan.json and plan.png",
    )
    predict.add_argument(
        "--no-progress",
        action="store_true",
        help="no progress bar (one line per simulated point on stderr instead)",
    )


def _fmt(value: float, spec: str) -> str:
    return (
        "-"
        if value is None or (isinstance(value, float) and math.isnan(value))
        else format(value, spec)
    )


def prediction_table(points: list[Any]) -> list[str]:
    """Markdown lines: one row per point, asynchronous speed-up beside each async row."""
    from fleetgym.experiments.tables import markdown_table

    sync = {(p.workload, p.kind, p.shape, p.n_actors): p.result for p in points if p.mode == "sync"}
    rows = []
    for p in points:
        r = p.result
        base = sync.get((p.workload, p.kind, p.shape, p.n_actors))
        ratio = r.env_steps_per_s / base.env_steps_per_s if p.mode == "async" and base else math.nan
        rows.append(
            [
                p.workload,
                p.kind,
                p.shape,
                str(p.n_actors),
                p.mode,
                _fmt(r.env_steps_per_s, ".0f"),
                _fmt(ratio, ".2f"),
                _fmt(r.learner_utilisation, ".2f"),
                _fmt(r.mean_server_batch, ".1f"),
                f"{_fmt(r.lag_percentile(0.5), '.0f')} / {_fmt(r.lag_percentile(0.95), '.0f')}"
                f" / {_fmt(max(r.lag_samples, default=math.nan), '.0f')}",
                _fmt(100 * r.dropped_fraction, ".0f"),
            ]
        )
    header = [
        "workload",
        "kind",
        "shape",
        "actors",
        "mode",
        "env steps/s",
        "async/sync",
        "learner util.",
        "server batch",
        "lag p50 / p95 / max",
        "dropped %",
    ]
    return markdown_table(header, rows)


def validation_table(rows: list[dict[str, Any]]) -> list[str]:
    """Markdown lines: per point, the median measured and predicted figures, errors."""
    from fleetgym.experiments.tables import group_by, markdown_table

    out = []
    groups = group_by(rows, key=lambda r: (r["kind"], r["actors"], r["mode"], r["seed"]))
    for (kind, actors, mode, seed), members in groups.items():
        med = {
            k: statistics.median(m[k] for m in members)
            for k in (
                "measured_steps_per_s",
                "predicted_steps_per_s",
                "measured_utilisation",
                "predicted_utilisation",
                "load_average",
            )
        }
        steps_err = med["predicted_steps_per_s"] / med["measured_steps_per_s"] - 1
        util_err = med["predicted_utilisation"] / med["measured_utilisation"] - 1
        within = abs(steps_err) <= 0.2 and abs(util_err) <= 0.2
        out.append(
            [
                kind,
                str(actors),
                mode,
                str(seed),
                f"{med['measured_steps_per_s']:.0f}",
                f"{med['predicted_steps_per_s']:.0f}",
                f"{100 * steps_err:+.0f} %",
                f"{med['measured_utilisation']:.2f}",
                f"{med['predicted_utilisation']:.2f}",
                f"{100 * util_err:+.0f} %",
                "yes" if within else "no",
                f"{med['load_average']:.1f}",
            ]
        )
    header = [
        "workload",
        "actors",
        "trainer",
        "seed",
        "measured steps/s",
        "predicted",
        "error",
        "measured util.",
        "predicted",
        "error",
        "within 20 %",
        "load avg",
    ]
    return markdown_table(header, out)


def _measure(args: argparse.Namespace) -> int:
    """Measure in a child process whose BLAS runs one thread (see the module docstring)."""
    import os
    import subprocess
    import sys

    from tqdm import tqdm

    folder = check_output_dir("--out", args.out)
    out = folder / CALIBRATION_NAME
    if out.is_dir():
        raise UsageError(f"--out: expected {str(out)!r} to be a writable file, actual a folder")
    if os.environ.get("OPENBLAS_NUM_THREADS") != "1":
        env = dict(os.environ, OPENBLAS_NUM_THREADS="1", OMP_NUM_THREADS="1", MKL_NUM_THREADS="1")
        command = [
            sys.executable,
            "-m",
            "fleetgym.experiments.plan.cli",
            "measure",
            "--out",
            str(folder),
            "--workloads",
            *args.workloads,
        ]
        if args.no_progress:
            command.append("--no-progress")
        code = subprocess.run(command, env=env, check=False).returncode
        if code != 0:  # its traceback is above: a crash, not "did not converge" (1)
            raise RuntimeError(f"plan measure: the measuring process exited with status {code}")
        return 0
    from fleetgym.experiments.plan.measure import measure_contention, measure_workload

    data: dict[str, Any] = {"workloads": {}}
    with tqdm(
        total=len(args.workloads) + 1, desc="plan measure", unit="step", disable=args.no_progress
    ) as bar:
        for name in args.workloads:
            bar.set_postfix_str(name)
            atari = name.endswith("NoFrameskip-v4")
            data["workloads"][name] = measure_workload(
                name,
                env_steps=500 if atari else 2000,
                update_trajectories=(2, 8) if atari else (4, 16),
                update_repeats=2 if atari else 3,
                estimator="min",
            )
            bar.write(f"{name}: measured")
            bar.update(1)
        bar.set_postfix_str("actor threads' contention")
        data["contention"] = measure_contention()
        bar.update(1)
    out.write_text(json.dumps(data, indent=1) + "\n")
    print(f"calibration: {out}")
    return 0


def _validate(args: argparse.Namespace) -> int:
    from tqdm import tqdm

    from fleetgym.experiments.plan.validate import measure_and_validate

    seed_range(args.first_seed, args.seeds)
    out = check_output_dir("--out", args.out)
    # Every point runs once synchronously and once asynchronously.
    total = len(args.actors) * len(args.kinds) * args.seeds * args.repeats * 2
    bar = tqdm(total=total, desc="plan validate", unit="run", disable=args.no_progress)

    def log(row: dict[str, Any]) -> None:
        bar.update(1)
        bar.write(
            f"{row['kind']} {row['actors']} actors {row['mode']} seed {row['seed']}: measured "
            f"{row['measured_steps_per_s']:.0f} steps/s, util {row['measured_utilisation']:.2f};"
            f" predicted {row['predicted_steps_per_s']:.0f}, {row['predicted_utilisation']:.2f}"
        )
        sys.stdout.flush()

    try:
        runs, rows = measure_and_validate(
            tuple(args.actors),
            tuple(args.kinds),
            args.seeds,
            args.steps,
            args.lag,
            args.delay_ms,
            args.delay_sigma,
            log,
            args.repeats,
            first_seed=args.first_seed,
        )
    finally:
        bar.close()
    lines = validation_table(rows)
    print("\n".join(lines))
    (out / "plan_validate.md").write_text("\n".join(lines) + "\n")
    (out / "plan_validate.json").write_text(
        json.dumps({"runs": runs, "rows": rows}, indent=1, default=str) + "\n"
    )
    print(f"wrote {out / 'plan_validate.md'} and {out / 'plan_validate.json'}")
    return 0


def _predict(args: argparse.Namespace) -> int:
    from fleetgym.experiments.plan.calibration import load_calibrations
    from fleetgym.experiments.plan.plot import plot_predictions
    from fleetgym.experiments.plan.predict import (
        DEFAULT_ACTORS,
        accerl_points,
        grid_points,
        match_accerl,
    )

    path = None
    if args.calibration is not None:
        given = Path(args.calibration)
        inside = given / CALIBRATION_NAME
        path = check_input_file("--calibration", inside if given.is_dir() else given)
    try:
        data = load_calibrations(path)
    except ValueError as error:
        raise UsageError(f"--calibration: {error}") from None
    missing = [w for w in args.workloads if w not in data["workloads"]]
    if missing:
        raise UsageError(
            f"--workloads: expected workloads of the calibration {sorted(data['workloads'])}, "
            f"actual {missing}"
        )
    out = check_output_dir("--out", args.out)
    cals = {w: data["workloads"][w] for w in args.workloads}
    common = dict(
        lag=args.lag,
        delay_ms=args.delay_ms,
        delay_sigma=args.delay_sigma,
        learner_speedup=args.learner_speedup,
        server_speedup=args.server_speedup,
        updates=args.updates,
        seed=args.seed,
    )
    actors = tuple(args.actors) if args.actors else DEFAULT_ACTORS
    # A bar counting the simulated points (how many the AcceRL match takes is not known
    # ahead); without it, one line per point on stderr.
    from tqdm import tqdm

    bar = tqdm(desc="plan predict", unit="point", disable=args.no_progress)

    def progress(p: Any) -> None:
        if args.no_progress:
            print(
                f"{p.workload} {p.kind} {p.shape} {p.n_actors} {p.mode}: "
                f"{p.result.env_steps_per_s:.0f} steps/s",
                file=sys.stderr,
                flush=True,
            )
        bar.update(1)
        bar.set_postfix_str(f"{p.workload} {p.kind} {p.shape} {p.n_actors} {p.mode}")

    try:
        points = grid_points(cals, actors=actors, progress=progress, **common)
        if not args.no_accerl:
            points += accerl_points(cals, progress=progress, **common)
        if args.match_accerl:
            points += match_accerl(
                cals,
                lag=args.lag,
                delay_ms=args.delay_ms,
                delay_sigma=args.delay_sigma,
                updates=args.updates,
                seed=args.seed,
                progress=progress,
            )
    finally:
        bar.close()
    lines = prediction_table(points)
    print("\n".join(lines))
    (out / "plan.md").write_text("\n".join(lines) + "\n")
    (out / "plan.json").write_text(json.dumps(_records(points), indent=1) + "\n")
    png = plot_predictions(points, out / "plan.png")
    print(f"wrote {out / 'plan.md'}, {out / 'plan.json'} and {png}")
    return 0


def _records(points: list[Any]) -> list[dict[str, Any]]:
    out = []
    for p in points:
        r = p.result
        out.append(
            {
                "workload": p.workload,
                "kind": p.kind,
                "shape": p.shape,
                "actors": p.n_actors,
                "mode": p.mode,
                "env_steps_per_s": r.env_steps_per_s,
                "learner_utilisation": r.learner_utilisation,
                "mean_server_batch": None
                if math.isnan(r.mean_server_batch)
                else r.mean_server_batch,
                "server_batches": {str(k): v for k, v in r.server_batches.items()},
                "lag_samples": {str(k): v for k, v in r.lag_samples.items()},
                "dropped_fraction": r.dropped_fraction,
                "actor_wait_fraction": r.actor_wait_fraction,
            }
        )
    return out


def run(args: argparse.Namespace) -> int:
    """Run the action; 0 when done."""
    action = {"measure": _measure, "validate": _validate, "predict": _predict}
    return action[args.plan_command](args)


def main(argv: list[str] | None = None) -> int:
    """``python -m fleetgym.experiments.plan.cli``."""
    parser = argparse.ArgumentParser(prog="fleetgym plan", description=__doc__.splitlines()[0])
    configure(parser)
    args = parser.parse_args(argv)
    if args.plan_command is None:
        parser.print_help()
        return 2
    return run(args)


if __name__ == "__main__":
    raise SystemExit(main())
