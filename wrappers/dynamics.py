"""True-dynamics predictors: the causal ceiling of predictive delay compensation.

A predictive agent rolls its freshest observation forward through the actions it
believes the env applied since (:class:`~fleetgym.wrappers.predictive.PredictiveObservation`).
With the env's own equations in place of a learned model, the only error left is the
agent's uncertainty about *which* actions were applied when (they are still in flight or
were lost) and the rounding of the observation: what no causal agent can avoid. That is
the figure a learned forward model is judged against.

:class:`CartPoleDynamics` is Gymnasium's ``CartPoleEnv`` step written for a batch of
states (same equations, same order of operations, in float64 as the env keeps its state).
It reads the physical constants from the env it is built for, so a modified CartPole
(another pole length, another ``tau``) gets its own dynamics.

:class:`MujocoStateDynamics` steps a private instance of a MuJoCo env from the state the
observation holds, for the locomotion envs whose observation is the joint state without the
root's horizontal position (Hopper, Walker2d, HalfCheetah, Swimmer: their physics does not
depend on where the robot stands). :func:`true_dynamics` picks the one an env needs.
"""

from __future__ import annotations

import math
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium import spaces

from fleetgym.errors import UnsupportedSpaceError
from fleetgym.validation import quote

__all__ = ["CartPoleDynamics", "MujocoStateDynamics", "PendulumDynamics", "true_dynamics"]

_CONSTANTS = ("gravity", "masscart", "masspole", "length", "force_mag", "tau")


