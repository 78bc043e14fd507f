"""Predictive delay compensation on Hopper-v5: a clean-trained policy under delay.

The Hopper part of docs/explanation/predictive.md. A policy trained without any network (Mode 1,
SB3 PPO with rl-zoo's Hopper hyperparameters) is run under a constant round trip of N
ticks (BPQL's setting: N = 5 and 9 at Hopper's 8 ms period) and under ``wifi-normal``,
with each input a deployer can give it without retraining:

* ``delayed``: the delivered observation as is (what the policy sees without any help);
* ``ceiling``: the observation rolled forward through the actions in flight with the
  env's own physics (:class:`~fleetgym.wrappers.MujocoStateDynamics`): the
  causal ceiling;
* ``predict``: the same with a world model fitted on Mode 1 transitions of the policy
  itself (:class:`~fleetgym.agents.world_model.WorldModelPredictor`);
* ``oracle``: the env's true current observation (non-causal, a reference).

Subcommands::

    python studies/predictive_hopper.py train --seed 0 --steps 1000000
    python studies/predictive_hopper.py train --seed 0 --under rtt-9 --compensation augmented
    python studies/predictive_hopper.py evaluate --seeds 0 1 2 --episodes 10
    python studies/predictive_hopper.py baselines --seeds 0 --under rtt-5 rtt-9
    python studies/predictive_hopper.py plot fleetgym-out/predictive_hopper/evaluate.json docs/predictive_sweep_hopper.png

The baselines of the delayed-RL literature (the augmented state, the history stack) are
trained under the constant delay they face (``train --under rtt-N --compensation ...``,
written to ``seed<S>-<compensation>-<rtt-N>/``) and run by ``baselines``.

``train`` writes ``fleetgym-out/predictive_hopper/seed<S>/`` (the SB3 model and the
observation normaliser's statistics as ``.npz``); ``evaluate`` prints a Markdown table and
writes ``evaluate.json`` beside them.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np

OUT = Path("fleetgym-out/predictive_hopper")
ENV_ID = "Hopper-v5"
PERIOD_MS = 8.0  # Hopper-v5's dt: 4 frames of 2 ms
#: Every input, in table order (``-ahead``: predicted to the tick the next action meets).
INPUTS = ("delayed", "ceiling", "ceiling-ahead", "predict", "predict-ahead", "oracle")


def _zoo_ppo(env: Any, seed: int) -> Any:
    """SB3 PPO with rl-zoo's tuned Hopper hyperparameters."""
    import torch
    from stable_baselines3 import PPO

    return PPO(
        "MlpPolicy",
        env,
        n_steps=512,
        batch_size=32,
        gamma=0.999,
        learning_rate=9.80828e-05,
        ent_coef=0.00229519,
        clip_range=0.2,
        n_epochs=5,
        gae_lambda=0.99,
        max_grad_norm=0.7,
        vf_coef=0.835671,
        policy_kwargs={
            "log_std_init": -2,
            "ortho_init": False,
            "activation_fn": torch.nn.ReLU,
            "net_arch": {"pi": [256, 256], "vf": [256, 256]},
        },
        seed=seed,
        device="cpu",
        verbose=0,
    )


#: The baselines of the delayed-RL literature, trained under the delay they face.
BASELINES = ("augmented", "history")


def _run_dir(seed: int, under: str | None = None, compensation: str | None = None) -> Path:
    return OUT / (f"seed{seed}" if under is None else f"seed{seed}-{compensation}-{under}")


def _layout(under: str, compensation: str) -> dict[str, Any]:
    """k frames and m sent actions of a baseline trained under ``rtt-N[-jitter]``: the
    augmented state is the delivered frame and the N + 1 actions sent since it was
    emitted; the history stack also keeps the ceil(N/2) + 1 frames up to that age."""
    n = int(under.split("-")[1])
    return {
        "history_length": 1 if compensation == "augmented" else (n + 1) // 2 + 1,
        "action_history_length": n + 1,
    }


def _baseline_env(under: str, compensation: str, condition: str) -> gym.Env:
    """A baseline's input stack (its layout fixed by ``under``) behind ``condition``."""
    from fleetgym.wrappers import HistoryCompensation, make_robust_env

    kwargs = _condition(condition)
    return make_robust_env(
        gym.make(ENV_ID),
        kwargs.pop("profile", None),
        compensation=HistoryCompensation(**_layout(under, compensation)),
        step_ms=PERIOD_MS,
        shim={"info": "full", **kwargs},
    )


