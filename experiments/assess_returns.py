"""The returns of ``fleetgym profiles assess``: the env's clean policy bare, behind the
network, and with the compensations the project has (:mod:`fleetgym.experiments.assess`).

Where the env has true dynamics (or ``--predictor learned``: a world model fitted on Mode 1
data of the env, the clean policy acting with 30 % random actions), two compensations run
on the same episodes, and the better one is the verdict's:

- the predictive compensation (:class:`~fleetgym.wrappers.PredictiveObservation`:
  ``lookahead="action"``, 16 samples, the prior action age derived from the network,
  ``stall="predict"``): the env applies whatever action arrived last;
- scheduled action chunks (:mod:`fleetgym.wrappers.playout`,
  :class:`~fleetgym.wrappers.ScheduledChunks`): each packet is stamped for tick ``t + D``
  and carries ``k`` actions, the env applies them from a playout buffer; ``D`` and ``k``
  from :func:`~fleetgym.wrappers.choose_schedule` on the network (or ``--delay``/``--chunk``).

Otherwise the history stack, with a second policy trained under the network.
"""

from __future__ import annotations

import argparse
from typing import Any

import numpy as np

from fleetgym.wrappers import PredictiveCompensation

__all__ = ["has_true_dynamics", "measure_returns", "run_episodes"]

#: Share of random actions in the Mode 1 data of the learned predictor.
LEARNED_EXPLORATION = 0.3
#: Mode 1 transitions of the learned predictor.
LEARNED_STEPS = 20_000


def has_true_dynamics(env_id: str) -> bool:
    """Whether :func:`~fleetgym.wrappers.dynamics.true_dynamics` knows ``env_id``."""
    import gymnasium as gym

    from fleetgym.errors import UnsupportedSpaceError
    from fleetgym.wrappers.dynamics import true_dynamics

    env = gym.make(env_id)
    try:
        true_dynamics(env)
        return True
    except (UnsupportedSpaceError, TypeError, ValueError, AttributeError):
        return False
    finally:
        env.close()


def run_episodes(
    model: Any, env: Any, episodes: int, seed: int, random: bool = False
) -> tuple[list[float], list[int]]:
    """Returns and the longest observation age of each episode (seeded resets)."""
    returns, worst = [], []
    for episode in range(episodes):
        obs, _ = env.reset(seed=100_000 + 1_000 * seed + episode)
        env.action_space.seed(seed * 1_000 + episode)
        total, done, oldest, state, start = 0.0, False, 0, None, True
        while not done:
            if random:
                action = env.action_space.sample()
            else:
                action, state = model.predict(
                    obs, state=state, episode_start=np.array([start]), deterministic=True
                )
            start = False
            obs, reward, terminated, truncated, info = env.step(action)
            total += float(reward)
            oldest = max(oldest, int(info.get("obs_age_steps", 0)))
            done = terminated or truncated
        returns.append(total)
        worst.append(oldest)
    env.close()
    return returns, worst


def summary(returns: list[float], ages: list[int], step_ms: float) -> dict[str, Any]:
    return {
        "mean": float(np.mean(returns)),
        "std": float(np.std(returns)),
        "returns": [float(r) for r in returns],
        "longest_obs_age_s": [a * step_ms / 1000.0 for a in ages],
    }


def _exploring(model: Any, space: Any, seed: int) -> Any:
    """The clean policy with :data:`LEARNED_EXPLORATION` random actions (Mode 1 data)."""
    rng = np.random.default_rng(seed)
    space.seed(seed)

    def act(obs: Any) -> Any:
        if rng.random() < LEARNED_EXPLORATION:
            return space.sample()
        return model.predict(obs, deterministic=True)[0]

    return act


def _predictor(args: argparse.Namespace, env_id: str, model: Any) -> tuple[Any, str]:
    """The predictor of the model-based compensations and its description."""
    if args.predictor == "learned":
        import gymnasium as gym

        from fleetgym.agents.world_model import fit_predictor

        probe = gym.make(env_id)
        try:
            policy = _exploring(model, probe.action_space, args.seed)
            predictor = fit_predictor(env_id, LEARNED_STEPS, seed=args.seed, policy=policy)
        finally:
            probe.close()
        return predictor, (
            f"a world model fitted on {LEARNED_STEPS} Mode 1 steps (the clean policy, "
            f"{LEARNED_EXPLORATION:.0%} random actions)"
        )
    return "true-dynamics", "true dynamics"


def _measured(shim: dict[str, Any]) -> dict[str, Any]:
    """The shim arguments that shape the network (what its measurements take)."""
    return {k: v for k, v in shim.items() if k not in ("start_action", "step_ms")}


def _schedule(args: argparse.Namespace, profile: Any, step_ms: float, shim: dict) -> Any:
    from fleetgym.wrappers import Schedule, choose_schedule

    chosen = choose_schedule(
        profile,
        step_ms,
        seed=args.seed,
        timing=shim.get("timing", "loop"),
        uplink_share=shim.get("uplink_share", 0.5),
        delivery=shim.get("delivery", "fifo"),
    )
    if args.delay is None and args.chunk is None:
        return chosen, "chosen from the network"
    return (
        Schedule(
            args.delay if args.delay is not None else chosen.delay,
            args.chunk if args.chunk is not None else chosen.chunk,
        ),
        "--delay/--chunk",
    )


