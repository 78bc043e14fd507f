"""Tests of fleetgym.agents.learners.data_parallel: N ranks = one learner, failures, bad input.

No test asserts on wall-clock time; the bounded waits are the group's own ``timeout_s``.
"""

from __future__ import annotations

import datetime
import math
import os
import signal
import time

import numpy as np
import pytest
import torch

from fleetgym.agents.learners import DataParallelPPO, DistributedPPOLearner, PPOLearner
from fleetgym.agents.learners.data_parallel.group import free_port, split_trajectories
from fleetgym.agents.rollout import RolloutWorker
from fleetgym.agents.types import Learner
from fleetgym.errors import FleetError

WORKLOAD = "CartPole-v1"
#: Unit roundoff of float32.
U32 = 2.0**-24
#: Adam's eps in PPOLearner's optimiser.
ADAM_EPS = 1e-5


def _trajectories(lengths, seed=0):
    weights = PPOLearner(WORKLOAD, seed=seed).get_weights()
    return [
        RolloutWorker(WORKLOAD, actor_id=i, seed=100 + i).rollout(
            weights, steps=n, policy_version=0
        )
        for i, n in enumerate(lengths)
    ]


def _tolerance(learner: PPOLearner, trajectories, steps: int) -> dict[str, np.ndarray]:
    """Per-parameter bound on the difference of two float32 updates that sum in other orders.

    The mean gradient over ``n`` samples, summed in another order (another split, another
    minibatch order), moves by at most about ``u sqrt(n) rms_i(g_i)`` per component (the
    partial sums' rounding errors, each ``<= u |partial sum|``, added as a random walk),
    on each side: ``dg = 2 u sqrt(n) rms(g_i)``. Adam's step ``m / (sqrt(v) + eps)`` moves
    by at most ``lr dg / (|g| + eps)`` for it (clipping scales ``g`` and ``dg`` alike and
    only adds to ``eps``'s weight), once per gradient step; the clip factor's own rounding
    (a norm over ``P`` components) adds ``lr u sqrt(P)`` a step.
    """
    batch = learner.build_batch(trajectories)
    adv = batch.advantages
    adv = (adv - adv.mean()) / (adv.std() + 1e-8)
    w = learner.workload
    params = dict(learner.policy.named_parameters())
    per_sample = {name: [] for name in params}
    for i in range(len(batch)):
        log_prob, entropy, value = learner.policy.evaluate_actions(
            batch.obs[i : i + 1], batch.actions[i : i + 1]
        )
        ratio = torch.exp(log_prob - batch.log_probs[i : i + 1])
        loss = (
            -(ratio * adv[i : i + 1]).mean()
            + w.vf_coef * 0.5 * (value - batch.returns[i : i + 1]).square().mean()
            - w.ent_coef * entropy.mean()
        )
        grads = torch.autograd.grad(loss, list(params.values()), allow_unused=True)
        for name, g in zip(params, grads, strict=True):
            per_sample[name].append(
                np.zeros(params[name].shape) if g is None else g.double().numpy()
            )
    n = len(batch)
    p_total = sum(p.numel() for p in params.values())
    tolerance = {}
    for name, values in per_sample.items():
        g = np.stack(values)
        rms, mean = np.sqrt(np.mean(g**2, axis=0)), np.abs(g.mean(axis=0))
        dg = 2.0 * U32 * math.sqrt(n) * rms
        tolerance[name] = steps * w.lr * (dg / (mean + ADAM_EPS) + U32 * math.sqrt(p_total))
    return tolerance