def train(seed: int, steps: int, under: str | None = None, compensation: str | None = None) -> None:
    """The clean policy (``under=None``), or a baseline trained under ``under``."""
    import torch
    from stable_baselines3.common.vec_env import DummyVecEnv, VecNormalize

    torch.set_num_threads(1)
    if (under is None) != (compensation is None):
        raise SystemExit("train: --under and --compensation go together")
    if under is not None and (compensation not in BASELINES or not under.startswith("rtt-")):
        raise SystemExit(f"train: expected --compensation in {BASELINES} under rtt-N[-jitter]")
    out = _run_dir(seed, under, compensation)
    out.mkdir(parents=True, exist_ok=True)
    make = (
        (lambda: gym.make(ENV_ID))
        if under is None
        else (
            lambda: _baseline_env(under, compensation, under)  # type: ignore[arg-type]
        )
    )
    venv = VecNormalize(DummyVecEnv([make]), gamma=0.999)
    venv.seed(seed)
    model = _zoo_ppo(venv, seed)
    start = time.process_time()
    model.learn(steps, progress_bar=False)
    model.save(out / "model.zip")
    rms: Any = venv.obs_rms
    np.savez(out / "obs_norm.npz", mean=rms.mean, var=rms.var, clip=venv.clip_obs)
    print(f"seed {seed}: {steps} steps, {time.process_time() - start:.0f} CPU s -> {out}")


class CleanPolicy:
    """The trained policy on raw observations (the normaliser applied here)."""

    def __init__(self, seed: int, path: Path | None = None) -> None:
        from stable_baselines3 import PPO

        path = path or OUT / f"seed{seed}"
        self.model = PPO.load(path / "model.zip", device="cpu")
        norm = np.load(path / "obs_norm.npz")
        self.mean, self.std = norm["mean"], np.sqrt(norm["var"] + 1e-8)
        self.clip = float(norm["clip"])

    def __call__(self, obs: np.ndarray) -> np.ndarray:
        x = np.clip((obs - self.mean) / self.std, -self.clip, self.clip)
        return self.model.predict(x.astype(np.float32), deterministic=True)[0]


def _episode(env: gym.Env, policy: CleanPolicy, seed: int, oracle: bool) -> tuple[float, float]:
    """Return and forward velocity (x travelled / time) of one episode."""
    obs, info = env.reset(seed=seed)
    base: Any = env.unwrapped
    x0, total, steps = float(base.data.qpos[0]), 0.0, 0
    done = False
    while not done:
        act = policy(info["true_obs"] if oracle else obs)
        obs, reward, term, trunc, info = env.step(act)
        total += float(reward)
        steps += 1
        done = term or trunc
    return total, (float(base.data.qpos[0]) - x0) / (steps * base.dt)


def _condition(name: str) -> dict[str, Any]:
    """Shim arguments of a condition at Hopper's 8 ms period."""
    from fleetgym.wrappers import FixedDelay

    if name == "clean":
        return {"profile": "perfect"}
    if name.startswith("rtt-"):
        from fleetgym.wrappers import GaussianChannel

        ticks, jitter = name[4:].partition("-")[::2]
        period, n = PERIOD_MS, int(ticks)
        up, down = (n + 1) // 2 * period, n // 2 * period
        if jitter:  # half a period of Gaussian jitter each way, as the CartPole sweep
            return {
                "uplink": GaussianChannel(up, period / 2),
                "downlink": GaussianChannel(down, period / 2),
            }
        return {"uplink": FixedDelay(up), "downlink": FixedDelay(down)}
    return {"profile": name}


