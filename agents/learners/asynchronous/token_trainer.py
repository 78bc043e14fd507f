"""The token policy trained through the asynchronous trainer (:class:`TokenAsyncPPO`).

:class:`TokenAsyncPPO` is :class:`~fleetgym.agents.learners.asynchronous.trainer.AsyncPPO`
(its training loop, admission tickets and lag bound, weight ring and lag injection, actor
restarts, records and TensorBoard scalars) with three hooks filled in:

* the learner is a :class:`~fleetgym.agents.learners.asynchronous.token_learner.TokenLagLearner`
  (token-level PPO with ``ratio_level`` ``"token"`` / ``"action"`` / ``"chunk"`` and
  ``loss`` ``"ppo"`` / ``"gipo"`` / ``"vtrace"``, through
  :func:`~fleetgym.agents.learners.losses.level_policy_loss`);
* the actor slots build :class:`~fleetgym.agents.learners.asynchronous.token_actor.TokenActor`
  actors, in threads (``backend="inprocess"``) or in worker processes
  (``backend="process"``);
* with ``inference="server"`` the slots serve a
  :class:`~fleetgym.agents.inference.token_model.TokenPolicyModel`: the server batches the
  actors' decisions and decodes ``K D`` tokens per request with a KV cache, sampling the
  slim head's restricted distribution the learner recomputes.

An update's ``total_steps`` counts env steps (``K`` per decision unless an episode ended
inside a chunk). Not supported here: Ray actors, imagination, decoupled (proximal)
clipping and value recomputation (see
:mod:`~fleetgym.agents.learners.asynchronous.token_learner`).
"""

from __future__ import annotations

import copy
import dataclasses
import functools
import json
from pathlib import Path
from typing import Any

import numpy as np

from fleetgym.agents.backends import check_backend
from fleetgym.agents.files import check_path
from fleetgym.agents.inference.batching import check_device
from fleetgym.agents.inference.token_model import TokenPolicyModel
from fleetgym.agents.learners.asynchronous.settings import migrate_settings, restore_trainer
from fleetgym.agents.learners.asynchronous.slots import AsyncActorSlots
from fleetgym.agents.learners.asynchronous.token_actor import TokenActor
from fleetgym.agents.learners.asynchronous.token_learner import TokenLagLearner
from fleetgym.agents.learners.asynchronous.trainer import AsyncPPO
from fleetgym.agents.learners.checkpoint import read_json_file
from fleetgym.agents.learners.token_config import TokenPPOConfig
from fleetgym.agents.types import Weights
from fleetgym.validation import check_float, check_int, quote

#: What a TokenAsyncPPO settings file (``<stem>.json``) says it is.
TOKEN_SETTINGS_FORMAT = "fleetgym.TokenAsyncPPO"

#: The token hyperparameters :class:`TokenAsyncPPO` takes as keywords (its own
#: ``ratio_level``, ``loss``, ``sigma`` and ``target_kl`` fill the rest of the TokenPPOConfig).
TOKEN_FIELDS = tuple(
    f.name
    for f in dataclasses.fields(TokenPPOConfig)
    if f.name not in ("ratio_level", "loss", "sigma", "target_kl", "n_envs", "n_steps")
)

#: AsyncPPO arguments :class:`TokenAsyncPPO` refuses (not supported for token policies).
REFUSED = ("imagination", "proximal_clip", "recompute_values", "actor_factory", "address")


