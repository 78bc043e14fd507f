"""Mode 3 (remote env over loopback sockets) throughput, as ratios measured in the same run.

* ``test_bench_remote_steps_vs_ceiling``: Mode 3 env steps per wall-clock second over the
  control-rate ceiling ``1000 / step_ms`` (one step per control period is the most a
  real-time loop can do). Target: >= 0.8. The reference is the clock itself.
* ``test_bench_wire_codec``: encode + decode of a CartPole observation frame with HMAC, over
  the bare ``CartPole-v1`` step it would carry, both in CPU time of this process. Reported
  only (how many env steps one message costs); target: <= 5.

The server runs in this process on a free loopback port. Default sizes are tiny so the
CI run (``--benchmark-disable``) takes seconds; the measured run:

``pytest benchmarks/test_bench_remote.py --benchmark-enable -s``
"""

from __future__ import annotations

import time

import gymnasium as gym
import numpy as np
import pytest

import fleetgym  # noqa: F401  (registers the IDs)
from fleetgym.wrappers.remote import RemoteEnvServer
from fleetgym.wrappers.remote.wire import MessageType, WireCodec


@pytest.mark.timeout(300)
def test_bench_remote_steps_vs_ceiling(benchmark):
    steps = 25 if benchmark.disabled else 1500
    server = RemoteEnvServer("CartPole-v1", profile="wifi-normal").start()
    env = gym.make("fleetgym/Remote-v0", address=f"127.0.0.1:{server.address[1]}")
    try:
        step_ms = env.unwrapped.step_ms

        def run() -> float:
            env.reset(seed=0)
            t0 = time.perf_counter()
            for t in range(steps):
                *_, term, trunc, _ = env.step(t % 2)
                if term or trunc:
                    env.reset()
            return time.perf_counter() - t0

        wall = benchmark.pedantic(run, rounds=1, iterations=1)
    finally:
        env.close()
        server.stop()
    ratio = steps / wall / (1000.0 / step_ms)
    benchmark.extra_info.update({"steps": steps, "ratio_to_ceiling": ratio, "target": 0.8})
    print(f"\nMode 3 steps/s over the control-rate ceiling: {ratio:.3f} (target >= 0.8)")
    if not benchmark.disabled:
        assert ratio >= 0.8


def test_bench_wire_codec(benchmark):
    n = 200 if benchmark.disabled else 20_000
    codec = WireCodec(b"0123456789abcdef")
    obs = np.zeros(4, np.float32)
    env = gym.make("CartPole-v1")
    env.reset(seed=0)

    def run() -> tuple[float, float]:
        t0 = time.process_time()
        for i in range(n):
            codec.decode(codec.encode(MessageType.OBS, 1, i, {"ep": 0}, [obs]))
        t1 = time.process_time()
        for i in range(n):
            _, _, term, trunc, _ = env.step(i % 2)
            if term or trunc:
                env.reset()
        return t1 - t0, time.process_time() - t1

    codec_s, env_s = benchmark.pedantic(run, rounds=1, iterations=1)
    ratio = codec_s / max(env_s, 1e-9)
    benchmark.extra_info.update({"messages": n, "codec_over_env_step": ratio})
    print(f"\nwire encode+decode (HMAC) / CartPole step, CPU time: {ratio:.2f} (target <= 5)")
