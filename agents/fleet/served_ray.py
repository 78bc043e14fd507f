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
version of each sample. A replaced actor reconnects under its slot's id; the server actor
itself is not replaced: if it dies, every rollout of the round fails with an error fault.

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


class ServedRayActor:
    """A slot's actor that runs its rollouts through the server actor.

    Args:
        worker: The slot's :class:`~fleetgym.agents.rollout.RolloutWorker`.
        client: A :class:`~fleetgym.agents.inference.ray_service.RayClient`.
    """

    def __init__(self, worker: Any, client: Any) -> None:
        self.worker = worker
        self.client = client

    def rollout(self, weights: Weights, steps: int, policy_version: int) -> Trajectory:
        """``steps`` env steps, every action from the server (``weights`` unused: the
        server holds the round's weights)."""
        from fleetgym.agents.inference.rollout import served_rollout

        return served_rollout([self.worker], self.client, steps, policy_version)[0]


class ServedActorFactory:
    """Builds a slot's :class:`ServedRayActor` inside its Ray actor (picklable: it holds
    the server actor's handle)."""

    def __init__(self, server: Any, factory: ActorFactory = default_actor_factory) -> None:
        self.server = server
        self.factory = factory

    def __call__(self, workload: Any, actor_id: int, seed: int, incarnation: int) -> Any:
        from fleetgym.agents.inference.ray_service import RayClient

        worker = self.factory(workload, actor_id, seed, incarnation)
        return ServedRayActor(worker, RayClient(self.server, actor_id, slots=8))


class ServedRayFleet(RayFleet):
    """:class:`RayFleet` whose actors act through an inference server in a Ray actor.

    Example:
        >>> from fleetgym.agents.fleet import make_fleet  # doctest: +SKIP
        >>> from fleetgym.agents.workloads import get_workload  # doctest: +SKIP
        >>> weights = get_workload("CartPole-v1").make_policy().get_weights()  # doctest: +SKIP
        >>> with make_fleet("CartPole-v1", "ray", max_actors=2, inference="server",
        ...                 init_kwargs={"num_cpus": 2}) as fleet:  # doctest: +SKIP
        ...     result = fleet.run_round(weights, 2, 16, policy_version=3)
        >>> {int(v) for t in result.trajectories for v in t.policy_versions}  # doctest: +SKIP
        {3}

    Args:
        workload: See :class:`RayFleet` (as are the other keyword arguments, except
            ``actor_factory``).
        inference_options: Keyword arguments of the
            :class:`~fleetgym.agents.inference.InferenceServer`.
        server_actor_options: Ray actor options of the server actor (default
            ``{"num_cpus": 0}``: it fits beside the fleet's actors; give it
            ``{"num_gpus": 1}`` and ``inference_options={"device": "cuda"}`` to serve
            from a GPU).

    Raises:
        ImportError: If Ray is not installed.
        TypeError, ValueError: On an argument of the wrong type or range.
        fleetgym.errors.FleetError: If the server actor does not start within
            ``startup_timeout`` (or as :class:`RayFleet`).
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

        ray = self._ray
        actor_options = {"num_cpus": 0, **(server_actor_options or {})}
        host = ray.remote(RayInferenceHost).options(
            max_restarts=0,
            max_concurrency=self.max_actors + EXTRA_CONCURRENCY,
            **actor_options,
        )
        self.server: Any = host.remote(self.workload, server_options)
        try:
            ray.get(self.server.spec.remote(), timeout=self.startup_timeout)
        except Exception as exc:
            self.close()
            raise FleetError(
                f"the inference server actor: expected it started within startup_timeout="
                f"{self.startup_timeout} s, actual {type(exc).__name__}: {exc}"
            ) from exc
        self.actor_factory = ServedActorFactory(self.server)

    def _run_slots(
        self, weights: Weights, num_actors: int, steps_per_actor: int, policy_version: int
    ) -> RoundParts:
        """Weights to the server actor, then the RayFleet round with no weights to ship."""
        self._ray.get(
            self.server.set_weights.remote(weights, policy_version), timeout=self.actor_timeout
        )
        return super()._run_slots({}, num_actors, steps_per_actor, policy_version)

    def _kill(self, slot: int) -> None:
        """Kill the slot's actor; the server drops its client (and its guests' clients)."""
        server = getattr(self, "server", None)
        if server is not None:
            guests = [g for g, (host, _) in self._shared.items() if host == slot]
            for client_id in (slot, *guests):
                server.disconnect.remote(client_id)
        super()._kill(slot)

    def metrics(self) -> dict[str, Any]:
        """The inference server's metrics (see ``InferenceServer.metrics``)."""
        return self._ray.get(self.server.metrics.remote(), timeout=self.actor_timeout)  # type: ignore[no-any-return]

    def close(self) -> None:
        """Kill the actors and the server actor; shut Ray down if this fleet started it."""
        server = getattr(self, "server", None)
        if not self.closed and server is not None:
            try:
                self._ray.kill(server, no_restart=True)
            except Exception:  # already dead
                logger.debug("ray.kill of the inference server actor failed", exc_info=True)
        super().close()
