"""Mode 3 against Mode 2: the per-packet delay and loss a profile produces on a real socket
versus the shim's model of the same profile, and the loop's timing.

:func:`measure_socket_parity` runs a :class:`RemoteEnv` against a server for a number of
control ticks with both sides recording, reads the two recorded traces back through the
trace loader (the Mode 2 replay path) and compares each direction with
:func:`channel_reference`: the shim's delays for the same channel, packets one period
apart, with the shim's FIFO rule.

:func:`measure_playout_parity` does the same for scheduled action packets
(:mod:`fleetgym.wrappers.playout`), tick by tick: the same packets over the socket and
through the shim on the delays the server recorded (:func:`tick_replay`) must give the same
applied action, from the same source, at every tick.

Example:
    >>> from fleetgym.wrappers.channels import GaussianChannel
    >>> ref = channel_reference(GaussianChannel(30, 10, 0.02), 20_000, 20.0, seed=0)
    >>> s = delay_summary(ref)
    >>> round(s["loss"], 2), 30 < s["p50_ms"] < 36
    (0.02, True)
"""

from __future__ import annotations

import math
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

from fleetgym.traces.loaders import load_trace
from fleetgym.traces.trace_data import TraceData
from fleetgym.wrappers.channel_base import Channel

__all__ = [
    "QUANTILES",
    "channel_reference",
    "delay_summary",
    "measure_playout_parity",
    "measure_socket_parity",
    "tick_replay",
]

QUANTILES = (0.1, 0.5, 0.9, 0.99)


def channel_reference(
    channel: Channel, n: int, step_ms: float, seed: int = 0, fifo: bool = True
) -> np.ndarray:
    """The shim's effective one-way delays (ms, inf = lost) of ``n`` packets ``step_ms`` apart."""
    d = channel.sample_delays(np.random.default_rng(seed), n, step_ms)
    if not fifo:
        return d
    send = np.arange(n) * step_ms
    arrival = send + d
    ok = np.isfinite(arrival)
    # FIFO: a delivered packet never arrives before the delivered one sent ahead of it.
    arrival[ok] = np.maximum.accumulate(arrival[ok])
    return arrival - send


def delay_summary(delays_ms: np.ndarray) -> dict[str, float]:
    """Loss rate and delay quantiles (p10/p50/p90/p99 of delivered packets) in ms."""
    d = np.asarray(delays_ms, dtype=np.float64)
    ok = d[np.isfinite(d)]
    out = {
        "packets": float(d.size),
        "loss": float(np.mean(~np.isfinite(d))) if d.size else math.nan,
    }
    for q in QUANTILES:
        out[f"p{round(q * 100)}_ms"] = float(np.quantile(ok, q)) if ok.size else math.nan
    return out


def _within(socket: dict[str, float], shim: dict[str, float]) -> dict[str, bool]:
    """The targets: loss within 1 percentage point, each quantile within max(2 ms, 10 %)."""
    ok = {"loss": abs(socket["loss"] - shim["loss"]) <= 0.01}
    for q in QUANTILES:
        key = f"p{round(q * 100)}_ms"
        ok[key] = abs(socket[key] - shim[key]) <= max(2.0, 0.1 * shim[key])
    return ok


def measure_socket_parity(
    server: Any, steps: int, *, seed: int = 0, transport: str = "udp", rtt_samples: int = 200
) -> dict[str, Any]:
    """Run ``steps`` ticks of a random policy against a started ``server`` and compare.

    The server must have been made with ``record_dir`` (its downlink trace is read from
    there); the client applies the server's profile to the actions.

    Returns:
        A dict: per direction the socket's and the shim's :func:`delay_summary` and which
        targets hold; steps per hour against the control-rate ceiling; the timer's
        lateness; loopback round trips.
    """
    from fleetgym.wrappers.remote.client import RemoteEnv

    if server.record_dir is None:
        raise ValueError("server: expected a server made with record_dir, actual None")
    profile = server.profile
    with tempfile.TemporaryDirectory() as tmp:
        up_path = Path(tmp) / "uplink.csv"
        env = RemoteEnv(
            f"{server.address[0]}:{server.address[1]}",
            transport=transport,
            record_path=str(up_path),
        )
        try:
            sid = env.session
            rng = np.random.default_rng(seed)
            env.action_space.seed(seed)
            env.reset(seed=seed)
            late, done_steps = [], 0
            t0 = time.perf_counter()
            step_time = 0.0
            while done_steps < steps:
                a = env.action_space.sample()
                s0 = time.perf_counter()
                _obs, _r, term, trunc, info = env.step(a)
                step_time += time.perf_counter() - s0
                late.append(info["tick_late_ms"])
                done_steps += 1
                if term or trunc:
                    env.reset(seed=int(rng.integers(2**31)))
            wall = time.perf_counter() - t0
            overshoot = env.sender.overshoot_quantiles_ms((0.5, 0.99))
            rtt = {ch: env.round_trip_ms(rtt_samples, ch) for ch in ("udp", "tcp")}
            overruns = env.overruns
            step_ms = env.step_ms
            time.sleep(0.5)  # let the packets still held arrive before the traces are cut
        finally:
            env.close()
        down_path = Path(server.record_dir) / f"session{sid}-downlink.csv"
        for _ in range(50):
            if down_path.exists():
                break
            time.sleep(0.1)
        traces = {"uplink": load_trace(up_path), "downlink": load_trace(down_path)}
    result: dict[str, Any] = {"profile": profile.name, "step_ms": step_ms, "steps": steps}
    for direction, trace in traces.items():
        channel = getattr(profile, direction)
        sock = delay_summary(np.asarray(trace.delay_ms))
        shim = delay_summary(channel_reference(channel, 200_000, step_ms, seed=seed))
        result[direction] = {"socket": sock, "shim": shim, "within": _within(sock, shim)}
    ceiling = 3600.0 / (step_ms / 1000.0)
    result["steps_per_hour"] = steps / wall * 3600.0
    result["steps_per_hour_stepping"] = steps / step_time * 3600.0
    result["ceiling_steps_per_hour"] = ceiling
    result["throughput_ratio"] = result["steps_per_hour"] / ceiling
    result["overruns"] = overruns
    lq = np.quantile(np.asarray(late), (0.5, 0.99))
    result["env_tick_late_ms"] = {"p50": float(lq[0]), "p99": float(lq[1])}
    result["action_hold_overshoot_ms"] = {"p50": overshoot[0], "p99": overshoot[1]}
    result["round_trip_ms"] = {
        ch: {"p50": float(np.quantile(v, 0.5)), "p99": float(np.quantile(v, 0.99))}
        for ch, v in rtt.items()
    }
    return result


