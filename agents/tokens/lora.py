"""LoRA adapters on a token policy's language backbone, through ``peft``.

VLA fine-tuning with RL (RL4VLA's 7B OpenVLA, RLinf's OpenVLA-OFT) trains low-rank
adapters ``W + (alpha / r) B A`` on the backbone's projections and leaves the base weights
frozen. :func:`apply_lora` does that to a Hugging Face causal LM *in place* (``peft``
swaps the named ``nn.Linear`` layers for LoRA layers inside the same model object), so a
:class:`~fleetgym.agents.tokens.backbones.HFBackbone` built on the model afterwards runs
the adapted layers. Every base parameter is frozen (the input embedding and the full head
too); the parts a :class:`~fleetgym.agents.tokens.policy.TokenPolicy` adds (the slim head's
action rows, the observation and image projections, the value head) are new parameters and
stay trainable.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from torch import nn

from fleetgym.extras import require
from fleetgym.validation import check_float, check_int, quote

#: The attention projections of Llama-style models (RL4VLA's and OpenVLA's LoRA targets
#: are all linear layers; the query and value projections are the original LoRA's).
DEFAULT_LORA_TARGETS = ("q_proj", "v_proj")


def linear_module_names(model: nn.Module) -> list[str]:
    """The last name component of every ``nn.Linear`` in ``model`` (sorted, unique)."""
    return sorted(
        {n.rpartition(".")[2] for n, m in model.named_modules() if isinstance(m, nn.Linear)}
    )


def apply_lora(
    model: nn.Module,
    rank: int = 8,
    alpha: float = 16.0,
    targets: Sequence[str] = DEFAULT_LORA_TARGETS,
    dropout: float = 0.0,
) -> nn.Module:
    """Add LoRA adapters to the layers named ``targets`` of ``model``; returns ``model``.

    Args:
        model: A Hugging Face model (``peft`` adapts ``nn.Linear`` layers by name).
        rank: ``r``.
        alpha: The scale numerator (``alpha / r``).
        targets: Last name components of the layers to adapt (``"q_proj"``, ...).
        dropout: Dropout on the adapter's input.

    Example:
        >>> try:
        ...     import peft
        ...     from transformers import LlamaConfig, LlamaForCausalLM
        ... except ImportError:
        ...     peft = None
        >>> if peft is not None:
        ...     llama = LlamaForCausalLM(LlamaConfig(vocab_size=64, hidden_size=16,
        ...         intermediate_size=32, num_hidden_layers=1, num_attention_heads=2))
        ...     llama = apply_lora(llama, rank=4, targets=("q_proj", "v_proj"))
        ...     names = [n for n, p in llama.named_parameters() if p.requires_grad]
        ...     assert all("lora_" in n for n in names) and len(names) == 4

    Raises:
        ValueError: As ``lora_targets``, for a target that names no module of ``model``
            (the message lists the linear layers it has).
        DependencyNotInstalled: Without ``peft`` (the ``tokens`` extra).
    """
    peft = require("peft", "fleetgym.agents.tokens.apply_lora")
    rank = check_int("lora_rank", rank, low=1)
    alpha = check_float("lora_alpha", alpha, 0.0, strict=True)
    dropout = check_float("lora_dropout", dropout, 0.0, 1.0)
    if isinstance(targets, str) or not targets:
        raise TypeError(
            f"lora_targets: expected a non-empty list of names, actual {quote(targets)}"
        )
    names = {n.rpartition(".")[2] for n, _ in model.named_modules()}
    missing = [t for t in targets if not isinstance(t, str) or t not in names]
    if missing:
        raise ValueError(
            f"lora_targets: expected names of modules in the backbone (its linear layers: "
            f"{', '.join(linear_module_names(model))}), actual {quote(missing)}"
        )
    config = peft.LoraConfig(
        r=rank, lora_alpha=alpha, lora_dropout=dropout, target_modules=list(targets), bias="none"
    )
    wrapped: Any = peft.get_peft_model(model, config)
    inner = wrapped.base_model.model
    assert inner is model  # peft adapts the model in place
    return model


def trainable_parameter_count(module: nn.Module) -> int:
    """Parameters that receive gradient (``requires_grad``)."""
    return sum(p.numel() for p in module.parameters() if p.requires_grad)
