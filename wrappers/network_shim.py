"""NetworkShimWrapper: a simulated network between an agent and its environment.

The control-loop model (virtual time, one tick per ``step``) is documented on
:class:`NetworkShimWrapper`; ``traces/README.md`` documents trace files and
:mod:`fleetgym.wrappers.channels` the channel models.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, SupportsFloat

import gymnasium as gym
import numpy as np
from gymnasium import spaces

from fleetgym.errors import UnknownProfileError
from fleetgym.validation import check_bool, check_choice
from fleetgym.wrappers.action_check import ActionCheck
from fleetgym.wrappers.channel_base import Channel
from fleetgym.wrappers.links import FifoLink, PacketLink, always_on_time
from fleetgym.wrappers.links import copy_tree as _copy_tree
from fleetgym.wrappers.playout import ArrivalLink, Playout
from fleetgym.wrappers.playout_end import PlayoutEnd
from fleetgym.wrappers.profiles import NetworkProfile, get_profile
from fleetgym.wrappers.shim_config import (
    INFO_LEVELS,
    ShimConfig,
    ShimStreams,
    check_seed,
    infer_step_ms,
)
from fleetgym.wrappers.timeline import loop_ages

__all__ = ["NetworkShimWrapper"]


def _stable_profile(profile: Any) -> Any:
    """``profile`` in a form that survives ``EnvSpec.to_json``/``from_json`` unchanged.

    A sequence becomes a list (JSON has no tuples); a NetworkProfile registered under its
    own name becomes that name. An unregistered NetworkProfile stays an object: ``gym.make
    (env.spec)`` rebuilds it, JSON cannot hold it (register it with ``register_profile``).
    """
    if isinstance(profile, NetworkProfile):
        try:
            return profile.name if get_profile(profile.name) == profile else profile
        except UnknownProfileError:
            return profile
    if isinstance(profile, Sequence) and not isinstance(profile, (str, bytes, bytearray)):
        return [_stable_profile(p) for p in profile]
    return profile


#: The entry point of ``fleetgym/NetShim-v0`` (``fleetgym.registration``).
_ENTRY_POINT = "fleetgym.wrappers.shim_env:make_network_shim_env"

#: Action types that skip the action check's call when in a Discrete space's range.
_INT_TYPES = frozenset((int, np.int64))
#: Discrete spaces up to this size keep their valid ints as a set (else a range test).
_INT_SET_MAX = 1 << 12
_ndarray = np.ndarray


class _IntRange:
    """``lo <= x < hi`` as a container (a large Discrete space's valid ints)."""

    __slots__ = ("lo", "hi")

    def __init__(self, lo: int, hi: int) -> None:
        self.lo, self.hi = lo, hi

    def __contains__(self, x: Any) -> bool:
        return bool(self.lo <= x < self.hi)


class NetworkShimWrapper(
    gym.Wrapper[Any, Any, Any, Any],
    gym.utils.RecordConstructorArgs,
):
    """A simulated network between the agent and the env, on both paths, in virtual time.

    Models a remote periodic controller: observations travel to the agent on the
    **uplink**, actions travel to the env on the **downlink**; each packet is lost or
    delayed by its channel (see :mod:`fleetgym.wrappers.channels`). Time is virtual: one
    ``step`` is one control tick of ``step_ms`` milliseconds, so the shim costs
    microseconds per step, not the simulated delay.

    ``step(a_t)`` sends ``a_t``; the env applies the freshest action that has arrived by its
    own step (else it holds the last one applied; before the first arrival of an episode,
    ``start_action``), and ``step`` returns the freshest observation that has arrived by the
    agent's next tick (else the last one again, as a fresh copy). Reward, terminated and
    truncated are the env's own for this tick. Under the default ``timing="loop"``, with
    P = ``step_ms`` and s = ``uplink_share``, an action is on time when its delay
    d < (1 - s)·P and an observation when u < s·P (the round trip shares one period, as in
    a real periodic loop: :mod:`fleetgym.wrappers.timeline`); a packet k periods late is
    used k ticks later, and ``info`` reports the ages (``obs_age_steps``,
    ``action_age_steps``). ``reset`` returns
    the env's initial observation as is (age 0) and clears every packet in flight; its
    ``seed`` also seeds the channels, apart from the env's own generator. Every action is
    checked against the action space when it is sent, so an invalid one fails at once,
    naming the step.

    The timeline step by step, the delivery orders, the ``info`` keys of each level and
    the seeding rules are explained in ``docs/explanation/network-shim.md``.

    Args:
        env: The env to wrap (any observation and action space).
        profile: A profile name (``fleetgym profiles`` lists them), a
            :class:`~fleetgym.wrappers.profiles.NetworkProfile`, or a sequence of either
            (one drawn per episode). Defaults to
            :data:`~fleetgym.wrappers.profiles.DEFAULT_PROFILE` (``"wifi-degraded"``) unless ``uplink``
            or ``downlink`` is given.
        uplink: Channel for observations (instead of a profile; the other direction
            defaults to a perfect channel).
        downlink: Channel for actions.
        step_ms: Control period in ms; inferred when None, in this order: the env's
            ``dt`` or ``tau``; an ALE env's frameskip over 60 Hz (66.7 ms at frameskip 4);
            ``metadata["render_fps"]`` with a warning (MiniGrid: 100 ms); else an error.
            See :func:`~fleetgym.wrappers.shim_config.control_period`.
        delivery: ``"fifo"`` (default: a packet never overtakes the one sent before it, as
            on one real link) or ``"latest"`` (independent packets: jitter reorders them,
            and an older packet arriving after a newer one is discarded).
        start_action: Action applied before the first action of an episode arrives;
            None (default): the space's zero action
            (:func:`~fleetgym.wrappers.default_start_action`; for ``Discrete``, action
            ``start``, e.g. CartPole's "push left").
        copy_observations: Copy each observation before it is queued; needed only for
            envs that reuse one observation buffer across steps.
        block_size: Packets pre-drawn per channel refill (a speed knob; changing it
            changes which random numbers go to which packet).
        timing: ``"loop"`` (default: one period for the round trip, as a real periodic
            loop and Mode 3) or ``"per-direction"`` (a whole period on each path).
        info: ``"train"`` (default: each step adds ``obs_age_steps`` and
            ``action_age_steps``, an episode's last step ``profile`` and ``network``,
            :meth:`network_stats`) or ``"full"`` (every key, for analysis and oracles: ages
            in ms, losses, the applied action, ``true_obs``, counters); see
            :data:`~fleetgym.wrappers.shim_config.INFO_LEVELS`.
        uplink_share: The agent's phase in (0, 1) (default 0.5): the env steps
            ``(1 - uplink_share) * step_ms`` after the agent's tick, leaving
            ``uplink_share * step_ms`` for the observation's trip; the remote client's
            parameter of the same name (``"loop"`` only).
        playout: A :class:`~fleetgym.wrappers.Playout`: ``step`` then takes
            action packets (:class:`~fleetgym.wrappers.ActionPacket`: scheduled, chunked actions)
            and the env side applies each tick's action from a playout buffer
            (:mod:`fleetgym.wrappers.playout`: the packet format, the clock, the start and
            underrun rules; ``info`` adds ``action_source``). ``start_action`` is then unused.
            :class:`~fleetgym.wrappers.ScheduledChunks` makes the packets from any
            policy.

    Example:
        >>> import gymnasium as gym
        >>> env = NetworkShimWrapper(gym.make("CartPole-v1"), profile="wifi-normal")
        >>> obs, info = env.reset(seed=0)
        >>> obs, reward, terminated, truncated, info = env.step(1)
        >>> env.step_ms, obs.shape, sorted(k for k in info if k.endswith("_steps"))
        (20.0, (4,), ['action_age_steps', 'obs_age_steps'])

    Raises:
        TypeError, ValueError, UnknownProfileError, UnsupportedSpaceError: For a bad
            argument (see :meth:`ShimConfig.create <fleetgym.wrappers.shim_config.ShimConfig.create>`).
        InvalidActionError: From ``step``, for an action outside the action space.
    """

    def __init__(
        self,
        env: gym.Env[Any, Any],
        profile: str | NetworkProfile | Sequence[str | NetworkProfile] | None = None,
        *,
        uplink: Channel | None = None,
        downlink: Channel | None = None,
        step_ms: float | None = None,
        delivery: str = "fifo",
        start_action: Any = None,
        copy_observations: bool = False,
        block_size: int = 512,
        timing: str = "loop",
        uplink_share: float = 0.5,
        info: str = "train",
        playout: Playout | None = None,
    ) -> None:
        gym.utils.RecordConstructorArgs.__init__(
            self,
            profile=_stable_profile(profile),
            uplink=uplink,
            downlink=downlink,
            step_ms=step_ms,
            delivery=delivery,
            start_action=start_action,
            copy_observations=copy_observations,
            block_size=block_size,
            timing=timing,
            uplink_share=uplink_share,
            info=info,
            playout=playout,
        )
        if not isinstance(env, gym.Env):
            raise TypeError(f"env: expected a gymnasium.Env, actual {type(env).__name__}")
        gym.Wrapper.__init__(self, env)
        self.config = ShimConfig.create(
            env.action_space,
            profile=profile,
            uplink=uplink,
            downlink=downlink,
            step_ms=step_ms,
            delivery=delivery,
            start_action=start_action,
            block_size=block_size,
            timing=timing,
            uplink_share=uplink_share,
            infer=lambda: infer_step_ms(env),
        )
        self.timing = self.config.loop
        self._copy = check_bool("copy_observations", copy_observations)
        self.info_level = check_choice("info", info, INFO_LEVELS)
        self._full_info = self.info_level == "full"
        self._profiles, self.step_ms = self.config.profiles, self.config.step_ms
        self.delivery, self._start_action = self.config.delivery, self.config.start_action
        self._check_action = ActionCheck(env.action_space)
        # A Discrete space's valid ints are [lo, hi); otherwise none (every action checked).
        # For an int or np.int64, membership is the range test (np.int64 hashes as int).
        lo, hi = self._check_action.int_range or (0, 0)
        self._valid_ints: Any = (
            frozenset(range(lo, hi)) if hi - lo <= _INT_SET_MAX else _IntRange(lo, hi)
        )
        self._streams: ShimStreams | None = None
        # Integer actions are immutable: no copy needed when one is held.
        self._copy_actions = not isinstance(env.action_space, spaces.Discrete)
        self.profile: NetworkProfile = self._profiles[0]
        self._profile_name = self.profile.name
        # fifo (the default): FifoLink, ticked inline by step(); latest, or fifo with
        # copy_observations: PacketLink, ticked by _step_links.
        self._fifo_links = self.config.fifo and not self._copy and playout is None
        # A playout buffer: step() takes packets (PlayoutEnd: step_fifo on FifoLinks in
        # fifo order, else step on an ArrivalLink; never the paths without one).
        self._playout = (
            None if playout is None else PlayoutEnd(playout, env.action_space, self._check_action)
        )
        self._fifo_playout = playout is not None and self.config.fifo and not self._copy
        if self._playout is not None:
            self._playout.full = self._full_info
        self._up: Any = None
        self._down: Any = None
        self._k = 0  # position of the next draw in the FifoLinks' blocks (both in step)
        self._on_time = False  # both links always on time (see step)
        self._fast = False  # FifoLinks, not always on time: step()'s first path
        self._fast_playout = False  # a playout buffer on FifoLinks, after the first reset
        self._several_profiles = len(self._profiles) > 1
        self._t = 0
        self._holds = 0
        # Set by make_network_shim_env: the env below was built by the entry point itself,
        # and the facts of the inner env's own spec that gym.make overwrites.
        self._inner_env_from_entry_point = False
        self._inner_reward_threshold: float | None = None
        self._inner_max_episode_steps: int | None = None

    @property
    def spec(self) -> gym.envs.registration.EnvSpec | None:  # type: ignore[override]
        """The env's spec with this wrapper appended (see ``gym.Wrapper.spec``).

        Under ``fleetgym/NetShim-v0`` the spec carries the inner env's ``reward_threshold``
        and ``max_episode_steps`` (CartPole-v1: 475 and 500), so tools that read them see
        them. ``gym.make(env.spec)`` then puts the step limit outside the shim, and the
        spec's ``env_kwargs`` hold ``max_episode_steps=-1`` (Gymnasium's "no limit") so the
        rebuilt inner env does not get a second one. Its ``disable_env_checker`` and
        ``order_enforce`` are those of the layers ``gym.make`` put around the shim (none by
        default; the inner env has its own), so the rebuilt stack is the same.
        """
        if self._cached_spec is not None:
            return self._cached_spec
        spec = super().spec
        if spec is not None and self._inner_env_from_entry_point:
            # super().spec is this wrapper's own deep copy: safe to edit.
            if spec.entry_point == _ENTRY_POINT:
                # As gym.make left them for the entry point's env, before the inner env's
                # own checker and order enforcing (below the shim) set them.
                spec.disable_env_checker, spec.order_enforce = True, False
            kwargs = dict(spec.kwargs)
            if "profile" in kwargs:
                kwargs["profile"] = _stable_profile(kwargs["profile"])
            if spec.reward_threshold is None:
                spec.reward_threshold = self._inner_reward_threshold
            limit = self._inner_max_episode_steps
            spec.max_episode_steps = limit
            if limit is not None:
                kwargs["env_kwargs"] = {**(kwargs.get("env_kwargs") or {}), "max_episode_steps": -1}
            spec.kwargs = kwargs
        return spec

    # -- randomness -------------------------------------------------------------------
    def _seed(self, seed: int | None) -> None:
        self._streams = ShimStreams(seed)

    def _new_links(self) -> None:
        assert self._streams is not None  # set by _seed first
        self.profile, up, down = self._streams.draw(self._profiles, self.step_ms)
        self._profile_name = self.profile.name
        config = self.config
        step_ms, block, fifo = self.step_ms, config.block_size, config.fifo
        up_offset, down_offset = self.timing.uplink_offset, self.timing.downlink_offset
        if self._fifo_links or self._fifo_playout:
            self._up = FifoLink(up, step_ms, block, up_offset)
            self._down = FifoLink(down, step_ms, block, down_offset)
            self._k = block  # the first step draws the first blocks
            if self._playout is not None:
                self._playout.attach(self._up, self._down, block)
                self._on_time = self._fast = False
                self._fast_playout = True
                return
        else:
            self._up = PacketLink(up, step_ms, block, fifo, up_offset)
            if self._playout is None:
                self._down = PacketLink(down, step_ms, block, fifo, down_offset)
            else:
                self._down = ArrivalLink(down, step_ms, block, fifo, down_offset)
                self._on_time = self._fast = False
                return
        self._on_time = always_on_time(self.profile.uplink, step_ms, up_offset) and always_on_time(
            self.profile.downlink, step_ms, down_offset
        )
        self._fast = self._fifo_links and not self._on_time

    # -- gym API ----------------------------------------------------------------------
    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[Any, dict[str, Any]]:
        """Reset the env and the network (every queue cleared); see the class docstring.

        Args:
            seed: Seeds the env and the channels' delay streams (the same seed, the same
                packet schedule). None: the streams continue (fresh unseeded ones at the
                first reset) and the env is reset without a seed.
            options: Passed to the env's ``reset`` unchanged.
        """
        if seed is not None:
            seed = check_seed(seed)
        obs, info = self.env.reset(seed=seed, options=options)
        if seed is not None or self._streams is None:
            self._seed(seed)
            self._new_links()
        elif self._several_profiles:
            self._new_links()
        up, down = self._up, self._down
        assert up is not None and down is not None
        # The action in use (the freshest arrived, held until a newer one arrives) is the
        # downlink's freshest payload; before the first arrival, the start action.
        up.start(0, _copy_tree(obs) if self._copy else obs)
        if self._playout is None or self._fifo_playout:
            down.start(-1, self._start_action)
        else:
            down.start()
        if self._playout is not None:
            self._playout.start(obs)
        self._t = 0
        self._holds = 0
        info["obs_age_steps"] = 0
        if self._full_info:
            info["obs_age_ms"] = 0.0
            info["true_obs"] = obs
        info["profile"] = self._profile_name
        return obs, info

    def step(self, action: Any) -> tuple[Any, SupportsFloat, bool, bool, dict[str, Any]]:
        """One control tick: send the action, apply the freshest arrived, return the freshest obs.

        Args:
            action: An element of the env's action space, checked when sent (an invalid
                one raises InvalidActionError naming the step); with a ``playout``, an
                :class:`~fleetgym.wrappers.ActionPacket` instead.
        """
        if not self._fast:
            if self._fast_playout:  # a playout buffer on FifoLinks (PlayoutEnd.step_fifo)
                t = self._t
                end = self._playout
                ret, reward, terminated, truncated, info = end.step_fifo(self.env, t, action)  # type: ignore[union-attr]
                self._t = t + 1
                if self._full_info or terminated or truncated:
                    self._playout_info(info, terminated or truncated)
                return ret, reward, terminated, truncated, info
            if not self._on_time:  # before the first reset, or PacketLinks
                return self._step_links(action)
            t = self._t
            if type(action) not in _INT_TYPES or action not in self._valid_ints:
                self._check_action(action, t)
            # Both links deliver every packet at its own tick (always_on_time: e.g.
            # `perfect`): nothing is ever in flight, lost or held, both ages are 0. Their
            # draws are constants, so skipping the links changes no other number.
            obs, reward, terminated, truncated, info = self.env.step(action)
            self._t = t + 1
            ret = _copy_tree(obs) if self._copy else obs
            if self._full_info:
                info = self._full(info, 0, 0, 2, 2, action, obs, terminated or truncated)
                return ret, reward, terminated, truncated, info
            info["obs_age_steps"] = 0
            info["action_age_steps"] = 0
            if terminated or truncated:  # what Monitor(info_keywords=...) reads, at the end
                info["profile"] = self._profile_name
                info["network"] = self.network_stats()
            return ret, reward, terminated, truncated, info
        t = self._t
        # The common case (a valid int action, or the numpy int a vectorised trainer such as
        # SB3's DummyVecEnv hands each env) costs no call.
        if type(action) not in _INT_TYPES or action not in self._valid_ints:
            self._check_action(action, t)
        down = self._down
        up = self._up
        k = self._k
        try:
            late_down = down.late[k]
            late_up = up.late[k]
        except IndexError:  # both blocks used up (each link draws one packet a step)
            down.refill(t)
            up.refill(t)
            k = 0
            late_down = down.late[0]
            late_up = up.late[0]
        self._k = k + 1
        # FifoLink.tick inlined, for the downlink and (after the env's step) the uplink:
        # send the packet (lateness None: lost, or due at a tick that needs the exact float
        # sum), then take the newest packet due at this tick, if any.
        due = down.due
        if late_down is not None:
            due_at = t + late_down
            if due_at > down.last:
                down.last = due_at
                due[due_at] = (t, action, down.overtaken)
            else:  # it joins the tick the previous packet is due at
                down.overtaken = n = down.overtaken + 1
                due[down.last] = (t, action, n)
        else:
            down.send_special(k, t, action)
        arrived = due.pop(t, None)
        if arrived is None:
            self._holds += 1
            applied = down.best
        else:
            down.best = applied = arrived
        obs, reward, terminated, truncated, info = self.env.step(applied[1])
        t1 = t + 1
        self._t = t1
        due = up.due
        if late_up is not None:
            due_at = t1 + late_up
            if due_at > up.last:
                up.last = due_at
                due[due_at] = (t1, obs, up.overtaken)
            else:
                up.overtaken = n = up.overtaken + 1
                due[up.last] = (t1, obs, n)
        else:
            up.send_special(k, t1, obs)
        fresh = due.pop(t1, None)
        if fresh is None:
            # Hand out a repeated observation as a new object: agents (and Gymnasium's
            # checker) assume successive observations do not share memory.
            used = up.best
            ret = used[1]
            ret = ret.copy() if type(ret) is _ndarray else _copy_tree(ret)
        else:
            up.best = used = fresh
            ret = fresh[1]
        if self._full_info:
            # The link codes of FifoLink.tick: bit 0 lost, bit 1 a newer packet arrived.
            up_code = (fresh is not None) * 2 + (late_up is None and up.lost_at(k))
            down_code = (arrived is not None) * 2 + (late_down is None and down.lost_at(k))
            info = self._full(
                info,
                t1 - used[0],
                t - applied[0],
                up_code,
                down_code,
                applied[1],
                obs,
                terminated or truncated,
                used[2] + applied[2],  # the stale counts (FifoLink.stale)
            )
            return ret, reward, terminated, truncated, info
        info["obs_age_steps"] = t1 - used[0]  # timeline.loop_ages, inlined
        info["action_age_steps"] = t - applied[0]
        if terminated or truncated:  # what Monitor(info_keywords=...) reads, at the end
            info["profile"] = self._profile_name
            info["network"] = self.network_stats()
        return ret, reward, terminated, truncated, info

    def _step_links(self, action: Any) -> tuple[Any, SupportsFloat, bool, bool, dict[str, Any]]:
        """:meth:`step` on PacketLinks (``delivery="latest"``, or ``copy_observations``),
        and before the first reset."""
        down = self._down
        if down is None:
            raise gym.error.ResetNeeded("call reset() before step()")
        if self._playout is not None:
            return self._step_playout(action)
        t = self._t
        if type(action) not in _INT_TYPES or action not in self._valid_ints:
            self._check_action(action, t)
        up = self._up
        assert up is not None  # set with the downlink
        down_code = down.tick(t, action)
        if down_code < 2:
            self._holds += 1
        applied = down.best_payload
        obs, reward, terminated, truncated, info = self.env.step(applied)
        t1 = t + 1
        self._t = t1
        up_code = up.tick(t1, _copy_tree(obs) if self._copy else obs)
        ret = up.best_payload
        if up_code < 2:
            ret = ret.copy() if type(ret) is np.ndarray else _copy_tree(ret)
        obs_age, action_age = loop_ages(t, up.best_idx, down.best_idx)
        if self._full_info:
            info = self._full(
                info, obs_age, action_age, up_code, down_code, applied, obs, terminated or truncated
            )
            return ret, reward, terminated, truncated, info
        info["obs_age_steps"] = obs_age
        info["action_age_steps"] = action_age
        if terminated or truncated:  # what Monitor(info_keywords=...) reads, at the end
            info["profile"] = self._profile_name
            info["network"] = self.network_stats()
        return ret, reward, terminated, truncated, info

    def _step_playout(self, packet: Any) -> tuple[Any, SupportsFloat, bool, bool, dict[str, Any]]:
        """:meth:`step` with a playout buffer: ``packet`` is an ActionPacket."""
        end = self._playout
        assert end is not None
        t = self._t
        if self._fifo_playout:
            ret, reward, terminated, truncated, info = end.step_fifo(self.env, t, packet)
        else:
            ret, reward, terminated, truncated, info = end.step(
                self.env, t, packet, self._down, self._up
            )
        self._t = t + 1
        if self._full_info or terminated or truncated:
            self._playout_info(info, terminated or truncated)
        return ret, reward, terminated, truncated, info

    def _playout_info(self, info: dict[str, Any], ended: bool) -> None:
        """The rest of a playout tick's ``info``: every key of ``info="full"``, and at an
        episode's end the profile and the network's counters."""
        end = self._playout
        assert end is not None
        if self._full_info:
            up, down = self._up, self._down
            step_ms = self.step_ms
            info.update(
                obs_age_ms=info["obs_age_steps"] * step_ms,
                action_age_ms=info["action_age_steps"] * step_ms,
                action_held=info["action_source"] != "packet",
                true_obs=end.obs,
                reordered_packets=up.reordered + down.reordered,
                stale_packets=up.stale,
                lost_packets=up.lost + down.lost,
                action_holds=end.holds,
                profile=self._profile_name,
            )
        if ended:
            info["profile"] = self._profile_name
            info["network"] = self.network_stats()

    def _full(
        self,
        info: dict[str, Any],
        obs_age: int,
        action_age: int,
        up_code: int,
        down_code: int,
        applied: Any,
        obs: Any,
        ended: bool,
        stale: int | None = None,
    ) -> dict[str, Any]:
        """``info`` with every key of ``info="full"`` (the link codes as from ``tick``;
        ``stale``: both links' stale count, when the caller has it)."""
        held = down_code < 2
        if held and self._copy_actions:
            # A held action goes to the env again; in info it must be a new object each step.
            applied = _copy_tree(applied)
        up, down = self._up, self._down
        assert up is not None and down is not None
        step_ms = self.step_ms
        ours = {
            "obs_age_steps": obs_age,
            "obs_age_ms": obs_age * step_ms,
            "action_age_steps": action_age,
            "action_age_ms": action_age * step_ms,
            "uplink_lost": up_code & 1 == 1,
            "downlink_lost": down_code & 1 == 1,
            "action_held": held,
            "applied_action": applied,
            "true_obs": obs,
            "reordered_packets": up.reordered + down.reordered,
            "stale_packets": up.stale + down.stale if stale is None else stale,
            "lost_packets": up.lost + down.lost,
            "action_holds": self._holds,
            "profile": self._profile_name,
        }
        if ended:
            ours["network"] = self.network_stats()
        if info:
            info.update(ours)
            return info
        return ours

    def network_stats(self) -> dict[str, int]:
        """This episode's per-direction packet counters (sent, lost, reordered, stale)."""
        t, up, down = self._t, self._up, self._down
        if up is None or down is None:
            return {"ticks": t, "action_holds": self._holds}
        stats = {
            "ticks": t,
            "action_holds": self._holds if self._playout is None else self._playout.holds,
            "uplink_sent": t,
            "uplink_lost": up.lost,
            "uplink_reordered": up.reordered,
            "uplink_stale": up.stale,
            "downlink_sent": t,
            "downlink_lost": down.lost,
            "downlink_reordered": down.reordered,
            "downlink_stale": getattr(down, "stale", 0),
        }
        if self._playout is not None:
            stats.update(self._playout.stats())
        return stats

    @property
    def profiles(self) -> tuple[NetworkProfile, ...]:
        """The profiles this shim draws from (one per episode when more than one)."""
        return self._profiles
