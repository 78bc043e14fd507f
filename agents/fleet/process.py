"""An elastic actor fleet of local worker processes, on Gymnasium's AsyncVectorEnv pattern.

Each worker process holds the actors of ``actors_per_worker`` consecutive slots (default
one: a process per actor), each actor a :class:`~fleetgym.agents.rollout.RolloutWorker`
(the slot's environment and its own copy of the policy). A worker with several slots
steps them in lockstep with one policy forward per step
(:func:`~fleetgym.agents.rollout.rollout_many`), so 32 actors on a few cores do not pay
32 processes' per-step inference overhead; their per-actor times are then apportioned
equally, as in the in-process batched mode, and a fault of the process is a fault of each
of its actors. The machinery follows :class:`gymnasium.vector.AsyncVectorEnv`: daemon
worker processes started from a ``multiprocessing`` context with
:func:`~gymnasium.vector.utils.clear_mpi_env_vars`, the actor builder shipped with
:class:`~gymnasium.vector.utils.CloudpickleWrapper`, one duplex pipe per worker carrying
``(command, data)`` messages answered by ``(status, payload)``, a worker that reports its
own exceptions instead of dying silently, and shared memory for observations. Where a
vector env steps all its envs once per command, a worker here runs a *whole rollout* per
command, and the pool is elastic (workers are started, parked and replaced one by one),
which AsyncVectorEnv's fixed ``num_envs`` cannot do.

The worker-process side (the worker loop and the shared-memory wire format) lives in
:mod:`fleetgym.agents.fleet.process_worker`; this module is the parent side's round driver
(dispatching rollouts, collecting results, faults and retries), on top of the pool
bookkeeping (starting, messaging and stopping workers, shared-memory segments) in
:mod:`fleetgym.agents.fleet.process_pool`.

Data paths:

* Weights are written once per round into one shared-memory segment; every worker reads
  them from there (the analogue of ``ray.put`` once per round), so a 32-actor round does
  not push 32 pickled copies of an Atari CNN through pipes.
* Each slot has a shared-memory buffer sized for ``steps x observation``: the worker
  writes its trajectory's observations there and only the small arrays (actions,
  rewards, ...) are pickled. 128 steps of 4x84x84 ``uint8`` Atari frames are 3.6 MB that
  never go through a pipe. If a trajectory's observations do not fit (a custom actor
  with another observation shape), they fall back to the pipe and the buffer grows for
  the next round.

Elasticity and faults:

* ``prewarm(n)`` starts the workers of slots ``0..n-1`` and waits until each is ready; a
  slot that was ready before a round is *warm* (``cold_start=False``, ``startup_s=0``). A
  slot started during a round is cold and its ``startup_s`` is the measured time from
  process start to a built actor.
* Shrinking (``resize(n)`` or a round with fewer actors) *parks* workers ``>= n``: they
  stay alive, idle, with their environments mid-episode, so growing again costs nothing.
  With ``stop_idle=True`` the extras are stopped instead (memory back, a cold start next
  time). Growing starts only the slots that have no live worker.
* A worker that dies (``crash``), raises (``error``) or does not answer within
  ``actor_timeout`` seconds (``timeout``, a hung or straggling actor: it is killed) is
  replaced by a fresh incarnation of its slots (new environment, seed from
  ``(fleet seed, slot, incarnation)``), and the slots' rollouts are run again on it with
  the same weights, up to ``max_retries`` times. The round then holds exactly one
  trajectory per slot plus an :class:`~fleetgym.agents.types.ActorFailure` per fault; a
  killed worker's partial rollout is discarded with its pipe, so nothing is counted
  twice. A slot that still fails is left out (a *partial* round, ``complete == False``)
  or raises, per ``on_incomplete``.

The default start method is ``forkserver`` with numpy, torch, Gymnasium and the actor
modules preloaded in the server: a new worker is a fork of an already-initialised
interpreter (tens of milliseconds), without the hazards of forking a parent whose torch
thread pools are running. Python has one forkserver per process: if other code started
it first (SB3's ``SubprocVecEnv`` does by default), its preload list stays and each new
worker imports torch itself (about a second more per start). Workers use one torch
thread each.
"""

from __future__ import annotations

import logging
import multiprocessing
import time
from multiprocessing import shared_memory
from multiprocessing.connection import Connection, wait
from typing import Any

from fleetgym.agents.fleet.base import ActorFactory, RoundParts
from fleetgym.agents.fleet.process_pool import ProcessWorkerPool, _Worker, _WorkerRound
from fleetgym.agents.fleet.process_worker import refuse_while_importing_main
from fleetgym.agents.fleet.waiting import WaitLog
from fleetgym.agents.types import ActorFailure, ActorTiming, Trajectory, Weights
from fleetgym.errors import FleetError
from fleetgym.validation import check_int

