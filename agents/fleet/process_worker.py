"""The worker-process side of :class:`~fleetgym.agents.fleet.process.ProcessFleet`.

What runs inside a worker process (:func:`worker_main`: build the slots' actors, then one
whole rollout per command) and the wire format both sides share: weights laid out in one
shared-memory segment (:func:`layout_weights`, :func:`array_view`), trajectories pickled
with their observations moved to a per-slot segment, and :func:`decode_message` for what a
worker sends. See :mod:`fleetgym.agents.fleet.process` for the protocol and the fault
semantics. Messages are pickled only on the local pipes between the fleet and the workers
it started itself, never on a network socket.

This module loads numpy and Gymnasium's vector utilities; torch and the actor modules load in
the worker process.
"""

from __future__ import annotations

import hashlib
import multiprocessing
import os
import pickle
import signal
import sys
import tempfile
import time
import traceback
from dataclasses import dataclass
from multiprocessing import shared_memory
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

import numpy as np
from gymnasium.vector.utils import CloudpickleWrapper

from fleetgym.agents.fleet.base import ActorFactory
from fleetgym.agents.types import Trajectory, Weights

# ---------------------------------------------------------------------------------------
# a fleet started by a main module without the ``__main__`` guard
# ---------------------------------------------------------------------------------------
UNGUARDED_MAIN = (
    "a worker process of the fleet imported the main module {script} (the spawn and "
    "forkserver start methods import it in every worker) and that import started a process "
    "fleet again: the script starts its fleet at module level. Put the fleet under "
    "`if __name__ == '__main__':` (or use context='fork')"
)


def _report_path() -> Path:
    """Where a worker reports an unguarded main module to its fleet.

    Keyed by the process tree's ``authkey`` (a worker inherits its parent's), so only the
    fleets of this tree read it.
    """
    key = hashlib.sha256(bytes(multiprocessing.current_process().authkey)).hexdigest()[:20]
    return Path(tempfile.gettempdir()) / f"fleetgym-unguarded-main-{key}.txt"


def _main_script() -> str:
    frame = sys._getframe()
    while frame is not None:
        if frame.f_globals.get("__name__") == "__mp_main__":
            return repr(str(frame.f_globals.get("__file__", "__main__")))
        frame = frame.f_back  # type: ignore[assignment]
    return repr(sys.argv[0]) if sys.argv and sys.argv[0] else "(the main module)"


def refuse_while_importing_main() -> None:
    """End a worker process that is importing the main module and reached a new fleet.

    Under ``spawn`` and ``forkserver`` a worker starts by importing the parent's main
    module (``multiprocessing`` marks the process as *inheriting* meanwhile). A script
    that builds a fleet at module level thus builds one again in every worker, which
    cannot start processes and would leave its shared memory behind. Called first thing
    by a process fleet's constructor: in such a worker it writes the explanation for the
    parent (:func:`take_unguarded_main_report`), prints it and exits the worker, before
    any segment or process exists. Elsewhere it does nothing.
    """
    if not getattr(multiprocessing.current_process(), "_inheriting", False):
        return
    message = UNGUARDED_MAIN.format(script=_main_script())
    path = _report_path()
    try:
        partial = path.with_suffix(f".{os.getpid()}.tmp")
        partial.write_text(message, encoding="utf-8")
        os.replace(partial, path)
    except OSError:  # the parent then reports a plain start-up crash
        pass
    sys.stderr.write(f"fleetgym: {message}\n")
    sys.stderr.flush()
    raise SystemExit(1)


def take_unguarded_main_report() -> str | None:
    """The explanation a worker left by :func:`refuse_while_importing_main` (then removed)."""
    path = _report_path()
    try:
        message = path.read_text(encoding="utf-8")[:2000]
        path.unlink()
    except OSError:
        return None
    return message or None


# ---------------------------------------------------------------------------------------
# shared memory helpers
# ---------------------------------------------------------------------------------------
def _attach(name: str) -> shared_memory.SharedMemory:
    """Open an existing segment without registering it with this process's tracker.

    The parent owns (and unlinks) every segment. Before Python 3.13, merely attaching
    registers the segment with the resource tracker, which would then unlink it, or warn
    about a leak, when a worker exits; hence the tracker is bypassed for the attach.
    """
    if sys.version_info >= (3, 13):
        return shared_memory.SharedMemory(name=name, track=False)  # type: ignore[call-arg]
    from multiprocessing import resource_tracker

    register = resource_tracker.register
    resource_tracker.register = lambda *args, **kwargs: None  # type: ignore[assignment]
    try:
        return shared_memory.SharedMemory(name=name)
    finally:
        resource_tracker.register = register  # type: ignore[assignment]


