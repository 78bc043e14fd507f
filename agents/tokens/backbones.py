"""Causal language-model backbones a token policy runs on.

A backbone maps input embeddings ``(B, T, H)`` to last-layer hidden states ``(B, T, H)``
under a causal mask, with a key/value cache for autoregressive decoding, and owns a token
embedding table and an LM head ``nn.Linear(H, V)``:

* :class:`TinyCausalTransformer`: pure torch (pre-norm blocks, learned positions), so the
  core of :mod:`fleetgym.agents.tokens` needs nothing beyond torch;
* :class:`HFBackbone`: any Hugging Face causal LM (``get_input_embeddings``,
  ``get_output_embeddings``, ``get_decoder``), e.g. a user's own fine-tuned model;
* :func:`llama_backbone`: a randomly initialised Llama from ``LlamaConfig`` (32,000-token
  vocabulary, a few small layers). Nothing is downloaded. Needs the ``tokens`` extra.
"""

from __future__ import annotations

import inspect
import math
from typing import Any

import torch
from torch import nn

from fleetgym.validation import check_int, quote


class CausalBackbone(nn.Module):
    """The interface of a backbone: ``embed``, ``forward(embeds, past)`` and ``lm_head``.

    Subclasses set ``hidden_size`` (``H``) and ``vocab_size`` (``V``).

    Args:
        *args: Passed to ``torch.nn.Module``, which takes none: the interface has no
            settings (a subclass's constructor defines its own).
        **kwargs: Passed to ``torch.nn.Module`` too, which takes none.
    """

    hidden_size: int
    vocab_size: int

    def embed(self, token_ids: torch.Tensor) -> torch.Tensor:  # pragma: no cover - interface
        """Input embeddings ``(B, T, H)`` of token ids ``(B, T)``.

        Args:
            token_ids: Integer token ids ``(B, T)``, each below ``vocab_size``.
        """
        raise NotImplementedError

    def lm_head(self) -> nn.Linear:  # pragma: no cover - interface
        """The full output head ``nn.Linear(H, V)``."""
        raise NotImplementedError

    def drop_lm_head(self) -> None:  # pragma: no cover - interface
        """Remove the full head (its parameters leave the module and its ``state_dict``);
        :meth:`lm_head` raises afterwards. The input embedding stays, tied or not."""
        raise NotImplementedError

    def forward(  # pragma: no cover - interface
        self, embeds: torch.Tensor, past: Any = None, use_cache: bool = True
    ) -> tuple[torch.Tensor, Any]:
        """Hidden states ``(B, T, H)`` after ``past`` (a cache or None) and the new cache
        (``None`` with ``use_cache=False``: a teacher-forced pass keeps none).

        Args:
            embeds: Input embeddings ``(B, T, H)`` of the ``T`` new positions (from
                :meth:`embed`, or a prefix built otherwise, e.g. projected observations).
            past: The cache a previous call returned, for the positions before these;
                ``None``: the sequence starts here.
            use_cache: Return the cache extended by these positions, for decoding on;
                ``False``: return ``None`` in its place.
        """
        raise NotImplementedError


def _dropped(owner: object) -> RuntimeError:
    return RuntimeError(
        f"{type(owner).__name__}: the full LM head was dropped (a slim-head TokenPolicy keeps "
        "only the action rows)"
    )


class _Block(nn.Module):
    def __init__(self, hidden: int, heads: int) -> None:
        super().__init__()
        self.heads = heads
        self.norm1, self.norm2 = nn.LayerNorm(hidden), nn.LayerNorm(hidden)
        self.qkv, self.proj = nn.Linear(hidden, 3 * hidden), nn.Linear(hidden, hidden)
        self.mlp = nn.Sequential(
            nn.Linear(hidden, 4 * hidden), nn.GELU(), nn.Linear(4 * hidden, hidden)
        )

    def forward(
        self, x: torch.Tensor, past: tuple[torch.Tensor, torch.Tensor] | None
    ) -> tuple[torch.Tensor, tuple[torch.Tensor, torch.Tensor]]:
        b, t, h = x.shape
        q, k, v = self.qkv(self.norm1(x)).view(b, t, 3, self.heads, h // self.heads).unbind(2)
        q, k, v = q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)
        if past is not None:
            k, v = torch.cat([past[0], k], 2), torch.cat([past[1], v], 2)
        start = k.shape[2] - t
        # Query i (absolute position start + i) sees keys 0 .. start + i.
        keys = torch.arange(k.shape[2], device=x.device)
        mask = keys[None, :] <= (start + torch.arange(t, device=x.device))[:, None]
        attn = nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=mask)
        x = x + self.proj(attn.transpose(1, 2).reshape(b, t, h))
        return x + self.mlp(self.norm2(x)), (k, v)


