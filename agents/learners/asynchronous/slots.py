"""The actor side of the asynchronous trainer: slots, threads and restarts.

:class:`AsyncActorSlots` builds each actor slot (with the actor factory, as a
:class:`~fleetgym.agents.learners.asynchronous.pipeline.ServedActor` of the in-process
inference server, or, with ``backend="process"``, as a
:class:`~fleetgym.agents.learners.asynchronous.process_actor.ProcessActor` whose
environment runs in a worker process), runs one rollout with the behaviour weights of the
moment, replaces an actor that raised (a new incarnation, the failure counted), runs a
slot's loop in its thread (admission, collection, hand-over to the pipeline) and stops the
threads; without threads it collects a batch in turn. The trainer
(:class:`~fleetgym.agents.learners.asynchronous.trainer.AsyncPPO`) owns one: the training
loop, the weights and the files are the trainer's, the actors are the slots'.
"""

from __future__ import annotations

import collections
import logging
import threading
import time
from collections.abc import Callable
from typing import Any

from fleetgym.agents.fleet.base import DEFAULT_ACTOR_TIMEOUT_S
from fleetgym.agents.learners.asynchronous.balancing import InstanceScheduler
from fleetgym.agents.learners.asynchronous.pipeline import (
    ServedActor,
    TrajectoryPipeline,
    with_next_obs,
)
from fleetgym.agents.learners.asynchronous.ray_actor import NoRoomError
from fleetgym.agents.types import Trajectory, Weights
from fleetgym.agents.workloads import Workload
from fleetgym.errors import FleetError

logger = logging.getLogger(__name__)

#: How an actor slot is built: ``factory(workload, actor_id, seed, incarnation)``, returning
#: an object with ``rollout(weights, steps, policy_version) -> Trajectory`` (and optionally
#: ``obs``, the observation after the last step, and ``close()``).
ActorFactory = Callable[[Workload, int, int, int], Any]
#: Restarts of one actor slot before the trainer gives up.
MAX_RESTARTS = 3
#: Seconds between looks at the Ray cluster's room while a slot is parked.
ROOM_POLL_S = 1.0
#: Seconds to wait for an actor thread to finish its rollout when stopping.
JOIN_TIMEOUT_S = 30.0


#: The method of :class:`AsyncActorSlots` that builds an actor slot, by where it runs
#: (:data:`fleetgym.agents.backends.BACKENDS`): ``"inprocess"``, a thread of the learner's
#: process; ``"process"``, a worker process of its own (its slot thread only waits for
#: it); ``"ray"``, a Ray actor on a node of a Ray cluster (see
#: :mod:`~fleetgym.agents.learners.asynchronous.ray_actor`).
_BUILDERS = {"inprocess": "_inprocess_actor", "process": "_process_actor", "ray": "_ray_actor"}


def _default_actor(workload: Workload, actor_id: int, seed: int, incarnation: int) -> Any:
    from fleetgym.agents.rollout import RolloutWorker

    return RolloutWorker(workload, actor_id, seed, incarnation)


