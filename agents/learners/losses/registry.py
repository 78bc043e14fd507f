"""The loss registry: each policy loss one :class:`PolicyLoss` object, looked up by name.

A learner never branches on a loss name. It asks :func:`get_loss` for the object and uses
what the object says: its policy term (:meth:`PolicyLoss.policy_term`), its advantage
estimator (:meth:`PolicyLoss.targets`, GAE unless the loss brings its own, and
:attr:`PolicyLoss.needs_log_rhos`, whether that estimator needs the learner's current
log-probabilities), its default KL budget, whether PPO's proximal clip applies to it, and
the name of the fraction statistic it reports (:attr:`PolicyLoss.fraction_name`).

Example:
    >>> sorted(LOSS_REGISTRY)
    ['decoupled', 'gipo', 'ppo', 'vtrace']
    >>> get_loss("gipo").default_target_kl, get_loss("gipo").label(LossSettings(sigma=0.5))
    (0.02, 'gipo(sigma=0.5)')
    >>> get_loss("a2c")
    Traceback (most recent call last):
    ...
    ValueError: loss: expected one of ('ppo', 'gipo', 'vtrace', 'decoupled'), actual 'a2c'
"""

from __future__ import annotations

import abc
import re
from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import ClassVar

import numpy as np
import torch

from fleetgym.agents.learners.gae import compute_gae
from fleetgym.agents.learners.losses.functions import (
    CAP_MODES,
    DEFAULT_SIGMA,
    DEFAULT_WEIGHT_CAP,
    decoupled_ppo_loss,
    gipo_loss,
    ppo_clip_loss,
    vtrace,
    vtrace_policy_loss,
)
from fleetgym.validation import check_choice, check_float, quote

#: The losses that ship with fleetgym (:data:`LOSS_REGISTRY` may hold more).
LOSSES = ("ppo", "gipo", "vtrace", "decoupled")
_NAME = re.compile(r"[a-z][a-z0-9_\-]*")


@dataclass(frozen=True)
class LossSettings:
    """The hyperparameters a policy term may read; each loss reads the ones it needs.

    Args:
        clip: PPO-clip's range (>= 0).
        sigma: GIPO's weight width in log-ratio space (> 0).
        rho_bar: V-trace's truncation of the importance weight (> 0).
        weight_cap: The decoupled loss's cap on the behaviour weight ``pi_prox / mu``
            (> 1; ``None``: no cap).
        cap_mode: What the decoupled loss does with a weight above the cap:
            ``"drop"`` the sample (AReaL's choice) or ``"truncate"`` the weight.

    Example:
        >>> LossSettings(clip=0.1).sigma
        0.8
        >>> LossSettings(rho_bar=0.0)
        Traceback (most recent call last):
        ...
        ValueError: rho_bar: expected a finite number > 0, actual 0.0

    Raises:
        TypeError / ValueError: For a value that is not a finite number in its range.
    """

    clip: float = 0.2
    sigma: float = DEFAULT_SIGMA
    rho_bar: float = 1.0
    weight_cap: float | None = DEFAULT_WEIGHT_CAP
    cap_mode: str = "drop"

    def __post_init__(self) -> None:
        object.__setattr__(self, "clip", check_float("clip", self.clip, low=0.0))
        object.__setattr__(self, "sigma", check_float("sigma", self.sigma, low=0.0, strict=True))
        object.__setattr__(
            self, "rho_bar", check_float("rho_bar", self.rho_bar, low=0.0, strict=True)
        )
        if self.weight_cap is not None:
            object.__setattr__(
                self,
                "weight_cap",
                check_float("weight_cap", self.weight_cap, low=1.0, strict=True),
            )
        check_choice("cap_mode", self.cap_mode, CAP_MODES)


