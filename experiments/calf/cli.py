"""``fleetgym calf``: train under the network and measure the sim-to-real gap (CALF).

Runs :func:`~fleetgym.experiments.calf.experiment.run_calf` and prints its Markdown
report. ``--quick`` is a few minutes on 2 cores (1 seed, five regimes, small budgets);
the default is the full experiment (5 seeds, six regimes). Every argument is checked
(:func:`~fleetgym.experiments.calf.experiment.prepare_calf`) before any training starts:
a bad one exits 2; an error during the run is a crash (exit 3, with its traceback).
"""

from __future__ import annotations

import argparse

from fleetgym.errors import FleetgymError
from fleetgym.experiments.argtypes import (
    UsageError,
    check_output_dir,
    non_negative_int,
    output_path,
    positive_int,
    seed_range,
    step_ms,
)
from fleetgym.experiments.calf.experiment import execute_calf, prepare_calf
from fleetgym.experiments.calf.hyperparams import ALGOS

__all__ = ["configure", "run"]


def _split(text: str | None) -> list[str] | None:
    if text is None:
        return None
    return [t.strip() for t in text.split(",") if t.strip()]


def configure(parser: argparse.ArgumentParser) -> None:
    """Add this subcommand's arguments."""
    parser.add_argument(
        "--env",
        default="CartPole-v1",
        help="a registered Gymnasium ID: MiniGrid IDs (e.g. MiniGrid-Empty-5x5-v0) train "
        "with RecurrentPPO, any other (CartPole-v1, Pendulum-v1, Hopper-v5, ...) with --algo "
        "and RL Zoo's tuned hyperparameters where the Zoo has them, else SB3's defaults "
        "(the report says which) (default: %(default)s)",
    )
    parser.add_argument(
        "--quick",
        action="store_true",
        help="a few minutes on 2 cores: 1 seed, 5 regimes (3 off CartPole), small budgets "
        "(a regime is the network a policy trains under, with or without compensation)",
    )
    parser.add_argument(
        "--seeds",
        type=positive_int,
        default=None,
        help="number of seeds, FIRST..FIRST+N-1 (default: 1 with --quick, else 5)",
    )
    parser.add_argument(
        "--first-seed",
        type=non_negative_int,
        default=0,
        metavar="FIRST",
        help="the first seed: --seeds N runs FIRST..FIRST+N-1",
    )
    parser.add_argument(
        "--out",
        type=output_path,
        default="fleetgym-out/calf",
        help="output folder (default: %(default)s)",
    )
    parser.add_argument(
        "--regimes",
        default=None,
        help="comma-separated training regimes, i.e. the network a policy trains under "
        "(baseline: none, delay-only: fixed 50 ms, net-aware: wifi-normal), '+comp' adds "
        "the compensation inputs, '+aug' the augmented state, '+ceiling' the prediction with "
        "the true dynamics (-dist, -noid, -ahead, -ahead-dist: its variants), '+predict' "
        "with a learned world model (-dist, -ahead), '+oracle' the true state, '+sched' scheduled action chunks (a playout buffer at the env, the true dynamics; '+sched-learned': the learned world model) (default: "
        "the three with and without +comp; with --quick baseline, net-aware, "
        "net-aware+comp, net-aware+ceiling, net-aware+predict); any condition name also trains "
        "under it, and so does a profile file (my-net.json, as 'profiles fit' writes) or a "
        "trace file (replayed both ways), with the same suffixes (my-net.json+comp)",
    )
    parser.add_argument(
        "--conditions",
        default=None,
        help="comma-separated evaluation conditions: names, profile files (.json) or trace "
        "files (default: sim-clean, ethernet, wifi-normal, wifi-degraded, shipped trace)",
    )
    parser.add_argument(
        "--timesteps",
        type=positive_int,
        default=None,
        help="training steps per policy (default: 100000, with --quick 40000 for CartPole "
        "and 30000 for MiniGrid)",
    )
    parser.add_argument(
        "--episodes",
        type=positive_int,
        default=None,
        help="evaluation episodes per policy and condition (default: 50, with --quick 20)",
    )
    parser.add_argument("--no-ablation", action="store_true", help="skip the ablation table")
    parser.add_argument(
        "--variants",
        default=None,
        help="comma-separated wifi-degraded variants ('' to skip; default: all of them, none "
        "with --quick)",
    )
    parser.add_argument(
        "--variant-regimes",
        default=None,
        help="regimes evaluated under the variants (default: baseline, net-aware+comp, "
        "net-aware-mix+comp)",
    )
    parser.add_argument(
        "--step-ms",
        type=step_ms,
        default=None,
        help="control period in ms (default: the env's, 20 for CartPole and MiniGrid)",
    )
    parser.add_argument(
        "--algo",
        choices=ALGOS,
        default=None,
        help="training algorithm: SB3 PPO, SAC or TD3 (SAC and TD3: continuous actions "
        "only) or sb3-contrib's RecurrentPPO (LSTM) (default: recurrent-ppo for MiniGrid "
        "IDs, else ppo)",
    )
    parser.add_argument(
        "--timing",
        choices=("loop", "per-direction"),
        default=None,
        help="the shims' timeline: loop (default: one control period for the round trip, "
        "as over a real socket) or per-direction (a whole period each way, the convention "
        "of the figures measured before the loop became the default)",
    )
    parser.add_argument("--no-progress", action="store_true", help="no progress bars")


def run(args: argparse.Namespace) -> int:
    """Run the subcommand; prints the Markdown report and where the files are.

    Raises:
        UsageError: A bad argument, found before any training starts.
    """
    check_output_dir("--out", args.out)
    count = args.seeds if args.seeds is not None else (1 if args.quick else 5)
    try:
        plan = prepare_calf(
            args.env,
            quick=args.quick,
            seeds=list(seed_range(args.first_seed, count)),
            out_dir=args.out,
            regimes=_split(args.regimes),
            conditions=_split(args.conditions),
            timesteps=args.timesteps,
            episodes=args.episodes,
            ablation=not args.no_ablation,
            variants=_split(args.variants),
            variant_regimes=_split(args.variant_regimes),
            step_ms=args.step_ms,
            algo=args.algo,
            progress=not args.no_progress,
            timing=args.timing,
        )
    except (ValueError, TypeError, FleetgymError) as exc:
        raise UsageError(str(exc)) from None
    # The work itself catches nothing: a failure an hour in is a crash with its traceback.
    results = execute_calf(plan)
    print(results.files[0].read_text())
    for path in results.files:
        print(f"wrote {path}")
    return 0
