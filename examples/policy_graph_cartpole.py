"""A remote planner over a local stabiliser against one remote policy, over the same link.

The task: CartPole-v1 whose cart must visit waypoints (x = +0.8, -0.8, +0.8, ...) while
the pole stays up. A planner picks the current waypoint (every 10 ticks, 200 ms: the
next one once the cart has settled within 0.15 of the current one); a stabiliser (a
discrete LQR on CartPole's linearised dynamics, bang-bang on the two pushes) balances the
pole and steers the cart towards the waypoint every tick. Both are frozen callables.

Three deployments of the same two policies, each over one network profile:

* ``graph``: the planner on a server behind the profile (its observations and its goals
  cross it), the stabiliser next to the env (``"perfect"`` links): a
  :class:`~fleetgym.wrappers.PolicyGraph` of two nodes.
* ``remote``: planner and stabiliser together on the server (a one-node graph): every
  observation and every push crosses the profile, as for a monolithic remote policy.
* ``remote+predictor``: the same, with a Smith predictor in front of the stabiliser: it
  rolls the observation forward through CartPole's own dynamics with the pushes it sent
  since (``H`` ticks: the median observation age plus the median action age of the
  profile's channels, by the shim's timing rule), so it acts on the predicted state at
  the time its push lands. A remote policy that knows the physics exactly and the link's
  median delay: the strongest monolithic baseline short of training one.

Each episode reports its length (CartPole's return: ticks with the pole up, at most 500)
and the waypoints reached. Per profile the script prints mean +- std over seeds of both
and the paired differences graph - remote and graph - remote+predictor (the same seed
gives every arm the same initial state), with a paired t statistic, and writes every episode to ``results.json`` in
``--out``.

Run::

    nice -n 10 python examples/policy_graph_cartpole.py --seeds 20 --first-seed 0 \\
        --profiles wifi-normal trace-wifi-office --out fleetgym-out/policy_graph
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import resource
import subprocess
import time
from collections import deque
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import scipy.linalg
from gymnasium.envs.classic_control import CartPoleEnv
from tqdm import tqdm

from fleetgym.wrappers import (
    PolicyGraph,
    PolicyGraphEnv,
    PolicyLink,
    PolicyNode,
    get_profile,
    list_profiles,
)

WAYPOINTS = (0.8, -0.8)
PLANNER_PERIOD = 10  # ticks (200 ms at CartPole's 20 ms)
GOAL_SPACE = gym.spaces.Box(-2.4, 2.4, (), dtype=np.float64)
PUSHES = gym.spaces.Discrete(2)


def lqr_gains(dt: float = 0.02) -> np.ndarray:
    """Discrete LQR gains for CartPole-v1 linearised about the upright pole (state x, x', θ, θ')."""
    g, cart, pole, half = 9.8, 1.0, 0.1, 0.5
    total = cart + pole
    den = half * (4.0 / 3.0 - pole / total)
    a = np.zeros((4, 4))
    b = np.zeros((4, 1))
    a[0, 1] = a[2, 3] = 1.0
    a[3, 2], b[3, 0] = g / den, -1.0 / (total * den)
    a[1, 2], b[1, 0] = -pole * half * a[3, 2] / total, 1.0 / total - pole * half * b[3, 0] / total
    ad, bd = np.eye(4) + dt * a, dt * b
    r = np.array([[0.1]])
    p = scipy.linalg.solve_discrete_are(ad, bd, np.diag([20.0, 2.0, 10.0, 1.0]), r)
    return np.linalg.solve(r + bd.T @ p @ bd, bd.T @ p @ ad)[0]


class Planner:
    """The current waypoint; the next once the cart has settled near this one."""

    def __init__(self) -> None:
        self.index = 0
        self.reached = 0

    def reset(self) -> None:
        self.index = self.reached = 0

    def __call__(self, inputs: dict[str, Any]) -> np.ndarray:
        x, x_dot = float(inputs["env"][0]), float(inputs["env"][1])
        goal = WAYPOINTS[self.index % len(WAYPOINTS)]
        if abs(x - goal) < 0.15 and abs(x_dot) < 0.3:
            self.index += 1
            self.reached += 1
        return np.array(WAYPOINTS[self.index % len(WAYPOINTS)], dtype=np.float64)


class Stabiliser:
    """Bang-bang LQR towards the goal's cart position (position error clipped to 1)."""

    def __init__(self) -> None:
        self.gains = lqr_gains()

    def __call__(self, inputs: dict[str, Any]) -> int:
        error = np.asarray(inputs["env"], dtype=np.float64).copy()
        error[0] = np.clip(error[0] - float(inputs["planner"]), -1.0, 1.0)
        return int(-(self.gains @ error) > 0.0)


