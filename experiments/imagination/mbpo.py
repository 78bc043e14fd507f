"""``fleetgym imagination --mbpo``: MBPO against SAC at the same updates per real step.

Two arms per seed: ``mbpo`` (:class:`fleetgym.agents.world_model.MBPO`) and ``sac``
(SB3's SAC with ``gradient_steps`` equal to MBPO's ``updates_per_step``, the same
``learning_starts``, batch size and network: the matched model-free control). Every
``eval_every`` real steps the deterministic policy plays ``eval_episodes`` episodes on
an env seeded apart from the training env; each evaluation records the mean return and,
where the env reports it (Hopper's ``x_velocity``), the mean forward velocity. A run
reaches the target when three evaluations in a row are at or above it; with the setup's
``stop_at_target`` it stops there (the study measures real steps to the target).

Each run uses one torch thread (two runs side by side fit a 2-core machine: ``--jobs 2``).
"""

from __future__ import annotations

import dataclasses
import statistics
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np

from fleetgym.experiments.imagination.study import steps_to_target

__all__ = [
    "MBPO_ARMS",
    "MBPO_ENVS",
    "MbpoSetup",
    "mbpo_figure",
    "mbpo_table",
    "run_mbpo_arm",
    "step_ratios",
    "trivial_scores",
]

MBPO_ARMS = ("mbpo", "sac")


@dataclass(frozen=True)
class MbpoSetup:
    """One env's MBPO study: budget, evaluation, target and the learners' settings."""

    budget: int
    learning_starts: int
    eval_every: int
    eval_episodes: int
    target: float
    updates_per_step: int = 10
    real_ratio: float = 0.05
    rollout_length: int | str = "linear"
    ensemble_size: int = 7
    model_hidden_sizes: tuple[int, ...] = (200, 200, 200, 200)
    rollout_batch: int = 400
    min_rollout_length: int = 1
    max_rollout_length: int = 15
    rollout_schedule_steps: tuple[int, int] = (20_000, 100_000)
    model_max_epochs: int = 10
    learn_termination: bool = True
    net_arch: tuple[int, ...] = (256, 256)
    batch_size: int = 256
    stop_at_target: bool = False

    @property
    def elites(self) -> int:
        """MBPO's 5 of 7, scaled to the ensemble."""
        return max(1, round(5 * self.ensemble_size / 7))


MBPO_ENVS: dict[str, MbpoSetup] = {
    # MBPO's Hopper settings (k 1 -> 15 over 20k..100k real steps, 5 % real data, four
    # layers of 200), with 10 updates per real step instead of 20 and 2,000 rollouts
    # every 250 real steps instead of 100,000 (CPU).
    "Hopper-v5": MbpoSetup(
        budget=100_000,
        learning_starts=5000,
        eval_every=5000,
        eval_episodes=5,
        target=2000.0,
        rollout_batch=2000,
    ),
    # MBPO's InvertedPendulum settings (k = 1, a fit every 250 real steps), with 5,000
    # rollouts per fit and both arms' SAC on two layers of 64 (CPU).
    "InvertedPendulum-v5": MbpoSetup(
        budget=15_000,
        learning_starts=500,
        eval_every=250,
        eval_episodes=5,
        target=1000.0,
        rollout_length=1,
        rollout_batch=5000,
        model_hidden_sizes=(200, 200, 200),
        net_arch=(64, 64),
        stop_at_target=True,
    ),
    # Never terminates: k rises 1 -> 5 over 1k..5k real steps; -200 over 10 episodes.
    "Pendulum-v1": MbpoSetup(
        budget=10_000,
        learning_starts=500,
        eval_every=250,
        eval_episodes=10,
        target=-200.0,
        rollout_batch=5000,
        rollout_schedule_steps=(1000, 5000),
        max_rollout_length=5,
        ensemble_size=5,
        model_hidden_sizes=(200, 200, 200),
        learn_termination=False,
        net_arch=(64, 64),
        stop_at_target=True,
    ),
}


