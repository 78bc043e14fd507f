"""The configuration the scalar and the vector network shims share, validated once.

:class:`ShimConfig` is the frozen, validated part of a shim (which network, which control
period, which delivery order, which start action); the packets in flight live in the
wrappers. Also here, written once for both wrappers: the per-episode random streams
(:class:`ShimStreams`), the ``info`` keys a ``step`` adds (:data:`STEP_INFO_KEYS`), the
seed check and the check of every action sent (:class:`ActionCheck`).

Example:
    >>> from gymnasium import spaces
    >>> config = ShimConfig.create(spaces.Discrete(2), profile="ethernet", step_ms=20)
    >>> config.profiles[0].name, config.step_ms, config.delivery, int(config.start_action)
    ('ethernet', 20.0, 'fifo', 0)
"""

from __future__ import annotations

import math
import os
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium import spaces

from fleetgym.errors import UnsupportedSpaceError
from fleetgym.validation import check_choice, check_int, quote
from fleetgym.wrappers.action_check import _safe_contains
from fleetgym.wrappers.channel_base import Channel, DelaySampler
from fleetgym.wrappers.channels import GaussianChannel, check_step_ms
from fleetgym.wrappers.profiles import DEFAULT_PROFILE, NetworkProfile, get_profile
from fleetgym.wrappers.timeline import DEFAULT_TIMING, DEFAULT_UPLINK_SHARE, LoopTiming

__all__ = [
    "DELIVERY_MODES",
    "EPISODE_INFO_KEYS",
    "INFO_LEVELS",
    "STEP_INFO_KEYS",
    "TRAIN_INFO_KEYS",
    "ShimConfig",
    "ShimStreams",
    "check_seed",
    "control_period",
    "default_start_action",
    "infer_step_ms",
    "resolve_network",
    "resolve_profiles",
]

#: Accepted values of ``delivery``.
DELIVERY_MODES = ("fifo", "latest")
#: Keys every shim ``step`` adds to ``info``, in this order (the vector shim adds each as
#: an array with its Gymnasium ``_key`` mask).
STEP_INFO_KEYS = (
    "obs_age_steps",
    "obs_age_ms",
    "action_age_steps",
    "action_age_ms",
    "uplink_lost",
    "downlink_lost",
    "action_held",
    "applied_action",
    "true_obs",
    "reordered_packets",
    "stale_packets",
    "lost_packets",
    "action_holds",
)
#: Facts of the episode every shim ``step`` also adds to ``info`` (after
#: :data:`STEP_INFO_KEYS`), so that the final step of an episode carries them for
#: ``Monitor(info_keywords=...)`` and ``RecordEpisodeStatistics``.
EPISODE_INFO_KEYS = ("profile",)
#: How much a shim step reports in ``info``: ``"train"`` (the default) only what a training
#: run reads (:data:`TRAIN_INFO_KEYS`: the packet ages the compensation wrappers use; the
#: episode's last step also carries :data:`EPISODE_INFO_KEYS` for ``Monitor`` and
#: ``network``); ``"full"`` every key of :data:`STEP_INFO_KEYS` too (ground truth such as
#: ``true_obs`` and ``applied_action``, losses and counters: for analysis and oracles).
#: Vectorised trainers copy every ``info`` (SB3's ``DummyVecEnv`` deep-copies it each step),
#: so the keys a run does not read cost it time.
INFO_LEVELS = ("train", "full")
TRAIN_INFO_KEYS = ("obs_age_steps", "action_age_steps")
#: Largest ``block_size`` (packets pre-drawn per channel refill).
MAX_BLOCK_SIZE = 1_000_000
#: Spawn key that separates the shim's streams from the env's own seeding of the same seed.
_SHIM_STREAM_KEY = 0x5E7_5111
_PERFECT = GaussianChannel(0.0, 0.0, 0.0)


#: Frame rate of the Atari 2600 (ALE steps the console at 60 frames per second).
ATARI_FPS = 60.0


def _positive(value: Any) -> float | None:
    if isinstance(value, (int, float, np.integer, np.floating)) and not isinstance(value, bool):
        if math.isfinite(value) and value > 0:
            return float(value)
    return None


def _attr(obj: Any, name: str) -> Any:
    try:
        return getattr(obj, name, None)
    except Exception:  # a property that needs state (e.g. before reset)
        return None


