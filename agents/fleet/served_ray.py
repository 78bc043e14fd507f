"""A Ray fleet whose actors act through an inference server that is itself a Ray actor
(``make_fleet(..., backend="ray", inference="server")``).

The fleet starts one server actor (:class:`~fleetgym.agents.inference.ray_service.RayInferenceHost`,
a threaded Ray actor running an :class:`~fleetgym.agents.inference.InferenceServer`) next to
the :class:`~fleetgym.agents.fleet.ray_backend.RayFleet` machinery, which is unchanged:
slots, start-up, ``actor_timeout``, crash replacement, node loss. Only the actor a slot
holds differs: a :class:`ServedRayActor`, whose rollout asks the server for every action
(:func:`~fleetgym.agents.inference.rollout.served_rollout` through a
:class:`~fleetgym.agents.inference.ray_service.RayClient`). The round's weights go to the
server only (one ``set_weights`` call, swapped in between batches); the actors receive
none. Observations and answers are numpy arrays carried by Ray between Ray actors.

The round is the same :class:`~fleetgym.agents.types.RoundResult`, its trajectories
:class:`~fleetgym.agents.inference.rollout.ServedTrajectory` objects with the policy
version of each sample. A replaced actor reconnects under its slot's id.

A dead server actor (killed, its node lost) is replaced: the fleet notices it when the
round's weights do not reach it, or when a rollout faults (each fault asks the server
whether it is alive). It then starts a new server actor, publishes the round's weights to
it again, counts the replacement (:attr:`ServedRayFleet.server_restarts`, also in
:meth:`ServedRayFleet.metrics`) and goes on: the rollouts the death broke are the round's
ordinary faults, re-run (``max_retries``) on new actors that act through the new server.
Each rollout is passed the current server's handle in place of the weights, so an actor
whose rollout ended before the death reconnects at its next rollout instead of failing.

Ray is optional (``pip install fleetgym[ray]``) and imported only when the fleet is built.
"""

from __future__ import annotations

import logging
from typing import Any

from fleetgym.agents.fleet.base import ActorFactory, RoundParts, default_actor_factory
from fleetgym.agents.fleet.ray_backend import RayFleet
from fleetgym.agents.fleet.served import check_server_options, refuse_custom_actors
from fleetgym.agents.types import Trajectory, Weights
from fleetgym.errors import FleetError

logger = logging.getLogger(__name__)

#: Ray calls the server actor answers at once beyond one per actor (weights, metrics).
EXTRA_CONCURRENCY = 8


#: Observations a served actor may have in flight at the server.
CLIENT_SLOTS = 8


class ServedRayActor:
    """A slot's actor that runs its rollouts through the server actor.

    Args:
        worker: The slot's :class:`~fleetgym.agents.rollout.RolloutWorker`.
        server: The server actor's handle.
        actor_id: The slot (its client id at the server).
        generation: Which server this is (the fleet counts up with each replacement).
    """

    def __init__(self, worker: Any, server: Any, actor_id: int, generation: int = 0) -> None:
        from fleetgym.agents.inference.ray_service import RayClient

        self.worker = worker
        self.actor_id = actor_id
        self.generation = generation
        self.client = RayClient(server, actor_id, slots=CLIENT_SLOTS)

    def rollout(self, server: Any, steps: int, policy_version: int) -> Trajectory:
        """``steps`` env steps, every action from the server (which holds the round's
        weights). ``server`` is ``{"server": handle, "generation": n}``: the fleet's current
        server, reconnected to first if it was replaced since this actor's last rollout."""
        from fleetgym.agents.inference.ray_service import RayClient
        from fleetgym.agents.inference.rollout import served_rollout

        if isinstance(server, dict) and server.get("generation", self.generation) != (
            self.generation
        ):
            self.client.close()  # a goodbye to the dead server: nothing waits on it
            self.client = RayClient(server["server"], self.actor_id, slots=CLIENT_SLOTS)
            self.generation = int(server["generation"])
        return served_rollout([self.worker], self.client, steps, policy_version)[0]


class ServedActorFactory:
    """Builds a slot's :class:`ServedRayActor` inside its Ray actor (picklable: it holds
    the server actor's handle and its generation)."""

    def __init__(
        self, server: Any, factory: ActorFactory = default_actor_factory, generation: int = 0
    ) -> None:
        self.server = server
        self.factory = factory
        self.generation = generation

    def __call__(self, workload: Any, actor_id: int, seed: int, incarnation: int) -> Any:
        worker = self.factory(workload, actor_id, seed, incarnation)
        return ServedRayActor(worker, self.server, actor_id, self.generation)


