"""The remote env server: one Gymnasium env per client session, stepped on the client's clock.

Transport: a TCP connection per session carries the control messages (HELLO/WELCOME,
RESET, TICK/STEP_DONE, CLOSE); observations and actions travel as UDP datagrams on the
same port number (or, with ``transport="tcp"`` chosen by the client, as frames on the
session's TCP connection). Wire format: :mod:`fleetgym.wrappers.remote.wire`.

The tick of a session (the client sends ``TICK t`` with the env's deadline ``S_t``):
wait until ``S_t``; apply the freshest action that arrived by ``S_t`` (else hold the last
applied one, or the start action before the first); step the env; emit the observation
``o_{t+1}`` through the profile's uplink channel (:class:`DelayedSender`); answer
``STEP_DONE t`` on TCP with the reward, the termination flags and ground truth (the
env's training signal is reliable, as in the shim; only observations and actions cross
the lossy path).

A client that vanishes (connection reset, EOF, idle timeout) ends its session only; a
malformed frame on UDP is counted and dropped; one on TCP ends that session. Binding a
non-loopback address requires a shared secret (every frame then carries an HMAC tag).
"""

from __future__ import annotations

import logging
import queue
import socket
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np

from fleetgym.errors import ProtocolError
from fleetgym.validation import check_choice, check_int, check_timeout, quote
from fleetgym.wrappers.profiles import NetworkProfile, get_profile
from fleetgym.wrappers.remote.conditions import DelayedSender, FreshestBox
from fleetgym.wrappers.remote.recorder import PacketRecorder
from fleetgym.wrappers.remote.spaces import describe_space, from_wire, to_wire
from fleetgym.wrappers.remote.wire import (
    Frame,
    MessageType,
    WireCodec,
    is_loopback,
    parse_address,
    plain_info,
)
from fleetgym.wrappers.shim_config import (
    DELIVERY_MODES,
    ShimStreams,
    default_start_action,
    infer_step_ms,
)

__all__ = ["RemoteEnvServer"]

log = logging.getLogger(__name__)
_M = MessageType


