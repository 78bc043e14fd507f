"""Physics randomised per episode: the env's physical parameters drawn at every reset.

:class:`PhysicsRandomizationWrapper` scales physical parameters of the wrapped env by
factors drawn uniformly from given ranges, once per episode, before the inner reset:

* **CartPole** (``gymnasium``'s ``CartPoleEnv``: attributes of ``env.unwrapped``):
  ``length`` (the pole's *half* length, 0.5 m nominal), ``masspole``, ``masscart``,
  ``force_mag`` and ``gravity``; the derived ``total_mass`` and ``polemass_length`` are
  recomputed from them, as the env's constructor computes them.
* **MuJoCo** (``env.unwrapped.model``, an ``MjModel``): ``body_mass`` (every body's mass),
  ``geom_friction`` (every geom's sliding friction, column 0), ``actuator_gear`` (every
  actuator's gain, column 0), each element by a factor of its own drawn from the range;
  ``body_mass:<body>``, ``geom_friction:<geom>`` and ``actuator_gear:<actuator>`` scale
  one named element. Derived model quantities (``mj_setConst``) are not recomputed: the
  dynamics read the masses, frictions and gears directly at every step. The nominal
  values are read at construction and restored before every draw, so factors never
  compound across episodes; :meth:`close` restores them for good.

A range is ``(low, high)`` with ``0 < low <= high``: a factor of the nominal value (a
mass, length, friction or gain must stay positive). ``(1.0, 1.0)`` keeps the nominal
value; a float ``f`` is the fixed range ``(f, f)``.

Randomness: a generator of its own, ``SeedSequence(seed, spawn_key=(key,))`` of the reset
seed (a branch neither the env's seeding nor the network shim's uses), so the same reset
seed replays the same physics, and the shim's per-episode profile draw
(:class:`~fleetgym.wrappers.NetworkShimWrapper` with a list of profiles) stays independent
of it: ``NetworkShimWrapper(PhysicsRandomizationWrapper(env, ranges), profile=[...])``
randomises both, each episode. Resets without a seed continue the stream.

``info["physics"]`` at reset holds the episode's values (absolute, not factors), keyed by
parameter name; MuJoCo entries are arrays of the scaled elements.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Mapping
from typing import Any

import gymnasium as gym
import numpy as np

from fleetgym.validation import quote
from fleetgym.wrappers.shim_config import check_seed

__all__ = ["CARTPOLE_PARAMETERS", "MUJOCO_PARAMETERS", "PhysicsRandomizationWrapper"]

#: CartPole's randomisable attributes (of ``env.unwrapped``).
CARTPOLE_PARAMETERS = ("length", "masspole", "masscart", "force_mag", "gravity")
#: MuJoCo's randomisable model arrays and the column each one scales (``None``: 1-d).
MUJOCO_PARAMETERS: dict[str, int | None] = {
    "body_mass": None,
    "geom_friction": 0,
    "actuator_gear": 0,
}
_MUJOCO_KINDS = {"body_mass": "body", "geom_friction": "geom", "actuator_gear": "actuator"}
#: Spawn key of the physics stream (the shim's is another).
_PHYSICS_STREAM_KEY = 0x9_4A75_1C5


def _kind(env: gym.Env[Any, Any]) -> str | None:
    base = env.unwrapped
    if all(hasattr(base, a) for a in (*CARTPOLE_PARAMETERS, "total_mass", "polemass_length")):
        return "cartpole"
    model = getattr(base, "model", None)
    if model is not None and all(hasattr(model, a) for a in MUJOCO_PARAMETERS):
        return "mujoco"
    return None


def _env_name(env: gym.Env[Any, Any]) -> str:
    spec = getattr(env, "spec", None)
    return spec.id if spec is not None else type(env.unwrapped).__name__


def _check_range(name: str, value: Any) -> tuple[float, float]:
    where = f"ranges[{name!r}]"
    if isinstance(value, numbers.Real) and not isinstance(value, bool):
        pair: Any = (value, value)
    elif isinstance(value, (tuple, list)) and len(value) == 2:
        pair = value
    else:
        raise TypeError(
            f"{where}: expected (low, high) factors or one factor, actual {quote(value)}"
        )
    low, high = pair
    for bound in (low, high):
        if isinstance(bound, bool) or not isinstance(bound, numbers.Real):
            raise TypeError(f"{where}: expected numbers, actual {quote(value)}")
        if not math.isfinite(float(bound)) or float(bound) <= 0.0:
            raise ValueError(
                f"{where}: expected factors > 0 of the nominal value (a mass, length, "
                f"friction or gain must stay positive), actual {quote(value)}"
            )
    if float(low) > float(high):
        raise ValueError(f"{where}: expected low <= high, actual {quote(value)}")
    return float(low), float(high)


class PhysicsRandomizationWrapper(gym.Wrapper[Any, Any, Any, Any], gym.utils.RecordConstructorArgs):
    """Draws the env's physical parameters per episode (CartPole, MuJoCo), seeded, in ``info``.

    Models domain randomisation of the plant: each episode runs on a plant whose masses,
    lengths, frictions or gains are the nominal ones times a factor drawn uniformly from
    the parameter's range. See the module docstring for the parameters of each env, the
    seeding and the composition with the network shim's profile mix.

    Args:
        env: A CartPole or MuJoCo env (anything whose ``unwrapped`` is one).
        ranges: Parameter name -> ``(low, high)`` factor range (or one fixed factor).

    Example:
        >>> env = PhysicsRandomizationWrapper(
        ...     gym.make("CartPole-v1"), {"length": (0.5, 2.0), "masspole": (1.0, 3.0)})
        >>> _, info = env.reset(seed=0)
        >>> sorted(info["physics"])
        ['length', 'masspole']
        >>> base = env.unwrapped
        >>> bool(np.isclose(base.polemass_length, base.masspole * base.length))
        True
        >>> env.reset(seed=0)[1]["physics"] == info["physics"]
        True

    Raises:
        TypeError: If ``ranges`` is not a mapping of names to ranges, or the env is neither
            CartPole nor MuJoCo.
        ValueError: For an empty ``ranges``, a parameter the env has not (the message lists
            those it has), a factor ``<= 0`` (a negative mass) or not finite, or a range
            with ``low > high``; each names the parameter.
    """

    def __init__(self, env: gym.Env[Any, Any], ranges: Mapping[str, Any]) -> None:
        if not isinstance(ranges, Mapping) or not ranges:
            raise (TypeError if not isinstance(ranges, Mapping) else ValueError)(
                f"ranges: expected a non-empty mapping of parameter name to (low, high), "
                f"actual {quote(ranges)}"
            )
        kind = _kind(env)
        if kind is None:
            raise TypeError(
                f"env: expected a CartPole or MuJoCo env (CartPoleEnv attributes or an "
                f"MjModel at env.unwrapped.model), actual {_env_name(env)}"
            )
        checked = {}
        for name, value in ranges.items():
            if not isinstance(name, str):
                raise TypeError(f"ranges: expected parameter names (str), actual {quote(name)}")
            checked[name] = _check_range(name, value)
        gym.utils.RecordConstructorArgs.__init__(self, ranges=dict(ranges))
        gym.Wrapper.__init__(self, env)
        self.kind = kind
        self.ranges: dict[str, tuple[float, float]] = checked
        self._targets = {name: self._target(name) for name in checked}
        self._nominal = {name: self._read(target) for name, target in self._targets.items()}
        self._rng: np.random.Generator | None = None
        #: This episode's values (absolute), as reported in ``info["physics"]``.
        self.values: dict[str, Any] = {}

    # -- parameters -------------------------------------------------------------------
    @property
    def _base(self) -> Any:
        """The innermost env (CartPoleEnv or a MujocoEnv), typed loosely."""
        return self.env.unwrapped

    def _target(self, name: str) -> tuple[str, int | None, Any]:
        """``(attribute, column, element index or None)`` of one parameter name."""
        if self.kind == "cartpole":
            if name not in CARTPOLE_PARAMETERS:
                raise ValueError(
                    f"ranges: unknown parameter {name!r} for {_env_name(self.env)}; expected "
                    f"one of {list(CARTPOLE_PARAMETERS)}"
                )
            return name, None, None
        attr, _, element = name.partition(":")
        if attr not in MUJOCO_PARAMETERS:
            raise ValueError(
                f"ranges: unknown parameter {name!r} for {_env_name(self.env)}; expected one "
                f"of {list(MUJOCO_PARAMETERS)}, optionally ':<name>' of one element"
            )
        index = None
        if element:
            model = self._base.model
            try:
                index = int(getattr(model, _MUJOCO_KINDS[attr])(element).id)
            except (KeyError, ValueError, IndexError):
                raise ValueError(
                    f"ranges: unknown parameter {name!r} for {_env_name(self.env)}: the model "
                    f"has no {_MUJOCO_KINDS[attr]} named {element!r}"
                ) from None
        return attr, MUJOCO_PARAMETERS[attr], index

    def _view(self, target: tuple[str, int | None, Any]) -> np.ndarray:
        attr, column, index = target
        array = getattr(self._base.model, attr)
        view = array if column is None else array[:, column]
        return view if index is None else view[index : index + 1]

    def _read(self, target: tuple[str, int | None, Any]) -> Any:
        if self.kind == "cartpole":
            return float(getattr(self.env.unwrapped, target[0]))
        return self._view(target).copy()

    def _write(self, target: tuple[str, int | None, Any], value: Any) -> None:
        if self.kind == "cartpole":
            setattr(self.env.unwrapped, target[0], float(value))
        else:
            self._view(target)[:] = value

    def _restore(self) -> None:
        for name, target in self._targets.items():
            self._write(target, self._nominal[name])
        self._derive()

    def _derive(self) -> None:
        if self.kind == "cartpole":  # as CartPoleEnv.__init__ computes them
            base: Any = self.env.unwrapped
            base.total_mass = base.masspole + base.masscart
            base.polemass_length = base.masspole * base.length

    # -- gym API ----------------------------------------------------------------------
    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[Any, dict[str, Any]]:
        """Draw this episode's physics (nominal values first), then reset the env.

        Args:
            seed: Seeds the physics draws (a stream of its own, apart from the env's) and
                the env. None: the draws continue the current stream (an unseeded one at
                the first reset) and the env is reset without a seed.
            options: Passed to the env's ``reset`` unchanged.
        """
        seed = check_seed(seed)
        if seed is not None or self._rng is None:
            root = np.random.SeedSequence(seed, spawn_key=(_PHYSICS_STREAM_KEY,))
            self._rng = np.random.Generator(np.random.PCG64(root))
        self._restore()
        values: dict[str, Any] = {}
        for name, (low, high) in self.ranges.items():
            target = self._targets[name]
            nominal = self._nominal[name]
            # One factor per element for the whole-array MuJoCo names, one for a scalar.
            factor = self._rng.uniform(low, high, size=np.shape(nominal))
            value = nominal * factor
            self._write(target, value)
            values[name] = float(value) if self.kind == "cartpole" else np.array(value)
        self._derive()
        self.values = values
        obs, info = self.env.reset(seed=seed, options=options)
        info["physics"] = dict(values)
        return obs, info

    def close(self) -> None:
        """Restore the nominal physics, then close the env."""
        self._restore()
        super().close()
