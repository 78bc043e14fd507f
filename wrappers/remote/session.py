"""One client session of :class:`~fleetgym.wrappers.remote.server.RemoteEnvServer`.

A session owns the client's env, its network state (the freshest-action box, the
observations' delayed sender, the shim streams) and two threads: the reader, which takes
frames off the session's TCP connection (actions to the box, the rest to the worker), and
the worker, which answers HELLO, RESET, TICK and CLOSE in order. The listener (accepting
connections, the UDP socket, the counters) is the server; a session reaches it only
through :class:`SessionHost`. See :mod:`fleetgym.wrappers.remote.server` for the protocol.
"""

from __future__ import annotations

import difflib
import logging
import queue
import socket
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol

import gymnasium as gym
import numpy as np

from fleetgym.errors import ProtocolError, UnsupportedSpaceError
from fleetgym.validation import check_choice, check_float, check_int, quote
from fleetgym.wrappers.channel_base import MIN_STEP_MS
from fleetgym.wrappers.profiles import NetworkProfile
from fleetgym.wrappers.remote.conditions import DelayedSender, FreshestBox
from fleetgym.wrappers.remote.playout_host import PlayoutHost, playout_from_wire
from fleetgym.wrappers.remote.recorder import PacketRecorder
from fleetgym.wrappers.remote.spaces import describe_space, from_wire, to_wire
from fleetgym.wrappers.remote.wire import (
    DATAGRAM_LIMIT,
    Frame,
    MessageType,
    WireCodec,
    plain_info,
)
from fleetgym.wrappers.shim_config import ShimStreams, default_start_action, infer_step_ms

log = logging.getLogger(__name__)
_M = MessageType

#: Control periods a remote env server accepts, in ms: a tick of at most a minute (a
#: session's reader waits for it), above 0.
MIN_SERVER_STEP_MS = MIN_STEP_MS
MAX_SERVER_STEP_MS = 60_000.0


def _space_meta(name: str, space: gym.Space[Any]) -> tuple[dict[str, Any], list[np.ndarray]]:
    try:
        return describe_space(space)
    except UnsupportedSpaceError as exc:
        raise UnsupportedSpaceError(f"{name}: {str(exc).removeprefix('space: ')}") from None


def _env_error(env_id: str, env_kwargs: dict[str, Any], exc: Exception) -> Exception:
    """The error of ``gym.make(env_id, **env_kwargs)`` as one naming the argument."""
    reason = f"{type(exc).__name__}: {quote(str(exc), 200)}"
    if isinstance(exc, gym.error.Error) and env_id.rpartition(":")[2] not in gym.registry:
        name = env_id.rpartition(":")[2]
        close = difflib.get_close_matches(name, list(gym.registry), n=3, cutoff=0.6)
        hint = f"; close matches: {', '.join(map(repr, close))}" if close else ""
        return ValueError(
            f"env_id: expected a registered Gymnasium ID, actual {quote(env_id)} ({reason}{hint})"
        )
    if env_kwargs:
        kind = TypeError if isinstance(exc, TypeError) else ValueError
        return kind(
            f"env_kwargs: expected keywords that {env_id} takes, actual "
            f"{quote(sorted(env_kwargs))} (gym.make raised {reason})"
        )
    return ValueError(
        f"env_id: expected an env that can be made, actual {quote(env_id)} ({reason})"
    )


def open_env(
    env_id: str, env_kwargs: dict[str, Any], step_ms: float | None, codec: WireCodec
) -> tuple[gym.Env[Any, Any], float, int]:
    """A session's env, its control period and the size of one observation's frame.

    The server calls it once in its constructor (then closes the env), so an env that no
    session could serve is refused before the server binds; each session calls it at
    HELLO.

    Returns:
        ``(env, step_ms, obs_frame_bytes)``; the spaces' description and an observation
        were encoded as a session encodes them (so they fit a frame).

    Raises:
        UnsupportedSpaceError: A space the wire format cannot carry (names the space).
        ValueError: No control period (the env has no ``dt``/``tau`` and ``step_ms`` is
            None) or one outside ``[MIN_SERVER_STEP_MS, MAX_SERVER_STEP_MS]``, or a
            space whose description or observation does not fit a frame.
        TypeError: kwargs the env's constructor does not take (``gym.make`` raised a
            TypeError; the message names ``env_kwargs``).
        ValueError: An ``env_id`` Gymnasium does not know, or anything else ``gym.make``
            raised (the message names ``env_id`` or ``env_kwargs`` and quotes the error).
    """
    try:
        env: gym.Env[Any, Any] = gym.make(env_id, **env_kwargs)
    except Exception as exc:
        raise _env_error(env_id, env_kwargs, exc) from exc
    try:
        period = step_ms if step_ms is not None else infer_step_ms(env)
        if period is None:
            raise ValueError(
                f"step_ms: expected a control period for {env_id}, which has no dt or tau, "
                f"actual None (pass step_ms)"
            )
        period = check_float("step_ms", period, MIN_SERVER_STEP_MS, MAX_SERVER_STEP_MS)
        obs_meta, obs_arrays = _space_meta("observation_space", env.observation_space)
        act_meta, act_arrays = _space_meta("action_space", env.action_space)
        default_start_action(env.action_space)
        try:
            codec.encode(
                _M.WELCOME,
                0,
                0,
                {"obs_space": obs_meta, "action_space": act_meta},
                [*obs_arrays, *act_arrays],
            )
            sample = to_wire(env.observation_space, env.observation_space.sample())
            obs_bytes = len(codec.encode(_M.OBS, 0, 0, {"ep": 0}, [sample]))
        except (ProtocolError, TypeError, ValueError) as exc:
            raise ValueError(
                f"observation_space: expected spaces whose description and elements fit a "
                f"frame, actual {quote(env.observation_space)} ({exc})"
            ) from None
    except BaseException:
        env.close()
        raise
    return env, period, obs_bytes


