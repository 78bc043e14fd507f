"""The worker-pool bookkeeping of :class:`~fleetgym.agents.fleet.process.ProcessFleet`.

:class:`ProcessWorkerPool` holds the parent's view of the pool of worker processes: which
worker runs which slots, starting a worker (a fresh incarnation of its slots' actors),
reading its messages and turning a result into trajectories and timings, stopping or
killing it, the shared-memory segments for weights and observations, and ``close()``.
The round driver (dispatching rollouts, waiting for their results, faults, retries and
timeouts) is :class:`~fleetgym.agents.fleet.process.ProcessFleet`, which configures the
pool in its constructor; the worker-process side is
:mod:`fleetgym.agents.fleet.process_worker`. See :mod:`fleetgym.agents.fleet.process` for
the data paths and the fault semantics.
"""

from __future__ import annotations

import functools
import os
import signal
import time
from dataclasses import dataclass, field
from multiprocessing import shared_memory
from multiprocessing.connection import Connection
from typing import Any

import numpy as np
from gymnasium.vector.utils import CloudpickleWrapper, clear_mpi_env_vars

from fleetgym.agents.fleet.base import SlotProgress, SupervisedFleetBase
from fleetgym.agents.fleet.process_worker import (
    array_view,
    build_actors,
    decode_message,
    layout_weights,
    take_unguarded_main_report,
    worker_main,
)
from fleetgym.agents.types import ActorTiming, Trajectory, Weights
from fleetgym.errors import FleetError

#: Seconds ``close()`` waits for workers to exit on their own before killing them.
_CLOSE_GRACE_S = 2.0


@dataclass
class _Worker:
    index: int
    slots: list[int]
    process: Any  # multiprocessing.process.BaseProcess
    pipe: Connection
    started: float
    ready: bool = False
    startup_s: float = 0.0
    pid: int | None = None


@dataclass
class _WorkerRound(SlotProgress):
    """One worker's progress through a round."""

    slots: list[int] = field(default_factory=list)  # the worker's slots this round runs
    startup_s: float = 0.0
    sent: float = 0.0


