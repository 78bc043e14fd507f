"""The asynchronous trainer: actors keep collecting while the learner trains.

* :mod:`~fleetgym.agents.learners.asynchronous.trainer`: :class:`AsyncPPO` (the training
  loop, weights, predict, save and load).
* :mod:`~fleetgym.agents.learners.asynchronous.config`: its two configs, the algorithm
  (``AsyncPPOConfig``, ``TokenAsyncPPOConfig``) and where the actors run
  (``AsyncTopology``); :mod:`~fleetgym.agents.learners.asynchronous.moved`: where each
  1.x keyword went.
* :mod:`~fleetgym.agents.learners.asynchronous.records`: :class:`UpdateRecord`, what
  each update reports, and its TensorBoard scalars.
* :mod:`~fleetgym.agents.learners.asynchronous.settings`: the settings file
  (``<stem>.json``) :meth:`AsyncPPO.save` writes and :meth:`AsyncPPO.load` reads back
  (files of 1.x migrated).
* :mod:`~fleetgym.agents.learners.asynchronous.slots`: the actor slots the trainer owns
  (building, restarting and running each slot's thread).
* :mod:`~fleetgym.agents.learners.asynchronous.balancing`: env instances across actors
  (``envs_per_actor``): rounds, home queues and work stealing (``load_balancing``).
* :mod:`~fleetgym.agents.learners.asynchronous.pipeline`: the bounded trajectory pipeline
  (admission tickets, backpressure) and actors served by the inference server.
* :mod:`~fleetgym.agents.learners.asynchronous.process_actor`: an actor slot whose
  environment runs in a worker process.
* :mod:`~fleetgym.agents.learners.asynchronous.ray_actor`: actor slots as Ray actors on a
  Ray cluster (joined or started), weights through Ray's object store.
* :mod:`~fleetgym.agents.learners.asynchronous.token_trainer`: ``TokenAsyncPPO``, the
  token policy trained through AsyncPPO's loop (ratio level token / action / chunk, every
  loss), its actors acting locally or through the inference server;
  :mod:`~fleetgym.agents.learners.asynchronous.token_learner` (its learner: TokenPPO's
  update on lagged trajectories) and
  :mod:`~fleetgym.agents.learners.asynchronous.token_actor` (its actor slots).
"""

from __future__ import annotations
