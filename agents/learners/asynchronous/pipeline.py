"""The parts the asynchronous trainer runs its actors with: the ticketed pipeline and served actors.

* :class:`TrajectoryPipeline` -- the bounded hand-over between actor threads and the
  learner: an actor takes a ticket before a rollout (blocking while ``capacity`` tickets are
  out: backpressure), puts the whole trajectory when done, and the learner takes batches
  and ends their tickets once the update that used them is published.
* :class:`ServedActor` -- an actor slot that acts through an inference server client
  instead of its own policy copy (every sample records the version that answered it).
* :func:`with_next_obs` -- keeps ``s_n`` with a trajectory, so the learner can re-bootstrap
  it with the newest critic.
"""

from __future__ import annotations

import collections
import dataclasses
import threading
from typing import Any

import numpy as np

from fleetgym.agents.learners.lag import ObservedTrajectory
from fleetgym.agents.types import Trajectory, Weights
from fleetgym.agents.workloads import Workload
from fleetgym.errors import FleetError


def with_next_obs(trajectory: Trajectory, next_obs: Any) -> Trajectory:
    """``trajectory`` carrying ``next_obs`` (the observation after its last step).

    A plain :class:`~fleetgym.agents.types.Trajectory` becomes an
    :class:`~fleetgym.agents.learners.lag.ObservedTrajectory`; a subclass (e.g. one with per-sample
    versions) keeps its type and gets the attribute.
    """
    if next_obs is None:
        return trajectory
    obs = np.array(next_obs, copy=True)
    if type(trajectory) is Trajectory:
        fields = {f.name: getattr(trajectory, f.name) for f in dataclasses.fields(Trajectory)}
        return ObservedTrajectory(**fields, next_obs=obs)
    trajectory.next_obs = obs  # type: ignore[attr-defined]
    return trajectory


class ServedActor:
    """One actor slot whose actions come from an inference server.

    Models an AcceRL rollout worker: it steps its own environment (a
    :class:`~fleetgym.agents.rollout.RolloutWorker`, seeded like every fleet slot) and sends
    each observation to the server; the weights argument of :meth:`rollout` is ignored
    because the server holds the published weights.

    Args:
        workload: The workload.
        actor_id: The slot index.
        seed: The fleet seed.
        incarnation: Restarts of this slot so far.
        server: An :class:`~fleetgym.agents.inference.InferenceServer` of the workload's policy.
    """

    def __init__(
        self, workload: Workload, actor_id: int, seed: int, incarnation: int, server: Any
    ) -> None:
        from fleetgym.agents.rollout import RolloutWorker

        self.worker = RolloutWorker(workload, actor_id, seed, incarnation)
        self.client = server.connect(slots=1)

    @property
    def obs(self) -> np.ndarray:
        return self.worker.obs

    def rollout(self, weights: Weights, steps: int, policy_version: int) -> Trajectory:
        """One served rollout.

        Raises:
            ValueError: If the env emitted NaN or inf (naming the env and the step, also
                where the server refused the observation first).
        """
        from fleetgym.agents.inference.rollout import served_rollout
        from fleetgym.agents.rollout import check_worker_observation

        try:
            return served_rollout([self.worker], self.client, steps, policy_version, groups=1)[0]
        except Exception:  # the server refuses a NaN request without naming the env
            check_worker_observation(self.worker)
            raise

    def close(self) -> None:
        self.client.close()
        self.worker.close()


class TrajectoryPipeline:
    """Tickets, the queue of finished trajectories and the stop flag, under one condition."""

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self.cond = threading.Condition()
        self.queue: collections.deque[Trajectory] = collections.deque()
        self.outstanding = 0
        self.max_outstanding = 0
        self.stopped = False
        self.error: BaseException | None = None

    def admit(self) -> bool:
        """Block until a ticket is free; False once stopped."""
        with self.cond:
            while not self.stopped and self.outstanding >= self.capacity:
                self.cond.wait()
            if self.stopped:
                return False
            self.outstanding += 1
            self.max_outstanding = max(self.max_outstanding, self.outstanding)
            return True

    def put(self, trajectory: Trajectory) -> None:
        with self.cond:
            self.queue.append(trajectory)
            self.cond.notify_all()

    def cancel(self) -> None:
        """Return a ticket whose rollout failed."""
        with self.cond:
            self.outstanding -= 1
            self.cond.notify_all()

    def take(self, n: int) -> list[Trajectory]:
        """Block until ``n`` trajectories are queued and take them (tickets held until released)."""
        with self.cond:
            while not self.stopped and len(self.queue) < n:
                self.cond.wait()
            if self.error is not None:
                raise FleetError(f"an actor failed for good: {self.error}") from self.error
            if self.stopped:
                return []
            return [self.queue.popleft() for _ in range(n)]

    def release(self, n: int) -> None:
        """End the tickets of ``n`` trajectories whose update finished."""
        with self.cond:
            self.outstanding -= n
            self.cond.notify_all()

    def stop(self, error: BaseException | None = None) -> None:
        with self.cond:
            self.stopped = True
            if error is not None and self.error is None:
                self.error = error
            self.cond.notify_all()
