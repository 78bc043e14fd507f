"""``fleetgym train``: train a workload with the actor fleet and the PPO learner.

Synchronous rounds (:func:`fleetgym.agents.learners.training.train`): the learner's weights go to
``--actors`` actors of the chosen backend, each collects ``--steps-per-actor`` steps, the
learner updates; training stops at the workload's target return (or ``--target``), after
``--rounds`` rounds or ``--max-steps`` env steps. A tqdm bar shows progress; at the end
the command prints steps, wall time and the final mean return, and optionally writes into
the folder ``--out``: the learner and its policy (``--save``: ``learner.pt``,
``learner.policy.pt``), the per-round log (``--log``: ``log.csv``), the learning curves
(``--plot``: ``curves.png``) and TensorBoard scalars (``--tensorboard``: ``tb/``).

Every argument is checked before any actor starts (a bad one exits 2); an error during
training is a crash (exit 3, with its traceback).

Example::

    fleetgym train --workload CartPole-v1 --actors 8 --out runs/cartpole --save --plot
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import time
import types
from pathlib import Path
from typing import Any

from fleetgym.agents.fleet import BACKENDS, make_fleet
from fleetgym.agents.fleet.base import MAX_ACTORS_LIMIT, MAX_STEPS_PER_ACTOR
from fleetgym.agents.learners.training import evaluate_policy, train
from fleetgym.agents.workloads import COUNT_LIMITS, WORKLOADS, get_workload
from fleetgym.errors import FleetError, UnknownWorkloadError, UnsupportedSpaceError
from fleetgym.experiments import async_train
from fleetgym.experiments.argtypes import (
    UsageError,
    check_output_dir,
    int_in,
    non_negative_int,
    output_folder,
    positive_int,
)
from fleetgym.experiments.tables import write_csv

__all__ = ["Outputs", "configure", "outputs", "plot_curves", "run", "write_log"]

#: The files ``--save``, ``--log``, ``--plot`` and ``--tensorboard`` write into ``--out``.
SAVE_NAME, LOG_NAME, PLOT_NAME, TENSORBOARD_NAME = "learner.pt", "log.csv", "curves.png", "tb"


@dataclasses.dataclass(frozen=True)
class Outputs:
    """Where a run writes what was asked for (``None``: not asked)."""

    save: Path | None = None
    log: Path | None = None
    plot: Path | None = None
    tensorboard: Path | None = None


def outputs(args: argparse.Namespace) -> Outputs:
    """The output paths inside ``--out``; the folder is checked (created) when one is asked.

    Raises:
        UsageError: ``--out`` cannot be written into.
    """
    wanted = {
        "save": (args.save, SAVE_NAME),
        "log": (args.log, LOG_NAME),
        "plot": (args.plot, PLOT_NAME),
        "tensorboard": (args.tensorboard, TENSORBOARD_NAME),
    }
    if not any(flag for flag, _ in wanted.values()):
        return Outputs()
    folder = check_output_dir("--out", args.out)
    return Outputs(**{key: folder / name if flag else None for key, (flag, name) in wanted.items()})


def _float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, actual {text!r}") from None
    if math.isnan(value):
        raise argparse.ArgumentTypeError("expected a number, actual nan")
    return value


def configure(parser: argparse.ArgumentParser) -> None:
    """Add this subcommand's arguments (imports nothing heavy)."""
    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    parser.epilog = (
        "exit codes:\n"
        "  0  the target return was reached\n"
        "  1  the target was not reached within the budget (--rounds / --max-steps)\n"
        "  2  usage error (a bad argument or workload)\n"
        "  3  crashed (an unexpected error; its traceback is printed on stderr)\n"
        "  130  interrupted (Ctrl-C)"
    )
    parser.add_argument(
        "--workload",
        default="CartPole-v1",
        metavar="NAME",
        help=f"workload to train: one of {', '.join(WORKLOADS)}, or any registered Gymnasium "
        "ID ('module:ID' imports module first) (default CartPole-v1)",
    )
    parser.add_argument(
        "--actors",
        type=int_in(1, MAX_ACTORS_LIMIT),
        default=8,
        help="actors per round (default 8)",
    )
    parser.add_argument(
        "--backend", choices=BACKENDS, default="inprocess", help="fleet backend (default inprocess)"
    )
    parser.add_argument(
        "--address",
        default=None,
        metavar="HOST:PORT",
        help="--backend ray: join the Ray cluster there (one CPU per actor) instead of "
        "starting a local one; refused at once if nothing answers",
    )
    parser.add_argument(
        "--rounds",
        type=int_in(1, COUNT_LIMITS["max_rounds"]),
        default=None,
        help="round budget (default: the workload's)",
    )
    parser.add_argument(
        "--max-steps",
        type=positive_int,
        default=None,
        help="env-step budget (default: none, --rounds bounds the run)",
    )
    parser.add_argument(
        "--steps-per-actor",
        type=int_in(1, MAX_STEPS_PER_ACTOR),
        default=None,
        help="env steps per actor per round (default: the workload's rollout_steps)",
    )
    parser.add_argument(
        "--target",
        type=_float,
        default=None,
        help="stop at this mean return (default: the workload's)",
    )
    parser.add_argument("--seed", type=non_negative_int, default=0, help="seed (default 0)")
    parser.add_argument(
        "--lr",
        type=_float,
        default=None,
        help="override the learning rate (default: the workload's)",
    )
    parser.add_argument(
        "--sequential",
        action="store_true",
        help="--mode sync, inprocess backend: run actors one after the other instead of in "
        "lockstep",
    )
    parser.add_argument(
        "--out",
        type=output_folder,
        default=Path("fleetgym-out/train"),
        metavar="DIR",
        help="output folder of --save, --log, --plot and --tensorboard (nothing is written "
        "without one of them)",
    )
    parser.add_argument(
        "--save",
        action="store_true",
        help=f"save the learner to DIR/{SAVE_NAME} and its policy to DIR/learner.policy.pt",
    )
    parser.add_argument(
        "--log",
        action="store_true",
        help=f"write the per-round log to DIR/{LOG_NAME} (--mode async: one row per update)",
    )
    parser.add_argument(
        "--plot",
        action="store_true",
        help=f"draw the learning curves to DIR/{PLOT_NAME} (--mode async: mean return after "
        "each update)",
    )
    parser.add_argument(
        "--eval-episodes",
        type=non_negative_int,
        default=0,
        help="evaluate the final policy (deterministic) for this many episodes",
    )
    parser.add_argument(
        "--imagination",
        nargs="?",
        const="",
        default=None,
        metavar="SPEC",
        help="learn a world model from the real rollouts and mix imagined ones into every "
        "update; SPEC is name=value items of ImaginationConfig, e.g. "
        "'share=0.75,horizon=auto,hidden_sizes=128x128' (empty: the defaults); pair it with "
        "a smaller --steps-per-actor to spend fewer real steps (docs/explanation/imagination.md)",
    )
    parser.add_argument(
        "--tensorboard",
        action="store_true",
        help=f"write TensorBoard scalars (returns, losses, and with --imagination the model's "
        f"validation loss per head, horizon, imagined share, uncertainty) into "
        f"DIR/{TENSORBOARD_NAME}",
    )
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")
    async_train.configure(parser)


