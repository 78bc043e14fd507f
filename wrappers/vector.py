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


class _VecLink:
    """One direction for all sub-envs: delay blocks, arrival calendar, payload ring.

    Every sub-env sends one packet per call of :meth:`tick` (sub-envs that were being
    reset are fixed up by the caller with :meth:`unsend` and :meth:`clear`), so the hot
    path is a fixed list of whole-array numpy operations, with no per-env Python.
    Delays are kept in ticks; a lost packet, or one delayed by ``horizon`` ticks or
    more, is stored as ``-inf`` and routed to a trash row of the calendar.
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
        self.samplers: list[DelaySampler | None] = [None] * n
        self.buf = np.zeros((n, block))
        self.pos = np.full(n, block, dtype=np.int64)  # == block: refill before next use
        # Calendar by arrival tick (row h is the trash row of lost packets).
        self.cal_max = np.full((horizon + 1, n), -1, dtype=np.int64)
        self.cal_cnt = np.zeros((horizon + 1, n), dtype=np.int64)
        self.scan = not fifo  # only "latest" can reorder; then keep per-send arrival ticks
        self.arr = np.full((horizon, n), -1, dtype=np.int64)
        self.sent_idx = np.zeros((horizon, n), dtype=np.int64)
        self.ring = np.zeros((horizon, n, *payload_shape), dtype=dtype)
        self.last_arrival = np.full(n, -1.0)  # fifo: arrival of the last packet (-1: none)
        self.best = np.full(n, -1, dtype=np.int64)
        # Episode counters (reordered, stale, lost), shared by both directions.
        self.reordered, self.stale, self.lost = counters
        self.cols = np.arange(n)
        self.left = 0  # draws left before some sub-env's block runs out

    def clear(self, envs: np.ndarray) -> None:
        """Forget packets in flight of the given sub-envs (indices or a bool mask)."""
        self.cal_max[:, envs] = -1
        self.cal_cnt[:, envs] = 0
        if self.scan:
            self.arr[:, envs] = -1
        self.last_arrival[envs] = -1.0
        self.best[envs] = -1

    def set_sampler(self, i: int, sampler: DelaySampler) -> None:
        self.samplers[i] = sampler
        self.pos[i] = self.block
        self.left = 0

    def unsend(self, envs: np.ndarray) -> None:
        """Give back the delay the given sub-envs just drew (they were resetting)."""
        self.pos[envs] -= 1  # only lowers positions: `left` stays a lower bound

    def _refill(self) -> None:
        for i in np.flatnonzero(self.pos >= self.block).tolist():
            sampler = self.samplers[i]
            assert sampler is not None
            rel = sampler.next(self.block) / self.step_ms
            # Lost (inf) and beyond-horizon packets become -inf: "never arrives".
            rel[rel >= self.h] = -np.inf
            self.buf[i] = rel
            self.pos[i] = 0
        self.left = self.block - int(self.pos.max())

    def tick(self, now: np.ndarray, payload: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Every sub-env sends its packet (index = ``now``) and processes tick ``now``.

        Returns (lost, delivered) bool masks; ``best`` holds the freshest index.
        """
        if self.left <= 0:
            self._refill()
        self.left -= 1
        cols = self.cols
        rel = self.buf[cols, self.pos]
        self.pos += 1
        lost = rel < 0.0
        if self.fifo:
            # A lost packet has rel = -inf: max(-inf, last) leaves last_arrival unchanged.
            arrival = np.maximum(now + rel, self.last_arrival, out=self.last_arrival)
            tick = arrival.astype(np.int64)  # floor (arrival >= -1); lost ones are trashed below
        else:
            arrival = np.maximum(now + rel, -1.0)
            tick = arrival.astype(np.int64)
        slot = tick % self.h
        np.copyto(slot, self.h, where=lost)
        self.cal_max[slot, cols] = np.maximum(self.cal_max[slot, cols], now)
        self.cal_cnt[slot, cols] += 1
        slot_now = now % self.h  # also the ring slot of the packet sent now
        self.ring[slot_now, cols] = payload
        self.lost += lost
        if self.scan:
            np.copyto(tick, -1, where=lost)
            self.arr[slot_now, cols] = tick
            self.sent_idx[slot_now, cols] = now
            here = self.arr == now
            here &= self.sent_idx < self.best
            self.reordered += here.sum(axis=0)
        # Arrivals at tick `now`.
        newest = self.cal_max[slot_now, cols]
        count = self.cal_cnt[slot_now, cols]
        self.cal_max[slot_now, cols] = -1
        self.cal_cnt[slot_now, cols] = 0
        delivered = newest > self.best
        self.stale += count
        self.stale -= delivered
        np.maximum(self.best, newest, out=self.best)
        return lost, delivered

    def payload_of_best(self, envs: np.ndarray) -> np.ndarray:
        return self.ring[self.best[envs] % self.h, self.cols[envs]]


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
        self._t = np.zeros(n, dtype=np.int64)
        self._applied = np.repeat(self._start[None], n, axis=0)
        self._obs: np.ndarray | None = None
        self._holds = self._counts[3]
        self._autoreset = np.zeros(n, dtype=bool)
        self._all = np.ones(n, dtype=bool)

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

    def _start_episodes(self, envs: np.ndarray, obs: np.ndarray) -> None:
        self._up.clear(envs)
        self._down.clear(envs)
        self._up.best[envs] = 0
        self._t[envs] = 0
        self._counts[:, envs] = 0
        self._applied[envs] = self._start
        assert self._obs is not None
        self._obs[envs] = obs[envs]

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
        self._start_episodes(self._all, obs)
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
        any_restart = bool(restarting.any())
        up, down = self._up, self._down
        t = self._t
        down_lost, down_new = down.tick(t, actions)
        if down_new.any():
            self._applied[down_new] = down.payload_of_best(down_new)
        held = ~down_new
        applied = self._applied.copy()
        obs, reward, terminated, truncated, info = self.env.step(applied)
        t1 = t + 1
        if any_restart:
            t1[restarting] = 0
        up_lost, up_new = up.tick(t1, obs)
        if up_new.any():
            self._obs[up_new] = up.payload_of_best(up_new)
        if any_restart:
            # These sub-envs were reset by the vector env (their action ignored): they sent
            # nothing, so give back the delays drawn for them and start a new episode.
            down.unsend(restarting)
            up.unsend(restarting)
            if len(self._profiles) > 1:
                for i in np.flatnonzero(restarting).tolist():
                    self._new_episode(i)
            self._start_episodes(np.flatnonzero(restarting), obs)
            keep = ~restarting
            held &= keep
            down_lost &= keep
            up_lost &= keep
        self._holds += held
        self._t = t1
        ret = self._obs.copy()
        obs_age = t1 - up.best
        action_age = t - down.best
        if any_restart:
            action_age[restarting] = 0
        self._autoreset = np.logical_or(terminated, truncated)
        mask = self._all
        counts = self._counts.copy()
        values = {
            "obs_age_steps": obs_age,
            "obs_age_ms": obs_age * self.step_ms,
            "action_age_steps": action_age,
            "action_age_ms": action_age * self.step_ms,
            "uplink_lost": up_lost,
            "downlink_lost": down_lost,
            "action_held": held,
            "applied_action": applied,
            "true_obs": obs,
            "reordered_packets": counts[0],
            "stale_packets": counts[1],
            "lost_packets": counts[2],
            "action_holds": counts[3],
        }
        for key, value in values.items():
            info[key] = value
            info["_" + key] = mask
        return ret, reward, terminated, truncated, info

    @property
    def profiles(self) -> tuple[NetworkProfile, ...]:
        """The profiles this shim draws from."""
        return self._profiles
