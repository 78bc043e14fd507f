"""A small VLA-shaped policy: a causal LM over [observation, instruction, a_1 .. a_n].

The sequence is one (or more) observation embeddings, the instruction's token embeddings
where the env has an instruction, then the action tokens. Token ``j`` of the ``n = K D``
tokens of a decision (``K`` actions of ``D`` dimensions) is emitted by the hidden state at
position ``P - 1 + j`` (``P`` the prefix length), through the slimmed head
(:class:`~fleetgym.agents.tokens.head.SlimActionHead`) and the restricted softmax.

* :meth:`TokenPolicy.act` decodes the ``n`` tokens autoregressively with the backbone's
  key/value cache (one prefix pass, then one position per token);
* :meth:`TokenPolicy.evaluate` recomputes their log-probs in one teacher-forced pass, as a
  learner does.

Both read the distribution through :meth:`SlimActionHead.log_probs`, so the behaviour and
learner log-probs come from one function and agree to float rounding.

The value head reads the ``P`` prefix positions by default (``value_input="prefix"``, the
position that emits ``a_1`` first), so ``V(s)`` is a function of the observation,
instruction and step only. ``value_input="actions"`` reads the ``n`` emitting positions
instead (AcceRL's action-aware pooling): those see ``a_1 .. a_{n-1}``, so that value is
``Q``-like, a function of the sampled decision, not a state value.

With the slim head (the default) the full head is dropped from the backbone once its action
rows are copied out: it is neither trained, kept nor published with the weights. A tied
input embedding (``tie_word_embeddings``) stays trainable.

With a vision encoder (``vision``, a :class:`~fleetgym.agents.tokens.vision.VisionPrefix`)
the observation's first entries are an image: the prefix is then
``[image tokens, proprio tokens, instruction tokens]`` (the proprio positions only where
entries are left after the image), the prompt format of
:meth:`TokenPolicy.from_pretrained`. Inputs may live on any device: they are moved to the
policy's (:attr:`TokenPolicy.device`) and the outputs stay there. With ``bf16`` the
backbone and the vision tower run under ``torch.autocast(dtype=bfloat16)`` while the slim
head, the value head and the restricted softmax read the hidden states in float32.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any, NamedTuple

import torch
from torch import nn

from fleetgym.agents.tokens.backbones import CausalBackbone, as_backbone
from fleetgym.agents.tokens.head import SlimActionHead, action_log_softmax
from fleetgym.agents.tokens.pretrained import from_pretrained
from fleetgym.agents.tokens.tokenizer import ActionTokenizer
from fleetgym.agents.tokens.value_heads import VALUE_INPUTS, make_value_head
from fleetgym.agents.tokens.vision import VisionPrefix
from fleetgym.validation import check_bool, check_choice, check_int, quote


class TokenSample(NamedTuple):
    """One batch of decisions: token ids and their log-probs ``(B, K, D)``, values ``(B,)``.

    Args:
        tokens: Token ids ``(B, K, D)`` (int64 vocabulary ids, ``offset + bin``); decode
            them with :meth:`TokenPolicy.env_actions`.
        log_probs: ``(B, K, D)``: each token's log-probability under the restricted
            softmax, the behaviour log-probs a learner's ratios divide by.
        values: ``(B,)``: the value head's estimates (state values with
            ``value_input="prefix"``).
    """

    tokens: torch.Tensor
    log_probs: torch.Tensor
    values: torch.Tensor


class TokenEvaluation(NamedTuple):
    """A learner's view of given tokens: log-probs and entropies ``(B, K, D)``, values ``(B,)``.

    Args:
        log_probs: ``(B, K, D)``: each given token's log-probability under the current
            weights (differentiable).
        entropy: ``(B, K, D)``: the entropy (nats) of each token's restricted distribution.
        values: ``(B,)``: the value head's estimates.
    """

    log_probs: torch.Tensor
    entropy: torch.Tensor
    values: torch.Tensor


class FullHeadWindow(nn.Module):
    """The unslimmed way (RL4VLA, SimpleVLA-RL): the full ``V``-row head, then a slice.

    Kept as the reference the slim head is measured against; the distribution is the same
    restricted softmax.
    """

    def __init__(self, head: nn.Linear, offset: int, num_bins: int) -> None:
        super().__init__()
        self.head, self.offset, self.num_bins = head, offset, num_bins

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        return self.head(hidden)[..., self.offset : self.offset + self.num_bins]

    def log_probs(self, hidden: torch.Tensor) -> torch.Tensor:
        return action_log_softmax(self(hidden))


class TokenPolicy(nn.Module):
    """An actor-critic whose actions are chains of tokens from a causal LM.

    Models a vision-language-action policy (OpenVLA's action tokens, AcceRL's slimmed
    head and pooled value) on a backbone small enough for a CPU.

    Args:
        backbone: A :class:`~fleetgym.agents.tokens.backbones.CausalBackbone` or a Hugging
            Face causal LM (your own included).
        tokenizer: The action tokenizer; its ids must lie inside the backbone's vocabulary.
        obs_dim: Length of the (flattened) observation vector.
        chunk: Actions ``K`` per decision.
        obs_tokens: Positions the observation is projected to.
        instruction_length: Instruction tokens per observation (0: no instruction).
        value_head: ``"attention"``, ``"mean"`` or ``"first"``
            (:mod:`~fleetgym.agents.tokens.value_heads`).
        max_steps: The attention head's step normaliser.
        slim_head: Slice the head to the action rows and drop the full head (else keep the
            full head and slice its logits, the reference for measurements).
        value_input: ``"prefix"`` (``V(s)`` from the prefix positions, the default) or
            ``"actions"`` (the positions emitting the sampled tokens: action-aware, not a
            state value; see the module docstring).
        vision: A :class:`~fleetgym.agents.tokens.vision.VisionPrefix`: the first
            ``vision.image_entries`` entries of each observation are its image.
        bf16: Run the backbone (and the vision tower) under bfloat16 autocast on the
            policy's device (:meth:`from_pretrained` checks the device has it).

    Example:
        >>> from fleetgym.agents.tokens.backbones import TinyCausalTransformer
        >>> tok = ActionTokenizer([-1.0] * 3, [1.0] * 3, vocab_size=1000)
        >>> net = TinyCausalTransformer(hidden_size=32, layers=1, heads=2, vocab_size=1000)
        >>> policy = TokenPolicy(net, tok, obs_dim=11)
        >>> sample = policy.act(torch.zeros(2, 11), step=torch.zeros(2))
        >>> tuple(sample.tokens.shape), tuple(sample.values.shape)
        ((2, 1, 3), (2,))
        >>> ev = policy.evaluate(torch.zeros(2, 11), sample.tokens, step=torch.zeros(2))
        >>> bool(torch.allclose(ev.log_probs, sample.log_probs, atol=1e-5))
        True

    Raises:
        TypeError: For a backbone that is neither, or a tokenizer of another type.
        ValueError: If the tokenizer's ids leave the vocabulary, or the image does not fit
            in ``obs_dim``.
    """

    def __init__(
        self,
        backbone: nn.Module,
        tokenizer: ActionTokenizer,
        obs_dim: int,
        chunk: int = 1,
        obs_tokens: int = 1,
        instruction_length: int = 0,
        value_head: str = "attention",
        max_steps: int = 1000,
        slim_head: bool = True,
        value_input: str = "prefix",
        vision: VisionPrefix | None = None,
        bf16: bool = False,
    ) -> None:
        super().__init__()
        self.backbone: CausalBackbone = as_backbone(backbone)
        if not isinstance(tokenizer, ActionTokenizer):
            raise TypeError(f"tokenizer: expected an ActionTokenizer, actual {quote(tokenizer)}")
        vocab = self.backbone.vocab_size
        if tokenizer.offset + tokenizer.num_bins > vocab:
            raise ValueError(
                f"tokenizer: expected ids inside the backbone's vocabulary of {vocab}, actual "
                f"ids {tokenizer.offset} .. {tokenizer.offset + tokenizer.num_bins - 1}"
            )
        self.tokenizer = tokenizer
        self.obs_dim = check_int("obs_dim", obs_dim, low=1)
        self.chunk = check_int("chunk", chunk, low=1)
        self.obs_tokens = check_int("obs_tokens", obs_tokens, low=1)
        self.instruction_length = check_int("instruction_length", instruction_length, low=0)
        hidden = self.backbone.hidden_size
        if vision is not None and not isinstance(vision, VisionPrefix):
            raise TypeError(f"vision: expected a VisionPrefix, actual {quote(vision)}")
        if vision is not None and vision.hidden_size != hidden:
            raise ValueError(
                f"vision: expected embeddings of the backbone's width {hidden}, actual "
                f"{vision.hidden_size}"
            )
        self.vision = vision
        image = 0 if vision is None else vision.image_entries
        if image > self.obs_dim:
            raise ValueError(
                f"obs_dim: expected at least the image's {image} entries, actual {self.obs_dim}"
            )
        #: Observation entries after the image (all of them without a vision encoder).
        self.proprio_dim = self.obs_dim - image
        if self.proprio_dim == 0:
            self.obs_tokens = 0
        self.obs_embedding = (
            nn.Linear(self.proprio_dim, self.obs_tokens * hidden) if self.proprio_dim else None
        )
        self.bf16 = check_bool("bf16", bf16)
        head = self.backbone.lm_head()
        self.head: SlimActionHead | FullHeadWindow
        self.value_input = check_choice("value_input", value_input, VALUE_INPUTS)
        if check_bool("slim_head", slim_head):
            self.head = SlimActionHead.from_linear(head, tokenizer.offset, tokenizer.num_bins)
            # The rows are copied out; the full head (V rows) is neither trained nor kept, so
            # it is not published with the weights either. Freezing it instead would freeze
            # a tied input embedding with it.
            self.backbone.drop_lm_head()
        else:
            self.head = FullHeadWindow(head, tokenizer.offset, tokenizer.num_bins)
        self.value_head = make_value_head(value_head, hidden, max_steps)

    @property
    def tokens_per_decision(self) -> int:
        """``n = K D``."""
        return self.chunk * self.tokenizer.dims

    @property
    def prefix_length(self) -> int:
        """``P``: image tokens, proprio positions and instruction tokens."""
        image = 0 if self.vision is None else self.vision.num_tokens
        return image + self.obs_tokens + self.instruction_length

    @property
    def device(self) -> torch.device:
        """Where the policy's parameters are (inputs are moved there)."""
        return next(self.parameters()).device

    @property
    def _dtype(self) -> torch.dtype:
        """The heads' dtype: the backbone's hidden states are read in it."""
        return next(self.value_head.parameters()).dtype

    @contextlib.contextmanager
    def _autocast(self) -> Iterator[None]:
        if not self.bf16:
            yield
            return
        with torch.autocast(self.device.type, dtype=torch.bfloat16):
            yield

    def _run(self, embeds: torch.Tensor, past: Any = None, use_cache: bool = True):
        """The backbone (under autocast with ``bf16``); hidden states in float32."""
        with self._autocast():
            hidden, cache = self.backbone(embeds, past, use_cache=use_cache)
        return hidden.to(self._dtype), cache

    def _prefix(self, obs: torch.Tensor, instruction: torch.Tensor | None) -> torch.Tensor:
        if obs.ndim != 2 or obs.shape[1] != self.obs_dim:
            raise ValueError(f"obs: expected shape (B, {self.obs_dim}), actual {tuple(obs.shape)}")
        b, h = obs.shape[0], self.backbone.hidden_size
        parts = []
        if self.vision is not None:
            with self._autocast():
                image = self.vision(obs[:, : self.vision.image_entries])
            parts.append(image.to(self._dtype))
        if self.obs_embedding is not None:
            proprio = obs[:, obs.shape[1] - self.proprio_dim :]
            parts.append(self.obs_embedding(proprio).view(b, self.obs_tokens, h))
        if self.instruction_length:
            if instruction is None:
                raise ValueError(
                    f"instruction: expected (B, {self.instruction_length}) token ids (the "
                    "policy is language-conditioned), actual None"
                )
            if tuple(instruction.shape) != (b, self.instruction_length):
                raise ValueError(
                    f"instruction: expected shape ({b}, {self.instruction_length}), actual "
                    f"{tuple(instruction.shape)}"
                )
            parts.append(self.backbone.embed(instruction).to(self._dtype))
        elif instruction is not None:
            raise ValueError("instruction: expected None (instruction_length=0), actual ids")
        return torch.cat(parts, 1)

    def _to(self, *tensors: torch.Tensor | None) -> list[Any]:
        device = self.device
        return [None if t is None else t.to(device) for t in tensors]

    def _values(
        self, prefix: torch.Tensor, emitting: torch.Tensor | None, step: torch.Tensor | None
    ) -> torch.Tensor:
        """Values of the prefix hidden states ``(B, P, H)`` (the last first, so the
        ``"first"`` head reads the position emitting ``a_1``) or of the emitting ones."""
        if step is None:
            step = torch.zeros(prefix.shape[0], device=prefix.device)
        if self.value_input == "actions":
            assert emitting is not None
            return self.value_head(emitting, step=step)
        return self.value_head(prefix.flip(1), step=step)

    def _shape(self, flat: torch.Tensor) -> torch.Tensor:
        return flat.view(flat.shape[0], self.chunk, self.tokenizer.dims)

    @torch.no_grad()
    def act(
        self,
        obs: torch.Tensor,
        instruction: torch.Tensor | None = None,
        step: torch.Tensor | None = None,
        deterministic: bool = False,
        generator: torch.Generator | None = None,
        uniforms: torch.Tensor | None = None,
    ) -> TokenSample:
        """Decode one decision per row autoregressively with the KV cache.

        With ``uniforms`` ``(B, K D)`` in ``[0, 1)``, token ``j`` of row ``b`` is drawn by
        inverse CDF of the restricted distribution at ``uniforms[b, j]`` (what an inference
        server does with a request's noise: a row's tokens do not depend on its batch);
        otherwise by ``torch.multinomial`` with ``generator``.

        Args:
            obs: Observations ``(B, obs_dim)``, flattened (the policy does not normalise
                them); with a vision encoder the image's entries come first.
            instruction: Instruction ids ``(B, instruction_length)`` (int64); required when
                ``instruction_length > 0``, else ``None``.
            step: The env step ``(B,)`` of each row, which the attention value head reads as
                ``t / max_steps``; ``None``: zeros.
            deterministic: Take each token's most probable bin (argmax); ``generator``
                and ``uniforms`` are then unused.
            generator: The ``torch.Generator`` of the multinomial draws (without
                ``uniforms``); a CPU one draws on the host, so the same draws on every
                device; ``None``: torch's default generator.
            uniforms: ``(B, K D)`` draws in ``[0, 1)``, one per token, for inverse-CDF
                sampling; ``None``: ``torch.multinomial``.

        Returns:
            The tokens, their log-probs and the values, on the policy's device.
        """
        n = self.tokens_per_decision
        if uniforms is not None and tuple(uniforms.shape) != (obs.shape[0], n):
            raise ValueError(
                f"uniforms: expected shape ({obs.shape[0]}, {n}), actual {tuple(uniforms.shape)}"
            )
        obs, instruction, step, uniforms = self._to(obs, instruction, step, uniforms)
        hidden, past = self._run(self._prefix(obs, instruction), use_cache=True)
        prefix_hidden, current = hidden, hidden[:, -1:]
        emitting, tokens, log_probs = [], [], []
        for j in range(self.tokens_per_decision):
            emitting.append(current)
            dist = self.head.log_probs(current[:, 0])
            if deterministic:
                bins = dist.argmax(-1)
            elif uniforms is not None:
                cdf = dist.exp().cumsum(-1)
                u = uniforms[:, j : j + 1].to(cdf.dtype).contiguous()
                top = self.tokenizer.num_bins - 1  # a CDF rounded below 1 < u
                bins = torch.searchsorted(cdf, u, right=True)[:, 0].clamp(max=top)
            else:
                # A CPU generator draws on the host (the same draws on every device).
                where = dist.device if generator is None else generator.device
                probs = dist.exp().to(where)
                bins = torch.multinomial(probs, 1, generator=generator)[:, 0].to(dist.device)
            tokens.append(bins + self.tokenizer.offset)
            log_probs.append(dist.gather(1, bins[:, None])[:, 0])
            if j + 1 < self.tokens_per_decision:
                current, past = self._run(self.backbone.embed(tokens[-1][:, None]), past)
        values = self._values(prefix_hidden, torch.cat(emitting, 1), step)
        return TokenSample(
            self._shape(torch.stack(tokens, 1)), self._shape(torch.stack(log_probs, 1)), values
        )

    def evaluate(
        self,
        obs: torch.Tensor,
        tokens: torch.Tensor,
        instruction: torch.Tensor | None = None,
        step: torch.Tensor | None = None,
    ) -> TokenEvaluation:
        """Log-probs, entropies and values of given tokens ``(B, K, D)`` in one pass.

        Args:
            obs: Observations ``(B, obs_dim)``, flattened (the policy does not normalise
                them); with a vision encoder the image's entries come first.
            tokens: Token ids ``(B, K, D)``, each one of the tokenizer's action ids (as
                :meth:`act` returns them).
            instruction: Instruction ids ``(B, instruction_length)`` (int64); required when
                ``instruction_length > 0``, else ``None``.
            step: The env step ``(B,)`` of each row, which the attention value head reads as
                ``t / max_steps``; ``None``: zeros.

        Raises:
            ValueError: For tokens of another shape or an id outside the action window.
        """
        n = self.tokens_per_decision
        if tokens.ndim != 3 or tokens.shape[1:] != (self.chunk, self.tokenizer.dims):
            raise ValueError(
                f"tokens: expected shape (B, {self.chunk}, {self.tokenizer.dims}), actual "
                f"{tuple(tokens.shape)}"
            )
        obs, tokens, instruction, step = self._to(obs, tokens, instruction, step)
        flat = tokens.reshape(tokens.shape[0], n)
        bins = flat - self.tokenizer.offset
        if bool(((bins < 0) | (bins >= self.tokenizer.num_bins)).any()):
            raise ValueError(
                f"tokens: expected ids in {self.tokenizer.offset} .. "
                f"{self.tokenizer.offset + self.tokenizer.num_bins - 1}"
            )
        prefix = self._prefix(obs, instruction)
        sequence = torch.cat([prefix, self.backbone.embed(flat[:, :-1])], 1)
        hidden, _ = self._run(sequence, use_cache=False)
        emitting = hidden[:, self.prefix_length - 1 : self.prefix_length - 1 + n]
        dist = self.head.log_probs(emitting)
        log_probs = dist.gather(-1, bins[..., None])[..., 0]
        entropy = -(dist.exp() * dist).sum(-1)
        values = self._values(hidden[:, : self.prefix_length], emitting, step)
        return TokenEvaluation(self._shape(log_probs), self._shape(entropy), values)

    def value(
        self,
        obs: torch.Tensor,
        instruction: torch.Tensor | None = None,
        step: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """``V(s)`` ``(B,)`` from one prefix pass (``value_input="prefix"`` only).

        Args:
            obs: Observations ``(B, obs_dim)``, flattened (the policy does not normalise
                them); with a vision encoder the image's entries come first.
            instruction: Instruction ids ``(B, instruction_length)`` (int64); required when
                ``instruction_length > 0``, else ``None``.
            step: The env step ``(B,)`` of each row, which the attention value head reads as
                ``t / max_steps``; ``None``: zeros.

        Raises:
            ValueError: With ``value_input="actions"`` (that value needs sampled tokens).
        """
        if self.value_input != "prefix":
            raise ValueError(
                "value_input: expected 'prefix' for a state value, actual 'actions' (the "
                "value of sampled tokens: use act or evaluate)"
            )
        obs, instruction, step = self._to(obs, instruction, step)
        hidden, _ = self._run(self._prefix(obs, instruction), use_cache=False)
        return self._values(hidden, None, step)

    #: A token policy on a local checkpoint (or a config):
    #: :func:`~fleetgym.agents.tokens.pretrained.from_pretrained`, with this class.
    from_pretrained = classmethod(from_pretrained)

    def env_actions(self, tokens: torch.Tensor) -> torch.Tensor:
        """The decoded actions ``(B, K, D)`` (bin centres) of token ids ``(B, K, D)``.

        Args:
            tokens: Token ids ``(B, K, D)`` on any device, each one of the tokenizer's
                action ids; the actions come back as a float32 tensor on the CPU.
        """
        return torch.as_tensor(self.tokenizer.decode(tokens.cpu().numpy()), dtype=torch.float32)
