"""The inference server as a Ray actor, and the client that Ray actors use to reach it.

:class:`RayInferenceHost` is the body of the server's Ray actor: it runs an
:class:`~fleetgym.agents.inference.InferenceServer` and answers ``infer`` calls, many at
once (a threaded Ray actor: each call waits in its own thread while the server batches
the calls of every client). :class:`RayClient` is the
:class:`~fleetgym.agents.inference.InferenceClient` of a Ray actor (or of the driver):
``submit`` is one ``infer`` call on the server actor, whose observations and answers are
numpy arrays carried by Ray's own transport (its object store; no socket of ours).

Each client connects under an id (its fleet slot); the server counts one connected client
per id, so its batching rule ("run at once when every connected client has a request
waiting") sees the fleet's actors, not Ray's threads. A client that connects again under
the same id (a replacement actor) takes the old one's place.

Both classes are plain: the fleet makes them Ray actors with ``ray.remote``, so importing
this module imports neither Ray nor torch.
"""

from __future__ import annotations

import threading
from typing import Any

import numpy as np

from fleetgym.agents.inference.channels import (
    InferenceClient,
    InferenceError,
    Reply,
    Ticket,
    check_request,
)
from fleetgym.agents.inference.model import ModelSpec
from fleetgym.agents.types import Weights
from fleetgym.validation import check_int


class RayInferenceHost:
    """The body of the inference server's Ray actor (made one with ``ray.remote``).

    Args:
        workload: The workload whose policy is served.
        options: Keyword arguments of the
            :class:`~fleetgym.agents.inference.InferenceServer`.
    """

    def __init__(self, workload: Any, options: dict[str, Any]) -> None:
        from fleetgym.agents.inference.server import InferenceServer

        self.server = InferenceServer(workload.make_policy(), **options)
        self._lock = threading.Lock()
        self._clients: dict[int, tuple[Any, threading.Lock, int]] = {}
        self._connections = 0

    def spec(self) -> dict[str, Any]:
        """The served model's request layout (:meth:`ModelSpec.to_json`)."""
        return self.server.spec.to_json()

    def connect(self, client_id: int, slots: int) -> tuple[dict[str, Any], int]:
        """Connect client ``client_id`` (replacing an earlier one of that id).

        Returns:
            The spec (:meth:`ModelSpec.to_json`) and this connection's token.
        """
        client = self.server.connect(slots)
        with self._lock:
            self._connections += 1
            token = self._connections
            old = self._clients.pop(client_id, None)
            self._clients[client_id] = (client, threading.Lock(), token)
        if old is not None:
            old[0].close()  # its requests still waiting are dropped
        return self.spec(), token

    def disconnect(self, client_id: int, token: int | None = None) -> None:
        """Drop client ``client_id`` (its actor is gone), only its connection ``token``
        if given (a replaced client's late goodbye leaves its successor alone)."""
        with self._lock:
            entry = self._clients.get(client_id)
            if entry is None or (token is not None and entry[2] != token):
                return
            del self._clients[client_id]
        entry[0].close()

    def infer(
        self, client_id: int, obs: np.ndarray, noise: np.ndarray
    ) -> tuple[dict[str, np.ndarray], np.ndarray, np.ndarray]:
        """Answer one submit: ``(outputs, policy_versions, batch_ids)``.

        Raises:
            InferenceError: If the server could not answer.
            TypeError, ValueError: On observations of the wrong dtype or shape.
        """
        with self._lock:
            entry = self._clients.get(client_id)
        if entry is None:
            # Dropped while its actor lived on (a goodbye racing a replacement's hello):
            # it connects again.
            self.connect(client_id, self.server.config.max_client_slots)
            with self._lock:
                entry = self._clients[client_id]
        client, lock, _ = entry
        with lock:  # a client may have several submits in flight (double buffering)
            ticket = client.submit(obs, noise)
        reply = client.wait(ticket)
        return reply.outputs, reply.policy_versions, reply.batch_ids

    def set_weights(self, weights: Weights, version: int) -> int:
        """Swap in new weights between batches (see ``InferenceServer.set_weights``)."""
        return self.server.set_weights(weights, version)

    def metrics(self) -> dict[str, Any]:
        """The server's metrics (see ``InferenceServer.metrics``)."""
        return self.server.metrics()

    def close(self) -> None:
        """Stop the server; waiting requests get an error."""
        self.server.close()


class _RayTicket(Ticket):
    """A submit on the server actor: the Ray reference of its answer."""

    ref: Any = None


class RayClient(InferenceClient):
    """A client of a :class:`RayInferenceHost` actor (in a Ray actor or the driver).

    Same API as the other clients (:class:`~fleetgym.agents.inference.InferenceClient`).
    Each submit is one Ray call on the server actor; a client may have several in
    flight, up to ``slots`` observations.

    Args:
        host: The Ray actor handle of a :class:`RayInferenceHost`.
        client_id: This client's id (a fleet slot); a later client of the same id
            replaces this one.
        slots: Most observations in flight at once.
        timeout: Seconds to connect.

    Raises:
        InferenceError: If the server actor cannot be reached within ``timeout``.
    """

    def __init__(
        self, host: Any, client_id: int, slots: int = 64, timeout: float | None = 60.0
    ) -> None:
        import ray

        self._ray = ray
        self._host = host
        self.client_id = check_int("client_id", client_id, low=0)
        self.slots = check_int("slots", slots, 1, 1 << 20)
        try:
            spec, self._token = ray.get(
                host.connect.remote(self.client_id, self.slots), timeout=timeout
            )
        except Exception as exc:
            raise InferenceError(f"connect: the inference server actor failed: {exc}") from exc
        self.spec = ModelSpec.from_json(spec)
        self._open: list[_RayTicket] = []
        self._closed = False

    def submit(self, obs: np.ndarray, noise: np.ndarray | None = None) -> Ticket:
        if self._closed:
            raise InferenceError("submit: expected an open client, actual closed")
        self._open = [t for t in self._open if not t.done.is_set()]
        free = self.slots - sum(t.count for t in self._open)
        obs, noise_array = check_request(self.spec, obs, noise, free)
        ticket = _RayTicket(self.spec, obs.shape[0])
        ticket.ref = self._host.infer.remote(self.client_id, obs, noise_array)
        self._open.append(ticket)
        return ticket

    def wait(self, ticket: Ticket, timeout: float | None = None) -> Reply:
        if not ticket.done.is_set():
            ray = self._ray
            try:
                outputs, versions, batches = ray.get(ticket.ref, timeout=timeout)  # type: ignore[attr-defined]
            except ray.exceptions.GetTimeoutError:
                raise TimeoutError(
                    f"wait: expected answers within {timeout} s, actual none yet"
                ) from None
            except ray.exceptions.RayActorError as exc:
                ticket.fail(f"the inference server actor died: {exc}")
            except ray.exceptions.RayTaskError as exc:
                cause = getattr(exc, "cause", None) or exc
                ticket.fail(f"{type(cause).__name__}: {cause}")
            else:
                ticket.outputs = dict(outputs)
                ticket.policy_versions = np.asarray(versions)
                ticket.batch_ids = np.asarray(batches)
                ticket.remaining = 0
                ticket.done.set()
        return ticket.reply()

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        try:
            self._host.disconnect.remote(self.client_id, self._token)
        except Exception:  # the server actor is gone already
            pass