class PolicyLoss(abc.ABC):
    """What a learner needs from a policy loss. Subclass it and :func:`register_loss` it.

    Only :meth:`policy_term` must be written; the rest has defaults (GAE advantages, no
    KL budget, no proximal clip).

    Attributes:
        default_target_kl: The KL budget per update when the user sets none (``None``: no
            budget; a loss without a trust region of its own should set one).
        supports_proximal_clip: Whether decoupled PPO's proximal clip
            (:class:`~fleetgym.agents.learners.losses.config.LossConfig`'s
            ``proximal_clip``) applies.
        needs_log_rhos: Whether :meth:`targets` reads ``log_rhos`` (then the learner
            computes its current log-probabilities of the samples first).
        fraction_name: What the second value of :meth:`policy_term` counts; learners
            report it as ``clip_fraction``.
        needs_proximal: Whether :meth:`policy_term` takes the ratio to a proximal policy
            and reads the behaviour's log-probabilities separately (``behaviour_log_probs=``),
            as the decoupled loss does; then
            :class:`~fleetgym.agents.learners.lag.CompensatedPPOLearner` passes the
            proximal policy's log-probabilities as ``old_log_probs``.
    """

    default_target_kl: ClassVar[float | None] = None
    supports_proximal_clip: ClassVar[bool] = False
    needs_log_rhos: ClassVar[bool] = False
    fraction_name: ClassVar[str] = "clip_fraction"
    needs_proximal: ClassVar[bool] = False

    @abc.abstractmethod
    def policy_term(
        self,
        new_log_probs: torch.Tensor,
        old_log_probs: torch.Tensor,
        advantages: torch.Tensor,
        settings: LossSettings,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """The policy loss to minimise (a scalar, the mean over samples) and the fraction.

        Args:
            new_log_probs: ``log pi_theta`` of the samples (differentiable), shape ``(n,)``.
            old_log_probs: ``log mu``, the behaviour's (or proximal policy's), shape ``(n,)``.
            advantages: One advantage per sample, shape ``(n,)``.
            settings: The hyperparameters.
        """

    def targets(
        self,
        rewards: np.ndarray,
        values: np.ndarray,
        terminated: np.ndarray,
        truncated: np.ndarray,
        truncation_values: np.ndarray,
        last_value: float,
        log_rhos: np.ndarray | None,
        gamma: float,
        gae_lambda: float,
    ) -> tuple[np.ndarray, np.ndarray]:
        """``(advantages, value_targets)`` of one time-major trajectory; GAE by default.

        Args:
            rewards: The reward of each step, shape ``(n,)`` (after the learner's reward
                transform).
            values: ``V(s_t)`` of each step's observation, shape ``(n,)``.
            terminated, truncated: Bool per step, shape ``(n,)``: the episode ended after
                step ``t`` by termination (no bootstrap) or by a time limit (bootstrap
                from ``truncation_values[t]``).
            truncation_values: ``V`` of the final observation on truncated steps, shape
                ``(n,)``.
            last_value: ``V(s_n)``, the value of the observation after the last step.
            log_rhos: ``log pi_theta - log mu`` per step, shape ``(n,)``, given when
                :attr:`needs_log_rhos` is set; else ``None``.
            gamma: Discount factor between steps, in ``[0, 1]`` (a token learner passes
                ``gamma^K`` between decisions of ``K`` actions).
            gae_lambda: GAE's ``lambda`` in ``[0, 1]`` (an estimator may ignore it, as
                V-trace does).
        """
        return compute_gae(
            rewards, values, terminated, truncated, truncation_values, last_value, gamma,
            gae_lambda,
        )  # fmt: skip

    def label(self, settings: LossSettings, name: str = "") -> str:
        """A short name for tables (the registered name by default).

        Args:
            settings: The hyperparameters a label may show (GIPO's shows ``sigma``).
            name: The name the loss is registered under.
        """
        return name


class PPOClip(PolicyLoss):
    """PPO's clipped surrogate (:func:`~fleetgym.agents.learners.losses.functions.ppo_clip_loss`)."""

    supports_proximal_clip = True

    def policy_term(
        self,
        new_log_probs: torch.Tensor,
        old_log_probs: torch.Tensor,
        advantages: torch.Tensor,
        settings: LossSettings,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """See :meth:`PolicyLoss.policy_term`; reads ``settings.clip``."""
        return ppo_clip_loss(new_log_probs, old_log_probs, advantages, settings.clip)


class GIPO(PolicyLoss):
    """Gaussian importance weighting (:func:`~fleetgym.agents.learners.losses.functions.gipo_loss`)."""

    default_target_kl = 0.02
    fraction_name = "outside_sigma"

    def policy_term(
        self,
        new_log_probs: torch.Tensor,
        old_log_probs: torch.Tensor,
        advantages: torch.Tensor,
        settings: LossSettings,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """See :meth:`PolicyLoss.policy_term`; reads ``settings.sigma``."""
        return gipo_loss(new_log_probs, old_log_probs, advantages, settings.sigma)

    def label(self, settings: LossSettings, name: str = "gipo") -> str:
        """``'gipo(sigma=...)'``."""
        return f"{name}(sigma={settings.sigma:g})"


class VTrace(PolicyLoss):
    """IMPALA's V-trace: its targets and its truncated policy gradient."""

    default_target_kl = 0.02
    needs_log_rhos = True
    fraction_name = "truncated"

    def policy_term(
        self,
        new_log_probs: torch.Tensor,
        old_log_probs: torch.Tensor,
        advantages: torch.Tensor,
        settings: LossSettings,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """See :meth:`PolicyLoss.policy_term`; reads ``settings.rho_bar``."""
        return vtrace_policy_loss(new_log_probs, old_log_probs, advantages, settings.rho_bar)

    def targets(
        self,
        rewards: np.ndarray,
        values: np.ndarray,
        terminated: np.ndarray,
        truncated: np.ndarray,
        truncation_values: np.ndarray,
        last_value: float,
        log_rhos: np.ndarray | None,
        gamma: float,
        gae_lambda: float,
    ) -> tuple[np.ndarray, np.ndarray]:
        """V-trace (:func:`~fleetgym.agents.learners.losses.functions.vtrace`); ``gae_lambda`` unused.

        Raises:
            ValueError: If ``log_rhos`` is ``None``.
        """
        if log_rhos is None:
            raise ValueError("log_rhos: expected an array (V-trace needs the ratios), actual None")
        value_targets, advantages = vtrace(
            rewards, values, terminated, truncated, truncation_values, last_value, log_rhos,
            gamma,
        )  # fmt: skip
        return advantages, value_targets


class Decoupled(PolicyLoss):
    """AReaL's decoupled PPO objective (:func:`~fleetgym.agents.learners.losses.functions.decoupled_ppo_loss`).

    The clipped ratio is taken to a proximal policy ``pi_prox`` and each sample's clipped
    surrogate is weighted by ``pi_prox / mu``, capped (``settings.weight_cap``,
    ``settings.cap_mode``). Which policy is proximal is the learner's choice:
    :class:`~fleetgym.agents.learners.lag.CompensatedPPOLearner` takes its own parameters
    ``proximal_offset`` updates back (:class:`~fleetgym.agents.learners.losses.LossConfig`;
    1, the parameters at the start of the update, as in AReaL). Without
    ``behaviour_log_probs`` (a learner without a proximal policy, such as the token
    learner) the proximal policy is the behaviour policy and the loss is PPO-clip.
    The clip is its trust region: no default KL budget.
    """

    needs_proximal = True

    def policy_term(
        self,
        new_log_probs: torch.Tensor,
        old_log_probs: torch.Tensor,
        advantages: torch.Tensor,
        settings: LossSettings,
        behaviour_log_probs: torch.Tensor | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """See :meth:`PolicyLoss.policy_term`; ``old_log_probs`` are the proximal policy's.

        Args:
            new_log_probs: ``log pi_theta`` of the samples (differentiable), shape ``(n,)``.
            old_log_probs: ``log pi_prox``, the proximal policy's, shape ``(n,)``.
            advantages: One advantage per sample, shape ``(n,)``.
            settings: Reads ``clip``, ``weight_cap`` and ``cap_mode``.
            behaviour_log_probs: ``log mu``, the behaviour's, shape ``(n,)`` (``None``:
                ``old_log_probs``, a weight of 1).
        """
        behaviour = old_log_probs if behaviour_log_probs is None else behaviour_log_probs
        return decoupled_ppo_loss(
            new_log_probs, old_log_probs, behaviour, advantages, settings.clip,
            settings.weight_cap, settings.cap_mode,
        )  # fmt: skip

    def label(self, settings: LossSettings, name: str = "decoupled") -> str:
        """``'decoupled(cap=...)'`` (``'truncate'`` added when the weight is truncated)."""
        cap = "none" if settings.weight_cap is None else f"{settings.weight_cap:g}"
        mode = ",truncate" if settings.cap_mode == "truncate" else ""
        return f"{name}(cap={cap}{mode})"


_REGISTRY: dict[str, PolicyLoss] = {
    "ppo": PPOClip(),
    "gipo": GIPO(),
    "vtrace": VTrace(),
    "decoupled": Decoupled(),
}
#: Every registered loss by name (a read-only view; :func:`register_loss` adds to it).
LOSS_REGISTRY: Mapping[str, PolicyLoss] = MappingProxyType(_REGISTRY)
#: Default KL budget per update of the built-in losses (:attr:`PolicyLoss.default_target_kl`):
#: none for PPO-clip, whose clip is its trust region; one for the losses without one.
DEFAULT_TARGET_KL: Mapping[str, float | None] = MappingProxyType(
    {name: _REGISTRY[name].default_target_kl for name in LOSSES}
)


def register_loss(name: str, loss: PolicyLoss) -> PolicyLoss:
    """Make ``loss`` available by ``name`` to every learner and config; returns ``loss``.

    Args:
        name: Lower-case letters, digits, ``_`` and ``-``, starting with a letter; not
            registered yet.
        loss: A :class:`PolicyLoss` instance.

    Example:
        >>> class Plain(PolicyLoss):
        ...     def policy_term(self, new, old, adv, settings):
        ...         return -(torch.exp(new - old) * adv).mean(), torch.zeros(())
        >>> _ = register_loss("plain-is", Plain())
        >>> "plain-is" in LOSS_REGISTRY
        True
        >>> unregister_loss("plain-is")

    Raises:
        TypeError: If ``name`` is not a str or ``loss`` not a :class:`PolicyLoss`.
        ValueError: If ``name`` is malformed or already registered.
    """
    if not isinstance(name, str):
        raise TypeError(f"name: expected a str, actual {quote(name)}")
    if not _NAME.fullmatch(name):
        raise ValueError(
            f"name: expected lower-case letters, digits, '_' or '-' after a letter, actual "
            f"{quote(name)}"
        )
    if name in _REGISTRY:
        raise ValueError(f"name: expected a name not registered yet, actual {name!r}")
    if not isinstance(loss, PolicyLoss):
        raise TypeError(f"loss: expected a PolicyLoss instance, actual {quote(loss)}")
    _REGISTRY[name] = loss
    return loss


def unregister_loss(name: str) -> None:
    """Remove a loss :func:`register_loss` added (the built-in ones stay).

    Args:
        name: The name :func:`register_loss` added it under.

    Raises:
        ValueError: If ``name`` is a built-in loss or not registered.
    """
    if name in LOSSES:
        raise ValueError(f"name: expected a loss added by register_loss, actual built-in {name!r}")
    get_loss(name)
    del _REGISTRY[name]


def get_loss(name: str) -> PolicyLoss:
    """The registered loss of that name.

    Args:
        name: A key of :data:`LOSS_REGISTRY`: ``"ppo"``, ``"gipo"``, ``"vtrace"``,
            ``"decoupled"`` or a name added with :func:`register_loss`.

    Raises:
        TypeError: If ``name`` is not a str.
        ValueError: If no loss of that name is registered.
    """
    return _REGISTRY[check_choice("loss", name, tuple(_REGISTRY))]
