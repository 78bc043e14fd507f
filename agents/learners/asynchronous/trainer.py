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
from typing import Any, ClassVar, TypeVar

import numpy as np

from fleetgym.agents.learners.asynchronous.config import (
    COUNT_LIMITS,
    HISTORY_LIMIT,
    MAX_BATCH_SAMPLES,
    AsyncPPOConfig,
    AsyncTopology,
    TokenAsyncPPOConfig,
)
from fleetgym.agents.learners.asynchronous.moved import ASYNC_MOVED, as_config, moved_error
from fleetgym.agents.learners.asynchronous.pipeline import TrajectoryPipeline
from fleetgym.agents.learners.asynchronous.records import (
    UpdateRecord,
    log_update,
    summary_writer,
)
from fleetgym.agents.learners.asynchronous.settings import (
    ASYNC_RESTART_NOTE,
    SETTINGS_FORMAT,
    async_checkpoint_state,
    async_run_config,
    load_trainer,
    read_async_checkpoint,
    restore_async,
    save_trainer,
)
from fleetgym.agents.learners.asynchronous.slots import (
    ActorFactory,
    AsyncActorSlots,
    _default_actor,
)
from fleetgym.agents.learners.checkpoint_store import CheckpointConfig, CheckpointStore
from fleetgym.agents.learners.checks import check_observation, check_seed
from fleetgym.agents.learners.lag import CompensatedPPOLearner, WeightRing
from fleetgym.agents.learners.losses.config import LossConfig
from fleetgym.agents.learners.ppo import PPOLearner
from fleetgym.agents.learners.run_config import check_folder_free
from fleetgym.agents.types import Weights
from fleetgym.agents.workloads import Workload, get_workload
from fleetgym.validation import check_bool, check_float, check_int, quote

logger = logging.getLogger(__name__)
_Trainer = TypeVar("_Trainer", bound="AsyncPPO")


