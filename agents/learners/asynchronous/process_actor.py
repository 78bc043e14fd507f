"""Asynchronous actor slots in worker processes
(:class:`~fleetgym.agents.learners.asynchronous.trainer.AsyncPPO`, ``backend="process"``).

With ``backend="process"`` each actor slot steps its environment and runs its policy in a
worker process of its own, while the slot's thread in the learner's process only waits
for the result (outside the GIL). A slot is a :class:`ProcessActor`: a one-slot
:class:`~fleetgym.agents.fleet.process.ProcessFleet`, so the process machinery is the
fleet's (forkserver workers, weights and observations in shared memory, results on the
local pipes between the fleet and the workers it started itself, nothing on a network
socket).

Identity: the worker builds the slot's actor with the trainer's own ``(actor_id, seed,
incarnation)``, so slot ``i`` steps the same environment with the same random stream as
in thread mode; inside the one-slot fleet the trajectory is labelled slot 0 and relabelled
``i`` on its way back. The worker also attaches ``s_n`` (the observation after the last
step, for value recomputation) to the trajectory.

Faults: the fleet runs without retries and raises on any fault (a worker killed, hung past
``actor_timeout`` or raising), so a killed worker's partial rollout is discarded with its
pipe and the slot's rollout raises;
:class:`~fleetgym.agents.learners.asynchronous.slots.AsyncActorSlots`
then counts the failure and builds the next incarnation (a new worker process).
"""

from __future__ import annotations

import functools
import logging
import os
import signal
from typing import Any

from fleetgym.agents.fleet.base import DEFAULT_ACTOR_TIMEOUT_S, DEFAULT_STARTUP_TIMEOUT_S
from fleetgym.agents.fleet.process import ProcessFleet
from fleetgym.agents.fleet.served import served_round_spec
from fleetgym.agents.types import Trajectory, Weights
from fleetgym.agents.workloads import Workload
from fleetgym.errors import FleetError

logger = logging.getLogger(__name__)


class _SlotActor:
    """Inside the worker: the slot's actor, labelled slot 0 of its one-slot fleet.

    With an inference server the worker steps :attr:`served_worker` itself (its actions come
    from the server) and hands the trajectory to :meth:`finish`, or, for an actor with a
    served loop of its own (``served_rollout(client, steps, version)``: a token actor), runs
    that loop.
    """

    def __init__(self, actor: Any) -> None:
        self.actor = actor

    @property
    def served_worker(self) -> Any:
        """The :class:`~fleetgym.agents.rollout.RolloutWorker` a served rollout steps."""
        return self.actor

    def finish(self, trajectory: Trajectory) -> Trajectory:
        """Attach ``s_n`` (for value recomputation) and label the trajectory slot 0."""
        from fleetgym.agents.learners.asynchronous.pipeline import with_next_obs

        trajectory = with_next_obs(trajectory, getattr(self.actor, "obs", None))
        trajectory.actor_id = 0
        return trajectory

    def rollout(self, weights: Weights, steps: int, policy_version: int) -> Trajectory:
        return self.finish(self.actor.rollout(weights, steps, policy_version))

    @property
    def served_rollout(self) -> Any:
        """The slot actor's own served loop, finished (``None`` if it has none: the worker
        then steps :attr:`served_worker` through the fleet's served rollout)."""
        own = getattr(self.actor, "served_rollout", None)
        if own is None:
            return None
        return lambda client, steps, version: self.finish(own(client, steps, version))


class _ServedSlotFleet(ProcessFleet):
    """A one-slot :class:`ProcessFleet` whose worker acts through the trainer's inference
    server at ``address`` (a loopback socket, observations in shared memory).

    The trainer publishes the weights to its server after every update; a rollout request
    carries no weights, and each sample records the version that answered it.
    """

    def __init__(self, workload: Workload, address: tuple[str, int], **options: Any) -> None:
        super().__init__(workload, **options)
        self.address = address

    def _publish_weights(self, weights: Weights, steps: int, policy_version: int) -> dict[str, Any]:
        return served_round_spec(self.address, steps, policy_version, groups=1)


def _build_slot_actor(
    factory: Any,
    actor_id: int,
    incarnation: int,
    workload: Workload,
    fleet_slot: int,
    seed: int,
    fleet_incarnation: int,
) -> _SlotActor:
    """The fleet's actor factory: builds the trainer's slot, not the fleet's slot 0.

    ``fleet_incarnation`` is ignored: a :class:`ProcessActor` never uses a worker the
    fleet restarted (it raises instead), so every worker it uses is incarnation 0.
    """
    return _SlotActor(factory(workload, actor_id, seed, incarnation))


