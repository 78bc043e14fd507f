"""The spaces of a workload's env: what the policy sees and which actions it takes.

* :func:`observation_preprocessing`: the preprocessing that gives the policy a 1-D Box or
  stacked (C, H, W) frames (flattened, image frames, Atari), or
  :class:`~fleetgym.errors.UnsupportedSpaceError` for a space no policy fits;
* :func:`check_action_space`: a categorical (discrete spaces, at most
  :data:`MAX_JOINT_ACTIONS` joint actions) or a Gaussian (a 1-D Box) policy;
* :class:`JointDiscreteAction`: one ``Discrete`` over the joint actions of a
  MultiDiscrete/MultiBinary/offset Discrete space; :func:`frames` and :func:`atari` the
  image wrappers.

Re-exported by :mod:`fleetgym.agents.workloads.spec`.
"""

from __future__ import annotations

import math
from typing import Any

import gymnasium as gym
import numpy as np

from fleetgym.errors import UnsupportedSpaceError

__all__ = [
    "FRAME_SIZE",
    "FRAME_STACK",
    "MAX_JOINT_ACTIONS",
    "JointDiscreteAction",
    "atari",
    "check_action_space",
    "frames",
    "joint_sizes",
    "observation_preprocessing",
]

#: Most joint actions a MultiDiscrete/MultiBinary action space may have (one categorical).
MAX_JOINT_ACTIONS = 4096
#: Side of the square frames of the ``"frames"`` preprocessing, and frames stacked.
FRAME_SIZE, FRAME_STACK = 84, 4


def _is_image(space: gym.Space) -> bool:
    if not isinstance(space, gym.spaces.Box) or space.dtype != np.uint8:
        return False
    shape = space.shape
    if len(shape) == 3:
        return shape[2] in (1, 3) and min(shape[:2]) >= 8
    return len(shape) == 2 and min(shape) >= 8


def observation_preprocessing(space: gym.Space, ale: bool = False) -> str:
    """The preprocessing that gives the policy a 1-D Box or stacked (C, H, W) frames.

    Raises:
        UnsupportedSpaceError: a space no policy fits (Graph, Sequence, Text, ...).
    """
    if ale:
        return "atari"
    if _is_image(space):
        return "frames"
    if isinstance(space, gym.spaces.Box) and len(space.shape) == 1:
        return "none"
    flattenable = (
        gym.spaces.Box,
        gym.spaces.Discrete,
        gym.spaces.MultiDiscrete,
        gym.spaces.MultiBinary,
        gym.spaces.Dict,
        gym.spaces.Tuple,
    )
    if isinstance(space, (gym.spaces.Dict, gym.spaces.Tuple)):
        parts = list(space.spaces.values() if isinstance(space, gym.spaces.Dict) else space.spaces)
        for part in parts:
            observation_preprocessing(part)  # raises on a part that cannot be flattened
        return "flatten"
    if isinstance(space, flattenable):
        return "flatten"
    raise UnsupportedSpaceError(
        "observation_space: expected a Box, Discrete, MultiDiscrete, MultiBinary, Dict or Tuple "
        f"space (a policy input), actual {space!r}"
    )


def joint_sizes(space: gym.Space) -> tuple[np.ndarray, np.ndarray] | None:
    """(sizes, starts) of a discrete action space other than Discrete(n) from 0, or None."""
    if isinstance(space, gym.spaces.Discrete):
        if int(space.start) == 0:
            return None
        return np.array([int(space.n)]), np.array([int(space.start)])
    if isinstance(space, gym.spaces.MultiDiscrete):
        return space.nvec.reshape(-1).astype(np.int64), space.start.reshape(-1).astype(np.int64)
    if isinstance(space, gym.spaces.MultiBinary):
        n = int(np.prod(space.shape))
        return np.full(n, 2, np.int64), np.zeros(n, np.int64)
    return None


def check_action_space(space: gym.Space) -> bool:
    """True for a discrete policy, False for a Gaussian one.

    Raises:
        UnsupportedSpaceError: an action space no policy fits.
    """
    if isinstance(space, gym.spaces.Box):
        if len(space.shape) != 1:
            raise UnsupportedSpaceError(
                f"action_space: expected a 1-D Box for a Gaussian policy, actual {space!r}"
            )
        return False
    if isinstance(space, (gym.spaces.Discrete, gym.spaces.MultiDiscrete, gym.spaces.MultiBinary)):
        sizes = joint_sizes(space)
        joint = 1 if sizes is None else math.prod(int(n) for n in sizes[0])
        if joint > MAX_JOINT_ACTIONS:
            raise UnsupportedSpaceError(
                f"action_space: expected at most {MAX_JOINT_ACTIONS} joint discrete actions, "
                f"actual {joint} in {space!r}"
            )
        return True
    raise UnsupportedSpaceError(
        f"action_space: expected Discrete, MultiDiscrete, MultiBinary or a 1-D Box, actual {space!r}"
    )


class JointDiscreteAction(gym.ActionWrapper):  # type: ignore[type-arg]
    """One ``Discrete(prod(nvec))`` action for a MultiDiscrete/MultiBinary/offset Discrete.

    Index ``i`` is the env action ``start + unravel_index(i, nvec)``: one categorical over
    the joint actions, exact for any distribution over them.

    Example:
        >>> env = JointDiscreteAction(gym.make("CartPole-v1"))  # Discrete(2): unchanged
        >>> env.action_space
        Discrete(2)
    """

    def __init__(self, env: gym.Env) -> None:
        super().__init__(env)
        sizes = joint_sizes(env.action_space)
        self._sizes = sizes
        joint = 1 if sizes is None else math.prod(int(n) for n in sizes[0])
        self.action_space = (
            env.action_space if sizes is None else gym.spaces.Discrete(joint)  # type: ignore[assignment]
        )

    def action(self, action: Any) -> Any:
        if self._sizes is None:
            return action
        sizes, starts = self._sizes
        parts = np.array(np.unravel_index(int(action), tuple(int(n) for n in sizes))) + starts
        space = self.env.action_space
        if isinstance(space, gym.spaces.Discrete):
            return np.int64(parts[0])
        return parts.reshape(space.shape).astype(space.dtype)


def frames(env: gym.Env) -> gym.Env:
    from gymnasium.wrappers import (
        FrameStackObservation,
        GrayscaleObservation,
        ReshapeObservation,
        ResizeObservation,
    )

    shape = env.observation_space.shape or ()
    if len(shape) == 3:
        env = GrayscaleObservation(env) if shape[2] == 3 else ReshapeObservation(env, shape[:2])
    env = ResizeObservation(env, (FRAME_SIZE, FRAME_SIZE))
    return FrameStackObservation(env, FRAME_STACK)


def atari(env: gym.Env) -> gym.Env:
    from gymnasium.wrappers import AtariPreprocessing, FrameStackObservation

    # Frame skipping by the wrapper (max over the last two frames), as in the DQN/PPO
    # Atari protocol; the env itself must not skip (NoFrameskip IDs, frameskip=1 for v5).
    env = AtariPreprocessing(
        env, noop_max=30, frame_skip=4, screen_size=84, grayscale_obs=True, scale_obs=False
    )
    return FrameStackObservation(env, FRAME_STACK)
