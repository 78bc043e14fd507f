"""The fields of a :class:`~fleetgym.agents.workloads.Workload`: their ranges and checks.

:func:`check_fields` runs in the workload's ``__post_init__``: a field of the wrong type
or out of range raises there, naming the field, so a bad override never reaches a policy,
a learner or an actor process.
"""

from __future__ import annotations

import json
import math
import numbers
from typing import Any

from fleetgym.agents.workloads.spec import PREPROCESSINGS
from fleetgym.validation import quote

__all__ = [
    "COUNT_LIMITS",
    "FLOAT_RANGES",
    "KINDS",
    "MAX_WIDTH",
    "REWARD_TRANSFORMS",
    "check_fields",
]

#: Environment families a workload can belong to (``"image"``: image observations that
#: are not Atari's).
KINDS = ("classic", "mujoco", "atari", "image")
#: How the learner transforms rewards before computing advantages.
REWARD_TRANSFORMS = ("none", "sign", "scale")
#: Upper bounds of the count hyperparameters: guards against typos (10**9 epochs would
#: never finish, 10**12 rollout steps never fit in memory), far above any sensible value.
COUNT_LIMITS = {
    "rollout_steps": 10_000_000,
    "max_rounds": 10_000_000,
    "epochs": 1_000,
    "minibatch_size": 10_000_000,
}
#: Widest policy layer (as the policy's own bound).
MAX_WIDTH = 65_536
#: (field, low, high) of the float fields, all finite (``lr``, ``clip_coef`` and
#: ``max_grad_norm`` also above ``low``).
FLOAT_RANGES: tuple[tuple[str, float, float], ...] = (
    ("gamma", 0.0, 1.0),
    ("gae_lambda", 0.0, 1.0),
    ("lr", 0.0, math.inf),
    ("clip_coef", 0.0, math.inf),
    ("max_grad_norm", 0.0, math.inf),
    ("ent_coef", 0.0, math.inf),
    ("vf_coef", 0.0, math.inf),
    ("log_std_init", -20.0, 20.0),
    # A sleep per env step: at most a minute, spread log-normally with sigma <= 5.
    ("step_delay_s", 0.0, 60.0),
    ("step_delay_sigma", 0.0, 5.0),
)
_POSITIVE = frozenset({"lr", "clip_coef", "max_grad_norm"})


def check_fields(w: Any) -> None:
    """Check (and normalise: ints, a tuple of widths) the fields of workload ``w``.

    Raises:
        TypeError: A name, ID or flag of the wrong type.
        ValueError: A field out of its range (NaN and infinity included).
    """
    for name in ("name", "env_id", "entry_point", "env_kwargs_json", "preprocessing"):
        if not isinstance(getattr(w, name), str):
            raise TypeError(f"{name}: expected a str, actual {quote(getattr(w, name))}")
    for name in ("name", "env_id"):
        if not getattr(w, name).strip():
            raise ValueError(f"{name}: expected a non-empty str, actual {quote(getattr(w, name))}")
    for name, choices in (
        ("kind", KINDS),
        ("network", ("mlp", "nature_cnn")),
        ("activation", ("tanh", "relu")),
        ("reward_transform", REWARD_TRANSFORMS),
    ):
        value = getattr(w, name)
        if not isinstance(value, str) or value not in choices:
            raise ValueError(f"{name}: expected one of {choices}, actual {quote(value)}")
    if not w.preprocessing:
        object.__setattr__(w, "preprocessing", "atari" if w.kind == "atari" else "none")
    if w.preprocessing not in PREPROCESSINGS:
        raise ValueError(
            f"preprocessing: expected one of {PREPROCESSINGS}, actual {w.preprocessing!r}"
        )
    try:
        kwargs = json.loads(w.env_kwargs_json or "{}")
    except (TypeError, ValueError, RecursionError):
        kwargs = None
    if not isinstance(kwargs, dict):
        raise ValueError(
            f"env_kwargs_json: expected a JSON object, actual {quote(w.env_kwargs_json)}"
        )
    if w.max_episode_steps is not None and (
        not isinstance(w.max_episode_steps, numbers.Integral)
        or isinstance(w.max_episode_steps, bool)
        or w.max_episode_steps < 1
    ):
        raise ValueError(
            f"max_episode_steps: expected an int >= 1 or None, actual {quote(w.max_episode_steps)}"
        )
    if w.max_episode_steps is not None:
        object.__setattr__(w, "max_episode_steps", int(w.max_episode_steps))
    if not _is_real(w.target_return) or math.isnan(_as_float(w.target_return)):
        raise ValueError(
            f"target_return: expected a number (inf: none), actual {quote(w.target_return)}"
        )
    object.__setattr__(w, "target_return", _as_float(w.target_return))
    if not isinstance(w.normalize_obs, bool):
        raise TypeError(f"normalize_obs: expected a bool, actual {quote(w.normalize_obs)}")
    for name, high in COUNT_LIMITS.items():
        count = getattr(w, name)
        if (
            not isinstance(count, numbers.Integral)
            or isinstance(count, bool)
            or not 1 <= int(count) <= high
        ):
            raise ValueError(f"{name}: expected an int in [1, {high}], actual {quote(count)}")
        object.__setattr__(w, name, int(count))
    _check_hidden_sizes(w)
    for name, low, top in FLOAT_RANGES:
        value, positive = getattr(w, name), name in _POSITIVE
        if not (
            _is_real(value)
            and math.isfinite(_as_float(value))
            and (low < value if positive else low <= value)
            and value <= top
        ):
            bound = f"a finite float {'>' if positive else '>='} {low:g}"
            if math.isfinite(top):
                bound = f"a float in [{low:g}, {top:g}]"
            raise ValueError(f"{name}: expected {bound}, actual {quote(value)}")
        object.__setattr__(w, name, float(value))


def _check_hidden_sizes(w: Any) -> None:
    sizes = w.hidden_sizes
    if (
        isinstance(sizes, (str, bytes))
        or not isinstance(sizes, (tuple, list))
        or not sizes
        or any(
            isinstance(h, bool)
            or not isinstance(h, numbers.Integral)
            or not 1 <= int(h) <= MAX_WIDTH
            for h in sizes
        )
    ):
        raise ValueError(
            f"hidden_sizes: expected a non-empty tuple of ints in [1, {MAX_WIDTH}], "
            f"actual {quote(sizes)}"
        )
    # A tuple of ints: the workload stays hashable (its spaces are cached by workload).
    object.__setattr__(w, "hidden_sizes", tuple(int(h) for h in sizes))


def _as_float(value: Any) -> float:
    """``value`` as a float; an int too large for one is infinite."""
    try:
        return float(value)
    except OverflowError:
        return math.inf


def _is_real(value: Any) -> bool:
    """A real number (numpy scalars included), not a bool."""
    return isinstance(value, numbers.Real) and not isinstance(value, bool)
