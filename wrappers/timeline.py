"""One timeline for the simulated loop and the real one: when packets are on time, which
packet is the freshest, and the ages that follow.

The network shim (Mode 2) and the remote env over real sockets (Mode 3) both take their
timing from here, so that the two cannot drift apart.

A remote periodic controller is a sampled-data loop with a round-trip delay
``tau = tau_sc + tau_ca`` (sensor to controller, controller to actuator; Nilsson,
Bernhardsson and Wittenmark, "Stochastic analysis and control of real-time systems with
random time delays", Automatica 34(1), 1998), here with a clock on each end. With the
control period ``P`` and the agent's phase ``s = uplink_share`` in (0, 1):

* the agent's tick ``t`` is at ``t P``: it reads the freshest observation that has
  arrived, decides ``a_t`` and sends it (delay ``d_t``: it arrives at ``t P + d_t``);
* the env's step ``t`` is at ``t P + (1 - s) P``: it applies the freshest action that
  has arrived by then (else it holds the last one), steps, and emits ``o_{t+1}`` (delay
  ``u``: it arrives at ``t P + (1 - s) P + u``);
* the agent's tick ``t + 1`` reads it if it arrived by ``(t + 1) P``.

So an action is on time when ``d < (1 - s) P`` and an observation when ``u < s P``: the
round trip shares one period. A packet ``k`` periods late is used ``k`` ticks later, where
``k = floor(d / P + s)`` for an action and ``floor(u / P + 1 - s)`` for an observation: in
the shim's whole-tick arithmetic this is each delay plus a constant offset (``s`` periods
on the downlink, ``1 - s`` on the uplink), the waits for the receiving clock's next tick.
``s`` means what the remote client's ``uplink_share`` means: the share of the period left
for the observation's trip.

``timing="per-direction"`` keeps the older convention: each direction gets a whole period
(a packet is on time when its delay is below ``P``, on each path separately), as delays
counted in whole steps do (rlrd's ``RandomDelayWrapper``, Gymnasium's
``DelayObservation``). It is optimistic against a real loop by about half a period each
way (``docs/mode3.md``).

Example:
    >>> timing = LoopTiming()
    >>> timing.uplink_offset, timing.downlink_offset
    (0.5, 0.5)
    >>> LoopTiming("per-direction").downlink_offset
    0.0
    >>> freshest([3, 5, 4], best_seq=4)  # 5 is the freshest; 3 and 4 stale, 3 reordered
    (1, 2, 1)
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from fleetgym.validation import check_choice, quote

__all__ = [
    "DEFAULT_TIMING",
    "DEFAULT_UPLINK_SHARE",
    "TIMINGS",
    "LoopTiming",
    "check_uplink_share",
    "freshest",
    "loop_ages",
]

#: ``"loop"``: one period for the round trip (a real periodic loop, the default);
#: ``"per-direction"``: a whole period on each path (delays in whole steps).
TIMINGS = ("loop", "per-direction")
DEFAULT_TIMING = "loop"
#: The agent's phase: the share of the period left for the observation's trip.
DEFAULT_UPLINK_SHARE = 0.5


def check_uplink_share(value: Any, name: str = "uplink_share") -> float:
    """``value`` as a float in the open interval (0, 1).

    Raises:
        TypeError: If it is not a real number (``bool`` included).
        ValueError: If it is NaN or outside (0, 1).
    """
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"{name}: expected a number in (0, 1), actual {quote(value)}")
    share = float(value)
    if not (math.isfinite(share) and 0.0 < share < 1.0):
        raise ValueError(f"{name}: expected a number in (0, 1), actual {quote(value)}")
    return share


@dataclass(frozen=True)
class LoopTiming:
    """When each direction's packets are on time, as offsets added to their delays.

    Args:
        timing: One of :data:`TIMINGS`.
        uplink_share: The agent's phase ``s`` in (0, 1): the env steps ``(1 - s) P`` after
            the agent's tick, and the observation has the remaining ``s P`` to arrive
            (the remote client's parameter of the same name). Ignored by
            ``"per-direction"``.

    Raises:
        TypeError, ValueError: For a bad timing or share.
    """

    timing: str = DEFAULT_TIMING
    uplink_share: float = DEFAULT_UPLINK_SHARE

    def __post_init__(self) -> None:
        check_choice("timing", self.timing, TIMINGS)
        object.__setattr__(self, "uplink_share", check_uplink_share(self.uplink_share))

    @property
    def uplink_offset(self) -> float:
        """Periods added to each observation's delay: the wait for the agent's next tick."""
        return 1.0 - self.uplink_share if self.timing == "loop" else 0.0

    @property
    def downlink_offset(self) -> float:
        """Periods added to each action's delay: the wait for the env's next step."""
        return self.uplink_share if self.timing == "loop" else 0.0

    def env_step_ns(self, agent_deadline_ns: int, period_ns: int) -> int:
        """When the env steps within the agent's period that ends at ``agent_deadline_ns``.

        The agent's tick ``t`` opens the period; the env steps ``(1 - s) P`` later, which
        leaves ``s P`` before the period ends for the observation's trip.
        """
        return agent_deadline_ns - int(self.uplink_share * period_ns)

    def budgets_ms(self, step_ms: float) -> tuple[float, float]:
        """The largest on-time delay (ms) of an observation and of an action."""
        return (1.0 - self.uplink_offset) * step_ms, (1.0 - self.downlink_offset) * step_ms

    def describe(self) -> str:
        if self.timing == "per-direction":
            return "per-direction (a whole period on each path)"
        return f"loop (one period for the round trip, uplink_share {self.uplink_share:g})"


def freshest(seqs: Sequence[int], best_seq: int) -> tuple[int, int, int]:
    """The freshest-packet rule for the packets that arrived by one deadline.

    Args:
        seqs: The tick indices of the packets that arrived since the last deadline.
        best_seq: The index of the freshest packet used so far.

    Returns:
        ``(index, stale, reordered)``: the position in ``seqs`` of the packet to use now
        (the newest, if newer than ``best_seq``; ``-1`` otherwise), how many of them are
        never used (every other one), and how many arrived after a newer packet had
        arrived at an earlier deadline (index below ``best_seq``).
    """
    newest, at = best_seq, -1
    reordered = 0
    for position, seq in enumerate(seqs):
        if seq < best_seq:
            reordered += 1
        if seq > newest:
            newest, at = seq, position
    return at, len(seqs) - (at >= 0), reordered


def loop_ages(t: int, obs_seq: int, action_seq: int) -> tuple[int, int]:
    """Ages in ticks after step ``t``: of the observation returned (``o_{obs_seq}``, where
    ``o_{t+1}`` is the newest) and of the action applied (``a_{action_seq}``; -1 is the
    start action)."""
    return t + 1 - obs_seq, t - action_seq
