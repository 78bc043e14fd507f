"""What the server and its clients share: requests, answers, errors and the client API.

The server (:mod:`fleetgym.agents.inference.server`) and each transport (in-process, or
:mod:`fleetgym.agents.inference.transport` for other processes) meet here: a transport
turns a client's submit into :class:`Request` objects for the server's queue and hands
answers back through its :class:`Channel`.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import Any

import numpy as np

import fleetgym.agents.inference.checks as checks
from fleetgym.agents.inference.model import ModelSpec
from fleetgym.errors import FleetError, ProtocolError


class InferenceError(FleetError):
    """A request the inference server could not answer (the message says why)."""


class InferenceProtocolError(InferenceError, ProtocolError):
    """Malformed or oversized input on the inference server's socket.

    One protocol error family: it is a :class:`fleetgym.errors.ProtocolError` (as the
    remote env's wire errors are, and a ``ValueError``) and an :class:`InferenceError`.
    """


@dataclass
class Reply:
    """The answers to one :meth:`InferenceClient.submit`: one row per observation.

    Rows of one submit may land in different batches, even of different weight versions.

    Attributes:
        outputs: Each output of the model's spec by name, of shape ``(k, *its spec shape)``
            for the ``k`` observations submitted.
        policy_versions: ``(k,)`` int64: the version of the weights that answered each row.
        batch_ids: ``(k,)`` int64: the id of the forward pass that answered each row.
    """

    outputs: dict[str, np.ndarray]
    policy_versions: np.ndarray
    batch_ids: np.ndarray


class Ticket:
    """A submitted group of requests, answered row by row (filled by the server or the
    remote client's receiver).

    A client makes one per :meth:`InferenceClient.submit`; callers only pass it to
    :meth:`InferenceClient.wait`.

    Args:
        spec: The served model's layout; the answer buffers are allocated from its outputs.
        count: Requests (rows) in the group.
        first_slot: A remote client's first shared-memory slot of the group (0, the
            default, in-process; kept for the record).
    """

    def __init__(self, spec: ModelSpec, count: int, first_slot: int = 0) -> None:
        self.count = count
        self.first_slot = first_slot
        self.outputs = {
            name: np.empty((count, *a.shape), np.dtype(a.dtype)) for name, a in spec.outputs
        }
        self.policy_versions = np.full(count, -1, np.int64)
        self.batch_ids = np.full(count, -1, np.int64)
        self.remaining = count
        self.error: str | None = None
        self.done = threading.Event()

    def fill(
        self, row: int, outputs: dict[str, np.ndarray], index: int, version: int, batch: int
    ) -> None:
        for name, array in self.outputs.items():
            array[row] = outputs[name][index]
        self.policy_versions[row] = version
        self.batch_ids[row] = batch
        self.remaining -= 1
        if self.remaining <= 0:
            self.done.set()

    def fail(self, message: str) -> None:
        if self.error is None:
            self.error = message
        self.done.set()

    def reply(self) -> Reply:
        if self.error is not None:
            raise InferenceError(self.error)
        return Reply(self.outputs, self.policy_versions, self.batch_ids)


def check_request(
    spec: ModelSpec, obs: Any, noise: Any, limit: int
) -> tuple[np.ndarray, np.ndarray]:
    """Observations and noise of one submit as ``(k, ...)`` arrays of the spec's layout.

    Raises:
        TypeError: If ``obs`` is not an array of the spec's dtype.
        ValueError: On a wrong shape, NaN or inf, noise outside ``[0, 1)`` where the spec's
            draws are uniforms, or more than ``limit`` requests.
    """
    if not isinstance(obs, np.ndarray):
        raise TypeError(
            f"obs: expected np.ndarray of {spec.obs.dtype}, actual {type(obs).__name__}"
        )
    if obs.dtype != np.dtype(spec.obs.dtype):
        raise TypeError(f"obs: expected dtype {np.dtype(spec.obs.dtype)}, actual {obs.dtype}")
    shape = spec.obs.shape
    if obs.shape == shape:
        obs = obs[None]
    if obs.ndim != len(shape) + 1 or obs.shape[1:] != shape or obs.shape[0] < 1:
        raise ValueError(
            f"obs: expected shape {shape} or (k, {', '.join(map(str, shape))}), actual {obs.shape}"
        )
    count = obs.shape[0]
    if count > limit:
        raise ValueError(f"obs: expected at most {limit} observations in flight, actual {count}")
    if not checks.all_finite(obs):
        raise ValueError("obs: expected finite values, actual NaN or inf")
    expected = (count, *spec.noise.shape)
    if noise is None:
        return obs, np.zeros(expected, np.float64)
    try:
        noise_array = np.asarray(noise, np.float64)
    except (TypeError, ValueError) as exc:
        raise TypeError(
            f"noise: expected an array of numbers, actual {type(noise).__name__}"
        ) from exc
    if noise_array.size != int(np.prod(expected)):
        raise ValueError(f"noise: expected shape {expected}, actual {noise_array.shape}")
    if not checks.all_finite(noise_array):
        raise ValueError("noise: expected finite values, actual NaN or inf")
    if spec.uniform_noise and not bool(((noise_array >= 0.0) & (noise_array < 1.0)).all()):
        bad = noise_array[(noise_array < 0.0) | (noise_array >= 1.0)]
        raise ValueError(
            f"noise: expected uniform draws in [0, 1), actual {float(bad[0])!r}"
            f"{f' (and {bad.size - 1} more)' if bad.size > 1 else ''}"
        )
    return obs, noise_array.reshape(expected)


@dataclass
class Request:
    """One queued observation: where its answer goes."""

    channel: Channel
    obs: np.ndarray
    noise: np.ndarray
    tag: Any  # (ticket, row) in-process; the shared-memory slot for a remote client


@dataclass(eq=False)
class Channel:
    """The server's side of one connected client (subclassed per transport)."""

    name: str
    alive: bool = True
    in_flight: int = field(default=0)

    def deliver(
        self,
        requests: list[Request],
        outputs: dict[str, np.ndarray],
        rows: list[int],
        version: int,
        batch: int,
    ) -> None:
        """Hand the answers ``outputs[...][rows[i]]`` to ``requests[i]``."""
        raise NotImplementedError

    def reject(self, requests: list[Request], message: str) -> None:
        """Answer ``requests`` with an error."""
        raise NotImplementedError

    def release(self) -> None:
        """Free the channel's resources (server thread, no request of it left)."""


class InferenceClient:
    """The client API, the same in this process (:class:`LocalClient`) and in another
    (:class:`~fleetgym.agents.inference.RemoteClient`).

    A client is used by one thread. It may have several submits in flight (up to its
    ``slots`` observations), so an actor owning several environments can step one group
    while another group waits for its answer (double buffering).
    """

    spec: ModelSpec
    slots: int

    def submit(self, obs: np.ndarray, noise: np.ndarray | None = None) -> Ticket:
        """Queue observations ``obs`` (one, or ``(k, *obs shape)``) with their ``noise``.

        Args:
            obs: One observation of the spec's shape, or ``(k, *obs shape)`` of them: a
                numpy array of the spec's dtype, finite; ``k`` at most the client's free
                slots (``slots`` minus the observations still in flight).
            noise: The draws of the ``k`` requests, ``k * prod(spec.noise.shape)`` finite
                numbers (in ``[0, 1)`` where the spec's draws are uniforms); ``None``: zeros
                (for a request whose sampled action is not used, e.g. a bootstrap value).

        Returns:
            The ticket to pass to :meth:`wait`.

        Raises:
            TypeError, ValueError: On observations of the wrong dtype or shape (this
                client only; nothing is queued).
            InferenceError: After :meth:`close`, or when the server is gone.
        """
        raise NotImplementedError

    def wait(self, ticket: Ticket, timeout: float | None = None) -> Reply:
        """The answers of a submit, once all have arrived.

        Args:
            ticket: What this client's :meth:`submit` returned.
            timeout: Most seconds to wait; ``None`` (the default): until every answer or an
                error arrives.

        Raises:
            InferenceError: If the server answered with an error.
            TimeoutError: If ``timeout`` seconds passed first.
        """
        raise NotImplementedError

    def infer(
        self, obs: np.ndarray, noise: np.ndarray | None = None, timeout: float | None = None
    ) -> Reply:
        """:meth:`submit` and :meth:`wait`.

        Args:
            obs: One observation, or ``(k, *obs shape)`` of them (see :meth:`submit`).
            noise: Their draws; ``None``: zeros (see :meth:`submit`).
            timeout: Most seconds to wait for the answers; ``None``: no limit.
        """
        return self.wait(self.submit(obs, noise), timeout)

    def close(self) -> None:
        """Disconnect (idempotent); requests still waiting are dropped."""
        raise NotImplementedError

    def __enter__(self) -> InferenceClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