class CartPoleDynamics:
    """CartPole's equations of motion as a batched predictor (no model error).

    Models the env's step exactly: force ``±force_mag`` for action 1 / 0, the pole's
    angular and the cart's linear acceleration from Florian's corrected equations, then
    an Euler (or semi-implicit Euler) update with the env's ``tau``. Termination is not
    modelled: the state keeps integrating, as the observation of a failed pole would.

    It follows the predictor protocol of :mod:`fleetgym.wrappers.predictive` in its
    batched form (``batched = True``): ``obs`` is ``(B, 4)``, ``actions`` ``(B, n)``
    (applied in order), ``ages`` is not needed; it returns the ``(B, 4)`` states after
    the ``n`` steps, in float64.

    Args:
        gravity, masscart, masspole, length, force_mag, tau: The env's constants
            (``length`` is half the pole's length, as in the env).
        kinematics_integrator: ``"euler"`` or ``"semi-implicit euler"``.
        observation_space, action_space: The spaces it predicts for (checked by the
            predictive wrapper against the env's); default CartPole's.

    Example:
        >>> import gymnasium as gym
        >>> import numpy as np
        >>> env = gym.make("CartPole-v1")
        >>> obs, _ = env.reset(seed=0)
        >>> model = CartPoleDynamics.from_env(env)
        >>> nxt, *_ = env.step(1)
        >>> pred = model(obs[None], np.array([[1]]), None)
        >>> bool(np.allclose(pred[0], nxt, atol=1e-6))
        True

    Raises:
        ValueError: For a constant that is not a finite positive number.
    """

    batched = True

    def __init__(
        self,
        gravity: float = 9.8,
        masscart: float = 1.0,
        masspole: float = 0.1,
        length: float = 0.5,
        force_mag: float = 10.0,
        tau: float = 0.02,
        kinematics_integrator: str = "euler",
        observation_space: spaces.Box | None = None,
        action_space: spaces.Discrete | None = None,
    ) -> None:
        values = dict(
            gravity=gravity,
            masscart=masscart,
            masspole=masspole,
            length=length,
            force_mag=force_mag,
            tau=tau,
        )
        for name, value in values.items():
            if (
                isinstance(value, bool)
                or not isinstance(value, (int, float, np.floating))
                or not np.isfinite(value)
                or value <= 0
            ):
                raise ValueError(f"{name}: expected a finite number > 0, actual {quote(value)}")
        if kinematics_integrator not in ("euler", "semi-implicit euler"):
            raise ValueError(
                "kinematics_integrator: expected 'euler' or 'semi-implicit euler', "
                f"actual {quote(kinematics_integrator)}"
            )
        self.gravity = float(gravity)
        self.masspole = float(masspole)
        self.length = float(length)
        self.force_mag = float(force_mag)
        self.tau = float(tau)
        self.total_mass = float(masspole) + float(masscart)
        self.polemass_length = float(masspole) * float(length)
        self.kinematics_integrator = kinematics_integrator
        if observation_space is None:
            high = np.array([4.8, np.inf, 2 * 12 * 2 * np.pi / 360, np.inf], np.float32)
            observation_space = spaces.Box(-high, high, dtype=np.float32)
        self.observation_space = observation_space
        self.action_space = action_space if action_space is not None else spaces.Discrete(2)

    @classmethod
    def from_env(cls, env: gym.Env[Any, Any]) -> CartPoleDynamics:
        """The dynamics of a CartPole env (its own constants and spaces).

        Over ``fleetgym/Remote-v0`` the constants are those of a local instance of the
        env ID the server reports.

        Args:
            env: A CartPole env, wrapped or not (the shim included); the constants are read
                from ``env.unwrapped``, the spaces from ``env`` itself.

        Raises:
            UnsupportedSpaceError: If ``env`` is not a CartPole (no such constants).
        """
        inner = env.unwrapped
        remote_id = getattr(inner, "remote_env_id", None)
        if remote_id is not None and not hasattr(inner, "tau"):
            # Mode 3: the client knows which env the server runs; its constants are
            # those of a local instance of the same ID.
            local = gym.make(remote_id)
            try:
                return cls.from_env(local)
            finally:
                local.close()
        missing = [name for name in _CONSTANTS if not hasattr(inner, name)]
        if missing:
            raise UnsupportedSpaceError(
                f"CartPoleDynamics: expected a CartPole env (with {', '.join(_CONSTANTS)}), "
                f"actual {type(inner).__name__} without {', '.join(missing)}"
            )
        return cls(
            **{name: getattr(inner, name) for name in _CONSTANTS},
            kinematics_integrator=getattr(inner, "kinematics_integrator", "euler"),
            observation_space=env.observation_space,  # type: ignore[arg-type]
            action_space=env.action_space,  # type: ignore[arg-type]
        )

    def step(self, state: np.ndarray, action: np.ndarray) -> np.ndarray:
        """One env step for a batch: ``state`` ``(B, 4)`` float64, ``action`` ``(B,)``.

        Args:
            state: ``(B, 4)`` states ``(x, x_dot, theta, theta_dot)``, in float64.
            action: ``(B,)`` actions: 1 pushes right (``+force_mag``), anything else left.

        Returns:
            The ``(B, 4)`` states one ``tau`` later.
        """
        x, x_dot, theta, theta_dot = state.T
        force = np.where(action == 1, self.force_mag, -self.force_mag)
        costheta = np.cos(theta)
        sintheta = np.sin(theta)
        temp = (force + self.polemass_length * np.square(theta_dot) * sintheta) / self.total_mass
        thetaacc = (self.gravity * sintheta - costheta * temp) / (
            self.length * (4.0 / 3.0 - self.masspole * np.square(costheta) / self.total_mass)
        )
        xacc = temp - self.polemass_length * thetaacc * costheta / self.total_mass
        tau = self.tau
        if self.kinematics_integrator == "euler":
            x = x + tau * x_dot
            x_dot = x_dot + tau * xacc
            theta = theta + tau * theta_dot
            theta_dot = theta_dot + tau * thetaacc
        else:
            x_dot = x_dot + tau * xacc
            x = x + tau * x_dot
            theta_dot = theta_dot + tau * thetaacc
            theta = theta + tau * theta_dot
        return np.stack([x, x_dot, theta, theta_dot], axis=1)

    def __call__(self, obs: np.ndarray, actions: np.ndarray, ages: Any) -> np.ndarray:
        """The states after applying ``actions[:, i]`` for i = 0..n-1 to ``obs``."""
        state = np.asarray(obs, dtype=np.float64).reshape(-1, 4)
        acts = np.asarray(actions).reshape(state.shape[0], -1)
        if state.shape[0] == 1:  # one case: the same equations on Python floats (faster)
            return np.array([self._roll_one(state[0].tolist(), acts[0].tolist())])
        for i in range(acts.shape[1]):
            state = self.step(state, acts[:, i])
        return state

    def _roll_one(self, state: list[float], actions: list[Any]) -> list[float]:
        x, x_dot, theta, theta_dot = state
        g, mp, length, total = self.gravity, self.masspole, self.length, self.total_mass
        pml, tau, euler = self.polemass_length, self.tau, self.kinematics_integrator == "euler"
        for action in actions:
            force = self.force_mag if action == 1 else -self.force_mag
            costheta, sintheta = math.cos(theta), math.sin(theta)
            temp = (force + pml * theta_dot * theta_dot * sintheta) / total
            thetaacc = (g * sintheta - costheta * temp) / (
                length * (4.0 / 3.0 - mp * costheta * costheta / total)
            )
            xacc = temp - pml * thetaacc * costheta / total
            if euler:
                x, x_dot = x + tau * x_dot, x_dot + tau * xacc
                theta, theta_dot = theta + tau * theta_dot, theta_dot + tau * thetaacc
            else:
                x_dot = x_dot + tau * xacc
                x = x + tau * x_dot
                theta_dot = theta_dot + tau * thetaacc
                theta = theta + tau * theta_dot
        return [x, x_dot, theta, theta_dot]


