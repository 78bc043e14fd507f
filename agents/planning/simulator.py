"""The discrete-event simulation of the actor-learner pipeline and what it reports.

:func:`simulate` replays the asynchronous trainer's loop
(:class:`~fleetgym.agents.learners.asynchronous.trainer.AsyncPPO`) on a simulated clock:

1. An actor takes an admission ticket (at most :attr:`PipelineShape.capacity` out at
   once; it waits, first come first served, while none is free), fetches the newest
   weights if its copy is stale (acting locally), and collects ``steps_per_actor`` env
   steps. Each step costs a measured compute draw and the actor's wait; acting locally
   it adds a policy forward, acting through a server it sends the observation, waits for
   the batch it lands in (the server's batching rule and measured forward time per batch
   size), then steps.
2. The whole trajectory crosses the rollout node's link and the learner's ingress (first
   come first served) and joins the learner's queue; the actor goes back to step 1.
3. The learner takes the oldest ``batch_trajectories`` trajectories, updates (measured
   time; with shared cores in ``quantum_s`` pieces that queue with the actors' steps),
   publishes (version + 1, weights sent to every server) and ends those tickets (with
   servers, once the weights reached them).

The lag of a trajectory is the learner's version when the update starts minus the
version it was collected with (the weights an actor fetched, or the version of the batch
that answered its first request); a trajectory older than ``max_policy_lag`` is dropped
by the learner, as :class:`~fleetgym.agents.learners.lag.CompensatedPPOLearner` does, and
counted. With ``max_policy_lag=0`` every actor waits at the admission for the update: a
barrier per round, whose round time is the slowest actor's rollout plus the update.

Invariants (tested): learner utilisation <= 1, the admission bound is never exceeded, a
deterministic case gives the throughput computable by hand, the same seed gives the same
result.
"""

from __future__ import annotations

import collections
import heapq
import math

import numpy as np

from fleetgym.agents.planning.model import (
    ActorTimes,
    LearnerTimes,
    NetworkLinks,
    PipelineShape,
    ServerTimes,
)
from fleetgym.agents.planning.result import SimulationResult
from fleetgym.validation import check_int

__all__ = ["MAX_EVENTS", "simulate"]

#: Most events one simulation runs (a guard: far above any grid point ``fleetgym plan`` runs).
MAX_EVENTS = 50_000_000

(
    _READY,
    _STEP,
    _DONE,
    _ARRIVE,
    _QUANTUM,
    _UPDATED,
    _REQUEST,
    _DUE,
    _FORWARD,
    _WEIGHTS,
    _RELEASE,
) = range(11)


class _Draws:
    """Measured step times drawn with replacement, a block at a time (fast)."""

    def __init__(self, samples: tuple[float, ...], rng: np.random.Generator) -> None:
        self._samples = np.asarray(samples, np.float64)
        self._rng = rng
        self._block = np.empty(0)
        self._list: list[float] = []
        self._next = 0

    def take(self, n: int) -> np.ndarray:
        if len(self._samples) == 1:
            return np.full(n, self._samples[0])
        if self._next + n > len(self._block):
            self._refill(n)
        out = self._block[self._next : self._next + n]
        self._next += n
        return out

    def one(self) -> float:
        """One draw (the same stream as :meth:`take`, without an array)."""
        if len(self._samples) == 1:
            return float(self._samples[0])
        if self._next >= len(self._block):
            self._refill(1)
        self._next += 1
        return self._list[self._next - 1]

    def _refill(self, n: int) -> None:
        self._block = self._rng.choice(self._samples, max(65536, n))
        self._list = self._block.tolist()
        self._next = 0


