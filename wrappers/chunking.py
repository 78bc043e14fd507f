"""The agent side of scheduled actions: action chunks from any policy, and D and k.

:class:`ScheduledChunks` sits on the agent's side of a shim with a playout buffer
(:mod:`fleetgym.wrappers.playout`). At its tick ``t`` the agent holds the freshest
observation ``o_j`` (``j = t - obs_age``) and the packets it sent. It rolls ``o_j`` through
the actions its packets scheduled for the ticks ``j .. t + D - 1`` with a predictor (the
scheduled actions are the ones the env applies, unless a packet was lost or came later than
``D``), and hands the policy the predicted state at ``t + D``, the tick its action lands on.
The policy's action is the chunk's first; the wrapper rolls on with the predictor and the
policy for ``k - 1`` more ticks, and sends ``ActionPacket(t + D, [a_{t+D}, ...,
a_{t+D+k-1}])``. A lost or late packet is then covered by the previous packet's plan.

:func:`choose_schedule` picks ``D`` and ``k`` for a network: ``D`` from the upper tail of the
action path's lateness (in ticks, the loop's offset included) and ``k`` from how long the
gaps between usable packets last, both measured on the profile's own channel (its bursts,
its trace) with the shim's timeline.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, SupportsFloat

import gymnasium as gym
import numpy as np
from gymnasium import spaces

from fleetgym.errors import UnsupportedSpaceError
from fleetgym.validation import check_int, quote
from fleetgym.wrappers.playout import ActionPacket, Playout
from fleetgym.wrappers.predictive import PredictionError, Predictor, resolve_predictor

__all__ = ["Schedule", "ScheduledChunks", "choose_schedule", "policy_function"]

#: The largest playout delay and chunk accepted (ticks).
MAX_DELAY = 1000
MAX_CHUNK = 256


def policy_function(policy: Any) -> Callable[[Any], Any]:
    """``policy`` as a function of one observation: an SB3 model (or anything with
    ``predict(obs, deterministic=True) -> (action, state)``) or a plain callable.

    Raises:
        TypeError: For anything else.
    """
    predict = getattr(policy, "predict", None)
    if callable(predict):

        def act(obs: Any) -> Any:
            return predict(obs, deterministic=True)[0]

        return act
    if callable(policy):
        return policy  # type: ignore[no-any-return]
    raise TypeError(
        f"policy: expected an SB3 model (with predict) or a callable obs -> action, "
        f"actual {quote(policy)}"
    )


def _playout_of(env: gym.Env[Any, Any]) -> Playout:
    try:
        end = env.get_wrapper_attr("_playout")
    except AttributeError:
        end = None
    if end is None:
        raise TypeError(
            "ScheduledChunks: expected a shim with a playout buffer below it "
            "(NetworkShimWrapper(..., playout=Playout())), actual an env without one"
        )
    return end.playout  # type: ignore[no-any-return]


class ScheduledChunks(
    gym.Wrapper[np.ndarray, Any, np.ndarray, Any], gym.utils.RecordConstructorArgs
):
    """Sends scheduled action chunks; the policy sees the state its action lands on.

    See the module docstring. The observation is the predicted state at ``t + D`` (clipped
    into the observation space, cast to its dtype); the action is that tick's action, from
    which the wrapper builds the packet. The rollout follows the env's playout rules
    (:class:`~fleetgym.wrappers.Playout`, read from the shim): before the first
    packet's tick the env waits (no step) or applies the safe action; a tick no packet of
    the agent covers holds the last action (or the safe one). ``info`` gains
    ``predicted_steps`` and ``chunk`` (the packet sent).

    Args:
        env: A shim with a playout buffer (or a wrapper of one that keeps ``info``), with a
            Box observation space.
        predictor: A :class:`~fleetgym.wrappers.predictive.Predictor` or
            ``"true-dynamics"`` (:func:`~fleetgym.wrappers.dynamics.true_dynamics`).
        delay: ``D``, the playout delay in ticks (>= 1), or a :class:`Schedule`.
        chunk: ``k``, the actions per packet (>= 1; ignored when ``delay`` is a Schedule).
        policy: What makes the chunk's actions after the first (an SB3 model or a callable);
            required when ``chunk > 1``, usually the policy that acts on this env.
        max_horizon: Most ticks predicted in one rollout (the estimate stops moving beyond).

    Example:
        >>> import gymnasium as gym
        >>> from fleetgym.wrappers import NetworkShimWrapper, Playout
        >>> shim = NetworkShimWrapper(gym.make("CartPole-v1"), "wifi-normal", playout=Playout())
        >>> policy = lambda obs: int(obs[2] + 0.5 * obs[3] > 0)  # a hand-made controller
        >>> env = ScheduledChunks(shim, "true-dynamics", delay=3, chunk=4, policy=policy)
        >>> obs, _ = env.reset(seed=0)
        >>> total, done = 0.0, False
        >>> while not done:
        ...     obs, reward, terminated, truncated, info = env.step(policy(obs))
        ...     total, done = total + reward, terminated or truncated
        >>> total > 100, len(info["chunk"]), info["chunk"].tick - (env.get_wrapper_attr("_t") - 1)
        (True, 4, 3)

    Raises:
        TypeError, ValueError: For a bad argument, or an env without a playout buffer.
        UnsupportedSpaceError: For a non-Box observation space.
        PredictionError: From ``step``, for a predictor's estimate of the wrong shape or
            with non-finite values.
    """

    def __init__(
        self,
        env: gym.Env[Any, Any],
        predictor: Predictor | str,
        *,
        delay: int | Schedule,
        chunk: int = 1,
        policy: Any = None,
        max_horizon: int = 10_000,
    ) -> None:
        # The predictor and the policy are recorded by kind only: gymnasium deep-copies
        # what it records, and a model's tensors need not support that.
        gym.utils.RecordConstructorArgs.__init__(
            self,
            predictor=predictor if isinstance(predictor, str) else type(predictor).__name__,
            delay=delay,
            chunk=chunk,
            policy=None if policy is None else type(policy).__name__,
            max_horizon=max_horizon,
        )
        gym.Wrapper.__init__(self, env)
        box = env.observation_space
        if not isinstance(box, spaces.Box):
            raise UnsupportedSpaceError(
                f"ScheduledChunks: expected a Box observation space, actual {box}"
            )
        if isinstance(delay, Schedule):
            schedule = delay
            delay, chunk = schedule.delay, schedule.chunk
        self.delay = check_int("delay", delay, 1, MAX_DELAY)
        self.chunk = check_int("chunk", chunk, 1, MAX_CHUNK)
        self.max_horizon = check_int("max_horizon", max_horizon, 1, 10**6)
        playout = _playout_of(env)
        self.playout = playout
        self._safe = playout.safe_for(env.action_space)
        self.predictor: Any = resolve_predictor(predictor, env, "ScheduledChunks")
        self._batched = bool(getattr(self.predictor, "batched", False))
        if self.chunk > 1 and policy is None:
            raise ValueError(
                f"policy: expected the policy that makes the chunk's actions (chunk={self.chunk}), "
                "actual None"
            )
        self._policy = None if policy is None else policy_function(policy)
        self._box = box
        # A Discrete space's chunk goes as Python ints (the env side checks them fastest).
        self._discrete = isinstance(env.action_space, spaces.Discrete)
        self._low = box.low.astype(np.float64)
        self._high = box.high.astype(np.float64)
        self._reset_state()

    def set_policy(self, policy: Any) -> None:
        """Use ``policy`` for the chunk's actions from now on (e.g. the model being trained).

        Args:
            policy: An SB3 model (its ``predict(obs, deterministic=True)`` is called) or a
                callable ``obs -> action``; it replaces the one given to the constructor.
        """
        self._policy = policy_function(policy)

    # -- the plan -----------------------------------------------------------------------
    def _reset_state(self) -> None:
        self._t = 0
        self._plan: dict[int, Any] = {}
        self._first: int | None = None  # the first tick the agent scheduled
        self._forgotten = 0  # every plan entry below this tick is forgotten
        # What the env did at each tick, from info["action_source"]; the agent uses tick i's
        # only once an observation emitted after it has arrived (the observation packet
        # carries it, as a real env host can).
        self._sources: list[str] = []
        self._started_at: int | None = None  # the env's first applied tick, once known
        self.last_horizon = 0

    def _actions_for(self, j: int, end: int) -> list[Any]:
        """The actions the env is expected to apply at ticks ``j .. end - 1`` (waits left out)."""
        out: list[Any] = []
        plan, first = self._plan, self._first
        if self._started_at is not None:
            first = self._started_at
        elif first is not None and j > first:
            # The observation says the env was still waiting at tick j - 1: the first
            # packets did not make it; assume it starts with the plan at j.
            first = j
        last: Any = self._safe
        for i in range(max(0, j - 1), end):
            if first is None or i < first:
                if self.playout.start == "wait":
                    continue
                action = self._safe
            else:
                action = plan.get(i)
                if action is None:  # not scheduled (beyond the packets sent): the rule
                    action = self._safe if self.playout.underrun == "safe" else last
            last = action
            if i >= j:
                out.append(action)
        return out

    def _roll(self, obs: np.ndarray, actions: list[Any], step: int) -> np.ndarray:
        if not actions:
            return obs
        acts = np.asarray(actions)
        base = np.asarray(obs, dtype=np.float64)
        if self._batched:
            out = self.predictor(base[None], acts[None], np.zeros((1, len(actions)), np.int64))
        else:
            out = self.predictor(base, acts, np.zeros(len(actions), np.int64))
        if isinstance(out, tuple):
            out = out[0]
        arr = np.asarray(out, dtype=np.float64).reshape(self._box.shape)
        if not np.all(np.isfinite(arr)):
            raise PredictionError(
                f"predictor at step {step}: expected finite values, actual {arr.tolist()}"
            )
        return arr

    def _estimate(self, obs: Any, j: int, step: int) -> np.ndarray:
        """The state at tick ``self._t + D`` from ``o_j``."""
        actions = self._actions_for(j, self._t + self.delay)[: self.max_horizon]
        self.last_horizon = len(actions)
        return self._roll(np.asarray(obs, dtype=np.float64), actions, step)

    def _output(self, est: np.ndarray) -> np.ndarray:
        return np.clip(est, self._low, self._high).astype(self._box.dtype)

    # -- gym API --------------------------------------------------------------------------
    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[np.ndarray, dict[str, Any]]:
        obs, info = self.env.reset(seed=seed, options=options)
        self._reset_state()
        est = self._estimate(obs, 0, 0)
        self._est = est
        info["predicted_steps"] = self.last_horizon
        return self._output(est), info

    def step(self, action: Any) -> tuple[np.ndarray, SupportsFloat, bool, bool, dict[str, Any]]:
        t = self._t
        start = t + self.delay
        actions = [action]
        if self.chunk > 1:
            policy = self._policy
            assert policy is not None
            state = self._est
            for _ in range(1, self.chunk):
                state = self._roll(state, [actions[-1]], t)
                actions.append(policy(self._output(state)))
        chunk = np.asarray(actions)
        if self._discrete and chunk.ndim == 1 and chunk.dtype.kind in "iu":
            chunk = chunk.tolist()
        packet = ActionPacket(start, chunk)
        plan = self._plan
        for m, a in enumerate(packet.actions):
            plan[start + m] = a
        if self._first is None:
            self._first = start
        obs, reward, terminated, truncated, info = self.env.step(packet)
        self._t = t + 1
        age = info.get("obs_age_steps", 0)
        if isinstance(age, bool) or not isinstance(age, (int, np.integer)) or not 0 <= age <= t + 1:
            raise ValueError(
                f"info['obs_age_steps'] at step {t}: expected an int in 0..{t + 1}, "
                f"actual {quote(age)}"
            )
        j = self._t - int(age)
        if self._started_at is None:  # only needed until the env's start is known
            self._sources.append(info.get("action_source", "packet"))
        if self._started_at is None and j >= 1:
            known = self._sources[:j]
            for i, source in enumerate(known):
                if source != "wait":
                    self._started_at = i
                    break
        # Ticks before j - 1 are never rolled through again (j only grows): forget them.
        low = self._forgotten
        while low < j - 1:
            plan.pop(low, None)
            low += 1
        self._forgotten = low
        est = self._estimate(obs, j, t)
        self._est = est
        info["predicted_steps"] = self.last_horizon
        info["chunk"] = packet
        return self._output(est), reward, terminated, truncated, info


@dataclass(frozen=True)
class Schedule:
    """A playout delay ``delay`` (D) and a chunk length ``chunk`` (k) in ticks, with what
    the network measurement behind them found.

    Attributes:
        delay: D.
        chunk: k.
        late_share: Share of the action packets sent that miss their own tick at this D
            (lost ones included).
        underrun_share: Share of ticks no packet covers with this D and k.
        quantile: The share of arrived packets D is chosen to cover.
    """

    delay: int
    chunk: int
    late_share: float = 0.0
    underrun_share: float = 0.0
    quantile: float = 0.99


def choose_schedule(
    profile: Any,
    step_ms: float,
    *,
    quantile: float = 0.99,
    underrun_target: float = 1e-5,
    max_chunk: int = 64,
    ticks: int = 200_000,
    seed: int = 0,
    timing: str = "loop",
    uplink_share: float = 0.5,
    delivery: str = "fifo",
) -> Schedule:
    """D and k for a network, from its action path on the shim's timeline.

    Draws ``ticks`` action packets from the profile's downlink (the shim's own streams for
    ``seed``), computes the tick each becomes usable at (the loop's offset and ``fifo``
    order included), and takes ``D`` = the ``quantile`` of the arrived packets' lateness in
    ticks (at least 1), then ``k`` = the smallest chunk with which at most
    ``underrun_target`` of the ticks have no covering packet (at most ``max_chunk``).

    Args:
        profile: A profile name, profile file, NetworkProfile, or a sequence of them (each
            block of packets drawn from one of them at random, as the shim draws one per
            episode).
        step_ms: The control period in ms, in [0.001, 1e6].
        quantile: The share of arrived packets D must cover, in [0.5, 1] (default 0.99).
        underrun_target: The largest share of ticks, in [0, 1], left without a covering
            packet that picks k (default 1e-5); if no k up to ``max_chunk`` meets it,
            k = ``max_chunk``.
        max_chunk: The largest k considered, 1 to 256 (default 64).
        ticks: Action packets simulated, 100 to 10 million (default 200,000); more is
            slower and steadier.
        seed: Seed of the simulated packet schedule (the shim's streams for that seed).
        timing, uplink_share: The shim's timing model and the agent's phase (default
            ``"loop"`` and 0.5; see :class:`~fleetgym.wrappers.timeline.LoopTiming`).
        delivery: The shim's delivery order: ``"fifo"`` (default: a packet never
            overtakes the one sent before it); any other value measures independent
            packets, as ``"latest"``.

    Returns:
        The :class:`Schedule`, with the late and underrun shares measured for it.

    Example:
        >>> s = choose_schedule("wifi-normal", 20.0)
        >>> 1 <= s.delay <= 5, 1 <= s.chunk <= 64
        (True, True)

    Raises:
        TypeError, ValueError, UnknownProfileError: For a bad argument.
    """
    from fleetgym.validation import check_float
    from fleetgym.wrappers.shim_config import ShimStreams, resolve_profiles
    from fleetgym.wrappers.timeline import LoopTiming

    profiles = resolve_profiles(profile)
    step_ms = check_float("step_ms", step_ms, 1e-3, 1e6)
    quantile = check_float("quantile", quantile, 0.5, 1.0)
    underrun_target = check_float("underrun_target", underrun_target, 0.0, 1.0)
    max_chunk = check_int("max_chunk", max_chunk, 1, MAX_CHUNK)
    ticks = check_int("ticks", ticks, 100, 10_000_000)
    offset = LoopTiming(timing, uplink_share).downlink_offset
    lateness: list[np.ndarray] = []
    streams = ShimStreams(seed)
    per = -(-ticks // len(profiles))
    for _ in profiles:
        _, _, down = streams.draw(profiles, step_ms)
        rel = down.next(per) / step_ms + offset
        idx = np.arange(per, dtype=np.float64)
        arrival = idx + rel
        if delivery == "fifo":
            finite = np.where(np.isfinite(arrival), arrival, -np.inf)
            arrival = np.where(np.isfinite(arrival), np.maximum.accumulate(finite), np.inf)
        usable = np.floor(arrival)  # inf for a lost packet
        lateness.append(usable - idx)
    late = np.concatenate(lateness)
    arrived = late[np.isfinite(late)]
    if arrived.size == 0:
        raise ValueError(f"profile: every action packet of {quote(profile)} is lost")
    delay = max(1, int(np.quantile(arrived, quantile, method="higher")))
    delay = min(delay, MAX_DELAY)
    n = late.size
    # Tick tau = i + D is covered by packet i - m (m < k) when it is usable by tau:
    # late[i - m] <= D + m.
    covered_by = np.full(n, max_chunk, dtype=np.int64)  # first m that covers, else max
    for m in range(max_chunk - 1, -1, -1):
        ok = np.zeros(n, dtype=bool)
        ok[m:] = late[: n - m] <= delay + m
        covered_by[ok] = m
    body = covered_by[max_chunk:] if n > 2 * max_chunk else covered_by
    chunk = max_chunk
    for k in range(1, max_chunk + 1):
        if float(np.mean(body >= k)) <= underrun_target:
            chunk = k
            break
    return Schedule(
        delay=delay,
        chunk=chunk,
        late_share=float(np.mean(~(late <= delay))),
        underrun_share=float(np.mean(body >= chunk)),
        quantile=quantile,
    )
