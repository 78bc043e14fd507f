"""What imagination does to policy lag and throughput in ``AsyncPPO`` on the long tail.

``fleetgym imagination --async`` trains :class:`~fleetgym.agents.learners.asynchronous.
trainer.AsyncPPO` (actor threads, PPO-clip, max policy lag 8) on CartPole whose env steps
cost an extra log-normal wait per actor (median ``delay_ms``, spread ``sigma``: slow
simulators, the long-tail workload of docs/explanation/async.md), with and without imagination, for a
fixed budget of real env steps, and reports real env steps/s, the policy-lag percentiles,
learner utilisation, updates and the final policy's evaluation return: the evaluator of
the synchronous study (:func:`~fleetgym.agents.learners.training.evaluate_policy`,
``EVAL_EPISODES`` episodes with sampled actions on an env seeded ``seed + 10000``), not the
training window's ``mean_return`` (the last 100 training episodes, policies of many
versions), which the study's page calls unsuitable. The window's value is still written
to ``results_async.json`` as ``mean_return``.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from typing import Any

__all__ = ["EVAL_EPISODES", "async_runs", "async_table"]

#: Evaluation episodes of the final policy (the synchronous CartPole study's count).
EVAL_EPISODES = 20


def _one(seed: int, steps: int, delay_ms: float, sigma: float, imagination: Any) -> dict[str, Any]:
    import numpy as np
    import torch

    from fleetgym.agents.learners.asynchronous.config import AsyncPPOConfig, AsyncTopology
    from fleetgym.agents.learners.asynchronous.trainer import AsyncPPO
    from fleetgym.agents.learners.training import evaluate_policy
    from fleetgym.agents.workloads import get_workload

    torch.set_num_threads(1)
    workload = get_workload("CartPole-v1").with_overrides(
        step_delay_s=delay_ms / 1000.0, step_delay_sigma=sigma
    )
    model = AsyncPPO(
        workload,
        algo=AsyncPPOConfig(imagination=imagination),
        topology=AsyncTopology(n_actors=8, steps_per_actor=32),
        seed=seed,
    )
    started = time.perf_counter()
    try:
        model.learn(steps, progress_bar=False)
    finally:
        model.close()
    wall = time.perf_counter() - started
    # Scored as the synchronous study scores (sampled actions, seeds apart from the
    # actors'), on the plain env: the delay changes the wall time, not the returns.
    returns = evaluate_policy(
        model.learner.policy,
        get_workload("CartPole-v1"),
        EVAL_EPISODES,
        seed=seed + 10_000,
        deterministic=False,
    )
    lags = np.concatenate([r.stats.lags for r in model.history]) if model.history else np.zeros(1)
    last = model.history[-1]
    return {
        "seed": seed,
        "imagination": imagination is not None,
        "real_steps": model.num_timesteps,
        "wall_s": wall,
        "steps_per_s": model.num_timesteps / wall,
        "updates": model.updates,
        "lag_mean": float(lags.mean()),
        "lag_p50": float(np.percentile(lags, 50)),
        "lag_p99": float(np.percentile(lags, 99)),
        "learner_utilisation": last.learner_utilisation,
        "mean_return": last.stats.mean_return,
        "eval_return": float(np.mean(returns)),
        "imagined_share": (
            float(np.mean([r.imagination.imagined_share for r in model.history if r.imagination]))
            if imagination is not None
            else 0.0
        ),
    }


def async_runs(
    seeds: range,
    steps: int = 20_000,
    delay_ms: float = 2.0,
    sigma: float = 1.0,
    progress: Callable[[dict[str, Any]], None] | None = None,
) -> list[dict[str, Any]]:
    """One run per seed without and with imagination (``share=0.75``); ``progress(run)``
    is called after each run."""
    out = []
    for seed in seeds:
        for imagination in (None, {"share": 0.75, "seed": seed}):
            out.append(_one(seed, steps, delay_ms, sigma, imagination))
            if progress is not None:
                progress(out[-1])
    return out


def async_table(runs: list[dict[str, Any]], delay_ms: float, sigma: float) -> str:
    """Markdown: medians over seeds of each arm."""
    lines = [
        f"### AsyncPPO on the long tail (CartPole-v1, 8 actor threads x 32 steps, "
        f"+{delay_ms:g} ms per step, log-normal sigma {sigma:g})",
        "",
        "| arm | seeds | real env steps/s | updates | policy lag mean / p50 / p99 | learner utilisation | imagined share | evaluation return (final policy) |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for flag, name in ((False, "AsyncPPO"), (True, "AsyncPPO + imagination")):
        rows = [r for r in runs if r["imagination"] is flag]
        if not rows:
            continue

        def med(key: str, rows: list[dict[str, Any]] = rows) -> float:
            return statistics.median(r[key] for r in rows)

        lines.append(
            f"| {name} | {len(rows)} | {med('steps_per_s'):.0f} | {med('updates'):.0f} | "
            f"{med('lag_mean'):.2f} / {med('lag_p50'):.0f} / {med('lag_p99'):.0f} | "
            f"{med('learner_utilisation'):.2f} | {med('imagined_share'):.2f} | "
            f"{med('eval_return'):.0f} |"
        )
    return "\n".join(lines) + "\n"
