"""Real env steps to a target with and without imagination: the runs behind docs/explanation/imagination.md.

Each *arm* is one learner configuration trained by the synchronous fleet loop with the
in-process backend (:func:`fleetgym.agents.learners.training.train`); the imagination arm
is the same :class:`~fleetgym.agents.learners.ppo.PPOLearner` with ``imagination=``.
Every ``eval_every`` real env steps the current policy plays ``eval_episodes`` fresh
episodes with sampled actions (the policy as trained, on an env seeded apart from the
actors'); an arm reaches the target when the evaluation mean return stays at or above it
for :data:`TARGET_STREAK` (three) evaluations in a row, and its steps to target are the
real steps at the last of them (when the run knows it has reached it). Evaluation steps
are not training data and are not counted. A trivial policy's score (uniform random
actions) is measured on the same evaluation seeds.

Each env's ``ppo+replay`` arm is the matched no-model control of its ``ppo+imagination``: the same
real steps per round and the same number of samples per update (so the same gradient
steps per real step), its extra samples replayed from earlier real trajectories instead
of imagined in a model (``source="replay"`` of
:class:`~fleetgym.agents.world_model.ImaginationConfig`).

CartPole's ``ppo+epochs`` arm is the stronger no-model control: the same real steps per
round as ``ppo+imagination`` and only fresh real data, with the PPO epochs raised until
its gradient steps per real step equal the imagination arm's
(:func:`matched_epochs`, computed from both arms' settings by
:func:`gradient_steps_per_update`).

Measuring on evaluations rather than on the training window matters here: the learner's
``mean_return`` averages the last 100 *completed training episodes*, and 100 CartPole
episodes at 475 are 47,500 real steps by themselves, a floor no learner can beat
however fast it learns.
"""

from __future__ import annotations

import dataclasses
import math
import time
from dataclasses import dataclass, field
from typing import Any

import gymnasium as gym
import numpy as np

__all__ = [
    "ENVS",
    "TARGET_STREAK",
    "Arm",
    "EnvSetup",
    "RunResult",
    "gradient_steps_per_update",
    "matched_epochs",
    "random_score",
    "run_arm",
    "steps_to_target",
]

#: Evaluations in a row at or above the target that count as reaching it.
TARGET_STREAK = 3


def steps_to_target(
    curve: list[tuple[int, float]], target: float, streak: int = TARGET_STREAK
) -> int | None:
    """The real steps at the evaluation that completes the first run of ``streak``
    evaluations in a row at or above ``target`` (``None``: no such run).

    Example:
        >>> steps_to_target([(1, 500), (2, 400), (3, 480), (4, 490), (5, 476)], 475)
        5
    """
    run = 0
    for steps, score in curve:
        run = run + 1 if score >= target else 0
        if run >= streak:
            return int(steps)
    return None


@dataclass(frozen=True)
class Arm:
    """One learner configuration: real steps per actor per round, and its imagination."""

    name: str
    steps_per_actor: int
    imagination: dict[str, Any] | None = None
    overrides: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class EnvSetup:
    """An env of the study: its workload, target, budget and arms."""

    workload: str
    target: float
    budget: int
    eval_every: int
    eval_episodes: int
    actors: int
    arms: tuple[Arm, ...]
    #: Also report the evaluation return reached at these real-step budgets.
    checkpoints: tuple[int, ...] = ()


def _minibatches(samples: int, minibatch_size: int) -> int:
    """Gradient steps of one PPO epoch over ``samples`` (as ``PPOLearner`` runs it: shuffled
    minibatches of ``minibatch_size``, a 1-sample tail skipped)."""
    mb = min(minibatch_size, samples)
    steps = math.ceil(samples / mb)
    return steps - 1 if samples >= 2 and samples % mb == 1 else steps