def _ale_frames_per_step(env: gym.Env[Any, Any]) -> float | None:
    """Atari frames one ``step`` spans: the ALE env's frameskip times any frame-skipping
    wrapper's (Gymnasium's ``AtariPreprocessing``/``MaxAndSkipObservation``, SB3's
    ``MaxAndSkipEnv``); None if the env is not an ALE env."""
    base = env.unwrapped
    if not type(base).__module__.startswith("ale_py"):
        return None
    skip = _attr(base, "_frameskip")
    if isinstance(skip, (tuple, list)) and len(skip) == 2:
        # A stochastic frameskip is drawn uniformly from [low, high): use its mean.
        frames = (float(skip[0]) + float(skip[1]) - 1.0) / 2.0
    else:
        frames = _positive(skip) or 1.0
    layer: Any = env
    while isinstance(layer, gym.Wrapper):
        frames *= _positive(_attr(layer, "frame_skip")) or _positive(_attr(layer, "_skip")) or 1.0
        layer = layer.env
    return frames


def control_period(env: gym.Env[Any, Any]) -> tuple[float, str] | None:
    """The env's control period in ms and where it comes from, or None if it has none.

    In this order: ``env.unwrapped.dt`` or ``.tau`` (seconds, MuJoCo and classic
    control); for an ALE (Atari) env, its frameskip times any frame-skipping wrapper's
    over the console's 60 Hz (66.7 ms at frameskip 4); ``metadata["render_fps"]`` (the
    display rate, e.g. 30 Hz for MountainCar and 10 Hz for the turn-based MiniGrid).

    Args:
        env: The env, wrapped or not: ``dt``, ``tau`` and ``metadata`` are read from
            ``env.unwrapped``, frame-skipping wrappers from the layers of ``env``.

    Returns:
        ``(period_ms, source)`` with ``source`` one of ``"dt"``, ``"tau"``,
        ``"ale_frameskip"``, ``"render_fps"``; or None.

    Example:
        >>> import gymnasium as gym
        >>> period, source = control_period(gym.make("Pendulum-v1"))
        >>> round(period, 1), source
        (50.0, 'dt')
        >>> period, source = control_period(gym.make("MountainCarContinuous-v0"))
        >>> round(period, 1), source
        (33.3, 'render_fps')
    """
    base = env.unwrapped
    for attr in ("dt", "tau"):
        seconds = _positive(_attr(base, attr))
        if seconds is not None:
            return seconds * 1000.0, attr
    frames = _ale_frames_per_step(env)
    if frames is not None:
        return frames * 1000.0 / ATARI_FPS, "ale_frameskip"
    metadata = _attr(base, "metadata")
    fps = _positive(metadata.get("render_fps")) if isinstance(metadata, dict) else None
    if fps is not None:
        return 1000.0 / fps, "render_fps"
    return None


def infer_step_ms(env: gym.Env[Any, Any]) -> float | None:
    """The control period in ms by :func:`control_period`'s rules, else None.

    A period taken from ``metadata["render_fps"]`` is a display rate, not a measured
    control period (a turn-based env such as MiniGrid has none): it comes with a
    ``UserWarning`` that says so and how to set ``step_ms``.

    Args:
        env: The env, wrapped or not (see :func:`control_period`).
    """
    found = control_period(env)
    if found is None:
        return None
    period, source = found
    if source == "render_fps":
        warnings.warn(
            f"step_ms: inferred {period:.4g} ms from metadata['render_fps'] of "
            f"{type(env.unwrapped).__name__} (it has no dt, tau or ALE frameskip); pass "
            "step_ms to set the control period",
            UserWarning,
            stacklevel=4,
        )
    return period


def default_start_action(space: gym.Space[Any]) -> Any:
    """The "zero" action of a space, applied before the first action of an episode arrives.

    Box: zeros clipped into the bounds; Discrete: ``start`` (the first action);
    MultiDiscrete: ``start``; MultiBinary: zeros; Dict/Tuple: element-wise. (Gymnasium's
    ``create_empty_array`` gives plain zeros, which lie outside a Box that excludes 0 and
    outside a Discrete or MultiDiscrete with a non-zero ``start``.)

    Args:
        space: The env's action space.

    Example:
        >>> default_start_action(spaces.Box(1.0, 2.0, (2,))).tolist()
        [1.0, 1.0]

    Raises:
        UnsupportedSpaceError: For other spaces (pass ``start_action`` explicitly).
    """
    if isinstance(space, spaces.Box):
        return np.clip(np.zeros(space.shape, dtype=space.dtype), space.low, space.high).astype(
            space.dtype
        )
    if isinstance(space, spaces.Discrete):
        # The space's own integer type, as space.sample() returns.
        return space.dtype.type(space.start)
    if isinstance(space, spaces.MultiDiscrete):
        return np.array(space.start, dtype=space.dtype, copy=True)
    if isinstance(space, spaces.MultiBinary):
        return np.zeros(space.shape, dtype=space.dtype)
    if isinstance(space, spaces.Dict):
        return {key: default_start_action(sub) for key, sub in space.spaces.items()}
    if isinstance(space, spaces.Tuple):
        return tuple(default_start_action(sub) for sub in space.spaces)
    raise UnsupportedSpaceError(
        "action_space: expected a space with a default start action (Box, Discrete, "
        f"MultiDiscrete, MultiBinary, Dict, Tuple), actual {space}; pass start_action explicitly"
    )


