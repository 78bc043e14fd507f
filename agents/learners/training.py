"""A synchronous training loop: the learner's weights go to the fleet, its rollouts come back.

:func:`train` runs rounds ``weights -> fleet.run_round -> learner.update`` until the mean
final episode return reaches the target, a round or step budget is spent, or a callback
asks to stop. It returns a :class:`TrainingHistory`, one :class:`RoundRecord` per round.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any

import gymnasium as gym
import numpy as np

from fleetgym.agents.learners.checkpoint_store import CheckpointConfig, CheckpointStore
from fleetgym.agents.learners.checks import check_seed
from fleetgym.agents.learners.run_checkpoints import (
    TrainCheckpoint,
    checkpoint_state,
    read_checkpoint,
    restore_run,
)
from fleetgym.agents.learners.run_config import check_config, check_folder_free, run_config
from fleetgym.agents.types import ActorFleet, Learner, RoundResult, UpdateStats
from fleetgym.agents.workloads import Workload, get_workload
from fleetgym.errors import CheckpointError, FleetError
from fleetgym.validation import check_bool, check_float, check_int

logger = logging.getLogger(__name__)


@dataclass
class RoundRecord:
    """What one training round did: its size, its time split and the learner's report.

    Args:
        round: The round's index, from 0.
        num_actors: Actors asked for this round (the schedule's value for it).
        steps: Env steps collected this round (the returned trajectories' lengths).
        total_steps: Env steps collected since :func:`train` started, this round's included.
        wall_s: Wall seconds since :func:`train` started, at the end of this round.
        round_wall_s: Wall seconds of this round: the fleet's rollouts and the update.
        fleet_wall_s: Wall seconds of the fleet's ``run_round`` alone.
        actor_time_max_s: The slowest actor's total time (startup + compute + transfer,
            seconds): the round's critical path (0.0 without timings).
        actor_time_mean_s: The mean of the actors' total times, seconds.
        failures: Faults the fleet reported this round (crashes, timeouts, errors; those
            it recovered from by a rerun included).
        stats: What the learner's update of this round reported.
    """

    round: int
    num_actors: int
    steps: int  # env steps collected this round
    total_steps: int  # env steps collected so far
    wall_s: float  # wall time since training started, at the end of this round
    round_wall_s: float  # fleet + learner wall time of this round
    fleet_wall_s: float
    actor_time_max_s: float  # slowest actor's total time (the round's critical path)
    actor_time_mean_s: float
    failures: int
    stats: UpdateStats

    @property
    def mean_return(self) -> float:
        return self.stats.mean_return

    def as_dict(self) -> dict[str, Any]:
        """A flat dict (stats fields prefixed by nothing), e.g. for CSV or JSON."""
        out = {k: v for k, v in asdict(self).items() if k != "stats"}
        out.update(asdict(self.stats))
        return out

    def to_dict(self) -> dict[str, Any]:
        """A nested dict of plain values (``stats`` a dict of its own), for a checkpoint."""
        return asdict(self)

    @classmethod
    def from_dict(cls, data: Any, stats_type: type[UpdateStats] = UpdateStats) -> RoundRecord:
        """The record :meth:`to_dict` wrote.

        Args:
            data: A dict with this class's fields, ``stats`` a dict of ``stats_type``'s.
            stats_type: The class of the record's stats (an :class:`UpdateStats` or a
                subclass such as a lag-tolerant learner's).

        Raises:
            ValueError: If ``data`` is not such a dict (missing or unknown fields, a
                value of the wrong type).
        """
        names = {f.name: f for f in dataclasses.fields(cls)}
        if not isinstance(data, dict) or set(data) != set(names):
            keys = sorted(data) if isinstance(data, dict) else type(data).__name__
            raise ValueError(f"round record: expected fields {sorted(names)}, actual {keys}")
        stats_fields = {f.name for f in dataclasses.fields(stats_type)}
        stats = data["stats"]
        if not isinstance(stats, dict) or not set(stats) <= stats_fields:
            keys = sorted(stats) if isinstance(stats, dict) else type(stats).__name__
            raise ValueError(
                f"round record stats: expected fields among {sorted(stats_fields)}, actual {keys}"
            )
        values: dict[str, Any] = {}
        for name in names:
            if name == "stats":
                continue
            value = data[name]
            kind = (
                int
                if name in ("round", "num_actors", "steps", "total_steps", "failures")
                else float
            )
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                raise ValueError(f"round record {name}: expected a number, actual {value!r}")
            if kind is int and not isinstance(value, int):
                raise ValueError(f"round record {name}: expected an int, actual {value!r}")
            values[name] = kind(value)
        try:
            record_stats = stats_type(**stats)
        except TypeError as exc:
            raise ValueError(f"round record stats: {exc}") from None
        return cls(stats=record_stats, **values)


@dataclass
class TrainingHistory:
    """All rounds of one :func:`train` call and why it stopped.

    Args:
        workload: The workload's name.
        target: The mean return that stops training (``inf``: never stops early).
        rounds: One :class:`RoundRecord` per round, in order.
        stop_reason: Why training stopped: ``"target"``, ``"max_steps"``,
            ``"max_rounds"`` or ``"callback"`` (``""`` until it stops).
    """

    workload: str
    target: float | None
    rounds: list[RoundRecord] = field(default_factory=list)
    stop_reason: str = ""

    @property
    def total_steps(self) -> int:
        return self.rounds[-1].total_steps if self.rounds else 0

    @property
    def wall_s(self) -> float:
        return self.rounds[-1].wall_s if self.rounds else 0.0

    @property
    def final_return(self) -> float:
        return self.rounds[-1].stats.mean_return if self.rounds else 0.0

    @property
    def reached_target(self) -> bool:
        return self.stop_reason == "target"

    def __len__(self) -> int:
        return len(self.rounds)

    def to_dict(self) -> dict[str, Any]:
        """Plain values: the fields, each round as :meth:`RoundRecord.to_dict`."""
        return {
            "workload": self.workload,
            "target": self.target,
            "rounds": [r.to_dict() for r in self.rounds],
            "stop_reason": self.stop_reason,
        }

    @classmethod
    def from_dict(cls, data: Any, stats_type: type[UpdateStats] = UpdateStats) -> TrainingHistory:
        """The history :meth:`to_dict` wrote.

        Args:
            data: A dict with ``workload``, ``target``, ``rounds`` and ``stop_reason``.
            stats_type: The class of the rounds' stats (see :meth:`RoundRecord.from_dict`).

        Raises:
            ValueError: If ``data`` or one of its rounds is not such a dict.
        """
        if not isinstance(data, dict) or set(data) != {
            "workload",
            "target",
            "rounds",
            "stop_reason",
        }:
            keys = sorted(data) if isinstance(data, dict) else type(data).__name__
            raise ValueError(
                f"history: expected keys ['rounds', 'stop_reason', 'target', 'workload'], actual {keys}"
            )
        rounds = data["rounds"]
        if not isinstance(rounds, list):
            raise ValueError(f"history rounds: expected a list, actual {type(rounds).__name__}")
        target = data["target"]
        if target is not None and (
            isinstance(target, bool) or not isinstance(target, (int, float))
        ):
            raise ValueError(f"history target: expected a number or None, actual {target!r}")
        return cls(
            workload=str(data["workload"]),
            target=None if target is None else float(target),
            rounds=[RoundRecord.from_dict(r, stats_type) for r in rounds],
            stop_reason=str(data["stop_reason"]),
        )


#: Most env steps per actor per round (a rollout allocates its arrays up front).
MAX_STEPS_PER_ACTOR = 10_000_000


def _positive_int(name: str, value: object, high: int | None = None) -> int:
    # check_int admits numpy integers (a schedule built with numpy returns them).
    return check_int(name, value, 1, high)


def _stats_type(name: str) -> type[UpdateStats] | None:
    """:class:`UpdateStats` or the (imported) subclass of that qualified name."""
    pending: list[type[UpdateStats]] = [UpdateStats]
    while pending:
        cls = pending.pop()
        if f"{cls.__module__}.{cls.__qualname__}" == name:
            return cls
        pending.extend(cls.__subclasses__())
    return None


def _qualified(cls: type) -> str:
    return f"{cls.__module__}.{cls.__qualname__}"


def _resumed_history(checkpoint: TrainCheckpoint, workload: str, target: float) -> TrainingHistory:
    """The rounds a checkpoint saved, as a :class:`TrainingHistory` of this call's target."""
    stats_type = _stats_type(checkpoint.stats_type)
    if stats_type is None:
        raise CheckpointError(
            f"{checkpoint.path}: stats_type: expected UpdateStats or a subclass of it, actual "
            f"{checkpoint.stats_type!r} (not imported)"
        )
    history = TrainingHistory(workload=workload, target=target)
    for i, data in enumerate(checkpoint.history):
        try:
            record = RoundRecord.from_dict(data, stats_type)
        except ValueError as exc:
            raise CheckpointError(f"{checkpoint.path}: history[{i}]: {exc}") from None
        if record.round != i:
            raise CheckpointError(
                f"{checkpoint.path}: history[{i}]: expected round {i}, actual {record.round}"
            )
        history.rounds.append(record)
    if history.total_steps != checkpoint.counters["total_steps"]:
        raise CheckpointError(
            f"{checkpoint.path}: counters total_steps: expected the history's "
            f"{history.total_steps}, actual {checkpoint.counters['total_steps']}"
        )
    return history


def _stop_reason(record: RoundRecord, episodes: int, target: float, max_steps: int | None) -> str:
    """Why training stops after ``record`` (``""``: it goes on)."""
    # Before the first completed episode the learner's mean return is a placeholder.
    if episodes > 0 and record.stats.mean_return >= target:
        return "target"
    if max_steps is not None and record.total_steps >= max_steps:
        return "max_steps"
    return ""


def train(
    workload: Workload | str,
    fleet: ActorFleet,
    learner: Learner,
    num_actors: int | Callable[[int], int],
    max_rounds: int,
    target: float | None = None,
    callback: Callable[[RoundRecord], bool | None] | None = None,
    *,
    steps_per_actor: int | None = None,
    max_steps: int | None = None,
    allow_partial: bool = True,
    checkpoints: CheckpointConfig | None = None,
    resume: str | os.PathLike[str] | None = None,
) -> TrainingHistory:
    """Train ``learner`` with ``fleet`` in synchronous rounds.

    Each round sends ``learner.get_weights()`` to ``num_actors`` actors for
    ``steps_per_actor`` steps each (the workload's ``rollout_steps`` by default), then
    updates the learner with the returned trajectories.

    With ``checkpoints``, the run is saved at round boundaries (see
    :class:`~fleetgym.agents.learners.checkpoint_store.CheckpointConfig`); with ``resume``
    it continues a saved run: a resumed :class:`~fleetgym.agents.fleet.InProcessFleet` run
    is bit-identical to an uninterrupted one (learner, actors' envs and random streams
    are all saved); with a fleet that cannot save its actors (process, Ray) the actors'
    episodes restart, so it is not (see docs/explanation/learner.md).

    Args:
        workload: The workload (its name, rollout length and default target).
        fleet: Any :class:`~fleetgym.agents.types.ActorFleet`.
        learner: Any :class:`~fleetgym.agents.types.Learner`.
        num_actors: Actors per round, or a function ``round -> actors`` (a schedule).
        max_rounds: Round budget (a resumed run's rounds before the checkpoint count).
        target: Stop when the learner's mean return reaches it (the workload's
            ``target_return`` if ``None``; pass ``float('inf')`` to never stop early).
        callback: Called with each :class:`RoundRecord`; returning ``True`` stops training.
        steps_per_actor: Env steps per actor per round.
        max_steps: Stop once this many env steps were collected.
        allow_partial: Update on the trajectories a round did return when some actors
            failed for good (otherwise raise :class:`~fleetgym.errors.FleetError`).
        checkpoints: Save the run periodically into a folder (a
            :class:`~fleetgym.agents.learners.checkpoint_store.CheckpointConfig`): at the
            end of a round, once its ``every_rounds`` rounds or ``every_minutes`` minutes
            have passed since the last checkpoint; ``None`` (the default): never. Needs a
            learner with ``state()`` (a
            :class:`~fleetgym.agents.learners.ppo.PPOLearner`, or a
            :class:`~fleetgym.agents.learners.data_parallel.group.DataParallelPPO`: rank
            0's state, every rank's shuffle generator, restored into every rank).
        resume: Continue the run saved in this checkpoint file, or in the newest
            checkpoint of this folder (``str`` or ``os.PathLike``): the learner, the
            fleet's actors, the counters and the history are restored and training goes on
            with the next round. The checkpoint must be of this run: the same workload,
            seeds, ``num_actors``, ``steps_per_actor``, fleet class, learner class,
            hyperparameters and (data-parallel) ``world_size`` (``max_rounds``,
            ``target`` and ``max_steps`` may differ).
            Everything is checked before any round; ``fleet`` must not have run a round.
            With ``checkpoints`` too, their folder must be the resumed checkpoint's, or
            hold no checkpoint (as for a fresh run: two runs' checkpoints never mix).

    Example:
        >>> # with a fleet from fleetgym.agents.fleet and a PPOLearner:
        >>> # history = train("CartPole-v1", fleet, learner, num_actors=8, max_rounds=100)
        >>> # history.reached_target, history.total_steps

    Returns:
        The :class:`TrainingHistory` (resumed: every round, those before the checkpoint
        included).

    Raises:
        ValueError: For non-positive budgets or actor counts, more actors than the fleet
            has, more than 10,000,000 steps per actor, or a NaN target.
        TypeError: For a non-integer budget, a target that is not a number, a callback
            that is not callable, ``checkpoints`` that is not a ``CheckpointConfig``,
            ``resume`` that is not a path, or either with a learner without ``state()``.
        CheckpointError: Naming the file, if ``resume`` holds no checkpoint, a truncated
            or corrupt one, one of a newer fleetgym, or one of another run (naming the
            field that differs, with both values), or the ``checkpoints`` folder holds
            another run's checkpoints; before any round.
        FleetError: If a round returns no trajectory (the last failure's message says
            why, e.g. an env that emitted NaN), or fewer than asked with
            ``allow_partial=False``.
        ValueError: If an update diverged (the learner is rolled back, see
            :meth:`~fleetgym.agents.learners.ppo.PPOLearner.update`).
    """
    wl = get_workload(workload)
    max_rounds = _positive_int("max_rounds", max_rounds)
    steps = _positive_int(
        "steps_per_actor",
        wl.rollout_steps if steps_per_actor is None else steps_per_actor,
        MAX_STEPS_PER_ACTOR,
    )
    if max_steps is not None:
        _positive_int("max_steps", max_steps)
    if target is None:
        target = wl.target_return
    # NaN is rejected: no return would ever reach it, nor fail to; inf never stops early.
    target = check_float("target", target, allow_inf=True)
    if callback is not None and not callable(callback):
        raise TypeError(f"callback: expected a callable or None, actual {type(callback).__name__}")
    allow_partial = check_bool("allow_partial", allow_partial)
    if checkpoints is not None and not isinstance(checkpoints, CheckpointConfig):
        raise TypeError(
            f"checkpoints: expected a CheckpointConfig or None, actual {type(checkpoints).__name__}"
        )
    if resume is not None and (
        isinstance(resume, bool) or not isinstance(resume, (str, os.PathLike))
    ):
        raise TypeError(
            f"resume: expected a str, an os.PathLike or None, actual {type(resume).__name__}"
        )
    if (checkpoints is not None or resume is not None) and not callable(
        getattr(learner, "state", None)
    ):
        raise TypeError(
            "checkpoints, resume: expected a learner with state() (a PPOLearner or a "
            "DataParallelPPO), actual "
            f"{type(learner).__name__}"
        )
    if callable(num_actors):
        schedule = num_actors
    else:
        fixed = _positive_int("num_actors", num_actors)

        def schedule(_: int) -> int:
            return fixed

    store = None if checkpoints is None else CheckpointStore(checkpoints.folder, checkpoints.keep)
    config: dict[str, Any] = {}
    if checkpoints is not None or resume is not None:
        config = run_config(
            wl.name,
            learner,
            getattr(fleet, "seed", None),
            type(fleet).__name__,
            "schedule" if callable(num_actors) else fixed,
            steps,
            max_rounds,
            target,
            max_steps,
        )
    history = TrainingHistory(workload=wl.name, target=target)
    total_steps = 0
    episodes = 0
    first = 0
    checkpoint = None if resume is None else read_checkpoint(resume)
    if store is not None:
        check_folder_free(store, None if checkpoint is None else checkpoint.path)
    if checkpoint is not None:
        check_config(checkpoint.path, checkpoint.config, config)
        history = _resumed_history(checkpoint, wl.name, target)
        restored = restore_run(checkpoint, learner, fleet)
        total_steps = checkpoint.counters["total_steps"]
        episodes = checkpoint.counters["episodes"]
        first = checkpoint.rounds
        logger.info("resumed from %s after %d rounds", checkpoint.path, first)
        if not restored:
            logger.warning("%s: %s", checkpoint.path, checkpoint.actors_note)
        if history.rounds:
            history.stop_reason = _stop_reason(history.rounds[-1], episodes, target, max_steps)
            if history.stop_reason:
                return history
    # A resumed run's wall times go on from the checkpoint's (the downtime left out).
    start = time.perf_counter() - history.wall_s
    since_rounds, since = 0, time.monotonic()
    for k in range(first, max_rounds):
        actors = _positive_int(f"num_actors(round {k})", schedule(k))
        if actors > fleet.max_actors:
            raise ValueError(
                f"num_actors: expected at most the fleet's max_actors={fleet.max_actors}, actual {actors}"
            )
        round_start = time.perf_counter()
        result: RoundResult = fleet.run_round(
            learner.get_weights(), actors, steps, policy_version=learner.policy_version
        )
        fleet_wall = time.perf_counter() - round_start
        if not result.trajectories:
            # The failures say why (an env that emitted NaN, an actor that crashed).
            why = "".join(
                f"; actor {f.actor_id} {f.kind}: {(f.message.splitlines() or [''])[-1][:200]}"
                for f in result.failures[-1:]
            )
            raise FleetError(
                f"round {k}: expected trajectories from {actors} actors, actual none{why}"
            )
        if not result.complete and not allow_partial:
            raise FleetError(
                f"round {k}: expected {actors} trajectories, actual {len(result.trajectories)}"
            )
        stats = learner.update(result.trajectories)
        round_steps = sum(len(t) for t in result.trajectories)
        total_steps += round_steps
        now = time.perf_counter()
        actor_totals = [t.total_s for t in result.timings] or [0.0]
        record = RoundRecord(
            round=k,
            num_actors=actors,
            steps=round_steps,
            total_steps=total_steps,
            wall_s=now - start,
            round_wall_s=now - round_start,
            fleet_wall_s=fleet_wall,
            actor_time_max_s=max(actor_totals),
            actor_time_mean_s=sum(actor_totals) / len(actor_totals),
            failures=len(result.failures),
            stats=stats,
        )
        history.rounds.append(record)
        logger.debug(
            "round %d: %d actors, %d steps, mean return %.1f",
            k,
            actors,
            total_steps,
            stats.mean_return,
        )
        episodes += stats.episodes_completed
        since_rounds += 1
        if store is not None and checkpoints is not None:
            if checkpoints.due(since_rounds, time.monotonic() - since):
                state, actor_bytes = checkpoint_state(
                    config,
                    {
                        "rounds": k + 1,
                        "round": k,
                        "total_steps": total_steps,
                        "episodes": episodes,
                        "policy_version": int(learner.policy_version),
                    },
                    [r.to_dict() for r in history.rounds],
                    _qualified(type(stats)),
                    learner,
                    fleet,
                )
                path = store.write(k + 1, state, actor_bytes)
                logger.debug("round %d: wrote checkpoint %s", k, path)
                since_rounds, since = 0, time.monotonic()
        if callback is not None and callback(record):
            history.stop_reason = "callback"
            break
        history.stop_reason = _stop_reason(record, episodes, target, max_steps)
        if history.stop_reason:
            break
    else:
        history.stop_reason = "max_rounds"
    return history


def evaluate_policy(
    policy: Any,
    workload: Workload | str,
    episodes: int = 10,
    seed: int = 0,
    deterministic: bool = True,
    max_steps_per_episode: int | None = None,
) -> list[float]:
    """Returns of ``episodes`` full episodes of ``policy`` on a fresh env of ``workload``.

    Gaussian actions are clipped to the action bounds, as the actors do.

    Args:
        policy: An :class:`~fleetgym.agents.policies.ActorCriticPolicy`.
        workload: The workload (or its name) whose env to play.
        episodes: How many episodes (>= 1).
        seed: Seeds the first reset (later resets continue the env's RNG) and the sampling.
        deterministic: Take the mode of the action distribution.
        max_steps_per_episode: Cut an episode after this many steps (``None``: the env's
            own time limit).

    Example:
        >>> from fleetgym.agents.workloads import get_workload
        >>> returns = evaluate_policy(get_workload("CartPole-v1").make_policy(), "CartPole-v1", 2)
        >>> len(returns)
        2

    Returns:
        One undiscounted return per episode.

    Raises:
        TypeError: If a count or the seed is not an int, or ``deterministic`` not a bool.
        ValueError: If ``episodes`` or ``max_steps_per_episode`` < 1, or ``seed`` is not
            in ``[0, 2**63 - 1]``.
    """
    wl = get_workload(workload)
    episodes = _positive_int("episodes", episodes)
    seed = check_seed("seed", seed)
    deterministic = check_bool("deterministic", deterministic)
    if max_steps_per_episode is not None:
        max_steps_per_episode = _positive_int("max_steps_per_episode", max_steps_per_episode)
    env = wl.make_env(seed=seed)
    rng = np.random.default_rng(seed)
    space = env.action_space
    returns: list[float] = []
    try:
        obs, _ = env.reset(seed=seed)
        for _ in range(episodes):
            total, steps, done = 0.0, 0, False
            while not done:
                action = policy.act(np.asarray(obs)[None], deterministic=deterministic, rng=rng)[0][
                    0
                ]
                if isinstance(space, gym.spaces.Box):
                    env_action: Any = np.clip(action, space.low, space.high)
                else:
                    env_action = int(action)
                obs, reward, terminated, truncated, _ = env.step(env_action)
                total += float(reward)
                steps += 1
                done = bool(terminated or truncated) or (
                    max_steps_per_episode is not None and steps >= max_steps_per_episode
                )
            returns.append(total)
            obs, _ = env.reset()
    finally:
        env.close()
    return returns
