"""Which policy loss and which lag compensations a learner uses: :class:`LossConfig`."""

from __future__ import annotations

from dataclasses import dataclass

from fleetgym.agents.learners.losses.functions import CAP_MODES, DEFAULT_SIGMA, DEFAULT_WEIGHT_CAP
from fleetgym.agents.learners.losses.registry import (
    LOSS_REGISTRY,
    LossSettings,
    PolicyLoss,
    get_loss,
)
from fleetgym.validation import check_bool, check_choice, check_float, check_int

#: Largest proximal offset (the learner keeps that many of its own recent weights).
MAX_PROXIMAL_OFFSET = 10_000


@dataclass(frozen=True)
class LossConfig:
    """Which policy loss and which lag compensations a learner uses.

    Models the switches of a lag-tolerant PPO learner, so an experiment can turn each one
    on or off separately.

    Args:
        loss: A name in the loss registry
            (:data:`~fleetgym.agents.learners.losses.registry.LOSS_REGISTRY`): ``"ppo"``
            (clipped surrogate), ``"gipo"`` (Gaussian importance weight), ``"vtrace"``
            (IMPALA's off-policy correction), ``"decoupled"`` (AReaL's decoupled PPO
            objective) or one added with :func:`register_loss`.
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
        proximal_offset: A loss with a proximal policy only (``needs_proximal``, as
            ``"decoupled"``): the proximal policy is the learner's own parameters this
            many updates back from the version the update produces (an int in
            ``[1, 10000]``; 1: the parameters at the start of the update, AReaL's choice).
            The learner keeps them in a
            :class:`~fleetgym.agents.learners.lag.WeightRing`; early in a run, with fewer
            versions kept, the oldest kept. At most ``max_policy_lag + 1`` (checked by
            :class:`~fleetgym.agents.learners.lag.CompensatedPPOLearner`), so the
            proximal policy is never older than the oldest sample the lag bound admits.
            Ignored by the other losses.
        weight_cap: The decoupled loss's cap on the behaviour weight ``pi_prox / mu``
            (a number > 1, or ``None``: no cap; ignored by the other losses).
        cap_mode: Above the cap, ``"drop"`` the sample (AReaL's choice) or ``"truncate"``
            the weight to the cap.

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
        ValueError: For an unknown loss, ``sigma <= 0``, ``target_kl <= 0``,
            ``proximal_clip`` with a loss that does not support it, ``proximal_offset``
            outside ``[1, 10000]``, ``weight_cap <= 1`` or an unknown ``cap_mode``.
        TypeError: For a switch that is not a bool, a ``proximal_offset`` that is not an
            int or a ``weight_cap`` that is not a number.
    """

    loss: str = "ppo"
    sigma: float = DEFAULT_SIGMA
    recompute_values: bool = False
    global_advantage_norm: bool = False
    target_kl: float | None = None
    proximal_clip: bool = False
    proximal_offset: int = 1
    weight_cap: float | None = DEFAULT_WEIGHT_CAP
    cap_mode: str = "drop"

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
        object.__setattr__(
            self,
            "proximal_offset",
            check_int("proximal_offset", self.proximal_offset, 1, MAX_PROXIMAL_OFFSET),
        )
        if self.weight_cap is not None:
            object.__setattr__(
                self,
                "weight_cap",
                check_float("weight_cap", self.weight_cap, low=1.0, strict=True),
            )
        check_choice("cap_mode", self.cap_mode, CAP_MODES)

    @property
    def policy_loss(self) -> PolicyLoss:
        """The registered :class:`PolicyLoss` of :attr:`loss`."""
        return get_loss(self.loss)

    def settings(self, clip: float = 0.2) -> LossSettings:
        """The :class:`LossSettings` of this config, with PPO's ``clip`` (the workload's).

        Args:
            clip: PPO-clip's range (>= 0); the lag learner passes its workload's
                ``clip_coef``. ``rho_bar`` keeps :class:`LossSettings`' default; ``sigma``,
                ``weight_cap`` and ``cap_mode`` are this config's.
        """
        return LossSettings(
            clip=clip, sigma=self.sigma, weight_cap=self.weight_cap, cap_mode=self.cap_mode
        )

    @property
    def label(self) -> str:
        """A short name, e.g. ``'gipo(sigma=0.8)+recompute+global-norm'``."""
        name = self.policy_loss.label(self.settings(), self.loss)
        if self.policy_loss.needs_proximal and self.proximal_offset != 1:
            name += f"-prox{self.proximal_offset}"
        if self.proximal_clip:
            name += "-proximal"
        if self.recompute_values:
            name += "+recompute"
        if self.global_advantage_norm:
            name += "+global-norm"
        if self.target_kl is not None:
            name += f"+kl<={self.target_kl:g}"
        return name
