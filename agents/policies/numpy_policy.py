"""An inference-only numpy snapshot of an MLP actor-critic, for actors stepping one env.

Same maths as :class:`fleetgym.agents.policies.ActorCriticPolicy` (float32 products,
float64 softmax), without torch's per-call overhead. This module needs only numpy at
import; it reads the torch policy's weights when a snapshot is built.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

__all__ = ["LOG_2PI", "OBS_CLIP", "NumpyActorCritic"]

#: log(2 pi), of the Gaussian log-density.
LOG_2PI = math.log(2.0 * math.pi)
#: Normalised observations are clipped to this range (as SB3's VecNormalize does), so a
#: rare outlier cannot saturate the first layer.
OBS_CLIP = 10.0


class NumpyActorCritic:
    """An inference-only numpy snapshot of an MLP
    :class:`~fleetgym.agents.policies.ActorCriticPolicy`.

    Models the actor-side forward pass without torch's per-call overhead, which dominates
    when an actor steps one environment at a time (a few small matrix products per step).
    It is a *snapshot*: built from the policy's current weights, it does not follow later
    changes (the rollout code builds one per rollout, after loading the round's weights).
    Same maths as the policy (float32 products, float64 softmax), so actions agree and
    log-probabilities agree to float rounding.

    Args:
        policy: An MLP policy (``network="mlp"``).

    Example:
        >>> import gymnasium as gym, numpy as np
        >>> from fleetgym.agents.policies import ActorCriticPolicy
        >>> policy = ActorCriticPolicy(gym.spaces.Box(-1, 1, (4,), np.float32), gym.spaces.Discrete(2))
        >>> fast = NumpyActorCritic(policy)
        >>> obs = np.zeros((3, 4), np.float32)
        >>> bool(np.allclose(fast.value(obs), policy.value(obs), atol=1e-6))
        True

    Raises:
        ValueError: For a CNN policy.
    """

    def __init__(self, policy: Any) -> None:
        if policy.shared:
            raise ValueError("policy: expected an MLP policy, actual a CNN (use the torch path)")
        self.discrete = policy.discrete
        self.action_dim = policy.action_dim
        self.relu = policy.config["activation"] == "relu"

        from torch import nn  # the snapshot reads a torch policy; stepping needs numpy only

        def dense(module: Any) -> list[tuple[np.ndarray, np.ndarray]]:
            layers = [m for m in module.modules() if isinstance(m, nn.Linear)]
            return [
                (
                    np.ascontiguousarray(m.weight.detach().cpu().numpy().T, np.float32),
                    m.bias.detach().cpu().numpy().astype(np.float32),
                )
                for m in layers
            ]

        self.actor = dense(policy.actor_body)
        self.critic = dense(policy.critic_body)
        self.policy_head = dense(policy.policy_head)[0]
        self.value_head = dense(policy.value_head)[0]
        self.norm: tuple[np.ndarray, np.ndarray] | None = None
        if policy.normalize_obs:
            self.norm = (policy._norm_mean.numpy().copy(), policy._norm_std.numpy().copy())
        if not self.discrete:
            self.log_std = policy.log_std.detach().cpu().numpy().astype(np.float32)
            self.std = np.exp(self.log_std)

    def _body(self, x: np.ndarray, layers: list[tuple[np.ndarray, np.ndarray]]) -> np.ndarray:
        for w, b in layers:
            x = x @ w + b
            x = np.maximum(x, 0.0) if self.relu else np.tanh(x)
        return x

    def forward(self, obs: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Distribution parameters (B, A) and values (B,) for raw observations (B, D).

        Args:
            obs: Raw observations, batched ``(B, D)`` (an unbatched one is not accepted);
                normalised and clipped with the snapshot's statistics when the policy
                normalises.
        """
        x = np.asarray(obs, np.float32)
        if self.norm is not None:
            x = np.clip((x - self.norm[0]) / self.norm[1], -OBS_CLIP, OBS_CLIP)
        w, b = self.policy_head
        params = self._body(x, self.actor) @ w + b
        w, b = self.value_head
        values = (self._body(x, self.critic) @ w + b)[:, 0]
        return params, values

    def value(self, obs: np.ndarray) -> np.ndarray:
        """State values for raw observations (B, D).

        Args:
            obs: Raw observations, batched ``(B, D)``, as for :meth:`forward`.
        """
        return self.forward(obs)[1]

    def sample(
        self, params: np.ndarray, uniforms: np.ndarray | None, normals: np.ndarray | None
    ) -> tuple[np.ndarray, np.ndarray]:
        """Actions and log-probabilities from explicit draws (as the policy's ``sample_from``).

        Args:
            params: Logits or Gaussian means from :meth:`forward`, shape ``(B, A)``.
            uniforms: One uniform draw in [0, 1) per sample, shape ``(B,)`` (``Discrete``);
                None: the most probable action.
            normals: Standard normal draws, shape ``(B, A)`` (``Box``); None: the mean.

        Returns:
            ``(actions, log_probs)``: int64 indices or float32 actions, and float32
            log-probabilities of shape ``(B,)``.
        """
        if self.discrete:
            logits = params.astype(np.float64)
            top = logits.max(axis=-1, keepdims=True)
            weights = np.exp(logits - top)
            total = weights.sum(axis=-1, keepdims=True)
            if uniforms is None:
                actions = logits.argmax(-1)
            else:
                # inverse CDF on the unnormalised weights (u scaled by their sum)
                u = np.asarray(uniforms, np.float64).reshape(-1, 1) * total
                actions = np.minimum(
                    (np.cumsum(weights, axis=-1) <= u).sum(-1), self.action_dim - 1
                )
            rows = np.arange(logits.shape[0])
            log_probs = logits[rows, actions] - top[:, 0] - np.log(total[:, 0])
            return actions.astype(np.int64), log_probs.astype(np.float32)
        eps = np.zeros_like(params) if normals is None else np.asarray(normals, np.float32)
        actions = params + self.std * eps
        z = (actions - params) / self.std
        log_probs = (-0.5 * z * z - self.log_std - 0.5 * LOG_2PI).sum(-1)
        return actions.astype(np.float32), log_probs.astype(np.float32)
