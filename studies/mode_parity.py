"""Mode 2 against Mode 3 under one timeline: packet ages, and policies trained in the shim
evaluated over a real socket.

``python studies/mode_parity.py ages`` runs, for each profile, the shim (Mode 2)
and a client against an env server on loopback (Mode 3) for the same number of control
ticks with a random policy, and compares the distributions of observation and action ages
(ms and ticks): quantiles p10/p50/p90/p99 side by side and the two-sample
Kolmogorov-Smirnov distance, with the machine's timer jitter (how late the server's ticks
ran, and how late the client's delayed sends fired) measured in the same run.

``python studies/mode_parity.py policies`` trains SB3 PPO in Mode 2 under a
profile with compensation (frames, ages and sent actions) for several seeds and evaluates
each policy for the same episodes in Mode 2 and in Mode 3 (several client threads against
one server process), reporting each seed's paired difference and its standard error.

Both write a JSON report and print a Markdown table (``--out``).
"""

from __future__ import annotations

import argparse
import json
import math
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np

from fleetgym.wrappers import HistoryCompensation

__all__ = ["age_parity", "main", "policy_parity"]

QUANTILES = (0.1, 0.5, 0.9, 0.99)
AGE_KEYS = ("obs_age_steps", "obs_age_ms", "action_age_steps", "action_age_ms")


def _ages_of(env: Any, steps: int, seed: int) -> dict[str, np.ndarray]:
    """``steps`` ticks of a seeded random policy; the four ages of every step."""
    rng = np.random.default_rng(seed)
    env.action_space.seed(seed)
    env.reset(seed=seed)
    out: dict[str, list[float]] = {key: [] for key in AGE_KEYS}
    late: list[float] = []
    for _ in range(steps):
        _obs, _r, term, trunc, info = env.step(env.action_space.sample())
        for key in AGE_KEYS:
            out[key].append(float(info[key]))
        if "tick_late_ms" in info:
            late.append(float(info["tick_late_ms"]))
        if term or trunc:
            env.reset(seed=int(rng.integers(2**31)))
    arrays = {key: np.asarray(values) for key, values in out.items()}
    arrays["tick_late_ms"] = np.asarray(late)
    return arrays


def _quantiles(values: np.ndarray) -> list[float]:
    return [float(np.quantile(values, q, method="inverted_cdf")) for q in QUANTILES]


def age_parity(
    profile: str, steps: int = 3000, seed: int = 0, env_id: str = "CartPole-v1"
) -> dict[str, Any]:
    """Ages in Mode 2 (the shim, default timeline) and Mode 3 (a loopback socket).

    Returns:
        Per age key the quantiles of both modes and the KS distance; the timer jitter
        (p50/p99 of the server's tick lateness and of the client's send overshoot, ms).
    """
    import gymnasium as gym
    from scipy.stats import ks_2samp

    import fleetgym  # noqa: F401  (registers the IDs)
    from fleetgym.wrappers import NetworkShimWrapper
    from fleetgym.wrappers.remote import RemoteEnvServer

    shim = NetworkShimWrapper(gym.make(env_id), profile, info="full")
    mode2 = _ages_of(shim, steps, seed)
    shim.close()
    with RemoteEnvServer(env_id, profile=profile) as server:
        host, port = server.address
        remote = gym.make("fleetgym/Remote-v0", address=f"{host}:{port}")
        client: Any = remote.unwrapped
        try:
            mode3 = _ages_of(remote, steps, seed)
            overshoot = client.sender.overshoot_quantiles_ms((0.5, 0.99))
            overruns = client.overruns
            step_ms = client.step_ms
        finally:
            remote.close()
    late = mode3["tick_late_ms"]
    report: dict[str, Any] = {
        "profile": profile,
        "env_id": env_id,
        "steps": steps,
        "step_ms": step_ms,
        "overruns": overruns,
        "timer_jitter_ms": {
            "tick_late_p50": float(np.quantile(late, 0.5)),
            "tick_late_p99": float(np.quantile(late, 0.99)),
            "send_overshoot_p50": overshoot[0],
            "send_overshoot_p99": overshoot[1],
        },
    }
    for key in AGE_KEYS:
        q2, q3 = _quantiles(mode2[key]), _quantiles(mode3[key])
        report[key] = {
            "mode2": q2,
            "mode3": q3,
            "mean_mode2": float(mode2[key].mean()),
            "mean_mode3": float(mode3[key].mean()),
            # Ticks are whole numbers in both modes: their KS distance is the parity figure.
            # Ages in ms are a lattice (k * P) in Mode 2 and the lattice plus the timer's
            # jitter in Mode 3, so their KS distance measures the jitter, not the model:
            # the quantiles' largest gap is compared with the jitter instead.
            "ks": float(ks_2samp(mode2[key], mode3[key]).statistic),
            "max_quantile_gap": float(max(abs(x - y) for x, y in zip(q2, q3, strict=True))),
        }
    return report


