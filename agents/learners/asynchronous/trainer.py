"""Asynchronous PPO: actors keep collecting while the learner trains, with a bounded policy lag.

:class:`AsyncPPO` runs a rollout loop (one thread per actor slot) and a training loop (the
calling thread) at once, joined by a bounded trajectory pipeline. The learner publishes its
weights after every update; an actor starting a rollout takes the newest published weights
(or, with ``lag_injection=k``, the weights from ``k`` updates ago, from a
:class:`~fleetgym.agents.learners.lag.WeightRing`).

Invariants:

* **Admission (backpressure).** An actor must hold a ticket to start a rollout, and at
  most ``(max_policy_lag + 1) * batch_trajectories`` tickets are out at once (collecting,
  queued, or in the update being computed; a ticket ends when its update is published).
  The learner consumes ``batch_trajectories`` per update, so a trajectory consumed in
  admission order is at most ``max_policy_lag`` updates old; actors pause instead of
  producing work that would be thrown away. With ``max_policy_lag=0`` the trainer is
  synchronous PPO.
* **Sampling.** A trajectory that finishes out of order (a slow actor) can still be older
  than the bound when it is used; the learner
  (:class:`~fleetgym.agents.learners.lag.CompensatedPPOLearner`) drops those samples and
  counts them.
* **Faults.** A trajectory reaches the pipeline only whole; an actor that raises is
  replaced (a fresh env, the next incarnation) and its ticket returned; with
  ``backend="process"`` a worker process killed mid-rollout is such an actor (its partial
  rollout dies with it), with ``backend="ray"`` a dead Ray actor. An exception in the learner (or a callback) stops and joins
  every actor thread, and kills and closes every worker process (and Ray actor), before it
  propagates.

The trainer owns its actor slots, :attr:`AsyncPPO.slots` (an
:class:`~fleetgym.agents.learners.asynchronous.slots.AsyncActorSlots`: actors, threads,
restarts, the inference server); this module holds the training loop, the weights,
predict, save and load (each update's record and TensorBoard scalars are in
:mod:`~fleetgym.agents.learners.asynchronous.records`, the settings file in
:mod:`~fleetgym.agents.learners.asynchronous.settings`).

The learner, not the actors, owns the torch threads: ``learn`` sets torch to one intra-op
thread while it runs (actors are threads of the same process, or, with
``backend="process"``, threads waiting on a worker process each) and restores it afterwards.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from fleetgym.agents.backends import INFERENCE_MODES, check_backend
from fleetgym.agents.learners.asynchronous.pipeline import TrajectoryPipeline
from fleetgym.agents.learners.asynchronous.ray_actor import check_ray_options
from fleetgym.agents.learners.asynchronous.records import (
    UpdateRecord,
    log_update,
    summary_writer,
)
from fleetgym.agents.learners.asynchronous.settings import load_trainer, save_trainer
from fleetgym.agents.learners.asynchronous.slots import (
    ActorFactory,
    AsyncActorSlots,
    _default_actor,
)
from fleetgym.agents.learners.checks import check_observation, check_seed
from fleetgym.agents.learners.lag import MAX_POLICY_LAG, MAX_RING, CompensatedPPOLearner, WeightRing
from fleetgym.agents.learners.losses.config import LossConfig
from fleetgym.agents.learners.losses.registry import get_loss
from fleetgym.agents.rollout import MAX_ROLLOUT_STEPS
from fleetgym.agents.types import Weights
from fleetgym.agents.workloads import Workload, get_workload
from fleetgym.validation import check_bool, check_choice, check_float, check_int, quote

logger = logging.getLogger(__name__)

#: Upper bounds of the trainer's counts (guards far above any sensible value, as the
#: workloads' ``COUNT_LIMITS``): a typo is an error up front, not a MemoryError in learn.
COUNT_LIMITS = {
    "steps_per_actor": MAX_ROLLOUT_STEPS,
    "batch_trajectories": 100_000,
    "max_policy_lag": MAX_POLICY_LAG,
    "lag_injection": MAX_RING - 1,
}
#: Most samples in one update (``batch_trajectories * steps_per_actor``).
MAX_BATCH_SAMPLES = 100_000_000


class AsyncPPO:
    """PPO with decoupled rollout and training, a bounded policy lag and lag-tolerant losses.

    Models an asynchronous actor-learner trainer in the SB3 mould: construct it with a
    workload, call :meth:`learn`, then :meth:`predict`, :meth:`save` and :meth:`load`.

    Example:
        >>> model = AsyncPPO("CartPole-v1", loss="gipo", n_actors=2, steps_per_actor=16,
        ...                  epochs=1, seed=0)
        >>> _ = model.learn(64, progress_bar=False)
        >>> model.num_timesteps, model.learner.policy_version
        (64, 2)
        >>> action, _ = model.predict(np.zeros(4, np.float32))
        >>> action.shape
        ()

    Args:
        workload: A :class:`~fleetgym.agents.workloads.Workload` or its name.
        loss: A name in the loss registry
            (:data:`~fleetgym.agents.learners.losses.registry.LOSS_REGISTRY`): ``"ppo"``
            (the default: it reached CartPole's target on every measured run, see
            docs/async.md), ``"gipo"``, ``"vtrace"`` or one added with
            :func:`~fleetgym.agents.learners.losses.registry.register_loss`.
        sigma: GIPO's Gaussian width in log-ratio space (> 0).
        max_policy_lag: Bound on the lag in updates (>= 0), enforced at admission and at
            sampling (``None``: unbounded, the pipeline then holds ``2 * batch_trajectories``).
        n_actors: Actor slots (one thread each, plus a worker process with
            ``backend="process"`` or a Ray actor with ``backend="ray"``).
        steps_per_actor: Env steps per rollout (default: the workload's ``rollout_steps``).
        batch_trajectories: Trajectories per update (default ``n_actors``).
        recompute_values: Recompute values and GAE with the newest critic before each update.
        global_advantage_norm: Normalise advantages over the whole batch.
        proximal_clip: PPO-clip around the learner's policy at the update's start, each
            advantage weighted by its ratio to the behaviour policy (decoupled PPO, see
            :class:`~fleetgym.agents.learners.losses.LossConfig`; ``loss="ppo"`` only).
        target_kl: KL budget per update (see :class:`~fleetgym.agents.learners.losses.LossConfig`);
            ``"auto"`` takes the loss's ``default_target_kl``
            (:class:`~fleetgym.agents.learners.losses.registry.PolicyLoss`: none for
            PPO-clip, 0.02 for GIPO and V-trace), ``None`` disables it.
        lag_injection: Actors act with the weights from this many updates ago (a fixed
            injected lag, for experiments; at most ``max_policy_lag``).
        concurrent: ``False`` runs the same loop without threads, collecting and updating
            in turn (deterministic for a seed; the lag is then exactly the injected one).
        inference: ``"local"`` (each actor acts with its own copy of the published
            weights) or ``"server"`` (actors act through one in-process
            :class:`~fleetgym.agents.inference.InferenceServer`, which receives the
            weights after every update; samples record the version that answered them).
        backend: Where the actor slots run (:mod:`fleetgym.agents.backends`):
            ``"inprocess"`` (each actor slot steps its environment in a thread of this
            process) or ``"process"`` (each slot's environment and rollouts run in a
            worker process of its own, see
            :mod:`fleetgym.agents.learners.asynchronous.process_actor`; its
            thread only waits, so env stepping runs beside the learner outside the GIL;
            with ``inference="server"`` the workers act through the server on a
            loopback socket, observations in shared memory). A killed worker is a failed
            rollout: counted in ``actor_failures`` and replaced by a new process.
            ``"ray"``: each slot is a Ray actor on a Ray cluster (see
            :mod:`fleetgym.agents.learners.asynchronous.ray_actor`; ``inference="local"``
            only); a dead Ray actor is a failed rollout, replaced by a new Ray actor.
        address: ``backend="ray"``: the Ray cluster to join (None: the one Ray is
            connected to, else a local cluster on 127.0.0.1 shut down by :meth:`close`).
        ray_actor_options: ``backend="ray"``: Ray actor options of each slot (default: a
            share of a local cluster's CPUs, one CPU on a cluster joined).
        seed: Seeds the learner and the actors' environments.
        tensorboard_log: A folder for TensorBoard event files (``None``: no logging).
        imagination: An :class:`~fleetgym.agents.world_model.ImaginationConfig` (or a
            dict of its fields, or ``True`` for the defaults): the learner trains a world
            model on the real trajectories and mixes imagined ones into each update (see
            :mod:`fleetgym.agents.world_model.imagination`); ``None``: real data only.
        actor_factory: Builds an actor slot (see :data:`ActorFactory`; default a
            :class:`~fleetgym.agents.rollout.RolloutWorker`).
        envs_per_actor: Env instances each actor hosts (>= 1; default 1, one env per
            actor). Above 1 the actors collect in rounds, one rollout per instance each
            (see :mod:`fleetgym.agents.learners.asynchronous.balancing`), and
            ``batch_trajectories`` defaults to ``n_actors * envs_per_actor``.
        load_balancing: Work stealing: an actor with nothing left in a round takes a queued
            instance from the actor furthest behind by its measured step rate, and the
            instance migrates to it (on threads, processes and Ray alike).
        **hyperparameters: PPO hyperparameters (see
            :data:`fleetgym.agents.learners.ppo.HYPERPARAMETERS`).

    Raises:
        ValueError: For ``max_policy_lag < 0``, a loss not in the registry (the error of
            :func:`~fleetgym.agents.learners.losses.registry.get_loss`), ``sigma <= 0``, a lag
            injection above the bound, a non-positive count or one above its bound
            (:data:`COUNT_LIMITS`, :data:`MAX_BATCH_SAMPLES`), a seed outside
            ``[0, 2**63 - 1]``, an unknown ``backend`` (a 1.x name such as ``"thread"``:
            naming its 2.0 name) or ``inference`` mode, or ``backend="ray"`` with
            ``inference="server"``.
        TypeError: For arguments of the wrong type (a string for a bool, an
            ``actor_factory`` that is not callable).
        FleetError: ``backend="ray"``: if the Ray cluster cannot place ``n_actors`` actors
            or cannot be joined at ``address``.
    """

    def __init__(
        self,
        workload: Workload | str,
        loss: str = "ppo",
        sigma: float = 0.8,
        max_policy_lag: int | None = 8,
        n_actors: int = 4,
        steps_per_actor: int | None = None,
        batch_trajectories: int | None = None,
        recompute_values: bool = True,
        global_advantage_norm: bool = True,
        target_kl: float | str | None = "auto",
        proximal_clip: bool = False,
        lag_injection: int = 0,
        concurrent: bool = True,
        inference: str = "local",
        backend: str = "inprocess",
        seed: int = 0,
        tensorboard_log: str | Path | None = None,
        actor_factory: ActorFactory | None = None,
        imagination: Any = None,
        address: str | None = None,
        ray_actor_options: dict[str, Any] | None = None,
        envs_per_actor: int = 1,
        load_balancing: bool = False,
        **hyperparameters: Any,
    ) -> None:
        self.workload = get_workload(workload)
        policy_loss = get_loss(loss)
        if target_kl == "auto":
            target_kl = policy_loss.default_target_kl
        elif isinstance(target_kl, str):
            raise ValueError(
                f"target_kl: expected a number > 0, 'auto' or None, actual {target_kl!r}"
            )
        self.config = LossConfig(
            loss, sigma, recompute_values, global_advantage_norm, target_kl, proximal_clip
        )
        limits = COUNT_LIMITS
        self.max_policy_lag = (
            None
            if max_policy_lag is None
            else check_int("max_policy_lag", max_policy_lag, 0, limits["max_policy_lag"])
        )
        self.n_actors = check_int("n_actors", n_actors, low=1, high=1024)
        self.envs_per_actor = check_int("envs_per_actor", envs_per_actor, low=1, high=1024)
        self.load_balancing = check_bool("load_balancing", load_balancing)
        n_instances = self.n_actors * self.envs_per_actor
        if n_instances > 4096:
            raise ValueError(
                f"envs_per_actor: expected n_actors * envs_per_actor <= 4096 env instances, "
                f"actual {n_instances}"
            )
        self.steps_per_actor = check_int(
            "steps_per_actor",
            self.workload.rollout_steps if steps_per_actor is None else steps_per_actor,
            1,
            limits["steps_per_actor"],
        )
        self.batch_trajectories = check_int(
            "batch_trajectories",
            n_instances if batch_trajectories is None else batch_trajectories,
            1,
            limits["batch_trajectories"],
        )
        samples = self.batch_trajectories * self.steps_per_actor
        if samples > MAX_BATCH_SAMPLES:
            raise ValueError(
                f"batch_trajectories: expected batch_trajectories * steps_per_actor <= "
                f"{MAX_BATCH_SAMPLES} samples per update, actual {samples}"
            )
        self.lag_injection = check_int("lag_injection", lag_injection, 0, limits["lag_injection"])
        if self.max_policy_lag is not None and self.lag_injection > self.max_policy_lag:
            raise ValueError(
                f"lag_injection: expected at most max_policy_lag={self.max_policy_lag}, "
                f"actual {self.lag_injection}"
            )
        self.concurrent = check_bool("concurrent", concurrent)
        self.inference = check_choice("inference", inference, INFERENCE_MODES)
        if actor_factory is not None and not callable(actor_factory):
            raise TypeError(
                f"actor_factory: expected a callable or None, actual {quote(actor_factory)}"
            )
        if self.inference == "server" and actor_factory is not None:
            raise ValueError(
                "actor_factory: expected None with inference='server', actual a factory"
            )
        self.backend = check_backend(backend)
        address, ray_actor_options = check_ray_options(
            self.backend, self.inference, address, ray_actor_options
        )
        self.seed = check_seed("seed", seed)
        if tensorboard_log is not None and not isinstance(tensorboard_log, (str, os.PathLike)):
            raise TypeError(
                f"tensorboard_log: expected a folder path or None, actual {quote(tensorboard_log)}"
            )
        self.tensorboard_log = None if tensorboard_log is None else Path(tensorboard_log)
        self.actor_factory: ActorFactory = actor_factory or _default_actor
        self.hyperparameters = dict(hyperparameters)
        self.learner = self._make_learner(imagination)
        self.ring = WeightRing(self.lag_injection + 1)
        ray_group = None
        if self.backend == "ray":  # last: a cluster this trainer starts is closed by close()
            from fleetgym.agents.learners.asynchronous.ray_actor import RayActorGroup

            ray_group = RayActorGroup(n_instances, address, ray_actor_options)
        #: The actor slots this trainer owns (their actors, threads and inference server).
        self.slots = self._make_slots(ray_group)
        self._publish()
        self.num_timesteps = 0
        self.history: list[UpdateRecord] = []
        self.max_outstanding = 0

    # ----------------------------------------------------------------- hooks
    def _make_learner(self, imagination: Any) -> Any:
        """Hook: the learner (``update``, ``get_weights``, ``policy_version``, ``episodes_seen``)."""
        return CompensatedPPOLearner(
            self.workload, self.config, self.max_policy_lag, seed=self.seed,
            imagination=imagination, **self.hyperparameters,
        )  # fmt: skip

    def _make_slots(self, ray_group: Any) -> AsyncActorSlots:
        """Hook: the actor slots (their actors, threads and inference server)."""
        return AsyncActorSlots(
            self.workload, self.seed, self.n_actors, self.steps_per_actor,
            self.batch_trajectories, self._behaviour, self.inference, self.backend,
            self.actor_factory, ray_group, self.envs_per_actor, self.load_balancing,
        )  # fmt: skip

    # ----------------------------------------------------------------- weights
    def _behaviour(self) -> tuple[int, Weights]:
        """The weights an actor starting a rollout now acts with, and their version."""
        return self.ring.lagged(self.lag_injection)

    def _publish(self) -> None:
        self.ring.push(self.learner.policy_version, self.learner.get_weights())
        server = self.slots.server
        if server is not None:
            version, weights = self._behaviour()
            if version != server.policy_version:
                server.set_weights(weights, version, wait=False)

    @property
    def actor_failures(self) -> int:
        """Failed rollouts so far (each actor replaced by a new incarnation)."""
        return self.slots.actor_failures

    def prewarm(self) -> float:
        """Build every actor slot now, in parallel; returns the seconds it took (see
        :meth:`AsyncActorSlots.prewarm`: worker processes start outside ``learn``'s time)."""
        return self.slots.prewarm()

    @property
    def capacity(self) -> int:
        """Most trajectories collecting or queued at once (the admission bound)."""
        if self.max_policy_lag is None:
            return 2 * self.batch_trajectories
        return (self.max_policy_lag + 1) * self.batch_trajectories

    # ----------------------------------------------------------------- training
    def learn(
        self,
        total_timesteps: int,
        callback: Callable[[UpdateRecord], bool | None] | None = None,
        progress_bar: bool = False,
        target: float | None = None,
    ) -> AsyncPPO:
        """Train until ``total_timesteps`` more env steps reached the learner.

        Args:
            total_timesteps: Env-step budget of this call (>= 1).
            callback: Called with each :class:`UpdateRecord`; returning ``True`` stops.
            progress_bar: Show a tqdm bar.
            target: Stop once the mean return of the last 100 episodes reaches it.

        Returns:
            ``self``.

        Raises:
            TypeError: For an argument of the wrong type (``progress_bar="no"``).
            ValueError: For a budget < 1 or a NaN target; if the update diverged (the
                learner is rolled back to its parameters before it, see
                :meth:`~fleetgym.agents.learners.ppo.PPOLearner.update`).
            FleetError: If an actor slot keeps failing (an env that emits NaN or inf
                included: its rollouts raise).
            Whatever the learner or the callback raises, after the actors stopped.
        """
        import torch
        from tqdm import tqdm

        total = check_int("total_timesteps", total_timesteps, low=1)
        if callback is not None and not callable(callback):
            raise TypeError(f"callback: expected a callable, actual {type(callback).__name__}")
        progress_bar = check_bool("progress_bar", progress_bar)
        if target is not None:
            # NaN is refused (no return reaches it, nor fails to); inf never stops early.
            target = check_float("target", target, allow_inf=True)
        writer = self._writer()
        threads = torch.get_num_threads()
        torch.set_num_threads(1)
        self.slots.start_server()
        pipe = TrajectoryPipeline(self.capacity) if self.concurrent else None
        if pipe is not None:
            self.slots.start(pipe)
        bar = tqdm(total=total, unit="step", disable=not progress_bar, dynamic_ncols=True)
        start, busy, done = time.perf_counter(), 0.0, 0
        try:
            while done < total:
                batch = self.slots.next_batch(pipe)
                if not batch:
                    break
                began = time.perf_counter()
                stats = self.learner.update(batch)
                busy += time.perf_counter() - began
                self._publish()
                if pipe is not None:
                    pipe.release(len(batch))
                steps = sum(getattr(t, "env_steps", len(t)) for t in batch)  # K per decision
                done += steps
                self.num_timesteps += steps
                record = UpdateRecord(
                    update=len(self.history),
                    total_steps=self.num_timesteps,
                    wall_s=time.perf_counter() - start,
                    learner_busy_s=busy,
                    queued=len(pipe.queue) if pipe is not None else 0,
                    actor_failures=self.actor_failures,
                    stats=stats,
                    imagination=(
                        None if self.learner.imagination is None else self.learner.imagination.last
                    ),
                )
                self.history.append(record)
                bar.update(steps)
                postfix = {"ret": f"{stats.mean_return:.1f}", "lag_p99": f"{stats.lag_p99:g}"}
                if record.imagination is not None:
                    postfix["img"] = f"{record.imagination.imagined_share:.2f}"
                    postfix["H"] = str(record.imagination.horizon)
                bar.set_postfix(**postfix)
                if writer is not None:
                    log_update(writer, record)
                    if self.slots.server is not None:
                        from fleetgym.agents.inference.tensorboard import log_server_metrics

                        log_server_metrics(writer, self.slots.server.metrics(), record.total_steps)
                if callback is not None and callback(record):
                    break
                if (
                    target is not None
                    and self.learner.episodes_seen
                    and (stats.mean_return >= target)
                ):
                    break
        except BaseException:
            # Kill and close worker processes, so none outlives the exception.
            self.slots.stop(pipe, abort=True)
            raise
        else:
            self.slots.stop(pipe)
        finally:
            if pipe is not None:
                self.max_outstanding = max(self.max_outstanding, pipe.max_outstanding)
            bar.close()
            if writer is not None:
                writer.close()
            torch.set_num_threads(threads)
        return self

    def _writer(self) -> Any:
        return None if self.tensorboard_log is None else summary_writer(self.tensorboard_log)

    # ----------------------------------------------------------------- use
    def predict(
        self, observation: np.ndarray, deterministic: bool = True
    ) -> tuple[np.ndarray, None]:
        """The action for one observation (or a batch), like SB3's ``predict``.

        Returns:
            ``(action, None)``: an action for a single observation, an array of actions
            for a batch; the ``None`` stands for SB3's recurrent state.

        Raises:
            TypeError: If ``observation`` is not an array of numbers (a string, ``None``)
                or ``deterministic`` is not a bool.
            ValueError: If it is neither one observation nor a non-empty batch of the
                policy's shape, or holds NaN or infinity.
        """
        deterministic = check_bool("deterministic", deterministic)
        batch, single = check_observation("observation", observation, self.learner.policy.obs_shape)
        actions = self.learner.policy.act(
            batch, deterministic=deterministic, rng=np.random.default_rng(self.seed)
        )[0]
        return (actions[0] if single else actions), None

    def close(self) -> None:
        """Close the actors' environments and worker processes (and the inference server)."""
        self.slots.close()

    def __enter__(self) -> AsyncPPO:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ----------------------------------------------------------------- files
    def save(self, path: str | Path) -> Path:
        """Write the learner (``torch.save`` of tensors and plain values) and ``<stem>.json``.

        Everything loads with ``torch.load(weights_only=True)`` and ``json``: no pickled
        objects. The policy alone is also written as ``<stem>.policy.pt``.

        Raises:
            TypeError: If ``path`` is not a ``str`` or ``os.PathLike``.
            ValueError: If it is empty or a folder.
        """
        return save_trainer(self, path)

    @classmethod
    def load(cls, path: str | Path, **overrides: Any) -> AsyncPPO:
        """An :class:`AsyncPPO` restored from :meth:`save` (settings may be overridden).

        Raises:
            TypeError: If ``path`` is not a ``str`` or ``os.PathLike``.
            FileNotFoundError: If the learner file or its JSON is missing.
            ValueError: Naming the file, if either is not a fleetgym AsyncPPO checkpoint
                (not JSON, random bytes, a pickle, missing or unknown keys, another
                class's file, a negative ``num_timesteps`` or ``policy_version``), holds
                a value the constructor refuses, or is for another workload. With
                ``overrides``, a refused setting keeps the constructor's error type and
                names the file and the overrides.
        """
        return load_trainer(cls, path, overrides)


__all__ = ["AsyncPPO"]
