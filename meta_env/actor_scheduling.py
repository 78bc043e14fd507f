"""ActorSchedulingEnv: a whole distributed on-policy training run as a 7-dim MDP.

One episode is one training run of a workload (CartPole, MuJoCo, Atari) by an actor fleet
and a PPO learner (:mod:`fleetgym.agents`); one step is one round ``k``: the action ``a``
asks for ``I_k = a + 1`` actors, each collects ``steps_per_actor`` steps with the current
policy, the learner updates, and the round's time and cost are accounted
(MinionsRL, DESIGN.md Part B):

* round time ``P_k = P^l_k + max_i P^a_k,i`` (the slowest actor gates the round);
* round cost ``C_k`` from :mod:`fleetgym.meta_env.cost_model` (serverless by default,
  ``billing="server"`` for the VM cluster);
* reward ``r_k = -beta * P_k - cost_weight * C_k``; on the last round, if the target ``J``
  was not reached or the budget ran out, plus ``(max_k R_bar_k - J) / penalty_scale``
  (``cost_weight=0, penalty_scale=1`` is the paper's form);
* terminated when ``R_bar_k >= J`` or the budget is spent, truncated after ``K`` rounds.

Observation (``Box(7,)``, :data:`fleetgym.agents.schedulers.OBSERVATION_FIELDS`), after
round ``k`` (all zeros but the budget before the first round), normalised by default:

====  =======================  ==================================================
 idx  raw                      normalised (``normalize_obs=True``)
====  =======================  ==================================================
 0    k (rounds done)          ``k / K``
 1    learner loss L           ``sign(L) * log1p(|L|)``
 2    mean return R_bar        ``R_bar / |J|`` (1.0 = target reached)
 3    KL(pi_k-1 || pi_k)       ``log1p(KL / 0.01)`` (0.01: a typical PPO step)
 4    learner time P^l         ``P^l / t_l`` (t_l: modelled learner time of a round
                               of ``max_actors`` actors, cold start unless warm)
 5    mean actor time P^a      ``P^a / t_a`` (t_a: modelled time of one actor's
                               rollout, cold start unless warm)
 6    budget left b            ``b / budget`` (1.0 with no budget)
====  =======================  ==================================================

clipped to ``[-10, 10]``; ``info["raw_state"]`` holds the raw vector.

Timing: ``timing="measured"`` takes each actor's compute from the fleet (its CPU time when
the backend reports it, i.e. what the rollout costs on a core of its own, else its wall
time) and the learner's measured update time; ``timing="modeled"`` replaces both by the
deterministic :class:`~fleetgym.meta_env.cost_model.ComputeCostModel` (seeded stragglers),
so an episode is exactly reproducible from its seed. In both, what this machine lacks is
modelled (:class:`~fleetgym.meta_env.cost_model.TimeModel`): container cold starts (unless
pre-warmed), transfers of weights and trajectories, a learner speed factor.

Pre-warming (the presets' default) keeps the learner and the last round's actors warm
(keep-alive); actors a round no longer needs stay warm and billed for ``keep_alive_s``
(1 s) before release, so a fleet that shrinks and grows back within it pays no cold start,
while growing beyond the warm containers pays one per new actor. Prices default to
``"aci-cpu"`` (a CPU learner) for MLP workloads and ``"aci"`` (a V100) for Atari.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, fields, replace
from typing import Any

import gymnasium as gym
import numpy as np

from fleetgym.agents.checks import check_integer, check_number
from fleetgym.agents.schedulers import OBSERVATION_FIELDS
from fleetgym.agents.types import ActorFleet, Learner, RoundResult, UpdateStats
from fleetgym.errors import UnknownWorkloadError
from fleetgym.meta_env.cost_model import (
    ComputeCostModel,
    PricingPreset,
    RoundCost,
    ServerClusterCostModel,
    ServerlessCostModel,
    TimeModel,
    get_pricing,
    trajectory_nbytes,
    weights_nbytes,
)

__all__ = [
    "KL_SCALE",
    "OBS_CLIP",
    "PRESETS",
    "SCHEDULING_DEFAULTS",
    "ActorSchedulingEnv",
    "SchedulingDefaults",
    "scheduling_defaults",
]

logger = logging.getLogger(__name__)

#: KL that maps to log1p(1) in the normalised observation (a typical PPO update's KL).
KL_SCALE = 0.01
#: Bound of every normalised observation entry.
OBS_CLIP = 10.0
#: Presets of the per-workload defaults.
PRESETS = ("fast", "paper")
TIMINGS = ("measured", "modeled")
BILLINGS = ("serverless", "server")

FleetFactory = Callable[..., ActorFleet]
LearnerFactory = Callable[..., Learner]


@dataclass(frozen=True)
class SchedulingDefaults:
    """Per-workload defaults of :class:`ActorSchedulingEnv` (every field is an argument).

    Args:
        steps_per_actor: environment steps per actor per round.
        target_return: J, the mean return (last 100 episodes) that ends the run.
        max_rounds: K, rounds before truncation.
        budget: $ budget of one run (None: unlimited).
        beta: reward per second of round time (``r_k = -beta * P_k``).
        penalty_scale: divisor of the terminal term ``max R_bar - J``.
        learner_speed_factor: GPU speed-up of the update over this CPU.
        compute: the modelled compute (``timing="modeled"``, and the observation's
            reference times).
        learner_overrides: PPO hyperparameters replacing the workload's.
        prewarm: keep containers warm between rounds (MinionsRL pre-warms its functions).
        pricing: the pricing preset (``"aci-cpu"`` for MLP workloads, whose update a GPU
            does not speed up; ``"aci"``, MinionsRL's V100 learner, for Atari).
        keep_alive_s: how long an idle actor container stays warm under keep-alive.
    """

    steps_per_actor: int
    target_return: float
    max_rounds: int
    budget: float | None
    beta: float
    penalty_scale: float
    learner_speed_factor: float
    compute: ComputeCostModel
    learner_overrides: Mapping[str, Any] = field(default_factory=dict)
    prewarm: bool = True
    pricing: str = "aci-cpu"
    keep_alive_s: float = 1.0


# Modelled compute, calibrated on this project's 2-core development machine (the in-process
# fleet's per-actor CPU time and PPOLearner.update's time, one torch thread), see the README
# section "actor scheduling". The straggler CV (10 %) is the order of the run-time spread of
# identical serverless containers.
_CARTPOLE_COMPUTE = ComputeCostModel(
    actor_step_s=2.0e-4,
    actor_overhead_s=1.0e-3,
    learner_sample_s=1.0e-4,
    learner_overhead_s=1.0e-2,
    actor_jitter_cv=0.1,
)
# Hopper-v5 measured the same way (sequential fleet CPU time ~0.6 ms per step, update
# 2.7-3.4 ms per sample at minibatch 64 on a heavily loaded machine); rounded down for the
# load. Atari: an order-of-magnitude estimate (Nature CNN forward per step), not measured.
_MUJOCO_COMPUTE = ComputeCostModel(
    actor_step_s=4.0e-4,
    actor_overhead_s=5.0e-3,
    learner_sample_s=1.0e-3,
    learner_overhead_s=2.0e-2,
    actor_jitter_cv=0.1,
)
_ATARI_COMPUTE = ComputeCostModel(
    actor_step_s=1.5e-3,
    actor_overhead_s=2.0e-2,
    learner_sample_s=2.0e-3,
    learner_overhead_s=5.0e-2,
    actor_jitter_cv=0.1,
)

# Hopper-v5 with the fast preset's learner (minibatches of 256 instead of 64), measured as
# above on the unloaded machine: ~0.3 ms per actor step, ~0.12 ms per learner sample.
_HOPPER_FAST_COMPUTE = ComputeCostModel(
    actor_step_s=4.0e-4,
    actor_overhead_s=5.0e-3,
    learner_sample_s=1.2e-4,
    learner_overhead_s=2.0e-2,
    actor_jitter_cv=0.1,
)

#: workload name -> preset -> defaults. Workloads not listed get :func:`scheduling_defaults`
#: built from their :class:`~fleetgym.agents.workloads.Workload` fields.
SCHEDULING_DEFAULTS: dict[str, dict[str, SchedulingDefaults]] = {
    "CartPole-v1": {
        # Fast: short rollouts and a target PPO reaches in tens of rounds with a large
        # fleet. J = 195 (the classic v0 "solved" bar) on the mean of the last 100 episodes:
        # the 475 bar needs ~100 episodes of ~500 steps *after* the policy is good, which
        # triples the run for no scheduling insight.
        "fast": SchedulingDefaults(
            steps_per_actor=64,
            target_return=195.0,
            max_rounds=200,
            # About 1.5x what Max spends to reach J with pre-warming (~$0.0018 with the
            # CPU learner): a wasteful schedule runs out, the sensible ones do not.
            budget=0.0025,
            beta=0.1,
            penalty_scale=10.0,
            learner_speed_factor=1.0,
            compute=_CARTPOLE_COMPUTE,
        ),
        "paper": SchedulingDefaults(
            steps_per_actor=128,
            target_return=475.0,
            max_rounds=300,
            budget=1.0,
            beta=0.1,
            penalty_scale=1.0,
            learner_speed_factor=1.0,
            compute=_CARTPOLE_COMPUTE,
        ),
    },
    "Hopper-v5": {
        # Fast: 64 steps per actor, minibatches of 256 (a round of 32 actors is 8 gradient
        # steps per epoch instead of 32) and J = 200, which PPO reaches in ~15 rounds of
        # Max (~26k steps, the policy stands and starts to hop); the paper preset keeps the
        # workload's J = 1000 (~150k steps, hours of CPU per scheduler episode here).
        "fast": SchedulingDefaults(
            steps_per_actor=64,
            target_return=200.0,
            max_rounds=200,
            # About 1.5x what Max spends (~$0.0021), as for CartPole.
            budget=0.003,
            beta=0.1,
            penalty_scale=10.0,
            learner_speed_factor=1.0,
            compute=_HOPPER_FAST_COMPUTE,
            learner_overrides={"minibatch_size": 256},
        ),
    },
}


def scheduling_defaults(workload: Any, preset: str = "fast") -> SchedulingDefaults:
    """The defaults of ``workload`` under ``preset`` (from the table or the workload).

    Example:
        >>> d = scheduling_defaults("CartPole-v1", "fast")
        >>> d.steps_per_actor, d.target_return
        (64, 195.0)

    Raises:
        ValueError: an unknown preset.
        fleetgym.errors.UnknownWorkloadError: an unknown workload (lists the known ones).
    """
    from fleetgym.agents.workloads import get_workload

    if preset not in PRESETS:
        raise ValueError(f"preset: expected one of {PRESETS}, actual {preset!r}")
    w = get_workload(workload)
    table = SCHEDULING_DEFAULTS.get(w.name)
    if table is not None and preset in table:
        return table[preset]
    compute = {"atari": _ATARI_COMPUTE, "mujoco": _MUJOCO_COMPUTE}.get(w.kind, _CARTPOLE_COMPUTE)
    # A GPU speeds up convolutional updates a lot, small MLPs hardly at all.
    speed = 10.0 if w.kind == "atari" else 1.0
    steps = w.rollout_steps if preset == "paper" else max(32, w.rollout_steps // 2)
    return SchedulingDefaults(
        steps_per_actor=int(steps),
        target_return=float(w.target_return),
        max_rounds=int(w.max_rounds),
        budget=None,
        beta=0.1,
        penalty_scale=max(1.0, abs(float(w.target_return)) / 20.0),
        learner_speed_factor=speed,
        compute=compute,
        pricing="aci" if w.kind == "atari" else "aci-cpu",
    )


def _default_fleet_factory(workload: Any, *, max_actors: int, seed: int, **kwargs: Any) -> Any:
    try:
        from fleetgym.agents.fleet import make_fleet
    except ImportError:  # older fleet package without the factory: the in-process backend
        from fleetgym.agents.fleet.inprocess import InProcessFleet

        kwargs.pop("backend", None)
        return InProcessFleet(workload, max_actors=max_actors, seed=seed, **kwargs)
    return make_fleet(workload, max_actors=max_actors, seed=seed, **kwargs)


def _default_learner_factory(workload: Any, *, seed: int, **overrides: Any) -> Any:
    from fleetgym.agents.ppo import PPOLearner

    return PPOLearner(workload, seed=seed, **overrides)


def _mapping(name: str, value: Any) -> dict[str, Any]:
    """``value`` (a mapping of keyword arguments, or None) as a dict."""
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise TypeError(f"{name}: expected a mapping or None, actual {type(value).__name__}")
    return dict(value)


@dataclass
class _RoundAccount:
    """The time and cost of one round, before it becomes an observation."""

    actor_times: np.ndarray
    actor_compute: np.ndarray
    learner_time: float
    learner_update: float
    round_time: float
    cost: RoundCost
    prewarm_cost: float


class ActorSchedulingEnv(gym.Env[np.ndarray, np.int64]):
    """A whole on-policy training run as an MDP whose action is the next round's fleet size.

    Models MinionsRL's actor scheduling problem: each :meth:`step` really runs one round
    of the workload's training (``I_k`` actor rollouts on the fleet, one PPO update) and
    accounts its time (measured or modelled compute + cold starts + transfers) and its
    cost (serverless per-resource-second billing, or a VM cluster). See the module
    docstring for the observation, reward and termination.

    Example:
        >>> env = ActorSchedulingEnv("CartPole-v1", timing="modeled", max_actors=4,
        ...                          steps_per_actor=16, max_rounds=2)
        >>> obs, info = env.reset(seed=0)
        >>> obs.shape, env.action_space
        ((7,), Discrete(4))
        >>> obs, reward, terminated, truncated, info = env.step(3)
        >>> info["num_actors"], len(info["actor_times"]), round(float(obs[0]), 2)
        (4, 4, 0.5)
        >>> env.close()

    Args:
        workload: a workload name (``fleetgym.agents.workloads``) or Workload.
        preset: ``"fast"`` (short rollouts, reachable target) or ``"paper"`` defaults.
        timing: ``"measured"`` or ``"modeled"`` (deterministic from the seed).
        max_actors: I_max, the size of the action space.
        steps_per_actor: environment steps per actor per round.
        target_return: J.
        max_rounds: K.
        budget: $ per run (None: unlimited).
        beta: reward per second of round time.
        penalty_scale: divisor of the terminal ``max R_bar - J`` term (1: the paper's).
        cost_weight: reward per dollar of round cost (0: the paper's, time only).
        pricing: a preset name of :data:`~fleetgym.meta_env.cost_model.PRICING_PRESETS`
            or a PricingPreset; None: the preset's (``"aci-cpu"``, a CPU learner, for
            CartPole and MuJoCo; ``"aci"``, MinionsRL's V100 learner, for Atari).
        pricing_overrides: fields of the pricing preset to replace.
        billing: ``"serverless"`` or ``"server"`` (the VM cluster, idle included).
        server_actors: actor cores of the server cluster (``billing="server"``); None:
            ``max_actors``.
        cold_start_actor_s: actor container cold start.
        cold_start_learner_s: GPU learner container cold start.
        prewarm: keep the learner and actor containers warm (no cold starts on the
            critical path; warm containers are billed for every second of the round);
            None: the preset's (True: MinionsRL pre-warms its functions).
        warm_pool: with ``prewarm``: None keeps the previous round's actors alive
            (keep-alive; the first round's are warmed before training), N keeps a fixed
            pool of N slots alive whether used or not.
        keep_alive_s: under keep-alive, seconds an actor container a round does not use
            stays warm (billed, idle) before it is released, so that a fleet that shrinks
            and grows back within it pays no cold start; None: the preset's (1 s).
        bandwidth_bytes_per_s: actor <-> learner bandwidth.
        latency_s: one-way latency of a transfer.
        learner_speed_factor: speed-up of the learner's device over this CPU.
        compute: a ComputeCostModel or a dict of its fields (replacing the defaults').
        normalize_obs: normalise the observation (see the module docstring).
        fleet_kwargs: extra keyword arguments of the fleet factory (``backend``, ...).
        learner_overrides: PPO hyperparameters replacing the workload's.
        fleet_factory: ``f(workload, max_actors=, seed=, **fleet_kwargs) -> ActorFleet``.
        learner_factory: ``f(workload, seed=, **learner_overrides) -> Learner``.

    Raises:
        fleetgym.errors.UnknownWorkloadError: an unknown workload (lists the known ones).
        TypeError, ValueError: an argument of the wrong type or range (max_actors < 1,
            negative prices or budget, ...).
    """

    metadata: dict[str, Any] = {"render_modes": []}

    def __init__(
        self,
        workload: Any = "CartPole-v1",
        *,
        preset: str = "fast",
        timing: str = "measured",
        max_actors: int = 32,
        steps_per_actor: int | None = None,
        target_return: float | None = None,
        max_rounds: int | None = None,
        budget: float | None | str = "default",
        beta: float | None = None,
        penalty_scale: float | None = None,
        cost_weight: float = 0.0,
        pricing: str | PricingPreset | None = None,
        pricing_overrides: Mapping[str, Any] | None = None,
        billing: str = "serverless",
        server_actors: int | None = None,
        cold_start_actor_s: float = 0.3,
        cold_start_learner_s: float = 1.5,
        prewarm: bool | None = None,
        warm_pool: int | None = None,
        keep_alive_s: float | None = None,
        bandwidth_bytes_per_s: float = 125e6,
        latency_s: float = 0.001,
        learner_speed_factor: float | None = None,
        compute: ComputeCostModel | Mapping[str, Any] | None = None,
        normalize_obs: bool = True,
        fleet_kwargs: Mapping[str, Any] | None = None,
        learner_overrides: Mapping[str, Any] | None = None,
        fleet_factory: FleetFactory | None = None,
        learner_factory: LearnerFactory | None = None,
    ) -> None:
        super().__init__()
        from fleetgym.agents.workloads import get_workload

        if not isinstance(workload, str) and not hasattr(workload, "env_id"):
            raise TypeError(
                f"workload: expected a workload name or Workload, actual {type(workload).__name__}"
            )
        try:
            self.workload = get_workload(workload)
        except UnknownWorkloadError:
            raise
        if timing not in TIMINGS:
            raise ValueError(f"timing: expected one of {TIMINGS}, actual {timing!r}")
        if billing not in BILLINGS:
            raise ValueError(f"billing: expected one of {BILLINGS}, actual {billing!r}")
        defaults = scheduling_defaults(self.workload, preset)
        self.preset = preset
        self.timing = timing
        self.billing = billing
        self.max_actors = check_integer("max_actors", max_actors, 1)
        self.steps_per_actor = check_integer(
            "steps_per_actor",
            defaults.steps_per_actor if steps_per_actor is None else steps_per_actor,
            1,
        )
        self.target_return = float(
            defaults.target_return if target_return is None else target_return
        )
        if not math.isfinite(self.target_return):
            raise ValueError(f"target_return: expected a finite number, actual {target_return!r}")
        self.max_rounds = check_integer(
            "max_rounds", defaults.max_rounds if max_rounds is None else max_rounds, 1
        )
        if isinstance(budget, str):
            if budget != "default":
                raise ValueError(
                    f"budget: expected a number >= 0, None or 'default', actual {budget!r}"
                )
            budget = defaults.budget
        self.budget = None if budget is None else check_number("budget", budget)
        self.beta = check_number("beta", defaults.beta if beta is None else beta)
        self.penalty_scale = check_number(
            "penalty_scale",
            defaults.penalty_scale if penalty_scale is None else penalty_scale,
            strict=True,
        )
        self.cost_weight = check_number("cost_weight", cost_weight)
        self.pricing = get_pricing(
            defaults.pricing if pricing is None else pricing,
            **_mapping("pricing_overrides", pricing_overrides),
        )
        self.time_model = TimeModel(
            cold_start_actor_s=cold_start_actor_s,
            cold_start_learner_s=cold_start_learner_s,
            prewarm=defaults.prewarm if prewarm is None else prewarm,
            warm_pool=warm_pool,
            keep_alive_s=defaults.keep_alive_s if keep_alive_s is None else keep_alive_s,
            bandwidth_bytes_per_s=bandwidth_bytes_per_s,
            latency_s=latency_s,
            learner_speed_factor=(
                defaults.learner_speed_factor
                if learner_speed_factor is None
                else learner_speed_factor
            ),
        )
        if compute is None:
            self.compute = defaults.compute
        elif isinstance(compute, ComputeCostModel):
            self.compute = compute
        elif isinstance(compute, Mapping):
            unknown = sorted(set(compute) - {f.name for f in fields(ComputeCostModel)})
            if unknown:
                raise ValueError(
                    f"compute: expected fields of ComputeCostModel "
                    f"{[f.name for f in fields(ComputeCostModel)]}, actual unknown {unknown}"
                )
            self.compute = replace(defaults.compute, **dict(compute))
        else:
            raise TypeError(
                f"compute: expected a ComputeCostModel, a dict of its fields or None, "
                f"actual {type(compute).__name__}"
            )
        if not isinstance(normalize_obs, (bool, np.bool_)):
            raise TypeError(f"normalize_obs: expected a bool, actual {normalize_obs!r}")
        self.normalize_obs = bool(normalize_obs)
        for name, fn in (("fleet_factory", fleet_factory), ("learner_factory", learner_factory)):
            if fn is not None and not callable(fn):
                raise TypeError(f"{name}: expected a callable, actual {type(fn).__name__}")
        # Modelled timing never reads the fleet's clocks, so the lockstep batched fleet (one
        # policy forward for all actors per step) is used; measured timing needs each actor
        # timed on its own, so the sequential in-process fleet is.
        self.fleet_kwargs = {"backend": "inprocess", **_mapping("fleet_kwargs", fleet_kwargs)}
        if self.fleet_kwargs["backend"] == "inprocess":
            # Only the in-process backend takes the lockstep option.
            self.fleet_kwargs.setdefault("batched", timing == "modeled")
        self.learner_overrides = {
            **defaults.learner_overrides,
            **_mapping("learner_overrides", learner_overrides),
        }
        self._fleet_factory = fleet_factory or _default_fleet_factory
        self._learner_factory = learner_factory or _default_learner_factory

        self.serverless = ServerlessCostModel(self.pricing)
        self.server_actors = (
            self.max_actors
            if server_actors is None
            else check_integer("server_actors", server_actors, 1)
        )
        self.cluster = ServerClusterCostModel(self.pricing, actors=self.server_actors)
        self.learner_warm = billing == "server" or self.time_model.prewarm
        # Reference times of the normalised observation: a round of max_actors, modelled.
        self.reference_learner_s = self.time_model.learner_time(
            self.compute.learner_update_s(self.max_actors * self.steps_per_actor),
            warm=self.learner_warm,
        ).total_s
        self.reference_actor_s = self.time_model.actor_time(
            self.compute.actor_overhead_s + self.steps_per_actor * self.compute.actor_step_s,
            weight_bytes=0,
            trajectory_bytes=0,
            warm=billing == "server" or self.time_model.prewarm,
        ).total_s

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
        self.round = 0
        self.total_cost = 0.0
        self.total_time = 0.0
        self.max_return = -math.inf
        self.last_return = 0.0
        #: Whether the learner has reported a real mean return (a finished episode); before
        #: that its 0.0 is a placeholder, which must not reach a target J <= 0.
        self.returns_seen = False
        self.actor_seconds = 0.0
        self.actors_used = 0
        self._prev_actors = 0
        # Keep-alive: virtual time until which each actor slot stays warm.
        self._warm_until = np.full(self.max_actors, -math.inf)
        self._raw = np.zeros(len(OBSERVATION_FIELDS))
        self._raw[6] = math.inf if self.budget is None else self.budget

    @property
    def budget_left(self) -> float:
        """$ left of the budget (inf with no budget)."""
        return math.inf if self.budget is None else self.budget - self.total_cost

    def _observation(self) -> np.ndarray:
        raw = self._raw
        if not self.normalize_obs:
            out = raw.copy()
            if self.budget is None:
                out[6] = 0.0  # unlimited: a finite marker (documented in info["budget_left"])
            return out.astype(np.float32)
        scale_j = abs(self.target_return) if self.target_return != 0.0 else 1.0
        obs = np.array(
            [
                raw[0] / self.max_rounds,
                math.copysign(math.log1p(abs(raw[1])), raw[1]),
                raw[2] / scale_j,
                math.log1p(max(raw[3], 0.0) / KL_SCALE),
                raw[4] / self.reference_learner_s if self.reference_learner_s > 0 else raw[4],
                raw[5] / self.reference_actor_s if self.reference_actor_s > 0 else raw[5],
                1.0 if self.budget is None or self.budget == 0.0 else raw[6] / self.budget,
            ]
        )
        return np.clip(obs, -OBS_CLIP, OBS_CLIP).astype(np.float32)

    # ------------------------------------------------------------------ gym API
    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[np.ndarray, dict[str, Any]]:
        """Start a new training run: a fresh fleet and learner seeded from ``seed``."""
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
            or not float(array.reshape(-1)[0]).is_integer()
        ):
            raise ValueError(
                f"action: expected an integer in [0, {self.max_actors - 1}] "
                f"(num_actors - 1), actual {action!r}"
            )
        value = int(array.reshape(-1)[0])
        if not self.action_space.contains(np.int64(value)):
            raise ValueError(
                f"action: expected an integer in [0, {self.max_actors - 1}] "
                f"(num_actors - 1), actual {value}"
            )
        return value

    def _account(
        self, result: RoundResult, stats: UpdateStats, weights: dict[str, np.ndarray]
    ) -> _RoundAccount:
        n = len(result.trajectories)
        keep_alive = self.billing != "server" and self.time_model.keep_alive
        if self.billing == "server":
            pool = 0
        elif keep_alive:
            # The first round's fleet is warmed before training starts; later, the previous
            # round's actors and any released ones still within keep_alive_s are warm
            # (slots are used from 0 up, so the warm slots are always 0..pool-1).
            pool = (
                n
                if self.round == 0
                else max(
                    self.time_model.pool_size(self.max_actors, self._prev_actors),
                    int(np.count_nonzero(self._warm_until > self.total_time)),
                )
            )
        else:
            pool = self.time_model.pool_size(self.max_actors)
        if self.timing == "modeled":
            compute = self.compute.actor_compute_s(self.steps_per_actor, self._rng, n)
            update_s = self.compute.learner_update_s(int(stats.num_samples))
        else:
            compute = np.array(
                [
                    t.cpu_s if getattr(t, "cpu_s", 0.0) > 0.0 else t.compute_s
                    for t in result.timings
                ],
                dtype=np.float64,
            )
            update_s = float(stats.update_time_s)
        w_bytes = weights_nbytes(weights)
        actor_times = np.array(
            [
                self.time_model.actor_time(
                    float(compute[i]),
                    weight_bytes=w_bytes,
                    trajectory_bytes=trajectory_nbytes(traj),
                    warm=self.billing == "server" or traj.actor_id < pool,
                ).total_s
                for i, traj in enumerate(result.trajectories)
            ]
        )
        learner = self.time_model.learner_time(update_s, warm=self.learner_warm)
        round_time = learner.total_s + (float(actor_times.max()) if n else 0.0)
        prewarm_cost = 0.0
        idle_s: list[float] = []
        if keep_alive and self.round > 0:
            # Warm containers this round does not use idle, billed, until they are released.
            left = np.maximum(self._warm_until[n:pool] - self.total_time, 0.0)
            idle_s = np.minimum(left, round_time).tolist()
        if self.billing == "server":
            cost = self.cluster.round_cost(round_s=round_time)
        else:
            cost = self.serverless.round_cost(
                learner_s=learner.total_s,
                actor_s=actor_times.tolist(),
                round_s=round_time,
                pool=pool,
                learner_warm=self.learner_warm,
                keep_alive=keep_alive,
                idle_s=idle_s,
            )
            if self.round == 0 and (pool or self.learner_warm):
                prewarm_cost = self.serverless.prewarm_cost(
                    self.time_model, pool, self.learner_warm
                )
        return _RoundAccount(
            actor_times=actor_times,
            actor_compute=np.asarray(compute, dtype=np.float64),
            learner_time=learner.total_s,
            learner_update=learner.update_s,
            round_time=round_time,
            cost=cost,
            prewarm_cost=prewarm_cost,
        )

    def step(self, action: Any) -> tuple[np.ndarray, float, bool, bool, dict[str, Any]]:
        """Run one round with ``action + 1`` actors; see the module docstring."""
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
        acc = self._account(result, stats, weights)
        wall_s = time.perf_counter() - wall_start

        round_cost = acc.cost.total + acc.prewarm_cost
        self.round += 1
        self.total_cost += round_cost
        self.total_time += acc.round_time
        self.actors_used += num_actors
        if self.time_model.keep_alive:
            # This round's containers are released at the earliest when the next round
            # starts, then kept keep_alive_s; earlier releases keep their own deadlines.
            self._warm_until[:num_actors] = self.total_time + self.time_model.keep_alive_s
        self._prev_actors = num_actors
        mean_return = float(stats.mean_return)
        if not math.isfinite(mean_return):
            mean_return = self.last_return  # no episode finished yet: keep the last value
        self.last_return = mean_return
        # A learner that does not count episodes but reports a non-zero mean has seen some.
        self.returns_seen = self.returns_seen or (
            int(getattr(stats, "episodes_completed", 0)) > 0 or mean_return != 0.0
        )
        if self.returns_seen:
            self.max_return = max(self.max_return, mean_return)
        # Until a return is seen, max_k R_bar is the placeholder (as before for J > 0).
        best_return = self.max_return if self.returns_seen else mean_return
        mean_actor = float(acc.actor_times.mean())
        self._raw = np.array(
            [
                float(self.round),
                float(stats.loss),
                mean_return,
                float(stats.kl),
                acc.learner_time,
                mean_actor,
                self.budget_left,
            ]
        )

        reached = self.returns_seen and mean_return >= self.target_return
        overspent = self.budget is not None and self.total_cost > self.budget
        spent = self.budget is not None and self.total_cost >= self.budget
        terminated = bool(reached or spent)
        truncated = bool(not terminated and self.round >= self.max_rounds)
        reward = -self.beta * acc.round_time - self.cost_weight * round_cost
        penalty = 0.0
        if (terminated or truncated) and (not reached or overspent):
            penalty = (best_return - self.target_return) / self.penalty_scale
            reward += penalty
        self._done = terminated or truncated
        success = bool(reached and not overspent)

        info: dict[str, Any] = {
            "round": self.round,
            "num_actors": num_actors,
            "round_time": acc.round_time,
            "learner_time": acc.learner_time,
            "learner_update_time": acc.learner_update,
            "actor_times": acc.actor_times.tolist(),
            "actor_compute_times": acc.actor_compute.tolist(),
            "actor_time_mean": mean_actor,
            "round_cost": round_cost,
            "cost_learner": acc.cost.learner,
            "cost_actors": acc.cost.actors,
            "cost_warm_pool": acc.cost.warm_pool + acc.prewarm_cost,
            "cost_requests": acc.cost.requests,
            "total_cost": self.total_cost,
            "total_time": self.total_time,
            "budget_left": self.budget_left,
            "mean_return": mean_return,
            "max_return": best_return,
            "kl": float(stats.kl),
            "loss": float(stats.loss),
            "num_samples": int(stats.num_samples),
            "raw_state": self._raw.copy(),
            "terminal_penalty": penalty,
            "target_reached": bool(reached),
            "success": success,
            "failures": len(result.failures),
            "timing": self.timing,
            "billing": self.billing,
        }
        # This machine's clock: reported with measured timing only, so that a modelled
        # episode's info is a pure function of the seed (and on the attribute always).
        self.last_wall_time = {"wall_time": wall_s, "fleet_wall_time": fleet_wall}
        if self.timing == "measured":
            info.update(self.last_wall_time)
        return self._observation(), float(reward), terminated, truncated, info

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
