"""An ensemble of probabilistic MLPs, trained as one batched network (torch).

Each of the ``E`` members is an MLP of its own weights; the ensemble runs them as one
batched matmul per layer (weights of shape ``(E, in, out)``). A member maps a normalised
(observation, action) input to a Gaussian over the normalised targets (the observation
change and the reward: a mean and a log-variance per target) and a Bernoulli logit of
termination. The log-variance is softly bounded between learned limits, so a member
cannot claim a certainty its data never showed (the PETS/MBPO recipe).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch
from torch import nn

__all__ = ["EnsembleMLP", "gaussian_nll"]


class _EnsembleLinear(nn.Module):
    def __init__(self, members: int, in_features: int, out_features: int) -> None:
        super().__init__()
        bound = 1.0 / math.sqrt(in_features)
        self.weight = nn.Parameter(torch.empty(members, in_features, out_features))
        self.bias = nn.Parameter(torch.zeros(members, 1, out_features))
        nn.init.trunc_normal_(self.weight, std=bound, a=-2 * bound, b=2 * bound)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # x: (E, B, in) -> (E, B, out)
        return torch.baddbmm(self.bias, x, self.weight)


class EnsembleMLP(nn.Module):
    """``members`` MLPs with SiLU activations, each a Gaussian + a termination logit.

    Example:
        >>> net = EnsembleMLP(members=3, in_features=6, targets=5, hidden_sizes=(8, 8))
        >>> mean, log_var, logit = net(torch.zeros(3, 2, 6))
        >>> tuple(mean.shape), tuple(log_var.shape), tuple(logit.shape)
        ((3, 2, 5), (3, 2, 5), (3, 2))
    """

    def __init__(
        self, members: int, in_features: int, targets: int, hidden_sizes: Sequence[int]
    ) -> None:
        super().__init__()
        self.members, self.targets = int(members), int(targets)
        layers: list[nn.Module] = []
        width = in_features
        for h in hidden_sizes:
            layers += [_EnsembleLinear(members, width, int(h)), nn.SiLU()]
            width = int(h)
        self.body = nn.Sequential(*layers)
        self.head = _EnsembleLinear(members, width, 2 * targets + 1)
        self.max_log_var = nn.Parameter(torch.full((1, 1, targets), 0.5))
        self.min_log_var = nn.Parameter(torch.full((1, 1, targets), -10.0))

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """``(mean, log_var, termination_logit)`` of shapes (E, B, T), (E, B, T), (E, B)."""
        out = self.head(self.body(x))
        t = self.targets
        mean, raw = out[..., :t], out[..., t : 2 * t]
        log_var = self.max_log_var - nn.functional.softplus(self.max_log_var - raw)
        log_var = self.min_log_var + nn.functional.softplus(log_var - self.min_log_var)
        return mean, log_var, out[..., 2 * t]

    def bound_penalty(self) -> torch.Tensor:
        """A small pull of the log-variance limits towards each other (keeps them honest)."""
        return 0.01 * (self.max_log_var.sum() - self.min_log_var.sum())


def gaussian_nll(
    mean: torch.Tensor, log_var: torch.Tensor, target: torch.Tensor, weight: torch.Tensor
) -> torch.Tensor:
    """Per-member Gaussian negative log-likelihood (without the constant), shape (E,).

    ``weight`` (E, B, T) masks the targets a row does not have (0) and is averaged over.
    """
    inv_var = torch.exp(-log_var)
    per = (((mean - target) ** 2) * inv_var + log_var) * weight
    return per.sum(dim=(1, 2)) / weight.sum(dim=(1, 2)).clamp_min(1.0)