def _world_model(policy: CleanPolicy, seed: int, transitions: int) -> Any:
    """A world model fitted on Mode 1 transitions of the clean policy (with action noise:
    the data a deployer logs without any network)."""
    import torch

    from fleetgym.agents.world_model import TransitionBuffer, WorldModel
    from fleetgym.agents.world_model.predictor import WorldModelPredictor

    torch.set_num_threads(1)
    env = gym.make(ENV_ID)
    rng = np.random.default_rng(seed)
    rows: list[tuple[Any, ...]] = []
    obs, _ = env.reset(seed=seed)
    while len(rows) < transitions:
        act = np.clip(policy(obs) + rng.normal(0.0, 0.2, 3), -1.0, 1.0).astype(np.float32)
        nxt, rew, term, trunc, _ = env.step(act)
        rows.append((obs, act, rew, nxt, term))
        obs = env.reset()[0] if term or trunc else nxt
    data = TransitionBuffer()
    data.add(*(np.array(column) for column in zip(*rows, strict=True)))
    model = WorldModel(
        env.observation_space,
        env.action_space,
        ensemble_size=5,
        elites=3,
        hidden_sizes=(200, 200, 200),
        seed=seed,
    )
    report = model.fit(data)
    print(f"world model (seed {seed}, {transitions} transitions): {report}")
    return WorldModelPredictor(model)


def evaluate(
    seeds: list[int], episodes: int, conditions: list[str], transitions: int, out: Path
) -> None:
    from fleetgym.wrappers import MujocoStateDynamics, NetworkShimWrapper, PredictiveObservation

    rows = []
    for seed in seeds:
        policy = CleanPolicy(seed)
        learned: Any = _world_model(policy, seed, transitions) if transitions else None
        for cond in conditions:
            inputs = [i for i in INPUTS if learned or not i.startswith("predict")]
            for inp in inputs:
                shim = NetworkShimWrapper(gym.make(ENV_ID), info="full", **_condition(cond))
                env: gym.Env = shim
                kind, _, ahead = inp.partition("-")
                lookahead: Any = "action" if ahead else 0
                if kind == "ceiling":
                    model = MujocoStateDynamics.from_env(shim)
                    env = PredictiveObservation(shim, model, lookahead=lookahead)
                elif kind == "predict":
                    env = PredictiveObservation(shim, learned, lookahead=lookahead)
                rows.append(_cell(env, policy, seed, episodes, cond, inp, inp == "oracle"))
    _save(rows, out)


def _cell(
    env: gym.Env, policy: CleanPolicy, seed: int, episodes: int, cond: str, inp: str, oracle: bool
) -> dict[str, Any]:
    """One table cell: the mean return and forward velocity of ``episodes`` seeded episodes."""
    got = [_episode(env, policy, 10_000 + 100 * seed + e, oracle) for e in range(episodes)]
    ret, vel = np.mean([g[0] for g in got]), np.mean([g[1] for g in got])
    print(f"seed {seed} {cond:>12} {inp:>8}: return {ret:7.1f}, velocity {vel:5.2f}")
    return {"seed": seed, "condition": cond, "input": inp, "return": ret, "velocity": vel}


def _save(rows: list[dict[str, Any]], out: Path) -> None:
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(rows, indent=1))
    _table(rows)


def evaluate_baselines(
    seeds: list[int], episodes: int, unders: list[str], conditions: list[str], out: Path
) -> None:
    """Each baseline trained under each of ``unders``, run under ``conditions``."""
    rows = []
    for seed in seeds:
        for under in unders:
            for comp in BASELINES:
                path = _run_dir(seed, under, comp)
                if not (path / "model.zip").exists():
                    print(f"skipped: no {path}")
                    continue
                policy = CleanPolicy(seed, path)
                inp = f"{comp} (trained under {under})"
                for cond in conditions:
                    env = _baseline_env(under, comp, cond)
                    rows.append(_cell(env, policy, seed, episodes, cond, inp, False))
    _save(rows, out)


def _table(rows: list[dict[str, Any]]) -> None:
    conds = list(dict.fromkeys(r["condition"] for r in rows))
    inputs = list(dict.fromkeys(r["input"] for r in rows))
    print("| input | " + " | ".join(conds) + " |")
    print("|---|" + "---|" * len(conds))
    for inp in inputs:
        cells = []
        for c in conds:
            got = [r for r in rows if r["input"] == inp and r["condition"] == c]
            ret = np.array([r["return"] for r in got])
            vel = np.array([r["velocity"] for r in got])
            cells.append(f"{ret.mean():.0f} ± {ret.std():.0f} ({vel.mean():.2f} m/s)")
        print(f"| {inp} | " + " | ".join(cells) + " |")


