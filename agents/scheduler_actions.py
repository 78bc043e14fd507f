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

:class:`SchedulerActionWrapper` wraps the env for training; :class:`MappedScheduler` wraps a
trained model (anything with SB3's ``predict``) so that it acts in the env's own space, as
the baselines do, and can be evaluated on the same unwrapped env.
"""

from __future__ import annotations

import math
from typing import Any

import gymnasium as gym
import numpy as np

from fleetgym.validation import check_choice, check_int

__all__ = [
    "ACTION_MODES",
    "MappedScheduler",
    "SchedulerActionWrapper",
    "action_space_for",
    "fleet_sizes",
    "num_actors_for",
]

#: The action parametrisations a learned scheduler can use.
ACTION_MODES: tuple[str, ...] = ("discrete", "pow2", "log2")


def _check_mode(mode: Any) -> str:
    return check_choice("actions", mode, ACTION_MODES)


def fleet_sizes(max_actors: int) -> tuple[int, ...]:
    """The fleet sizes of the ``"pow2"`` mode.

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
    return gym.spaces.Box(-1.0, 1.0, shape=(1,), dtype=np.float32)


def num_actors_for(mode: str, action: Any, max_actors: int) -> int:
    """The fleet size an action of ``mode`` asks for (in ``1..max_actors``).

    Example:
        >>> num_actors_for("discrete", 7, 32), num_actors_for("pow2", 4, 32)
        (8, 16)
        >>> [num_actors_for("log2", a, 32) for a in (-1.0, 0.0, 0.6, 1.0, 3.0)]
        [1, 6, 16, 32, 32]

    Raises:
        ValueError: an unknown mode or an action outside the space.
    """
    mode = _check_mode(mode)
    max_actors = check_int("max_actors", max_actors, low=1)
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


class SchedulerActionWrapper(gym.ActionWrapper):
    """Let a scheduler act in ``mode`` on an ``ActorSchedulingEnv`` (``Discrete(max_actors)``).

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

    Args:
        env: the scheduling env (its action space must be ``Discrete``).
        mode: one of :data:`ACTION_MODES`.

    Raises:
        TypeError: the env's action space is not ``Discrete``.
        ValueError: an unknown mode.
    """

    def __init__(self, env: gym.Env, mode: str = "discrete") -> None:
        super().__init__(env)
        if not isinstance(env.action_space, gym.spaces.Discrete):
            raise TypeError(
                f"env: expected a Discrete action space (ActorSchedulingEnv), "
                f"actual {env.action_space}"
            )
        self.mode = _check_mode(mode)
        self.max_actors = int(env.action_space.n)
        self.action_space = action_space_for(self.mode, self.max_actors)

    def action(self, action: Any) -> int:
        return num_actors_for(self.mode, action, self.max_actors) - 1


class MappedScheduler:
    """A trained scheduler that acts in ``mode``, seen in the env's ``Discrete(max_actors)``.

    Wraps anything with SB3's ``predict`` (a loaded PPO model) so it can be evaluated on
    the plain scheduling env next to the baselines.

    Example:
        >>> from fleetgym.agents.schedulers import FixedScheduler
        >>> inner = FixedScheduler(3, max_actors=6)  # action 2 = the third size of pow2
        >>> MappedScheduler(inner, "pow2", max_actors=32).predict(np.zeros(7))[0]
        array([3])

    Args:
        model: the predictor.
        mode: the mode it was trained in.
        max_actors: ``I_max``.
        name: its name in tables.
    """

    def __init__(self, model: Any, mode: str, max_actors: int = 32, name: str = "learned"):
        if not hasattr(model, "predict"):
            raise TypeError(
                f"model: expected an object with predict, actual {type(model).__name__}"
            )
        self.model = model
        self.mode = _check_mode(mode)
        self.max_actors = check_int("max_actors", max_actors, low=1)
        self.name = name

    def predict(
        self,
        observation: Any,
        state: Any = None,
        episode_start: Any = None,
        deterministic: bool = True,
    ) -> tuple[np.ndarray, Any]:
        action, state = self.model.predict(
            observation, state=state, episode_start=episode_start, deterministic=deterministic
        )
        obs = np.asarray(observation)
        batched = obs.ndim == 2
        rows = np.asarray(action).reshape(obs.shape[0] if batched else 1, -1)
        out = np.array(
            [
                num_actors_for(self.mode, r if self.mode == "log2" else r[0], self.max_actors) - 1
                for r in rows
            ],
            dtype=np.int64,
        )
        return out, state

    def __repr__(self) -> str:
        return f"MappedScheduler({self.model!r}, {self.mode!r}, max_actors={self.max_actors})"
