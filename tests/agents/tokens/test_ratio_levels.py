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


def test_token_level_sums_per_token_clipped_surrogates_over_a_decision():
    torch.manual_seed(1)
    new, old = torch.randn(4, 2, 3) * 0.3, torch.randn(4, 2, 3) * 0.3
    adv = torch.tensor([1.0, -1.0, 0.5, 2.0])
    ratio = torch.exp(new - old)
    a = adv[:, None, None]
    terms = torch.min(ratio * a, ratio.clamp(0.8, 1.2) * a)
    expected = -terms.sum((1, 2)).mean()
    assert torch.allclose(level_policy_loss(new, old, adv, "token")[0], expected)
    # scale="term": the mean of every term (the token level's step 1 / (K D) of the chunk's).
    assert torch.allclose(level_policy_loss(new, old, adv, "token", scale="term")[0], -terms.mean())
    # Action level: one ratio per action from the sum of its D token log-probs, K per decision.
    per_action = ppo_clip_loss(
        new.sum(-1).flatten(), old.sum(-1).flatten(), adv.repeat_interleave(2)
    )[0]
    assert torch.allclose(level_policy_loss(new, old, adv, "action")[0], 2 * per_action)
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
    # The joint probability (256^-256 = 2^-2048) underflows even float64; the chunk level
    # forms the joint log-ratio in log space, a sum of 256 terms: N(0, 256 s^2), sd 0.8.
    chunk_ratio = torch.exp(level_log_probs(new, "chunk") - level_log_probs(old, "chunk"))
    # Two float32 sums near -1420 each: their difference is good to ~1e-3 (not 0 / 0).
    exact = (new.double() - old.double()).flatten(1).sum(1)
    assert torch.allclose(chunk_ratio.log().double(), exact, atol=1e-2)
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


def _policy_gradient_norms(loss: str, scale: str) -> list[float]:
    """The policy-gradient norm of each level on one fixed on-policy batch of a TokenPolicy
    (K = 4 actions of D = 3 tokens: n = 12), ratios exactly 1."""
    from fleetgym.agents.tokens import ActionTokenizer, TinyCausalTransformer, TokenPolicy

    torch.manual_seed(0)
    tok = ActionTokenizer([-1.0] * 3, [1.0] * 3, num_bins=16, vocab_size=64)
    net = TinyCausalTransformer(hidden_size=16, layers=1, heads=2, vocab_size=64)
    policy = TokenPolicy(net, tok, obs_dim=5, chunk=4)
    obs = torch.randn(32, 5)
    tokens = policy.act(obs, generator=torch.Generator().manual_seed(1)).tokens
    adv = torch.randn(32, generator=torch.Generator().manual_seed(2))
    norms = []
    for level in RATIO_LEVELS:
        policy.zero_grad()
        log_probs = policy.evaluate(obs, tokens).log_probs
        value, fraction = level_policy_loss(
            log_probs, log_probs.detach(), adv, level, loss=loss, scale=scale
        )
        value.backward()
        assert float(fraction) == 0.0  # on-policy: nothing clipped
        grads = [p.grad.flatten() for p in policy.parameters() if p.grad is not None]
        norms.append(float(torch.cat(grads).norm()))
    return norms


@pytest.mark.parametrize("loss", LOSSES)
def test_on_policy_every_level_has_the_same_policy_gradient(loss):
    token, action, chunk = _policy_gradient_norms(loss, "decision")
    assert token > 0
    assert math.isclose(token, chunk, rel_tol=1e-4) and math.isclose(action, chunk, rel_tol=1e-4)
    # Averaging every term instead: the token level steps 1 / (K D), the action level 1 / K.
    token, action, chunk = _policy_gradient_norms(loss, "term")
    assert math.isclose(chunk / token, 12, rel_tol=1e-4)
    assert math.isclose(chunk / action, 4, rel_tol=1e-4)


@pytest.mark.parametrize("loss", LOSSES)
@pytest.mark.parametrize("level", RATIO_LEVELS)
def test_masked_actions_give_no_gradient_and_leave_the_ratio(loss, level):
    """Actions after an episode's end inside a chunk (mask False) are not trained on."""
    torch.manual_seed(3)
    new = (torch.randn(4, 3, 2) * 0.1 - 2).requires_grad_()
    old = new.detach() + torch.randn(4, 3, 2) * 0.01  # inside every clip and weight
    mask = torch.tensor(
        [[True, True, True], [True, False, False], [True, True, False]] + [[True] * 3]
    )
    adv = torch.randn(4)
    value, _ = level_policy_loss(new, old, adv, level, loss=loss, mask=mask)
    value.backward()
    dropped = ~mask.unsqueeze(-1).expand_as(new)
    assert torch.all(new.grad[dropped] == 0) and torch.all(new.grad[~dropped] != 0)
    # The unexecuted tokens' values do not matter at all.
    other = new.detach().clone()
    other[dropped], other_old = 5.0, old.clone()
    other_old[dropped] = -5.0
    again, _ = level_policy_loss(other, other_old, adv, level, loss=loss, mask=mask)
    assert torch.allclose(again, value.detach())
    chunk = level_log_probs(new.detach(), "chunk", mask)
    assert torch.allclose(chunk, (new.detach() * ~dropped).sum((1, 2)))


@pytest.mark.parametrize(
    ("new", "old", "adv", "kwargs", "match"),
    [
        ((2, 3), (2, 3), (2,), {}, r"expected shape \(B, K, D\)"),
        ((2, 1, 3), (2, 1, 2), (2,), {}, "expected one shape"),
        ((2, 1, 3), (2, 1, 3), (3,), {}, r"advantages: expected shape \(2,\)"),
        ((2, 1, 3), (2, 1, 3), (2,), {"level": "sequence"}, "level: expected one of"),
        ((2, 1, 3), (2, 1, 3), (2,), {"loss": "a2c"}, "loss: expected one of"),
        ((2, 1, 3), (2, 1, 3), (2,), {"clip": -1.0}, "clip"),
        ((2, 1, 3), (2, 1, 3), (2,), {"scale": "sum"}, "scale: expected one of"),
        ((2, 2, 3), (2, 2, 3), (2,), {"mask": torch.ones(2, 3, dtype=torch.bool)}, "mask: exp"),
    ],
)
def test_bad_input(new, old, adv, kwargs, match):
    with pytest.raises(ValueError, match=match):
        level_policy_loss(torch.zeros(new), torch.zeros(old), torch.zeros(adv), **kwargs)
