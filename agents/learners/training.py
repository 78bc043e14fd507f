"""A synchronous training loop: the learner's weights go to the fleet, its rollouts come back.

:func:`train` runs rounds ``weights -> fleet.run_round -> learner.update`` until the mean
final episode return reaches the target, a round or step budget is spent, or a callback
asks to stop. It returns a :class:`TrainingHistory`, one :class:`RoundRecord` per round.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any

import gymnasium as gym
import numpy as np

from fleetgym.agents.learners.checks import check_seed
from fleetgym.agents.types import ActorFleet, Learner, RoundResult, UpdateStats
from fleetgym.agents.workloads import Workload, get_workload
from fleetgym.errors import FleetError
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


#: Most env steps per actor per round (a rollout allocates its arrays up front).
MAX_STEPS_PER_ACTOR = 10_000_000


def _positive_int(name: str, value: object, high: int | None = None) -> int:
    # check_int admits numpy integers (a schedule built with numpy returns them).
    return check_int(name, value, 1, high)


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
) -> TrainingHistory:
    """Train ``learner`` with ``fleet`` in synchronous rounds.

    Each round sends ``learner.get_weights()`` to ``num_actors`` actors for
    ``steps_per_actor`` steps each (the workload's ``rollout_steps`` by default), then
    updates the learner with the returned trajectories.

    Args:
        workload: The workload (its name, rollout length and default target).
        fleet: Any :class:`~fleetgym.agents.types.ActorFleet`.
        learner: Any :class:`~fleetgym.agents.types.Learner`.
        num_actors: Actors per round, or a function ``round -> actors`` (a schedule).
        max_rounds: Round budget.
        target: Stop when the learner's mean return reaches it (the workload's
            ``target_return`` if ``None``; pass ``float('inf')`` to never stop early).
        callback: Called with each :class:`RoundRecord`; returning ``True`` stops training.
        steps_per_actor: Env steps per actor per round.
        max_steps: Stop once this many env steps were collected.
        allow_partial: Update on the trajectories a round did return when some actors
            failed for good (otherwise raise :class:`~fleetgym.errors.FleetError`).

    Example:
        >>> # with a fleet from fleetgym.agents.fleet and a PPOLearner:
        >>> # history = train("CartPole-v1", fleet, learner, num_actors=8, max_rounds=100)
        >>> # history.reached_target, history.total_steps

    Returns:
        The :class:`TrainingHistory`.

    Raises:
        ValueError: For non-positive budgets or actor counts, more actors than the fleet
            has, more than 10,000,000 steps per actor, or a NaN target.
        TypeError: For a non-integer budget, a target that is not a number or a callback
            that is not callable.
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
    if callable(num_actors):
        schedule = num_actors
    else:
        fixed = _positive_int("num_actors", num_actors)

        def schedule(_: int) -> int:
            return fixed

    history = TrainingHistory(workload=wl.name, target=target)
    start = time.perf_counter()
    total_steps = 0
    episodes = 0
    for k in range(max_rounds):
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
        if callback is not None and callback(record):
            history.stop_reason = "callback"
            break
        episodes += stats.episodes_completed
        # Before the first completed episode the learner's mean return is a placeholder.
        if episodes > 0 and stats.mean_return >= target:
            history.stop_reason = "target"
            break
        if max_steps is not None and total_steps >= max_steps:
            history.stop_reason = "max_steps"
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