class _Session:
    """One client's env, its network state and its two threads (reader, worker)."""

    def __init__(self, server: RemoteEnvServer, sid: int, conn: socket.socket, peer: Any) -> None:
        self.server, self.sid, self.conn, self.peer = server, sid, conn, peer
        self.codec = server.codec
        self.write_lock = threading.Lock()
        self.control: queue.Queue[Frame | None] = queue.Queue()
        self.box = FreshestBox()
        self.env: gym.Env[Any, Any] | None = None
        self.udp_addr: tuple[str, int] | None = None
        self.transport = "udp"
        self.sender: DelayedSender | None = None
        self.streams: ShimStreams | None = None
        self.episode = -1
        self.applied: Any = None
        self.holds = 0
        self.lost_base = 0
        self.recorder = PacketRecorder("downlink") if server.record_dir else None
        self.closed = threading.Event()
        self.worker = threading.Thread(
            target=self._work, name=f"fleetgym-session-{sid}", daemon=True
        )

    # -- io -----------------------------------------------------------------------------
    def write(self, data: bytes) -> None:
        with self.write_lock:
            self.conn.sendall(data)

    def reply(self, mtype: MessageType, seq: int, meta: dict[str, Any], arrays: Any = ()) -> None:
        self.write(self.codec.encode(mtype, self.sid, seq, meta, arrays))

    def read_loop(self) -> None:
        """Read frames until the client goes; data frames to the box, the rest to the worker."""
        self.worker.start()
        try:
            while not self.closed.is_set():
                frame = self.codec.read_frame(self.conn)
                if frame.type == _M.ACTION:
                    self.on_action(frame)
                elif frame.type == _M.PING:
                    self.reply(_M.PONG, frame.seq, {"t_ping_ns": frame.t_send_ns})
                else:
                    self.control.put(frame)
                    if frame.type == _M.CLOSE:
                        break
        except ProtocolError as exc:
            self.server._count("tcp_rejected")
            log.warning("session %d: %s; closing it", self.sid, exc)
            try:
                self.reply(_M.ERROR, 0, {"message": str(exc)})
            except OSError:
                pass
        except (OSError, ConnectionError) as exc:
            if not self.closed.is_set():
                log.info("session %d: client gone (%s)", self.sid, exc or type(exc).__name__)
        finally:
            self.control.put(None)
            self.worker.join(timeout=5.0)
            self.shutdown()

    def on_action(self, frame: Frame) -> None:
        self.box.put(frame)
        if self.recorder is not None:
            self.recorder.arrived(
                (frame.meta.get("ep"), frame.seq), frame.t_send_ns, frame.t_recv_ns
            )

    def send_obs(self, data: bytes) -> None:
        if self.transport == "tcp":
            self.write(data)
        elif self.udp_addr is not None:
            self.server.udp.sendto(data, self.udp_addr)

    # -- control ------------------------------------------------------------------------
    def _work(self) -> None:
        while True:
            frame = self.control.get()
            if frame is None:
                return
            try:
                if not self._handle(frame):
                    return
            except (OSError, ConnectionError):
                return
            except Exception as exc:  # the env raised: report it, keep the session
                log.warning("session %d: %s failed: %r", self.sid, frame.type.name, exc)
                self.server._count("request_errors")
                try:
                    self.reply(_M.ERROR, frame.seq, {"message": f"{type(exc).__name__}: {exc}"})
                except OSError:
                    return

    def _handle(self, frame: Frame) -> bool:
        handler: Callable[[Frame], bool] | None = {
            _M.HELLO: self._hello,
            _M.RESET: self._reset,
            _M.TICK: self._tick,
            _M.CLOSE: self._close,
        }.get(frame.type)
        if handler is None:
            raise ProtocolError(
                f"message type: expected a client request, actual {frame.type.name}"
            )
        if frame.type != _M.HELLO and self.env is None:
            raise ProtocolError("expected HELLO first")
        return handler(frame)

    def _hello(self, frame: Frame) -> bool:
        if self.env is not None:
            raise ProtocolError("HELLO: the session is open already")
        server = self.server
        self.transport = check_choice(
            "transport", frame.meta.get("transport", "udp"), ("udp", "tcp")
        )
        port = frame.meta.get("udp_port")
        if self.transport == "udp":
            self.udp_addr = (self.peer[0], check_int("udp_port", port, 1, 65535))
        self.env = env = gym.make(server.env_id, **server.env_kwargs)
        step_ms = server.step_ms or infer_step_ms(env)
        if step_ms is None:
            raise ValueError(f"step_ms: the env {server.env_id} has no dt or tau; pass step_ms")
        self.step_ms = float(step_ms)
        self.start_action = default_start_action(env.action_space)
        self.sender = DelayedSender(self.send_obs, fifo=server.delivery == "fifo")
        obs_meta, obs_arrays = describe_space(env.observation_space)
        act_meta, act_arrays = describe_space(env.action_space)
        spec = env.spec
        meta = {
            "session": self.sid,
            "env_id": server.env_id,
            "step_ms": self.step_ms,
            "profile": server.profile.name,
            "delivery": server.delivery,
            "obs_space": obs_meta,
            "action_space": act_meta,
            "n_obs_arrays": len(obs_arrays),
            "max_episode_steps": spec.max_episode_steps if spec is not None else None,
        }
        self.reply(_M.WELCOME, frame.seq, meta, [*obs_arrays, *act_arrays])
        return True

    def _reset(self, frame: Frame) -> bool:
        assert self.env is not None and self.sender is not None
        seed, net_seed, ep = (frame.meta.get(k) for k in ("seed", "net_seed", "ep"))
        seed = None if seed is None else check_int("seed", seed, 0)
        ep = check_int("ep", ep, 0)
        obs, info = self.env.reset(seed=seed)
        if net_seed is not None or self.streams is None:
            self.streams = ShimStreams(
                None if net_seed is None else check_int("net_seed", net_seed, 0)
            )
            _profile, up, _down = self.streams.draw((self.server.profile,), self.step_ms)
            self.sender.set_sampler(up)
            self.lost_base = 0
        else:
            # Packets in flight stay in flight (a network cannot unsend them); the
            # receiver ignores the old episode's.
            self.lost_base = self.sender.lost
        self.episode = ep
        self.box.reset(ep, -1)
        self.applied = self.start_action
        self.holds = 0
        meta = {"ep": ep, "profile": self.server.profile.name, "info": plain_info(info)}
        self.reply(_M.RESET_DONE, frame.seq, meta, [to_wire(self.env.observation_space, obs)])
        return True

    def _tick(self, frame: Frame) -> bool:
        env, sender = self.env, self.sender
        assert env is not None and sender is not None
        t = frame.seq
        if frame.meta.get("ep") != self.episode:
            raise ProtocolError(
                f"TICK: expected episode {self.episode}, actual {frame.meta.get('ep')!r}"
            )
        deadline = check_int("deadline_ns", frame.meta.get("deadline_ns"), 0)
        if self.recorder is not None:
            self.recorder.expect((self.episode, t), frame.t_send_ns)
        wait = (deadline - time.time_ns()) / 1e9
        if wait > 0:
            time.sleep(min(wait, 10.0))
        t_env = time.time_ns()
        got = self.box.take(deadline)
        held = True
        action_seq, action_sent = -1, 0
        if got is not None:
            try:
                action = from_wire(env.action_space, got.arrays[0] if got.arrays else np.empty(0))
                if not env.action_space.contains(action):
                    raise ProtocolError(f"action: expected an element of {env.action_space}")
                self.applied, held = action, False
            except ProtocolError as exc:
                self.server._count("bad_actions")
                log.warning("session %d: dropped action %d: %s", self.sid, got.seq, exc)
        if held:
            self.holds += 1
        action_seq, action_sent = (
            self.box.best_seq,
            got.t_send_ns if got is not None and not held else 0,
        )
        obs, reward, terminated, truncated, info = env.step(self.applied)
        t_emit = time.time_ns()
        obs_arr = to_wire(env.observation_space, obs)
        sid, ep, codec = self.sid, self.episode, self.codec

        def encode(t_wire: int) -> bytes:
            return codec.encode(
                _M.OBS, sid, t + 1, {"ep": ep}, [obs_arr], t_send_ns=t_emit, t_wire_ns=t_wire
            )

        up_lost = sender.submit(t + 1, encode, t_emit)
        meta = {
            "ep": ep,
            "reward": float(reward),
            "terminated": bool(terminated),
            "truncated": bool(truncated),
            "held": held,
            "action_seq": action_seq,
            "action_t_send_ns": action_sent,
            "holds": self.holds,
            "late_ns": t_env - deadline,
            "t_emit_ns": t_emit,
            "up_lost": up_lost,
            "up_lost_total": sender.lost - self.lost_base,
            "down_reordered": self.box.reordered,
            "down_stale": self.box.stale,
            "info": plain_info(info),
        }
        applied = to_wire(env.action_space, self.applied)
        self.reply(_M.STEP_DONE, t, meta, [obs_arr, applied])
        return True

    def _close(self, frame: Frame) -> bool:
        try:
            self.reply(_M.BYE, frame.seq, {})
        except OSError:
            pass
        return False

    def shutdown(self) -> None:
        if self.closed.is_set():
            return
        self.closed.set()
        if self.sender is not None:
            self.sender.close()
        if self.env is not None:
            self.env.close()
        try:
            self.conn.close()
        except OSError:
            pass
        if self.recorder is not None and self.server.record_dir is not None and len(self.recorder):
            self.recorder.write(Path(self.server.record_dir) / f"session{self.sid}-downlink.csv")
        self.server._forget(self)