class ProcessWorkerPool(SupervisedFleetBase):
    """The pool of worker processes behind :class:`~fleetgym.agents.fleet.process.ProcessFleet`.

    Models the parent side of an elastic pool of local worker processes, each running the
    actors of ``actors_per_worker`` consecutive slots: starting, messaging and stopping
    workers, and the shared memory they read weights from and write observations to. It
    runs no round itself; :class:`~fleetgym.agents.fleet.process.ProcessFleet` subclasses
    it, sets the attributes declared here in its constructor and drives the rounds.
    """

    actors_per_worker: int
    torch_threads: int
    shared_obs: bool
    _ctx: Any  # a multiprocessing context
    _workers: dict[int, _Worker]
    _weights_segment: shared_memory.SharedMemory | None
    _obs_segments: dict[int, shared_memory.SharedMemory]
    _obs_step_bytes: int | None

    @property
    def num_workers(self) -> int:
        """Live worker processes (active and parked)."""
        return sum(1 for w in self._workers.values() if w.process.is_alive())

    def worker_pids(self) -> dict[int, int]:
        """``{slot: pid}`` of the slots whose worker is live and ready (several slots share
        a pid when ``actors_per_worker > 1``; for monitoring and fault tests)."""
        return {
            slot: w.pid
            for _, w in sorted(self._workers.items())
            if w.ready and w.pid is not None and w.process.is_alive()
            for slot in w.slots
        }

    def close(self) -> None:
        """Stop every worker and free shared memory; never hangs (stragglers are killed)."""
        if self.closed:
            return
        self.closed = True
        for worker in self._workers.values():
            try:
                worker.pipe.send(("close", None))
            except (OSError, ValueError):  # already dead or pipe closed
                pass
        deadline = time.perf_counter() + _CLOSE_GRACE_S
        for index in list(self._workers):
            worker = self._workers[index]
            worker.process.join(max(0.0, deadline - time.perf_counter()))
            self._stop_worker(index, kill=True)
        for segment in [self._weights_segment, *self._obs_segments.values()]:
            if segment is not None:
                _release(segment)
        self._weights_segment = None
        self._obs_segments.clear()

    def __del__(self) -> None:
        if not getattr(self, "closed", True):
            try:
                self.close()
            except Exception:  # pragma: no cover - interpreter shutdown
                pass

    def _raise_if_main_unguarded(self) -> None:
        """Close the fleet and raise if a worker found the main module unguarded.

        Raises:
            FleetError: A worker died importing a main module that starts a fleet at
                module level (the message says how to fix the script).
        """
        report = take_unguarded_main_report()
        if report is None:
            return
        self.close()  # every worker stopped, every shared-memory segment released
        take_unguarded_main_report()  # a second worker's copy, written meanwhile
        raise FleetError(report)

    def _slots_of(self, index: int) -> list[int]:
        first = index * self.actors_per_worker
        return list(range(first, min(first + self.actors_per_worker, self.max_actors)))

    def _workers_for(self, num_actors: int) -> list[int]:
        return list(range(-(-num_actors // self.actors_per_worker)))

    def _stop_idle_workers(self, num_actors: int) -> None:
        needed = len(self._workers_for(num_actors))
        for index in [i for i in self._workers if i >= needed]:
            self._stop_worker(index, kill=False)

    def _observation_step_bytes(self) -> int | None:
        """Bytes of one observation of the workload (None: unknown, use the pipe)."""
        from fleetgym.agents.workloads import workload_spaces

        try:
            space, _ = workload_spaces(self.workload)
        except Exception:  # an env that cannot be built here: pipes still work
            return None
        shape, dtype = getattr(space, "shape", None), getattr(space, "dtype", None)
        if shape is None or dtype is None:
            return None
        return int(np.prod(shape, dtype=np.int64)) * np.dtype(dtype).itemsize

    def _ensure_worker(self, index: int) -> _Worker:
        worker = self._workers.get(index)
        if worker is not None and worker.process.is_alive():
            return worker
        if worker is not None:
            self._stop_worker(index, kill=True)
        slots = self._slots_of(index)
        incarnations = [(slot, self._next_incarnation(slot)) for slot in slots]
        build: CloudpickleWrapper[Any] = CloudpickleWrapper(
            functools.partial(
                build_actors, self.actor_factory, self.workload, self.seed, incarnations
            )
        )
        parent_pipe, child_pipe = self._ctx.Pipe()
        process = self._ctx.Process(  # type: ignore[attr-defined]
            target=worker_main,
            name=f"Worker<{type(self).__name__}>-{index}",
            args=(index, build, child_pipe, parent_pipe, self.torch_threads),
            daemon=True,
        )
        started = time.perf_counter()
        try:
            with clear_mpi_env_vars():
                process.start()
        except Exception:
            child_pipe.close()
            parent_pipe.close()
            self._raise_if_main_unguarded()  # e.g. a forkserver that died importing it
            raise
        child_pipe.close()
        worker = _Worker(index, slots, process, parent_pipe, started)
        self._workers[index] = worker
        return worker

    def _receive(self, worker: _Worker) -> tuple[str, Any]:
        """One message from a worker; a closed pipe reads as a crash."""
        try:
            received = time.perf_counter()
            blob = worker.pipe.recv_bytes()
            status, payload = decode_message(blob)
        except (EOFError, OSError):
            worker.process.join(0.5)
            return "crash", f"worker pipe closed (exit code {worker.process.exitcode})"
        if status == "ready":
            worker.ready = True
            worker.pid = payload["pid"]
            worker.startup_s = received - worker.started
        elif status == "result":
            payload = (*payload, time.perf_counter() - received)
        return status, payload

    def _collect(
        self, payload: Any, progress: _WorkerRound, publish_s: float
    ) -> list[tuple[int, Trajectory, ActorTiming]]:
        results, worker_transfer_s, receive_s = payload
        copied = time.perf_counter()
        for slot, trajectory, obs_meta, _, _ in results:
            if obs_meta is not None:
                dtype, shape = obs_meta
                view = array_view(self._obs_segments[slot].buf, dtype, shape)
                trajectory.obs = view.copy()
                del view
            elif self._obs_step_bytes is not None and isinstance(trajectory.obs, np.ndarray):
                # Did not fit: size the buffers for what actually came back.
                self._obs_step_bytes = max(
                    self._obs_step_bytes, trajectory.obs.nbytes // max(1, len(trajectory))
                )
        # The worker's messages carry all its actors: their transfer is shared equally.
        shared_s = (worker_transfer_s + receive_s + time.perf_counter() - copied) / len(results)
        return [
            (
                slot,
                trajectory,
                ActorTiming(
                    actor_id=slot,
                    startup_s=progress.startup_s if progress.cold else 0.0,
                    compute_s=float(compute_s),
                    transfer_s=float(publish_s + shared_s),
                    cold_start=progress.cold,
                    num_steps=len(trajectory),
                    cpu_s=float(cpu_s),
                ),
            )
            for slot, trajectory, _, compute_s, cpu_s in results
        ]

    def _stop_worker(self, index: int, *, kill: bool) -> None:
        """Stop and forget a worker. ``kill=False`` asks politely and does not wait."""
        worker = self._workers.pop(index, None)
        if worker is None:
            return
        if not kill:
            try:
                worker.pipe.send(("close", None))
            except (OSError, ValueError):
                pass
            # Reaped by multiprocessing when it exits (daemon); the pipe closes here.
            worker.pipe.close()
            return
        if worker.process.is_alive():
            try:
                os.kill(worker.process.pid, signal.SIGKILL)
            except ProcessLookupError:  # pragma: no cover - exited in between
                pass
        worker.process.join(5.0)
        worker.pipe.close()

    def _publish_weights(self, weights: Weights, steps: int, policy_version: int) -> dict[str, Any]:
        layout, size = layout_weights(weights)
        segment = self._weights_segment
        if segment is None or segment.size < size:
            if segment is not None:
                _release(segment)
            segment = self._weights_segment = shared_memory.SharedMemory(create=True, size=size)
        for item in layout:
            view = array_view(segment.buf, item.dtype, item.shape, item.offset)
            view[...] = weights[item.key]
            del view
        return {
            "weights_name": segment.name,
            "weights_layout": layout,
            "steps": steps,
            "policy_version": policy_version,
        }

    def _obs_segment(self, slot: int, steps: int) -> shared_memory.SharedMemory | None:
        if not self.shared_obs or self._obs_step_bytes is None:
            return None
        needed = steps * self._obs_step_bytes
        segment = self._obs_segments.get(slot)
        if segment is None or segment.size < needed:
            if segment is not None:
                _release(segment)
            segment = self._obs_segments[slot] = shared_memory.SharedMemory(
                create=True, size=needed
            )
        return segment


def _release(segment: shared_memory.SharedMemory) -> None:
    try:
        segment.close()
    finally:
        try:
            segment.unlink()
        except FileNotFoundError:  # pragma: no cover - already gone
            pass
