"""Value heads on the hidden states of a token policy's action positions.

Each head reads ``H`` of shape ``(B, N, d)``: the last layer's hidden states at ``N``
positions, an optional mask ``(B, N)`` of valid positions, and the env step ``t`` ``(B,)``.
A :class:`~fleetgym.agents.tokens.policy.TokenPolicy` passes its ``P`` prefix positions,
the one that emits the first action token (RL4VLA's ``a0``) first, so the value is the
state's (``value_input="prefix"``); or, action-aware (``value_input="actions"``), the ``n``
positions that emit the action tokens, which see the sampled ``a_1 .. a_{n-1}``.

* :class:`AttentionPoolValue` (AcceRL): ``e_i = w^T h_i + b``, ``alpha = softmax(e)``,
  ``z = sum_i alpha_i h_i + MLP(t / t_max)``, ``V = MLP(z)``. Without positional input of
  its own it is invariant to permutations of the positions.
* :class:`MeanPoolValue`: ``V = MLP(mean_i h_i)``, also permutation-invariant.
* :class:`FirstTokenValue` (RL4VLA): ``V = MLP(h_0)``, the state before any action token.
"""

from __future__ import annotations

import torch
from torch import nn

from fleetgym.validation import check_choice, check_int, quote

#: Value heads by name.
VALUE_HEADS = ("attention", "mean", "first")
#: What a token policy's value head reads: the prefix (a state value) or the sampled tokens'
#: positions (:class:`~fleetgym.agents.tokens.TokenPolicy`'s ``value_input``).
VALUE_INPUTS = ("prefix", "actions")


def _mlp(width: int, hidden: int, out: int) -> nn.Sequential:
    return nn.Sequential(nn.Linear(width, hidden), nn.Tanh(), nn.Linear(hidden, out))


def _check(hidden: torch.Tensor, mask: torch.Tensor | None, width: int) -> torch.Tensor:
    if hidden.ndim != 3 or hidden.shape[-1] != width:
        raise ValueError(f"hidden: expected shape (B, N, {width}), actual {tuple(hidden.shape)}")
    if mask is None:
        return torch.ones(hidden.shape[:2], dtype=torch.bool, device=hidden.device)
    if tuple(mask.shape) != tuple(hidden.shape[:2]) or mask.dtype != torch.bool:
        raise ValueError(
            f"mask: expected a bool tensor of shape {tuple(hidden.shape[:2])}, actual "
            f"{mask.dtype} {tuple(mask.shape)}"
        )
    if not bool(mask.any(-1).all()):
        raise ValueError("mask: expected at least one valid position per row")
    return mask


