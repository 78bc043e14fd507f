"""Inference as a service: a dynamic-batching policy server for the actor fleet.

Actors stop running the policy themselves and send each observation to one
:class:`InferenceServer`, which answers many actors with one batched forward pass.

API in brief::

    server = InferenceServer(policy, max_batch=256, max_wait_ms=5.0)  # or "auto"
    client = server.connect()                 # a thread of this process
    # client = RemoteClient(server.listen())  # another process (shared memory)
    ticket = client.submit(obs, noise)        # obs (k, *obs_shape); noise: the draws
    reply = client.wait(ticket)               # reply.outputs["action"], .policy_versions
    server.set_weights(weights, version=3)    # swapped in between batches
    server.metrics()                          # requests/s, batch sizes, waits, utilisation

* :mod:`~fleetgym.agents.inference.model`: what is served (:class:`ModelSpec`: the fixed
  per-request layout; :class:`ActorCriticModel` for the workloads' policies).
* :mod:`~fleetgym.agents.inference.token_model`: :class:`TokenPolicyModel`, a token policy
  served (batched autoregressive decoding of ``K D`` tokens per request, KV cache, the
  learner's restricted distribution).
* :mod:`~fleetgym.agents.inference.batching`: the batching rule and the adaptive wait.
* :mod:`~fleetgym.agents.inference.server`: the server thread and in-process clients.
* :mod:`~fleetgym.agents.inference.transport` and :mod:`~fleetgym.agents.inference.remote`:
  clients in other processes (shared-memory slots, fixed-size control messages on a
  loopback socket; nothing pickled).
* :mod:`~fleetgym.agents.inference.rollout`: actors that step their environments through
  a client, with double buffering (what the fleet backends run with ``inference="server"``).
* :mod:`~fleetgym.agents.inference.ray_service`: the server as a Ray actor and the client
  of Ray actors (the Ray fleet on the server).
* :mod:`~fleetgym.agents.inference.tensorboard`: the metrics as TensorBoard scalars.

Importing this package imports numpy only; torch loads with an ActorCriticPolicy.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from fleetgym.agents.inference.batching import InferenceConfig, RequestQueue, auto_wait
from fleetgym.agents.inference.channels import (
    InferenceClient,
    InferenceError,
    InferenceProtocolError,
    Reply,
    Ticket,
)
from fleetgym.agents.inference.local import LocalClient
from fleetgym.agents.inference.model import ActorCriticModel, ArraySpec, ModelSpec, ServedModel
from fleetgym.agents.inference.remote import RemoteClient
from fleetgym.agents.inference.server import InferenceServer
from fleetgym.extras import lazy_exports

# Torch loads with the token policy it serves.
__getattr__, __dir__ = lazy_exports(__name__, {"TokenPolicyModel": "token_model"})

if TYPE_CHECKING:
    from fleetgym.agents.inference.token_model import TokenPolicyModel

__all__ = [
    "ActorCriticModel",
    "ArraySpec",
    "InferenceClient",
    "InferenceConfig",
    "InferenceError",
    "InferenceProtocolError",
    "InferenceServer",
    "LocalClient",
    "ModelSpec",
    "Reply",
    "RemoteClient",
    "RequestQueue",
    "ServedModel",
    "Ticket",
    "TokenPolicyModel",
    "auto_wait",
]
