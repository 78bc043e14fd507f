"""``fleetgym profiles assess PROFILE --env ID``: what a network allows, before training.

For the env's control period (the shim's rule: ``dt``/``tau``, else ``--step-ms``) it runs
the shim on a counter env (the shim's own timeline, as
:func:`~fleetgym.wrappers.action_delay_for_profile` does) and reports

- the round trip in ticks (observation age + action age, per tick): median, p95, p99;
- stalls: a stall is a run of ticks without news on a path (no newer observation at the
  agent, or no newer action at the env); the share of time in stalls longer than
  ``--stall-ticks`` N periods (either path), and the longest stall in seconds;
- loss bursts per path (one packet each way per tick): loss rate, mean and longest burst.

Then the return the env's clean policy keeps behind the network, over ``--episodes``
episodes: bare (no network), behind the network with no compensation, and with the best
causal compensation the project has. Where the env has true dynamics (CartPole, Pendulum,
MuJoCo locomotion), or with ``--predictor learned``, that is the better of the predictive
compensation (the env applies what arrived last) and scheduled action chunks (a playout
buffer applies each packet's actions at the ticks they are stamped for; ``D`` and ``k``
chosen from the network and reported): :mod:`fleetgym.experiments.assess_returns`. Else it
is the history stack (a second policy, trained under the network). The clean policy is
``--policy PATH`` (an SB3 zip) or trained with the CALF study's clean-policy training and
cache (:func:`fleetgym.experiments.calf.train.clean_policy`).

The verdict compares the compensated return with the clean one, as the share of the clean
policy's margin over a random policy that the compensation keeps,
``kept = (compensated - random) / (clean - random)``: ``feasible`` at ``kept >=``
:data:`FEASIBLE_KEPT`, ``infeasible`` below :data:`INFEASIBLE_KEPT`, else ``degraded``; an
infeasible network with stalls over N periods in more than 1 % of the time, stalls
longer (p95) than its round trips (p95), is blamed on them ("stalls of X s exceed what the env tolerates", X the 95th percentile of the stall
lengths, time-weighted), with the longest stall the compensated episodes that kept
:data:`FEASIBLE_KEPT` of the margin came through as what the env tolerates.

Writes ``--out/assess_<profile>_<env>.json`` and ``.txt`` (and ``.png`` with ``--plot``).
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path
from typing import Any

import numpy as np

from fleetgym.experiments.argtypes import (
    UsageError,
    check_output_dir,
    non_negative_int,
    output_folder,
    positive_int,
)
from fleetgym.experiments.assess_network import assess_network

__all__ = [
    "FEASIBLE_KEPT",
    "INFEASIBLE_KEPT",
    "configure",
    "run",
    "verdict",
]

DEFAULT_OUT_DIR = "fleetgym-out/profiles/assess"
#: Share of the clean-over-random margin the compensation must keep to be "feasible".
FEASIBLE_KEPT = 0.9
#: Below this share the network is "infeasible".
INFEASIBLE_KEPT = 0.5
#: Share of time in long stalls above which an infeasible verdict names the stalls.
STALL_BLAME_SHARE = 0.01


def configure(parser: argparse.ArgumentParser) -> None:
    """The ``assess`` action's arguments."""
    parser.add_argument(
        "profile",
        metavar="PROFILE",
        help="a registered profile name, a profile file (.json, as 'profiles fit' writes) "
        "or a trace file (replayed both ways)",
    )
    parser.add_argument(
        "--env", default="CartPole-v1", help="a registered Gymnasium ID (default: %(default)s)"
    )
    parser.add_argument(
        "--step-ms",
        type=float,
        default=None,
        help="control period in ms (default: the env's dt/tau, as the shim infers it)",
    )
    parser.add_argument(
        "--stall-ticks",
        type=positive_int,
        default=5,
        metavar="N",
        help="report the share of time in stalls longer than N control periods (default: 5)",
    )
    parser.add_argument(
        "--ticks",
        type=positive_int,
        default=20_000,
        help="control periods of the network measurement (default: 20000)",
    )
    parser.add_argument(
        "--episodes",
        type=positive_int,
        default=5,
        help="evaluation episodes per input (default: 5)",
    )
    parser.add_argument(
        "--seed", type=non_negative_int, default=0, help="seed of the policy and the network"
    )
    parser.add_argument(
        "--policy",
        metavar="PATH",
        default=None,
        help="the clean policy, an SB3 zip of --algo (default: train one, or load it from "
        "the CALF clean-policy cache)",
    )
    parser.add_argument(
        "--algo",
        choices=("ppo", "sac", "td3", "recurrent-ppo"),
        default="ppo",
        help="the clean policy's algorithm (RL Zoo's hyperparameters where it has them) "
        "(default: %(default)s)",
    )
    parser.add_argument(
        "--timesteps",
        type=positive_int,
        default=None,
        help="training steps of the clean policy (default: the CALF --quick budget, 40000)",
    )
    parser.add_argument(
        "--cache",
        metavar="DIR",
        default="fleetgym-out/calf/policies",
        help="folder of trained clean policies, reused across runs (default: %(default)s)",
    )
    parser.add_argument(
        "--deploy",
        metavar="NETWORK",
        default=None,
        help="measure the returns behind this network instead (a profile name or file, or a "
        "trace file such as the rest of the capture PROFILE was fitted on); the network "
        "figures, D, k and the predictive prior still come from PROFILE",
    )
    parser.add_argument(
        "--fallback",
        action="store_true",
        help="scheduled chunks with an env-side fallback: in a gap no packet covers, the env "
        "runs a copy of the clean policy on its own state (default: it holds the last action)",
    )
    parser.add_argument(
        "--predictor",
        choices=("true-dynamics", "learned"),
        default="true-dynamics",
        help="the model-based compensations' predictor: the env's own equations where it "
        "has them, or a world model fitted on Mode 1 data of the env (default: %(default)s)",
    )
    parser.add_argument(
        "--delay",
        type=positive_int,
        default=None,
        metavar="D",
        help="the scheduled chunks' playout delay in ticks (default: chosen from the network)",
    )
    parser.add_argument(
        "--chunk",
        type=positive_int,
        default=None,
        metavar="K",
        help="actions per scheduled packet (default: chosen from the network's loss bursts)",
    )
    parser.add_argument(
        "--network-only",
        action="store_true",
        help="only the network figures: no policy, no returns, no verdict",
    )
    parser.add_argument(
        "--out",
        type=output_folder,
        default=Path(DEFAULT_OUT_DIR),
        metavar="DIR",
        help="output folder of the JSON and text reports (default: %(default)s)",
    )
    parser.add_argument("--plot", action="store_true", help="draw the figures to DIR/*.png")
    parser.add_argument("--json", action="store_true", help="print the report as JSON")
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")


