"""What a workload is made of, read from any Gymnasium environment.

:func:`describe_env` turns an env source -- a registered ID (``"Acrobot-v1"``, a
``"module:ID"`` form that imports ``module`` first, an ID the user registered), an
:class:`~gymnasium.envs.registration.EnvSpec`, or an importable callable returning an env
(or its import path ``"module:attr"``) -- into plain data: how to build the env in any
process (:class:`EnvSource`), which preprocessing its observations need and which family
of PPO defaults fits its spaces (:func:`infer_fields`). :func:`build_env` builds the
preprocessed env from that data. Nothing here imports torch, and nothing is pickled code:
a callable crosses process boundaries by its import path.

Spaces and what the policy sees:

* a flat ``Box`` observation as is; ``Discrete``, ``MultiDiscrete``, ``MultiBinary``,
  ``Dict``, ``Tuple`` and multi-dimensional non-image ``Box`` observations flattened with
  Gymnasium's :class:`~gymnasium.wrappers.FlattenObservation` (one-hot for discrete parts);
* ``uint8`` images of shape (H, W, 1|3) or (H, W): grayscale, resized to 84x84 and the last
  4 frames stacked (``"frames"``); ALE IDs keep ``AtariPreprocessing`` and the frame stack
  (``"atari"``);
* ``Discrete`` (any ``start``), ``MultiDiscrete`` and ``MultiBinary`` actions become one
  categorical over the joint actions (:class:`JointDiscreteAction`, at most
  :data:`MAX_JOINT_ACTIONS`); 1-D ``Box`` actions a diagonal Gaussian.
"""

from __future__ import annotations

import difflib
import importlib
import json
import math
import numbers
from collections.abc import Iterable
from dataclasses import dataclass, replace
from typing import Any

import gymnasium as gym
from gymnasium.envs.registration import EnvSpec

from fleetgym.agents.workloads.env_api import check_env_api
from fleetgym.agents.workloads.spaces import (
    JointDiscreteAction,
    atari,
    check_action_space,
    frames,
    joint_sizes,
    observation_preprocessing,
)
from fleetgym.errors import UnknownWorkloadError
from fleetgym.validation import quote

__all__ = [
    "PREPROCESSINGS",
    "EnvSource",
    "build_env",
    "describe_env",
    "infer_fields",
    "resolve_source",
]

#: Observation preprocessings: as is, flattened, image frames, Atari.
PREPROCESSINGS = ("none", "flatten", "frames", "atari")


@dataclass(frozen=True)
class EnvSource:
    """How to build an env in any process, as plain data.

    Args:
        env_id: the ID given to ``gym.make`` (``"module:ID"`` forms import ``module``), or
            the import path ``"module:attr"`` of a callable.
        entry_point: import path of the env's constructor, used where ``env_id`` is not
            registered (a worker process that never ran the user's ``gym.register``); ""
            when none is importable.
        kwargs_json: keyword arguments of the env, a JSON object.
        max_episode_steps: time limit (None: the registration's).
        reward_threshold: the spec's threshold (None where it has none).
    """

    env_id: str
    entry_point: str = ""
    kwargs_json: str = "{}"
    max_episode_steps: int | None = None
    reward_threshold: float | None = None

    @property
    def kwargs(self) -> dict[str, Any]:
        """The env's keyword arguments."""
        return dict(json.loads(self.kwargs_json or "{}"))


def _import_path(obj: Any) -> str:
    """``"module:qualname"`` of an importable object, "" if it cannot be imported back."""
    module, qualname = getattr(obj, "__module__", None), getattr(obj, "__qualname__", "")
    if not module or not qualname or "<" in qualname:
        return ""
    try:
        found: Any = importlib.import_module(module)
        for part in qualname.split("."):
            found = getattr(found, part)
    except Exception:  # not importable back (any error of the module's import)
        return ""
    return f"{module}:{qualname}" if found is obj else ""


