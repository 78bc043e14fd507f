"""World models: learned environments to imagine in (AcceRL's world model, MBPO's ensemble).

* :class:`WorldModel` -- an ensemble of probabilistic MLPs predicting the observation
  change, the reward and termination, with elites and per-step disagreement;
* :class:`TransitionBuffer` -- the real transitions it learns from (B_real);
* :class:`SuccessRewardModel` -- AcceRL's success classifier, ``r = M(o') - M(o)``;
* :class:`ImaginedVectorEnv` -- a Gymnasium ``VectorEnv`` over a model, started from real
  states, that any learner (SB3's included) trains in;
* :class:`ImaginationConfig` / :class:`Imagination` -- the imagination buffer a learner
  mixes into its updates (horizon and share from measured model error);
* :class:`MBPO` -- SB3's SAC trained on short model rollouts branched from real states,
  configured by :class:`MBPOConfig` / :class:`MBPOModelConfig`;
* :class:`WorldModelPredictor` / :func:`fit_predictor` -- a model as the predictor of the
  delay compensations (predictive observations, scheduled action chunks).

The models need the ``agents`` extra (torch); the package imports without it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from fleetgym.extras import lazy_exports

_EXPORTS = {
    "TransitionBuffer": "buffer",
    "collect_transitions": "buffer",
    "ImaginationConfig": "config",
    "linear_schedule": "config",
    "validation_schedule": "config",
    "Imagination": "imagination",
    "ImaginationRecord": "imagination",
    "ImaginedTrajectory": "imagination",
    "multistep_error": "imagination",
    "MBPO": "mbpo",
    "MBPOConfig": "mbpo_config",
    "MBPOModelConfig": "mbpo_config",
    "ImaginedEnv": "imagined_env",
    "ImaginedVectorEnv": "imagined_env",
    "FitReport": "model",
    "ModelDivergedError": "model",
    "StepPrediction": "model",
    "WorldModel": "model",
    "SpaceCodec": "spaces",
    "check_model_spaces": "spaces",
    "SuccessRewardModel": "success",
    "WorldModelPredictor": "predictor",
    "fit_predictor": "predictor",
}

__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)

if TYPE_CHECKING:
    from fleetgym.agents.world_model.buffer import TransitionBuffer, collect_transitions
    from fleetgym.agents.world_model.config import (
        ImaginationConfig,
        linear_schedule,
        validation_schedule,
    )
    from fleetgym.agents.world_model.imagination import (
        Imagination,
        ImaginationRecord,
        ImaginedTrajectory,
        multistep_error,
    )
    from fleetgym.agents.world_model.imagined_env import ImaginedEnv, ImaginedVectorEnv
    from fleetgym.agents.world_model.mbpo import MBPO
    from fleetgym.agents.world_model.mbpo_config import MBPOConfig, MBPOModelConfig
    from fleetgym.agents.world_model.model import (
        FitReport,
        ModelDivergedError,
        StepPrediction,
        WorldModel,
    )
    from fleetgym.agents.world_model.predictor import WorldModelPredictor, fit_predictor
    from fleetgym.agents.world_model.spaces import SpaceCodec, check_model_spaces
    from fleetgym.agents.world_model.success import SuccessRewardModel

__all__ = [
    "MBPO",
    "MBPOConfig",
    "MBPOModelConfig",
    "FitReport",
    "Imagination",
    "ImaginationConfig",
    "ImaginationRecord",
    "ImaginedEnv",
    "ImaginedTrajectory",
    "ImaginedVectorEnv",
    "ModelDivergedError",
    "SpaceCodec",
    "StepPrediction",
    "SuccessRewardModel",
    "TransitionBuffer",
    "WorldModel",
    "WorldModelPredictor",
    "check_model_spaces",
    "collect_transitions",
    "fit_predictor",
    "linear_schedule",
    "multistep_error",
    "validation_schedule",
]