def tick_replay(trace: TraceData, step_ms: float) -> TraceData:
    """A Mode 3 recording as the shim replays it on its tick clock.

    The recorded send times are the client's real ones, a little after each tick's nominal
    time (the first send plus ``i`` periods, the client's schedule); the replay sends packet
    ``i`` at its nominal time and delays it to its recorded arrival, so that the shim sees
    the arrival times, and the arrival order, of the socket.
    """
    n = len(trace)
    nominal = np.arange(n) * float(step_ms)
    arrival = np.asarray(trace.send_ms) - float(trace.send_ms[0]) + np.asarray(trace.delay_ms)
    delay = np.maximum(arrival - nominal, 0.0)
    return TraceData(nominal, delay, n * float(step_ms), f"{trace.source} on the tick clock")


def _same(a: Any, b: Any) -> bool:
    if a is None or b is None:
        return a is None and b is None
    return bool(np.array_equal(np.asarray(a), np.asarray(b)))


def measure_playout_parity(
    server: Any,
    packets: list[Any],
    playout: Any,
    *,
    seed: int = 0,
    profile: Any = None,
    delivery: str = "fifo",
    transport: str = "udp",
) -> dict[str, Any]:
    """Send ``packets`` (one per tick, until the episode ends) over a real socket and
    through the shim on the delays the server recorded; compare tick by tick.

    ``server`` must have been made with ``record_dir``. The client takes ``profile``'s
    downlink (default the server's) and ``delivery``; the shim replays the recorded
    downlink (:func:`tick_replay`) on a perfect uplink, for the env the server serves.

    Returns:
        ``ticks``; ``mismatches``, a list of ``(tick, key, mode 2's, mode 3's)`` for the
        keys ``action_source``, ``applied_action``, ``action_age_steps``, ``reward`` and
        ``true_obs`` (empty when the modes agree); each mode's ``network`` counters at the
        episode's end (None if it did not end); the client's ``overruns`` (a step called
        late restarts its schedule, which the shim's tick clock does not model).
    """
    import gymnasium as gym

    from fleetgym.wrappers.channels import FixedDelay
    from fleetgym.wrappers.network_shim import NetworkShimWrapper
    from fleetgym.wrappers.remote.client import RemoteEnv
    from fleetgym.wrappers.trace_channel import TraceChannel

    if server.record_dir is None:
        raise ValueError("server: expected a server made with record_dir, actual None")
    env = RemoteEnv(
        f"{server.address[0]}:{server.address[1]}",
        profile,
        transport=transport,
        delivery=delivery,
        playout=playout,
    )
    mode3: list[tuple[Any, dict[str, Any]]] = []
    try:
        sid, step_ms = env.session, env.step_ms
        env.reset(seed=seed)
        for packet in packets:
            _obs, reward, term, trunc, info = env.step(packet)
            mode3.append((reward, info))
            if term or trunc:
                break
        overruns = env.overruns
    finally:
        env.close()
    path = Path(server.record_dir) / f"session{sid}-downlink.csv"
    for _ in range(100):  # the session writes its trace as it ends
        if path.exists():
            break
        time.sleep(0.05)
    replay = tick_replay(load_trace(path), step_ms)
    shim = NetworkShimWrapper(
        gym.make(server.env_id, **server.env_kwargs),
        uplink=FixedDelay(0.0),
        downlink=TraceChannel(replay, random_start=False),
        step_ms=step_ms,
        delivery=delivery,
        info="full",
        playout=playout,
    )
    mismatches: list[tuple[int, str, Any, Any]] = []
    info2: dict[str, Any] = {}
    try:
        shim.reset(seed=seed)
        for t, (reward3, info3) in enumerate(mode3):
            _obs, reward2, _term, _trunc, info2 = shim.step(packets[t])
            pairs = {
                "action_source": (info2["action_source"], info3["action_source"]),
                "applied_action": (info2["applied_action"], info3["applied_action"]),
                "action_age_steps": (info2["action_age_steps"], info3["action_age_steps"]),
                "reward": (float(reward2), float(reward3)),
                "true_obs": (info2["true_obs"], info3["true_obs"]),
            }
            for key, (a, b) in pairs.items():
                if not _same(a, b):
                    mismatches.append((t, key, a, b))
    finally:
        shim.close()
    return {
        "ticks": len(mode3),
        "mismatches": mismatches,
        "mode2": info2.get("network"),
        "mode3": mode3[-1][1].get("network") if mode3 else None,
        "overruns": overruns,
    }