def _load(path: str) -> Any:
    module, _, attr = path.partition(":")
    found: Any = importlib.import_module(module)
    for part in attr.split("."):
        found = getattr(found, part)
    return found


def _kwargs_json(kwargs: dict[str, Any], argument: str) -> str:
    try:
        return json.dumps(kwargs, sort_keys=True)
    except (TypeError, ValueError, RecursionError):
        raise ValueError(
            f"{argument}: expected env kwargs of plain data (JSON: numbers, strings, lists, "
            f"dicts), actual {quote(sorted(kwargs))}"
        ) from None


def _unknown(env_id: str, why: str = "", known: Iterable[str] = ()) -> UnknownWorkloadError:
    names = sorted(known)
    name = env_id.partition(":")[2] if ":" in env_id else env_id
    matches = difflib.get_close_matches(name, sorted({*gym.registry, *names}), n=5, cutoff=0.6)
    hint = f"; close matches: {', '.join(map(repr, matches))}" if matches else ""
    builtin = f"one of the built-in workloads ({', '.join(names)}) or " if names else ""
    return UnknownWorkloadError(
        f"workload: expected {builtin}a registered Gymnasium ID, "
        f"actual {quote(env_id)} (unknown workload{why}{hint}); register the env with "
        f"gymnasium.register, or pass 'module:ID' so that importing module registers it"
    )


def _ensure_ale(env_id: str) -> None:
    if env_id not in gym.registry and (env_id.startswith("ALE/") or "NoFrameskip" in env_id):
        try:
            import ale_py
        except ImportError:
            return
        gym.register_envs(ale_py)


def _registered_spec(env_id: str) -> EnvSpec | None:
    """The registered spec of ``env_id`` (importing ``module`` of ``module:ID``)."""
    name = env_id
    if ":" in env_id:
        module, _, name = env_id.partition(":")
        try:
            importlib.import_module(module)
        except Exception as error:  # ImportError, or whatever the module raised
            raise _unknown(
                env_id,
                f": module {quote(module)} cannot be imported: {type(error).__name__}: "
                f"{quote(str(error), 200)}",
            ) from None
    _ensure_ale(name)
    return gym.registry.get(name)


def _spec_source(spec: EnvSpec, env_id: str, extra: dict[str, Any]) -> EnvSource:
    entry = spec.entry_point
    entry_point = entry if isinstance(entry, str) else _import_path(entry)
    kwargs = {**spec.kwargs, **extra}
    try:
        kwargs_json = json.dumps(kwargs, sort_keys=True)
    except TypeError:
        # Not plain data: the env is then built from the registration in each process.
        kwargs_json, entry_point = _kwargs_json(extra, "env_kwargs"), ""
    return EnvSource(
        env_id=env_id,
        entry_point=entry_point,
        kwargs_json=kwargs_json,
        max_episode_steps=spec.max_episode_steps,
        reward_threshold=spec.reward_threshold,
    )


def resolve_source(
    source: Any, env_kwargs: dict[str, Any] | None = None, known: Iterable[str] = ()
) -> EnvSource:
    """The :class:`EnvSource` of an ID, an EnvSpec or a callable.

    ``known``: further valid names (the built-in workloads) for the close-match hint.

    Raises:
        UnknownWorkloadError: an ID that is not registered (lists close matches).
        ValueError: a callable that cannot be imported back by path (a lambda, a local
            function), env kwargs that are not plain data, or an
            ``env_kwargs["max_episode_steps"]`` (the time limit, honoured as
            ``gym.make``'s) that is not an int >= 1.
        TypeError: env kwargs that are not a dict of keyword names; anything else.
    """
    if env_kwargs is not None and not isinstance(env_kwargs, dict):
        raise TypeError(f"env_kwargs: expected a dict or None, actual {type(env_kwargs).__name__}")
    extra = dict(env_kwargs or {})
    bad = [key for key in extra if not isinstance(key, str) or not key.isidentifier()]
    if bad:
        raise TypeError(f"env_kwargs: expected keyword names, actual keys {quote(bad)}")
    # gym.make's time limit, not a keyword of the env: it becomes the source's own field.
    limit = _check_time_limit(extra.pop("max_episode_steps", None))
    resolved = _resolve(source, extra, known)
    return resolved if limit is None else replace(resolved, max_episode_steps=limit)


