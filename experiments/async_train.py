"""``fleetgym train --mode async``: the asynchronous trainer from the command line.

The ``train`` subcommand adds the arguments (:func:`configure`) and hands over to
:func:`run` when ``--mode async`` is given: ``--actors`` actor slots collect while the
learner trains (:class:`~fleetgym.agents.learners.asynchronous.trainer.AsyncPPO`), with
``--loss``, ``--sigma``
and ``--max-policy-lag``. ``--backend`` places the actors: ``inprocess`` (the default)
runs each slot's env in a thread of the learner's process, ``process`` in a worker
process per slot, ``ray`` in a Ray actor per slot on a local Ray cluster this command
starts, or with ``--address HOST:PORT`` on the cluster running there (local inference
only; an address nothing answers at is refused within 5 s): ``AsyncPPO(topology=AsyncTopology(backend=...))``.
``--inference server`` has the actors act through one inference server. ``--log`` writes
one CSV row per update and ``--plot`` the mean return after each update (into ``--out``);
``--sequential`` (a synchronous in-process option) is refused.

Checkpoints and ``--resume`` work as in the synchronous mode (on by default, every 10
minutes into ``--out``/``checkpoints``), but ``--checkpoint-every N`` counts updates, and a
resumed run's actors restart their episodes (``AsyncPPO.learn(checkpoints=, resume=)``):
the budget counts the env steps consumed before the checkpoint, the steps collected but
not consumed then are dropped, so nothing is counted twice or lost. The options that
define the run (:data:`RESUME_FLAGS`) must be the checkpoint's; a checkpoint that cannot be
resumed exits 2 before any actor starts.

Example::

    fleetgym train --mode async --loss ppo --workload CartPole-v1 --actors 4 --backend process
    fleetgym train --mode async --workload CartPole-v1 --backend process --inference server
    fleetgym train --mode async --workload CartPole-v1 --actors 2 --backend ray
    fleetgym train --mode async --backend ray --address 127.0.0.1:6379
    fleetgym train --mode async --workload CartPole-v1 --out runs/a --checkpoint-every 20
    fleetgym train --mode async --workload CartPole-v1 --out runs/a --resume runs/a
"""

from __future__ import annotations

import argparse
import csv
import dataclasses
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from fleetgym.errors import FleetError
from fleetgym.experiments.argtypes import UsageError, non_negative_int, positive_float

__all__ = [
    "ACTOR_NOUN",
    "LOSSES",
    "RESUME_FLAGS",
    "LOGGED_HISTORY",
    "LiveLog",
    "check_checkpoint_folder",
    "configure",
    "history_rows",
    "imagination_config",
    "run",
    "update_row",
]

LOSSES = ("decoupled", "gipo", "ppo", "vtrace")
#: How the start-up line names an actor slot of each backend.
ACTOR_NOUN = {"inprocess": "threads", "process": "processes", "ray": "slots as Ray actors"}
#: The option that sets each field an async checkpoint and its resumed run must share
#: (dotted names: a value inside the field; the longest prefix that is listed names it).
RESUME_FLAGS = {
    "workload": "--workload",
    "seed": "--seed",
    "trainer": "--mode",
    "algo.loss": "--loss",
    "algo.sigma": "--sigma",
    "algo.proximal_clip": "--proximal-clip",
    "algo.max_policy_lag": "--max-policy-lag",
    "algo.hyperparameters": "--lr",
    "algo.imagination": "--imagination",
    "topology.n_actors": "--actors",
    "topology.steps_per_actor": "--steps-per-actor",
    "topology.backend": "--backend",
    "topology.inference": "--inference",
}


def check_checkpoint_folder(args: argparse.Namespace, folder: Any, resume: Any) -> None:
    """Refuse a checkpoint folder that holds another run's checkpoints (unless this run
    resumes from it), naming the option that chose the folder.

    Raises:
        UsageError: The folder holds checkpoints of a run this one does not continue.
    """
    from fleetgym.agents.learners.checkpoint_store import CheckpointStore
    from fleetgym.agents.learners.run_config import check_folder_free
    from fleetgym.errors import CheckpointError

    try:
        check_folder_free(CheckpointStore(folder), resume)
    except CheckpointError as error:
        flag = "--checkpoint-dir" if args.checkpoint_dir is not None else "--out"
        raise UsageError(
            f"{flag}: {error} (--resume continues a run; --no-checkpoints writes none)"
        ) from None


