"""``fleetgym train``: train a workload with the actor fleet and the PPO learner.

Synchronous rounds (:func:`fleetgym.agents.learners.training.train`): the learner's weights go to
``--actors`` actors of the chosen backend, each collects ``--steps-per-actor`` steps, the
learner updates; training stops at the workload's target return (or ``--target``), after
``--rounds`` rounds or ``--max-steps`` env steps. A tqdm bar shows progress; at the end
the command prints steps, wall time and the final mean return, and optionally writes into
the folder ``--out``: the learner and its policy (``--save``: ``learner.pt``,
``learner.policy.pt``), the per-round log (``--log``: ``log.csv``), the learning curves
(``--plot``: ``curves.png``) and TensorBoard scalars (``--tensorboard``: ``tb/``).

Checkpoints (both modes; ``--mode async`` counts ``--checkpoint-every`` in updates, see
:mod:`fleetgym.experiments.async_train`): by default the run is saved every 10 minutes into
``--out``/``checkpoints`` (``--checkpoint-every``, ``--checkpoint-minutes``, ``--keep``,
``--checkpoint-dir``, ``--no-checkpoints``); ``--resume PATH`` continues a saved run
(:mod:`fleetgym.agents.learners.run_checkpoints`). The options that define the run must be
the checkpoint's; a checkpoint that cannot be resumed exits 2 before any actor starts.

Every argument is checked before any actor starts (a bad one exits 2); an error during
training is a crash (exit 3, with its traceback).

Example::

    fleetgym train --workload CartPole-v1 --actors 8 --out runs/cartpole --save --plot
    fleetgym train --workload CartPole-v1 --actors 8 --out runs/cartpole --save --resume runs/cartpole
"""

from __future__ import annotations

import argparse
import csv
import dataclasses
import math
import os
import time
import types
from pathlib import Path
from typing import Any

from fleetgym.agents.fleet import BACKENDS, get_backend, make_fleet
from fleetgym.agents.fleet.base import MAX_ACTORS_LIMIT, MAX_STEPS_PER_ACTOR
from fleetgym.agents.learners.checkpoint_store import CheckpointConfig, CheckpointStore
from fleetgym.agents.learners.run_checkpoints import read_checkpoint
from fleetgym.agents.learners.run_config import config_differences, run_config
from fleetgym.agents.learners.training import evaluate_policy, train
from fleetgym.agents.workloads import COUNT_LIMITS, WORKLOADS, get_workload
from fleetgym.errors import (
    CheckpointError,
    FleetError,
    UnknownWorkloadError,
    UnsupportedSpaceError,
)
from fleetgym.experiments import async_train
from fleetgym.experiments.argtypes import (
    UsageError,
    check_output_dir,
    int_in,
    non_negative_int,
    output_folder,
    positive_float,
    positive_int,
)
from fleetgym.experiments.tables import write_csv

__all__ = [
    "CHECKPOINT_FLAGS",
    "Outputs",
    "checkpoint_config",
    "configure",
    "outputs",
    "plot_curves",
    "resume_checkpoint",
    "run",
    "write_log",
]

