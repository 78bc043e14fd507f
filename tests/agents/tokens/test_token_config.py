"""The configs of TokenPolicy.from_pretrained: validation, JSON round trips, the 1.x keywords
named with their 2.0 place, and the same numbers as the pieces composed by hand (the 1.x
path: TokenPolicy's keywords, apply_lora, a VisionPrefix)."""

from __future__ import annotations

import dataclasses
import inspect
import json

import gymnasium as gym
import pytest
import torch

from fleetgym.agents.tokens import LoraConfig, TokenHeadConfig, TokenPolicy, VisionConfig
from fleetgym.agents.tokens.config import FROM_PRETRAINED_MOVED

transformers = pytest.importorskip("transformers")
pytest.importorskip("peft")

torch.set_num_threads(1)

VOCAB = 128
BOX = gym.spaces.Box(-1.0, 1.0, (2,))
OLD_KEYWORDS = {
    "num_bins": 12,
    "chunk": 2,
    "obs_tokens": 2,
    "value_head": "mean",
    "max_steps": 50,
    "slim_head": False,
    "value_input": "actions",
    "instruction_length": 3,
    "image_shape": (7, 7, 3),
    "image_layout": "chw",
    "freeze_vision": True,
    "lora_rank": 4,
    "lora_alpha": 8.0,
    "lora_targets": ("q_proj",),
    "lora_dropout": 0.1,
}


def llama_config():
    return transformers.LlamaConfig(
        vocab_size=VOCAB, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
        num_attention_heads=2, num_key_value_heads=2, max_position_embeddings=64,
    )  # fmt: skip


def siglip_config():
    return transformers.SiglipVisionConfig(
        hidden_size=16, intermediate_size=32, num_hidden_layers=1, num_attention_heads=2,
        image_size=8, patch_size=4, vision_use_head=False,
    )  # fmt: skip


HEAD = TokenHeadConfig(
    num_bins=12, chunk=2, obs_tokens=2, instruction_length=3, value_head="mean",
    max_steps=50, value_input="actions",
)  # fmt: skip
LORA = LoraConfig(rank=4, alpha=8.0, targets=("q_proj", "k_proj"))


@pytest.mark.parametrize(
    "config",
    [
        TokenHeadConfig(),
        HEAD,
        VisionConfig(),
        VisionConfig(image_shape=[7, 7, 3], layout="chw", tower="ckpt/vision", freeze=True),
        LoraConfig(),
        LORA,
    ],
)
def test_each_config_round_trips_through_asdict_and_json(config):
    data = json.loads(json.dumps(dataclasses.asdict(config)))
    assert type(config).from_dict(data) == config
    with pytest.raises(dataclasses.FrozenInstanceError):
        config.__setattr__(dataclasses.fields(config)[0].name, None)


def test_sequences_are_stored_as_tuples_and_paths_as_strings(tmp_path):
    vision = VisionConfig(image_shape=[7, 7, 3], tower=tmp_path)
    assert vision.image_shape == (7, 7, 3) and vision.tower == str(tmp_path)
    assert LoraConfig(targets=["q_proj"]).targets == ("q_proj",)


@pytest.mark.parametrize(
    ("build", "error", "pattern"),
    [
        (lambda: TokenHeadConfig(num_bins=1), ValueError, "num_bins: expected"),
        (lambda: TokenHeadConfig(chunk=0), ValueError, "chunk: expected"),
        (lambda: TokenHeadConfig(value_head="max"), ValueError, "value_head: expected one of"),
        (lambda: TokenHeadConfig(value_input="q"), ValueError, "value_input: expected one of"),
        (lambda: TokenHeadConfig(slim_head=1), TypeError, "slim_head: expected"),
        (lambda: VisionConfig(image_shape=(7, 7)), ValueError, "image_shape: expected 3 sizes"),
        (lambda: VisionConfig(image_shape="7x7"), TypeError, "image_shape: expected 3 sizes"),
        (lambda: VisionConfig(tower="v"), ValueError, "image_shape: expected the image's shape"),
        (lambda: VisionConfig(image_shape=(7, 7, 3), layout="whc"), ValueError, "image_layout"),
        (lambda: LoraConfig(rank=-1), ValueError, "lora_rank: expected"),
        (lambda: LoraConfig(alpha=0.0), ValueError, "lora_alpha: expected"),
        (lambda: LoraConfig(dropout=2.0), ValueError, "lora_dropout: expected"),
        (lambda: LoraConfig(targets="q_proj"), TypeError, "lora_targets: expected a non-empty"),
        (lambda: LoraConfig(targets=()), TypeError, "lora_targets: expected a non-empty"),
        (lambda: LoraConfig.from_dict({"r": 4}), TypeError, r"LoraConfig: .*unknown \['r'\]"),
    ],
)
def test_a_bad_value_is_named(build, error, pattern):
    with pytest.raises(error, match=pattern):
        build()