def evaluate(model: Any, env_name: str, episodes: int, seed: int) -> tuple[float, float | None]:
    """Mean return and mean forward velocity (``None`` if the env reports none) of
    ``model``'s deterministic policy over ``episodes`` seeded episodes."""
    env = gym.make(env_name)
    returns, velocities = [], []
    try:
        for i in range(episodes):
            obs, _ = env.reset(seed=seed + i)
            done, total = False, 0.0
            while not done:
                action, _ = model.predict(obs, deterministic=True)
                obs, reward, terminated, truncated, info = env.step(action)
                total += float(reward)
                if "x_velocity" in info:
                    velocities.append(float(info["x_velocity"]))
                done = terminated or truncated
            returns.append(total)
    finally:
        env.close()
    return float(np.mean(returns)), (float(np.mean(velocities)) if velocities else None)


def trivial_scores(env_name: str, episodes: int, seed: int) -> dict[str, float]:
    """Mean return of a uniformly random policy and of the zero action (the action
    space's centre) over ``episodes`` seeded episodes: what the target is measured against."""
    env = gym.make(env_name)
    space = env.action_space
    if not isinstance(space, gym.spaces.Box):
        env.close()
        raise ValueError(f"env: expected a Box action space, actual {space!r}")
    centre = ((space.low + space.high) / 2).astype(space.dtype)
    space.seed(seed)
    scores = {}
    try:
        for name, act in (("random", space.sample), ("zero", lambda: centre)):
            returns = []
            for i in range(episodes):
                env.reset(seed=seed + i)
                done, total = False, 0.0
                while not done:
                    _, reward, terminated, truncated, _ = env.step(act())
                    total += float(reward)
                    done = terminated or truncated
                returns.append(total)
            scores[name] = float(np.mean(returns))
    finally:
        env.close()
    return scores


def make_learner(arm: str, env_name: str, setup: MbpoSetup, seed: int) -> Any:
    """The arm's learner (SAC's defaults otherwise, both arms alike)."""
    env = gym.make(env_name)
    common: dict[str, Any] = {
        "learning_starts": setup.learning_starts,
        "batch_size": setup.batch_size,
        "policy_kwargs": {"net_arch": list(setup.net_arch)},
        "seed": seed,
        "device": "cpu",
        "verbose": 0,
    }
    if arm == "sac":
        from stable_baselines3 import SAC

        return SAC("MlpPolicy", env, gradient_steps=setup.updates_per_step, **common)
    from fleetgym.agents.world_model import MBPO, MBPOConfig, MBPOModelConfig

    model = MBPOModelConfig(
        ensemble_size=setup.ensemble_size, elites=setup.elites,
        hidden_sizes=tuple(setup.model_hidden_sizes), max_epochs=setup.model_max_epochs,
        learn_termination=setup.learn_termination,
    )  # fmt: skip
    config = MBPOConfig(
        updates_per_step=setup.updates_per_step, real_ratio=setup.real_ratio,
        rollout_length=setup.rollout_length, rollout_batch=setup.rollout_batch,
        min_rollout_length=setup.min_rollout_length, max_rollout_length=setup.max_rollout_length,
        rollout_schedule_steps=tuple(setup.rollout_schedule_steps), model=model,
    )  # fmt: skip
    return MBPO("MlpPolicy", env, config, **common)


def run_mbpo_arm(
    env_name: str, setup: MbpoSetup, arm: str, seed: int, progress: Any = None
) -> dict[str, Any]:
    """Train one arm for ``setup.budget`` real steps (or to the target, with
    ``setup.stop_at_target``) on one torch thread; its curve, times and model record."""
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        return _train_arm(env_name, setup, arm, seed, progress)
    finally:
        torch.set_num_threads(threads)


