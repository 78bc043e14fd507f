"""One rank of a data-parallel PPO learner: PPO whose every sum runs over all ranks.

:class:`DistributedPPOLearner` is a :class:`~fleetgym.agents.learners.ppo.PPOLearner` in a
``torch.distributed`` process group (gloo on CPU). Each rank holds a full replica of the
policy and optimiser and updates on its own shard of the round's trajectories; every
quantity that the one-learner update computes as a mean over the whole batch is computed
here from all-reduced sums, so the ranks take *the same* gradient steps as one learner on
the union of the shards:

* **advantage normalisation** (AcceRL's global normalisation): one all-reduce of
  ``(n, sum A, sum A^2)`` in float64 gives the batch mean and the unbiased standard
  deviation ``sqrt((sum A^2 - (sum A)^2 / n) / (n - 1))`` (what ``torch.std`` computes on
  the whole batch);
* **gradients**: rank ``r`` scales its loss (a mean over its ``n_r`` samples of a
  minibatch) by ``n_r / n`` and the gradients are summed: ``sum_r (n_r / n) mean_r =
  mean`` over the ``n`` samples, exact for uneven splits. Gradient-norm clipping and the
  Adam step then run on identical gradients on every rank, so the replicas stay equal;
* **minibatches**: the global batch of ``n`` samples is cut into
  ``K = ceil(n / minibatch_size)`` minibatches per epoch; each rank shuffles its samples
  (its own generator) and contributes its ``k``-th of ``K`` near-equal chunks to the
  ``k``-th minibatch. With ``minibatch_size >= n`` (one minibatch) this is the
  one-learner update up to float rounding;
* **observation statistics, KL and the loss report**: sums all-reduced likewise; the
  completed episodes' returns are gathered in rank order.

Reward scaling (``reward_transform="scale"``) keeps a running return per actor stream,
updated trajectory by trajectory: its result depends on which rank saw which stream
first, so it is refused. The world model's imagination is not supported.

Failure: every collective waits at most the group's timeout (``init_process_group(...,
timeout=...)``). A collective that fails (a rank died, or the wait ran out) rolls the rank
back to its parameters and optimiser state from before the update and raises
:class:`~fleetgym.errors.FleetError`: nothing of a failed update is applied.
"""

from __future__ import annotations

import copy
import math
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import numpy as np
import torch

from fleetgym.agents.learners.checkpoint import restore_learner
from fleetgym.agents.learners.checks import check_seed
from fleetgym.agents.learners.ppo import HYPERPARAMETERS, Batch, PPOLearner
from fleetgym.agents.types import Trajectory, UpdateStats
from fleetgym.agents.workloads import Workload, get_workload
from fleetgym.errors import FleetError
from fleetgym.validation import quote

__all__ = ["DistributedPPOLearner", "GroupFailure", "group_generators"]

#: What a rank whose shard was valid says when another rank refused its shard.
PEER_REFUSAL = "other rank(s) refused their shard"
#: The loss terms each minibatch reports (weighted by its share of the samples).
_TERMS = ("loss", "pg", "v", "ent", "clip")


class GroupFailure(RuntimeError):
    """A collective of the process group failed (internal: turned into ``FleetError``)."""


def group_generators(state: Any, world_size: int, where: str | Path) -> list[torch.Tensor] | None:
    """The shuffle generators of every rank a group's state holds, checked.

    Args:
        state: A learner state: a data-parallel group's (its ``data_parallel`` entry:
            ``world_size`` and ``rank_generators``) or a one-learner's (none).
        world_size: The group's number of ranks, which the state's must equal.
        where: Where the state came from, named in every error.

    Returns:
        One torch generator state per rank, rank by rank; ``None`` if the state has no
        ``data_parallel`` entry.

    Raises:
        ValueError: Naming ``where``, if the entry is not a dict, is of another world
            size, or does not hold ``world_size`` torch generator states.
    """
    entry = state.get("data_parallel") if isinstance(state, dict) else None
    if entry is None:
        return None
    if not isinstance(entry, dict):
        raise ValueError(f"{where}: data_parallel: expected a dict, actual {quote(entry)}")
    saved = entry.get("world_size")
    if isinstance(saved, bool) or not isinstance(saved, int) or saved != world_size:
        raise ValueError(
            f"{where}: data_parallel world_size: expected {world_size} (this group's), "
            f"actual {quote(saved)}"
        )
    generators = entry.get("rank_generators")
    own = torch.Generator().get_state()
    if (
        not isinstance(generators, list)
        or len(generators) != world_size
        or not all(
            isinstance(g, torch.Tensor) and (g.dtype, g.shape) == (own.dtype, own.shape)
            for g in generators
        )
    ):
        raise ValueError(
            f"{where}: data_parallel rank_generators: expected {world_size} torch generator "
            f"states, actual {quote(generators)}"
        )
    return generators


