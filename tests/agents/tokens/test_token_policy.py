"""TokenPolicy: KV-cached decoding agrees with the learner's pass, one softmax, Hopper, bad input."""

from __future__ import annotations

import copy

import gymnasium as gym
import numpy as np
import pytest
import torch
from torch import nn

import fleetgym.agents.tokens.head as head_module
from fleetgym.agents.tokens import ActionTokenizer
from fleetgym.agents.tokens.backbones import HFBackbone, TinyCausalTransformer, llama_backbone
from fleetgym.agents.tokens.policy import TokenPolicy

VOCAB = 32000


def _backbone(kind: str):
    if kind == "llama":
        pytest.importorskip("transformers")
        return llama_backbone(hidden_size=64, layers=2, heads=4, vocab_size=VOCAB, seed=0)
    torch.manual_seed(0)
    return TinyCausalTransformer(hidden_size=64, layers=2, heads=4, vocab_size=VOCAB)


def _policy(kind="tiny", **kwargs):
    tok = ActionTokenizer([-1.0] * 3, [1.0] * 3, vocab_size=VOCAB)  # Hopper: 3 tokens/action
    return TokenPolicy(_backbone(kind), tok, obs_dim=11, **kwargs)


@pytest.mark.parametrize("kind", ["tiny", "llama"])
@pytest.mark.parametrize("value_head", ["attention", "mean", "first"])
def test_cached_decoding_matches_the_teacher_forced_pass(kind, value_head):
    policy = _policy(kind, chunk=2, value_head=value_head).double()
    obs, step = torch.randn(5, 11, dtype=torch.float64), torch.arange(5.0, dtype=torch.float64)
    sample = policy.act(obs, step=step, generator=torch.Generator().manual_seed(0))
    assert sample.tokens.shape == (5, 2, 3) and sample.values.shape == (5,)
    assert int(sample.tokens.min()) >= VOCAB - 256
    ev = policy.evaluate(obs, sample.tokens, step=step)
    # In float64 the cached and the full pass differ by rounding only (~1e-15 per op).
    assert torch.allclose(ev.log_probs, sample.log_probs, atol=1e-9, rtol=0)
    assert torch.allclose(ev.values, sample.values, atol=1e-9, rtol=0)
    assert torch.all(ev.entropy > 0) and torch.all(ev.entropy <= np.log(256) + 1e-9)


@pytest.mark.parametrize("kind", ["tiny", "llama"])
def test_uniform_draws_pick_the_inverse_cdf_bin(kind):
    policy = _policy(kind)
    obs = torch.randn(4, 11)
    low = policy.act(obs, uniforms=torch.zeros(4, 3))
    high = policy.act(obs, uniforms=torch.full((4, 3), 1.0 - 1e-12))
    again = policy.act(obs, uniforms=torch.full((4, 3), 0.5))
    assert torch.equal(again.tokens, policy.act(obs, uniforms=torch.full((4, 3), 0.5)).tokens)
    # u = 0 takes the first bin of nonzero mass, u -> 1 the last one (clamped into the window).
    assert int(low.tokens.min()) >= VOCAB - 256 and int(high.tokens.max()) <= VOCAB - 1
    # The first token sees the same distribution in all three: its bin grows with u.
    first = [s.tokens[:, 0, 0] for s in (low, again, high)]
    assert bool((first[0] <= first[1]).all() and (first[1] <= first[2]).all())
    ev = policy.evaluate(obs, again.tokens)
    assert torch.allclose(ev.log_probs, again.log_probs, atol=1e-5)
    with pytest.raises(ValueError, match=r"uniforms: expected shape \(4, 3\), actual \(4, 2\)"):
        policy.act(obs, uniforms=torch.zeros(4, 2))


def test_sampling_and_evaluation_share_one_softmax(monkeypatch):
    policy = _policy()
    calls = []
    real = head_module.action_log_softmax

    def counting(logits):
        calls.append(tuple(logits.shape))
        return real(logits)

    monkeypatch.setattr(head_module, "action_log_softmax", counting)
    sample = policy.act(torch.zeros(2, 11))
    assert len(calls) == 3  # one per decoded token
    policy.evaluate(torch.zeros(2, 11), sample.tokens)
    assert len(calls) == 4 and calls[-1] == (2, 3, 256)


def test_slim_and_full_head_give_the_same_log_probs():
    backbone = _backbone("tiny")
    tok = ActionTokenizer([-1.0] * 3, [1.0] * 3, vocab_size=VOCAB)
    full = TokenPolicy(copy.deepcopy(backbone), tok, 11, slim_head=False)
    slim = TokenPolicy(backbone, tok, 11)
    full.obs_embedding.load_state_dict(slim.obs_embedding.state_dict())
    obs = torch.randn(4, 11)
    tokens = slim.act(obs, generator=torch.Generator().manual_seed(1)).tokens
    a, b = slim.evaluate(obs, tokens).log_probs, full.evaluate(obs, tokens).log_probs
    assert torch.allclose(a, b, atol=1e-5, rtol=0)  # float32 rounding of two matmul shapes
    trainable = {n for n, p in slim.named_parameters() if p.requires_grad}
    assert "head.weight" in trainable and "backbone.head.weight" not in trainable