class PendulumDynamics:
    """Pendulum-v1's equations of motion as a batched predictor (no model error).

    The observation ``(cos th, sin th, th_dot)`` holds the whole state; one step clips the
    torque to ``max_torque``, integrates ``th_dot`` (clipped to ``max_speed``) and then
    ``th`` with the env's ``dt``, as the env does. The predictor protocol's batched form:
    ``obs`` ``(B, 3)``, ``actions`` ``(B, n, 1)`` or ``(B, n)``; returns ``(B, 3)``.

    Args:
        g, m, l: Gravity (m/s^2), the pole's mass (kg) and length (m), as in the env; each a
            finite number > 0 (defaults: Pendulum-v1's 10, 1, 1).
        dt: The env's time step in seconds (default 0.05).
        max_torque: Torques are clipped to ``±max_torque`` (default 2).
        max_speed: Angular velocities are clipped to ``±max_speed`` rad/s (default 8).
        observation_space, action_space: The spaces it predicts for (checked by the
            predictive wrapper against the env's); default Pendulum's for these bounds.

    Example:
        >>> import gymnasium as gym
        >>> import numpy as np
        >>> env = gym.make("Pendulum-v1")
        >>> obs, _ = env.reset(seed=0)
        >>> nxt, *_ = env.step(np.array([1.5], np.float32))
        >>> model = PendulumDynamics.from_env(env)
        >>> bool(np.allclose(model(obs[None], np.array([[[1.5]]]), None)[0], nxt, atol=1e-5))
        True
    """

    batched = True

    def __init__(
        self,
        g: float = 10.0,
        m: float = 1.0,
        l: float = 1.0,  # noqa: E741 (the env's own name)
        dt: float = 0.05,
        max_torque: float = 2.0,
        max_speed: float = 8.0,
        observation_space: spaces.Box | None = None,
        action_space: spaces.Box | None = None,
    ) -> None:
        for name, value in (("g", g), ("m", m), ("l", l), ("dt", dt)):
            if not (isinstance(value, (int, float)) and np.isfinite(value) and value > 0):
                raise ValueError(f"{name}: expected a finite number > 0, actual {quote(value)}")
        self.g, self.m, self.l, self.dt = float(g), float(m), float(l), float(dt)
        self.max_torque, self.max_speed = float(max_torque), float(max_speed)
        if observation_space is None:
            high = np.array([1.0, 1.0, self.max_speed], dtype=np.float32)
            observation_space = spaces.Box(-high, high, dtype=np.float32)
        if action_space is None:
            action_space = spaces.Box(-self.max_torque, self.max_torque, (1,), np.float32)
        self.observation_space = observation_space
        self.action_space = action_space

    @classmethod
    def from_env(cls, env: gym.Env[Any, Any]) -> PendulumDynamics:
        """The dynamics of a Pendulum env (its own constants and spaces).

        Args:
            env: A Pendulum env, wrapped or not; the constants are read from
                ``env.unwrapped``, the spaces from ``env`` itself. A ``fleetgym/Remote-v0``
                env has no constants here: use :func:`true_dynamics` for it.

        Raises:
            UnsupportedSpaceError: If ``env`` is not a Pendulum.
        """
        inner = env.unwrapped
        names = ("g", "m", "l", "dt", "max_torque", "max_speed")
        if not all(hasattr(inner, name) for name in names):
            raise UnsupportedSpaceError(
                f"PendulumDynamics: expected a Pendulum env, actual {type(inner).__name__}"
            )
        return cls(
            **{name: getattr(inner, name) for name in names},
            observation_space=env.observation_space,  # type: ignore[arg-type]
            action_space=env.action_space,  # type: ignore[arg-type]
        )

    def __call__(self, obs: np.ndarray, actions: np.ndarray, ages: Any) -> np.ndarray:
        """The observations after applying ``actions[:, i]`` for i = 0..n-1 to ``obs``."""
        state = np.asarray(obs, dtype=np.float64).reshape(-1, 3)
        th = np.arctan2(state[:, 1], state[:, 0])
        thdot = state[:, 2].copy()
        acts = np.asarray(actions, dtype=np.float64).reshape(state.shape[0], -1)
        a, b = 3.0 * self.g / (2.0 * self.l), 3.0 / (self.m * self.l**2)
        for i in range(acts.shape[1]):
            u = np.clip(acts[:, i], -self.max_torque, self.max_torque)
            thdot = np.clip(
                thdot + (a * np.sin(th) + b * u) * self.dt, -self.max_speed, self.max_speed
            )
            th = th + thdot * self.dt
        return np.stack([np.cos(th), np.sin(th), thdot], axis=1)