class _Simulation:
    """The state of one run (see the module docstring for the loop)."""

    def __init__(
        self,
        shape: PipelineShape,
        actor: ActorTimes,
        learner: LearnerTimes,
        server: ServerTimes | None,
        links: NetworkLinks,
        updates: int,
        warmup: int,
        seed: int,
    ) -> None:
        self.shape, self.actor, self.learner, self.server, self.links = (
            shape,
            actor,
            learner,
            server,
            links,
        )
        self.updates, self.warmup = updates, warmup
        rng = np.random.default_rng(seed)
        self.delays: list[float] = actor.actor_delays(shape.n_actors, rng).tolist()
        self.draws = _Draws(actor.step_s, rng)
        self.served = shape.inference == "server"
        self.per_step = self.served or shape.cpu_slots is not None
        self.pool: list[float] | None = None if shape.cpu_slots is None else [0.0] * shape.cpu_slots
        self.heap: list[tuple[float, int, int, int, object]] = []
        self.seq = 0
        n = shape.n_actors
        self.steps_done = [0] * n
        self.behaviour = [0] * n  # version each actor's current rollout acts with
        self.copy_version = [-1] * n  # version of each actor's local weights
        self.first_answered = [False] * n
        self.waiting_since = [0.0] * n
        self.waiters: collections.deque[int] = collections.deque()
        self.outstanding = self.max_outstanding = 0
        self.blocked_s = 0.0
        nodes = -(-n // links.actors_per_node)
        self.up_free = [0.0] * nodes
        self.down_free = [0.0] * nodes
        self.ingress_free = 0.0
        # Learner.
        self.queue: collections.deque[tuple[int, int]] = collections.deque()
        self.version = 0
        self.learning = False
        self.update_began = self.update_left = self.quantum = 0.0
        self.batch_steps = 0
        self.done_updates = 0
        self.window_start = 0.0
        self.busy = 0.0
        self.steps = self.dropped = 0
        self.lags: collections.Counter[int] = collections.Counter()
        # Servers.
        m = server.n_servers if server is not None else 0
        self.s_queue: list[collections.deque[tuple[float, int]]] = [
            collections.deque() for _ in range(m)
        ]
        self.s_busy = [False] * m
        self.s_version = [0] * m
        self.s_due: list[float | None] = [None] * m
        self.s_clients = [len(range(s, n, m)) for s in range(m)]
        self.batches: collections.Counter[int] = collections.Counter()

    # ------------------------------------------------------------------ plumbing
    def push(self, time: float, kind: int, who: int = 0, payload: object = None) -> None:
        self.seq += 1
        heapq.heappush(self.heap, (time, self.seq, kind, who, payload))

    def compute(self, now: float, seconds: float, woke: bool = False) -> float:
        """When a compute job of ``seconds`` submitted ``now`` ends (shared slots queue).

        ``woke``: the job's thread was waiting (a sleep, a reply) and must take a slot
        back; if none is free it also pays the hand-over ``switch_s``.
        """
        if self.pool is None:
            return now + seconds
        free = heapq.heappop(self.pool)
        if free > now:
            now, seconds = free, seconds + (self.shape.switch_s if woke else 0.0)
        end = now + seconds
        heapq.heappush(self.pool, end)
        return end

    # ------------------------------------------------------------------ actors
    def ready(self, now: float, a: int) -> None:
        if self.outstanding < self.shape.capacity:
            self.admit(now, a)
        else:
            self.waiting_since[a] = now
            self.waiters.append(a)

    def admit(self, now: float, a: int) -> None:
        self.outstanding += 1
        self.max_outstanding = max(self.max_outstanding, self.outstanding)
        self.steps_done[a] = 0
        start = now
        if self.served:
            self.first_answered[a] = False
            self.request(start, a)
            return
        self.behaviour[a] = self.version
        if self.copy_version[a] != self.version:
            self.copy_version[a] = self.version
            if self.links.weight_bytes or self.links.latency_s:
                node = a // self.links.actors_per_node
                begin = max(now, self.down_free[node])
                self.down_free[node] = (
                    begin + self.links.weight_bytes / self.links.actor_bandwidth_Bps
                )
                start = self.down_free[node] + self.links.latency_s
        if self.per_step:
            self.push(start, _STEP, a)
        else:
            steps = self.shape.steps_per_actor
            per_step = self.draws.take(steps).sum() + steps * (self.actor.policy_s + self.delays[a])
            self.push(start + float(per_step), _DONE, a)

    def step(self, now: float, a: int) -> None:
        compute = self.draws.one()
        if not self.served:
            compute += self.actor.policy_s
        delay = self.delays[a]
        after = self.compute(now, compute, self.served or delay > 0.0) + delay
        self.steps_done[a] += 1
        if self.steps_done[a] >= self.shape.steps_per_actor:
            self.push(after, _DONE, a)
        elif self.served:
            self.request(after, a)
        else:
            self.push(after, _STEP, a)

    def request(self, now: float, a: int) -> None:
        arrive = (
            now + self.links.latency_s + self.links.obs_bytes / self.links.learner_bandwidth_Bps
        )
        self.push(arrive, _REQUEST, a)

    def rollout_done(self, now: float, a: int) -> None:
        size = self.shape.steps_per_actor * self.links.step_bytes
        arrive = now
        if size or self.links.latency_s:
            node = a // self.links.actors_per_node
            begin = max(now, self.up_free[node])
            self.up_free[node] = begin + size / self.links.actor_bandwidth_Bps
            begin = max(self.up_free[node], self.ingress_free)
            self.ingress_free = begin + size / self.links.learner_bandwidth_Bps
            arrive = self.ingress_free + self.links.latency_s
        self.push(arrive, _ARRIVE, a, self.behaviour[a])
        self.ready(now, a)

    # ------------------------------------------------------------------ servers
    def dispatch(self, now: float, s: int) -> None:
        queue, server = self.s_queue[s], self.server
        assert server is not None
        if self.s_busy[s] or not queue:
            return
        deadline = queue[0][0] + server.max_wait_s
        due = (
            len(queue) >= server.max_batch
            or len(queue) >= self.s_clients[s]
            or now >= deadline - 1e-12
        )
        if not due:
            if self.s_due[s] != deadline:
                self.s_due[s] = deadline
                self.push(deadline, _DUE, s)
            return
        batch = [queue.popleft()[1] for _ in range(min(len(queue), server.max_batch))]
        self.s_busy[s] = True
        if self.done_updates >= self.warmup:
            self.batches[len(batch)] += 1
        end = self.compute(now, server.forward(len(batch)), woke=True)
        self.push(end, _FORWARD, s, (batch, self.s_version[s]))

    def forwarded(self, now: float, s: int, payload: tuple[list[int], int]) -> None:
        batch, version = payload
        self.s_busy[s] = False
        for a in batch:
            if not self.first_answered[a]:
                self.first_answered[a] = True
                self.behaviour[a] = version
            if self.pool is None:  # nothing shared: the step needs no event of its own
                self.step(now + self.links.latency_s, a)
            else:
                self.push(now + self.links.latency_s, _STEP, a)
        self.dispatch(now, s)

    # ------------------------------------------------------------------ learner
    def try_update(self, now: float) -> None:
        batch = self.shape.batch
        if self.learning or len(self.queue) < batch or self.done_updates >= self.updates:
            return
        steps = 0
        counted = self.done_updates >= self.warmup
        for _ in range(batch):
            length, version = self.queue.popleft()
            lag = self.version - version
            steps += length
            if counted:
                self.lags[lag] += length
                if lag > self.shape.max_policy_lag:
                    self.dropped += length
        self.batch_steps = steps
        self.learning = True
        self.update_began = now
        duration = self.learner.update_s(steps, self.links)
        if self.pool is None:
            self.push(now + duration, _UPDATED)
        else:
            self.update_left = duration
            self.next_quantum(now)

    def next_quantum(self, now: float) -> None:
        self.quantum = min(self.shape.quantum_s, self.update_left)
        self.push(self.compute(now, self.quantum), _QUANTUM)

    def updated(self, now: float) -> None:
        if self.done_updates >= self.warmup:
            self.busy += now - self.update_began
            self.steps += self.batch_steps
        self.learning = False
        self.version += 1
        self.done_updates += 1
        if self.done_updates == self.warmup:
            self.window_start = now
        if self.server is None:
            self.release(now)
        else:
            # Published means at the servers: the tickets end once the weights arrived,
            # so no actor admitted for the next round is answered by the old ones.
            delay = self.links.transfer_s(self.links.weight_bytes, self.links.learner_bandwidth_Bps)
            for s in range(self.server.n_servers):
                self.push(now + delay, _WEIGHTS, s, self.version)
            self.push(now + delay, _RELEASE)
        self.try_update(now)

    def release(self, now: float) -> None:
        """End the tickets of the batch just published; admit the waiting actors."""
        self.outstanding -= self.shape.batch
        while self.waiters and self.outstanding < self.shape.capacity:
            a = self.waiters.popleft()
            self.blocked_s += now - self.waiting_since[a]
            self.admit(now, a)

    # ------------------------------------------------------------------ loop
    def run(self) -> SimulationResult:
        for a in range(self.shape.n_actors):
            self.ready(0.0, a)
        now, events = 0.0, 0
        while self.done_updates < self.updates:
            if not self.heap:  # pragma: no cover - the admission bound >= a batch rules it out
                raise RuntimeError("the simulated pipeline stalled (no event left)")
            events += 1
            if events > MAX_EVENTS:
                raise ValueError(
                    f"expected a simulation of at most {MAX_EVENTS} events, actual more: "
                    "fewer actors, steps or updates"
                )
            now, _, kind, who, payload = heapq.heappop(self.heap)
            if kind == _STEP:
                self.step(now, who)
            elif kind == _REQUEST:
                self.s_queue[who % len(self.s_queue)].append((now, who))
                self.dispatch(now, who % len(self.s_queue))
            elif kind == _FORWARD:
                self.forwarded(now, who, payload)  # type: ignore[arg-type]
            elif kind == _DUE:
                if self.s_due[who] == now:
                    self.s_due[who] = None
                    self.dispatch(now, who)
            elif kind == _DONE:
                self.rollout_done(now, who)
            elif kind == _ARRIVE:
                self.queue.append((self.shape.steps_per_actor, int(payload)))  # type: ignore[call-overload]
                self.try_update(now)
            elif kind == _QUANTUM:
                self.update_left -= self.quantum
                if self.update_left > 1e-12:
                    self.next_quantum(now)
                else:
                    self.updated(now)
            elif kind == _UPDATED:
                self.updated(now)
            elif kind == _RELEASE:
                self.release(now)
            elif kind == _WEIGHTS:
                self.s_version[who] = max(self.s_version[who], int(payload))  # type: ignore[call-overload]
        wall = now - self.window_start
        blocked = self.blocked_s + sum(now - self.waiting_since[a] for a in self.waiters)
        return SimulationResult(
            env_steps_per_s=self.steps / wall if wall > 0 else math.inf,
            learner_utilisation=self.busy / wall if wall > 0 else 1.0,
            wall_s=wall,
            env_steps=self.steps,
            updates=self.done_updates - self.warmup,
            server_batches=dict(sorted(self.batches.items())),
            lag_samples=dict(sorted(self.lags.items())),
            dropped_fraction=self.dropped / self.steps if self.steps else 0.0,
            actor_wait_fraction=blocked / (self.shape.n_actors * now) if now > 0 else 0.0,
            max_outstanding=self.max_outstanding,
        )


def simulate(
    shape: PipelineShape,
    actor: ActorTimes,
    learner: LearnerTimes,
    server: ServerTimes | None = None,
    links: NetworkLinks | None = None,
    updates: int = 20,
    warmup_updates: int = 2,
    seed: int = 0,
) -> SimulationResult:
    """Simulate the pipeline until ``updates`` updates finished; report the window after
    the first ``warmup_updates`` (0: from the start, as a measured run's wall time).

    Args:
        shape: Actors, rollouts, batch, admission bound and cores.
        actor: Per-step times of the actors.
        learner: Update times.
        server: The inference servers (required with ``shape.inference == "server"``).
        links: The network (default: one machine, no transfer cost).
        updates: Updates to simulate (>= 1).
        warmup_updates: Updates left out of the reported window (``< updates``).
        seed: Seeds the step-time draws and the actors' waits.

    Example:
        >>> from fleetgym.agents.planning import ActorTimes, LearnerTimes, PipelineShape
        >>> actor = ActorTimes(step_s=(0.001,), delays_s=(0.0, 0.001))
        >>> sync = simulate(PipelineShape(2, 100), actor, LearnerTimes(0.1, 0.0), updates=5)
        >>> round(sync.env_steps_per_s)  # 200 steps per round: 0.2 s (slowest) + 0.1 s
        667
        >>> lagged = PipelineShape(2, 100, max_policy_lag=4)
        >>> round(simulate(lagged, actor, LearnerTimes(0.1, 0.0), updates=20).env_steps_per_s)
        1500

    Asynchronously the learner waits for no one: 15 trajectories/s reach it (10 from the
    fast actor, 5 from the slow one) and it keeps up with them.

    Returns:
        The :class:`SimulationResult` of the window.

    Raises:
        TypeError: For a part of the wrong type or a non-integer count.
        ValueError: For ``updates < 1``, ``warmup_updates`` not below ``updates``, a
            server missing (or its actors' waits too few), or a simulation past
            :data:`MAX_EVENTS`.
    """
    for name, value, kind in (
        ("shape", shape, PipelineShape),
        ("actor", actor, ActorTimes),
        ("learner", learner, LearnerTimes),
    ):
        if not isinstance(value, kind):
            raise TypeError(f"{name}: expected a {kind.__name__}, actual {type(value).__name__}")
    if server is not None and not isinstance(server, ServerTimes):
        raise TypeError(f"server: expected a ServerTimes or None, actual {type(server).__name__}")
    if links is not None and not isinstance(links, NetworkLinks):
        raise TypeError(f"links: expected a NetworkLinks or None, actual {type(links).__name__}")
    updates = check_int("updates", updates, 1, 1_000_000)
    warmup_updates = check_int("warmup_updates", warmup_updates, 0, updates - 1)
    seed = check_int("seed", seed, 0)
    if shape.inference == "server" and server is None:
        raise ValueError("server: expected a ServerTimes with inference='server', actual None")
    sim = _Simulation(
        shape, actor, learner, server, links or NetworkLinks(), updates, warmup_updates, seed
    )
    return sim.run()
