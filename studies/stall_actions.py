"""A clean-trained CartPole policy under a network with stalls, with each ``stall_action``.

The measurements behind docs/explanation/predictive.md's "Networks with stalls" and "The prior action
age". A policy trained without any network (the CALF study's clean baseline: SB3 PPO with
rl-zoo's CartPole hyperparameters, 100k steps, ``fleetgym.experiments.calf.train``) is
run, unchanged, behind ``wifi-stalls`` (:func:`stall_profile`): a synthetic Wi-Fi trace of
a moving robot (:func:`stall_trace`), 2.4 ms one way most of the time but with stalls of
0.1–6 s (log-normal lengths, median 0.8 s, 32 % of the time) in which the link buffers
and then delivers everything at once, so that half of the ticks lie inside round trips of
100 ms or more; both paths replay it from independent offsets.

``--table stall`` (:data:`STALL_ROWS`): the policy's input is the delivered observation
(the shim alone, ``stall_action`` ``hold`` or ``safe``: :class:`~fleetgym.wrappers.
StallWatchdog`) or ``make_robust_env(compensation="predictive")`` with the true dynamics,
``lookahead="action"`` and ``samples=16`` (``hold``, ``safe`` or ``predict``), at the
default stall length (16 ticks) and a short one (4), with make_robust_env's prior action
age (the most frequent) and, for ``predict``, the CALF study's (the median).

``--table prior``: the prior action age make_robust_env derives from the network against
the old default (``action_delay=0``), under a constant 75 ms each way and ``wifi-normal``.

Every episode starts from a seeded ``reset`` (the predictive wrapper's action-age
statistics restart from the prior there); returns are mean ± std over seeds of each seed's
mean over ``--episodes`` episodes, deterministic actions::

    python studies/stall_actions.py --seeds 5 --episodes 10
    python studies/stall_actions.py --table prior --seeds 5 --episodes 10

Clean policies are cached as ``<out>/clean_seed<S>.zip`` (about 30 s each to train);
results go to ``<out>/<table>.json`` (default ``fleetgym-out/stall_actions``).
"""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np

from fleetgym.wrappers import PredictiveCompensation, StallRule

OUT = Path("fleetgym-out/stall_actions")
ENV_ID = "CartPole-v1"
PERIOD_MS = 20.0
STEPS = 100_000
#: The predictive compensation's options in every row (the make_robust_env docstring's).
PREDICT_KWARGS: dict[str, Any] = {"lookahead": "action", "samples": 16}
#: (input, stall_action, stall_steps, prior) rows of the stall table: the default stall
#: length (16 ticks, 320 ms) and a short one (4 ticks, 80 ms); the prior action age is
#: make_robust_env's (``"mode"``: the most frequent action age) or the CALF study's
#: (``"median"``: median round trip minus median observation age).
STALL_ROWS: tuple[tuple[str, str, int, str], ...] = (
    ("delivered", "hold", 16, "-"),
    ("delivered", "safe", 16, "-"),
    ("delivered", "safe", 4, "-"),
    ("predictive", "hold", 16, "mode"),
    ("predictive", "hold", 4, "mode"),
    ("predictive", "safe", 16, "mode"),
    ("predictive", "safe", 4, "mode"),
    ("predictive", "predict", 16, "mode"),
    ("predictive", "predict", 16, "median"),
)
#: Conditions of the prior table.
PRIOR_CONDITIONS = ("fixed-75ms", "wifi-normal")


