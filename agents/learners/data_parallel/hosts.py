"""Where the data-parallel ranks run: one host per rank, as spawned processes or Ray actors.

:class:`RankHost` is what runs inside one rank: it joins the gloo group, builds the
:class:`~fleetgym.agents.learners.data_parallel.rank.DistributedPPOLearner` replica and
answers the front's requests (``update``, ``weights``, ``state``, ``restore``), each reply
an ``("ok", value)`` or ``("error", (type name, message))`` pair. ``ProcessRanks`` runs
the hosts as processes spawned with ``torch.multiprocessing`` (one pipe each),
``RayRanks`` as Ray actors; both collect the replies with a bounded wait once a rank has
failed (a dead rank is ``("dead", exit code)``, a silent one ``("silent", None)``).
:class:`~fleetgym.agents.learners.data_parallel.group.DataParallelPPO` is their one
front.
"""

from __future__ import annotations

import datetime
import io
import os
import time
import traceback
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

from fleetgym.agents.learners.data_parallel.rank import DistributedPPOLearner
from fleetgym.agents.types import Trajectory
from fleetgym.agents.workloads import Workload
from fleetgym.errors import FleetError
from fleetgym.extras import require

__all__ = ["RANKS", "REQUESTS", "ProcessRanks", "RankHost", "RayRanks", "pack", "unpack"]

#: What the front may ask a rank (the :class:`RankHost` method of that name).
REQUESTS = ("update", "weights", "state", "restore")


def pack(state: Any) -> bytes:
    """``state`` (tensors and plain values) as the bytes of a ``torch.save``.

    What travels between the front and a rank: a tensor sent as it is over a
    ``torch.multiprocessing`` pipe moves to shared memory and the receiver gets a view of
    the sender's storage (one rank's live optimiser state would then be every rank's);
    bytes are a copy over any transport.

    Args:
        state: A learner state (tensors and plain Python values only).
    """
    import torch

    buffer = io.BytesIO()
    torch.save(state, buffer)
    return buffer.getvalue()


def unpack(data: bytes) -> Any:
    """What :func:`pack` packed (``torch.load(weights_only=True)``).

    Args:
        data: The bytes :func:`pack` returned.
    """
    import torch

    return torch.load(io.BytesIO(data), weights_only=True)