def plot(paths: list[Path], out: Path, min_clean: float = 500.0) -> None:
    """Return against the round trip (``rtt-N`` conditions) per input, one line each,
    constant (solid) and jittered (dashed): each seed's return over its clean-trained
    policy's on the clean env, mean over seeds with its spread. ``paths``: ``evaluate``'s
    JSON first (it holds the clean reference), then any ``baselines`` JSON. Seeds whose
    clean policy scores below ``min_clean`` on the clean env are left out (a policy that
    falls anyway makes the ratio meaningless)."""
    import re

    from matplotlib.figure import Figure

    rows = [r for path in paths for r in json.loads(path.read_text())]
    clean = {
        r["seed"]: r["return"]
        for r in rows
        if r["condition"] == "clean" and r["input"] == "delayed" and r["return"] >= min_clean
    }
    fig = Figure(figsize=(11.5, 4.6))
    ax = fig.subplots()
    pattern = re.compile(r"rtt-(\d+)(-jitter)?")
    for i, inp in enumerate(dict.fromkeys(r["input"] for r in rows)):
        for jitter, style in ((False, "-"), (True, "--")):
            pts: dict[int, list[float]] = {}
            for r in rows:
                m = pattern.fullmatch(r["condition"])
                if r["input"] == inp and m and bool(m.group(2)) == jitter and r["seed"] in clean:
                    pts.setdefault(int(m.group(1)), []).append(r["return"] / clean[r["seed"]])
            if not pts:
                continue
            xs = sorted(pts)
            mean = np.array([np.mean(pts[x]) for x in xs])
            std = np.array([np.std(pts[x]) for x in xs])
            label = inp + (" (jitter)" if jitter else "")
            ax.plot(xs, mean, style, color=f"C{i % 10}", marker="o", ms=3, label=label)
            ax.fill_between(xs, mean - std, mean + std, color=f"C{i % 10}", alpha=0.08)
    ax.axhline(1.0, color="k", lw=0.8, ls=":", label="clean env, clean policy")
    ax.set_xlabel("round trip (ticks of 8 ms; ceil(N/2) on the observation path)")
    ax.set_ylabel("return / clean policy's clean return (mean over seeds)")
    seeds = ", ".join(str(k) for k in sorted(clean))
    ax.set_title(
        f"Hopper-v5 under delay, by input (seeds whose clean return >= {min_clean:g}: {seeds})"
    )
    ax.legend(fontsize=7, loc="center left", bbox_to_anchor=(1.01, 0.5))
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(out, dpi=120)
    print(f"wrote {out}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("train")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--steps", type=int, default=1_000_000)
    p.add_argument("--under", default=None, help="train a baseline under rtt-N[-jitter]")
    p.add_argument("--compensation", choices=BASELINES, default=None)
    p = sub.add_parser("baselines")
    p.add_argument("--seeds", type=int, nargs="+", default=[0])
    p.add_argument("--episodes", type=int, default=10)
    p.add_argument("--under", nargs="+", default=["rtt-5", "rtt-9"])
    p.add_argument("--conditions", nargs="+", default=["clean", "rtt-5", "rtt-9"])
    p.add_argument("--out", type=Path, default=OUT / "baselines.json")
    p = sub.add_parser("evaluate")
    p.add_argument("--seeds", type=int, nargs="+", default=[0])
    p.add_argument("--episodes", type=int, default=10)
    p.add_argument("--conditions", nargs="+", default=["clean", "rtt-5", "rtt-9", "wifi-normal"])
    p.add_argument("--transitions", type=int, default=50_000, help="0: no learned model")
    p.add_argument("--out", type=Path, default=OUT / "evaluate.json")
    p = sub.add_parser("plot")
    p.add_argument("results", type=Path, nargs="+", help="evaluate's JSON, then baselines'")
    p.add_argument("png", type=Path)
    p.add_argument("--min-clean", type=float, default=500.0, help="leave out seeds below it")
    args = parser.parse_args()
    if args.cmd == "train":
        train(args.seed, args.steps, args.under, args.compensation)
    elif args.cmd == "baselines":
        evaluate_baselines(args.seeds, args.episodes, args.under, args.conditions, args.out)
    elif args.cmd == "plot":
        plot(args.results, args.png, args.min_clean)
    else:
        evaluate(args.seeds, args.episodes, args.conditions, args.transitions, args.out)


if __name__ == "__main__":
    main()