def check_seed(seed: Any, name: str = "seed") -> int | None:
    """``seed`` as a non-negative int, or None.

    Raises:
        TypeError: If it is neither None nor an int.
        ValueError: If it is negative.
    """
    return None if seed is None else check_int(name, seed, low=0)


def shared_clock_ms(seed: int | None) -> float:
    """A vector shim's clock start in ms (uniform over about 12 days), from its first seed
    (None: fresh entropy); its sub-envs start their episodes on it (``clock_ms``)."""
    ss = np.random.SeedSequence(seed, spawn_key=(_SHIM_STREAM_KEY, 1))
    return float(np.random.Generator(np.random.PCG64(ss)).uniform(0.0, 1e9))


class ShimStreams:
    """The random streams of one shimmed env, derived from its reset seed.

    ``SeedSequence(seed, spawn_key=(key,))`` (a branch the env's own seeding of the same
    seed never uses) spawns one child for the per-episode profile draw, then two
    (uplink, downlink) for each new pair of delay samplers. The vector shim uses the same
    derivation per sub-env, so sub-env i with seed s + i replays scalar seed s + i.
    """

    __slots__ = ("root", "profile_rng")

    def __init__(self, seed: int | None) -> None:
        self.root = np.random.SeedSequence(seed, spawn_key=(_SHIM_STREAM_KEY,))
        self.profile_rng = np.random.Generator(np.random.PCG64(self.root.spawn(1)[0]))

    def draw(
        self,
        profiles: Sequence[NetworkProfile],
        step_ms: float,
        slot: int = 0,
        clock_ms: float | None = None,
    ) -> tuple[NetworkProfile, DelaySampler, DelaySampler]:
        """Pick this episode's profile (uniformly if several) and make fresh samplers
        (``slot``, ``clock_ms``: a vector shim's sub-env and clock, see
        ``Channel.paired_samplers``)."""
        profile = profiles[0]
        if len(profiles) > 1:
            profile = profiles[int(self.profile_rng.integers(len(profiles)))]
        up_ss, down_ss = self.root.spawn(2)
        up, down = profile.uplink.paired_samplers(
            profile.downlink,
            np.random.Generator(np.random.PCG64(up_ss)),
            np.random.Generator(np.random.PCG64(down_ss)),
            step_ms,
            slot,
            clock_ms,
        )
        return profile, up, down


def resolve_profiles(profile: Any) -> tuple[NetworkProfile, ...]:
    """Profiles from a name, a profile file, a NetworkProfile, or a non-empty sequence of them.

    Raises:
        UnknownProfileError: For an unknown name.
        TypeError: For anything else.
        ValueError: For an empty sequence.
    """
    if isinstance(profile, (str, os.PathLike, NetworkProfile)):
        return (get_profile(profile),)
    if isinstance(profile, Sequence) and not isinstance(profile, (bytes, bytearray)):
        if len(profile) == 0:
            raise ValueError("profile: expected at least one profile, actual an empty sequence")
        return tuple(get_profile(p) for p in profile)
    raise TypeError(
        "profile: expected a name, a NetworkProfile or a sequence of them, "
        f"actual {type(profile).__name__} {quote(profile)}"
    )


def resolve_network(
    profile: Any, uplink: Channel | None, downlink: Channel | None
) -> tuple[NetworkProfile, ...]:
    """The profiles a shim draws from: explicit channels (missing ones perfect) or
    :func:`resolve_profiles` of ``profile`` (default
    :data:`~fleetgym.wrappers.profiles.DEFAULT_PROFILE`).

    Raises:
        ValueError: For both a profile and explicit channels.
        TypeError: For a channel that is not a fleetgym :class:`Channel`.
    """
    if uplink is None and downlink is None:
        return resolve_profiles(DEFAULT_PROFILE if profile is None else profile)
    if profile is not None:
        raise ValueError(
            "profile: expected either a profile or explicit uplink/downlink channels, actual both"
        )
    for name, ch in (("uplink", uplink), ("downlink", downlink)):
        if ch is not None and not isinstance(ch, Channel):
            raise TypeError(f"{name}: expected a fleetgym Channel, actual {type(ch).__name__}")
    return (
        NetworkProfile("custom", uplink or _PERFECT, downlink or _PERFECT, "explicit channels"),
    )