class TokenActorSlots(AsyncActorSlots):
    """Actor slots of token actors; the inference server serves the token policy.

    Models the actor side of :class:`TokenAsyncPPO`: AsyncActorSlots with the server's
    model a :class:`~fleetgym.agents.inference.token_model.TokenPolicyModel` and each
    served slot a :class:`~fleetgym.agents.learners.asynchronous.token_actor.TokenActor`.

    Example:
        >>> model = TokenAsyncPPO("CartPole-v1", inference="server", n_actors=2,
        ...                       steps_per_actor=4, concurrent=False, hidden_size=16,
        ...                       layers=1, heads=2, vocab_size=64, num_bins=16)
        >>> model.slots.start_server()
        >>> [len(t) for t in model.slots.next_batch(None)], model.slots.server.spec.output_names
        ([4, 4], ('tokens', 'log_prob', 'value', 'policy_obs'))
        >>> model.close()

    Args:
        policy: The learner's token policy (copied for the server, never shared).
        server_batch: The server's largest batch (``None``: ``n_actors``).
        server_wait_ms: Longest wait of a batch's oldest request (ms, or ``"auto"``).
        server_device: Where the server decodes (``"cpu"``, ``"cuda[:N]"``).
        **kwargs: As :class:`~fleetgym.agents.learners.asynchronous.slots.AsyncActorSlots`.
    """

    def __init__(
        self,
        *args: Any,
        policy: Any,
        config: TokenPPOConfig,
        server_batch: int | None = None,
        server_wait_ms: float | str = 5.0,
        server_device: str = "cpu",
        **kwargs: Any,
    ) -> None:
        super().__init__(*args, **kwargs)
        self._policy, self._config = policy, config
        self.server_max_batch, self.server_max_wait_ms = server_batch, server_wait_ms
        self.server_device = server_device

    def _served_model(self, weights: Weights) -> TokenPolicyModel:
        model = TokenPolicyModel(copy.deepcopy(self._policy), device=self.server_device)
        model.load_weights(weights)  # the network and the observation statistics
        return model

    def _served_actor(self, slot: int, incarnation: int) -> TokenActor:
        client = self.server.connect(slots=1)
        return TokenActor(self.workload, slot, self.seed, incarnation, self._config, client)


