"""Physics and network randomised together: transfer to held-out plants and links (CartPole).

Four training conditions, each SB3 PPO on ``CartPole-v1`` behind the network shim
(:class:`fleetgym.wrappers.NetworkShimWrapper`), the same seeds for all four:

* ``nominal``: nominal physics, the ``ethernet`` profile;
* ``physics``: physics drawn per episode (:class:`fleetgym.wrappers.PhysicsRandomizationWrapper`,
  factors of the nominal ``length`` 0.5-1.5, ``masspole`` and ``masscart`` 0.5-2), ``ethernet``;
* ``network``: nominal physics, the profile drawn per episode from ``ethernet`` and
  ``wifi-normal``;
* ``both``: both draws, independent streams of the same reset seed.

Every policy is evaluated (deterministic actions, fresh seeds) on held-out combinations:
plants outside the training ranges (a short heavy pole on a heavy cart, a long light pole on a
light cart) and two profiles no condition trained on: ``trace-wifi-office`` (a replayed
capture) and ``wifi-degraded`` (the floor: no CartPole policy keeps the pole up under it).
The held-out mean averages the held-out cells but the floor's. Writes
``runs.csv`` (one row per seed, condition and evaluation cell) and ``summary.md`` (mean ±
std over seeds, and a paired comparison of ``both`` against each other condition on the mean
held-out return, seed by seed).

    OMP_NUM_THREADS=1 nice -n 10 python examples/physics_network_transfer.py \
        --steps 30000 --seeds 5 --eval-episodes 10 --out fleetgym-out/physics_network_transfer
"""

from __future__ import annotations

import argparse
import csv
import sys
import time
from pathlib import Path

import gymnasium as gym
import numpy as np
import torch
from scipy import stats
from stable_baselines3 import PPO
from stable_baselines3.common.vec_env import DummyVecEnv
from tqdm import tqdm

from fleetgym.wrappers import NetworkShimWrapper, PhysicsRandomizationWrapper

ENV = "CartPole-v1"
PHYSICS_MIX = {"length": (0.5, 1.5), "masspole": (0.5, 2.0), "masscart": (0.5, 2.0)}
NETWORK_MIX = ["ethernet", "wifi-normal"]
NOMINAL_NETWORK = "ethernet"
#: Held-out links: a replayed office Wi-Fi capture, and poor Wi-Fi (80 ± 40 ms, 10 % loss),
#: under which no CartPole policy of the CALF study keeps the pole up (its floor).
HELD_OUT_NETWORK = "trace-wifi-office"
FLOOR_NETWORK = "wifi-degraded"
CONDITIONS = {
    "nominal": (None, NOMINAL_NETWORK),
    "physics": (PHYSICS_MIX, NOMINAL_NETWORK),
    "network": (None, NETWORK_MIX),
    "both": (PHYSICS_MIX, NETWORK_MIX),
}
#: Held-out plants (fixed factors outside the training ranges) and links.
HELD_OUT_PLANTS = {
    "nominal": None,
    "short-heavy": {"length": 0.3, "masspole": 3.0, "masscart": 3.0},
    "long-light": {"length": 2.5, "masspole": 0.3, "masscart": 0.3},
}
EVAL_CELLS = [("nominal", NOMINAL_NETWORK)] + [
    (plant, network)
    for network in (NOMINAL_NETWORK, HELD_OUT_NETWORK, FLOOR_NETWORK)
    for plant in HELD_OUT_PLANTS
    if (plant, network) != ("nominal", NOMINAL_NETWORK)
]
#: The cells the held-out mean averages: every held-out cell but the floor's.
HELD_OUT_CELLS = [cell for cell in EVAL_CELLS[1:] if cell[1] != FLOOR_NETWORK]


def make_env(physics, profile) -> gym.Env:
    env = gym.make(ENV)
    if physics:
        env = PhysicsRandomizationWrapper(env, physics)
    return NetworkShimWrapper(env, profile=profile)


def train(condition: str, seed: int, steps: int) -> PPO:
    physics, profile = CONDITIONS[condition]
    vec = DummyVecEnv([lambda: make_env(physics, profile) for _ in range(8)])
    # rl-zoo's CartPole settings (8 envs, 32 steps, 20 epochs, GAE 0.8, gamma 0.98).
    model = PPO(
        "MlpPolicy",
        vec,
        n_steps=32,
        batch_size=256,
        gae_lambda=0.8,
        gamma=0.98,
        n_epochs=20,
        ent_coef=0.0,
        learning_rate=1e-3,
        clip_range=0.2,
        seed=seed,
        device="cpu",
        verbose=0,
    )
    model.learn(steps)
    vec.close()
    return model