class DistributedPPOLearner(PPOLearner):
    """PPO on one rank of a data-parallel group: sums over all ranks, identical steps.

    Models one of AcceRL's trainer-tier learners: each rank owns a replica and a shard of
    the batch; gradients and the batch statistics are all-reduced, so ``N`` ranks on a
    split batch update as one learner on the whole batch (see the module docstring for
    the arithmetic and its one departure: minibatches are unions of per-rank chunks).
    The process group must be initialised (``torch.distributed.init_process_group``)
    before construction; rank 0's initial weights are broadcast to the others.

    Args:
        workload: A :class:`Workload` or its name.
        seed: Seeds the initial weights; rank ``r`` shuffles with ``seed + r``.
        **overrides: PPO hyperparameters (see
            :data:`~fleetgym.agents.learners.ppo.HYPERPARAMETERS`).

    Example:
        >>> import torch.distributed as dist
        >>> from fleetgym.agents.rollout import RolloutWorker
        >>> dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
        >>> learner = DistributedPPOLearner("CartPole-v1", seed=0, epochs=1)
        >>> traj = RolloutWorker("CartPole-v1", actor_id=0, seed=0).rollout(
        ...     learner.get_weights(), steps=64, policy_version=0)
        >>> stats = learner.update([traj])
        >>> stats.num_samples, stats.policy_version
        (64, 1)
        >>> dist.destroy_process_group()

    Raises:
        RuntimeError: If no process group is initialised.
        ValueError: For ``reward_transform="scale"`` (see the module docstring), or what
            :class:`PPOLearner` refuses.
    """

    def __init__(self, workload: Workload | str, seed: int = 0, **overrides: Any) -> None:
        import torch.distributed as dist

        if not dist.is_available() or not dist.is_initialized():
            raise RuntimeError(
                "DistributedPPOLearner: expected an initialised torch.distributed process "
                "group (init_process_group), actual none"
            )
        self.check_arguments(workload, seed, overrides)
        super().__init__(workload, seed, **overrides)
        self._dist = dist
        self.rank = int(dist.get_rank())
        self.world_size = int(dist.get_world_size())
        self.generator = torch.Generator().manual_seed(self.seed + self.rank)
        self._global_n = 0
        self._collective("broadcast the initial weights", self._broadcast_parameters)

    @staticmethod
    def check_arguments(workload: Workload | str, seed: Any, overrides: dict[str, Any]) -> None:
        """Refuse what the constructor would refuse, without a process group.

        Args:
            workload: The :class:`Workload` or its name the learner would be built for.
            seed: The seed it would get (an int in ``[0, 2**63 - 1]``).
            overrides: Its PPO hyperparameter overrides, as a dict (the constructor's
                ``**overrides``).

        Raises:
            TypeError / ValueError: An unknown or out-of-range hyperparameter, a bad seed,
                or ``reward_transform="scale"``.
        """
        unknown = sorted(set(overrides) - set(HYPERPARAMETERS))
        if unknown:
            raise TypeError(
                f"DistributedPPOLearner: expected hyperparameters among {list(HYPERPARAMETERS)}, "
                f"actual {unknown}"
            )
        check_seed("seed", seed)
        base = get_workload(workload)
        resolved = base.with_overrides(**overrides) if overrides else base
        if resolved.reward_transform == "scale":
            raise ValueError(
                "reward_transform: expected 'none' or 'sign' for a data-parallel learner, "
                "actual 'scale' (its running return per actor stream depends on which rank "
                "saw which stream first)"
            )

    def restore_state(self, state: dict[str, Any], where: str | Path) -> None:
        """Restore this rank from a group's state; a refused state changes nothing.

        Rank 0's weights, optimiser state and counters, and this rank's own shuffle
        generator from the state's ``data_parallel`` entry (without it: the state's
        ``generator``). No collective: every rank of the group restores the same state.

        Args:
            state: What the group's
                :meth:`~fleetgym.agents.learners.data_parallel.group.DataParallelPPO.state`
                returned (or a :class:`PPOLearner`'s ``state()``), as read back.
            where: Where it came from (a checkpoint file), named in every error.

        Raises:
            ValueError: Naming ``where``, if the state does not fit this rank's workload,
                policy or world size, or holds an impossible value.
        """
        generators = group_generators(state, self.world_size, where)
        restore_learner(self, state, where)
        if generators is not None:
            self.generator.set_state(generators[self.rank])

    # ----------------------------------------------------------------- collectives
    def _all_reduce(self, tensor: torch.Tensor) -> torch.Tensor:
        """Sum ``tensor`` over the ranks in place (bounded by the group's timeout)."""
        self._dist.all_reduce(tensor, op=self._dist.ReduceOp.SUM)
        return tensor

    def _broadcast_parameters(self) -> None:
        with torch.no_grad():
            for value in self.policy.state_dict().values():
                self._dist.broadcast(value, src=0)
        if self.policy.normalize_obs:
            self.policy._refresh_obs_cache()

    def _collective(self, what: str, fn: Any, *args: Any) -> Any:
        try:
            return fn(*args)
        except RuntimeError as exc:  # gloo: a closed connection or a timeout
            raise GroupFailure(f"{what}: {exc}") from exc

    # ----------------------------------------------------------------- batch
    def _check_shard(self, trajectories: Iterable[Trajectory]) -> list[Trajectory]:
        given = trajectories
        if isinstance(given, Iterable) and not isinstance(given, (str, bytes, dict)):
            trajectories = list(given)
        if not isinstance(trajectories, list):
            raise TypeError(
                f"trajectories: expected a list of Trajectory (possibly empty on a rank), "
                f"actual {quote(given)}"
            )
        if not trajectories:
            return []
        return self._check(trajectories)

    def _empty_batch(self) -> Batch:
        policy = self.policy
        obs_dtype = policy.observation_space.dtype
        obs = torch.from_numpy(np.zeros((0, *policy.obs_shape), obs_dtype))
        if policy.discrete:
            actions = torch.zeros(0, dtype=torch.int64)
        else:
            actions = torch.zeros((0, policy.action_dim), dtype=torch.float32)
        empty = torch.zeros(0, dtype=torch.float32)
        return Batch(obs, actions, empty, empty.clone(), empty.clone(), empty.clone())

    def _normalize_globally(self, batch: Batch) -> None:
        """Standardise the advantages over all ranks' samples (sums in float64)."""
        adv = batch.advantages.double()
        sums = torch.stack(
            [torch.tensor(float(adv.numel()), dtype=torch.float64), adv.sum(), adv.square().sum()]
        )
        self._all_reduce(sums)
        n, total, squares = (float(v) for v in sums)
        self._global_n = int(round(n))
        if self._global_n < 2:
            return
        mean = total / n
        var = max(squares - total * total / n, 0.0) / (n - 1.0)
        std = torch.tensor(math.sqrt(var), dtype=torch.float32)
        batch.advantages = (batch.advantages - torch.tensor(mean, dtype=torch.float32)) / (
            std + 1e-8
        )

    def normalize_advantages(self, advantages: torch.Tensor) -> torch.Tensor:
        """Identity: the batch was standardised over all ranks before the epochs.

        Args:
            advantages: A minibatch's advantages (already standardised); returned as they
                are.
        """
        return advantages

    # ----------------------------------------------------------------- update
    def update(self, trajectories: Iterable[Trajectory]) -> UpdateStats:
        """One PPO update on this rank's shard; every rank of the group must call it.

        A rank may hold no trajectory (it still takes part in every collective).

        Args:
            trajectories: This rank's shard: a list (or any iterable, read once) of
                trajectories, possibly empty; the shards of all ranks together must hold
                at least one step.

        Returns:
            The update's :class:`~fleetgym.agents.types.UpdateStats`, over all ranks'
            samples (equal on every rank but ``update_time_s``).

        Raises:
            ValueError / TypeError: For a malformed shard, or no sample on any rank.
            FleetError: If a collective failed (a rank died, or the group's timeout ran
                out); this rank is back at its parameters from before the update.
            ValueError: If the update diverged (rolled back, as PPOLearner does).
        """
        start = time.perf_counter()
        try:
            shard, refusal = self._check_shard(trajectories), None
        except (TypeError, ValueError) as exc:
            shard, refusal = [], exc
        # Every rank learns whether some rank refused its shard before any other
        # collective: a refusal is then an input error on every rank, not a timeout.
        flag = torch.tensor([0.0 if refusal is None else 1.0], dtype=torch.float64)
        try:
            self._collective("all-reduce the shard checks", self._all_reduce, flag)
        except GroupFailure as exc:
            raise FleetError(
                f"data-parallel update {self.policy_version + 1} on rank {self.rank} of "
                f"{self.world_size}: a collective failed ({exc}); nothing was applied"
            ) from exc
        if refusal is not None:
            raise refusal
        if float(flag[0]):
            raise ValueError(
                f"trajectories: {int(flag[0])} {PEER_REFUSAL}; this rank's was valid "
                f"(rank {self.rank})"
            )
        self.policy.train()
        batch = self.build_batch(shard) if shard else self._empty_batch()
        saved = copy.deepcopy((self.policy.state_dict(), self.optimizer.state_dict()))
        try:
            self._collective("all-reduce the advantage statistics", self._normalize_globally, batch)
            if self._global_n == 0:
                self.policy.eval()
                raise ValueError("trajectories: expected at least one step on some rank, actual 0")
            empty = len(batch) == 0
            before, log_std_before = (None, None) if empty else self._distribution(batch.obs)
            totals, count = self._epochs(batch)
            self._check_finite_update(saved)
            self._collective("all-reduce the observation statistics", self._fold_obs_stats, batch)
            kl_sum = torch.zeros(1, dtype=torch.float64)
            if before is not None:
                after, log_std_after = self._distribution(batch.obs)
                kl = self.policy.kl_divergence(before, after, log_std_before, log_std_after)
                kl_sum += kl.double().sum()
            self._collective("all-reduce the KL", self._all_reduce, kl_sum)
            episodes = self._collective(
                "gather the episode returns",
                self._gather,
                [float(r) for t in shard for r in t.episode_returns],
            )
        except GroupFailure as exc:
            self._rollback(saved)
            raise FleetError(
                f"data-parallel update {self.policy_version + 1} on rank {self.rank} of "
                f"{self.world_size}: a collective failed ({exc}); a rank died or the group's "
                "timeout ran out. This rank keeps its parameters and optimiser state from "
                "before the update"
            ) from exc
        self.policy.eval()
        self.recent_returns.extend(episodes)
        self.episodes_seen += len(episodes)
        self.samples_seen += self._global_n
        self.policy_version += 1
        count = max(count, 1)
        return UpdateStats(
            loss=totals["loss"] / count,
            mean_return=self.mean_return,
            kl=max(float(kl_sum[0]) / self._global_n, 0.0),
            update_time_s=time.perf_counter() - start,
            num_samples=self._global_n,
            policy_version=self.policy_version,
            policy_loss=totals["pg"] / count,
            value_loss=totals["v"] / count,
            entropy=totals["ent"] / count,
            clip_fraction=totals["clip"] / count,
            episodes_completed=len(episodes),
        )

    def _gather(self, values: list[float]) -> list[float]:
        gathered: list[Any] = [None] * self.world_size
        self._dist.all_gather_object(gathered, values)
        return [v for part in gathered for v in part]

    def _fold_obs_stats(self, batch: Batch) -> None:
        """The whole batch's observation moments, folded in as ``update_obs_stats`` does."""
        policy = self.policy
        if not policy.normalize_obs:
            return
        obs = batch.obs.double().reshape((-1, *policy.obs_shape))
        sums = torch.cat(
            [
                torch.tensor([float(obs.shape[0])], dtype=torch.float64),
                obs.sum(0).reshape(-1),
                obs.square().sum(0).reshape(-1),
            ]
        )
        self._all_reduce(sums)
        n = float(sums[0])
        size = int(np.prod(policy.obs_shape))
        b_mean = (sums[1 : 1 + size] / n).reshape(policy.obs_shape)
        b_var = (sums[1 + size :] / n - b_mean.square()).clamp_min(0.0)
        count = float(policy.obs_count)
        total = count + n
        delta = b_mean - policy.obs_mean
        # Chan et al.'s parallel update, as combine_moments, from the batch's moments.
        policy.obs_mean.copy_(policy.obs_mean + delta * (n / total))
        policy.obs_var.copy_(
            (policy.obs_var * count + b_var * n + delta.square() * (count * n / total)) / total
        )
        policy.obs_count.fill_(total)
        policy._refresh_obs_cache()

    def _epochs(self, batch: Batch) -> tuple[Any, int]:
        """``epochs`` passes of ``K`` minibatches, each a union of one chunk per rank."""
        n_global = self._global_n
        n_local = len(batch)
        k = math.ceil(n_global / min(self.workload.minibatch_size, n_global))
        params: list[torch.Tensor] = [p for p in self.policy.parameters() if p.requires_grad]
        sizes = torch.tensor(
            [len(c) for c in torch.tensor_split(torch.arange(n_local), k)], dtype=torch.float64
        )
        self._collective("all-reduce the minibatch sizes", self._all_reduce, sizes)
        totals = dict.fromkeys(_TERMS, 0.0)
        count = 0
        for _ in range(self.workload.epochs):
            order = torch.randperm(n_local, generator=self.generator)
            for chunk, global_size in zip(
                torch.tensor_split(order, k), sizes.tolist(), strict=True
            ):
                if global_size < 2 and n_global >= 2:
                    continue  # as PPOLearner: a 1-sample minibatch has no advantage spread
                terms = self._minibatch_step(batch, chunk, global_size, params)
                for name, value in zip(_TERMS, terms, strict=True):
                    totals[name] += value
                count += 1
        return totals, count

    def _minibatch_step(
        self, batch: Batch, idx: torch.Tensor, global_size: float, params: list[torch.Tensor]
    ) -> list[float]:
        """This rank's share of one minibatch's gradient, summed over ranks, one step."""
        self.optimizer.zero_grad(set_to_none=True)
        weight = idx.numel() / global_size
        local_terms = torch.zeros(len(_TERMS), dtype=torch.float64)
        if idx.numel():
            new_log_probs, entropy, values = self.policy.evaluate_actions(
                batch.obs[idx], batch.actions[idx]
            )
            pg_loss, clip_fraction = self.policy_loss(
                new_log_probs, batch.log_probs[idx], batch.advantages[idx]
            )
            v_loss = self.value_loss(values, batch.returns[idx])
            ent = entropy.mean()
            loss = pg_loss + self.workload.vf_coef * v_loss - self.workload.ent_coef * ent
            (loss * weight).backward()
            local_terms = weight * torch.tensor(
                [float(loss.detach()), float(pg_loss.detach()), float(v_loss.detach()),
                 float(ent.detach()), float(clip_fraction)],
                dtype=torch.float64,
            )  # fmt: skip
        grads = [torch.zeros_like(p) if p.grad is None else p.grad for p in params]
        flat = torch.cat([g.reshape(-1) for g in grads] + [local_terms.float()])
        self._collective("all-reduce the gradients", self._all_reduce, flat)
        offset = 0
        for p in params:
            size = p.numel()
            p.grad = flat[offset : offset + size].view_as(p).clone()
            offset += size
        torch.nn.utils.clip_grad_norm_(params, self.workload.max_grad_norm)
        self.optimizer.step()
        return [float(v) for v in flat[offset:]]
