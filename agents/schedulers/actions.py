"""How a learned scheduler's action becomes a fleet size.

:class:`~fleetgym.meta_env.ActorSchedulingEnv` takes ``Discrete(max_actors)`` (action
``a`` asks for ``a + 1`` actors, MinionsRL's action space). A learned scheduler may act in
another space and be mapped onto it (:data:`ACTION_MODES`):

* ``"discrete"``: the env's own ``Discrete(max_actors)`` (the paper's; 32 unordered
  choices: nothing tells the policy that 16 and 17 actors are alike).
* ``"pow2"``: ``Discrete(m)`` over the fleet sizes ``1, 2, 4, ..., max_actors`` (``m =
  floor(log2 max_actors) + 1``; ``max_actors`` is appended when it is not a power of two).
* ``"log2"``: ``Box(-1, 1, (1,))``, a continuous action on a log scale:
  ``n = round(2 ** ((a + 1) / 2 * log2(max_actors)))``, so ``-1`` is one actor, ``0`` is
  ``sqrt(max_actors)`` and ``1`` is ``max_actors``. Neighbouring sizes share the policy's
  mean, and a Gaussian policy explores around it.
* ``"step"``: ``Discrete(3)``, relative to the current size on the ``pow2`` ladder: ``0``
  one size down (halve), ``1`` keep, ``2`` one size up (double). An episode starts at
  ``start_actors`` (default: the middle of the ladder, 8 of 1-32), so the first action
  picks half, the same or double of it. The scheduler cannot see the fleet size in the
  env's 7-dim state, so this mode appends it (the ladder position, 0 to 1) as an 8th
  entry. Exploring around the current size changes the fleet by one step at a time
  instead of jumping between 1 and 32 at random, each jump up paying a cold start.

:class:`SchedulerActionWrapper` wraps the env for training; :class:`MappedScheduler` wraps a
trained model (anything with SB3's ``predict``) so that it acts in the env's own space, as
the baselines do, and can be evaluated on the same unwrapped env.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import gymnasium as gym
import numpy as np

from fleetgym.validation import check_choice, check_int

__all__ = [
    "ACTION_MODES",
    "MappedScheduler",
    "SchedulerActionWrapper",
    "STEP_DOWN",
    "STEP_KEEP",
    "STEP_UP",
    "action_space_for",
    "fleet_sizes",
    "num_actors_for",
    "start_index",
    "step_index",
    "with_size_feature",
]

#: The action parametrisations a learned scheduler can use.
ACTION_MODES: tuple[str, ...] = ("discrete", "pow2", "log2", "step")
#: The ``"step"`` mode's actions: one size down, keep, one size up.
STEP_DOWN, STEP_KEEP, STEP_UP = 0, 1, 2


def _check_mode(mode: Any) -> str:
    return check_choice("actions", mode, ACTION_MODES)


def fleet_sizes(max_actors: int) -> tuple[int, ...]:
    """The fleet sizes of the ``"pow2"`` mode.

    Args:
        max_actors: The largest fleet size (>= 1): the ladder is the powers of two up to
            it, with ``max_actors`` itself appended when it is not a power of two.

    Example:
        >>> fleet_sizes(32)
        (1, 2, 4, 8, 16, 32)
        >>> fleet_sizes(20)
        (1, 2, 4, 8, 16, 20)
    """
    max_actors = check_int("max_actors", max_actors, low=1)
    sizes = [2**i for i in range(int(math.log2(max_actors)) + 1)]
    if sizes[-1] != max_actors:
        sizes.append(max_actors)
    return tuple(sizes)


def action_space_for(mode: str, max_actors: int) -> gym.Space:
    """The scheduler's action space in ``mode``.

    Args:
        mode: One of :data:`ACTION_MODES`: ``"discrete"`` gives ``Discrete(max_actors)``,
            ``"pow2"`` ``Discrete(len(fleet_sizes(max_actors)))``, ``"step"``
            ``Discrete(3)`` and ``"log2"`` ``Box(-1, 1, (1,))``.
        max_actors: The env's largest fleet size (>= 1).

    Example:
        >>> action_space_for("pow2", 32)
        Discrete(6)
    """
    mode = _check_mode(mode)
    max_actors = check_int("max_actors", max_actors, low=1)
    if mode == "discrete":
        return gym.spaces.Discrete(max_actors)
    if mode == "pow2":
        return gym.spaces.Discrete(len(fleet_sizes(max_actors)))
    if mode == "step":
        return gym.spaces.Discrete(3)
    return gym.spaces.Box(-1.0, 1.0, shape=(1,), dtype=np.float32)


def num_actors_for(mode: str, action: Any, max_actors: int) -> int:
    """The fleet size an action of ``mode`` asks for (in ``1..max_actors``).

    Args:
        mode: ``"discrete"``, ``"pow2"`` or ``"log2"`` (:data:`ACTION_MODES` but the
            relative ``"step"``).
        action: One action of :func:`action_space_for` ``(mode, max_actors)``: an integer
            index for ``"discrete"`` and ``"pow2"``; one number for ``"log2"``, clipped to
            ``[-1, 1]``.
        max_actors: The env's largest fleet size (>= 1).

    Example:
        >>> num_actors_for("discrete", 7, 32), num_actors_for("pow2", 4, 32)
        (8, 16)
        >>> [num_actors_for("log2", a, 32) for a in (-1.0, 0.0, 0.6, 1.0, 3.0)]
        [1, 6, 16, 32, 32]

    Raises:
        ValueError: an unknown mode, the relative ``"step"`` mode (its size depends on the
            current one: :func:`step_index`), or an action outside the space (a
            ``"log2"`` action is clipped instead; only a non-finite or non-scalar one
            raises).
    """
    mode = _check_mode(mode)
    max_actors = check_int("max_actors", max_actors, low=1)
    if mode == "step":
        raise ValueError(
            "mode: 'step' is relative to the current size; use step_index, "
            "SchedulerActionWrapper or MappedScheduler"
        )
    arr = np.asarray(action)
    if mode == "log2":
        if arr.size != 1 or not np.all(np.isfinite(arr)):
            raise ValueError(f"action: expected one finite number, actual {action!r}")
        a = float(np.clip(arr.reshape(-1)[0], -1.0, 1.0))
        n = round(2.0 ** ((a + 1.0) / 2.0 * math.log2(max_actors)))
        return int(min(max(n, 1), max_actors))
    if arr.size != 1 or not np.issubdtype(arr.dtype, np.integer):
        raise ValueError(f"action: expected one integer, actual {action!r}")
    index = int(arr.reshape(-1)[0])
    if mode == "discrete":
        if not 0 <= index < max_actors:
            raise ValueError(f"action: expected an integer in [0, {max_actors}), actual {index}")
        return index + 1
    sizes = fleet_sizes(max_actors)
    if not 0 <= index < len(sizes):
        raise ValueError(f"action: expected an integer in [0, {len(sizes)}), actual {index}")
    return sizes[index]


def start_index(max_actors: int, start_actors: int | None = None) -> int:
    """Where a ``"step"`` episode starts on the ladder :func:`fleet_sizes`.

    Example:
        >>> start_index(32), fleet_sizes(32)[start_index(32)], start_index(32, 16)
        (3, 8, 4)

    Raises:
        ValueError: ``start_actors`` is not one of the ladder's sizes.
    """
    sizes = fleet_sizes(max_actors)
    if start_actors is None:
        return len(sizes) // 2
    start_actors = check_int("start_actors", start_actors, low=1)
    if start_actors not in sizes:
        raise ValueError(f"start_actors: expected one of {sizes}, actual {start_actors}")
    return sizes.index(start_actors)


def step_index(index: int, action: Any, n_sizes: int) -> int:
    """The ladder position after a ``"step"`` action (held at both ends).

    Example:
        >>> [step_index(3, a, 6) for a in (STEP_DOWN, STEP_KEEP, STEP_UP)]
        [2, 3, 4]
        >>> step_index(5, STEP_UP, 6), step_index(0, STEP_DOWN, 6)
        (5, 0)

    Raises:
        ValueError: an action that is not 0, 1 or 2.
    """
    arr = np.asarray(action)
    if arr.size != 1 or not np.issubdtype(arr.dtype, np.integer):
        raise ValueError(f"action: expected one integer, actual {action!r}")
    a = int(arr.reshape(-1)[0])
    if a not in (STEP_DOWN, STEP_KEEP, STEP_UP):
        raise ValueError(f"action: expected an integer in [0, 3), actual {a}")
    return int(min(max(index + a - STEP_KEEP, 0), n_sizes - 1))


def with_size_feature(observation: Any, index: int, n_sizes: int) -> np.ndarray:
    """The observation with the ladder position ``index / (n_sizes - 1)`` appended.

    Example:
        >>> with_size_feature(np.zeros(7, np.float32), 3, 6)[-1]
        np.float32(0.6)
    """
    obs = np.asarray(observation, dtype=np.float32).reshape(-1)
    position = index / (n_sizes - 1) if n_sizes > 1 else 0.0
    return np.append(obs, np.float32(position)).astype(np.float32)


class SchedulerActionWrapper(gym.Wrapper, gym.utils.RecordConstructorArgs):
    """Let a scheduler act in ``mode`` on an ``ActorSchedulingEnv`` (``Discrete(max_actors)``).

    Args:
        env: the scheduling env (its action space must be ``Discrete``).
        mode: one of :data:`ACTION_MODES`.
        start_actors: where a ``"step"`` episode starts (:func:`start_index`; other modes
            ignore it).
        train_starts: with ``"step"``, exploring starts: each episode starts from a size
            drawn uniformly from these ladder sizes instead of ``start_actors`` (a training
            device: the policy sees every start and what moving from it earns; evaluation
            starts from ``start_actors``). Empty: always ``start_actors``.
        starts_seed: seed of the draws of ``train_starts`` (its own generator, so that the
            start is independent of the workload seed ``reset`` passes on).

    Example:
        >>> import fleetgym
        >>> env = SchedulerActionWrapper(
        ...     gym.make("fleetgym/ActorScheduling-CartPole-Modeled-v0"), "pow2")
        >>> env.action_space
        Discrete(6)
        >>> _ = env.reset(seed=0)
        >>> env.step(3)[4]["num_actors"]
        8
        >>> env.close()

    In the ``"step"`` mode the observation gains the ladder position as an 8th entry:

        >>> env = SchedulerActionWrapper(
        ...     gym.make("fleetgym/ActorScheduling-CartPole-Modeled-v0"), "step")
        >>> obs, _ = env.reset(seed=0)
        >>> obs.shape, round(float(obs[-1]), 2)
        ((8,), 0.6)
        >>> env.step(STEP_UP)[4]["num_actors"], env.step(STEP_KEEP)[4]["num_actors"]
        (16, 16)
        >>> env.close()

    Raises:
        TypeError: the env's action space is not ``Discrete``.
        ValueError: an unknown mode, or ``start_actors`` or a ``train_starts`` size off the
            ladder.
    """

    def __init__(
        self,
        env: gym.Env,
        mode: str = "discrete",
        start_actors: int | None = None,
        train_starts: Sequence[int] = (),
        starts_seed: int | Sequence[int] | None = None,
    ) -> None:
        gym.utils.RecordConstructorArgs.__init__(
            self,
            mode=mode,
            start_actors=start_actors,
            train_starts=tuple(train_starts),
            starts_seed=starts_seed,
        )
        gym.Wrapper.__init__(self, env)
        if not isinstance(env.action_space, gym.spaces.Discrete):
            raise TypeError(
                f"env: expected a Discrete action space (ActorSchedulingEnv), "
                f"actual {env.action_space}"
            )
        self.mode = _check_mode(mode)
        self.max_actors = int(env.action_space.n)
        self.action_space = action_space_for(self.mode, self.max_actors)
        self.sizes = fleet_sizes(self.max_actors)
        self.start = start_index(self.max_actors, start_actors)
        self.index = self.start
        self.train_starts = tuple(start_index(self.max_actors, n) for n in train_starts)
        if self.train_starts and self.mode != "step":
            raise ValueError(
                f"train_starts: only the 'step' mode has a start, actual mode {mode!r}"
            )
        self._starts_rng = np.random.default_rng(starts_seed)
        if self.mode == "step":
            space = env.observation_space
            if not isinstance(space, gym.spaces.Box) or len(space.shape) != 1:
                raise TypeError(f"env: expected a 1-D Box observation space, actual {space}")
            self.observation_space = gym.spaces.Box(
                np.append(space.low, 0.0).astype(np.float32),
                np.append(space.high, 1.0).astype(np.float32),
                dtype=np.float32,
            )

    def _observe(self, obs: Any) -> Any:
        if self.mode != "step":
            return obs
        return with_size_feature(obs, self.index, len(self.sizes))

    def reset(self, **kwargs: Any) -> tuple[Any, dict[str, Any]]:
        obs, info = self.env.reset(**kwargs)
        self.index = self.start
        if self.train_starts:
            self.index = self.train_starts[int(self._starts_rng.integers(len(self.train_starts)))]
        return self._observe(obs), info

    def step(self, action: Any) -> tuple[Any, float, bool, bool, dict[str, Any]]:
        if self.mode == "step":
            self.index = step_index(self.index, action, len(self.sizes))
            env_action = self.sizes[self.index] - 1
        else:
            env_action = num_actors_for(self.mode, action, self.max_actors) - 1
        obs, reward, terminated, truncated, info = self.env.step(env_action)
        return self._observe(obs), float(reward), terminated, truncated, info


class MappedScheduler:
    """A trained scheduler that acts in ``mode``, seen in the env's ``Discrete(max_actors)``.

    Wraps anything with SB3's ``predict`` (a loaded PPO model) so it can be evaluated on
    the plain scheduling env next to the baselines. In the ``"step"`` mode it keeps each
    env's ladder position (reset where ``episode_start`` is true, or on the first call)
    and appends it to the observation, as :class:`SchedulerActionWrapper` does.

    Args:
        model: the predictor.
        mode: the mode it was trained in.
        max_actors: ``I_max``.
        name: its name in tables.
        start_actors: where a ``"step"`` episode starts (:func:`start_index`).

    Example:
        >>> from fleetgym.agents.schedulers import FixedScheduler
        >>> inner = FixedScheduler(3, max_actors=6)  # action 2 = the third size of pow2
        >>> MappedScheduler(inner, "pow2", max_actors=32).predict(np.zeros(7))[0]
        array([3])
        >>> class AlwaysUp:
        ...     def predict(self, obs, state=None, episode_start=None, deterministic=True):
        ...         return np.full(len(obs), STEP_UP), state
        >>> up = MappedScheduler(AlwaysUp(), "step", max_actors=32)
        >>> [int(up.predict(np.zeros(7), episode_start=np.array([k == 0]))[0][0]) + 1
        ...  for k in range(4)]
        [16, 32, 32, 32]
    """

    def __init__(
        self,
        model: Any,
        mode: str,
        max_actors: int = 32,
        name: str = "learned",
        start_actors: int | None = None,
    ):
        if not hasattr(model, "predict"):
            raise TypeError(
                f"model: expected an object with predict, actual {type(model).__name__}"
            )
        self.model = model
        self.mode = _check_mode(mode)
        self.max_actors = check_int("max_actors", max_actors, low=1)
        self.name = name
        self.sizes = fleet_sizes(self.max_actors)
        self.start = start_index(self.max_actors, start_actors)
        self._index: np.ndarray | None = None

    def predict(
        self,
        observation: Any,
        state: Any = None,
        episode_start: Any = None,
        deterministic: bool = True,
    ) -> tuple[np.ndarray, Any]:
        obs = np.asarray(observation)
        batched = obs.ndim == 2
        n = obs.shape[0] if batched else 1
        if self.mode == "step":
            return self._predict_step(obs.reshape(n, -1), state, episode_start, deterministic)
        action, state = self.model.predict(
            observation, state=state, episode_start=episode_start, deterministic=deterministic
        )
        rows = np.asarray(action).reshape(n, -1)
        out = np.array(
            [
                num_actors_for(self.mode, r if self.mode == "log2" else r[0], self.max_actors) - 1
                for r in rows
            ],
            dtype=np.int64,
        )
        return out, state

    def _predict_step(
        self, rows: np.ndarray, state: Any, episode_start: Any, deterministic: bool
    ) -> tuple[np.ndarray, Any]:
        n = rows.shape[0]
        if self._index is None or self._index.shape[0] != n:
            self._index = np.full(n, self.start, dtype=np.int64)
        if episode_start is not None:
            starts = np.asarray(episode_start, dtype=bool).reshape(-1)
            if starts.shape[0] != n:
                raise ValueError(
                    f"episode_start: expected {n} entries (one per observation), "
                    f"actual shape {np.shape(episode_start)}"
                )
            self._index[starts] = self.start
        augmented = np.stack(
            [
                with_size_feature(r, int(i), len(self.sizes))
                for r, i in zip(rows, self._index, strict=True)
            ]
        )
        action, state = self.model.predict(
            augmented, state=state, episode_start=episode_start, deterministic=deterministic
        )
        actions = np.asarray(action).reshape(n)
        for k in range(n):
            self._index[k] = step_index(int(self._index[k]), actions[k], len(self.sizes))
        return np.array([self.sizes[i] - 1 for i in self._index], dtype=np.int64), state

    def __repr__(self) -> str:
        return f"MappedScheduler({self.model!r}, {self.mode!r}, max_actors={self.max_actors})"