class AsyncPPO:
    """PPO with decoupled rollout and training, a bounded policy lag and lag-tolerant losses.

    Models an asynchronous actor-learner trainer in the SB3 mould: construct it with a
    workload, an algorithm config and a topology, call :meth:`learn`, then :meth:`predict`,
    :meth:`save` and :meth:`load`.

    Args:
        workload: A :class:`~fleetgym.agents.workloads.Workload` or its name.
        algo: What the learner optimises: an
            :class:`~fleetgym.agents.learners.asynchronous.config.AsyncPPOConfig` (or a dict
            of its fields; ``None``: the defaults).
        topology: Where the actors run: an
            :class:`~fleetgym.agents.learners.asynchronous.config.AsyncTopology` (or a dict
            of its fields; ``None``: the defaults, four actor threads).
        seed: Seeds the learner and the actors' environments.
        verbose: ``0`` (quiet) or ``1`` (each update logged at INFO on this module's logger).
        tensorboard_log: A folder for TensorBoard event files (``None``: no logging).
        actor_factory: Builds an actor slot (see :data:`ActorFactory`; default a
            :class:`~fleetgym.agents.rollout.RolloutWorker`; ``inference="local"`` only).
        history_limit: How many of the newest update records :attr:`history` keeps in
            memory (and a checkpoint carries), an int >= 1 or ``None`` for all of them.
            :attr:`updates` counts every update; a long run writes its rows as it goes
            (``fleetgym train --log``) instead of holding them (default
            :data:`HISTORY_LIMIT`, about 32 MiB at most).
        **moved: fleetgym 1.x keywords (``loss=``, ``n_actors=``, ``lr=`` ...): each raises
            a TypeError that names its 2.0 place (see ``CHANGELOG.md``).

    Example:
        >>> model = AsyncPPO(
        ...     "CartPole-v1",
        ...     algo=AsyncPPOConfig(loss="gipo", hyperparameters={"epochs": 1}),
        ...     topology=AsyncTopology(n_actors=2, steps_per_actor=16),
        ...     seed=0,
        ... )
        >>> _ = model.learn(64, progress_bar=False)
        >>> model.num_timesteps, model.learner.policy_version
        (64, 2)
        >>> action, _ = model.predict(np.zeros(4, np.float32))
        >>> action.shape
        ()

    Raises:
        ValueError: As the configs do; for a batch above :data:`MAX_BATCH_SAMPLES` samples
            or a seed outside ``[0, 2**63 - 1]``; for an out-of-range PPO hyperparameter
            (the workload's error).
        TypeError: For arguments of the wrong type (a config of another class, an
            ``actor_factory`` that is not callable) and for a 1.x keyword.
        FleetError: ``backend="ray"``: if the Ray cluster cannot place the actors or cannot
            be joined at ``address``.
    """

    #: What this class's settings file says it is (see :meth:`save`).
    SETTINGS_FORMAT: ClassVar[str] = SETTINGS_FORMAT

    def __init__(
        self,
        workload: Workload | str,
        algo: AsyncPPOConfig | dict[str, Any] | None = None,
        topology: AsyncTopology | dict[str, Any] | None = None,
        *,
        seed: int = 0,
        verbose: int = 0,
        tensorboard_log: str | Path | None = None,
        actor_factory: ActorFactory | None = None,
        history_limit: int | None = HISTORY_LIMIT,
        **moved: Any,
    ) -> None:
        if moved:
            raise moved_error("AsyncPPO", moved, ASYNC_MOVED)
        config = as_config(AsyncPPOConfig, algo, "algo")
        self._build(
            workload, config, config.loss_config, as_config(AsyncTopology, topology, "topology"),
            seed, verbose, tensorboard_log, actor_factory, history_limit,
        )  # fmt: skip

    def _build(
        self,
        workload: Workload | str,
        algo: AsyncPPOConfig | TokenAsyncPPOConfig,
        loss_config: LossConfig,
        topology: AsyncTopology,
        seed: int,
        verbose: int,
        tensorboard_log: str | Path | None,
        actor_factory: ActorFactory | None,
        history_limit: int | None = HISTORY_LIMIT,
    ) -> None:
        """Build the trainer from checked configs (what every constructor does)."""
        #: How many of the newest update records :attr:`history` keeps (``None``: all).
        self.history_limit = (
            None
            if history_limit is None
            else check_int("history_limit", history_limit, 1, COUNT_LIMITS["history_limit"])
        )
        self.workload = get_workload(workload)
        #: The algorithm config and the topology this trainer was built with.
        self.algo, self.topology = algo, topology
        #: The learner's loss switches (``config.label`` names the run).
        self.config = loss_config
        self.max_policy_lag = algo.max_policy_lag
        self.lag_injection = algo.lag_injection
        self.n_actors, self.envs_per_actor = topology.n_actors, topology.envs_per_actor
        self.load_balancing, self.concurrent = topology.load_balancing, topology.concurrent
        self.inference, self.backend = topology.inference, topology.backend
        rollout = self.workload.rollout_steps
        self.steps_per_actor = check_int(
            "steps_per_actor",
            rollout if topology.steps_per_actor is None else topology.steps_per_actor,
            1,
            COUNT_LIMITS["steps_per_actor"],
        )
        self.batch_trajectories = (
            topology.n_instances if algo.batch_trajectories is None else algo.batch_trajectories
        )
        samples = self.batch_trajectories * self.steps_per_actor
        if samples > MAX_BATCH_SAMPLES:
            raise ValueError(
                f"batch_trajectories: expected batch_trajectories * steps_per_actor <= "
                f"{MAX_BATCH_SAMPLES} samples per update, actual {samples}"
            )
        if actor_factory is not None and not callable(actor_factory):
            raise TypeError(
                f"actor_factory: expected a callable or None, actual {quote(actor_factory)}"
            )
        if self.inference == "server" and actor_factory is not None:
            raise ValueError(
                "actor_factory: expected None with inference='server', actual a factory"
            )
        self.seed = check_seed("seed", seed)
        self.verbose = check_int("verbose", verbose, 0, 2)
        if tensorboard_log is not None and not isinstance(tensorboard_log, (str, os.PathLike)):
            raise TypeError(
                f"tensorboard_log: expected a folder path or None, actual {quote(tensorboard_log)}"
            )
        self.tensorboard_log = None if tensorboard_log is None else Path(tensorboard_log)
        self.actor_factory: ActorFactory = actor_factory or _default_actor
        self.hyperparameters = dict(getattr(algo, "hyperparameters", {}))
        self.learner = self._make_learner()
        self.ring = WeightRing(self.lag_injection + 1)
        ray_group = None
        if self.backend == "ray":  # last: a cluster this trainer starts is closed by close()
            from fleetgym.agents.learners.asynchronous.ray_actor import RayActorGroup

            ray_group = RayActorGroup(
                topology.n_instances, topology.address, topology.ray_actor_options,
                actor_timeout=topology.actor_timeout,
            )  # fmt: skip
        #: The actor slots this trainer owns (their actors, threads and inference server).
        self.slots = self._make_slots(ray_group)
        self.slots.server_max_batch = topology.server_batch
        self.slots.server_max_wait_ms = topology.server_wait_ms
        self.slots.server_device = topology.server_device
        self.slots.actor_timeout = topology.actor_timeout
        self._publish()
        self.num_timesteps = 0
        #: Updates done over every ``learn`` call (a resumed run's include the checkpoint's).
        self.updates = 0
        #: The newest :attr:`history_limit` update records, oldest first.
        self.history: list[UpdateRecord] = []
        self.max_outstanding = 0

    # ----------------------------------------------------------------- hooks
    def _make_learner(self) -> Any:
        """Hook: the learner (``update``, ``get_weights``, ``policy_version``, ``episodes_seen``)."""
        return CompensatedPPOLearner(
            self.workload, self.config, self.max_policy_lag, seed=self.seed,
            imagination=getattr(self.algo, "imagination", None), **self.hyperparameters,
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
        *,
        checkpoints: CheckpointConfig | None = None,
        resume: str | os.PathLike[str] | None = None,
    ) -> AsyncPPO:
        """Train until ``total_timesteps`` more env steps reached the learner.

        With ``checkpoints`` the run is saved periodically, atomically, between updates;
        with ``resume`` a freshly built trainer continues a saved run. The actors'
        episodes restart on resume (fresh seed streams; asynchronous actors are not
        deterministic anyway, so a resumed run is not bit-identical to an uninterrupted
        one); the trajectories collected but not consumed at the checkpoint are dropped,
        so env steps are counted once: the resumed :attr:`num_timesteps` is the
        checkpoint's plus the steps consumed after the resume.

        Args:
            total_timesteps: Env-step budget of this call (>= 1); a resumed call's budget
                counts the steps the checkpointed call consumed before the checkpoint.
            callback: Called with each :class:`UpdateRecord`; returning ``True`` stops.
            progress_bar: Show a tqdm bar.
            target: Stop once the mean return of the last 100 episodes reaches it.
            checkpoints: Save the run into a folder (a
                :class:`~fleetgym.agents.learners.checkpoint_store.CheckpointConfig`; its
                ``every_rounds`` counts updates here): after the update where
                ``every_rounds`` updates or ``every_minutes`` minutes have passed since the
                last checkpoint, keeping the newest ``keep``. A checkpoint holds the
                learner's state (weights, optimiser, generator, normalisation statistics,
                counters), the trainer's counters (env steps collected and consumed,
                updates, policy version), its update records, its RNG streams, the config
                (workload, seed, algo, topology) and the fleetgym version and commit.
                ``None`` (the default): never.
            resume: Continue the run saved in this checkpoint file, or in the newest
                checkpoint of this folder (``str`` or ``os.PathLike``). The trainer must
                be fresh (no update yet) and built like the checkpoint's: the same class,
                workload, seed, ``algo`` and ``topology`` (but ``address``,
                ``ray_actor_options`` and the server's batching and device). With
                ``checkpoints`` too, their folder must be the checkpoint's or hold none.

        Returns:
            ``self``.

        Raises:
            TypeError: For an argument of the wrong type (``progress_bar="no"``,
                ``checkpoints`` that is not a ``CheckpointConfig``, ``resume`` that is not
                a path), or ``checkpoints``/``resume`` with a trainer whose learner has no
                checkpoint state (:class:`TokenAsyncPPO`: not supported).
            ValueError: For a budget < 1 or a NaN target; ``resume`` with a trainer that
                already trained; if the update diverged (the
                learner is rolled back to its parameters before it, see
                :meth:`~fleetgym.agents.learners.ppo.PPOLearner.update`).
            CheckpointError: Naming the file, before any actor starts: ``resume`` holds
                no checkpoint, a truncated, corrupt or foreign file, one of a newer
                fleetgym, or a checkpoint of another run (each differing field with both
                values); the ``checkpoints`` folder holds another run's checkpoints.
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
        store, config, done, call_updates = self._checkpoint_setup(
            total, target, checkpoints, resume
        )
        if done >= total:  # a resumed run whose budget was already spent
            return self
        writer = self._writer()
        threads = torch.get_num_threads()
        torch.set_num_threads(1)
        self.slots.start_server()
        pipe = TrajectoryPipeline(self.capacity) if self.concurrent else None
        if pipe is not None:
            self.slots.start(pipe)
        bar = tqdm(
            total=total, initial=done, unit="step", disable=not progress_bar, dynamic_ncols=True
        )
        start, busy = time.perf_counter(), 0.0
        if call_updates:  # resumed: this call's wall and busy times go on (downtime left out)
            start -= self.history[-1].wall_s
            busy = self.history[-1].learner_busy_s
        since_updates, since = 0, time.monotonic()
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
                    update=self.updates,
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
                self._remember(record)
                call_updates += 1
                since_updates += 1
                if checkpoints is not None and store is not None:
                    if checkpoints.due(since_updates, time.monotonic() - since):
                        self._write_checkpoint(store, config, pipe, done, call_updates)
                        since_updates, since = 0, time.monotonic()
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
                if self.verbose:
                    logger.info(
                        "update %d: %d steps, mean return %.1f, lag p99 %g",
                        record.update, record.total_steps, stats.mean_return, stats.lag_p99,
                    )  # fmt: skip
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

    def _checkpoint_setup(
        self,
        total: int,
        target: float | None,
        checkpoints: CheckpointConfig | None,
        resume: str | os.PathLike[str] | None,
    ) -> tuple[CheckpointStore | None, dict[str, Any], int, int]:
        """Check ``checkpoints`` and ``resume`` and restore a resumed run (no actor started).

        Returns the store (``None``: no checkpoints), the run's config, this call's env
        steps and updates so far (a resumed call's: the checkpoint's).
        """
        if checkpoints is not None and not isinstance(checkpoints, CheckpointConfig):
            raise TypeError(
                f"checkpoints: expected a CheckpointConfig or None, actual "
                f"{type(checkpoints).__name__}"
            )
        if resume is not None and (
            isinstance(resume, bool) or not isinstance(resume, (str, os.PathLike))
        ):
            raise TypeError(
                f"resume: expected a str, an os.PathLike or None, actual {type(resume).__name__}"
            )
        if checkpoints is None and resume is None:
            return None, {}, 0, 0
        if not isinstance(self.learner, PPOLearner):
            raise TypeError(
                f"checkpoints, resume: expected an AsyncPPO with a PPO learner, actual "
                f"{type(self).__name__} with a {type(self.learner).__name__}: periodic "
                "checkpoints and resume are not supported for it (use save and load)"
            )
        if resume is not None and (self.updates or self.num_timesteps):
            raise ValueError(
                f"resume: expected a freshly built trainer, actual one that trained "
                f"{self.num_timesteps} env steps"
            )
        store = None
        if checkpoints is not None:
            store = CheckpointStore(checkpoints.folder, checkpoints.keep)
        config = async_run_config(self, total, target)
        saved = None if resume is None else read_async_checkpoint(resume)
        if store is not None:
            check_folder_free(store, None if saved is None else saved.path)
        if saved is None:
            return store, config, 0, 0
        restore_async(self, saved, config)
        logger.info(
            "resumed from %s after %d updates, %d env steps",
            saved.path, self.updates, self.num_timesteps,
        )  # fmt: skip
        logger.warning("%s: %s", saved.path, ASYNC_RESTART_NOTE)
        return store, config, saved.counters["call_steps"], saved.counters["call_updates"]

    def _write_checkpoint(
        self,
        store: CheckpointStore,
        config: dict[str, Any],
        pipe: TrajectoryPipeline | None,
        call_steps: int,
        call_updates: int,
    ) -> None:
        """Write the checkpoint after the newest update (between updates: consistent)."""
        queued = list(pipe.queue) if pipe is not None else []
        waiting = sum(getattr(t, "env_steps", len(t)) for t in queued)
        counters = {
            "updates": self.updates,
            "num_timesteps": self.num_timesteps,
            "collected_steps": self.num_timesteps + waiting,
            "call_steps": call_steps,
            "call_updates": call_updates,
            "policy_version": int(self.learner.policy_version),
            "episodes_seen": int(self.learner.episodes_seen),
            "dropped_samples_total": int(getattr(self.learner, "dropped_samples_total", 0)),
            "policy_stops": int(getattr(self.learner, "policy_stops", 0)),
            "actor_failures": self.actor_failures,
            "max_outstanding": max(
                self.max_outstanding, pipe.max_outstanding if pipe is not None else 0
            ),
        }
        path = store.write(self.updates, async_checkpoint_state(self, config, counters))
        logger.debug("update %d: wrote checkpoint %s", self.updates - 1, path)

    def _remember(self, record: UpdateRecord) -> None:
        """Count the update and keep its record, forgetting the oldest past the limit."""
        self.updates += 1
        self.history.append(record)
        if self.history_limit is not None and len(self.history) > self.history_limit:
            del self.history[: len(self.history) - self.history_limit]

    def _writer(self) -> Any:
        return None if self.tensorboard_log is None else summary_writer(self.tensorboard_log)

    # ----------------------------------------------------------------- use
    def predict(
        self, observation: np.ndarray, deterministic: bool = True
    ) -> tuple[np.ndarray, None]:
        """The action for one observation (or a batch), like SB3's ``predict``.

        Args:
            observation: One observation of the policy's shape, or a non-empty batch
                ``(n, *shape)`` of them; finite numbers.
            deterministic: Take the mode of the action distribution. ``False`` samples
                with a generator seeded with the trainer's ``seed`` anew at every call, so
                equal calls return equal actions.

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
        """Write the learner (``torch.save`` of tensors and plain values) and ``<stem>.json``
        (the workload, :attr:`algo`, :attr:`topology` but its Ray ``address`` and
        ``ray_actor_options``, the seed and :attr:`num_timesteps`).

        Everything loads with ``torch.load(weights_only=True)`` and ``json``: no pickled
        objects. The policy alone is also written as ``<stem>.policy.pt``.

        Args:
            path: The learner file to write (``str`` or ``os.PathLike``; missing folders
                are created); ``<stem>.json`` is written beside it.

        Returns:
            ``path`` as a :class:`~pathlib.Path`.

        Raises:
            TypeError: If ``path`` is not a ``str`` or ``os.PathLike``.
            ValueError: If it is empty or a folder.
        """
        return save_trainer(self, path)

    @classmethod
    def load(cls: type[_Trainer], path: str | Path, **overrides: Any) -> _Trainer:
        """An :class:`AsyncPPO` restored from :meth:`save` (files of fleetgym 1.x included).

        Args:
            path: The learner file :meth:`save` wrote (``str`` or ``os.PathLike``); its
                ``<stem>.json`` must be beside it.
            **overrides: Constructor keywords that replace the saved settings:
                ``topology={"n_actors": 2}`` (a dict, for ``algo`` or ``topology``)
                replaces the saved fields it names, ``topology=AsyncTopology(...)`` all of
                them; ``seed=``, ``tensorboard_log=`` ... as given.

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
        model: _Trainer = load_trainer(cls, path, overrides)
        return model


__all__ = ["AsyncPPO"]
