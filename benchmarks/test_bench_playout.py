"""The cost of scheduled actions: the shim's playout path per tick against today's path,
as ratios measured in the same run.

* ``test_bench_playout_vs_shim``: env steps per CPU-second of
  ``NetworkShimWrapper(env, "wifi-degraded", playout=Playout(start="safe"))`` fed one
  ``ActionPacket(t + D, [a])`` per tick (k = 1), and fed packets of k = 8 actions, over
  the same shim without a playout buffer fed the plain actions (``a``): the env side's
  cost of the scheduled path. The packets are built before the clock starts, as
  :class:`~fleetgym.wrappers.ScheduledChunks` builds them (the agent's work), and
  ``start="safe"`` makes the env step at every tick on both paths (a waiting tick skips
  the env's step and would flatter the playout path). Pendulum-v1 (a Box action) and
  CartPole-v1 (a Discrete one; episodes reset as they end). Target: >= 0.95 (the
  scheduled path costs at most 5 % more per tick).
* ``test_bench_chunks_agent_side``: the agent side (:class:`~fleetgym.wrappers.ScheduledChunks`
  with CartPole's true dynamics and a hand-made controller) per tick, against the env side
  alone: what predicting and planning k = 1 and k = 8 actions costs per tick (reported,
  no target: it is the agent's computation, not the link's).

Rounds alternate reference and candidate and time CPU (``time.process_time``); the ratio
is the median over rounds of reference time / candidate time. The measured run:

``pytest benchmarks/test_bench_playout.py --benchmark-enable -s``
"""

from __future__ import annotations

import time
from typing import Any

import gymnasium as gym
import numpy as np
import pytest

from fleetgym.wrappers import ActionPacket, NetworkShimWrapper, Playout, ScheduledChunks

DELAY = 6


def _sizes(benchmark, quick: int, full: int, rounds_full: int) -> tuple[int, int]:
    return (quick, 1) if benchmark.disabled else (full, rounds_full)


def _report(benchmark, name: str, ref: list[float], got: list[float], work: int, prefix: str):
    paired = [r / g for r, g in zip(ref, got, strict=True)]
    ratio = float(np.median(paired))
    benchmark.extra_info.update(
        {
            prefix + "ratio_median_paired": ratio,
            prefix + "reference_per_cpu_s": work / float(np.median(ref)),
            prefix + "candidate_per_cpu_s": work / float(np.median(got)),
        }
    )
    print(
        f"\n{name}: candidate/reference = {ratio:.3f} (median of {len(paired)} rounds); "
        f"reference {work / np.median(ref):,.0f}/cpu-s, candidate "
        f"{work / np.median(got):,.0f}/cpu-s"
    )
    assert ratio > 0


def _run(env: gym.Env, payloads: list) -> float:
    env.reset(seed=0)
    start = time.process_time()
    for payload in payloads:
        _, _, term, trunc, _ = env.step(payload)
        if term or trunc:
            env.reset()
    return time.process_time() - start


@pytest.mark.parametrize("env_id", ["Pendulum-v1", "CartPole-v1"])
def test_bench_playout_vs_shim(benchmark, env_id):
    steps, rounds = _sizes(benchmark, 400, 20_000, 21)
    rng = np.random.default_rng(0)
    if env_id == "Pendulum-v1":
        actions = [rng.uniform(-2, 2, size=1).astype(np.float32) for _ in range(steps)]
    else:
        actions = rng.integers(0, 2, steps).tolist()
    plain = NetworkShimWrapper(gym.make(env_id), "wifi-degraded")
    # start="safe": the env steps at every tick, as on today's path (waiting ticks skip the
    # env's step and would flatter the playout path).
    safe = 0 if env_id == "CartPole-v1" else None
    playout = Playout(start="safe", safe_action=safe)
    scheduled = NetworkShimWrapper(gym.make(env_id), "wifi-degraded", playout=playout)
    ref: list[float] = []
    got: dict[int, list[float]] = {1: [], 8: []}

    # The packets are made before the clock starts (the agent's work, not the link's), as
    # ScheduledChunks sends them: a Discrete space's chunk as a list of Python ints, a Box
    # space's as an array with the chunk on its first axis.
    def chunk(a: Any, k: int) -> Any:
        return [a] * k if isinstance(a, int) else np.asarray([a] * k)

    def ticks(k: int) -> list[int]:
        """Each step's episode tick (a dry run: resets come where episodes end)."""
        scheduled.reset(seed=0)
        out, t = [], 0
        for a in actions:
            out.append(t)
            _, _, term, trunc, _ = scheduled.step(ActionPacket(t + DELAY, chunk(a, k)))
            t += 1
            if term or trunc:
                scheduled.reset()
                t = 0
        return out

    packets = {
        k: [ActionPacket(t + DELAY, chunk(a, k)) for t, a in zip(ticks(k), actions, strict=True)]
        for k in (1, 8)
    }

    def run_scheduled(k: int) -> float:
        return _run(scheduled, packets[k])

    def one_round() -> None:
        ref.append(_run(plain, actions))
        for k in (1, 8):
            got[k].append(run_scheduled(k))

    benchmark.pedantic(one_round, rounds=rounds, iterations=1)
    for k in (1, 8):
        _report(
            benchmark,
            f"{env_id} wifi-degraded: playout path (k={k}) vs today's shim path",
            ref,
            got[k],
            steps,
            f"k{k}_",
        )


def test_bench_chunks_agent_side(benchmark):
    steps, rounds = _sizes(benchmark, 300, 5_000, 11)

    def controller(obs):
        return int(obs[2] + 0.5 * obs[3] + 0.05 * obs[1] > 0)

    def make(k: int) -> gym.Env:
        shim = NetworkShimWrapper(gym.make("CartPole-v1"), "wifi-degraded", playout=Playout())
        return ScheduledChunks(shim, "true-dynamics", delay=DELAY, chunk=k, policy=controller)

    envs = {k: make(k) for k in (1, 8)}
    env_side = NetworkShimWrapper(gym.make("CartPole-v1"), "wifi-degraded", playout=Playout())
    ref: list[float] = []
    got: dict[int, list[float]] = {1: [], 8: []}

    def run_agent(env: gym.Env) -> float:
        obs, _ = env.reset(seed=0)
        start = time.process_time()
        for _ in range(steps):
            obs, _, term, trunc, _ = env.step(controller(obs))
            if term or trunc:
                obs, _ = env.reset()
        return time.process_time() - start

    def run_env_side() -> float:
        env_side.reset(seed=0)
        t = 0
        start = time.process_time()
        for _ in range(steps):
            _, _, term, trunc, _ = env_side.step(ActionPacket(t + DELAY, [t % 2]))
            t += 1
            if term or trunc:
                env_side.reset()
                t = 0
        return time.process_time() - start

    def one_round() -> None:
        ref.append(run_env_side())
        for k, env in envs.items():
            got[k].append(run_agent(env))

    benchmark.pedantic(one_round, rounds=rounds, iterations=1)
    for k in (1, 8):
        _report(
            benchmark,
            f"CartPole wifi-degraded: agent + env side (k={k}) vs env side alone",
            ref,
            got[k],
            steps,
            f"agent_k{k}_",
        )