# --------------------------------------------------------------------------------------
# The network
# --------------------------------------------------------------------------------------
def stall_trace(
    duration_s: float = 600.0,
    interval_ms: float = 5.0,
    seed: int = 0,
    base_ms: float = 2.0,
    stall_share: float = 0.32,
    median_stall_s: float = 0.8,
    sigma: float = 1.0,
    min_stall_s: float = 0.1,
    max_stall_s: float = 6.0,
) -> Any:
    """A one-way Wi-Fi trace with stalls, as :class:`fleetgym.traces.TraceData`.

    One packet every ``interval_ms``: ``base_ms`` × a log-normal factor (sigma 0.3)
    outside stalls. Stalls of log-normal length (median ``median_stall_s``, clipped to
    ``[min_stall_s, max_stall_s]``) are drawn until they fill ``stall_share`` of the
    trace, then spread over it in random order with uniformly random gaps. A packet sent
    during a stall waits until its end (the link buffers, then delivers in one burst).
    """
    from fleetgym.traces import TraceData

    rng = np.random.default_rng(seed)
    total_ms = duration_s * 1000.0
    n = int(total_ms / interval_ms)
    send = np.arange(n) * interval_ms
    delay = base_ms * np.exp(0.3 * rng.standard_normal(n))
    stalls: list[float] = []
    while sum(stalls) < stall_share * total_ms:
        length = median_stall_s * np.exp(sigma * rng.standard_normal())
        stalls.append(float(np.clip(length, min_stall_s, max_stall_s)) * 1000.0)
    free = max(0.0, total_ms - sum(stalls))
    gaps = np.diff(np.sort(rng.uniform(0.0, free, len(stalls))), prepend=0.0)
    t = 0.0
    for gap, length in zip(gaps, stalls, strict=True):
        t += gap
        inside = (send >= t) & (send < t + length)
        delay[inside] += t + length - send[inside]
        t += length
    return TraceData(send.astype(float), np.round(delay, 2), total_ms, "wifi-stalls")


def stall_profile(**trace_kwargs: Any) -> Any:
    """The ``wifi-stalls`` :class:`~fleetgym.wrappers.NetworkProfile`: :func:`stall_trace`
    replayed on both paths from independent random offsets."""
    from fleetgym.wrappers import NetworkProfile, TraceChannel

    channel = TraceChannel(stall_trace(**trace_kwargs), name="wifi-stalls")
    return NetworkProfile("wifi-stalls", channel, channel, "Wi-Fi of a moving robot, with stalls")


class _Counter(gym.Env):
    """An env that never ends (the network's clock runs on)."""

    observation_space = gym.spaces.Box(0.0, np.inf, (1,))
    action_space = gym.spaces.Discrete(2)

    def reset(self, *, seed: int | None = None, options: dict | None = None) -> tuple:
        super().reset(seed=seed)
        return np.zeros(1, np.float32), {}

    def step(self, action: Any) -> tuple:
        return np.zeros(1, np.float32), 0.0, False, False, {}


def describe_network(profile: Any, step_ms: float = PERIOD_MS, n_steps: int = 20_000) -> dict:
    """What the shim makes of ``profile``: the numbers the docs quote."""
    from fleetgym.wrappers import NetworkShimWrapper, history_length_for_profile

    ok = [
        ch.trace.delay_ms[np.isfinite(ch.trace.delay_ms)]
        for ch in (profile.uplink,)
        if hasattr(ch, "trace")
    ]
    shim = NetworkShimWrapper(_Counter(), profile=profile, step_ms=step_ms)
    shim.reset(seed=0)
    round_trips = np.empty(n_steps)
    for i in range(n_steps):
        info = shim.step(0)[-1]
        round_trips[i] = info["obs_age_steps"] + info["action_age_steps"]
    return {
        "median_one_way_ms": float(np.median(ok[0])) if ok else float("nan"),
        "share_round_trip_ge_100ms": float(np.mean(round_trips * step_ms >= 100.0)),
        "k_uncapped": history_length_for_profile(profile, step_ms),
        "m_uncapped": history_length_for_profile(profile, step_ms, path="round_trip"),
    }


# --------------------------------------------------------------------------------------
# The clean policy
# --------------------------------------------------------------------------------------
def policy_path(seed: int, out: Path = OUT) -> Path:
    return out / f"clean_seed{seed}.zip"


