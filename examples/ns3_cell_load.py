"""Delay and loss of a simulated Wi-Fi or LTE cell as the stations and their load grow.

Every station of an 802.11 cell, or every UE of an LTE cell (``--cell lte``; ns-3,
``fleetgym[ns3]``), runs the control loop: one
observation packet up and one action packet down per control period; each also streams
``--background`` Mb/s of other traffic up. For every (stations, background) pair the cell
is simulated for ``--seconds`` and the script reports, over all stations, the uplink's loss,
median and 99th-percentile one-way delay, and the share of round trips (uplink + downlink
of one tick) over ten control periods or lost. Writes a CSV (``--out``) and draws the two
panels (``--plot``, needs ``fleetgym[plots]``).

    python examples/ns3_cell_load.py --stations 1,2,4,8,16,32 --background 0,1,4 \\
        --seconds 20 --out fleetgym-out/ns3_cell_load.csv --plot fleetgym-out/ns3_cell_load.png
    python examples/ns3_cell_load.py --cell lte --background 0,0.5,2 --seconds 20 \
        --out fleetgym-out/ns3_lte_load.csv --plot fleetgym-out/ns3_lte_load.png
"""

from __future__ import annotations

import argparse
import csv
import math
import time
from pathlib import Path

from fleetgym.wrappers.cells import LteCell, WifiCell, simulate_cells

FIELDS = (
    "stations",
    "background_mbps",
    "offered_mbps",
    "loss_up",
    "loss_down",
    "up_p50_ms",
    "up_p99_ms",
    "rtt_p50_ms",
    "rtt_p99_ms",
    "stall_share",
    "wall_s",
)


def _numbers(text: str, kind: type) -> list:
    return [kind(x) for x in text.split(",") if x.strip()]


def sweep(
    stations: list[int], background: list[float], *, kind: str, seconds: float, seed: int
) -> list[dict[str, float]]:
    """One row per (stations, background) pair, simulated one station count at a time."""
    rows = []
    make = LteCell if kind == "lte" else WifiCell
    for n in stations:
        started = time.perf_counter()
        cells = [
            make(stations=n, background_mbps=b, step_ms=20.0, seconds=seconds, seed=seed)
            for b in background
        ]
        for cell, run in zip(cells, simulate_cells(cells), strict=True):
            control = n * (cell.obs_bytes + cell.action_bytes) * 8 / cell.step_ms / 1000.0
            rows.append(
                {
                    "stations": n,
                    "background_mbps": cell.background_mbps,
                    "offered_mbps": round(control + n * cell.background_mbps, 3),
                    **run.stats(),
                    "wall_s": round(float(run.meta.get("wall_s", math.nan)), 2),
                }
            )
            print(
                f"{n:>3} stations, {cell.background_mbps:g} Mb/s each: "
                f"up p50 {rows[-1]['up_p50_ms']:.2f} ms, p99 {rows[-1]['up_p99_ms']:.1f} ms, "
                f"loss {rows[-1]['loss_up']:.1%}, stalls {rows[-1]['stall_share']:.1%}",
                flush=True,
            )
        print(f"    ({time.perf_counter() - started:.0f} s)", flush=True)
    return rows


def plot(rows: list[dict[str, float]], path: Path, title: str) -> None:
    """Uplink delay (median and p99) and loss against stations, one line per load."""
    import matplotlib.pyplot as plt

    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 4))
    loads = sorted({r["background_mbps"] for r in rows})
    for load in loads:
        sel = [r for r in rows if r["background_mbps"] == load]
        n = [r["stations"] for r in sel]
        (line,) = left.plot(n, [r["up_p99_ms"] for r in sel], "o-")
        left.plot(n, [r["up_p50_ms"] for r in sel], "s--", color=line.get_color(), alpha=0.6)
        right.plot(
            n,
            [100 * r["loss_up"] for r in sel],
            "o-",
            color=line.get_color(),
            label=f"{load:g} Mb/s",
        )
    for ax in (left, right):
        ax.set_xscale("log", base=2)
        ax.set_xlabel("stations on the cell")
        ax.grid(alpha=0.3)
    left.set_yscale("log")
    left.set_ylabel("uplink one-way delay, ms")
    right.set_ylabel("observation packets lost, %")
    right.legend(title="background per station", fontsize=8, loc="upper left")
    left.set_title("solid: p99, dashed: median", fontsize=9)
    fig.suptitle(f"{title}, 20 ms control loop on every station")
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--stations", default="1,2,4,8,16,32", help="comma-separated counts")
    parser.add_argument("--background", default="0,1,4", help="comma-separated Mb/s per station")
    parser.add_argument("--cell", choices=("wifi", "lte"), default="wifi", help="(default wifi)")
    parser.add_argument("--seconds", type=float, default=20.0, help="simulated seconds per cell")
    parser.add_argument("--seed", type=int, default=0, help="ns-3 run number (default 0)")
    parser.add_argument("--out", type=Path, default=Path("fleetgym-out/ns3_cell_load.csv"))
    parser.add_argument("--plot", type=Path, default=None, help="draw the figure to this PNG")
    args = parser.parse_args()
    rows = sweep(
        _numbers(args.stations, int),
        _numbers(args.background, float),
        kind=args.cell,
        seconds=args.seconds,
        seed=args.seed,
    )
    args.out.parent.mkdir(parents=True, exist_ok=True)
    with open(args.out, "w", newline="", encoding="utf-8") as handle:
        writer = csv.DictWriter(handle, fieldnames=FIELDS, extrasaction="ignore")
        writer.writeheader()
        writer.writerows(rows)
    print(f"wrote {args.out}")
    if args.plot is not None:
        title = "ns-3 LTE cell (25 RB)" if args.cell == "lte" else "ns-3 802.11n cell"
        plot(rows, args.plot, title)
        print(f"wrote {args.plot}")


if __name__ == "__main__":
    main()