def configure(parser: argparse.ArgumentParser) -> None:
    """Add the asynchronous trainer's arguments to ``fleetgym train``."""
    parser.add_argument(
        "--mode",
        choices=("sync", "async"),
        default="sync",
        help="sync: rounds of the fleet then an update; async: actors collect while the "
        "learner trains, in threads or, with --backend process, a worker process each, "
        "with --backend ray, a Ray actor each (default sync)",
    )
    parser.add_argument(
        "--loss",
        choices=LOSSES,
        default="ppo",
        help="async: policy loss (default ppo; gipo and vtrace get a KL budget of 0.02 per update)",
    )
    parser.add_argument(
        "--sigma", type=float, default=0.8, help="async: GIPO weight width (default 0.8)"
    )
    parser.add_argument(
        "--proximal-clip",
        action="store_true",
        help="async with --loss ppo: clip around the learner's policy at each update's start "
        "and weight advantages by its ratio to the behaviour policy (decoupled PPO)",
    )
    parser.add_argument(
        "--max-policy-lag",
        type=non_negative_int,
        default=4,
        help="async: bound on the policy lag in updates (default 4)",
    )
    parser.add_argument(
        "--inference",
        choices=("local", "server"),
        default="local",
        help="async: actors act with their own policy copy (local) or through one inference "
        "server fed the weights after every update (server; with --backend process the "
        "workers reach it on a loopback socket) (default local)",
    )
    parser.add_argument(
        "--actor-timeout",
        type=positive_float,
        default=None,
        metavar="S",
        help="async with --backend process or ray: seconds one rollout may take before its "
        "worker is killed and the slot restarted (default 300)",
    )


def update_row(record: Any) -> dict[str, Any]:
    """One update's record of an :class:`AsyncPPO` run as a flat row (for ``--log``)."""
    row = {k: v for k, v in dataclasses.asdict(record).items() if k != "stats"}
    row["learner_utilisation"] = record.learner_utilisation
    row.update(dataclasses.asdict(record.stats))
    return row


def history_rows(model: Any) -> list[dict[str, Any]]:
    """One flat record per update of an :class:`AsyncPPO` run (for ``--log``)."""
    return [update_row(record) for record in model.history]


#: Update records ``fleetgym train --mode async`` keeps in memory when ``--log`` writes
#: every row to disk as it goes (a long run's memory then stays flat).
LOGGED_HISTORY = 1_000


class LiveLog:
    """``--log`` while the run goes on: one CSV row per update, flushed as it is written, so a
    run killed at any moment leaves every update it finished in the file.

    Called with each update's record (an ``AsyncPPO.learn`` callback). The first call writes
    the file afresh, atomically: a fresh run's with the model's history; a resumed run's
    with the rows of the file already there before the checkpoint's kept records, then those
    records (the trainer keeps only its newest records, the file holds every row). The
    updates a killed run did after its last checkpoint (done again by the resumed run) are
    so not counted twice.

    Args:
        path: The CSV file.
        model: The trainer whose history the first call writes.
        resumed: The run goes on from a checkpoint (keep the file's earlier rows).
    """

    def __init__(self, path: Path, model: Any, resumed: bool = False) -> None:
        self.path = Path(path)
        self.model = model
        self.resumed = resumed
        self._file: Any = None
        self._writer: Any = None

    def _copy_earlier_rows(self, first: int, out: Any, fields: list[str]) -> Any:
        """Write the header and the rows of updates before ``first`` of the file already
        there to ``out``, one at a time (a long run's log is never held in memory); the
        writer, on the file's own columns (else ``fields``)."""
        if not (self.resumed and self.path.is_file()):
            writer = csv.DictWriter(out, fieldnames=fields, extrasaction="ignore")
            writer.writeheader()
            return writer
        with self.path.open(newline="") as file:
            reader = csv.DictReader(file)
            writer = csv.DictWriter(
                out, fieldnames=list(reader.fieldnames or fields), extrasaction="ignore"
            )
            writer.writeheader()
            for row in reader:
                try:
                    update = int(row.get("update") or "")
                except ValueError:
                    break  # a row cut short by the kill: the checkpoint's records follow
                if update >= first:
                    break
                writer.writerow(row)
        return writer

    def __call__(self, record: Any) -> None:
        if self._writer is None:
            rows = history_rows(self.model)
            self.path.parent.mkdir(parents=True, exist_ok=True)
            partial = self.path.with_name(self.path.name + ".partial")
            self._file = partial.open("w", newline="")
            self._writer = self._copy_earlier_rows(
                int(rows[0]["update"]), self._file, list(rows[0])
            )
            self._writer.writerows(rows)
            self._file.flush()
            os.replace(partial, self.path)  # the open file follows the rename
            return
        self._writer.writerow(update_row(record))
        self._file.flush()

    def close(self) -> None:
        """Close the file (the run's last rows are already in it)."""
        if self._file is not None:
            self._file.close()
            self._file = None


