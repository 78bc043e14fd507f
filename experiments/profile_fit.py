"""``fleetgym profiles fit TRACE``: fit a network profile to a captured trace and write it.

Reads the trace in any format of ``traces/README.md`` (raw ``ping`` output, whose round
trips are halved into one-way delays for both directions; fleetgym's CSV; a delay list; a
Mahimahi link trace), fits the delay distribution, its AR(1) drift and the loss bursts (:mod:`fleetgym.wrappers.profile_fit`, rules in ``docs/explanation/profile-fit.md``),
prints the fit with its direction model, the packet interval it used and where from, and
its goodness-of-fit figures (KS distances; loss-run lengths of the trace against each
loss model) and writes the profile file ``--out/NAME.json``, which
``profile=`` accepts everywhere (``NetworkShimWrapper(env, profile="DIR/NAME.json")``).
``--plot`` draws the delay CDFs and the loss-run histogram to ``--out/NAME.png``; ``--json``
prints the figures as JSON.
"""

from __future__ import annotations

import argparse
import json
import math
import os
from pathlib import Path
from typing import Any

from fleetgym.experiments.argtypes import (
    UsageError,
    check_output_dir,
    non_negative_float,
    output_folder,
    positive_float,
)
from fleetgym.traces.loaders import TRACE_FORMATS
from fleetgym.wrappers.profile_fit import DELAY_MODELS, LOSS_MODELS

__all__ = ["configure", "format_report", "plot_fit", "run"]

#: Folder of the profile file (and its plot) when ``--out`` is not given.
DEFAULT_OUT_DIR = "fleetgym-out/profiles"


def configure(parser: argparse.ArgumentParser) -> None:
    """The ``fit`` action's arguments."""
    parser.add_argument(
        "trace",
        metavar="TRACE",
        help="the trace file (or a shipped trace's name): the uplink, or with round trips "
        "(ping output) both directions",
    )
    parser.add_argument(
        "--format", choices=TRACE_FORMATS, default="auto", help="trace format (traces/README.md)"
    )
    parser.add_argument(
        "--downlink",
        metavar="TRACE",
        default=None,
        help="the downlink's (actions') trace, if captured separately; without it the "
        "uplink's fit is used both ways",
    )
    parser.add_argument(
        "--interval-ms",
        type=positive_float,
        default=None,
        help="packet spacing: the -i of ping output without -D timestamps (default: ping's "
        "1000 ms; with -D the timestamps give it, and a contradicting value is an error), or of "
        "a plain delay list (default: its '# interval_ms:' line, else 20)",
    )
    parser.add_argument(
        "--rtt",
        action="store_true",
        help="the trace holds round-trip times (e.g. a CSV or delay list of ping times): "
        "halve each into a one-way delay for both directions (symmetric paths assumed) and "
        "split the loss between them; raw ping output is detected and treated so without it",
    )
    parser.add_argument(
        "--base-delay-ms",
        type=non_negative_float,
        default=0.0,
        help="propagation delay added to a Mahimahi trace",
    )
    parser.add_argument(
        "--out",
        type=output_folder,
        default=Path(DEFAULT_OUT_DIR),
        metavar="DIR",
        help="output folder: the profile file DIR/NAME.json (and DIR/NAME.png with --plot)",
    )
    parser.add_argument(
        "--name",
        default=None,
        help="the profile's name, also the files' stem (default: fit-<trace file stem>)",
    )
    parser.add_argument(
        "--delay-model",
        choices=DELAY_MODELS,
        default="auto",
        help="delay model of the profile; auto: log-normal if its KS distance is within "
        "sampling noise, else the empirical table",
    )
    parser.add_argument(
        "--loss-model",
        choices=LOSS_MODELS,
        default="auto",
        help="loss model; auto: Gilbert if losses cluster significantly, else Bernoulli",
    )
    parser.add_argument(
        "--plot", action="store_true", help="draw the fit to DIR/NAME.png, beside the profile"
    )
    parser.add_argument("--json", action="store_true", help="print the fit's figures as JSON")


def _stem(trace: str) -> str:
    return os.path.splitext(os.path.basename(trace))[0] or "trace"


