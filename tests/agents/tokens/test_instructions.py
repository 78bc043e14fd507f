"""InstructionTokenizer: a tokenizers word-level tokenizer built on the task's words; TokenPPO
on BabyAI with a from_pretrained policy reading the image and the instruction."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
import torch

pytest.importorskip("tokenizers")

from fleetgym.agents.tokens import InstructionTokenizer, MissionVocabulary  # noqa: E402

MISSIONS = [
    "go to the red ball",
    "pick up a blue key",
    "open the door on your left, then go to the grey box",
    "put the yellow ball next to the purple door after you pick up a key",
]


def test_the_default_vocabulary_gives_the_mission_vocabularys_ids():
    words, table = InstructionTokenizer(length=16), MissionVocabulary(length=16)
    for mission in MISSIONS:
        assert words.encode(mission).tolist() == table.encode(mission).tolist()
    assert words.max_id == table.max_id == 31


def test_ids_are_first_id_plus_the_word_index_padded_with_zero():
    tok = InstructionTokenizer(words=("go", "to", "ball"), length=5, first_id=100)
    assert tok.encode("Go TO ball").tolist() == [100, 101, 102, 0, 0]
    assert tok.max_id == 102


def test_a_corpus_trains_the_vocabulary_and_it_round_trips_through_tokenizer_json(tmp_path):
    tok = InstructionTokenizer.from_corpus(MISSIONS, length=16, first_id=3)
    assert set(tok.words) == {w for m in MISSIONS for w in m.replace(",", " ").split()}
    assert tok.words[0] == "the"  # the most frequent word first
    file = tok.save(tmp_path / "instr")
    assert file.name == "tokenizer.json"
    back = InstructionTokenizer.load(tmp_path / "instr")
    assert (back.words, back.length, back.first_id) == (tok.words, 16, 3)
    for mission in MISSIONS:
        assert back.encode(mission).tolist() == tok.encode(mission).tolist()
    import tokenizers  # the file is tokenizers' own

    raw = tokenizers.Tokenizer.from_file(str(file))
    assert raw.encode("go to the red ball").ids == tok.encode("go to the red ball").tolist()


def test_transformers_wraps_the_same_tokenizer():
    pytest.importorskip("transformers")
    tok = InstructionTokenizer()
    fast = tok.as_transformers()
    ids = tok.encode("go to the red ball")
    assert fast("go to the red ball")["input_ids"] == ids[ids > 0].tolist()


def test_refusals_name_the_argument(tmp_path):
    tok = InstructionTokenizer(length=4)
    with pytest.raises(
        ValueError, match="mission: expected words of the vocabulary, actual 'pink'"
    ):
        tok.encode("go to the pink ball")
    with pytest.raises(ValueError, match="mission: expected at most 4 words, actual 5"):
        tok.encode("go to the red ball")
    with pytest.raises(TypeError, match="mission: expected a str"):
        tok.encode(3)
    with pytest.raises(ValueError, match="words: expected distinct"):
        InstructionTokenizer(words=("go", "go"))
    with pytest.raises(ValueError, match="words: expected distinct lower-case"):
        InstructionTokenizer(words=("Go",))
    with pytest.raises(ValueError, match="first_id"):
        InstructionTokenizer(first_id=0)
    with pytest.raises(FileNotFoundError, match="path: expected a tokenizer.json"):
        InstructionTokenizer.load(tmp_path)
    (tmp_path / "tokenizer.json").write_text("{}")
    with pytest.raises(ValueError, match="path: expected an InstructionTokenizer's"):
        InstructionTokenizer.load(tmp_path)


def test_token_ppo_on_babyai_with_an_image_an_instruction_and_lora(tmp_path):
    transformers = pytest.importorskip("transformers")
    pytest.importorskip("peft")
    pytest.importorskip("minigrid")
    from fleetgym.agents.learners import TokenPPO
    from fleetgym.agents.tokens import LoraConfig, TokenHeadConfig, TokenPolicy, VisionConfig

    torch.manual_seed(0)
    transformers.LlamaForCausalLM(
        transformers.LlamaConfig(
            vocab_size=256,
            hidden_size=32,
            intermediate_size=64,
            num_hidden_layers=1,
            num_attention_heads=2,
            num_key_value_heads=2,
            max_position_embeddings=64,
        )  # fmt: skip
    ).save_pretrained(tmp_path)
    transformers.SiglipVisionModel(
        transformers.SiglipVisionConfig(
            hidden_size=16,
            intermediate_size=32,
            num_hidden_layers=1,
            num_attention_heads=2,
            image_size=8,
            patch_size=4,
            vision_use_head=False,
        )  # fmt: skip
    ).save_pretrained(tmp_path / "vision")
    words = InstructionTokenizer.from_corpus(["go to the red ball", "go to a grey key"] + MISSIONS)

    def factory(spec):
        return TokenPolicy.from_pretrained(
            tmp_path, obs_dim=spec.obs_dim, tokenizer=spec.tokenizer,
            head=TokenHeadConfig(
                instruction_length=spec.instruction_length, max_steps=spec.max_steps
            ),
            vision=VisionConfig(image_shape=(7, 7, 3)), lora=LoraConfig(rank=4),
        )  # fmt: skip

    model = TokenPPO(
        "BabyAI-GoToLocalS5N2-v0", seed=0, policy_factory=factory, vocabulary=words,
        vocab_size=256, n_envs=2, n_steps=8, epochs=1, minibatch_size=8,
    )  # fmt: skip
    rollout = model.collector.collect(model.policy, 8)
    env = gym.make("BabyAI-GoToLocalS5N2-v0")
    first = model.collector.envs[0]
    assert rollout.instructions is not None
    mission = first.unwrapped.mission
    assert rollout.instructions[-1, 0].tolist() == words.encode(mission).tolist()
    flat = model.flatten(rollout)
    ev = model.policy.evaluate(
        flat["obs"], flat["tokens"], flat["instructions"], step=flat["steps"]
    )
    assert torch.allclose(ev.log_probs, flat["old"], atol=1e-5)  # one restricted softmax
    lora = {n: p.detach().clone() for n, p in model.policy.named_parameters() if "lora_A" in n}
    model.update(rollout)
    assert any(not torch.equal(p, lora[n]) for n, p in model.policy.named_parameters() if n in lora)
    assert int(np.max(rollout.tokens)) < 256 and int(np.min(rollout.tokens)) >= 256 - 7
    env.close()
    with pytest.raises(ValueError, match="policy_factory: expected a policy of chunk 2"):
        TokenPPO(
            "BabyAI-GoToLocalS5N2-v0", policy_factory=factory, vocabulary=words,
            vocab_size=256, chunk=2,
        )  # fmt: skip