def write_log(path: Path, rows: list[dict[str, Any]]) -> None:
    """Write the per-round records as CSV."""
    write_csv(path, rows)


def plot_curves(path: Path, history: Any, title: str) -> None:
    """Mean return against env steps and against wall time."""
    from matplotlib.figure import Figure

    steps = [r.total_steps for r in history.rounds]
    wall = [r.wall_s for r in history.rounds]
    returns = [r.stats.mean_return for r in history.rounds]
    fig = Figure(figsize=(10, 3.6))
    axes = fig.subplots(1, 2, sharey=True)
    for ax, x, label in ((axes[0], steps, "env steps"), (axes[1], wall, "wall time (s)")):
        ax.plot(x, returns, lw=1.5)
        if history.target is not None and math.isfinite(history.target):
            ax.axhline(history.target, color="grey", ls="--", lw=1, label="target")
            ax.legend(loc="lower right")
        ax.set_xlabel(label)
        ax.grid(alpha=0.3)
    axes[0].set_ylabel("mean return (last 100 episodes)")
    fig.suptitle(title)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)


def _async_outputs(args: argparse.Namespace, paths: Outputs, model: Any, target: float) -> None:
    """``--log`` (one row per update) and ``--plot`` of an asynchronous run."""
    if paths.log is not None:
        write_log(paths.log, async_train.history_rows(model))
        print(f"wrote the per-update log to {paths.log}")
    if paths.plot is not None:
        curves = types.SimpleNamespace(rounds=model.history, target=target)
        title = f"{model.learner.workload.name}, {args.actors} async actors, seed {args.seed}"
        plot_curves(paths.plot, curves, title)
        print(f"wrote learning curves to {paths.plot}")


