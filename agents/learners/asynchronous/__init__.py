"""The asynchronous trainer: actors keep collecting while the learner trains.

* :mod:`~fleetgym.agents.learners.asynchronous.trainer`: :class:`AsyncPPO` (the training
  loop, weights, TensorBoard, predict, save and load) and :class:`UpdateRecord`.
* :mod:`~fleetgym.agents.learners.asynchronous.slots`: the actor slots the trainer owns
  (building, restarting and running each slot's thread).
* :mod:`~fleetgym.agents.learners.asynchronous.pipeline`: the bounded trajectory pipeline
  (admission tickets, backpressure) and actors served by the inference server.
* :mod:`~fleetgym.agents.learners.asynchronous.process_actor`: an actor slot whose
  environment runs in a worker process.
"""

from __future__ import annotations