#: MuJoCo envs whose observation is ``qpos[k:]`` then ``qvel`` (clipped or not), with the
#: number ``k`` of root positions left out (the robot's place on a flat floor).
_STATE_ENVS = {"Hopper": 1, "Walker2d": 1, "HalfCheetah": 1, "Swimmer": 2}


class MujocoStateDynamics:
    """A MuJoCo locomotion env's own physics as a predictor (no model error).

    Models the env's step exactly: the observation is turned back into the simulator's
    state (the left-out root position set to 0, which these envs' physics does not depend
    on), then each action is applied with the env's own ``do_simulation`` and frame skip
    in a private instance of the env. What is not recovered: velocities the observation
    clips (Hopper and Walker2d clip them to ±10) and the float32 rounding of the
    observation. Termination is not modelled.

    It follows the predictor protocol of :mod:`fleetgym.wrappers.predictive` for one case
    at a time: ``obs`` of the env's shape, ``actions`` ``(n, *action_shape)`` applied in
    order, ``ages`` unused; it returns the observation after the ``n`` steps.

    Args:
        env_id: A registered ID of one of the supported envs.
        env_kwargs: Its ``gym.make`` keyword arguments (as in the env's spec).

    Example:
        >>> import gymnasium as gym
        >>> env = gym.make("Hopper-v5")
        >>> obs, _ = env.reset(seed=0)
        >>> model = MujocoStateDynamics.from_env(env)
        >>> action = np.full(3, 0.5, dtype=np.float32)
        >>> nxt, *_ = env.step(action)
        >>> bool(np.allclose(model(obs, action[None], None), nxt, atol=1e-5))
        True

    Raises:
        UnsupportedSpaceError: For an env whose observation is not its joint state.
    """

    batched = False

    def __init__(self, env_id: str, env_kwargs: dict[str, Any] | None = None) -> None:
        kwargs = dict(env_kwargs or {})
        family = env_id.split("/")[-1].split("-")[0]
        skip = _STATE_ENVS.get(family)
        if skip is None or not kwargs.get("exclude_current_positions_from_observation", True):
            raise UnsupportedSpaceError(
                "MujocoStateDynamics: expected one of "
                f"{', '.join(f'{name}-v*' for name in _STATE_ENVS)} with the root position "
                f"left out of the observation, actual {quote(env_id)}"
            )
        self.env_id = env_id
        self._env = gym.make(env_id, **kwargs).unwrapped
        sim = self._env
        self._nq, self._nv = int(sim.model.nq), int(sim.model.nv)  # type: ignore[attr-defined]
        self._skip = skip
        self.observation_space = sim.observation_space
        self.action_space = sim.action_space
        size = self._nq - skip + self._nv
        if self.observation_space.shape != (size,):
            raise UnsupportedSpaceError(
                f"MujocoStateDynamics: expected an observation of qpos[{skip}:] and qvel "
                f"({size} values) for {env_id}, actual shape {self.observation_space.shape}"
            )

    @classmethod
    def from_env(cls, env: gym.Env[Any, Any]) -> MujocoStateDynamics:
        """The physics of the env ``env`` wraps (its ID and keyword arguments).

        Over ``fleetgym/Remote-v0``: a local instance of the env ID the server reports.

        Args:
            env: An env made by ``gym.make`` (Hopper, Walker2d, HalfCheetah or Swimmer),
                wrapped or not; its innermost env's spec gives the ID and keyword arguments.

        Raises:
            UnsupportedSpaceError: For an env without a spec or of another family.
        """
        inner = env.unwrapped
        remote_id = getattr(inner, "remote_env_id", None)
        if remote_id is not None:
            return cls(remote_id)
        spec = inner.spec
        if spec is None:
            raise UnsupportedSpaceError(
                f"MujocoStateDynamics: expected an env made by gym.make (with a spec), "
                f"actual {type(inner).__name__}"
            )
        return cls(spec.id, spec.kwargs)

    def __call__(self, obs: np.ndarray, actions: np.ndarray, ages: Any) -> np.ndarray:
        """The observation after applying ``actions[i]`` for i = 0..n-1 from ``obs``."""
        sim: Any = self._env
        x = np.asarray(obs, dtype=np.float64).ravel()
        split = self._nq - self._skip
        qpos = np.concatenate([np.zeros(self._skip), x[:split]])
        sim.set_state(qpos, x[split:])
        shape = self.action_space.shape or ()
        for action in np.asarray(actions, dtype=np.float64).reshape(-1, *shape):
            sim.do_simulation(action, sim.frame_skip)
        return np.asarray(sim._get_obs(), dtype=np.float64)


