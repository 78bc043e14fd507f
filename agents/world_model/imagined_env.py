"""The imagined env: a Gymnasium ``VectorEnv`` (and a single ``Env``) over a world model.

Each sub-env starts from a real observation drawn from a pool (B_real's start states),
steps through the model (each imagined episode follows one elite member, drawn from the
env's seeded generator), and ends where the model predicts termination, where the episode
reaches ``horizon`` steps (truncated), or where the ensemble's disagreement passes
``max_uncertainty`` (truncated: the model no longer knows). Auto-reset is Gymnasium's
``SAME_STEP`` mode: the step that ends an episode returns the next start observation and
puts the last one in ``info["final_obs"]``. ``info["uncertainty"]`` holds every step's
disagreement, ``info["model_version"]`` the model's fit count.
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium.vector import AutoresetMode, VectorEnv

from fleetgym.agents.world_model.model import WorldModel
from fleetgym.agents.world_model.success import SuccessRewardModel
from fleetgym.validation import check_float, check_int

__all__ = ["ImaginedEnv", "ImaginedVectorEnv", "check_horizon"]

#: Longest imagined episode accepted (a typo such as 1e9 fails at once).
MAX_HORIZON = 100_000


def check_horizon(name: str, value: Any) -> int:
    """``value`` as a horizon: an int in ``[1, 100000]``.

    Raises:
        TypeError: If it is not an int.
        ValueError: If it is ``<= 0`` or too large.
    """
    return check_int(name, value, 1, MAX_HORIZON)


class ImaginedVectorEnv(VectorEnv):  # type: ignore[misc]
    """``num_envs`` imagined episodes stepped as one batch through ``model``.

    Args:
        model: A fitted :class:`~fleetgym.agents.world_model.WorldModel`.
        starts: Real observations to start from, shape (M, obs_dim) (flat).
        num_envs: Imagined episodes stepped at once.
        horizon: Steps after which an imagined episode is truncated.
        max_uncertainty: Truncate an episode whose step disagreement exceeds it
            (``None``: never).
        sample: Draw the next state from the member's Gaussian (``False``: its mean).
        reward_model: A :class:`~fleetgym.agents.world_model.SuccessRewardModel`; the
            reward is then ``M(o') - M(o)`` instead of the model's regression head.

    Example:
        >>> from fleetgym.agents.world_model import TransitionBuffer
        >>> env = gym.make("CartPole-v1")
        >>> data = TransitionBuffer.collect(env, 200, seed=0)
        >>> model = WorldModel(env.observation_space, env.action_space, ensemble_size=2,
        ...                    elites=2, hidden_sizes=(16,), seed=0)
        >>> _ = model.fit(data, epochs=1)
        >>> venv = ImaginedVectorEnv(model, data.obs, num_envs=3, horizon=5)
        >>> obs, info = venv.reset(seed=0)
        >>> obs.shape
        (3, 4)
        >>> obs, reward, terminated, truncated, info = venv.step(np.array([0, 1, 0]))
        >>> reward.shape, info["uncertainty"].shape
        ((3,), (3,))

    Raises:
        ValueError: For an unfitted model, starts of another width or none, a horizon or
            count ``<= 0``, a negative threshold.
    """

    metadata = {"autoreset_mode": AutoresetMode.SAME_STEP}

    def __init__(
        self,
        model: WorldModel,
        starts: Any,
        num_envs: int = 1,
        horizon: int = 10,
        *,
        max_uncertainty: float | None = None,
        sample: bool = True,
        reward_model: SuccessRewardModel | None = None,
    ) -> None:
        if not isinstance(model, WorldModel):
            raise TypeError(f"model: expected a WorldModel, actual {type(model).__name__}")
        if model.version == 0:
            raise ValueError(
                "model: expected a fitted world model (fit() it first), actual version 0"
            )
        starts = np.asarray(starts, np.float32)
        if starts.ndim != 2 or starts.shape[1] != model.obs_dim or not len(starts):
            raise ValueError(
                f"starts: expected real observations of shape (M >= 1, {model.obs_dim}), "
                f"actual {starts.shape}"
            )
        if not np.isfinite(starts).all():
            raise ValueError("starts: expected finite observations, actual NaN or infinity")
        self.model = model
        self.starts = starts
        self.num_envs = check_int("num_envs", num_envs, 1, 1 << 20)
        self.horizon = check_horizon("horizon", horizon)
        self.max_uncertainty = (
            None
            if max_uncertainty is None
            else check_float("max_uncertainty", max_uncertainty, 0.0)
        )
        self.sample = bool(sample)
        self.reward_model = reward_model
        flat = model.codec.flat_space
        self.single_observation_space = gym.spaces.Box(-np.inf, np.inf, flat.shape, np.float32)
        self.single_action_space = model.action_space
        self.observation_space = gym.vector.utils.batch_space(
            self.single_observation_space, self.num_envs
        )
        self.action_space = gym.vector.utils.batch_space(self.single_action_space, self.num_envs)
        self._rng = np.random.default_rng()
        self._obs = np.zeros((self.num_envs, model.obs_dim), np.float32)
        self._members = np.zeros(self.num_envs, np.int64)
        self._elapsed = np.zeros(self.num_envs, np.int64)

    def _restart(self, which: np.ndarray) -> None:
        k = int(which.sum())
        if not k:
            return
        self._obs[which] = self.starts[self._rng.integers(0, len(self.starts), k)]
        self._members[which] = self._rng.integers(0, self.model.num_elites, k)
        self._elapsed[which] = 0

    def reset(
        self, *, seed: int | list[int] | None = None, options: dict[str, Any] | None = None
    ) -> tuple[np.ndarray, dict[str, Any]]:
        """Every sub-env starts a new imagined episode from a real start state.

        Each sub-env draws its start state uniformly from ``starts`` and its elite member
        uniformly from the model's elites.

        Args:
            seed: Reseeds the generator of the start states, the members and the sampling
                noise (a list is one seed's entropy, not one seed per sub-env); None: the
                generator continues (unseeded until a seed is given).
            options: Accepted for the Gymnasium API and ignored.
        """
        if seed is not None:
            self._rng = np.random.default_rng(seed if isinstance(seed, int) else list(seed))
        self._restart(np.ones(self.num_envs, bool))
        return self._obs.copy(), {}

    def step(
        self, actions: Any
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, dict[str, Any]]:
        """One imagined step of every sub-env (auto-reset in the same step).

        A sub-env that ends returns its next episode's start observation; the observation
        it ended in is in ``info["final_obs"]`` (where ``info["_final_obs"]``). A
        prediction that is not finite truncates its episode (its non-finite values set to 0).

        Args:
            actions: One action of the model's action space per sub-env, ``num_envs`` in
                all (e.g. shape ``(num_envs,)`` for Discrete, ``(num_envs, k)`` for a Box).

        Returns:
            ``(obs, reward, terminated, truncated, info)``; ``info`` also holds each
            row's ``"uncertainty"`` and ``"model_version"``.
        """
        pred = self.model.step(self._obs, actions, self._members, self._rng, sample=self.sample)
        reward = pred.reward
        if self.reward_model is not None:
            reward = self.reward_model.reward(self._obs, pred.next_obs)
        self._elapsed += 1
        terminated = pred.terminated.copy()
        truncated = ~terminated & (self._elapsed >= self.horizon)
        if self.max_uncertainty is not None:
            truncated |= ~terminated & (pred.uncertainty > self.max_uncertainty)
        if not np.isfinite(pred.next_obs).all():
            truncated |= ~terminated & ~np.isfinite(pred.next_obs).all(axis=1)
            pred.next_obs[~np.isfinite(pred.next_obs)] = 0.0
        done = terminated | truncated
        info: dict[str, Any] = {
            "uncertainty": pred.uncertainty,
            "model_version": np.full(self.num_envs, self.model.version, np.int64),
        }
        self._obs = pred.next_obs
        if done.any():
            # Gymnasium's layout: an (N,) object array of observations (None where not done),
            # filled per index: np.array of N equal rows would be an (N, obs_dim) array.
            final = np.full(self.num_envs, None, dtype=object)
            for i in np.flatnonzero(done):
                final[i] = pred.next_obs[i].copy()
            info["final_obs"] = final
            info["_final_obs"] = done.copy()
            self._obs = pred.next_obs.copy()
            self._restart(done)
        return self._obs.copy(), reward.astype(np.float32), terminated, truncated, info


class ImaginedEnv(gym.Env):  # type: ignore[type-arg]
    """One imagined episode at a time: :class:`ImaginedVectorEnv` with one sub-env, as a ``gym.Env``.

    For learners that take a single env (SB3's ``make_vec_env``/``DummyVecEnv`` wrap it).
    An episode that ends is reported as ``terminated``/``truncated``; ``reset`` starts the
    next from a real start state.

    Args:
        model: A fitted :class:`~fleetgym.agents.world_model.WorldModel`.
        starts: Real observations to start from, shape (M, obs_dim) (flat).
        horizon: Steps after which an imagined episode is truncated (1 to 100,000).
        **kwargs: Keywords of :class:`ImaginedVectorEnv`: ``max_uncertainty``, ``sample``,
            ``reward_model``.
    """

    metadata: dict[str, Any] = {"render_modes": []}

    def __init__(self, model: WorldModel, starts: Any, horizon: int = 10, **kwargs: Any) -> None:
        self._venv = ImaginedVectorEnv(model, starts, 1, horizon, **kwargs)
        self.observation_space = self._venv.single_observation_space
        self.action_space = self._venv.single_action_space

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[np.ndarray, dict[str, Any]]:
        super().reset(seed=seed)
        obs, info = self._venv.reset(seed=seed)
        return obs[0], info

    def step(self, action: Any) -> tuple[np.ndarray, float, bool, bool, dict[str, Any]]:
        obs, reward, terminated, truncated, info = self._venv.step(np.asarray(action)[None])
        out = {
            "uncertainty": float(info["uncertainty"][0]),
            "model_version": int(info["model_version"][0]),
        }
        if terminated[0] or truncated[0]:
            obs = np.asarray(info["final_obs"][0], np.float32)[None]
        return obs[0].copy(), float(reward[0]), bool(terminated[0]), bool(truncated[0]), out
