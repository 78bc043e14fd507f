"""The token policy trained through AsyncPPO with the inference server, next to the MLP policy.

Trains, per seed, :class:`fleetgym.agents.learners.AsyncPPO` (the workload's
MLP Gaussian or categorical policy) and
:class:`fleetgym.agents.learners.TokenAsyncPPO` (a causal
transformer emitting one token per action dimension, slim head, ``--chunk`` actions per
decision) on the same workload, actor threads acting through one in-process
:class:`~fleetgym.agents.inference.InferenceServer` each. Measures env steps/s of
``learn`` (the actors built beforehand), the server's batch sizes (mean and histogram),
forward time and latency, the learner's utilisation, the process's CPU seconds and the
last mean return. Writes ``runs.csv``, ``summary.md`` and ``throughput.png``.

    nice -n 10 python examples/token_async.py --env Hopper-v5 --steps 16384 --actors 4 \
        --seeds 0 1 2 3 4 --out fleetgym-out/token_async_hopper
    # the learner light (one epoch each), so that collection and serving set the pace:
    nice -n 10 python examples/token_async.py --env Hopper-v5 --steps 16384 --actors 4 \
        --epochs 1 --mlp-epochs 1 --seeds 0 1 2 3 4 --out fleetgym-out/token_async_hopper_e1
"""

from __future__ import annotations

import argparse
import csv
import json
import time
from pathlib import Path

import numpy as np
import torch

from fleetgym.agents.learners import (
    AsyncPPO,
    AsyncPPOConfig,
    AsyncTopology,
    TokenAsyncPPO,
    TokenAsyncPPOConfig,
    TokenPPOConfig,
)

KINDS = ("mlp", "token")


def run(kind: str, args: argparse.Namespace, seed: int) -> dict:
    topology = AsyncTopology(
        inference="server", n_actors=args.actors, steps_per_actor=args.steps_per_actor
    )
    model: AsyncPPO
    if kind == "mlp":
        epochs = {} if args.mlp_epochs is None else {"epochs": args.mlp_epochs}
        algo = AsyncPPOConfig(max_policy_lag=args.max_policy_lag, hyperparameters=epochs)
        model = AsyncPPO(args.env, algo=algo, topology=topology, seed=seed)
    else:
        token = TokenPPOConfig(
            ratio_level=args.ratio_level, chunk=args.chunk, hidden_size=args.hidden,
            layers=args.layers, heads=args.heads, vocab_size=args.vocab, epochs=args.epochs,
            minibatch_size=args.minibatch,
        )  # fmt: skip
        token_algo = TokenAsyncPPOConfig(token, max_policy_lag=args.max_policy_lag)
        model = TokenAsyncPPO(args.env, algo=token_algo, topology=topology, seed=seed)
    try:
        model.prewarm()  # builds the server and the actors outside the timed learn
        cpu, wall = time.process_time(), time.perf_counter()
        model.learn(args.steps)
        wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
        server = model.slots.server.metrics()
    finally:
        model.close()
    last = model.history[-1]
    return {
        "kind": kind, "seed": seed, "env_steps": model.num_timesteps, "wall_s": wall,
        "steps_per_s": model.num_timesteps / wall, "cpu_s": cpu,
        "mean_batch": server["mean_batch"], "batches": server["batches"],
        "requests": server["requests"], "forward_ms": server["forward_ms_mean"],
        "latency_ms_p50": server["latency_ms_p50"], "latency_ms_p99": server["latency_ms_p99"],
        "server_utilisation": server["utilisation"],
        "learner_utilisation": last.learner_utilisation, "updates": model.updates,
        "mean_return": last.mean_return,
        "batch_histogram": json.dumps(server["batch_histogram"], sort_keys=True),
    }  # fmt: skip


