"""Value heads: shapes, masks, the step embedding, and how each treats a permutation."""

from __future__ import annotations

import pytest
import torch

from fleetgym.agents.tokens.value_heads import (
    VALUE_HEADS,
    AttentionPoolValue,
    FirstTokenValue,
    MeanPoolValue,
    make_value_head,
)

D = 16
# float32 sums of N = 5 terms in another order: a few ulps of the values' scale.
TOL = 64 * torch.finfo(torch.float32).eps


def _inputs(seed=0, b=4, n=5):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(b, n, D, generator=g), torch.arange(b) * 10


@pytest.mark.parametrize("kind", VALUE_HEADS)
def test_shapes(kind):
    torch.manual_seed(0)
    head = make_value_head(kind, D, max_steps=100)
    hidden, step = _inputs()
    value = head(hidden, step=step)
    assert value.shape == (4,)
    value.sum().backward()
    assert all(p.grad is not None for p in head.parameters())


@pytest.mark.parametrize("kind", ["attention", "mean"])
def test_pooling_heads_are_permutation_invariant(kind):
    torch.manual_seed(1)
    head = make_value_head(kind, D)
    hidden, step = _inputs(1)
    perm = torch.tensor([3, 0, 4, 1, 2])
    with torch.no_grad():
        a, b = head(hidden, step=step), head(hidden[:, perm], step=step)
    assert torch.allclose(a, b, atol=float(TOL * a.abs().max()), rtol=0)


def test_first_token_head_sees_position_zero_only():
    torch.manual_seed(2)
    head = FirstTokenValue(D)
    hidden, _ = _inputs(2)
    other = hidden.clone()
    other[:, 1:] = torch.randn(4, 4, D)
    with torch.no_grad():
        assert torch.equal(head(hidden), head(other))
        swapped = hidden[:, [1, 0, 2, 3, 4]]
        assert not torch.allclose(head(hidden), head(swapped))


def test_attention_weights_respect_the_mask_and_sum_to_one():
    torch.manual_seed(3)
    head = AttentionPoolValue(D)
    hidden, step = _inputs(3)
    mask = torch.tensor([[True] * 5, [True, True, False, False, False]] * 2)
    weights = head.weights(hidden, mask)
    assert torch.allclose(weights.sum(-1), torch.ones(4))
    assert torch.all(weights[~mask] == 0)
    # Masked positions do not change the value.
    noisy = hidden.clone()
    noisy[~mask] = 1e3
    with torch.no_grad():
        assert torch.equal(head(hidden, mask, step), head(noisy, mask, step))


def test_mean_head_ignores_masked_positions():
    head = MeanPoolValue(D)
    hidden, _ = _inputs(4)
    mask = torch.tensor([[True, True, False, False, False]] * 4)
    with torch.no_grad():
        assert torch.allclose(head(hidden, mask), head(hidden[:, :2]))


def test_step_embedding_moves_the_value():
    torch.manual_seed(5)
    head = AttentionPoolValue(D, max_steps=10)
    hidden, _ = _inputs(5)
    with torch.no_grad():
        early, late = head(hidden, step=torch.zeros(4)), head(hidden, step=torch.full((4,), 10))
    assert not torch.allclose(early, late)


def test_bad_input():
    head = AttentionPoolValue(D)
    hidden, step = _inputs()
    with pytest.raises(ValueError, match=r"hidden: expected shape \(B, N, 16\)"):
        head(torch.zeros(4, 5, 8), step=step)
    with pytest.raises(ValueError, match="step: expected a"):
        head(hidden)
    with pytest.raises(ValueError, match=r"step: expected shape \(4,\)"):
        head(hidden, step=torch.zeros(3))
    with pytest.raises(ValueError, match="mask: expected a bool tensor"):
        head(hidden, torch.ones(4, 5), step)
    with pytest.raises(ValueError, match="at least one valid position"):
        head(hidden, torch.zeros(4, 5, dtype=torch.bool), step)
    with pytest.raises(ValueError, match="value_head: expected one of"):
        make_value_head("max", D)
    with pytest.raises(ValueError, match="hidden_size"):
        MeanPoolValue(0)
