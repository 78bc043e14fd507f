"""Heuristic actor schedulers with Stable-Baselines3's ``predict`` interface.

A scheduler picks how many actors the next round of a distributed training run gets,
from the 7-dim observation of :class:`fleetgym.meta_env.ActorSchedulingEnv` (its layout:
:mod:`fleetgym.agents.schedulers.observation`, whose ``OBS_*`` indices are re-exported
here). The action is ``num_actors - 1`` (``Discrete(max_actors)``).

Every scheduler has SB3's ``predict(obs, state=None, episode_start=None,
deterministic=True) -> (action, state)``, so one evaluation loop serves these baselines
and a trained SB3 model alike. Schedulers that count rounds or average returns keep that
in the returned ``state`` (one row per environment); pass it back on the next call and
pass ``episode_start`` (True on the first step of an episode) as SB3's
``evaluate_policy`` does. ``state=None`` starts fresh.

The baselines (those MinionsRL compares its learned scheduler with):

* :class:`FixedScheduler` ``Fixed(n)``: n actors every round.
* :class:`MaxScheduler`: ``max_actors`` every round.
* :class:`IncreaseScheduler` / :class:`DecreaseScheduler`: start low (high) and add
  (remove) 10 actors every 10 rounds.
* :class:`AdaptScheduler`: ``I_k = clip(round(J_hat_k / J * I_max), 1, I_max)`` with
  ``J_hat_k`` the moving average of the last 5 mean returns ``R_bar``.
* :class:`ServerBasedScheduler`: a fixed fleet of 32 actors on a VM cluster billed for the
  whole wall time; it asks the environment for that billing through ``env_overrides``.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from fleetgym.agents.fleet.base import MAX_ACTORS_LIMIT
from fleetgym.agents.schedulers.observation import (
    OBS_RETURN,
    OBSERVATION_FIELDS,
)
from fleetgym.validation import check_float, check_int, quote

#: Longest window (rounds) AdaptScheduler averages returns over: a guard against typos.
MAX_WINDOW = 10_000

__all__ = [
    "BASELINE_NAMES",
    "AdaptScheduler",
    "BaseScheduler",
    "DecreaseScheduler",
    "FixedScheduler",
    "IncreaseScheduler",
    "MaxScheduler",
    "ServerBasedScheduler",
    "make_baseline",
]

#: Names :func:`make_baseline` understands (``fixed`` takes ``fixed:N``).
BASELINE_NAMES: tuple[str, ...] = ("fixed", "max", "increase", "decrease", "adapt", "server")


class BaseScheduler:
    """Common machinery: batching, per-environment state, the SB3 ``predict`` signature.

    Subclasses implement :meth:`_initial_state` (one row of state) and :meth:`_decide`
    (the number of actors for one observation, and the next state row).

    Args:
        max_actors: ``I_max``, the size of the action space.

    Raises:
        TypeError, ValueError: ``max_actors`` not an integer >= 1.
    """

    #: Keyword arguments the environment needs for this scheduler (e.g. its billing).
    env_overrides: dict[str, Any] = {}

    def __init__(self, max_actors: int = 32) -> None:
        self.max_actors = check_int("max_actors", max_actors, low=1, high=MAX_ACTORS_LIMIT)

    @property
    def name(self) -> str:
        """Short name used in tables."""
        return type(self).__name__.removesuffix("Scheduler").lower()

    def _initial_state(self) -> np.ndarray:
        return np.zeros(1)

    def _decide(self, obs: np.ndarray, state: np.ndarray) -> tuple[int, np.ndarray]:
        raise NotImplementedError

    def predict(
        self,
        observation: np.ndarray,
        state: np.ndarray | tuple[np.ndarray, ...] | None = None,
        episode_start: np.ndarray | None = None,
        deterministic: bool = True,
    ) -> tuple[np.ndarray, np.ndarray]:
        """The action (``num_actors - 1``) for one observation or a batch of them.

        Args:
            observation: shape ``(7,)`` or ``(n_envs, 7)``.
            state: the state this method returned last time (None: fresh).
            episode_start: shape ``(n_envs,)``, True where an episode starts (resets state).
            deterministic: ignored (the heuristics are deterministic).

        Returns:
            ``(action, state)``: action of shape ``()`` for one observation, ``(n_envs,)``
            for a batch; state of shape ``(n_envs, d)``.

        Raises:
            ValueError: an observation that does not have 7 entries per row, or an
                ``episode_start`` without one entry per observation.
        """
        obs = _observation_array(observation)
        single = obs.ndim == 1
        batch = obs.reshape(1, -1) if single else obs
        if batch.ndim != 2 or batch.shape[1] != len(OBSERVATION_FIELDS):
            raise ValueError(f"observation: expected shape (7,) or (n_envs, 7), actual {obs.shape}")
        n = batch.shape[0]
        init = self._initial_state()
        if isinstance(state, tuple):  # SB3 recurrent policies pass tuples; ours is one array
            state = state[0] if state else None
        if state is None or np.asarray(state).shape != (n, init.shape[0]):
            rows = np.tile(init, (n, 1))
        else:
            rows = np.array(state, dtype=np.float64, copy=True)
        if episode_start is not None:
            starts = np.asarray(episode_start, dtype=bool).reshape(-1)
            if starts.shape[0] != n:
                # Silently ignoring it would keep counting rounds across episodes.
                raise ValueError(
                    f"episode_start: expected {n} entries (one per observation), "
                    f"actual shape {np.shape(episode_start)}"
                )
            rows[starts] = init
        actions = np.empty(n, dtype=np.int64)
        for i in range(n):
            num, rows[i] = self._decide(batch[i], rows[i])
            actions[i] = int(np.clip(num, 1, self.max_actors)) - 1
        return (actions[0] if single else actions), rows

    def __repr__(self) -> str:
        return f"{type(self).__name__}(max_actors={self.max_actors})"


def _observation_array(observation: Any) -> np.ndarray:
    """``observation`` as a finite float64 array; TypeError/ValueError naming it otherwise."""
    try:
        obs = np.asarray(observation, dtype=np.float64)
    except (TypeError, ValueError):
        raise TypeError(
            f"observation: expected an array of numbers, actual {type(observation).__name__} "
            f"{quote(observation)}"
        ) from None
    if not np.isfinite(obs).all():
        raise ValueError(f"observation: expected finite numbers, actual {quote(observation)}")
    return obs


class FixedScheduler(BaseScheduler):
    """``Fixed(n)``: the same ``n`` actors every round (a static serverless fleet).

    Args:
        num_actors: actors per round, 1 <= n <= ``max_actors``.
        max_actors: ``I_max``.

    Example:
        >>> action, _ = FixedScheduler(8).predict(np.zeros(7))
        >>> int(action) + 1
        8

    Raises:
        TypeError, ValueError: ``num_actors`` not an integer in [1, max_actors].
    """

    def __init__(self, num_actors: int, max_actors: int = 32) -> None:
        super().__init__(max_actors)
        self.num_actors = check_int("num_actors", num_actors, low=1)
        if self.num_actors > self.max_actors:
            raise ValueError(
                f"num_actors: expected an integer <= max_actors={self.max_actors}, "
                f"actual {num_actors}"
            )

    @property
    def name(self) -> str:
        return f"fixed:{self.num_actors}"

    def _decide(self, obs: np.ndarray, state: np.ndarray) -> tuple[int, np.ndarray]:
        return self.num_actors, state

    def __repr__(self) -> str:
        return f"FixedScheduler({self.num_actors}, max_actors={self.max_actors})"


class MaxScheduler(FixedScheduler):
    """``Max``: every round gets ``max_actors`` actors (MinionsRL-Max).

    Args:
        max_actors: ``I_max``.

    Example:
        >>> int(MaxScheduler(32).predict(np.zeros(7))[0]) + 1
        32

    Raises:
        TypeError, ValueError: ``max_actors`` not an integer >= 1.
    """

    def __init__(self, max_actors: int = 32) -> None:
        super().__init__(max_actors, max_actors)

    @property
    def name(self) -> str:
        return "max"


class _SteppedScheduler(BaseScheduler):
    """Starts at ``start`` actors and adds ``delta`` every ``every`` rounds (clipped)."""

    _sign = 1

    def __init__(self, start: int, step: int, every: int, max_actors: int) -> None:
        super().__init__(max_actors)
        self.start = check_int("start", start, low=1)
        if self.start > self.max_actors:
            raise ValueError(f"start: expected <= max_actors={self.max_actors}, actual {start}")
        self.step = check_int("step", step, low=0)
        self.every = check_int("every", every, low=1)

    def num_actors_at(self, round_index: int) -> int:
        """Actors of round ``round_index`` (0-based)."""
        n = self.start + self._sign * self.step * (round_index // self.every)
        return int(np.clip(n, 1, self.max_actors))

    def _decide(self, obs: np.ndarray, state: np.ndarray) -> tuple[int, np.ndarray]:
        k = int(state[0])
        return self.num_actors_at(k), np.array([k + 1.0])

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(start={self.start}, step={self.step}, every={self.every}, "
            f"max_actors={self.max_actors})"
        )


class IncreaseScheduler(_SteppedScheduler):
    """``Increase``: few actors first, 10 more every 10 rounds (2, 12, 22, 32, 32, ...).

    Args:
        start: actors in rounds 0..every-1.
        step: actors added every ``every`` rounds.
        every: rounds between changes.
        max_actors: ``I_max`` (the cap).

    Example:
        >>> s, state = IncreaseScheduler(), None
        >>> counts = []
        >>> for k in range(31):
        ...     a, state = s.predict(np.zeros(7), state, np.array([k == 0]))
        ...     counts.append(int(a) + 1)
        >>> counts[0], counts[9], counts[10], counts[30]
        (2, 2, 12, 32)

    Raises:
        TypeError, ValueError: a non-integer or out-of-range argument.
    """

    def __init__(self, start: int = 2, step: int = 10, every: int = 10, max_actors: int = 32):
        super().__init__(start, step, every, max_actors)


class DecreaseScheduler(_SteppedScheduler):
    """``Decrease``: many actors first, 10 fewer every 10 rounds (32, 22, 12, 2, 1, ...).

    Args:
        start: actors in rounds 0..every-1 (None: ``max_actors``).
        step: actors removed every ``every`` rounds.
        every: rounds between changes.
        max_actors: ``I_max``.

    Example:
        >>> s = DecreaseScheduler()
        >>> [s.num_actors_at(k) for k in (0, 10, 20, 30, 40)]
        [32, 22, 12, 2, 1]

    Raises:
        TypeError, ValueError: a non-integer or out-of-range argument.
    """

    _sign = -1

    def __init__(
        self, start: int | None = None, step: int = 10, every: int = 10, max_actors: int = 32
    ):
        super().__init__(max_actors if start is None else start, step, every, max_actors)


class AdaptScheduler(BaseScheduler):
    """``Adapt``: actors in proportion to progress, ``clip(J_hat/J * I_max, 1, I_max)``.

    ``J_hat_k`` is the moving average of the last ``window`` observed mean returns
    ``R_bar`` (fewer at the start of an episode). The environment's normalised observation
    already holds ``R_bar / J`` (see ActorSchedulingEnv); for raw observations pass
    ``target_return=J``. The first round (no return seen yet) gets 1 actor.

    Args:
        max_actors: ``I_max``.
        window: rounds in the moving average (MinionsRL: 5).
        target_return: J, to divide raw (unnormalised) observations by; None when the
            observation is normalised.

    Example:
        >>> s, state = AdaptScheduler(max_actors=32), None
        >>> obs = np.zeros(7)
        >>> for k, ratio in enumerate([0.0, 0.5, 1.0]):
        ...     obs[OBS_RETURN] = ratio
        ...     a, state = s.predict(obs, state, np.array([k == 0]))
        >>> int(a) + 1  # mean of (0, 0.5, 1.0) = 0.5 -> 16 actors
        16

    Raises:
        TypeError, ValueError: a non-integer ``max_actors``/``window`` or a zero target.
    """

    def __init__(
        self, max_actors: int = 32, window: int = 5, target_return: float | None = None
    ) -> None:
        super().__init__(max_actors)
        self.window = check_int("window", window, low=1, high=MAX_WINDOW)
        if target_return is not None:
            target_return = check_float("target_return", target_return)
            if target_return == 0.0:
                raise ValueError(
                    "target_return: expected a finite non-zero number or None, actual 0.0"
                )
        self.target_return = target_return

    def _initial_state(self) -> np.ndarray:
        # [count, r_1, ..., r_window]: a ring of the last returns (ratios to J).
        return np.zeros(1 + self.window)

    def _decide(self, obs: np.ndarray, state: np.ndarray) -> tuple[int, np.ndarray]:
        ratio = float(obs[OBS_RETURN])
        if self.target_return is not None:
            ratio /= self.target_return
        state = state.copy()
        count = int(state[0])
        state[1 + count % self.window] = ratio
        count += 1
        state[0] = count
        j_hat = float(np.mean(state[1 : 1 + min(count, self.window)]))
        return int(np.clip(round(j_hat * self.max_actors), 1, self.max_actors)), state

    def __repr__(self) -> str:
        return f"AdaptScheduler(max_actors={self.max_actors}, window={self.window})"


class ServerBasedScheduler(FixedScheduler):
    """The server-based baseline: a fixed fleet on VMs billed for the whole wall time.

    Always ``num_actors`` actors (32 = 4 x 8-core VMs); ``env_overrides`` asks the
    environment to bill a VM cluster of that many actor cores (idle included, no
    container cold starts) instead of serverless containers, with no dollar budget (it is
    the reference the serverless schedulers are compared with).

    Args:
        num_actors: actor cores of the cluster.
        max_actors: ``I_max``.

    Example:
        >>> s = ServerBasedScheduler()
        >>> int(s.predict(np.zeros(7))[0]) + 1, s.env_overrides["billing"]
        (32, 'server')

    Raises:
        TypeError, ValueError: ``num_actors`` not in [1, max_actors].
    """

    def __init__(self, num_actors: int = 32, max_actors: int = 32) -> None:
        super().__init__(num_actors, max_actors)
        # The cluster is sized (and billed) for this fleet, not for the action space. The
        # dollar budget constrains the serverless schedulers; the server-based fleet is the
        # reference run to the target (as MinionsRL's Azure ML / IMPACT baselines), so it
        # has none.
        self.env_overrides = {
            "billing": "server",
            "server_actors": self.num_actors,
            "budget": None,
        }

    @property
    def name(self) -> str:
        return "server"

    def __repr__(self) -> str:
        return f"ServerBasedScheduler({self.num_actors}, max_actors={self.max_actors})"


def make_baseline(
    name: str, max_actors: int = 32, target_return: float | None = None
) -> BaseScheduler:
    """A baseline scheduler from its name: ``fixed:N``, ``max``, ``increase``,
    ``decrease``, ``adapt``, ``server`` (``server:N`` for another fleet size).

    Args:
        name: the scheduler's name.
        max_actors: ``I_max``.
        target_return: J for :class:`AdaptScheduler` on raw observations.

    Example:
        >>> make_baseline("fixed:4")
        FixedScheduler(4, max_actors=32)

    Raises:
        ValueError: an unknown name or a bad count.
    """
    if not isinstance(name, str):
        raise TypeError(f"name: expected a str, actual {type(name).__name__}")
    kind, _, arg = name.strip().lower().partition(":")
    count: int | None = None
    if arg:
        try:
            count = int(arg)
        except ValueError:
            raise ValueError(
                f"scheduler {name!r}: expected an integer after ':', actual {arg!r}"
            ) from None
    if kind == "fixed":
        if count is None:
            raise ValueError(
                f"scheduler {name!r}: expected fixed:N (e.g. fixed:8), actual {name!r}"
            )
        return FixedScheduler(count, max_actors)
    if arg and kind != "server":
        raise ValueError(f"scheduler {name!r}: {kind!r} takes no ':' argument")
    if kind == "max":
        return MaxScheduler(max_actors)
    if kind == "increase":
        return IncreaseScheduler(start=min(2, max_actors), max_actors=max_actors)
    if kind == "decrease":
        return DecreaseScheduler(max_actors=max_actors)
    if kind == "adapt":
        return AdaptScheduler(max_actors, target_return=target_return)
    if kind == "server":
        return ServerBasedScheduler(min(32, max_actors) if count is None else count, max_actors)
    raise ValueError(
        f"scheduler: expected one of fixed:N, {', '.join(BASELINE_NAMES[1:])}, actual {name!r}"
    )
