"""Policy losses of multi-token actions, with the importance ratio formed at a level.

Actions made of tokens (a VLA policy's ``K`` actions of ``D`` tokens each per decision) can
form their ratios at three levels (:func:`level_log_probs`, :func:`level_policy_loss`):
``token`` (one ratio and one clip per token), ``action`` (the sum of an action's ``D``
token log-probs, one ratio per action) or ``chunk`` (the sum over all ``K D`` tokens, one
ratio per decision). Every registered policy loss works at every level, and the terms of a
decision are summed (then averaged over decisions), so on-policy the three levels have one
gradient and differ only in what they clip.
"""

from __future__ import annotations

import torch

from fleetgym.agents.learners.losses.functions import DEFAULT_SIGMA
from fleetgym.agents.learners.losses.registry import LossSettings, get_loss
from fleetgym.validation import check_choice

#: Where the importance ratio of a multi-token action is formed (see :func:`level_log_probs`).
RATIO_LEVELS = ("token", "action", "chunk")


def _action_mask(mask: torch.Tensor | None, shape: torch.Size) -> torch.Tensor | None:
    """``mask`` ``(B, K)`` checked against token log-probs of shape ``(B, K, D)``."""
    if mask is None:
        return None
    if tuple(mask.shape) != tuple(shape[:2]) or mask.dtype != torch.bool:
        raise ValueError(
            f"mask: expected a bool tensor of shape {tuple(shape[:2])}, actual "
            f"{mask.dtype} {tuple(mask.shape)}"
        )
    return mask


def level_log_probs(
    token_log_probs: torch.Tensor, level: str, mask: torch.Tensor | None = None
) -> torch.Tensor:
    """Token log-probs ``(B, K, D)`` summed to the ratio level.

    ``B`` decisions, each a chunk of ``K`` actions of ``D`` tokens. ``"token"`` keeps every
    token, ``(B, K D)``; ``"action"`` sums each action's ``D`` tokens, ``(B, K)`` (with
    ``D = 1`` and ``K = 1`` the levels agree); ``"chunk"`` sums all of them, ``(B,)``. The
    chunk sum of log-ratios is a sum of ``K D`` terms: its spread grows as ``sqrt(K D)``
    and its exponential, the joint ratio, leaves any clip range at large ``K D`` while each
    token's ratio stays near 1.

    ``mask`` ``(B, K)`` marks the actions the env executed: the tokens of the others (after
    an episode ended inside the chunk) count as log-probability 0, so they leave the chunk
    sum and give no gradient.

    Example:
        >>> lp = torch.arange(12.0).reshape(2, 3, 2)
        >>> [tuple(level_log_probs(lp, lv).shape) for lv in RATIO_LEVELS]
        [(2, 6), (2, 3), (2,)]
        >>> level_log_probs(lp, "chunk").tolist()
        [15.0, 51.0]
        >>> level_log_probs(lp, "chunk", torch.tensor([[True, False, False]] * 2)).tolist()
        [1.0, 13.0]

    Raises:
        ValueError: For a tensor that is not 3-d, an unknown level or a bad mask.
    """
    check_choice("level", level, RATIO_LEVELS)
    if token_log_probs.ndim != 3:
        raise ValueError(
            f"token_log_probs: expected shape (B, K, D), actual {tuple(token_log_probs.shape)}"
        )
    mask = _action_mask(mask, token_log_probs.shape)
    if mask is not None:
        token_log_probs = token_log_probs * mask.unsqueeze(-1).to(token_log_probs.dtype)
    if level == "token":
        return token_log_probs.flatten(1)
    if level == "action":
        return token_log_probs.sum(-1)
    return token_log_probs.sum((1, 2))


#: How :func:`level_policy_loss` reduces its terms (see there).
LEVEL_SCALES = ("decision", "term")


