"""Serving a token policy: batched autoregressive decoding of ``K D`` action tokens per request.

:class:`TokenPolicyModel` is the :class:`~fleetgym.agents.inference.model.ServedModel` of a
:class:`~fleetgym.agents.tokens.policy.TokenPolicy` (a small VLA-shaped policy). One batch
of requests is one call of :meth:`~fleetgym.agents.tokens.policy.TokenPolicy.act`: one
prefix pass over the batch's observations (and instructions), then one position per
token with the backbone's key/value cache, so a request costs a cache of its ``K D``
tokens, not ``K D`` full passes. Each token is drawn by inverse CDF at the request's own
uniform (its ``noise``), from the restricted softmax over the slim head's action window
(:func:`~fleetgym.agents.tokens.head.action_log_softmax`), the function the learner's
teacher-forced :meth:`~fleetgym.agents.tokens.policy.TokenPolicy.evaluate` ends in: the
behaviour log-probabilities the server answers are the learner's at the same weights, up
to float rounding, so importance ratios start at 1 (tested).

Request layout (fixed, so remote clients use shared-memory slots): ``obs`` is one float32
row ``[raw observation (obs_dim), step, instruction ids (L)]`` (:func:`pack_token_request`;
ids are integers below ``2**24``, exact in float32); ``noise`` is ``K D`` uniforms in
``[0, 1)``; the answer is ``tokens`` ``(K, D)`` int64, ``log_prob`` ``(K, D)`` float32,
``value`` float32 and ``policy_obs`` ``(obs_dim,)`` float32, the normalised observation the
policy saw (what a learner re-evaluates). The value is the state's, from the prefix
(``value_input="prefix"``, the default); with ``value_input="actions"`` it is that of the
decision sampled with the request's noise (a bootstrap request draws its noise as any
other).

Weights are the policy's ``state_dict`` as numpy arrays (:func:`token_policy_weights`;
a slim-head policy has dropped its full ``V``-row head, so a swap publishes the action rows
only),
optionally with the observation statistics under :data:`OBS_STATS_PREFIX` (``mean`` and
``var``, what a trainer publishes with them): with them the model standardises each
observation and clips it to ``[-OBS_CLIP, OBS_CLIP]`` (:func:`normalize_obs`), without them
it passes the observation through. The statistics thus change with the weights, between
batches, and every actor (local or served, thread or process) sees the same ones.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from fleetgym.agents.inference.batching import check_device
from fleetgym.agents.inference.model import ArraySpec, ModelSpec
from fleetgym.agents.rollout.token_rollout import OBS_CLIP
from fleetgym.agents.types import Weights
from fleetgym.validation import quote

#: Weights keys with this prefix are observation statistics, not network parameters.
OBS_STATS_PREFIX = "obs_rms."
#: Instruction ids travel as float32, exact below this bound.
MAX_INSTRUCTION_ID = 2**24


def obs_statistics(weights: Weights) -> tuple[np.ndarray, np.ndarray] | None:
    """The ``(mean, var)`` published with ``weights``, or ``None`` (no normalisation)."""
    mean = weights.get(OBS_STATS_PREFIX + "mean")
    var = weights.get(OBS_STATS_PREFIX + "var")
    return None if mean is None or var is None else (np.asarray(mean), np.asarray(var))


def normalize_obs(raw: np.ndarray, stats: tuple[np.ndarray, np.ndarray] | None) -> np.ndarray:
    """``raw`` as the policy sees it: standardised and clipped (float32), or as is.

    Example:
        >>> normalize_obs(np.array([3.0, 1e9]), (np.ones(2), np.full(2, 4.0)))
        array([ 1., 10.], dtype=float32)
    """
    raw = np.asarray(raw, np.float64)
    if stats is None:
        return raw.astype(np.float32)
    scaled = (raw - stats[0]) / np.sqrt(stats[1] + 1e-8)
    return np.clip(scaled, -OBS_CLIP, OBS_CLIP).astype(np.float32)


def token_policy_weights(policy: Any) -> Weights:
    """A token policy's ``state_dict`` as numpy arrays (copies, on the host)."""
    return {k: v.detach().cpu().numpy().copy() for k, v in policy.state_dict().items()}