def clean_policy(seed: int, steps: int = STEPS, out: Path = OUT) -> Any:
    """The CALF study's clean baseline for ``seed`` (trained once, then loaded)."""
    import torch
    from stable_baselines3 import PPO

    torch.set_num_threads(1)
    path = policy_path(seed, out)
    if path.exists():
        return PPO.load(path, device="cpu")
    from fleetgym.experiments.calf.conditions import regime_by_name
    from fleetgym.experiments.calf.setup import env_setup
    from fleetgym.experiments.calf.train import train_regime

    trained = train_regime(env_setup(ENV_ID), regime_by_name("baseline"), seed, steps)
    path.parent.mkdir(parents=True, exist_ok=True)
    trained.model.save(path)
    return trained.model


# --------------------------------------------------------------------------------------
# The envs and the evaluation
# --------------------------------------------------------------------------------------
def stall_env(
    profile: Any, inputs: str, stall_action: str, stall_steps: int = 16, prior: str = "mode"
) -> gym.Env:
    """The clean policy's env behind ``profile``: one row of the stall table."""
    from fleetgym.wrappers import (
        NetworkShimWrapper,
        StallWatchdog,
        action_delay_for_profile,
        make_robust_env,
    )

    if inputs == "delivered":
        shim = NetworkShimWrapper(gym.make(ENV_ID), profile=profile, step_ms=PERIOD_MS)
        if stall_action == "hold":
            return shim
        if stall_action == "safe":
            return StallWatchdog(shim, stall_steps)
        raise ValueError(f"stall_action: expected 'hold' or 'safe' for {inputs!r}")
    if inputs != "predictive":
        raise ValueError(f"inputs: expected 'delivered' or 'predictive', actual {inputs!r}")
    return make_robust_env(
        ENV_ID,
        profile,
        compensation=PredictiveCompensation(
            "true-dynamics",
            options={
                **PREDICT_KWARGS,
                "action_delay": action_delay_for_profile(profile, PERIOD_MS, statistic=prior),
            },
        ),
        stall=StallRule(action=stall_action, steps=stall_steps),
        step_ms=PERIOD_MS,
    )


def prior_env(condition: str, derived: bool) -> gym.Env:
    """The clean policy's predictive env under ``condition``, with the derived prior or
    the old default (``action_delay=0``)."""
    from fleetgym.wrappers import FixedDelay, make_robust_env

    if condition == "fixed-75ms":
        network: dict[str, Any] = {
            "profile": None,
            "uplink": FixedDelay(75.0),
            "downlink": FixedDelay(75.0),
        }
    else:
        network = {"profile": condition}
    options = dict(PREDICT_KWARGS)
    if not derived:
        options["action_delay"] = 0
    return make_robust_env(
        ENV_ID,
        network.pop("profile"),
        compensation=PredictiveCompensation("true-dynamics", options=options),
        step_ms=PERIOD_MS,
        shim=network,
    )


def eval_seed(train_seed: int, episode: int) -> int:
    return 200_000 + 1_000 * train_seed + episode


def episode_returns(
    act: Callable[[np.ndarray], Any], env: gym.Env, train_seed: int, episodes: int
) -> list[float]:
    """Returns of ``episodes`` episodes, each from a seeded ``reset``."""
    returns = []
    for episode in range(episodes):
        obs, _ = env.reset(seed=eval_seed(train_seed, episode))
        total, done = 0.0, False
        while not done:
            obs, reward, terminated, truncated, _ = env.step(act(obs))
            total += float(reward)
            done = terminated or truncated
        returns.append(total)
    return returns


def policy_actor(model: Any) -> Callable[[np.ndarray], int]:
    def act(obs: np.ndarray) -> int:
        action, _ = model.predict(obs, deterministic=True)
        return int(action)

    return act


def _summary(per_seed: dict[int, list[float]]) -> dict[str, Any]:
    means = np.array([np.mean(r) for r in per_seed.values()])
    return {
        "mean": float(means.mean()),
        "std": float(means.std()),
        "per_seed": {str(s): float(np.mean(r)) for s, r in per_seed.items()},
    }