class RankHost:
    """What runs inside one rank (a spawned process or a Ray actor): group and replica.

    Joins the gloo group at ``tcp://127.0.0.1:<port>`` (every collective then waits at
    most ``timeout_s``), builds the replica and answers :meth:`update`, :meth:`weights`,
    :meth:`state` and :meth:`restore`. Errors come back as ``(type name, message)`` pairs
    so the front can tell a refused shard or state (``ValueError``, ``TypeError``) from a
    failed group.

    Args:
        rank: This rank's index in the group.
        world_size: The number of ranks.
        port: The TCP port on 127.0.0.1 of the group's rendezvous.
        timeout_s: The longest wait of any collective.
        workload: The workload the replica learns.
        seed: Seeds the initial weights (this rank shuffles with ``seed + rank``).
        overrides: PPO hyperparameters of the replica.
    """

    def __init__(
        self,
        rank: int,
        world_size: int,
        port: int,
        timeout_s: float,
        workload: Workload,
        seed: int,
        overrides: dict[str, Any],
    ) -> None:
        import torch
        import torch.distributed as dist

        torch.set_num_threads(1)
        dist.init_process_group(
            "gloo",
            init_method=f"tcp://127.0.0.1:{port}",
            rank=rank,
            world_size=world_size,
            timeout=datetime.timedelta(seconds=timeout_s),
        )
        self.rank = rank
        self.learner = DistributedPPOLearner(workload, seed, **overrides)

    def ready(self) -> tuple[str, Any]:
        """``("ok", rank 0's weights or None)`` once the replica exists."""
        return "ok", self.learner.get_weights() if self.rank == 0 else None

    def update(self, shard: list[Trajectory]) -> tuple[str, Any]:
        """``("ok", (stats, weights of rank 0 or None))`` or ``("error", (type, message))``.

        Args:
            shard: This rank's trajectories of the update (possibly none).
        """
        try:
            stats = self.learner.update(shard)
        except Exception as exc:  # reported to the front, which raises
            if not isinstance(exc, (ValueError, TypeError, FleetError)):
                # An unexpected error leaves the other ranks inside a collective: leaving
                # the group ends their wait now instead of at the timeout.
                self.close()
            return "error", (type(exc).__name__, f"{exc}")
        return "ok", (stats, self.learner.get_weights() if self.rank == 0 else None)

    def weights(self) -> tuple[str, Any]:
        """``("ok", this replica's weights)`` (no collective: answers after a failure too)."""
        return "ok", self.learner.get_weights()

    def state(self, full: bool = True) -> tuple[str, Any]:
        """``("ok", this replica's state())`` packed, or only its shuffle generator (no collective).

        Args:
            full: The whole :meth:`~fleetgym.agents.learners.ppo.PPOLearner.state`
                (weights, optimiser, generator, counters); ``False``: ``{"generator": ...}``.

        Returns:
            ``("ok", bytes)``: the state :func:`pack`-ed.
        """
        state = self.learner.state() if full else {"generator": self.learner.generator.get_state()}
        return "ok", pack(state)

    def restore(self, payload: tuple[bytes, str | Path]) -> tuple[str, Any]:
        """Restore the replica (no collective); a refused state changes nothing.

        Args:
            payload: ``(packed state, where)``: a
                :meth:`~fleetgym.agents.learners.data_parallel.group.DataParallelPPO.state`
                dict :func:`pack`-ed and where it came from (named in every error).

        Returns:
            ``("ok", (weights of rank 0 or None, policy_version, mean_return))`` or
            ``("error", (type, message))``.
        """
        data, where = payload
        try:
            self.learner.restore_state(unpack(data), where)
        except (TypeError, ValueError) as exc:
            return "error", (type(exc).__name__, f"{exc}")
        learner = self.learner
        weights = learner.get_weights() if self.rank == 0 else None
        return "ok", (weights, learner.policy_version, learner.mean_return)

    def close(self) -> None:
        """Leave the group."""
        import torch.distributed as dist

        if dist.is_initialized():
            dist.destroy_process_group()


def _process_main(args: tuple[Any, ...], conn: Connection) -> None:
    """A rank's process: build the host, then answer the front's requests until closed."""
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    try:
        host = RankHost(*args)
        conn.send(host.ready())
    except Exception as exc:
        conn.send(("error", (type(exc).__name__, "".join(traceback.format_exception(exc)))))
        return
    try:
        while True:
            try:
                method, payload = conn.recv()
            except EOFError:
                break
            if method == "close":
                break
            if method not in REQUESTS:
                conn.send(("error", ("FleetError", f"unknown request {method!r}")))
                continue
            handler = getattr(host, method)
            conn.send(handler() if payload is None else handler(payload))
    finally:
        host.close()