def summarise(rows: list[dict], args: argparse.Namespace) -> str:
    lines = [
        f"{args.env}, {args.actors} actor threads through one inference server, "
        f"{args.steps} env steps per run, {len(args.seeds)} seeds (mean +- std); token "
        f"epochs {args.epochs}, MLP epochs {args.mlp_epochs or 'the workload default'}",
        "",
        "| policy | env steps/s | mean server batch | forward ms | latency p50 / p99 ms "
        "| learner util. | CPU s per run | last mean return |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for kind in KINDS:
        group = [r for r in rows if r["kind"] == kind]
        if not group:
            continue

        def ms(key: str, fmt: str = ".1f", group=group) -> str:
            values = np.array([r[key] for r in group], float)
            return f"{values.mean():{fmt}} +- {values.std():{fmt}}"

        lines.append(
            f"| {kind} | {ms('steps_per_s', '.0f')} | {ms('mean_batch', '.2f')} "
            f"| {ms('forward_ms', '.2f')} | {ms('latency_ms_p50', '.1f')} / "
            f"{ms('latency_ms_p99', '.1f')} | {ms('learner_utilisation', '.2f')} "
            f"| {ms('cpu_s')} | {ms('mean_return')} |"
        )
    return "\n".join(lines) + "\n"


def plot(rows: list[dict], args: argparse.Namespace, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 3.6))
    kinds = [k for k in KINDS if any(r["kind"] == k for r in rows)]
    for i, kind in enumerate(kinds):
        group = [r for r in rows if r["kind"] == kind]
        rates = np.array([r["steps_per_s"] for r in group])
        left.bar(i, rates.mean(), yerr=rates.std(), capsize=4, color=f"C{i}")
        left.scatter(np.full(len(rates), i), rates, color="k", s=8, zorder=3)
        counts = np.zeros(args.actors + 1)
        for r in group:
            for size, n in json.loads(r["batch_histogram"]).items():
                counts[int(size)] += n * int(size)  # requests answered in batches of this size
        share = counts / counts.sum()
        offset = (i - (len(kinds) - 1) / 2) * 0.38
        right.bar(np.arange(args.actors + 1) + offset, share, width=0.38, label=kind,
                  color=f"C{i}")  # fmt: skip
    left.set_xticks(range(len(kinds)), kinds)
    left.set_ylabel("env steps / s (learn)")
    left.set_title("throughput")
    right.set_xlabel("server batch size")
    right.set_ylabel("share of requests")
    right.set_xticks(range(1, args.actors + 1))
    right.set_title("batch sizes")
    right.legend()
    fig.suptitle(f"{args.env}: AsyncPPO through the inference server, {len(args.seeds)} seeds")
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--env", default="Hopper-v5")
    parser.add_argument("--steps", type=int, default=8192, help="env steps per run")
    parser.add_argument("--actors", type=int, default=4)
    parser.add_argument("--steps-per-actor", type=int, default=64)
    parser.add_argument("--max-policy-lag", type=int, default=2)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2, 3, 4])
    parser.add_argument("--kinds", nargs="+", default=list(KINDS), choices=KINDS)
    parser.add_argument("--ratio-level", default="token")
    parser.add_argument("--chunk", type=int, default=1)
    parser.add_argument("--hidden", type=int, default=64)
    parser.add_argument("--layers", type=int, default=2)
    parser.add_argument("--heads", type=int, default=4)
    parser.add_argument("--vocab", type=int, default=32000)
    parser.add_argument("--epochs", type=int, default=4)
    parser.add_argument("--minibatch", type=int, default=128)
    parser.add_argument("--mlp-epochs", type=int, help="the MLP's epochs (default: the workload's)")
    parser.add_argument("--threads", type=int, default=1, help="torch threads")
    parser.add_argument("--out", type=Path, default=Path("fleetgym-out/token_async"))
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    args.out.mkdir(parents=True, exist_ok=True)
    rows = []
    for seed in args.seeds:
        for kind in args.kinds:
            row = run(kind, args, seed)
            rows.append(row)
            print(
                f"{kind} seed {seed}: {row['steps_per_s']:.0f} steps/s, mean batch "
                f"{row['mean_batch']:.2f}, CPU {row['cpu_s']:.1f} s, return "
                f"{row['mean_return']:.1f}",
                flush=True,
            )
    with open(args.out / "runs.csv", "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    summary = summarise(rows, args)
    (args.out / "summary.md").write_text(summary)
    plot(rows, args, args.out / "throughput.png")
    print(summary)


if __name__ == "__main__":
    main()
