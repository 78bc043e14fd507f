"""Generalised advantage estimation (GAE) of one trajectory, cut at every episode end.

:func:`compute_gae` is what :class:`~fleetgym.agents.learners.ppo.PPOLearner`, the
lag-tolerant learner and the token learner compute their advantages and value targets with.
"""

from __future__ import annotations

import numpy as np

from fleetgym.agents.learners.checks import check_flags, check_series
from fleetgym.validation import check_float

__all__ = ["compute_gae"]


def compute_gae(
    rewards: np.ndarray,
    values: np.ndarray,
    terminated: np.ndarray,
    truncated: np.ndarray,
    truncation_values: np.ndarray,
    last_value: float,
    gamma: float,
    gae_lambda: float,
) -> tuple[np.ndarray, np.ndarray]:
    """Generalised advantage estimates and value targets of one time-major trajectory.

    ``delta_t = r_t + gamma * V_next - V(s_t)`` where ``V_next`` is 0 after a termination,
    ``truncation_values[t]`` after a time-limit truncation (bootstrap from the final
    observation), ``V(s_{t+1})`` otherwise (``last_value`` after the last step); the
    advantage recursion ``A_t = delta_t + gamma * lambda * A_{t+1}`` is cut at every episode
    end, because step ``t+1`` then belongs to the next episode.

    Args:
        rewards: The reward of each step, shape ``(n,)``, finite.
        values: ``V(s_t)``, the critic's value of each step's observation, shape ``(n,)``.
        terminated, truncated: Bool per step, shape ``(n,)``: the episode ended after step
            ``t`` by termination (no bootstrap) or by a time limit (bootstrap from
            ``truncation_values[t]``).
        truncation_values: ``V`` of the final observation on truncated steps, shape
            ``(n,)``; read only where ``truncated[t]``.
        last_value: ``V(s_n)``, the value of the observation after the last step; the
            bootstrap of the last step unless it ended an episode.
        gamma: Discount factor per step, in ``[0, 1]``.
        gae_lambda: GAE's ``lambda``, in ``[0, 1]``: ``0`` gives one-step TD errors,
            ``1`` discounted returns (bootstrapped at the cut) minus ``values``.

    Example:
        >>> adv, ret = compute_gae(np.ones(3), np.zeros(3), np.zeros(3, bool), np.zeros(3, bool),
        ...                        np.zeros(3), 0.0, gamma=0.5, gae_lambda=1.0)
        >>> adv.round(3).tolist(), ret.round(3).tolist()
        ([1.75, 1.5, 1.0], [1.75, 1.5, 1.0])

    Returns:
        ``(advantages, returns)`` as float32 arrays, ``returns = advantages + values``.

    Raises:
        ValueError: If the arrays differ in length, hold NaN or infinity, or ``gamma`` or
            ``gae_lambda`` is outside ``[0, 1]``.
    """
    gamma = check_float("gamma", gamma, 0.0, 1.0)
    gae_lambda = check_float("gae_lambda", gae_lambda, 0.0, 1.0)
    rewards, values, truncation_values = check_series(
        rewards=rewards, values=values, truncation_values=truncation_values
    )
    check_flags(len(rewards), terminated=terminated, truncated=truncated)
    last_value = check_float("last_value", last_value)
    n = len(rewards)
    advantages = np.zeros(n, np.float64)
    next_value = float(last_value)
    running = 0.0
    for t in range(n - 1, -1, -1):
        if terminated[t]:
            bootstrap, carry = 0.0, 0.0
        elif truncated[t]:
            bootstrap, carry = float(truncation_values[t]), 0.0
        else:
            bootstrap, carry = next_value, 1.0
        delta = float(rewards[t]) + gamma * bootstrap - values[t]
        running = delta + gamma * gae_lambda * carry * running
        advantages[t] = running
        next_value = values[t]
    return advantages.astype(np.float32), (advantages + values).astype(np.float32)
