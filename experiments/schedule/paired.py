"""Common random numbers for the scheduler's training: a paired reference on each seed.

Two schedules differ by 0.01-0.02 in total reward on CartPole, while one schedule's total
spreads 0.02-0.04 from one workload seed to the next. A policy gradient that compares
episodes on *different* seeds sees mostly the seeds, and five training seeds of the
``step`` scheduler split between keeping 8 actors and climbing to 32.

:class:`PairedSeedsWrapper` trains on a fixed pool of workload seeds and pays each round
*relative to a reference fleet on the same seed*: the reward of round ``t`` becomes
``r_t - r_ref_t``, where ``r_ref_t`` is the reward a constant fleet (``reference_actors``,
by default the ``step`` mode's start, 8) earned in round ``t`` of the same seed; when the
episode ends, the reference's rounds still to come are subtracted too. The return from
round ``t`` is then ``G_t - G_ref_t``: what the schedule gained over the reference from that
round on, on the very same workload.

Why this leaves the best schedule unchanged: the subtracted terms depend only on the seed
and the round index, which no action can change, so every episode's total is shifted by
``-J_ref(seed)``, the same for all policies. In policy-gradient terms it is a baseline
``b(seed, t)``. The scheduling env is a pure function of its seed and actions (modelled
timing), so an episode that keeps the reference fleet earns exactly 0, and any move is
judged by its paired difference.

Cost: one reference episode per pool seed, run once and cached (8 by default, against a
training budget of 100 episodes); it counts in the training's CPU time.

Example:
    >>> import gymnasium as gym
    >>> import fleetgym
    >>> env_id = "fleetgym/ActorScheduling-CartPole-Modeled-v0"
    >>> env = PairedSeedsWrapper(gym.make(env_id, max_rounds=3), lambda: gym.make(env_id, max_rounds=3),
    ...                          pool_size=2, reference_actors=8)
    >>> _ = env.reset(seed=0)
    >>> total = 0.0
    >>> for _ in range(3):
    ...     _, reward, terminated, truncated, info = env.step(7)  # 8 actors, the reference
    ...     total += reward
    >>> terminated or truncated, round(total, 12), info["paired_reference"] < 0
    (True, 0.0, True)
    >>> env.close()
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import gymnasium as gym
import numpy as np

from fleetgym.validation import check_int

__all__ = ["PairedSeedsWrapper", "fixed_fleet_rewards", "pool_seeds"]


def pool_seeds(seed: int, size: int) -> list[int]:
    """``size`` workload seeds drawn from ``seed`` (below 2**31, so never the small
    evaluation seeds by design, and with probability ~1e-8 by chance).

    Example:
        >>> pool_seeds(0, 3) == pool_seeds(0, 3), len(set(pool_seeds(0, 100)))
        (True, 100)
    """
    size = check_int("size", size, low=1)
    state = np.random.SeedSequence([check_int("seed", seed, low=0), 0x5EED]).generate_state(
        size, dtype=np.uint32
    )
    return [int(s) % (2**31 - 10_000) + 10_000 for s in state]


def fixed_fleet_rewards(
    env: gym.Env, actors: int, seed: int, *, name: str = "actors"
) -> np.ndarray:
    """Per-round rewards of a constant fleet of ``actors`` on workload seed ``seed``.

    ``env`` is the *unwrapped* scheduling env (``Discrete(max_actors)`` actions, action
    ``n - 1`` runs ``n`` actors); it is reset, run to the end of its episode and left so.

    Raises:
        ValueError: ``actors`` outside ``1..max_actors`` (the message names it ``name``).
    """
    n = int(getattr(env.action_space, "n", 0))
    if not 1 <= actors <= n:
        raise ValueError(f"{name}: expected 1..{n} (the env's max_actors), actual {actors}")
    env.reset(seed=seed)
    rewards: list[float] = []
    done = False
    while not done:
        _, reward, terminated, truncated, _ = env.step(actors - 1)
        rewards.append(float(reward))
        done = terminated or truncated
    return np.asarray(rewards, dtype=np.float64)


class PairedSeedsWrapper(gym.Wrapper, gym.utils.RecordConstructorArgs):
    """Train on a pool of workload seeds, each round paid relative to a reference fleet.

    Wrap the (action-mapped, ``Monitor``-ed) scheduling env: ``Monitor`` inside still logs
    the true reward. Episodes cycle through the pool in order; ``reset(seed=s)`` draws a
    new pool from ``s`` and starts the cycle again. ``info["paired_reference"]`` is the
    reference's total on the episode's seed, ``info["paired_seed"]`` the seed.

    Args:
        env: the scheduling env the agent acts in.
        make_reference: builds the env the reference fleet runs in (the *unwrapped*
            ``ActorSchedulingEnv`` with the same keyword arguments: ``Discrete(max_actors)``
            actions); made once, on the first reset.
        pool_size: number of workload seeds.
        reference_actors: the reference's constant fleet size.
        reference_cache: reference rewards already run, by workload seed (e.g. by the
            start-size selection, :mod:`fleetgym.experiments.schedule.start`), so that
            they are not run twice.

    Raises:
        ValueError: ``pool_size`` or ``reference_actors`` < 1.
    """

    def __init__(
        self,
        env: gym.Env,
        make_reference: Callable[[], gym.Env],
        *,
        pool_size: int = 8,
        reference_actors: int = 8,
        reference_cache: Mapping[int, np.ndarray] | None = None,
    ) -> None:
        gym.utils.RecordConstructorArgs.__init__(
            self, pool_size=pool_size, reference_actors=reference_actors
        )
        gym.Wrapper.__init__(self, env)
        if not callable(make_reference):
            raise TypeError(f"make_reference: expected a callable, actual {make_reference!r}")
        self.pool_size = check_int("pool_size", pool_size, low=1)
        self.reference_actors = check_int("reference_actors", reference_actors, low=1)
        self._make_reference = make_reference
        self._reference_env: gym.Env | None = None
        self._cache: dict[int, np.ndarray] = dict(reference_cache or {})
        self._pool = pool_seeds(0, self.pool_size)
        self._next = 0
        self._ref: np.ndarray = np.zeros(0)
        self._round = 0
        self._seed = 0

    def reference_rewards(self, seed: int) -> np.ndarray:
        """The reference fleet's per-round rewards on workload seed ``seed`` (cached)."""
        if seed not in self._cache:
            if self._reference_env is None:
                self._reference_env = self._make_reference()
            self._cache[seed] = fixed_fleet_rewards(
                self._reference_env, self.reference_actors, seed, name="reference_actors"
            )
        return self._cache[seed]

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[Any, dict[str, Any]]:
        if seed is not None:
            self._pool = pool_seeds(int(seed) % 2**31, self.pool_size)
            self._next = 0
        self._seed = self._pool[self._next % self.pool_size]
        self._next += 1
        self._ref = self.reference_rewards(self._seed)
        self._round = 0
        obs, info = self.env.reset(seed=self._seed, options=options)
        return obs, {**info, "paired_seed": self._seed}

    def step(self, action: Any) -> tuple[Any, float, bool, bool, dict[str, Any]]:
        obs, reward, terminated, truncated, info = self.env.step(action)
        t = self._round
        self._round += 1
        shaped = float(reward) - (float(self._ref[t]) if t < len(self._ref) else 0.0)
        if terminated or truncated:
            shaped -= float(self._ref[t + 1 :].sum())
            info = {
                **info,
                "paired_seed": self._seed,
                "paired_reference": float(self._ref.sum()),
            }
        return obs, shaped, terminated, truncated, info

    def close(self) -> None:
        if self._reference_env is not None:
            self._reference_env.close()
            self._reference_env = None
        super().close()