@pytest.mark.parametrize("keyword", sorted(OLD_KEYWORDS))
def test_every_1x_keyword_fails_naming_its_2_0_place(keyword):
    where = FROM_PRETRAINED_MOVED[keyword].format(key=keyword).split("(")[0]
    with pytest.raises(TypeError, match=rf"'{keyword}' moved in fleetgym 2\.0: pass {where}\("):
        TokenPolicy.from_pretrained(
            llama_config(), obs_dim=3, action_space=BOX, **{keyword: OLD_KEYWORDS[keyword]}
        )


def test_an_old_vision_tower_and_an_unknown_keyword_are_named(tmp_path):
    with pytest.raises(TypeError, match=r"vision: expected a VisionConfig.*VisionConfig\(tower"):
        TokenPolicy.from_pretrained(llama_config(), obs_dim=3, action_space=BOX, vision=tmp_path)
    with pytest.raises(TypeError, match="unexpected keyword argument 'colour'"):
        TokenPolicy.from_pretrained(llama_config(), obs_dim=3, action_space=BOX, colour=1)


def test_the_signature_is_real_and_short():
    parameters = inspect.signature(TokenPolicy.from_pretrained).parameters
    named = [p for p in parameters.values() if p.kind is not p.VAR_KEYWORD]
    assert len(named) <= 11 and "kwargs" not in parameters
    assert {"head", "vision", "lora", "obs_dim", "device"} <= set(parameters)


def _outputs(policy, instruction_length):
    g = torch.Generator().manual_seed(0)
    obs = torch.randn(3, policy.obs_dim, generator=g)
    ins = torch.randint(1, 30, (3, instruction_length), generator=g) if instruction_length else None
    sample = policy.act(obs, ins, step=torch.ones(3), generator=torch.Generator().manual_seed(1))
    ev = policy.evaluate(obs, sample.tokens, ins, step=torch.ones(3))
    trainable = sorted(n for n, p in policy.named_parameters() if p.requires_grad)
    return sample.tokens, ev.log_probs, ev.entropy, ev.values, trainable


def _by_hand(lm, tower, head, lora, vision):
    """What 1.x's from_pretrained did with its 24 keywords, composed from the pieces."""
    from fleetgym.agents.tokens.lora import apply_lora
    from fleetgym.agents.tokens.pretrained import action_tokenizer_for
    from fleetgym.agents.tokens.vision import VisionPrefix

    model = transformers.LlamaForCausalLM(lm)
    prefix_tower = transformers.SiglipVisionModel(tower) if vision else None
    apply_lora(model, lora.rank, lora.alpha, lora.targets, lora.dropout)
    if prefix_tower is not None:
        prefix_tower.requires_grad_(False)
    tokenizer = action_tokenizer_for(BOX, head.num_bins, VOCAB)
    prefix = VisionPrefix(prefix_tower, 32, (7, 7, 3)) if prefix_tower is not None else None
    return TokenPolicy(
        model, tokenizer, obs_dim=149 if vision else 5, chunk=head.chunk,
        obs_tokens=head.obs_tokens, instruction_length=head.instruction_length,
        value_head=head.value_head, max_steps=head.max_steps, slim_head=head.slim_head,
        value_input=head.value_input, vision=prefix,
    )  # fmt: skip


@pytest.mark.parametrize("vision", [False, True])
def test_the_configs_give_the_same_numbers_as_the_pieces_by_hand(vision):
    torch.manual_seed(3)
    new = TokenPolicy.from_pretrained(
        llama_config(), obs_dim=149 if vision else 5, action_space=BOX, head=HEAD, lora=LORA,
        vision=VisionConfig(image_shape=(7, 7, 3), tower=siglip_config(), freeze=True)
        if vision else None,
    )  # fmt: skip
    torch.manual_seed(3)
    old = _by_hand(llama_config(), siglip_config(), HEAD, LORA, vision)
    ours, reference = _outputs(new, 3), _outputs(old, 3)
    for a, b in zip(ours[:4], reference[:4], strict=True):
        assert torch.equal(a, b)
    assert ours[4] == reference[4]
    assert not any(name.startswith("vision.tower.") for name in ours[4])