def _check_time_limit(value: Any) -> int | None:
    """``env_kwargs["max_episode_steps"]``: an int >= 1, or None (the registration's)."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < 1:
        raise ValueError(
            "env_kwargs['max_episode_steps']: expected an int >= 1 or None, "
            f"actual {type(value).__name__} {quote(value)}"
        )
    return int(value)


def _resolve(source: Any, extra: dict[str, Any], known: Iterable[str]) -> EnvSource:
    if isinstance(source, EnvSpec):
        return _spec_source(source, source.id, extra)
    if isinstance(source, str):
        spec = _registered_spec(source)
        if spec is not None:
            return _spec_source(spec, source, extra)
        if ":" in source:  # "module:attr" naming a callable rather than an ID
            try:
                target = _load(source)
            except Exception:  # no such module or attribute ("module:", ":x", ...)
                target = None
            if callable(target):
                return EnvSource(source, source, _kwargs_json(extra, "env_kwargs"))
        raise _unknown(source, known=known)
    if callable(source):
        path = _import_path(source)
        if not path:
            raise ValueError(
                "env: expected an importable callable (module-level, so that actors in other "
                f"processes can build it from 'module:attr'), actual {source!r}"
            )
        return EnvSource(path, path, _kwargs_json(extra, "env_kwargs"))
    raise TypeError(
        "workload: expected a workload name, a Gymnasium ID, an EnvSpec, a Workload or an "
        f"env-building callable, actual {type(source).__name__}"
    )


def _make_raw(source: EnvSource) -> gym.Env:
    """The env itself, without preprocessing (in this process, registered or not)."""
    kwargs = source.kwargs
    spec = None if source.env_id == source.entry_point else _registered_spec(source.env_id)
    if spec is not None:
        if source.max_episode_steps is not None:
            kwargs["max_episode_steps"] = source.max_episode_steps
        return gym.make(source.env_id, **kwargs)
    if not source.entry_point:
        raise _unknown(source.env_id, ": not registered in this process")
    # Not registered here (a worker process): the same env from its entry point.
    name = source.env_id.rpartition(":")[2] or source.env_id
    safe = "".join(c if c.isalnum() or c in "_-." else "_" for c in name)
    return gym.make(
        EnvSpec(
            id=f"fleetgym-workload/{safe}",
            entry_point=source.entry_point,
            kwargs=kwargs,
            max_episode_steps=source.max_episode_steps,
            reward_threshold=source.reward_threshold,
        )
    )


def build_env(source: EnvSource, preprocessing: str) -> gym.Env:
    """The env of ``source`` with ``preprocessing`` and the joint-action adapter."""
    if preprocessing == "atari":
        import ale_py

        gym.register_envs(ale_py)
    env = _make_raw(source)
    if preprocessing == "atari":
        env = atari(env)
    elif preprocessing == "frames":
        env = frames(env)
    elif preprocessing == "flatten":
        from gymnasium.wrappers import FlattenObservation

        env = FlattenObservation(env)
    if joint_sizes(env.action_space) is not None:
        env = JointDiscreteAction(env)
    return env


def _is_ale(source: EnvSource) -> bool:
    return "ale_py" in source.entry_point or source.env_id.rpartition(":")[2].startswith("ALE/")


#: PPO on frames (CleanRL's Atari settings): the built-in Atari workloads and inferred
#: image envs share them.
FRAME_PPO_DEFAULTS: dict[str, Any] = dict(
    rollout_steps=128,
    max_rounds=10_000,
    lr=2.5e-4,
    epochs=4,
    minibatch_size=256,
    ent_coef=0.01,
    clip_coef=0.1,
    network="nature_cnn",
    hidden_sizes=(512,),
    activation="relu",
)


def _family(preprocessing: str, discrete: bool, source: EnvSource, ale: bool) -> dict[str, Any]:
    """PPO defaults of the family (CleanRL / SB3 zoo practice)."""
    if preprocessing in ("atari", "frames"):
        return dict(
            kind="atari" if ale else "image",
            **FRAME_PPO_DEFAULTS,
            # Sign clipping is part of the Atari protocol; other image envs keep rewards.
            reward_transform="sign" if ale else "none",
        )
    kind = "mujoco" if "mujoco" in source.entry_point else "classic"
    if not discrete:
        # Continuous control: CleanRL's ppo_continuous_action (2048-sample rounds of 8
        # actors, minibatches of 64, 10 epochs, normalised observations, scaled rewards).
        return dict(
            kind=kind,
            rollout_steps=256,
            max_rounds=500,
            lr=3e-4,
            epochs=10,
            minibatch_size=64,
            normalize_obs=True,
            reward_transform="scale",
        )
    # Discrete control: CleanRL's ppo.py classic-control defaults.
    return dict(
        kind=kind,
        rollout_steps=128,
        max_rounds=300,
        lr=2.5e-4,
        epochs=4,
        minibatch_size=256,
        ent_coef=0.01,
    )


def build_error(source: EnvSource, error: Exception) -> Exception:
    """What building the env of ``source`` raised, as an error naming the workload."""
    kwargs = source.kwargs
    with_kwargs = f" with env kwargs {quote(sorted(kwargs))}" if kwargs else ""
    message = (
        f"workload: expected an env that can be built, actual {quote(source.env_id)}"
        f"{with_kwargs} (building it raised {type(error).__name__}: {quote(str(error), 300)})"
    )
    return TypeError(message) if isinstance(error, TypeError) else ValueError(message)


def infer_fields(source: EnvSource) -> dict[str, Any]:
    """Workload fields inferred from the spaces of the env of ``source``.

    Builds the env once (to read its spaces) and closes it.

    Raises:
        UnsupportedSpaceError: an observation or action space no policy fits.
        UnknownWorkloadError: an ID that is not registered.
        TypeError, ValueError: building the env raised (a ``TypeError``, e.g. a keyword
            the env does not take, stays one; anything else is a ``ValueError``); the
            message names the workload and quotes the error.
        EnvAPIError: the env does not follow the Gymnasium API (see
            :func:`check_env_api`).
    """
    ale = _is_ale(source)
    if ale:
        import ale_py

        gym.register_envs(ale_py)
    try:
        env = _make_raw(source)
    except UnknownWorkloadError:
        raise
    except Exception as error:
        raise build_error(source, error) from error
    try:
        preprocessing = "atari" if ale else observation_preprocessing(env.observation_space)
        discrete = check_action_space(env.action_space)
        check_env_api(env, source.env_id)
    finally:
        env.close()
    threshold = source.reward_threshold
    return dict(
        env_id=source.env_id,
        target_return=math.inf if threshold is None else float(threshold),
        preprocessing=preprocessing,
        entry_point=source.entry_point,
        env_kwargs_json=source.kwargs_json,
        max_episode_steps=source.max_episode_steps,
        **_family(preprocessing, discrete, source, ale),
    )


def describe_env(
    source: Any, env_kwargs: dict[str, Any] | None = None, known: Iterable[str] = ()
) -> dict[str, Any]:
    """Workload fields (``name`` included) for an ID, an EnvSpec or a callable."""
    resolved = resolve_source(source, env_kwargs, known)
    kwargs = resolved.kwargs
    if _is_ale(resolved) and kwargs.get("frameskip", 1) != 1:
        kwargs["frameskip"] = 1  # AtariPreprocessing does the skipping
        resolved = replace(resolved, kwargs_json=json.dumps(kwargs, sort_keys=True))
    return {"name": resolved.env_id, **infer_fields(resolved)}