@pytest.mark.timeout(300)
@pytest.mark.parametrize("lengths", [(100, 37, 150), (250, 20, 17)])
def test_two_ranks_on_a_split_batch_update_as_one_learner_on_the_whole(lengths):
    epochs = 4
    kwargs = dict(epochs=epochs, minibatch_size=4096)  # one minibatch: the whole batch
    reference = PPOLearner(WORKLOAD, seed=3, **kwargs)
    trajectories = _trajectories(lengths, seed=3)
    tolerance = _tolerance(PPOLearner(WORKLOAD, seed=3, **kwargs), trajectories, epochs)
    before = reference.get_weights()
    with DataParallelPPO(WORKLOAD, world_size=2, seed=3, port=free_port(), **kwargs) as group:
        shards = split_trajectories(trajectories, 2)
        assert [sum(len(t) for t in s) for s in shards] != [sum(lengths) // 2] * 2  # uneven
        stats = group.update(trajectories)
        weights = group.get_weights()
    expected = reference.update(trajectories)
    after = reference.get_weights()
    assert (stats.num_samples, stats.policy_version) == (sum(lengths), 1)
    assert stats.episodes_completed == expected.episodes_completed
    assert stats.mean_return == expected.mean_return
    assert stats.kl == pytest.approx(expected.kl, rel=1e-3, abs=1e-7)
    moved = 0.0
    for name, tol in tolerance.items():
        diff = np.abs(weights[name] - after[name])
        assert np.all(diff <= tol), (name, float(diff.max()), float(tol.min()))
        moved = max(moved, float(np.max(np.abs(after[name] - before[name]) / tol)))
    # The update moved some parameter by many tolerances: the check can fail.
    assert moved > 10.0


@pytest.mark.ray
@pytest.mark.timeout(300)
def test_ray_ranks_update_as_the_process_ranks_do():
    pytest.importorskip("ray")
    trajectories = _trajectories((70, 50, 30), seed=2)
    kwargs = dict(epochs=2, minibatch_size=64)
    results = []
    for backend in ("process", "ray"):
        with DataParallelPPO(
            WORKLOAD, world_size=2, seed=2, backend=backend, port=free_port(), **kwargs
        ) as group:
            stats = group.update(trajectories)
            results.append((stats, group.replica_weights()))
    (p_stats, p_replicas), (r_stats, r_replicas) = results
    assert r_stats.num_samples == p_stats.num_samples == 150
    # The same ranks, shards and generators: the same float operations, bit for bit.
    for name in p_replicas[0]:
        for replica in (*p_replicas[1:], *r_replicas):
            np.testing.assert_array_equal(replica[name], p_replicas[0][name])


@pytest.mark.timeout(300)
def test_minibatches_and_an_empty_rank_keep_the_replicas_in_step():
    trajectories = _trajectories((64, 64), seed=1)
    with DataParallelPPO(
        WORKLOAD, world_size=3, seed=1, epochs=2, minibatch_size=32, port=free_port()
    ) as group:
        assert isinstance(group, Learner)  # usable wherever a learner is (train, fleets)
        # Rank 2 holds no sample; every rank still takes part in every step.
        stats = group.update_shards([trajectories[:1], trajectories[1:], []])
        replicas = group.replica_weights()
    assert stats.num_samples == 128 and stats.policy_version == 1
    for name in replicas[0]:
        for other in replicas[1:]:
            np.testing.assert_array_equal(replicas[0][name], other[name])


# -------------------------------------------------------------------- failures
class _DiesMidUpdate(DistributedPPOLearner):
    """Exits its process at its ``die_at``-th all-reduce (a rank killed mid-update)."""

    die_at = 0

    def _all_reduce(self, tensor):
        self.calls = getattr(self, "calls", 0) + 1
        if self.calls == self.die_at:
            os._exit(17)
        return super()._all_reduce(tensor)


def _rank(rank, port, queue, die_at, hang):
    torch.set_num_threads(1)
    import torch.distributed as dist

    dist.init_process_group(
        "gloo",
        init_method=f"tcp://127.0.0.1:{port}",
        rank=rank,
        world_size=2,
        timeout=datetime.timedelta(seconds=3),
    )
    learner = _DiesMidUpdate(WORKLOAD, seed=0, epochs=4, minibatch_size=4096)
    learner.die_at = die_at if rank == 1 else 0
    trajectories = _trajectories((80, 90))
    if rank == 1 and hang:
        time.sleep(60)  # alive, never joining the update's collectives
        return
    before = learner.get_weights()
    steps = []
    original = learner.optimizer.step

    def counted_step(*args, **kwargs):
        steps.append(1)
        return original(*args, **kwargs)

    learner.optimizer.step = counted_step
    try:
        learner.update([trajectories[rank]])
        queue.put((rank, "completed", "", True, len(steps)))
    except FleetError as exc:
        after = learner.get_weights()
        same = all(np.array_equal(before[k], after[k]) for k in before)
        unchanged_state = not learner.optimizer.state and learner.policy_version == 0
        queue.put((rank, "FleetError", str(exc), same and unchanged_state, len(steps)))


def _run_pair(die_at, hang):
    import torch.multiprocessing as tmp

    context = tmp.get_context("spawn")
    queue = context.Queue()
    port = free_port()
    processes = [
        context.Process(target=_rank, args=(r, port, queue, die_at, hang), daemon=True)
        for r in range(2)
    ]
    for p in processes:
        p.start()
    try:
        return queue.get(timeout=120), processes
    finally:
        for p in processes:
            p.kill()
            p.join(10)


@pytest.mark.timeout(300)
def test_a_rank_killed_mid_all_reduce_leaves_the_survivor_unchanged():
    # All-reduces: 1 shard check, 2 advantage sums, 3 minibatch sizes, 4.. one per step:
    # rank 1 dies at its 6th, after both ranks took two gradient steps.
    (rank, kind, message, unchanged, steps), processes = _run_pair(die_at=6, hang=False)
    assert (rank, kind) == (0, "FleetError")
    assert steps == 2  # two steps were applied, then rolled back
    assert unchanged
    assert "a collective failed" in message and "keeps its parameters" in message
    assert processes[1].exitcode == 17


@pytest.mark.timeout(300)
def test_a_silent_rank_ends_the_wait_at_the_timeout():
    (rank, kind, message, unchanged, steps), _ = _run_pair(die_at=0, hang=True)
    assert (rank, kind, steps) == (0, "FleetError", 0)
    assert unchanged
    assert "a collective failed" in message


@pytest.mark.timeout(300)
def test_the_front_reports_a_dead_rank_and_keeps_the_last_weights():
    trajectories = _trajectories((60, 60))
    group = DataParallelPPO(WORKLOAD, world_size=2, seed=0, timeout_s=5.0, port=free_port())
    try:
        group.update(trajectories)
        weights = group.get_weights()
        os.kill(group.rank_pids[1], signal.SIGKILL)
        with pytest.raises(
            FleetError, match=r"update 2 failed: .*rank 1 died.*get_weights\(\) is still version 1"
        ):
            group.update(trajectories)
        after = group.get_weights()
        assert all(np.array_equal(weights[k], after[k]) for k in weights)
        with pytest.raises(FleetError, match="the group is stopped"):
            group.update(trajectories)
    finally:
        group.close()


@pytest.mark.timeout(300)
def test_a_refused_shard_names_its_rank_and_the_group_goes_on():
    trajectories = _trajectories((40, 40))
    bad = _trajectories((40,))[0]
    bad.rewards[3] = np.nan
    with DataParallelPPO(WORKLOAD, world_size=2, seed=0, port=free_port()) as group:
        with pytest.raises(ValueError, match=r"rank 1: .*trajectories\[0\]"):
            group.update_shards([trajectories[:1], [bad]])
        assert group.update(trajectories).policy_version == 1


# -------------------------------------------------------------------- bad input
@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        (dict(world_size=0), ValueError, r"world_size: expected an int in \[1, 256\], actual 0"),
        (dict(world_size=-2), ValueError, r"world_size: expected an int in \[1, 256\], actual -2"),
        (dict(world_size=2.0), TypeError, "world_size: expected an int"),
        (dict(world_size=True), TypeError, "world_size: expected an int"),
        (dict(backend="mpi"), ValueError, "backend: expected one of"),
        (dict(backend="processes"), ValueError, r"\(renamed 'process' in 2.0\)"),
        (dict(backend="inprocess"), ValueError, r"expected one of \('process', 'ray'\)"),
        (dict(timeout_s=0), ValueError, "timeout_s"),
        (dict(port=0), ValueError, "port"),
        (dict(reward_transform="scale"), ValueError, "reward_transform: expected 'none' or 'sign'"),
        (dict(learning_rate=1.0), TypeError, "expected hyperparameters among"),
        (dict(seed=-1), ValueError, "seed"),
    ],
)
def test_bad_arguments_are_refused_before_any_process_starts(kwargs, error, match):
    with pytest.raises(error, match=match):
        DataParallelPPO(WORKLOAD, **kwargs)


def test_a_rank_learner_needs_a_process_group():
    with pytest.raises(RuntimeError, match="expected an initialised torch.distributed"):
        DistributedPPOLearner(WORKLOAD)


def test_split_keeps_order_and_balances_samples():
    class _T:
        def __init__(self, n):
            self.n = n

        def __len__(self):
            return self.n

    items = [_T(n) for n in (10, 10, 10, 10, 30, 2)]
    shards = split_trajectories(items, 3)
    assert [t for s in shards for t in s] == items
    assert [sum(len(t) for t in s) for s in shards] == [20, 20, 32]
    assert split_trajectories(items[:1], 3) == [[], [items[0]], []]
