"""RecurrentPPO (LSTM) on a MiniGrid task behind a simulated Wi-Fi link.

The network-aware policy trains behind ``NetworkShimWrapper`` with the compensation
stack of :func:`fleetgym.wrappers.make_robust_env` (age of the delivered
observation, the actions it sent); the LSTM keeps a belief over what it has not seen yet.
A clean-trained LSTM policy is the baseline. Both are then evaluated without a network
and under the training network. MiniGrid has no physical time step, so the control
period is given explicitly (``--step-ms``, 20 ms by default like CartPole's).

Run (about 10 minutes on one busy core with the defaults)::

    python studies/calf_recurrent_minigrid.py
    python studies/calf_recurrent_minigrid.py --env MiniGrid-Empty-5x5-v0 --profile wifi-normal --timesteps 100000
"""

from __future__ import annotations

import argparse

from fleetgym.experiments.calf.conditions import (
    CONDITIONS,
    REGIMES,
    regime_by_name,
    resolve_condition,
)
from fleetgym.experiments.calf.evaluate import eval_seed, evaluate_policy
from fleetgym.experiments.calf.setup import env_setup
from fleetgym.experiments.calf.train import train_regime


def main() -> None:
    """Train the clean baseline and the network-aware LSTM policy, print their returns."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--env", default="MiniGrid-Empty-5x5-v0")
    parser.add_argument("--profile", default="wifi-normal", help="training/evaluation network")
    parser.add_argument("--step-ms", type=float, default=20.0)
    parser.add_argument("--timesteps", type=int, default=100_000)
    parser.add_argument("--episodes", type=int, default=50)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()

    setup = env_setup(args.env, algo="recurrent-ppo", step_ms=args.step_ms)
    network = resolve_condition(args.profile)
    clean = CONDITIONS["sim-clean"]
    regimes = [REGIMES["baseline"], regime_by_name(f"{network.name}+comp")]
    for regime in regimes:
        policy = train_regime(setup, regime, args.seed, args.timesteps)
        k, m = policy.layout.history_length, policy.layout.action_history_length
        print(
            f"{regime.name}: trained {policy.timesteps} steps in {policy.wall_s:.0f} s "
            f"(input: {k} frame(s), {m} sent action(s))"
        )
        returns = {}
        for cond in (clean, network):
            rec = evaluate_policy(
                setup, policy, cond, args.episodes, seed=eval_seed(args.seed, cond.name)
            )
            returns[cond.name] = rec.mean_return
            print(f"  {cond.name:>14}: {rec.mean_return:.3f} ± {rec.std_return:.3f}")
        gap = (
            1 - returns[network.name] / returns["sim-clean"]
            if returns["sim-clean"]
            else float("nan")
        )
        print(f"  gap under {network.name}: {100 * gap:.0f} %")


if __name__ == "__main__":
    main()
