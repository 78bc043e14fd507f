"""The hyperparameters of :class:`~fleetgym.agents.learners.token_ppo.TokenPPO` and the
token policy they build (:func:`build_token_policy`)."""

from __future__ import annotations

from dataclasses import dataclass

from torch import nn

from fleetgym.agents.learners.losses.levels import LEVEL_SCALES, RATIO_LEVELS
from fleetgym.agents.learners.losses.registry import get_loss
from fleetgym.agents.rollout.token_rollout import TokenEnvSpec
from fleetgym.agents.tokens.backbones import TinyCausalTransformer, llama_backbone
from fleetgym.agents.tokens.policy import TokenPolicy
from fleetgym.agents.tokens.value_heads import VALUE_HEADS, VALUE_INPUTS
from fleetgym.validation import check_bool, check_choice, check_float, check_int

#: Backbones :class:`TokenPPO` builds by name (or pass your own module).
BACKBONES = ("tiny", "llama")


@dataclass(frozen=True)
class TokenPPOConfig:
    """The hyperparameters of :class:`TokenPPO`, frozen and validated once.

    Args:
        ratio_level: ``"token"``, ``"action"`` or ``"chunk"`` (see the module docstring).
        loss: A registered loss name (``"ppo"``, ``"gipo"``, ``"vtrace"`` or one added
            with :func:`~fleetgym.agents.learners.losses.registry.register_loss`).
        value_head: ``"attention"``, ``"mean"`` or ``"first"``.
        value_input: ``"prefix"`` (a state value) or ``"actions"`` (action-aware; see
            :class:`~fleetgym.agents.tokens.policy.TokenPolicy`).
        level_scale: ``"decision"`` (sum a decision's terms: one gradient scale at every
            level) or ``"term"`` (average every term: the token level's step is
            ``1 / (K D)`` of the chunk level's); see
            :func:`~fleetgym.agents.learners.losses.level_policy_loss`.
        chunk: Actions ``K`` per decision.
        num_bins: Bins per action dimension.
        backbone: ``"tiny"`` (pure torch) or ``"llama"`` (random ``LlamaConfig``, the
            ``tokens`` extra).
        hidden_size, layers, heads, vocab_size: The backbone's sizes; action ids are the
            vocabulary's last ``num_bins`` ids.
        n_envs, n_steps: Envs stepped in lockstep, decisions per env per update.
        epochs: Passes over each rollout's decisions per update (>= 1).
        minibatch_size: Decisions per minibatch (>= 2; capped at the update's decisions).
        lr: Adam's learning rate (> 0).
        gamma: Discount per env step, in ``[0, 1]``; decisions of ``K`` actions are
            discounted by ``gamma^K``.
        gae_lambda: GAE's ``lambda``, in ``[0, 1]``.
        clip, sigma: PPO-clip's range (>= 0) and GIPO's width in log-ratio space (> 0).
        ent_coef, vf_coef: Weights (>= 0) of the token entropy bonus and the value loss.
        max_grad_norm: The gradient-norm clip of every step (> 0).
        target_kl: KL budget per update; ``None`` takes the loss's default
            (its ``default_target_kl``), ``0`` means none.
        normalize_obs, normalize_reward: Running observation normalisation; rewards
            scaled by the running std of the discounted return.

    Example:
        >>> TokenPPOConfig(ratio_level="chunk", loss="gipo").effective_target_kl
        0.02
        >>> TokenPPOConfig(ratio_level="joint")
        Traceback (most recent call last):
        ...
        ValueError: ratio_level: expected one of ('token', 'action', 'chunk'), actual 'joint'
    """

    ratio_level: str = "token"
    loss: str = "ppo"
    value_head: str = "attention"
    value_input: str = "prefix"
    level_scale: str = "decision"
    chunk: int = 1
    num_bins: int = 256
    backbone: str = "tiny"
    hidden_size: int = 64
    layers: int = 2
    heads: int = 4
    vocab_size: int = 32000
    n_envs: int = 8
    n_steps: int = 64
    epochs: int = 4
    minibatch_size: int = 128
    lr: float = 3e-4
    gamma: float = 0.99
    gae_lambda: float = 0.95
    clip: float = 0.2
    sigma: float = 0.8
    ent_coef: float = 0.0
    vf_coef: float = 0.5
    max_grad_norm: float = 0.5
    target_kl: float | None = None
    normalize_obs: bool = True
    normalize_reward: bool = True

    def __post_init__(self) -> None:
        check_choice("ratio_level", self.ratio_level, RATIO_LEVELS)
        get_loss(self.loss)
        check_choice("value_head", self.value_head, VALUE_HEADS)
        check_choice("value_input", self.value_input, VALUE_INPUTS)
        check_choice("level_scale", self.level_scale, LEVEL_SCALES)
        check_choice("backbone", self.backbone, BACKBONES)
        for name in ("chunk", "hidden_size", "layers", "heads", "n_envs", "n_steps", "epochs"):
            check_int(name, getattr(self, name), low=1)
        check_int("num_bins", self.num_bins, low=2)
        check_int("vocab_size", self.vocab_size, low=self.num_bins)
        check_int("minibatch_size", self.minibatch_size, low=2)
        check_float("lr", self.lr, 0.0, strict=True)
        check_float("gamma", self.gamma, 0.0, 1.0)
        check_float("gae_lambda", self.gae_lambda, 0.0, 1.0)
        check_float("clip", self.clip, 0.0)
        check_float("sigma", self.sigma, 0.0, strict=True)
        for name in ("ent_coef", "vf_coef"):
            check_float(name, getattr(self, name), 0.0)
        check_float("max_grad_norm", self.max_grad_norm, 0.0, strict=True)
        if self.target_kl is not None:
            check_float("target_kl", self.target_kl, 0.0)
        check_bool("normalize_obs", self.normalize_obs)
        check_bool("normalize_reward", self.normalize_reward)

    @property
    def effective_target_kl(self) -> float | None:
        """The KL budget in force: the given one (``0``: none) or the loss's default."""
        if self.target_kl is None:
            return get_loss(self.loss).default_target_kl
        return self.target_kl or None


def build_token_policy(
    config: TokenPPOConfig, spec: TokenEnvSpec, backbone_module: nn.Module | None = None
) -> TokenPolicy:
    """A fresh :class:`TokenPolicy` of ``config``'s sizes for an env of ``spec`` (torch's RNG)."""
    c = config
    backbone = backbone_module
    if backbone is None and c.backbone == "llama":
        backbone = llama_backbone(c.hidden_size, c.layers, c.heads, c.vocab_size, seed=None)
    elif backbone is None:
        backbone = TinyCausalTransformer(c.hidden_size, c.layers, c.heads, c.vocab_size)
    return TokenPolicy(
        backbone, spec.tokenizer, obs_dim=spec.obs_dim, chunk=c.chunk,
        instruction_length=spec.instruction_length, value_head=c.value_head,
        max_steps=spec.max_steps, value_input=c.value_input,
    )  # fmt: skip
