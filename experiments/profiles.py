"""``fleetgym profiles``: list the named network profiles and the shipped traces.

For each profile it prints both channels and, for a control period ``--step-ms``, what
they do to a control loop: the loss rate and the median / 99th-percentile one-way delay in
control periods (estimated from the channel model with a fixed seed). Then it lists the
trace files shipped in ``fleetgym/traces`` with their size, duration, loss and delay.
``--json`` prints the same as JSON. ``fleetgym profiles fit TRACE`` fits a profile to a
trace (:mod:`fleetgym.experiments.profile_fit`); ``fleetgym profiles assess PROFILE --env
ID`` says what a network allows an env's clean policy before any training
(:mod:`fleetgym.experiments.assess`); ``fleetgym profiles simulate`` writes a simulated
Wi-Fi cell's profile file and traces (:mod:`fleetgym.experiments.profile_cell`).
"""

from __future__ import annotations

import argparse
import json
import math
from typing import Any

import numpy as np

from fleetgym.experiments import assess, profile_cell, profile_fit
from fleetgym.experiments.argtypes import UsageError, positive_int
from fleetgym.traces import list_traces, load_trace
from fleetgym.wrappers.channel_base import MAX_STEP_MS, MIN_STEP_MS
from fleetgym.wrappers.profiles import get_profile, list_profiles

__all__ = ["configure", "describe_profiles", "describe_traces", "run"]

#: Most packets ``--samples`` may ask for per channel (a guard against typos).
MAX_PROFILE_SAMPLES = 10_000_000


def configure(parser: argparse.ArgumentParser) -> None:
    """Add this subcommand's arguments (imports nothing heavy)."""
    parser.add_argument(
        "--step-ms",
        type=float,
        default=20.0,
        help="control period (ms) used for delays in periods (default: 20, CartPole)",
    )
    parser.add_argument("--json", action="store_true", help="print JSON instead of tables")
    parser.add_argument(
        "--netem",
        metavar="NAME",
        default=None,
        help="print the tc netem commands equivalent to profile NAME and exit",
    )
    parser.add_argument(
        "--samples",
        type=positive_int,
        default=20_000,
        help="packets sampled per channel for the delay quantiles (default: 20000)",
    )
    _add_actions(parser)


def _add_actions(parser: argparse.ArgumentParser) -> None:
    """``fit`` and ``assess`` (no action: the listing)."""
    sub = parser.add_subparsers(
        dest="profiles_action",
        metavar="ACTION",
        help="fit: fit a profile to a trace file; assess: what a network allows an env's "
        "clean policy, before training; simulate: a Wi-Fi cell in ns-3 as a profile "
        "(without an action: list profiles and traces)",
    )
    parser.set_defaults(profiles_action="list")
    fit = sub.add_parser(
        "fit",
        help="fit a network profile to a captured trace and write it as a profile file",
        description=(profile_fit.__doc__ or "").splitlines()[0].replace("``", ""),
    )
    profile_fit.configure(fit)
    assessed = sub.add_parser(
        "assess",
        help="round trip, stalls, loss bursts and the return a clean policy keeps with the "
        "best compensation, for an env's control period",
        description=(assess.__doc__ or "").splitlines()[0].replace("``", ""),
    )
    assess.configure(assessed)
    simulated = sub.add_parser(
        "simulate",
        help="simulate a Wi-Fi cell in ns-3 (fleetgym[ns3]) and write its profile file and traces",
        description=(profile_cell.__doc__ or "").splitlines()[0].replace("``", ""),
    )
    profile_cell.configure(simulated)


def _quantiles(channel: Any, step_ms: float, samples: int) -> dict[str, float]:
    d = channel.sample_delays(np.random.default_rng(0), samples, step_ms)
    ok = d[np.isfinite(d)]
    if ok.size == 0:
        return {"loss": 1.0, "p50_ms": math.inf, "p99_ms": math.inf}
    return {
        "loss": float(np.mean(np.isinf(d))),
        "p50_ms": float(np.quantile(ok, 0.5)),
        "p99_ms": float(np.quantile(ok, 0.99)),
    }


def describe_profiles(step_ms: float = 20.0, samples: int = 20_000) -> list[dict[str, Any]]:
    """One dict per registered profile: name, description, channels, delay quantiles."""
    rows = []
    for name in list_profiles():
        profile = get_profile(name)
        row: dict[str, Any] = {"name": name, "description": profile.description}
        for direction in ("uplink", "downlink"):
            channel = getattr(profile, direction)
            q = _quantiles(channel, step_ms, samples)
            row[direction] = {
                "channel": channel.describe(),
                "nominal_loss": channel.loss_rate,
                **q,
                "p50_periods": math.floor(q["p50_ms"] / step_ms)
                if math.isfinite(q["p50_ms"])
                else None,
                "p99_periods": math.floor(q["p99_ms"] / step_ms)
                if math.isfinite(q["p99_ms"])
                else None,
            }
        row["same_both_ways"] = profile.uplink == profile.downlink
        rows.append(row)
    return rows


