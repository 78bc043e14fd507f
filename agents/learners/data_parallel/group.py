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

Checkpoints and resume: the group is a learner of
:func:`~fleetgym.agents.learners.training.train`, whose ``checkpoints=`` and ``resume=``
save and restore it (:meth:`DataParallelPPO.state`, :meth:`DataParallelPPO.restore_state`):
rank 0's weights (with the observation statistics), optimiser, counters and return
window, and every rank's shuffle generator; a resume loads them into every rank, so the
replicas are equal again. With an :class:`~fleetgym.agents.fleet.InProcessFleet` (its
actors are saved too) a resumed run's updates are bit-identical to an uninterrupted run's
on the same machine and torch build; with a process or Ray fleet the actors' episodes
restart, so they are not. Not saved: the process group itself (the resumed group is a new
one, on any port and backend) and ``timeout_s``.

The ranks themselves run in :mod:`~fleetgym.agents.learners.data_parallel.hosts`.
"""

from __future__ import annotations

import socket
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from fleetgym.agents.backends import check_backend
from fleetgym.agents.learners.data_parallel.hosts import (
    RANKS,
    ProcessRanks,
    RayRanks,
    pack,
    unpack,
)
from fleetgym.agents.learners.data_parallel.rank import (
    PEER_REFUSAL,
    DistributedPPOLearner,
    group_generators,
)
from fleetgym.agents.types import Trajectory, UpdateStats, Weights
from fleetgym.agents.workloads import Workload, get_workload
from fleetgym.errors import FleetError
from fleetgym.validation import check_float, check_int, quote

__all__ = [
    "BACKENDS",
    "DataParallelPPO",
    "free_port",
    "split_trajectories",
]

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


class DataParallelPPO:
    """PPO over ``world_size`` data-parallel learner ranks (gloo all-reduce), as one learner.

    Models AcceRL's trainer tier on CPU: the ranks hold equal replicas; each update splits
    the round's trajectories into one shard per rank, the ranks all-reduce the advantage
    statistics (global normalisation) and every minibatch's gradient (weighted by each
    rank's sample count), and take identical steps. On a batch of at most
    ``minibatch_size`` samples the result equals one
    :class:`~fleetgym.agents.learners.ppo.PPOLearner`'s update on the whole batch up to
    float rounding (``tests/agents/learners/test_data_parallel.py`` checks it). Trained
    by :func:`~fleetgym.agents.learners.training.train`, it is checkpointed and resumed
    with its ``checkpoints=`` and ``resume=`` (:meth:`state`, :meth:`restore_state`).

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
        self._ranks: ProcessRanks | RayRanks = RANKS[self.backend](args)
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
        return self._ask("weights")

    def _ask(self, method: str, payloads: list[Any] | None = None) -> list[Any]:
        """Every rank's answer to a request without a collective, rank by rank."""
        if self._failed is not None:
            raise FleetError(f"DataParallelPPO: the group is stopped ({self._failed})")
        self._ranks.submit(method, payloads)
        replies = self._ranks.collect(self.timeout_s, self.timeout_s)
        bad = [(r, reply) for r, reply in enumerate(replies) if reply[0] != "ok"]
        if bad:
            name = "replica_weights" if method == "weights" else method
            raise FleetError(f"DataParallelPPO: {name}: {self._describe(bad)}")
        return [reply[1] for reply in replies]

    # ----------------------------------------------------------------- checkpoints
    def state(self) -> dict[str, Any]:
        """The group's learner state, for a checkpoint (tensors and plain values only).

        Rank 0's :meth:`~fleetgym.agents.learners.ppo.PPOLearner.state` (weights with the
        observation statistics, optimiser, shuffle generator, ``meta``: version, counters,
        return window, hyperparameters; every rank holds the same but its generator), and
        ``data_parallel``: ``world_size`` and ``rank_generators``, each rank's shuffle
        generator in rank order. :func:`~fleetgym.agents.learners.training.train` saves it
        in its checkpoints and :meth:`restore_state` puts it back.

        Raises:
            FleetError: If the group is stopped or a rank does not answer within
                ``timeout_s``.
        """
        replies = [
            unpack(data)
            for data in self._ask("state", [rank == 0 for rank in range(self.world_size)])
        ]
        state: dict[str, Any] = replies[0]
        state["data_parallel"] = {
            "world_size": self.world_size,
            "rank_generators": [reply["generator"] for reply in replies],
        }
        return state

    def replica_states(self) -> list[dict[str, Any]]:
        """Every rank's own learner state, rank by rank (no collective).

        After every update and after :meth:`restore_state` the states are equal but the
        shuffle generators (rank ``r`` shuffles with its own).

        Raises:
            FleetError: If the group is stopped or a rank does not answer within
                ``timeout_s``.
        """
        return [unpack(data) for data in self._ask("state", [True] * self.world_size)]

    def restore_state(self, state: dict[str, Any], where: str | Path = "state") -> None:
        """Put every rank back at ``state`` (what :meth:`state` returned, as read back).

        Each rank checks the whole state before it takes any of it, then loads rank 0's
        weights, optimiser state and counters, and its own shuffle generator from
        ``data_parallel`` (a state without it, a
        :class:`~fleetgym.agents.learners.ppo.PPOLearner`'s, gives every rank its
        ``generator``): the ranks are in sync again, as after an update.

        Args:
            state: A :meth:`state` dict (or a PPOLearner's ``state()`` of this workload
                and policy).
            where: Where ``state`` came from (a checkpoint file), named in every error.

        Raises:
            ValueError / TypeError: Naming ``where``, if the state does not fit this
                group (another workload or policy, another ``world_size``, an impossible
                value); no rank changed.
            FleetError: If the group is stopped, or a rank died or did not answer within
                ``timeout_s`` (the group is then stopped).
        """
        if self._failed is not None:
            raise FleetError(f"DataParallelPPO: the group is stopped ({self._failed})")
        if not isinstance(state, dict):
            raise TypeError(f"{where}: expected a learner state (a dict), actual {quote(state)}")
        group_generators(state, self.world_size, where)  # refused here before any rank
        try:
            data = pack(state)
        except Exception as exc:  # e.g. an object torch.save cannot write
            raise TypeError(
                f"{where}: expected a learner state of tensors and plain values, actual one "
                f"torch.save refused ({type(exc).__name__})"
            ) from None
        self._ranks.submit("restore", [(data, str(where))] * self.world_size)
        replies = self._ranks.collect(self.timeout_s, self.timeout_s)
        bad = [(r, reply) for r, reply in enumerate(replies) if reply[0] != "ok"]
        if not bad:
            self._weights, self.policy_version, self.mean_return = replies[0][1]
            return
        refused = [reply[1] for _, reply in bad if reply[0] == "error"]
        if len(bad) == self.world_size and all(kind in _INPUT_ERRORS for kind, _ in refused):
            kind, message = refused[0]  # every rank checked the same state: one message
            raise _INPUT_ERRORS[kind](message)
        # Some ranks took the state and some did not: the replicas are out of step.
        self._failed = f"restore_state failed: {self._describe(bad)}"
        self.close()
        raise FleetError(f"DataParallelPPO: {self._failed}; the group is stopped")

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
