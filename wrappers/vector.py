"""NetworkShimVectorWrapper: the network shim for a whole Gymnasium ``VectorEnv`` at once.

Same control-loop model, channels, profiles and ``info`` keys as
:class:`~fleetgym.wrappers.network_shim.NetworkShimWrapper`, but the per-step work is a
fixed list of whole-array numpy operations over all sub-envs and both directions
instead of a Python loop: delays are pre-drawn per sub-env in blocks (as whole ticks),
and in-flight packets and their payloads live in per-sub-env arrival calendars (ring
buffers indexed by a global arrival tick, see :class:`~fleetgym.wrappers.vector_links.VectorLinks`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium import spaces
from gymnasium.vector import AutoresetMode, VectorEnv, VectorWrapper

from fleetgym.errors import UnsupportedSpaceError
from fleetgym.validation import check_choice, check_int, quote
from fleetgym.wrappers.action_check import ActionCheck
from fleetgym.wrappers.channel_base import Channel
from fleetgym.wrappers.profiles import NetworkProfile
from fleetgym.wrappers.shim_config import (
    INFO_LEVELS,
    STEP_INFO_KEYS,
    ShimConfig,
    ShimStreams,
    check_seed,
    infer_step_ms,
    shared_clock_ms,
)
from fleetgym.wrappers.vector_links import VectorLinks

__all__ = ["NetworkShimVectorWrapper"]

_ARRAY_SPACES = (spaces.Box, spaces.Discrete, spaces.MultiDiscrete, spaces.MultiBinary)
#: The per-step info keys, each with its Gymnasium "_key" mask.
_INFO_KEYS = tuple((key, "_" + key) for key in STEP_INFO_KEYS)
#: Largest ``max_delay_steps`` (the ring buffers hold that many ticks per sub-env).
MAX_DELAY_STEPS = 100_000


class NetworkShimVectorWrapper(VectorWrapper):
    """The network shim for every sub-env of a ``VectorEnv``, in batched numpy.

    Models exactly what :class:`~fleetgym.wrappers.network_shim.NetworkShimWrapper` models
    (read its docstring for the loop, delivery orders and start action), with one
    uplink and one downlink per sub-env, each with its own random stream: sub-env i
    reset with seed s draws the same packet schedule as the scalar shim reset with seed
    s (``reset(seed=s)`` seeds sub-env i with s + i, as Gymnasium does). Per step the
    cost is a fixed number of numpy operations over all sub-envs; delays are drawn per
    sub-env in blocks of ``block_size``.

    Differences from the scalar shim: observation and action spaces must be arrays
    (Box, Discrete, MultiDiscrete, MultiBinary; use ``gym.make_vec`` with the scalar
    wrapper for Dict/Tuple); a packet delayed by ``max_delay_steps`` control periods or
    more is dropped and counted as lost (``info["lost_packets"]``); the vector env must
    use Gymnasium's default ``AutoresetMode.NEXT_STEP`` (a sub-env that ended is reset
    on the next ``step``, its action ignored; the shim clears that sub-env's network
    and returns the reset observation as is). ``info`` holds the scalar shim's keys as
    arrays of shape ``(num_envs, ...)``, each with its ``_key`` mask.

    Args:
        env: The vector env (``NEXT_STEP`` autoreset, array spaces).
        profile: A profile name, a NetworkProfile, or a sequence (one drawn per sub-env
            per episode). Defaults to
            :data:`~fleetgym.wrappers.profiles.DEFAULT_PROFILE` (``"wifi-degraded"``) unless channels are given.
        uplink: Channel for observations (instead of a profile).
        downlink: Channel for actions.
        step_ms: Control period in ms; defaults to the sub-envs' ``dt``/``tau``.
        delivery: ``"fifo"`` (default) or ``"latest"``.
        start_action: Action (of the single action space) applied before the first
            action of an episode arrives; default: the space's zero action.
        block_size: Packets pre-drawn per sub-env and direction per refill.
        max_delay_steps: Ring-buffer horizon in control periods (memory is
            ``max_delay_steps * num_envs`` observations).
        info: ``"train"`` (default) or ``"full"``, as for the scalar shim: with ``"train"``
            ``info`` holds ``obs_age_steps`` and ``action_age_steps``, and ``profile`` for the
            sub-envs whose episode ended (its mask).
        timing, uplink_share: The timing model, as for the scalar shim (default
            ``"loop"`` with the agent's phase 0.5; see :mod:`fleetgym.wrappers.timeline`).

    Example:
        >>> import gymnasium as gym
        >>> envs = gym.make_vec("CartPole-v1", num_envs=4, vectorization_mode="sync")
        >>> shim = NetworkShimVectorWrapper(envs, profile="wifi-normal")
        >>> obs, info = shim.reset(seed=0)
        >>> obs, rew, term, trunc, info = shim.step(np.ones(4, dtype=np.int64))
        >>> obs.shape, info["obs_age_steps"].shape, shim.step_ms
        ((4, 4), (4,), 20.0)

    Raises:
        UnsupportedSpaceError: For non-array spaces.
        ValueError: For out-of-range arguments or another autoreset mode.
        TypeError: For arguments of the wrong type.
        InvalidActionError: From ``step``, for actions that are not a batch of ``num_envs``
            elements of the single action space (a scalar is not broadcast).
    """

    def __init__(
        self,
        env: VectorEnv,
        profile: str | NetworkProfile | Sequence[str | NetworkProfile] | None = None,
        *,
        uplink: Channel | None = None,
        downlink: Channel | None = None,
        step_ms: float | None = None,
        delivery: str = "fifo",
        start_action: Any = None,
        block_size: int = 512,
        max_delay_steps: int = 128,
        timing: str = "loop",
        uplink_share: float = 0.5,
        info: str = "train",
    ) -> None:
        if not isinstance(env, VectorEnv):
            raise TypeError(f"env: expected a gymnasium VectorEnv, actual {type(env).__name__}")
        super().__init__(env)
        mode = env.metadata.get("autoreset_mode", AutoresetMode.NEXT_STEP)
        if mode != AutoresetMode.NEXT_STEP:
            raise ValueError(f"env: expected autoreset_mode NEXT_STEP, actual {mode}")
        for what, space in (
            ("observation", env.single_observation_space),
            ("action", env.single_action_space),
        ):
            if not isinstance(space, _ARRAY_SPACES):
                raise UnsupportedSpaceError(
                    f"env: expected an array {what} space (Box, Discrete, MultiDiscrete, "
                    f"MultiBinary), actual {space}; wrap each sub-env with NetworkShimWrapper "
                    "in gym.make_vec instead"
                )
        single_act = env.single_action_space
        self.config = config = ShimConfig.create(
            single_act,
            profile=profile,
            uplink=uplink,
            downlink=downlink,
            step_ms=step_ms,
            delivery=delivery,
            start_action=start_action,
            block_size=block_size,
            timing=timing,
            uplink_share=uplink_share,
            infer=lambda: self._infer_step_ms(env),
        )
        self.timing = config.loop
        self.info_level = check_choice("info", info, INFO_LEVELS)
        self._full_info = self.info_level == "full"
        horizon = check_int("max_delay_steps", max_delay_steps, 1, MAX_DELAY_STEPS)
        self._profiles, self.step_ms, self.delivery = (
            config.profiles,
            config.step_ms,
            config.delivery,
        )
        self._check_action = ActionCheck(single_act, batch=env.num_envs)
        n = env.num_envs
        self._n = n
        obs_space = env.single_observation_space
        assert obs_space.shape is not None and single_act.shape is not None
        self._start = np.asarray(config.start_action, dtype=single_act.dtype)
        self._links = VectorLinks(
            n,
            horizon,
            config.block_size,
            self.step_ms,
            config.fifo,
            (single_act.shape, np.dtype(single_act.dtype)),
            (obs_space.shape, np.dtype(obs_space.dtype)),
            (self.timing.downlink_offset, self.timing.uplink_offset),
            count=self._full_info,
        )
        self._streams: list[ShimStreams | None] = [None] * n
        self.profile_names = [self._profiles[0].name] * n
        self._names: np.ndarray | None = None  # profile_names as an array, made when needed
        # Global tick of the next step (see VectorLinks); episode ticks are offsets from it.
        self._g = 0
        self._clock_ms = 0.0  # drawn at the first reset (shared_clock_ms)
        # Fresh samplers at every episode: to draw its profile, or to stay on the clock.
        self._fresh_streams = len(self._profiles) > 1 or any(
            p.uplink.follows_clock or p.downlink.follows_clock for p in self._profiles
        )
        self._applied = np.repeat(self._start[None], n, axis=0)
        self._obs: np.ndarray | None = None
        self._obs_items: np.ndarray | None = None
        # Sub-envs the vector env resets on the next step, once per direction (2n rows).
        self._restart2 = np.zeros(2 * n, dtype=bool)
        self._autoreset = self._restart2[:n]
        self._all = np.ones(n, dtype=bool)
        self._all2 = np.ones(2 * n, dtype=bool)
        # Shapes that broadcast a per-sub-env mask over one action / observation (None
        # for scalar ones: the mask as is).
        self._act_bcast = (n,) + (1,) * len(single_act.shape) if single_act.shape else None
        self._obs_bcast = (n,) + (1,) * len(obs_space.shape) if obs_space.shape else None
        self._any_restart = False  # some sub-env is reset by the vector env on this step

    @staticmethod
    def _infer_step_ms(env: VectorEnv) -> float | None:
        base = env.unwrapped
        inferred = None
        subs = getattr(base, "envs", None)  # SyncVectorEnv
        if subs:
            inferred = infer_step_ms(subs[0])
        elif base.spec is not None:
            # AsyncVectorEnv: asking workers for a missing attribute kills them, so build one
            # throwaway sub-env from the spec instead.
            vector_keys = ("num_envs", "vectorization_mode", "vector_kwargs", "wrappers")
            kwargs = {k: v for k, v in base.spec.kwargs.items() if k not in vector_keys}
            try:
                probe = gym.make(dataclasses.replace(base.spec, kwargs=kwargs))
            except Exception:  # not rebuildable from its spec: step_ms must be given
                probe = None
            if probe is not None:
                inferred = infer_step_ms(probe)
                probe.close()
        return inferred

    def _new_episode(self, i: int) -> None:
        """Sub-env i starts an episode: maybe a new profile and fresh samplers."""
        streams = self._streams[i]
        assert streams is not None
        clock = self._clock_ms + self._g * self.step_ms
        profile, up, down = streams.draw(self._profiles, self.step_ms, slot=i, clock_ms=clock)
        self.profile_names[i] = profile.name
        self._names = None
        self._links.set_sampler(i, down)
        self._links.set_sampler(self._n + i, up)

    def _start_episodes(
        self,
        mask: np.ndarray,
        mask2: np.ndarray,
        obs: np.ndarray,
        g: int,
        items: np.ndarray | None = None,
    ) -> None:
        """The sub-envs in ``mask`` (``mask2``: their 2n rows) start an episode at step ``g``.

        Its first action will be sent at global tick ``g``; as the reset observation
        counts as sent at tick 0 and "no action yet" as sent at tick -1, both
        directions' freshest packet is at global tick ``g - 1``. ``items``: ``obs`` as
        opaque elements, where the caller has them already.
        """
        links = self._links
        links.start(mask2, g - 1)
        act_mask = mask if self._act_bcast is None else mask.reshape(self._act_bcast)
        np.copyto(self._applied, self._start, where=act_mask)
        assert self._obs is not None
        if self._obs_items is not None and (items is not None or links.fits(obs)):
            np.copyto(self._obs_items, links.items(obs) if items is None else items, where=mask)
        else:
            bcast = self._obs_bcast
            np.copyto(self._obs, obs, where=mask if bcast is None else mask.reshape(bcast))

    def reset(
        self,
        *,
        seed: int | Sequence[int | None] | None = None,
        options: dict[str, Any] | None = None,
    ) -> tuple[Any, dict[str, Any]]:
        """Reset every sub-env and its network; seeds follow Gymnasium (int s: s + i).

        Args:
            seed: None (every sub-env's packet streams continue; fresh unseeded ones at
                the first reset), an int s (sub-env i is seeded with s + i), or a sequence
                of ``num_envs`` ints or Nones, one per sub-env.
            options: Passed to the vector env's ``reset``; a ``"reset_mask"`` (a partial
                reset) is refused with a ValueError.
        """
        if seed is None or isinstance(seed, (int, np.integer)):
            first = check_seed(seed)
            seeds = [None if first is None else first + i for i in range(self._n)]
        elif isinstance(seed, Sequence) and not isinstance(seed, (str, bytes)):
            if len(seed) != self._n:
                raise ValueError(
                    f"seed: expected None, an int or {self._n} ints, actual {quote(seed)}"
                )
            seeds = [check_seed(s, f"seed[{i}]") for i, s in enumerate(seed)]
        else:
            raise TypeError(f"seed: expected None, an int or {self._n} ints, actual {quote(seed)}")
        if options and "reset_mask" in options:
            raise ValueError("options: expected a full reset, actual a reset_mask (not supported)")
        # Gymnasium's vector envs take a list of per-env seeds too (typed as int | None).
        obs, info = self.env.reset(seed=seed, options=options)  # type: ignore[arg-type]
        if seeds[0] is not None or self._streams[0] is None:
            # The clock the sub-envs share (a simulated cell: the same instant per tick).
            self._clock_ms = shared_clock_ms(seeds[0])
        for i, s in enumerate(seeds):
            if s is not None or self._streams[i] is None:
                self._streams[i] = ShimStreams(s)
                self._new_episode(i)
            elif self._fresh_streams:
                self._new_episode(i)
        self._obs = np.array(obs, copy=True)
        # The same memory as opaque elements, when its dtype and shape allow (faster copies).
        links = self._links
        fits = links.obs_item is not None and links.fits(self._obs)
        self._obs_items = links.items(self._obs) if fits else None
        self._start_episodes(self._all, self._all2, obs, self._g)
        self._restart2[:] = False
        self._any_restart = False
        info["obs_age_steps"] = np.zeros(self._n, dtype=np.int64)
        info["_obs_age_steps"] = self._all.copy()
        if self._full_info:
            info["true_obs"] = obs
            info["_true_obs"] = self._all.copy()
        info["profile"] = np.array(self.profile_names, dtype=object)
        info["_profile"] = self._all.copy()
        return obs, info

    def step(self, actions: Any) -> tuple[Any, np.ndarray, np.ndarray, np.ndarray, dict[str, Any]]:
        """One control tick for every sub-env (see the class docstring).

        Args:
            actions: A batch of ``num_envs`` actions, each an element of the single action
                space (a scalar is not broadcast). A sub-env being autoreset this step
                ignores its action, as Gymnasium's ``NEXT_STEP`` mode does.
        """
        if self._obs is None:
            raise gym.error.ResetNeeded("call reset() before step()")
        g = self._g
        actions = np.asarray(actions)
        self._check_action(actions, g)
        n = self._n
        links = self._links
        full = self._full_info
        self._g = g + 1
        # Both directions' deliveries for this tick (they do not depend on the payloads).
        lost, delivered = links.tick(g)
        down_new = delivered[:n]
        np.copyto(
            self._applied,
            links.store_actions(actions),
            where=down_new if self._act_bcast is None else down_new.reshape(self._act_bcast),
        )
        applied = self._applied.copy()
        obs, reward, terminated, truncated, info = self.env.step(applied)
        up_new = delivered[n:]
        items = links.store_observations(obs)
        if self._obs_items is not None:
            np.copyto(self._obs_items, links.arrived_items(), where=up_new)
        else:
            bcast = self._obs_bcast
            where = up_new if bcast is None else up_new.reshape(bcast)
            np.copyto(self._obs, links.arrived_observations(), where=where)
        if full:
            held = ~down_new
        if self._any_restart:
            # These sub-envs were reset by the vector env (their action ignored): they sent
            # nothing, so give back the delays drawn for them and start a new episode.
            restarting, restart2 = self._autoreset, self._restart2
            links.unsend(restart2)
            if self._fresh_streams:
                for i in np.flatnonzero(restarting).tolist():
                    self._new_episode(i)
            self._start_episodes(restarting, restart2, obs, g + 1, items)
            if full:
                keep = ~restart2
                held &= keep[:n]
                lost &= keep
        if full:
            links.holds += held
        ret = self._obs.copy()
        ages = links.now - links.best  # action ages, then observation ages
        ended = np.logical_or(terminated, truncated, out=self._autoreset)
        self._restart2[n:] = ended
        self._any_restart = any_ended = bool(np.count_nonzero(ended))
        mask = self._all
        if not full:
            info["obs_age_steps"] = ages[n:]
            info["_obs_age_steps"] = mask
            info["action_age_steps"] = ages[:n]
            info["_action_age_steps"] = mask
            if any_ended:  # the episodes that ended: what Monitor reads there
                info["profile"] = self._profile_array()
                info["_profile"] = ended.copy()
            return ret, reward, terminated, truncated, info
        ages_ms = ages * self.step_ms
        counts = links.counts
        both = counts[:, :n] + counts[:, n:]  # reordered, stale, lost, holds
        values = (
            ages[n:],
            ages_ms[n:],
            ages[:n],
            ages_ms[:n],
            lost[n:],
            lost[:n],
            held,
            applied,
            obs,
            both[0],
            both[1],
            both[2],
            both[3],
        )
        for (key, mask_key), value in zip(_INFO_KEYS, values, strict=True):
            info[key] = value
            info[mask_key] = mask
        # This tick's episode of each sub-env (a restarted one's new draw).
        info["profile"] = self._profile_array()
        info["_profile"] = mask
        return ret, reward, terminated, truncated, info

    def _profile_array(self) -> np.ndarray:
        """``profile_names`` as a new object array (from a copy kept until a name changes)."""
        if self._names is None:
            self._names = np.array(self.profile_names, dtype=object)
        return self._names.copy()

    @property
    def profiles(self) -> tuple[NetworkProfile, ...]:
        """The profiles this shim draws from."""
        return self._profiles
