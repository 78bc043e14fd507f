"""The policy-loss formulas and advantage estimators, as pure functions on tensors and arrays.

So each formula can be checked on a few numbers. With ``rho = pi_theta(a|s) / mu(a|s)`` the
ratio of the learner's policy to the behaviour policy that produced the sample and ``A`` an
advantage estimate:

* :func:`ppo_clip_loss` -- ``L = -mean(min(rho * A, clip(rho, 1 - eps, 1 + eps) * A))``.
* :func:`gipo_loss` -- Gaussian importance weighting ``L = -mean(sg(w) * rho * A)`` with
  ``w = exp(-1/2 * (log rho / sigma)^2)`` (:func:`gaussian_weight`).
* :func:`vtrace` and :func:`vtrace_policy_loss` -- IMPALA's V-trace targets and policy
  gradient ``L = -mean(sg(min(rho_bar, rho)) * A_vtrace * log pi_theta)``.
* :func:`decoupled_ppo_loss` -- AReaL's decoupled PPO objective
  ``L = -mean(sg(w) * min(u * A, clip(u, 1 - eps, 1 + eps) * A))`` with ``u = pi_theta /
  pi_prox`` and the capped behaviour weight ``w = pi_prox / mu`` (:func:`behaviour_weight`).
* :func:`effective_sample_size` -- the effective sample size of importance weights, in
  ``(0, 1]``.

The learners reach these through the loss registry
(:mod:`fleetgym.agents.learners.losses.registry`), not by name.
"""

from __future__ import annotations

import numpy as np
import torch

from fleetgym.agents.learners.checks import check_flags, check_series
from fleetgym.validation import check_choice, check_float, quote

#: GIPO's default standard deviation of the Gaussian weight in log-ratio space.
DEFAULT_SIGMA = 0.8
#: The decoupled loss's default cap on the behaviour weight ``pi_prox / mu``.
DEFAULT_WEIGHT_CAP = 5.0
#: What the decoupled loss does with a behaviour weight above its cap: ``"drop"`` the
#: sample (weight 0, as AReaL does) or ``"truncate"`` the weight to the cap.
CAP_MODES = ("drop", "truncate")


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

    Args:
        new_log_probs: ``log pi`` of the samples under the learner's policy.
        old_log_probs: ``log mu`` of the same samples under the policy that drew them,
            same shape.

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

    Args:
        new_log_probs: ``log pi_theta`` of each sample (differentiable).
        old_log_probs: ``log mu``, the behaviour policy's, same shape.
        advantages: One advantage per sample, same shape.
        clip: PPO's ``eps`` (>= 0): the ratio is clipped to ``[1 - clip, 1 + clip]``.

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

    Args:
        log_ratio: ``log rho = log pi - log mu`` per sample (detached here).
        sigma: The Gaussian's standard deviation in log-ratio space (> 0): a sample whose
            log-ratio is ``sigma`` away from 0 gets ``w = e^-1/2``.

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

    Args:
        new_log_probs: ``log pi_theta`` of each sample (differentiable).
        old_log_probs: ``log mu``, the behaviour policy's, same shape.
        advantages: One advantage per sample, same shape.
        sigma: Width of the Gaussian weight in log-ratio space (> 0; see
            :func:`gaussian_weight`).

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

    Args:
        new_log_probs: ``log pi_theta`` of each sample (differentiable).
        old_log_probs: ``log mu``, the behaviour policy's, same shape.
        advantages: One V-trace advantage per sample, same shape.
        rho_bar: The cap of the importance weight, ``min(rho_bar, rho)`` (> 0); the
            reported share is of samples with ``rho > rho_bar``.

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

    Args:
        rewards: The reward of each step, shape ``(n,)``.
        values: ``V(s_t)`` of each step's observation, shape ``(n,)``.
        terminated, truncated: Bool per step, shape ``(n,)``: the episode ended after step
            ``t`` by termination (no bootstrap) or by a time limit (bootstrap from
            ``truncation_values[t]``).
        truncation_values: ``V`` of the final observation on truncated steps, shape
            ``(n,)``; read only where ``truncated[t]``.
        last_value: ``V(s_n)``, the value of the observation after the last step.
        log_rhos: ``log pi - log mu`` of each step's action, shape ``(n,)`` (``-inf`` is a
            ratio of 0).
        gamma: Discount factor per step, in ``[0, 1]``.
        rho_bar: Cap of the weight ``rho_t`` in each TD error (> 0).
        c_bar: Cap of the trace coefficient ``c_t`` that carries corrections back (> 0).

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


def behaviour_weight(
    proximal_log_probs: torch.Tensor,
    behaviour_log_probs: torch.Tensor,
    cap: float | None = DEFAULT_WEIGHT_CAP,
    mode: str = "drop",
) -> torch.Tensor:
    """The decoupled loss's behaviour weight ``w = pi_prox / mu``, capped (no gradient).

    Args:
        proximal_log_probs: ``log pi_prox`` of each sample under the proximal policy.
        behaviour_log_probs: ``log mu`` of the same samples under the behaviour policy,
            same shape.
        cap: The largest weight kept (> 1, as in AReaL, whose cap must exceed 1; ``None``:
            no cap).
        mode: What happens above the cap (:data:`CAP_MODES`): ``"drop"`` sets the
            weight to 0, so the sample leaves the loss (AReaL's choice: it filters those
            samples out), ``"truncate"`` sets it to ``cap`` (as V-trace truncates
            ``rho``).

    Example:
        >>> prox = torch.log(torch.tensor([1.0, 2.0, 8.0]))
        >>> behaviour_weight(prox, torch.zeros(3), cap=4.0).tolist()
        [1.0, 2.0, 0.0]
        >>> behaviour_weight(prox, torch.zeros(3), cap=4.0, mode="truncate").tolist()
        [1.0, 2.0, 4.0]

    Raises:
        ValueError: If the shapes differ, ``cap`` is not a finite number > 1 or ``mode``
            is not one of :data:`CAP_MODES`.
    """
    if proximal_log_probs.shape != behaviour_log_probs.shape:
        raise ValueError(
            "proximal_log_probs, behaviour_log_probs: expected one shape, actual "
            f"{tuple(proximal_log_probs.shape)} and {tuple(behaviour_log_probs.shape)}"
        )
    mode = check_choice("mode", mode, CAP_MODES)
    weight = torch.exp((proximal_log_probs - behaviour_log_probs).detach())
    if cap is None:
        return weight
    cap = check_float("cap", cap, low=1.0, strict=True)
    if mode == "truncate":
        return torch.clamp(weight, max=cap)
    return torch.where(weight > cap, torch.zeros_like(weight), weight)


