"""The inference server: one thread that answers many clients with batched forward passes.

See :class:`InferenceServer` for the model; :mod:`fleetgym.agents.inference.batching` for
the batching rule and the adaptive wait; :mod:`fleetgym.agents.inference.transport` for
clients in other processes. Clients in this process (threads) use
:class:`LocalClient`; both client kinds share the :class:`InferenceClient` API.

Invariants (tested): every request is answered exactly once, with its own answer, or
gets an error; a forward pass runs one set of weights, so all answers of a batch carry
the same ``policy_version``; weights change only between batches; a client's bad input,
disconnection or closing never affects another client.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

import fleetgym.agents.inference.checks as checks
from fleetgym.agents.inference.batching import DeadlineController, InferenceConfig, RequestQueue
from fleetgym.agents.inference.channels import (
    Channel,
    InferenceError,
    Request,
)
from fleetgym.agents.inference.checks import MAX_VERSION, check_clock_reading, check_weights
from fleetgym.agents.inference.local import LocalClient, _LocalChannel
from fleetgym.agents.inference.metrics import ServerMetrics
from fleetgym.agents.inference.model import ModelSpec, ServedModel, as_served_model
from fleetgym.agents.types import Weights
from fleetgym.validation import check_bool, check_int

logger = logging.getLogger(__name__)


@dataclass
class _Answers:
    """The outputs of one forward pass, with the version and id of that pass."""

    outputs: dict[str, np.ndarray]
    version: int
    batch_id: int


class InferenceServer:
    """A dynamic-batching policy server: many clients, one batched forward pass per batch.

    Models the central inference of an actor fleet: actors stop running the policy
    themselves and send each observation here; one thread answers them in batches.
    A batch runs when ``max_batch`` requests wait, when the oldest has waited
    ``max_wait_ms``, or at once when every connected client has a request waiting
    (:mod:`~fleetgym.agents.inference.batching`). ``max_wait_ms="auto"`` picks the wait
    from the measured arrival rate and forward time
    (:func:`~fleetgym.agents.inference.batching.auto_wait`: the smallest wait that keeps
    the server below ``target_utilisation``, capped so that p99 latency stays within
    ``latency_budget_ms``). New weights (:meth:`set_weights`) are swapped in between
    batches; every answer carries the version of the weights that produced it.

    Batched forward passes may round floats differently from one-at-a-time inference
    (a BLAS kernel sums in another order for another batch size), so log-probabilities
    and values agree with per-actor inference to float32 rounding, and a sampled action
    can differ only where a uniform draw falls within that rounding of a CDF boundary.

    Args:
        policy: An :class:`~fleetgym.agents.policies.ActorCriticPolicy` or a
            :class:`~fleetgym.agents.inference.model.ServedModel`.
        max_batch: Most requests per forward pass.
        max_wait_ms: Longest wait of the oldest request for a batch to fill, or ``"auto"``.
        device: Where an ActorCriticPolicy runs (``"cpu"``, ``"cuda[:N]"``).
        latency_budget_ms: p99 latency the ``"auto"`` wait respects.
        target_utilisation: Forward-time share the ``"auto"`` wait aims not to exceed.
        max_client_slots: Most requests one client may have in flight.
        policy_version: Version of the initial weights.
        clock: Monotonic clock in seconds (tests inject a fake one).

    Example:
        >>> import numpy as np
        >>> from fleetgym.agents.workloads import get_workload
        >>> with InferenceServer(get_workload("CartPole-v1").make_policy(), max_wait_ms=1.0) as server:
        ...     client = server.connect()
        ...     reply = client.infer(np.zeros((2, 4), np.float32), noise=np.full((2, 1), 0.5))
        ...     client.close()
        >>> reply.outputs["action"].shape, reply.policy_versions.tolist()
        ((2,), [0, 0])

    Raises:
        TypeError, ValueError: On an argument of the wrong type or range.
    """

    def __init__(
        self,
        policy: Any,
        max_batch: int = 256,
        max_wait_ms: float | str = 5.0,
        device: str = "cpu",
        latency_budget_ms: float = 50.0,
        *,
        target_utilisation: float = 0.8,
        max_client_slots: int = 4096,
        policy_version: int = 0,
        clock: Callable[[], float] = time.perf_counter,
    ) -> None:
        self.config = InferenceConfig(
            max_batch=max_batch,
            max_wait_ms=max_wait_ms,
            latency_budget_ms=latency_budget_ms,
            device=device,
            target_utilisation=target_utilisation,
            max_client_slots=max_client_slots,
        )
        self.model: ServedModel = as_served_model(policy, self.config.device)
        self.spec: ModelSpec = self.model.spec
        self._version = check_int("policy_version", policy_version, low=0, high=MAX_VERSION)
        if not callable(clock):
            raise TypeError(f"clock: expected a callable, actual {type(clock).__name__}")
        check_clock_reading(clock())
        self._clock = clock
        #: Why the serving thread died (``None`` while it serves or after a clean close).
        self.error: str | None = None
        self._cond = threading.Condition()
        self._queue: RequestQueue[Request] = RequestQueue(self.config.max_batch)
        self._channels: set[Channel] = set()
        self._released: list[Channel] = []
        self._pending: tuple[Weights, int, threading.Event] | None = None
        self._fatal: BaseException | None = None  # a client thread saw the server break
        self._running: list[Request] = []  # the batch being served (answered if the thread dies)
        self._closing = False
        self._batches = 0
        self._controller = DeadlineController(self.config)
        self._metrics = ServerMetrics(self.config.max_batch)
        self._listener: Any = None
        self._thread = threading.Thread(target=self._loop, name="InferenceServer", daemon=True)
        self._thread.start()

    # -- public ---------------------------------------------------------------------------
    @property
    def policy_version(self) -> int:
        """Version of the weights the next batch runs (a pending swap not yet applied)."""
        return self._version

    @property
    def closed(self) -> bool:
        """Whether the server stopped serving: closed, or its thread died (see :attr:`error`)."""
        return self._closing

    def connect(self, slots: int = 256) -> LocalClient:
        """A client for a thread of this process.

        Args:
            slots: Most observations the client may have in flight at once.

        Raises:
            InferenceError: If the server is closed.
        """
        slots = check_int("slots", slots, 1, self.config.max_client_slots)
        channel = _LocalChannel(name=f"local-{id(self):x}")
        self._register(channel)
        return LocalClient(self, channel, slots)

    def set_weights(
        self, weights: Weights, version: int | None = None, *, wait: bool = True
    ) -> int:
        """Swap in new weights between batches; answers after the swap carry ``version``.

        Args:
            weights: A numpy state_dict (``policy.get_weights()``).
            version: Its version (default: the current one + 1).
            wait: Block until the swap is applied (the next batch uses it).

        Returns:
            The version.

        Raises:
            InferenceError: If the server is closed, or the weights failed to load
                (``wait=True``; the old weights stay in service).
        """
        version = self._version + 1 if version is None else version
        version = check_int("version", version, low=0, high=MAX_VERSION)
        check_bool("wait", wait)
        check_weights(weights)
        applied = threading.Event()
        with self._cond:
            if self._closing:
                raise InferenceError(
                    f"set_weights: expected an open server, actual {self._state()}"
                )
            if self._pending is not None:
                self._pending[2].set()  # superseded: its waiter sees the newer version
            self._pending = (dict(weights), version, applied)
            self._cond.notify_all()
        if wait:
            applied.wait()  # set when applied, rejected, superseded or the server stops
            if getattr(applied, "error", None):
                raise InferenceError(f"set_weights: {applied.error}")  # type: ignore[attr-defined]
        return version

    def metrics(self) -> dict[str, Any]:
        """Throughput, batch sizes, queue waits, forward time and utilisation since the
        last :meth:`reset_metrics` (times in ms; ``utilisation`` = share of wall time in
        forward passes), with the current wait and its estimates."""
        figures = self._metrics.snapshot()
        with self._cond:
            figures.update(
                connected_clients=len(self._channels),
                queued=len(self._queue),
                policy_version=self._version,
            )
        figures.update(self._controller.state())
        return figures

    def reset_metrics(self) -> None:
        """Start a new measurement window."""
        self._metrics.reset()

    def listen(self, host: str = "127.0.0.1", port: int = 0) -> tuple[str, int]:
        """Accept clients of other processes (:class:`~fleetgym.agents.inference.RemoteClient`).

        Only the first successful call binds a socket; a later one returns its address (its
        ``host`` and ``port`` are then ignored).

        Args:
            host: Address to bind (``"127.0.0.1"``, the default: loopback only).
            port: TCP port, ``0`` to ``65535`` (``0``, the default: any free one).

        Returns:
            The ``(host, port)`` to give :class:`~fleetgym.agents.inference.RemoteClient`.

        Raises:
            InferenceError: If the server is closed.
            TypeError, ValueError: For a port that is not an int in ``0 .. 65535``.
            OSError: If the address cannot be bound.
        """
        from fleetgym.agents.inference.transport import Listener

        with self._cond:
            if self._closing:
                raise InferenceError("listen: expected an open server, actual closed")
            if self._listener is None:
                self._listener = Listener(self, host, port)
            return self._listener.address  # type: ignore[no-any-return]

    def close(self) -> None:
        """Stop serving; waiting requests get an :class:`InferenceError` (idempotent)."""
        with self._cond:
            if self._closing:
                return
            self._closing = True
            self._cond.notify_all()
        if self._listener is not None:
            self._listener.close()
        self._thread.join()

    def __enter__(self) -> InferenceServer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"InferenceServer({self.config}, policy_version={self._version})"

    # -- transports -----------------------------------------------------------------------
    def _register(self, channel: Channel) -> None:
        with self._cond:
            if self._closing:
                raise InferenceError(f"connect: expected an open server, actual {self._state()}")
            self._channels.add(channel)

    def _unregister(self, channel: Channel, message: str) -> None:
        """A client left: its queued requests are dropped (answered with ``message``)."""
        with self._cond:
            channel.alive = False
            if channel not in self._channels:
                return
            self._channels.discard(channel)
            dropped = [entry.item for entry in self._queue.remove_client(channel)]
            channel.in_flight -= len(dropped)
            self._released.append(channel)
            self._cond.notify_all()
        if dropped:
            channel.reject(dropped, message)

    def _enqueue(self, channel: Channel, requests: list[Request]) -> None:
        with self._cond:
            if self._closing:
                raise InferenceError(f"submit: expected an open server, actual {self._state()}")
            if not channel.alive:
                raise InferenceError(
                    f"submit: expected a connected client, actual {channel.name} closed"
                )
            try:
                now = check_clock_reading(self._clock())
            except TypeError as exc:  # the server cannot schedule any more: it stops
                self._fatal = exc
                self._cond.notify_all()
                raise InferenceError(f"submit: the server's clock failed ({exc})") from exc
            was_empty = not len(self._queue)
            for request in requests:
                self._queue.push(now, channel, request)
            channel.in_flight += len(requests)
            self._controller.arrived(len(requests))
            # Wake the server only when this changes its plan: a first request sets a
            # deadline, or a batch is due now. Waking it for every request would cost a
            # thread switch per request (and CPU the actors need) for nothing.
            if was_empty or self._queue.due(now, self._controller.wait_s, len(self._channels)):
                self._cond.notify_all()

    def _now(self) -> float:
        return check_clock_reading(self._clock())

    def _state(self) -> str:
        return "closed" if self.error is None else f"dead ({self.error})"

    # -- the serving thread ---------------------------------------------------------------
    def _loop(self) -> None:
        try:
            self._serve()
        except BaseException as exc:  # noqa: BLE001 - whatever killed it reaches the waiters
            self._die(exc)

    def _die(self, exc: BaseException) -> None:
        """The serving thread failed: every waiting request and swap gets the error."""
        message = f"the inference server thread died: {type(exc).__name__}: {exc}"
        logger.error("inference server: %s", message, exc_info=exc)
        with self._cond:
            self.error = f"{type(exc).__name__}: {exc}"
            self._closing = True
            pending, self._pending = self._pending, None
            running, self._running = self._running, []
            self._cond.notify_all()
        if pending is not None:
            pending[2].error = message  # type: ignore[attr-defined]
            pending[2].set()
        # Requests of the batch that was running are still counted in flight: settle them.
        self._settle(running, message)
        self._shutdown(message)

    def _serve(self) -> None:
        while True:
            batch: list[Any] = []
            with self._cond:
                while True:
                    released, self._released = self._released, []
                    if self._closing:
                        break
                    if self._fatal is not None:
                        raise self._fatal
                    if self._pending is not None:
                        break
                    now = self._now()
                    wait = self._controller.wait_s
                    if self._queue.due(now, wait, len(self._channels)):
                        batch = self._queue.take()
                        break
                    deadline = self._queue.deadline(wait)
                    if released:
                        break
                    self._cond.wait(None if deadline is None else max(0.0, deadline - now))
                pending, self._pending = self._pending, None
                closing = self._closing
            # A dropped channel's requests left the queue with it, and the previous batch
            # is answered: nothing reads its resources any more.
            for channel in released:
                channel.release()
            if pending is not None:
                self._swap(*pending)
            if closing:
                self._shutdown()
                return
            if batch:
                self._running = [entry.item for entry in batch]
                self._run(batch)
                self._running = []

    def _swap(self, weights: Weights, version: int, applied: threading.Event) -> None:
        try:
            self.model.load_weights(weights)
        except Exception as exc:  # the caller's bad weights: keep serving the old ones
            applied.error = f"{type(exc).__name__}: {exc}"  # type: ignore[attr-defined]
            logger.warning("inference server: weights version %d rejected: %s", version, exc)
        else:
            self._version = version
        applied.set()

    def _forward(self, requests: list[Request]) -> dict[str, np.ndarray]:
        obs = np.stack([r.obs for r in requests])
        noise = np.stack([r.noise for r in requests])
        # A remote client writes its slots itself: what it wrote is checked here too, so a
        # NaN reaches no forward pass (the batch is then re-run per client, see _run).
        if not (checks.all_finite(obs) and checks.all_finite(noise)):
            raise ValueError("obs, noise: expected finite values, actual NaN or inf")
        outputs = self.model.forward(obs, noise)
        for name, spec in self.spec.outputs:
            value = outputs.get(name)
            got = None if value is None else np.shape(value)
            if got != (len(requests), *spec.shape):
                raise ValueError(
                    f"model output {name!r}: expected shape {(len(requests), *spec.shape)}, "
                    f"actual {got}"
                )
        return outputs

    def _run(self, batch: list[Any]) -> None:
        requests: list[Request] = [entry.item for entry in batch]
        started = self._now()
        version = self._version
        try:
            outputs = self._forward(requests)
        except Exception:
            # One client's input may have broken the pass: each client's requests are
            # run again on their own, so only the culprit gets the error.
            self._run_apart(requests, version)
            return
        forward_s = self._now() - started
        self._batches += 1
        batch_id = self._batches
        self._settle(requests, _Answers(outputs, version, batch_id))
        done = self._now()
        arrivals = np.array([entry.arrival for entry in batch])
        self._metrics.record_batch(started - arrivals, done - arrivals, forward_s)
        # The adaptive wait models the whole service time of a batch (stacking, forward,
        # answering every client), the cost each extra batch adds, not the forward alone.
        self._controller.batch_done(done, len(requests), done - started)

    def _run_apart(self, requests: list[Request], version: int) -> None:
        groups: dict[Channel, list[Request]] = {}
        for request in requests:
            groups.setdefault(request.channel, []).append(request)
        for group in groups.values():
            try:
                outputs = self._forward(group)
            except Exception as exc:
                message = f"forward pass failed: {type(exc).__name__}: {exc}"
                logger.warning("inference server: %s", message)
                self._metrics.record_errors(len(group))
                self._settle(group, message)
                continue
            self._batches += 1
            batch_id = self._batches
            self._settle(group, _Answers(outputs, version, batch_id))

    def _settle(self, requests: list[Request], answer: _Answers | str) -> None:
        """Deliver ``answer`` (or the error message) to each channel's requests of a batch."""
        groups: dict[Channel, tuple[list[Request], list[int]]] = {}
        for index, request in enumerate(requests):
            group = groups.setdefault(request.channel, ([], []))
            group[0].append(request)
            group[1].append(index)
        for channel, (reqs, rows) in groups.items():
            with self._cond:
                channel.in_flight -= len(reqs)
            if not channel.alive:
                continue
            try:
                if isinstance(answer, str):
                    channel.reject(reqs, answer)
                else:
                    channel.deliver(reqs, answer.outputs, rows, answer.version, answer.batch_id)
            except Exception as exc:  # one client's broken transport must not stop the others
                logger.warning("inference server: answering %s failed", channel.name, exc_info=True)
                try:  # its waiters get the error rather than waiting forever
                    channel.reject(reqs, f"answer could not be delivered: {exc}")
                except Exception:
                    logger.debug("rejecting %s's requests failed too", channel.name, exc_info=True)
                self._unregister(channel, "answer could not be delivered")

    def _shutdown(self, message: str = "the inference server closed") -> None:
        with self._cond:
            left: list[Request] = []
            while len(self._queue):
                left.extend(entry.item for entry in self._queue.take())
            channels = list(self._channels) + self._released
            self._channels.clear()
            self._released = []
        self._settle(left, message)
        for channel in channels:
            channel.alive = False
            channel.release()