#: The files ``--save``, ``--log``, ``--plot`` and ``--tensorboard`` write into ``--out``.
SAVE_NAME, LOG_NAME, PLOT_NAME, TENSORBOARD_NAME = "learner.pt", "log.csv", "curves.png", "tb"
#: The checkpoint folder inside ``--out`` (without ``--checkpoint-dir``).
CHECKPOINTS_NAME = "checkpoints"
#: Minutes between checkpoints when checkpointing is on and ``--checkpoint-minutes`` not given.
DEFAULT_CHECKPOINT_MINUTES = 10.0
#: Checkpoints kept without ``--keep``.
DEFAULT_KEEP = 3
#: The checkpoint options (attribute -> flag); ``--mode async`` counts ``--checkpoint-every``
#: in updates.
CHECKPOINT_FLAGS = {
    "checkpoint_every": "--checkpoint-every",
    "checkpoint_minutes": "--checkpoint-minutes",
    "keep": "--keep",
    "checkpoint_dir": "--checkpoint-dir",
    "no_checkpoints": "--no-checkpoints",
    "resume": "--resume",
}
#: The option of ``fleetgym train`` that sets each field a resumed run must share.
_RESUME_FLAGS = {
    "workload": "--workload",
    "seed": "--seed",
    "fleet_seed": "--seed",
    "num_actors": "--actors",
    "steps_per_actor": "--steps-per-actor",
    "backend": "--backend",
    "imagination": "--imagination",
    "hyperparameters.lr": "--lr",
}


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
        help=f"write the per-round log to DIR/{LOG_NAME} (--mode async: one row per update, "
        "written as the run goes)",
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
    parser.add_argument(
        "--checkpoint-every",
        type=positive_int,
        default=None,
        metavar="N",
        help="also write a checkpoint every N rounds (--mode async: every N updates) "
        "(checkpoints are on by default, one every --checkpoint-minutes)",
    )
    parser.add_argument(
        "--checkpoint-minutes",
        type=positive_float,
        default=None,
        metavar="M",
        help="write a checkpoint at the end of the round (--mode async: after the update) "
        "once M minutes have "
        f"passed since the last one (default {DEFAULT_CHECKPOINT_MINUTES:g} when "
        "checkpointing is on)",
    )
    parser.add_argument(
        "--keep",
        type=positive_int,
        default=None,
        metavar="K",
        help=f"keep the newest K checkpoints (default {DEFAULT_KEEP})",
    )
    parser.add_argument(
        "--checkpoint-dir",
        type=output_folder,
        default=None,
        metavar="CKPT_DIR",
        help=f"the checkpoint folder (default DIR/{CHECKPOINTS_NAME} of --out; "
        "created with the first checkpoint, so a short run writes nothing; a run that does "
        "not --resume from it refuses one that holds checkpoints)",
    )
    parser.add_argument(
        "--no-checkpoints",
        action="store_true",
        help="write no checkpoints (without it: one every "
        f"{DEFAULT_CHECKPOINT_MINUTES:g} minutes into DIR/{CHECKPOINTS_NAME})",
    )
    parser.add_argument(
        "--resume",
        default=None,
        metavar="PATH",
        help="continue the run saved in PATH: a checkpoint file, a checkpoint "
        "folder (its newest) or a run's --out folder holding checkpoints/. The options "
        "that define the run must be the checkpoint's (--workload, --actors, "
        "--steps-per-actor, --seed, --lr, --backend, --imagination; nothing is taken from "
        "the checkpoint); --rounds (counting the rounds before the checkpoint), --target "
        "and --max-steps may differ. In-process actors resume bit-identically (with envs "
        "that pickle their state, e.g. CartPole); process and Ray actors restart their "
        "episodes. --mode async: the options that define the run are --workload, --seed, "
        "--actors, --steps-per-actor, --backend, --inference, --loss, --sigma, "
        "--proximal-clip, --max-policy-lag, --lr, --imagination; its actors restart their "
        "episodes and the budget (--max-steps or --rounds) counts the env steps before the "
        "checkpoint (docs/explanation/learner.md)",
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
    """``--plot`` of an asynchronous run (``--log`` was written as it went): from the log's
    rows when there is one (the trainer keeps only its newest records), else the history."""
    rounds: Any = model.history
    if paths.log is not None:
        print(f"wrote the per-update log to {paths.log}")
        rounds = _log_records(paths.log)
    if paths.plot is not None:
        curves = types.SimpleNamespace(rounds=rounds, target=target)
        title = f"{model.learner.workload.name}, {args.actors} async actors, seed {args.seed}"
        plot_curves(paths.plot, curves, title)
        print(f"wrote learning curves to {paths.plot}")


def _log_records(path: Path) -> list[Any]:
    """The log's rows as records :func:`plot_curves` reads (steps, wall, mean return)."""
    with path.open(newline="") as file:
        return [
            types.SimpleNamespace(
                total_steps=int(row["total_steps"]),
                wall_s=float(row["wall_s"]),
                stats=types.SimpleNamespace(mean_return=float(row["mean_return"])),
            )
            for row in csv.DictReader(file)
        ]


def _given_checkpoint_flags(args: argparse.Namespace) -> list[str]:
    """The checkpoint options given on the command line."""
    return [
        flag
        for name, flag in CHECKPOINT_FLAGS.items()
        if getattr(args, name, None) not in (None, False)
    ]


def _check_folder_can_be_made(flag: str, folder: Path) -> None:
    """Refuse a folder that could not be created or written later (nothing is created)."""
    if folder.exists():
        if not folder.is_dir() or not os.access(folder, os.W_OK | os.X_OK):
            raise UsageError(f"{flag}: expected a writable folder, actual {str(folder)!r}")
        return
    parent = folder.parent
    while not parent.exists() and parent != parent.parent:
        parent = parent.parent
    if not parent.is_dir() or not os.access(parent, os.W_OK | os.X_OK):
        raise UsageError(
            f"{flag}: expected a folder that can be created, actual {str(folder)!r} "
            f"({str(parent)!r} is not a writable folder)"
        )


def checkpoint_config(args: argparse.Namespace) -> CheckpointConfig | None:
    """The checkpoints of a synchronous run (``None`` with ``--no-checkpoints``).

    The folder is checked, not created: it appears with the first checkpoint.

    Raises:
        UsageError: ``--no-checkpoints`` with another checkpoint option, or a folder that
            could not be created.
    """
    if args.no_checkpoints:
        others = [
            f for f in _given_checkpoint_flags(args) if f not in ("--no-checkpoints", "--resume")
        ]
        if others:
            raise UsageError(
                f"--no-checkpoints: expected no other checkpoint option, actual {' '.join(others)}"
            )
        return None
    if args.checkpoint_dir is not None:
        flag, folder = "--checkpoint-dir", Path(args.checkpoint_dir)
    else:
        flag, folder = "--out", Path(args.out) / CHECKPOINTS_NAME
    _check_folder_can_be_made(flag, folder)
    return CheckpointConfig(
        folder,
        every_rounds=args.checkpoint_every,
        every_minutes=(
            DEFAULT_CHECKPOINT_MINUTES
            if args.checkpoint_minutes is None
            else args.checkpoint_minutes
        ),
        keep=DEFAULT_KEEP if args.keep is None else args.keep,
    )


def _backend_class(name: str) -> str:
    """The class name of the fleet ``make_fleet(backend=name)`` builds (as a checkpoint
    records it)."""
    local = get_backend(name).local
    if isinstance(local, str):
        return local.rpartition(":")[2]
    return str(getattr(local, "__name__", type(local).__name__))


def _flag_of(field: str) -> str:
    """The option that sets a checkpoint's config field (a hyperparameter without one: its name)."""
    return _RESUME_FLAGS.get(field, field.replace("hyperparameters.", "hyperparameter "))


def resume_checkpoint(args: argparse.Namespace, current: dict[str, Any]) -> Path:
    """The checkpoint ``--resume`` names, read, checked and of this run.

    Args:
        args: The parsed command line (``--resume`` given).
        current: This run's configuration
            (:func:`~fleetgym.agents.learners.run_config.run_config`).

    Returns:
        The checkpoint file.

    Raises:
        UsageError: Naming the path, for nothing there, an empty folder, a truncated or
            corrupt file, a checkpoint of a newer fleetgym, or one of another run (naming
            the option that differs and both values).
    """
    try:
        checkpoint = read_checkpoint(args.resume)
    except CheckpointError as error:
        raise UsageError(f"--resume: {error}") from None
    differences = config_differences(checkpoint.config, current)
    if differences:
        what = "; ".join(
            f"{_flag_of(field)}: the checkpoint has {old!r}, the command line {new!r}"
            for field, old, new in differences
        )
        raise UsageError(f"--resume: {checkpoint.path} is a checkpoint of another run ({what})")
    return checkpoint.path


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
        # Output folders checked before any work, not after the whole run.
        paths = outputs(args)
        return async_train.run(
            args,
            workload,
            lambda model, target: _async_outputs(args, paths, model, target),
            save=paths.save,
            tensorboard=paths.tensorboard,
            checkpoints=checkpoint_config(args),
            log=paths.log,
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
    # Output folders checked before any work, not after the whole run.
    paths = outputs(args)
    checkpoints = checkpoint_config(args)
    resume = None
    if args.resume is not None:
        current = run_config(
            workload.name,
            learner,
            args.seed,
            _backend_class(args.backend),
            args.actors,
            steps_per_actor,
            rounds,
            target,
            args.max_steps,
        )
        resume = resume_checkpoint(args, current)
    if checkpoints is not None:
        async_train.check_checkpoint_folder(args, checkpoints.folder, resume)
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
    done_before = 0
    if resume is not None:
        done_before = int(resume.name[len("ckpt-") : -len(".pt")])
        print(f"resuming from {resume} (after {done_before} rounds)")
    from tqdm import tqdm

    bar = tqdm(
        total=rounds,
        initial=min(done_before, rounds),
        unit="round",
        disable=args.no_progress,
        dynamic_ncols=True,
    )
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
            checkpoints=checkpoints,
            resume=resume,
        )
    except CheckpointError as error:  # raised before the first round, as the checks above
        raise UsageError(f"--resume: {error}") from None
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
    if checkpoints is not None:
        newest = CheckpointStore(checkpoints.folder).latest()
        if newest is not None:
            print(f"latest checkpoint: {newest}")
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
