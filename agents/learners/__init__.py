"""Learners: what turns trajectories into new weights, and the loops that drive them.

* :mod:`~fleetgym.agents.learners.ppo`: :class:`~fleetgym.agents.learners.ppo.PPOLearner`
  (PPO-clip with GAE) and its hyperparameters.
* :mod:`~fleetgym.agents.learners.training`: the synchronous loop (one fleet round, one
  update) behind ``fleetgym train``.
* :mod:`~fleetgym.agents.learners.losses`: the policy losses (PPO-clip, GIPO, V-trace) and
  their configuration.
* :mod:`~fleetgym.agents.learners.lag`: policy-lag bookkeeping (the weight ring, per-sample
  versions) and the lag-compensated learner.
* :mod:`~fleetgym.agents.learners.token_ppo`: :class:`~fleetgym.agents.learners.token_ppo.TokenPPO`,
  PPO for a token policy (:mod:`fleetgym.agents.tokens`) on a Box env, with the ratio level
  (token, action, chunk) and the loss (PPO-clip, GIPO, V-trace) as switches.
* :mod:`~fleetgym.agents.learners.asynchronous`: the asynchronous trainer
  (:class:`~fleetgym.agents.learners.asynchronous.trainer.AsyncPPO`), its actor slots, its
  trajectory pipeline and its worker-process actors.

Depends on every other room of :mod:`fleetgym.agents` but the schedulers.
"""

from __future__ import annotations