def level_policy_loss(
    new_token_log_probs: torch.Tensor,
    old_token_log_probs: torch.Tensor,
    advantages: torch.Tensor,
    level: str = "token",
    loss: str = "ppo",
    clip: float = 0.2,
    sigma: float = DEFAULT_SIGMA,
    rho_bar: float = 1.0,
    mask: torch.Tensor | None = None,
    scale: str = "decision",
) -> tuple[torch.Tensor, torch.Tensor]:
    """A registered policy loss with ratios at a level, and its clip fraction.

    The log-probs ``(B, K, D)`` are summed by :func:`level_log_probs`; each decision's
    advantage ``(B,)`` is shared by all of its tokens (or actions), and each term is the
    policy term of the loss registered as ``loss``
    (:func:`~fleetgym.agents.learners.losses.registry.get_loss`; ``"ppo"``, ``"gipo"``,
    ``"vtrace"`` or one added with ``register_loss``), so ``"token"`` clips each token, as
    in AcceRL's token-level PPO.

    ``scale="decision"`` (the default) sums the terms of a decision and averages over the
    ``B`` decisions. On-policy (every ratio 1) the three levels then have *the same
    gradient*, ``-mean_b A_b grad sum_j log pi(a_bj)``, so a level changes which ratios are
    clipped, not the step size. ``scale="term"`` averages over all ``B x`` (tokens, actions
    or 1) terms, as the loss functions do: the token level's gradient is then ``1 / (K D)``
    of the chunk level's and the action level's ``1 / K``.

    ``mask`` ``(B, K)`` marks the executed actions (see :func:`level_log_probs`): the
    terms of the others are left out of the loss and of the fraction. The reported fraction
    is the loss's own (clipped, down-weighted or truncated) over the valid terms. V-trace's
    *targets* need one ratio per time step: pass ``level_log_probs(new, "chunk", mask) -
    level_log_probs(old, "chunk", mask)`` as the loss's ``targets``' ``log_rhos``.

    Args:
        new_token_log_probs: ``log pi_theta`` of each token, shape ``(B, K, D)``
            (differentiable).
        old_token_log_probs: The behaviour's log-probs of the same tokens, same shape.
        advantages: One advantage per decision, shape ``(B,)``.
        level: Where the ratio is formed: ``"token"``, ``"action"`` or ``"chunk"``
            (:data:`RATIO_LEVELS`).
        loss: A registered loss name (``"ppo"``, ``"gipo"``, ``"vtrace"`` ...).
        clip, sigma, rho_bar: The :class:`~fleetgym.agents.learners.losses.registry.LossSettings`
            of the loss: PPO-clip's range (>= 0), GIPO's width in log-ratio space (> 0) and
            V-trace's weight cap (> 0); each loss reads its own, all three are checked.
        mask: Bool ``(B, K)``, ``True`` for the actions the env executed (``None``: all).
        scale: ``"decision"`` or ``"term"`` (:data:`LEVEL_SCALES`; see above).

    Example:
        >>> new = torch.full((1, 1, 4), 0.1)  # four tokens, each ratio e^0.1 = 1.105
        >>> adv = torch.ones(1)
        >>> [round(float(level_policy_loss(new, torch.zeros(1, 1, 4), adv, lv)[1]), 2)
        ...  for lv in RATIO_LEVELS]  # the token ratios are inside the clip, the joint e^0.4 not
        [0.0, 1.0, 1.0]

    Raises:
        ValueError: For log-probs of two shapes or not 3-d, advantages not of shape
            ``(B,)``, an unknown level, loss or scale, a bad mask, or a bad ``clip``,
            ``sigma`` or ``rho_bar``.
    """
    policy_loss = get_loss(loss)
    check_choice("scale", scale, LEVEL_SCALES)
    settings = LossSettings(clip=clip, sigma=sigma, rho_bar=rho_bar)
    if new_token_log_probs.shape != old_token_log_probs.shape:
        raise ValueError(
            "new_token_log_probs, old_token_log_probs: expected one shape, actual "
            f"{tuple(new_token_log_probs.shape)} and {tuple(old_token_log_probs.shape)}"
        )
    new = level_log_probs(new_token_log_probs, level, mask)
    old = level_log_probs(old_token_log_probs, level, mask)
    if tuple(advantages.shape) != (new.shape[0],):
        raise ValueError(
            f"advantages: expected shape ({new.shape[0]},), actual {tuple(advantages.shape)}"
        )
    b = new.shape[0]
    valid = torch.ones(new.shape, dtype=torch.bool, device=new.device)
    if mask is not None and level != "chunk":
        per_action = (
            mask
            if level == "action"
            else mask.repeat_interleave(new_token_log_probs.shape[2], dim=1)
        )
        valid = per_action.to(valid.device)
    shared = advantages.reshape(-1, *([1] * (new.ndim - 1))).expand_as(new)
    new, old, shared, valid = (
        new.reshape(-1), old.reshape(-1), shared.reshape(-1), valid.reshape(-1)
    )  # fmt: skip
    new, old, shared = new[valid], old[valid], shared[valid]
    value, fraction = policy_loss.policy_term(new, old, shared, settings)
    if scale == "decision":  # mean over the valid terms times their count, over B decisions
        value = value * (new.numel() / max(b, 1))
    return value, fraction
