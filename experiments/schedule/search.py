"""The headroom of dynamic schedules: cross-entropy search over piecewise-constant fleets.

A learned scheduler can only beat every fixed fleet if some schedule that changes the
fleet size over a run does. This module measures that ceiling directly: it searches
piecewise-constant schedules (:class:`PhaseSchedule`: 2 to 4 phases, each a size from the
``pow2`` action set 1, 2, 4, ..., ``max_actors``, switch rounds free) with the
cross-entropy method, and evaluates every candidate on the same workload seeds as every
``Fixed(n)`` through the real :class:`~fleetgym.meta_env.ActorSchedulingEnv` (real PPO
training, modelled or measured timing): nothing about learning progress is modelled.

The search distribution (:class:`CrossEntropySearch`) is a categorical over the number
of phases, one categorical over the sizes per phase slot and one Gaussian over the
``log2`` length (rounds) of each phase but the last. Each iteration samples
``population`` schedules, evaluates the new ones (a *candidate evaluation* is one
schedule on every seed; schedules already seen, including the ``Fixed(n)`` sweep, come
from a cache and cost nothing), and refits the distribution to the ``elite_frac`` best of
the population, smoothed. The best schedule is then re-evaluated with the best
``Fixed(n)`` on held-out seeds, because a maximum over many noisy means overstates
itself.

Example:
    >>> s = PhaseSchedule(sizes=(32, 16, 16, 8), switches=(5, 9, 20))
    >>> s.canonical().label, s.actors_at(1), s.actors_at(5), s.actors_at(30)
    ('32x4>16x15>8', 32, 16, 8)
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
from tqdm.auto import tqdm

from fleetgym.experiments.schedule.config import CARTPOLE_MODELED_ENV_ID, validate_env_kwargs
from fleetgym.experiments.schedule.evaluate import EpisodeResult, evaluate_scheduler
from fleetgym.experiments.schedule.phases import PhaseSchedule, PhaseScheduler
from fleetgym.experiments.schedule.search_report import (
    gain,
    paired_difference,
    plot_best_schedule,
    plot_learning_progress,
    progress_rows,
    search_markdown,
    stage_oracle,
    stage_rows,
)
from fleetgym.experiments.tables import mean_std, write_csv
from fleetgym.validation import check_float, check_int

__all__ = [
    "POW2_SIZES",
    "CandidateEvaluation",
    "CrossEntropySearch",
    "search_schedules",
]

#: The ``pow2`` action set the phases choose from (capped at the env's ``max_actors``).
POW2_SIZES: tuple[int, ...] = (1, 2, 4, 8, 16, 32)
#: Longest phase the search samples (rounds); CartPole's good runs are 15-50 rounds.
MAX_PHASE_ROUNDS = 64


@dataclass
class CandidateEvaluation:
    """One schedule on every seed, and the mean objective the search ranks by."""

    schedule: PhaseSchedule
    episodes: list[EpisodeResult]
    iteration: int

    @property
    def reward(self) -> float:
        """Mean total reward over the seeds (the env's reward, ``cost_weight`` included)."""
        return float(np.mean([e.total_reward for e in self.episodes]))

    def row(self) -> dict[str, Any]:
        """Mean ± std of time, cost, reward and rounds, for tables."""
        out: dict[str, Any] = {"schedule": self.schedule.label, "iteration": self.iteration}
        for key in ("time_s", "cost", "total_reward", "rounds", "mean_actors"):
            mean, std = mean_std([float(getattr(e, key)) for e in self.episodes])
            out[f"{key}_mean"], out[f"{key}_std"] = mean, std
        out["success_rate"] = float(np.mean([e.success for e in self.episodes]))
        out["realized_phases"] = self.realized_phases
        return out

    @property
    def realized_phases(self) -> int:
        """Phases the runs really went through (the most over seeds): a run that reaches
        the target before a switch round never sees the later phases."""
        return max(1 + int(np.count_nonzero(np.diff(e.num_actors))) for e in self.episodes)


@dataclass
class CrossEntropySearch:
    """The sampling distribution over schedules and its cross-entropy update.

    Args:
        sizes: the sizes a phase may take.
        min_phases, max_phases: phases per schedule (before merging equal neighbours).
        elite_frac: share of a population the distribution is refitted to.
        smoothing: weight of the elites in each update (1: forget the old distribution).
        min_std: floor of the phase-length std (log2 rounds), against early collapse.
        init_length: initial median phase length (rounds).
        rng: the generator every sample comes from.
    """

    sizes: tuple[int, ...]
    min_phases: int = 2
    max_phases: int = 4
    elite_frac: float = 0.25
    smoothing: float = 0.7
    min_std: float = 0.3
    init_length: float = 8.0
    rng: np.random.Generator = field(default_factory=lambda: np.random.default_rng(0))

    def __post_init__(self) -> None:
        check_int("min_phases", self.min_phases, low=1, high=8)
        check_int("max_phases", self.max_phases, low=self.min_phases, high=8)
        check_float("elite_frac", self.elite_frac, low=0.0, high=1.0)
        if self.elite_frac <= 0.0:
            raise ValueError(f"elite_frac: expected a number in (0, 1], actual {self.elite_frac}")
        self.phase_counts = np.arange(self.min_phases, self.max_phases + 1)
        self.p_phases = np.full(len(self.phase_counts), 1.0 / len(self.phase_counts))
        self.p_sizes = np.full((self.max_phases, len(self.sizes)), 1.0 / len(self.sizes))
        self.mu = np.full(self.max_phases - 1, math.log2(self.init_length))
        self.sigma = np.full(self.max_phases - 1, 1.0)

    def sample(self) -> tuple[PhaseSchedule, np.ndarray]:
        """One schedule and its genome (phase count, size indices, log2 lengths)."""
        n = int(self.rng.choice(self.phase_counts, p=self.p_phases))
        idx = np.array([self.rng.choice(len(self.sizes), p=self.p_sizes[j]) for j in range(n)])
        logs = self.rng.normal(self.mu, self.sigma)
        lengths = np.clip(np.rint(2.0**logs), 1, MAX_PHASE_ROUNDS).astype(int)[: n - 1]
        switches = tuple(int(s) for s in 1 + np.cumsum(lengths))
        schedule = PhaseSchedule(tuple(self.sizes[i] for i in idx), switches)
        genome = np.concatenate([[n], np.pad(idx, (0, self.max_phases - n)), logs])
        return schedule, genome

    def n_elite(self, population: int) -> int:
        """Elites of a population (at least one)."""
        return max(1, math.ceil(self.elite_frac * population))

    def update(self, genomes: Sequence[np.ndarray], rewards: Sequence[float]) -> None:
        """Refit the distribution to the best ``elite_frac`` of one population."""
        order = np.argsort(-np.asarray(rewards, dtype=np.float64), kind="stable")
        elite = [genomes[i] for i in order[: self.n_elite(len(genomes))]]
        a = self.smoothing
        counts = np.array([int(g[0]) for g in elite])
        freq = np.array([np.mean(counts == c) for c in self.phase_counts])
        self.p_phases = a * freq + (1 - a) * self.p_phases
        for j in range(self.max_phases):
            used = [int(g[1 + j]) for g, c in zip(elite, counts, strict=True) if c > j]
            if used:
                freq = np.bincount(used, minlength=len(self.sizes)) / len(used)
                self.p_sizes[j] = a * freq + (1 - a) * self.p_sizes[j]
        logs = np.array([g[1 + self.max_phases :] for g in elite])
        for j in range(self.max_phases - 1):
            used_logs = logs[counts > j + 1, j]
            if len(used_logs):
                self.mu[j] = a * used_logs.mean() + (1 - a) * self.mu[j]
                std = float(used_logs.std()) if len(used_logs) > 1 else self.sigma[j]
                self.sigma[j] = max(self.min_std, a * std + (1 - a) * self.sigma[j])

    def state(self) -> dict[str, Any]:
        """The distribution, for the record."""
        return {
            "p_phases": dict(
                zip(self.phase_counts.tolist(), self.p_phases.round(3).tolist(), strict=True)
            ),
            "p_sizes": self.p_sizes.round(3).tolist(),
            "length_median_rounds": np.round(2.0**self.mu, 1).tolist(),
            "length_log2_std": self.sigma.round(3).tolist(),
        }


def _env_attr(env: gym.Env[Any, Any], name: str) -> Any:
    return env.get_wrapper_attr(name)


def search_schedules(
    out_dir: str | Path,
    *,
    env_id: str = CARTPOLE_MODELED_ENV_ID,
    env_kwargs: Mapping[str, Any] | None = None,
    seeds: Sequence[int] = (1000, 1001, 1002),
    confirm_seeds: Sequence[int] = (1003, 1004),
    population: int = 8,
    elite_frac: float = 0.25,
    iterations: int = 4,
    budget: int = 32,
    min_phases: int = 2,
    max_phases: int = 4,
    seed: int = 0,
    progress: bool = True,
    title: str = "",
) -> dict[str, Any]:
    """Cross-entropy search for the best dynamic schedule, against every ``Fixed(n)``.

    Evaluates the ``Fixed(n)`` sweep (every size of :data:`POW2_SIZES` up to the env's
    ``max_actors``) on ``seeds``, then runs :class:`CrossEntropySearch` for
    ``iterations`` populations or until ``budget`` candidate evaluations (new schedules,
    each on every seed) are spent, then re-evaluates the best dynamic schedule and the
    best ``Fixed(n)`` on ``confirm_seeds``. The objective is the env's mean total reward,
    so ``env_kwargs["cost_weight"]`` sets the trade-off.

    Writes into ``out_dir``: ``candidates.csv`` (every schedule evaluated, Fixed(n)
    included), ``search.md`` (the best schedule against the best fixed fleet, and the
    learning-progress table of the sweep), ``schedule.png`` (actors and R̄ per round of
    both), ``progress.png`` (R̄ against samples and against modelled time for every
    Fixed(n)) and ``search.json`` (all of it, with the accounting).

    Args:
        out_dir: output directory.
        env_id: scheduling env ID.
        env_kwargs: its keyword arguments (``cost_weight`` included).
        seeds: workload seeds every candidate is evaluated on.
        confirm_seeds: held-out seeds of the final comparison (may be empty).
        population: schedules sampled per iteration.
        elite_frac: share of a population the distribution is refitted to.
        iterations: populations at most.
        budget: candidate evaluations at most (cache hits are free).
        min_phases, max_phases: phases per sampled schedule.
        seed: seed of the search's sampling (the episodes depend on ``seeds`` only).
        progress: a tqdm bar over episodes.
        title: prefix of the figure titles.

    Returns:
        The record written to ``search.json``.

    Raises:
        TypeError, ValueError: a bad count, fraction or seed list.
    """
    population = check_int("population", population, low=1)
    iterations = check_int("iterations", iterations, low=1)
    budget = check_int("budget", budget, low=1)
    seeds = [check_int("seeds", s, low=0) for s in seeds]
    confirm = [check_int("confirm_seeds", s, low=0) for s in confirm_seeds]
    if not seeds:
        raise ValueError("seeds: expected at least one seed, actual none")
    kwargs = validate_env_kwargs(env_kwargs)
    probe = gym.make(env_id, **kwargs)
    max_actors = int(getattr(probe.action_space, "n", 0))
    env_info = {
        name: _env_attr(probe, name)
        for name in ("target_return", "steps_per_actor", "beta", "cost_weight", "budget")
    }
    probe.close()
    sizes = tuple(n for n in POW2_SIZES if n <= max_actors)
    cem = CrossEntropySearch(
        sizes,
        min_phases=min_phases,
        max_phases=max_phases,
        elite_frac=elite_frac,
        rng=np.random.default_rng(seed),
    )
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    cache: dict[str, CandidateEvaluation] = {}
    accounting = {"candidate_evaluations": 0, "cache_hits": 0, "sampled": 0, "episodes": 0}
    total = (len(sizes) + budget) * len(seeds) + 2 * len(confirm)
    bar = tqdm(total=total, desc="schedule search", unit="ep", disable=not progress)

    def evaluate(schedule: PhaseSchedule, run_seeds: Sequence[int]) -> list[EpisodeResult]:
        episodes = evaluate_scheduler(
            PhaseScheduler(schedule), kwargs, run_seeds, env_id=env_id, progress=bar
        )
        accounting["episodes"] += len(episodes)
        return episodes

    with bar:
        for n in sizes:
            fixed = PhaseSchedule((n,))
            cache[fixed.label] = CandidateEvaluation(fixed, evaluate(fixed, seeds), -1)
        history: list[dict[str, Any]] = []
        for it in range(iterations):
            genomes, rewards = [], []
            for _ in range(population):
                if accounting["candidate_evaluations"] >= budget:
                    break
                schedule, genome = cem.sample()
                accounting["sampled"] += 1
                key = schedule.canonical()
                if key.label in cache:
                    accounting["cache_hits"] += 1
                else:
                    cache[key.label] = CandidateEvaluation(key, evaluate(key, seeds), it)
                    accounting["candidate_evaluations"] += 1
                genomes.append(genome)
                rewards.append(cache[key.label].reward)
            if not genomes:
                break
            cem.update(genomes, rewards)
            best_so_far = max(cache.values(), key=lambda c: c.reward)
            history.append(
                {
                    "iteration": it,
                    "population": len(genomes),
                    "best_reward": best_so_far.reward,
                    "best": best_so_far.schedule.label,
                    "distribution": cem.state(),
                }
            )
            bar.set_postfix(best=best_so_far.schedule.label)
        fixed_evals = [c for c in cache.values() if len(c.schedule.sizes) == 1]
        # A schedule is dynamic only if some run really changed its fleet.
        dynamic = [c for c in cache.values() if c.realized_phases > 1]
        best_fixed = max(fixed_evals, key=lambda c: c.reward)
        best = max(dynamic, key=lambda c: c.reward) if dynamic else best_fixed
        held_out_runs: dict[str, CandidateEvaluation] = {}
        if confirm:
            for c in dict.fromkeys([best.schedule, best_fixed.schedule]):
                held_out_runs[c.label] = CandidateEvaluation(c, evaluate(c, confirm), -2)
        held_out = {label: c.row() for label, c in held_out_runs.items()}
        bar.total = bar.n  # candidates may have come from the cache
        bar.refresh()

    fixed_runs = {c.schedule.sizes[0]: c.episodes for c in fixed_evals}
    stages = stage_rows(fixed_runs, float(env_info["target_return"]))
    result: dict[str, Any] = {
        "env_id": env_id,
        "env_kwargs": kwargs,
        "env": env_info,
        "seeds": seeds,
        "confirm_seeds": confirm,
        "search": {
            "method": "cross-entropy",
            "population": population,
            "elite_frac": elite_frac,
            "n_elite": cem.n_elite(population),
            "smoothing": cem.smoothing,
            "iterations": iterations,
            "iterations_run": len(history),
            "budget": budget,
            "phases": [min_phases, max_phases],
            "sizes": list(sizes),
            "seed": seed,
        },
        "accounting": accounting,
        "fixed": [c.row() for c in fixed_evals],
        "best_fixed": best_fixed.row(),
        "best": best.row(),
        "gain": gain(best.row(), best_fixed.row()),
        "held_out": held_out,
        "history": history,
        "candidates": [c.row() for c in cache.values()],
        "learning_progress": progress_rows(fixed_runs, int(env_info["steps_per_actor"])),
        "stages": stages,
        "stage_oracle": stage_oracle(stages, len(seeds)),
        "traces": {
            c.schedule.label: [
                {"seed": e.seed, "num_actors": e.num_actors, "mean_return": e.mean_return}
                for e in c.episodes
            ]
            for c in [*fixed_evals, best]
        },
    }
    if confirm and best.schedule.label != best_fixed.schedule.label:
        result["held_out_gain"] = gain(
            held_out[best.schedule.label], held_out[best_fixed.schedule.label]
        ) | paired_difference(
            held_out_runs[best.schedule.label].episodes,
            held_out_runs[best_fixed.schedule.label].episodes,
        )
    write_csv(out / "candidates.csv", result["candidates"])
    (out / "search.md").write_text(search_markdown(result) + "\n")
    prefix = f"{title}: " if title else ""
    plot_best_schedule(
        {best.schedule.label: best.episodes, best_fixed.schedule.label: best_fixed.episodes},
        out / "schedule.png",
        target=env_info["target_return"],
        title=f"{prefix}best schedule vs best fixed fleet (seeds {seeds[0]}..{seeds[-1]})",
    )
    plot_learning_progress(
        fixed_runs,
        out / "progress.png",
        steps_per_actor=int(env_info["steps_per_actor"]),
        target=env_info["target_return"],
        title=f"{prefix}learning progress of every Fixed(n) (seed {seeds[0]})",
    )
    (out / "search.json").write_text(json.dumps(result, indent=1, default=float))
    return result
