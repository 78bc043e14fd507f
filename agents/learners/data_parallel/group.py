"""The data-parallel learner group: ranks as local processes or Ray actors, one front.

:class:`DataParallelPPO` starts ``world_size`` ranks, each a
:class:`~fleetgym.agents.learners.data_parallel.rank.DistributedPPOLearner` in one gloo
process group over ``tcp://127.0.0.1:<port>``, and presents them as one learner (the
:class:`~fleetgym.agents.types.Learner` protocol: ``update``, ``get_weights``): it splits
each round's trajectories into contiguous shards of near-equal sample counts, sends one to
each rank and returns rank 0's statistics. The ranks are spawned processes
(``torch.multiprocessing``, ``backend="process"``) or Ray actors (``backend="ray"``),
out of the one backend vocabulary (:mod:`fleetgym.agents.backends`).

The wait is bounded: each collective of a rank waits at most ``timeout_s``; once a rank
failed or died, the front waits at most ``timeout_s`` more for the others, then stops
them. A failed update raises :class:`~fleetgym.errors.FleetError`; every surviving rank
rolled back to its state before the update and :meth:`DataParallelPPO.get_weights` still
returns the weights of the last completed update. A group that failed stays failed.
"""

from __future__ import annotations

import datetime
import os
import socket
import time
import traceback
from collections.abc import Iterable, Sequence
from multiprocessing.connection import Connection
from typing import Any

from fleetgym.agents.backends import check_backend
from fleetgym.agents.learners.data_parallel.rank import PEER_REFUSAL, DistributedPPOLearner
from fleetgym.agents.types import Trajectory, UpdateStats, Weights
from fleetgym.agents.workloads import Workload, get_workload
from fleetgym.errors import FleetError
from fleetgym.extras import require
from fleetgym.validation import check_float, check_int, quote

__all__ = ["BACKENDS", "DataParallelPPO", "RankHost", "free_port", "split_trajectories"]

#: Where the ranks run (the backends of :mod:`fleetgym.agents.backends` with ranks).
BACKENDS = ("process", "ray")
#: Largest world size accepted (a guard against typos: each rank is a process).
MAX_WORLD_SIZE = 256
#: Seconds a rank may take to start (import torch, build its replica) beyond ``timeout_s``.
STARTUP_S = 300.0
#: Error types a rank's refusal is re-raised as in the caller (anything else: FleetError).
_INPUT_ERRORS = {"ValueError": ValueError, "TypeError": TypeError}


def free_port() -> int:
    """A TCP port on 127.0.0.1 nothing listens at now (the OS picks it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def split_trajectories(
    trajectories: Sequence[Trajectory], world_size: int
) -> list[list[Trajectory]]:
    """Contiguous shards, one per rank, of near-equal sample counts (order kept).

    Trajectory ``i`` goes to the rank whose share of the samples holds its middle sample,
    so with equal-length trajectories each rank gets ``len / world_size`` of them; a rank
    may get none when there are fewer trajectories than ranks.

    Example:
        >>> [[len(t) for t in s] for s in split_trajectories([[0] * 3, [0] * 1, [0] * 4], 2)]
        [[3, 1], [4]]
    """
    world_size = check_int("world_size", world_size, 1, MAX_WORLD_SIZE)
    lengths = [len(t) for t in trajectories]
    total = sum(lengths)
    shards: list[list[Trajectory]] = [[] for _ in range(world_size)]
    before = 0
    for traj, n in zip(trajectories, lengths, strict=True):
        middle = before + n / 2.0
        rank = min(int(middle * world_size / max(total, 1)), world_size - 1)
        shards[rank].append(traj)
        before += n
    return shards


class RankHost:
    """What runs inside one rank (a spawned process or a Ray actor): group and replica.

    Joins the gloo group at ``tcp://127.0.0.1:<port>`` (every collective then waits at
    most ``timeout_s``), builds the replica and answers :meth:`update` and
    :meth:`weights`. Errors come back as ``(type name, message)`` pairs so the front can
    tell a refused shard (``ValueError``, ``TypeError``) from a failed group.
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
        """``("ok", (stats, weights of rank 0 or None))`` or ``("error", (type, message))``."""
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
            conn.send(host.update(payload) if method == "update" else host.weights())
    finally:
        host.close()


class _ProcessRanks:
    """The ranks as spawned processes, one pipe each."""

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
        """Each rank's reply, or ``("dead", exit code)``; bounded once one has failed."""
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


