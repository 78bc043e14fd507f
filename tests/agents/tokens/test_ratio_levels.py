"""Ratio levels: token, action and chunk ratios with PPO-clip, GIPO and V-trace."""

from __future__ import annotations

import math

import pytest
import torch

from fleetgym.agents.learners.losses import (
    LOSSES,
    RATIO_LEVELS,
    level_log_probs,
    level_policy_loss,
    ppo_clip_loss,
)


def _phi(x: float) -> float:
    return 0.5 * (1 + math.erf(x / math.sqrt(2)))


@pytest.mark.parametrize("loss", LOSSES)
@pytest.mark.parametrize("level", RATIO_LEVELS)
def test_every_loss_at_every_level_gives_a_gradient(loss, level):
    torch.manual_seed(0)
    new = (torch.randn(6, 2, 3) * 0.1 - 2).requires_grad_()
    old = new.detach() + torch.randn(6, 2, 3) * 0.05
    value, fraction = level_policy_loss(new, old, torch.randn(6), level=level, loss=loss)
    value.backward()
    assert value.ndim == 0 and 0.0 <= float(fraction) <= 1.0
    assert new.grad is not None and torch.isfinite(new.grad).all()


def test_token_level_is_the_mean_of_per_token_clipped_surrogates():
    torch.manual_seed(1)
    new, old = torch.randn(4, 2, 3) * 0.3, torch.randn(4, 2, 3) * 0.3
    adv = torch.tensor([1.0, -1.0, 0.5, 2.0])
    ratio = torch.exp(new - old)
    a = adv[:, None, None]
    expected = -torch.min(ratio * a, ratio.clamp(0.8, 1.2) * a).mean()
    assert torch.allclose(level_policy_loss(new, old, adv, "token")[0], expected)
    # Action level: one ratio per action from the sum of its D token log-probs.
    assert torch.allclose(
        level_policy_loss(new, old, adv, "action")[0],
        ppo_clip_loss(new.sum(-1).flatten(), old.sum(-1).flatten(), adv.repeat_interleave(2))[0],
    )
    # Chunk level: one ratio per decision.
    assert torch.allclose(
        level_policy_loss(new, old, adv, "chunk")[0],
        ppo_clip_loss(new.sum((1, 2)), old.sum((1, 2)), adv)[0],
    )


def test_levels_agree_for_a_one_token_action():
    new, old, adv = torch.randn(5, 1, 1), torch.randn(5, 1, 1), torch.randn(5)
    values = [level_policy_loss(new, old, adv, lv, loss="gipo")[0] for lv in RATIO_LEVELS]
    assert torch.equal(values[0], values[1]) and torch.equal(values[1], values[2])


def test_joint_ratio_underflows_and_explodes_at_256_tokens_where_token_ratios_do_not():
    """K D = 256 tokens (e.g. 32 actions of 8 dimensions) per decision, each token's
    log-ratio N(0, s^2) with s = 0.05 (a small policy change)."""
    torch.manual_seed(2)
    b, k, d, s, clip = 2000, 32, 8, 0.05, 0.2
    old = torch.full((b, k, d), -math.log(256.0))  # near-uniform over 256 bins
    new = old + s * torch.randn(b, k, d)
    # The joint probability itself underflows, in float32 and float64 alike
    # (256^-256 = 2^-2048 < 2^-1074), so a ratio of probabilities is 0 / 0.
    for dtype in (torch.float32, torch.float64):
        joint_new = new.to(dtype).exp().flatten(1).prod(1)
        joint_old = old.to(dtype).exp().flatten(1).prod(1)
        assert torch.all(joint_old == 0) and torch.isnan(joint_new / joint_old).all()
    # In log space the joint log-ratio is a sum of 256 terms: N(0, 256 s^2), sd 0.8.
    chunk_ratio = torch.exp(level_log_probs(new, "chunk") - level_log_probs(old, "chunk"))
    token_ratio = torch.exp(level_log_probs(new, "token") - level_log_probs(old, "token"))
    sd = s * math.sqrt(k * d)
    lo, hi = math.log(1 - clip), math.log(1 + clip)
    p_chunk = _phi(lo / sd) + 1 - _phi(hi / sd)  # 0.80
    p_token = _phi(lo / s) + 1 - _phi(hi / s)  # 1.3e-4
    _, chunk_clip = level_policy_loss(new, old, torch.ones(b), "chunk")
    _, token_clip = level_policy_loss(new, old, torch.ones(b), "token")
    # Within 5 binomial standard deviations of the normal law's fractions.
    assert abs(float(chunk_clip) - p_chunk) < 5 * math.sqrt(p_chunk * (1 - p_chunk) / b)
    n_tok = b * k * d
    assert abs(float(token_clip) - p_token) < 5 * math.sqrt(p_token / n_tok) + 1 / n_tok
    # The joint ratios span orders of magnitude (e^{+-3.5 sd} is about 16x either way);
    # every token ratio stays within e^{+-5.5 s} = [0.76, 1.32].
    assert float(chunk_ratio.max() / chunk_ratio.min()) > 100
    assert float(token_ratio.min()) > math.exp(-5.5 * s) and float(token_ratio.max()) < math.exp(
        5.5 * s
    )
    # With 80 % of the chunks clipped, 80 % of the decisions give PPO no gradient.
    new.requires_grad_()
    level_policy_loss(new, old, torch.ones(b), "chunk")[0].backward()
    dead = (new.grad.abs().sum((1, 2)) == 0).float().mean()
    assert abs(float(dead) - (1 - _phi(hi / sd))) < 5 * math.sqrt(0.25 / b)


@pytest.mark.parametrize(
    ("new", "old", "adv", "kwargs", "match"),
    [
        ((2, 3), (2, 3), (2,), {}, r"expected shape \(B, K, D\)"),
        ((2, 1, 3), (2, 1, 2), (2,), {}, "expected one shape"),
        ((2, 1, 3), (2, 1, 3), (3,), {}, r"advantages: expected shape \(2,\)"),
        ((2, 1, 3), (2, 1, 3), (2,), {"level": "sequence"}, "level: expected one of"),
        ((2, 1, 3), (2, 1, 3), (2,), {"loss": "a2c"}, "loss: expected one of"),
        ((2, 1, 3), (2, 1, 3), (2,), {"clip": -1.0}, "clip"),
    ],
)
def test_bad_input(new, old, adv, kwargs, match):
    with pytest.raises(ValueError, match=match):
        level_policy_loss(torch.zeros(new), torch.zeros(old), torch.zeros(adv), **kwargs)
