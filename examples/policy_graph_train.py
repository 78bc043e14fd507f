"""Train a policy graph's local node under a frozen remote planner, against one remote policy.

The task: CartPole-v1 whose cart must follow a moving waypoint (x = +0.8 for ticks
0-99, -0.8 for 100-199, +0.8, ...) while the pole stays up. Each tick the pole is up pays
``0.5 + 0.5 * max(0, 1 - |x - waypoint| / 1.6)``: 0.5 for balancing at 1.6 or more
from the waypoint, 1 on it; at most 500 per episode. The env's observation is CartPole's state; the
waypoint is the planner's to give.

Two arms, the same algorithm (Stable-Baselines3 PPO, the same hyper-parameters, the
same env-step budget, the same training seed), over the same link:

* ``graph``: a planner on a server (frozen: it sends the mission's waypoint every 10
  ticks, 200 ms) reaches the trained controller next to the env over the profile (its
  observations and its goals cross it); the controller reads the env over a
  ``"perfect"`` link and acts every tick. It is trained through
  :class:`~fleetgym.wrappers.PolicyGraphEnv` (observation: the env's state and the
  planner's last goal, flattened).
* ``remote``: one monolithic policy on the server: the env wrapped in
  :class:`~fleetgym.wrappers.NetworkShimWrapper` with the profile, its observation the
  state and the current waypoint (the information the graph's controller has, both
  crossing the link as the planner's goal does).

Each trained policy is evaluated deterministically on held-out seeds (``--eval-episodes``
episodes from seed 10 000 on, the link's delays drawn from the same seed). Per profile
the script prints mean ± std over training seeds of the evaluation return, episode
length and mean distance to the waypoint, the paired differences graph - remote (the
same training seed in both arms) with a paired t statistic, and writes everything to
``results.json`` in ``--out``.

Run::

    nice -n 10 python examples/policy_graph_train.py --seeds 5 --first-seed 0 \\
        --steps 80000 --profiles wifi-normal --out fleetgym-out/policy_graph_train
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import subprocess
import time
from pathlib import Path
from typing import Any, SupportsFloat

import gymnasium as gym
import numpy as np
from tqdm import tqdm

from fleetgym.wrappers import (
    NetworkShimWrapper,
    PolicyGraph,
    PolicyGraphEnv,
    PolicyLink,
    PolicyNode,
    list_profiles,
)

WAYPOINTS = (0.8, -0.8)
SEGMENT = 100  # ticks per waypoint
PLANNER_PERIOD = 10  # ticks (200 ms at CartPole's 20 ms)
GOAL_SPACE = gym.spaces.Box(-2.4, 2.4, (), dtype=np.float64)
EVAL_SEED = 10_000
#: PPO's hyper-parameters, the same for both arms.
PPO_KWARGS: dict[str, Any] = {
    "n_steps": 256,
    "batch_size": 128,
    "n_epochs": 10,
    "learning_rate": 1e-3,
    "gamma": 0.98,
    "gae_lambda": 0.9,
    "ent_coef": 0.0,
    "clip_range": 0.2,
    "policy_kwargs": {"net_arch": [64, 64]},
}
N_ENVS = 4


def waypoint_at(tick: int) -> float:
    """The mission's waypoint at ``tick``."""
    return WAYPOINTS[(tick // SEGMENT) % len(WAYPOINTS)]


class WaypointTask(gym.Wrapper[np.ndarray, int, np.ndarray, int]):
    """CartPole-v1 paid for holding the cart near the mission's waypoint.

    ``info["waypoint"]`` is the waypoint of the tick just run and ``info["distance"]``
    the cart's distance to it.
    """

    def __init__(self, env: gym.Env[np.ndarray, int]) -> None:
        super().__init__(env)
        self.tick = 0

    def reset(self, **kwargs: Any) -> tuple[np.ndarray, dict[str, Any]]:
        self.tick = 0
        return self.env.reset(**kwargs)

    def step(self, action: int) -> tuple[np.ndarray, SupportsFloat, bool, bool, dict[str, Any]]:
        goal = waypoint_at(self.tick)
        obs, reward, terminated, truncated, info = self.env.step(action)
        self.tick += 1
        distance = abs(float(obs[0]) - goal)
        shaped = float(reward) * (0.5 + 0.5 * max(0.0, 1.0 - distance / 1.6))
        return obs, shaped, terminated, truncated, {**info, "waypoint": goal, "distance": distance}


class WaypointObservation(gym.ObservationWrapper[np.ndarray, int, np.ndarray]):
    """The state with the current waypoint appended (the monolithic policy's input)."""

    def __init__(self, env: WaypointTask) -> None:
        super().__init__(env)
        low = np.append(env.observation_space.low, GOAL_SPACE.low).astype(np.float32)
        high = np.append(env.observation_space.high, GOAL_SPACE.high).astype(np.float32)
        self.observation_space = gym.spaces.Box(low, high, dtype=np.float32)
        self.task = env

    def observation(self, observation: np.ndarray) -> np.ndarray:
        return np.append(observation, waypoint_at(self.task.tick)).astype(np.float32)


class Planner:
    """The frozen remote planner: the mission's waypoint, sent every ``PLANNER_PERIOD`` ticks."""

    def __init__(self) -> None:
        self.calls = 0

    def reset(self) -> None:
        self.calls = 0

    def __call__(self, inputs: dict[str, Any]) -> np.ndarray:
        goal = waypoint_at(self.calls * PLANNER_PERIOD)
        self.calls += 1
        return np.array(goal, dtype=np.float64)


def task_env() -> WaypointTask:
    return WaypointTask(gym.make("CartPole-v1"))


def graph_env(profile: str, *, flatten: bool = True) -> gym.Env[Any, Any]:
    """The graph as an env for the controller (flattened: state, then goal)."""
    base = task_env()
    graph = PolicyGraph(
        [
            PolicyNode("planner", Planner(), GOAL_SPACE, period=PLANNER_PERIOD),
            PolicyNode("controller", None, base.action_space),
        ],
        [
            PolicyLink("env", "planner", profile),
            PolicyLink("planner", "controller", profile),
            PolicyLink("env", "controller", "perfect"),
            PolicyLink("controller", "env", "perfect"),
        ],
    )
    env = PolicyGraphEnv(base, graph, trained="controller")
    return gym.wrappers.FlattenObservation(env) if flatten else env


def remote_env(profile: str) -> gym.Env[Any, Any]:
    """The monolithic remote policy's env: state and waypoint, both over the profile."""
    return NetworkShimWrapper(WaypointObservation(task_env()), profile)


ARMS = {"graph": graph_env, "remote": remote_env}


def evaluate(model: Any, make: Any, profile: str, episodes: int) -> list[dict[str, float]]:
    """Deterministic episodes on the held-out seeds ``EVAL_SEED + i``."""
    env = make(profile)
    rows = []
    for i in range(episodes):
        obs, _ = env.reset(seed=EVAL_SEED + i)
        total, length, distance = 0.0, 0, 0.0
        while True:
            action, _ = model.predict(obs, deterministic=True)
            obs, reward, terminated, truncated, info = env.step(int(action))
            total += float(reward)
            ticks = int(info.get("graph_ticks", 1))
            length += ticks
            distance += info["distance"] * ticks
            if terminated or truncated:
                break
        rows.append({"return": total, "length": length, "distance": distance / length})
    env.close()
    return rows


class HandMade:
    """A hand-made controller with ``predict``: the LQR stabiliser of
    ``policy_graph_cartpole.py`` steering the cart to the planner's goal, or to 0."""

    def __init__(self, use_goal: bool) -> None:
        from policy_graph_cartpole import Stabiliser  # the sibling example's frozen LQR

        self.stabiliser, self.use_goal = Stabiliser(), use_goal

    def predict(self, obs: dict[str, Any], deterministic: bool = True) -> tuple[int, None]:
        goal = obs["planner"] if self.use_goal else np.float64(0.0)
        return self.stabiliser({"env": obs["env"], "planner": goal}), None


def references(profile: str, episodes: int) -> dict[str, Any]:
    """The graph's controller replaced by a hand-made one, on the held-out seeds: what
    tracking the waypoints is worth on this reward, and what holding the centre is."""
    out: dict[str, Any] = {"profile": profile}
    for name, use_goal in (("lqr_tracking_goal", True), ("lqr_holding_centre", False)):
        rows = evaluate(
            HandMade(use_goal), lambda p: graph_env(p, flatten=False), profile, episodes
        )
        out[name] = {
            k: float(np.mean([r[k] for r in rows])) for k in ("return", "length", "distance")
        }
    return out


def train_one(arm: str, profile: str, seed: int, steps: int, episodes: int) -> dict[str, Any]:
    """Train one arm for ``steps`` env steps from ``seed``; evaluate it."""
    from stable_baselines3 import PPO
    from stable_baselines3.common.env_util import make_vec_env

    make = ARMS[arm]
    cpu, wall = time.process_time(), time.perf_counter()
    venv = make_vec_env(lambda: make(profile), n_envs=N_ENVS, seed=seed)
    model = PPO("MlpPolicy", venv, seed=seed, device="cpu", verbose=0, **PPO_KWARGS)
    model.learn(total_timesteps=steps)
    venv.close()
    train_cpu = time.process_time() - cpu
    rows = evaluate(model, make, profile, episodes)
    return {
        "arm": arm,
        "profile": profile,
        "seed": seed,
        "env_steps": int(model.num_timesteps),
        "train_cpu_s": round(train_cpu, 1),
        "cpu_s": round(time.process_time() - cpu, 1),
        "wall_s": round(time.perf_counter() - wall, 1),
        "eval": rows,
        **{k: float(np.mean([r[k] for r in rows])) for k in ("return", "length", "distance")},
    }


def summarise(runs: list[dict[str, Any]], profile: str) -> dict[str, Any]:
    """Mean ± std over training seeds per arm and the paired differences graph - remote."""
    out: dict[str, Any] = {"profile": profile}
    for key in ("return", "length", "distance"):
        by_arm = {
            arm: np.array(
                [
                    r[key]
                    for r in sorted(runs, key=lambda r: r["seed"])
                    if r["arm"] == arm and r["profile"] == profile
                ]
            )
            for arm in ARMS
        }
        diff = by_arm["graph"] - by_arm["remote"]
        sd = float(diff.std(ddof=1))
        out[key] = {
            **{arm: [float(v.mean()), float(v.std(ddof=1))] for arm, v in by_arm.items()},
            "graph - remote": {
                "mean": float(diff.mean()),
                "std": sd,
                "paired_t": float(diff.mean() / (sd / np.sqrt(diff.size))) if sd > 0 else None,
                "graph_higher": int((diff > 0).sum()),
                "ties": int((diff == 0).sum()),
            },
        }
    return out


def head_commit() -> str:
    """The commit measured: HEAD when the runs start (``+dirty`` if this file differs)."""
    here = Path(__file__).resolve()
    try:
        commit = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"],
            capture_output=True,
            text=True,
            check=True,
            cwd=here.parent,
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--", here.name],
            capture_output=True,
            text=True,
            check=True,
            cwd=here.parent,
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"
    return commit + ("+dirty" if dirty else "")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=5, help="training seeds (>= 2)")
    parser.add_argument("--first-seed", type=int, default=0)
    parser.add_argument("--steps", type=int, default=80_000, help="env steps per run")
    parser.add_argument("--eval-episodes", type=int, default=10)
    parser.add_argument("--profiles", nargs="+", default=["wifi-normal"])
    parser.add_argument("--out", type=Path, default=Path("fleetgym-out/policy_graph_train"))
    parser.add_argument(
        "--references",
        action="store_true",
        help="only evaluate hand-made controllers in the graph (no training)",
    )
    parser.add_argument("--no-progress", action="store_true")
    args = parser.parse_args(argv)
    if args.seeds < 2:
        parser.error(f"--seeds: expected >= 2 (a std needs two), actual {args.seeds}")
    if args.first_seed < 0:
        parser.error(f"--first-seed: expected >= 0, actual {args.first_seed}")
    if args.steps < N_ENVS * PPO_KWARGS["n_steps"]:
        parser.error(
            f"--steps: expected >= {N_ENVS * PPO_KWARGS['n_steps']} (one rollout), "
            f"actual {args.steps}"
        )
    if args.eval_episodes < 1:
        parser.error(f"--eval-episodes: expected >= 1, actual {args.eval_episodes}")
    for profile in args.profiles:
        if profile not in list_profiles():
            parser.error(
                f"--profiles: unknown profile {profile!r}; known: {', '.join(list_profiles())}"
            )
    commit = head_commit()
    if args.references:
        refs = [references(p, args.eval_episodes) for p in args.profiles]
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "references.json").write_text(
            json.dumps({"commit": commit, "eval_seeds": EVAL_SEED, "references": refs}, indent=1)
        )
        for ref in refs:
            for name in ("lqr_tracking_goal", "lqr_holding_centre"):
                v = ref[name]
                print(
                    f"{ref['profile']} {name}: return {v['return']:.2f}, "
                    f"length {v['length']:.1f}, distance {v['distance']:.3f}"
                )
        return 0
    import torch

    torch.set_num_threads(1)
    seeds = range(args.first_seed, args.first_seed + args.seeds)
    jobs = [(arm, p, s) for p in args.profiles for s in seeds for arm in ARMS]
    wall, cpu = time.perf_counter(), time.process_time()
    runs = []
    for job in tqdm(jobs, disable=args.no_progress, desc="runs"):
        runs.append(train_one(*job, steps=args.steps, episodes=args.eval_episodes))
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    summary = [summarise(runs, p) for p in args.profiles]
    meta = {
        "commit": commit,
        "seeds": list(seeds),
        "steps": args.steps,
        "eval_seeds": [EVAL_SEED, EVAL_SEED + args.eval_episodes - 1],
        "algorithm": "stable_baselines3.PPO MlpPolicy",
        "n_envs": N_ENVS,
        "ppo": PPO_KWARGS,
        "machine": f"{platform.machine()}, {os.cpu_count()} CPUs",
        "wall_s": round(wall, 1),
        "cpu_s": round(cpu, 1),
        "max_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
    }
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "results.json").write_text(
        json.dumps({"meta": meta, "summary": summary, "runs": runs}, indent=1)
    )
    for s in summary:
        print(f"{s['profile']} ({args.steps} env steps, {len(seeds)} seeds):")
        for key in ("return", "length", "distance"):
            v = s[key]
            d = v["graph - remote"]
            t = "n/a" if d["paired_t"] is None else f"{d['paired_t']:.2f}"
            print(
                f"  {key:8s} graph {v['graph'][0]:7.2f} ± {v['graph'][1]:6.2f}   "
                f"remote {v['remote'][0]:7.2f} ± {v['remote'][1]:6.2f}   "
                f"graph - remote {d['mean']:+7.2f} ± {d['std']:6.2f} (t = {t}; "
                f"graph higher on {d['graph_higher']}/{len(seeds)}, ties {d['ties']})"
            )
    print(f"commit {commit}, wall {wall:.1f} s, CPU {cpu:.1f} s -> {args.out / 'results.json'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
