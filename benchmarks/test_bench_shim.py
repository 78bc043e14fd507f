"""Network shim overhead, as ratios against references measured in the same run.

* ``test_bench_shim_cartpole``: env steps/s of ``NetworkShimWrapper(gym.make("CartPole-v1"),
  "wifi-degraded")`` over the bare ``gym.make("CartPole-v1")``, same random actions,
  episodes reset as they end, at both info levels (``"train"``, the default, and
  ``"full"``). Target: >= 0.8.
* ``test_bench_shim_id_vs_delay_observation``: env steps/s of the registered ID
  ``gym.make("fleetgym/NetShim-v0", env_id="CartPole-v1", profile="wifi-normal")`` and of
  Gymnasium's own ``DelayObservation(gym.make("CartPole-v1"), delay=2)`` over the bare
  ``gym.make("CartPole-v1")``, and of the ID over ``DelayObservation``, same random actions,
  episodes reset as they end. Targets: ID / bare >= 0.94, ID / DelayObservation >= 1.0.
* ``test_bench_vector_shim_64``: steps/s of ``NetworkShimVectorWrapper`` (wifi-degraded) over
  the bare ``gym.make_vec("CartPole-v1", 64, "sync")``, both info levels, in steady rounds
  (seeded once, as a training run is: the headline) and in rounds that each reseed.
  Target: >= 0.95.
* ``test_bench_sb3_ppo_mode2``: SB3 PPO training timesteps/s on CartPole with the shim
  (Mode 2) over without (Mode 1), both info levels, ``n_epochs=4`` and the rollout-bound
  ``n_epochs=1``. The shim runs ``perfect``: bit-identical trajectories, so both runs do
  the same episodes and the ratio is the shim's own cost (under a lossy profile the
  policy's episodes are shorter, and the extra resets are the env's cost, not the shim's).
  Target: >= 0.98.

Each round times the reference and the shim back to back, in CPU time of this process
(``time.process_time``: on a shared machine, wall time mostly measures the other
processes); the reported ratio is the median over rounds of reference time / shim time.
Nothing absolute is asserted. Default sizes are tiny so the CI run (``--benchmark-disable``,
each benchmarked function once) takes seconds; the measured run:

``pytest benchmarks/test_bench_shim.py --benchmark-enable -s``
"""

from __future__ import annotations

import time

import gymnasium as gym
import numpy as np
import pytest

import fleetgym  # noqa: F401  (registers the IDs)
from fleetgym.wrappers import NetworkShimVectorWrapper, NetworkShimWrapper


def _sizes(benchmark, quick: int, full: int, rounds_full: int) -> tuple[int, int]:
    return (quick, 1) if benchmark.disabled else (full, rounds_full)


def _report(
    benchmark,
    name: str,
    ref: list[float],
    shim: list[float],
    work: int,
    target: float,
    prefix: str = "",
) -> None:
    """Store and print shim/reference throughput ratios of paired rounds."""
    paired = [r / s for r, s in zip(ref, shim, strict=True)]
    ratio = float(np.median(paired))
    benchmark.extra_info.update(
        {
            prefix + "work_per_round": work,
            prefix + "reference_per_cpu_s": work / float(np.median(ref)),
            prefix + "shim_per_cpu_s": work / float(np.median(shim)),
            prefix + "ratio_median_paired": ratio,
            prefix + "ratio_best_rounds": min(ref) / min(shim),
            prefix + "target": target,
            "target": target,
        }
    )
    print(
        f"\n{name}: shim/reference = {ratio:.3f} (median of {len(paired)} paired rounds, "
        f"best rounds {min(ref) / min(shim):.3f}); reference {work / np.median(ref):,.0f}/cpu-s, "
        f"shim {work / np.median(shim):,.0f}/cpu-s; target >= {target}"
    )
    assert ratio > 0


def _run_scalar(env: gym.Env, actions: list[int]) -> float:
    env.reset(seed=0)
    start = time.process_time()
    for a in actions:
        _, _, term, trunc, _ = env.step(a)
        if term or trunc:
            env.reset()
    return time.process_time() - start


