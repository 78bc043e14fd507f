"""``studies/ns3_robot_wifi.py``: the round-trip summary, and the results file's capture rows
recomputed from the captures themselves (where ``FLEETGYM_CAPTURES_DIR`` names their folder)."""

from __future__ import annotations

import csv
import os
from pathlib import Path

import numpy as np
import pytest

RESULTS = Path(__file__).resolve().parents[2] / "docs" / "results" / "data"
RESULTS_FILE = RESULTS / "ns3_robot_wifi_8df05a8.csv"


def test_the_summary_counts_losses_and_long_round_trips_as_stalls(load_study):
    study = load_study("ns3_robot_wifi")
    rtt = np.array([1.0, 2.0, 3.0, 150.0, np.inf])
    got = study.summary(rtt)
    assert got["packets"] == 5 and got["lost"] == pytest.approx(0.2)
    assert got["stall_share"] == pytest.approx(0.4)  # 150 ms and the lost one
    assert got["rtt_p50_ms"] == pytest.approx(2.5)


def test_the_results_files_capture_rows_are_the_captures(load_study):
    folder = os.environ.get("FLEETGYM_CAPTURES_DIR")
    if not folder or not Path(folder).is_dir():
        pytest.skip("FLEETGYM_CAPTURES_DIR: expected the real captures' folder, actual unset")
    study = load_study("ns3_robot_wifi")
    rows = {
        row["scene"]: row
        for row in csv.DictReader(RESULTS_FILE.open(encoding="utf-8"))
        if row["source"].startswith("capture")
    }
    for scene, file in study.CAPTURES.items():
        path = Path(folder) / file
        if not path.is_file():
            pytest.skip(f"{file}: expected in FLEETGYM_CAPTURES_DIR, actual absent")
        got = study.summary(np.loadtxt(path, delimiter=",", ndmin=1))
        for key in ("rtt_p50_ms", "rtt_p99_ms", "stall_share"):
            assert got[key] == pytest.approx(float(rows[scene][key]), rel=1e-12), (scene, key)