def imagination_config(args: argparse.Namespace) -> Any:
    """The ``--imagination`` option as an ImaginationConfig (``None`` without it)."""
    if getattr(args, "imagination", None) is None:
        return None
    from fleetgym.agents.world_model.config import parse_imagination_spec

    try:
        return parse_imagination_spec(args.imagination, seed=args.seed)
    except (TypeError, ValueError) as error:
        raise UsageError(f"--imagination: {error}") from None


def _flag_of(field: str) -> str:
    """The option that sets an async checkpoint's config field (else the field's name)."""
    name = field
    while name:
        if name in RESUME_FLAGS:
            return RESUME_FLAGS[name]
        name = name.rpartition(".")[0]
    return field


def _check_resume(args: argparse.Namespace, model: Any, budget: int, target: float) -> Any:
    """The checkpoint ``--resume`` names, read and of this run (else a UsageError)."""
    from fleetgym.agents.learners.asynchronous.settings import (
        ASYNC_MATCHED_FIELDS,
        async_run_config,
        read_async_checkpoint,
    )
    from fleetgym.agents.learners.run_config import config_differences
    from fleetgym.errors import CheckpointError

    try:
        checkpoint = read_async_checkpoint(args.resume)
    except CheckpointError as error:
        raise UsageError(f"--resume: {error}") from None
    current = async_run_config(model, budget, target)
    differences = config_differences(checkpoint.config, current, ASYNC_MATCHED_FIELDS)
    if differences:
        what = "; ".join(
            f"{_flag_of(field)}: the checkpoint has {old!r}, the command line {new!r}"
            for field, old, new in differences
        )
        raise UsageError(f"--resume: {checkpoint.path} is a checkpoint of another run ({what})")
    return checkpoint