def _applied_scalar(shim: gym.Env, actions: list[int]) -> list[int]:
    """The actions the shim really applies to the env for this action sequence (seed 0)."""
    shim.reset(seed=0)
    applied = []
    for a in actions:
        _, _, term, trunc, info = shim.step(a)
        applied.append(info["applied_action"])
        if term or trunc:
            shim.reset()
    return applied


def test_bench_shim_cartpole(benchmark):
    """Two references: the bare env fed the agent's actions (like for like for a user, but
    the delays make episodes shorter, so the shimmed run also does more resets), and the
    bare env fed the actions the shim applied (the same env work: the shim's own cost)."""
    steps, rounds = _sizes(benchmark, 500, 5_000, 41)
    actions = np.random.default_rng(0).integers(0, 2, steps).tolist()
    bare = gym.make("CartPole-v1")
    shims = {
        level: NetworkShimWrapper(gym.make("CartPole-v1"), "wifi-degraded", info=level)
        for level in ("train", "full")
    }
    applied = _applied_scalar(shims["full"], actions)
    ref_agent: list[float] = []
    ref_applied: list[float] = []
    got: dict[str, list[float]] = {level: [] for level in shims}

    def one_round() -> None:
        ref_agent.append(_run_scalar(bare, actions))
        ref_applied.append(_run_scalar(bare, applied))
        for level, shim in shims.items():
            got[level].append(_run_scalar(shim, actions))

    benchmark.pedantic(one_round, rounds=rounds, iterations=1)
    for level in shims:
        _report(
            benchmark,
            f"shim(wifi-degraded, info={level}) vs bare CartPole, same agent actions",
            ref_agent,
            got[level],
            steps,
            0.8,
            f"{level}_",
        )
        _report(
            benchmark,
            f"shim(wifi-degraded, info={level}) vs bare CartPole, same applied actions",
            ref_applied,
            got[level],
            steps,
            0.8,
            f"{level}_applied_",
        )


def test_bench_shim_id_vs_delay_observation(benchmark):
    """The registered ID as users make it, against the bare env and against Gymnasium's own
    delay wrapper (a fixed two-step observation delay: no network model, no action path)."""
    steps, rounds = _sizes(benchmark, 500, 5_000, 41)
    actions = np.random.default_rng(0).integers(0, 2, steps).tolist()
    envs = {
        "bare": gym.make("CartPole-v1"),
        "delay": gym.wrappers.DelayObservation(gym.make("CartPole-v1"), delay=2),
        "id": gym.make("fleetgym/NetShim-v0", env_id="CartPole-v1", profile="wifi-normal"),
    }
    times: dict[str, list[float]] = {name: [] for name in envs}

    def one_round() -> None:
        for name, env in envs.items():
            times[name].append(_run_scalar(env, actions))

    benchmark.pedantic(one_round, rounds=rounds, iterations=1)
    for name, ref, got, target, prefix in (
        ("NetShim-v0 (wifi-normal) vs bare CartPole", "bare", "id", 0.94, "id_"),
        ("DelayObservation(delay=2) vs bare CartPole", "bare", "delay", 0.94, "delay_"),
        ("NetShim-v0 (wifi-normal) vs DelayObservation(delay=2)", "delay", "id", 1.0, "id_delay_"),
    ):
        _report(benchmark, name, times[ref], times[got], steps, target, prefix)


def _run_vector(env, actions: np.ndarray, reseed: bool = True) -> float:
    if reseed:
        env.reset(seed=0)
    start = time.process_time()
    for a in actions:
        env.step(a)
    return time.process_time() - start