def load_token_policy_weights(policy: Any, weights: Weights) -> None:
    """Load numpy weights into a token policy (strict on its own keys).

    Keys under :data:`OBS_STATS_PREFIX` are skipped.

    Raises:
        TypeError: If ``weights`` is not a dict.
        ValueError: If a parameter is missing, unknown or of another shape.
    """
    import torch

    if not isinstance(weights, dict):
        raise TypeError(f"weights: expected a dict of numpy arrays, actual {quote(weights)}")
    state = {
        k: torch.from_numpy(np.asarray(v))
        for k, v in weights.items()
        if not k.startswith(OBS_STATS_PREFIX)
    }
    mine = policy.state_dict()
    missing, unknown = sorted(set(mine) - set(state)), sorted(set(state) - set(mine))
    if missing or unknown:
        raise ValueError(
            f"weights: expected the token policy's keys, actual missing {missing[:4]}, "
            f"unknown {unknown[:4]}"
        )
    for key, value in state.items():
        if tuple(value.shape) != tuple(mine[key].shape):
            raise ValueError(
                f"weights[{key!r}]: expected shape {tuple(mine[key].shape)}, actual "
                f"{tuple(value.shape)}"
            )
    policy.load_state_dict(state)


def pack_token_request(
    obs: np.ndarray, step: np.ndarray, instruction: np.ndarray | None = None
) -> np.ndarray:
    """Rows ``[obs, step, instruction ids]`` (float32) of a batch, as the server takes them.

    Example:
        >>> pack_token_request(np.zeros((2, 3)), np.array([0, 7]), np.array([[4, 5], [6, 0]]))
        array([[0., 0., 0., 0., 4., 5.],
               [0., 0., 0., 7., 6., 0.]], dtype=float32)

    Raises:
        ValueError: For rows of different counts, or instruction ids outside
            ``[0, 2**24)``.
    """
    obs = np.asarray(obs, np.float32)
    obs = obs.reshape(obs.shape[0], -1)
    step = np.asarray(step, np.float32).reshape(-1, 1)
    parts = [obs, step]
    if instruction is not None:
        ids = np.asarray(instruction).reshape(obs.shape[0], -1)
        if ids.size and (ids.min() < 0 or ids.max() >= MAX_INSTRUCTION_ID):
            raise ValueError(
                f"instruction: expected ids in [0, 2**24), actual [{ids.min()}, {ids.max()}]"
            )
        parts.append(ids.astype(np.float32))
    if len({p.shape[0] for p in parts}) != 1:
        raise ValueError(
            f"obs, step, instruction: expected one row each per request, actual "
            f"{[p.shape[0] for p in parts]} rows"
        )
    return np.concatenate(parts, axis=1)