class ProcessActor:
    """One asynchronous actor slot whose environment and rollouts run in a worker process.

    Models an actor process of an asynchronous actor-learner trainer: a persistent
    environment and policy copy in its own process, sent the behaviour weights with each
    rollout request (through shared memory) and returning whole trajectories only.

    Args:
        workload: The workload.
        actor_id: The trainer's slot index.
        seed: The trainer's seed.
        incarnation: Restarts of this slot so far.
        factory: Builds the slot's actor inside the worker,
            ``factory(workload, actor_id, seed, incarnation)`` (picklable by cloudpickle).
        actor_timeout: Seconds a rollout may take before the worker is killed (a fault).
        startup_timeout: Seconds the worker may take to start.
        inference_address: The ``(host, port)`` of an
            :class:`~fleetgym.agents.inference.InferenceServer` listening there: the
            worker then sends its observations there instead of running a policy copy, and
            the weights passed to :meth:`rollout` are ignored (None: local inference).

    Example:
        >>> from fleetgym.agents.learners.asynchronous.slots import _default_actor
        >>> from fleetgym.agents.workloads import get_workload
        >>> workload = get_workload("CartPole-v1")
        >>> weights = workload.make_policy().get_weights()
        >>> actor = ProcessActor(workload, 3, 0, 0, _default_actor)
        >>> traj = actor.rollout(weights, 16, policy_version=5)
        >>> len(traj), traj.actor_id, traj.policy_version, traj.next_obs.shape
        (16, 3, 5, (4,))
        >>> actor.close()

    Raises:
        FleetError: If the worker cannot start.
    """

    def __init__(
        self,
        workload: Workload,
        actor_id: int,
        seed: int,
        incarnation: int,
        factory: Any,
        actor_timeout: float | None = DEFAULT_ACTOR_TIMEOUT_S,
        startup_timeout: float | None = DEFAULT_STARTUP_TIMEOUT_S,
        inference_address: tuple[str, int] | None = None,
    ) -> None:
        self.actor_id = actor_id
        self.incarnation = incarnation
        fleet_class: Any = ProcessFleet
        if inference_address is not None:
            fleet_class = functools.partial(_ServedSlotFleet, address=inference_address)
        self.fleet = fleet_class(
            workload,
            max_actors=1,
            seed=seed,
            actor_timeout=actor_timeout,
            startup_timeout=startup_timeout,
            max_retries=0,
            on_incomplete="raise",
            actor_factory=functools.partial(_build_slot_actor, factory, actor_id, incarnation),
        )
        try:
            self.fleet.prewarm(1)
        except BaseException:
            self.fleet.close()
            raise
        #: The worker's process id (for monitoring and fault tests).
        self.pid: int | None = self.fleet.worker_pids().get(0)

    def rollout(self, weights: Weights, steps: int, policy_version: int) -> Trajectory:
        """One whole rollout in the worker process.

        Args:
            weights: The behaviour weights to act with, sent through shared memory
                (ignored with an inference server).
            steps: Steps to run (>= 1): env steps, or decisions for a token actor.
            policy_version: The version of ``weights``, recorded as the trajectory's
                ``policy_version``.

        Returns:
            The trajectory, labelled with this slot's ``actor_id`` and carrying
            ``next_obs``.

        Raises:
            FleetError: If the worker died, hung or raised (nothing of it is returned).
        """
        result = self.fleet.run_round(weights, 1, steps, policy_version=policy_version)
        if result.failures:
            # The worker died between rollouts and the fleet restarted it: its slot is
            # replaced by the trainer instead, so every incarnation has its own seed.
            raise FleetError(
                f"actor {self.actor_id}: expected its worker process alive, actual "
                f"{result.failures[0].message}"
            )
        trajectory = result.trajectories[0]
        trajectory.actor_id = self.actor_id
        return trajectory

    def kill(self) -> None:
        """SIGKILL the worker now (safe from another thread: its rollout then raises)."""
        if self.pid is None or self.fleet.closed:
            return
        try:
            os.kill(self.pid, signal.SIGKILL)
        except ProcessLookupError:  # already gone
            pass

    def close(self) -> None:
        """Stop the worker process and free its shared memory (idempotent)."""
        self.fleet.close()


__all__ = ["ProcessActor"]