def verdict(
    network: dict[str, Any], returns: dict[str, Any], tolerated_s: float | None
) -> tuple[str, float]:
    """``(verdict line, kept)`` from the network figures and the returns."""
    clean = returns["clean"]["mean"]
    random = returns["random"]["mean"]
    comp = returns["compensated"]["mean"]
    margin = clean - random
    kept = (comp - random) / margin if abs(margin) > 1e-9 else 1.0
    if kept >= FEASIBLE_KEPT:
        return "feasible", kept
    if kept >= INFEASIBLE_KEPT:
        return "degraded", kept
    stall_ticks = network["stall_p95_s"] * 1000.0 / network["step_ms"]
    if (
        network["stall_share"] > STALL_BLAME_SHARE
        and stall_ticks > network["round_trip_ticks"]["p95"]
    ):
        line = f"infeasible: stalls of {network['stall_p95_s']:.2f} s exceed what the env tolerates"
        if tolerated_s is not None:
            line += (
                f" (the episodes that kept their return came through stalls of {tolerated_s:.2f} s)"
            )
        else:
            line += " (no compensated episode kept its return)"
        return line, kept
    rt = network["round_trip_ticks"]["p95"] * network["step_ms"] / 1000.0
    return f"infeasible: a round trip of {rt:.2f} s (p95) exceeds what the env tolerates", kept


