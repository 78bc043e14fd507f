"""The table of the scheduled-actions study: ``fleetgym profiles assess`` reports, one folder
per network and seed, summarised per network.

Each ``DIR/<network>-s<seed>/assess_*.json`` is one seed's assessment (its clean policy, its
episodes). Per network the table gives, over seeds, the mean ± std of each seed's mean
return for the clean policy, random actions, the policy behind the network uncompensated,
with the predictive compensation and with scheduled chunks (``D`` and ``k`` as chosen for
seed 0), and how many seeds keep >= 90 % of the clean policy's margin over random with the
chunks. It writes ``--csv`` (one row per network and seed) and prints the Markdown table.

Run (after the assessments, see docs/results/scheduled.md)::

    python examples/scheduled_actions_table.py runs/study/out --csv scheduled.csv
"""

from __future__ import annotations

import argparse
import csv
import json
import re
import subprocess
from collections import defaultdict
from pathlib import Path

import numpy as np

KEYS = ("clean", "random", "delivered", "predictive", "scheduled")


def _commit() -> str:
    try:
        out = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, check=True
        )
        return out.stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("folder", type=Path)
    parser.add_argument("--csv", type=Path, default=None)
    parser.add_argument("--commit", default=None, help="the commit measured (default: HEAD)")
    args = parser.parse_args()
    commit = args.commit or _commit()
    rows = []
    for path in sorted(args.folder.glob("*-s*/assess_*.json")):
        match = re.fullmatch(r"(.+)-s(\d+)", path.parent.name)
        if match is None:
            continue
        report = json.loads(path.read_text())
        returns = report.get("returns", {})
        if "scheduled" not in returns:
            continue
        row = {"network": match[1], "seed": int(match[2]), "env": report["env"]}
        for key in KEYS:
            row[key] = returns[key]["mean"]
        schedule = report["schedule"]
        row.update(
            delay=schedule["delay"],
            chunk=schedule["chunk"],
            kept_scheduled=(returns["scheduled"]["mean"] - returns["random"]["mean"])
            / max(returns["clean"]["mean"] - returns["random"]["mean"], 1e-9),
            episodes=report["episodes"],
            commit=commit,
        )
        rows.append(row)
    if args.csv is not None:
        with open(args.csv, "w", newline="") as handle:
            writer = csv.DictWriter(handle, fieldnames=list(rows[0]))
            writer.writeheader()
            writer.writerows(rows)
    groups: dict[str, list[dict]] = defaultdict(list)
    for row in rows:
        groups[row["network"]].append(row)
    print(
        "| network | env | seeds | clean | random | uncompensated | predictive | "
        "scheduled chunks | D, k | seeds keeping 90 % |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|")
    for network, group in groups.items():
        cells = []
        for key in KEYS:
            values = np.array([r[key] for r in group])
            cells.append(f"{values.mean():.0f} ± {values.std():.0f}")
        first = min(group, key=lambda r: r["seed"])
        kept = sum(r["kept_scheduled"] >= 0.9 for r in group)
        print(
            f"| {network} | {first['env']} | {len(group)} | "
            + " | ".join(cells)
            + f" | {first['delay']}, {first['chunk']} | {kept} / {len(group)} |"
        )


if __name__ == "__main__":
    main()