class SessionHost(Protocol):
    """What a session uses of its server.

    :class:`~fleetgym.wrappers.remote.server.RemoteEnvServer` provides it; a protocol
    rather than an import keeps the two modules free of a cycle.
    """

    env_id: str
    env_kwargs: dict[str, Any]
    profile: NetworkProfile
    codec: WireCodec
    step_ms: float | None
    delivery: str
    record_dir: str | None
    obs_frame_bytes: int
    udp: socket.socket
    fallback: Callable[[Any], Any] | None

    def _count(self, key: str, n: int = 1) -> None: ...

    def _forget(self, session: _Session) -> None: ...


class _Session:
    """One client's env, its network state and its two threads (reader, worker)."""

    def __init__(self, server: SessionHost, sid: int, conn: socket.socket, peer: Any) -> None:
        self.server, self.sid, self.conn, self.peer = server, sid, conn, peer
        self.codec = server.codec
        self.write_lock = threading.Lock()
        self.control: queue.Queue[Frame | None] = queue.Queue()
        self.box = FreshestBox()
        #: Scheduled action packets (the client asked for a playout at HELLO), else None.
        self.playout: PlayoutHost | None = None
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
                frame = self.codec.read_frame_or_skip(self.conn)
                if frame is None:  # an oversized frame, read past and dropped
                    self.server._count("tcp_oversized_dropped")
                elif frame.type == _M.ACTION:
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
        playout = self.playout
        if playout is None:
            self.box.put(frame)
        else:
            playout.on_frame(frame)  # checked, filed or dropped and counted; never raises
        if self.recorder is not None and type(frame.meta.get("ep")) is int:
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
            if server.obs_frame_bytes > DATAGRAM_LIMIT:
                raise ValueError(
                    f"transport: expected 'tcp' for {server.env_id}, whose observations take "
                    f"{server.obs_frame_bytes} bytes (a datagram holds {DATAGRAM_LIMIT}), "
                    f"actual 'udp'"
                )
        env, self.step_ms, _ = open_env(
            server.env_id, server.env_kwargs, server.step_ms, self.codec
        )
        if frame.meta.get("playout") is not None:
            try:
                rules = playout_from_wire(frame.meta["playout"], env.action_space, server.fallback)
                self.playout = PlayoutHost(rules, env.action_space, server._count)
            except BaseException:
                env.close()
                raise
        self.env = env
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
            "playout": None if self.playout is None else self.playout.wire,
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
        if self.playout is not None:
            self.playout.start(ep, obs)
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
        applied: list[np.ndarray] = []
        if self.playout is None:
            action_meta = self._freshest_action(env, deadline)
            obs, reward, terminated, truncated, info = env.step(self.applied)
            applied.append(to_wire(env.action_space, self.applied))
        else:
            step = self.playout.tick(env, t, deadline)
            action_meta = self.playout.step_meta(step)
            obs, reward, terminated, truncated, info = step[2:]
            if step.action is not None:  # a tick the env waited has no applied action
                applied.append(to_wire(env.action_space, step.action))
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
            **action_meta,
            "late_ns": t_env - deadline,
            "t_emit_ns": t_emit,
            "up_lost": up_lost,
            "up_lost_total": sender.lost - self.lost_base,
            "info": plain_info(info),
        }
        self.reply(_M.STEP_DONE, t, meta, [obs_arr, *applied])
        return True

    def _freshest_action(self, env: gym.Env[Any, Any], deadline: int) -> dict[str, Any]:
        """Without a playout: the freshest action that arrived by ``deadline`` becomes
        ``self.applied`` (else it is held); returns the STEP_DONE fields about it."""
        got = self.box.take(deadline)
        held = True
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
        return {
            "held": held,
            "action_seq": self.box.best_seq,
            "action_t_send_ns": got.t_send_ns if got is not None and not held else 0,
            "holds": self.holds,
            "down_reordered": self.box.reordered,
            "down_stale": self.box.stale,
        }

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