def run(args: argparse.Namespace) -> int:
    """Train, report, save; returns 0 when the target was reached, 1 otherwise.

    Raises:
        UsageError: A bad argument, found before any actor starts.
    """
    # torch (and the learner built on it) only when a command trains.
    import torch

    from fleetgym.agents.learners.ppo import PPOLearner

    try:
        workload = get_workload(args.workload)
    except (UnknownWorkloadError, UnsupportedSpaceError, ValueError) as error:
        raise UsageError(f"--workload: {error}") from None
    if args.address is not None and args.backend != "ray":
        raise UsageError(f"--address: expected --backend ray, actual --backend {args.backend}")
    if args.mode == "async":
        if args.sequential:
            raise UsageError(
                "--sequential: expected --mode sync (asynchronous actors never run one after "
                "the other), actual --mode async"
            )
        torch.set_num_threads(1)
        # Output folder checked before any work, not after the whole run.
        paths = outputs(args)
        return async_train.run(
            args,
            workload,
            lambda model, target: _async_outputs(args, paths, model, target),
            save=paths.save,
            tensorboard=paths.tensorboard,
        )
    if args.sequential and args.backend != "inprocess":
        raise UsageError(f"--sequential: expected --backend inprocess, actual {args.backend}")
    torch.set_num_threads(1)
    rounds = args.rounds or workload.max_rounds
    steps_per_actor = args.steps_per_actor or workload.rollout_steps
    target = workload.target_return if args.target is None else args.target
    overrides = {} if args.lr is None else {"lr": args.lr}
    imagination = async_train.imagination_config(args)
    try:
        learner = PPOLearner(workload, seed=args.seed, imagination=imagination, **overrides)
    except (ValueError, TypeError) as error:
        raise UsageError(str(error)) from None
    # Output folder checked before any work, not after the whole run.
    paths = outputs(args)
    options: dict[str, Any] = {}
    if args.backend == "inprocess":
        options["batched"] = not args.sequential
    if args.address is not None:
        options["address"] = args.address
    try:
        fleet: Any = make_fleet(
            workload, backend=args.backend, max_actors=args.actors, seed=args.seed, **options
        )
    except (ValueError, TypeError) as error:
        raise UsageError(str(error)) from None
    except FleetError as error:  # a Ray cluster that cannot be joined or cannot place them
        raise UsageError(str(error)) from None
    print(
        f"training {workload.name}: {args.actors} actors x {steps_per_actor} steps per round, "
        f"backend {args.backend}, target {target:g}, budget {rounds} rounds, seed {args.seed}"
    )
    from tqdm import tqdm

    bar = tqdm(total=rounds, unit="round", disable=args.no_progress, dynamic_ncols=True)
    writer = None
    if paths.tensorboard is not None:
        from fleetgym.agents.learners.asynchronous.records import log_scalars, summary_writer

        writer = summary_writer(paths.tensorboard)

    def progress(record: Any) -> bool:
        bar.update(1)
        postfix = {
            "steps": record.total_steps,
            "ret": f"{record.stats.mean_return:.1f}",
            "kl": f"{record.stats.kl:.4f}",
        }
        imagined = learner.imagination.last if learner.imagination is not None else None
        if imagined is not None:
            postfix.update(img=f"{imagined.imagined_share:.2f}", H=imagined.horizon)
        bar.set_postfix(**postfix)
        if writer is not None:
            log_scalars(writer, record.stats, record.total_steps, record.wall_s, imagined)
        return False

    started = time.perf_counter()
    try:
        history = train(
            workload,
            fleet,
            learner,
            args.actors,
            rounds,
            target=target,
            callback=progress,
            steps_per_actor=steps_per_actor,
            max_steps=args.max_steps,
        )
    finally:
        bar.close()
        fleet.close()
        if writer is not None:
            writer.close()
    wall = time.perf_counter() - started
    reached = history.reached_target
    print(
        f"{'reached' if reached else 'did not reach'} target {target:g}: "
        f"mean return {history.final_return:.1f} after {history.total_steps} env steps, "
        f"{len(history)} rounds, {wall:.1f} s wall ({history.stop_reason})"
    )
    if paths.save is not None:
        path = learner.save(paths.save)
        print(f"saved learner to {path} and policy to {path.with_name(path.stem + '.policy.pt')}")
    if paths.log is not None and history.rounds:
        write_log(paths.log, [r.as_dict() for r in history.rounds])
        print(f"wrote per-round log to {paths.log}")
    if paths.plot is not None and history.rounds:
        plot_curves(paths.plot, history, f"{workload.name}, {args.actors} actors, seed {args.seed}")
        print(f"wrote learning curves to {paths.plot}")
    if args.eval_episodes:
        print(f"evaluating the final policy over {args.eval_episodes} episodes ...", flush=True)
        returns = evaluate_policy(
            learner.policy, workload, args.eval_episodes, seed=args.seed + 10_000
        )
        mean, std = (
            float(sum(returns) / len(returns)),
            float(torch.tensor(returns).std(unbiased=False)),
        )
        print(f"evaluation over {len(returns)} episodes (deterministic): {mean:.1f} +- {std:.1f}")
    return 0 if reached else 1
