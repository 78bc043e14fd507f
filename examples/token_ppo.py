"""Token-level PPO: token vs action vs chunk ratio levels on a Box env, seeds, trivial policies.

Trains :class:`fleetgym.agents.learners.TokenPPO` (a pure-torch causal
transformer, slim head, one token per action dimension) once per ratio level and seed, then
evaluates each final policy deterministically (10 episodes, fresh seeds) and scores two
trivial policies (zero action, uniform random) on the same episodes. Writes ``runs.csv``
(one row per run), ``curves.csv`` (every update), ``summary.md`` and ``curves.png``.

    nice -n 5 python examples/token_ppo.py --env Hopper-v5 --chunk 2 --steps 150000 \
        --seeds 0 1 2 --out fleetgym-out/token_ppo_hopper
"""

from __future__ import annotations

import argparse
import csv
import time
from pathlib import Path

import gymnasium as gym
import numpy as np
import torch

from fleetgym.agents.learners import TokenPPO

EVAL_SEED = 10_000


def episode(env_id: str, act, seed: int) -> tuple[float, float, int]:
    """Return, mean forward velocity (``info['x_velocity']`` where the env reports it), length."""
    env = gym.make(env_id)
    obs, _ = env.reset(seed=seed)
    total, velocities, t, done = 0.0, [], 0, False
    while not done:
        for action in act(obs, t):
            obs, r, term, trunc, info = env.step(action)
            total, t, done = total + float(r), t + 1, bool(term or trunc)
            if "x_velocity" in info:
                velocities.append(float(info["x_velocity"]))
            if done:
                break
    env.close()
    return total, float(np.mean(velocities)) if velocities else float("nan"), t


def evaluate(env_id: str, act, episodes: int) -> dict[str, float]:
    runs = np.array([episode(env_id, act, EVAL_SEED + e) for e in range(episodes)])
    return {"return": runs[:, 0].mean(), "velocity": runs[:, 1].mean(), "length": runs[:, 2].mean()}


def trivial(env_id: str, episodes: int) -> dict[str, dict[str, float]]:
    space = gym.make(env_id).action_space
    rng = np.random.default_rng(0)
    zero = np.zeros(space.shape, space.dtype)
    return {
        "zero action": evaluate(env_id, lambda obs, t: [zero], episodes),
        "uniform random": evaluate(
            env_id,
            lambda obs, t: [rng.uniform(space.low, space.high).astype(space.dtype)],
            episodes,
        ),
    }


