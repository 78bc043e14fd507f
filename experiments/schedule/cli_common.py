"""What the ``fleetgym schedule`` actions share: env and PPO arguments, and their checks.

:func:`add_env_arguments` and :func:`add_ppo_arguments` add the arguments that choose the
scheduling env and the scheduler's PPO; :func:`env_config_from_args` and
:func:`ppo_config` turn them back into an env ID, keyword arguments and a
:class:`~fleetgym.experiments.schedule.config.SchedulerPPOConfig`; :func:`usable_env`
makes the env once so that a bad argument is a usage error before any work starts.
"""

from __future__ import annotations

import argparse
import json
import os
import zipfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from fleetgym.agents.fleet.base import MAX_ACTORS_LIMIT
from fleetgym.agents.schedulers.actions import ACTION_MODES
from fleetgym.errors import CheckpointError, FleetgymError
from fleetgym.experiments.argtypes import (
    UsageError,
    discount,
    env_kwarg,
    int_in,
    learning_rate,
    non_negative_float,
    positive_float,
    unit_interval,
)
from fleetgym.experiments.schedule.config import (
    DEFAULT_START_SEARCH,
    GENERAL_ENV_ID,
    SchedulerPPOConfig,
)

__all__ = [
    "MAX_EPISODES",
    "add_env_arguments",
    "add_ppo_arguments",
    "checkpoint_meta",
    "env_config_from_args",
    "known_baselines",
    "ppo_config",
    "resume_checkpoint",
    "setup_torch",
    "start_size",
    "usable_env",
]

#: Most scheduler episodes ``--episodes`` asks for (a guard against typos).
MAX_EPISODES = 1_000_000


def add_env_arguments(parser: argparse.ArgumentParser) -> None:
    """Arguments that choose the scheduling env (shared by train and finetune)."""
    parser.add_argument(
        "--workload",
        default="CartPole-v1",
        help="workload the scheduled training runs train (default: CartPole-v1)",
    )
    parser.add_argument(
        "--timing",
        choices=("modeled", "measured"),
        default="modeled",
        help="modeled: deterministic per-step compute model (reproducible); "
        "measured: real measured compute times",
    )
    parser.add_argument(
        "--preset",
        choices=("fast", "paper"),
        default="fast",
        help="the env's per-workload settings (target, budget, rollout length)",
    )
    parser.add_argument(
        "--max-actors",
        type=int_in(1, MAX_ACTORS_LIMIT),
        default=32,
        help="most actors per round, I_max",
    )
    parser.add_argument(
        "--env-id",
        default=None,
        help=f"scheduling env ID (default: {GENERAL_ENV_ID} with --workload, --preset, "
        "--timing and --max-actors)",
    )
    parser.add_argument(
        "--env-kwarg",
        action="append",
        default=[],
        type=env_kwarg,
        metavar="KEY=VALUE",
        help="extra env keyword argument (VALUE parsed as JSON if it can be), repeatable",
    )


