"""The faults the soak injects, each a plain function that does one real thing.

* :func:`kill` sends SIGKILL (an actor's worker process, the learner);
* :func:`stop_for` stops a process with SIGSTOP and continues it with SIGCONT after a
  while (longer than the trainer's ``actor_timeout``: the trainer should kill it first);
* :func:`close_connections` resets every established TCP connection of a listening port
  with ``ss -K`` (the kernel's socket-destroy; needs CAP_NET_ADMIN), as a middlebox or a
  crashed peer would, on both ends;
* :func:`send_garbage` sends malformed frames to a Mode 3 server (loopback only): random
  bytes, a header that claims an oversized payload, a truncated frame, random datagrams;
* :func:`mode3_alive` runs a real client session against the server afterwards.
"""

from __future__ import annotations

import os
import random
import signal
import socket
import struct
import subprocess
import time
from pathlib import Path

from fleetgym.experiments.soak.procs import pid_alive

__all__ = [
    "close_connections",
    "kill",
    "listening_ports",
    "mode3_alive",
    "send_garbage",
    "stop_for",
    "wait_gone",
]

#: The Mode 3 frame header (see :mod:`fleetgym.wrappers.remote.wire`): magic, version,
#: type, flags, session, seq, two timestamps, payload length.
_HEADER = struct.Struct("!4sBBHIQqqI")


def kill(pid: int) -> bool:
    """SIGKILL ``pid``; False if it was already gone."""
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        return False
    return True


def wait_gone(pid: int, timeout_s: float, poll_s: float = 0.1) -> float | None:
    """Seconds until ``pid`` is gone (None: still alive after ``timeout_s``)."""
    began = time.monotonic()
    while time.monotonic() - began < timeout_s:
        if not pid_alive(pid):
            return time.monotonic() - began
        time.sleep(poll_s)
    return None if pid_alive(pid) else time.monotonic() - began


def stop_for(pid: int, seconds: float) -> float | None:
    """SIGSTOP ``pid`` for ``seconds``, then SIGCONT it if it still lives.

    Returns:
        Seconds after the stop at which the process was gone (killed by its owner), or
        None if it was still alive when continued.
    """
    try:
        os.kill(pid, signal.SIGSTOP)
    except ProcessLookupError:
        return 0.0
    gone = wait_gone(pid, seconds, poll_s=0.2)
    if gone is None:
        try:
            os.kill(pid, signal.SIGCONT)
        except ProcessLookupError:
            pass
    return gone


def listening_ports(pid: int) -> list[int]:
    """The TCP ports ``pid`` listens on (from its socket descriptors and /proc/net/tcp*)."""
    inodes = set()
    try:
        for fd in os.listdir(f"/proc/{pid}/fd"):
            try:
                target = os.readlink(f"/proc/{pid}/fd/{fd}")
            except OSError:
                continue
            if target.startswith("socket:["):
                inodes.add(target[8:-1])
    except OSError:
        return []
    ports = set()
    for table in ("tcp", "tcp6"):
        try:
            lines = Path(f"/proc/{pid}/net/{table}").read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            fields = line.split()
            if len(fields) > 9 and fields[3] == "0A" and fields[9] in inodes:  # 0A: LISTEN
                ports.add(int(fields[1].rsplit(":", 1)[1], 16))
    return sorted(ports)


def close_connections(port: int) -> tuple[int, str]:
    """Reset every established loopback TCP connection to or from ``port`` (both ends).

    Returns:
        The sockets destroyed and ``ss``'s error output (empty when it worked).
    """
    command = [
        "ss", "-K", "-t", "-n", "state", "established",
        f"( sport = :{port} or dport = :{port} )",
    ]  # fmt: skip
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired) as failure:
        return 0, str(failure)
    rows = [line for line in done.stdout.splitlines()[1:] if line.strip()]
    return len(rows), done.stderr.strip() if done.returncode else ""


def send_garbage(port: int, rng: random.Random) -> int:
    """Send four kinds of malformed input to a Mode 3 server on 127.0.0.1; returns how many."""
    sent = 0
    junk = bytes(rng.getrandbits(8) for _ in range(4096))
    oversized = _HEADER.pack(b"FGRE", 1, 1, 0, 0, 0, 0, 0, 0xFFFFFFF0)
    truncated = _HEADER.pack(b"FGRE", 1, 1, 0, 0, 0, 0, 0, 1024) + junk[:100]
    for payload in (junk, oversized, truncated):
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=5) as sock:
                sock.sendall(payload)
                sock.settimeout(2)
                try:
                    sock.recv(4096)  # the server's error reply, or its close
                except (TimeoutError, OSError):
                    pass
            sent += 1
        except OSError:
            continue
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as udp:
        for size in (1, 40, 512, 1400):
            udp.sendto(junk[:size], ("127.0.0.1", port))
        sent += 1
    return sent


def mode3_alive(port: int, steps: int = 20) -> str:
    """Run a real client session (reset, ``steps`` steps) on the server; "" when it worked,
    else what went wrong."""
    import gymnasium as gym

    import fleetgym  # noqa: F401  (registers the IDs)

    try:
        env = gym.make("fleetgym/Remote-v0", address=f"127.0.0.1:{port}", transport="tcp")
        try:
            env.reset(seed=0)
            for _ in range(steps):
                _, _, terminated, truncated, _ = env.step(env.action_space.sample())
                if terminated or truncated:
                    env.reset()
        finally:
            env.close()
    except Exception as error:  # the check reports any failure, it does not raise
        return f"{type(error).__name__}: {error}"
    return ""
