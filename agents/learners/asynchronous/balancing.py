"""Load balancing of env instances across actors: rounds, home queues, work stealing.

With ``envs_per_actor = k`` each of the ``n_actors`` actors hosts ``k`` env instances
(instance ``i`` starts on actor ``i // k``); an instance is the unit of work and carries
its own env, seed and episode (its rollouts continue one another whichever actor runs
them). Collection goes in rounds: in each round every instance runs one rollout (every env
instance contributes equally, as in AcceRL's rollout tier), and the next round starts when
the last rollout of this one has finished (an instance is never queued while it runs). An actor runs the instances of its own
queue one after the other. Without balancing (static assignment) an actor whose queue is
empty waits for the next round, so the round lasts as long as its slowest actor. With
``load_balancing=True`` an idle actor steals the last queued instance of the actor that
is furthest behind, judged by its measured step rate (the expected time to empty its
queue), when that actor would start it later than the thief would finish it; the instance
then lives on the thief (a migration: later rounds queue it there).

:class:`InstanceScheduler` holds that state under one lock; it runs nothing itself (the
actor threads of :class:`~fleetgym.agents.learners.asynchronous.slots.AsyncActorSlots`
call :meth:`~InstanceScheduler.acquire` and :meth:`~InstanceScheduler.release`). Numpy-free
and torch-free.
"""

from __future__ import annotations

import collections
import threading
import time
from collections.abc import Callable

__all__ = ["InstanceScheduler"]

#: Weight of the newest rollout in an actor's step-rate estimate (exponential average).
RATE_SMOOTHING = 0.5


class InstanceScheduler:
    """Which actor runs which env instance, round by round, with optional work stealing.

    Args:
        n_actors: Actors (>= 1).
        envs_per_actor: Env instances each actor hosts at the start (>= 1).
        load_balancing: Let idle actors steal queued instances.
        clock: Seconds, monotonic (for tests).

    Example:
        >>> s = InstanceScheduler(n_actors=2, envs_per_actor=2, load_balancing=True)
        >>> s.home
        [0, 0, 1, 1]
        >>> s.acquire(1), s.acquire(1)
        (2, 3)
        >>> s.release(1, 3, steps=10, seconds=0.1)
        >>> s.acquire(1)  # actor 1 is idle: it steals actor 0's last queued instance
        1
        >>> s.migrations, s.home
        (1, [0, 1, 1, 1])
    """

    def __init__(
        self,
        n_actors: int,
        envs_per_actor: int,
        load_balancing: bool,
        clock: Callable[[], float] = time.perf_counter,
    ) -> None:
        self.n_actors = n_actors
        self.n_instances = n_actors * envs_per_actor
        self.load_balancing = load_balancing
        self._clock = clock
        #: The actor each instance lives on (changes with each migration).
        self.home = [i // envs_per_actor for i in range(self.n_instances)]
        self._queues: list[collections.deque[int]] = [collections.deque() for _ in range(n_actors)]
        #: Each actor's measured env steps per second (None until its first rollout).
        self.rates: list[float | None] = [None] * n_actors
        self._started_at: dict[int, float] = {}  # actor -> when its current rollout began
        self._running: dict[int, int] = {}  # instance -> actor running it
        #: Rollouts begun in the current round, the round's index, the migrations so far.
        self.round = 0
        self._begun = 0
        self.migrations = 0
        #: Rollouts per instance so far (each round adds one to every instance).
        self.rollouts = [0] * self.n_instances
        self._rollout_steps = 1  # env steps per rollout (as last reported)
        self.cond = threading.Condition()
        self.stopped = False
        self._fill()

    def _fill(self) -> None:
        for instance, actor in enumerate(self.home):
            self._queues[actor].append(instance)
        self._begun = 0

    def queued(self, actor: int) -> list[int]:
        """The instances waiting on ``actor`` in this round, in order."""
        with self.cond:
            return list(self._queues[actor])

    def _round_time(self, actor: int, queued: int) -> float:
        """Expected seconds for ``actor`` to run ``queued`` rollouts at its measured rate."""
        rate = self.rates[actor]
        known = [r for r in self.rates if r is not None]
        if rate is None:
            rate = sum(known) / len(known) if known else 1.0
        return queued * self._rollout_steps / rate

    def _steal(self, thief: int) -> int | None:
        """The instance ``thief`` takes from the actor furthest behind, or None."""
        best, victim = 0.0, -1
        for actor, queue in enumerate(self._queues):
            if actor != thief and queue:
                wait = self._round_time(actor, len(queue))
                if wait > best:
                    best, victim = wait, actor
        if victim < 0:
            return None
        # The victim starts its last queued instance after (len - 1) others and its current
        # rollout (about half a rollout left); the thief would finish it in one rollout.
        queue = self._queues[victim]
        victim_start = self._round_time(victim, len(queue) - 1) + 0.5 * self._round_time(victim, 1)
        if victim_start <= self._round_time(thief, 1) and self.rates[thief] is not None:
            return None
        instance = queue.pop()
        self.home[instance] = thief
        self.migrations += 1
        return instance

    def acquire(self, actor: int, block: bool = False) -> int | None:
        """The next instance ``actor`` runs (its own queue, else a stolen one).

        With ``block``, waits for one (the next round) until :meth:`stop`; returns None
        when stopped, or when not blocking and there is nothing to run now.
        """
        with self.cond:
            while not self.stopped:
                queue = self._queues[actor]
                instance = queue.popleft() if queue else None
                if instance is None and self.load_balancing:
                    instance = self._steal(actor)
                if instance is not None:
                    self._begun += 1
                    self._running[instance] = actor
                    self._started_at[actor] = self._clock()
                    return instance
                if not block:
                    return None
                self.cond.wait()
            return None

    def release(self, actor: int, instance: int, steps: int, seconds: float | None = None) -> None:
        """``actor`` finished a rollout of ``instance`` (``steps`` env steps): update its rate."""
        with self.cond:
            if self._running.pop(instance, None) != actor:
                raise RuntimeError(f"instance {instance} was not running on actor {actor}")
            began = self._started_at.pop(actor, None)
            if seconds is None:
                seconds = self._clock() - began if began is not None else 0.0
            if seconds > 0:
                rate = steps / seconds
                old = self.rates[actor]
                self.rates[actor] = (
                    rate if old is None else (RATE_SMOOTHING * rate + (1 - RATE_SMOOTHING) * old)
                )
            self.rollouts[instance] += 1
            self._rollout_steps = max(1, steps)
            if self._begun == self.n_instances and not self._running:
                self.round += 1  # the round's last rollout: queue the next round
                self._fill()
            self.cond.notify_all()

    def abandon(self, actor: int, instance: int) -> None:
        """A rollout of ``instance`` failed: it goes back to the front of its home queue."""
        with self.cond:
            self._running.pop(instance, None)
            self._started_at.pop(actor, None)
            self._begun -= 1
            self._queues[self.home[instance]].appendleft(instance)
            self.cond.notify_all()

    def resume(self) -> None:
        """Accept :meth:`acquire` again after :meth:`stop` (a new ``learn`` call)."""
        with self.cond:
            self.stopped = False

    def stop(self) -> None:
        with self.cond:
            self.stopped = True
            self.cond.notify_all()