class TinyCausalTransformer(CausalBackbone):
    """A small GPT-style causal transformer with a KV cache, in pure torch.

    Models the shape of a VLA's language backbone at laptop scale: a vocabulary (32,000
    by default, so the head has the real ``V``), ``layers`` pre-norm blocks and an LM head.

    Args:
        hidden_size: Width ``H`` (a multiple of ``heads``).
        layers: Transformer blocks.
        heads: Attention heads.
        vocab_size: ``V``.
        max_positions: Longest sequence (learned position embeddings).

    Example:
        >>> net = TinyCausalTransformer(hidden_size=32, layers=1, heads=2, vocab_size=100)
        >>> hidden, past = net(net.embed(torch.tensor([[1, 2, 3]])))
        >>> step, _ = net(net.embed(torch.tensor([[4]])), past)
        >>> full, _ = net(net.embed(torch.tensor([[1, 2, 3, 4]])))
        >>> bool(torch.allclose(step[:, -1], full[:, -1], atol=1e-5))
        True

    Raises:
        TypeError / ValueError: For sizes that are not positive ints, or ``hidden_size``
            not a multiple of ``heads``.
    """

    def __init__(
        self,
        hidden_size: int = 64,
        layers: int = 2,
        heads: int = 4,
        vocab_size: int = 32000,
        max_positions: int = 128,
    ) -> None:
        super().__init__()
        self.hidden_size = check_int("hidden_size", hidden_size, low=1)
        heads = check_int("heads", heads, low=1)
        if self.hidden_size % heads:
            raise ValueError(
                f"hidden_size: expected a multiple of heads ({heads}), actual {hidden_size}"
            )
        self.vocab_size = check_int("vocab_size", vocab_size, low=1)
        self.max_positions = check_int("max_positions", max_positions, low=1)
        self.tokens = nn.Embedding(self.vocab_size, self.hidden_size)
        self.positions = nn.Embedding(self.max_positions, self.hidden_size)
        self.blocks = nn.ModuleList(
            _Block(self.hidden_size, heads) for _ in range(check_int("layers", layers, low=1))
        )
        self.norm = nn.LayerNorm(self.hidden_size)
        self.head: nn.Linear | None = nn.Linear(self.hidden_size, self.vocab_size, bias=False)
        for p in self.parameters():
            if p.ndim == 2:
                nn.init.normal_(p, std=1 / math.sqrt(self.hidden_size))

    def embed(self, token_ids: torch.Tensor) -> torch.Tensor:
        return self.tokens(token_ids)

    def lm_head(self) -> nn.Linear:
        if self.head is None:
            raise _dropped(self)
        return self.head

    def drop_lm_head(self) -> None:
        self.head = None

    def forward(
        self, embeds: torch.Tensor, past: Any = None, use_cache: bool = True
    ) -> tuple[torch.Tensor, Any]:
        start = 0 if past is None else past[0][0].shape[2]
        t = embeds.shape[1]
        if start + t > self.max_positions:
            raise ValueError(
                f"embeds: expected at most {self.max_positions} positions in all, actual "
                f"{start + t}"
            )
        x = embeds + self.positions(torch.arange(start, start + t, device=embeds.device))
        cache = []
        for i, block in enumerate(self.blocks):
            x, kv = block(x, None if past is None else past[i])
            cache.append(kv)
        return self.norm(x), (cache if use_cache else None)


