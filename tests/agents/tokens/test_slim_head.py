"""SlimActionHead: the window's logits equal the full head's; one restricted softmax, or biased ratios."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from fleetgym.agents.learners.losses import ppo_clip_loss
from fleetgym.agents.tokens.head import (
    SlimActionHead,
    action_log_softmax,
    dot_rounding_bound,
    head_parameter_count,
)

VOCAB, HIDDEN, BINS = 32000, 64, 256
OFFSET = VOCAB - BINS


@pytest.fixture(scope="module")
def full_head():
    torch.manual_seed(0)
    return nn.Linear(HIDDEN, VOCAB, bias=True)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_window_logits_equal_the_full_heads(full_head, dtype):
    head = full_head.to(dtype)
    slim = SlimActionHead.from_linear(head, OFFSET, BINS)
    torch.manual_seed(1)
    hidden = torch.randn(4, 9, HIDDEN, dtype=dtype)
    with torch.no_grad():
        full = head(hidden)[..., OFFSET:]
        window = slim(hidden)
    # Equal up to the matmul's summation order: within twice the rounding bound of a
    # length-H dot product (plus the bias add, one more rounding of |logit|).
    bound = 2 * dot_rounding_bound(hidden, slim.weight) + 2 * torch.finfo(dtype).eps * (
        full.abs() + slim.bias.abs()
    )
    assert torch.all((full - window).abs() <= bound)
    assert sum(p.numel() for p in slim.parameters()) == BINS * HIDDEN + BINS
    full_head.to(torch.float32)


def test_logits_at_positions_equal_the_full_logits_there(full_head):
    slim = SlimActionHead.from_linear(full_head, OFFSET, BINS)
    torch.manual_seed(2)
    hidden = torch.randn(3, 12, HIDDEN)
    positions = torch.tensor([[5, 6, 7], [0, 1, 2], [9, 10, 11]])
    with torch.no_grad():
        logits = slim.at_positions(hidden, positions)
        full = full_head(hidden)[..., OFFSET:]
        expected = torch.stack([full[b, positions[b]] for b in range(3)])
    bound = (
        2 * dot_rounding_bound(expected.new_ones(1, HIDDEN), slim.weight.abs()) * hidden.abs().max()
    )
    assert logits.shape == (3, 3, BINS)
    assert torch.all(
        (logits - expected).abs() <= bound + 4 * torch.finfo(torch.float32).eps * expected.abs()
    )


def test_slim_head_is_a_copy_that_trains_alone(full_head):
    slim = SlimActionHead.from_linear(full_head, OFFSET, BINS)
    assert slim.weight.data_ptr() != full_head.weight.data_ptr()
    slim(torch.randn(2, HIDDEN)).sum().backward()
    assert full_head.weight.grad is None and slim.weight.grad is not None


def test_log_probs_are_the_restricted_log_softmax(full_head):
    slim = SlimActionHead.from_linear(full_head, OFFSET, BINS)
    hidden = torch.randn(5, HIDDEN)
    log_probs = slim.log_probs(hidden)
    assert torch.equal(log_probs, action_log_softmax(slim(hidden)))
    assert torch.allclose(log_probs.exp().sum(-1), torch.ones(5))


def test_full_vocab_behaviour_log_probs_bias_the_ratio(full_head):
    """The same parameters, the same actions: the ratio must be 1, and is not if one side
    normalises over the whole vocabulary."""
    slim = SlimActionHead.from_linear(full_head, OFFSET, BINS)
    torch.manual_seed(3)
    hidden = torch.randn(512, HIDDEN)
    with torch.no_grad():
        actions = torch.distributions.Categorical(logits=slim(hidden)).sample()
        learner = slim.log_probs(hidden).gather(1, actions[:, None])[:, 0]
        # A behaviour side on the full head, sliced then restricted (RL4VLA's way): another
        # matmul, the same distribution.
        same = action_log_softmax(full_head(hidden)[:, OFFSET:]).gather(1, actions[:, None])[:, 0]
        full_logits = full_head(hidden)
        mismatched = torch.log_softmax(full_logits, -1)[:, OFFSET:].gather(1, actions[:, None])[
            :, 0
        ]
    # Equal up to the two kernels' rounding of the logits (twice the dot-product bound,
    # and a log-softmax moves by at most twice its largest input error).
    logit_error = 2 * dot_rounding_bound(hidden, slim.weight).max() + 1e-6
    assert torch.all((learner - same).abs() <= 2 * logit_error)
    assert float((learner - same).abs().max()) < 1e-4
    # log rho = logsumexp_V z - logsumexp_window z > 0, a shift that depends on the state.
    shift = torch.logsumexp(full_logits, -1) - torch.logsumexp(full_logits[:, OFFSET:], -1)
    eps = 64 * torch.finfo(torch.float32).eps * full_logits.abs().max()
    assert torch.allclose(learner - mismatched, shift, atol=float(eps))
    assert torch.all(shift > 0)
    # Near uniform logits at random init the window holds about N / V of the mass.
    assert abs(float(shift.mean()) - float(torch.log(torch.tensor(VOCAB / BINS)))) < 0.5
    _, matched_clip = ppo_clip_loss(learner, same, torch.ones(512))
    _, biased_clip = ppo_clip_loss(learner, mismatched, torch.ones(512))
    assert float(matched_clip) == 0.0 and float(biased_clip) == 1.0


def test_parameter_counts_are_the_modules_own(full_head):
    """head_parameter_count counts what a head module holds; the slim head holds N rows."""
    assert head_parameter_count(VOCAB, HIDDEN, bias=True) == sum(
        p.numel() for p in full_head.parameters()
    )
    slim = SlimActionHead.from_linear(full_head, OFFSET, BINS)
    assert head_parameter_count(BINS, HIDDEN, bias=True) == sum(
        p.numel() for p in slim.parameters()
    )
    no_bias = SlimActionHead.from_linear(nn.Linear(HIDDEN, VOCAB, bias=False), OFFSET, BINS)
    assert head_parameter_count(BINS, HIDDEN) == sum(p.numel() for p in no_bias.parameters())


def test_bad_input(full_head):
    with pytest.raises(ValueError, match="window inside the head's 32000 rows"):
        SlimActionHead.from_linear(full_head, 31900, 256)
    with pytest.raises(TypeError, match="torch.nn.Linear"):
        SlimActionHead.from_linear("head", 0, 256)
    with pytest.raises(TypeError, match="2-d tensor"):
        SlimActionHead(torch.zeros(3))
    with pytest.raises(ValueError, match=r"bias: expected shape \(4,\)"):
        SlimActionHead(torch.zeros(4, 2), torch.zeros(3))
    slim = SlimActionHead.from_linear(full_head, OFFSET, BINS)
    with pytest.raises(ValueError, match="last dimension of 64 .the head's hidden size"):
        slim(torch.zeros(2, 32))
    with pytest.raises(ValueError, match="positions: expected in"):
        slim.at_positions(torch.zeros(1, 3, HIDDEN), torch.tensor([[3]]))
    with pytest.raises(ValueError, match=r"expected \(B, T, H\) and \(B, K\)"):
        slim.at_positions(torch.zeros(1, 3, HIDDEN), torch.tensor([3]))