def test_gradients_reach_the_backbone_and_the_slim_head():
    policy = _policy()
    obs = torch.randn(3, 11)
    sample = policy.act(obs)
    ev = policy.evaluate(obs, sample.tokens)
    (ev.log_probs.sum() + ev.values.sum()).backward()
    assert policy.head.weight.grad is not None
    assert policy.backbone.blocks[0].qkv.weight.grad is not None
    assert policy.backbone.head is None  # dropped: nothing to train or publish


@pytest.mark.parametrize("kind", ["tiny", "llama"])
@pytest.mark.parametrize("value_head", ["attention", "mean", "first"])
def test_the_value_is_a_function_of_the_prefix_only(kind, value_head):
    """Changing a_1 (or any sampled token) leaves V(s) unchanged; the action-aware option
    moves it (it is a value of the decision, not of the state)."""
    torch.manual_seed(5)
    obs, step = torch.randn(4, 11), torch.arange(4.0)
    prefix = _policy(kind, chunk=2, value_head=value_head)
    tokens = prefix.act(obs, step=step, generator=torch.Generator().manual_seed(0)).tokens
    other = tokens.clone()
    other[:, 0, 0] = prefix.tokenizer.offset + (other[:, 0, 0] - prefix.tokenizer.offset + 7) % 256
    with torch.no_grad():
        v, v_other = (prefix.evaluate(obs, t, step=step).values for t in (tokens, other))
        sampled = prefix.act(obs, step=step, generator=torch.Generator().manual_seed(9)).values
        state = prefix.value(obs, step=step)
    assert torch.equal(v, v_other)
    assert torch.allclose(sampled, v, atol=1e-5) and torch.allclose(state, v, atol=1e-5)
    aware = _policy(kind, chunk=2, value_head=value_head, value_input="actions")
    with torch.no_grad():
        a, a_other = (aware.evaluate(obs, t, step=step).values for t in (tokens, other))
    if value_head != "first":  # "first" reads the a_1-emitting position, before a_1
        assert (a - a_other).abs().min() > 1e-6
    with pytest.raises(ValueError, match="value_input: expected 'prefix'"):
        aware.value(obs, step=step)


def test_the_first_token_head_reads_the_same_position_either_way():
    """The ``first`` head reads the position emitting ``a_1``, the prefix's last: the same
    value with ``value_input="prefix"`` or ``"actions"`` (same weights)."""
    torch.manual_seed(6)
    prefix = _policy(chunk=2, value_head="first", instruction_length=3)
    aware = copy.deepcopy(prefix)
    aware.value_input = "actions"
    obs, ids = torch.randn(3, 11), torch.randint(1, 30, (3, 3))
    tokens = prefix.act(obs, ids).tokens
    with torch.no_grad():
        assert torch.equal(prefix.evaluate(obs, tokens, ids).values,
                           aware.evaluate(obs, tokens, ids).values)  # fmt: skip


def test_tied_embeddings_stay_trainable_with_a_slim_head():
    transformers = pytest.importorskip("transformers")
    config = transformers.LlamaConfig(
        vocab_size=300, hidden_size=32, intermediate_size=64, num_hidden_layers=1,
        num_attention_heads=2, num_key_value_heads=2, max_position_embeddings=64,
        tie_word_embeddings=True,
    )  # fmt: skip
    torch.manual_seed(0)
    model = transformers.LlamaForCausalLM(config)
    embedding = model.get_input_embeddings().weight
    assert embedding is model.get_output_embeddings().weight  # tied
    tok = ActionTokenizer([-1.0] * 2, [1.0] * 2, num_bins=16, vocab_size=300)
    policy = TokenPolicy(model, tok, obs_dim=5, chunk=2)
    assert embedding.requires_grad
    assert any(p is embedding for p in policy.parameters() if p.requires_grad)
    # The slim head is a copy of the tied rows, trained on its own.
    assert torch.equal(policy.head.weight, embedding[tok.offset :])
    obs = torch.randn(3, 5)
    ev = policy.evaluate(obs, policy.act(obs).tokens)
    ev.log_probs.sum().backward()
    assert embedding.grad is not None and float(embedding.grad.abs().sum()) > 0


def _nbytes(weights):
    return sum(int(v.nbytes) for v in weights.values())


