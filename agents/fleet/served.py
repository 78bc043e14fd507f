"""Fleets whose actors act through an inference server (``make_fleet(..., inference="server")``).

Each backend keeps its own machinery (slots, seeds, elasticity, faults, round assembly) and
changes one thing: where the policy runs. The fleet owns an
:class:`~fleetgym.agents.inference.InferenceServer` serving the workload's policy; a round
swaps in the round's weights (``set_weights(weights, policy_version)``, between batches)
and every actor sends its observations there instead of running its own policy copy:

* :class:`ServedInProcessFleet`: one thread per actor in this process, each a client of
  the server (threads really run concurrently here: the per-actor times overlap, and the
  round's wall time is that of the slowest actor, not the sum).
* :class:`ServedProcessFleet`: the worker processes of :class:`ProcessFleet`, each a
  :class:`~fleetgym.agents.inference.RemoteClient` (observations through shared memory);
  a worker with several actors double-buffers them in ``groups``.

On Ray the server is a Ray actor (:mod:`fleetgym.agents.fleet.served_ray`).

The round is the same :class:`~fleetgym.agents.types.RoundResult` with every field filled;
its trajectories are :class:`~fleetgym.agents.inference.rollout.ServedTrajectory` objects,
which add ``policy_versions``, the version that chose each sample. How results differ
from the synchronous path (float rounding of batched forward passes only) is stated in
:mod:`fleetgym.agents.inference.rollout`.
"""

from __future__ import annotations

import queue
import threading
import time
from dataclasses import dataclass
from typing import Any

from fleetgym.agents.fleet.base import RoundParts, SlotProgress
from fleetgym.agents.fleet.inprocess import InProcessFleet
from fleetgym.agents.fleet.process import ProcessFleet
from fleetgym.agents.types import ActorFailure, ActorTiming, Trajectory, Weights
from fleetgym.validation import check_int

#: Keyword arguments of :class:`~fleetgym.agents.inference.InferenceServer` that
#: ``inference_options`` may set.
SERVER_OPTIONS = (
    "max_batch",
    "max_wait_ms",
    "device",
    "latency_budget_ms",
    "target_utilisation",
    "max_client_slots",
)


def check_server_options(options: dict[str, Any] | None) -> dict[str, Any]:
    """``inference_options`` as a dict of :data:`SERVER_OPTIONS` keys.

    Raises:
        TypeError: On another key, or options that are not a dict.
    """
    if options is not None and not isinstance(options, dict):
        raise TypeError(
            f"inference_options: expected a dict or None, actual {type(options).__name__}"
        )
    options = dict(options or {})
    unknown = sorted(set(options) - set(SERVER_OPTIONS))
    if unknown:
        raise TypeError(
            f"inference_options: expected keys among {SERVER_OPTIONS}, actual unknown {unknown}"
        )
    return options


def served_round_spec(
    address: tuple[str, int], steps: int, policy_version: int, groups: int
) -> dict[str, Any]:
    """The round request of a process fleet whose workers act through the server at
    ``address``: no weights (the server holds them), the server's address instead."""
    return {
        "weights_name": None,
        "weights_layout": [],
        "steps": steps,
        "policy_version": policy_version,
        "inference": (str(address[0]), int(address[1])),
        "groups": groups,
    }


def _make_server(workload: Any, options: dict[str, Any] | None) -> Any:
    from fleetgym.agents.inference import InferenceServer

    return InferenceServer(workload.make_policy(), **check_server_options(options))


def refuse_custom_actors(options: dict[str, Any]) -> None:
    if options.get("actor_factory") is not None:
        raise ValueError(
            "actor_factory: expected the default actor factory (served actors step "
            "RolloutWorkers), actual a custom actor_factory"
        )


@dataclass
class _Attempt:
    """One thread's try at a slot's rollout, and what it brought back."""

    actor: Any
    client: Any
    trajectory: Trajectory | None = None
    error: str | None = None
    compute_s: float = 0.0
    cpu_s: float = 0.0


def _run_attempt(
    slot: int, attempt: _Attempt, steps: int, policy_version: int, done: queue.Queue[Any]
) -> None:
    """A served actor thread's body: one rollout through the attempt's client."""
    from fleetgym.agents.inference.rollout import served_rollout

    cpu_started, started = time.thread_time(), time.perf_counter()
    try:
        trajectories = served_rollout([attempt.actor], attempt.client, steps, policy_version)
        attempt.trajectory = trajectories[0]
    except Exception as exc:
        attempt.error = f"{type(exc).__name__}: {exc}"
    attempt.compute_s = time.perf_counter() - started
    attempt.cpu_s = time.thread_time() - cpu_started
    done.put((slot, attempt))