def gradient_steps_per_update(
    workload: str, actors: int, arm: Arm, horizon: int | None = None
) -> tuple[int, int]:
    """``(gradient steps, real samples)`` of one of ``arm``'s learner updates once its
    imagination (or replay) is running, from the arm's settings.

    An update trains ``epochs`` passes of minibatches on the round's ``actors *
    steps_per_actor`` real samples plus ``share / (1 - share)`` times that imagined (or
    replayed), capped at ``MAX_IMAGINED_MULTIPLE`` (share 1: the imagined ones alone),
    and each further pass of ``updates_per_round`` on as many freshly imagined ones.
    Before the model's first fit (``warmup``) an update trains on the real samples alone.

    With ``horizon`` (the one an update chose; ``None``: the nominal count) the imagined
    samples are what the model's rollouts make of it: ``B = ceil(n / horizon)`` episodes
    of ``ceil(n / B)`` steps, which rounds ``n`` up when ``horizon`` does not divide it
    (``n = 768`` at horizon 30: 26 episodes of 30 steps, 780 samples, so a fifth
    minibatch of 12 on CartPole).

    Raises:
        ValueError: If the arm's share is not a fixed number (``"auto"`` or a callable
            chooses it from measured error, so no count follows from the settings).
    """
    from fleetgym.agents.workloads import get_workload
    from fleetgym.agents.world_model.config import MAX_IMAGINED_MULTIPLE, ImaginationConfig

    hp = get_workload(workload).with_overrides(**arm.overrides)
    real = actors * arm.steps_per_actor
    if arm.imagination is None:
        return hp.epochs * _minibatches(real, hp.minibatch_size), real
    config = ImaginationConfig(**arm.imagination)
    if isinstance(config.share, str) or callable(config.share):
        raise ValueError(
            f"share: expected a fixed number to count gradient steps, actual {config.share!r}"
        )
    s = float(config.share)
    multiple = MAX_IMAGINED_MULTIPLE if s >= 1.0 else min(MAX_IMAGINED_MULTIPLE, s / (1.0 - s))
    imagined = int(round(real * multiple))
    if horizon is not None and config.source == "model" and imagined > 0:
        episodes = max(1, math.ceil(imagined / horizon))
        imagined = episodes * math.ceil(imagined / episodes)
    first = imagined + (real if s < 1.0 else 0)
    per_pass = _minibatches(first, hp.minibatch_size) + (
        config.updates_per_round - 1
    ) * _minibatches(imagined, hp.minibatch_size)
    return hp.epochs * per_pass, real


def matched_epochs(workload: str, actors: int, arm: Arm, steps_per_actor: int) -> int:
    """PPO epochs at which a no-model arm of ``steps_per_actor`` real steps per actor per
    round makes exactly ``arm``'s gradient steps per real step.

    Raises:
        ValueError: If no whole number of epochs matches exactly.
    """
    from fleetgym.agents.workloads import get_workload

    steps, real = gradient_steps_per_update(workload, actors, arm)
    own = actors * steps_per_actor
    per_epoch = _minibatches(own, get_workload(workload).minibatch_size)
    # steps / real == epochs * per_epoch / own
    epochs, rest = divmod(steps * own, real * per_epoch)
    if rest or epochs < 1:
        raise ValueError(
            f"steps_per_actor: no whole number of epochs matches {steps} gradient steps "
            f"per {real} real steps with {per_epoch} minibatches per epoch of {own}"
        )
    return epochs


def doorkey() -> gym.Env:
    """``MiniGrid-DoorKey-5x5-v0`` as a flat observation (its image, flattened) for the MLP."""
    import minigrid  # noqa: F401  (registers the MiniGrid IDs)
    from gymnasium.wrappers import FlattenObservation
    from minigrid.wrappers import ImgObsWrapper

    return FlattenObservation(ImgObsWrapper(gym.make("MiniGrid-DoorKey-5x5-v0")))


_CARTPOLE_MODEL = {"share": 0.75, "horizon": "auto"}
#: ppo+imagination's samples per update, the extra ones replayed from real data.
_CARTPOLE_REPLAY = {"share": 0.75, "source": "replay"}
_CARTPOLE_IMAGINATION = Arm("ppo+imagination", 32, _CARTPOLE_MODEL)
#: No model, fresh real data only: ppo+imagination's real rounds and gradient steps per
#: real step (10 epochs x 4 minibatches of 256 on 256 + 768 samples = 40 per 256 real
#: steps; 40 epochs x 1 minibatch on 256 real samples).
_CARTPOLE_EPOCHS = Arm(
    "ppo+epochs",
    32,
    overrides={"epochs": matched_epochs("CartPole-v1", 8, _CARTPOLE_IMAGINATION, 32)},
)

ENVS: dict[str, EnvSetup] = {
    "CartPole-v1": EnvSetup(
        workload="CartPole-v1",
        target=475.0,
        budget=100_000,
        eval_every=1024,
        eval_episodes=20,
        actors=8,
        arms=(
            Arm("ppo", 128),
            Arm("ppo-small-rounds", 32),
            _CARTPOLE_IMAGINATION,
            Arm("ppo+replay", 32, _CARTPOLE_REPLAY),
            _CARTPOLE_EPOCHS,
            Arm("ppo+imagination-7x", 16, {"share": 0.875, "horizon": "auto"}),
        ),
    ),
    "Hopper-v5": EnvSetup(
        workload="Hopper-v5",
        target=2000.0,
        budget=300_000,
        eval_every=10_240,
        eval_episodes=5,
        actors=8,
        arms=(
            Arm("ppo", 256),
            Arm(
                "ppo+imagination",
                64,
                {
                    "share": 0.75,
                    "horizon": "auto",
                    "max_horizon": 15,
                    "hidden_sizes": (200, 200, 200),
                    "ensemble_size": 5,
                    "elites": 3,
                    "warmup": 2048,
                    "max_fit_updates": 100,
                },
            ),
            Arm("ppo+replay", 64, {"share": 0.75, "source": "replay", "warmup": 2048}),
        ),
        checkpoints=(100_000, 300_000),
    ),
    "MiniGrid-DoorKey-5x5-v0": EnvSetup(
        workload="fleetgym.experiments.imagination.study:doorkey",
        target=0.8,
        budget=200_000,
        eval_every=4096,
        eval_episodes=20,
        actors=8,
        arms=(
            Arm("ppo", 128),
            Arm(
                "ppo+imagination",
                32,
                {"share": 0.75, "horizon": "auto", "reward": "success", "max_horizon": 10},
            ),
            Arm("ppo+replay", 32, {"share": 0.75, "source": "replay"}),
        ),
    ),
}


