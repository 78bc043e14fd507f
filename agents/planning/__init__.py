"""Planning at scale: a discrete-event simulation of the asynchronous training pipeline.

No machine here has more than two cores, so how the pipeline behaves at a hundred nodes is
predicted by a model, calibrated from measurements on this machine and checked against
measured runs (``fleetgym plan``, docs/plan.md).

* :mod:`~fleetgym.agents.planning.model`: what is simulated, each part a frozen,
  validated dataclass (:class:`ActorTimes`, :class:`ServerTimes`, :class:`LearnerTimes`,
  :class:`NetworkLinks`, :class:`PipelineShape`).
* :mod:`~fleetgym.agents.planning.simulator`: :func:`simulate`, the event loop.
* :mod:`~fleetgym.agents.planning.result`: :class:`SimulationResult` (env steps/s,
  learner utilisation, server batch sizes, the policy-lag distribution).

Why a room of ``agents/`` and not of ``experiments/``: the simulator models the
asynchronous trainer's own invariants (the admission bound of
:class:`~fleetgym.agents.learners.asynchronous.trainer.AsyncPPO`, the inference server's
batching rule) and is a library a user plans a cluster with, not a CLI helper; the
measurements that calibrate it run real envs and learners and live in
:mod:`fleetgym.experiments.plan`. This room imports no other room of ``agents/`` (only
numpy, :mod:`fleetgym.validation`, :mod:`fleetgym.errors` and the shared vocabulary of
:mod:`fleetgym.agents.backends`), and no torch.
"""

from __future__ import annotations

from fleetgym.agents.planning.model import (
    ActorTimes,
    LearnerTimes,
    NetworkLinks,
    PipelineShape,
    ServerTimes,
)
from fleetgym.agents.planning.result import SimulationResult
from fleetgym.agents.planning.simulator import simulate

__all__ = [
    "ActorTimes",
    "LearnerTimes",
    "NetworkLinks",
    "PipelineShape",
    "ServerTimes",
    "SimulationResult",
    "simulate",
]
