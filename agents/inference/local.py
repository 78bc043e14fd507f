"""Clients in the server's process: a channel that fills tickets, and :class:`LocalClient`."""

from __future__ import annotations

from typing import Any

import numpy as np

from fleetgym.agents.inference.channels import (
    Channel,
    InferenceClient,
    InferenceError,
    Reply,
    Request,
    Ticket,
    check_request,
)

__all__ = ["LocalClient"]


class _LocalChannel(Channel):
    def deliver(
        self,
        requests: list[Request],
        outputs: dict[str, np.ndarray],
        rows: list[int],
        version: int,
        batch: int,
    ) -> None:
        for request, index in zip(requests, rows, strict=True):
            ticket, row = request.tag
            ticket.fill(row, outputs, index, version, batch)

    def reject(self, requests: list[Request], message: str) -> None:
        for request in requests:
            request.tag[0].fail(message)


class LocalClient(InferenceClient):
    """A client in the server's process (see :class:`InferenceClient`).

    Made by :meth:`~fleetgym.agents.inference.InferenceServer.connect` rather than built
    directly.

    Args:
        server: The :class:`~fleetgym.agents.inference.InferenceServer` whose queue the
            requests join.
        channel: The server's side of this client, already registered with the server.
        slots: Most observations in flight at once (``connect`` checks ``1`` to the
            server's ``max_client_slots``).
    """

    def __init__(self, server: Any, channel: Channel, slots: int) -> None:
        # server: the InferenceServer (typed loosely: the server module imports this one)
        self.server = server
        self.spec = server.spec
        self.slots = slots
        self._channel = channel
        self._closed = False
        self._open_tickets: list[Ticket] = []

    def submit(self, obs: np.ndarray, noise: np.ndarray | None = None) -> Ticket:
        if self._closed:
            raise InferenceError("submit: expected an open client, actual closed")
        self._open_tickets = [t for t in self._open_tickets if not t.done.is_set()]
        free = self.slots - sum(t.count for t in self._open_tickets)
        obs, noise_array = check_request(self.spec, obs, noise, free)
        ticket = Ticket(self.spec, obs.shape[0])
        obs = obs.copy()  # the caller may reuse its buffer before the answer
        requests = [
            Request(self._channel, obs[i], noise_array[i], (ticket, i)) for i in range(len(obs))
        ]
        self.server._enqueue(self._channel, requests)
        self._open_tickets.append(ticket)
        return ticket

    def wait(self, ticket: Ticket, timeout: float | None = None) -> Reply:
        if not ticket.done.wait(timeout):
            raise TimeoutError(f"wait: expected answers within {timeout} s, actual none yet")
        return ticket.reply()

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        self.server._unregister(self._channel, "the client closed")
