"""``fleetgym profiles simulate``: simulate a Wi-Fi or LTE cell in ns-3 and write its profile and traces.

Describes a cell with options (``--cell wifi``: the robots on one 802.11 access point;
``--cell lte``: the robots as UEs of one LTE base station, the agent behind its core; their
distance and motion, their background traffic, the packet sizes and the control period),
simulates it in
ns-3 (``fleetgym[ns3]``; cached per configuration, see
:mod:`fleetgym.wrappers.cells.simulate`) and writes to ``--out``:

* ``NAME.json``: the cell's profile file, which ``profile=`` accepts everywhere
  (``gym.make("fleetgym/NetShim-v0", profile="DIR/NAME.json")``, ``fleetgym profiles
  assess``, ``fleetgym calf --regimes``);
* ``NAME-uplink.csv`` and ``NAME-downlink.csv``: station ``--station``'s packets as fleetgym
  CSV traces (``fleetgym profiles fit DIR/NAME-uplink.csv --downlink DIR/NAME-downlink.csv``
  fits a statistical profile to them).

It prints the cell's loss, median and 99th-percentile delays and stall share (round trips
over ten control periods, or lost).
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from typing import Any

from fleetgym.experiments.argtypes import (
    UsageError,
    check_output_dir,
    int_in,
    non_negative_float,
    non_negative_int,
    output_folder,
    positive_float,
    step_ms,
)
from fleetgym.wrappers.cells import (
    LTE_BANDWIDTHS_RB,
    MOBILITY,
    WIFI_STANDARDS,
    LteCell,
    WifiCell,
    simulate_cells,
)
from fleetgym.wrappers.cells.simulate import require_ns3
from fleetgym.wrappers.profiles import cell_profile, save_profile_file

__all__ = ["configure", "run"]

#: Folder of the profile file and traces when ``--out`` is not given.
DEFAULT_OUT_DIR = "fleetgym-out/profiles"

#: WifiCell field -> the option that sets it (for messages).
_FLAGS = {
    "stations": "--stations",
    "standard": "--standard",
    "bandwidth_rb": "--bandwidth-rb",
    "backhaul_ms": "--backhaul-ms",
    "distance_m": "--distance-m",
    "mobility": "--mobility",
    "background_mbps": "--background-mbps",
    "obs_bytes": "--obs-bytes",
    "action_bytes": "--action-bytes",
    "step_ms": "--step-ms",
    "seconds": "--seconds",
    "seed": "--seed",
}


def configure(parser: argparse.ArgumentParser) -> None:
    """The ``simulate`` action's arguments."""
    parser.add_argument(
        "--cell",
        choices=("wifi", "lte"),
        default="wifi",
        help="wifi: an 802.11 access point; lte: an LTE base station (default: wifi)",
    )
    parser.add_argument(
        "--stations",
        type=int_in(1, 128),
        default=1,
        help="robots on the access point, each running the control loop (default: 1)",
    )
    parser.add_argument(
        "--standard",
        choices=WIFI_STANDARDS,
        default=None,
        help="802.11 standard, --cell wifi only (default: 802.11n)",
    )
    parser.add_argument(
        "--bandwidth-rb",
        type=int,
        choices=LTE_BANDWIDTHS_RB,
        default=None,
        help="resource blocks each way, --cell lte only (default: 25)",
    )
    parser.add_argument(
        "--backhaul-ms",
        type=non_negative_float,
        default=None,
        help="one-way delay from the gateway to the agent, ms, --cell lte only (default: 1)",
    )
    parser.add_argument(
        "--distance-m",
        type=positive_float,
        default=None,
        help="stations' distance from the access point or base station, m "
        "(default: 10 for wifi, 200 for lte)",
    )
    parser.add_argument(
        "--mobility",
        choices=MOBILITY,
        default="static",
        help="static: on a circle; walk: a 1 m/s random walk (default: static)",
    )
    parser.add_argument(
        "--background-mbps",
        type=non_negative_float,
        default=0.0,
        help="other traffic each station streams up, Mb/s (default: 0)",
    )
    parser.add_argument(
        "--obs-bytes", type=int_in(12, 65_000), default=200, help="observation size (default: 200)"
    )
    parser.add_argument(
        "--action-bytes", type=int_in(12, 65_000), default=64, help="action size (default: 64)"
    )
    parser.add_argument(
        "--step-ms",
        type=step_ms,
        default=20.0,
        help="control period, ms, written into the profile (default: 20, CartPole)",
    )
    parser.add_argument(
        "--seconds", type=positive_float, default=30.0, help="simulated seconds (default: 30)"
    )
    parser.add_argument("--seed", type=non_negative_int, default=0, help="ns-3 run (default: 0)")
    parser.add_argument(
        "--station",
        type=int_in(0, 127),
        default=0,
        help="the station whose packets the traces hold (default: 0)",
    )
    parser.add_argument(
        "--name",
        default=None,
        help="the profile's name and the files' stem (default: wifi-cell or lte-cell)",
    )
    parser.add_argument(
        "--out",
        type=output_folder,
        default=DEFAULT_OUT_DIR,
        help=f"output folder (default: {DEFAULT_OUT_DIR})",
    )
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")