@dataclass(frozen=True)
class ArrayLayout:
    """Where one array sits in a shared segment."""

    key: str
    dtype: str
    shape: tuple[int, ...]
    offset: int


def layout_weights(weights: Weights) -> tuple[list[ArrayLayout], int]:
    layout, offset = [], 0
    for key, array in weights.items():
        # 64-byte alignment keeps every view aligned for any dtype.
        offset = (offset + 63) // 64 * 64
        layout.append(ArrayLayout(key, array.dtype.str, tuple(array.shape), offset))
        offset += array.nbytes
    return layout, max(offset, 1)


def array_view(buf: Any, dtype: str, shape: tuple[int, ...], offset: int = 0) -> np.ndarray:
    return np.ndarray(shape, dtype=np.dtype(dtype), buffer=buf, offset=offset)


# ---------------------------------------------------------------------------------------
# the worker process
# ---------------------------------------------------------------------------------------
class _Segments:
    """A worker's attachments, one per role; a new name replaces (and closes) the old."""

    def __init__(self) -> None:
        self._open: dict[str, shared_memory.SharedMemory] = {}

    def get(self, role: str, name: str) -> shared_memory.SharedMemory:
        current = self._open.get(role)
        if current is not None and current.name == name:
            return current
        if current is not None:
            current.close()
        self._open[role] = segment = _attach(name)
        return segment

    def close(self) -> None:
        for segment in self._open.values():
            try:
                segment.close()
            except BufferError:  # pragma: no cover - a view still alive at exit
                pass
        self._open.clear()


def build_actors(
    factory: ActorFactory, workload: Any, seed: int, slots: list[tuple[int, int]]
) -> dict[int, Any]:
    """The actors of one worker: ``{slot: factory(workload, slot, seed, incarnation)}``."""
    return {slot: factory(workload, slot, seed, incarnation) for slot, incarnation in slots}


def worker_main(
    index: int,
    build_actors: CloudpickleWrapper[Any],
    pipe: Connection,
    parent_pipe: Connection,
    torch_threads: int,
) -> None:
    """Worker loop: build the worker's actors, then run one whole rollout per command.

    Protocol (pickled tuples on the pipe): the worker first sends ``("ready", info)`` or
    ``("error", text)``. Then for ``("rollout", spec)`` it answers ``("result", payload)``
    or ``("error", text)`` and exits (the parent restarts it: an actor that raised
    mid-rollout may hold a half-stepped environment). ``("close", None)`` ends the loop.
    """
    parent_pipe.close()
    # The parent handles Ctrl-C and shuts workers down itself.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    segments = _Segments()
    try:
        import torch

        torch.set_num_threads(torch_threads)
        built = time.perf_counter()
        actors = build_actors()
        pipe.send(("ready", {"pid": os.getpid(), "build_s": time.perf_counter() - built}))
    except Exception:
        pipe.send(("error", traceback.format_exc()))
        return
    try:
        while True:
            try:
                command, spec = pipe.recv()
            except EOFError:  # the parent is gone
                break
            if command == "close":
                try:
                    pipe.send(("closed", None))
                except OSError:  # the parent stopped listening (a non-blocking stop)
                    pass
                break
            if command != "rollout":
                pipe.send(("error", f"expected command 'rollout' or 'close', actual {command!r}"))
                break
            try:
                payload = _run_rollouts(actors, spec, segments)
            except Exception:
                pipe.send(("error", traceback.format_exc()))
                break
            pipe.send_bytes(payload)
    finally:
        segments.close()


def _rollouts(
    actors: list[Any], weights: Weights, steps: int, policy_version: int
) -> tuple[list[Trajectory], list[float], list[float]]:
    """Run ``actors``; returns trajectories and per-actor wall and CPU seconds."""
    from fleetgym.agents.rollout import RolloutWorker, rollout_many

    if len(actors) > 1 and all(type(actor) is RolloutWorker for actor in actors):
        # Lockstep: one forward per step for all; time apportioned equally (same steps).
        cpu_started, started = time.process_time(), time.perf_counter()
        trajectories = rollout_many(actors, weights, steps, policy_version)
        share = 1.0 / len(actors)
        wall = (time.perf_counter() - started) * share
        cpu = (time.process_time() - cpu_started) * share
        return trajectories, [wall] * len(actors), [cpu] * len(actors)
    trajectories, walls, cpus = [], [], []
    for actor in actors:
        cpu_started, started = time.process_time(), time.perf_counter()
        trajectories.append(actor.rollout(weights, steps, policy_version))
        walls.append(time.perf_counter() - started)
        cpus.append(time.process_time() - cpu_started)
    return trajectories, walls, cpus