def read_csv(path: Path) -> list[dict]:
    """Rows of a CSV this script wrote, numbers as floats (seeds as ints)."""

    def value(key: str, text: str):
        if key == "seed":
            return int(text)
        try:
            return float(text)
        except ValueError:
            return text

    with open(path, newline="") as f:
        return [{k: value(k, v) for k, v in row.items()} for row in csv.DictReader(f)]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--env", default="Hopper-v5")
    p.add_argument("--levels", nargs="+", default=["token", "action", "chunk"])
    p.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    p.add_argument("--steps", type=int, default=150_000)
    p.add_argument("--chunk", type=int, default=2)
    p.add_argument("--loss", default="ppo")
    p.add_argument("--value-head", default="attention")
    p.add_argument("--value-input", default="prefix", help="'prefix' (V(s)) or 'actions'")
    p.add_argument(
        "--level-scale", default="decision",
        help="'decision' (one gradient scale at every level) or 'term' (the mean of all terms)",
    )  # fmt: skip
    p.add_argument("--vocab", type=int, default=32000)
    p.add_argument("--eval-episodes", type=int, default=10)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--out", type=Path, default=Path("fleetgym-out/token_ppo"))
    p.add_argument(
        "--merge", nargs="+", type=Path, default=None,
        help="no training: report the runs.csv and curves.csv of these --out folders together",
    )  # fmt: skip
    args = p.parse_args()
    torch.set_num_threads(args.threads)
    args.out.mkdir(parents=True, exist_ok=True)
    runs, curves = [], []
    if args.merge:
        runs = [r for d in args.merge for r in read_csv(d / "runs.csv")]
        curves = [r for d in args.merge for r in read_csv(d / "curves.csv")]
        args.levels = list(dict.fromkeys(r["level"] for r in runs))
        args.seeds = sorted({int(r["seed"]) for r in runs})
    for level in [] if args.merge else args.levels:
        for seed in args.seeds:
            start = time.perf_counter()
            model = TokenPPO(
                args.env, seed=seed, ratio_level=level, loss=args.loss, chunk=args.chunk,
                value_head=args.value_head, vocab_size=args.vocab,
                value_input=args.value_input, level_scale=args.level_scale,
            )  # fmt: skip
            model.learn(args.steps)
            wall = time.perf_counter() - start
            for s in model.history:
                curves.append({"level": level, "seed": seed, **vars(s)})
            ev = evaluate(
                args.env,
                lambda obs, t, m=model: np.asarray(m.predict(obs, step=t)[0]).reshape(
                    args.chunk, *m.action_shape
                ),
                args.eval_episodes,
            )
            last = model.history[-1]
            row = {
                "level": level, "seed": seed, "env_steps": model.env_steps, "wall_s": round(wall, 1),
                "train_return_last20": round(last.mean_return, 1), "eval_return": round(ev["return"], 1),
                "eval_velocity": round(ev["velocity"], 3), "eval_length": round(ev["length"], 1),
                "final_clip_fraction": round(last.clip_fraction, 3), "final_kl": round(last.kl, 4),
                "final_entropy": round(last.entropy, 3),
            }  # fmt: skip
            runs.append(row)
            print(row, flush=True)
    for name, rows in (("runs.csv", runs), ("curves.csv", curves)):
        with open(args.out / name, "w", newline="") as f:
            writer = csv.DictWriter(f, fieldnames=list(rows[0]))
            writer.writeheader()
            writer.writerows(rows)
    base = trivial(args.env, args.eval_episodes)
    lines = [
        f"# TokenPPO on {args.env}: chunk {args.chunk}, loss {args.loss}, value head "
        f"{args.value_head} ({args.value_input}), level scale {args.level_scale}, "
        f"{args.steps} env steps, seeds {args.seeds}",
        "",
        "| ratio level | train return (last 20 episodes) | eval return (10 det. episodes) "
        "| eval forward velocity | wall s |",
        "|---|---|---|---|---|",
    ]
    for level in args.levels:
        mine = [r for r in runs if r["level"] == level]

        def ms(key: str, rows: list[dict] = mine) -> str:
            v = np.array([r[key] for r in rows], float)
            return f"{v.mean():.1f} ± {v.std():.1f}"

        lines.append(
            f"| {level} | {ms('train_return_last20')} | {ms('eval_return')} | "
            f"{np.mean([r['eval_velocity'] for r in mine]):.3f} | {ms('wall_s')} |"
        )
    for name, b in base.items():
        lines.append(f"| {name} | | {b['return']:.1f} | {b['velocity']:.3f} | |")
    (args.out / "summary.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return
    fig, axes = plt.subplots(1, 2, figsize=(11, 4))
    for i, level in enumerate(args.levels):
        for seed in args.seeds:
            c = [r for r in curves if r["level"] == level and r["seed"] == seed]
            label = level if seed == args.seeds[0] else None
            for ax, x in zip(axes, ("env_steps", "wall_s"), strict=True):
                ax.plot([r[x] for r in c], [r["mean_return"] for r in c], f"C{i}", label=label)
    for ax, x in zip(axes, ("env steps", "wall s"), strict=True):
        ax.set_xlabel(x)
        ax.set_ylabel("train return (last 20 episodes)")
    axes[0].legend()
    fig.tight_layout()
    fig.savefig(args.out / "curves.png", dpi=100)


if __name__ == "__main__":
    main()
