"""Cost of one distributed training round: the billing models and the round accountant.

* **Billing** (:class:`ServerlessCostModel`, :class:`ServerClusterCostModel`): serverless
  bills each actor only for its own busy seconds and the learner for its update (cold
  starts included); pre-warmed containers are billed for the whole round; the server-based
  cluster is billed for the whole wall time, idle included.
* **The round accountant** (:class:`RoundAccountant`): turns one round -- the learner's
  update time and each actor's compute -- into its time and cost through a
  :class:`~fleetgym.meta_env.time_model.TimeModel` and a
  :class:`~fleetgym.meta_env.pricing.PricingPreset`, and keeps the billing state across
  rounds (the keep-alive pool of warm containers, the virtual clock, the total cost).

All times are seconds and all prices US dollars.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from fleetgym.meta_env.pricing import SECONDS_PER_HOUR, PricingPreset
from fleetgym.meta_env.time_model import ComputeCostModel, LearnerTimeBreakdown, TimeModel
from fleetgym.validation import check_bool, check_choice, check_float, check_int

__all__ = [
    "BILLINGS",
    "RoundAccountant",
    "RoundBill",
    "RoundCost",
    "ServerClusterCostModel",
    "ServerlessCostModel",
]

#: The billing models: serverless containers, or a server-based VM cluster.
BILLINGS: tuple[str, ...] = ("serverless", "server")


def _check_seconds(name: str, values: Any) -> list[float]:
    """``values`` (a sequence of times) as floats, each finite and >= 0."""
    if isinstance(values, (str, bytes)) or not isinstance(values, (Sequence, np.ndarray)):
        raise TypeError(f"{name}: expected a sequence of seconds, actual {type(values).__name__}")
    return [check_float(f"{name}[{i}]", t, low=0.0) for i, t in enumerate(values)]


def _check_pricing(pricing: Any) -> PricingPreset:
    if not isinstance(pricing, PricingPreset):
        raise TypeError(f"pricing: expected a PricingPreset, actual {type(pricing).__name__}")
    return pricing


@dataclass(frozen=True)
class RoundCost:
    """What one round was billed, by resource ($).

    Args:
        learner: The learner's bill: its busy time, or the whole round when kept warm
            (server billing: the learner VM for the whole round).
        actors: The actors' bill, the sum of ``per_actor`` (server billing: the actor VMs
            for the whole round).
        warm_pool: Warm containers that idled this round, billed all the same (unused
            pool slots, keep-alive containers not yet released); 0 under server billing.
        requests: Per-invocation request fees (cold actors, and a learner not kept warm);
            0 under server billing.
        per_actor: Each actor's bill in slot order; empty (the default) under server
            billing.
    """

    learner: float
    actors: float
    warm_pool: float
    requests: float
    per_actor: tuple[float, ...] = field(default_factory=tuple)

    @property
    def total(self) -> float:
        return self.learner + self.actors + self.warm_pool + self.requests


class ServerlessCostModel:
    """Serverless billing: pay per busy resource-second, cold starts included.

    Models MinionsRL's ``C_k = c (P^l_k d^l + sum_i P^a_k,i d^a)``: the learner is billed
    for its time ``P^l_k`` (cold start included) and each actor for its own time
    ``P^a_k,i`` (cold start, transfers and compute), released when done; plus one request
    fee per invocation. With pre-warming, the learner and the ``pool`` warm actor slots
    stay alive for the whole round ``P_k`` and are billed for all of it, busy or idle
    (used pool slots therefore cost ``P_k`` rather than ``P^a_k,i``); actors beyond the
    pool are billed as cold ones, and unused pool slots idle at a cost. With
    ``keep_alive`` (pre-warming by keeping the last fleet alive) every actor of the round
    stays alive until the round ends, ready for the next one, so each is billed ``P_k``;
    containers the next round does not need are released at its start. Warming containers
    up before the first round costs one cold start each (:meth:`prewarm_cost`).

    Args:
        pricing: the prices.

    Example:
        >>> from fleetgym.meta_env.pricing import get_pricing
        >>> pricing = get_pricing("aci")
        >>> cm = ServerlessCostModel(pricing)
        >>> cost = cm.round_cost(learner_s=2.0, actor_s=[1.0, 1.5], round_s=3.5)
        >>> round(cost.total * 1e6, 2)  # micro-dollars: 2 s of V100 + 2.5 actor-seconds
        1731.25

    Raises:
        TypeError: ``pricing`` is not a :class:`PricingPreset`.
    """

    def __init__(self, pricing: PricingPreset) -> None:
        self.pricing = _check_pricing(pricing)

    def round_cost(
        self,
        *,
        learner_s: float,
        actor_s: Sequence[float],
        round_s: float,
        pool: int = 0,
        learner_warm: bool = False,
        keep_alive: bool = False,
        idle_s: Sequence[float] = (),
    ) -> RoundCost:
        """Bill one round.

        Args:
            learner_s: the learner's time ``P^l_k``.
            actor_s: each actor's time ``P^a_k,i``, slot order (slots ``< pool`` are warm).
            round_s: the round's wall time ``P_k``.
            pool: warm actor slots kept alive for the whole round.
            learner_warm: the learner is kept alive for the whole round.
            keep_alive: every actor stays alive to the end of the round (billed ``P_k``)
                and no pool slot idles unused.
            idle_s: seconds each idle warm container (kept alive after its last round,
                unused in this one) is billed in this round.

        Raises:
            TypeError: a value of the wrong type.
            ValueError: a negative, NaN or infinite time, a negative ``pool``.
        """
        learner_s = check_float("learner_s", learner_s, low=0.0)
        actor_s = _check_seconds("actor_s", actor_s)
        round_s = check_float("round_s", round_s, low=0.0)
        pool = check_int("pool", pool, low=0)
        learner_warm = check_bool("learner_warm", learner_warm)
        keep_alive = check_bool("keep_alive", keep_alive)
        idle_s = _check_seconds("idle_s", idle_s)
        p = self.pricing
        price_a = p.actor_price_per_s
        learner = (round_s if learner_warm else learner_s) * p.learner_second
        per_actor = tuple(
            (round_s if keep_alive or i < pool else t) * price_a for i, t in enumerate(actor_s)
        )
        # Pool slots this round did not use idle for the whole round, billed all the same.
        idle_pool = 0 if keep_alive else max(0, pool - len(actor_s))
        warm_pool = (idle_pool * round_s + float(sum(idle_s))) * price_a
        # A warm container is one long invocation (billed once, at warm-up), not one per round.
        cold_actors = max(0, len(actor_s) - pool)
        requests = cold_actors * p.actor_request + (0.0 if learner_warm else p.learner_request)
        return RoundCost(
            learner=learner,
            actors=float(sum(per_actor)),
            warm_pool=warm_pool,
            requests=requests,
            per_actor=per_actor,
        )

    def prewarm_cost(self, time_model: TimeModel, pool: int, learner_warm: bool) -> float:
        """One-off cost of warming ``pool`` actors (and the learner) before round 1.

        Args:
            time_model: Gives the cold start each warmed container is billed for
                (``cold_start_actor_s``, ``cold_start_learner_s``).
            pool: Actor containers warmed (an int ``>= 0``); each costs its cold start at
                the actor price plus one request fee.
            learner_warm: Whether the learner is warmed too (its cold start at the learner
                price plus one request fee).

        Raises:
            TypeError: ``time_model`` not a :class:`TimeModel`, ``pool`` not an int,
                ``learner_warm`` not a bool.
            ValueError: ``pool`` negative.
        """
        if not isinstance(time_model, TimeModel):
            raise TypeError(f"time_model: expected a TimeModel, actual {type(time_model).__name__}")
        pool = check_int("pool", pool, low=0)
        learner_warm = check_bool("learner_warm", learner_warm)
        p = self.pricing
        cost = pool * (time_model.cold_start_actor_s * p.actor_price_per_s + p.actor_request)
        if learner_warm:
            cost += time_model.cold_start_learner_s * p.learner_second + p.learner_request
        return cost


class ServerClusterCostModel:
    """Server-based billing: a fixed VM cluster paid for the whole wall time, idle included.

    Models the server baselines of MinionsRL: one V100 VM for the learner plus
    ``ceil(actors / cores per VM)`` actor VMs (4 x 8 cores for 32 actors), all running for
    every second of training whether busy or idle. VMs are up before training starts (no
    per-round cold start).

    Args:
        pricing: the prices (VM fields).
        actors: actor cores the cluster provides.

    Example:
        >>> from fleetgym.meta_env.pricing import get_pricing
        >>> cm = ServerClusterCostModel(get_pricing("aci"), actors=32)
        >>> round(cm.round_cost(round_s=3600.0).total, 3)
        7.092

    Raises:
        TypeError: ``pricing`` is not a :class:`PricingPreset`, ``actors`` not an int.
        ValueError: ``actors`` < 1.
    """

    def __init__(self, pricing: PricingPreset, actors: int = 32) -> None:
        self.pricing = _check_pricing(pricing)
        self.actors = check_int("actors", actors, low=1)

    @property
    def price_per_s(self) -> float:
        """$ per second of the whole cluster."""
        return self.pricing.server_cluster_price_per_s(self.actors)

    def round_cost(self, *, round_s: float) -> RoundCost:
        """Bill one round of wall time ``round_s`` (learner VM + actor VMs).

        Args:
            round_s: The round's wall time ``P_k`` (seconds, ``>= 0``); every VM is billed
                for all of it, busy or idle.

        Raises:
            TypeError: ``round_s`` is not a number.
            ValueError: ``round_s`` is negative, NaN or infinite.
        """
        round_s = check_float("round_s", round_s, low=0.0)
        p = self.pricing
        learner = round_s * p.server_learner_vm_hour / SECONDS_PER_HOUR
        actors = (
            round_s * p.server_actor_vms(self.actors) * p.server_actor_vm_hour / SECONDS_PER_HOUR
        )
        return RoundCost(learner=learner, actors=actors, warm_pool=0.0, requests=0.0)


@dataclass(frozen=True)
class RoundBill:
    """The time and cost of one round, as :class:`RoundAccountant` accounts it.

    Args:
        actor_times: each actor's time ``P^a_k,i`` (cold start, transfers, compute), in the
            order of the round's actors.
        learner: the learner's time ``P^l_k`` (cold start and update).
        round_time: ``P_k = P^l_k + max_i P^a_k,i``.
        cost: the round's bill by resource.
        prewarm_cost: the one-off cost of warming containers before the first round (0
            in later rounds).
    """

    actor_times: np.ndarray
    learner: LearnerTimeBreakdown
    round_time: float
    cost: RoundCost
    prewarm_cost: float

    @property
    def total_cost(self) -> float:
        """What the round cost in all ($): its bill plus any pre-warming."""
        return self.cost.total + self.prewarm_cost


class RoundAccountant:
    """Turns each round of a training run into its time and cost; keeps the billing state.

    One :meth:`account` call per round, in order. A round of ``n`` actors, where actor
    ``i`` runs on slot ``actor_ids[i]`` and computes ``actor_compute_s[i]`` seconds and the
    learner updates for ``learner_update_s`` seconds, is accounted as follows:

    1. *Warm slots* (``pool``): every slot under server billing (VMs are up before
       training); under keep-alive (``prewarm`` without ``warm_pool``) all ``n`` slots in
       the first round (warmed before training starts), later the previous round's
       actors and any released slot still within ``keep_alive_s`` of its release; a fixed
       ``warm_pool`` otherwise; none without ``prewarm``. Slots are used from 0 up, so the
       warm slots are ``0 .. pool-1``.
    2. *Times* from the :class:`~fleetgym.meta_env.time_model.TimeModel`: each actor's
       (no cold start on a warm slot) and the learner's (no cold start when kept warm);
       the round takes ``P_k = P^l_k + max_i P^a_k,i``.
    3. *Cost*: the server cluster's wall time, or the serverless bill, where keep-alive
       containers the round does not use idle, billed, until ``keep_alive_s`` after
       their release; the first round also pays for warming the containers up.
    4. *State*: the clock advances by ``P_k``, and under keep-alive the round's slots
       stay warm until ``keep_alive_s`` after it.

    Args:
        time_model: cold starts, transfers, pre-warming and the learner's speed.
        pricing: the prices.
        max_actors: slots of the fleet.
        billing: one of :data:`BILLINGS`.
        server_actors: actor cores of the server cluster; None: ``max_actors``.

    Example:
        >>> from fleetgym.meta_env.pricing import get_pricing
        >>> acc = RoundAccountant(TimeModel(latency_s=0.0), get_pricing("aci"), max_actors=4)
        >>> bill = acc.account(actor_compute_s=[1.0, 2.0], learner_update_s=0.5)
        >>> bill.actor_times.round(3).tolist(), round(bill.round_time, 3)
        ([1.3, 2.3], 4.3)
        >>> round(bill.total_cost * 1e3, 3), acc.rounds, round(acc.elapsed_s, 3)
        (1.745, 1, 4.3)

    Raises:
        TypeError: ``time_model`` or ``pricing`` of the wrong type, a non-integer count.
        ValueError: an unknown billing, ``max_actors`` or ``server_actors`` < 1.
    """

    def __init__(
        self,
        time_model: TimeModel,
        pricing: PricingPreset,
        *,
        max_actors: int,
        billing: str = "serverless",
        server_actors: int | None = None,
    ) -> None:
        if not isinstance(time_model, TimeModel):
            raise TypeError(f"time_model: expected a TimeModel, actual {type(time_model).__name__}")
        self.time_model = time_model
        self.pricing = _check_pricing(pricing)
        self.max_actors = check_int("max_actors", max_actors, low=1)
        self.billing = check_choice("billing", billing, BILLINGS)
        self.server_actors = (
            self.max_actors
            if server_actors is None
            else check_int("server_actors", server_actors, low=1)
        )
        self.serverless = ServerlessCostModel(self.pricing)
        self.cluster = ServerClusterCostModel(self.pricing, actors=self.server_actors)
        self.reset()

    @property
    def prewarmed(self) -> bool:
        """Whether containers are kept warm: the server cluster's VMs, or pre-warming."""
        return self.billing == "server" or bool(self.time_model.prewarm)

    @property
    def keep_alive(self) -> bool:
        """Whether serverless actors are kept alive between rounds (keep-alive pool)."""
        return self.billing != "server" and self.time_model.keep_alive

    def reset(self) -> None:
        """Forget every round: a new training run starts."""
        #: Rounds accounted.
        self.rounds = 0
        #: The virtual clock: the sum of the round times so far.
        self.elapsed_s = 0.0
        #: $ billed so far, pre-warming included.
        self.total_cost = 0.0
        self._previous_actors = 0
        # Keep-alive: virtual time until which each actor slot stays warm.
        self._warm_until = np.full(self.max_actors, -np.inf)

    def reference_times(
        self, compute: ComputeCostModel, steps_per_actor: int
    ) -> tuple[float, float]:
        """Modelled learner time of a round of ``max_actors`` and one actor's rollout time.

        Both without jitter, with empty transfers (latency only) and without cold starts
        where containers are kept warm: the scales of the scheduling env's normalised
        time entries.

        Args:
            compute: The compute model giving a rollout's and an update's seconds.
            steps_per_actor: Steps of one actor's rollout (an int ``>= 0``); the update is
                over ``max_actors * steps_per_actor`` samples.
        """
        learner = self.time_model.learner_time(
            compute.learner_update_s(self.max_actors * steps_per_actor), warm=self.prewarmed
        )
        actor = self.time_model.actor_time(
            compute.actor_overhead_s + steps_per_actor * compute.actor_step_s,
            weight_bytes=0,
            trajectory_bytes=0,
            warm=self.prewarmed,
        )
        return learner.total_s, actor.total_s

    def warm_slots(self, num_actors: int) -> int:
        """Warm actor slots of the next round if it runs ``num_actors`` actors.

        Args:
            num_actors: Actors the next round runs. Only the first round under keep-alive
                uses it (all of its actors are warmed before training); otherwise the fixed
                pool or the keep-alive state decides (0 without ``prewarm`` and under
                server billing, whose VMs are all up anyway).

        Example:
            >>> from fleetgym.meta_env.pricing import get_pricing
            >>> acc = RoundAccountant(TimeModel(prewarm=True, warm_pool=2),
            ...                       get_pricing("aci"), max_actors=4)
            >>> acc.warm_slots(3)
            2
        """
        tm = self.time_model
        if self.billing == "server":
            return 0  # no pool: every VM slot is warm anyway
        if not self.keep_alive:
            return tm.pool_size(self.max_actors)
        if self.rounds == 0:
            return num_actors
        alive = int(np.count_nonzero(self._warm_until > self.elapsed_s))
        return max(tm.pool_size(self.max_actors, self._previous_actors), alive)

    def account(
        self,
        *,
        actor_compute_s: Sequence[float] | np.ndarray,
        learner_update_s: float,
        actor_ids: Sequence[int] | None = None,
        num_actors: int | None = None,
        weight_bytes: int = 0,
        trajectory_bytes: Sequence[int] | None = None,
    ) -> RoundBill:
        """Account one round and advance the billing state.

        Args:
            actor_compute_s: each actor's compute seconds (on this machine's CPU).
            learner_update_s: the update's seconds on this machine's CPU.
            actor_ids: each actor's slot; None: ``0, 1, ...``.
            num_actors: actors the round asked for (its slots stay warm under keep-alive,
                even those whose trajectory was lost); None: one per compute time.
            weight_bytes: bytes of the weights every actor downloads.
            trajectory_bytes: bytes each actor uploads; None: nothing.

        Raises:
            TypeError: a value of the wrong type.
            ValueError: a negative, NaN or infinite time or byte count, ``actor_ids`` or
                ``trajectory_bytes`` of another length than ``actor_compute_s``, or
                ``num_actors`` outside ``[0, max_actors]``.
        """
        actor_compute_s = _check_seconds("actor_compute_s", actor_compute_s)
        learner_update_s = check_float("learner_update_s", learner_update_s, low=0.0)
        n = len(actor_compute_s)
        ids = list(range(n)) if actor_ids is None else list(actor_ids)
        up = [0] * n if trajectory_bytes is None else list(trajectory_bytes)
        if len(ids) != n or len(up) != n:
            raise ValueError(
                f"actor_ids, trajectory_bytes: expected {n} entries (one per actor), "
                f"actual {len(ids)} and {len(up)}"
            )
        requested = n if num_actors is None else num_actors
        requested = check_int("num_actors", requested, low=0, high=self.max_actors)
        tm = self.time_model
        server = self.billing == "server"
        pool = self.warm_slots(n)
        actor_times = np.array(
            [
                tm.actor_time(
                    actor_compute_s[i],
                    weight_bytes=weight_bytes,
                    trajectory_bytes=up[i],
                    warm=server or ids[i] < pool,
                ).total_s
                for i in range(n)
            ]
        )
        learner = tm.learner_time(learner_update_s, warm=self.prewarmed)
        round_time = learner.total_s + (float(actor_times.max()) if n else 0.0)
        prewarm_cost = 0.0
        if server:
            cost = self.cluster.round_cost(round_s=round_time)
        else:
            idle_s: list[float] = []
            if self.keep_alive and self.rounds > 0:
                # Warm containers this round does not use idle, billed, until released.
                left = np.maximum(self._warm_until[n:pool] - self.elapsed_s, 0.0)
                idle_s = np.minimum(left, round_time).tolist()
            cost = self.serverless.round_cost(
                learner_s=learner.total_s,
                actor_s=actor_times.tolist(),
                round_s=round_time,
                pool=pool,
                learner_warm=self.prewarmed,
                keep_alive=self.keep_alive,
                idle_s=idle_s,
            )
            if self.rounds == 0 and (pool or self.prewarmed):
                prewarm_cost = self.serverless.prewarm_cost(tm, pool, self.prewarmed)
        bill = RoundBill(
            actor_times=actor_times,
            learner=learner,
            round_time=round_time,
            cost=cost,
            prewarm_cost=prewarm_cost,
        )
        self.rounds += 1
        self.total_cost += bill.total_cost
        self.elapsed_s += round_time
        if tm.keep_alive:
            # This round's containers are released at the earliest when the next round
            # starts, then kept keep_alive_s; earlier releases keep their own deadlines.
            self._warm_until[:requested] = self.elapsed_s + tm.keep_alive_s
        self._previous_actors = requested
        return bill