def add_ppo_arguments(parser: argparse.ArgumentParser) -> None:
    """The scheduler's PPO hyperparameters."""
    d = SchedulerPPOConfig()
    parser.add_argument(
        "--lr", type=learning_rate, default=d.learning_rate, help="Adam learning rate"
    )
    parser.add_argument(
        "--n-steps", type=int_in(1, 1_000_000), default=d.n_steps, help="rounds per env per update"
    )
    parser.add_argument(
        "--batch-size", type=int_in(1, 10_000_000), default=d.batch_size, help="minibatch size"
    )
    parser.add_argument(
        "--n-epochs", type=int_in(1, 1_000), default=d.n_epochs, help="epochs per update"
    )
    parser.add_argument(
        "--n-envs", type=int_in(1, 256), default=d.n_envs, help="scheduling envs in parallel"
    )
    parser.add_argument("--gamma", type=discount, default=d.gamma, help="discount over rounds")
    parser.add_argument(
        "--gae-lambda",
        type=unit_interval,
        default=d.gae_lambda,
        help="GAE lambda in [0, 1] (1: Monte-Carlo returns; below 1 the critic's values "
        "of the sizes a move leads to enter each move's advantage)",
    )
    parser.add_argument(
        "--ent-coef", type=non_negative_float, default=d.ent_coef, help="entropy bonus"
    )
    parser.add_argument(
        "--target-kl",
        type=positive_float,
        default=d.target_kl,
        help="end an update's epochs once the policy moved this far (KL)",
    )
    parser.add_argument(
        "--normalize-reward",
        action="store_true",
        help="scale rewards by a running std of the return (VecNormalize, rewards only)",
    )
    parser.add_argument(
        "--actions",
        choices=ACTION_MODES,
        default=d.actions,
        help="action parametrisation: pow2 (1, 2, 4, ..., max_actors), discrete "
        "(Discrete(max_actors), the paper's), log2 (one continuous action on a log scale) or "
        "step (halve, keep or double the current size; the size is added to the state)",
    )
    parser.add_argument(
        "--start-actors",
        type=int_in(1, 4096),
        default=d.start_actors,
        help="with --actions step: the fleet size an episode starts from, a power of two "
        "(default: the middle of 1..max_actors, 8 of 32)",
    )
    parser.add_argument(
        "--keep-prior",
        type=positive_float,
        default=d.keep_prior,
        help="with --actions step: the initial policy's probability of keeping the size, in (0, 1)",
    )
    parser.add_argument(
        "--first-keep-prior",
        type=positive_float,
        default=d.first_keep_prior,
        help="with --actions step: the initial policy's probability of keeping the start "
        "size at the first decision, in (0, 1) (default: --keep-prior; 0.333 explores the "
        "first move uniformly)",
    )
    parser.add_argument(
        "--train-starts",
        type=int_in(1, 4096),
        nargs="+",
        default=list(d.train_starts),
        metavar="N",
        help="with --actions step: exploring starts, each training episode starts from one "
        "of these fleet sizes (powers of two; evaluation starts from --start-actors)",
    )
    parser.add_argument(
        "--start-search",
        type=start_size,
        nargs="*",
        default=None,
        metavar="N",
        help="with --actions step and --paired-seeds: before training, race these fleet "
        "sizes as constant fleets on the paired seeds and start from the best (overrides "
        "--start-actors; 'none' or no sizes: off; default: "
        f"{' '.join(map(str, DEFAULT_START_SEARCH))} up to --max-actors unless "
        "--start-actors is given)",
    )
    parser.add_argument(
        "--start-search-seeds",
        type=int_in(2, 10_000),
        default=d.start_search_seeds,
        help="with --start-search: workload seeds the race between start sizes may use "
        "(all sizes run on the --paired-seeds pool, close ones on more seeds)",
    )
    parser.add_argument(
        "--check-moves",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="with --actions step and --paired-seeds: after training, keep the scheduler's "
        "moves only if, played deterministically on the paired seeds, they beat a constant "
        "fleet of its start size; else it keeps the start size (default: on)",
    )
    parser.add_argument(
        "--paired-seeds",
        type=int_in(0, 10_000),
        default=d.paired_seeds,
        help="train on a pool of this many workload seeds, each round paid relative to a "
        "constant fleet of the start size on the same seed (0: a fresh seed every episode)",
    )
    parser.add_argument(
        "--sde",
        action="store_true",
        help="state-dependent exploration (with --actions log2)",
    )


def start_size(text: str) -> int | str:
    """A ``--start-search`` item: a fleet size in [1, 4096], or ``none`` (no race).

    Example:
        >>> start_size("8"), start_size("None")
        (8, 'none')
    """
    if text.strip().lower() == "none":
        return "none"
    return int_in(1, 4096)(text)


def _start_search(values: Sequence[int | str] | None) -> tuple[int, ...] | None:
    """``--start-search`` as the config's tuple: ``none`` (alone) and no sizes mean off."""
    if values is None:
        return None
    if "none" in values:
        if len(values) > 1:
            raise UsageError(
                "--start-search: expected 'none' alone or fleet sizes, actual "
                + " ".join(map(str, values))
            )
        return ()
    return tuple(int(v) for v in values)


def checkpoint_meta(flag: str, path: str | os.PathLike[str]) -> dict[str, Any]:
    """The fleetgym metadata of the scheduler zip ``path``, read before any work.

    Raises:
        UsageError: It is not a scheduler checkpoint written by fleetgym.
    """
    from fleetgym.experiments.schedule.checkpoint import read_scheduler_meta

    try:
        return read_scheduler_meta(Path(path))
    except CheckpointError as error:  # its message names the file and what is wrong
        raise UsageError(f"{flag}: {error}") from None
    except (OSError, ValueError, KeyError, zipfile.BadZipFile, json.JSONDecodeError) as error:
        raise UsageError(
            f"{flag}: expected a scheduler checkpoint, actual {str(path)!r} ({error})"
        ) from None