def _robust(profile: str, k: int, m: int) -> Any:
    from fleetgym.wrappers import make_robust_env

    return make_robust_env(
        "CartPole-v1",
        profile,
        compensation=HistoryCompensation(history_length=k, action_history_length=m),
    )


def _remote_robust(address: str, k: int, m: int) -> Any:
    import gymnasium as gym

    from fleetgym.wrappers.delay_features import compensate

    return compensate(gym.make("fleetgym/Remote-v0", address=address), k, m)


def _episodes(model: Any, make_env: Any, seeds: list[int], out: dict[int, float]) -> None:
    env = make_env()
    try:
        for seed in seeds:
            obs, _ = env.reset(seed=seed)
            ret, done = 0.0, False
            while not done:
                action = int(model.predict(obs, deterministic=True)[0])
                obs, r, term, trunc, _ = env.step(action)
                ret, done = ret + float(r), term or trunc
            out[seed] = ret
    finally:
        env.close()


def policy_parity(
    seeds: int = 3,
    timesteps: int = 60_000,
    episodes: int = 50,
    profile: str = "wifi-normal",
    clients: int = 8,
    port: int = 7311,
    first_seed: int = 0,
) -> dict[str, Any]:
    """Train ``seeds`` PPO policies in Mode 2 and evaluate each in Mode 2 and Mode 3.

    Each policy plays the same episode seeds (1000, 1001, ...) in both modes; Mode 3 runs
    ``clients`` client threads against one ``fleetgym serve-env`` process on loopback.
    """
    import torch
    from stable_baselines3 import PPO
    from stable_baselines3.common.env_util import make_vec_env

    torch.set_num_threads(1)
    k = m = 4
    server = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "fleetgym",
            "serve-env",
            "--env-id",
            "CartPole-v1",
            "--profile",
            profile,
            "--bind",
            f"127.0.0.1:{port}",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    address = f"127.0.0.1:{port}"
    rows = []
    try:
        for seed in range(first_seed, first_seed + seeds):
            started = time.perf_counter()
            model = PPO(
                "MlpPolicy",
                make_vec_env(lambda: _robust(profile, k, m), n_envs=4, seed=seed),
                seed=seed,
                n_steps=256,
                batch_size=256,
                n_epochs=10,
                learning_rate=1e-3,
                device="cpu",
            ).learn(timesteps)
            train_s = time.perf_counter() - started
            episode_seeds = [1000 + i for i in range(episodes)]
            mode2: dict[int, float] = {}
            _episodes(model, lambda: _robust(profile, k, m), episode_seeds, mode2)
            mode3: dict[int, float] = {}
            _wait_for_server(address)
            parts = [episode_seeds[i::clients] for i in range(clients)]
            threads = [
                threading.Thread(
                    target=_episodes,
                    args=(model, lambda: _remote_robust(address, k, m), part, mode3),
                )
                for part in parts
                if part
            ]
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join()
            a = np.asarray([mode2[s] for s in episode_seeds])
            b = np.asarray([mode3[s] for s in episode_seeds])
            diff = b - a
            rows.append(
                {
                    "seed": seed,
                    "train_s": train_s,
                    "mode2_mean": float(a.mean()),
                    "mode2_std": float(a.std()),
                    "mode3_mean": float(b.mean()),
                    "mode3_std": float(b.std()),
                    "paired_diff": float(diff.mean()),
                    "paired_se": float(diff.std(ddof=1) / math.sqrt(len(diff))),
                }
            )
            print(json.dumps(rows[-1]), flush=True)
    finally:
        server.terminate()
        server.wait(timeout=30)
    means = np.asarray([r["mode2_mean"] for r in rows])
    return {
        "profile": profile,
        "timesteps": timesteps,
        "episodes": episodes,
        "clients": clients,
        "seeds": rows,
        "mode2_seed_spread": float(means.std(ddof=1)) if len(means) > 1 else math.nan,
    }


