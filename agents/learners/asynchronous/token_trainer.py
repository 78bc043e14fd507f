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
import functools
from pathlib import Path
from typing import Any, ClassVar

import numpy as np

from fleetgym.agents.backends import check_backend
from fleetgym.agents.inference.token_model import TokenPolicyModel
from fleetgym.agents.learners.asynchronous.config import (
    HISTORY_LIMIT,
    AsyncTopology,
    TokenAsyncPPOConfig,
)
from fleetgym.agents.learners.asynchronous.moved import TOKEN_MOVED, as_config, moved_error
from fleetgym.agents.learners.asynchronous.settings import (
    TOKEN_SETTINGS_FORMAT,
    trainer_settings,
)
from fleetgym.agents.learners.asynchronous.slots import AsyncActorSlots
from fleetgym.agents.learners.asynchronous.token_actor import TokenActor
from fleetgym.agents.learners.asynchronous.token_learner import TokenLagLearner
from fleetgym.agents.learners.asynchronous.trainer import AsyncPPO
from fleetgym.agents.learners.losses.config import LossConfig
from fleetgym.agents.learners.token_config import TokenPPOConfig
from fleetgym.agents.types import Weights


class TokenActorSlots(AsyncActorSlots):
    """Actor slots of token actors; the inference server serves the token policy.

    Models the actor side of :class:`TokenAsyncPPO`: AsyncActorSlots with the server's
    model a :class:`~fleetgym.agents.inference.token_model.TokenPolicyModel` and each
    served slot a :class:`~fleetgym.agents.learners.asynchronous.token_actor.TokenActor`.

    Args:
        policy: The learner's token policy (copied for the server, never shared).
        server_batch: The server's largest batch (``None``: ``n_actors``).
        server_wait_ms: Longest wait of a batch's oldest request (ms, or ``"auto"``).
        server_device: Where the server decodes (``"cpu"``, ``"cuda[:N]"``).
        **kwargs: As :class:`~fleetgym.agents.learners.asynchronous.slots.AsyncActorSlots`.

    Example:
        >>> tiny = TokenPPOConfig(hidden_size=16, layers=1, heads=2, vocab_size=64, num_bins=16)
        >>> model = TokenAsyncPPO("CartPole-v1", algo=TokenAsyncPPOConfig(tiny),
        ...     topology=AsyncTopology(inference="server", n_actors=2, steps_per_actor=4,
        ...                            concurrent=False))
        >>> model.slots.start_server()
        >>> [len(t) for t in model.slots.next_batch(None)], model.slots.server.spec.output_names
        ([4, 4], ('tokens', 'log_prob', 'value', 'policy_obs'))
        >>> model.close()
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

    Args:
        workload: A :class:`~fleetgym.agents.workloads.Workload` or its name (Box or
            Discrete actions; see :func:`~fleetgym.agents.rollout.token_rollout.token_env_spec`).
        algo: A :class:`~fleetgym.agents.learners.asynchronous.config.TokenAsyncPPOConfig`
            (or a dict of its fields; ``None``: the defaults): the token config (ratio level
            ``"token"`` / ``"action"`` / ``"chunk"``, loss, sizes, PPO hyperparameters), the
            lag bound, the batch and the learner's device.
        topology: An :class:`~fleetgym.agents.learners.asynchronous.config.AsyncTopology`
            (or a dict of its fields): ``backend="inprocess"`` (threads) or ``"process"``
            (worker processes; with ``inference="server"`` they reach the server on a
            loopback socket, observations in shared memory); ``inference="server"`` serves
            the token policy, batched (``server_batch``, ``server_wait_ms``,
            ``server_device``); ``steps_per_actor`` counts decisions.
        seed, verbose, tensorboard_log, history_limit: As
            :class:`~fleetgym.agents.learners.asynchronous.trainer.AsyncPPO`.
        **moved: fleetgym 1.x keywords (``ratio_level=``, ``chunk=``, ``n_actors=`` ...):
            each raises a TypeError that names its 2.0 place.

    Example:
        >>> token = TokenPPOConfig(ratio_level="token", loss="gipo", epochs=1, hidden_size=16,
        ...                        layers=1, heads=2, vocab_size=64, num_bins=16)
        >>> model = TokenAsyncPPO("CartPole-v1", algo=TokenAsyncPPOConfig(token),
        ...                       topology=AsyncTopology(n_actors=2, steps_per_actor=16), seed=0)
        >>> _ = model.learn(64)
        >>> model.num_timesteps, model.learner.policy_version
        (64, 2)
        >>> model.predict(np.zeros(4, np.float32))[0].shape
        ()
        >>> model.close()

    Raises:
        ValueError: For ``backend="ray"`` (not supported here); and as the configs and
            AsyncPPO do.
        TypeError: For a config of the wrong type and for a 1.x keyword.
    """

    #: What this class's settings file says it is (see :meth:`save`).
    SETTINGS_FORMAT: ClassVar[str] = TOKEN_SETTINGS_FORMAT

    def __init__(
        self,
        workload: Any,
        algo: TokenAsyncPPOConfig | dict[str, Any] | None = None,
        topology: AsyncTopology | dict[str, Any] | None = None,
        *,
        seed: int = 0,
        verbose: int = 0,
        tensorboard_log: str | Path | None = None,
        history_limit: int | None = HISTORY_LIMIT,
        **moved: Any,
    ) -> None:
        if moved:
            raise moved_error("TokenAsyncPPO", moved, TOKEN_MOVED)
        config = as_config(TokenAsyncPPOConfig, algo, "algo")
        places = as_config(AsyncTopology, topology, "topology")
        check_backend(places.backend, ("inprocess", "process"))
        #: The learner's token config (ratio level, loss, sizes, hyperparameters).
        self.token_config = config.token
        self.learner_device = config.learner_device
        self.server_batch, self.server_wait_ms = places.server_batch, places.server_wait_ms
        self.server_device = places.server_device
        #: Builds a slot's TokenActor (in a worker process too: a picklable partial).
        self.token_actor_factory = functools.partial(TokenActor, config=self.token_config)
        tc = self.token_config
        loss_config = LossConfig(tc.loss, tc.sigma, target_kl=tc.effective_target_kl)
        factory = self.token_actor_factory if places.inference == "local" else None
        self._build(
            workload, config, loss_config, places, seed, verbose, tensorboard_log, factory,
            history_limit,
        )  # fmt: skip

    @property
    def ratio_level(self) -> str:
        """The ratio level of the learner's loss."""
        return self.token_config.ratio_level

    def _make_learner(self) -> TokenLagLearner:
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
        ``chunk > 1``).

        Args:
            observation: One observation as the env returns it.
            deterministic: Take each token's most likely bin; ``False`` samples with the
                learner's generator.
        """
        return self.learner.predict(observation, deterministic=deterministic)

    def settings(self) -> dict[str, Any]:
        """What :meth:`save` writes to ``<stem>.json`` (plain JSON values: the workload,
        the configs, the seed and the env steps)."""
        return trainer_settings(self)


__all__ = [
    "TokenActorSlots",
    "TokenAsyncPPO",
]
