"""Head slimming: the language-model head cut to the action tokens' rows.

A VLA policy's head is ``logits = W h + b`` with ``W`` of shape ``(V, H)`` (V = 32,000 for
Llama), but an action token is one of ``N`` ids (256), so only ``N`` rows of ``W`` can
matter. :class:`SlimActionHead` keeps those rows (``N H`` parameters instead of ``V H``, and
as many optimiser-state entries) and computes logits only at the positions that emit
action tokens. Each logit is the same dot product ``w_i . h`` as in the full head, so the
window's logits equal the full head's up to the summation order of the matmul kernel.

The action distribution is the softmax over the window alone,
``log pi(a) = z_a - logsumexp_{j in window} z_j`` (:func:`action_log_softmax`). The
sampler (actor or inference server) and the learner must both use it: the full-vocabulary
softmax ``z_a - logsumexp_{j in V} z_j`` differs by
``logsumexp_V z - logsumexp_window z >= 0``, a state-dependent shift that biases every
importance ratio ``pi_learner / pi_behaviour`` built from one of each.
"""

from __future__ import annotations

import torch
from torch import nn

from fleetgym.validation import check_int, quote


def action_log_softmax(logits: torch.Tensor) -> torch.Tensor:
    """Log-probabilities over the action window: ``log_softmax`` on the last dimension.

    The single code path of the action distribution: :class:`SlimActionHead`'s
    :meth:`~SlimActionHead.log_probs`, and through it the policy's sampling and the
    learner's evaluation, all end here.

    Args:
        logits: Logits of the action window ``(..., num_bins)`` (any leading shape); the
            softmax runs over the last dimension only.

    Example:
        >>> action_log_softmax(torch.zeros(4)).exp().tolist()
        [0.25, 0.25, 0.25, 0.25]
    """
    return torch.log_softmax(logits, dim=-1)