class ServedInProcessFleet(InProcessFleet):
    """:class:`InProcessFleet` whose actors run concurrently in threads and act through an
    inference server in this process.

    Args:
        workload: See :class:`InProcessFleet` (as are the other keyword arguments, except
            ``batched`` and ``actor_factory``, which served actors do not take).
        inference_options: Keyword arguments of the
            :class:`~fleetgym.agents.inference.InferenceServer` (``max_batch``,
            ``max_wait_ms``, ...).

    Example:
        >>> from fleetgym.agents.fleet import make_fleet
        >>> from fleetgym.agents.workloads import get_workload
        >>> weights = get_workload("CartPole-v1").make_policy().get_weights()
        >>> with make_fleet("CartPole-v1", "inprocess", max_actors=4, inference="server") as fleet:
        ...     result = fleet.run_round(weights, 3, 16, policy_version=7)
        >>> [t.policy_versions.tolist() == [7] * 16 for t in result.trajectories]
        [True, True, True]

    Raises:
        TypeError, ValueError: On an argument of the wrong type or range.
    """

    def __init__(
        self, workload: Any, *, inference_options: dict[str, Any] | None = None, **options: Any
    ) -> None:
        refuse_custom_actors(options)
        if options.get("batched"):
            raise ValueError("batched: expected False with inference='server', actual True")
        super().__init__(workload, **options)
        self.server = _make_server(self.workload, inference_options)

    def _run_slots(
        self, weights: Weights, num_actors: int, steps_per_actor: int, policy_version: int
    ) -> RoundParts:
        """Every slot in its own thread, each a client of the server; a thread that raises
        or outlives ``actor_timeout`` is a fault (replaced and re-run as in the other
        backends)."""
        self.server.set_weights(weights, policy_version)
        startup = {s: self._build(s) for s in range(num_actors) if s not in self._actors}
        trajectories: dict[int, Trajectory] = {}
        timings: dict[int, ActorTiming] = {}
        failures: list[ActorFailure] = []
        done: queue.Queue[tuple[int, _Attempt]] = queue.Queue()
        progress = {slot: SlotProgress() for slot in range(num_actors)}
        attempts: dict[int, _Attempt] = {}
        pending = set(range(num_actors))

        def start(slot: int) -> None:
            attempt = _Attempt(self._actors[slot], self.server.connect(slots=4))
            attempts[slot] = attempt
            progress[slot].deadline = self._deadline(time.perf_counter())
            threading.Thread(
                target=_run_attempt,
                args=(slot, attempt, steps_per_actor, policy_version, done),
                name=f"ServedActor-{slot}",
                daemon=True,  # a hung actor must not keep the interpreter alive
            ).start()

        def fault(slot: int, kind: str, message: str) -> None:
            if not self._record_fault(
                [slot], progress[slot], kind, message, failures, f"actor {slot}"
            ):
                self._discard(slot)
                pending.discard(slot)
                return
            startup[slot] = self._build(slot)
            start(slot)

        for slot in range(num_actors):
            start(slot)
        while pending:
            left = min(progress[s].deadline for s in pending) - time.perf_counter()
            try:
                slot, attempt = done.get(timeout=None if left == float("inf") else max(left, 0.0))
            except queue.Empty:
                slot = -1
            if slot in pending and attempts.get(slot) is attempt:
                attempt.client.close()
                if attempt.error is not None:
                    fault(slot, "error", attempt.error)
                else:
                    assert attempt.trajectory is not None
                    progress[slot].mark_rerun()
                    pending.discard(slot)
                    trajectories[slot] = attempt.trajectory
                    timings[slot] = ActorTiming(
                        actor_id=slot,
                        startup_s=startup.get(slot, 0.0),
                        compute_s=attempt.compute_s,
                        transfer_s=0.0,
                        cold_start=slot in startup,
                        num_steps=len(attempt.trajectory),
                        cpu_s=attempt.cpu_s,
                    )
            now = time.perf_counter()
            for late in sorted(s for s in pending if progress[s].deadline <= now):
                # The thread still holds its actor: forgotten, never reused. Closing its
                # client ends it at its next request (or wakes it from its wait).
                self._actors.pop(late, None)
                attempts.pop(late).client.close()
                fault(late, "timeout", self._late_message(starting=False))
        return trajectories, timings, failures

    def metrics(self) -> dict[str, Any]:
        """The inference server's metrics (see ``InferenceServer.metrics``)."""
        return self.server.metrics()  # type: ignore[no-any-return]

    def close(self) -> None:
        """Close the actors and stop the server (idempotent)."""
        super().close()
        self.server.close()


class ServedProcessFleet(ProcessFleet):
    """:class:`ProcessFleet` whose worker processes act through an inference server run by
    the fleet (in this process, on a loopback socket; observations in shared memory).

    Args:
        workload: See :class:`ProcessFleet` (as are the other keyword arguments, except
            ``actor_factory``).
        inference_options: Keyword arguments of the
            :class:`~fleetgym.agents.inference.InferenceServer`.
        groups: Double buffering inside a worker with several actors: its actors are
            stepped in this many groups, one stepping while the others wait.

    Example:
        >>> from fleetgym.agents.fleet import make_fleet
        >>> from fleetgym.agents.workloads import get_workload
        >>> weights = get_workload("CartPole-v1").make_policy().get_weights()
        >>> with make_fleet("CartPole-v1", "process", max_actors=4, inference="server",
        ...                 actors_per_worker=2) as fleet:
        ...     result = fleet.run_round(weights, 4, 16, policy_version=3)
        >>> result.complete, sorted({int(v) for t in result.trajectories for v in t.policy_versions})
        (True, [3])

    Raises:
        TypeError, ValueError: On an argument of the wrong type or range.
    """

    def __init__(
        self,
        workload: Any,
        *,
        inference_options: dict[str, Any] | None = None,
        groups: int = 2,
        **options: Any,
    ) -> None:
        refuse_custom_actors(options)
        super().__init__(workload, **options)
        self.groups = check_int("groups", groups, 1)
        self.server = _make_server(self.workload, inference_options)
        self.address = self.server.listen()

    def _publish_weights(self, weights: Weights, steps: int, policy_version: int) -> dict[str, Any]:
        # The weights go to the server only; workers never load them.
        self.server.set_weights(weights, policy_version)
        return served_round_spec(self.address, steps, policy_version, self.groups)

    def metrics(self) -> dict[str, Any]:
        """The inference server's metrics (see ``InferenceServer.metrics``)."""
        return self.server.metrics()  # type: ignore[no-any-return]

    def close(self) -> None:
        """Stop the workers, then the server (idempotent)."""
        super().close()
        self.server.close()