@dataclass(frozen=True)
class ShimConfig:
    """What a network shim simulates, validated once: network, period, delivery, start action.

    Build it with :meth:`create` from a wrapper's arguments (it resolves profile names,
    infers the control period and picks the default start action); constructing it
    directly validates every field too.

    Args:
        profiles: The profiles drawn from (one per episode when more than one).
        step_ms: Control period in ms, in [1e-3, 1e7].
        delivery: ``"fifo"`` or ``"latest"``.
        start_action: Action applied before the first action of an episode arrives.
        block_size: Packets pre-drawn per channel refill, in [1, 1000000].
        timing: ``"loop"`` (one period for the round trip, as a real periodic loop) or
            ``"per-direction"`` (a whole period on each path); see
            :mod:`fleetgym.wrappers.timeline`.
        uplink_share: The agent's phase in (0, 1): the share of the period left for the
            observation's trip (``"loop"`` only).

    Raises:
        TypeError, ValueError: For a field of the wrong type or out of range.
    """

    profiles: tuple[NetworkProfile, ...]
    step_ms: float
    delivery: str = "fifo"
    start_action: Any = None
    block_size: int = 512
    timing: str = DEFAULT_TIMING
    uplink_share: float = DEFAULT_UPLINK_SHARE

    def __post_init__(self) -> None:
        profiles = tuple(self.profiles) if isinstance(self.profiles, Sequence) else ()
        if not profiles or not all(isinstance(p, NetworkProfile) for p in profiles):
            raise TypeError(
                f"profiles: expected a non-empty sequence of NetworkProfile, "
                f"actual {quote(self.profiles)}"
            )
        object.__setattr__(self, "profiles", profiles)
        object.__setattr__(self, "step_ms", check_step_ms(self.step_ms))
        check_choice("delivery", self.delivery, DELIVERY_MODES)
        block = check_int("block_size", self.block_size, 1, MAX_BLOCK_SIZE)
        object.__setattr__(self, "block_size", block)
        loop = LoopTiming(self.timing, self.uplink_share)
        object.__setattr__(self, "uplink_share", loop.uplink_share)

    @property
    def loop(self) -> LoopTiming:
        """The timing model: each direction's offset (see :mod:`fleetgym.wrappers.timeline`)."""
        return LoopTiming(self.timing, self.uplink_share)

    @property
    def fifo(self) -> bool:
        """Whether packets keep their order (``delivery == "fifo"``)."""
        return self.delivery == "fifo"

    @classmethod
    def create(
        cls,
        action_space: gym.Space[Any],
        *,
        profile: Any = None,
        uplink: Channel | None = None,
        downlink: Channel | None = None,
        step_ms: float | None = None,
        delivery: str = "fifo",
        start_action: Any = None,
        block_size: int = 512,
        timing: str = DEFAULT_TIMING,
        uplink_share: float = DEFAULT_UPLINK_SHARE,
        infer: Callable[[], float | None] | None = None,
    ) -> ShimConfig:
        """The configuration of a shim from a wrapper's arguments.

        Args:
            action_space: The (single) action space, for the start action.
            profile, uplink, downlink: As for the wrappers (see :func:`resolve_network`).
            step_ms: Control period in ms; None asks ``infer``.
            delivery: ``"fifo"`` or ``"latest"``.
            start_action: None for :func:`default_start_action`.
            block_size: Packets pre-drawn per channel refill.
            timing, uplink_share: The timing model (see :mod:`fleetgym.wrappers.timeline`).
            infer: Returns the env's control period in ms, or None if it has none.

        Raises:
            UnknownProfileError, TypeError, ValueError: For a bad argument.
            UnsupportedSpaceError: If the space has no default start action.
        """
        profiles = resolve_network(profile, uplink, downlink)
        LoopTiming(timing, uplink_share)  # checked before the env is asked for its period
        if step_ms is None:
            step_ms = infer() if infer is not None else None
            if step_ms is None:
                raise ValueError(
                    "step_ms: expected the control period in ms, actual None and the env has "
                    "no dt, tau, ALE frameskip or metadata['render_fps'] to infer it from; "
                    "pass step_ms (e.g. step_ms=50.0 for a 20 Hz loop)"
                )
        if start_action is None:
            start_action = default_start_action(action_space)
        elif not _safe_contains(action_space, start_action):
            raise ValueError(
                f"start_action: expected an element of the action space {action_space}, "
                f"actual {quote(start_action)}"
            )
        return cls(profiles, step_ms, delivery, start_action, block_size, timing, uplink_share)
