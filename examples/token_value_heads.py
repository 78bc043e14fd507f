"""Attention vs mean vs first-token value heads of a token policy on sparse-reward BabyAI.

TokenPPO on ``BabyAI-GoToRedBallGrey-v0``: the 7x7x3 image plus the agent's direction as
the observation embedding, the mission (``go to the red ball``) as instruction ids from the
fixed BabyAI word list (:class:`fleetgym.agents.tokens.MissionVocabulary`), one
action token of 7 bins. The reward is sparse (``1 - 0.9 t / 64`` on reaching the ball, else
0), left unscaled so the value error is in return units. Per update it records the success
rate of the episodes that ended and the value head's RMSE against its GAE targets; at the
end 50 sampled episodes on fresh seeds. Writes ``runs.csv``, ``curves.csv``, ``summary.md``
and ``curves.png``.

    nice -n 5 python examples/token_value_heads.py --steps 50000 --seeds 0 1 2 3 4 \
        --out fleetgym-out/token_value_heads

``--levels`` and ``--chunk`` set ``TokenPPO``'s ``ratio_level`` and ``chunk`` (``K`` actions
per decision): with one token per action ``"token"`` and ``"action"`` are the same ratios,
``"chunk"`` differs for ``K > 1``.

    nice -n 5 python examples/token_value_heads.py --steps 50000 --seeds 0 1 2 3 4 \
        --heads attention --levels token chunk --chunk 2 --out fleetgym-out/token_levels_babyai
"""

from __future__ import annotations

import argparse
import csv
import time
from pathlib import Path

import minigrid  # noqa: F401  (registers BabyAI)
import numpy as np
import torch

from fleetgym.agents.learners import TokenPPO

ENV = "BabyAI-GoToRedBallGrey-v0"


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--heads", nargs="+", default=["attention", "mean", "first"])
    p.add_argument("--levels", nargs="+", default=["token"], help="TokenPPO ratio_level(s)")
    p.add_argument("--chunk", type=int, default=1, help="actions K per decision")
    p.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    p.add_argument("--steps", type=int, default=50_000)
    p.add_argument("--value-input", default="prefix", help="'prefix' (V(s)) or 'actions'")
    p.add_argument("--eval-episodes", type=int, default=50)
    p.add_argument("--out", type=Path, default=Path("fleetgym-out/token_value_heads"))
    args = p.parse_args()
    torch.set_num_threads(1)
    args.out.mkdir(parents=True, exist_ok=True)
    runs, curves = [], []
    configs = [(head, level) for head in args.heads for level in args.levels]
    for head, level in configs:
        for seed in args.seeds:
            start = time.perf_counter()
            model = TokenPPO(
                ENV, seed=seed, value_head=head, normalize_reward=False,
                ratio_level=level, chunk=args.chunk, value_input=args.value_input,
            )  # fmt: skip
            recent: list[float] = []
            while model.env_steps < args.steps:
                rollout = model.collector.collect(model.policy, model.config.n_steps)
                stats = model.update(rollout)
                recent = (recent + [float(r > 0) for r in rollout.episode_returns])[-100:]
                curves.append({
                    "head": head, "level": level, "chunk": args.chunk, "seed": seed, "env_steps": stats.env_steps,
                    "wall_s": round(stats.wall_s, 2), "success_last100": float(np.mean(recent)),
                    "value_error": stats.value_error, "mean_return": stats.mean_return,
                })  # fmt: skip
            returns = np.array(model.evaluate(args.eval_episodes, deterministic=False))
            tail = [
                c["value_error"] for c in curves
                if (c["head"], c["level"], c["seed"]) == (head, level, seed)
            ]  # fmt: skip
            row = {
                "head": head, "level": level, "chunk": args.chunk, "seed": seed, "env_steps": model.env_steps,
                "train_success_last100": round(float(np.mean(recent)), 3),
                "eval_success": round(float(np.mean(returns > 0)), 3),
                "eval_return": round(float(returns.mean()), 3),
                "value_error_last10": round(float(np.mean(tail[-10:])), 4),
                "wall_s": round(time.perf_counter() - start, 1),
            }  # fmt: skip
            runs.append(row)
            print(row, flush=True)
    for name, rows in (("runs.csv", runs), ("curves.csv", curves)):
        with open(args.out / name, "w", newline="") as f:
            writer = csv.DictWriter(f, fieldnames=list(rows[0]))
            writer.writeheader()
            writer.writerows(rows)
    lines = [
        f"# TokenPPO value heads on {ENV}: {args.steps} env steps, seeds {args.seeds}, "
        f"chunk {args.chunk}",
        "",
        "| value head | ratio level | train success (last 100 episodes) "
        f"| eval success ({args.eval_episodes} sampled) "
        "| eval return | value RMSE (last 10 updates) |",
        "|---|---|---|---|---|---|",
    ]
    for head, level in configs:
        mine = [r for r in runs if (r["head"], r["level"]) == (head, level)]

        def ms(key: str, rows: list[dict] = mine) -> str:
            v = np.array([r[key] for r in rows], float)
            return f"{v.mean():.3f} ± {v.std():.3f}"

        lines.append(
            f"| {head} | {level} | {ms('train_success_last100')} | {ms('eval_success')} | "
            f"{ms('eval_return')} | {ms('value_error_last10')} |"
        )
    (args.out / "summary.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(11, 4))
    for i, (head, level) in enumerate(configs):
        for seed in args.seeds:
            c = [r for r in curves if (r["head"], r["level"], r["seed"]) == (head, level, seed)]
            name = head if len(args.levels) == 1 else f"{head}, {level} (K = {args.chunk})"
            label = name if seed == args.seeds[0] else None
            for ax, key in zip(axes, ("success_last100", "value_error"), strict=True):
                ax.plot([r["env_steps"] for r in c], [r[key] for r in c], f"C{i}", label=label)
    axes[0].set_ylabel("success (last 100 training episodes)")
    axes[1].set_ylabel("value RMSE against the GAE targets")
    for ax in axes:
        ax.set_xlabel("env steps")
    axes[0].legend()
    fig.tight_layout()
    fig.savefig(args.out / "curves.png", dpi=100)


if __name__ == "__main__":
    main()
