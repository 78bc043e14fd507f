"""The data-parallel learner: several PPO ranks, gradients and statistics all-reduced.

* :mod:`~fleetgym.agents.learners.data_parallel.rank`: :class:`DistributedPPOLearner`,
  PPO on one rank of a ``torch.distributed`` (gloo) group; every batch mean is a sum over
  the ranks, so ``N`` ranks on a split batch step as one learner on the whole batch.
* :mod:`~fleetgym.agents.learners.data_parallel.group`: :class:`DataParallelPPO`, the
  ranks as spawned processes or Ray actors behind one learner front (shards, bounded
  waits, a failed update applied nowhere), checkpointed by
  :func:`~fleetgym.agents.learners.training.train` (``checkpoints=``, ``resume=``);
* :mod:`~fleetgym.agents.learners.data_parallel.hosts`: what runs inside each rank, and
  the ranks as processes or Ray actors.

This room imports PPO (:mod:`~fleetgym.agents.learners.ppo`), the learner checks, the
learner state checks (:mod:`~fleetgym.agents.learners.checkpoint`) and
the fleet's local Ray start; nothing in :mod:`fleetgym.agents.learners` imports it but
the learners' lazy exports.
"""

from __future__ import annotations