def test_a_slim_policy_drops_the_full_head_and_does_not_publish_it():
    from fleetgym.agents.inference.token_model import TokenPolicyModel, token_policy_weights

    hidden, vocab = 32, 4096
    torch.manual_seed(0)
    backbone = TinyCausalTransformer(hidden_size=hidden, layers=1, heads=2, vocab_size=vocab)
    backbone_bytes = sum(int(t.nbytes) for t in backbone.state_dict().values())
    tok = ActionTokenizer([-1.0] * 3, [1.0] * 3, num_bins=64, vocab_size=vocab)
    policy = TokenPolicy(backbone, tok, obs_dim=11)
    weights = token_policy_weights(policy)
    assert not any(k.startswith("backbone.head") for k in weights)
    own = sum(int(v.nbytes) for k, v in weights.items() if not k.startswith("backbone."))
    # Everything of the backbone but its V x H head (4 bytes a float32).
    assert _nbytes(weights) == backbone_bytes - vocab * hidden * 4 + own
    with pytest.raises(RuntimeError, match="full LM head was dropped"):
        policy.backbone.lm_head()
    served = TokenPolicyModel(copy.deepcopy(policy))
    served.load_weights(weights)  # a swap: the published weights are the served keys
    assert _nbytes(token_policy_weights(served.policy)) == _nbytes(weights)


def test_the_teacher_forced_pass_keeps_no_cache(monkeypatch):
    pytest.importorskip("transformers")
    policy = _policy("llama", chunk=2)
    seen = []
    decoder = policy.backbone.decoder
    forward = decoder.forward

    def spy(*args, **kwargs):
        seen.append(kwargs.get("use_cache"))
        return forward(*args, **kwargs)

    monkeypatch.setattr(decoder, "forward", spy)
    obs = torch.randn(2, 11)
    tokens = policy.act(obs).tokens
    assert seen == [True] * 6  # the prefix, then one position per later token
    seen.clear()
    policy.evaluate(obs, tokens)
    policy.value(obs)
    assert seen == [False, False]


def test_instruction_tokens_condition_the_policy():
    policy = _policy(instruction_length=4)
    obs = torch.zeros(2, 11)
    a = policy.act(obs, torch.tensor([[1, 2, 3, 4]] * 2), deterministic=True)
    b = policy.act(obs, torch.tensor([[5, 6, 7, 8]] * 2), deterministic=True)
    assert a.log_probs.shape == (2, 1, 3)
    assert not torch.equal(a.log_probs, b.log_probs)
    with pytest.raises(ValueError, match="language-conditioned"):
        policy.act(obs)
    with pytest.raises(ValueError, match=r"instruction: expected shape \(2, 4\)"):
        policy.act(obs, torch.zeros(2, 3, dtype=torch.long))


def test_hopper_steps_with_decoded_tokens():
    env = gym.make("Hopper-v5")
    tok = ActionTokenizer.from_space(env.action_space, vocab_size=VOCAB)
    torch.manual_seed(0)
    policy = TokenPolicy(
        TinyCausalTransformer(hidden_size=64, layers=2, vocab_size=VOCAB), tok, obs_dim=11
    )
    obs, _ = env.reset(seed=0)
    for t in range(5):
        sample = policy.act(torch.as_tensor(obs[None], dtype=torch.float32), step=torch.tensor([t]))
        action = policy.env_actions(sample.tokens)[0, 0].numpy()
        assert env.action_space.contains(action)
        obs, *_ = env.step(action)
    env.close()


class _NoHead(nn.Module):
    def get_input_embeddings(self):
        return nn.Embedding(10, 8)

    def get_output_embeddings(self):
        return nn.Linear(16, 10)


def test_bad_input():
    with pytest.raises(ValueError, match="ids inside the backbone's vocabulary of 300"):
        TokenPolicy(
            TinyCausalTransformer(32, 1, 2, vocab_size=300),
            ActionTokenizer([0.0], [1.0], vocab_size=1000),
            3,
        )
    with pytest.raises(
        ValueError, match=r"input embeddings as wide as the head's hidden size \(16\), actual 8"
    ):
        HFBackbone(_NoHead())
    with pytest.raises(TypeError, match="expected a causal LM"):
        HFBackbone(nn.Linear(2, 2))
    with pytest.raises(TypeError, match="expected a CausalBackbone"):
        TokenPolicy("gpt", ActionTokenizer([0.0], [1.0]), 3)
    policy = _policy()
    with pytest.raises(ValueError, match=r"obs: expected shape \(B, 11\)"):
        policy.act(torch.zeros(2, 10))
    with pytest.raises(ValueError, match=r"tokens: expected shape \(B, 1, 3\)"):
        policy.evaluate(torch.zeros(2, 11), torch.zeros(2, 3, dtype=torch.long))
    with pytest.raises(ValueError, match="tokens: expected ids in"):
        policy.evaluate(torch.zeros(2, 11), torch.zeros(2, 1, 3, dtype=torch.long))
    with pytest.raises(ValueError, match="hidden_size: expected a multiple of heads"):
        TinyCausalTransformer(hidden_size=30, heads=4)
