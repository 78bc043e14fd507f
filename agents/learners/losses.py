"""Policy losses and advantage estimators for learning from lagged (off-policy) samples.

Pure functions on tensors and arrays, so each formula can be checked on a few numbers. With
``rho = pi_theta(a|s) / mu(a|s)`` the ratio of the learner's policy to the behaviour policy
that produced the sample (``mu`` is the policy version the actor acted with) and ``A`` an
advantage estimate:

* :func:`ppo_clip_loss` -- ``L = -mean(min(rho * A, clip(rho, 1 - eps, 1 + eps) * A))``.
  A sample whose ratio left the trust region gives no gradient.
* :func:`gipo_loss` -- Gaussian importance weighting:
  ``w = exp(-1/2 * (log rho / sigma)^2)``, ``L = -mean(sg(w) * rho * A)`` where ``sg`` stops
  the gradient. ``w`` is 1 at ``rho = 1`` and decays smoothly instead of cutting off, so
  stale samples are down-weighted rather than clipped to zero gradient, and extreme ratios
  cannot blow the gradient up (``w * rho`` is bounded by ``exp(sigma^2 / 2)``).
* :func:`vtrace` -- IMPALA's V-trace targets ``v_s`` and policy-gradient advantages with
  truncated importance weights ``rho_bar`` and ``c_bar`` (1 and 1 by default), and
  :func:`vtrace_policy_loss`, the matching policy gradient
  ``L = -mean(sg(min(rho_bar, rho)) * A_vtrace * log pi_theta)``.

:class:`LossConfig` names a combination (the policy loss, GIPO's ``sigma``, whether values
and advantages are recomputed with the newest parameters, global or per-minibatch advantage
normalisation); it is frozen and validated once. The learner that uses it is
:class:`fleetgym.agents.learners.lag.CompensatedPPOLearner`.

Actions made of tokens (a VLA policy's ``K`` actions of ``D`` tokens each per decision) can
form their ratios at three levels (:func:`level_log_probs`, :func:`level_policy_loss`):
``token`` (one ratio and one clip per token), ``action`` (the sum of an action's ``D``
token log-probs, one ratio per action) or ``chunk`` (the sum over all ``K D`` tokens, one
ratio per decision). Every policy loss above works at every level, and the terms of a
decision are summed (then averaged over decisions), so on-policy the three levels have one
gradient and differ only in what they clip.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from fleetgym.agents.learners.checks import check_flags, check_series
from fleetgym.validation import check_bool, check_choice, check_float, quote

#: Policy losses by name.
LOSSES = ("ppo", "gipo", "vtrace")
#: Where the importance ratio of a multi-token action is formed (see :func:`level_log_probs`).
RATIO_LEVELS = ("token", "action", "chunk")
#: GIPO's default standard deviation of the Gaussian weight in log-ratio space.
DEFAULT_SIGMA = 0.8
#: Default KL budget per update (see :class:`LossConfig`'s ``target_kl``): none for
#: PPO-clip, whose clip is its trust region; one for the losses without a trust region.
DEFAULT_TARGET_KL: dict[str, float | None] = {"ppo": None, "gipo": 0.02, "vtrace": 0.02}


@dataclass(frozen=True)
class LossConfig:
    """Which policy loss and which lag compensations a learner uses.

    Models the switches of a lag-tolerant PPO learner, so an experiment can turn each one
    on or off separately.

    Example:
        >>> LossConfig("gipo", sigma=0.5).label
        'gipo(sigma=0.5)'
        >>> LossConfig("ppo", recompute_values=True, global_advantage_norm=True).label
        'ppo+recompute+global-norm'
        >>> LossConfig("gipo", sigma=0.0)
        Traceback (most recent call last):
        ...
        ValueError: sigma: expected a finite number > 0, actual 0.0

    Args:
        loss: ``"ppo"`` (clipped surrogate), ``"gipo"`` (Gaussian importance weight) or
            ``"vtrace"`` (IMPALA's off-policy correction).
        sigma: GIPO's weight width in log-ratio space (> 0; ignored by the others).
        recompute_values: Recompute ``V(s)`` with the newest critic before the advantages
            (otherwise the values the behaviour policy recorded are used).
        global_advantage_norm: Standardise advantages once over the whole batch of all
            actors (otherwise per minibatch, as SB3 and CleanRL do).
        target_kl: KL budget of one update (``None``: no budget). Once a minibatch's
            estimate of ``KL(mu || pi_theta)`` exceeds its value at the start of the
            update by more than ``target_kl``, the update ends before that minibatch's
            step (SB3's ``target_kl``). GIPO and V-trace have no trust
            region of their own: without a budget, PPO's repeated epochs keep moving the
            policy (see :func:`gipo_loss`).
        proximal_clip: PPO-clip only: clip the ratio to the *proximal* policy, the
            learner's own at the start of the update, instead of the behaviour policy, and
            weight each sample's advantage by ``pi_prox / mu`` (not differentiated), as in
            decoupled PPO (Hilton et al., 2021, "Batch size-invariance for policy
            optimization"). With a lag of 0 it is plain PPO-clip; with a lag, the trust region
            no longer starts out partly used up by the updates the sample missed.

    Raises:
        ValueError: For an unknown loss, ``sigma <= 0``, ``target_kl <= 0`` or
            ``proximal_clip`` with another loss than ``"ppo"``.
        TypeError: For a switch that is not a bool.
    """

    loss: str = "ppo"
    sigma: float = DEFAULT_SIGMA
    recompute_values: bool = False
    global_advantage_norm: bool = False
    target_kl: float | None = None
    proximal_clip: bool = False

    def __post_init__(self) -> None:
        check_choice("loss", self.loss, LOSSES)
        object.__setattr__(self, "sigma", check_float("sigma", self.sigma, low=0.0, strict=True))
        check_bool("recompute_values", self.recompute_values)
        check_bool("global_advantage_norm", self.global_advantage_norm)
        check_bool("proximal_clip", self.proximal_clip)
        if self.proximal_clip and self.loss != "ppo":
            raise ValueError(f"proximal_clip: expected loss 'ppo', actual {self.loss!r}")
        if self.target_kl is not None:
            object.__setattr__(
                self, "target_kl", check_float("target_kl", self.target_kl, low=0.0, strict=True)
            )

    @property
    def label(self) -> str:
        """A short name, e.g. ``'gipo(sigma=0.8)+recompute+global-norm'``."""
        name = f"gipo(sigma={self.sigma:g})" if self.loss == "gipo" else self.loss
        if self.proximal_clip:
            name += "-proximal"
        if self.recompute_values:
            name += "+recompute"
        if self.global_advantage_norm:
            name += "+global-norm"
        if self.target_kl is not None:
            name += f"+kl<={self.target_kl:g}"
        return name


def _same_shape(
    new_log_probs: torch.Tensor, old_log_probs: torch.Tensor, advantages: torch.Tensor
) -> None:
    """The three per-sample tensors of a policy loss must have one shape."""
    shapes = {
        "new_log_probs": tuple(new_log_probs.shape),
        "old_log_probs": tuple(old_log_probs.shape),
        "advantages": tuple(advantages.shape),
    }
    if len(set(shapes.values())) > 1:
        raise ValueError(
            f"new_log_probs, old_log_probs, advantages: expected one shape, actual {shapes}"
        )


def kl_estimate(new_log_probs: torch.Tensor, old_log_probs: torch.Tensor) -> torch.Tensor:
    """``KL(mu || pi)`` estimated from samples of ``mu``: ``mean((rho - 1) - log rho)``.

    ``rho = pi / mu`` per sample; each term is >= 0 and the mean is unbiased (Schulman's
    "k3" estimator). No gradient flows through it.

    Example:
        >>> float(kl_estimate(torch.zeros(3), torch.zeros(3)))
        0.0
        >>> round(float(kl_estimate(torch.log(torch.tensor([2.0])), torch.zeros(1))), 4)
        0.3069
    """
    log_ratio = (new_log_probs - old_log_probs).detach()
    return (torch.expm1(log_ratio) - log_ratio).mean()


def normalize(advantages: torch.Tensor, eps: float = 1e-8) -> torch.Tensor:
    """``(A - mean(A)) / (std(A) + eps)``; fewer than two samples pass unchanged.

    Example:
        >>> normalize(torch.tensor([1.0, 2.0, 3.0])).tolist()
        [-1.0, 0.0, 1.0]
    """
    if advantages.numel() < 2:
        return advantages
    return (advantages - advantages.mean()) / (advantages.std() + eps)


def ppo_clip_loss(
    new_log_probs: torch.Tensor,
    old_log_probs: torch.Tensor,
    advantages: torch.Tensor,
    clip: float = 0.2,
) -> tuple[torch.Tensor, torch.Tensor]:
    """The PPO clipped surrogate (to minimise) and the fraction of ratios outside ``1 +- clip``.

    ``L = -mean(min(rho * A, clip(rho, 1 - clip, 1 + clip) * A))``, ``rho = exp(new - old)``.

    Example:
        >>> new = torch.log(torch.tensor([1.0, 1.5, 0.5]))
        >>> loss, frac = ppo_clip_loss(new, torch.zeros(3), torch.tensor([1.0, 1.0, -1.0]))
        >>> round(float(loss), 4), round(float(frac), 4)  # -(1 + 1.2 - 0.8) / 3
        (-0.4667, 0.6667)

    Raises:
        ValueError: If the three tensors differ in shape, or ``clip`` is negative or not
            finite.
    """
    _same_shape(new_log_probs, old_log_probs, advantages)
    clip = check_float("clip", clip, low=0.0)
    ratio = torch.exp(new_log_probs - old_log_probs)
    surrogate = torch.min(ratio * advantages, torch.clamp(ratio, 1 - clip, 1 + clip) * advantages)
    clip_fraction = ((ratio - 1.0).abs() > clip).float().mean()
    return -surrogate.mean(), clip_fraction


def gaussian_weight(log_ratio: torch.Tensor, sigma: float = DEFAULT_SIGMA) -> torch.Tensor:
    """GIPO's weight ``w = exp(-1/2 * (log rho / sigma)^2)`` (no gradient flows through it).

    Example:
        >>> [round(w, 4) for w in gaussian_weight(torch.tensor([0.0, 0.8, -1.6]), 0.8).tolist()]
        [1.0, 0.6065, 0.1353]

    Raises:
        ValueError: If ``sigma <= 0``.
    """
    sigma = check_float("sigma", sigma, low=0.0, strict=True)
    return torch.exp(-0.5 * (log_ratio.detach() / sigma).square())


def gipo_loss(
    new_log_probs: torch.Tensor,
    old_log_probs: torch.Tensor,
    advantages: torch.Tensor,
    sigma: float = DEFAULT_SIGMA,
) -> tuple[torch.Tensor, torch.Tensor]:
    """GIPO's surrogate ``-mean(sg(w) * rho * A)`` and the fraction of samples with ``w < e^-1/2``.

    The gradient is ``-mean(w * rho * A * grad log pi)``: the importance-sampled policy
    gradient, each sample scaled by how close its ratio is to 1. Unlike PPO-clip's it
    never becomes zero: ``w * rho`` peaks at ``rho = exp(sigma^2)`` (1.9 for
    ``sigma = 0.8``) and decays slowly beyond (0.66 at ``rho = 5``), so the surrogate
    keeps rising as a sample's ratio moves away from 1 in the direction of its
    advantage. It is a soft importance weight, not a trust region: repeated epochs over
    one batch need a KL budget (:class:`LossConfig`'s ``target_kl``). The reported fraction
    (samples more than one ``sigma`` away in log-ratio) plays the role of PPO's clip
    fraction.

    Example:
        >>> new = torch.tensor([0.0, 0.8], requires_grad=True)
        >>> loss, frac = gipo_loss(new, torch.zeros(2), torch.tensor([1.0, 1.0]), sigma=0.8)
        >>> round(float(loss.detach()), 4)  # -(1 * 1 + 0.6065 * e^0.8) / 2
        -1.1749
        >>> loss.backward()
        >>> [round(g, 4) for g in new.grad.tolist()]  # -w * rho * A / n
        [-0.5, -0.6749]

    Raises:
        ValueError: If ``sigma <= 0``, or the three tensors differ in shape.
    """
    _same_shape(new_log_probs, old_log_probs, advantages)
    log_ratio = new_log_probs - old_log_probs
    weight = gaussian_weight(log_ratio, sigma)
    loss = -(weight * torch.exp(log_ratio) * advantages).mean()
    outside = (log_ratio.detach().abs() > sigma).float().mean()
    return loss, outside


def vtrace_policy_loss(
    new_log_probs: torch.Tensor,
    old_log_probs: torch.Tensor,
    advantages: torch.Tensor,
    rho_bar: float = 1.0,
) -> tuple[torch.Tensor, torch.Tensor]:
    """IMPALA's policy gradient ``-mean(sg(min(rho_bar, rho)) * A * log pi)`` and the share truncated.

    ``advantages`` are :func:`vtrace`'s ``r_s + gamma * v_{s+1} - V(x_s)``; the truncated
    weight is evaluated at the current parameters and not differentiated.

    Example:
        >>> new = torch.log(torch.tensor([0.5, 2.0]))
        >>> loss, frac = vtrace_policy_loss(new, torch.zeros(2), torch.tensor([1.0, 1.0]))
        >>> round(float(loss), 4), float(frac)  # -(0.5 * log 0.5 + 1 * log 2) / 2
        (-0.1733, 0.5)

    Raises:
        ValueError: If the three tensors differ in shape, or ``rho_bar`` is not a finite
            number > 0.
    """
    _same_shape(new_log_probs, old_log_probs, advantages)
    rho_bar = check_float("rho_bar", rho_bar, low=0.0, strict=True)
    ratio = torch.exp(new_log_probs.detach() - old_log_probs)
    weight = torch.clamp(ratio, max=rho_bar)
    loss = -(weight * advantages * new_log_probs).mean()
    return loss, (ratio > rho_bar).float().mean()


def vtrace(
    rewards: np.ndarray,
    values: np.ndarray,
    terminated: np.ndarray,
    truncated: np.ndarray,
    truncation_values: np.ndarray,
    last_value: float,
    log_rhos: np.ndarray,
    gamma: float,
    rho_bar: float = 1.0,
    c_bar: float = 1.0,
) -> tuple[np.ndarray, np.ndarray]:
    """V-trace value targets and policy-gradient advantages of one time-major trajectory.

    With ``rho_t = min(rho_bar, pi/mu)``, ``c_t = min(c_bar, pi/mu)`` and ``V_next`` as in
    :func:`~fleetgym.agents.learners.gae.compute_gae` (0 after a termination, the truncation value
    after a time-limit end, ``V(s_{t+1})`` otherwise):

    ``delta_t = rho_t * (r_t + gamma * V_next - V(s_t))``,
    ``v_t - V(s_t) = delta_t + gamma * c_t * (v_{t+1} - V(s_{t+1}))`` (the correction is
    cut at every episode end), and the advantage ``A_t = r_t + gamma * v_next - V(s_t)``
    where ``v_next`` is ``v_{t+1}`` inside an episode and ``V_next`` at its end. With
    ``pi = mu`` and ``rho_bar = c_bar = 1`` the targets are the lambda = 1 returns.

    Example:
        >>> vs, adv = vtrace(np.ones(3), np.zeros(3), np.zeros(3, bool), np.zeros(3, bool),
        ...                  np.zeros(3), 0.0, np.zeros(3), gamma=0.5)
        >>> vs.round(3).tolist(), adv.round(3).tolist()
        ([1.75, 1.5, 1.0], [1.75, 1.5, 1.0])
        >>> vs, adv = vtrace(np.ones(2), np.zeros(2), np.zeros(2, bool), np.zeros(2, bool),
        ...                  np.zeros(2), 0.0, np.log([0.5, 0.5]), gamma=1.0)
        >>> vs.round(3).tolist(), adv.round(3).tolist()  # delta = 0.5, c = 0.5
        ([0.75, 0.5], [1.5, 1.0])

    Returns:
        ``(vs, advantages)`` as float32 arrays.

    Raises:
        TypeError: For an array that is not of numbers, or a bound that is not a number.
        ValueError: If the arrays differ in length, hold NaN (``log_rhos``: NaN or
            ``+inf``; ``-inf`` is a ratio of 0) or infinity, ``gamma`` is outside
            ``[0, 1]``, or ``rho_bar`` or ``c_bar`` is not a finite number > 0.
    """
    gamma = check_float("gamma", gamma, 0.0, 1.0)
    rho_bar = check_float("rho_bar", rho_bar, low=0.0, strict=True)
    c_bar = check_float("c_bar", c_bar, low=0.0, strict=True)
    last_value = check_float("last_value", last_value)
    try:
        log_rhos = np.asarray(log_rhos, np.float64)
    except (TypeError, ValueError, OverflowError):
        raise TypeError(
            f"log_rhos: expected an array of numbers, actual {quote(log_rhos)}"
        ) from None
    # A ratio of 0 (log -inf: the learner would never take the action) is a weight of 0;
    # np.maximum keeps NaN, refused below with +inf.
    rewards, values, truncation_values, log_rhos = check_series(
        rewards=rewards,
        values=values,
        truncation_values=truncation_values,
        log_rhos=np.maximum(log_rhos, -745.0),
    )
    check_flags(len(rewards), terminated=terminated, truncated=truncated)
    n = len(rewards)
    with np.errstate(over="ignore"):  # a ratio of inf is cut to rho_bar and c_bar
        ratios = np.exp(log_rhos)
    rhos = np.minimum(rho_bar, ratios)
    cs = np.minimum(c_bar, ratios)
    vs = np.zeros(n, np.float64)
    advantages = np.zeros(n, np.float64)
    next_value = float(last_value)  # V(s_{t+1})
    next_vs = float(last_value)  # v_{t+1}
    correction = 0.0  # v_{t+1} - V(s_{t+1})
    for t in range(n - 1, -1, -1):
        if terminated[t]:
            bootstrap, target, carry = 0.0, 0.0, 0.0
        elif truncated[t]:
            v_end = truncation_values[t]
            bootstrap, target, carry = v_end, v_end, 0.0
        else:
            bootstrap, target, carry = next_value, next_vs, 1.0
        delta = rhos[t] * (rewards[t] + gamma * bootstrap - values[t])
        correction = delta + gamma * cs[t] * carry * correction
        vs[t] = values[t] + correction
        advantages[t] = rewards[t] + gamma * target - values[t]
        next_value, next_vs = values[t], vs[t]
    return vs.astype(np.float32), advantages.astype(np.float32)


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
    """A policy loss (PPO-clip, GIPO or V-trace) with ratios at a level, and its clip fraction.

    The log-probs ``(B, K, D)`` are summed by :func:`level_log_probs`; each decision's
    advantage ``(B,)`` is shared by all of its tokens (or actions), and each term is the
    named loss's (:func:`ppo_clip_loss`, :func:`gipo_loss` or :func:`vtrace_policy_loss`),
    so ``"token"`` clips each token, as in AcceRL's token-level PPO.

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
    level_log_probs(old, "chunk", mask)`` as :func:`vtrace`'s ``log_rhos``.

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
    check_choice("loss", loss, LOSSES)
    check_choice("scale", scale, LEVEL_SCALES)
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
    if loss == "ppo":
        value, fraction = ppo_clip_loss(new, old, shared, clip)
    elif loss == "gipo":
        value, fraction = gipo_loss(new, old, shared, sigma)
    else:
        value, fraction = vtrace_policy_loss(new, old, shared, rho_bar)
    if scale == "decision":  # mean over the valid terms times their count, over B decisions
        value = value * (new.numel() / max(b, 1))
    return value, fraction