class Monolith:
    """Planner and stabiliser in one process: the planner every ``PLANNER_PERIOD`` ticks.

    With ``horizon > 0`` the stabiliser acts on the observation rolled ``horizon`` ticks
    forward through CartPole's dynamics with the pushes sent since (a Smith predictor).
    """

    def __init__(self, horizon: int = 0) -> None:
        self.planner, self.stabiliser = Planner(), Stabiliser()
        self.horizon = horizon
        self.model = CartPoleEnv()
        self.sent: deque[int] = deque(maxlen=max(1, horizon))
        self.tick, self.goal = 0, np.array(0.0)

    def reset(self) -> None:
        self.planner.reset()
        self.sent.clear()
        self.tick, self.goal = 0, np.array(0.0)

    def _predict(self, obs: np.ndarray) -> np.ndarray:
        # Pushes not yet in the observation: the last `horizon` sent (the env applied the
        # start action, push left, before the first one landed).
        pending = [0] * (self.horizon - len(self.sent)) + list(self.sent)
        self.model.state = np.asarray(obs, dtype=np.float64).copy()
        for push in pending:
            self.model.steps_beyond_terminated = None  # a model state, not an episode
            self.model.step(push)
        return np.asarray(self.model.state, dtype=np.float64)

    def __call__(self, inputs: dict[str, Any]) -> int:
        if self.tick % PLANNER_PERIOD == 0:
            self.goal = self.planner(inputs)
        self.tick += 1
        state = self._predict(inputs["env"]) if self.horizon else inputs["env"]
        push = self.stabiliser({"env": state, "planner": self.goal})
        self.sent.append(push)
        return push


def median_round_trip(profile: str, step_ms: float = 20.0, share: float = 0.5) -> int:
    """Ticks from an observation's emission to the landing of the push that answers it.

    The shim's rule at the channels' median delays: an observation ``u`` ms late is used
    ``floor(u / P + 1 - s)`` ticks later, a push ``d`` ms late lands ``floor(d / P + s)``
    ticks later.
    """
    p = get_profile(profile)
    up, down = p.uplink.delay_quantile_ms(0.5), p.downlink.delay_quantile_ms(0.5)
    return math.floor(up / step_ms + 1 - share) + math.floor(down / step_ms + share)


def split_graph(profile: str) -> tuple[PolicyGraph, Planner]:
    planner = Planner()
    graph = PolicyGraph(
        [
            PolicyNode("planner", planner, GOAL_SPACE, period=PLANNER_PERIOD),
            PolicyNode("stabiliser", Stabiliser(), PUSHES),
        ],
        [
            PolicyLink("env", "planner", profile),
            PolicyLink("planner", "stabiliser", profile),
            PolicyLink("env", "stabiliser", "perfect"),
            PolicyLink("stabiliser", "env", "perfect"),
        ],
    )
    return graph, planner


def remote_graph(profile: str, horizon: int = 0) -> tuple[PolicyGraph, Planner]:
    policy = Monolith(horizon)
    graph = PolicyGraph(
        [PolicyNode("remote", policy, PUSHES)],
        [PolicyLink("env", "remote", profile), PolicyLink("remote", "env", profile)],
    )
    return graph, policy.planner


ARMS = ("graph", "remote", "remote+predictor")