def run(
    table: str,
    seeds: Sequence[int],
    episodes: int,
    out: Path = OUT,
    actor: Callable[[int], Callable[[np.ndarray], Any]] | None = None,
    profile: Any = None,
) -> dict[str, Any]:
    """One table: ``{"rows": [{row keys, mean, std, per_seed}], ...}``.

    ``actor(seed)`` gives the policy of a seed (default: the cached clean PPO);
    ``profile`` the stall table's network (default :func:`stall_profile`).
    """
    get_actor = actor or (lambda seed: policy_actor(clean_policy(seed, out=out)))
    actors = {seed: get_actor(seed) for seed in seeds}
    rows: list[dict[str, Any]] = []
    result: dict[str, Any] = {"table": table, "seeds": list(seeds), "episodes": episodes}
    start = time.perf_counter()
    if table == "stall":
        profile = profile if profile is not None else stall_profile()
        for inputs, stall_action, stall_steps, prior in STALL_ROWS:
            per_seed = {}
            for seed in seeds:
                env = stall_env(profile, inputs, stall_action, stall_steps, prior)
                per_seed[seed] = episode_returns(actors[seed], env, seed, episodes)
                env.close()
            row = {
                "input": inputs,
                "stall_action": stall_action,
                "stall_steps": stall_steps
                if stall_action != "hold" or inputs != "delivered"
                else "-",
                "prior": prior,
            }
            rows.append({**row, **_summary(per_seed)})
    elif table == "prior":
        for condition in PRIOR_CONDITIONS:
            for derived in (False, True):
                per_seed = {}
                for seed in seeds:
                    env = prior_env(condition, derived)
                    per_seed[seed] = episode_returns(actors[seed], env, seed, episodes)
                    env.close()
                prior = "derived (default)" if derived else "action_delay=0"
                rows.append({"condition": condition, "prior": prior, **_summary(per_seed)})
    else:
        raise ValueError(f"table: expected 'stall' or 'prior', actual {table!r}")
    result["rows"] = rows
    result["wall_s"] = time.perf_counter() - start
    return result


def markdown(result: dict[str, Any]) -> str:
    keys = (
        ["input", "stall_action", "stall_steps", "prior"]
        if result["table"] == "stall"
        else ["condition", "prior"]
    )
    lines = [f"| {' | '.join(keys)} | return | per seed |", "|" + "---|" * (len(keys) + 2)]
    for row in result["rows"]:
        per_seed = ", ".join(f"{v:.0f}" for v in row["per_seed"].values())
        cells = " | ".join(str(row[k]) for k in keys)
        lines.append(f"| {cells} | {row['mean']:.0f} ± {row['std']:.0f} | {per_seed} |")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n")[0],
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    parser.add_argument("--table", choices=("stall", "prior"), default="stall", help="which table")
    parser.add_argument(
        "--seeds", type=int, default=5, help="N clean policies: seeds FIRST..FIRST+N-1"
    )
    parser.add_argument("--first-seed", type=int, default=0, help="FIRST")
    parser.add_argument("--episodes", type=int, default=10, help="episodes per seed")
    parser.add_argument("--out", type=Path, default=OUT, help="policies and results")
    args = parser.parse_args(argv)
    if args.seeds < 1 or args.episodes < 1 or args.first_seed < 0:
        parser.error("--seeds, --episodes: expected >= 1; --first-seed: expected >= 0")
    import torch

    torch.set_num_threads(1)
    seeds = list(range(args.first_seed, args.first_seed + args.seeds))
    result = run(args.table, seeds, args.episodes, args.out)
    if args.table == "stall":
        result["network"] = describe_network(stall_profile())
        print(json.dumps(result["network"]))
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / f"{args.table}.json").write_text(json.dumps(result, indent=1))
    print(markdown(result))
    print(f"({result['wall_s']:.0f} s)")


if __name__ == "__main__":
    main()
