"""Which policy loss and which lag compensations a learner uses: :class:`LossConfig`."""

from __future__ import annotations

from dataclasses import dataclass

from fleetgym.agents.learners.losses.functions import DEFAULT_SIGMA
from fleetgym.agents.learners.losses.registry import (
    LOSS_REGISTRY,
    LossSettings,
    PolicyLoss,
    get_loss,
)
from fleetgym.validation import check_bool, check_float


@dataclass(frozen=True)
class LossConfig:
    """Which policy loss and which lag compensations a learner uses.

    Models the switches of a lag-tolerant PPO learner, so an experiment can turn each one
    on or off separately.

    Args:
        loss: A name in the loss registry
            (:data:`~fleetgym.agents.learners.losses.registry.LOSS_REGISTRY`): ``"ppo"``
            (clipped surrogate), ``"gipo"`` (Gaussian importance weight), ``"vtrace"``
            (IMPALA's off-policy correction) or one added with :func:`register_loss`.
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
        proximal_clip: PPO-clip only (a loss whose ``supports_proximal_clip`` is set): clip the ratio to the *proximal* policy, the
            learner's own at the start of the update, instead of the behaviour policy, and
            weight each sample's advantage by ``pi_prox / mu`` (not differentiated), as in
            decoupled PPO (Hilton et al., 2021, "Batch size-invariance for policy
            optimization"). With a lag of 0 it is plain PPO-clip; with a lag, the trust region
            no longer starts out partly used up by the updates the sample missed.

    Example:
        >>> LossConfig("gipo", sigma=0.5).label
        'gipo(sigma=0.5)'
        >>> LossConfig("ppo", recompute_values=True, global_advantage_norm=True).label
        'ppo+recompute+global-norm'
        >>> LossConfig("gipo", sigma=0.0)
        Traceback (most recent call last):
        ...
        ValueError: sigma: expected a finite number > 0, actual 0.0

    Raises:
        ValueError: For an unknown loss, ``sigma <= 0``, ``target_kl <= 0`` or
            ``proximal_clip`` with a loss that does not support it.
        TypeError: For a switch that is not a bool.
    """

    loss: str = "ppo"
    sigma: float = DEFAULT_SIGMA
    recompute_values: bool = False
    global_advantage_norm: bool = False
    target_kl: float | None = None
    proximal_clip: bool = False

    def __post_init__(self) -> None:
        policy_loss = get_loss(self.loss)
        object.__setattr__(self, "sigma", check_float("sigma", self.sigma, low=0.0, strict=True))
        check_bool("recompute_values", self.recompute_values)
        check_bool("global_advantage_norm", self.global_advantage_norm)
        check_bool("proximal_clip", self.proximal_clip)
        if self.proximal_clip and not policy_loss.supports_proximal_clip:
            able = " or ".join(
                repr(n) for n, x in LOSS_REGISTRY.items() if x.supports_proximal_clip
            )
            raise ValueError(f"proximal_clip: expected loss {able}, actual {self.loss!r}")
        if self.target_kl is not None:
            object.__setattr__(
                self, "target_kl", check_float("target_kl", self.target_kl, low=0.0, strict=True)
            )

    @property
    def policy_loss(self) -> PolicyLoss:
        """The registered :class:`PolicyLoss` of :attr:`loss`."""
        return get_loss(self.loss)

    def settings(self, clip: float = 0.2) -> LossSettings:
        """The :class:`LossSettings` of this config, with PPO's ``clip`` (the workload's).

        Args:
            clip: PPO-clip's range (>= 0); the lag learner passes its workload's
                ``clip_coef``. ``rho_bar`` keeps :class:`LossSettings`' default.
        """
        return LossSettings(clip=clip, sigma=self.sigma)

    @property
    def label(self) -> str:
        """A short name, e.g. ``'gipo(sigma=0.8)+recompute+global-norm'``."""
        name = self.policy_loss.label(self.settings(), self.loss)
        if self.proximal_clip:
            name += "-proximal"
        if self.recompute_values:
            name += "+recompute"
        if self.global_advantage_norm:
            name += "+global-norm"
        if self.target_kl is not None:
            name += f"+kl<={self.target_kl:g}"
        return name
