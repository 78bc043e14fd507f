"""Token-level action policies: the machinery of vision-language-action (VLA) models at laptop scale.

* :mod:`~fleetgym.agents.tokens.tokenizer`: :class:`ActionTokenizer`, Box actions to token
  ids and back (per-dimension quantile normalisation, ``N`` uniform bins, ids in a window
  or the tail of a vocabulary);
* :mod:`~fleetgym.agents.tokens.wrapper`: :class:`TokenizedActions`, a Gymnasium action
  wrapper that drives any Box env with token ids;
* :mod:`~fleetgym.agents.tokens.head`: :class:`SlimActionHead`, an LM head cut to the action
  rows, and :func:`action_log_softmax`, the one restricted distribution;
* :mod:`~fleetgym.agents.tokens.value_heads`: attention-pooled (AcceRL), mean-pooled and
  first-action-token (RL4VLA) value heads;
* :mod:`~fleetgym.agents.tokens.backbones`: causal LM backbones (a pure-torch transformer,
  any Hugging Face causal LM, a random ``LlamaConfig`` model with the ``tokens`` extra);
* :mod:`~fleetgym.agents.tokens.policy`: :class:`TokenPolicy`, the VLA-shaped actor-critic.
* :mod:`~fleetgym.agents.tokens.missions`: :class:`MissionVocabulary`, mission text (BabyAI's
  grammar) as instruction ids from a fixed word list;
* :mod:`~fleetgym.agents.tokens.instructions`: :class:`InstructionTokenizer`, the same with a
  ``tokenizers`` word-level tokenizer built on the task's words (saved as ``tokenizer.json``);
* :mod:`~fleetgym.agents.tokens.vision`: :class:`VisionPrefix`, a vision tower's patch
  embeddings projected into the LM's width (image tokens in the prefix);
* :mod:`~fleetgym.agents.tokens.lora`: :func:`apply_lora`, ``peft`` LoRA adapters on the LM;
* :mod:`~fleetgym.agents.tokens.pretrained`: ``TokenPolicy.from_pretrained``, a local
  checkpoint (nothing downloaded) with images, instructions, LoRA, a device and bf16;
* :mod:`~fleetgym.agents.tokens.config`: its settings, :class:`TokenHeadConfig`,
  :class:`VisionConfig` and :class:`LoraConfig` (frozen, validated, JSON round-trips).

The ratio levels (token, action, chunk) of its updates are in
:mod:`fleetgym.agents.learners.losses`. Depends on :mod:`fleetgym.agents.policies` and
:mod:`fleetgym.agents.types` at most; the learners may import it. Importing the package
imports neither torch nor ``transformers``: the torch names load on first use and need the
``agents`` extra (the configs too; ``llama_backbone``, ``from_pretrained``, ``VisionPrefix``,
``InstructionTokenizer`` and ``apply_lora`` the ``tokens`` extra).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from fleetgym.agents.tokens.missions import MissionVocabulary
from fleetgym.agents.tokens.tokenizer import (
    DEFAULT_BINS,
    OUT_OF_RANGE,
    TOKEN_MAPPINGS,
    ActionTokenizer,
)
from fleetgym.agents.tokens.wrapper import TOKEN_SPACES, TokenizedActions
from fleetgym.extras import lazy_exports

_LAZY = {
    "CausalBackbone": "backbones",
    "HFBackbone": "backbones",
    "TinyCausalTransformer": "backbones",
    "as_backbone": "backbones",
    "llama_backbone": "backbones",
    "SlimActionHead": "head",
    "action_log_softmax": "head",
    "head_parameter_count": "head",
    "TokenEvaluation": "policy",
    "TokenPolicy": "policy",
    "TokenSample": "policy",
    "VALUE_INPUTS": "value_heads",
    "VALUE_HEADS": "value_heads",
    "AttentionPoolValue": "value_heads",
    "FirstTokenValue": "value_heads",
    "MeanPoolValue": "value_heads",
    "make_value_head": "value_heads",
    "IMAGE_LAYOUTS": "vision",
    "VisionPrefix": "vision",
    "InstructionTokenizer": "instructions",
    "DEFAULT_LORA_TARGETS": "lora",
    "apply_lora": "lora",
    "LoraConfig": "config",
    "TokenHeadConfig": "config",
    "VisionConfig": "config",
}

__getattr__, __dir__ = lazy_exports(__name__, _LAZY)

if TYPE_CHECKING:
    from fleetgym.agents.tokens.backbones import (
        CausalBackbone,
        HFBackbone,
        TinyCausalTransformer,
        as_backbone,
        llama_backbone,
    )
    from fleetgym.agents.tokens.config import LoraConfig, TokenHeadConfig, VisionConfig
    from fleetgym.agents.tokens.head import (
        SlimActionHead,
        action_log_softmax,
        head_parameter_count,
    )
    from fleetgym.agents.tokens.instructions import InstructionTokenizer
    from fleetgym.agents.tokens.lora import DEFAULT_LORA_TARGETS, apply_lora
    from fleetgym.agents.tokens.policy import (
        TokenEvaluation,
        TokenPolicy,
        TokenSample,
    )
    from fleetgym.agents.tokens.value_heads import (
        VALUE_HEADS,
        VALUE_INPUTS,
        AttentionPoolValue,
        FirstTokenValue,
        MeanPoolValue,
        make_value_head,
    )
    from fleetgym.agents.tokens.vision import IMAGE_LAYOUTS, VisionPrefix

__all__ = [
    "ActionTokenizer",
    "AttentionPoolValue",
    "CausalBackbone",
    "DEFAULT_BINS",
    "DEFAULT_LORA_TARGETS",
    "FirstTokenValue",
    "HFBackbone",
    "IMAGE_LAYOUTS",
    "InstructionTokenizer",
    "LoraConfig",
    "MeanPoolValue",
    "MissionVocabulary",
    "OUT_OF_RANGE",
    "SlimActionHead",
    "TOKEN_MAPPINGS",
    "TOKEN_SPACES",
    "TinyCausalTransformer",
    "TokenEvaluation",
    "TokenHeadConfig",
    "TokenPolicy",
    "TokenSample",
    "TokenizedActions",
    "VisionConfig",
    "VisionPrefix",
    "VALUE_HEADS",
    "VALUE_INPUTS",
    "action_log_softmax",
    "apply_lora",
    "as_backbone",
    "head_parameter_count",
    "llama_backbone",
    "make_value_head",
]
