"""A token policy on a local Hugging Face checkpoint: :func:`from_pretrained`.

``TokenPolicy.from_pretrained(path_or_config, ...)`` loads a causal LM from a local
directory (``AutoModelForCausalLM``, or ``AutoModelForImageTextToText`` for a
vision-language checkpoint such as Llava, whose vision tower and projector are then used)
with ``local_files_only=True``: nothing is downloaded. A ``transformers`` config instead of
a path builds the same classes with random weights. Then, in order:

1. the vision tower (``vision=VisionConfig(tower=...)``: a directory, a config, or
   ``<path>/vision`` when that folder exists), wrapped with a projector into the LM's width
   (:class:`~fleetgym.agents.tokens.vision.VisionPrefix`);
2. LoRA adapters on the LM (``lora=LoraConfig(rank=r)`` with ``r > 0``,
   :func:`~fleetgym.agents.tokens.lora.apply_lora`): the base weights frozen, the slim head and the policy's own layers trainable;
3. gradient checkpointing of the LM's (and the tower's) layers;
4. the action tokenizer (given, or built for ``action_space`` on the LM's vocabulary tail);
5. the :class:`~fleetgym.agents.tokens.policy.TokenPolicy`, moved to ``device``, with
   bfloat16 autocast where asked (``bf16=True``: refused on a device without it;
   ``"auto"``: on where the device has it).

The prompt, position by position:
``[image tokens (P_img)] [proprio (obs_tokens)] [instruction ids (L)] -> a_1 ... a_n``;
the value reads the prefix, the action tokens are decoded through the slim head.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
from torch import nn

from fleetgym.agents.tokens.config import (
    FROM_PRETRAINED_MOVED,
    LoraConfig,
    TokenHeadConfig,
    VisionConfig,
    as_token_config,
)
from fleetgym.agents.tokens.local import checkpoint_dir, resolve_bf16, resolve_device
from fleetgym.agents.tokens.lora import apply_lora
from fleetgym.agents.tokens.tokenizer import ActionTokenizer
from fleetgym.agents.tokens.vision import VisionPrefix, load_vision_tower
from fleetgym.errors import UnsupportedSpaceError
from fleetgym.extras import require
from fleetgym.validation import check_bool, quote

FEATURE = "fleetgym.agents.tokens.TokenPolicy.from_pretrained"


def _is_vision_language(config: Any) -> bool:
    return hasattr(config, "vision_config") and hasattr(config, "text_config")


def load_causal_lm(path_or_config: Any, local_files_only: bool = True) -> nn.Module:
    """A causal LM (or a vision-language model with an LM head) from a local directory or a
    config; nothing is downloaded.

    Raises:
        FileNotFoundError: For a path that is not a checkpoint directory.
        TypeError: Naming ``path_or_config``, for a model class without a causal LM head.
    """
    transformers = require("transformers", FEATURE)
    if isinstance(path_or_config, transformers.PretrainedConfig):
        config, path = path_or_config, None
    else:
        path = checkpoint_dir("path_or_config", path_or_config)
        config = transformers.AutoConfig.from_pretrained(path, local_files_only=local_files_only)
    if _is_vision_language(config):
        auto = transformers.AutoModelForImageTextToText
    else:
        auto = transformers.AutoModelForCausalLM
    try:
        if path is None:
            model = auto.from_config(config)
        else:
            model = auto.from_pretrained(path, local_files_only=local_files_only)
    except ValueError as exc:
        if "Unrecognized configuration class" not in str(exc):
            raise
        raise TypeError(
            f"path_or_config: expected a model class with a causal LM head (a *ForCausalLM "
            f"or a vision-language model), actual {type(config).__name__} "
            f"(model_type {getattr(config, 'model_type', None)!r})"
        ) from None
    head = model.get_output_embeddings()
    if not isinstance(head, nn.Linear):
        raise TypeError(
            f"path_or_config: expected a model with a causal LM head (an nn.Linear), actual "
            f"{type(model).__name__} with {quote(head)}"
        )
    return model


def action_tokenizer_for(space: Any, num_bins: int, vocab_size: int) -> ActionTokenizer:
    """The tokenizer of ``space``: a finite ``Box`` in ``num_bins`` bins per entry, a
    ``Discrete(n)`` as one token of ``n`` bins; ids the vocabulary's tail.

    Raises:
        UnsupportedSpaceError: Naming ``action_space``, for another space.
        ValueError: Naming ``action_space``, for infinite bounds or more bins than the
            vocabulary holds.
    """
    if isinstance(space, gym.spaces.Discrete):
        n = int(space.n)
        low, high, bins = np.zeros(1), np.full(1, max(n - 1, 1.0)), max(n, 2)
    elif isinstance(space, gym.spaces.Box):
        low, high, bins = np.ravel(space.low), np.ravel(space.high), num_bins
        if not (np.all(np.isfinite(low)) and np.all(np.isfinite(high))):
            raise ValueError(
                f"action_space: expected finite bounds to bin (or pass a fitted tokenizer=), "
                f"actual {quote(space)}"
            )
    else:
        raise UnsupportedSpaceError(
            f"action_space: expected a Box or Discrete space the tokenizer can bin, actual "
            f"{quote(space)}"
        )
    if bins > vocab_size:
        raise ValueError(
            f"action_space: expected at most {vocab_size} bins (the model's vocabulary), "
            f"actual {bins}"
        )
    return ActionTokenizer(low, high, num_bins=bins, vocab_size=vocab_size)


def _vision_parts(model: nn.Module) -> tuple[nn.Module | None, nn.Module | None]:
    inner = getattr(model, "model", model)
    return getattr(inner, "vision_tower", None), getattr(inner, "multi_modal_projector", None)


def _checkpointing(module: nn.Module) -> None:
    kwargs = {"use_reentrant": False}
    enable = getattr(module, "activation_checkpointing_enable", None)  # transformers 5
    if callable(enable):
        enable(activation_checkpointing_kwargs=kwargs)
        return
    enable = getattr(module, "gradient_checkpointing_enable", None)
    if not callable(enable):
        raise TypeError(
            f"gradient_checkpointing: expected a model that supports it, actual "
            f"{type(module).__name__}"
        )
    enable(gradient_checkpointing_kwargs=kwargs)


def from_pretrained(
    cls: Any,
    path_or_config: Any,
    *,
    obs_dim: int,
    action_space: gym.Space | None = None,
    tokenizer: ActionTokenizer | None = None,
    head: TokenHeadConfig | Mapping[str, Any] | None = None,
    vision: VisionConfig | Mapping[str, Any] | None = None,
    lora: LoraConfig | Mapping[str, Any] | None = None,
    gradient_checkpointing: bool = False,
    device: Any = "cpu",
    bf16: bool | str = False,
    local_files_only: bool = True,
    **moved: Any,
) -> Any:
    """A ``cls`` (:class:`~fleetgym.agents.tokens.policy.TokenPolicy`) on a local checkpoint
    (see the module docstring for the order); called as ``TokenPolicy.from_pretrained``.

    Args:
        path_or_config: A local checkpoint directory (``save_pretrained``'s) or a
            ``transformers`` config (random weights).
        obs_dim: The flat observation's length (image entries first, then proprio).
        action_space: The env's action space (``Box`` with finite bounds, ``Discrete``);
            or give ``tokenizer``.
        tokenizer: A fitted :class:`~fleetgym.agents.tokens.ActionTokenizer` (its ids
            inside the model's vocabulary).
        head: The action and observation head (:class:`TokenHeadConfig`, a dict of its
            fields, or ``None``: the defaults).
        vision: The image and its tower (:class:`VisionConfig`; ``None``: no image).
        lora: LoRA on the LM (:class:`LoraConfig`; ``None`` or ``rank=0``: none, every
            weight trains).
        gradient_checkpointing: Recompute the layers' activations in the backward pass.
        device: ``"cpu"`` or ``"cuda[:N]"``.
        bf16: ``True``, ``False`` or ``"auto"`` (see :func:`resolve_bf16`).
        local_files_only: Passed to ``transformers``; keep ``True`` (no downloads).
        **moved: fleetgym 1.x keywords: each raises a TypeError that names its 2.0 place
            (:data:`~fleetgym.agents.tokens.config.FROM_PRETRAINED_MOVED`).

    Example:
        >>> import torch
        >>> from fleetgym.agents.tokens import TokenHeadConfig, TokenPolicy
        >>> try:
        ...     from transformers import LlamaConfig
        ... except ImportError:
        ...     LlamaConfig = None
        >>> if LlamaConfig is not None:
        ...     cfg = LlamaConfig(vocab_size=300, hidden_size=32, intermediate_size=64,
        ...         num_hidden_layers=1, num_attention_heads=2, num_key_value_heads=2)
        ...     space = gym.spaces.Box(-1.0, 1.0, (2,))
        ...     policy = TokenPolicy.from_pretrained(cfg, obs_dim=3, action_space=space,
        ...                                          head=TokenHeadConfig(num_bins=16))
        ...     assert policy.act(torch.zeros(1, 3)).tokens.shape == (1, 1, 2)

    Raises:
        FileNotFoundError: For a checkpoint path (or a vision path) that does not exist.
        TypeError: For a model without a causal LM head, both/neither of ``action_space``
            and ``tokenizer``, a config of another type, or a 1.x keyword (naming its
            2.0 place).
        UnsupportedSpaceError, ValueError: For an action space the tokenizer cannot bin, a
            LoRA target naming no module, ``bf16=True`` on a device without it, an image
            without a tower (or a tower without an image).
        DependencyNotInstalled: Without ``transformers`` / ``peft`` (the ``tokens`` extra).
    """
    if moved:
        key = sorted(moved)[0]
        where = FROM_PRETRAINED_MOVED.get(key)
        if where is None:
            raise TypeError(f"from_pretrained() got an unexpected keyword argument {key!r}")
        raise TypeError(
            f"from_pretrained: the keyword {key!r} moved in fleetgym 2.0: pass "
            + where.format(key=key)
        )
    head_config = as_token_config(TokenHeadConfig, head, "head")
    view = as_token_config(VisionConfig, vision, "vision")
    adapters = as_token_config(LoraConfig, lora, "lora")
    resolved = resolve_device("device", device)
    use_bf16 = resolve_bf16(bf16, resolved)
    if (action_space is None) == (tokenizer is None):
        raise TypeError("action_space, tokenizer: expected exactly one of them")
    model: Any = load_causal_lm(path_or_config, local_files_only)
    own_tower, own_projector = _vision_parts(model)
    image_shape, source = view.image_shape, view.tower
    auto = source is None and own_tower is None and image_shape is not None
    if auto and isinstance(path_or_config, (str, Path)):
        candidate = Path(path_or_config) / "vision"
        source = candidate if (candidate / "config.json").is_file() else None
    tower: nn.Module | None = None
    projector = None
    if source is not None:
        tower = load_vision_tower(source, local_files_only)
    elif own_tower is not None and image_shape is not None:
        tower, projector = own_tower, own_projector
    if image_shape is not None and tower is None:
        raise ValueError(
            "vision: expected a vision tower for image_shape (a directory or config, a "
            "vision-language checkpoint, or <path>/vision), actual None"
        )
    if adapters.rank:
        apply_lora(model, adapters.rank, adapters.alpha, adapters.targets, adapters.dropout)
    if check_bool("gradient_checkpointing", gradient_checkpointing):
        _checkpointing(model)
        if tower is not None and source is not None:
            _checkpointing(tower)
    if tower is not None and source is not None and view.freeze:
        tower.requires_grad_(False)
    if tokenizer is None:
        vocab = model.get_output_embeddings().out_features
        tokenizer = action_tokenizer_for(action_space, head_config.num_bins, int(vocab))
    prefix = None
    if tower is not None and image_shape is not None:
        width = model.get_input_embeddings().embedding_dim
        prefix = VisionPrefix(tower, width, image_shape, view.layout, projector)
    policy = cls(
        model, tokenizer, obs_dim=obs_dim, vision=prefix, bf16=use_bf16,
        **head_config.policy_kwargs(),
    )  # fmt: skip
    return policy.to(resolved)
