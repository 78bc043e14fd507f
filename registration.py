"""Every Gymnasium ID fleetgym provides, in one table.

Entry points are strings so that registering costs nothing (no torch import) and so
that ``gym.make("fleetgym:fleetgym/NetShim-v0", ...)`` works in spawned worker
processes. :func:`register_envs` is idempotent.
"""

from __future__ import annotations

import re
from typing import Any

import gymnasium as gym

#: ID -> keyword arguments of :func:`gymnasium.register`.
ENV_SPECS: dict[str, dict[str, Any]] = {
    # Part A: the network shim around any registered env (kwargs env_id, profile, ...).
    # The entry point makes the inner env with gym.make, checker and order enforcing
    # included; a second pair around the shim would check nothing more and cost every step
    # (gym.make(..., disable_env_checker=False) still adds the outer checker).
    "fleetgym/NetShim-v0": {
        "entry_point": "fleetgym.wrappers.shim_env:make_network_shim_env",
        "disable_env_checker": True,
        "order_enforce": False,
    },
    # Mode 3: an env served by `fleetgym serve-env` (kwargs address, profile, ...).
    "fleetgym/Remote-v0": {
        "entry_point": "fleetgym.wrappers.remote.client:RemoteEnv",
        "nondeterministic": True,
    },
    # Part B: one whole distributed training run as an MDP (kwargs workload, ...).
    "fleetgym/ActorScheduling-v0": {
        "entry_point": "fleetgym.meta_env.scheduling_kwargs:make_actor_scheduling_env",
        "nondeterministic": True,
    },
    "fleetgym/ActorScheduling-CartPole-v0": {
        "entry_point": "fleetgym.meta_env.scheduling_kwargs:make_actor_scheduling_env",
        "kwargs": {"workload": "CartPole-v1", "preset": "fast"},
        "nondeterministic": True,
    },
    # Modeled timing: an episode is exactly reproducible from its seed.
    "fleetgym/ActorScheduling-CartPole-Modeled-v0": {
        "entry_point": "fleetgym.meta_env.scheduling_kwargs:make_actor_scheduling_env",
        "kwargs": {"workload": "CartPole-v1", "preset": "fast", "timing": "modeled"},
    },
}


def register_envs() -> None:
    """Register every fleetgym ID with Gymnasium (safe to call more than once)."""
    for env_id, spec in ENV_SPECS.items():
        if env_id in gym.registry:
            continue
        gym.register(id=env_id, **spec)


_NAME_PART = re.compile(r"^[\w.-]+$")


def shim_env_id(env_id: str, profile: str) -> str:
    """The convenience ID :func:`register_shim_env` registers for ``env_id`` and ``profile``.

    Example:
        >>> shim_env_id("ALE/Pong-v5", "wifi-normal")
        'fleetgym/NetShim-ALE-Pong-v5-wifi-normal-v0'
    """
    name = env_id.rpartition(":")[2].replace("/", "-")
    return f"fleetgym/NetShim-{name}-{profile}-v0"


def register_shim_env(env_id: str, profile: str = "wifi-degraded", **wrapper_kwargs: Any) -> str:
    """Register ``fleetgym/NetShim-<env>-<profile>-v0``: ``env_id`` under the shim, no kwargs needed.

    For tools that make envs from an ID alone (the RL Zoo makes its evaluation env with
    the command line's ``env_kwargs`` only, and names its log folders by ID). The ID's
    spec carries the inner env's ``reward_threshold`` and ``max_episode_steps`` (the step
    limit sits outside the shim). Safe to call again with the same arguments.

    Args:
        env_id: A registered Gymnasium ID (ALE IDs need no ``import ale_py`` first).
        profile: A registered profile name (``fleetgym profiles`` lists them).
        **wrapper_kwargs: Further :class:`~fleetgym.wrappers.NetworkShimWrapper` keywords
            (``step_ms``, ``delivery``, ...), stored in the ID's spec.

    Example:
        >>> import gymnasium as gym
        >>> env_id = register_shim_env("CartPole-v1", "wifi-normal")
        >>> env = gym.make(env_id)
        >>> env_id, env.spec.reward_threshold, env.spec.max_episode_steps
        ('fleetgym/NetShim-CartPole-v1-wifi-normal-v0', 475.0, 500)

    Returns:
        The registered ID.

    Raises:
        ValueError: For a profile name or ID that cannot be part of a Gymnasium ID, or an
            ID already registered with other arguments.
        UnknownProfileError: For an unknown profile.
        gymnasium.error.NameNotFound: For an unknown ``env_id``.
    """
    from fleetgym.wrappers.profiles import get_profile
    from fleetgym.wrappers.shim_env import _ensure_registered

    for name, value in (("env_id", env_id), ("profile", profile)):
        if not isinstance(value, str) or not value:
            raise TypeError(f"{name}: expected a non-empty str, actual {value!r}")
    get_profile(profile)
    new_id = shim_env_id(env_id, profile)
    if not all(_NAME_PART.match(p) for p in new_id.split("/")):
        raise ValueError(
            f"profile: expected letters, digits, '_', '.' or '-' to form an ID, actual {new_id!r}"
        )
    _ensure_registered(env_id)
    inner = gym.spec(env_id)
    env_kwargs = {"max_episode_steps": -1} if inner.max_episode_steps is not None else {}
    kwargs = {"env_id": env_id, "profile": profile, "env_kwargs": env_kwargs, **wrapper_kwargs}
    if new_id in gym.registry:
        if gym.registry[new_id].kwargs != kwargs:
            raise ValueError(
                f"env_id: expected arguments matching the registered {new_id!r}, actual "
                f"{kwargs!r} (registered: {gym.registry[new_id].kwargs!r})"
            )
        return new_id
    gym.register(
        id=new_id,
        **ENV_SPECS["fleetgym/NetShim-v0"],
        reward_threshold=inner.reward_threshold,
        max_episode_steps=inner.max_episode_steps,
        kwargs=kwargs,
    )
    return new_id
