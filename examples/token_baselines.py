"""The baselines a user would pick instead of a token policy, with TokenPPO's hyperparameters.

SB3's PPO (MLP 64x64, VecNormalize of observations and rewards) on the same env, with the
rollout size, minibatch, epochs, learning rate, gamma, lambda and clip of
``examples/token_ppo.py``'s TokenPPO runs (8 envs x 64 steps, 128, 4, 3e-4, 0.99, 0.95, 0.2):

* ``gaussian``: the env's Box actions, a diagonal Gaussian with state-independent log-std;
* ``categorical``: a factorised per-dimension categorical over the same 256 bins the token
  policy uses (Tang & Agrawal 2020), through
  :class:`fleetgym.agents.tokens.TokenizedActions` (SB3's ``MultiDiscrete``).

Each final policy is evaluated deterministically on the episodes ``token_ppo.py`` uses
(seeds 10000 ...). Writes ``baselines.csv`` and ``baselines.md``.

    nice -n 5 python examples/token_baselines.py --env Hopper-v5 --steps 150000 \
        --seeds 0 1 2 --out fleetgym-out/token_baselines_hopper
"""

from __future__ import annotations

import argparse
import csv
import time
from pathlib import Path

import gymnasium as gym
import numpy as np
import torch
from stable_baselines3 import PPO
from stable_baselines3.common.env_util import make_vec_env
from stable_baselines3.common.vec_env import VecNormalize

from fleetgym.agents.tokens import TokenizedActions

EVAL_SEED = 10_000


def make(env_id: str, kind: str) -> gym.Env:
    env = gym.make(env_id)
    return TokenizedActions(env, num_bins=256) if kind == "categorical" else env


def evaluate(env_id: str, kind: str, model: PPO, norm: VecNormalize, episodes: int):
    rows = []
    for e in range(episodes):
        env = make(env_id, kind)
        obs, _ = env.reset(seed=EVAL_SEED + e)
        total, vel, done = 0.0, [], False
        while not done:
            action, _ = model.predict(norm.normalize_obs(obs[None]), deterministic=True)
            obs, r, term, trunc, info = env.step(action[0])
            total, done = total + float(r), bool(term or trunc)
            if "x_velocity" in info:
                vel.append(float(info["x_velocity"]))
        env.close()
        rows.append((total, np.mean(vel) if vel else np.nan))
    return np.array(rows).mean(axis=0)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--env", default="Hopper-v5")
    p.add_argument("--kinds", nargs="+", default=["gaussian", "categorical"])
    p.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    p.add_argument("--steps", type=int, default=150_000)
    p.add_argument("--eval-episodes", type=int, default=10)
    p.add_argument("--out", type=Path, default=Path("fleetgym-out/token_baselines"))
    args = p.parse_args()
    torch.set_num_threads(1)
    args.out.mkdir(parents=True, exist_ok=True)
    rows = []
    for kind in args.kinds:
        for seed in args.seeds:
            start = time.perf_counter()
            venv = make_vec_env(lambda kind=kind: make(args.env, kind), n_envs=8, seed=seed)
            norm = VecNormalize(venv, gamma=0.99)
            model = PPO(
                "MlpPolicy", norm, n_steps=64, batch_size=128, n_epochs=4, learning_rate=3e-4,
                gamma=0.99, gae_lambda=0.95, clip_range=0.2, seed=seed, device="cpu",
            )  # fmt: skip
            model.learn(args.steps)
            norm.training = False
            ret, vel = evaluate(args.env, kind, model, norm, args.eval_episodes)
            train = [ep["r"] for ep in list(model.ep_info_buffer)[-20:]]
            row = {
                "kind": kind, "seed": seed, "train_return_last20": round(float(np.mean(train)), 1),
                "eval_return": round(float(ret), 1), "eval_velocity": round(float(vel), 3),
                "wall_s": round(time.perf_counter() - start, 1),
            }  # fmt: skip
            rows.append(row)
            print(row, flush=True)
    with open(args.out / "baselines.csv", "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    lines = ["| baseline | train return (last 20) | eval return | eval velocity | wall s |"]
    lines.append("|---|---|---|---|---|")
    for kind in args.kinds:
        mine = [r for r in rows if r["kind"] == kind]

        def ms(key: str, rows: list[dict] = mine) -> str:
            v = np.array([r[key] for r in rows], float)
            return f"{v.mean():.1f} ± {v.std():.1f}"

        vel = np.mean([r["eval_velocity"] for r in mine])
        lines.append(
            f"| {kind} | {ms('train_return_last20')} | {ms('eval_return')} | {vel:.3f} "
            f"| {ms('wall_s')} |"
        )
    (args.out / "baselines.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