def decoupled_ppo_loss(
    new_log_probs: torch.Tensor,
    proximal_log_probs: torch.Tensor,
    behaviour_log_probs: torch.Tensor,
    advantages: torch.Tensor,
    clip: float = 0.2,
    weight_cap: float | None = DEFAULT_WEIGHT_CAP,
    cap_mode: str = "drop",
) -> tuple[torch.Tensor, torch.Tensor]:
    """AReaL's decoupled PPO objective (to minimise) and the fraction of clipped ratios.

    From the paper "AReaL: a large-scale asynchronous reinforcement learning system"
    (NeurIPS 2025): the trust region is taken around a *proximal* policy ``pi_prox``
    instead of the behaviour policy ``mu`` that drew the sample, and ``mu`` enters only
    through the importance weight ``pi_prox / mu`` that multiplies the clipped surrogate:

    ``L = -mean(sg(w) * min(u * A, clip(u, 1 - clip, 1 + clip) * A))``,
    ``u = pi_theta / pi_prox``, ``w = pi_prox / mu`` capped by :func:`behaviour_weight`
    (``sg``: no gradient flows through ``w``). The mean runs over every sample, dropped
    ones included (they count as 0), as AReaL averages over all samples of the batch.
    With ``pi_prox = mu`` (``w = 1``) it is :func:`ppo_clip_loss` exactly.

    Args:
        new_log_probs: ``log pi_theta`` of each sample (differentiable).
        proximal_log_probs: ``log pi_prox``, the proximal policy's, same shape.
        behaviour_log_probs: ``log mu``, the behaviour policy's, same shape.
        advantages: One advantage per sample, same shape.
        clip: PPO's ``eps`` (>= 0): ``u`` is clipped to ``[1 - clip, 1 + clip]``.
        weight_cap: The cap of ``w`` (> 1; ``None``: no cap), see :func:`behaviour_weight`.
        cap_mode: ``"drop"`` (AReaL's: a sample whose ``w`` exceeds the cap leaves the
            loss) or ``"truncate"`` (``w`` is cut to the cap).

    Example:
        >>> new = torch.log(torch.tensor([1.0, 1.5]))
        >>> prox, behav = torch.zeros(2), torch.log(torch.tensor([0.5, 1.0]))
        >>> loss, frac = decoupled_ppo_loss(new, prox, behav, torch.tensor([1.0, 1.0]))
        >>> round(float(loss), 4), float(frac)  # -(2 * 1 + 1 * 1.2) / 2
        (-1.6, 0.5)

    Raises:
        ValueError: If the tensors differ in shape, ``clip`` is negative or not finite,
            ``weight_cap`` is not a finite number > 1 or ``cap_mode`` is unknown.
    """
    _same_shape(new_log_probs, proximal_log_probs, advantages)
    clip = check_float("clip", clip, low=0.0)
    weight = behaviour_weight(proximal_log_probs, behaviour_log_probs, weight_cap, cap_mode)
    ratio = torch.exp(new_log_probs - proximal_log_probs)
    surrogate = torch.min(ratio * advantages, torch.clamp(ratio, 1 - clip, 1 + clip) * advantages)
    clip_fraction = ((ratio - 1.0).abs() > clip).float().mean()
    return -(weight * surrogate).mean(), clip_fraction


def effective_sample_size(log_weights: torch.Tensor | np.ndarray) -> float:
    """Kish's effective sample size of importance weights, as a share: ``(sum w)^2 / (n sum w^2)``.

    ``w = exp(log_weights)``, e.g. ``pi_theta / mu`` of an update's samples. The value
    lies in ``(0, 1]``: 1 means every weight is equal (on-policy samples: ``w = 1``), and
    a value near ``1 / n`` means a few samples carry the whole importance-weighted
    estimate. Computed from the log-weights shifted by their maximum, so a huge ratio
    does not overflow.

    Args:
        log_weights: ``log w`` per sample, any shape (flattened); ``-inf`` is a weight of 0.

    Returns:
        The share as a float, NaN without samples (or if every weight is 0).

    Example:
        >>> effective_sample_size(torch.zeros(4))
        1.0
        >>> round(effective_sample_size(np.log([1.0, 3.0])), 4)  # 16 / (2 * 10)
        0.8

    Raises:
        ValueError: If a log-weight is NaN or ``+inf``.
    """
    logs = np.asarray(
        log_weights.detach().cpu().numpy()
        if isinstance(log_weights, torch.Tensor)
        else log_weights,
        np.float64,
    ).reshape(-1)
    if np.isnan(logs).any() or np.isposinf(logs).any():
        raise ValueError("log_weights: expected numbers < +inf, actual NaN or +inf")
    if not len(logs) or np.isneginf(logs).all():
        return float("nan")
    w = np.exp(logs - logs.max())
    return float(w.sum() ** 2 / (len(w) * np.square(w).sum()))
