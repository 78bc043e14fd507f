"""NetworkShimVectorWrapper: the network shim for a whole Gymnasium ``VectorEnv`` at once.

Same control-loop model, channels, profiles and ``info`` keys as
:class:`~fleetgym.wrappers.network_shim.NetworkShimWrapper`, but the per-step work is a
handful of numpy operations over all sub-envs instead of a Python loop: delays are
pre-drawn per sub-env in blocks, in-flight packets live in per-sub-env arrival
calendars (ring buffers indexed by arrival tick), and observations/actions in ring
buffers indexed by send tick.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium import spaces
from gymnasium.vector import AutoresetMode, VectorEnv, VectorWrapper

from fleetgym.errors import UnsupportedSpaceError
from fleetgym.wrappers.channels import Channel, DelaySampler
from fleetgym.wrappers.network_shim import (
    _PERFECT,
    DELIVERY_MODES,
    ShimStreams,
    default_start_action,
    resolve_profiles,
)
from fleetgym.wrappers.profiles import NetworkProfile

__all__ = ["NetworkShimVectorWrapper"]

_ARRAY_SPACES = (spaces.Box, spaces.Discrete, spaces.MultiDiscrete, spaces.MultiBinary)
#: The per-step info keys (the scalar shim's), each with its Gymnasium "_key" mask.
_INFO_KEYS = tuple(
    (key, "_" + key)
    for key in (
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
)


#: Delay (in ticks) standing for a lost packet: far below any arrival tick.
_LOST = -(1 << 40)


class _VecLink:
    """One direction for all sub-envs: delay blocks, arrival calendar, payload ring.

    Every sub-env sends one packet per call of :meth:`tick` (sub-envs that were being
    reset are fixed up by the caller with :meth:`unsend` and :meth:`clear`), so the hot
    path is a fixed list of whole-array numpy operations, with no per-env Python.

    Time is a global tick ``g`` shared by all sub-envs (one per vector step), not each
    episode's own tick: then the packet sent now goes to the same ring column for every
    sub-env and this tick's arrivals are one column of the calendar, so those are views,
    not fancy indexing. Episode ages follow from differences of global ticks (a sub-env's
    episode starts at a known global tick). Delays are whole ticks (``floor(d / P)``;
    ``floor(i + d / P) == i + floor(d / P)`` and floor commutes with the FIFO maximum),
    a lost packet, or one delayed by ``horizon`` ticks or more, is ``_LOST`` and goes to
    the trash slot of the calendar.
    """

    def __init__(
        self,
        n: int,
        horizon: int,
        block: int,
        step_ms: float,
        fifo: bool,
        payload_shape: tuple[int, ...],
        dtype: np.dtype[Any],
        counters: tuple[np.ndarray, np.ndarray, np.ndarray],
    ) -> None:
        self.n, self.h, self.block, self.step_ms, self.fifo = n, horizon, block, step_ms, fifo
        # Ring and calendar sizes: a power of two >= horizon, so "mod" is a bit mask.
        size = 1 << max(int(horizon) - 1, 1).bit_length()
        self.size, self.mask = size, size - 1
        self.samplers: list[DelaySampler | None] = [None] * n
        self.cols = np.arange(n)
        self.kbuf = np.zeros(n * block, dtype=np.int64)  # row i: [i * block, (i + 1) * block)
        self.rowoff = self.cols * block
        self.pos = np.full(n, block, dtype=np.int64)  # == block: refill before next use
        self.flatpos = self.rowoff + self.pos
        # Calendar by arrival tick, one row per sub-env (slot `size` is the trash slot of
        # lost packets): newest global send tick arriving then, and how many arrive.
        self.cal_max = np.full((n, size + 1), -1, dtype=np.int64)
        self.cal_cnt = np.zeros((n, size + 1), dtype=np.int64)
        self.cal_off = self.cols * (size + 1)
        self.cal_max_flat = self.cal_max.reshape(-1)
        self.cal_cnt_flat = self.cal_cnt.reshape(-1)
        self.trash = size
        self.scan = not fifo  # only "latest" can reorder; then keep per-send arrival ticks
        self.arr = np.full((size, n), -1, dtype=np.int64)
        self.sent_idx = np.zeros(size, dtype=np.int64)
        # Payloads by send tick, one row per sub-env.
        self.ring = np.zeros((n, size, *payload_shape), dtype=dtype)
        self.ring_flat = self.ring.reshape(n * size, *payload_shape)
        self.ring_off = self.cols * size
        self.last = np.full(n, -1, dtype=np.int64)  # fifo: arrival of the last packet
        self.best = np.full(n, -1, dtype=np.int64)  # global send tick of the freshest
        # Episode counters (reordered, stale, lost), shared by both directions.
        self.reordered, self.stale, self.lost = counters
        self.left = 0  # draws left before some sub-env's block runs out
        # Scratch arrays reused every tick.
        self._k = np.empty(n, dtype=np.int64)
        self._a = np.empty(n, dtype=np.int64)
        self._fi = np.empty(n, dtype=np.int64)
        self._lost = np.empty(n, dtype=bool)
        self._gi = np.empty(n, dtype=np.int64)

    def clear(self, mask: np.ndarray, envs: np.ndarray) -> None:
        """Forget packets in flight of the given sub-envs (a bool mask and its indices).

        Stale calendar entries of ``cal_max`` are left: they are older than the new
        episode's ``best`` (set by the caller), so they can never count as fresher.
        """
        self.cal_cnt[envs] = 0
        if self.scan:
            self.arr[:, envs] = -1
        np.copyto(self.last, -1, where=mask)

    def set_sampler(self, i: int, sampler: DelaySampler) -> None:
        self.samplers[i] = sampler
        self.pos[i] = self.block
        self.flatpos[i] = self.rowoff[i] + self.block
        self.left = 0

    def unsend(self, mask: np.ndarray) -> None:
        """Give back the delay the sub-envs in ``mask`` just drew (they were resetting)."""
        self.pos -= mask  # only lowers positions: `left` stays a lower bound
        self.flatpos -= mask

    def _refill(self) -> None:
        block = self.block
        for i in np.flatnonzero(self.pos >= block).tolist():
            sampler = self.samplers[i]
            assert sampler is not None
            rel = sampler.next(block) / self.step_ms
            # Lost (inf) and beyond-horizon packets never arrive.
            far = rel >= self.h
            rel[far] = 0.0
            k = np.floor(rel, out=rel).astype(np.int64)
            k[far] = _LOST
            self.kbuf[i * block : (i + 1) * block] = k
            self.pos[i] = 0
            self.flatpos[i] = i * block
        self.left = block - int(self.pos.max())

    def tick(self, g: int, payload: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Every sub-env sends its packet (global tick ``g``) and processes tick ``g``.

        Returns (lost, delivered) bool masks; ``best`` holds the freshest global tick.
        """
        if self.left <= 0:
            self._refill()
        self.left -= 1
        k = self.kbuf.take(self.flatpos, out=self._k)
        self.flatpos += 1
        self.pos += 1
        lost = np.less(k, 0, out=self._lost)
        a = np.add(k, g, out=self._a)
        if self.fifo:
            # A lost packet's tick is hugely negative: the maximum leaves `last` unchanged.
            a = np.maximum(a, self.last, out=self.last)
        fi = np.bitwise_and(a, self.mask, out=self._fi)
        np.copyto(fi, self.trash, where=lost)
        fi += self.cal_off
        # Send ticks only grow, so the newest packet of a slot is the one written last.
        self.cal_max_flat[fi] = g
        self.cal_cnt_flat[fi] += 1
        r = g & self.mask
        self.ring[:, r] = payload
        self.lost += lost
        best = self.best
        if self.scan:
            arr = self.arr
            arr[r] = a
            np.copyto(arr[r], -1, where=lost)
            self.sent_idx[r] = g
            here = arr == g
            here &= self.sent_idx[:, None] < best
            self.reordered += here.sum(axis=0)
        # Arrivals at tick g: one calendar column.
        newest = self.cal_max[:, r]
        count = self.cal_cnt[:, r]
        delivered = newest > best
        self.stale += count
        self.stale -= delivered
        np.maximum(best, newest, out=best)
        newest.fill(-1)
        count.fill(0)
        return lost, delivered

    def payload_of_best(self) -> np.ndarray:
        """Every sub-env's freshest payload (valid where delivered this tick)."""
        gi = np.bitwise_and(self.best, self.mask, out=self._gi)
        gi += self.ring_off
        return self.ring_flat.take(gi, axis=0)


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

    Example:
        >>> import gymnasium as gym
        >>> envs = gym.make_vec("CartPole-v1", num_envs=4, vectorization_mode="sync")
        >>> shim = NetworkShimVectorWrapper(envs, profile="wifi-normal")
        >>> obs, info = shim.reset(seed=0)
        >>> obs, rew, term, trunc, info = shim.step(np.ones(4, dtype=np.int64))
        >>> obs.shape, info["obs_age_steps"].shape, shim.step_ms
        ((4, 4), (4,), 20.0)

    Args:
        env: The vector env (``NEXT_STEP`` autoreset, array spaces).
        profile: A profile name, a NetworkProfile, or a sequence (one drawn per sub-env
            per episode). Defaults to ``"wifi-degraded"`` unless channels are given.
        uplink: Channel for observations (instead of a profile).
        downlink: Channel for actions.
        step_ms: Control period in ms; defaults to the sub-envs' ``dt``/``tau``.
        delivery: ``"fifo"`` (default) or ``"latest"``.
        start_action: Action (of the single action space) applied before the first
            action of an episode arrives; default: the space's zero action.
        block_size: Packets pre-drawn per sub-env and direction per refill.
        max_delay_steps: Ring-buffer horizon in control periods (memory is
            ``max_delay_steps * num_envs`` observations).

    Raises:
        UnsupportedSpaceError: For non-array spaces.
        ValueError: For out-of-range arguments or another autoreset mode.
        TypeError: For arguments of the wrong type.
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
    ) -> None:
        if not isinstance(env, VectorEnv):
            raise TypeError(f"expected env as a gymnasium VectorEnv, actual {type(env).__name__}")
        super().__init__(env)
        mode = env.metadata.get("autoreset_mode", AutoresetMode.NEXT_STEP)
        if mode != AutoresetMode.NEXT_STEP:
            raise ValueError(f"expected a vector env with autoreset_mode NEXT_STEP, actual {mode}")
        for what, space in (
            ("observation", env.single_observation_space),
            ("action", env.single_action_space),
        ):
            if not isinstance(space, _ARRAY_SPACES):
                raise UnsupportedSpaceError(
                    f"expected an array {what} space (Box, Discrete, MultiDiscrete, MultiBinary), "
                    f"actual {space}; wrap each sub-env with NetworkShimWrapper in gym.make_vec instead"
                )
        if uplink is not None or downlink is not None:
            if profile is not None:
                raise ValueError(
                    "expected either profile or explicit uplink/downlink channels, actual both"
                )
            for name, ch in (("uplink", uplink), ("downlink", downlink)):
                if ch is not None and not isinstance(ch, Channel):
                    raise TypeError(
                        f"expected {name} as a fleetgym Channel, actual {type(ch).__name__}"
                    )
            self._profiles: tuple[NetworkProfile, ...] = (
                NetworkProfile(
                    "custom", uplink or _PERFECT, downlink or _PERFECT, "explicit channels"
                ),
            )
        else:
            self._profiles = resolve_profiles("wifi-degraded" if profile is None else profile)
        if step_ms is None:
            step_ms = self._infer_step_ms(env)
        if isinstance(step_ms, bool) or not isinstance(
            step_ms, (int, float, np.integer, np.floating)
        ):
            raise TypeError(f"expected step_ms as a number, actual {type(step_ms).__name__}")
        if not math.isfinite(step_ms) or step_ms <= 0:
            raise ValueError(f"expected step_ms > 0 and finite, actual {step_ms}")
        self.step_ms = float(step_ms)
        if not isinstance(delivery, str) or delivery not in DELIVERY_MODES:
            raise ValueError(f"expected delivery in {DELIVERY_MODES}, actual {delivery!r}")
        self.delivery = delivery
        for name, value, lo, hi in (
            ("block_size", block_size, 1, 1_000_000),
            ("max_delay_steps", max_delay_steps, 1, 100_000),
        ):
            if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
                raise TypeError(f"expected {name} as an int, actual {type(value).__name__}")
            if not lo <= value <= hi:
                raise ValueError(f"expected {name} in [{lo}, {hi}], actual {value}")
        single_act = env.single_action_space
        if start_action is None:
            start_action = default_start_action(single_act)
        elif not single_act.contains(start_action):
            raise ValueError(
                f"expected start_action in the action space {single_act}, actual {start_action!r}"
            )
        n = env.num_envs
        self._n = n
        fifo = delivery == "fifo"
        obs_space = env.single_observation_space
        assert obs_space.shape is not None and single_act.shape is not None
        self._start = np.asarray(start_action, dtype=single_act.dtype)
        # Episode counters in one array (cleared and copied with one call each):
        # rows reordered, stale, lost (shared by both directions) and action holds.
        self._counts = np.zeros((4, n), dtype=np.int64)
        counters = (self._counts[0], self._counts[1], self._counts[2])
        self._up = _VecLink(
            n,
            int(max_delay_steps),
            int(block_size),
            self.step_ms,
            fifo,
            obs_space.shape,
            np.dtype(obs_space.dtype),
            counters,
        )
        self._down = _VecLink(
            n,
            int(max_delay_steps),
            int(block_size),
            self.step_ms,
            fifo,
            single_act.shape,
            np.dtype(single_act.dtype),
            counters,
        )
        self._streams: list[ShimStreams | None] = [None] * n
        self.profile_names = [self._profiles[0].name] * n
        # Global tick of the next step (see _VecLink); episode ticks are offsets from it.
        self._g = 0
        self._applied = np.repeat(self._start[None], n, axis=0)
        self._obs: np.ndarray | None = None
        self._holds = self._counts[3]
        self._autoreset = np.zeros(n, dtype=bool)
        self._all = np.ones(n, dtype=bool)
        # Shapes that broadcast a per-sub-env mask over one action / observation.
        self._act_bcast = (n,) + (1,) * len(single_act.shape)
        self._obs_bcast = (n,) + (1,) * len(obs_space.shape)

    @staticmethod
    def _infer_step_ms(env: VectorEnv) -> float:
        from fleetgym.wrappers.network_shim import infer_step_ms

        base = env.unwrapped
        inferred = None
        subs = getattr(base, "envs", None)  # SyncVectorEnv
        if subs:
            inferred = infer_step_ms(subs[0])
        elif base.spec is not None:
            # AsyncVectorEnv: asking workers for a missing attribute kills them, so build one
            # throwaway sub-env from the spec instead.
            import dataclasses

            vector_keys = ("num_envs", "vectorization_mode", "vector_kwargs", "wrappers")
            kwargs = {k: v for k, v in base.spec.kwargs.items() if k not in vector_keys}
            try:
                probe = gym.make(dataclasses.replace(base.spec, kwargs=kwargs))
            except Exception:  # not rebuildable from its spec: step_ms must be given
                probe = None
            if probe is not None:
                inferred = infer_step_ms(probe)
                probe.close()
        if inferred is None:
            raise ValueError(
                "expected step_ms (the control period in ms): the sub-envs have no dt or tau "
                "attribute to infer it from"
            )
        return inferred

    def _new_episode(self, i: int) -> None:
        """Sub-env i starts an episode: maybe a new profile and fresh samplers."""
        streams = self._streams[i]
        assert streams is not None
        profile, up, down = streams.draw(self._profiles, self.step_ms)
        self.profile_names[i] = profile.name
        self._up.set_sampler(i, up)
        self._down.set_sampler(i, down)

    def _start_episodes(self, mask: np.ndarray, obs: np.ndarray, start: int) -> None:
        """The sub-envs in ``mask`` start an episode whose tick 0 is global tick ``start``."""
        envs = np.flatnonzero(mask)
        self._up.clear(mask, envs)
        self._down.clear(mask, envs)
        np.copyto(self._up.best, start, where=mask)  # the reset observation, sent at tick 0
        np.copyto(self._down.best, start - 1, where=mask)  # no action yet: "sent" at tick -1
        np.copyto(self._counts, 0, where=mask)
        np.copyto(self._applied, self._start, where=mask.reshape(self._act_bcast))
        assert self._obs is not None
        np.copyto(self._obs, obs, where=mask.reshape(self._obs_bcast))

    def reset(
        self,
        *,
        seed: int | Sequence[int | None] | None = None,
        options: dict[str, Any] | None = None,
    ) -> tuple[Any, dict[str, Any]]:
        """Reset every sub-env and its network; seeds follow Gymnasium (int s: s + i)."""
        if seed is None:
            seeds: list[int | None] = [None] * self._n
        elif isinstance(seed, (int, np.integer)) and not isinstance(seed, bool):
            seeds = [int(seed) + i for i in range(self._n)]
        elif isinstance(seed, Sequence) and len(seed) == self._n:
            seeds = list(seed)
        else:
            raise ValueError(f"expected seed as None, an int or {self._n} ints, actual {seed!r}")
        for s in seeds:
            if s is not None and (
                isinstance(s, bool) or not isinstance(s, (int, np.integer)) or s < 0
            ):
                raise ValueError(f"expected non-negative int seeds, actual {s!r}")
        if options and "reset_mask" in options:
            raise ValueError("expected a full reset: partial resets (reset_mask) are not supported")
        # Gymnasium's vector envs take a list of per-env seeds too (typed as int | None).
        obs, info = self.env.reset(seed=seed, options=options)  # type: ignore[arg-type]
        for i, s in enumerate(seeds):
            if s is not None or self._streams[i] is None:
                self._streams[i] = ShimStreams(s)
                self._new_episode(i)
            elif len(self._profiles) > 1:
                self._new_episode(i)
        self._obs = np.array(obs, copy=True)
        self._start_episodes(self._all, obs, self._g)
        self._autoreset[:] = False
        info["obs_age_steps"] = np.zeros(self._n, dtype=np.int64)
        info["_obs_age_steps"] = self._all.copy()
        info["true_obs"] = obs
        info["_true_obs"] = self._all.copy()
        info["profile"] = np.array(self.profile_names, dtype=object)
        info["_profile"] = self._all.copy()
        return obs, info

    def step(self, actions: Any) -> tuple[Any, np.ndarray, np.ndarray, np.ndarray, dict[str, Any]]:
        """One control tick for every sub-env (see the class docstring)."""
        if self._obs is None:
            raise gym.error.ResetNeeded("call reset() before step()")
        actions = np.asarray(actions)
        restarting = self._autoreset
        any_restart = np.count_nonzero(restarting) > 0
        up, down = self._up, self._down
        g = self._g
        self._g = g + 1
        # The action sent at episode tick t goes at global tick g, the observation that
        # results from it (episode tick t + 1) at global tick g + 1.
        down_lost, down_new = down.tick(g, actions)
        applied_now = self._applied
        np.copyto(applied_now, down.payload_of_best(), where=down_new.reshape(self._act_bcast))
        held = ~down_new
        applied = applied_now.copy()
        obs, reward, terminated, truncated, info = self.env.step(applied)
        up_lost, up_new = up.tick(g + 1, obs)
        obs_now = self._obs
        np.copyto(obs_now, up.payload_of_best(), where=up_new.reshape(self._obs_bcast))
        if any_restart:
            # These sub-envs were reset by the vector env (their action ignored): they sent
            # nothing, so give back the delays drawn for them and start a new episode.
            down.unsend(restarting)
            up.unsend(restarting)
            if len(self._profiles) > 1:
                for i in np.flatnonzero(restarting).tolist():
                    self._new_episode(i)
            self._start_episodes(restarting, obs, g + 1)
            keep = ~restarting
            held &= keep
            down_lost &= keep
            up_lost &= keep
        self._holds += held
        ret = obs_now.copy()
        obs_age = (g + 1) - up.best
        action_age = g - down.best
        if any_restart:
            np.copyto(action_age, 0, where=restarting)
        self._autoreset = np.logical_or(terminated, truncated)
        counts = self._counts.copy()
        step_ms = self.step_ms
        values = (
            obs_age,
            obs_age * step_ms,
            action_age,
            action_age * step_ms,
            up_lost,
            down_lost,
            held,
            applied,
            obs,
            counts[0],
            counts[1],
            counts[2],
            counts[3],
        )
        mask = self._all
        for (key, mask_key), value in zip(_INFO_KEYS, values, strict=True):
            info[key] = value
            info[mask_key] = mask
        return ret, reward, terminated, truncated, info

    @property
    def profiles(self) -> tuple[NetworkProfile, ...]:
        """The profiles this shim draws from."""
        return self._profiles