class ProcessRanks:
    """The ranks as spawned processes, one pipe each.

    Args:
        args: One :class:`RankHost` argument tuple per rank, in rank order.
    """

    def __init__(self, args: list[tuple[Any, ...]]) -> None:
        import torch.multiprocessing as tmp

        context = tmp.get_context("spawn")
        self.conns: list[Connection] = []
        self.processes: list[Any] = []
        for rank_args in args:
            parent, child = context.Pipe()
            process = context.Process(target=_process_main, args=(rank_args, child), daemon=True)
            process.start()
            child.close()
            self.conns.append(parent)
            self.processes.append(process)

    @property
    def pids(self) -> list[int]:
        return [int(p.pid) for p in self.processes]

    def submit(self, method: str, payloads: list[Any] | None = None) -> None:
        for i, conn in enumerate(self.conns):
            try:
                conn.send((method, None if payloads is None else payloads[i]))
            except (BrokenPipeError, OSError):
                pass  # the rank died: collect() reports it

    def collect(self, timeout_s: float, first_s: float | None) -> list[tuple[str, Any]]:
        """Each rank's reply, or ``("dead", exit code)``; bounded once one has failed.

        Args:
            timeout_s: Seconds the others may take once a rank has failed.
            first_s: Seconds all may take (``None``: unbounded until one fails).
        """
        replies: list[tuple[str, Any] | None] = [None] * len(self.conns)
        deadline = None if first_s is None else time.monotonic() + first_s
        while any(r is None for r in replies):
            for i, conn in enumerate(self.conns):
                if replies[i] is not None:
                    continue
                if conn.poll(0.01):
                    try:
                        replies[i] = conn.recv()
                    except (EOFError, OSError):
                        replies[i] = ("dead", self.processes[i].exitcode)
                elif not self.processes[i].is_alive():
                    replies[i] = ("dead", self.processes[i].exitcode)
            failed = any(r is not None and r[0] != "ok" for r in replies)
            if failed:
                after = time.monotonic() + timeout_s
                deadline = after if deadline is None else min(deadline, after)
            if deadline is not None and time.monotonic() > deadline:
                replies = [("silent", None) if r is None else r for r in replies]
        return [r for r in replies if r is not None]

    def close(self) -> None:
        for conn in self.conns:
            try:
                conn.send(("close", None))
            except (BrokenPipeError, OSError):
                pass
        for process in self.processes:
            process.join(5.0)
            if process.is_alive():
                process.kill()
                process.join(5.0)
        for conn in self.conns:
            conn.close()


class RayRanks:
    """The ranks as Ray actors on this machine (the cluster joined, or a local one).

    Args:
        args: One :class:`RankHost` argument tuple per rank, in rank order.
    """

    def __init__(self, args: list[tuple[Any, ...]]) -> None:
        ray = require("ray", "DataParallelPPO(backend='ray')")
        self.ray = ray
        self.owns_ray = not ray.is_initialized()
        if self.owns_ray:
            from fleetgym.agents.fleet.ray_actor import init_local_ray

            init_local_ray(num_cpus=max(len(args), 1), log_to_driver=False)
        remote = ray.remote(num_cpus=0)(RankHost)
        self.actors = [remote.remote(*rank_args) for rank_args in args]
        self.pending: list[Any] = []
        self.submit("ready")  # the first collect waits for every actor to be up

    @property
    def pids(self) -> list[int]:
        return []

    def submit(self, method: str, payloads: list[Any] | None = None) -> None:
        self.pending = [
            getattr(actor, method).remote(*(() if payloads is None else (payloads[i],)))
            for i, actor in enumerate(self.actors)
        ]

    def collect(self, timeout_s: float, first_s: float | None) -> list[tuple[str, Any]]:
        ray = self.ray
        replies: list[tuple[str, Any] | None] = [None] * len(self.pending)
        index = {ref: i for i, ref in enumerate(self.pending)}
        remaining = list(self.pending)
        deadline = None if first_s is None else time.monotonic() + first_s
        while remaining:
            wait = None if deadline is None else max(deadline - time.monotonic(), 0.0)
            done, remaining = ray.wait(remaining, num_returns=1, timeout=wait)
            if not done:
                break
            i = index[done[0]]
            try:
                replies[i] = ray.get(done[0])
            except Exception as exc:  # RayActorError: the actor died
                replies[i] = ("dead", f"{type(exc).__name__}: {exc}")
            if replies[i][0] != "ok":  # type: ignore[index]
                after = time.monotonic() + timeout_s
                deadline = after if deadline is None else min(deadline, after)
        return [("silent", None) if r is None else r for r in replies]

    def close(self) -> None:
        for actor in self.actors:
            try:
                self.ray.get(actor.close.remote(), timeout=5.0)
            except Exception:  # a dead actor: nothing to leave
                pass
            self.ray.kill(actor)
        if self.owns_ray:
            self.ray.shutdown()


#: How each backend runs the ranks.
RANKS: dict[str, type[ProcessRanks] | type[RayRanks]] = {
    "process": ProcessRanks,
    "ray": RayRanks,
}