def _train_arm(
    env_name: str, setup: MbpoSetup, arm: str, seed: int, progress: Any
) -> dict[str, Any]:
    from stable_baselines3.common.callbacks import BaseCallback

    started, cpu0 = time.perf_counter(), time.process_time()
    learner = make_learner(arm, env_name, setup, seed)
    curve: list[list[Any]] = []
    eval_s = [0.0]

    class Evaluate(BaseCallback):  # type: ignore[misc]
        def _on_step(self) -> bool:
            steps = self.model.num_timesteps
            if steps % setup.eval_every == 0:
                t0 = time.process_time()
                score, velocity = evaluate(
                    self.model, env_name, setup.eval_episodes, 1_000_000 + 1000 * seed
                )
                eval_s[0] += time.process_time() - t0
                curve.append([int(steps), score, velocity])
                if progress is not None:
                    progress(steps, score)
                if setup.stop_at_target:
                    return steps_to_target([(s, r) for s, r, _ in curve], setup.target) is None
            return True

    learner.learn(setup.budget, callback=Evaluate())
    record = learner.summary() if arm == "mbpo" else {}
    reached = steps_to_target([(s, r) for s, r, _ in curve], setup.target)
    return {
        "env": env_name,
        "arm": arm,
        "seed": seed,
        "real_steps": int(learner.num_timesteps),
        "steps_to_target": reached,
        "curve": curve,
        "final_return": curve[-1][1] if curve else None,
        "final_velocity": curve[-1][2] if curve else None,
        "best_return": max((r for _, r, _ in curve), default=None),
        "wall_s": time.perf_counter() - started,
        "cpu_s": time.process_time() - cpu0,
        "eval_cpu_s": eval_s[0],
        "model_fit_s": record.get("model_fit_s", 0.0),
        "imagine_s": record.get("imagine_s", 0.0),
        "mbpo": record,
        "setup": {
            **{k: v for k, v in dataclasses.asdict(setup).items()},
            "elites": setup.elites,
        },
    }


def step_ratios(results: list[dict[str, Any]], budget: int) -> list[tuple[int, str, float | None]]:
    """Per seed with both arms: ``(seed, text, ratio)``, the ratio SAC's real steps to the
    target over MBPO's. A run that never reached it counts its budget, so the ratio is a
    bound (``">"`` when only SAC missed, ``"<"`` when only MBPO did); ``None`` when
    neither reached it.

    Example:
        >>> runs = [{"arm": "mbpo", "seed": 0, "steps_to_target": 1000},
        ...         {"arm": "sac", "seed": 0, "steps_to_target": None}]
        >>> step_ratios(runs, 5000)
        [(0, '> 5.00', 5.0)]
    """
    by: dict[int, dict[str, Any]] = {}
    for r in results:
        by.setdefault(r["seed"], {})[r["arm"]] = r
    rows: list[tuple[int, str, float | None]] = []
    for seed in sorted(by):
        if not {"mbpo", "sac"} <= set(by[seed]):
            continue
        m, s = by[seed]["mbpo"]["steps_to_target"], by[seed]["sac"]["steps_to_target"]
        if m is None and s is None:
            rows.append((seed, "neither", None))
            continue
        ratio = (budget if s is None else s) / (budget if m is None else m)
        bound = "> " if s is None else "< " if m is None else ""
        rows.append((seed, f"{bound}{ratio:.2f}", ratio))
    return rows


def _cell(value: Any, fmt: str = "{:.0f}") -> str:
    return "—" if value is None else fmt.format(value)