def _resolve(args: argparse.Namespace) -> tuple[Any, str, float, str]:
    """Profile, its label, the control period and its source; UsageError on bad input."""
    import warnings

    import gymnasium as gym

    from fleetgym.errors import FleetgymError
    from fleetgym.experiments.calf.conditions import resolve_condition
    from fleetgym.wrappers import infer_step_ms
    from fleetgym.wrappers.channel_base import MAX_STEP_MS, MIN_STEP_MS

    name = args.profile
    if not name.strip():
        raise UsageError("PROFILE: expected a profile name or file, actual ''")
    try:
        condition = resolve_condition(name)
        profile = condition.shim_kwargs()
    except (ValueError, TypeError, FleetgymError) as exc:
        raise UsageError(f"PROFILE: {exc}") from None
    if condition.profile is None:  # a table entry with explicit channels
        label = condition.name
    else:
        label = os.path.splitext(os.path.basename(condition.name))[0]
    if args.env not in gym.registry:
        raise UsageError(f"--env: expected a registered Gymnasium ID, actual {args.env!r}")
    if args.step_ms is not None:
        step_ms, source = float(args.step_ms), "--step-ms"
    else:
        env = gym.make(args.env)
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                inferred = infer_step_ms(env)
        finally:
            env.close()
        if inferred is None:
            raise UsageError(f"--step-ms: expected a control period for {args.env} (it has no dt)")
        step_ms, source = inferred, "the env's dt/tau"
    if not MIN_STEP_MS <= step_ms <= MAX_STEP_MS:
        raise UsageError(
            f"--step-ms: expected a number in [{MIN_STEP_MS:g}, {MAX_STEP_MS:g}], actual {step_ms}"
        )
    return profile, label, step_ms, source


def _report_text(report: dict[str, Any]) -> str:
    net = report["network"]
    rt = net["round_trip_ticks"]
    lines = [
        f"Network {report['profile']} for {report['env']} at {net['step_ms']:g} ms "
        f"({report['step_ms_source']}); {net['ticks']} ticks of the shim's loop (seed {net['seed']}).",
        f"  round trip (obs age + action age): median {rt['median']:g}, p95 {rt['p95']:g}, "
        f"p99 {rt['p99']:g}, max {rt['max']} ticks "
        f"({rt['median'] * net['step_ms']:.0f} / {rt['p95'] * net['step_ms']:.0f} / "
        f"{rt['p99'] * net['step_ms']:.0f} ms)",
        f"  stalls > {net['stall_ticks']} periods ({net['stall_ticks'] * net['step_ms']:g} ms "
        f"without news): {net['stall_share']:.1%} of the time (observations "
        f"{net['stall_share_uplink']:.1%}, actions {net['stall_share_downlink']:.1%}); "
        f"longest {net['longest_stall_s']:.2f} s, p95 (time-weighted) {net['stall_p95_s']:.2f} s",
    ]
    for path, label in (("uplink", "observations"), ("downlink", "actions")):
        loss = net["loss"][path]
        lines.append(
            f"  loss, {label}: {loss['loss_rate']:.2%}, {loss['bursts']} bursts, mean "
            f"{loss['mean_burst']:.2f}, longest {loss['max_burst']} packets"
        )
    returns = report.get("returns")
    if returns is None:
        return "\n".join(lines)
    lines += [
        "",
        f"Clean policy: {report['policy']}; {report['episodes']} episodes per input (mean ± std):",
    ]
    if report.get("deploy"):
        lines.append(
            f"  (behind {report['deploy']}; D, k and the predictive prior from {report['profile']})"
        )
    for key, label in (
        ("clean", "clean (no network)"),
        ("random", "random actions (no network)"),
        ("delivered", "behind the network, uncompensated"),
        ("predictive", "predictive (applies what arrived)"),
        ("scheduled", "scheduled chunks (playout buffer)"),
        ("compensated", "with the best compensation (below)"),
    ):
        if key not in returns:
            continue
        r = returns[key]
        lines.append(f"  {label:<36} {r['mean']:>9.1f} ± {r['std']:.1f}")
    lines.append(f"  compensation: {report['compensation']}")
    schedule = report.get("schedule")
    if schedule is not None:
        lines.append(
            f"  schedule: D = {schedule['delay']} ticks ({schedule['source']}; p"
            f"{schedule['quantile'] * 100:g} of the actions' lateness; "
            f"{schedule['late_share']:.1%} of the action packets miss their own tick), "
            f"k = {schedule['chunk']} actions per packet (ticks left uncovered: "
            f"{schedule['underrun_share']:.3%})"
        )
    lines += [
        "",
        f"Kept {report['kept']:.0%} of the clean policy's margin over random actions "
        f"((compensated - random) / (clean - random)); feasible at >= {FEASIBLE_KEPT:.0%}, "
        f"infeasible below {INFEASIBLE_KEPT:.0%}.",
        f"Verdict: {report['verdict']}",
    ]
    return "\n".join(lines)


