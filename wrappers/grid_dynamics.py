"""The true dynamics of a fixed-layout MiniGrid task, read back from the agent's view.

A MiniGrid agent sees a 7×7 egocentric view, not its state. In a task whose layout is
the same every episode and holds nothing that changes (walls, floor, goal, lava: the
``Empty`` rooms), the state is the agent's cell and heading alone, and the view tells
it (in a room without symmetries): :class:`MiniGridStateDynamics` renders the view of
every pose once, reads the pose back from a delivered view, applies the actions with
the env's own ``step`` in a private instance and renders the view of the pose reached.
That is the causal ceiling of predictive compensation for such a task (see
:mod:`fleetgym.wrappers.dynamics` for CartPole and MuJoCo).
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np

from fleetgym.errors import UnsupportedSpaceError
from fleetgym.validation import quote

__all__ = ["MiniGridStateDynamics"]

#: Grid cells that never change during an episode.
_STATIC_CELLS = ("wall", "floor", "goal", "lava")


class MiniGridStateDynamics:
    """A fixed-layout MiniGrid task's own step as a predictor of the flattened view.

    Models the env exactly where the view identifies the pose: the observation must be
    the flattened egocentric image (``FlattenObservation(ImgObsWrapper(env))``, as the
    CALF study builds MiniGrid tasks). Where several poses render the same view (counted
    in :attr:`ambiguous`), each is rolled forward and the view most of them reach is the
    estimate; a view that no pose renders is returned unchanged and counted in
    :attr:`unmatched`.

    It follows the predictor protocol of :mod:`fleetgym.wrappers.predictive` for one case
    at a time: ``obs`` the flattened view, ``actions`` ``(n,)`` applied in order,
    ``ages`` unused.

    Args:
        env_id: A registered MiniGrid ID whose layout does not change.
        env_kwargs: Its ``gym.make`` keyword arguments.

    Example:
        >>> import minigrid  # noqa: F401  (registers the IDs)
        >>> from gymnasium.wrappers import FlattenObservation
        >>> from minigrid.wrappers import ImgObsWrapper
        >>> env = FlattenObservation(ImgObsWrapper(gym.make("MiniGrid-Empty-5x5-v0")))
        >>> obs, _ = env.reset(seed=0)
        >>> model = MiniGridStateDynamics.from_env(env)
        >>> nxt, *_ = env.step(2)  # forward
        >>> bool((model(obs, np.array([2]), None) == nxt).all()), model.unmatched
        (True, 0)

    Raises:
        UnsupportedSpaceError: For a task whose layout changes between episodes or holds
            objects that change (doors, keys, boxes, balls).
    """

    batched = False

    def __init__(self, env_id: str, env_kwargs: dict[str, Any] | None = None) -> None:
        import minigrid  # noqa: F401  (registers the IDs)
        from minigrid.minigrid_env import MiniGridEnv

        env = gym.make(env_id, **dict(env_kwargs or {})).unwrapped
        if not isinstance(env, MiniGridEnv):
            raise UnsupportedSpaceError(
                f"MiniGridStateDynamics: expected a MiniGrid env, actual {type(env).__name__}"
            )
        self.env_id = env_id
        self._env: Any = env
        env.reset(seed=0)
        layout = env.grid.encode()
        env.reset(seed=1)
        if not np.array_equal(layout, env.grid.encode()):
            raise UnsupportedSpaceError(
                f"MiniGridStateDynamics: expected a task with a fixed layout, actual "
                f"{quote(env_id)} (its grid differs between episodes)"
            )
        changing = sorted(
            {
                cell.type
                for cell in env.grid.grid
                if cell is not None and cell.type not in _STATIC_CELLS
            }
        )
        if changing:
            raise UnsupportedSpaceError(
                f"MiniGridStateDynamics: expected a grid of {', '.join(_STATIC_CELLS)} only, "
                f"actual {quote(env_id)} with {', '.join(changing)} (their state is not in "
                "the agent's pose)"
            )
        if not isinstance(env.action_space, gym.spaces.Discrete):
            raise UnsupportedSpaceError(
                f"MiniGridStateDynamics: expected a Discrete action space, actual {env.action_space}"
            )
        view = env.agent_view_size
        self.observation_space = gym.spaces.Box(0, 255, (view * view * 3,), np.uint8)
        self.action_space = env.action_space
        # Every pose the agent can hold, its view, and the pose each action leads to: in
        # a layout that never changes the env's step is a function of the pose alone, so
        # it is tabulated once here with the env's own step.
        poses = [
            ((x, y), heading)
            for x in range(env.width)
            for y in range(env.height)
            if (cell := env.grid.get(x, y)) is None or cell.can_overlap()
            for heading in range(4)
        ]
        self._pose_list = poses
        index = {pose: i for i, pose in enumerate(poses)}
        views = [self._view(*pose).tobytes() for pose in poses]
        view_ids: dict[bytes, int] = {}
        self._views = [np.frombuffer(v, dtype=np.uint8) for v in dict.fromkeys(views)]
        self._view_of = np.array([view_ids.setdefault(v, len(view_ids)) for v in views])
        self._poses: dict[bytes, np.ndarray] = {
            key: np.flatnonzero(self._view_of == i) for key, i in view_ids.items()
        }
        n_actions = int(env.action_space.n)
        self._next = np.empty((len(poses), n_actions), dtype=np.intp)
        for i, pose in enumerate(poses):
            for action in range(n_actions):
                env.agent_pos, env.agent_dir = pose
                env.step_count = 0  # never truncated: only the pose matters here
                env.step(action)
                x, y = env.agent_pos
                self._next[i, action] = index[((int(x), int(y)), int(env.agent_dir))]
        #: Poses whose view another pose shares (a wall in front looks the same from
        #: several cells).
        self.ambiguous = sum(len(p) for p in self._poses.values() if len(p) > 1)
        self.unmatched = 0

    @classmethod
    def from_env(cls, env: gym.Env[Any, Any]) -> MiniGridStateDynamics:
        """The dynamics of the MiniGrid task ``env`` wraps (its ID and keyword arguments).

        Raises:
            UnsupportedSpaceError: For an env without a spec, or whose observation is not
                the flattened view.
        """
        spec = env.unwrapped.spec
        if spec is None:
            raise UnsupportedSpaceError(
                "MiniGridStateDynamics: expected an env made by gym.make (with a spec), "
                f"actual {type(env.unwrapped).__name__}"
            )
        model = cls(spec.id, spec.kwargs)
        shape = env.observation_space.shape
        if shape != model.observation_space.shape:
            raise UnsupportedSpaceError(
                "MiniGridStateDynamics: expected the flattened egocentric view of shape "
                f"{model.observation_space.shape} (FlattenObservation(ImgObsWrapper(env))), "
                f"actual {env.observation_space}"
            )
        model.observation_space = env.observation_space  # type: ignore[assignment]
        return model

    def _view(self, pos: tuple[int, int], heading: int) -> np.ndarray:
        env = self._env
        env.agent_pos, env.agent_dir = pos, heading
        return np.asarray(env.gen_obs()["image"], dtype=np.uint8).ravel()

    def __call__(self, obs: np.ndarray, actions: np.ndarray, ages: Any) -> np.ndarray:
        """The view after applying ``actions`` in order from the pose ``obs`` shows."""
        view = np.asarray(obs).astype(np.uint8).ravel()
        poses = self._poses.get(view.tobytes())
        if poses is None:
            self.unmatched += 1
            return np.asarray(obs)
        plan = np.asarray(actions).reshape(-1).astype(np.intp)
        # Every pose the view allows, rolled forward; the view most of them reach (the
        # first of them on a tie): exact wherever the ambiguity does not matter.
        reached = poses
        for action in plan:
            reached = self._next[reached, action]
        outcomes: dict[int, int] = {}
        for view_id in self._view_of[reached].tolist():
            outcomes[view_id] = outcomes.get(view_id, 0) + 1
        best = max(outcomes, key=outcomes.__getitem__)
        return self._views[best].astype(np.asarray(obs).dtype)
