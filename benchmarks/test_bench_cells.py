"""The cost of a simulated Wi-Fi cell (ns-3): simulating it ahead, and replaying it per tick.

* ``test_bench_cell_simulation``: an 802.11n cell with 1, 4 and 16 stations, each running a
  20 ms control loop and streaming 1 Mb/s beside it, simulated afresh (no cache) for
  ``SECONDS`` in one ns-3 process. Reports, per cell, the child's wall seconds per simulated
  second and per CartPole episode (500 ticks = 10 simulated seconds), the process's fixed
  start-up (ns-3's import) and, as the reference measured in the same run, what one
  CartPole episode costs through the shim with the ``wifi-normal`` profile: the
  simulation's cost per episode over the episode's own cost. Paid once per configuration
  (the run is cached).
* ``test_bench_cell_replay``: env steps per CPU-second of CartPole through the shim with
  the (cached) cell's profile over the same shim with ``wifi-normal`` (a Gaussian channel),
  rounds alternating; the ratio is the median over rounds of reference time / candidate
  time. Target: >= 0.9 (replaying a cell costs what a statistical channel costs).

``FLEETGYM_CACHE_DIR`` points at a temporary folder. The measured run:

``pytest benchmarks/test_bench_cells.py --benchmark-enable -s``
"""

from __future__ import annotations

import importlib.util
import time

import gymnasium as gym
import numpy as np
import pytest

from fleetgym.wrappers import NetworkShimWrapper
from fleetgym.wrappers.cells import WifiCell, simulate_cells
from fleetgym.wrappers.cells import simulate as cell_sim
from fleetgym.wrappers.profiles import cell_profile

pytestmark = pytest.mark.skipif(
    importlib.util.find_spec("ns3") is None,
    reason='needs ns-3\'s bindings: pip install "fleetgym[ns3]"',
)

#: A CartPole episode: 500 ticks of 20 ms.
EPISODE_TICKS, STEP_MS = 500, 20.0


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv(cell_sim.CACHE_ENV, str(tmp_path))
    monkeypatch.setattr(cell_sim, "_MEMORY", {})


def _episode_cpu(profile, ticks: int, seed: int = 0) -> float:
    env = NetworkShimWrapper(gym.make("CartPole-v1"), profile=profile)
    env.reset(seed=seed)
    start = time.process_time()
    for t in range(ticks):
        _, _, term, trunc, _ = env.step(t % 2)
        if term or trunc:
            env.reset()
    spent = time.process_time() - start
    env.close()
    return spent


def test_bench_cell_simulation(benchmark, cache):
    quick = benchmark.disabled
    stations, seconds = ((1,), 2.0) if quick else ((1, 4, 16), 10.0)
    cells = [
        WifiCell(stations=n, background_mbps=1.0, step_ms=STEP_MS, seconds=seconds)
        for n in stations
    ]
    started = time.perf_counter()
    runs = simulate_cells(cells, cache=False)
    total = time.perf_counter() - started
    simulated = sum(float(r.meta["wall_s"]) for r in runs)
    episode = float(np.median([_episode_cpu("wifi-normal", EPISODE_TICKS) for _ in range(3)]))
    benchmark.extra_info["startup_s"] = total - simulated
    benchmark.extra_info["reference_episode_s"] = episode
    print(
        f"\nns-3 process: {total:.1f} s, of which start-up {total - simulated:.1f} s; "
        f"reference: a CartPole episode through the shim (wifi-normal) {episode * 1e3:.1f} ms"
    )
    for cell, run in zip(cells, runs, strict=True):
        per_s = float(run.meta["wall_s"]) / cell.seconds
        per_episode = per_s * EPISODE_TICKS * STEP_MS / 1000.0
        benchmark.extra_info[f"stations_{cell.stations}_wall_per_sim_s"] = per_s
        benchmark.extra_info[f"stations_{cell.stations}_episode_over_reference"] = (
            per_episode / episode
        )
        print(
            f"{cell.stations:>3} stations: {per_s:.3f} s per simulated second, "
            f"{per_episode:.2f} s per episode = {per_episode / episode:,.0f}x the episode"
        )
        assert per_s > 0
    benchmark.pedantic(lambda: None, rounds=1, iterations=1)


def test_bench_cell_replay(benchmark, cache):
    ticks, rounds = (200, 1) if benchmark.disabled else (5_000, 15)
    profile = cell_profile(WifiCell(stations=4, background_mbps=1.0, seconds=10.0))
    _episode_cpu(profile, 1)  # simulates (or reads) the cell before the clock runs
    ref, got = [], []
    for r in range(rounds):
        ref.append(_episode_cpu("wifi-normal", ticks, seed=r))
        got.append(_episode_cpu(profile, ticks, seed=r))
    ratio = float(np.median([a / b for a, b in zip(ref, got, strict=True)]))
    benchmark.extra_info["ratio_median_paired"] = ratio
    benchmark.extra_info["candidate_steps_per_cpu_s"] = ticks / float(np.median(got))
    print(
        f"\ncell replay / wifi-normal = {ratio:.3f} (median of {rounds} rounds); "
        f"{ticks / np.median(got):,.0f} steps/cpu-s with the cell"
    )
    assert ratio > 0
    benchmark.pedantic(lambda: None, rounds=1, iterations=1)