class _ValueHead(nn.Module):
    def __init__(self, hidden_size: int, mlp_size: int = 64) -> None:
        super().__init__()
        self.hidden_size = check_int("hidden_size", hidden_size, low=1)
        self.mlp_size = check_int("mlp_size", mlp_size, low=1)
        self.value = _mlp(self.hidden_size, self.mlp_size, 1)

    def pool(
        self, hidden: torch.Tensor, mask: torch.Tensor, step: torch.Tensor | None
    ) -> torch.Tensor:
        raise NotImplementedError

    def forward(
        self,
        hidden: torch.Tensor,
        mask: torch.Tensor | None = None,
        step: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """Values ``(B,)`` of hidden states ``(B, N, d)`` (see the module docstring)."""
        valid = _check(hidden, mask, self.hidden_size)
        return self.value(self.pool(hidden, valid, step)).squeeze(-1)


class AttentionPoolValue(_ValueHead):
    """AcceRL's action-aware attention pooling with a step embedding.

    Models a critic that learns which action positions carry the value: one score per
    position, a softmax over the valid ones, the weighted sum of hidden states plus an MLP
    embedding of the normalised env step ``t / max_steps``, then an MLP to the value.

    Args:
        hidden_size: Width ``d`` of the hidden states.
        max_steps: The step that normalises ``t`` (an episode's limit).
        mlp_size: Width of the step and value MLPs.

    Example:
        >>> head = AttentionPoolValue(16, max_steps=1000)
        >>> head(torch.randn(4, 3, 16), step=torch.arange(4)).shape
        torch.Size([4])

    Raises:
        TypeError / ValueError: For sizes that are not positive ints; at call time for
            hidden states, mask or step of the wrong shape.
    """

    def __init__(self, hidden_size: int, max_steps: int = 1000, mlp_size: int = 64) -> None:
        super().__init__(hidden_size, mlp_size)
        self.max_steps = check_int("max_steps", max_steps, low=1)
        self.score = nn.Linear(self.hidden_size, 1)
        self.step_embedding = _mlp(1, self.mlp_size, self.hidden_size)

    def weights(self, hidden: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
        """The attention weights ``alpha`` ``(B, N)`` (0 at masked positions).

        Args:
            hidden: Hidden states ``(B, N, hidden_size)``.
            mask: Bool ``(B, N)``, ``True`` at valid positions, at least one per row;
                ``None``: every position is valid.
        """
        valid = _check(hidden, mask, self.hidden_size)
        scores = self.score(hidden).squeeze(-1).masked_fill(~valid, float("-inf"))
        return torch.softmax(scores, dim=-1)

    def pool(
        self, hidden: torch.Tensor, mask: torch.Tensor, step: torch.Tensor | None
    ) -> torch.Tensor:
        pooled = (self.weights(hidden, mask).unsqueeze(-1) * hidden).sum(1)
        if step is None:
            raise ValueError("step: expected a (B,) tensor of env steps, actual None")
        if tuple(step.shape) != (hidden.shape[0],):
            raise ValueError(
                f"step: expected shape ({hidden.shape[0]},), actual {quote(tuple(step.shape))}"
            )
        t = (step.to(hidden.dtype) / self.max_steps).unsqueeze(-1)
        return pooled + self.step_embedding(t)


class MeanPoolValue(_ValueHead):
    """The value of the mean of the valid hidden states (the usual VLA critic).

    It ignores the env step.

    Args:
        hidden_size: Width ``d`` of the hidden states.
        mlp_size: Width of the value MLP's hidden layer.

    Example:
        >>> MeanPoolValue(16)(torch.randn(4, 3, 16)).shape
        torch.Size([4])
    """

    def pool(
        self, hidden: torch.Tensor, mask: torch.Tensor, step: torch.Tensor | None
    ) -> torch.Tensor:
        weights = mask.to(hidden.dtype).unsqueeze(-1)
        return (weights * hidden).sum(1) / weights.sum(1)


class FirstTokenValue(_ValueHead):
    """The value of the hidden state that emits the first action token (RL4VLA's ``a0``).

    It reads position 0 of the hidden states given, whatever the mask, and ignores the env
    step.

    Args:
        hidden_size: Width ``d`` of the hidden states.
        mlp_size: Width of the value MLP's hidden layer.

    Example:
        >>> FirstTokenValue(16)(torch.randn(4, 3, 16)).shape
        torch.Size([4])
    """

    def pool(
        self, hidden: torch.Tensor, mask: torch.Tensor, step: torch.Tensor | None
    ) -> torch.Tensor:
        return hidden[:, 0]


def make_value_head(
    kind: str, hidden_size: int, max_steps: int = 1000, mlp_size: int = 64
) -> nn.Module:
    """A value head by name: ``"attention"``, ``"mean"`` or ``"first"``.

    Args:
        kind: ``"attention"`` (:class:`AttentionPoolValue`), ``"mean"``
            (:class:`MeanPoolValue`) or ``"first"`` (:class:`FirstTokenValue`).
        hidden_size: Width ``d`` of the hidden states it reads.
        max_steps: The env step that normalises ``t`` (``"attention"`` only; ignored by
            the others).
        mlp_size: Hidden width of the head's MLPs (the value MLP, and the step MLP of
            ``"attention"``).

    Raises:
        ValueError: For an unknown name.
    """
    check_choice("value_head", kind, VALUE_HEADS)
    if kind == "attention":
        return AttentionPoolValue(hidden_size, max_steps, mlp_size)
    if kind == "mean":
        return MeanPoolValue(hidden_size, mlp_size)
    return FirstTokenValue(hidden_size, mlp_size)