def _plot(report: dict[str, Any], series: dict[str, np.ndarray], path: Path) -> None:
    from matplotlib.figure import Figure

    net = report["network"]
    fig = Figure(figsize=(13, 3.6), layout="constrained")
    axes = fig.subplots(1, 3 if "returns" in report else 2)
    rt = series["round_trip"]
    axes[0].hist(rt, bins=np.arange(rt.max() + 2) - 0.5, color="tab:blue")
    axes[0].set_yscale("log")
    axes[0].set_xlabel(f"round trip (ticks of {net['step_ms']:g} ms)")
    axes[0].set_ylabel("ticks")
    axes[0].set_title(f"{report['profile']}: round trip")
    gap = series["gap"]
    lengths = np.arange(0, max(int(gap.max()), 1) + 1)
    share = [(gap > n).mean() for n in lengths]
    axes[1].step(lengths * net["step_ms"] / 1000.0, share, where="post", color="black")
    axes[1].axvline(net["stall_ticks"] * net["step_ms"] / 1000.0, color="tab:red", ls="--")
    axes[1].set_xlabel("stall length (s without news)")
    axes[1].set_ylabel("share of time in longer stalls")
    axes[1].set_title("stalls")
    if "returns" in report:
        returns = report["returns"]
        both = "scheduled" in returns
        keys = ["clean", "random", "delivered"]
        keys += ["predictive", "scheduled"] if both else ["compensated"]
        best = returns["compensated"]["mean"]
        labels = {"delivered": "uncompensated", "compensated": "compensated"}
        schedule = report.get("schedule")
        if schedule is not None:
            labels["scheduled"] = f"scheduled\nD={schedule['delay']}, k={schedule['chunk']}"
        for i, key in enumerate(keys):
            r = returns[key]
            chosen = key in ("predictive", "scheduled", "compensated") and r["mean"] == best
            colour = "tab:green" if chosen else "lightgrey"
            axes[2].bar(i, r["mean"], color=colour, edgecolor="black")
            axes[2].plot([i] * len(r["returns"]), r["returns"], "k.", alpha=0.6)
        axes[2].set_xticks(range(len(keys)), [labels.get(k, k) for k in keys], fontsize=8)
        axes[2].set_ylabel("episode return")
        axes[2].set_title(
            f"{report['verdict'].split(':')[0]}: kept {report['kept']:.0%} of clean - random"
        )
    fig.savefig(path, dpi=110)