@pytest.mark.parametrize("rounds_kind", ["steady", "reseeded"])
def test_bench_vector_shim_64(benchmark, rounds_kind):
    """Same two references as the scalar benchmark, for 64 sync sub-envs.

    ``steady``: every env is reset (seed 0) once, then each round continues the run, as a
    training run does (the headline figure). ``reseeded``: each round starts from
    ``reset(seed=0)``, so every round also pays for drawing each sub-env's first delay
    block (128 streams x ``block_size`` draws for 6,400 steps).
    """
    reseed = rounds_kind == "reseeded"
    n_envs = 64
    steps, rounds = _sizes(benchmark, 20, 100, 25)
    actions = np.random.default_rng(0).integers(0, 2, (steps, n_envs))
    bare = gym.make_vec("CartPole-v1", num_envs=n_envs, vectorization_mode="sync")
    shims = {
        level: NetworkShimVectorWrapper(
            gym.make_vec("CartPole-v1", num_envs=n_envs, vectorization_mode="sync"),
            "wifi-degraded",
            info=level,
        )
        for level in ("train", "full")
    }
    shims["full"].reset(seed=0)
    applied = np.stack([shims["full"].step(a)[4]["applied_action"] for a in actions])
    ref_agent: list[float] = []
    ref_applied: list[float] = []
    got: dict[str, list[float]] = {level: [] for level in shims}

    # Steady rounds: one env fed the agent's actions and one fed the applied ones, each
    # reset once; the actions of a round follow on from the last round's.
    bare_applied = gym.make_vec("CartPole-v1", num_envs=n_envs, vectorization_mode="sync")
    for env in (bare, bare_applied, *shims.values()):
        env.reset(seed=0)
    refs = (bare, bare if reseed else bare_applied)

    def one_round() -> None:
        ref_agent.append(_run_vector(refs[0], actions, reseed))
        ref_applied.append(_run_vector(refs[1], applied, reseed))
        for level, shim in shims.items():
            got[level].append(_run_vector(shim, actions, reseed))

    benchmark.pedantic(one_round, rounds=rounds, iterations=1)
    work = steps * n_envs
    for level in shims:
        _report(
            benchmark,
            f"vector shim (info={level}, {rounds_kind}) vs bare vector env ({n_envs} envs), "
            "same agent actions",
            ref_agent,
            got[level],
            work,
            0.95,
            f"{level}_",
        )
        _report(
            benchmark,
            f"vector shim (info={level}, {rounds_kind}) vs bare vector env ({n_envs} envs), "
            "same applied actions",
            ref_applied,
            got[level],
            work,
            0.95,
            f"{level}_applied_",
        )


@pytest.mark.parametrize("n_epochs", [4, 1])
def test_bench_sb3_ppo_mode2(benchmark, n_epochs):
    """SB3 PPO with and without the shim; ``n_epochs=1`` makes training rollout-bound, where
    the shim's share (and SB3's deep copy of every ``info``) shows most."""
    import torch
    from stable_baselines3 import PPO

    torch.set_num_threads(1)
    timesteps, rounds = _sizes(benchmark, 256, 4096, 7)
    n_steps = 128 if benchmark.disabled else 1024

    def train_seconds(env: gym.Env) -> float:
        model = PPO(
            "MlpPolicy",
            env,
            n_steps=n_steps,
            batch_size=64,
            n_epochs=n_epochs,
            seed=0,
            device="cpu",
        )
        start = time.process_time()
        model.learn(timesteps)
        return time.process_time() - start

    ref: list[float] = []
    got: dict[str, list[float]] = {"train": [], "full": []}

    def one_round() -> None:
        ref.append(train_seconds(gym.make("CartPole-v1")))
        for level, times in got.items():
            env = NetworkShimWrapper(gym.make("CartPole-v1"), "perfect", info=level)
            times.append(train_seconds(env))

    benchmark.pedantic(one_round, rounds=rounds, iterations=1)
    for level, times in got.items():
        _report(
            benchmark,
            f"SB3 PPO (n_epochs={n_epochs}) Mode 2 (shim perfect, info={level}) vs Mode 1",
            ref,
            times,
            timesteps,
            0.98,
            f"{level}_",
        )