class SlimActionHead(nn.Module):
    """The rows of an LM head for ``num_bins`` consecutive action ids, as a small linear layer.

    Models AcceRL's vocabulary slimming: the action rows are copied out of the full head
    (which can then be dropped), trained on their own, and evaluated at the action positions
    only.

    Args:
        weight: The rows ``(num_bins, hidden)``; copied into a new parameter.
        bias: Their biases ``(num_bins,)`` or ``None``.
        offset: The vocabulary id of row 0 (kept for the record and the checks).

    Example:
        >>> full = nn.Linear(16, 1000, bias=False)
        >>> slim = SlimActionHead.from_linear(full, offset=1000 - 8, num_bins=8)
        >>> h = torch.randn(2, 5, 16)
        >>> slim(h).shape, sum(p.numel() for p in slim.parameters())
        (torch.Size([2, 5, 8]), 128)
        >>> slim.at_positions(h, torch.tensor([[4], [2]])).shape
        torch.Size([2, 1, 8])

    Raises:
        TypeError: For a weight that is not a 2-d tensor.
        ValueError: For a bias of the wrong shape or a negative offset.
    """

    def __init__(
        self, weight: torch.Tensor, bias: torch.Tensor | None = None, offset: int = 0
    ) -> None:
        super().__init__()
        if not isinstance(weight, torch.Tensor) or weight.ndim != 2:
            raise TypeError(f"weight: expected a 2-d tensor, actual {quote(weight)}")
        if bias is not None and tuple(bias.shape) != (weight.shape[0],):
            raise ValueError(
                f"bias: expected shape ({weight.shape[0]},), actual {tuple(bias.shape)}"
            )
        self.offset = check_int("offset", offset, low=0)
        self.weight = nn.Parameter(weight.detach().clone())
        self.bias = None if bias is None else nn.Parameter(bias.detach().clone())

    @classmethod
    def from_linear(cls, head: nn.Linear, offset: int, num_bins: int) -> SlimActionHead:
        """The rows ``offset .. offset + num_bins - 1`` of a full head ``nn.Linear(H, V)``.

        Args:
            head: The full LM head; its rows (and biases) are copied, the head itself is
                left as it is.
            offset: The vocabulary id of the first action token (>= 0).
            num_bins: Action ids, >= 1; the window must fit in the head's ``V`` rows.

        Raises:
            TypeError: If ``head`` is not an ``nn.Linear``.
            ValueError: If the window does not fit in the head's ``V`` rows.
        """
        if not isinstance(head, nn.Linear):
            raise TypeError(f"head: expected a torch.nn.Linear, actual {quote(head)}")
        num_bins = check_int("num_bins", num_bins, low=1)
        offset = check_int("offset", offset, low=0)
        if offset + num_bins > head.out_features:
            raise ValueError(
                f"offset, num_bins: expected a window inside the head's {head.out_features} "
                f"rows, actual ids {offset} .. {offset + num_bins - 1}"
            )
        rows = slice(offset, offset + num_bins)
        bias = None if head.bias is None else head.bias[rows]
        return cls(head.weight[rows], bias, offset=offset)

    @property
    def num_bins(self) -> int:
        """Rows of the head (action ids)."""
        return int(self.weight.shape[0])

    @property
    def hidden_size(self) -> int:
        """Width of the hidden states it reads."""
        return int(self.weight.shape[1])

    def _check_hidden(self, hidden: torch.Tensor) -> None:
        if hidden.shape[-1] != self.hidden_size:
            raise ValueError(
                f"hidden: expected a last dimension of {self.hidden_size} (the head's hidden "
                f"size), actual shape {tuple(hidden.shape)}"
            )

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        """Window logits ``(..., num_bins)`` of hidden states ``(..., hidden)``.

        Args:
            hidden: Hidden states of any leading shape whose last dimension is
                :attr:`hidden_size`.
        """
        self._check_hidden(hidden)
        return nn.functional.linear(hidden, self.weight, self.bias)

    def at_positions(self, hidden: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        """Window logits ``(B, K, N)`` at the positions ``(B, K)`` of hidden states ``(B, T, H)``.

        Only the gathered rows go through the matmul, so a long prompt costs nothing here.

        Args:
            hidden: Hidden states ``(B, T, H)`` of whole sequences.
            positions: Integer positions ``(B, K)`` in ``0 .. T-1``: the ``K`` positions of
                each row whose logits are wanted (those that emit action tokens).

        Raises:
            ValueError: For shapes that do not match or a position outside ``0 .. T-1``.
        """
        self._check_hidden(hidden)
        if hidden.ndim != 3 or positions.ndim != 2 or positions.shape[0] != hidden.shape[0]:
            raise ValueError(
                f"hidden, positions: expected (B, T, H) and (B, K), actual "
                f"{tuple(hidden.shape)} and {tuple(positions.shape)}"
            )
        if positions.numel() and (positions.min() < 0 or positions.max() >= hidden.shape[1]):
            raise ValueError(
                f"positions: expected in [0, {hidden.shape[1] - 1}], actual "
                f"{quote(positions.tolist())}"
            )
        index = positions.unsqueeze(-1).expand(-1, -1, hidden.shape[-1])
        return self(torch.gather(hidden, 1, index))

    def log_probs(self, hidden: torch.Tensor) -> torch.Tensor:
        """``log pi`` over the window, ``(..., num_bins)``: :func:`action_log_softmax` of
        the logits.

        Args:
            hidden: Hidden states of any leading shape whose last dimension is
                :attr:`hidden_size`.
        """
        return action_log_softmax(self(hidden))

    def extra_repr(self) -> str:
        return f"ids {self.offset} .. {self.offset + self.num_bins - 1}, hidden {self.hidden_size}"


def head_parameter_count(vocab_size: int, hidden_size: int, bias: bool = False) -> int:
    """Parameters of a head ``(V, H)``: ``V H`` (+ ``V`` with a bias).

    Args:
        vocab_size: Rows ``V`` of the head (token ids it scores).
        hidden_size: Width ``H`` of the hidden states it reads.
        bias: Count a bias per row too.

    Example:
        >>> head_parameter_count(32000, 4096), head_parameter_count(256, 4096)
        (131072000, 1048576)
    """
    return vocab_size * hidden_size + (vocab_size if bias else 0)


def dot_rounding_bound(hidden: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    """Worst-case float rounding of each logit: ``gamma_H * sum_i |w_i h_i|`` per entry.

    ``gamma_H = H u / (1 - H u)`` with ``u`` the unit roundoff of the dtype (Higham,
    *Accuracy and Stability of Numerical Algorithms*, Eq. 3.5): any summation order of a
    length-``H`` dot product lies within it of the exact value. Two kernels summing in
    different orders therefore agree within twice this bound.

    Returns:
        The bound, shaped like the logits ``(..., rows)``.
    """
    h = hidden.shape[-1]
    unit = torch.finfo(hidden.dtype).eps / 2
    gamma = h * unit / (1 - h * unit)
    return gamma * (hidden.abs() @ weight.abs().T)