def true_dynamics(env: gym.Env[Any, Any]) -> Any:
    """The env's own dynamics as a predictor: CartPole's or Pendulum's equations, a MuJoCo twin, or a
    fixed-layout MiniGrid task's (:class:`~fleetgym.wrappers.grid_dynamics.MiniGridStateDynamics`).

    Raises:
        UnsupportedSpaceError: For an env that is none of these.
    """
    inner = env.unwrapped
    if type(inner).__module__.startswith("minigrid."):
        from fleetgym.wrappers.grid_dynamics import MiniGridStateDynamics

        return MiniGridStateDynamics.from_env(env)
    if type(inner).__name__ == "PendulumEnv" or (
        getattr(inner, "remote_env_id", "") or ""
    ).startswith("Pendulum"):
        if hasattr(inner, "max_torque"):
            return PendulumDynamics.from_env(env)
        local = gym.make(getattr(inner, "remote_env_id"))  # noqa: B009 (not on every env)
        try:
            return PendulumDynamics.from_env(local)
        finally:
            local.close()
    if all(hasattr(inner, name) for name in _CONSTANTS) or (
        getattr(inner, "remote_env_id", "") or ""
    ).startswith("CartPole"):
        return CartPoleDynamics.from_env(env)
    try:
        return MujocoStateDynamics.from_env(env)
    except UnsupportedSpaceError as error:
        raise UnsupportedSpaceError(
            "predictor 'true-dynamics': expected a CartPole, a Pendulum, a MuJoCo locomotion env "
            f"({', '.join(_STATE_ENVS)}) or a fixed-layout MiniGrid task, actual {type(inner).__name__} ({error})"
        ) from None