class AsyncActorSlots:
    """The actor slots an :class:`~fleetgym.agents.learners.asynchronous.trainer.AsyncPPO` owns.

    Models ``n_actors`` actor slots that collect whole rollouts with the behaviour
    weights of the moment (``behaviour()``: the trainer's newest published weights, or
    those ``lag_injection`` updates older), each replaced by a new incarnation when it
    raises, up to :data:`MAX_RESTARTS` times in a row. With ``inference="server"`` the
    slots own the in-process inference server their actors act through. It trains
    nothing: the trainer hands it the trajectory pipeline, takes batches from it and
    publishes weights to :attr:`server`.

    Args:
        workload: What each slot's environment and policy are.
        seed: Seeds the slots' environments (with the slot and its incarnation).
        n_actors: Actor slots (one thread each).
        steps_per_actor: Env steps per rollout.
        batch_trajectories: Trajectories per batch (without threads: collected in turn).
        behaviour: Returns ``(policy_version, weights)`` for the rollout starting now.
        inference: ``"local"`` or ``"server"``.
        backend: ``"inprocess"``, ``"process"`` or ``"ray"``.
        actor_factory: Builds a slot's actor (see :data:`ActorFactory`).
        ray_group: The Ray cluster of ``backend="ray"`` (a
            :class:`~fleetgym.agents.learners.asynchronous.ray_actor.RayActorGroup`).
        envs_per_actor: Env instances each actor hosts (see
            :mod:`~fleetgym.agents.learners.asynchronous.balancing`); with more than one,
            or with ``load_balancing``, the actors collect in rounds through an
            :class:`~fleetgym.agents.learners.asynchronous.balancing.InstanceScheduler`
            and each instance is seeded as slot ``instance`` (its own thread-local env, worker
            process or Ray actor, whichever actor drives it).
        load_balancing: Idle actors steal queued instances from the actor furthest behind.
    """

    def __init__(
        self,
        workload: Workload,
        seed: int,
        n_actors: int,
        steps_per_actor: int,
        batch_trajectories: int,
        behaviour: Callable[[], tuple[int, Weights]],
        inference: str,
        backend: str,
        actor_factory: ActorFactory,
        ray_group: Any = None,
        envs_per_actor: int = 1,
        load_balancing: bool = False,
    ) -> None:
        self.workload = workload
        self.seed = seed
        self.n_actors = n_actors
        self.steps_per_actor = steps_per_actor
        self.batch_trajectories = batch_trajectories
        self._behaviour = behaviour
        self.inference = inference
        self.backend = backend
        self.actor_factory = actor_factory
        #: The Ray cluster side of ``backend="ray"`` (None otherwise).
        self.ray_group = ray_group
        #: Failed rollouts so far (each replaced by a new incarnation of its slot).
        self.actor_failures = 0
        #: The in-process inference server (``inference="server"``, once started).
        self.server: Any = None
        #: Where worker processes reach the server (``backend="process"``, ``inference="server"``).
        self.server_address: tuple[str, int] | None = None
        self._actors: dict[int, Any] = {}
        self._incarnations: dict[int, int] = collections.defaultdict(int)
        self._threads: list[threading.Thread] = []
        self._lock = threading.Lock()
        #: ``backend="ray"``: slots waiting for room on the cluster (a lost node), not running.
        self.parked: set[int] = set()
        #: The inference server's largest batch (``None``: ``n_actors``), longest wait of
        #: a batch's oldest request (ms, or ``"auto"``) and device; subclasses may set them.
        self.server_max_batch: int | None = None
        self.server_max_wait_ms: float | str = 5.0
        self.server_device = "cpu"
        #: ``backend="process"``: seconds a rollout may take before its worker is killed.
        self.actor_timeout: float = DEFAULT_ACTOR_TIMEOUT_S
        #: Env instances (``n_actors * envs_per_actor``) and their scheduler (None: one
        #: env per actor slot, no rounds: the plain loop).
        self.n_instances = n_actors * envs_per_actor
        self.scheduler: InstanceScheduler | None = None
        if envs_per_actor > 1 or load_balancing:
            self.scheduler = InstanceScheduler(n_actors, envs_per_actor, load_balancing)

    def _actor(self, slot: int) -> Any:
        if slot not in self._actors:
            incarnation = self._incarnations[slot]
            build = getattr(self, _BUILDERS[self.backend])
            self._actors[slot] = build(slot, incarnation)
            with self._lock:
                self.parked.discard(slot)
        return self._actors[slot]

    def _inprocess_actor(self, slot: int, incarnation: int) -> Any:
        """``backend="inprocess"``: the factory's actor, or one acting through the server."""
        if self.server is not None:
            return self._served_actor(slot, incarnation)
        return self.actor_factory(self.workload, slot, self.seed, incarnation)

    def _process_actor(self, slot: int, incarnation: int) -> Any:
        """``backend="process"``: the slot's environment in a worker process."""
        from fleetgym.agents.learners.asynchronous.process_actor import ProcessActor

        return ProcessActor(
            self.workload, slot, self.seed, incarnation, self.actor_factory,
            actor_timeout=self.actor_timeout, inference_address=self.server_address,
        )  # fmt: skip

    def _ray_actor(self, slot: int, incarnation: int) -> Any:
        """``backend="ray"``: the slot as a Ray actor of :attr:`ray_group`."""
        from fleetgym.agents.learners.asynchronous.ray_actor import RayActor

        return RayActor(
            self.ray_group, self.workload, slot, self.seed, incarnation, self.actor_factory
        )

    def start_server(self) -> None:
        if self.inference != "server" or self.server is not None:
            return
        from fleetgym.agents.inference import InferenceServer

        version, weights = self._behaviour()
        max_batch = self.n_actors if self.server_max_batch is None else self.server_max_batch
        self.server = InferenceServer(
            self._served_model(weights), max_batch=max_batch,
            max_wait_ms=self.server_max_wait_ms, device=self.server_device,
            policy_version=version,
        )  # fmt: skip
        if self.backend == "process":
            # Worker processes reach it on a loopback socket (observations in shared memory).
            self.server_address = self.server.listen()

    def _served_model(self, weights: Weights) -> Any:
        """Hook: what the inference server serves (the workload's policy with ``weights``)."""
        policy = self.workload.make_policy()
        policy.load_weights(weights)
        return policy

    def _served_actor(self, slot: int, incarnation: int) -> Any:
        """Hook: an actor slot acting through :attr:`server`."""
        return ServedActor(self.workload, slot, self.seed, incarnation, self.server)

    def prewarm(self) -> float:
        """Build every actor slot now instead of at its first rollout (in parallel).

        With ``backend="process"`` this starts the worker processes, so that ``learn``'s
        wall time (and its env steps/s) leaves their start-up out.

        Returns:
            Seconds it took.

        Raises:
            FleetError: If a slot cannot be built (the first error).
        """
        started = time.perf_counter()
        self.start_server()
        errors: list[BaseException] = []

        def build(slot: int) -> None:
            try:
                self._actor(slot)
            except Exception as error:  # reported below, from the calling thread
                errors.append(error)

        threads = [
            threading.Thread(target=build, args=(slot,), name=f"prewarm-{slot}", daemon=True)
            for slot in range(self.n_instances)
        ]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        if errors:
            raise FleetError(f"prewarm: expected every actor built, actual {errors[0]}") from (
                errors[0]
            )
        return time.perf_counter() - started

    def _collect(self, slot: int) -> Trajectory:
        """One whole rollout of a slot, with the behaviour weights of this moment."""
        actor = self._actor(slot)
        version, weights = self._behaviour()
        traj = actor.rollout(weights, self.steps_per_actor, version)
        return with_next_obs(traj, getattr(actor, "obs", None))

    def _replace(self, slot: int, error: BaseException) -> None:
        """Count a failed rollout and drop the slot's actor (the next one is a new incarnation)."""
        with self._lock:
            self.actor_failures += 1
            self._incarnations[slot] += 1
        logger.warning("actor %d failed (%s); restarting it", slot, error)
        self._discard(slot)

    def _discard(self, slot: int) -> None:
        """Close and forget a slot's actor (the next one is built afresh)."""
        actor = self._actors.pop(slot, None)
        close = getattr(actor, "close", None)
        if close is not None:
            try:
                close()
            except Exception:  # a broken actor may fail to close as well
                logger.debug("actor %d did not close cleanly", slot, exc_info=True)

    def _actor_loop(self, slot: int, pipe: TrajectoryPipeline) -> None:
        failures = 0
        while pipe.admit():
            try:
                traj = self._collect(slot)
            except Exception as error:
                pipe.cancel()
                if pipe.stopped:
                    # Cut short by the stop (an aborted learn kills worker processes): no fault.
                    return
                if isinstance(error, NoRoomError):
                    if not self._wait_for_room(slot, pipe, error):
                        return
                    continue
                self._replace(slot, error)
                failures += 1
                if failures > MAX_RESTARTS:
                    pipe.stop(error)
                    return
                continue
            failures = 0  # MAX_RESTARTS counts failures in a row: a whole rollout resets it
            pipe.put(traj)

    def _wait_for_room(self, slot: int, pipe: TrajectoryPipeline, error: BaseException) -> bool:
        """Park a slot the Ray cluster has no room for until it has; False once stopped."""
        with self._lock:
            self.parked.add(slot)
            running = self.n_actors - len(self.parked)
        logger.warning(
            "%s; the slot waits for room, training goes on with %d of %d actor slots",
            error, running, self.n_actors,
        )  # fmt: skip
        while not pipe.stopped and not self.ray_group.has_room(slot):
            with pipe.cond:
                pipe.cond.wait(ROOM_POLL_S)
        if pipe.stopped:  # still parked: the capacity stays lost until a build succeeds
            return False
        logger.warning("actor %d: the Ray cluster has room again; the slot restarts", slot)
        return True

    def _balanced_loop(self, lane: int, pipe: TrajectoryPipeline) -> None:
        """Actor ``lane``: run the instances the scheduler gives it, one rollout each."""
        scheduler = self.scheduler
        assert scheduler is not None
        failures = 0
        while True:
            instance = scheduler.acquire(lane, block=True)
            if instance is None:
                return
            if not pipe.admit():
                scheduler.abandon(lane, instance)
                return
            began = time.perf_counter()
            try:
                traj = self._collect(instance)
            except Exception as error:
                pipe.cancel()
                scheduler.abandon(lane, instance)
                if pipe.stopped:
                    return
                self._replace(instance, error)
                failures += 1
                if failures > MAX_RESTARTS:
                    pipe.stop(error)
                    scheduler.stop()
                    return
                continue
            failures = 0  # failures in a row, as in _actor_loop
            scheduler.release(lane, instance, len(traj), time.perf_counter() - began)
            pipe.put(traj)

    def start(self, pipe: TrajectoryPipeline) -> None:
        """Start one thread per slot, each collecting into ``pipe`` while it admits."""
        loop: Callable[[int, TrajectoryPipeline], None] = self._actor_loop
        if self.scheduler is not None:
            self.scheduler.resume()
            loop = self._balanced_loop
        self._threads = [
            threading.Thread(target=loop, args=(slot, pipe), name=f"actor-{slot}", daemon=True)
            for slot in range(self.n_actors)
        ]
        for thread in self._threads:
            thread.start()

    def stop(self, pipe: TrajectoryPipeline | None, abort: bool = False) -> None:
        """Stop and join the actor threads.

        With ``abort`` (``learn`` is raising), worker processes are killed first, so no
        thread waits for a rollout to finish, and then closed: no process outlives it.
        """
        if pipe is not None:
            pipe.stop()
        if self.scheduler is not None:
            self.scheduler.stop()
        if abort:
            for actor in list(self._actors.values()):
                kill = getattr(actor, "kill", None)
                if kill is not None:
                    kill()
        for thread in self._threads:
            thread.join(JOIN_TIMEOUT_S)
        alive = [t.name for t in self._threads if t.is_alive()]
        self._threads = []
        if alive:
            logger.error("actor threads still running after %.0f s: %s", JOIN_TIMEOUT_S, alive)
        if abort and self.backend != "inprocess":
            for slot in list(self._actors):
                # Not a fault, but the next worker of the slot gets a fresh seed stream.
                self._incarnations[slot] += 1
                self._discard(slot)

    def next_batch(self, pipe: TrajectoryPipeline | None) -> list[Trajectory]:
        if pipe is not None:
            return pipe.take(self.batch_trajectories)
        if self.scheduler is not None:
            return self._scheduled_batch(self.scheduler)
        batch: list[Trajectory] = []
        for i in range(self.batch_trajectories):
            slot = i % self.n_actors
            for attempt in range(MAX_RESTARTS + 1):
                try:
                    batch.append(self._collect(slot))
                    break
                except Exception as error:
                    self._replace(slot, error)
                    if attempt == MAX_RESTARTS:
                        raise FleetError(f"actor {slot} failed for good: {error}") from error
        return batch

    def _scheduled_batch(self, scheduler: InstanceScheduler) -> list[Trajectory]:
        """A batch without threads: the actors take turns, each its next instance."""
        scheduler.resume()
        batch: list[Trajectory] = []
        lane = 0
        while len(batch) < self.batch_trajectories:
            instance = None
            for offset in range(self.n_actors):
                instance = scheduler.acquire((lane + offset) % self.n_actors)
                if instance is not None:
                    lane = (lane + offset) % self.n_actors
                    break
            assert instance is not None  # nothing runs between turns: a round always advances
            began = time.perf_counter()
            for attempt in range(MAX_RESTARTS + 1):
                try:
                    traj = self._collect(instance)
                    break
                except Exception as error:
                    self._replace(instance, error)
                    if attempt == MAX_RESTARTS:
                        scheduler.abandon(lane, instance)
                        raise FleetError(
                            f"env instance {instance} failed for good: {error}"
                        ) from error
            scheduler.release(lane, instance, len(traj), time.perf_counter() - began)
            batch.append(traj)
            lane = (lane + 1) % self.n_actors
        return batch

    def close(self) -> None:
        """Close every slot's actor (environments, worker processes, Ray actors) and the
        server; shut down a Ray cluster the slots started."""
        for slot in list(self._actors):
            self._discard(slot)
        if self.ray_group is not None:
            self.ray_group.close()
        if self.server is not None:
            self.server.close()
            self.server = None
            self.server_address = None