class _RayRanks:
    """The ranks as Ray actors on this machine (the cluster joined, or a local one)."""

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
_RANKS: dict[str, type[_ProcessRanks] | type[_RayRanks]] = {
    "process": _ProcessRanks,
    "ray": _RayRanks,
}


class DataParallelPPO:
    """PPO over ``world_size`` data-parallel learner ranks (gloo all-reduce), as one learner.

    Models AcceRL's trainer tier on CPU: the ranks hold equal replicas; each update splits
    the round's trajectories into one shard per rank, the ranks all-reduce the advantage
    statistics (global normalisation) and every minibatch's gradient (weighted by each
    rank's sample count), and take identical steps. On a batch of at most
    ``minibatch_size`` samples the result equals one
    :class:`~fleetgym.agents.learners.ppo.PPOLearner`'s update on the whole batch up to
    float rounding (``tests/agents/learners/test_data_parallel.py`` checks it).

    Args:
        workload: A :class:`~fleetgym.agents.workloads.Workload` or its name.
        world_size: Number of ranks (``>= 1``).
        seed: Seeds the initial weights (rank ``r`` shuffles with ``seed + r``).
        backend: ``"process"`` (spawned with ``torch.multiprocessing``) or ``"ray"``
            (Ray actors; joins the running cluster or starts a local one).
        timeout_s: Longest wait of any collective, and of the front after a failure.
        port: TCP port on 127.0.0.1 of the group's rendezvous (default: a free one).
        **overrides: PPO hyperparameters (``lr``, ``epochs``, ``minibatch_size``, ...).

    Example:
        >>> from fleetgym.agents.rollout import RolloutWorker
        >>> worker = RolloutWorker("CartPole-v1", actor_id=0, seed=0)
        >>> with DataParallelPPO("CartPole-v1", world_size=2, seed=0, epochs=1) as learner:
        ...     trajs = [worker.rollout(learner.get_weights(), steps=32, policy_version=0)
        ...              for _ in range(2)]
        ...     stats = learner.update(trajs)
        >>> stats.num_samples, stats.policy_version
        (64, 1)

    Raises:
        TypeError / ValueError: For a bad argument, naming it (``world_size`` 0 or
            negative, an unknown backend (a 1.x name such as ``"processes"``: naming
            its 2.0 name), a timeout that is not a positive number).
        FleetError: If a rank cannot start (the group is stopped).
    """

    def __init__(
        self,
        workload: Workload | str,
        world_size: int = 2,
        seed: int = 0,
        *,
        backend: str = "process",
        timeout_s: float = 60.0,
        port: int | None = None,
        **overrides: Any,
    ) -> None:
        self.world_size = check_int("world_size", world_size, 1, MAX_WORLD_SIZE)
        self.backend = check_backend(backend, BACKENDS)
        self.timeout_s = check_float("timeout_s", timeout_s, 0.0, strict=True)
        self.port = free_port() if port is None else check_int("port", port, 1, 65535)
        self.workload = get_workload(workload)
        # Refuse a bad hyperparameter here, before any process starts.
        DistributedPPOLearner.check_arguments(self.workload, seed, overrides)
        self.seed = int(seed)
        self.policy_version = 0
        self.mean_return = 0.0
        self._failed: str | None = None
        args = [
            (rank, self.world_size, self.port, self.timeout_s, self.workload, seed, overrides)
            for rank in range(self.world_size)
        ]
        self._ranks: _ProcessRanks | _RayRanks = _RANKS[self.backend](args)
        replies = self._ranks.collect(self.timeout_s, self.timeout_s + STARTUP_S)
        bad = [(r, reply) for r, reply in enumerate(replies) if reply[0] != "ok"]
        if bad:
            self._ranks.close()
            raise FleetError(
                f"DataParallelPPO: expected {self.world_size} ranks to join the group at "
                f"tcp://127.0.0.1:{self.port}, actual failures: {self._describe(bad)}"
            )
        self._weights: Weights = replies[0][1]

    # ----------------------------------------------------------------- protocol
    def get_weights(self) -> Weights:
        """The weights of the last completed update (rank 0's replica; all are equal)."""
        return {k: v.copy() for k, v in self._weights.items()}

    def replica_weights(self) -> list[Weights]:
        """Every rank's weights, rank by rank (no collective; equal after every update).

        Raises:
            FleetError: If the group is stopped or a rank does not answer within
                ``timeout_s``.
        """
        if self._failed is not None:
            raise FleetError(f"DataParallelPPO: the group is stopped ({self._failed})")
        self._ranks.submit("weights")
        replies = self._ranks.collect(self.timeout_s, self.timeout_s)
        bad = [(r, reply) for r, reply in enumerate(replies) if reply[0] != "ok"]
        if bad:
            raise FleetError(f"DataParallelPPO: replica_weights: {self._describe(bad)}")
        return [reply[1] for reply in replies]

    @property
    def rank_pids(self) -> list[int]:
        """Process ids of the ranks (``backend="process"``; empty for Ray)."""
        return self._ranks.pids

    def update(self, trajectories: Iterable[Trajectory]) -> UpdateStats:
        """One data-parallel update on ``trajectories`` split by :func:`split_trajectories`.

        Args:
            trajectories: The round's trajectories (a non-empty list or any iterable, read
                once); rank ``r`` gets the ``r``-th contiguous shard of near-equal samples.

        Returns:
            Rank 0's :class:`~fleetgym.agents.types.UpdateStats` (over all ranks' samples).

        Raises:
            ValueError / TypeError: If a rank refused its shard (empty, malformed); the
                message names the rank. The group stays usable.
            FleetError: If a rank died or a collective timed out; the survivors rolled
                back and :meth:`get_weights` is unchanged. The group is then stopped.
        """
        given = trajectories
        if isinstance(given, Iterable) and not isinstance(given, (str, bytes, dict)):
            trajectories = list(given)
        if not isinstance(trajectories, list) or not trajectories:
            raise ValueError(
                f"trajectories: expected a non-empty list of Trajectory, actual {quote(given)}"
            )
        return self.update_shards(split_trajectories(trajectories, self.world_size))

    def update_shards(self, shards: Sequence[Sequence[Trajectory]]) -> UpdateStats:
        """One update with ``shards[r]`` on rank ``r`` (a shard may be empty).

        Args:
            shards: One sequence of trajectories per rank, ``world_size`` of them in rank
                order; together they must hold at least one step.

        Returns:
            Rank 0's :class:`~fleetgym.agents.types.UpdateStats` (over all ranks' samples).

        Raises:
            ValueError: If there is not one shard per rank, or as :meth:`update`.
            FleetError: As :meth:`update`, or if the group failed earlier or is closed.
        """
        if self._failed is not None:
            raise FleetError(f"DataParallelPPO: the group is stopped ({self._failed})")
        if not isinstance(shards, Sequence) or len(shards) != self.world_size:
            raise ValueError(
                f"shards: expected {self.world_size} lists of Trajectory (one per rank), "
                f"actual {quote(shards)}"
            )
        self._ranks.submit("update", [list(s) for s in shards])
        replies = self._ranks.collect(self.timeout_s, None)
        bad = [(r, reply) for r, reply in enumerate(replies) if reply[0] != "ok"]
        if not bad:
            stats, weights = replies[0][1]
            self._weights = weights
            self.policy_version = stats.policy_version
            self.mean_return = stats.mean_return
            return stats
        refused = [
            (r, reply[1])
            for r, reply in bad
            if reply[0] == "error" and reply[1][0] in _INPUT_ERRORS
        ]
        if refused and len(bad) == len(refused):
            # The rank whose own shard was refused first, before those told of it.
            refused.sort(key=lambda item: PEER_REFUSAL in item[1][1])
            rank, (kind, message) = refused[0]
            raise _INPUT_ERRORS[kind](f"rank {rank}: {message}")
        self._failed = f"update {self.policy_version + 1} failed: {self._describe(bad)}"
        self.close()
        raise FleetError(
            f"DataParallelPPO: {self._failed}; within timeout_s={self.timeout_s:g}. The "
            f"surviving ranks rolled back, get_weights() is still version {self.policy_version}"
        )

    @staticmethod
    def _describe(bad: list[tuple[int, tuple[str, Any]]]) -> str:
        parts = []
        for rank, (kind, detail) in bad:
            if kind == "dead":
                parts.append(f"rank {rank} died (exit code {detail})")
            elif kind == "silent":
                parts.append(f"rank {rank} did not answer")
            else:
                parts.append(f"rank {rank}: {detail[0]}: {str(detail[1]).strip()}")
        return "; ".join(parts)

    # ----------------------------------------------------------------- lifetime
    def close(self) -> None:
        """Stop the ranks (idempotent)."""
        ranks = getattr(self, "_ranks", None)
        if ranks is not None:
            self._ranks = None  # type: ignore[assignment]
            ranks.close()
        if self._failed is None:
            self._failed = "closed"

    def __enter__(self) -> DataParallelPPO:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __del__(self) -> None:  # pragma: no cover - best effort at interpreter exit
        try:
            self.close()
        except Exception:
            pass