def _wait_for_server(address: str, timeout_s: float = 60.0) -> None:
    import socket

    host, port = address.rsplit(":", 1)
    end = time.monotonic() + timeout_s
    while time.monotonic() < end:
        try:
            socket.create_connection((host, int(port)), timeout=1.0).close()
            return
        except OSError:
            time.sleep(0.2)
    raise TimeoutError(f"serve-env at {address} did not start within {timeout_s:.0f} s")


def _age_table(reports: list[dict[str, Any]]) -> str:
    lines = [
        "| profile | age | Mode 2 p10 / p50 / p90 / p99 | Mode 3 p10 / p50 / p90 / p99 | "
        "mean 2 / 3 | KS | largest quantile gap |",
        "|---|---|---|---|---|---|---|",
    ]
    for rep in reports:
        for key in AGE_KEYS:
            row = rep[key]
            fmt = "{:g}" if key.endswith("steps") else "{:.1f}"
            q2 = " / ".join(fmt.format(v) for v in row["mode2"])
            q3 = " / ".join(fmt.format(v) for v in row["mode3"])
            lines.append(
                f"| {rep['profile']} | {key} | {q2} | {q3} | "
                f"{row['mean_mode2']:.2f} / {row['mean_mode3']:.2f} | {row['ks']:.3f} | "
                f"{row['max_quantile_gap']:.2f} |"
            )
    lines.append("")
    lines.append("| profile | server tick late p50 / p99 ms | send overshoot p50 / p99 ms |")
    lines.append("|---|---|---|")
    for rep in reports:
        j = rep["timer_jitter_ms"]
        lines.append(
            f"| {rep['profile']} | {j['tick_late_p50']:.2f} / {j['tick_late_p99']:.2f} | "
            f"{j['send_overshoot_p50']:.2f} / {j['send_overshoot_p99']:.2f} |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python studies/mode_parity.py")
    sub = parser.add_subparsers(dest="what", required=True)
    ages = sub.add_parser("ages", help="packet ages in Mode 2 and Mode 3")
    ages.add_argument(
        "--profiles",
        nargs="+",
        default=["ethernet", "wifi-normal", "wifi-degraded", "trace-wifi-office"],
    )
    ages.add_argument("--steps", type=int, default=3000)
    ages.add_argument("--seed", type=int, default=0)
    pol = sub.add_parser("policies", help="policies trained in Mode 2, evaluated in both")
    pol.add_argument("--seeds", type=int, default=3)
    pol.add_argument("--first-seed", type=int, default=0)
    pol.add_argument("--timesteps", type=int, default=60_000)
    pol.add_argument("--episodes", type=int, default=50)
    pol.add_argument("--profile", default="wifi-normal")
    pol.add_argument("--clients", type=int, default=8)
    for p in (ages, pol):
        p.add_argument("--out", type=Path, default=None, help="write the JSON report here")
    args = parser.parse_args(argv)
    if args.what == "ages":
        reports = [age_parity(p, args.steps, args.seed) for p in args.profiles]
        print(_age_table(reports))
        result: Any = reports
    else:
        result = policy_parity(
            args.seeds,
            args.timesteps,
            args.episodes,
            args.profile,
            args.clients,
            first_seed=args.first_seed,
        )
        for row in result["seeds"]:
            print(
                f"| {row['seed']} | {row['mode2_mean']:.0f} ± {row['mode2_std']:.0f} | "
                f"{row['mode3_mean']:.0f} ± {row['mode3_std']:.0f} | "
                f"{row['paired_diff']:+.1f} ± {row['paired_se']:.1f} |"
            )
        print(f"Mode 2 seed spread (std of the seed means): {result['mode2_seed_spread']:.1f}")
    if args.out is not None:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