def run(
    args: argparse.Namespace,
    workload: Any,
    outputs: Callable[[Any, float], None] | None = None,
    *,
    save: Path | None = None,
    tensorboard: Path | None = None,
    checkpoints: Any = None,
    log: Path | None = None,
) -> int:
    """Train with :class:`AsyncPPO`; returns 0 when the target was reached, 1 otherwise.

    ``outputs(model, target)`` writes ``--log`` and ``--plot`` after the run (``fleetgym
    train`` passes its writers); ``save`` is where the model is saved and ``tensorboard``
    the folder of its TensorBoard scalars (``None``: neither); ``checkpoints`` (a
    ``CheckpointConfig``) where and how often the run is saved, and ``args.resume`` the
    checkpoint it continues; ``log`` is the CSV written one row per update while the run
    goes on (:class:`LiveLog`).

    Raises:
        UsageError: A bad argument, found before any actor starts (the trainer refuses it;
            a ``--resume`` that holds no checkpoint of this run; a checkpoint folder with
            another run's checkpoints).
    """
    from fleetgym.agents.learners.asynchronous.config import (
        HISTORY_LIMIT,
        AsyncPPOConfig,
        AsyncTopology,
    )
    from fleetgym.agents.learners.asynchronous.trainer import AsyncPPO
    from fleetgym.agents.learners.checkpoint_store import CheckpointStore
    from fleetgym.agents.learners.training import evaluate_policy
    from fleetgym.errors import CheckpointError

    steps_per_actor = args.steps_per_actor or workload.rollout_steps
    rounds = args.rounds or workload.max_rounds
    budget = args.max_steps or rounds * args.actors * steps_per_actor
    target = workload.target_return if args.target is None else args.target
    overrides = {} if args.lr is None else {"lr": args.lr}
    backend = getattr(args, "backend", "inprocess")
    if backend not in ACTOR_NOUN:
        raise UsageError(
            f"--backend: expected one of {sorted(ACTOR_NOUN)} with --mode async, actual {backend!r}"
        )
    try:
        algo = AsyncPPOConfig(
            loss=args.loss,
            sigma=args.sigma,
            proximal_clip=args.proximal_clip,
            max_policy_lag=args.max_policy_lag,
            hyperparameters=overrides,
            imagination=imagination_config(args),
        )
        timeout = getattr(args, "actor_timeout", None)
        topology = AsyncTopology(
            n_actors=args.actors,
            backend=backend,
            inference=args.inference,
            steps_per_actor=steps_per_actor,
            address=getattr(args, "address", None),
            **({} if timeout is None else {"actor_timeout": timeout}),
        )
        model = AsyncPPO(
            workload,
            algo=algo,
            topology=topology,
            seed=args.seed,
            tensorboard_log=tensorboard,
            history_limit=HISTORY_LIMIT if log is None else LOGGED_HISTORY,
        )
    except (TypeError, ValueError, FleetError) as error:
        raise UsageError(str(error)) from None
    resume, saved = None, None
    try:
        if getattr(args, "resume", None) is not None:
            saved = _check_resume(args, model, budget, target)
            resume = saved.path
        if checkpoints is not None:
            check_checkpoint_folder(args, checkpoints.folder, resume)
    except UsageError:
        model.close()
        raise
    print(
        f"training {workload.name} asynchronously: {args.actors} actor {ACTOR_NOUN[backend]}"
        f"{' through an inference server' if args.inference == 'server' else ''} x "
        f"{steps_per_actor} steps per rollout, loss {model.config.label}, max policy lag "
        f"{args.max_policy_lag}, target {target:g}, budget {budget} env steps, seed {args.seed}"
    )
    group = model.slots.ray_group
    if group is not None:
        joined = "started a local" if group.local else "joined the"
        print(f"{joined} Ray cluster at {group.address}; each actor slot {group.actor_options}")
    if saved is not None:
        print(
            f"resuming from {saved.path} (after {saved.counters['updates']} updates, "
            f"{saved.counters['num_timesteps']} env steps; the actors restart their episodes)"
        )
    started = time.perf_counter()
    live = None if log is None else LiveLog(log, model, resumed=saved is not None)
    try:
        model.learn(
            budget,
            live,
            progress_bar=not args.no_progress,
            target=target,
            checkpoints=checkpoints,
            resume=resume,
        )
    except CheckpointError as error:  # raised before any actor starts, as the checks above
        raise UsageError(f"--resume: {error}") from None
    finally:
        if live is not None:
            live.close()
        model.close()
    if saved is not None:
        before = saved.counters["num_timesteps"]
        print(
            f"env steps: {before} before the checkpoint + {model.num_timesteps - before} "
            f"after the resume = {model.num_timesteps}"
        )
    wall = time.perf_counter() - started
    final = model.learner.mean_return
    reached = bool(model.learner.episodes_seen) and final >= target
    last = model.history[-1] if model.history else None
    print(
        f"{'reached' if reached else 'did not reach'} target {target:g}: mean return "
        f"{final:.1f} after {model.num_timesteps} env steps, {model.updates} updates, "
        f"{wall:.1f} s wall"
        + (
            f", learner utilisation {last.learner_utilisation:.2f}, lag p99 "
            f"{last.stats.lag_p99:g}, dropped samples {model.learner.dropped_samples_total}"
            if last
            else ""
        )
    )
    parked = sorted(model.slots.parked)
    if parked:
        print(
            f"lost capacity: actor slots {parked} of {args.actors} had no room on the Ray "
            f"cluster (a node was lost) and were parked; {model.actor_failures} failed "
            "rollouts were replaced"
        )
    if checkpoints is not None:
        newest = CheckpointStore(checkpoints.folder).latest()
        if newest is not None:
            print(f"latest checkpoint: {newest}")
    if save is not None:
        path = model.save(save)
        print(f"saved the model to {path} (settings in {path.with_suffix('.json')})")
    if outputs is not None and model.history:
        outputs(model, target)
    if args.eval_episodes:
        print(f"evaluating the final policy over {args.eval_episodes} episodes ...", flush=True)
        returns = evaluate_policy(
            model.learner.policy, workload, args.eval_episodes, seed=args.seed + 10_000
        )
        mean = sum(returns) / len(returns)
        print(f"evaluation over {len(returns)} episodes (deterministic): {mean:.1f}")
    return 0 if reached else 1