class TokenAsyncPPO(AsyncPPO):
    """Asynchronous PPO of a token policy, with the ratio level as a switch.

    Models AcceRL's asynchronous VLA training at laptop scale: token actors (their own
    policy copy, or one batching inference server decoding every actor's tokens) keep
    collecting while the token-level learner trains, with a bounded policy lag.

    Example:
        >>> model = TokenAsyncPPO("CartPole-v1", ratio_level="token", loss="gipo", n_actors=2,
        ...                       steps_per_actor=16, epochs=1, hidden_size=16, layers=1,
        ...                       heads=2, vocab_size=64, num_bins=16, seed=0)
        >>> _ = model.learn(64)
        >>> model.num_timesteps, model.learner.policy_version
        (64, 2)
        >>> model.predict(np.zeros(4, np.float32))[0].shape
        ()
        >>> model.close()

    Args:
        workload: A :class:`~fleetgym.agents.workloads.Workload` or its name (Box or
            Discrete actions; see :func:`~fleetgym.agents.rollout.token_rollout.token_env_spec`).
        ratio_level: ``"token"``, ``"action"`` or ``"chunk"``.
        loss: ``"ppo"``, ``"gipo"`` or ``"vtrace"``.
        inference: ``"local"`` or ``"server"`` (the token policy served, batched).
        backend: ``"inprocess"`` (threads) or ``"process"`` (worker processes; with
            ``inference="server"`` they reach the server on a loopback socket,
            observations in shared memory).
        target_kl: ``"auto"`` (the loss's default), a number, or ``None`` (none).
        server_batch: ``inference="server"``: the most requests decoded in one batch
            (``B``; ``None``: ``n_actors``).
        server_wait_ms: ``inference="server"``: the longest wait of a batch's oldest
            request for the batch to fill (``T_max`` in ms, or ``"auto"``).
        server_device: ``inference="server"``: where the server decodes (``"cpu"`` or
            ``"cuda[:N]"``).
        learner_device: Where the learner's policy and update run (``"cpu"`` or
            ``"cuda[:N]"``; the weights are published to the actors as host arrays).
        sigma, max_policy_lag, n_actors, batch_trajectories, lag_injection, concurrent,
            seed, tensorboard_log: As :class:`~fleetgym.agents.learners.asynchronous.trainer.AsyncPPO`.
        steps_per_actor: Decisions per rollout (default: the workload's ``rollout_steps``).
        token_config: A whole :class:`~fleetgym.agents.learners.token_config.TokenPPOConfig`
            (its ``ratio_level``, ``loss``, ``sigma`` and ``target_kl`` are replaced by
            this trainer's).
        **token_hyperparameters: The token hyperparameters of :data:`TOKEN_FIELDS`
            (``chunk``, ``value_head``, ``backbone``, ``hidden_size``, ``lr``, ``epochs`` ...).

    Raises:
        ValueError: For an unknown ratio level, ``backend="ray"`` (or a 1.x name such as
            ``"thread"``: naming its 2.0 name), or an AsyncPPO argument
            this trainer does not take (:data:`REFUSED`); and as AsyncPPO and
            TokenPPOConfig do.
        TypeError: For an unknown keyword, or ``token_config`` with token keywords.
    """

    def __init__(
        self,
        workload: Any,
        ratio_level: str = "token",
        loss: str = "ppo",
        sigma: float = 0.8,
        max_policy_lag: int | None = 8,
        n_actors: int = 4,
        steps_per_actor: int | None = None,
        batch_trajectories: int | None = None,
        target_kl: float | str | None = "auto",
        lag_injection: int = 0,
        concurrent: bool = True,
        inference: str = "local",
        backend: str = "inprocess",
        seed: int = 0,
        tensorboard_log: str | Path | None = None,
        token_config: TokenPPOConfig | None = None,
        server_batch: int | None = None,
        server_wait_ms: float | str = 5.0,
        server_device: str = "cpu",
        learner_device: str = "cpu",
        **token_hyperparameters: Any,
    ) -> None:
        check_backend(backend, ("inprocess", "process"))
        self.server_batch = (
            None if server_batch is None else check_int("server_batch", server_batch, low=1)
        )
        if server_wait_ms != "auto":
            server_wait_ms = check_float("server_wait_ms", server_wait_ms, low=0.0)
        self.server_wait_ms = server_wait_ms
        self.server_device = check_device("server_device", server_device)
        self.learner_device = check_device("learner_device", learner_device)
        refused = sorted(set(REFUSED) & set(token_hyperparameters))
        if refused:
            raise ValueError(f"TokenAsyncPPO: expected none of {refused}, actual given")
        unknown = sorted(set(token_hyperparameters) - set(TOKEN_FIELDS))
        if unknown:
            raise TypeError(
                f"TokenAsyncPPO: expected token hyperparameters among {sorted(TOKEN_FIELDS)}, "
                f"actual unknown {unknown}"
            )
        if token_config is not None and token_hyperparameters:
            raise TypeError(
                f"TokenAsyncPPO: expected token_config= or token keywords, actual both "
                f"({sorted(token_hyperparameters)})"
            )
        if target_kl == "auto":
            kl: float | None = None  # TokenPPOConfig: the loss's default
        else:
            kl = 0.0 if target_kl is None else target_kl  # type: ignore[assignment]
        base = token_config if token_config is not None else TokenPPOConfig(**token_hyperparameters)
        self.token_config = dataclasses.replace(
            base, ratio_level=ratio_level, loss=loss, sigma=sigma, target_kl=kl
        )
        #: Builds a slot's TokenActor (in a worker process too: a picklable partial).
        self.token_actor_factory = functools.partial(TokenActor, config=self.token_config)
        super().__init__(
            workload, loss=loss, sigma=sigma, max_policy_lag=max_policy_lag, n_actors=n_actors,
            steps_per_actor=steps_per_actor, batch_trajectories=batch_trajectories,
            recompute_values=False, global_advantage_norm=False, target_kl=target_kl,
            lag_injection=lag_injection, concurrent=concurrent, inference=inference,
            backend=backend, seed=seed, tensorboard_log=tensorboard_log,
            actor_factory=self.token_actor_factory if inference == "local" else None,
        )  # fmt: skip

    @property
    def ratio_level(self) -> str:
        """The ratio level of the learner's loss."""
        return self.token_config.ratio_level

    def _make_learner(self, imagination: Any) -> TokenLagLearner:
        return TokenLagLearner(
            self.workload, self.token_config, self.max_policy_lag, self.seed,
            device=self.learner_device,
        )  # fmt: skip

    def _make_slots(self, ray_group: Any) -> TokenActorSlots:
        return TokenActorSlots(
            self.workload, self.seed, self.n_actors, self.steps_per_actor,
            self.batch_trajectories, self._behaviour, self.inference, self.backend,
            self.token_actor_factory, ray_group, policy=self.learner.policy,
            config=self.token_config, server_batch=self.server_batch,
            server_wait_ms=self.server_wait_ms, server_device=self.server_device,
        )  # fmt: skip

    def predict(
        self, observation: np.ndarray, deterministic: bool = True
    ) -> tuple[np.ndarray, None]:
        """The action for one observation (TokenPPO's ``predict``: a chunk ``(K, D)`` if
        ``chunk > 1``)."""
        return self.learner.predict(observation, deterministic=deterministic)

    def settings(self) -> dict[str, Any]:
        """The constructor's arguments as plain JSON values (what :meth:`save` writes)."""
        tc = self.token_config
        kl: float | str | None = "auto" if tc.target_kl is None else (tc.target_kl or None)
        token = dataclasses.asdict(tc)
        for name in ("ratio_level", "loss", "sigma", "target_kl"):
            token.pop(name)
        return {
            "format": TOKEN_SETTINGS_FORMAT, "workload": self.workload.name,
            "ratio_level": tc.ratio_level, "loss": tc.loss, "sigma": tc.sigma,
            "max_policy_lag": self.max_policy_lag, "n_actors": self.n_actors,
            "steps_per_actor": self.steps_per_actor,
            "batch_trajectories": self.batch_trajectories, "target_kl": kl,
            "lag_injection": self.lag_injection, "concurrent": self.concurrent,
            "inference": self.inference, "backend": self.backend, "seed": self.seed,
            "server_batch": self.server_batch, "server_wait_ms": self.server_wait_ms,
            "server_device": self.server_device, "learner_device": self.learner_device,
            "token_hyperparameters": token,
            "num_timesteps": self.num_timesteps,
        }  # fmt: skip

    def save(self, path: str | Path) -> Path:
        """Write the learner's policy, observation statistics and config (a TokenPPO file,
        also loadable by ``model.learner.load(path)``) and ``<stem>.json``, the trainer's
        settings (:meth:`settings`) that :meth:`load` rebuilds it from."""
        path = check_path("path", path)
        saved = self.learner.save(path)
        saved.with_suffix(".json").write_text(json.dumps(self.settings(), indent=1))
        return saved

    @classmethod
    def load(cls, path: str | Path, **overrides: Any) -> TokenAsyncPPO:  # type: ignore[override]
        """A :class:`TokenAsyncPPO` restored from :meth:`save` (settings may be overridden:
        ``inference``, ``n_actors``, ``server_device`` ...; token hyperparameters through
        ``token_config``).

        Raises:
            FileNotFoundError: If the file or its ``<stem>.json`` is missing.
            ValueError: Naming the file, if the settings are not a TokenAsyncPPO's (another
                format, unknown or bad values), or the policy file does not fit them.
        """
        path = check_path("path", path)
        settings_path = path.with_suffix(".json")
        if not settings_path.is_file():
            raise FileNotFoundError(f"expected the settings file, actual missing {settings_path}")
        settings = read_json_file(settings_path, "the TokenAsyncPPO settings file")
        kind = settings.pop("format", None)
        if kind != TOKEN_SETTINGS_FORMAT:
            raise ValueError(
                f"{settings_path}: expected {TOKEN_SETTINGS_FORMAT!r} settings, actual "
                f"{quote(kind)}"
            )
        migrate_settings(settings)
        try:
            steps = check_int("num_timesteps", settings.pop("num_timesteps", 0), low=0)
            token = settings.pop("token_hyperparameters", {})
            if not isinstance(token, dict):
                raise ValueError(f"token_hyperparameters: expected an object, actual {token!r}")
            settings["token_config"] = TokenPPOConfig(**token)
            settings.update(overrides)
            model = cls(**settings)
        except (TypeError, ValueError) as exc:
            raise ValueError(f"{settings_path}: {exc}") from exc
        return restore_trainer(model, path, steps)


__all__ = [
    "REFUSED",
    "TOKEN_FIELDS",
    "TOKEN_SETTINGS_FORMAT",
    "TokenActorSlots",
    "TokenAsyncPPO",
]
