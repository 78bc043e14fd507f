"""Start-size selection: the scheduler's first decision, learned on its own signal.

Every fleet starts cold, so the size a run *starts* with is the one move that costs no
extra cold start; a move up in a later round pays one (0.3 s on CartPole, 8 % of a run)
for a gain of at most a few rounds' speed-up. With a ``"step"`` policy the first decision
is one sample among the 30-80 of an update and, at a keep prior of 0.9, it is tried about
five times in 100 episodes: 100 episodes of PPO learn to keep the start size and little
else (``docs/explanation/learned-scheduler.md``).

:func:`select_start` gives that decision its own, much cheaper learning signal: each
candidate size runs as a constant fleet on every workload seed of the training pool, and
the start is the size with the best mean total reward. All candidates run on the *same*
seeds, so the comparison is paired (the seed-to-seed spread of 0.02-0.04 in total reward
cancels out of each difference), and the episodes of the chosen size are exactly the
references :class:`~fleetgym.experiments.schedule.paired.PairedSeedsWrapper` then pays the
step policy against: the selection costs (candidates - 1) x pool episodes more than a run
without it (24 on CartPole's default of 4 sizes and 8 seeds). The step policy then learns
the later rounds, moves away from the chosen start, as before.

Example:
    >>> import gymnasium as gym
    >>> import fleetgym
    >>> make = lambda: gym.make("fleetgym/ActorScheduling-CartPole-Modeled-v0", max_rounds=3)
    >>> chosen = select_start(make, (4, 8), (1, 2), progress=False)
    >>> chosen.best in (4, 8), sorted(chosen.mean_totals()), len(chosen.rewards[chosen.best])
    (True, [4, 8], 2)
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import gymnasium as gym
import numpy as np

from fleetgym.experiments.schedule.paired import fixed_fleet_rewards

__all__ = ["StartSelection", "select_start"]


@dataclass
class StartSelection:
    """What :func:`select_start` measured: per-round rewards of each size on each seed it
    ran on (a size dropped from the race ran on fewer seeds than the winner)."""

    sizes: tuple[int, ...]
    seeds: tuple[int, ...]  # the seeds the winner ran on, in order
    best: int
    rewards: dict[int, dict[int, np.ndarray]] = field(default_factory=dict)  # size, seed

    def totals(self, size: int) -> np.ndarray:
        """Total reward of a constant fleet of ``size`` on each seed it ran on."""
        return np.array(
            [self.rewards[size][s].sum() for s in self.seeds if s in self.rewards[size]]
        )

    def mean_totals(self) -> dict[int, float]:
        """Mean total reward over the seeds each size ran on."""
        return {n: float(self.totals(n).mean()) for n in self.sizes}

    def rows(self) -> list[dict[str, Any]]:
        """One row per size: the seeds it ran on, its mean total, the paired difference to
        the chosen size on those seeds (mean and standard error) and the seeds it beats the
        chosen size on."""
        rows = []
        for n in self.sizes:
            common = [s for s in self.seeds if s in self.rewards[n]]
            diff = np.array(
                [self.rewards[n][s].sum() - self.rewards[self.best][s].sum() for s in common]
            )
            stderr = float(diff.std(ddof=1) / np.sqrt(len(diff))) if len(diff) > 1 else 0.0
            rows.append(
                {
                    "start_actors": n,
                    "seeds": len(common),
                    "mean_total_reward": round(float(self.totals(n).mean()), 6),
                    "diff_to_chosen": round(float(diff.mean()), 6),
                    "diff_stderr": round(stderr, 6),
                    "seeds_better_than_chosen": int((diff > 0).sum()),
                    "chosen": n == self.best,
                }
            )
        return rows


def select_start(
    make_env: Callable[[], gym.Env],
    sizes: Sequence[int],
    seeds: Sequence[int],
    *,
    first: int | None = None,
    z: float = 2.0,
    progress: bool = True,
) -> StartSelection:
    """Race ``sizes`` as constant fleets over ``seeds``; the best mean total reward wins.

    Every size runs on the ``first`` seeds. From then on, after each seed, a size whose
    paired difference to the leader (the best mean over the seeds all remaining sizes ran
    on) is below ``-z`` standard errors is dropped, and the sizes still in the race run on
    the next seed, until one is left or the seeds run out; the winner is the best mean
    over the seeds every size left ran on, ties going to the smaller (cheaper) fleet.
    A clearly worse size so costs ``first`` episodes, a close one up to ``len(seeds)``.

    Args:
        make_env: builds the *unwrapped* scheduling env (``Discrete(max_actors)`` actions).
        sizes: candidate start sizes (each in ``1..max_actors``).
        seeds: workload seeds, in the order they are used.
        first: seeds every size runs on before any is dropped (None: all of them).
        z: standard errors behind the leader at which a size is dropped.
        progress: a tqdm bar over the episodes.

    Raises:
        ValueError: no sizes or no seeds, ``first`` < 2, ``z`` <= 0, or a size outside
            ``1..max_actors``.
    """
    sizes = tuple(sorted(set(int(n) for n in sizes)))
    seeds = tuple(int(s) for s in seeds)
    if not sizes or not seeds:
        raise ValueError(f"sizes, seeds: expected at least one each, actual {sizes}, {seeds}")
    first = len(seeds) if first is None else min(int(first), len(seeds))
    if first < 2 and len(seeds) > 1:
        raise ValueError(
            f"first: expected at least 2 seeds before a size is dropped, actual {first}"
        )
    if not z > 0:
        raise ValueError(f"z: expected a positive number, actual {z!r}")
    env = make_env()
    rewards: dict[int, dict[int, np.ndarray]] = {n: {} for n in sizes}
    alive = list(sizes)
    bar = None
    if progress:
        from tqdm.auto import tqdm

        bar = tqdm(total=len(sizes) * len(seeds), desc="start sizes", unit="episode")
    try:
        for k, s in enumerate(seeds):
            for n in alive:
                rewards[n][s] = fixed_fleet_rewards(env, n, s, name="start size")
            if bar is not None:
                bar.update(len(alive))
            if k + 1 >= first and len(alive) > 1:
                alive = _still_racing(rewards, alive, seeds[: k + 1], z)
                if bar is not None:
                    bar.total = bar.n + len(alive) * (len(seeds) - k - 1)
                    bar.refresh()
            if len(alive) == 1:
                break
    finally:
        env.close()
        if bar is not None:
            bar.total = bar.n
            bar.close()
    ran = seeds[: len(rewards[alive[0]])]
    means = {n: float(np.mean([rewards[n][s].sum() for s in ran])) for n in alive}
    best = alive[0]
    for n in alive[1:]:
        if means[n] > means[best]:
            best = n
    return StartSelection(sizes=sizes, seeds=ran, best=best, rewards=rewards)


def _still_racing(
    rewards: dict[int, dict[int, np.ndarray]], alive: list[int], seeds: Sequence[int], z: float
) -> list[int]:
    totals = {n: np.array([rewards[n][s].sum() for s in seeds]) for n in alive}
    leader = max(alive, key=lambda n: (totals[n].mean(), -n))
    kept = []
    for n in alive:
        diff = totals[n] - totals[leader]
        stderr = diff.std(ddof=1) / np.sqrt(len(diff))
        if n == leader or diff.mean() >= -z * stderr:
            kept.append(n)
    return kept
