"""What the pipeline simulation is made of: actors, inference servers, the learner, links.

Each part is a frozen dataclass validated once at construction (``TypeError`` /
``ValueError`` with "expected ..., actual ..."), so a simulation asked for an impossible
shape (0 actors, a negative time, a NaN) fails before any event runs. Times are seconds,
sizes bytes, bandwidths bytes per second (``math.inf``: no serialisation cost).

* :class:`ActorTimes` -- one env step's compute (measured samples, drawn with replacement),
  the per-step policy forward of an actor acting with its own copy, and a per-step wait
  that costs no CPU (a slow simulator, a robot): log-normal per actor, as the workloads'
  ``step_delay_s``/``step_delay_sigma``, or given per actor.
* :class:`ServerTimes` -- the inference server's forward time per batch size (measured
  points, linear between them and beyond the last), its batching rule
  (``max_batch``, ``max_wait_s``, "every client waiting") and how many servers there are.
* :class:`LearnerTimes` -- one update's time, ``fixed_s + per_sample_s * samples``, split
  over ``n_trainers`` data-parallel trainers that all-reduce the gradient.
* :class:`NetworkLinks` -- latency and bandwidths of the rollout nodes, the learner's
  ingress and the trainers' interconnect, and the bytes that cross them.
* :class:`PipelineShape` -- actors, rollout length, batch, admission bound (the
  asynchronous trainer's ``(max_policy_lag + 1) * batch_trajectories`` tickets;
  ``max_policy_lag=0`` is synchronous PPO, a barrier per round), where the policy runs,
  and whether everything shares a few cores (one machine) or each actor has its own.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from fleetgym.agents.backends import INFERENCE_MODES
from fleetgym.validation import check_choice, check_float, check_int, quote

__all__ = [
    "ActorTimes",
    "LearnerTimes",
    "NetworkLinks",
    "PipelineShape",
    "ServerTimes",
]

#: Guards far above any sensible plan: a typo is an error, not an hour-long simulation.
MAX_ACTORS = 100_000
MAX_STEPS_PER_ACTOR = 1_000_000


def _times(name: str, values: object, allow_empty: bool = False) -> tuple[float, ...]:
    """A tuple of finite times >= 0 (each checked, the first bad one named)."""
    if isinstance(values, (str, bytes)) or not hasattr(values, "__iter__"):
        raise TypeError(f"{name}: expected a sequence of seconds, actual {quote(values)}")
    out = tuple(check_float(f"{name}[{i}]", v, 0.0) for i, v in enumerate(values))  # type: ignore[attr-defined]
    if not out and not allow_empty:
        raise ValueError(f"{name}: expected at least one time, actual an empty sequence")
    return out


@dataclass(frozen=True)
class ActorTimes:
    """An actor's time per env step: measured compute, policy forward, and a wait.

    Args:
        step_s: Measured compute seconds of single env steps (drawn with replacement).
        policy_s: Compute seconds of one policy forward when the actor acts with its own
            copy (``inference="local"``); unused with an inference server.
        delay_s: Median per-step wait (no CPU), drawn once per actor, log-normal.
        delay_sigma: Spread of that wait across actors (``delay_s * exp(sigma * z)``).
        delays_s: Each actor's per-step wait, given (replaces the log-normal draw; at
            least as many as the simulation's actors).

    Example:
        >>> a = ActorTimes(step_s=(0.001, 0.003), delay_s=0.01, delay_sigma=1.0)
        >>> a.mean_step_s
        0.002
        >>> a.actor_delays(3, np.random.default_rng(0)).round(4).tolist()
        [0.0113, 0.0088, 0.019]

    Raises:
        TypeError: For a non-number or a ``step_s`` that is not a sequence.
        ValueError: For an empty ``step_s``, a negative, NaN or infinite time.
    """

    step_s: tuple[float, ...]
    policy_s: float = 0.0
    delay_s: float = 0.0
    delay_sigma: float = 0.0
    delays_s: tuple[float, ...] | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "step_s", _times("step_s", self.step_s))
        object.__setattr__(self, "policy_s", check_float("policy_s", self.policy_s, 0.0))
        object.__setattr__(self, "delay_s", check_float("delay_s", self.delay_s, 0.0))
        object.__setattr__(
            self, "delay_sigma", check_float("delay_sigma", self.delay_sigma, 0.0, 10.0)
        )
        if self.delays_s is not None:
            object.__setattr__(self, "delays_s", _times("delays_s", self.delays_s))

    @property
    def mean_step_s(self) -> float:
        """Mean compute of one env step."""
        return float(np.mean(self.step_s))

    def actor_delays(self, n_actors: int, rng: np.random.Generator) -> np.ndarray:
        """The per-step wait of each of ``n_actors`` actors.

        Args:
            n_actors: Number of actors; with ``delays_s`` given, its first ``n_actors``
                entries are returned.
            rng: Generator of the log-normal draws (one standard normal per actor); unused
                when ``delays_s`` is given.

        Returns:
            Seconds of wait per env step, one per actor (``float64``, shape ``(n_actors,)``).

        Raises:
            ValueError: If ``delays_s`` is given but shorter than ``n_actors``.
        """
        if self.delays_s is not None:
            if len(self.delays_s) < n_actors:
                raise ValueError(
                    f"delays_s: expected at least {n_actors} per-actor waits, actual "
                    f"{len(self.delays_s)}"
                )
            return np.asarray(self.delays_s[:n_actors], np.float64)
        z = rng.standard_normal(n_actors)
        return self.delay_s * np.exp(self.delay_sigma * z)


@dataclass(frozen=True)
class ServerTimes:
    """Inference servers: forward seconds per batch size and the batching rule.

    A batch of the oldest ``max_batch`` waiting requests runs when ``max_batch`` wait,
    when the oldest has waited ``max_wait_s``, or at once when every actor of the server
    has a request waiting (the rule of :mod:`fleetgym.agents.inference.batching`).
    Actors are spread round-robin over ``n_servers``.

    Args:
        batch_sizes: Measured batch sizes, increasing, >= 1.
        forward_s: Forward seconds at each of them.
        max_batch: Most requests per forward pass.
        max_wait_s: Longest wait of the oldest request for a batch to fill.
        n_servers: Inference servers.
        speedup: Divides every forward time (a faster accelerator than the one measured).

    Example:
        >>> s = ServerTimes(batch_sizes=(1, 8), forward_s=(0.001, 0.002))
        >>> round(s.forward(4), 6), round(s.forward(15), 6)
        (0.001429, 0.003)

    Raises:
        TypeError: For a non-number.
        ValueError: For mismatched or unordered points, a negative time, counts < 1.
    """

    batch_sizes: tuple[int, ...]
    forward_s: tuple[float, ...]
    max_batch: int = 256
    max_wait_s: float = 0.005
    n_servers: int = 1
    speedup: float = 1.0

    def __post_init__(self) -> None:
        sizes = tuple(check_int(f"batch_sizes[{i}]", b, 1) for i, b in enumerate(self.batch_sizes))
        times = _times("forward_s", self.forward_s)
        if len(sizes) != len(times):
            raise ValueError(
                f"forward_s: expected one time per batch size ({len(sizes)}), actual {len(times)}"
            )
        if any(b >= c for b, c in zip(sizes, sizes[1:], strict=False)):
            raise ValueError(f"batch_sizes: expected increasing sizes, actual {quote(sizes)}")
        object.__setattr__(self, "batch_sizes", sizes)
        object.__setattr__(self, "forward_s", times)
        object.__setattr__(self, "max_batch", check_int("max_batch", self.max_batch, 1))
        object.__setattr__(self, "max_wait_s", check_float("max_wait_s", self.max_wait_s, 0.0))
        object.__setattr__(self, "n_servers", check_int("n_servers", self.n_servers, 1))
        object.__setattr__(self, "speedup", check_float("speedup", self.speedup, 0.0, strict=True))

    def forward(self, batch: int) -> float:
        """Seconds of one forward pass over ``batch`` requests (linear between points).

        Beyond the largest measured size the last segment's slope (if not negative)
        continues; below the smallest, the smallest size's time is used.

        Args:
            batch: Requests in the forward pass (any number, measured or not).
        """
        sizes, times = self.batch_sizes, self.forward_s
        if batch >= sizes[-1] and len(sizes) > 1:
            slope = (times[-1] - times[-2]) / (sizes[-1] - sizes[-2])
            value = times[-1] + max(slope, 0.0) * (batch - sizes[-1])
        else:
            value = float(np.interp(batch, sizes, times))
        return value / self.speedup


@dataclass(frozen=True)
class LearnerTimes:
    """One update's time: ``(fixed_s + per_sample_s * samples / n_trainers) / speedup``.

    With ``n_trainers > 1`` each update also all-reduces the gradient (a ring: ``2 (n - 1)
    / n`` of the weights over the trainer interconnect, see :class:`NetworkLinks`).

    Args:
        fixed_s: Seconds of an update independent of its size.
        per_sample_s: Seconds per sample of the batch (all epochs).
        n_trainers: Data-parallel trainers sharing each batch.
        speedup: Divides the compute (a faster accelerator than the one measured).

    Example:
        >>> LearnerTimes(fixed_s=0.01, per_sample_s=1e-4).update_s(1000)
        0.11

    Raises:
        TypeError: For a non-number.
        ValueError: For a negative time, ``n_trainers < 1``, ``speedup <= 0``.
    """

    fixed_s: float
    per_sample_s: float
    n_trainers: int = 1
    speedup: float = 1.0

    def __post_init__(self) -> None:
        object.__setattr__(self, "fixed_s", check_float("fixed_s", self.fixed_s, 0.0))
        object.__setattr__(
            self, "per_sample_s", check_float("per_sample_s", self.per_sample_s, 0.0)
        )
        object.__setattr__(self, "n_trainers", check_int("n_trainers", self.n_trainers, 1))
        object.__setattr__(self, "speedup", check_float("speedup", self.speedup, 0.0, strict=True))

    def update_s(self, samples: int, links: NetworkLinks | None = None) -> float:
        """Seconds of one update over ``samples`` samples (all-reduce included).

        Args:
            samples: Samples (env steps) in the update's batch; each costs ``per_sample_s``,
                split over the trainers.
            links: Where the all-reduce of ``n_trainers > 1`` goes (its ``weight_bytes``,
                ``trainer_bandwidth_Bps`` and ``latency_s``); None: compute only, no
                all-reduce cost.
        """
        compute = (self.fixed_s + self.per_sample_s * samples / self.n_trainers) / self.speedup
        if self.n_trainers == 1 or links is None:
            return compute
        n = self.n_trainers
        ring = 2.0 * (n - 1) / n * links.weight_bytes / links.trainer_bandwidth_Bps
        return compute + ring + 2.0 * (n - 1) * links.latency_s


@dataclass(frozen=True)
class NetworkLinks:
    """The links weights, observations and trajectories cross (default: one machine).

    An actor's trajectory leaves through its rollout node's link (shared, first come
    first served, by ``actors_per_node`` actors) and enters through the learner's; weights
    go the other way after each update (to each actor acting locally, or to each server).

    Args:
        latency_s: One-way latency of every hop.
        actor_bandwidth_Bps: Bandwidth of a rollout node's link.
        learner_bandwidth_Bps: Bandwidth of the learner's ingress (and of each server's).
        trainer_bandwidth_Bps: Bandwidth between trainers (the all-reduce).
        weight_bytes: Size of the policy's weights.
        obs_bytes: Size of one observation (an inference request).
        step_bytes: Bytes one env step adds to a trajectory.
        actors_per_node: Actors sharing one rollout node's link.

    Example:
        >>> NetworkLinks(latency_s=1e-4, actor_bandwidth_Bps=1.25e9).transfer_s(1.25e6, 1.25e9)
        0.0011

    Raises:
        TypeError: For a non-number.
        ValueError: For a negative time or size, a bandwidth <= 0 or NaN.
    """

    latency_s: float = 0.0
    actor_bandwidth_Bps: float = math.inf
    learner_bandwidth_Bps: float = math.inf
    trainer_bandwidth_Bps: float = math.inf
    weight_bytes: float = 0.0
    obs_bytes: float = 0.0
    step_bytes: float = 0.0
    actors_per_node: int = 1

    def __post_init__(self) -> None:
        object.__setattr__(self, "latency_s", check_float("latency_s", self.latency_s, 0.0))
        for name in ("actor_bandwidth_Bps", "learner_bandwidth_Bps", "trainer_bandwidth_Bps"):
            value = check_float(name, getattr(self, name), 0.0, strict=True, allow_inf=True)
            object.__setattr__(self, name, value)
        for name in ("weight_bytes", "obs_bytes", "step_bytes"):
            object.__setattr__(self, name, check_float(name, getattr(self, name), 0.0))
        object.__setattr__(
            self, "actors_per_node", check_int("actors_per_node", self.actors_per_node, 1)
        )

    def transfer_s(self, size: float, bandwidth: float) -> float:
        """Latency plus serialisation of ``size`` bytes at ``bandwidth``.

        Args:
            size: Bytes to transfer (>= 0).
            bandwidth: Bytes per second of the link (> 0; ``math.inf``: latency only).
        """
        return self.latency_s + size / bandwidth


@dataclass(frozen=True)
class PipelineShape:
    """The pipeline's shape: actors, rollouts, batches, the admission bound, the cores.

    ``cpu_slots=None`` gives every actor its own core and the learner and servers their
    own devices (a cluster). ``cpu_slots=k`` makes every compute job -- each env step,
    policy forward, server forward, and the learner's update in ``quantum_s`` pieces --
    queue first come first served for ``k`` shared slots (one machine; ``k=1`` for
    threads under Python's GIL); a job whose thread was waiting (an actor's per-step
    wait, a reply, a server woken by requests) and finds no free slot also pays
    ``switch_s``, the hand-over of the slot.

    Args:
        n_actors: Actor slots (>= 1).
        steps_per_actor: Env steps per rollout (>= 1).
        batch_trajectories: Trajectories per update (None: ``n_actors``).
        max_policy_lag: The admission bound in updates (0: synchronous, a barrier).
        inference: ``"local"`` (each actor's own policy copy) or ``"server"``: the
            trainer's ``inference=`` (:data:`fleetgym.agents.backends.INFERENCE_MODES`).
        cpu_slots: Shared compute slots, or None (each actor on its own core).
        quantum_s: Piece of an update that queues at once for a shared slot.
        switch_s: Cost of a hand-over (a job that waited for a shared slot).

    Example:
        >>> PipelineShape(n_actors=8, steps_per_actor=128, max_policy_lag=4).capacity
        40

    Raises:
        TypeError: For a non-integer count or a non-number time.
        ValueError: For 0 actors or steps, a negative lag or time, an unknown inference.
    """

    n_actors: int
    steps_per_actor: int
    batch_trajectories: int | None = None
    max_policy_lag: int = 0
    inference: str = "local"
    cpu_slots: int | None = None
    quantum_s: float = 0.001
    switch_s: float = 0.0

    def __post_init__(self) -> None:
        object.__setattr__(self, "n_actors", check_int("n_actors", self.n_actors, 1, MAX_ACTORS))
        steps = check_int("steps_per_actor", self.steps_per_actor, 1, MAX_STEPS_PER_ACTOR)
        object.__setattr__(self, "steps_per_actor", steps)
        batch = self.n_actors if self.batch_trajectories is None else self.batch_trajectories
        object.__setattr__(
            self, "batch_trajectories", check_int("batch_trajectories", batch, 1, MAX_ACTORS)
        )
        object.__setattr__(
            self, "max_policy_lag", check_int("max_policy_lag", self.max_policy_lag, 0, 100_000)
        )
        object.__setattr__(
            self, "inference", check_choice("inference", self.inference, INFERENCE_MODES)
        )
        if self.cpu_slots is not None:
            object.__setattr__(self, "cpu_slots", check_int("cpu_slots", self.cpu_slots, 1, 4096))
        object.__setattr__(
            self, "quantum_s", check_float("quantum_s", self.quantum_s, 0.0, strict=True)
        )
        object.__setattr__(self, "switch_s", check_float("switch_s", self.switch_s, 0.0))

    @property
    def batch(self) -> int:
        """Trajectories per update."""
        return int(self.batch_trajectories or self.n_actors)

    @property
    def capacity(self) -> int:
        """Most trajectories collecting, queued or in an update at once (admission tickets)."""
        return (self.max_policy_lag + 1) * self.batch

    @property
    def synchronous(self) -> bool:
        """A barrier per round (``max_policy_lag == 0``)."""
        return self.max_policy_lag == 0
