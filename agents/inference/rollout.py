"""Actors that act through an inference server instead of their own policy copy.

:func:`served_rollout` steps one or more :class:`~fleetgym.agents.rollout.RolloutWorker`
environments and asks an :class:`~fleetgym.agents.inference.InferenceClient` for every
action. With several workers it double-buffers (Sample Factory's scheme): the workers are
split into ``groups``; while one group's observations wait for their answers, the next
group's environments step, so environment stepping and inference overlap.

The per-slot semantics are those of the synchronous rollout
(:func:`~fleetgym.agents.rollout.rollout_many`): each worker keeps its env, episode
bookkeeping and sampling generator, and draws its random numbers in the same order (one
uniform per step for a categorical policy, ``action_dim`` normals for a Gaussian one); the
draws travel with the request, so the server's batch composition cannot change which
action a slot samples. Results differ from the synchronous path only by float rounding of
the batched forward pass (another batch size can make BLAS sum in another order): values
and log-probabilities agree to float32 rounding, and an action differs only where its
uniform draw falls within that rounding of a CDF boundary. Truncation and final bootstrap
values are served too (requests with zero noise, whose action is ignored).

Each sample's policy version is recorded (:class:`ServedTrajectory`): under a weight swap
in the middle of a rollout, samples of one trajectory may come from different versions.

This module imports torch (through the rollout module).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, fields

import numpy as np

from fleetgym.agents.inference.channels import InferenceClient, Ticket
from fleetgym.agents.rollout import RolloutWorker
from fleetgym.agents.types import Trajectory
from fleetgym.validation import check_int


@dataclass
class ServedTrajectory(Trajectory):
    """A :class:`~fleetgym.agents.types.Trajectory` with the policy version of each sample.

    ``policy_versions[t]`` is the version of the weights that chose action ``t`` (the
    server's answer says which); ``policy_version`` stays the round's version.
    """

    policy_versions: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))


@dataclass
class _Group:
    """Workers stepped together: one request per step for all of them."""

    workers: list[RolloutWorker]
    buffers: list
    finished: list[tuple[list[float], list[int]]]
    versions: np.ndarray
    t: int = 0
    ticket: Ticket | None = None


def _draws(workers: Sequence[RolloutWorker]) -> np.ndarray:
    """This step's random draws of each worker, taken from its own generator (as the
    synchronous rollout takes them)."""
    policy = workers[0].policy
    if policy.discrete:
        return np.array([[w.rng.random()] for w in workers], np.float64)
    return np.stack(
        [w.rng.standard_normal(policy.action_dim, dtype=np.float32) for w in workers]
    ).astype(np.float64)


def _obs(workers: Sequence[RolloutWorker]) -> np.ndarray:
    return np.stack([w.obs for w in workers])


def served_rollout(
    workers: Sequence[RolloutWorker],
    client: InferenceClient,
    steps: int,
    policy_version: int,
    groups: int = 2,
) -> list[ServedTrajectory]:
    """Run ``steps`` env steps on each worker, every action answered by ``client``.

    Args:
        workers: The slots (same workload, at least one).
        client: A client of a server serving the workload's policy.
        steps: Env steps per worker (>= 1).
        policy_version: Recorded as each trajectory's ``policy_version``.
        groups: Double buffering: the workers are stepped in this many groups, one
            stepping while the others wait (capped at the number of workers).

    Returns:
        One :class:`ServedTrajectory` per worker, in order.

    Raises:
        ValueError: On an empty worker list or a bad count.
        fleetgym.agents.inference.InferenceError: If the server cannot answer.
    """
    if not workers:
        raise ValueError("workers: expected at least one RolloutWorker, actual none")
    steps = check_int("steps", steps, 1)
    groups = min(check_int("groups", groups, 1), len(workers))
    noise_shape = client.spec.noise.shape

    def value_fn(obs: np.ndarray) -> np.ndarray:
        # Zero noise: only the value of the answer is used.
        return client.infer(obs, np.zeros((len(obs), *noise_shape))).outputs["value"]

    parts = [list(workers[g::groups]) for g in range(groups)]
    state = [
        _Group(
            part,
            [w._new_buffer(steps) for w in part],
            [([], []) for _ in part],
            np.empty((len(part), steps), np.int64),
        )
        for part in parts
    ]
    for group in state:
        group.ticket = client.submit(_obs(group.workers), _draws(group.workers))
    active = list(state)
    while active:
        for group in list(active):
            assert group.ticket is not None
            reply = client.wait(group.ticket)
            out = reply.outputs
            for i, w in enumerate(group.workers):
                w._step(
                    group.buffers[i],
                    group.t,
                    out["action"][i],
                    float(out["log_prob"][i]),
                    float(out["value"][i]),
                    group.finished[i],
                    value_fn,
                )
            group.versions[:, group.t] = reply.policy_versions
            group.t += 1
            if group.t < steps:
                group.ticket = client.submit(_obs(group.workers), _draws(group.workers))
            else:
                group.ticket = None
                active.remove(group)
    results: dict[int, ServedTrajectory] = {}
    for group in state:
        last = value_fn(_obs(group.workers))
        for i, w in enumerate(group.workers):
            plain = w._finish(group.buffers[i], float(last[i]), group.finished[i], policy_version)
            results[id(w)] = ServedTrajectory(
                **{f.name: getattr(plain, f.name) for f in fields(Trajectory)},
                policy_versions=group.versions[i].copy(),
            )
    return [results[id(w)] for w in workers]
