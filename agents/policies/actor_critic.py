"""Actor-critic policies for the fleet's workloads (torch).

One :class:`ActorCriticPolicy` covers ``Discrete`` actions (categorical head) and ``Box``
actions (diagonal Gaussian with a state-independent log standard deviation), on vector
observations (MLP, separate actor and critic) or stacked image frames (Nature CNN with a
shared trunk). Running observation statistics, when enabled, are module *buffers*: they
travel with the weights to the actors and are saved with the policy.

Actors call :meth:`ActorCriticPolicy.act` with batched numpy observations; the learner calls
:meth:`ActorCriticPolicy.evaluate_actions` on tensors. Sampling uses explicit uniform /
normal draws supplied by the caller (or a ``numpy`` generator), so a slot's actions depend
only on its own generator, whether it is stepped alone or batched with other slots.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import torch
from torch import nn

from fleetgym.agents.policies.numpy_policy import LOG_2PI, OBS_CLIP
from fleetgym.agents.policies.running_stats import combine_moments
from fleetgym.agents.types import Weights
from fleetgym.errors import UnsupportedSpaceError
from fleetgym.validation import check_bool, check_choice, check_float, check_int, quote

__all__ = ["ActorCriticPolicy"]

#: Widest hidden layer accepted.
MAX_WIDTH = 65_536


def _layer(in_features: int, out_features: int, gain: float) -> nn.Linear:
    # Orthogonal init with per-layer gains: the standard PPO recipe (sqrt(2) hidden,
    # 0.01 policy head, 1 value head) that keeps the initial policy near uniform.
    layer = nn.Linear(in_features, out_features)
    nn.init.orthogonal_(layer.weight, gain)
    nn.init.zeros_(layer.bias)
    return layer


def _mlp(in_features: int, hidden: Sequence[int], activation: type[nn.Module]) -> nn.Sequential:
    layers: list[nn.Module] = []
    width = in_features
    for h in hidden:
        layers += [_layer(width, int(h), math.sqrt(2.0)), activation()]
        width = int(h)
    return nn.Sequential(*layers)


class _NatureCNN(nn.Module):
    """The DQN/PPO Atari trunk: 3 conv layers and a dense layer, input scaled from uint8."""

    def __init__(self, in_channels: int, height: int, width: int, features: int) -> None:
        super().__init__()
        convs: list[nn.Module] = []
        for c_in, c_out, k, s in ((in_channels, 32, 8, 4), (32, 64, 4, 2), (64, 64, 3, 1)):
            conv = nn.Conv2d(c_in, c_out, k, stride=s)
            nn.init.orthogonal_(conv.weight, math.sqrt(2.0))
            if conv.bias is not None:
                nn.init.zeros_(conv.bias)
            convs += [conv, nn.ReLU()]
        self.convs = nn.Sequential(*convs, nn.Flatten())
        with torch.no_grad():
            flat = int(self.convs(torch.zeros(1, in_channels, height, width)).shape[1])
        self.dense = nn.Sequential(_layer(flat, features, math.sqrt(2.0)), nn.ReLU())

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.dense(self.convs(x / 255.0))


def _space_config(observation_space: gym.Space, action_space: gym.Space) -> dict[str, Any]:
    config: dict[str, Any] = {
        "obs_shape": list(observation_space.shape or ()),
        "obs_dtype": str(np.dtype(observation_space.dtype)),
    }
    if isinstance(action_space, gym.spaces.Discrete):
        config.update(action_kind="discrete", action_n=int(action_space.n))
    else:
        box = action_space
        assert isinstance(box, gym.spaces.Box)  # checked by the constructor before this
        config.update(
            action_kind="box",
            action_shape=list(box.shape),
            action_low=box.low.astype(float).tolist(),
            action_high=box.high.astype(float).tolist(),
        )
    return config


def _spaces_from_config(config: dict[str, Any]) -> tuple[gym.Space, gym.Space]:
    obs_dtype = np.dtype(config["obs_dtype"])
    shape = tuple(config["obs_shape"])
    if obs_dtype == np.uint8:
        observation_space: gym.Space = gym.spaces.Box(0, 255, shape, np.uint8)
    else:
        observation_space = gym.spaces.Box(-np.inf, np.inf, shape, obs_dtype)  # type: ignore[arg-type]
    if config["action_kind"] == "discrete":
        action_space: gym.Space = gym.spaces.Discrete(int(config["action_n"]))
    else:
        action_space = gym.spaces.Box(
            np.asarray(config["action_low"], np.float32).reshape(config["action_shape"]),
            np.asarray(config["action_high"], np.float32).reshape(config["action_shape"]),
            dtype=np.float32,
        )
    return observation_space, action_space


class ActorCriticPolicy(nn.Module):
    """A PPO actor-critic for ``Discrete`` or ``Box`` actions, with optional obs normalisation.

    Models the policy an actor acts with and the learner trains: a categorical or diagonal
    Gaussian action distribution (log-std a free parameter, not a function of the state)
    and a state-value head. With ``normalize_obs`` the observations are standardised by
    running statistics held in buffers (``obs_mean``, ``obs_var``, ``obs_count``), updated
    by the learner through :meth:`update_obs_stats` and shipped with the weights.

    Args:
        observation_space: A ``Box`` (1-D vectors for ``"mlp"``, (C, H, W) uint8 frames for
            ``"nature_cnn"``).
        action_space: ``Discrete`` or a 1-D ``Box``.
        network: ``"mlp"`` or ``"nature_cnn"``.
        hidden_sizes: MLP widths; for ``"nature_cnn"`` its single entry is the dense width.
        activation: ``"tanh"`` or ``"relu"``.
        normalize_obs: Standardise observations by running statistics (vector obs only).
        log_std_init: Initial log standard deviation (``Box`` actions).
        workload_name: Recorded in the saved JSON so a saved policy names its workload.

    Example:
        >>> import gymnasium as gym, numpy as np
        >>> obs_space = gym.spaces.Box(-1.0, 1.0, (4,), np.float32)
        >>> policy = ActorCriticPolicy(obs_space, gym.spaces.Discrete(2))
        >>> actions, log_probs, values = policy.act(np.zeros((3, 4), np.float32), rng=np.random.default_rng(0))
        >>> actions.shape, log_probs.shape, values.shape
        ((3,), (3,), (3,))
        >>> round(float(np.exp(log_probs[0])), 2)  # near-uniform at initialisation
        0.5

    Raises:
        UnsupportedSpaceError: For other observation or action spaces.
        ValueError: For an unknown network or activation, or empty ``hidden_sizes``.
    """

    obs_mean: torch.Tensor
    obs_var: torch.Tensor
    obs_count: torch.Tensor
    log_std: nn.Parameter

    def __init__(
        self,
        observation_space: gym.Space,
        action_space: gym.Space,
        *,
        network: str = "mlp",
        hidden_sizes: Sequence[int] = (64, 64),
        activation: str = "tanh",
        normalize_obs: bool = False,
        log_std_init: float = 0.0,
        workload_name: str | None = None,
    ) -> None:
        super().__init__()
        if not isinstance(observation_space, gym.spaces.Box):
            raise UnsupportedSpaceError(
                f"observation_space: expected a Box, actual {type(observation_space).__name__}"
            )
        if isinstance(action_space, gym.spaces.Discrete):
            self.discrete = True
            self.action_dim = int(action_space.n)
        elif isinstance(action_space, gym.spaces.Box) and len(action_space.shape) == 1:
            self.discrete = False
            self.action_dim = int(action_space.shape[0])
        else:
            raise UnsupportedSpaceError(
                f"action_space: expected Discrete or a 1-D Box, actual {action_space!r}"
            )
        check_choice("network", network, ("mlp", "nature_cnn"))
        check_choice("activation", activation, ("tanh", "relu"))
        normalize_obs = check_bool("normalize_obs", normalize_obs)
        log_std_init = check_float("log_std_init", log_std_init)
        if isinstance(hidden_sizes, (str, bytes)) or not isinstance(hidden_sizes, Sequence):
            raise TypeError(
                f"hidden_sizes: expected a sequence of ints, actual {quote(hidden_sizes)}"
            )
        if not hidden_sizes:
            raise ValueError("hidden_sizes: expected at least one width, actual ()")
        hidden = [
            check_int(f"hidden_sizes[{i}]", h, 1, MAX_WIDTH) for i, h in enumerate(hidden_sizes)
        ]
        obs_shape = tuple(observation_space.shape)
        if network == "mlp" and len(obs_shape) != 1:
            raise UnsupportedSpaceError(
                f"observation_space: expected 1-D vectors for an MLP, actual shape {obs_shape}"
            )
        if network == "nature_cnn" and len(obs_shape) != 3:
            raise UnsupportedSpaceError(
                f"observation_space: expected (C, H, W) frames for the CNN, actual shape {obs_shape}"
            )
        if normalize_obs and network != "mlp":
            raise ValueError("normalize_obs: expected False for image observations, actual True")

        self.observation_space = observation_space
        self.action_space = action_space
        self.obs_shape = obs_shape
        self.normalize_obs = bool(normalize_obs)
        self.config: dict[str, Any] = {
            "workload": workload_name,
            "network": network,
            "hidden_sizes": hidden,
            "activation": activation,
            "normalize_obs": bool(normalize_obs),
            "log_std_init": float(log_std_init),
            **_space_config(observation_space, action_space),
        }
        act_cls: type[nn.Module] = nn.Tanh if activation == "tanh" else nn.ReLU
        if network == "mlp":
            # Separate actor and critic bodies: value-scale gradients then cannot disturb
            # the policy features (the usual choice for MuJoCo).
            self.actor_body: nn.Module = _mlp(obs_shape[0], hidden, act_cls)
            self.critic_body: nn.Module = _mlp(obs_shape[0], hidden, act_cls)
            self.shared = False
            features = hidden[-1]
        else:
            self.actor_body = _NatureCNN(obs_shape[0], obs_shape[1], obs_shape[2], hidden[0])
            self.critic_body = nn.Identity()
            self.shared = True
            features = hidden[0]
        self.policy_head = _layer(features, self.action_dim, 0.01)
        self.value_head = _layer(features, 1, 1.0)
        if not self.discrete:
            self.log_std = nn.Parameter(torch.full((self.action_dim,), float(log_std_init)))
        if self.normalize_obs:
            self.register_buffer("obs_mean", torch.zeros(obs_shape, dtype=torch.float64))
            self.register_buffer("obs_var", torch.ones(obs_shape, dtype=torch.float64))
            self.register_buffer("obs_count", torch.zeros((), dtype=torch.float64))
            self._refresh_obs_cache()

    # ----------------------------------------------------------------- observations
    def _refresh_obs_cache(self) -> None:
        # float32 copies of the statistics for the hot path (the float64 buffers are the
        # source of truth; they are what is saved and shipped).
        self._norm_mean = self.obs_mean.float()
        self._norm_std = torch.sqrt(self.obs_var.float() + 1e-8)

    def update_obs_stats(self, obs: np.ndarray) -> None:
        """Fold a batch of raw observations into the running statistics (parallel Welford).

        No-op when ``normalize_obs`` is off.

        Args:
            obs: Raw (unnormalised) observations, any array reshapeable to
                ``(N, *obs_shape)``; an empty batch changes nothing.
        """
        if not self.normalize_obs:
            return
        batch = np.asarray(obs, dtype=np.float64).reshape((-1, *self.obs_shape))
        if batch.shape[0] == 0:
            return
        mean, var, count = combine_moments(
            self.obs_mean.numpy(), self.obs_var.numpy(), float(self.obs_count), batch
        )
        self.obs_mean.copy_(torch.from_numpy(mean))
        self.obs_var.copy_(torch.from_numpy(var))
        self.obs_count.fill_(count)
        self._refresh_obs_cache()

    def preprocess(self, obs: torch.Tensor) -> torch.Tensor:
        """Raw observations -> network input (float, normalised and clipped if enabled).

        Args:
            obs: Raw observations, shape ``(B, *obs_shape)``; with ``normalize_obs`` they are
                standardised by the running statistics and clipped to ``[-OBS_CLIP, OBS_CLIP]``.
        """
        if self.shared:
            return obs.float()  # the CNN scales uint8 frames itself
        x = obs.float()
        if self.normalize_obs:
            x = torch.clamp((x - self._norm_mean) / self._norm_std, -OBS_CLIP, OBS_CLIP)
        return x

    # ----------------------------------------------------------------- forward pieces
    def forward(self, obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Distribution parameters (logits or Gaussian means) and values for raw ``obs``.

        Args:
            obs: Raw observations, shape ``(B, *obs_shape)`` (uint8 frames for the CNN).

        Returns:
            ``(params, values)``: shape ``(B, action_dim)`` and ``(B,)``.
        """
        x = self.preprocess(obs)
        actor_features = self.actor_body(x)
        critic_features = actor_features if self.shared else self.critic_body(x)
        return self.policy_head(actor_features), self.value_head(critic_features).squeeze(-1)

    def log_prob(self, params: torch.Tensor, actions: torch.Tensor) -> torch.Tensor:
        """Log-probability of ``actions`` under the distribution with parameters ``params``.

        Args:
            params: Logits (``Discrete``) or Gaussian means (``Box``), shape
                ``(B, action_dim)``, as returned by :meth:`forward`.
            actions: Action indices, shape ``(B,)``, or continuous actions, shape
                ``(B, action_dim)`` (unclipped, as sampled).
        """
        if self.discrete:
            log_p = torch.log_softmax(params, dim=-1)
            return log_p.gather(-1, actions.long().reshape(-1, 1)).squeeze(-1)
        log_std = self.log_std.expand_as(params)
        z = (actions - params) / torch.exp(log_std)
        return (-0.5 * z.square() - log_std - 0.5 * LOG_2PI).sum(-1)

    def entropy(self, params: torch.Tensor) -> torch.Tensor:
        """Entropy of the action distribution per sample.

        Args:
            params: Logits or Gaussian means, shape ``(B, action_dim)``; for a Gaussian only
                the batch size is used (the entropy depends on the log-std alone).
        """
        if self.discrete:
            log_p = torch.log_softmax(params, dim=-1)
            return -(log_p.exp() * log_p).sum(-1)
        ent = 0.5 + 0.5 * LOG_2PI + self.log_std
        return ent.sum().expand(params.shape[0])

    def kl_divergence(
        self,
        params_p: torch.Tensor,
        params_q: torch.Tensor,
        log_std_p: torch.Tensor | None = None,
        log_std_q: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """Exact KL(p || q) per sample between two distributions of this policy's family.

        For Gaussian policies ``log_std_p``/``log_std_q`` default to the current log-std.

        Args:
            params_p, params_q: Logits or Gaussian means of ``p`` (e.g. the policy that
                collected the data) and ``q``, shape ``(B, action_dim)``.
            log_std_p, log_std_q: Log standard deviations of ``p`` and ``q``
                (``(action_dim,)``); None: this policy's current ``log_std``. Ignored for
                ``Discrete`` actions.
        """
        if self.discrete:
            log_p = torch.log_softmax(params_p, dim=-1)
            log_q = torch.log_softmax(params_q, dim=-1)
            return (log_p.exp() * (log_p - log_q)).sum(-1)
        ls_p = self.log_std if log_std_p is None else log_std_p
        ls_q = self.log_std if log_std_q is None else log_std_q
        var_p, var_q = torch.exp(2 * ls_p), torch.exp(2 * ls_q)
        kl = ls_q - ls_p + (var_p + (params_p - params_q).square()) / (2 * var_q) - 0.5
        return kl.sum(-1)

    def evaluate_actions(
        self, obs: torch.Tensor, actions: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Log-probabilities, entropies and values of ``actions`` taken at ``obs`` (with grad).

        Args:
            obs: Raw observations as a tensor, shape ``(B, *obs_shape)``.
            actions: The actions taken there, as in :meth:`log_prob`.
        """
        params, values = self(obs)
        return self.log_prob(params, actions), self.entropy(params), values

    # ----------------------------------------------------------------- actor side
    def _as_tensor(self, obs: np.ndarray) -> torch.Tensor:
        array = np.asarray(obs)
        if array.shape == self.obs_shape:
            array = array[None]
        if array.shape[1:] != self.obs_shape:
            raise ValueError(
                f"obs: expected shape (batch, {', '.join(map(str, self.obs_shape))}), "
                f"actual {array.shape}"
            )
        return torch.from_numpy(np.ascontiguousarray(array))

    def sample_from(
        self, params: torch.Tensor, uniforms: np.ndarray | None, normals: np.ndarray | None
    ) -> torch.Tensor:
        """Actions from explicit random draws (``uniforms`` (B,) or ``normals`` (B, D)).

        Inverse-CDF sampling for categorical actions and ``mean + std * normal`` for Gaussian
        ones; ``None`` draws give the deterministic (mode) action.

        Args:
            params: Logits or Gaussian means, shape ``(B, action_dim)``.
            uniforms: One uniform draw in [0, 1) per sample, shape ``(B,)`` (``Discrete``);
                None: the most probable action.
            normals: Standard normal draws, shape ``(B, action_dim)`` (``Box``); None: the
                mean.
        """
        if self.discrete:
            if uniforms is None:
                return params.argmax(-1)
            cdf = torch.softmax(params.double(), dim=-1).cumsum(-1)
            u = torch.from_numpy(np.asarray(uniforms, np.float64)).reshape(-1, 1)
            # Index of the first cdf entry above u; clamped for u ~ 1 and rounding in cdf.
            return torch.clamp((cdf <= u).sum(-1), max=self.action_dim - 1)
        if normals is None:
            return params
        eps = torch.from_numpy(np.asarray(normals, np.float32)).reshape(params.shape)
        return params + torch.exp(self.log_std) * eps

    def draw(
        self, rng: np.random.Generator, batch: int
    ) -> tuple[np.ndarray | None, np.ndarray | None]:
        """The random draws :meth:`sample_from` needs for ``batch`` samples from ``rng``.

        Args:
            rng: Generator the draws come from: ``batch`` uniforms (``Discrete``) or
                ``(batch, action_dim)`` float32 standard normals (``Box``).
            batch: Number of samples to draw for.

        Returns:
            ``(uniforms, None)`` for ``Discrete`` actions, ``(None, normals)`` for ``Box``.
        """
        if self.discrete:
            return rng.random(batch), None
        return None, rng.standard_normal((batch, self.action_dim), dtype=np.float32)

    @torch.no_grad()
    def act(
        self,
        obs: np.ndarray,
        deterministic: bool = False,
        rng: np.random.Generator | None = None,
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Actions, their log-probabilities and the values for a batch of raw observations.

        Args:
            obs: Observations, shape ``(B, *obs_shape)`` (a single unbatched one is accepted).
            deterministic: Take the mode instead of sampling.
            rng: Source of the sampling noise (a fresh unseeded generator if omitted).

        Returns:
            ``(actions, log_probs, values)`` as numpy arrays; Gaussian actions are unclipped.
        """
        obs_t = self._as_tensor(obs)
        params, values = self(obs_t)
        if deterministic:
            actions = self.sample_from(params, None, None)
        else:
            uniforms, normals = self.draw(rng or np.random.default_rng(), obs_t.shape[0])
            actions = self.sample_from(params, uniforms, normals)
        log_probs = self.log_prob(params, actions)
        return actions.numpy(), log_probs.numpy(), values.numpy()

    @torch.no_grad()
    def value(self, obs: np.ndarray) -> np.ndarray:
        """State values V(obs) for a batch of raw observations.

        Args:
            obs: Raw observations, shape ``(B, *obs_shape)`` (a single unbatched one is
                accepted).
        """
        return self(self._as_tensor(obs))[1].numpy()

    # ----------------------------------------------------------------- weights and files
    def get_weights(self) -> Weights:
        """The state_dict as numpy arrays (copies): what travels to the actors."""
        return {k: v.detach().cpu().numpy().copy() for k, v in self.state_dict().items()}

    def load_weights(self, weights: Weights) -> None:
        """Load weights produced by :meth:`get_weights` (strict: every key, right shapes).

        Args:
            weights: Parameter and buffer name -> numpy array, with exactly this policy's
                keys and shapes (the observation statistics included when enabled).

        Raises:
            ValueError: On missing/unexpected keys or a shape mismatch.
        """
        own = self.state_dict()
        missing = sorted(set(own) - set(weights))
        unexpected = sorted(set(weights) - set(own))
        if missing or unexpected:
            raise ValueError(
                f"weights: expected keys {sorted(own)}, actual missing {missing}, unexpected {unexpected}"
            )
        with torch.no_grad():
            for key, tensor in own.items():
                value = np.asarray(weights[key])
                if tuple(value.shape) != tuple(tensor.shape):
                    raise ValueError(
                        f"weights[{key!r}]: expected shape {tuple(tensor.shape)}, actual {value.shape}"
                    )
                tensor.copy_(torch.from_numpy(value))
        if self.normalize_obs:
            self._refresh_obs_cache()

    def save(self, path: str | Path) -> Path:
        """Write the weights (``torch.save`` of a plain state_dict) and a JSON config.

        ``path`` gets the tensors; ``path`` with suffix ``.json`` gets the configuration
        (workload name, spaces, network), so :meth:`load` rebuilds the policy without an env.

        Args:
            path: File for the weights (e.g. ``policy.pt``); missing parent directories are
                created, and existing files are overwritten.

        Returns:
            The path of the weights file.
        """
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        torch.save({k: v.detach().cpu() for k, v in self.state_dict().items()}, path)
        path.with_suffix(".json").write_text(json.dumps(self.config, indent=2) + "\n")
        return path

    @classmethod
    def from_config(cls, config: dict[str, Any]) -> ActorCriticPolicy:
        """A freshly initialised policy from a saved configuration dictionary.

        Args:
            config: The policy's ``config`` (as written to the JSON by :meth:`save`):
                spaces, ``network``, ``hidden_sizes``, ``activation``, ``normalize_obs``,
                and optionally ``log_std_init`` and ``workload``.
        """
        observation_space, action_space = _spaces_from_config(config)
        return cls(
            observation_space,
            action_space,
            network=config["network"],
            hidden_sizes=config["hidden_sizes"],
            activation=config["activation"],
            normalize_obs=config["normalize_obs"],
            log_std_init=config.get("log_std_init", 0.0),
            workload_name=config.get("workload"),
        )

    @classmethod
    def load(cls, path: str | Path) -> ActorCriticPolicy:
        """Rebuild a policy written by :meth:`save` (``torch.load(weights_only=True)``).

        Args:
            path: The weights file passed to :meth:`save`; its ``.json`` sibling must exist.

        Raises:
            FileNotFoundError: If the weights or the JSON file is missing.
            ValueError: If the file does not hold this policy's weights.
        """
        path = Path(path)
        config_path = path.with_suffix(".json")
        if not path.is_file() or not config_path.is_file():
            raise FileNotFoundError(
                f"expected a policy file and its JSON config, actual missing "
                f"{[str(p) for p in (path, config_path) if not p.is_file()]}"
            )
        policy = cls.from_config(json.loads(config_path.read_text()))
        state = torch.load(path, map_location="cpu", weights_only=True)
        if not isinstance(state, dict):
            raise ValueError(f"{path}: expected a state_dict, actual {type(state).__name__}")
        policy.load_weights({k: v.numpy() for k, v in state.items()})
        return policy
