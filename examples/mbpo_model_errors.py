"""Where MBPO's world model is wrong: its termination, reward and next-state predictions
against fresh real transitions of the policy it trained.

Trains MBPO with ``fleetgym imagination --mbpo``'s settings for an env for ``--steps``
real steps, then plays ``--episodes`` fresh episodes with the trained (stochastic) policy
and asks every elite of the world model about each real transition (its mean and a
sampled prediction). Reports, over the elites' majority vote, the share of true
terminations the model predicts (recall) and the share of non-terminal transitions it
calls terminal (false alarms), the reward's mean absolute error and the next state's mean
squared error. Writes one JSON object to ``--out`` (or prints it).

    nice -n 10 python examples/mbpo_model_errors.py --env InvertedPendulum-v5 \\
        --steps 3000 --seed 0 --out fleetgym-out/mbpo_model_errors.json
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import torch

from fleetgym.agents.world_model import MBPO, MBPOConfig, MBPOModelConfig

#: ``fleetgym imagination --mbpo``'s settings for these envs (docs/results/imagination.md).
SETTINGS: dict[str, dict[str, Any]] = {
    "InvertedPendulum-v5": {
        "config": {"rollout_length": 1},
        "model": {"ensemble_size": 7, "elites": 5, "learn_termination": True},
    },
    "Pendulum-v1": {
        "config": {
            "rollout_length": "linear",
            "min_rollout_length": 1,
            "max_rollout_length": 5,
            "rollout_schedule_steps": (1000, 5000),
        },
        "model": {"ensemble_size": 5, "elites": 4, "learn_termination": False},
    },
}


def make_mbpo(env_name: str, seed: int) -> MBPO:
    """MBPO as the study runs it: 10 updates per real step, 5 % real data, 5,000 rollouts
    per fit every 250 real steps, a model of three layers of 200, SAC on two of 64."""
    settings = SETTINGS[env_name]
    model = MBPOModelConfig(hidden_sizes=(200, 200, 200), max_epochs=10, **settings["model"])
    config = MBPOConfig(
        updates_per_step=10,
        real_ratio=0.05,
        rollout_batch=5000,
        model=model,
        **settings["config"],
    )
    return MBPO(
        "MlpPolicy",
        env_name,
        config,
        learning_starts=500,
        batch_size=256,
        policy_kwargs={"net_arch": [64, 64]},
        seed=seed,
        device="cpu",
    )


def model_errors(agent: Any, env_name: str, episodes: int, seed: int) -> dict[str, Any]:
    """The trained agent's world model against ``episodes`` fresh real episodes."""
    env = gym.make(env_name)
    obs_rows, action_rows, rewards, ends, next_rows = [], [], [], [], []
    try:
        for episode in range(episodes):
            obs, _ = env.reset(seed=seed + episode)
            done = False
            while not done:
                action, _ = agent.predict(obs, deterministic=False)
                next_obs, reward, terminated, truncated, _ = env.step(action)
                obs_rows.append(obs)
                action_rows.append(agent.policy.scale_action(action))
                rewards.append(reward)
                ends.append(terminated)
                next_rows.append(next_obs)
                obs, done = next_obs, terminated or truncated
    finally:
        env.close()
    obs_a = np.asarray(obs_rows, np.float32)
    actions = np.asarray(action_rows, np.float32)
    reward_a, end_a, next_a = np.asarray(rewards), np.asarray(ends, bool), np.asarray(next_rows)
    model = agent.world_model
    rng = np.random.default_rng(seed)
    report: dict[str, Any] = {
        "transitions": int(len(obs_a)),
        "true_terminations": int(end_a.sum()),
        "elites": int(model.num_elites),
    }
    for sample in (False, True):
        votes = np.zeros(len(obs_a))
        reward_sum = np.zeros(len(obs_a))
        squared = 0.0
        for member in range(model.num_elites):
            members = np.full(len(obs_a), member)
            step = model.step(obs_a, actions, members, rng, sample=sample)
            votes += step.terminated
            reward_sum += step.reward
            squared += float(((step.next_obs - next_a) ** 2).mean())
        predicted = votes / model.num_elites > 0.5
        report["sampled" if sample else "mean"] = {
            "termination_recall": float((predicted & end_a).sum() / max(end_a.sum(), 1)),
            "false_alarm_rate": float((predicted & ~end_a).sum() / max((~end_a).sum(), 1)),
            "reward_mae": float(np.abs(reward_sum / model.num_elites - reward_a).mean()),
            "next_obs_mse": squared / model.num_elites,
        }
    return report


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--env", choices=sorted(SETTINGS), default="InvertedPendulum-v5")
    parser.add_argument("--steps", type=int, default=3000, help="real steps of training")
    parser.add_argument("--episodes", type=int, default=40, help="fresh episodes to check on")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, default=None, help="JSON file (default: print)")
    args = parser.parse_args()
    torch.set_num_threads(1)
    agent = make_mbpo(args.env, args.seed)
    agent.learn(args.steps)
    report = {
        "env": args.env,
        "steps": args.steps,
        "seed": args.seed,
        **model_errors(agent, args.env, args.episodes, 10_000 + args.seed),
    }
    text = json.dumps(report, indent=1)
    if args.out is None:
        print(text)
    else:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(text + "\n")
        print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
