"""Scheduled action packets over real sockets (Mode 3): the wire form and both ends' parts.

The env side's playout rules are those of :mod:`fleetgym.wrappers.playout` (the packet
format, the clock, the start and underrun rules), reused here, not redone:
:class:`~fleetgym.wrappers.playout_end.PlayoutEnd` (and its
:class:`~fleetgym.wrappers.playout.PlayoutBuffer`) holds one session's state, checks each
packet that arrives (``PlayoutEnd.check``, the shim's form of
:func:`~fleetgym.wrappers.playout.check_packet`, which the client runs before sending) and
chooses each tick's action.

**Negotiation.** The client sends its :class:`~fleetgym.wrappers.playout.Playout` in
``HELLO`` as plain JSON data (:func:`playout_to_wire`: the rule names, ``safe_action`` as
numbers, ``max_wait``, ``max_ahead``, ``max_chunk``). The server rebuilds it for the env's
action space (:func:`playout_from_wire`) and answers ``WELCOME`` with the rules it applies
(``meta["playout"]``), or refuses ``HELLO`` naming the field. A ``fallback`` callable cannot
cross the wire: ``underrun="fallback"`` uses the *server's* fallback policy
(``RemoteEnvServer(fallback=...)``, ``fleetgym serve-env --fallback MODULE:NAME``), and a
server without one refuses it; the client's own callable is never sent nor called.

**Wire.** One ``ACTION`` message per packet: ``seq`` is the agent's tick ``t`` the packet was
sent at, ``meta`` is ``{"ep": episode, "tick": packet.tick}``, and the one array holds the
``k`` actions with a leading chunk axis (shape ``(k, *action_shape)``, the action space's
dtype; ``int64`` for a Discrete space).

**Env host.** :class:`PlayoutHost` files every packet that arrives (on the session's
reader or the server's UDP thread) into a :class:`PacketInbox`, checked first: a packet
that is malformed, stamped in the past or too far ahead, of the wrong shape or length, or
holding an action outside the space (NaN included) is dropped and counted by reason
(:data:`DROP_REASONS`, the server's ``packets_dropped_<reason>``), never raised. At the env's
tick ``t`` (its deadline ``S_t``) it takes the packets that arrived by ``S_t`` in arrival
order into the playout buffer, as the shim's downlink delivers them at tick ``t``, and
applies ``PlayoutEnd.choose(t)``: the packet's action, or wait (no step), or the start or
underrun rule.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any, NamedTuple, TypeGuard

import gymnasium as gym
import numpy as np
from gymnasium import spaces

from fleetgym.errors import InvalidActionError, ProtocolError, RemoteEnvError
from fleetgym.validation import quote
from fleetgym.wrappers.action_check import ActionCheck
from fleetgym.wrappers.playout import ActionPacket, Playout, check_packet
from fleetgym.wrappers.playout_end import PlayoutEnd
from fleetgym.wrappers.remote.wire import DATAGRAM_LIMIT, Frame, MessageType, WireCodec

__all__ = [
    "DROP_REASONS",
    "ClientPlayout",
    "PacketInbox",
    "PlayoutHost",
    "playout_from_wire",
    "playout_to_wire",
]

#: The fields of a Playout that cross the wire (``fallback`` does not).
WIRE_FIELDS = ("start", "underrun", "safe_action", "max_wait", "max_ahead", "max_chunk")
#: Why the env host drops an arriving packet (the server's ``packets_dropped_<reason>``):
#: ``meta`` no int episode or tick; ``shape`` not one array of ``(k, *action_shape)`` in the
#: space's dtype; ``chunk`` no action or more than ``max_chunk``; ``past`` stamped before the
#: tick it was sent at; ``ahead`` more than ``max_ahead`` after it; ``action`` an action
#: outside the space (NaN included); ``future`` sent at a tick the env has not reached;
#: ``overflow`` too many packets waiting for the env's next tick; ``error`` anything else.
DROP_REASONS = (
    "meta",
    "shape",
    "chunk",
    "past",
    "ahead",
    "action",
    "future",
    "overflow",
    "error",
)
#: Most packets, and most bytes of actions, waiting in a session's inbox for the next tick
#: (an honest client delivers a few per tick: more is a flood, dropped as ``overflow``).
MAX_PENDING_PACKETS = 1024
MAX_PENDING_BYTES = 32 * 1024 * 1024
#: Largest episode number or tick the host accepts in a packet's meta.
_MAX_TICK = 2**62


def _wire_dtype(space: gym.Space[Any]) -> np.dtype[Any]:
    return np.dtype(np.int64) if isinstance(space, spaces.Discrete) else np.dtype(space.dtype)


def _is_int(x: Any) -> TypeGuard[int]:
    return isinstance(x, int) and not isinstance(x, bool) and 0 <= x < _MAX_TICK


# -- negotiation ---------------------------------------------------------------------------
def playout_to_wire(playout: Any) -> dict[str, Any]:
    """``playout`` as plain JSON data for ``HELLO`` (the client's side; no space needed).

    Raises:
        TypeError: If ``playout`` is not a Playout.
        ValueError: If its ``safe_action`` is not finite numbers (JSON carries no NaN).
    """
    if not isinstance(playout, Playout):
        raise TypeError(f"playout: expected a Playout or None, actual {quote(playout)}")
    safe = playout.safe_action
    if safe is not None:
        try:
            arr = np.asarray(safe)
        except (TypeError, ValueError):
            arr = np.asarray(None)
        if arr.dtype.kind not in "biuf" or not np.all(np.isfinite(arr)):
            raise ValueError(
                f"playout: safe_action: expected an action of finite numbers (it crosses the "
                f"wire as JSON), actual {quote(safe)}"
            )
        safe = arr.tolist()
    return {
        "start": playout.start,
        "underrun": playout.underrun,
        "safe_action": safe,
        "max_wait": playout.max_wait,
        "max_ahead": playout.max_ahead,
        "max_chunk": playout.max_chunk,
    }


def playout_from_wire(
    meta: Any, space: gym.Space[Any], fallback: Callable[[Any], Any] | None
) -> Playout:
    """The Playout a client asked for, rebuilt for the env's action ``space`` (server side).

    Args:
        meta: The ``HELLO``'s ``meta["playout"]``.
        space: The env's action space.
        fallback: The server's fallback policy (``obs -> action``), or None.

    Raises:
        TypeError, ValueError: For anything a Playout refuses, an unknown field, a
            ``safe_action`` outside ``space``, or ``underrun="fallback"`` without ``fallback``;
            the message starts with ``playout:`` and names the field.
    """
    if not isinstance(meta, dict):
        raise TypeError(f"playout: expected a JSON object of playout rules, actual {quote(meta)}")
    unknown = sorted(str(k) for k in meta if k not in WIRE_FIELDS)
    if unknown:
        raise ValueError(f"playout: expected the fields {list(WIRE_FIELDS)}, actual {unknown}")
    kwargs = {k: meta[k] for k in WIRE_FIELDS if k in meta and k != "safe_action"}
    try:
        safe = meta.get("safe_action")
        if safe is not None:
            if isinstance(space, spaces.Discrete):
                if not isinstance(safe, int) or isinstance(safe, bool):
                    raise TypeError(
                        f"safe_action: expected an int for {space}, actual {quote(safe)}"
                    )
            else:
                try:
                    safe = np.asarray(safe, dtype=space.dtype)
                except (TypeError, ValueError, OverflowError):
                    raise ValueError(
                        f"safe_action: expected an element of {space}, actual {quote(safe)}"
                    ) from None
        if kwargs.get("underrun") == "fallback":
            if fallback is None:
                raise ValueError(
                    "underrun: expected 'hold' or 'safe' (a fallback policy cannot cross the "
                    "wire, and this env server has none: RemoteEnvServer(fallback=...), "
                    "fleetgym serve-env --fallback MODULE:NAME), actual 'fallback'"
                )
            kwargs["fallback"] = fallback
        playout = Playout(safe_action=safe, **kwargs)
        playout.safe_for(space)
    except (TypeError, ValueError) as exc:
        raise type(exc)(f"playout: {exc}") from None
    return playout


# -- the env host ----------------------------------------------------------------------------
class _Drop(Exception):
    """A packet the host drops (``reason``: one of DROP_REASONS)."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class PacketInbox:
    """The packets that arrived for one session, until the env's next tick takes them.

    Each packet is ``(seq, (tick, actions))``, as the shim's downlink carries it.
    ``take(deadline)`` returns the packets that arrived by ``deadline`` in arrival order and
    counts ``reordered`` as the shim's downlink does (a packet sent before one delivered
    earlier). Thread-safe; bounded by :data:`MAX_PENDING_PACKETS` and
    :data:`MAX_PENDING_BYTES` (``put`` returns False beyond).
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._pending: list[tuple[int, int, tuple[int, Any], int]] = []
        self._bytes = 0
        self.episode = -1
        self.reordered = 0
        self._newest = -1

    def reset(self, episode: int) -> None:
        """A new episode: nothing pending, counters 0; other episodes' packets are ignored."""
        with self._lock:
            self.episode = episode
            self._pending = []
            self._bytes = 0
            self.reordered = 0
            self._newest = -1

    def put(self, t_recv_ns: int, seq: int, packet: tuple[int, Any], nbytes: int) -> bool:
        with self._lock:
            if (
                len(self._pending) >= MAX_PENDING_PACKETS
                or self._bytes + nbytes > MAX_PENDING_BYTES
            ):
                return False
            self._pending.append((t_recv_ns, seq, packet, nbytes))
            self._bytes += nbytes
            return True

    def take(self, deadline_ns: int) -> list[tuple[int, tuple[int, Any]]]:
        with self._lock:
            pending = self._pending
            if not pending:
                return []
            due = [p for p in pending if p[0] <= deadline_ns]
            if not due:
                return []
            self._pending = [p for p in pending if p[0] > deadline_ns]
            self._bytes -= sum(p[3] for p in due)
            due.sort(key=lambda p: p[0])  # stable: arrival order
            for _, seq, _, _ in due:
                if seq < self._newest:
                    self.reordered += 1
                else:
                    self._newest = seq
            return [(seq, packet) for _, seq, packet, _ in due]


class PlayoutTick(NamedTuple):
    """What the env host did at one tick (``action`` None: it waited, the env did not step)."""

    action: Any
    source: str
    obs: Any
    reward: float
    terminated: bool
    truncated: bool
    info: dict[str, Any]


class PlayoutHost:
    """One session's playout on the env host: the inbox, the checks, the rules of Mode 2.

    Args:
        playout: The rules (from :func:`playout_from_wire`).
        space: The env's action space.
        count: ``count(key)`` adds one to the server's counter ``key`` (thread-safe).
    """

    def __init__(
        self, playout: Playout, space: gym.Space[Any], count: Callable[[str], None]
    ) -> None:
        self.playout = playout
        self.space = space
        self.check = ActionCheck(space)
        self.end = PlayoutEnd(playout, space, self.check)
        self.inbox = PacketInbox()
        self._count = count
        self._dtype = _wire_dtype(space)
        self._shape = tuple(space.shape or ())
        self.holds = 0
        #: The accepted rules as JSON (the WELCOME's ``meta["playout"]``).
        self.wire = playout_to_wire(playout)

    def start(self, episode: int, obs: Any) -> None:
        """A new episode (at RESET): the buffer, the counters and the inbox start empty."""
        self.inbox.reset(episode)
        self.end.start(obs)
        self.holds = 0

    def drop(self, reason: str) -> None:
        self._count(f"packets_dropped_{reason}")

    # -- arrival (reader or UDP thread) -------------------------------------------------
    def on_frame(self, frame: Frame) -> None:
        """File one ACTION frame, or drop and count it; never raises."""
        try:
            ep = frame.meta.get("ep")
            if not _is_int(ep):
                raise _Drop("meta")
            if ep != self.inbox.episode:
                return  # another episode's packet, still in flight at a reset: ignored
            seq, packet = self._packet(frame)
            nbytes = int(frame.arrays[0].nbytes)
            if not self.inbox.put(frame.t_recv_ns, seq, packet, nbytes):
                raise _Drop("overflow")
        except _Drop as drop:
            self.drop(drop.reason)
        except Exception:  # a bug, never a dead reader: counted
            self.drop("error")

    def _packet(self, frame: Frame) -> tuple[int, tuple[int, Any]]:
        tick = frame.meta.get("tick")
        if not _is_int(tick):
            raise _Drop("meta")
        seq = frame.seq
        arrays = frame.arrays
        if len(arrays) != 1:
            raise _Drop("shape")
        chunk = arrays[0]
        if chunk.ndim != 1 + len(self._shape) or chunk.dtype != self._dtype:
            raise _Drop("shape")
        if chunk.shape[1:] != self._shape:
            raise _Drop("shape")
        playout = self.playout
        k = chunk.shape[0]
        if not 1 <= k <= playout.max_chunk:
            raise _Drop("chunk")
        if tick < seq:
            raise _Drop("past")
        if tick > seq + playout.max_ahead:
            raise _Drop("ahead")
        try:  # the shim's own check (a Discrete chunk comes back as Python ints, as there)
            actions = self.end.check(ActionPacket(tick, chunk), seq)
        except InvalidActionError:
            raise _Drop("action") from None
        return seq, (tick, actions)

    # -- the env's tick (the session's worker) ------------------------------------------
    def tick(self, env: gym.Env[Any, Any], t: int, deadline_ns: int) -> PlayoutTick:
        """Tick ``t`` at its deadline: file what arrived by then, apply the rules, step."""
        end = self.end
        buffer = end.buffer
        for seq, packet in self.inbox.take(deadline_ns):
            if seq > t:  # sent at a tick the env has not reached: no honest client does
                self.drop("future")
                continue
            buffer.receive(seq, packet, t)
        action, source = end.choose(t)
        if action is None:  # waiting for the first action: the env does not step
            obs = end.obs
            obs = obs.copy() if isinstance(obs, np.ndarray) else obs
            timeout = end.wait_ticks >= self.playout.max_wait
            return PlayoutTick(None, source, obs, 0.0, False, timeout, {})
        if source != "packet":
            self.holds += 1
        obs, reward, terminated, truncated, info = env.step(action)
        end.obs = obs
        return PlayoutTick(action, source, obs, float(reward), terminated, truncated, info)

    def step_meta(self, step: PlayoutTick) -> dict[str, Any]:
        """The STEP_DONE fields of a playout tick (beside the session's common ones)."""
        meta: dict[str, Any] = {
            "held": step.source != "packet",
            "action_seq": self.end.applied_sent,
            "action_t_send_ns": 0,
            "holds": self.holds,
            "down_reordered": self.inbox.reordered,
            "down_stale": 0,
            "source": step.source,
            "playout": self.end.stats(),
        }
        if step.action is None and step.truncated:
            meta["playout_timeout"] = True
        return meta


# -- the client ------------------------------------------------------------------------------
class ClientPlayout:
    """The agent's end of scheduled packets over Mode 3 (held by ``RemoteEnv._playout``).

    ``playout`` is what :class:`~fleetgym.wrappers.chunking.ScheduledChunks` reads; the
    send times of the episode's packets give ``info["action_age_ms"]``.
    """

    def __init__(self, playout: Playout) -> None:
        self.playout = playout
        self.wire = playout_to_wire(playout)
        self.sent_ns: list[int] = []

    def accept(self, welcome: dict[str, Any], space: gym.Space[Any], address: str) -> None:
        """Check the server's WELCOME took the rules asked for.

        Raises:
            RemoteEnvError: A server that does not know playout (an older one).
            ValueError: A ``safe_action`` outside the action space.
        """
        if welcome.get("playout") is None:
            raise RemoteEnvError(
                f"env server at {address} does not support playout (scheduled action "
                "packets); update it, or make the client without playout"
            )
        self.playout.safe_for(space)
        self.space = space
        self.check = ActionCheck(space)
        self.dtype = _wire_dtype(space)

    def encode(
        self, packet: Any, t: int, ep: int, codec: WireCodec, session: int, datagram: bool
    ) -> tuple[dict[str, Any], np.ndarray]:
        """``packet`` sent at tick ``t`` as an ACTION message's meta and chunk array.

        Raises:
            InvalidActionError: As the shim (:func:`check_packet`), or for an action that
                does not survive the cast to the space's dtype (a float beyond float32), or
                a message too large for a frame (a datagram when ``datagram``).
        """
        packet = check_packet(packet, t, self.playout, self.check)
        actions = packet.actions
        if isinstance(self.space, spaces.Discrete):
            chunk = np.fromiter((int(a) for a in actions), np.int64, len(actions))
        else:
            with np.errstate(over="ignore", invalid="ignore"):  # checked just below
                chunk = np.asarray(
                    actions if isinstance(actions, np.ndarray) else list(actions), dtype=self.dtype
                )
            if chunk.dtype.kind == "f" and not np.isfinite(chunk).all():
                raise InvalidActionError(
                    f"action packet at step {t}: expected actions that fit {self.dtype}, "
                    "actual values beyond its range"
                )
        meta = {"ep": ep, "tick": packet.tick}
        try:
            size = len(codec.encode(MessageType.ACTION, session, t, meta, [chunk]))
            reason = f"{size} bytes, a datagram holds {DATAGRAM_LIMIT}"
        except ProtocolError as exc:
            size, reason = -1, str(exc)
        if size < 0 or (datagram and size > DATAGRAM_LIMIT):
            raise InvalidActionError(
                f"action packet at step {t}: expected a packet that fits one message "
                f"(fewer actions, or transport='tcp'), actual {reason}"
            )
        return meta, chunk

    def sent_at(self, seq: int, period_ns: int) -> int:
        """When packet ``seq`` of this episode was sent (-1: the start, a period before 0)."""
        sent = self.sent_ns
        if 0 <= seq < len(sent):
            return sent[seq]
        return sent[0] - period_ns if sent else 0

    def add_info(
        self, info: dict[str, Any], meta: dict[str, Any], obs_box: Any, down_lost: int, profile: str
    ) -> None:
        """``info``'s playout keys from a STEP_DONE's ``meta``, as the shim's: every step
        ``action_source`` (and ``playout_timeout``), an episode's last ``profile`` and
        ``network``."""
        info["action_source"] = str(meta["source"])
        if meta.get("playout_timeout"):
            info["playout_timeout"] = True
        if meta["terminated"] or meta["truncated"]:
            info["profile"] = profile
            info["network"] = self.network_stats(len(self.sent_ns), meta, obs_box, down_lost)

    def network_stats(
        self, ticks: int, meta: dict[str, Any], obs_box: Any, down_lost: int
    ) -> dict[str, int]:
        """The episode's counters, as the shim's ``network_stats`` with a playout."""
        stats = {
            "ticks": ticks,
            "action_holds": int(meta["holds"]),
            "uplink_sent": ticks,
            "uplink_lost": int(meta["up_lost_total"]),
            "uplink_reordered": obs_box.reordered,
            "uplink_stale": obs_box.stale,
            "downlink_sent": ticks,
            "downlink_lost": down_lost,
            "downlink_reordered": int(meta["down_reordered"]),
            "downlink_stale": int(meta["down_stale"]),
        }
        stats.update({str(k): int(v) for k, v in dict(meta.get("playout") or {}).items()})
        return stats

    def start(self) -> None:
        self.sent_ns = []