def mbpo_table(
    results: list[dict[str, Any]],
    env_name: str,
    target: float,
    trivial: dict[str, float] | None = None,
    budget: int | None = None,
) -> str:
    """The Markdown summary: per arm and seed, returns, velocity, steps to target, times;
    with ``budget``, SAC's real steps to the target over MBPO's per seed and their median;
    with ``trivial``, what a random and a zero-action policy score."""
    lines = [
        f"### {env_name}: MBPO against SAC at the same updates per real step",
        "",
        "| arm | seed | real steps | final return | best return | final forward velocity "
        "| steps to " + f"{target:g} (3 in a row) | CPU s | wall s | CPU ms per real step "
        "| model fit + rollouts, share of wall |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in sorted(results, key=lambda r: (r["arm"], r["seed"])):
        share = (r["model_fit_s"] + r["imagine_s"]) / max(r["wall_s"], 1e-9)
        lines.append(
            f"| {r['arm']} | {r['seed']} | {r['real_steps']:,} | {_cell(r['final_return'])} | "
            f"{_cell(r['best_return'])} | {_cell(r['final_velocity'], '{:.2f}')} | "
            f"{_cell(r['steps_to_target'], '{:,}')} | {r['cpu_s']:.0f} | {r['wall_s']:.0f} | "
            f"{1000 * r['cpu_s'] / max(r['real_steps'], 1):.1f} | {share:.0%} |"
        )
    arms: dict[str, dict[int, dict[str, Any]]] = {}
    for r in results:
        arms.setdefault(r["arm"], {})[r["seed"]] = r
    if "mbpo" in arms and "sac" in arms:
        paired = [
            (arms["mbpo"][s]["final_return"], arms["sac"][s]["final_return"])
            for s in sorted(set(arms["mbpo"]) & set(arms["sac"]))
            if arms["mbpo"][s]["final_return"] is not None
            and arms["sac"][s]["final_return"] is not None
        ]
        if paired:
            lines += [
                "",
                "Final return, MBPO minus matched SAC, per seed: "
                + ", ".join(f"{m - s:+.0f}" for m, s in paired)
                + f" (median {statistics.median(m - s for m, s in paired):+.0f}).",
            ]
    if budget is not None:
        ratios = step_ratios(results, budget)
        if ratios:
            known = [r for _, _, r in ratios if r is not None]
            median = f"{statistics.median(known):.2f}" if known else "—"
            lines += [
                "",
                f"Real steps to {target:g}, SAC's over MBPO's, per seed: "
                + ", ".join(f"seed {seed} {text}" for seed, text, _ in ratios)
                + f" (median {median}; a run that missed counts its budget of {budget:,}).",
            ]
    if trivial:
        lines += [
            "",
            "Trivial policies: " + ", ".join(f"{k} {v:.0f}" for k, v in trivial.items()) + ".",
        ]
    return "\n".join(lines) + "\n"


def mbpo_figure(
    results: list[dict[str, Any]], env_name: str, target: float, out: Path
) -> Path | None:
    """``mbpo_ENV.png``: evaluation return against real steps (one line per run, both
    arms) above the rollout length MBPO used at each fit; ``None`` without matplotlib."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    colours = {"mbpo": "tab:blue", "sac": "tab:orange"}
    fig, (top, bottom) = plt.subplots(
        2, 1, figsize=(8, 6), sharex=True, gridspec_kw={"height_ratios": [3, 1]}
    )
    for r in sorted(results, key=lambda r: (r["arm"], r["seed"])):
        steps = [c[0] for c in r["curve"]]
        label = r["arm"] if r["seed"] == min(x["seed"] for x in results) else None
        top.plot(steps, [c[1] for c in r["curve"]], color=colours.get(r["arm"]), alpha=0.7,
                 lw=1.2, label=label)  # fmt: skip
        fits = (r.get("mbpo") or {}).get("fits", [])
        if fits:
            bottom.step([f["step"] for f in fits], [f["rollout_length"] for f in fits],
                        where="post", color=colours["mbpo"], alpha=0.7)  # fmt: skip
    top.axhline(target, color="grey", ls="--", lw=1, label=f"target {target:g}")
    top.set_ylabel("evaluation return")
    top.set_title(f"{env_name}: MBPO against SAC at the same updates per real step")
    top.legend(loc="lower right")
    top.grid(alpha=0.3)
    bottom.set_ylabel("rollout length k")
    bottom.set_xlabel("real env steps")
    bottom.grid(alpha=0.3)
    fig.tight_layout()
    path = out / f"mbpo_{env_name}.png"
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
