"""One run of ``fleetgym lag-sweep``: the model a cell trains, its training with a best
checkpoint, and the deterministic evaluation that scores it (return and forward velocity).
"""

from __future__ import annotations

import math
import time
from typing import Any

from fleetgym.experiments.lag_sweep_results import (
    LOSSES,
    SETTINGS,
    SweepRun,
    check_setting,
    format_settings,
    updates_in,
)

__all__ = ["CHECKPOINTS", "SELECTION_EPISODES", "evaluate", "make_model", "run_one"]

#: Checkpoints a run considers for its best policy (one every ``updates // CHECKPOINTS``
#: updates, and the final one), each scored on :data:`SELECTION_EPISODES` deterministic
#: episodes of their own.
CHECKPOINTS = 32
SELECTION_EPISODES = 3


def evaluate(policy: Any, env_id: str, episodes: int, seed: int) -> tuple[list[float], float]:
    """Deterministic evaluation of ``policy``: the return of each of ``episodes`` episodes
    and the mean forward velocity over them (the mean of the env's ``info["x_velocity"]``
    per step, which is the displacement over the episode's duration; NaN if the env reports
    no ``x_velocity``). Actions are clipped to the bounds, as the actors do."""
    import gymnasium as gym
    import numpy as np

    from fleetgym.agents.workloads import get_workload

    env = get_workload(env_id).make_env(seed=seed)
    rng = np.random.default_rng(seed)
    space = env.action_space
    returns: list[float] = []
    velocities: list[float] = []
    try:
        obs, _ = env.reset(seed=seed)
        for _ in range(episodes):
            total, done, speeds = 0.0, False, []
            while not done:
                action = policy.act(np.asarray(obs)[None], deterministic=True, rng=rng)[0][0]
                if isinstance(space, gym.spaces.Box):
                    action = np.clip(action, space.low, space.high)
                else:
                    action = int(action)
                obs, reward, terminated, truncated, info = env.step(action)
                total += float(reward)
                if "x_velocity" in info:
                    speeds.append(float(info["x_velocity"]))
                done = bool(terminated or truncated)
            returns.append(total)
            velocities.append(float(np.mean(speeds)) if speeds else math.nan)
            obs, _ = env.reset()
    finally:
        env.close()
    return returns, float(np.mean(velocities))


def make_model(
    env: str,
    loss: str,
    variant: str,
    lag: int,
    seed: int,
    overrides: dict[str, float] | None = None,
) -> Any:
    """The :class:`~fleetgym.agents.learners.asynchronous.trainer.AsyncPPO` one cell of the
    grid trains: ``env``'s :data:`SETTINGS`, changed by ``overrides`` (names of
    :data:`TUNABLE`, each checked by :func:`check_setting`)."""
    from fleetgym.agents.learners.asynchronous.config import AsyncPPOConfig, AsyncTopology
    from fleetgym.agents.learners.asynchronous.trainer import AsyncPPO
    from fleetgym.agents.workloads import get_workload

    setting = SETTINGS[env]
    _, kind, sigma = next(x for x in LOSSES if x[0] == loss)
    compensated = variant == "compensated"
    changed = {name: check_setting(name, value) for name, value in (overrides or {}).items()}
    hyper: dict[str, Any] = {
        k: v for k, v in changed.items() if k not in ("log_std_init", "target_kl")
    }
    workload: Any = env
    if "log_std_init" in changed:
        workload = get_workload(env).with_overrides(log_std_init=changed["log_std_init"])
    algo = AsyncPPOConfig(
        loss=kind,
        sigma=sigma,
        max_policy_lag=lag,
        lag_injection=lag,
        recompute_values=compensated,
        global_advantage_norm=compensated,
        target_kl=changed.get("target_kl", "auto"),
        hyperparameters={
            "epochs": setting["epochs"],
            "minibatch_size": setting["minibatch"],
            **hyper,
        },
    )
    topology = AsyncTopology(
        n_actors=setting["actors"], steps_per_actor=setting["steps"], concurrent=False
    )
    return AsyncPPO(workload, algo=algo, topology=topology, seed=seed)


def run_one(
    env: str,
    loss: str,
    variant: str,
    lag: int,
    seed: int,
    steps: int,
    episodes: int,
    overrides: dict[str, float] | None = None,
) -> SweepRun:
    """Train one cell of the grid (:func:`make_model`) and evaluate its final policy; the
    run's ``ess`` is the mean of its updates' effective sample sizes."""
    started = time.perf_counter()
    model = make_model(env, loss, variant, lag, seed, overrides)
    policy = model.learner.policy
    every = max(1, updates_in(env, steps) // CHECKPOINTS)
    best: dict[str, Any] = {"score": -math.inf, "weights": None, "update": 0}

    def consider(update: int) -> None:
        # Selection episodes of their own (seed 20,000 + seed), so the best checkpoint's
        # reported score, on the final evaluation's episodes, is not the one it won on.
        scores, _ = evaluate(policy, env, SELECTION_EPISODES, seed=20_000 + seed)
        if sum(scores) / len(scores) > best["score"]:
            best.update(
                score=sum(scores) / len(scores), weights=policy.get_weights(), update=update
            )

    ess: list[float] = []

    def checkpoint(record: Any) -> None:
        if not math.isnan(record.stats.ess):
            ess.append(record.stats.ess)
        if (record.update + 1) % every == 0:
            consider(record.update + 1)

    model.learn(steps, callback=checkpoint)
    model.close()
    if model.learner.policy_version % every:  # the final policy was not a checkpoint
        consider(model.learner.policy_version)
    returns, velocity = evaluate(policy, env, episodes, seed=10_000 + seed)
    final = policy.get_weights()
    policy.load_weights(best["weights"])
    best_returns, best_velocity = evaluate(policy, env, episodes, seed=10_000 + seed)
    policy.load_weights(final)
    return SweepRun(
        env=env,
        loss=loss,
        variant=variant,
        lag=lag,
        seed=seed,
        steps=model.num_timesteps,
        updates=model.learner.policy_version,
        final_return=sum(returns) / len(returns),
        train_return=model.learner.mean_return,
        wall_s=time.perf_counter() - started,
        velocity=velocity,
        best_return=sum(best_returns) / len(best_returns),
        best_velocity=best_velocity,
        best_update=int(best["update"]),
        settings=format_settings(overrides or {}),
        ess=sum(ess) / len(ess) if ess else math.nan,
    )
