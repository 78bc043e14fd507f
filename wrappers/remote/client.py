"""RemoteEnv: a Gymnasium env whose environment runs in a remote env server (Mode 3).

The client keeps the wall clock. Step ``t`` owns the period window ending at its
deadline ``D_t`` (``D_t = D_{t-1} + P``; a step called more than a quarter period late
starts a new schedule, counted in :attr:`RemoteEnv.overruns`). Within the window:

1. ``step(a_t)`` sends ``a_t`` as a datagram through the profile's downlink channel
   (held for its delay, or dropped) and ``TICK t`` with the env's deadline
   ``S_t = D_t - uplink_share * P`` on the control channel.
2. The server, at ``S_t``, applies the freshest action that arrived by ``S_t`` (else
   holds the last one), steps, and sends ``o_{t+1}`` through the uplink channel.
3. ``step`` returns at ``D_t`` with the freshest observation that arrived by ``D_t`` (else
   a copy of the last one); reward and the termination flags come reliably with
   ``STEP_DONE``.

This is the simulated shim's rule (freshest packet by the tick's deadline, hold
otherwise) on a causal clock: the round trip shares one period, so a direction is on
time when its delay is under its share of the period (the shim's virtual clock gives
each direction a whole period), and ages under a profile run about one tick above the
shim's. ``info`` carries the shim's keys (:data:`STEP_INFO_KEYS`), the ages measured
from the packets' tick indices and send timestamps (wall clock; across hosts the
clocks must be synchronised). With ``playout=Playout(...)`` step 1 sends an action packet
and step 2 applies the shim's playout rules (:mod:`~fleetgym.wrappers.remote.playout_host`).
"""

from __future__ import annotations

import logging
import os
import queue
import secrets
import socket
import threading
import time
from typing import Any, SupportsFloat

import gymnasium as gym
import numpy as np

from fleetgym.errors import ProtocolError, RemoteEnvError
from fleetgym.validation import check_choice, check_timeout, quote
from fleetgym.wrappers.action_check import ActionCheck
from fleetgym.wrappers.playout import Playout
from fleetgym.wrappers.profiles import NetworkProfile, get_profile
from fleetgym.wrappers.remote.addresses import parse_address
from fleetgym.wrappers.remote.conditions import DelayedSender, FreshestBox
from fleetgym.wrappers.remote.files import check_record_path, read_secret
from fleetgym.wrappers.remote.playout_host import ClientPlayout
from fleetgym.wrappers.remote.recorder import PacketRecorder
from fleetgym.wrappers.remote.spaces import build_space, from_wire, to_wire
from fleetgym.wrappers.remote.wire import Frame, MessageType, WireCodec
from fleetgym.wrappers.shim_config import (
    DELIVERY_MODES,
    STEP_INFO_KEYS,
    ShimStreams,
    check_seed,
    default_start_action,
)
from fleetgym.wrappers.timeline import LoopTiming, loop_ages

__all__ = ["RemoteEnv"]

log = logging.getLogger(__name__)
_M = MessageType
_GONE = object()


