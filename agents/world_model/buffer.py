"""Real transitions for a world model: B_real of the imagination buffer.

:class:`TransitionBuffer` holds ``(o, a, r, o', done)`` rows, newest last, up to a
capacity. Rows come from a fleet's :class:`~fleetgym.agents.types.Trajectory` objects
(:meth:`TransitionBuffer.add_trajectory`) or from stepping an env
(:meth:`TransitionBuffer.collect`, e.g. the undelayed Mode 1 data a deployer has). A
trajectory that carries ``final_obs`` (the observation each ending step reached) stores
it, so a terminated or truncated row keeps its next observation; without it such a row
teaches termination only (``has_next`` is False and the observation change is not
fitted). ``segments`` number runs of consecutive steps, which multi-step error needs.

Every row gets a fixed uniform ``holdout_key`` when it enters, so a model that holds out
the rows whose key is below its held-out share scores every fit on the same rows, none of
which it ever trained on (:meth:`WorldModel.fit <fleetgym.agents.world_model.WorldModel.fit>`).
With ``success_share`` the rows of successful episodes (a rewarded termination) keep up
to that share of the capacity when older rows are evicted (AcceRL keeps about 30 %).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import gymnasium as gym
import numpy as np

from fleetgym.validation import check_float, check_int

__all__ = ["TransitionBuffer", "collect_transitions"]

_FIELDS = ("obs", "actions", "rewards", "next_obs", "terminated", "has_next", "segments")


class TransitionBuffer:
    """Up to ``capacity`` real transitions, the newest kept.

    Args:
        capacity: Most rows kept (older ones are dropped first).
        success_share: Share of ``capacity`` that the newest successful episodes keep when
            rows are evicted, in ``[0, 1]`` (``0``: first in, first out).
        seed: Seeds the rows' held-out keys.

    Example:
        >>> buf = TransitionBuffer.collect(gym.make("CartPole-v1"), 50, seed=0)
        >>> len(buf), buf.obs.shape, bool(buf.has_next.all())
        (50, (50, 4), True)
    """

    def __init__(
        self, capacity: int = 1_000_000, *, success_share: float = 0.0, seed: int = 0
    ) -> None:
        self.capacity = check_int("capacity", capacity, 10, 100_000_000)
        self.success_share = check_float("success_share", success_share, 0.0, 1.0)
        self._key_rng = np.random.default_rng([check_int("seed", seed, 0, 2**63 - 1), 0xB0F])
        #: A uniform key in [0, 1) per row, drawn once when the row enters.
        self.holdout_key = np.zeros(0, np.float64)
        #: The row's index among all rows ever added (stable while the row is kept).
        self.row_ids = np.zeros(0, np.int64)
        self.obs = np.zeros((0, 0), np.float32)
        self.actions: np.ndarray = np.zeros(0)
        self.rewards = np.zeros(0, np.float32)
        self.next_obs = np.zeros((0, 0), np.float32)
        self.terminated = np.zeros(0, bool)
        self.has_next = np.zeros(0, bool)
        self.segments = np.zeros(0, np.int64)
        self._next_segment = 0
        #: Rows ever added (the dropped ones included).
        self.total_added = 0

    def __len__(self) -> int:
        return int(self.rewards.shape[0])

    def add(
        self,
        obs: Any,
        actions: Any,
        rewards: Any,
        next_obs: Any,
        terminated: Any,
        has_next: Any | None = None,
        segments: Any | None = None,
        holdout_key: Any | None = None,
    ) -> None:
        """Append rows (arrays of one length; ``segments`` default: one new run;
        ``holdout_key`` default: drawn now).

        When the buffer is over ``capacity`` afterwards, the oldest rows are dropped (with
        ``success_share``, successful episodes are kept first).

        Args:
            obs: Observations, 2-D ``(n, obs_dim)`` (stored as float32; the width must match
                the rows already held).
            actions: The actions taken, ``n`` rows (any shape per row).
            rewards: Rewards, ``n`` values.
            next_obs: Next observations, same shape as ``obs``; rows where ``has_next`` is
                False are stored as zeros and may hold anything (NaN included).
            terminated: Whether each step ended its episode in a terminal state.
            has_next: Whether each row's ``next_obs`` is known; None: all are.
            segments: Run index of each row (consecutive steps of one episode share one);
                renumbered to follow the buffer's runs. None: all rows form one new run.
            holdout_key: Each row's held-out key in [0, 1) (to carry keys over from another
                buffer); None: drawn now from the buffer's seeded generator.

        Raises:
            ValueError: For arrays of different lengths or widths, or NaN / infinity.
        """
        obs = np.asarray(obs, np.float32)
        next_obs = np.asarray(next_obs, np.float32)
        n = obs.shape[0] if obs.ndim == 2 else -1
        rewards = np.asarray(rewards, np.float32).reshape(-1)
        terminated = np.asarray(terminated, bool).reshape(-1)
        has_next = (
            np.ones(max(n, 0), bool) if has_next is None else np.asarray(has_next, bool).reshape(-1)
        )
        if segments is None:
            segments = np.zeros(max(n, 0), np.int64)
        segments = np.asarray(segments, np.int64).reshape(-1)
        actions = np.asarray(actions)
        lengths = {
            "obs": n,
            "next_obs": next_obs.shape[0] if next_obs.ndim == 2 else -1,
            "actions": actions.shape[0] if actions.ndim else -1,
            "rewards": rewards.shape[0],
            "terminated": terminated.shape[0],
            "has_next": has_next.shape[0],
            "segments": segments.shape[0],
        }
        if n < 0 or len(set(lengths.values())) != 1:
            raise ValueError(
                f"transitions: expected 2-D obs and arrays of one length, actual {lengths}"
            )
        if obs.shape != next_obs.shape or (len(self) and obs.shape[1] != self.obs.shape[1]):
            raise ValueError(
                f"transitions: expected observations of one width, actual {obs.shape} / "
                f"{next_obs.shape} (buffer {self.obs.shape})"
            )
        valid = next_obs[has_next]
        if not (np.isfinite(obs).all() and np.isfinite(valid).all() and np.isfinite(rewards).all()):
            raise ValueError(
                "transitions: expected finite observations and rewards, actual NaN or inf"
            )
        if n == 0:
            return
        keys = (
            self._key_rng.random(n)
            if holdout_key is None
            else np.asarray(holdout_key, np.float64).reshape(-1)
        )
        if keys.shape[0] != n:
            raise ValueError(f"holdout_key: expected {n} keys, actual {keys.shape[0]}")
        segments = segments - segments.min() + self._next_segment
        self._next_segment = int(segments.max()) + 1
        new = (
            obs,
            actions,
            rewards,
            np.where(has_next[:, None], next_obs, 0.0),
            terminated,
            has_next,
            segments,
            keys,
            np.arange(self.total_added, self.total_added + n, dtype=np.int64),
        )
        names = (*_FIELDS, "holdout_key", "row_ids")
        parts: tuple[np.ndarray, ...]
        if not len(self):
            parts = new
        else:
            parts = tuple(
                np.concatenate([getattr(self, f), v]) for f, v in zip(names, new, strict=True)
            )
        keep = self._kept(parts[2], parts[4], parts[6])
        for name, value in zip(names, parts, strict=True):
            # A copy: the caller's arrays (or another buffer's, for tail()) are not shared.
            setattr(self, name, np.array(value[keep], order="C"))
        self.total_added += n

    def _kept(self, rewards: np.ndarray, terminated: np.ndarray, segments: np.ndarray) -> Any:
        """The rows to keep: the newest ``capacity``, or with ``success_share`` the newest
        successful episodes (whole, up to that share of the capacity) and the newest rest."""
        total = rewards.shape[0]
        if total <= self.capacity:
            return slice(None)
        if self.success_share <= 0.0:
            return slice(total - self.capacity, None)
        won = np.unique(segments[terminated & (rewards > 0)])
        quota = int(self.success_share * self.capacity)
        keep = np.zeros(total, bool)
        used = 0
        for segment in won[::-1]:  # newest successful episodes first, whole
            rows = segments == segment
            size = int(rows.sum())
            if used + size > quota:
                break
            keep |= rows
            used += size
        rest = np.flatnonzero(~keep)
        keep[rest[max(0, len(rest) - (self.capacity - used)) :]] = True
        return np.flatnonzero(keep)

    def success_rows(self) -> np.ndarray:
        """Whether each row belongs to a successful episode (a rewarded termination)."""
        won = np.unique(self.segments[self.terminated & (self.rewards > 0)])
        return np.isin(self.segments, won)

    def add_trajectory(self, trajectory: Any) -> int:
        """Append the transitions of one fleet trajectory; returns the rows added.

        Step ``t`` pairs ``obs[t]`` with ``obs[t + 1]`` inside an episode. An ending step
        pairs with ``trajectory.final_obs[t]`` when the trajectory carries ``final_obs``
        (an array of ``len(trajectory)`` observations, read where a step terminated or
        truncated; ``None`` or NaN rows where it is unknown). Without it a terminated step
        is kept for its termination label only (no next observation) and a truncated one
        is dropped. The last step needs ``trajectory.next_obs`` (an asynchronous actor's
        trajectories carry it) unless it ended.

        Args:
            trajectory: A :class:`~fleetgym.agents.types.Trajectory` (or any object with
                its ``obs``, ``actions``, ``rewards``, ``terminated`` and ``truncated``
                arrays, a length, and optionally ``final_obs`` and ``next_obs``).
        """
        obs = np.asarray(trajectory.obs, np.float32).reshape(len(trajectory), -1)
        n = len(trajectory)
        term = np.asarray(trajectory.terminated, bool)
        trunc = np.asarray(trajectory.truncated, bool)
        after = getattr(trajectory, "next_obs", None)
        nxt = np.zeros_like(obs)
        nxt[:-1] = obs[1:]
        has_next = ~(term | trunc)
        if after is not None:
            nxt[-1] = np.asarray(after, np.float32).reshape(-1)
        else:
            has_next[-1] = False
        final = getattr(trajectory, "final_obs", None)
        if final is not None and n:
            final = np.asarray(final, np.float32).reshape(n, -1)
            if final.shape[1] != obs.shape[1]:
                raise ValueError(
                    f"final_obs: expected {n} observations of {obs.shape[1]} values, actual "
                    f"shape {final.shape}"
                )
            known = (term | trunc) & np.isfinite(final).all(axis=1)
            nxt[known] = final[known]
            has_next |= known
            if n and (term[-1] or trunc[-1]) and not known[-1]:
                has_next[-1] = False
        keep = has_next | term
        if n and not has_next[-1] and not term[-1]:
            keep[-1] = False
        segments = np.concatenate([[0], np.cumsum(term | trunc)[:-1]]) if n else np.zeros(0)
        self.add(
            obs[keep],
            np.asarray(trajectory.actions)[keep],
            np.asarray(trajectory.rewards)[keep],
            nxt[keep],
            term[keep],
            has_next[keep],
            segments[keep],
        )
        return int(keep.sum())

    @classmethod
    def collect(
        cls,
        env: gym.Env,
        steps: int,
        seed: int = 0,
        policy: Callable[[np.ndarray], Any] | None = None,
        capacity: int | None = None,
    ) -> TransitionBuffer:
        """``steps`` transitions of ``env`` under ``policy`` (uniform random actions if ``None``).

        Observations are flattened with Gymnasium's ``flatten`` when the space is not a
        1-D Box. The env is reset with ``seed`` and its action space seeded with it.

        Args:
            env: The env to step (not closed here); reset whenever an episode ends.
            steps: Env steps to record (1 to 100,000,000), one row each.
            seed: Seed of the first reset and of the action space's sampling.
            policy: Maps one flattened observation to the action passed to ``env.step``;
                None: ``env.action_space.sample()``.
            capacity: Capacity of the returned buffer (at least 10); None: ``max(steps,
                10)``, so every step is kept.
        """
        from fleetgym.agents.world_model.spaces import SpaceCodec

        steps = check_int("steps", steps, 1, 100_000_000)
        codec = SpaceCodec(env.observation_space, env.action_space)
        env.action_space.seed(int(seed))
        rows: dict[str, list[Any]] = {f: [] for f in _FIELDS[:-2]}
        segments = np.zeros(steps, np.int64)
        obs, _ = env.reset(seed=int(seed))
        flat = codec.flatten_obs(obs)
        segment = 0
        for t in range(steps):
            action = env.action_space.sample() if policy is None else policy(flat)
            nxt, reward, terminated, truncated, _ = env.step(action)
            nflat = codec.flatten_obs(nxt)
            for name, value in zip(
                _FIELDS[:-2], (flat, action, reward, nflat, terminated), strict=True
            ):
                rows[name].append(value)
            segments[t] = segment
            if terminated or truncated:
                segment += 1
                obs, _ = env.reset()
                flat = codec.flatten_obs(obs)
            else:
                flat = nflat
        out = cls(capacity or max(steps, 10))
        obs_, actions_, rewards_, next_, term_ = (np.asarray(rows[f]) for f in _FIELDS[:-2])
        out.add(obs_, actions_, rewards_, next_, term_, segments=segments)
        return out

    def sample_starts(
        self, n: int, rng: np.random.Generator, recent: int | None = None
    ) -> np.ndarray:
        """``n`` observations drawn uniformly (from the newest ``recent`` rows if given).

        Args:
            n: Observations to draw (with replacement).
            rng: Generator of the draws.
            recent: Draw only from the newest ``recent`` rows (>= 1); None: from all rows.

        Raises:
            ValueError: For an empty buffer.
        """
        if not len(self):
            raise ValueError("sample_starts: expected a non-empty buffer, actual no transitions")
        low = 0 if recent is None else max(0, len(self) - int(recent))
        return self.obs[rng.integers(low, len(self), int(n))].copy()

    def tail(self, rows: int) -> TransitionBuffer:
        """A buffer of the newest ``rows`` transitions (a copy).

        The rows keep their held-out keys; the new buffer's capacity is ``max(10, rows)``
        and its other settings are the defaults.

        Args:
            rows: Transitions to copy (all of them if the buffer holds fewer).
        """
        out = TransitionBuffer(max(10, rows))
        keep = slice(max(0, len(self) - rows), None)
        if len(self):
            out.add(
                self.obs[keep],
                self.actions[keep],
                self.rewards[keep],
                self.next_obs[keep],
                self.terminated[keep],
                self.has_next[keep],
                self.segments[keep],
                holdout_key=self.holdout_key[keep],
            )
        return out


def collect_transitions(
    env: str | gym.Env,
    steps: int,
    seed: int = 0,
    policy: Callable[[np.ndarray], Any] | None = None,
    **make_kwargs: Any,
) -> TransitionBuffer:
    """Mode 1 data: ``steps`` undelayed transitions of ``env`` (an ID or an env instance).

    Args:
        env: A Gymnasium env ID (made with ``make_kwargs`` and closed afterwards) or an env
            instance (stepped as is, left open).
        steps: Env steps to record (1 to 100,000,000).
        seed: Seed of the first reset and of the random actions.
        policy: Maps one flattened observation to an env action; None: uniform random
            actions.
        **make_kwargs: Keywords for ``gym.make`` when ``env`` is an ID (ignored for an
            instance).

    Example:
        >>> len(collect_transitions("CartPole-v1", 20, seed=0))
        20
    """
    if isinstance(env, str):
        made = gym.make(env, **make_kwargs)
        try:
            return TransitionBuffer.collect(made, steps, seed, policy)
        finally:
            made.close()
    return TransitionBuffer.collect(env, steps, seed, policy)