def run(args: argparse.Namespace) -> int:
    """Assess; returns 0, or raises UsageError (exit 2) before any work for bad input."""
    from fleetgym.experiments.calf.hyperparams import check_algo_fits

    folder = check_output_dir("--out", args.out)
    profile, label, step_ms, source = _resolve(args)
    deploy = None
    if args.deploy is not None:
        from fleetgym.errors import FleetgymError
        from fleetgym.experiments.calf.conditions import resolve_condition

        try:
            deploy = resolve_condition(args.deploy).shim_kwargs()
        except (ValueError, TypeError, FleetgymError) as exc:
            raise UsageError(f"--deploy: {exc}") from None
    env_id = args.env
    if args.policy is not None and not os.path.isfile(args.policy):
        raise UsageError(
            f"--policy: expected an SB3 zip file, actual {args.policy!r} (no such file)"
        )
    if not args.network_only:
        import gymnasium as gym

        probe = gym.make(env_id)
        try:
            check_algo_fits(args.algo, probe.action_space, env_id)
        except ValueError as exc:
            raise UsageError(f"--algo: {exc}") from None
        finally:
            probe.close()
    stem = f"assess_{label}_{env_id.replace('/', '-')}"
    start = time.perf_counter()
    from tqdm.auto import tqdm

    steps = 1 if args.network_only else 5
    bar = tqdm(total=steps, desc=f"assess {label}", disable=args.no_progress)
    bar.set_postfix_str("network")
    network = assess_network(
        _network_of(profile),
        step_ms,
        ticks=args.ticks,
        stall_ticks=args.stall_ticks,
        seed=args.seed,
    )
    bar.update()
    series = network.pop("_series")
    report: dict[str, Any] = {
        "profile": label,
        "profile_arg": args.profile,
        "env": env_id,
        "step_ms_source": source,
        "network": network,
    }
    if not args.network_only:
        report.update(_returns(args, profile, step_ms, network, bar, deploy))
    bar.close()
    report["wall_s"] = time.perf_counter() - start
    json_path, text_path = folder / f"{stem}.json", folder / f"{stem}.txt"
    text = _report_text(report)
    json_path.write_text(json.dumps(report, indent=2, allow_nan=False) + "\n")
    text_path.write_text(text + "\n")
    if args.plot:
        png = folder / f"{stem}.png"
        _plot(report, series, png)
    if args.json:
        print(json.dumps(report, indent=2, allow_nan=False))
        return 0
    print(text)
    print(f"\nwrote {json_path}\nwrote {text_path}")
    if args.plot:
        print(f"wrote {folder / f'{stem}.png'}")
    return 0


def _network_of(shim_kwargs: dict[str, Any]) -> Any:
    """The profile of a condition's shim arguments (explicit channels as a profile)."""
    if "profile" in shim_kwargs:
        return shim_kwargs["profile"]
    from fleetgym.wrappers import NetworkProfile

    return NetworkProfile("channels", shim_kwargs["uplink"], shim_kwargs["downlink"])


def _returns(
    args: argparse.Namespace,
    shim_kwargs: dict[str, Any],
    step_ms: float,
    network: dict,
    bar: Any,
    deploy: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """The returns (:func:`~fleetgym.experiments.assess_returns.measure_returns`) and the
    verdict on them."""
    from fleetgym.experiments.assess_returns import measure_returns

    out = measure_returns(args, shim_kwargs, _network_of(shim_kwargs), step_ms, bar, deploy)
    returns_, ages = out.pop("_compensated_ages")
    returns = out["returns"]
    clean_mean, random_mean = returns["clean"]["mean"], returns["random"]["mean"]
    margin = clean_mean - random_mean
    survived = [
        age
        for ret, age in zip(returns_, ages, strict=True)
        if abs(margin) > 1e-9 and (ret - random_mean) / margin >= FEASIBLE_KEPT
    ]
    tolerated = max(survived) * step_ms / 1000.0 if survived else None
    line, kept = verdict(network, returns, tolerated)
    out.update(
        kept=kept,
        tolerated_stall_s=tolerated,
        verdict=line,
        thresholds={"feasible_kept": FEASIBLE_KEPT, "infeasible_kept": INFEASIBLE_KEPT},
    )
    return out
