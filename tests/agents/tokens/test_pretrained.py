"""TokenPolicy.from_pretrained: tiny random checkpoints written with save_pretrained and
loaded back by path (nothing downloaded); images, LoRA, gradient checkpointing, bf16, the
device, and the refusals naming the argument."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
import torch

transformers = pytest.importorskip("transformers")
pytest.importorskip("peft")

from fleetgym.agents.tokens import (  # noqa: E402
    ActionTokenizer,
    LoraConfig,
    TokenHeadConfig,
    TokenPolicy,
    VisionConfig,
)
from fleetgym.agents.tokens import local as local_module  # noqa: E402
from fleetgym.errors import UnsupportedSpaceError  # noqa: E402

VOCAB, HIDDEN, LAYERS = 128, 32, 2
DISCRETE = gym.spaces.Discrete(7)


def llama_config(**overrides):
    kwargs = dict(
        vocab_size=VOCAB, hidden_size=HIDDEN, intermediate_size=64, num_hidden_layers=LAYERS,
        num_attention_heads=2, num_key_value_heads=2, max_position_embeddings=64,
    )  # fmt: skip
    kwargs.update(overrides)
    return transformers.LlamaConfig(**kwargs)


def siglip_config():
    return transformers.SiglipVisionConfig(
        hidden_size=16, intermediate_size=32, num_hidden_layers=1, num_attention_heads=2,
        image_size=8, patch_size=4, vision_use_head=False,
    )  # fmt: skip


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    folder = tmp_path_factory.mktemp("tiny_vla")
    torch.manual_seed(0)
    transformers.LlamaForCausalLM(llama_config()).save_pretrained(folder)
    transformers.SiglipVisionModel(siglip_config()).save_pretrained(folder / "vision")
    return folder


def load(checkpoint, **kwargs):
    defaults = dict(
        obs_dim=148,
        action_space=DISCRETE,
        head=TokenHeadConfig(instruction_length=4),
        vision=VisionConfig(image_shape=(7, 7, 3)),
    )
    defaults.update(kwargs)
    torch.manual_seed(1)
    return TokenPolicy.from_pretrained(checkpoint, **defaults)


def batch(b=3, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(b, 148, generator=g), torch.randint(1, 30, (b, 4), generator=g)


def test_loads_by_path_with_the_checkpoint_weights_and_a_vision_prefix(checkpoint):
    policy = load(checkpoint)
    reference = transformers.LlamaForCausalLM.from_pretrained(checkpoint)
    ours = policy.backbone.model.model.layers[1].mlp.down_proj.weight
    assert torch.equal(ours, reference.model.layers[1].mlp.down_proj.weight)
    # [4 image tokens (8x8 frame, 4x4 patches)] [1 proprio] [4 instruction ids]
    assert policy.vision.num_tokens == 4 and policy.prefix_length == 4 + 1 + 4
    assert policy.tokenizer.offset == VOCAB - 7 and policy.tokenizer.num_bins == 7


def test_act_and_evaluate_agree_and_the_image_and_instruction_move_the_output(checkpoint):
    policy = load(checkpoint).double()
    obs, ins = batch()
    obs = obs.double()
    sample = policy.act(obs, ins, step=torch.zeros(3))
    ev = policy.evaluate(obs, sample.tokens, ins, step=torch.zeros(3))
    assert torch.allclose(ev.log_probs, sample.log_probs, atol=1e-9)
    assert torch.allclose(ev.values, sample.values, atol=1e-9)
    moved_image = obs.clone()
    moved_image[:, :147] += 1.0
    other = policy.evaluate(moved_image, sample.tokens, ins, step=torch.zeros(3))
    assert (other.values - ev.values).abs().min() > 1e-6
    other_ins = policy.evaluate(obs, sample.tokens, (ins + 1) % 30, step=torch.zeros(3))
    assert (other_ins.log_probs - ev.log_probs).abs().max() > 1e-6


def test_the_image_is_read_hwc_and_zero_padded_into_the_frame(checkpoint):
    vision = load(checkpoint).vision
    image = np.arange(147, dtype=np.float32).reshape(7, 7, 3)
    pixels = vision.pixels(torch.from_numpy(image.reshape(1, -1)))
    assert pixels.shape == (1, 3, 8, 8)
    assert torch.equal(pixels[0, :, :7, :7], torch.from_numpy(image).permute(2, 0, 1))
    assert pixels[0, :, 7, :].abs().sum() == 0 and pixels[0, :, :, 7].abs().sum() == 0


def test_lora_trains_the_adapters_and_the_slim_head_not_the_base_weights(checkpoint):
    policy = load(checkpoint, lora=LoraConfig(rank=4))
    names = [n for n, p in policy.named_parameters() if p.requires_grad]
    backbone = [n for n in names if n.startswith("backbone.")]
    assert backbone and all("lora_" in n for n in backbone)
    # r (in + out) per adapted layer: q_proj and v_proj (32 -> 32) in each of 2 layers
    lora = sum(p.numel() for n, p in policy.named_parameters() if "lora_" in n)
    assert lora == LAYERS * 2 * 4 * (HIDDEN + HIDDEN)
    assert "head.weight" in names and any(n.startswith("vision.") for n in names)
    base = {n: p.detach().clone() for n, p in policy.named_parameters() if not p.requires_grad}
    trained = {n: p.detach().clone() for n, p in policy.named_parameters() if p.requires_grad}
    optimizer = torch.optim.Adam([p for p in policy.parameters() if p.requires_grad], lr=1e-2)
    obs, ins = batch()
    sample = policy.act(obs, ins, step=torch.zeros(3))
    policy.train()
    for _ in range(2):  # lora_B starts at 0: the second step moves lora_A too
        ev = policy.evaluate(obs, sample.tokens, ins, step=torch.zeros(3))
        optimizer.zero_grad()
        (-ev.log_probs.sum() + ev.values.square().sum()).backward()
        optimizer.step()
    after = dict(policy.named_parameters())
    assert all(torch.equal(after[n], v) for n, v in base.items())
    moved = [n for n, v in trained.items() if not torch.equal(after[n], v)]
    assert {"head.weight"} <= set(moved) and any("lora_A" in n for n in moved)
    assert any("lora_B" in n for n in moved)


def test_gradient_checkpointing_gives_the_same_gradients(checkpoint):
    grads = []
    for flag in (False, True):
        policy = load(checkpoint, lora=LoraConfig(rank=4), gradient_checkpointing=flag).double()
        model = policy.backbone.model
        assert (
            getattr(model, "is_activation_checkpointing", model.is_gradient_checkpointing) is flag
        )
        obs, ins = batch()
        tokens = torch.full((3, 1, 1), VOCAB - 3)
        policy.train()
        ev = policy.evaluate(obs.double(), tokens, ins, step=torch.zeros(3))
        (ev.log_probs.sum() + ev.values.sum()).backward()
        grads.append(
            {n: p.grad.clone() for n, p in policy.named_parameters() if p.grad is not None}
        )
    assert grads[0].keys() == grads[1].keys()
    for name, grad in grads[0].items():
        assert torch.allclose(grad, grads[1][name], atol=1e-12), name


def test_a_vision_language_checkpoint_uses_its_own_tower_and_projector(tmp_path):
    config = transformers.LlavaConfig(
        text_config=llama_config(), vision_config=siglip_config(), image_token_index=VOCAB - 1
    )
    transformers.LlavaForConditionalGeneration(config).save_pretrained(tmp_path)
    policy = load(tmp_path, action_space=DISCRETE)
    inner = policy.backbone.model.model
    assert policy.vision.tower is inner.vision_tower
    assert policy.vision.projector is inner.multi_modal_projector
    obs, ins = batch()
    sample = policy.act(obs, ins, step=torch.zeros(3))
    ev = policy.evaluate(obs, sample.tokens, ins, step=torch.zeros(3))
    assert torch.allclose(ev.log_probs, sample.log_probs, atol=1e-5)


def test_a_config_builds_random_weights_and_box_actions_are_binned(tmp_path):
    space = gym.spaces.Box(-1.0, 1.0, (2,))
    policy = TokenPolicy.from_pretrained(
        llama_config(), obs_dim=5, action_space=space, head=TokenHeadConfig(num_bins=16)
    )
    sample = policy.act(torch.zeros(2, 5))
    assert sample.tokens.shape == (2, 1, 2) and policy.vision is None
    assert int(sample.tokens.min()) >= VOCAB - 16


@pytest.mark.skipif(
    not local_module.bf16_supported(torch.device("cpu")), reason="no bfloat16 on this CPU"
)
def test_bf16_runs_the_backbone_in_bfloat16_and_the_heads_in_float32(checkpoint):
    policy = load(checkpoint, bf16=True)
    seen = []
    layer = policy.backbone.model.model.layers[0].mlp.down_proj
    handle = layer.register_forward_hook(lambda m, i, o: seen.append(o.dtype))
    obs, ins = batch()
    sample = policy.act(obs, ins, step=torch.zeros(3))
    handle.remove()
    assert seen and set(seen) == {torch.bfloat16}
    assert sample.log_probs.dtype == torch.float32 and sample.values.dtype == torch.float32
    assert load(checkpoint, bf16="auto").bf16 is True


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_on_a_gpu_the_policy_acts_there(checkpoint):  # pragma: no cover - GPU only
    policy = load(checkpoint, device="cuda", bf16="auto", lora=LoraConfig(rank=4))
    obs, ins = batch()
    sample = policy.act(obs, ins, step=torch.zeros(3), generator=torch.Generator().manual_seed(0))
    assert sample.tokens.device.type == "cuda"
    ev = policy.evaluate(obs, sample.tokens.cpu(), ins, step=torch.zeros(3))
    assert ev.log_probs.device.type == "cuda"


# ----------------------------------------------------------------- bad input
def test_a_missing_checkpoint_path_is_named(tmp_path):
    with pytest.raises(FileNotFoundError, match="path_or_config: .*nothing is downloaded"):
        TokenPolicy.from_pretrained(tmp_path / "nope", obs_dim=3, action_space=DISCRETE)
    with pytest.raises(FileNotFoundError, match="path_or_config"):
        TokenPolicy.from_pretrained(tmp_path, obs_dim=3, action_space=DISCRETE)  # no config


def test_a_model_without_a_causal_lm_head_is_refused(tmp_path):
    vit = transformers.ViTConfig(
        hidden_size=16, intermediate_size=32, num_hidden_layers=1, num_attention_heads=2,
        image_size=8, patch_size=4,
    )  # fmt: skip
    transformers.ViTModel(vit).save_pretrained(tmp_path)
    with pytest.raises(TypeError, match="path_or_config: expected a model class with a causal LM"):
        TokenPolicy.from_pretrained(tmp_path, obs_dim=3, action_space=DISCRETE)
    with pytest.raises(TypeError, match="path_or_config: .*ViTConfig"):
        TokenPolicy.from_pretrained(vit, obs_dim=3, action_space=DISCRETE)


@pytest.mark.parametrize(
    ("space", "error", "pattern"),
    [
        (gym.spaces.Dict({"a": DISCRETE}), UnsupportedSpaceError, "action_space: expected a Box"),
        (gym.spaces.Box(-np.inf, np.inf, (2,)), ValueError, "action_space: expected finite"),
        (gym.spaces.Discrete(VOCAB + 1), ValueError, "action_space: expected at most 128 bins"),
    ],
)
def test_an_action_space_the_tokenizer_cannot_bin_is_named(space, error, pattern):
    with pytest.raises(error, match=pattern):
        TokenPolicy.from_pretrained(llama_config(), obs_dim=3, action_space=space)


def test_exactly_one_of_action_space_and_tokenizer():
    tok = ActionTokenizer([-1.0], [1.0], num_bins=8, vocab_size=VOCAB)
    with pytest.raises(TypeError, match="action_space, tokenizer"):
        TokenPolicy.from_pretrained(llama_config(), obs_dim=3)
    with pytest.raises(TypeError, match="action_space, tokenizer"):
        TokenPolicy.from_pretrained(llama_config(), obs_dim=3, action_space=DISCRETE, tokenizer=tok)


def test_a_lora_target_that_names_no_module_is_refused_listing_the_layers():
    with pytest.raises(ValueError, match=r"lora_targets: .*q_proj.*actual \['attn'\]"):
        TokenPolicy.from_pretrained(
            llama_config(),
            obs_dim=3,
            action_space=DISCRETE,
            lora=LoraConfig(rank=4, targets=["attn"]),
        )


def test_bf16_on_a_device_without_it_is_refused(monkeypatch):
    monkeypatch.setattr(local_module, "cpu_flags", lambda: frozenset({"avx2"}))
    with pytest.raises(ValueError, match="bf16: expected a device with bfloat16"):
        TokenPolicy.from_pretrained(llama_config(), obs_dim=3, action_space=DISCRETE, bf16=True)
    policy = TokenPolicy.from_pretrained(
        llama_config(), obs_dim=3, action_space=DISCRETE, bf16="auto"
    )
    assert policy.bf16 is False


@pytest.mark.parametrize("device", ["tpu", "cuda:99", 3.5])
def test_a_device_torch_cannot_use_here_is_named(device):
    if device == "cuda:99" and torch.cuda.device_count() > 99:  # pragma: no cover
        pytest.skip("a machine with 100 GPUs")
    with pytest.raises(ValueError, match="device: expected"):
        TokenPolicy.from_pretrained(llama_config(), obs_dim=3, action_space=DISCRETE, device=device)


def test_an_image_without_a_tower_and_a_tower_without_an_image_are_refused(checkpoint, tmp_path):
    with pytest.raises(ValueError, match="vision: expected a vision tower"):
        TokenPolicy.from_pretrained(
            llama_config(), obs_dim=148, action_space=DISCRETE, vision={"image_shape": (7, 7, 3)}
        )
    with pytest.raises(ValueError, match="image_shape: expected the image's shape"):
        VisionConfig(tower=checkpoint / "vision")
    assert (
        TokenPolicy.from_pretrained(checkpoint, obs_dim=148, action_space=DISCRETE).vision is None
    )
    with pytest.raises(FileNotFoundError, match="vision: "):
        TokenPolicy.from_pretrained(
            llama_config(), obs_dim=148, action_space=DISCRETE,
            vision=VisionConfig(image_shape=(7, 7, 3), tower=tmp_path / "none"),
        )  # fmt: skip
    with pytest.raises(ValueError, match="image_shape: expected at most 8x8"):
        load(checkpoint, vision=VisionConfig(image_shape=(9, 9, 3)), obs_dim=244)
    with pytest.raises(ValueError, match="image_shape: expected 3 channels"):
        load(checkpoint, vision=VisionConfig(image_shape=(7, 7, 4)), obs_dim=197)
    with pytest.raises(ValueError, match="obs_dim: expected at least the image's 147"):
        load(checkpoint, obs_dim=100)


def test_a_bf16_policy_is_not_served_on_a_device_without_bfloat16(monkeypatch):
    from fleetgym.agents.inference import TokenPolicyModel

    monkeypatch.setattr(local_module, "cpu_flags", lambda: frozenset({"avx512_bf16"}))
    policy = TokenPolicy.from_pretrained(
        llama_config(), obs_dim=3, action_space=DISCRETE, bf16=True
    )
    TokenPolicyModel(policy)  # served where it has bfloat16
    monkeypatch.setattr(local_module, "cpu_flags", lambda: frozenset())
    with pytest.raises(ValueError, match="device: expected a device with bfloat16"):
        TokenPolicyModel(policy)
