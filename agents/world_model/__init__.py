"""World models: learned environments to imagine in (AcceRL's world model, MBPO's ensemble).

* :class:`WorldModel` -- an ensemble of probabilistic MLPs predicting the observation
  change, the reward and termination, with elites and per-step disagreement;
* :class:`TransitionBuffer` -- the real transitions it learns from (B_real);
* :class:`SuccessRewardModel` -- AcceRL's success classifier, ``r = M(o') - M(o)``;
* :class:`ImaginedVectorEnv` -- a Gymnasium ``VectorEnv`` over a model, started from real
  states, that any learner (SB3's included) trains in;
* :class:`ImaginationConfig` / :class:`Imagination` -- the imagination buffer a learner
  mixes into its updates (horizon and share from measured model error).
"""

from fleetgym.agents.world_model.buffer import TransitionBuffer, collect_transitions
from fleetgym.agents.world_model.imagination import (
    Imagination,
    ImaginationConfig,
    ImaginationRecord,
    ImaginedTrajectory,
    linear_schedule,
    multistep_error,
    validation_schedule,
)
from fleetgym.agents.world_model.imagined_env import ImaginedEnv, ImaginedVectorEnv
from fleetgym.agents.world_model.model import (
    FitReport,
    ModelDivergedError,
    StepPrediction,
    WorldModel,
)
from fleetgym.agents.world_model.spaces import SpaceCodec, check_model_spaces
from fleetgym.agents.world_model.success import SuccessRewardModel

__all__ = [
    "FitReport",
    "Imagination",
    "ImaginationConfig",
    "ImaginationRecord",
    "ImaginedEnv",
    "ImaginedTrajectory",
    "ImaginedVectorEnv",
    "SuccessRewardModel",
    "collect_transitions",
    "linear_schedule",
    "multistep_error",
    "validation_schedule",
    "ModelDivergedError",
    "SpaceCodec",
    "StepPrediction",
    "TransitionBuffer",
    "WorldModel",
    "check_model_spaces",
]
