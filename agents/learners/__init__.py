"""Learners: what turns trajectories into new weights, and the loops that drive them.

* :class:`PPOLearner` (PPO-clip with GAE) and its :data:`HYPERPARAMETERS`;
* :func:`train`, the synchronous loop (one fleet round, one update) behind
  ``fleetgym train``, its periodic checkpoints and resume (:class:`CheckpointConfig`), and
  :func:`evaluate_policy`;
* the policy losses (PPO-clip, GIPO, V-trace), the loss registry (:class:`PolicyLoss`,
  :func:`register_loss`, :func:`get_loss`, :data:`LOSS_REGISTRY`) and :class:`LossConfig`;
* policy-lag bookkeeping (:class:`WeightRing`, per-sample versions) and the
  lag-compensated learner :class:`CompensatedPPOLearner`;
* :class:`TokenPPO`, PPO for a token policy (:mod:`fleetgym.agents.tokens`) on a Box env,
  with the ratio level (token, action, chunk) and the loss as switches;
* :class:`AsyncPPO`, the asynchronous trainer (actors keep collecting while the learner
  trains; threads, processes or Ray), and :class:`TokenAsyncPPO`, the token policy
  trained through its loop;
* :class:`DataParallelPPO`, PPO over several learner ranks (``torch.distributed``, gloo;
  processes or Ray actors) with gradients and advantage statistics all-reduced, and
  :class:`DistributedPPOLearner`, one rank of it.

Every name needs the ``agents`` extra (torch); the package itself imports without it,
and a name used without torch raises :class:`~fleetgym.errors.DependencyNotInstalled`.

Example:
    >>> from fleetgym.agents.learners import LossConfig
    >>> LossConfig("gipo", sigma=0.5).label
    'gipo(sigma=0.5)'
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from fleetgym.extras import lazy_exports

_EXPORTS = {
    # the synchronous learner and loop
    "HYPERPARAMETERS": "ppo",
    "Batch": "ppo",
    "PPOLearner": "ppo",
    "compute_gae": "gae",
    "RoundRecord": "training",
    "TrainingHistory": "training",
    "evaluate_policy": "training",
    "train": "training",
    "CheckpointConfig": "checkpoint_store",
    # losses
    "DEFAULT_SIGMA": "losses",
    "DEFAULT_TARGET_KL": "losses",
    "LOSSES": "losses",
    "LOSS_REGISTRY": "losses",
    "LossSettings": "losses",
    "PolicyLoss": "losses",
    "get_loss": "losses",
    "register_loss": "losses",
    "unregister_loss": "losses",
    "RATIO_LEVELS": "losses",
    "LossConfig": "losses",
    "gaussian_weight": "losses",
    "gipo_loss": "losses",
    "kl_estimate": "losses",
    "level_policy_loss": "losses",
    "ppo_clip_loss": "losses",
    "vtrace": "losses",
    "vtrace_policy_loss": "losses",
    # policy lag
    "CompensatedPPOLearner": "lag",
    "LagUpdateStats": "lag",
    "ObservedTrajectory": "lag",
    "WeightRing": "lag",
    "behaviour_versions": "lag",
    # token PPO
    "TokenPPO": "token_ppo",
    "TokenPPOConfig": "token_config",
    "TokenUpdateStats": "token_ppo",
    # the asynchronous trainer
    "AsyncPPO": "asynchronous.trainer",
    "AsyncPPOConfig": "asynchronous.config",
    "AsyncTopology": "asynchronous.config",
    "TokenAsyncPPOConfig": "asynchronous.config",
    "UpdateRecord": "asynchronous.records",
    "ProcessActor": "asynchronous.process_actor",
    "TokenAsyncPPO": "asynchronous.token_trainer",
    # the data-parallel learner
    "DataParallelPPO": "data_parallel.group",
    "DistributedPPOLearner": "data_parallel.rank",
}

__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)

if TYPE_CHECKING:
    from fleetgym.agents.learners.asynchronous.config import (
        AsyncPPOConfig,
        AsyncTopology,
        TokenAsyncPPOConfig,
    )
    from fleetgym.agents.learners.asynchronous.process_actor import ProcessActor
    from fleetgym.agents.learners.asynchronous.records import UpdateRecord
    from fleetgym.agents.learners.asynchronous.token_trainer import TokenAsyncPPO
    from fleetgym.agents.learners.asynchronous.trainer import AsyncPPO
    from fleetgym.agents.learners.checkpoint_store import CheckpointConfig
    from fleetgym.agents.learners.data_parallel.group import DataParallelPPO
    from fleetgym.agents.learners.data_parallel.rank import DistributedPPOLearner
    from fleetgym.agents.learners.gae import compute_gae
    from fleetgym.agents.learners.lag import (
        CompensatedPPOLearner,
        LagUpdateStats,
        ObservedTrajectory,
        WeightRing,
        behaviour_versions,
    )
    from fleetgym.agents.learners.losses import (
        DEFAULT_SIGMA,
        DEFAULT_TARGET_KL,
        LOSS_REGISTRY,
        LOSSES,
        RATIO_LEVELS,
        LossConfig,
        LossSettings,
        PolicyLoss,
        gaussian_weight,
        get_loss,
        gipo_loss,
        kl_estimate,
        level_policy_loss,
        ppo_clip_loss,
        register_loss,
        unregister_loss,
        vtrace,
        vtrace_policy_loss,
    )
    from fleetgym.agents.learners.ppo import HYPERPARAMETERS, Batch, PPOLearner
    from fleetgym.agents.learners.token_config import TokenPPOConfig
    from fleetgym.agents.learners.token_ppo import TokenPPO, TokenUpdateStats
    from fleetgym.agents.learners.training import (
        RoundRecord,
        TrainingHistory,
        evaluate_policy,
        train,
    )

__all__ = [
    "AsyncPPO",
    "AsyncPPOConfig",
    "AsyncTopology",
    "Batch",
    "CheckpointConfig",
    "CompensatedPPOLearner",
    "DEFAULT_SIGMA",
    "DEFAULT_TARGET_KL",
    "DataParallelPPO",
    "DistributedPPOLearner",
    "HYPERPARAMETERS",
    "LOSSES",
    "LOSS_REGISTRY",
    "LagUpdateStats",
    "LossConfig",
    "LossSettings",
    "ObservedTrajectory",
    "PPOLearner",
    "PolicyLoss",
    "ProcessActor",
    "RATIO_LEVELS",
    "RoundRecord",
    "TokenAsyncPPO",
    "TokenAsyncPPOConfig",
    "TokenPPO",
    "TokenPPOConfig",
    "TokenUpdateStats",
    "TrainingHistory",
    "UpdateRecord",
    "WeightRing",
    "behaviour_versions",
    "compute_gae",
    "evaluate_policy",
    "gaussian_weight",
    "get_loss",
    "gipo_loss",
    "kl_estimate",
    "level_policy_loss",
    "ppo_clip_loss",
    "register_loss",
    "train",
    "unregister_loss",
    "vtrace",
    "vtrace_policy_loss",
]