def resume_checkpoint(flag: str, path: str | os.PathLike[str]) -> tuple[Path, dict[str, Any]]:
    """The scheduler checkpoint a run continues from and its metadata, checked before any work.

    Args:
        flag: The option named in the error (``--resume``, ``--from``).
        path: A scheduler zip (``.zip`` may be left out), or a folder: its newest periodic
            checkpoint, else the newest of its ``checkpoints/`` (a run's ``--out``).

    Raises:
        UsageError: Nothing there, a folder without checkpoints, a truncated, corrupt or
            foreign file, or one written by a newer fleetgym (naming the file).
    """
    from fleetgym.experiments.schedule.checkpoint import read_resume_checkpoint

    try:
        return read_resume_checkpoint(path)
    except FileNotFoundError:
        raise UsageError(
            f"{flag}: expected a scheduler checkpoint (a zip or a folder of them), actual "
            f"{str(path)!r} (nothing there)"
        ) from None
    except CheckpointError as error:  # its message names the file and what is wrong
        raise UsageError(f"{flag}: {error}") from None
    except OSError as error:
        raise UsageError(f"{flag}: {str(path)!r} cannot be read ({error.strerror})") from None


def known_baselines(flag: str, names: Sequence[str], max_actors: int = 32) -> None:
    """Check baseline names (``max``, ``adapt``, ``fixed:N``, ...) before any work.

    Raises:
        UsageError: A name is not a baseline.
    """
    from fleetgym.agents.schedulers import make_baseline

    for name in names:
        try:
            make_baseline(name, max_actors=max_actors)
        except (FleetgymError, ValueError, TypeError) as error:
            raise UsageError(f"{flag}: {error}") from None


def env_config_from_args(args: argparse.Namespace) -> tuple[str, dict[str, Any]]:
    """The env ID and keyword arguments the CLI arguments select."""
    extra = dict(getattr(args, "env_kwarg", []) or [])
    if getattr(args, "env_id", None):
        return args.env_id, extra
    return GENERAL_ENV_ID, {
        "workload": args.workload,
        "preset": args.preset,
        "timing": args.timing,
        "max_actors": args.max_actors,
        **extra,
    }


def usable_env(
    env_id: str, env_kwargs: dict[str, Any], config: SchedulerPPOConfig | None = None
) -> None:
    """Make the scheduling env once (cheap: no fleet starts before ``reset``), so a bad
    workload or env keyword argument is a usage error before any training starts; with a
    ``"step"`` ``config``, its start sizes must lie on the env's ladder of fleet sizes."""
    import gymnasium as gym

    from fleetgym.agents.schedulers.actions import start_index
    from fleetgym.experiments.schedule.config import validate_env_kwargs

    try:
        env = gym.make(env_id, **validate_env_kwargs(env_kwargs))
        space = env.action_space
        env.close()
    except (FleetgymError, ValueError, TypeError, gym.error.Error) as error:
        raise UsageError(f"--workload/--env-id/--env-kwarg: {error}") from None
    if config is None or config.actions != "step" or not isinstance(space, gym.spaces.Discrete):
        return
    for flag, sizes in (
        ("--start-actors", [config.start_actors]),
        ("--train-starts", config.train_starts),
        ("--start-search", config.start_search or ()),
    ):
        for size in sizes:
            try:
                start_index(int(space.n), size)
            except ValueError as error:
                raise UsageError(f"{flag}: {error}") from None


def ppo_config(args: argparse.Namespace) -> SchedulerPPOConfig:
    try:
        return SchedulerPPOConfig(
            learning_rate=args.lr,
            n_steps=args.n_steps,
            batch_size=args.batch_size,
            n_epochs=args.n_epochs,
            n_envs=args.n_envs,
            gamma=args.gamma,
            gae_lambda=args.gae_lambda,
            ent_coef=args.ent_coef,
            normalize_reward=args.normalize_reward,
            actions=args.actions,
            use_sde=args.sde,
            start_actors=args.start_actors,
            keep_prior=args.keep_prior,
            first_keep_prior=args.first_keep_prior,
            target_kl=args.target_kl,
            paired_seeds=args.paired_seeds,
            train_starts=tuple(args.train_starts),
            start_search=_start_search(args.start_search),
            start_search_seeds=args.start_search_seeds,
            check_moves=args.check_moves,
        )
    except (ValueError, TypeError) as error:
        raise UsageError(str(error)) from None


def setup_torch() -> None:
    import torch

    # The machines this runs on are small and shared; one thread is also the fastest for
    # networks of 64 units.
    torch.set_num_threads(1)