def run(args: argparse.Namespace) -> int:
    """Fit, print, write; returns 0, or raises UsageError (exit 2) for unusable input."""
    from fleetgym.errors import TraceFormatError
    from fleetgym.wrappers.profile_fit import TraceFitError, fit_profile
    from fleetgym.wrappers.profiles import save_profile_file

    name = args.name if args.name is not None else f"fit-{_stem(args.trace)}"
    if not name.strip():
        raise UsageError(f"--name: expected a non-empty name, actual {args.name!r}")
    if name in (".", "..") or any(sep in name for sep in ("/", "\\", os.sep)):
        raise UsageError(f"--name: expected a name without a folder, actual {name!r}")
    folder = check_output_dir("--out", args.out)
    out = folder / f"{name}.json"
    plot = folder / f"{name}.png" if args.plot else None
    for path in (out, plot):
        if path is not None and (path.is_dir() or (path.exists() and not os.access(path, os.W_OK))):
            raise UsageError(f"--out: expected {str(path)!r} to be a writable file")
    try:
        fit = fit_profile(
            args.trace,
            args.downlink,
            name=name,
            format=args.format,
            interval_ms=args.interval_ms,
            base_delay_ms=args.base_delay_ms,
            delay_model=args.delay_model,
            loss_model=args.loss_model,
            rtt=True if args.rtt else None,
        )
    except (TraceFormatError, TraceFitError) as exc:
        raise UsageError(str(exc)) from None
    except ValueError as exc:  # --rtt with a Mahimahi trace
        raise UsageError(f"--rtt: {exc}") from None
    report = fit.to_dict()
    save_profile_file(fit.profile, out, fit=report)
    if plot is not None:
        plot_fit(fit, plot)
    if args.json:
        print(json.dumps({"profile_file": str(out), **report}, indent=2))
        return 0
    print(format_report(fit))
    if plot is not None:
        print(f"Plot: {plot}")
    print(f"Wrote {out}")
    print(
        f'Use: NetworkShimWrapper(env, profile="{out}") or gym.make("fleetgym/NetShim-v0", '
        f'env_id="CartPole-v1", profile="{out}")'
    )
    return 0


def _num(x: float | None, spec: str = ".1f") -> str:
    return "-" if x is None or not math.isfinite(x) else format(x, spec)


def _direction_lines(fit: Any) -> list[str]:
    d, loss = fit.delay, fit.loss
    t = d.trace_quantiles_ms
    g, ln = d.gaussian, d.lognormal
    rows = [
        ("trace", f"mean {t['mean_ms']:.2f}, std {t['std_ms']:.2f} ms", t["p50_ms"], t["p99_ms"]),
        ("gaussian", f"max(0, N({g.mean_ms:.2f}, {g.std_ms:.2f}^2)) ms", None, None),
        (
            "lognormal",
            f"{ln.shift_ms:.3g} + {ln.median_ms:.3g}·e^({ln.sigma:.3g} Z) ms",
            None,
            None,
        ),
        ("empirical", f"{len(d.empirical.quantiles_ms)}-row quantile table", None, None),
    ]
    lines = []
    if fit.origin:
        lines.append(f"  format: {fit.origin}")
    if fit.interval_source:
        lines.append(f"  interval: {fit.interval_ms:.4g} ms per packet, from {fit.interval_source}")
    lines += [
        f"  {fit.packets} packets, one every {fit.interval_ms:.4g} ms, {fit.delivered} delivered",
        f"  {'delay model':<11} {'parameters':<34} {'p50 ms':>7} {'p99 ms':>7} {'KS':>6}",
    ]
    for model, text, p50, p99 in rows:
        ks = "" if model == "trace" else f"{d.ks[model]:>6.3f}"
        if model != "trace":
            p50, p99 = d.model_quantile_ms(model, 0.5), d.model_quantile_ms(model, 0.99)
        mark = "  <- profile" if model == d.chosen else ""
        lines.append(f"  {model:<11} {text:<34} {_num(p50):>7} {_num(p99):>7} {ks}{mark}")
    lines.append(
        f"  KS 5 % critical value {d.ks_critical:.3f} (n_eff {d.n_eff:.0f} = n (1-rho)/(1+rho)); "
        f"AR(1) rho {d.correlation:.3f} per {fit.interval_ms:.4g} ms (normal scores), "
        f"{g.correlation:.3f} (delays)"
    )
    lines.append(
        f"  loss {loss.rate:.2%}: {loss.bursts.size} bursts, mean burst {loss.mean_burst:.2f} "
        f"packets; likelihood ratio Gilbert/Bernoulli {loss.likelihood_ratio:.1f} "
        f"(critical 10.83) -> {loss.chosen}"
    )
    lines.append(f"  {'burst length':<13} {'trace':>7} {'bernoulli':>10} {'gilbert':>8}")
    for row in loss.burst_table():
        cells = [_num(None if row[k] is None else 100 * row[k]) for k in ("trace", "bernoulli")]
        cells.append(_num(None if row["gilbert"] is None else 100 * row["gilbert"]))
        lines.append(
            f"  {row['length']:<13} {cells[0]:>6}% {cells[1]:>9}% {cells[2]:>7}%".replace(
                "-%", "- "
            )
        )
    means = [loss.mean_burst, loss.model_mean_burst("bernoulli"), loss.model_mean_burst("gilbert")]
    lines.append(
        f"  {'mean':<13} {_num(means[0], '.2f'):>7} {_num(means[1], '.2f'):>10} "
        f"{_num(means[2], '.2f'):>8}"
    )
    if fit.round_trip_loss_split and loss.chosen != "none":
        lines.append(
            f"  loss per direction {fit.loss_per_direction:.2%}: the round trips' {loss.rate:.2%} "
            "split so that a round trip through both directions is lost as often "
            "(1 - sqrt(1 - L) each; a Gilbert chain keeps its mean burst)"
        )
    lines.append(f"  channel: {fit.channel.describe()}")
    return lines