class RemoteEnv(gym.Env[Any, Any]):
    """An env served by ``fleetgym serve-env``, stepped at its real control period.

    Example (a server in this process; ``fleetgym serve-env`` runs one on its own)::

        server = RemoteEnvServer("CartPole-v1").start()
        env = gym.make("fleetgym/Remote-v0", address="%s:%d" % server.address,
                       profile="wifi-normal")
        obs, info = env.reset(seed=0)
        obs, reward, terminated, truncated, info = env.step(1)
        info["obs_age_steps"], info["action_held"]

    Args:
        address: The server's ``"host:port"``.
        profile: Network profile whose downlink channel the actions take; default the
            profile the server announces (the server applies the uplink channel).
        secret: Shared secret (>= 16 bytes) if the server requires one.
        secret_file: A file holding the secret (instead of ``secret``).
        transport: ``"udp"`` (datagrams for observations and actions) or ``"tcp"``
            (everything on the control connection).
        timeout_s: How long any request may wait for the server beyond its deadline.
        uplink_share: Fraction of the period left for the observation's trip, in (0, 1).
        delivery: ``"fifo"`` or ``"latest"`` for the actions' hold.
        record_path: If set, ``close`` writes the observations' per-packet trace there.
        playout: A :class:`~fleetgym.wrappers.playout.Playout`: ``step`` then takes
            :class:`~fleetgym.wrappers.playout.ActionPacket` s (scheduled, chunked
            actions), and the server applies each tick's action from a playout buffer by
            the shim's rules (negotiated at HELLO; ``info`` adds ``action_source``, the
            episode's last step ``network`` with the playout counters). The rules cross the
            wire as data: with ``underrun="fallback"`` the server's own fallback policy
            acts, and a server without one refuses the session
            (:mod:`fleetgym.wrappers.remote.playout_host`).

    Raises:
        RemoteEnvError: If the server cannot be reached, refuses the session or stops
            answering (never a hang: every wait has a timeout).
        TypeError, ValueError: For a bad argument, checked before connecting (``address``
            not ``host:port``, both ``secret`` and ``secret_file``, an unwritable
            ``record_path``, a ``playout`` that is no Playout, ...).
        InvalidActionError: From ``step``, for an action outside the action space (with a
            playout: a packet :func:`~fleetgym.wrappers.playout.check_packet` refuses, or
            one too large for a datagram).
        fleetgym.errors.UnknownProfileError: For an unknown profile name.
    """

    metadata: dict[str, Any] = {"render_modes": []}

    def __init__(
        self,
        address: str,
        profile: str | NetworkProfile | None = None,
        *,
        secret: bytes | None = None,
        secret_file: str | os.PathLike[str] | None = None,
        transport: str = "udp",
        timeout_s: float = 5.0,
        uplink_share: float = 0.5,
        delivery: str = "fifo",
        record_path: str | None = None,
        playout: Playout | None = None,
    ) -> None:
        self.host, self.port = parse_address(address)
        if self.port == 0:
            raise ValueError(f"address: expected a server port > 0, actual {quote(address)}")
        if secret is not None and secret_file is not None:
            raise ValueError("secret, secret_file: expected one of them, actual both")
        if profile is not None:
            profile = get_profile(profile)  # an unknown name fails before connecting
        if record_path is not None:
            check_record_path(record_path)
        if secret_file is not None:
            secret = read_secret(secret_file)
        #: The agent's end of scheduled packets (None: plain actions).
        self._playout = None if playout is None else ClientPlayout(playout)
        self.transport = check_choice("transport", transport, ("udp", "tcp"))
        self.timeout_s = check_timeout("timeout_s", timeout_s) or 5.0
        #: The loop's timing, shared with the shim (fleetgym.wrappers.timeline).
        self.timing = LoopTiming("loop", uplink_share)
        self.uplink_share = self.timing.uplink_share
        self.delivery = check_choice("delivery", delivery, DELIVERY_MODES)
        self.codec = WireCodec(secret)
        self.address = address
        self.record_path = record_path
        self.recorder = PacketRecorder("uplink") if record_path else None
        self._replies: queue.Queue[Any] = queue.Queue()
        self._obs_box = FreshestBox()
        self._write_lock = threading.Lock()
        self._closed = False
        self._threads: list[threading.Thread] = []
        self._udp: socket.socket | None = None
        self._pongs: queue.Queue[Frame] = queue.Queue()
        try:
            self._tcp = socket.create_connection((self.host, self.port), timeout=self.timeout_s)
        except OSError as exc:
            raise RemoteEnvError(
                f"address: cannot connect to the env server at {address}: {exc}"
            ) from exc
        try:
            self._tcp.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            self._tcp.settimeout(None)  # the reader thread blocks; waits time out on the queue
            udp_port = None
            if self.transport == "udp":
                family = socket.AF_INET6 if ":" in self.host else socket.AF_INET
                self._udp = socket.socket(family, socket.SOCK_DGRAM)
                self._udp.bind((self._tcp.getsockname()[0], 0))
                self._udp.connect((self.host, self.port))
                self._udp.settimeout(0.2)
                udp_port = self._udp.getsockname()[1]
            self._start_thread(self._tcp_loop, "tcp")
            if self._udp is not None:
                self._start_thread(self._udp_loop, "udp")
            hello: dict[str, Any] = {"transport": self.transport, "udp_port": udp_port}
            if self._playout is not None:
                hello["playout"] = self._playout.wire
            welcome = self._request(_M.HELLO, hello)
            self._configure(welcome, profile)
            if self._playout is not None:
                self._playout.accept(welcome.meta, self.action_space, address)
        except BaseException:
            self._shutdown()
            raise
        self.sender = DelayedSender(self._send_data, fifo=self.delivery == "fifo")
        self._episode = -1
        self._t = -1
        self._streams: ShimStreams | None = None
        self._deadline = 0
        self.overruns = 0
        self._lost_base = 0

    # -- setup --------------------------------------------------------------------------
    def _configure(self, welcome: Frame, profile: str | NetworkProfile | None) -> None:
        meta = welcome.meta
        try:
            k = int(meta["n_obs_arrays"])
            self.observation_space = build_space(meta["obs_space"], welcome.arrays[:k])
            self.action_space = build_space(meta["action_space"], welcome.arrays[k:])
            self.step_ms = float(meta["step_ms"])
            self.session = int(meta["session"])
            self.remote_env_id = str(meta["env_id"])
            server_profile = str(meta["profile"])
        except (KeyError, TypeError, ValueError) as exc:
            raise ProtocolError(
                f"WELCOME: expected session, spaces and step_ms, actual {exc}"
            ) from exc
        self.profile = get_profile(server_profile if profile is None else profile)
        self.server_profile = server_profile
        self._check_action = ActionCheck(self.action_space)
        self._start_action = default_start_action(self.action_space)

    def _start_thread(self, target: Any, name: str) -> None:
        thread = threading.Thread(target=target, name=f"fleetgym-remote-{name}", daemon=True)
        thread.start()
        self._threads.append(thread)

    # -- io -----------------------------------------------------------------------------
    def _write(self, data: bytes) -> None:
        with self._write_lock:
            self._tcp.sendall(data)

    def _send_data(self, data: bytes) -> None:
        if self._udp is not None:
            self._udp.send(data)
        else:
            self._write(data)

    def _on_obs(self, frame: Frame) -> None:
        self._obs_box.put(frame)
        if self.recorder is not None:
            self.recorder.arrived(
                (frame.meta.get("ep"), frame.seq), frame.t_send_ns, frame.t_recv_ns
            )

    def _tcp_loop(self) -> None:
        try:
            while True:
                frame = self.codec.read_frame(self._tcp)
                if frame.type == _M.OBS:
                    self._on_obs(frame)
                else:
                    self._replies.put(frame)
        except (OSError, ConnectionError, ProtocolError) as exc:
            if not self._closed:
                log.debug("control connection ended: %s", exc)
            self._replies.put((_GONE, exc))

    def _udp_loop(self) -> None:
        assert self._udp is not None
        while not self._closed:
            try:
                data = self._udp.recv(65_535)
            except TimeoutError:
                continue
            except OSError:
                if self._closed:
                    return
                continue  # ICMP port unreachable while the server restarts
            try:
                frame = self.codec.decode(data)
            except ProtocolError:
                continue
            if frame.type == _M.OBS and frame.session == self.session:
                self._on_obs(frame)
            elif frame.type == _M.PONG:
                self._pongs.put(frame)

    def _request(
        self, mtype: MessageType, meta: dict[str, Any], seq: int = 0, wait_s: float = 0.0
    ) -> Frame:
        """Send a control request and wait for its answer (or fail clearly)."""
        if self._closed:
            raise RemoteEnvError("the remote env is closed")
        try:
            self._write(self.codec.encode(mtype, getattr(self, "session", 0), seq, meta))
        except OSError as exc:
            raise RemoteEnvError(
                f"env server at {self.address} is gone ({exc}) during {mtype.name}"
            ) from exc
        limit = wait_s + self.timeout_s
        try:
            reply = self._replies.get(timeout=limit)
        except queue.Empty:
            raise RemoteEnvError(
                f"env server at {self.address} did not answer {mtype.name} within {limit:.1f} s"
            ) from None
        if isinstance(reply, tuple) and reply[0] is _GONE:
            self._replies.put(reply)  # every later request fails the same way
            raise RemoteEnvError(
                f"env server at {self.address} closed the connection during {mtype.name}: {reply[1]}"
            )
        if reply.type == _M.ERROR:
            raise RemoteEnvError(
                f"env server at {self.address} refused {mtype.name}: {reply.meta.get('message')}"
            )
        return reply

    # -- gym API ------------------------------------------------------------------------
    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[Any, dict[str, Any]]:
        """Reset the remote env and both directions' network state (see the module docstring).

        Args:
            seed: Seeds the remote env's reset and, as the network seed, both directions'
                delay streams (the same seed replays the same per-packet delays). ``None``:
                an unseeded env reset; the network streams continue from the previous
                episode (the first episode draws a random network seed).
            options: Accepted for the Gymnasium API but not sent to the server (ignored).
        """
        seed = check_seed(seed)
        super().reset(seed=seed)
        net_seed = seed
        if net_seed is None and self._streams is None:
            net_seed = secrets.randbits(63)
        self._episode += 1
        ep = self._episode
        self._obs_box.reset(ep, 0)
        reply = self._request(_M.RESET, {"seed": seed, "net_seed": net_seed, "ep": ep})
        if net_seed is not None:
            self._streams = ShimStreams(net_seed)
            _p, _up, down = self._streams.draw((self.profile,), self.step_ms)
            self.sender.set_sampler(down)
            self._lost_base = 0
        else:
            # Packets in flight stay in flight (a network cannot unsend them); the
            # receiver ignores the old episode's.
            self._lost_base = self.sender.lost
        obs = self._obs_from(reply)
        self._obs = obs
        self._obs_seq, self._obs_sent = 0, reply.t_send_ns
        self._applied_sent = reply.t_send_ns
        self._t = 0
        self._deadline = 0
        if self._playout is not None:
            self._playout.start()
        info: dict[str, Any] = dict(reply.meta.get("info") or {})
        info.update(
            {"obs_age_steps": 0, "obs_age_ms": 0.0, "true_obs": obs, "profile": self.profile.name}
        )
        return obs, info

    def _obs_from(self, frame: Frame) -> Any:
        if not frame.arrays:
            raise ProtocolError(f"{frame.type.name}: expected an observation array, actual none")
        return from_wire(self.observation_space, frame.arrays[0])

    def step(self, action: Any) -> tuple[Any, SupportsFloat, bool, bool, dict[str, Any]]:
        """One control period of wall-clock time: send, tick the remote env, take the freshest obs.

        With a playout ``action`` is an :class:`~fleetgym.wrappers.playout.ActionPacket`.

        Args:
            action: An element of the action space (without a playout), sent through the
                profile's downlink channel; the server applies the freshest one that arrived
                by its deadline. With a playout: an ``ActionPacket`` of scheduled actions.
        """
        if self._t < 0:
            raise gym.error.ResetNeeded("call reset() before step()")
        t = self._t
        playout = self._playout
        ep, sid, codec = self._episode, self.session, self.codec
        if playout is None:
            self._check_action(action, t)
            meta_out: dict[str, Any] = {"ep": ep}
            arr = to_wire(self.action_space, action)
        else:
            meta_out, arr = playout.encode(action, t, ep, codec, sid, self._udp is not None)
        period = int(self.step_ms * 1e6)
        now = time.time_ns()
        deadline = self._deadline + period
        if t == 0 or now > deadline - period + period // 4:
            if t > 0:
                self.overruns += 1
            deadline = now + period
        self._deadline = deadline
        if t == 0:
            # The timeline's convention (the shim's): the reset observation counts as
            # emitted by the env's step -1 and the start action as sent at tick -1, so an
            # age in ms is its age in ticks times the period, as in Mode 2.
            self._obs_sent = self.timing.env_step_ns(now, period)
            self._applied_sent = now - period
        env_deadline = self.timing.env_step_ns(deadline, period)

        def encode(t_wire: int) -> bytes:
            return codec.encode(_M.ACTION, sid, t, meta_out, [arr], t_send_ns=now, t_wire_ns=t_wire)

        if playout is not None:
            playout.sent_ns.append(now)
        down_lost = self.sender.submit(t, encode, now)
        reply = self._request(
            _M.TICK,
            {"ep": ep, "deadline_ns": env_deadline},
            seq=t,
            wait_s=(env_deadline - now) / 1e9,
        )
        meta = reply.meta
        waited = playout is not None and meta.get("source") == "wait"
        if reply.type != _M.STEP_DONE or reply.seq != t or len(reply.arrays) != 2 - waited:
            raise ProtocolError(
                f"TICK {t}: expected STEP_DONE {t}, actual {reply.type.name} {reply.seq}"
            )
        t_emit = int(meta["t_emit_ns"])
        if self.recorder is not None:
            self.recorder.expect((ep, t + 1), t_emit)
        wait = (deadline - time.time_ns()) / 1e9
        if wait > 0:
            time.sleep(wait)
        got = self._obs_box.take(deadline)
        if got is not None:
            self._obs = self._obs_from(got)
            self._obs_seq, self._obs_sent = got.seq, got.t_send_ns
            obs = self._obs
        else:
            obs = self._obs.copy() if isinstance(self._obs, np.ndarray) else self._obs
        self._t = t + 1
        action_seq = int(meta["action_seq"])
        if playout is not None:  # the applied plan's packet was sent by this client
            self._applied_sent = playout.sent_at(action_seq, period)
        elif not meta["held"]:
            self._applied_sent = int(meta["action_t_send_ns"])
        obs_age, action_age = loop_ages(t, self._obs_seq, action_seq)
        ours = {
            "obs_age_steps": obs_age,
            "obs_age_ms": 0.0 if obs_age == 0 else max(0.0, (t_emit - self._obs_sent) / 1e6),
            "action_age_steps": action_age,
            "action_age_ms": 0.0 if action_age == 0 else max(0.0, (now - self._applied_sent) / 1e6),
            "uplink_lost": bool(meta["up_lost"]),
            "downlink_lost": down_lost,
            "action_held": bool(meta["held"]),
            "applied_action": None if waited else from_wire(self.action_space, reply.arrays[1]),
            "true_obs": from_wire(self.observation_space, reply.arrays[0]),
            "reordered_packets": self._obs_box.reordered + int(meta["down_reordered"]),
            "stale_packets": self._obs_box.stale + int(meta["down_stale"]),
            "lost_packets": int(meta["up_lost_total"]) + self.sender.lost - self._lost_base,
            "action_holds": int(meta["holds"]),
        }
        assert tuple(ours) == STEP_INFO_KEYS
        info: dict[str, Any] = dict(meta.get("info") or {})
        info.update(ours)
        info["tick_late_ms"] = int(meta["late_ns"]) / 1e6
        terminated, truncated = bool(meta["terminated"]), bool(meta["truncated"])
        if playout is not None:
            lost = self.sender.lost - self._lost_base
            playout.add_info(info, meta, self._obs_box, lost, self.profile.name)
        return obs, float(meta["reward"]), terminated, truncated, info

    # -- measurement --------------------------------------------------------------------
    def round_trip_ms(self, n: int = 100, channel: str = "udp") -> np.ndarray:
        """``n`` echo round trips to the server (no profile applied), in ms.

        Args:
            n: How many echoes, one after the other; the result has ``n`` entries.
            channel: ``"udp"``: datagrams (on the control connection when the session's
                ``transport`` is ``"tcp"``); ``"tcp"``: the control connection.

        Raises:
            RemoteEnvError: If an echo does not come back within ``timeout_s``.
        """
        check_choice("channel", channel, ("udp", "tcp"))
        out = np.empty(n)
        for i in range(n):
            t0 = time.perf_counter_ns()
            if channel == "udp" and self._udp is not None:
                self._udp.send(self.codec.encode(_M.PING, self.session, i, {}))
                try:
                    while self._pongs.get(timeout=self.timeout_s).seq != i:
                        pass
                except queue.Empty:
                    raise RemoteEnvError(
                        f"no echo from {self.address} within {self.timeout_s} s"
                    ) from None
            else:
                self._write(self.codec.encode(_M.PING, self.session, i, {}))
                reply = self._replies.get(timeout=self.timeout_s)
                if isinstance(reply, tuple) or reply.type != _M.PONG:
                    raise RemoteEnvError(f"expected an echo from {self.address}, actual {reply!r}")
            out[i] = (time.perf_counter_ns() - t0) / 1e6
        return out

    def close(self) -> None:
        """End the session (best effort), stop the threads and write the trace if asked."""
        if self._closed:
            return
        try:
            if hasattr(self, "session"):
                self._request(_M.CLOSE, {}, wait_s=0.0)
        except (RemoteEnvError, ProtocolError):
            pass
        self._shutdown()
        if self.recorder is not None and self.record_path and len(self.recorder):
            self.recorder.write(self.record_path)
        super().close()

    def _shutdown(self) -> None:
        self._closed = True
        sender = getattr(self, "sender", None)
        if sender is not None:
            sender.close()
        for sock in (self._tcp if hasattr(self, "_tcp") else None, self._udp):
            if sock is not None:
                try:
                    sock.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass
                sock.close()
        for thread in self._threads:
            thread.join(timeout=2.0)