class ServedRayFleet(RayFleet):
    """:class:`RayFleet` whose actors act through an inference server in a Ray actor.

    Args:
        workload: See :class:`RayFleet` (as are the other keyword arguments, except
            ``actor_factory``).
        inference_options: Keyword arguments of the
            :class:`~fleetgym.agents.inference.InferenceServer`.
        server_actor_options: Ray actor options of the server actor (default
            ``{"num_cpus": 0}``: it fits beside the fleet's actors; give it
            ``{"num_gpus": 1}`` and ``inference_options={"device": "cuda"}`` to serve
            from a GPU).

    Example:
        >>> from fleetgym.agents.fleet import make_fleet  # doctest: +SKIP
        >>> from fleetgym.agents.workloads import get_workload  # doctest: +SKIP
        >>> weights = get_workload("CartPole-v1").make_policy().get_weights()  # doctest: +SKIP
        >>> with make_fleet("CartPole-v1", "ray", max_actors=2, inference="server",
        ...                 init_kwargs={"num_cpus": 2}) as fleet:  # doctest: +SKIP
        ...     result = fleet.run_round(weights, 2, 16, policy_version=3)
        >>> {int(v) for t in result.trajectories for v in t.policy_versions}  # doctest: +SKIP
        {3}

    Raises:
        ImportError: If Ray is not installed.
        TypeError, ValueError: On an argument of the wrong type or range.
        fleetgym.errors.FleetError: If the server actor does not start within
            ``startup_timeout`` (or as :class:`RayFleet`); during a round, if a dead server
            actor's replacement does not start.
    """

    def __init__(
        self,
        workload: Any,
        *,
        inference_options: dict[str, Any] | None = None,
        server_actor_options: dict[str, Any] | None = None,
        **options: Any,
    ) -> None:
        refuse_custom_actors(options)
        server_options = check_server_options(inference_options)
        if server_actor_options is not None and not isinstance(server_actor_options, dict):
            raise TypeError(
                "server_actor_options: expected a dict or None, actual "
                f"{type(server_actor_options).__name__}"
            )
        super().__init__(workload, **options)
        from fleetgym.agents.inference.ray_service import RayInferenceHost

        actor_options = {"num_cpus": 0, **(server_actor_options or {})}
        self._host_cls = self._ray.remote(RayInferenceHost).options(
            max_restarts=0,
            max_concurrency=self.max_actors + EXTRA_CONCURRENCY,
            **actor_options,
        )
        self._server_options = server_options
        #: Dead server actors replaced so far.
        self.server_restarts = 0
        self._generation = -1
        self._round: tuple[Weights, int] | None = None  # the weights the server must hold
        try:
            self._start_server()
        except FleetError:
            self.close()
            raise

    def _start_server(self) -> None:
        """Start a server actor (the next generation); new actors act through it.

        Raises:
            FleetError: If it does not answer within ``startup_timeout``.
        """
        ray = self._ray
        self.server: Any = self._host_cls.remote(self.workload, self._server_options)
        try:
            ray.get(self.server.spec.remote(), timeout=self.startup_timeout)
        except Exception as exc:
            raise FleetError(
                f"the inference server actor: expected it started within startup_timeout="
                f"{self.startup_timeout} s, actual {type(exc).__name__}: {exc}"
            ) from exc
        self._generation += 1
        self._pointer = {"server": self.server, "generation": self._generation}
        self.actor_factory = ServedActorFactory(self.server, generation=self._generation)

    def _server_alive(self) -> bool:
        """Whether the server actor answers (False only if Ray reports it dead)."""
        try:
            self._ray.get(self.server.spec.remote(), timeout=self.actor_timeout)
        except self._ray.exceptions.RayActorError:
            return False
        return True

    def _replace_server(self, why: str) -> None:
        """Start a new server actor in the dead one's place and give it the round's weights.

        Raises:
            FleetError: If the new server does not start or take the weights.
        """
        logger.warning(
            "the inference server actor died (%s): starting a new one (replacement %d)",
            why, self.server_restarts + 1,
        )  # fmt: skip
        try:
            self._ray.kill(self.server, no_restart=True)
        except Exception:  # dead already
            logger.debug("ray.kill of the dead inference server actor failed", exc_info=True)
        self._start_server()
        self.server_restarts += 1
        if self._round is not None:
            weights, version = self._round
            self._ray.get(
                self.server.set_weights.remote(weights, version), timeout=self.actor_timeout
            )

    def _run_slots(
        self, weights: Weights, num_actors: int, steps_per_actor: int, policy_version: int
    ) -> RoundParts:
        """Weights to the server actor (a new one if it died), then the RayFleet round, whose
        actors are passed the server instead of weights."""
        self._round = (weights, policy_version)
        try:
            self._ray.get(
                self.server.set_weights.remote(weights, policy_version), timeout=self.actor_timeout
            )
        except self._ray.exceptions.RayActorError as exc:
            self._replace_server(f"it did not take the round's weights: {exc}")
        return super()._run_slots(self._pointer, num_actors, steps_per_actor, policy_version)

    def _dispatch(
        self, slot: int, p: Any, args: tuple[Any, ...], *, round_start: bool = False
    ) -> None:
        """Every rollout, a re-run too, goes to the current server."""
        super()._dispatch(slot, p, (self._pointer, *args[1:]), round_start=round_start)

    def _fault(
        self, slot: int, p: Any, exc: BaseException, failures: list[Any], args: tuple[Any, ...]
    ) -> bool:
        """A faulted rollout: if the server died, replace it before the slot re-runs."""
        if not self._server_alive():
            self._replace_server(f"a rollout of actor {slot} failed: {exc}")
        return super()._fault(slot, p, exc, failures, args)

    def _kill(self, slot: int) -> None:
        """Kill the slot's actor; the server drops its client (and its guests' clients)."""
        server = getattr(self, "server", None)
        if server is not None:
            guests = [g for g, (host, _) in self._shared.items() if host == slot]
            for client_id in (slot, *guests):
                try:
                    server.disconnect.remote(client_id)
                except Exception:  # the server actor is dead: nothing to drop
                    logger.debug("disconnect of client %d failed", client_id, exc_info=True)
        super()._kill(slot)

    def metrics(self) -> dict[str, Any]:
        """The inference server's metrics (see ``InferenceServer.metrics``) and
        ``server_restarts``, the dead server actors replaced (a new server's metrics
        start from zero)."""
        metrics = self._ray.get(self.server.metrics.remote(), timeout=self.actor_timeout)
        return {**metrics, "server_restarts": self.server_restarts}

    def close(self) -> None:
        """Kill the actors and the server actor; shut Ray down if this fleet started it."""
        server = getattr(self, "server", None)
        if not self.closed and server is not None:
            try:
                self._ray.kill(server, no_restart=True)
            except Exception:  # already dead
                logger.debug("ray.kill of the inference server actor failed", exc_info=True)
        super().close()