logger = logging.getLogger(__name__)

#: Modules the forkserver imports once, so forked workers start initialised. ``__main__``
#: (multiprocessing's own default) spares every worker re-importing the main script.
_PRELOAD = (
    "__main__",
    "numpy",
    "torch",
    "gymnasium",
    "fleetgym.agents.workloads",
    "fleetgym.agents.policies",
    "fleetgym.agents.rollout",
    "fleetgym.agents.fleet.process",
    "fleetgym.agents.fleet.process_worker",
)
_KIND_PRELOAD = {"atari": ("ale_py", "cv2"), "mujoco": ("mujoco",)}

#: Longest a round's wait blocks before it looks at the clock (for the wait log).
WAIT_POLL_S = 1.0


class ProcessFleet(ProcessWorkerPool):
    """An elastic pool of local actor processes on the AsyncVectorEnv pattern.

    Models a fleet of actors on one machine, each with its own environment and policy
    copy, running concurrently in worker processes: pre-warmed workers, resizing between
    rounds without rebuilding the pool, crashed/hung actors replaced within the round
    (fault reported, rollout re-run, nothing lost or duplicated), a per-actor timeout for
    stragglers, and shared memory for weights and observations. See the module docstring
    for the data paths and the fault semantics.

    Args:
        workload: A workload name or :class:`~fleetgym.agents.workloads.Workload`.
        max_actors: Largest fleet a round may ask for.
        seed: Fleet seed; slot ``i``'s ``k``-th incarnation seeds from ``(seed, i, k)``.
        actor_timeout: Seconds a worker may take for one round's rollouts before it is
            treated as hung, killed and replaced; None waits forever (crashes are still
            detected). Generous by default.
        startup_timeout: The same for starting a worker (process start to built actors).
        max_retries: Re-runs of a faulted slot within a round.
        on_incomplete: ``"partial"`` or ``"raise"`` when a slot fails after its retries.
        stop_idle: Stop workers above the requested size instead of parking them.
        actors_per_worker: Slots per worker process; above 1 a worker steps its slots in
            lockstep with one policy forward per step (fewer processes than actors).
        context: ``multiprocessing`` start method: ``"forkserver"`` (default), ``"spawn"``
            or ``"fork"`` (fast, but unsafe once the parent has run torch ops).
        torch_threads: torch threads per worker.
        shared_obs: Send trajectory observations through shared memory (else pipes).
        actor_factory: Builds a slot's actor (default: the real RolloutWorker).

    Example:
        >>> from fleetgym.agents.fleet import ProcessFleet
        >>> from fleetgym.agents.workloads import get_workload
        >>> weights = get_workload("CartPole-v1").make_policy().get_weights()
        >>> with ProcessFleet("CartPole-v1", max_actors=4, seed=0) as fleet:
        ...     _ = fleet.prewarm(2)
        ...     result = fleet.run_round(weights, num_actors=2, steps_per_actor=16)
        >>> result.complete, [t.obs.shape for t in result.trajectories]
        (True, [(16, 4), (16, 4)])
        >>> [timing.cold_start for timing in result.timings]
        [False, False]

    Raises:
        TypeError, ValueError: On an argument of the wrong type or range.
        FleetError: From :meth:`prewarm` or a round, if a worker died importing a main
            module that builds the fleet at module level (``spawn``/``forkserver`` import
            it in every worker): the message says to put the fleet under
            ``if __name__ == '__main__':``; the fleet is then closed (workers stopped,
            shared memory released). In the worker itself, this constructor ends the
            process before it creates anything.
    """

    def __init__(
        self,
        workload: Any,
        *,
        max_actors: int = 32,
        seed: int = 0,
        actor_timeout: float | None = 300.0,
        startup_timeout: float | None = 300.0,
        max_retries: int = 1,
        on_incomplete: str = "partial",
        stop_idle: bool = False,
        actors_per_worker: int = 1,
        context: str = "forkserver",
        torch_threads: int = 1,
        shared_obs: bool = True,
        actor_factory: ActorFactory | None = None,
    ) -> None:
        refuse_while_importing_main()
        super().__init__(
            workload,
            max_actors=max_actors,
            seed=seed,
            actor_factory=actor_factory,
            max_retries=max_retries,
            on_incomplete=on_incomplete,
            actor_timeout=actor_timeout,
            startup_timeout=startup_timeout,
        )
        if not isinstance(stop_idle, bool):
            raise TypeError(f"stop_idle: expected a bool, actual {type(stop_idle).__name__}")
        if not isinstance(shared_obs, bool):
            raise TypeError(f"shared_obs: expected a bool, actual {type(shared_obs).__name__}")
        methods = multiprocessing.get_all_start_methods()
        if context not in methods:
            raise ValueError(f"context: expected one of {methods}, actual {context!r}")
        self.stop_idle = stop_idle
        self.shared_obs = shared_obs
        self.actors_per_worker = check_int("actors_per_worker", actors_per_worker, 1)
        self.torch_threads = check_int("torch_threads", torch_threads, 1)
        self.context = context
        self._ctx = multiprocessing.get_context(context)
        if context == "forkserver":
            from multiprocessing import forkserver

            if getattr(forkserver._forkserver, "_forkserver_pid", None) is not None:
                # Started earlier by other code (e.g. SB3's SubprocVecEnv) with its own
                # preload list; it cannot be restarted under its children's feet.
                logger.info(
                    "a forkserver is already running: its preloaded modules are kept, so "
                    "each worker may import torch itself (slower starts)"
                )
            preload = list(_PRELOAD) + list(_KIND_PRELOAD.get(self.workload.kind, ()))
            # Only takes effect if this process has not started a forkserver yet.
            self._ctx.set_forkserver_preload(preload)
        self._workers: dict[int, _Worker] = {}
        self._weights_segment: shared_memory.SharedMemory | None = None
        self._obs_segments: dict[int, shared_memory.SharedMemory] = {}
        self._obs_step_bytes = self._observation_step_bytes() if shared_obs else None

    # -- public ---------------------------------------------------------------------------
    def prewarm(self, num_actors: int) -> float:
        """Start the workers of slots ``0..num_actors-1`` not running yet; wait until ready.

        Args:
            num_actors: How many slots to make warm, ``1..max_actors``; the workers of
                higher slots are left as they are (running or parked).

        Returns:
            Seconds it took (about 0 when every slot was already warm).

        Raises:
            FleetError: If a worker cannot start (the message carries its traceback).
        """
        num_actors = self._check_prewarm(num_actors)
        started = time.perf_counter()
        needed = self._workers_for(num_actors)
        for index in needed:
            self._ensure_worker(index)
        deadline = None if self.startup_timeout is None else started + self.startup_timeout
        waiting = {index for index in needed if not self._workers[index].ready}
        wait_log = WaitLog("startup_timeout", self.startup_timeout, logger)
        while waiting:
            timeout = None if deadline is None else max(0.0, deadline - time.perf_counter())
            by_object: dict[Any, int] = {}
            for index in waiting:
                by_object[self._workers[index].pipe] = index
                by_object[self._workers[index].process.sentinel] = index
            ready = wait(list(by_object), wait_log.timeout(timeout))
            if not ready and (deadline is None or time.perf_counter() < deadline):
                wait_log.report(len(waiting), len(needed), "worker processes to start")
                continue
            if not ready:
                for index in waiting:
                    self._stop_worker(index, kill=True)
                raise FleetError(
                    f"prewarm: expected workers {sorted(waiting)} ready within "
                    f"startup_timeout={self.startup_timeout} s, actual none answered"
                )
            ready.sort(key=lambda obj: not isinstance(obj, Connection))
            for obj in ready:
                index = by_object[obj]
                if index not in waiting:
                    continue
                status, payload = self._receive(self._workers[index])
                if status != "ready":
                    self._stop_worker(index, kill=True)
                    self._raise_if_main_unguarded()
                    raise FleetError(f"prewarm: worker {index} failed to start: {payload}")
                waiting.discard(index)
        return time.perf_counter() - started

    def resize(self, num_actors: int) -> float:
        """Make slots ``0..num_actors-1`` warm; park (or, with ``stop_idle``, stop) the rest.

        Args:
            num_actors: The fleet size to prepare for, ``1..max_actors``.

        Returns:
            Seconds it took.
        """
        started = time.perf_counter()
        self.prewarm(num_actors)
        if self.stop_idle:
            self._stop_idle_workers(num_actors)
        return time.perf_counter() - started

    def _run_slots(
        self,
        weights: Weights,
        num_actors: int,
        steps_per_actor: int,
        policy_version: int,
    ) -> RoundParts:
        """The slots' worker processes run concurrently; faults are replaced and re-run."""
        round_started = time.perf_counter()
        spec = self._publish_weights(weights, steps_per_actor, policy_version)
        publish_s = time.perf_counter() - round_started

        rounds: dict[int, _WorkerRound] = {}
        trajectories: dict[int, Trajectory] = {}
        timings: dict[int, ActorTiming] = {}
        failures: list[ActorFailure] = []
        for index in self._workers_for(num_actors):
            slots = [s for s in self._slots_of(index) if s < num_actors]
            worker = self._workers.get(index)
            warm = worker is not None and worker.ready and worker.process.is_alive()
            rounds[index] = _WorkerRound(slots=slots, deadline=0.0, cold=not warm)
            if not warm:
                if worker is not None and worker.ready:
                    # Died while parked: a fault too, though no rollout was in flight.
                    failures.extend(
                        ActorFailure(
                            actor_id=slot,
                            kind="crash",
                            message=f"worker died between rounds (exit code "
                            f"{worker.process.exitcode}); restarted before its rollout",
                            restarted=True,
                            rerun=False,
                        )
                        for slot in slots
                    )
                self._ensure_worker(index)

        for index, progress in rounds.items():
            if self._workers[index].ready:
                self._dispatch(index, progress, spec)
            else:
                progress.deadline = self._deadline(time.perf_counter(), starting=True)

        pending = set(rounds)
        wait_log = WaitLog("actor_timeout", self.actor_timeout, logger)
        try:
            while pending:
                self._serve(rounds, pending, spec, publish_s, trajectories, timings, failures)
                wait_log.report(
                    len(pending), len(rounds), "worker processes to return their rollouts"
                )
        except BaseException:
            # Interrupted (Ctrl-C, a bug): workers still mid-rollout would answer into the
            # next round, so they are killed; their slots restart cold next time.
            for index in pending:
                self._stop_worker(index, kill=True)
            raise

        if self.stop_idle:
            self._stop_idle_workers(num_actors)
        return trajectories, timings, failures

    # -- internals ------------------------------------------------------------------------
    def _serve(
        self,
        rounds: dict[int, _WorkerRound],
        pending: set[int],
        spec: dict[str, Any],
        publish_s: float,
        trajectories: dict[int, Trajectory],
        timings: dict[int, ActorTiming],
        failures: list[ActorFailure],
    ) -> None:
        """Wait for the next events of the pending workers and handle them."""
        # Woken at least every few seconds, so the caller can log a long wait.
        timeout = WAIT_POLL_S
        soonest = min(rounds[i].deadline for i in pending)
        if soonest != float("inf"):
            timeout = min(timeout, max(0.0, soonest - time.perf_counter()))
        by_object: dict[Any, tuple[int, _Worker]] = {}
        for index in pending:
            worker = self._workers[index]
            by_object[worker.pipe] = (index, worker)
            by_object[worker.process.sentinel] = (index, worker)
        ready = wait(list(by_object), timeout)
        # Pipes first: a worker that answered and then exited still delivered.
        ready.sort(key=lambda obj: not isinstance(obj, Connection))
        for obj in ready:
            index, worker = by_object[obj]
            # Skip events of a worker replaced earlier in this batch of events.
            if index not in pending or self._workers.get(index) is not worker:
                continue
            progress = rounds[index]
            if isinstance(obj, Connection) or worker.pipe.poll():
                status, payload = self._receive(worker)
            else:
                status, payload = "crash", f"exit code {worker.process.exitcode}"
            if status == "ready":
                progress.startup_s = worker.startup_s
                self._dispatch(index, progress, spec)
            elif status == "result":
                for slot, trajectory, timing in self._collect(payload, progress, publish_s):
                    trajectories[slot], timings[slot] = trajectory, timing
                progress.mark_rerun()
                pending.discard(index)
            else:
                if not worker.ready:
                    self._raise_if_main_unguarded()
                kind = status if status in ("crash", "error") else "crash"
                if not self._fault(index, progress, kind, str(payload), failures):
                    pending.discard(index)
        now = time.perf_counter()
        for index in list(pending):
            progress = rounds[index]
            if now >= progress.deadline:
                message = self._late_message(starting=progress.state == "starting")
                if not self._fault(index, progress, "timeout", message, failures):
                    pending.discard(index)

    def _dispatch(self, index: int, progress: _WorkerRound, spec: dict[str, Any]) -> None:
        worker = self._workers[index]
        obs = {}
        for slot in progress.slots:
            segment = self._obs_segment(slot, spec["steps"])
            if segment is not None:
                obs[slot] = (segment.name, segment.size)
        progress.state = "running"
        progress.sent = time.perf_counter()
        progress.deadline = self._deadline(progress.sent)
        try:
            worker.pipe.send(("rollout", {**spec, "slots": progress.slots, "obs": obs}))
        except (OSError, ValueError):
            # Dead already: the sentinel reports it on the next wait.
            pass
        logger.debug(
            "worker %d dispatched to pid %s (actors %s)", index, worker.pid, progress.slots
        )

    def _fault(
        self,
        index: int,
        progress: _WorkerRound,
        kind: str,
        message: str,
        failures: list[ActorFailure],
    ) -> bool:
        """Record a fault of each of the worker's actors, replace the worker if a retry is
        left; True if its slots go on."""
        self._stop_worker(index, kill=True)
        label = f"worker {index} (actors {progress.slots})"
        if not self._record_fault(progress.slots, progress, kind, message, failures, label):
            return False
        progress.state = "starting"
        self._ensure_worker(index)
        progress.deadline = self._deadline(time.perf_counter(), starting=True)
        return True
