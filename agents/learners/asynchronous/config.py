"""The two configs of the asynchronous trainers: what they learn and where they run.

* :class:`AsyncPPOConfig`: the algorithm of :class:`~fleetgym.agents.learners.asynchronous.trainer.AsyncPPO`
  (the loss and its lag compensations, the lag bound, the batch, the PPO hyperparameters,
  imagination);
* :class:`TokenAsyncPPOConfig`: the algorithm of ``TokenAsyncPPO`` (a
  :class:`~fleetgym.agents.learners.token_config.TokenPPOConfig`, the lag bound, the batch);
* :class:`AsyncTopology`: where both run (actor slots, backend, inference, env instances,
  load balancing, rollout length, Ray cluster, inference server).

Each is frozen and checked when built; each round-trips through ``dataclasses.asdict``, JSON
and back (``AsyncPPOConfig(**json.loads(json.dumps(asdict(config))))``), which is how the
trainers' settings files hold them.

Example:
    >>> import dataclasses, json
    >>> algo = AsyncPPOConfig(loss="gipo", max_policy_lag=4, hyperparameters={"epochs": 2})
    >>> algo.loss_config.label
    'gipo(sigma=0.8)+recompute+global-norm+kl<=0.02'
    >>> AsyncPPOConfig(**json.loads(json.dumps(dataclasses.asdict(algo)))) == algo
    True
    >>> AsyncTopology(n_actors=2, backend="thread")
    Traceback (most recent call last):
    ...
    ValueError: backend: expected one of ('inprocess', 'process', 'ray'), actual 'thread' (renamed 'inprocess' in 2.0)
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

from fleetgym.agents.backends import INFERENCE_MODES, check_backend
from fleetgym.agents.fleet.base import DEFAULT_ACTOR_TIMEOUT_S
from fleetgym.agents.inference.batching import check_device
from fleetgym.agents.learners.asynchronous.ray_actor import check_ray_options
from fleetgym.agents.learners.lag import MAX_POLICY_LAG, MAX_RING
from fleetgym.agents.learners.losses.config import LossConfig
from fleetgym.agents.learners.losses.functions import DEFAULT_SIGMA, DEFAULT_WEIGHT_CAP
from fleetgym.agents.learners.losses.registry import get_loss
from fleetgym.agents.learners.ppo import HYPERPARAMETERS
from fleetgym.agents.learners.token_config import TokenPPOConfig
from fleetgym.agents.rollout import MAX_ROLLOUT_STEPS
from fleetgym.agents.world_model.config import ImaginationConfig
from fleetgym.validation import check_bool, check_choice, check_float, check_int, quote

#: Upper bounds of the trainers' counts (guards far above any sensible value, as the
#: workloads' ``COUNT_LIMITS``): a typo is an error up front, not a MemoryError in learn.
COUNT_LIMITS = {
    "steps_per_actor": MAX_ROLLOUT_STEPS,
    "batch_trajectories": 100_000,
    "max_policy_lag": MAX_POLICY_LAG,
    "lag_injection": MAX_RING - 1,
    "history_limit": 100_000_000,
}
#: How many update records an asynchronous trainer keeps in memory by default: a record
#: takes about 3 KiB (a 256-sample update), so at most about 32 MiB, whatever the run's length.
HISTORY_LIMIT = 10_000
#: Most samples in one update (``batch_trajectories * steps_per_actor``).
MAX_BATCH_SAMPLES = 100_000_000
#: Most env instances of one trainer (``n_actors * envs_per_actor``).
MAX_INSTANCES = 4096


def _check_lag(config: Any) -> None:
    """Check the lag bound, the batch and the injected lag of an algorithm config."""
    if config.max_policy_lag is not None:
        check_int("max_policy_lag", config.max_policy_lag, 0, COUNT_LIMITS["max_policy_lag"])
    if config.batch_trajectories is not None:
        check_int(
            "batch_trajectories", config.batch_trajectories, 1, COUNT_LIMITS["batch_trajectories"]
        )
    check_int("lag_injection", config.lag_injection, 0, COUNT_LIMITS["lag_injection"])
    if config.max_policy_lag is not None and config.lag_injection > config.max_policy_lag:
        raise ValueError(
            f"lag_injection: expected at most max_policy_lag={config.max_policy_lag}, "
            f"actual {config.lag_injection}"
        )
    offset = getattr(config, "proximal_offset", 1)
    if config.max_policy_lag is not None and isinstance(offset, int):
        if offset > config.max_policy_lag + 1:
            raise ValueError(
                f"proximal_offset: expected at most max_policy_lag + 1 = "
                f"{config.max_policy_lag + 1} (a proximal policy older than any sample the "
                f"lag bound admits), actual {offset}"
            )


@dataclass(frozen=True)
class AsyncPPOConfig:
    """The algorithm of :class:`~fleetgym.agents.learners.asynchronous.trainer.AsyncPPO`.

    Models what the learner optimises and how much lag it tolerates, apart from where the
    actors run (:class:`AsyncTopology`). The loss switches are those of
    :class:`~fleetgym.agents.learners.losses.LossConfig` (checked by it, see
    :attr:`loss_config`), with this trainer's defaults.

    Args:
        loss: A name in the loss registry
            (:data:`~fleetgym.agents.learners.losses.registry.LOSS_REGISTRY`): ``"ppo"``
            (the default: it reached CartPole's target on every measured run, see
            docs/explanation/async.md, and held a Hopper gait at the largest lag of the
            four losses, see docs/results/async.md), ``"gipo"``, ``"vtrace"``, ``"decoupled"`` (AReaL's
            decoupled PPO objective) or one added with
            :func:`~fleetgym.agents.learners.losses.registry.register_loss`.
        sigma: GIPO's Gaussian width in log-ratio space (> 0).
        recompute_values: Recompute values and GAE with the newest critic before each update.
        global_advantage_norm: Normalise advantages over the whole batch.
        target_kl: KL budget per update; ``"auto"`` takes the loss's ``default_target_kl``
            (:class:`~fleetgym.agents.learners.losses.registry.PolicyLoss`: none for
            PPO-clip, 0.02 for GIPO and V-trace), ``None`` disables it.
        proximal_clip: PPO-clip around the learner's policy at the update's start
            (decoupled PPO, see :class:`~fleetgym.agents.learners.losses.LossConfig`;
            ``loss="ppo"`` only).
        proximal_offset: ``loss="decoupled"`` only: the proximal policy is the learner this
            many updates back (>= 1; 1 is the learner at the update's start; at most
            ``max_policy_lag + 1``).
        weight_cap: ``loss="decoupled"`` only: the cap on the behaviour weight
            ``pi_prox / pi_behav`` (> 1), or ``None`` for no cap.
        cap_mode: ``loss="decoupled"`` only: a sample whose weight is above the cap is
            ``"drop"``-ped from the loss (AReaL's choice) or its weight ``"truncate"``-d to
            the cap.
        max_policy_lag: Bound on the lag in updates (>= 0), enforced at admission and at
            sampling (``None``: unbounded, the pipeline then holds ``2 * batch_trajectories``;
            ``0``: synchronous PPO). The default, 4, is the largest lag at which PPO-clip
            still hopped on Hopper-v5 within one seed of lag 0 (docs/results/async.md, "Lags
            0-8 on a hopping Hopper"); lag 8 cost two of three hopping seeds.
        batch_trajectories: Trajectories per update (``None``: one per env instance,
            ``n_actors * envs_per_actor`` of the topology).
        lag_injection: Actors act with the weights from this many updates ago (a fixed
            injected lag, for experiments; at most ``max_policy_lag``).
        hyperparameters: PPO hyperparameters replacing the workload's defaults (names in
            :data:`fleetgym.agents.learners.ppo.HYPERPARAMETERS`; their values are checked
            by the workload when the trainer is built).
        imagination: An :class:`~fleetgym.agents.world_model.ImaginationConfig`, a dict of
            its fields, ``True`` (the defaults, seeded by the trainer's seed) or ``None``
            (real data only): the learner trains a world model on the real trajectories and
            mixes imagined ones into each update.

    Example:
        >>> AsyncPPOConfig(loss="vtrace", target_kl=None).loss_config.label
        'vtrace+recompute+global-norm'
        >>> AsyncPPOConfig(hyperparameters={"learning_rate": 1e-3})
        Traceback (most recent call last):
        ...
        TypeError: hyperparameters: expected names among ['lr', 'epochs', 'minibatch_size', 'gamma', 'gae_lambda', 'clip_coef', 'ent_coef', 'vf_coef', 'max_grad_norm', 'reward_transform'], actual ['learning_rate']

    Raises:
        ValueError: For a loss not in the registry, ``sigma <= 0``, ``target_kl <= 0``,
            ``proximal_clip`` with a loss without it, a negative or too large count, or a
            lag injection above ``max_policy_lag``.
        TypeError: For a value of the wrong type or an unknown hyperparameter name.
    """

    loss: str = "ppo"
    sigma: float = DEFAULT_SIGMA
    recompute_values: bool = True
    global_advantage_norm: bool = True
    target_kl: float | str | None = "auto"
    proximal_clip: bool = False
    proximal_offset: int = 1
    weight_cap: float | None = DEFAULT_WEIGHT_CAP
    cap_mode: str = "drop"
    max_policy_lag: int | None = 4
    batch_trajectories: int | None = None
    lag_injection: int = 0
    hyperparameters: dict[str, Any] = field(default_factory=dict)
    imagination: ImaginationConfig | dict[str, Any] | bool | None = None

    def __post_init__(self) -> None:
        if isinstance(self.target_kl, str) and self.target_kl != "auto":
            raise ValueError(
                f"target_kl: expected a number > 0, 'auto' or None, actual {self.target_kl!r}"
            )
        object.__setattr__(self, "sigma", self.loss_config.sigma)  # checks every loss switch
        _check_lag(self)
        if not isinstance(self.hyperparameters, dict):
            raise TypeError(
                f"hyperparameters: expected a dict of PPO hyperparameters, actual "
                f"{quote(self.hyperparameters)}"
            )
        unknown = sorted(set(self.hyperparameters) - set(HYPERPARAMETERS))
        if unknown:
            raise TypeError(
                f"hyperparameters: expected names among {list(HYPERPARAMETERS)}, actual {unknown}"
            )
        object.__setattr__(self, "hyperparameters", dict(self.hyperparameters))
        ImaginationConfig.from_value(self.imagination)  # checks its type and fields

    @property
    def loss_config(self) -> LossConfig:
        """The :class:`~fleetgym.agents.learners.losses.LossConfig` the learner uses
        (``target_kl="auto"`` resolved to the loss's default)."""
        target_kl = self.target_kl
        if target_kl == "auto":
            target_kl = get_loss(self.loss).default_target_kl
        return LossConfig(
            self.loss, self.sigma, self.recompute_values, self.global_advantage_norm,
            target_kl, self.proximal_clip,  # type: ignore[arg-type]
            self.proximal_offset, self.weight_cap, self.cap_mode,
        )  # fmt: skip

    def as_dict(self) -> dict[str, Any]:
        """The fields as JSON values (an :class:`ImaginationConfig` through its ``as_dict``)."""
        out = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        if isinstance(self.imagination, ImaginationConfig):
            out["imagination"] = self.imagination.as_dict()
        out["hyperparameters"] = dict(self.hyperparameters)
        return out


@dataclass(frozen=True)
class TokenAsyncPPOConfig:
    """The algorithm of ``TokenAsyncPPO``: a token PPO config, the lag bound and the batch.

    Args:
        token: The :class:`~fleetgym.agents.learners.token_config.TokenPPOConfig` (or a dict
            of its fields): ratio level, loss, ``sigma``, ``target_kl`` (``None``: the loss's
            default, ``0``: none), the policy's sizes and the PPO hyperparameters (its
            ``n_envs`` and ``n_steps`` are not used: see :class:`AsyncTopology`).
        max_policy_lag, batch_trajectories, lag_injection: As :class:`AsyncPPOConfig`.
        learner_device: Where the learner's policy and update run (``"cpu"`` or
            ``"cuda[:N]"``; the weights are published to the actors as host arrays).

    Example:
        >>> import dataclasses, json
        >>> algo = TokenAsyncPPOConfig(TokenPPOConfig(ratio_level="chunk", chunk=2), max_policy_lag=2)
        >>> TokenAsyncPPOConfig(**json.loads(json.dumps(dataclasses.asdict(algo)))) == algo
        True

    Raises:
        ValueError, TypeError: As :class:`AsyncPPOConfig` and ``TokenPPOConfig`` do, and for
            a bad device.
    """

    token: TokenPPOConfig = field(default_factory=TokenPPOConfig)
    max_policy_lag: int | None = 8
    batch_trajectories: int | None = None
    lag_injection: int = 0
    learner_device: str = "cpu"

    def __post_init__(self) -> None:
        if isinstance(self.token, dict):
            object.__setattr__(self, "token", TokenPPOConfig(**self.token))
        if not isinstance(self.token, TokenPPOConfig):
            raise TypeError(
                f"token: expected a TokenPPOConfig or a dict of its fields, actual "
                f"{quote(self.token)}"
            )
        _check_lag(self)
        check_device("learner_device", self.learner_device)

    def as_dict(self) -> dict[str, Any]:
        """The fields as JSON values."""
        return dataclasses.asdict(self)


@dataclass(frozen=True)
class AsyncTopology:
    """Where an asynchronous trainer's actors run (shared by ``AsyncPPO`` and ``TokenAsyncPPO``).

    Args:
        n_actors: Actor slots (one thread each, plus a worker process with
            ``backend="process"`` or a Ray actor with ``backend="ray"``).
        backend: Where the actor slots run (:data:`fleetgym.agents.backends.BACKENDS`):
            ``"inprocess"`` (each slot steps its env in a thread of this process),
            ``"process"`` (each slot's env and rollouts run in a worker process of its own;
            a killed worker is a failed rollout, replaced) or ``"ray"`` (each slot is a Ray
            actor; ``inference="local"`` only). ``TokenAsyncPPO`` takes the first two.
        inference: ``"local"`` (each actor acts with its own copy of the published weights)
            or ``"server"`` (actors act through one in-process
            :class:`~fleetgym.agents.inference.InferenceServer`, which receives the weights
            after every update).
        envs_per_actor: Env instances each actor hosts (>= 1). Above 1 the actors collect
            in rounds, one rollout per instance each (see
            :mod:`fleetgym.agents.learners.asynchronous.balancing`).
        load_balancing: Work stealing: an actor with nothing left in a round takes a queued
            instance from the actor furthest behind by its measured step rate.
        steps_per_actor: Env steps (``TokenAsyncPPO``: decisions) per rollout (``None``: the
            workload's ``rollout_steps``).
        concurrent: ``False`` runs the same loop without threads, collecting and updating
            in turn (deterministic for a seed; the lag is then exactly the injected one).
        address: ``backend="ray"``: the Ray cluster to join (``None``: the one Ray is
            connected to, else a local cluster on 127.0.0.1 shut down by ``close``).
        ray_actor_options: ``backend="ray"``: Ray actor options of each slot (default: a
            share of a local cluster's CPUs, one CPU on a cluster joined).
        server_batch: ``inference="server"``: the most requests answered in one batch
            (``None``: ``n_actors``).
        server_wait_ms: ``inference="server"``: the longest wait of a batch's oldest
            request for the batch to fill (ms, or ``"auto"``).
        server_device: ``inference="server"``: where the server runs (``"cpu"``,
            ``"cuda[:N]"``).
        actor_timeout: ``backend="process"`` or ``"ray"``: seconds one rollout may take
            before its worker process (Ray actor) is killed and the slot replaced by its next
            incarnation (a stopped or hung worker is such a fault).

    Example:
        >>> AsyncTopology(n_actors=2, envs_per_actor=4).n_instances
        8
        >>> AsyncTopology(backend="ray", inference="server")
        Traceback (most recent call last):
        ...
        ValueError: inference: expected 'local' with backend='ray' (Ray actors act with their own policy copy; the inference server is not supported there), actual 'server'

    Raises:
        ValueError: For a count out of range, more than :data:`MAX_INSTANCES` env
            instances, an unknown backend (a 1.x name: naming its 2.0 name) or inference
            mode, Ray settings without ``backend="ray"``, or ``backend="ray"`` with
            ``inference="server"``.
        TypeError: For a value of the wrong type.
    """

    n_actors: int = 4
    backend: str = "inprocess"
    inference: str = "local"
    envs_per_actor: int = 1
    load_balancing: bool = False
    steps_per_actor: int | None = None
    concurrent: bool = True
    address: str | None = None
    ray_actor_options: dict[str, Any] | None = None
    server_batch: int | None = None
    server_wait_ms: float | str = 5.0
    server_device: str = "cpu"
    actor_timeout: float = DEFAULT_ACTOR_TIMEOUT_S

    def __post_init__(self) -> None:
        check_int("n_actors", self.n_actors, low=1, high=1024)
        check_int("envs_per_actor", self.envs_per_actor, low=1, high=1024)
        if self.n_instances > MAX_INSTANCES:
            raise ValueError(
                f"envs_per_actor: expected n_actors * envs_per_actor <= {MAX_INSTANCES} env "
                f"instances, actual {self.n_instances}"
            )
        check_bool("load_balancing", self.load_balancing)
        check_bool("concurrent", self.concurrent)
        if self.steps_per_actor is not None:
            check_int("steps_per_actor", self.steps_per_actor, 1, COUNT_LIMITS["steps_per_actor"])
        check_backend(self.backend)
        check_choice("inference", self.inference, INFERENCE_MODES)
        _, options = check_ray_options(
            self.backend, self.inference, self.address, self.ray_actor_options
        )
        object.__setattr__(self, "ray_actor_options", None if options is None else dict(options))
        if self.server_batch is not None:
            check_int("server_batch", self.server_batch, low=1)
        if self.server_wait_ms != "auto":
            object.__setattr__(
                self, "server_wait_ms", check_float("server_wait_ms", self.server_wait_ms, low=0.0)
            )
        check_device("server_device", self.server_device)
        object.__setattr__(
            self,
            "actor_timeout",
            check_float("actor_timeout", self.actor_timeout, low=0.0, strict=True),
        )

    @property
    def n_instances(self) -> int:
        """Env instances in all (``n_actors * envs_per_actor``)."""
        return self.n_actors * self.envs_per_actor

    def as_dict(self) -> dict[str, Any]:
        """The fields as JSON values."""
        return dataclasses.asdict(self)


__all__ = [
    "COUNT_LIMITS",
    "HISTORY_LIMIT",
    "MAX_BATCH_SAMPLES",
    "MAX_INSTANCES",
    "AsyncPPOConfig",
    "AsyncTopology",
    "TokenAsyncPPOConfig",
]
