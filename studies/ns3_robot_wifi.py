"""A simulated Wi-Fi cell against real robot Wi-Fi captures: median, p99 and stall share.

The captures: a ROS 2 robot on building Wi-Fi (plus 1 Gb wired to the other end) sending
2,880-byte sensor messages, one application-level round trip per line, closed loop; one
capture static, one moving (the first halves of the "robot Wi-Fi" captures, Fernández-
Madrigal et al., 2025). The cells were fixed before looking at the captures and are not
fitted to them: an 802.11n access point shared by 8 stations, each running a 20 ms
control loop (2,880-byte observations up, 64-byte actions down) and streaming 1 Mb/s
beside it; static at 10 m against the static capture, a 1 m/s random walk within 20 m
against the moving one; 60 simulated seconds, seeds 0-2.

Compared: the round trip's median and 99th percentile, and the stall share, the share of
round trips over 100 ms (five 20 ms periods) or lost. A simulated round trip is one
station's observation delay plus its action delay in the same tick; the capture's also
holds the wired hop and the robot's and server's own processing, which the cell has not.

    python studies/ns3_robot_wifi.py --captures PATH/TO/captures \\
        --out docs/results/data/ns3_robot_wifi_<commit>.csv
"""

from __future__ import annotations

import argparse
import csv
from pathlib import Path
from typing import Any

import numpy as np

from fleetgym.wrappers.cells import WifiCell, simulate_cells

STALL_MS = 100.0
CAPTURES = {
    "static": "robot-wifi-static-rtt-ms.first-half.csv",
    "moving": "robot-wifi-moving-rtt-ms.first-half.csv",
}
CELLS = {
    "static": {"mobility": "static", "distance_m": 10.0},
    "moving": {"mobility": "walk", "distance_m": 20.0},
}


def summary(rtt: np.ndarray) -> dict[str, float]:
    """Median and p99 of the delivered round trips; the share over STALL_MS or lost."""
    ok = rtt[np.isfinite(rtt)]
    return {
        "packets": int(rtt.size),
        "rtt_p50_ms": float(np.median(ok)),
        "rtt_p99_ms": float(np.quantile(ok, 0.99)),
        "stall_share": float(np.mean(~(rtt <= STALL_MS))),
        "lost": float(np.mean(~np.isfinite(rtt))),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--captures", type=Path, required=True, help="the captures' folder")
    parser.add_argument("--seeds", type=int, default=3, help="cell seeds 0..N-1 (default 3)")
    parser.add_argument("--seconds", type=float, default=60.0, help="simulated seconds")
    parser.add_argument("--out", type=Path, required=True, help="the CSV to write")
    args = parser.parse_args()
    rows: list[dict[str, Any]] = []
    for scene, file in CAPTURES.items():
        rtt = np.loadtxt(args.captures / file, delimiter=",", ndmin=1)
        rows.append({"scene": scene, "source": f"capture {file}", "seed": "", **summary(rtt)})
        cells = [
            WifiCell(
                stations=8,
                standard="802.11n",
                background_mbps=1.0,
                obs_bytes=2880,
                action_bytes=64,
                step_ms=20.0,
                seconds=args.seconds,
                seed=seed,
                **CELLS[scene],  # type: ignore[arg-type]
            )
            for seed in range(args.seeds)
        ]
        for cell, run in zip(cells, simulate_cells(cells), strict=True):
            rows.append(
                {
                    "scene": scene,
                    "source": f"ns-3 {cell.describe()}",
                    "seed": cell.seed,
                    **summary((run.up + run.down).ravel()),
                }
            )
        for row in rows[-len(cells) - 1 :]:
            print(
                f"{scene:<7} {row['source'][:60]:<60} seed {row['seed']!s:>2}: "
                f"p50 {row['rtt_p50_ms']:.2f} ms, p99 {row['rtt_p99_ms']:.1f} ms, "
                f"stalls {row['stall_share']:.2%}",
                flush=True,
            )
    args.out.parent.mkdir(parents=True, exist_ok=True)
    with open(args.out, "w", newline="", encoding="utf-8") as handle:
        writer = csv.DictWriter(handle, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
