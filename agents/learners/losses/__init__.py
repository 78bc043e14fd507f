"""Policy losses for learning from lagged (off-policy) samples, and the registry that names them.

With ``rho = pi_theta(a|s) / mu(a|s)`` the ratio of the learner's policy to the behaviour
policy that produced the sample (``mu`` is the policy version the actor acted with) and
``A`` an advantage estimate, the built-in losses are:

* ``"ppo"`` -- :func:`ppo_clip_loss`, ``L = -mean(min(rho * A, clip(rho, 1 - eps, 1 + eps) * A))``.
  A sample whose ratio left the trust region gives no gradient.
* ``"gipo"`` -- :func:`gipo_loss`, Gaussian importance weighting:
  ``w = exp(-1/2 * (log rho / sigma)^2)``, ``L = -mean(sg(w) * rho * A)`` where ``sg`` stops
  the gradient. ``w`` is 1 at ``rho = 1`` and decays smoothly instead of cutting off, so
  stale samples are down-weighted rather than clipped to zero gradient, and extreme ratios
  cannot blow the gradient up (``w * rho`` is bounded by ``exp(sigma^2 / 2)``).
* ``"vtrace"`` -- :func:`vtrace`, IMPALA's V-trace targets ``v_s`` and policy-gradient
  advantages with truncated importance weights ``rho_bar`` and ``c_bar`` (1 and 1 by
  default), and :func:`vtrace_policy_loss`, the matching policy gradient
  ``L = -mean(sg(min(rho_bar, rho)) * A_vtrace * log pi_theta)``.
* ``"decoupled"`` -- :func:`decoupled_ppo_loss`, AReaL's decoupled PPO objective:
  ``L = -mean(sg(w) * min(u * A, clip(u, 1 - eps, 1 + eps) * A))`` with ``u = pi_theta /
  pi_prox`` the ratio to a *proximal* policy (the learner's own recent parameters) and
  ``w = pi_prox / mu`` the behaviour weight, capped (:func:`behaviour_weight`).

:func:`effective_sample_size` measures how far an update's samples are from on-policy.

The modules of this package:

* :mod:`~fleetgym.agents.learners.losses.functions` -- the formulas, pure functions on
  tensors and arrays, so each can be checked on a few numbers;
* :mod:`~fleetgym.agents.learners.losses.registry` -- :class:`PolicyLoss` (what a learner
  needs from a loss: its policy term, its advantage estimator, its default KL budget,
  whether the proximal clip applies, the statistic it reports), one subclass per built-in
  loss, and :data:`LOSS_REGISTRY` with :func:`register_loss` / :func:`get_loss`;
* :mod:`~fleetgym.agents.learners.losses.config` -- :class:`LossConfig`, a loss name plus
  the lag compensations (value recomputation, global advantage normalisation, a KL budget,
  the proximal clip), frozen and validated once; its learner is
  :class:`fleetgym.agents.learners.lag.CompensatedPPOLearner`;
* :mod:`~fleetgym.agents.learners.losses.levels` -- the ratio levels of multi-token actions
  (``token``, ``action``, ``chunk``; :func:`level_policy_loss`), used by
  :class:`~fleetgym.agents.learners.token_ppo.TokenPPO`.

Where a new loss goes:

1. its formula, as a pure function on tensors, in ``functions.py`` (or in your own code);
2. a :class:`PolicyLoss` subclass: ``policy_term(new_log_probs, old_log_probs, advantages,
   settings)`` returning ``(loss, fraction)``; override ``targets`` if it brings its own
   advantage estimator (set ``needs_log_rhos`` if that reads the ratios), and set
   ``default_target_kl``, ``supports_proximal_clip`` and ``fraction_name`` as they apply;
3. ``register_loss("name", MyLoss())`` -- in ``registry.py``'s ``_REGISTRY`` (and
   ``LOSSES``) for a built-in loss, or from user code at import time.

Nothing else changes: ``LossConfig("name")``, ``CompensatedPPOLearner`` and
``TokenPPO(loss="name")`` take every registered name; no learner branches on a loss name.
"""

from __future__ import annotations

from fleetgym.agents.learners.losses.config import LossConfig
from fleetgym.agents.learners.losses.functions import (
    CAP_MODES,
    DEFAULT_SIGMA,
    DEFAULT_WEIGHT_CAP,
    behaviour_weight,
    decoupled_ppo_loss,
    effective_sample_size,
    gaussian_weight,
    gipo_loss,
    kl_estimate,
    normalize,
    ppo_clip_loss,
    vtrace,
    vtrace_policy_loss,
)
from fleetgym.agents.learners.losses.levels import (
    LEVEL_SCALES,
    RATIO_LEVELS,
    level_log_probs,
    level_policy_loss,
)
from fleetgym.agents.learners.losses.registry import (
    DEFAULT_TARGET_KL,
    GIPO,
    LOSS_REGISTRY,
    LOSSES,
    Decoupled,
    LossSettings,
    PolicyLoss,
    PPOClip,
    VTrace,
    get_loss,
    register_loss,
    unregister_loss,
)

__all__ = [
    "CAP_MODES",
    "DEFAULT_SIGMA",
    "DEFAULT_TARGET_KL",
    "DEFAULT_WEIGHT_CAP",
    "Decoupled",
    "GIPO",
    "LEVEL_SCALES",
    "LOSSES",
    "LOSS_REGISTRY",
    "LossConfig",
    "LossSettings",
    "PPOClip",
    "PolicyLoss",
    "RATIO_LEVELS",
    "VTrace",
    "behaviour_weight",
    "decoupled_ppo_loss",
    "effective_sample_size",
    "gaussian_weight",
    "get_loss",
    "gipo_loss",
    "kl_estimate",
    "level_log_probs",
    "level_policy_loss",
    "normalize",
    "ppo_clip_loss",
    "register_loss",
    "unregister_loss",
    "vtrace",
    "vtrace_policy_loss",
]