#: This worker's inference client, by server address (``inference="server"`` fleets).
_CLIENTS: dict[tuple[str, int], Any] = {}


def _served_rollouts(
    actors: list[Any], spec: dict[str, Any]
) -> tuple[list[Trajectory], list[float], list[float]]:
    """Run ``actors`` through the fleet's inference server; time apportioned equally."""
    from fleetgym.agents.inference import RemoteClient
    from fleetgym.agents.inference.rollout import served_rollout

    address = (str(spec["inference"][0]), int(spec["inference"][1]))
    client = _CLIENTS.get(address)
    if client is None:
        # Room for every actor's request plus a bootstrap value's, twice over: groups of
        # different sizes must always find a contiguous run of free slots.
        client = _CLIENTS[address] = RemoteClient(address, slots=2 * len(actors) + 2)
    cpu_started, started = time.process_time(), time.perf_counter()
    trajectories: list[Trajectory]
    if all(callable(getattr(actor, "served_rollout", None)) for actor in actors):
        # Actors with a served loop of their own (a token policy's) step themselves.
        steps, version = spec["steps"], spec["policy_version"]
        trajectories = [actor.served_rollout(client, steps, version) for actor in actors]
    else:
        # An actor may wrap the RolloutWorker the served rollout steps (``served_worker``)
        # and finish its trajectory afterwards (``finish``: e.g. relabel it, attach s_n).
        workers = [getattr(actor, "served_worker", actor) for actor in actors]
        served = served_rollout(
            workers, client, spec["steps"], spec["policy_version"], spec["groups"]
        )
        trajectories = [
            actor.finish(traj) if hasattr(actor, "finish") else traj
            for actor, traj in zip(actors, served, strict=True)
        ]
    share = 1.0 / len(actors)
    wall = (time.perf_counter() - started) * share
    cpu = (time.process_time() - cpu_started) * share
    return trajectories, [wall] * len(actors), [cpu] * len(actors)


def _run_rollouts(actors: dict[int, Any], spec: dict[str, Any], segments: _Segments) -> bytes:
    slots = spec["slots"]
    started = time.perf_counter()
    if spec.get("inference") is not None:
        read_s = 0.0
        trajectories, walls, cpus = _served_rollouts([actors[slot] for slot in slots], spec)
    else:
        weights_segment = segments.get("weights", spec["weights_name"])
        # Copies: the segment is rewritten next round while an actor may keep references.
        weights = {
            item.key: array_view(weights_segment.buf, item.dtype, item.shape, item.offset).copy()
            for item in spec["weights_layout"]
        }
        read_s = time.perf_counter() - started
        trajectories, walls, cpus = _rollouts(
            [actors[slot] for slot in slots], weights, spec["steps"], spec["policy_version"]
        )

    send_started = time.perf_counter()
    results = []
    for slot, trajectory, wall, cpu in zip(slots, trajectories, walls, cpus, strict=True):
        obs_meta = None
        obs = trajectory.obs
        name, capacity = spec["obs"].get(slot, (None, 0))
        if name is not None and isinstance(obs, np.ndarray) and obs.nbytes <= capacity:
            segment = segments.get(f"obs{slot}", name)
            view = array_view(segment.buf, obs.dtype.str, obs.shape)
            view[...] = obs
            del view
            obs_meta = (obs.dtype.str, tuple(obs.shape))
            trajectory.obs = np.empty(0, dtype=obs.dtype)  # travels through shared memory
        results.append((slot, trajectory, obs_meta, wall, cpu))
    payload = pickle.dumps(("result", results), protocol=pickle.HIGHEST_PROTOCOL)
    # The serialisation time is appended after the fact, so it covers the pickling itself.
    worker_transfer_s = read_s + (time.perf_counter() - send_started)
    return payload + pickle.dumps(worker_transfer_s, protocol=pickle.HIGHEST_PROTOCOL)


def decode_message(blob: bytes) -> tuple[str, Any]:
    """A worker message: a pickled ``(status, payload)``, optionally followed by a float."""
    import io

    stream = io.BytesIO(blob)
    status, payload = pickle.load(stream)
    if status == "result":
        payload = (payload, pickle.load(stream))
    return status, payload