def _cell(args: argparse.Namespace) -> WifiCell | LteCell:
    kind: type[WifiCell] | type[LteCell] = LteCell if args.cell == "lte" else WifiCell
    other = ("bandwidth_rb", "backhaul_ms") if kind is WifiCell else ("standard",)
    for field in other:
        if getattr(args, field) is not None:
            raise UsageError(
                f"{_FLAGS[field]}: expected with --cell {'lte' if kind is WifiCell else 'wifi'} only, actual --cell {args.cell}"
            )
    kwargs = {
        field: getattr(args, field)
        for field in _FLAGS
        if field not in other and getattr(args, field) is not None
    }
    try:
        cell = kind(**kwargs)
    except (TypeError, ValueError) as exc:
        field, _, rest = str(exc).partition(":")
        raise UsageError(f"{_FLAGS.get(field, field)}:{rest}") from None
    if args.station >= cell.stations:
        raise UsageError(
            f"--station: expected an int in [0, {cell.stations - 1}] (--stations "
            f"{cell.stations}), actual {args.station}"
        )
    return cell


def _write_trace(path: Any, delays: Any, step: float) -> None:
    lines = ["# ns-3 cell simulated by fleetgym profiles simulate", "send_ms,delay_ms"]
    for k, d in enumerate(delays):
        lines.append(f"{k * step:g},{d:.6f}" if math.isfinite(d) else f"{k * step:g},")
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")


def run(args: argparse.Namespace) -> int:
    """Simulate, print, write; returns 0, or raises UsageError (exit 2) for unusable input."""
    name = args.name if args.name is not None else f"{args.cell}-cell"
    if not name.strip() or name in (".", "..") or "/" in name or "\\" in name:
        raise UsageError(f"--name: expected a name without a folder, actual {name!r}")
    cell = _cell(args)
    require_ns3("fleetgym profiles simulate")
    folder = check_output_dir("--out", args.out)
    print(
        f"simulating {cell.describe()} for {cell.seconds:g} s in ns-3 (cached per configuration)",
        file=sys.stderr,
        flush=True,
    )
    run_ = simulate_cells([cell])[0]
    profile = cell_profile(cell, name, cell.describe())
    out = save_profile_file(profile, folder / f"{name}.json")
    up, down = folder / f"{name}-uplink.csv", folder / f"{name}-downlink.csv"
    _write_trace(up, run_.up[args.station], cell.step_ms or 20.0)
    _write_trace(down, run_.down[args.station], cell.step_ms or 20.0)
    stats = run_.stats()
    report = {
        "profile_file": str(out),
        "traces": [str(up), str(down)],
        "cell": cell.to_dict(),
        "wall_s": run_.meta.get("wall_s"),
        **stats,
    }
    if args.json:
        print(json.dumps(report, indent=2))
        return 0
    print(cell.describe())
    print(
        f"observations: loss {stats['loss_up']:.2%}, one way p50 {stats['up_p50_ms']:.2f} ms, "
        f"p99 {stats['up_p99_ms']:.2f} ms; actions: loss {stats['loss_down']:.2%}"
    )
    print(
        f"round trip p50 {stats['rtt_p50_ms']:.2f} ms, p99 {stats['rtt_p99_ms']:.2f} ms; "
        f"stall share {stats['stall_share']:.2%} (over {10 * (cell.step_ms or 20):g} ms or lost)"
    )
    print(f"Wrote {out}, {up}, {down}")
    print(
        f'Use: gym.make("fleetgym/NetShim-v0", env_id="CartPole-v1", profile="{out}"); '
        f"fleetgym profiles fit {up} --downlink {down}"
    )
    return 0
