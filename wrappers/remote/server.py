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
the lossy path). With a playout (scheduled action packets, the client's choice at HELLO)
the tick applies the action for tick ``t`` from the packets that arrived by ``S_t``
instead, by the rules of :mod:`fleetgym.wrappers.playout`
(:mod:`fleetgym.wrappers.remote.playout_host`).

A client that vanishes (connection reset, EOF, idle timeout) ends its session only; a
malformed frame on UDP is counted and dropped; one on TCP ends that session (an oversized
frame whose header is otherwise valid is read past and dropped instead). Binding a
non-loopback address requires a shared secret (every frame then carries an HMAC tag).

This module is the listener (sockets, accepting sessions, routing UDP frames, counters);
one session's env, threads and message handling are in
:mod:`fleetgym.wrappers.remote.session`.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

from fleetgym.errors import ProtocolError
from fleetgym.validation import check_choice, check_float, check_int, check_timeout, quote
from fleetgym.wrappers.profiles import NetworkProfile, get_profile
from fleetgym.wrappers.remote.addresses import is_loopback, parse_address
from fleetgym.wrappers.remote.files import read_secret
from fleetgym.wrappers.remote.session import (
    MAX_SERVER_STEP_MS,
    MIN_SERVER_STEP_MS,
    _Session,
    open_env,
)
from fleetgym.wrappers.remote.wire import MessageType, WireCodec
from fleetgym.wrappers.shim_config import DELIVERY_MODES

__all__ = ["RemoteEnvServer"]

log = logging.getLogger(__name__)
_M = MessageType

#: Longest ``idle_timeout_s`` (a week; ``None`` waits without limit).
MAX_IDLE_TIMEOUT_S = 7 * 24 * 3600.0


def _check_step_ms(step_ms: Any) -> float:
    return check_float("step_ms", step_ms, MIN_SERVER_STEP_MS, MAX_SERVER_STEP_MS)


def _check_record_dir(record_dir: Any) -> str:
    """``record_dir`` created and writable, as a str."""
    if not isinstance(record_dir, (str, os.PathLike)):
        raise TypeError(f"record_dir: expected a folder path or None, actual {quote(record_dir)}")
    if not str(os.fspath(record_dir)).strip():
        raise ValueError(f"record_dir: expected a folder path, actual {quote(record_dir)}")
    folder = Path(record_dir)
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ValueError(
            f"record_dir: expected a writable folder, actual {quote(str(folder))} "
            f"({exc.strerror or exc})"
        ) from None
    if not folder.is_dir() or not os.access(folder, os.W_OK | os.X_OK):
        raise ValueError(f"record_dir: expected a writable folder, actual {quote(str(folder))}")
    return str(folder)


def _bind(sock: socket.socket, host: str, port: int, what: str) -> None:
    try:
        sock.bind((host, port))
    except socket.gaierror as exc:
        raise socket.gaierror(
            exc.errno, f"bind: cannot resolve the host of {host}:{port} ({exc.strerror})"
        ) from None
    except OSError as exc:
        raise OSError(
            exc.errno, f"bind: cannot listen on {host}:{port} ({what}): {exc.strerror or exc}"
        ) from None


class RemoteEnvServer:
    """Serves a Gymnasium env to remote clients, one env instance per session.

    Args:
        env_id: A registered Gymnasium ID; each session calls ``gym.make(env_id, **env_kwargs)``.
        env_kwargs: Keyword arguments for ``gym.make``.
        bind: ``"host:port"`` (port 0: a free port, see :attr:`address`). Loopback by default.
        profile: Network profile whose uplink channel the observations take (default
            ``"perfect"``: sent at once). Clients apply the downlink channel to actions.
        secret: Shared secret (>= 16 bytes) for HMAC authentication; required for a
            non-loopback ``bind``.
        secret_file: A file holding the secret (instead of ``secret``).
        step_ms: Control period (ms), in ``(0, 60000]``; default from the env's ``dt``/``tau``.
        delivery: ``"fifo"`` or ``"latest"`` for the observations' hold (as in the shim).
        max_sessions: Most sessions open at once; more are refused.
        idle_timeout_s: A session whose client sends nothing for this long is closed
            (None: never).
        record_dir: If set, each session writes the actions it observed there
            (``session<N>-downlink.csv``, the shim's trace format); created if missing.
        fallback: The env host's fallback policy, ``obs -> action``, for the sessions whose
            client asks for a playout with ``underrun="fallback"`` (a callable cannot cross
            the wire; without one such a client is refused at HELLO). Called from each
            session's worker thread with that session's true current observation.

    Example:
        >>> with RemoteEnvServer("CartPole-v1", bind="127.0.0.1:0") as server:
        ...     server.address[0], server.address[1] > 0, server.stats()["sessions_open"]
        ('127.0.0.1', True, 0)

    Scheduled action packets: a client made with ``playout=Playout(...)`` sends its rules at
    HELLO (:mod:`fleetgym.wrappers.remote.playout_host`); its session then takes
    :class:`~fleetgym.wrappers.playout.ActionPacket` messages into a playout buffer and
    applies each tick's action by the rules of the shim's playout. A packet the session
    cannot use (malformed, stamped in the past or too far ahead, a chunk of the wrong shape
    or length, an action outside the space or NaN) is dropped and counted by reason in
    :meth:`stats` (``packets_dropped_<reason>``).

    The constructor makes the env once, with the code a session runs at HELLO, and closes
    it: an unknown ID, kwargs the env rejects, a space the wire format cannot carry or an
    env without a control period is refused here, before anything binds.

    Raises:
        TypeError: A value of the wrong type (``env_kwargs`` not a dict, a ``bool`` for a
            number, ...) or kwargs the env's constructor does not take.
        ValueError: A value out of range: ``bind`` not ``host:port`` (or non-loopback
            without a secret), ``step_ms`` outside ``(0, 60000]`` or not finite, both
            ``secret`` and ``secret_file``, an ``env_id`` Gymnasium does not know, an
            unwritable ``record_dir``.
        fleetgym.errors.UnknownProfileError: An unknown profile name.
        fleetgym.errors.UnsupportedSpaceError: A space other than Box, Discrete,
            MultiDiscrete or MultiBinary.
    """

    def __init__(
        self,
        env_id: str,
        *,
        env_kwargs: dict[str, Any] | None = None,
        bind: str = "127.0.0.1:0",
        profile: str | NetworkProfile = "perfect",
        secret: bytes | None = None,
        secret_file: str | os.PathLike[str] | None = None,
        step_ms: float | None = None,
        delivery: str = "fifo",
        max_sessions: int = 64,
        idle_timeout_s: float | None = 300.0,
        record_dir: str | os.PathLike[str] | None = None,
        fallback: Callable[[Any], Any] | None = None,
    ) -> None:
        if not isinstance(env_id, str):
            raise TypeError(f"env_id: expected a Gymnasium ID (str), actual {quote(env_id)}")
        if not env_id.strip():
            raise ValueError(f"env_id: expected a Gymnasium ID, actual {quote(env_id)}")
        self.env_id = env_id
        if env_kwargs is not None and not isinstance(env_kwargs, dict):
            raise TypeError(
                f"env_kwargs: expected a dict or None, actual {type(env_kwargs).__name__}"
            )
        self.env_kwargs = dict(env_kwargs or {})
        bad_keys = [k for k in self.env_kwargs if not isinstance(k, str) or not k.isidentifier()]
        if bad_keys:
            raise TypeError(f"env_kwargs: expected keyword names, actual keys {quote(bad_keys)}")
        self.host, self.port = parse_address(bind, "bind")
        if secret is not None and secret_file is not None:
            raise ValueError(
                "secret, secret_file: expected one of them, actual both (a secret and a file)"
            )
        if secret_file is not None:
            secret = read_secret(secret_file)
        if not is_loopback(self.host) and secret is None:
            raise ValueError(
                f"secret: expected a shared secret to bind the non-loopback address "
                f"{self.host}, actual None (use --secret-file)"
            )
        self.profile = get_profile(profile)
        self.codec = WireCodec(secret)
        self.step_ms = None if step_ms is None else _check_step_ms(step_ms)
        self.delivery = check_choice("delivery", delivery, DELIVERY_MODES)
        self.max_sessions = check_int("max_sessions", max_sessions, 1, 10_000)
        self.idle_timeout_s = check_timeout("idle_timeout_s", idle_timeout_s)
        if self.idle_timeout_s is not None and self.idle_timeout_s > MAX_IDLE_TIMEOUT_S:
            raise ValueError(
                f"idle_timeout_s: expected a number of seconds in (0, {MAX_IDLE_TIMEOUT_S:g}] "
                f"or None, actual {quote(idle_timeout_s)}"
            )
        self.record_dir = None if record_dir is None else _check_record_dir(record_dir)
        if fallback is not None and not callable(fallback):
            raise TypeError(
                f"fallback: expected a callable obs -> action or None, actual {quote(fallback)}"
            )
        self.fallback = fallback
        # The env as a session makes it: refused now rather than at the first HELLO.
        env, _, self.obs_frame_bytes = open_env(
            self.env_id, self.env_kwargs, self.step_ms, self.codec
        )
        env.close()
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
        """Bind, listen and start serving in background threads; returns self.

        Raises:
            OSError: If the address cannot be bound (in use, not this host's, a name that
                does not resolve); the message names it.
        """
        family = socket.AF_INET6 if ":" in self.host else socket.AF_INET
        tcp = socket.socket(family, socket.SOCK_STREAM)
        try:
            tcp.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            _bind(tcp, self.host, self.port, "TCP")
            self.port = tcp.getsockname()[1]
            tcp.listen(64)
            tcp.settimeout(0.2)
            _bind(self.udp, self.host, self.port, "UDP")
            self.udp.settimeout(0.2)
        except BaseException:
            tcp.close()
            raise
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
        """Counters: sessions opened/closed/open, rejected frames by reason, drops (action
        packets by reason: ``packets_dropped_<reason>``, see
        :data:`~fleetgym.wrappers.remote.playout_host.DROP_REASONS`)."""
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
                self._on_datagram(data, addr)
            except Exception:  # the loop outlives any datagram: counted, logged, dropped
                self._count("udp_errors")
                log.warning("datagram from %s dropped: handling it failed", addr, exc_info=True)

    def _on_datagram(self, data: bytes, addr: Any) -> None:
        """Decode one datagram and hand an action to its session (or answer a ping)."""
        try:
            frame = self.codec.decode(data)
        except ProtocolError:
            self._count("udp_rejected")
            return
        if frame.type == _M.PING:
            try:
                self.udp.sendto(self.codec.encode(_M.PONG, frame.session, frame.seq, {}), addr)
            except OSError:
                pass
            return
        with self._lock:
            session = self._sessions.get(frame.session)
        if session is None or frame.type != _M.ACTION or session.udp_addr != addr:
            self._count("udp_unexpected")
            return
        session.on_action(frame)
