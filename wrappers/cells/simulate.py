"""Simulate cells ahead, once per configuration: :func:`simulate_cells` and its cache.

Stepping ns-3 from Python at every control tick would cost a Python-to-C++ round trip per
packet; instead a cell's whole stretch (``seconds`` of every station's control packets, both
ways) is simulated at once in a child process (:mod:`fleetgym.wrappers.cells.run_ns3`) and
kept as per-packet delays, which the shim replays through the trace machinery
(:class:`~fleetgym.wrappers.cells.channel.CellChannel`). The result depends only on the
configuration (its :meth:`~fleetgym.wrappers.cells.config.WifiCell.key`), so it is cached:
in memory for the process, and on disk under ``$FLEETGYM_CACHE_DIR/ns3`` (default
``~/.cache/fleetgym/ns3``) as ``<key>.npz`` (numpy arrays, read without pickle), written
atomically so that parallel runs sharing a cache never read half a file.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import tempfile
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from fleetgym.errors import DependencyNotInstalled, FleetgymError
from fleetgym.traces.trace_data import TraceData
from fleetgym.wrappers.cells.config import Cell, LteCell, WifiCell

__all__ = ["CellRun", "CellSimulationError", "cache_dir", "require_ns3", "simulate_cells"]

#: Environment variable naming the cache's root folder (the simulations go in its ``ns3/``).
CACHE_ENV = "FLEETGYM_CACHE_DIR"
#: Bumped whenever the simulated network changes, so that older cached runs are not reused.
SIMULATION_VERSION = 2

_LOCK = threading.Lock()
_MEMORY: dict[str, CellRun] = {}


class CellSimulationError(FleetgymError, RuntimeError):
    """ns-3 failed to simulate a cell; the message holds the end of its error output."""


@dataclass(frozen=True)
class CellRun:
    """One simulated cell: every station's control packets, both ways.

    Attributes:
        cell: The configuration simulated (``step_ms`` set).
        up: Observation packets' one-way delays in ms, stations x packets (``inf`` = lost).
        down: Action packets' one-way delays in ms, stations x packets.
        meta: ns-3's version, the simulation's wall seconds, the packets sent and delivered.
    """

    cell: Cell
    up: np.ndarray
    down: np.ndarray
    meta: dict[str, Any]

    def trace(self, direction: str, station: int = 0) -> TraceData:
        """One station's packets in one direction, as a trace (send times ``k * step_ms``).

        Args:
            direction: ``"uplink"`` (observations) or ``"downlink"`` (actions).
            station: The station (taken modulo the cell's stations); default 0.
        """
        rows = self.up if direction == "uplink" else self.down
        delay = rows[station % rows.shape[0]]
        step = float(self.cell.step_ms or 0.0)
        send = np.arange(delay.size, dtype=np.float64) * step
        return TraceData(
            send, delay.copy(), delay.size * step, source=f"ns-3 cell {self.cell.key()[:10]}"
        )

    def stats(self, stall_ms: float | None = None) -> dict[str, float]:
        """Loss, median, p99 and stall share of the round trip (station's up + down, same tick).

        Args:
            stall_ms: A round trip over this many ms, or lost, is a stall; None (default):
                ten control periods.
        """
        step = float(self.cell.step_ms or 0.0)
        limit = 10.0 * step if stall_ms is None else stall_ms
        rtt = (self.up + self.down).ravel()
        ok = rtt[np.isfinite(rtt)]
        up = self.up[np.isfinite(self.up)]
        return {
            "loss_up": float(np.mean(~np.isfinite(self.up))),
            "loss_down": float(np.mean(~np.isfinite(self.down))),
            "up_p50_ms": float(np.median(up)) if up.size else float("inf"),
            "up_p99_ms": float(np.quantile(up, 0.99)) if up.size else float("inf"),
            "rtt_p50_ms": float(np.median(ok)) if ok.size else float("inf"),
            "rtt_p99_ms": float(np.quantile(ok, 0.99)) if ok.size else float("inf"),
            "stall_share": float(np.mean(~(rtt <= limit))),
        }


def cache_dir() -> Path:
    """The folder of cached simulations: ``$FLEETGYM_CACHE_DIR/ns3`` or ``~/.cache/fleetgym/ns3``."""
    root = os.environ.get(CACHE_ENV) or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.join(Path.home(), ".cache"), "fleetgym"
    )
    return Path(root) / "ns3"


def require_ns3(feature: str = "an ns-3 cell") -> None:
    """Raise the ``pip install "fleetgym[ns3]"`` error when ns-3's bindings are missing."""
    if importlib.util.find_spec("ns3") is None:
        raise DependencyNotInstalled(feature, "ns3", "ns3")


def _file(cell: Cell) -> Path:
    return cache_dir() / f"{cell.key()[:32]}-v{SIMULATION_VERSION}.npz"


def _read(cell: Cell, path: Path) -> CellRun | None:
    try:
        with np.load(path, allow_pickle=False) as z:
            up, down = np.array(z["up_0"]), np.array(z["down_0"])
            meta = json.loads(str(z["meta_0"]))
            stored = json.loads(str(z["cell"]))
    except (OSError, KeyError, ValueError):
        return None  # absent or unreadable: simulate again (and replace it)
    if stored != cell.to_dict() or up.shape != (cell.stations, cell.packets()):
        return None
    return CellRun(cell, up, down, meta)


def _write(run: CellRun, path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.stem}.", suffix=".npz", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as handle:
            np.savez(
                handle,
                up_0=run.up,
                down_0=run.down,
                meta_0=np.array(json.dumps(run.meta)),
                cell=np.array(json.dumps(run.cell.to_dict())),
            )
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def _run_ns3(cells: Sequence[Cell]) -> list[CellRun]:
    require_ns3()
    with tempfile.TemporaryDirectory(prefix="fleetgym-ns3-") as tmp:
        spec, out = Path(tmp, "cells.json"), Path(tmp, "runs.npz")
        spec.write_text(json.dumps([c.to_dict() for c in cells]), encoding="utf-8")
        done = subprocess.run(
            [sys.executable, "-m", "fleetgym.wrappers.cells.run_ns3", str(spec), str(out)],
            capture_output=True,
            text=True,
            check=False,
        )
        if done.returncode != 0 or not out.exists():
            tail = "\n".join(done.stderr.strip().splitlines()[-15:])
            raise CellSimulationError(
                f"ns-3 failed to simulate {len(cells)} cell(s) (exit {done.returncode}):\n{tail}"
            )
        with np.load(out, allow_pickle=False) as z:
            return [
                CellRun(
                    cell,
                    np.array(z[f"up_{i}"]),
                    np.array(z[f"down_{i}"]),
                    json.loads(str(z[f"meta_{i}"])),
                )
                for i, cell in enumerate(cells)
            ]


def simulate_cells(cells: Sequence[Cell], *, cache: bool = True) -> list[CellRun]:
    """Every cell's run: from memory, from the disk cache, or simulated (in one ns-3 process).

    Args:
        cells: The configurations (:class:`WifiCell`, :class:`LteCell`), each with
            ``step_ms`` set (``cell.with_step(step_ms)``).
        cache: Read and write the disk cache (default True); False simulates afresh.

    Raises:
        DependencyNotInstalled: If a cell must be simulated and ns-3 is not installed.
        CellSimulationError: If ns-3 fails.
        ValueError: If a cell has no ``step_ms``.
    """
    runs: dict[int, CellRun] = {}
    todo: list[int] = []
    for i, cell in enumerate(cells):
        if not isinstance(cell, (WifiCell, LteCell)):
            raise TypeError(
                f"cells[{i}]: expected a WifiCell or LteCell, actual {type(cell).__name__}"
            )
        cell.packets()  # raises for a cell without a control period
        if cache:
            with _LOCK:
                hit = _MEMORY.get(cell.key())
            hit = hit or _read(cell, _file(cell))
            if hit is not None:
                runs[i] = hit
                continue
        todo.append(i)
    if todo:
        for i, run in zip(todo, _run_ns3([cells[i] for i in todo]), strict=True):
            runs[i] = run
            if cache:
                _write(run, _file(run.cell))
    if cache:
        with _LOCK:
            for run in runs.values():
                _MEMORY[run.cell.key()] = run
    return [runs[i] for i in range(len(cells))]