def format_report(fit: Any) -> str:
    """The fit as text: per direction the delay models with KS, the loss-run table."""
    lines = [f"Profile {fit.profile.name}: {fit.profile.description}"]
    lines.append(f"Direction model: {fit.direction_model}.")
    if fit.same_both_ways:
        directions = [("uplink and downlink", fit.uplink)]
    else:
        directions = [("uplink", fit.uplink), ("downlink", fit.downlink)]
    for label, direction in directions:
        lines.append(f"\n{label}: {direction.source}")
        lines.extend(_direction_lines(direction))
    return "\n".join(line.rstrip() for line in lines)


def plot_fit(fit: Any, path: str | os.PathLike[str]) -> None:
    """Real vs fitted delay CDF and loss-run histogram, one row per direction, to a PNG."""
    import numpy as np
    from matplotlib.figure import Figure

    from fleetgym.wrappers.fit_models import gaussian_cdf

    directions = [("uplink and downlink" if fit.same_both_ways else "uplink", fit.uplink)]
    if not fit.same_both_ways:
        directions.append(("downlink", fit.downlink))
    fig = Figure(figsize=(11, 3.8 * len(directions)), layout="constrained")
    axes = fig.subplots(len(directions), 2, squeeze=False)
    for (label, direction), (ax_cdf, ax_runs) in zip(directions, axes, strict=True):
        d = direction.delay
        delays = d.delivered_ms
        ecdf = np.arange(1, delays.size + 1) / delays.size
        ax_cdf.step(delays, ecdf, where="post", color="black", lw=2, label="trace")
        x = np.geomspace(max(float(delays[0]), 1e-3), float(delays[-1]), 400)
        models = {
            "gaussian": gaussian_cdf(d.gaussian),
            "lognormal": d.lognormal.cdf,
            "empirical": d.empirical.cdf,
        }
        for model, cdf in models.items():
            chosen = " (profile)" if model == d.chosen else ""
            ax_cdf.plot(x, cdf(x), lw=1.2, label=f"{model}, KS {d.ks[model]:.3f}{chosen}")
        ax_cdf.set_xscale("log")
        ax_cdf.set_xlabel("one-way delay of delivered packets (ms)")
        ax_cdf.set_ylabel("CDF")
        ax_cdf.set_title(f"{label}: delay, {os.path.basename(direction.source)}")
        ax_cdf.legend(fontsize=8, loc="lower right")
        table = direction.loss.burst_table()
        pos = np.arange(len(table))
        for k, (column, colour) in enumerate(
            (("trace", "black"), ("bernoulli", "tab:blue"), ("gilbert", "tab:orange"))
        ):
            values = [row[column] or 0.0 for row in table]
            ax_runs.bar(pos + (k - 1) * 0.27, values, 0.27, color=colour, label=column)
        ax_runs.set_xticks(pos, [row["length"] for row in table])
        ax_runs.set_xlabel("loss burst length (packets)")
        ax_runs.set_yscale("log")
        ax_runs.set_ylim(1e-4, 1.5)
        ax_runs.set_ylabel("fraction of bursts (log)")
        ax_runs.set_title(
            f"{label}: {direction.loss.bursts.size} bursts, {direction.loss.rate:.1%} lost, "
            f"model {direction.loss.chosen}"
        )
        ax_runs.legend(fontsize=8)
    fig.savefig(path, dpi=110)