@dataclass
class RunResult:
    """One (env, arm, seed) run."""

    env: str
    arm: str
    seed: int
    steps_to_target: int | None
    real_steps: int
    updates: int
    curve: list[tuple[int, float]] = field(default_factory=list)
    at_checkpoints: dict[str, float] = field(default_factory=dict)
    wall_s: float = 0.0
    cpu_s: float = 0.0
    model_fit_s: float = 0.0
    imagine_s: float = 0.0
    horizons: list[tuple[int, int]] = field(default_factory=list)
    shares: list[tuple[int, float]] = field(default_factory=list)
    #: Measured h-step error on each update's new real data: (steps, [e(1), e(2), ...]).
    errors: list[tuple[int, list[float]]] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def random_score(setup: EnvSetup, episodes: int, seed: int) -> float:
    """Mean return of uniform random actions on the evaluation seeds."""
    from fleetgym.agents.workloads import get_workload

    env = get_workload(setup.workload).make_env(seed=seed)
    total = 0.0
    try:
        env.reset(seed=seed + 10_000)
        for _ in range(episodes):
            done = False
            while not done:
                _, r, term, trunc, _ = env.step(env.action_space.sample())
                total += float(r)
                done = bool(term or trunc)
            env.reset()
    finally:
        env.close()
    return total / episodes


def run_arm(env_name: str, setup: EnvSetup, arm: Arm, seed: int, progress: Any = None) -> RunResult:
    """Train one arm for one seed until the target (on evaluations) or the budget."""
    import torch

    from fleetgym.agents.fleet import make_fleet
    from fleetgym.agents.learners.ppo import PPOLearner
    from fleetgym.agents.learners.training import evaluate_policy, train
    from fleetgym.agents.workloads import get_workload

    torch.set_num_threads(1)
    workload = get_workload(setup.workload)
    imagination = None if arm.imagination is None else {**arm.imagination, "seed": seed}
    learner = PPOLearner(workload, seed=seed, imagination=imagination, **arm.overrides)
    fleet = make_fleet(workload, backend="inprocess", max_actors=setup.actors, seed=seed)
    result = RunResult(env_name, arm.name, seed, None, 0, 0)
    next_eval = setup.eval_every
    checkpoints = list(setup.checkpoints)
    started, cpu0 = time.perf_counter(), time.process_time()

    def evaluate(steps: int) -> float:
        returns = evaluate_policy(
            learner.policy, workload, setup.eval_episodes, seed=seed + 10_000, deterministic=False
        )
        score = float(np.mean(returns))
        result.curve.append((steps, score))
        return score

    def callback(record: Any) -> bool:
        nonlocal next_eval
        steps = record.total_steps
        result.real_steps, result.updates = steps, record.round + 1
        im = learner.imagination.last if learner.imagination is not None else None
        if im is not None:
            result.model_fit_s += im.fit_wall_s
            result.imagine_s += im.imagine_wall_s
            result.horizons.append((steps, im.horizon))
            result.shares.append((steps, im.imagined_share))
            if im.error:
                result.errors.append((steps, [round(e, 9) for e in im.error]))
        if progress is not None:
            progress(result)
        if steps < next_eval and steps < setup.budget:
            return False
        while next_eval <= steps:
            next_eval += setup.eval_every
        score = evaluate(steps)
        while checkpoints and steps >= checkpoints[0]:
            result.at_checkpoints[str(checkpoints.pop(0))] = score
        if result.steps_to_target is None:
            result.steps_to_target = steps_to_target(result.curve, setup.target)
            if result.steps_to_target is not None:
                return not setup.checkpoints  # with checkpoints, go on to the budget
        return steps >= setup.budget

    try:
        train(
            workload,
            fleet,
            learner,
            setup.actors,
            10_000_000,
            target=math.inf,
            callback=callback,
            steps_per_actor=arm.steps_per_actor,
            max_steps=setup.budget,
        )
    finally:
        fleet.close()
    result.wall_s = time.perf_counter() - started
    result.cpu_s = time.process_time() - cpu0
    return result