class RemoteEnvServer:
    """Serves a Gymnasium env to remote clients, one env instance per session.

    Example:
        >>> with RemoteEnvServer("CartPole-v1", bind="127.0.0.1:0") as server:
        ...     server.address[0], server.address[1] > 0, server.stats()["sessions_open"]
        ('127.0.0.1', True, 0)

    Args:
        env_id: A registered Gymnasium ID; each session calls ``gym.make(env_id, **env_kwargs)``.
        env_kwargs: Keyword arguments for ``gym.make``.
        bind: ``"host:port"`` (port 0: a free port, see :attr:`address`). Loopback by default.
        profile: Network profile whose uplink channel the observations take (default
            ``"perfect"``: sent at once). Clients apply the downlink channel to actions.
        secret: Shared secret (>= 16 bytes) for HMAC authentication; required for a
            non-loopback ``bind``.
        step_ms: Control period (ms); default from the env's ``dt``/``tau``.
        delivery: ``"fifo"`` or ``"latest"`` for the observations' hold (as in the shim).
        max_sessions: Most sessions open at once; more are refused.
        idle_timeout_s: A session whose client sends nothing for this long is closed.
        record_dir: If set, each session writes the actions it observed there
            (``session<N>-downlink.csv``, the shim's trace format).

    Raises:
        TypeError, ValueError, UnknownProfileError: For a bad argument (a non-loopback
            ``bind`` without a secret among them).
    """

    def __init__(
        self,
        env_id: str,
        *,
        env_kwargs: dict[str, Any] | None = None,
        bind: str = "127.0.0.1:0",
        profile: str | NetworkProfile = "perfect",
        secret: bytes | None = None,
        step_ms: float | None = None,
        delivery: str = "fifo",
        max_sessions: int = 64,
        idle_timeout_s: float = 300.0,
        record_dir: str | None = None,
    ) -> None:
        if not isinstance(env_id, str) or not env_id:
            raise TypeError(f"env_id: expected a non-empty str, actual {quote(env_id)}")
        self.env_id = env_id
        self.env_kwargs = dict(env_kwargs or {})
        self.host, self.port = parse_address(bind, "bind")
        if not is_loopback(self.host) and secret is None:
            raise ValueError(
                f"secret: expected a shared secret to bind the non-loopback address "
                f"{self.host}, actual None (use --secret-file)"
            )
        self.profile = get_profile(profile)
        self.codec = WireCodec(secret)
        self.step_ms = None if step_ms is None else float(step_ms)
        self.delivery = check_choice("delivery", delivery, DELIVERY_MODES)
        self.max_sessions = check_int("max_sessions", max_sessions, 1, 10_000)
        self.idle_timeout_s = check_timeout("idle_timeout_s", idle_timeout_s)
        self.record_dir = record_dir
        self._sessions: dict[int, _Session] = {}
        self._lock = threading.Lock()
        self._counts: dict[str, int] = {}
        self._next_sid = 1
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        self.tcp: socket.socket | None = None
        self.udp = socket.socket(
            socket.AF_INET6 if ":" in self.host else socket.AF_INET, socket.SOCK_DGRAM
        )

    # -- lifecycle ----------------------------------------------------------------------
    def start(self) -> RemoteEnvServer:
        """Bind, listen and start serving in background threads; returns self."""
        family = socket.AF_INET6 if ":" in self.host else socket.AF_INET
        tcp = socket.socket(family, socket.SOCK_STREAM)
        tcp.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        tcp.bind((self.host, self.port))
        self.port = tcp.getsockname()[1]
        tcp.listen(64)
        tcp.settimeout(0.2)
        self.udp.bind((self.host, self.port))
        self.udp.settimeout(0.2)
        self.tcp = tcp
        for target, name in ((self._accept_loop, "accept"), (self._udp_loop, "udp")):
            thread = threading.Thread(target=target, name=f"fleetgym-server-{name}", daemon=True)
            thread.start()
            self._threads.append(thread)
        log.info(
            "serving %s on %s:%d (profile %s)", self.env_id, self.host, self.port, self.profile.name
        )
        return self

    @property
    def address(self) -> tuple[str, int]:
        """(host, port) the server listens on (TCP and UDP share the port)."""
        return self.host, self.port

    def __enter__(self) -> RemoteEnvServer:
        return self.start() if self.tcp is None else self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def serve_forever(self) -> None:
        """Block until :meth:`stop` is called (from another thread or a signal handler)."""
        self._stop.wait()

    def stop(self) -> None:
        """Stop accepting, end every session and join the threads."""
        self._stop.set()
        with self._lock:
            sessions = list(self._sessions.values())
        for session in sessions:
            session.closed.set()
            try:
                session.conn.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            session.shutdown()
        for thread in self._threads:
            thread.join(timeout=5.0)
        for sock in (self.tcp, self.udp):
            if sock is not None:
                sock.close()

    # -- accounting ---------------------------------------------------------------------
    def _count(self, key: str, n: int = 1) -> None:
        with self._lock:
            self._counts[key] = self._counts.get(key, 0) + n

    def _forget(self, session: _Session) -> None:
        with self._lock:
            if self._sessions.pop(session.sid, None) is not None:
                self._counts["sessions_closed"] = self._counts.get("sessions_closed", 0) + 1

    def stats(self) -> dict[str, int]:
        """Counters: sessions opened/closed/open, rejected frames by reason, drops."""
        with self._lock:
            out = dict(self._counts)
            out["sessions_open"] = len(self._sessions)
        out.setdefault("sessions_opened", 0)
        for reason, n in self.codec.rejected.items():
            out[f"rejected_{reason}"] = n
        return out

    # -- loops --------------------------------------------------------------------------
    def _accept_loop(self) -> None:
        assert self.tcp is not None
        while not self._stop.is_set():
            try:
                conn, peer = self.tcp.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            conn.settimeout(self.idle_timeout_s)
            with self._lock:
                full = len(self._sessions) >= self.max_sessions
                sid = self._next_sid
                if not full:
                    self._next_sid += 1
            if full:
                self._count("sessions_refused")
                try:
                    conn.sendall(self.codec.encode(_M.ERROR, 0, 0, {"message": "server full"}))
                finally:
                    conn.close()
                continue
            session = _Session(self, sid, conn, peer)
            with self._lock:
                self._sessions[sid] = session
                self._counts["sessions_opened"] = self._counts.get("sessions_opened", 0) + 1
            threading.Thread(
                target=session.read_loop, name=f"fleetgym-read-{sid}", daemon=True
            ).start()

    def _udp_loop(self) -> None:
        while not self._stop.is_set():
            try:
                data, addr = self.udp.recvfrom(65_535)
            except TimeoutError:
                continue
            except OSError:
                return
            try:
                frame = self.codec.decode(data)
            except ProtocolError:
                self._count("udp_rejected")
                continue
            if frame.type == _M.PING:
                try:
                    self.udp.sendto(self.codec.encode(_M.PONG, frame.session, frame.seq, {}), addr)
                except OSError:
                    pass
                continue
            with self._lock:
                session = self._sessions.get(frame.session)
            if session is None or frame.type != _M.ACTION or session.udp_addr != addr:
                self._count("udp_unexpected")
                continue
            session.on_action(frame)