def describe_traces() -> list[dict[str, Any]]:
    """One dict per shipped trace file: name, packets, duration, loss, delay quantiles."""
    rows = []
    for name in list_traces():
        trace = load_trace(name)
        ok = trace.delay_ms[np.isfinite(trace.delay_ms)]
        rows.append(
            {
                "file": name,
                "packets": len(trace),
                "duration_s": trace.period_ms / 1000.0,
                "loss": trace.loss_rate,
                "p50_ms": float(np.median(ok)) if ok.size else math.inf,
                "p99_ms": float(np.quantile(ok, 0.99)) if ok.size else math.inf,
                "profile": f"trace-{name.rsplit('.', 1)[0]}",
            }
        )
    return rows


def _finite(x: Any) -> Any:
    """JSON has no infinity: an all-lost channel's delay becomes null."""
    if isinstance(x, float) and not math.isfinite(x):
        return None
    if isinstance(x, dict):
        return {k: _finite(v) for k, v in x.items()}
    if isinstance(x, list):
        return [_finite(v) for v in x]
    return x


def _print_netem(name: str) -> int:
    """The tc commands applying profile ``name`` (uplink on the env host, downlink on the agent's)."""
    from fleetgym.errors import UnknownProfileError
    from fleetgym.wrappers.remote.netem import netem_command

    try:
        profile = get_profile(name)
        up = netem_command(profile.uplink, "DEV_ENV_HOST")
        down = netem_command(profile.downlink, "DEV_AGENT_HOST")
    except (UnknownProfileError, ValueError) as exc:
        raise UsageError(f"--netem: {exc}") from None
    print(f"# profile {profile.name}: uplink (observations) leave the env host")
    print(up)
    print("# downlink (actions) leave the agent host")
    print(down)
    return 0


def run(args: argparse.Namespace) -> int:
    """Print the profiles and traces; returns 0, or 2 for a bad argument."""
    if getattr(args, "profiles_action", None) == "fit":
        return profile_fit.run(args)
    if getattr(args, "profiles_action", None) == "assess":
        return assess.run(args)
    if getattr(args, "profiles_action", None) == "simulate":
        return profile_cell.run(args)
    netem = getattr(args, "netem", None)
    if netem is not None:
        if not netem.strip():
            raise UsageError("--netem: expected a profile name, actual ''")
        return _print_netem(netem)
    step_ms = float(args.step_ms)
    if not MIN_STEP_MS <= step_ms <= MAX_STEP_MS:
        raise UsageError(
            f"--step-ms: expected a number in [{MIN_STEP_MS:g}, {MAX_STEP_MS:g}], "
            f"actual {args.step_ms}"
        )
    if not 100 <= args.samples <= MAX_PROFILE_SAMPLES:
        raise UsageError(
            f"--samples: expected an int in [100, {MAX_PROFILE_SAMPLES}], actual {args.samples}"
        )
    profiles = describe_profiles(step_ms, args.samples)
    traces = describe_traces()
    if args.json:
        payload = {"step_ms": step_ms, "profiles": profiles, "traces": traces}
        print(json.dumps(_finite(payload), indent=2))
        return 0
    print(
        "Network profiles, one way (dir 'both': the same channel each way).\n"
        "nominal: the loss rate and the channel, as defined; measured: delay quantiles of "
        f"{args.samples} sampled packets\nper channel (seed 0), in ms and in {step_ms:g} ms "
        "control periods.\n"
    )
    header = (
        f"{'':<20} {'':<5} {'nominal':>7}  {'measured':-^26}  nominal\n"
        f"{'profile':<20} {'dir':<5} {'loss':>7}  {'p50 ms':>8} {'p99 ms':>8} {'p99 per.':>8}  channel"
    )
    print(header)
    print("-" * len(header.splitlines()[1]))
    for row in profiles:
        directions = (
            (("uplink", "both"),)
            if row["same_both_ways"]
            else (("uplink", "up"), ("downlink", "down"))
        )
        for direction, short in directions:
            d = row[direction]
            periods = "-" if d["p99_periods"] is None else str(d["p99_periods"])
            name = row["name"] if direction == "uplink" else ""
            print(
                f"{name:<20} {short:<5} {d['nominal_loss']:>7.1%}  {d['p50_ms']:>8.1f} "
                f"{d['p99_ms']:>8.1f} {periods:>8}  {d['channel']}"
            )
    print("\nShipped traces (fleetgym/traces, formats in traces/README.md):\n")
    print(
        f"{'file':<24} {'packets':>8} {'secs':>7} {'loss':>6} {'p50 ms':>8} {'p99 ms':>8}  profile"
    )
    for t in traces:
        print(
            f"{t['file']:<24} {t['packets']:>8} {t['duration_s']:>7.1f} {t['loss']:>6.1%} "
            f"{t['p50_ms']:>8.1f} {t['p99_ms']:>8.1f}  {t['profile']}"
        )
    print(
        "\nUse: gym.make('fleetgym/NetShim-v0', env_id='CartPole-v1', profile='wifi-normal') "
        "or NetworkShimWrapper(env, profile=...)"
    )
    return 0