class TokenPolicyModel:
    """Serves a :class:`~fleetgym.agents.tokens.policy.TokenPolicy`: tokens, log-probs, value.

    Models the inference server of a VLA fleet (AcceRL's rollout workers asking one
    server for their actions): many requests decoded together, ``K D`` tokens each with a
    key/value cache, sampled from the same restricted distribution the learner
    recomputes.

    Args:
        policy: The token policy (its current weights are served until the next swap).
        device: Where decoding runs (``"cpu"``, ``"cuda[:N]"``).

    Example:
        >>> import torch
        >>> from fleetgym.agents.tokens import ActionTokenizer
        >>> from fleetgym.agents.tokens.backbones import TinyCausalTransformer
        >>> from fleetgym.agents.tokens.policy import TokenPolicy
        >>> torch.manual_seed(0) is not None
        True
        >>> tok = ActionTokenizer([-1.0] * 3, [1.0] * 3, num_bins=16, vocab_size=64)
        >>> net = TinyCausalTransformer(hidden_size=16, layers=1, heads=2, vocab_size=64)
        >>> model = TokenPolicyModel(TokenPolicy(net, tok, obs_dim=4, chunk=2))
        >>> request = pack_token_request(np.zeros((5, 4)), np.zeros(5))
        >>> out = model.forward(request, np.full((5, 6), 0.5))
        >>> out["tokens"].shape, out["log_prob"].shape, out["value"].shape, out["policy_obs"].shape
        ((5, 2, 3), (5, 2, 3), (5,), (5, 4))

    Raises:
        TypeError: If ``policy`` is not a TokenPolicy.
        TypeError, ValueError: If ``device`` is not one torch can use here, or has no
            bfloat16 for a ``bf16`` policy.
    """

    def __init__(self, policy: Any, device: str = "cpu") -> None:
        from fleetgym.agents.tokens.policy import TokenPolicy

        if not isinstance(policy, TokenPolicy):
            raise TypeError(f"policy: expected a TokenPolicy, actual {quote(policy)}")
        self.device = check_device("device", device)
        import torch

        from fleetgym.agents.tokens.local import bf16_supported

        if policy.bf16 and not bf16_supported(torch.device(self.device)):
            raise ValueError(
                f"device: expected a device with bfloat16 for a bf16 policy, actual "
                f"{self.device!r} without it"
            )
        self.policy = policy.to(self.device).eval()
        k, d = policy.chunk, policy.tokenizer.dims
        self._obs_dim, self._length = policy.obs_dim, policy.instruction_length
        self.spec = ModelSpec(
            ArraySpec((self._obs_dim + 1 + self._length,), "<f4"),
            ArraySpec((k * d,), "<f8"),
            (
                ("tokens", ArraySpec((k, d), "<i8")),
                ("log_prob", ArraySpec((k, d), "<f4")),
                ("value", ArraySpec((), "<f4")),
                ("policy_obs", ArraySpec((self._obs_dim,), "<f4")),
            ),
            uniform_noise=True,
        )
        #: The observation statistics in force (``None``: observations pass through).
        self.stats: tuple[np.ndarray, np.ndarray] | None = None

    def load_weights(self, weights: Weights) -> None:
        """Load numpy weights (see :func:`load_token_policy_weights`) and their statistics.

        Args:
            weights: The policy's ``state_dict`` as numpy arrays (:func:`token_policy_weights`),
                exactly its keys and shapes, optionally with ``obs_rms.mean`` and
                ``obs_rms.var`` ``(obs_dim,)``: with both, later requests are standardised
                and clipped; without them, observations pass through.

        Raises:
            TypeError: If ``weights`` is not a dict.
            ValueError: If the statistics are not of the observation's length, or a
                parameter is missing, unknown or of another shape.
        """
        stats = obs_statistics(weights) if isinstance(weights, dict) else None
        if stats is not None and {stats[0].shape, stats[1].shape} != {(self._obs_dim,)}:
            raise ValueError(
                f"weights: expected observation statistics of shape ({self._obs_dim},), "
                f"actual {stats[0].shape} and {stats[1].shape}"
            )
        load_token_policy_weights(self.policy, weights)
        self.stats = stats

    def forward(self, obs: np.ndarray, noise: np.ndarray) -> dict[str, np.ndarray]:
        """Decode one decision per request: ``K D`` tokens with the KV cache.

        Args:
            obs: Request rows ``(B, obs_dim + 1 + L)`` float32 (:func:`pack_token_request`):
                the raw observation, the env step, then ``L`` instruction ids.
            noise: ``(B, K D)`` uniforms in ``[0, 1)``: token ``j`` of a request is drawn by
                inverse CDF at its ``noise[:, j]``.

        Returns:
            ``"tokens"`` and ``"log_prob"`` ``(B, K, D)``, ``"value"`` ``(B,)`` and
            ``"policy_obs"`` ``(B, obs_dim)``, the normalised observation the policy saw.
        """
        import torch

        o = self._obs_dim
        seen = normalize_obs(obs[:, :o], self.stats)
        rest = torch.from_numpy(np.ascontiguousarray(obs[:, o:], np.float32)).to(self.device)
        instruction = rest[:, 1:].round().long() if self._length else None
        uniforms = torch.from_numpy(np.ascontiguousarray(noise, np.float64)).to(self.device)
        with torch.inference_mode():
            sample = self.policy.act(
                torch.from_numpy(seen).to(self.device), instruction, step=rest[:, 0],
                uniforms=uniforms,
            )  # fmt: skip
        return {
            "tokens": sample.tokens.cpu().numpy().astype(np.int64),
            "log_prob": sample.log_probs.cpu().numpy().astype(np.float32),
            "value": sample.values.cpu().numpy().astype(np.float32),
            "policy_obs": seen,
        }


__all__ = [
    "OBS_STATS_PREFIX",
    "TokenPolicyModel",
    "load_token_policy_weights",
    "normalize_obs",
    "obs_statistics",
    "pack_token_request",
    "token_policy_weights",
]
