"""The ``"step"`` scheduler's policy: a fixed prior on its first move, learned residuals.

With the keep prior (:func:`set_keep_prior`) the
initial policy keeps the fleet size with probability 0.9 in every round, so that
exploration does not walk the fleet at random and pay a cold start on every step up. The
same prior also holds the *first* decision, which picks the size of round 1 (half, the
same or double the start size). That decision is special: it is the only move up that
pays no extra cold start (every fleet starts cold), so it is where a better constant size
is found, and at P(up) = 0.05 a 100-episode run tries it about five times, too few to
learn from: trained on paired seeds, 4 of 5 CartPole seeds kept their start size.

:class:`FirstMovePolicy` is SB3's ``ActorCriticPolicy`` with a fixed offset added to the
"keep" logit before the first round (observation entry ``OBS_ROUND`` is 0 only then), so
the initial policy keeps with ``first_keep`` there and with the keep prior in later
rounds. The offset is a constant, not a parameter: the network learns the rest on top of
it, and can still learn to keep at the first decision. Evaluated deterministically, the
policy takes the argmax of the same logits (offset included).

Example:
    >>> import math
    >>> round(first_move_offset(keep=0.9, first_keep=1 / 3), 3)  # log(1) - log(18)
    -2.89
"""

from __future__ import annotations

import math
from typing import Any

import torch
from stable_baselines3.common.policies import ActorCriticPolicy

from fleetgym.agents.schedulers.actions import STEP_KEEP
from fleetgym.agents.schedulers.observation import OBS_ROUND

__all__ = ["FirstMovePolicy", "first_move_offset", "keep_logit", "set_keep_prior"]


def keep_logit(keep: float) -> float:
    """The keep logit that gives P(keep) = ``keep`` with both moves at logit 0:
    ``log(2 keep / (1 - keep))``."""
    return math.log(2.0 * keep / (1.0 - keep))


def set_keep_prior(model: Any, keep: float, *, shift: float = 0.0) -> None:
    """Start a ``"step"`` scheduler's policy at P(keep) = ``keep``, the moves at half the rest.

    SB3 initialises the action head with a small gain, so its logits start near zero; the
    bias of the "keep" logit is set to ``log(2 keep / (1 - keep)) + shift``, the other two
    to 0 (the weights are left as they are).
    """
    head = model.policy.action_net
    with torch.no_grad():
        head.bias.zero_()
        head.bias[STEP_KEEP] = keep_logit(keep) + shift


def first_move_offset(keep: float, first_keep: float) -> float:
    """What to add to the keep logit at the first decision so that P(keep) = ``first_keep``
    there while the keep prior elsewhere is ``keep`` (both in (0, 1))."""
    for name, value in (("keep", keep), ("first_keep", first_keep)):
        if not 0.0 < value < 1.0:
            raise ValueError(f"{name}: expected a number in (0, 1), actual {value!r}")
    return keep_logit(first_keep) - keep_logit(keep)


class FirstMovePolicy(ActorCriticPolicy):
    """An ``ActorCriticPolicy`` over ``Discrete(3)`` step actions with a fixed offset
    ``first_offset`` on the keep logit before the first round (see the module docstring).

    Args:
        first_offset: added to the keep logit where ``obs[OBS_ROUND] == 0``.
        *args, **kwargs: those of SB3's ``ActorCriticPolicy``.
    """

    def __init__(self, *args: Any, first_offset: float = 0.0, **kwargs: Any) -> None:
        self.first_offset = float(first_offset)
        self._offset: torch.Tensor | None = None
        super().__init__(*args, **kwargs)

    def _get_constructor_parameters(self) -> dict[str, Any]:
        data = super()._get_constructor_parameters()
        data["first_offset"] = self.first_offset
        return data

    def _set_offset(self, obs: Any) -> None:
        if not isinstance(obs, torch.Tensor):
            raise TypeError(f"obs: expected a Box observation tensor, actual {type(obs).__name__}")
        first = (obs[:, OBS_ROUND] == 0).to(torch.float32)
        offset = torch.zeros((obs.shape[0], 3), dtype=torch.float32, device=obs.device)
        offset[:, STEP_KEEP] = first * self.first_offset
        self._offset = offset

    def _get_action_dist_from_latent(self, latent_pi: torch.Tensor) -> Any:
        logits = self.action_net(latent_pi)
        if self._offset is not None:
            logits = logits + self._offset
        return self.action_dist.proba_distribution(action_logits=logits)

    def forward(self, obs: Any, deterministic: bool = False) -> Any:
        self._set_offset(obs)
        return super().forward(obs, deterministic)

    def evaluate_actions(self, obs: Any, actions: torch.Tensor) -> Any:
        self._set_offset(obs)
        return super().evaluate_actions(obs, actions)

    def get_distribution(self, obs: Any) -> Any:
        self._set_offset(obs)
        return super().get_distribution(obs)