def measure_returns(
    args: argparse.Namespace,
    shim_kwargs: dict[str, Any],
    network_profile: Any,
    step_ms: float,
    bar: Any,
    deploy: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """The returns (clean, random, behind the network, each compensation, the best), the
    compensation's description, the policy's and the schedule's.

    ``deploy``: the shim arguments of the network the episodes run behind, when it is not
    the assessed one (the rest of a capture); D, k and the predictive compensation's prior
    action age still come from the assessed network.
    """
    import gymnasium as gym
    import torch

    from fleetgym.experiments.calf.conditions import regime_by_name, resolve_condition
    from fleetgym.experiments.calf.setup import env_setup, make_condition_env
    from fleetgym.experiments.calf.train import algo_class, clean_policy, train_regime
    from fleetgym.wrappers import (
        NetworkShimWrapper,
        Playout,
        ScheduledChunks,
        action_delay_for_profile,
        make_robust_env,
    )

    torch.set_num_threads(1)
    env_id = args.env
    setup = env_setup(env_id, algo=args.algo, step_ms=step_ms)
    timesteps = args.timesteps if args.timesteps is not None else setup.quick_timesteps
    bar.set_postfix_str("clean policy")
    if args.policy is not None:
        model = algo_class(args.algo).load(args.policy, device="cpu")
        policy = f"{args.policy} ({args.algo})"
    else:
        model, loaded = clean_policy(setup, args.seed, timesteps, cache=args.cache)
        policy = (
            f"{args.algo} seed {args.seed}, {timesteps} steps "
            f"({setup.hyperparams_source}; {'loaded from' if loaded else 'trained, cached in'} "
            f"{args.cache})"
        )
    bar.update()
    assessed = dict(shim_kwargs)
    assessed_profile = assessed.pop("profile", None)
    network_kwargs = dict(shim_kwargs if deploy is None else deploy)
    profile = network_kwargs.pop("profile", None)
    n, seed = args.episodes, args.seed
    bar.set_postfix_str("clean returns")
    out: dict[str, Any] = {"policy": policy, "episodes": n}
    if deploy is not None:
        out["deploy"] = args.deploy
    runs = {
        "clean": run_episodes(model, gym.make(env_id), n, seed),
        "random": run_episodes(None, gym.make(env_id), n, seed, random=True),
    }
    bar.update()
    bar.set_postfix_str("behind the network")
    runs["delivered"] = run_episodes(
        model,
        NetworkShimWrapper(gym.make(env_id), profile=profile, step_ms=step_ms, **network_kwargs),
        n,
        seed,
    )
    bar.update()
    bar.set_postfix_str("compensated")
    if args.predictor == "learned" or has_true_dynamics(env_id):
        predictor, described = _predictor(args, env_id, model)
        comp_env = make_robust_env(
            env_id,
            profile,
            compensation=PredictiveCompensation(
                predictor,
                options={
                    "lookahead": "action",
                    "samples": 16,
                    "action_delay": action_delay_for_profile(
                        assessed_profile, step_ms, **_measured(assessed)
                    ),
                },
            ),
            stall="predict",
            step_ms=step_ms,
            **network_kwargs,
        )
        predictive = (
            f"the predictive compensation ({described}, lookahead='action', 16 samples, "
            f"derived prior action age {comp_env.get_wrapper_attr('action_delay')}, "
            "stall='predict')"
        )
        runs["predictive"] = run_episodes(model, comp_env, n, seed)
        schedule, source = _schedule(args, network_profile, step_ms, assessed)
        if args.fallback:  # a copy of the clean policy at the env, for the gaps

            def local(obs: Any) -> Any:
                return model.predict(obs, deterministic=True)[0]

            playout = Playout(underrun="fallback", fallback=local)
            gap = "runs a copy of the clean policy on its own state in a gap"
        else:
            playout, gap = Playout(), "holds in a gap"
        shim = NetworkShimWrapper(
            gym.make(env_id), profile=profile, step_ms=step_ms, playout=playout, **network_kwargs
        )
        sched_env = ScheduledChunks(shim, predictor, delay=schedule, policy=model)
        runs["scheduled"] = run_episodes(model, sched_env, n, seed)
        scheduled = (
            f"scheduled action chunks ({described}, D={schedule.delay}, k={schedule.chunk} "
            f"{source}; the env waits for the first action and {gap})"
        )
        out["schedule"] = {
            "delay": schedule.delay,
            "chunk": schedule.chunk,
            "late_share": schedule.late_share,
            "underrun_share": schedule.underrun_share,
            "quantile": schedule.quantile,
            "source": source,
        }
        best = max(("scheduled", "predictive"), key=lambda key: float(np.mean(runs[key][0])))
        runs["compensated"] = runs[best]
        out["compensation"] = scheduled if best == "scheduled" else predictive
        out["compensations"] = {"predictive": predictive, "scheduled": scheduled}
    else:
        # No true dynamics: the history stack, whose input the clean policy cannot read: a
        # second policy trained under the network with it.
        regime = regime_by_name(f"{args.profile}+comp")
        trained = train_regime(setup, regime, seed, timesteps)
        layout = trained.layout
        cond_env = make_condition_env(setup, resolve_condition(args.profile), layout)
        out["compensation"] = (
            f"the history stack (k={layout.history_length}, m={layout.action_history_length}; "
            f"{env_id} has no true dynamics: a policy trained under the network with it, "
            f"{timesteps} steps; --predictor learned fits a world model instead)"
        )
        runs["compensated"] = run_episodes(trained.model, cond_env, n, seed)
    bar.update()
    out["returns"] = {key: summary(*value, step_ms) for key, value in runs.items()}
    out["_compensated_ages"] = runs["compensated"]
    return out
