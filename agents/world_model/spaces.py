"""What a world model reads and writes: flat float observations and encoded actions.

:class:`SpaceCodec` maps a Gymnasium observation space to flat float32 vectors (a 1-D Box
as is; Discrete, MultiDiscrete, MultiBinary, Dict and Tuple through Gymnasium's
``flatten``) and an action space to the model's action input (one-hot for ``Discrete``,
concatenated one-hots for ``MultiDiscrete``, bits for ``MultiBinary``, the clipped value
for a 1-D ``Box``). Image observations and other spaces raise
:class:`~fleetgym.errors.UnsupportedSpaceError` naming the limitation.
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np

from fleetgym.errors import UnsupportedSpaceError
from fleetgym.validation import quote

__all__ = [
    "SpaceCodec",
    "check_model_spaces",
    "space_from_json",
    "space_to_json",
    "spaces_from_config",
]

_FLAT_OBS = (
    gym.spaces.Box,
    gym.spaces.Discrete,
    gym.spaces.MultiDiscrete,
    gym.spaces.MultiBinary,
    gym.spaces.Dict,
    gym.spaces.Tuple,
)


def _is_image(space: gym.Space) -> bool:
    return isinstance(space, gym.spaces.Box) and (
        len(space.shape) >= 2 and space.dtype == np.uint8 or len(space.shape) == 3
    )


def _check_observation_space(space: Any) -> None:
    if not isinstance(space, gym.Space):
        raise TypeError(
            f"observation_space: expected a gymnasium.spaces.Space, actual {type(space).__name__}"
        )
    if _is_image(space):
        raise UnsupportedSpaceError(
            f"observation_space: expected flat observations (a 1-D Box, Discrete, MultiDiscrete, "
            f"MultiBinary, or a Dict/Tuple of them), actual the image space {space!r}; the "
            "world model's MLP ensemble does not model images (flatten small ones yourself, "
            "e.g. MiniGrid's ImgObsWrapper + FlattenObservation, at your own risk)"
        )
    if isinstance(space, (gym.spaces.Dict, gym.spaces.Tuple)):
        parts = space.spaces.values() if isinstance(space, gym.spaces.Dict) else space.spaces
        for part in parts:
            _check_observation_space(part)
        return
    if not isinstance(space, _FLAT_OBS):
        raise UnsupportedSpaceError(
            "observation_space: expected a Box, Discrete, MultiDiscrete, MultiBinary, Dict or "
            f"Tuple space (one the world model can flatten), actual {space!r}"
        )


def check_model_spaces(observation_space: Any, action_space: Any) -> None:
    """Raise unless a world model can take these spaces.

    Args:
        observation_space: The env's observation space: a Box (not an image), Discrete,
            MultiDiscrete, MultiBinary, or a Dict / Tuple of them.
        action_space: The env's action space: Discrete, MultiDiscrete, MultiBinary or a
            1-D Box.

    Raises:
        TypeError: If either is not a Gymnasium space.
        fleetgym.errors.UnsupportedSpaceError: For image observations, a Graph / Text /
            Sequence space, or an action space other than Discrete, MultiDiscrete,
            MultiBinary or a 1-D Box.
    """
    _check_observation_space(observation_space)
    if not isinstance(action_space, gym.Space):
        raise TypeError(
            f"action_space: expected a gymnasium.spaces.Space, actual {type(action_space).__name__}"
        )
    discrete = (gym.spaces.Discrete, gym.spaces.MultiDiscrete, gym.spaces.MultiBinary)
    ok = isinstance(action_space, discrete) or (
        isinstance(action_space, gym.spaces.Box) and len(action_space.shape) == 1
    )
    if not ok:
        raise UnsupportedSpaceError(
            "action_space: expected Discrete, MultiDiscrete, MultiBinary or a 1-D Box, "
            f"actual {action_space!r}"
        )


class SpaceCodec:
    """Flat observations and action encodings for a pair of spaces.

    Args:
        observation_space: The observation space (as :func:`check_model_spaces` accepts);
            anything but a 1-D Box is flattened with Gymnasium's ``flatten``.
        action_space: The action space: Discrete and MultiDiscrete become one-hots,
            MultiBinary its bits, a 1-D Box its values clipped to the bounds (infinite
            bounds count as +-1e6).

    Example:
        >>> codec = SpaceCodec(gym.spaces.Box(-1, 1, (3,)), gym.spaces.Discrete(2))
        >>> codec.obs_dim, codec.action_dim
        (3, 2)
        >>> codec.encode_actions(np.array([1, 0])).tolist()
        [[0.0, 1.0], [1.0, 0.0]]
    """

    def __init__(self, observation_space: gym.Space, action_space: gym.Space) -> None:
        check_model_spaces(observation_space, action_space)
        self.observation_space = observation_space
        self.action_space = action_space
        self._flat = not (
            isinstance(observation_space, gym.spaces.Box) and len(observation_space.shape) == 1
        )
        self.flat_space: gym.spaces.Box = (
            gym.spaces.flatten_space(observation_space)  # type: ignore[assignment]
            if self._flat
            else observation_space
        )
        self.obs_dim = int(self.flat_space.shape[0])
        space = action_space
        if isinstance(space, gym.spaces.Discrete):
            self.kind = "discrete"
            self._sizes = np.array([int(space.n)])
            self._starts = np.array([int(space.start)])
        elif isinstance(space, gym.spaces.MultiDiscrete):
            self.kind = "multi"
            self._sizes = space.nvec.reshape(-1).astype(np.int64)
            self._starts = np.asarray(space.start).reshape(-1).astype(np.int64)
        elif isinstance(space, gym.spaces.MultiBinary):
            self.kind = "binary"
            n = int(np.prod(space.shape))
            self._sizes, self._starts = np.full(n, 1), np.zeros(n, np.int64)
        else:
            assert isinstance(space, gym.spaces.Box)  # checked by check_model_spaces
            self.kind = "box"
            self._low = np.where(np.isfinite(space.low), space.low, -1e6).astype(np.float32)
            self._high = np.where(np.isfinite(space.high), space.high, 1e6).astype(np.float32)
            self._sizes = np.array([int(space.shape[0])])
        self.action_dim = int(self._sizes.sum())

    def flatten_obs(self, obs: Any) -> np.ndarray:
        """One observation of the space as a flat float32 vector.

        Args:
            obs: One observation of ``observation_space`` (a dict or tuple for a Dict /
                Tuple space, an index for Discrete, ...).

        Returns:
            Float32 vector of shape ``(obs_dim,)``.
        """
        if self._flat:
            return np.asarray(gym.spaces.flatten(self.observation_space, obs), np.float32)
        return np.asarray(obs, np.float32).reshape(self.obs_dim)

    def flatten_batch(self, obs: Any) -> np.ndarray:
        """A batch of flat observations (already flat: (N, obs_dim)) as float32 (N, obs_dim).

        Args:
            obs: Observations already flattened (e.g. by :meth:`flatten_obs`), any array of
                shape ``(N, obs_dim)``.

        Raises:
            ValueError: For another shape.
        """
        array = np.asarray(obs, np.float32)
        if array.ndim != 2 or array.shape[1] != self.obs_dim:
            raise ValueError(
                f"obs: expected shape (batch, {self.obs_dim}) (flat observations), "
                f"actual {array.shape}"
            )
        return array

    def action_batch(self, actions: Any, n: int) -> np.ndarray:
        """``n`` actions as the env takes them: int (N,) / (N, k), or float32 (N, k) clipped.

        Args:
            actions: ``n`` actions of ``action_space``, any array holding ``n`` (Discrete)
                or ``n * k`` values; whole-number floats are accepted for discrete spaces.
            n: The number of actions expected.

        Raises:
            ValueError: For another count or shape, a non-integer discrete action, one out
                of the space's range, or a NaN / infinite continuous one.
        """
        given = np.asarray(actions)
        width = int(self._sizes[0]) if self.kind == "box" else int(self._sizes.size)
        if self.kind == "discrete":
            ok = given.size == n
            array = given.reshape(n) if ok else given
        else:
            ok = given.size == n * width
            array = given.reshape(n, width) if ok else given
        if not ok:
            raise ValueError(
                f"actions: expected {n} actions of {self.action_space!r}, actual shape {given.shape}"
            )
        if self.kind == "box":
            array = array.astype(np.float32)
            if not np.isfinite(array).all():
                raise ValueError("actions: expected finite values, actual NaN or infinity")
            return np.clip(array, self._low, self._high)
        if array.dtype.kind == "f" and np.array_equal(array, np.round(array)):
            array = array.astype(np.int64)
        if array.dtype.kind not in "iub":
            raise ValueError(
                f"actions: expected integers of {self.action_space!r}, actual dtype {array.dtype}"
            )
        array = array.astype(np.int64)
        span = np.maximum(self._sizes, 2) if self.kind == "binary" else self._sizes
        low, high = self._starts, self._starts + span - 1
        if self.kind == "discrete":
            low, high = low[0], high[0]
        if (array < low).any() or (array > high).any():
            raise ValueError(
                f"actions: expected actions of {self.action_space!r}, actual values out of its "
                f"range {quote(array.reshape(-1)[:8].tolist())}"
            )
        return array

    def encode_actions(self, actions: Any) -> np.ndarray:
        """The model's action input, float32 (N, action_dim).

        Args:
            actions: A batch of actions of ``action_space``, the batch along axis 0 (checked
                as in :meth:`action_batch`); one-hot encoded for Discrete / MultiDiscrete,
                clipped for a Box.
        """
        array = np.asarray(actions)
        n = int(array.shape[0]) if array.ndim else 1
        array = self.action_batch(array, n)
        if self.kind == "box":
            return array.astype(np.float32)
        if self.kind == "binary":
            return array.astype(np.float32).reshape(n, -1)
        index = array.reshape(n, -1) - self._starts
        out = np.zeros((n, self.action_dim), np.float32)
        offsets = np.concatenate([[0], np.cumsum(self._sizes)[:-1]])
        rows = np.repeat(np.arange(n), index.shape[1])
        out[rows, (index + offsets).reshape(-1)] = 1.0
        return out

    def config(self) -> dict[str, Any]:
        """The spaces as plain data (for a checkpoint's JSON and for refusing other envs)."""
        return {
            "observation_space": space_to_json(self.observation_space),
            "action_space": space_to_json(self.action_space),
            "obs_dim": self.obs_dim,
            "action_dim": self.action_dim,
        }


def _bound(values: np.ndarray) -> list[Any]:
    return [
        v if np.isfinite(v) else ("inf" if v > 0 else "-inf")
        for v in values.astype(float).reshape(-1).tolist()
    ]


def space_to_json(space: gym.Space) -> dict[str, Any]:
    """A flat-observation or action space as plain JSON data (see :func:`space_from_json`).

    Example:
        >>> space_from_json(space_to_json(gym.spaces.Discrete(3, start=1)))
        Discrete(3, start=1)
    """
    if isinstance(space, gym.spaces.Box):
        return {
            "type": "Box",
            "shape": list(space.shape),
            "dtype": str(space.dtype),
            "low": _bound(space.low),
            "high": _bound(space.high),
        }
    if isinstance(space, gym.spaces.Discrete):
        return {"type": "Discrete", "n": int(space.n), "start": int(space.start)}
    if isinstance(space, gym.spaces.MultiDiscrete):
        return {
            "type": "MultiDiscrete",
            "nvec": space.nvec.tolist(),
            "start": np.asarray(space.start).tolist(),
        }
    if isinstance(space, gym.spaces.MultiBinary):
        return {"type": "MultiBinary", "n": np.asarray(space.n).tolist()}
    if isinstance(space, gym.spaces.Dict):
        return {"type": "Dict", "spaces": {k: space_to_json(v) for k, v in space.spaces.items()}}
    if isinstance(space, gym.spaces.Tuple):
        return {"type": "Tuple", "spaces": [space_to_json(v) for v in space.spaces]}
    raise UnsupportedSpaceError(f"space: expected a space a world model takes, actual {space!r}")


def space_from_json(data: Any) -> gym.Space:
    """The space :func:`space_to_json` described.

    Raises:
        ValueError: For data that describes no such space.
    """
    try:
        kind = data["type"]
        if kind == "Box":
            shape = tuple(int(v) for v in data["shape"])
            dtype = np.dtype(data["dtype"])
            low = np.asarray([float(v) for v in data["low"]]).reshape(shape).astype(dtype)
            high = np.asarray([float(v) for v in data["high"]]).reshape(shape).astype(dtype)
            return gym.spaces.Box(low, high, shape, dtype)  # type: ignore[arg-type]
        if kind == "Discrete":
            return gym.spaces.Discrete(int(data["n"]), start=int(data["start"]))
        if kind == "MultiDiscrete":
            return gym.spaces.MultiDiscrete(
                np.asarray(data["nvec"]), start=np.asarray(data["start"])
            )
        if kind == "MultiBinary":
            return gym.spaces.MultiBinary(data["n"])
        if kind == "Dict":
            return gym.spaces.Dict({str(k): space_from_json(v) for k, v in data["spaces"].items()})
        if kind == "Tuple":
            return gym.spaces.Tuple([space_from_json(v) for v in data["spaces"]])
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        raise ValueError(
            f"space: expected a space description, actual {quote(data)} ({exc})"
        ) from None
    raise ValueError(f"space: expected a space description, actual type {quote(kind)}")


def spaces_from_config(config: dict[str, Any]) -> tuple[gym.Space, gym.Space]:
    """The (observation, action) spaces of a model's :meth:`SpaceCodec.config`."""
    return space_from_json(config["observation_space"]), space_from_json(config["action_space"])
