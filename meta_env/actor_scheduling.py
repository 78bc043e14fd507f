"""ActorSchedulingEnv: a whole distributed on-policy training run as a 7-dim MDP.

One episode is one training run of a workload (CartPole, MuJoCo, Atari) by an actor fleet
and a PPO learner (:mod:`fleetgym.agents`); one step is one round ``k``: the action ``a``
asks for ``I_k = a + 1`` actors, each collects ``steps_per_actor`` steps with the current
policy, the learner updates, and the round's time and cost are accounted (MinionsRL's
actor scheduling problem):

* round time ``P_k = P^l_k + max_i P^a_k,i`` (the slowest actor gates the round);
* round cost ``C_k`` from :class:`~fleetgym.meta_env.cost_model.RoundAccountant`
  (serverless by default, ``billing="server"`` for the VM cluster);
* reward ``r_k = -beta * P_k - cost_weight * C_k``; on the last round, if the target ``J``
  was not reached or the budget ran out, plus ``min(0, max_k R_bar_k - J) / penalty_scale``
  (``cost_weight=0, penalty_scale=1`` is the paper's form), where a round that overspends
  the budget does not count towards ``max_k R_bar_k`` (reaching ``J`` in it earns nothing);
* terminated when ``R_bar_k >= J`` or the budget is spent, truncated after ``K`` rounds.

Observation (``Box(7,)``): the state after round ``k`` (all zeros but the budget before
the first round) laid out and normalised as :mod:`fleetgym.agents.schedulers.observation`
defines it (``normalize_obs=True``, the default; ``info["raw_state"]`` holds the raw
vector). Its time entries are scaled by reference times: the modelled learner time of a
round of ``max_actors`` actors and the modelled time of one actor's rollout (cold starts
unless containers are kept warm).

Timing is measured on this machine (``timing="measured"``) or modelled from the seed
(``"modeled"``); either way, what this machine lacks -- cold starts, transfers, a faster
learner device -- is modelled, and pre-warming keeps containers warm between rounds (see
the class's arguments). Every scale, price and time is range-checked, so that rewards,
costs and observations stay finite.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Mapping
from typing import Any

import gymnasium as gym
import numpy as np

from fleetgym.agents.fleet import make_fleet
from fleetgym.agents.schedulers.observation import (
    OBS_ACTOR_TIME,
    OBS_BUDGET,
    OBS_CLIP,
    OBS_KL,
    OBS_LEARNER_TIME,
    OBS_LOSS,
    OBS_RETURN,
    OBS_ROUND,
    OBSERVATION_FIELDS,
    normalize_observation,
    raw_observation,
)
from fleetgym.agents.types import ActorFleet, Learner, RoundResult, UpdateStats
from fleetgym.agents.workloads import get_workload
from fleetgym.extras import require
from fleetgym.meta_env.cost_model import RoundAccountant, RoundBill
from fleetgym.meta_env.presets import (
    compute_model_from,
    pricing_from,
    scheduling_defaults,
    time_model_from,
)
from fleetgym.meta_env.scheduling_config import (
    CostConfig,
    EpisodeConfig,
    FleetConfig,
    TrainingConfig,
)
from fleetgym.meta_env.time_model import ComputeCostModel, trajectory_nbytes, weights_nbytes
from fleetgym.validation import check_bool, check_choice, quote

__all__ = ["TIMINGS", "ActorSchedulingEnv"]

#: How the compute of a round is obtained: measured on this machine, or modelled.
TIMINGS = ("measured", "modeled")

FleetFactory = Callable[..., ActorFleet]
LearnerFactory = Callable[..., Learner]


def _default_learner_factory(workload: Any, *, seed: int, **overrides: Any) -> Any:
    from fleetgym.agents.learners.ppo import PPOLearner  # torch: imported only when a run starts

    return PPOLearner(workload, seed=seed, **overrides)


def _check_callable(name: str, fn: Any, default: Callable[..., Any]) -> Callable[..., Any]:
    if fn is None:
        return default
    if not callable(fn):
        raise TypeError(f"{name}: expected a callable, actual {type(fn).__name__}")
    return fn


class ActorSchedulingEnv(gym.Env[np.ndarray, np.int64]):
    """A whole on-policy training run as an MDP whose action is the next round's fleet size.

    Models MinionsRL's actor scheduling problem: each :meth:`step` really runs one round
    of the workload's training (``I_k`` actor rollouts on the fleet, one PPO update) and
    accounts its time (measured or modelled compute + cold starts + transfers) and its
    cost (serverless per-resource-second billing, or a VM cluster) through a
    :class:`~fleetgym.meta_env.cost_model.RoundAccountant`. See the module docstring for
    the observation, reward and termination.

    Args:
        workload: a workload name (``fleetgym.agents.workloads``), any registered
            Gymnasium ID, an ``EnvSpec`` or a Workload
            (:func:`~fleetgym.agents.workloads.get_workload`); with modelled timing, a
            workload without a shipped compute model is calibrated once (cached, see
            :mod:`~fleetgym.meta_env.calibration`).
        preset: ``"fast"`` (short rollouts, reachable target) or ``"paper"`` defaults
            (:func:`~fleetgym.meta_env.presets.scheduling_defaults`), for every config
            field left None.
        timing: ``"measured"``: each actor's compute as the fleet reports it (its CPU
            time when the backend has it, i.e. the rollout on a core of its own, else its
            wall time) and the learner's measured update time; ``"modeled"``: both from
            ``training.compute`` (seeded stragglers), so an episode is a pure function of
            its seed.
        training: a :class:`~fleetgym.meta_env.scheduling_config.TrainingConfig` or a dict
            of its fields (rollout length, modelled compute, PPO overrides); None: defaults.
        fleet: a :class:`~fleetgym.meta_env.scheduling_config.FleetConfig` or a dict of its
            fields (``max_actors``, backend, inference, options); None: defaults.
        costs: a :class:`~fleetgym.meta_env.scheduling_config.CostConfig` or a dict of its
            fields (pricing, billing, time model); None: defaults.
        episode: an :class:`~fleetgym.meta_env.scheduling_config.EpisodeConfig` or a dict
            of its fields (J, K, budget, reward scales); None: defaults.
        normalize_obs: normalise the observation (see the module docstring).
        fleet_factory: ``f(workload, max_actors=, seed=, **fleet_kwargs) -> ActorFleet``;
            None: :func:`~fleetgym.agents.fleet.make_fleet`.
        learner_factory: ``f(workload, seed=, **learner_overrides) -> Learner``; None:
            ``PPOLearner``.

    Example:
        >>> env = ActorSchedulingEnv("CartPole-v1", timing="modeled",
        ...                          training=TrainingConfig(steps_per_actor=16),
        ...                          fleet=FleetConfig(max_actors=4),
        ...                          episode={"max_rounds": 2})  # a config or its dict
        >>> obs, info = env.reset(seed=0)
        >>> obs.shape, env.action_space
        ((7,), Discrete(4))
        >>> obs, reward, terminated, truncated, info = env.step(3)
        >>> info["num_actors"], len(info["actor_times"]), round(float(obs[0]), 2)
        (4, 4, 0.5)
        >>> env.close()

    ``gym.make("fleetgym/ActorScheduling-v0", ...)`` takes the configs' fields as flat,
    JSON-able keyword arguments instead
    (:func:`~fleetgym.meta_env.scheduling_kwargs.make_actor_scheduling_env`).

    Raises:
        fleetgym.errors.UnknownWorkloadError: an unknown workload (lists close matches).
        fleetgym.meta_env.calibration.CalibrationError: the env raised while calibrating.
        TypeError: an argument of the wrong type.
        ValueError: an argument out of range (see each config), or a target ``J`` the
            workload lacks.
    """

    metadata: dict[str, Any] = {"render_modes": []}

    def __init__(
        self,
        workload: Any = "CartPole-v1",
        *,
        preset: str = "fast",
        timing: str = "measured",
        training: TrainingConfig | Mapping[str, Any] | None = None,
        fleet: FleetConfig | Mapping[str, Any] | None = None,
        costs: CostConfig | Mapping[str, Any] | None = None,
        episode: EpisodeConfig | Mapping[str, Any] | None = None,
        normalize_obs: bool = True,
        fleet_factory: FleetFactory | None = None,
        learner_factory: LearnerFactory | None = None,
    ) -> None:
        super().__init__()
        if fleet_factory is None or learner_factory is None:  # real rounds train a policy
            require("torch", "ActorSchedulingEnv (its rounds train the workload's policy)")
        self.training_config = TrainingConfig.coerce(training, "training")
        self.fleet_config = FleetConfig.coerce(fleet, "fleet")
        self.cost_config = CostConfig.coerce(costs, "costs")
        self.episode_config = EpisodeConfig.coerce(episode, "episode")
        self.workload = get_workload(workload)
        self.timing = check_choice("timing", timing, TIMINGS)
        compute = self.training_config.compute
        # Modelled timing of a workload without a shipped compute model measures one.
        calibrate = self.timing == "modeled" and not isinstance(compute, ComputeCostModel)
        target_return = self.episode_config.target_return
        d = scheduling_defaults(
            self.workload, preset, target_return=target_return, calibrate=calibrate
        ).override(
            steps_per_actor=self.training_config.steps_per_actor,
            **self.episode_config.preset_changes(),
        )
        self.preset = preset
        self.max_actors = self.fleet_config.max_actors
        self.steps_per_actor, self.max_rounds = d.steps_per_actor, d.max_rounds
        self.target_return, self.budget = d.target_return, d.budget
        self.beta, self.penalty_scale = d.beta, d.penalty_scale
        self.cost_weight = self.episode_config.cost_weight
        self.normalize_obs = check_bool("normalize_obs", normalize_obs)
        self.compute = compute_model_from(compute, d.compute)
        self.pricing = pricing_from(
            self.cost_config.pricing, self.cost_config.pricing_overrides, d.pricing
        )
        self.time_model = time_model_from(self.cost_config.time_model, d)
        self.accountant = RoundAccountant(
            self.time_model,
            self.pricing,
            max_actors=self.max_actors,
            billing=self.cost_config.billing,
            server_actors=self.cost_config.server_actors,
        )
        self.billing = self.accountant.billing
        self.server_actors = self.accountant.server_actors
        self._fleet_factory = _check_callable("fleet_factory", fleet_factory, make_fleet)
        self._learner_factory = _check_callable(
            "learner_factory", learner_factory, _default_learner_factory
        )
        self.fleet_kwargs = self.fleet_config.factory_kwargs(default_backend="inprocess")
        if self.fleet_kwargs["backend"] == "inprocess":
            # Modelled timing never reads the fleet's clocks, so the lockstep batched fleet
            # (one policy forward for all actors per step) serves it; measured timing needs
            # each actor timed on its own. Only the in-process backend takes this option.
            self.fleet_kwargs.setdefault("batched", self.timing == "modeled")
        self.learner_overrides = {**d.learner_overrides, **self.training_config.learner_overrides}
        # The normalised observation's time scales.
        self.reference_learner_s, self.reference_actor_s = self.accountant.reference_times(
            self.compute, self.steps_per_actor
        )

        self.action_space = gym.spaces.Discrete(self.max_actors)
        bound = OBS_CLIP if self.normalize_obs else np.inf
        self.observation_space = gym.spaces.Box(
            low=-bound, high=bound, shape=(len(OBSERVATION_FIELDS),), dtype=np.float32
        )
        self.fleet: ActorFleet | None = None
        self.learner: Learner | None = None
        self._rng = np.random.default_rng(0)
        self._done = True
        self.last_wall_time: dict[str, float] = {}
        self._reset_counters()

    # ------------------------------------------------------------------ episode state
    def _reset_counters(self) -> None:
        self.accountant.reset()
        self.max_return = -math.inf
        self.last_return = 0.0
        #: Whether the learner has reported a real mean return (a finished episode); before
        #: that its 0.0 is a placeholder, which must not reach a target J <= 0.
        self.returns_seen = False
        self._raw = np.zeros(len(OBSERVATION_FIELDS))
        self._raw[OBS_BUDGET] = math.inf if self.budget is None else self.budget

    @property
    def round(self) -> int:
        """Rounds done in this run."""
        return self.accountant.rounds

    @property
    def total_cost(self) -> float:
        """$ spent in this run, pre-warming included."""
        return self.accountant.total_cost

    @property
    def total_time(self) -> float:
        """Seconds this run has taken (the sum of its round times)."""
        return self.accountant.elapsed_s

    @property
    def budget_left(self) -> float:
        """$ left of the budget (inf with no budget)."""
        return math.inf if self.budget is None else self.budget - self.total_cost

    def _observation(self) -> np.ndarray:
        if not self.normalize_obs:
            return raw_observation(self._raw, budget=self.budget)
        return normalize_observation(
            self._raw,
            max_rounds=self.max_rounds,
            target_return=self.target_return,
            learner_time_s=self.reference_learner_s,
            actor_time_s=self.reference_actor_s,
            budget=self.budget,
        )

    # ------------------------------------------------------------------ gym API
    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[np.ndarray, dict[str, Any]]:
        """Start a new training run: a fresh fleet and learner seeded from ``seed``.

        Args:
            seed: Seeds the env's generator, which draws the run's training seed (the
                fleet's, the learner's and the stragglers' streams; ``info["train_seed"]``).
                ``None``: a random seed on the first reset, later the generator continues.
            options: Accepted for the Gymnasium API; not used.
        """
        super().reset(seed=seed)
        train_seed = int(self.np_random.integers(0, 2**31 - 1))
        # Stragglers draw from their own stream so the training seed alone fixes PPO.
        self._rng = np.random.default_rng(np.random.SeedSequence([train_seed, 1]))
        self._close_workers()
        self.fleet = self._fleet_factory(
            self.workload, max_actors=self.max_actors, seed=train_seed, **self.fleet_kwargs
        )
        self.learner = self._learner_factory(
            self.workload, seed=train_seed, **self.learner_overrides
        )
        self.train_seed = train_seed
        self._reset_counters()
        self._done = False
        info = {
            "train_seed": train_seed,
            "raw_state": self._raw.copy(),
            "budget_left": self.budget_left,
            "total_cost": 0.0,
            "num_actors": 0,
            "success": False,
        }
        return self._observation(), info

    def _check_action(self, action: Any) -> int:
        expected = f"action: expected an integer in [0, {self.max_actors - 1}] (num_actors - 1)"
        try:
            array = np.asarray(action)
        except Exception:  # noqa: BLE001 - any unconvertible object is a bad action
            array = None
        if (
            array is None
            or array.size != 1
            or not (
                np.issubdtype(array.dtype, np.integer) or np.issubdtype(array.dtype, np.floating)
            )
        ):
            raise ValueError(f"{expected}, actual {quote(action)}")
        value = array.reshape(-1)[0]
        # Range first, so that a huge number (1e300) is refused before any int conversion.
        if not (0 <= value <= self.max_actors - 1 and float(value).is_integer()):
            raise ValueError(f"{expected}, actual {quote(action)}")
        return int(value)

    def _compute_times(self, result: RoundResult, stats: UpdateStats) -> tuple[np.ndarray, float]:
        """Each actor's compute and the update's time: modelled, or as measured."""
        if self.timing == "modeled":
            n = len(result.trajectories)
            actors = self.compute.actor_compute_s(self.steps_per_actor, self._rng, n)
            return actors, self.compute.learner_update_s(int(stats.num_samples))
        actors = np.array(
            [t.cpu_s if getattr(t, "cpu_s", 0.0) > 0.0 else t.compute_s for t in result.timings],
            dtype=np.float64,
        )
        return actors, float(stats.update_time_s)

    def step(self, action: Any) -> tuple[np.ndarray, float, bool, bool, dict[str, Any]]:
        """Run one round with ``action + 1`` actors; see the module docstring.

        Args:
            action: The number of actors minus one: an integer in ``[0, max_actors - 1]``
                (an integral float or a one-element array is accepted); anything else
                raises :class:`ValueError`.
        """
        if self._done or self.fleet is None or self.learner is None:
            raise gym.error.ResetNeeded("step: expected reset() before stepping a finished run")
        num_actors = self._check_action(action) + 1
        wall_start = time.perf_counter()
        weights = self.learner.get_weights()
        result = self.fleet.run_round(
            weights,
            num_actors,
            self.steps_per_actor,
            policy_version=int(self.learner.policy_version),
        )
        if not result.trajectories:
            raise RuntimeError(f"round {self.round + 1}: the fleet returned no trajectory")
        fleet_wall = time.perf_counter() - wall_start
        stats = self.learner.update(result.trajectories)
        compute, update_s = self._compute_times(result, stats)
        trajectories = result.trajectories
        bill = self.accountant.account(
            actor_compute_s=compute[: len(trajectories)],
            learner_update_s=update_s,
            actor_ids=[t.actor_id for t in trajectories],
            num_actors=num_actors,
            weight_bytes=weights_nbytes(weights),
            trajectory_bytes=[trajectory_nbytes(t) for t in trajectories],
        )
        wall_s = time.perf_counter() - wall_start

        mean_return = float(stats.mean_return)
        if not math.isfinite(mean_return):
            mean_return = self.last_return  # no episode finished yet: keep the last value
        self.last_return = mean_return
        # A learner that does not count episodes but reports a non-zero mean has seen some.
        self.returns_seen = self.returns_seen or (
            int(getattr(stats, "episodes_completed", 0)) > 0 or mean_return != 0.0
        )
        # The best R_bar of the rounds before this one (None: no return seen before it).
        seen_before = self.returns_seen and math.isfinite(self.max_return)
        best_before = self.max_return if seen_before else None
        if self.returns_seen:
            self.max_return = max(self.max_return, mean_return)
        # Until a return is seen, max_k R_bar is the placeholder.
        best_return = self.max_return if self.returns_seen else mean_return
        self._raw = np.zeros(len(OBSERVATION_FIELDS))
        self._raw[OBS_ROUND] = float(self.round)
        self._raw[OBS_LOSS] = float(stats.loss)
        self._raw[OBS_RETURN] = mean_return
        self._raw[OBS_KL] = float(stats.kl)
        self._raw[OBS_LEARNER_TIME] = bill.learner.total_s
        self._raw[OBS_ACTOR_TIME] = float(bill.actor_times.mean())
        self._raw[OBS_BUDGET] = self.budget_left

        reached = self.returns_seen and mean_return >= self.target_return
        overspent = self.budget is not None and self.total_cost > self.budget
        spent = self.budget is not None and self.total_cost >= self.budget
        terminated = bool(reached or spent)
        truncated = bool(not terminated and self.round >= self.max_rounds)
        reward = -self.beta * bill.round_time - self.cost_weight * bill.total_cost
        penalty = 0.0
        if (terminated or truncated) and (not reached or overspent):
            # How far from J the run was when it ended or the money ran out: a round that
            # overspends does not count, so reaching J in it earns no bonus.
            base = best_before if overspent and best_before is not None else best_return
            penalty = min(0.0, base - self.target_return) / self.penalty_scale
            reward += penalty
        self._done = terminated or truncated

        outcome = {
            "mean_return": mean_return,
            "max_return": best_return,
            "terminal_penalty": penalty,
            "target_reached": bool(reached),
            "success": bool(reached and not overspent),
        }
        info = self._info(bill, result, stats, num_actors, compute, outcome)
        # This machine's clock: reported with measured timing only, so that a modelled
        # episode's info is a pure function of the seed (and on the attribute always).
        self.last_wall_time = {"wall_time": wall_s, "fleet_wall_time": fleet_wall}
        if self.timing == "measured":
            info.update(self.last_wall_time)
        return self._observation(), float(reward), terminated, truncated, info

    def _info(
        self,
        bill: RoundBill,
        result: RoundResult,
        stats: UpdateStats,
        num_actors: int,
        compute: np.ndarray,
        outcome: dict[str, Any],
    ) -> dict[str, Any]:
        """The round's ``info`` (``outcome``: the return and termination entries)."""
        return {
            "round": self.round,
            "num_actors": num_actors,
            "round_time": bill.round_time,
            "learner_time": bill.learner.total_s,
            "learner_update_time": bill.learner.update_s,
            "actor_times": bill.actor_times.tolist(),
            "actor_compute_times": np.asarray(compute, dtype=np.float64).tolist(),
            "actor_time_mean": float(self._raw[OBS_ACTOR_TIME]),
            "round_cost": bill.total_cost,
            "cost_learner": bill.cost.learner,
            "cost_actors": bill.cost.actors,
            "cost_warm_pool": bill.cost.warm_pool + bill.prewarm_cost,
            "cost_requests": bill.cost.requests,
            "total_cost": self.total_cost,
            "total_time": self.total_time,
            "budget_left": self.budget_left,
            "mean_return": outcome["mean_return"],
            "max_return": outcome["max_return"],
            "kl": float(stats.kl),
            "loss": float(stats.loss),
            "num_samples": int(stats.num_samples),
            "raw_state": self._raw.copy(),
            "terminal_penalty": outcome["terminal_penalty"],
            "target_reached": outcome["target_reached"],
            "success": outcome["success"],
            "failures": len(result.failures),
            "timing": self.timing,
            "billing": self.billing,
        }

    def _close_workers(self) -> None:
        if self.fleet is not None:
            self.fleet.close()
        self.fleet = None
        self.learner = None

    def close(self) -> None:
        """Release the fleet."""
        self._close_workers()
        self._done = True
        super().close()