def evaluate(model: PPO, plant: str, profile: str, episodes: int, seed: int) -> float:
    physics = HELD_OUT_PLANTS[plant]
    env = make_env(physics, profile)
    returns = []
    for episode in range(episodes):
        obs, _ = env.reset(seed=10_000 + 100 * seed + episode)
        done, total = False, 0.0
        while not done:
            action, _ = model.predict(obs, deterministic=True)
            obs, reward, terminated, truncated, _ = env.step(int(action))
            total += float(reward)
            done = terminated or truncated
        returns.append(total)
    env.close()
    return float(np.mean(returns))


def summarise(rows: list[dict], out: Path, seeds: list[int]) -> str:
    lines = [
        "| trained under | "
        + " | ".join(f"{p} / {n}" for p, n in EVAL_CELLS)
        + " | held-out mean |"
    ]
    lines.append("|---" * (len(EVAL_CELLS) + 2) + "|")
    held_out: dict[str, np.ndarray] = {}
    for condition in CONDITIONS:
        cells = []
        for plant, profile in EVAL_CELLS:
            values = [
                r["return"]
                for r in rows
                if r["condition"] == condition and r["plant"] == plant and r["profile"] == profile
            ]
            cells.append(f"{np.mean(values):.1f} ± {np.std(values, ddof=1):.1f}")
        per_seed = np.array(
            [
                np.mean(
                    [
                        r["return"]
                        for r in rows
                        if r["condition"] == condition
                        and r["seed"] == s
                        and (r["plant"], r["profile"]) in HELD_OUT_CELLS
                    ]
                )
                for s in seeds
            ]
        )
        held_out[condition] = per_seed
        lines.append(
            f"| {condition} | "
            + " | ".join(cells)
            + f" | {per_seed.mean():.1f} ± {per_seed.std(ddof=1):.1f} |"
        )
    lines += [
        "",
        "| both vs | mean difference (held-out) | paired t | p (two-sided) |",
        "|---|---|---|---|",
    ]
    for other in ("nominal", "physics", "network"):
        diff = held_out["both"] - held_out[other]
        t, p = stats.ttest_rel(held_out["both"], held_out[other])
        lines.append(
            f"| {other} | {diff.mean():+.1f} ± {diff.std(ddof=1):.1f} | {t:.2f} | {p:.3f} |"
        )
    text = "\n".join(lines) + "\n"
    (out / "summary.md").write_text(text)
    return text


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=30_000, help="env steps per training run")
    p.add_argument("--seeds", type=int, default=5, help="number of seeds (from --first-seed)")
    p.add_argument("--first-seed", type=int, default=0)
    p.add_argument("--eval-episodes", type=int, default=10)
    p.add_argument("--out", type=Path, default=Path("fleetgym-out/physics_network_transfer"))
    p.add_argument("--no-progress", action="store_true")
    args = p.parse_args()
    if args.steps < 1 or args.seeds < 2 or args.eval_episodes < 1:
        p.error("expected --steps >= 1, --seeds >= 2, --eval-episodes >= 1")
    torch.set_num_threads(1)
    args.out.mkdir(parents=True, exist_ok=True)
    seeds = list(range(args.first_seed, args.first_seed + args.seeds))
    rows: list[dict] = []
    path = args.out / "runs.csv"
    start_wall, start_cpu = time.perf_counter(), time.process_time()
    jobs = [(s, c) for s in seeds for c in CONDITIONS]
    for seed, condition in tqdm(jobs, disable=args.no_progress, desc="runs"):
        model = train(condition, seed, args.steps)
        for plant, profile in EVAL_CELLS:
            value = evaluate(model, plant, profile, args.eval_episodes, seed)
            rows.append(
                dict(
                    seed=seed,
                    condition=condition,
                    plant=plant,
                    profile=profile,
                    **{"return": value},
                )
            )
        with path.open("w", newline="") as f:
            writer = csv.DictWriter(f, fieldnames=list(rows[0]))
            writer.writeheader()
            writer.writerows(rows)
    text = summarise(rows, args.out, seeds)
    wall, cpu = time.perf_counter() - start_wall, time.process_time() - start_cpu
    text += f"\nwall {wall / 60:.1f} min, CPU {cpu / 60:.1f} min\n"
    (args.out / "summary.md").write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