def episode(arm: str, profile: str, seed: int) -> dict[str, Any]:
    if arm == "graph":
        graph, planner = split_graph(profile)
    else:
        horizon = median_round_trip(profile) if arm == "remote+predictor" else 0
        graph, planner = remote_graph(profile, horizon)
    trained = "stabiliser" if arm == "graph" else "remote"
    env = PolicyGraphEnv(gym.make("CartPole-v1"), graph, trained)
    length, _ = env.run_episode(seed=seed)
    env.close()
    return {
        "arm": arm,
        "profile": profile,
        "seed": seed,
        "length": length,
        "waypoints": planner.reached,
    }


def summarise(rows: list[dict[str, Any]], profile: str) -> dict[str, Any]:
    """Mean ± std per arm and the paired differences graph - each other arm."""
    out: dict[str, Any] = {"profile": profile}
    for key in ("length", "waypoints"):
        by_arm = {
            arm: np.array(
                [
                    r[key]
                    for r in sorted(rows, key=lambda r: r["seed"])
                    if r["arm"] == arm and r["profile"] == profile
                ],
                dtype=float,
            )
            for arm in ARMS
        }
        entry: dict[str, Any] = {
            arm: [float(v.mean()), float(v.std(ddof=1))] for arm, v in by_arm.items()
        }
        for other in ARMS[1:]:
            diff = by_arm["graph"] - by_arm[other]
            sd = float(diff.std(ddof=1))
            entry[f"graph - {other}"] = {
                "mean": float(diff.mean()),
                "std": sd,
                "paired_t": float(diff.mean() / (sd / np.sqrt(diff.size))) if sd > 0 else None,
                "graph_better": int((diff > 0).sum()),
                "ties": int((diff == 0).sum()),
            }
        out[key] = entry
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=20, help="number of seeds (>= 2)")
    parser.add_argument("--first-seed", type=int, default=0)
    parser.add_argument("--profiles", nargs="+", default=["wifi-normal", "trace-wifi-office"])
    parser.add_argument("--out", type=Path, default=Path("fleetgym-out/policy_graph"))
    parser.add_argument("--no-progress", action="store_true")
    args = parser.parse_args(argv)
    if args.seeds < 2:
        parser.error(f"--seeds: expected >= 2 (a std needs two), actual {args.seeds}")
    for profile in args.profiles:
        if profile not in list_profiles():
            parser.error(
                f"--profiles: unknown profile {profile!r}; known: {', '.join(list_profiles())}"
            )
    seeds = range(args.first_seed, args.first_seed + args.seeds)
    jobs = [(arm, p, s) for p in args.profiles for arm in ARMS for s in seeds]
    # The commit measured: HEAD when the runs start.
    try:
        commit = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"],
            capture_output=True,
            text=True,
            check=True,
            cwd=Path(__file__).resolve().parent,
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        commit = "unknown"
    wall, cpu = time.perf_counter(), time.process_time()
    rows = [episode(*job) for job in tqdm(jobs, disable=args.no_progress, desc="episodes")]
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    summary = [summarise(rows, p) for p in args.profiles]
    meta = {
        "seeds": list(seeds),
        "commit": commit,
        "machine": f"{platform.machine()}, {os.cpu_count()} CPUs",
        "wall_s": round(wall, 1),
        "cpu_s": round(cpu, 1),
        "max_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
    }
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "results.json").write_text(
        json.dumps({"meta": meta, "summary": summary, "episodes": rows}, indent=1)
    )
    for s in summary:
        print(f"{s['profile']} (predictor horizon {median_round_trip(s['profile'])} ticks):")
        for key in ("length", "waypoints"):
            v = s[key]
            arms = "   ".join(f"{arm} {v[arm][0]:6.2f} ± {v[arm][1]:6.2f}" for arm in ARMS)
            print(f"  {key:9s} {arms}")
            for other in ARMS[1:]:
                d = v[f"graph - {other}"]
                t = "n/a" if d["paired_t"] is None else f"{d['paired_t']:.2f}"
                print(
                    f"  {'':9s} graph - {other}: {d['mean']:+7.2f} ± {d['std']:6.2f} (t = {t}; "
                    f"graph better on {d['graph_better']}/{len(seeds)}, ties {d['ties']})"
                )
    print(f"commit {commit}, wall {wall:.1f} s, CPU {cpu:.1f} s -> {args.out / 'results.json'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