class HFBackbone(CausalBackbone):
    """A Hugging Face causal LM (``*ForCausalLM``) as a backbone; its head is never run.

    Args:
        model: The model; it must have ``get_input_embeddings``, ``get_output_embeddings``
            (an ``nn.Linear``) and ``get_decoder`` (or be the decoder itself).

    Example:
        >>> try:
        ...     import transformers  # the tokens extra
        ... except ImportError:
        ...     transformers = None
        >>> if transformers is not None:
        ...     net = llama_backbone(hidden_size=32, layers=1, heads=2, vocab_size=300)
        ...     hidden, past = net(net.embed(torch.tensor([[1, 2]])))
        ...     assert hidden.shape == (1, 2, 32) and net.lm_head().out_features == 300

    Raises:
        TypeError: For a model without them.
        ValueError: If the embeddings' width differs from the head's hidden size.
    """

    model: Any
    decoder: Any

    def __init__(self, model: Any) -> None:
        super().__init__()
        needed = ("get_input_embeddings", "get_output_embeddings")
        if not all(hasattr(model, name) for name in needed):
            raise TypeError(
                f"model: expected a causal LM with {needed}, actual {quote(type(model))}"
            )
        head = model.get_output_embeddings()
        if not isinstance(head, nn.Linear):
            raise TypeError(f"model: expected an nn.Linear output head, actual {quote(head)}")
        width = getattr(model.get_input_embeddings(), "embedding_dim", head.in_features)
        if width != head.in_features:
            raise ValueError(
                f"model: expected input embeddings as wide as the head's hidden size "
                f"({head.in_features}), actual {width}"
            )
        self.model = model
        decoder = getattr(model, "get_decoder", None)
        self.decoder = decoder() if callable(decoder) else model
        self.hidden_size = int(head.in_features)
        self.vocab_size = int(head.out_features)
        # transformers 5 renamed the cache argument and output from past_key_values to cache.
        params = inspect.signature(self.decoder.forward).parameters
        self._cache_name = "cache" if "cache" in params else "past_key_values"

    def embed(self, token_ids: torch.Tensor) -> torch.Tensor:
        return self.model.get_input_embeddings()(token_ids)

    def lm_head(self) -> nn.Linear:
        head = self.model.get_output_embeddings()
        if not isinstance(head, nn.Linear):
            raise _dropped(self)
        return head

    def drop_lm_head(self) -> None:
        """Set the model's output embeddings to ``None`` (a tied input embedding stays).

        Raises:
            TypeError: For a model without ``set_output_embeddings``.
        """
        setter = getattr(self.model, "set_output_embeddings", None)
        if not callable(setter):
            raise TypeError(
                f"model: expected set_output_embeddings to drop the head, actual "
                f"{quote(type(self.model))}"
            )
        setter(None)

    def forward(
        self, embeds: torch.Tensor, past: Any = None, use_cache: bool = True
    ) -> tuple[torch.Tensor, Any]:
        """The decoder's hidden states; it keeps a key/value cache only with ``use_cache``
        (decoding), not in a learner's teacher-forced pass.

        Args:
            embeds: Input embeddings ``(B, T, H)`` of the ``T`` new positions (from
                :meth:`embed`, or a prefix built otherwise, e.g. projected observations).
            past: The cache a previous call returned, for the positions before these;
                ``None``: the sequence starts here.
            use_cache: Return the cache extended by these positions, for decoding on;
                ``False``: return ``None`` in its place.
        """
        kwargs = {self._cache_name: past} if use_cache or past is not None else {}
        out = self.decoder(inputs_embeds=embeds, use_cache=use_cache, **kwargs)
        return out.last_hidden_state, (out[self._cache_name] if use_cache else None)


def llama_backbone(
    hidden_size: int = 64,
    layers: int = 2,
    heads: int = 4,
    vocab_size: int = 32000,
    max_positions: int = 128,
    seed: int | None = 0,
) -> HFBackbone:
    """A randomly initialised Llama (``LlamaConfig``) as a backbone; downloads nothing.

    Args:
        hidden_size: Width ``H`` of the hidden states (the MLP is ``4 H`` wide).
        layers: Decoder layers.
        heads: Attention heads, also the key/value heads (no grouped-query attention).
        vocab_size: ``V``: rows of the token embedding and of the (untied) LM head.
        max_positions: Longest sequence (``max_position_embeddings``).
        seed: Passed to ``torch.manual_seed`` before the weights are drawn: one seed, one
            set of weights (the global generator is reseeded for later draws too);
            ``None``: draw from the global generator as it stands.

    Raises:
        ImportError: If ``transformers`` is missing: ``pip install 'fleetgym[tokens]'``.
    """
    try:
        from transformers import LlamaConfig, LlamaForCausalLM
    except ImportError as exc:  # pragma: no cover - depends on the install
        raise ImportError(
            "llama_backbone needs Hugging Face transformers: pip install 'fleetgym[tokens]'"
        ) from exc
    config = LlamaConfig(
        vocab_size=check_int("vocab_size", vocab_size, low=1),
        hidden_size=check_int("hidden_size", hidden_size, low=1),
        intermediate_size=4 * hidden_size,
        num_hidden_layers=check_int("layers", layers, low=1),
        num_attention_heads=check_int("heads", heads, low=1),
        num_key_value_heads=heads,
        max_position_embeddings=check_int("max_positions", max_positions, low=1),
        tie_word_embeddings=False,
    )
    if seed is not None:
        torch.manual_seed(seed)
    return HFBackbone(LlamaForCausalLM(config))


def as_backbone(model: nn.Module) -> CausalBackbone:
    """A backbone as it is, or a Hugging Face causal LM wrapped in :class:`HFBackbone`.

    Args:
        model: A :class:`CausalBackbone` (returned as it is) or any other ``nn.Module``,
            taken for a Hugging Face causal LM (see :class:`HFBackbone`).

    Raises:
        TypeError: For anything else.
    """
    if isinstance(model, CausalBackbone):
        return model
    if isinstance(model, nn.Module):
        return HFBackbone(model)
    raise TypeError(
        f"backbone: expected a CausalBackbone or an HF causal LM, actual {quote(model)}"
    )
