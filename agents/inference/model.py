"""What an inference server runs: a model with a fixed per-request input and output layout.

A served model answers one *request* per observation. A request is an observation of a
fixed shape and dtype plus a small ``noise`` vector (float64): the random draws the
answer may depend on. Clients draw the noise from their own generators, so an actor's
actions depend only on its own random stream, whichever batch its request lands in; the
model itself is deterministic. Every answer has the same named outputs, each of a fixed
per-request shape and dtype. That fixed layout (:class:`ModelSpec`) is what lets a remote
client exchange requests through shared-memory slots without any serialisation.

:class:`ActorCriticModel` serves an :class:`~fleetgym.agents.policies.ActorCriticPolicy`:
outputs ``action``, ``log_prob`` and ``value`` (MLP policies through the numpy snapshot
the synchronous rollout uses, CNN policies through torch in inference mode).

This module imports numpy only; torch loads when an :class:`ActorCriticModel` is built.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

import numpy as np

from fleetgym.agents.inference.batching import check_device
from fleetgym.agents.types import Weights
from fleetgym.validation import check_bool, check_int

if TYPE_CHECKING:  # pragma: no cover - typing only
    from fleetgym.agents.policies import ActorCriticPolicy

#: Most dimensions / outputs a spec may declare (a guard against malformed specs).
MAX_DIMS = 8
MAX_OUTPUTS = 16


@dataclass(frozen=True)
class ArraySpec:
    """The per-request shape and dtype of one input or output array.

    Args:
        shape: Shape of one request's array, without the batch axis: a tuple of at most 8
            positive ints (``()``: one scalar per request).
        dtype: A plain numeric numpy dtype (``"float32"``, ``"<i8"``, ...); stored as its
            ``numpy.dtype(...).str`` (``"<f4"``).

    Raises:
        TypeError, ValueError: For a shape that is not such a tuple, or a structured or
            object dtype.
    """

    shape: tuple[int, ...]
    dtype: str

    def __post_init__(self) -> None:
        if not isinstance(self.shape, tuple) or len(self.shape) > MAX_DIMS:
            raise ValueError(
                f"shape: expected a tuple of at most {MAX_DIMS} ints, actual {self.shape!r}"
            )
        for i, n in enumerate(self.shape):
            check_int(f"shape[{i}]", n, low=1)
        dtype = np.dtype(self.dtype)
        if dtype.hasobject or dtype.fields is not None:
            raise TypeError(f"dtype: expected a plain numeric dtype, actual {self.dtype!r}")
        object.__setattr__(self, "dtype", dtype.str)

    @property
    def nbytes(self) -> int:
        """Bytes of one request's array."""
        return int(np.prod(self.shape, dtype=np.int64)) * np.dtype(self.dtype).itemsize


@dataclass(frozen=True)
class ModelSpec:
    """The fixed request layout of a served model.

    Args:
        obs: One observation.
        noise: The random draws of one request (float64).
        outputs: ``(name, spec)`` pairs of one answer, in order.
        uniform_noise: The draws are uniforms in ``[0, 1)`` (inverse-CDF sampling): a
            client refuses any other value.

    Example:
        >>> spec = ModelSpec(ArraySpec((4,), "float32"), ArraySpec((1,), "float64"),
        ...                  (("action", ArraySpec((1,), "int64")),))
        >>> spec.obs.dtype, spec.output_names
        ('<f4', ('action',))

    Raises:
        TypeError, ValueError: On a malformed layout.
    """

    obs: ArraySpec
    noise: ArraySpec
    outputs: tuple[tuple[str, ArraySpec], ...]
    uniform_noise: bool = False

    def __post_init__(self) -> None:
        object.__setattr__(self, "uniform_noise", check_bool("uniform_noise", self.uniform_noise))
        if np.dtype(self.noise.dtype) != np.float64:
            raise TypeError(f"noise.dtype: expected float64, actual {self.noise.dtype}")
        if not self.outputs or len(self.outputs) > MAX_OUTPUTS:
            raise ValueError(
                f"outputs: expected 1 to {MAX_OUTPUTS} outputs, actual {len(self.outputs)}"
            )
        names = [name for name, _ in self.outputs]
        if len(set(names)) != len(names) or not all(
            isinstance(n, str) and n.isidentifier() for n in names
        ):
            raise ValueError(f"outputs: expected distinct identifier names, actual {names}")
        if {"obs", "noise"} & set(names):
            raise ValueError(
                f"outputs: expected names other than 'obs' and 'noise', actual {names}"
            )

    @property
    def output_names(self) -> tuple[str, ...]:
        return tuple(name for name, _ in self.outputs)

    def to_json(self) -> dict[str, Any]:
        """A JSON-able description (what a remote client receives in its handshake)."""

        def one(a: ArraySpec) -> dict[str, Any]:
            return {"shape": list(a.shape), "dtype": a.dtype}

        return {
            "obs": one(self.obs),
            "noise": one(self.noise),
            "outputs": [[name, one(a)] for name, a in self.outputs],
            "uniform_noise": self.uniform_noise,
        }

    @classmethod
    def from_json(cls, data: Any) -> ModelSpec:
        """Rebuild a spec from :meth:`to_json` output.

        Args:
            data: The dict :meth:`to_json` returns, also after a JSON round trip (lists for
                tuples); a missing ``"uniform_noise"`` reads as ``False``.

        Raises:
            ValueError: If ``data`` is not such a description.
        """
        try:

            def one(d: Any) -> ArraySpec:
                return ArraySpec(tuple(int(n) for n in d["shape"]), str(d["dtype"]))

            return cls(
                one(data["obs"]),
                one(data["noise"]),
                tuple((str(name), one(d)) for name, d in data["outputs"]),
                data.get("uniform_noise", False),
            )
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            raise ValueError(f"spec: expected a ModelSpec description, actual error {exc}") from exc


@runtime_checkable
class ServedModel(Protocol):
    """What :class:`~fleetgym.agents.inference.InferenceServer` runs.

    ``forward`` takes a batch ``(B, *obs.shape)`` of observations and ``(B, *noise.shape)`` of
    draws and returns each output of :attr:`spec` with a leading batch axis. It must be
    deterministic given its inputs and weights, and is only ever called from the server's
    thread, so it needs no locking.
    """

    spec: ModelSpec

    def forward(self, obs: np.ndarray, noise: np.ndarray) -> dict[str, np.ndarray]:
        """Answer a batch of requests.

        Args:
            obs: Observations ``(B, *spec.obs.shape)`` of ``spec.obs.dtype``; the server
                passes only finite values.
            noise: Draws ``(B, *spec.noise.shape)``, float64 and finite (in ``[0, 1)`` where
                ``spec.uniform_noise``); zeros for a request submitted without noise.

        Returns:
            Each output of ``spec.outputs`` by name, of shape ``(B, *its shape)``.
        """
        ...

    def load_weights(self, weights: Weights) -> None:
        """Replace the weights (called between batches).

        Args:
            weights: The numpy arrays by name given to ``InferenceServer.set_weights``. An
                exception rejects them: the server keeps its version and the model as it is.
        """
        ...


class ActorCriticModel:
    """Serves an :class:`~fleetgym.agents.policies.ActorCriticPolicy`: action, log-prob, value.

    The noise of a request is the draw the synchronous rollout would take from the actor's
    generator: one uniform for a categorical policy (inverse-CDF sampling), ``action_dim``
    standard normals for a Gaussian one. A request with zero noise still carries the right
    ``value`` (used for bootstrap values, whose action is discarded).

    Args:
        policy: The policy (its current weights are served until the next swap).
        device: Where the forward pass runs; on ``"cpu"`` MLP policies use the numpy
            snapshot of the synchronous rollout, elsewhere torch.

    Example:
        >>> from fleetgym.agents.workloads import get_workload
        >>> model = ActorCriticModel(get_workload("CartPole-v1").make_policy())
        >>> out = model.forward(np.zeros((3, 4), np.float32), np.full((3, 1), 0.5))
        >>> sorted(out), out["action"].shape, out["value"].shape
        (['action', 'log_prob', 'value'], (3,), (3,))

    Raises:
        TypeError, ValueError: If ``device`` is not ``"cpu"`` or a CUDA device torch can
            use here (see :func:`~fleetgym.agents.inference.batching.check_device`).
    """

    def __init__(self, policy: ActorCriticPolicy, device: str = "cpu") -> None:
        self.device = check_device("device", device)
        self.policy = policy
        if device != "cpu":
            policy.to(device)
        policy.eval()
        obs = ArraySpec(tuple(policy.obs_shape), np.dtype(policy.observation_space.dtype).str)
        if policy.discrete:
            noise, action = ArraySpec((1,), "<f8"), ArraySpec((), "<i8")
        else:
            noise = ArraySpec((policy.action_dim,), "<f8")
            action = ArraySpec((policy.action_dim,), "<f4")
        self.spec = ModelSpec(
            obs,
            noise,
            (
                ("action", action),
                ("log_prob", ArraySpec((), "<f4")),
                ("value", ArraySpec((), "<f4")),
            ),
            uniform_noise=bool(policy.discrete),
        )
        self._fast: Any = None
        self._refresh()

    def _refresh(self) -> None:
        from fleetgym.agents.policies import NumpyActorCritic

        cpu_mlp = self.device == "cpu" and not self.policy.shared
        self._fast = NumpyActorCritic(self.policy) if cpu_mlp else None

    def load_weights(self, weights: Weights) -> None:
        """Load a numpy state_dict (strict, as the policy's ``load_weights``).

        Args:
            weights: Parameter and buffer name -> numpy array, exactly the policy's keys and
                shapes (what its ``get_weights()`` returns).

        Raises:
            ValueError: On missing or unexpected keys or a shape mismatch.
        """
        self.policy.load_weights(weights)
        self._refresh()

    def forward(self, obs: np.ndarray, noise: np.ndarray) -> dict[str, np.ndarray]:
        """Actions, log-probabilities and values of a batch.

        Args:
            obs: Observations ``(B, *obs_shape)`` of the observation space's dtype.
            noise: Draws ``(B, 1)`` for a categorical policy (a uniform in ``[0, 1)`` each,
                sampled by inverse CDF) or ``(B, action_dim)`` standard normals for a
                Gaussian one (``action = mean + std * normal``).

        Returns:
            ``"action"``, ``"log_prob"`` and ``"value"``, each with a leading batch axis
            (the layout of :attr:`spec`).
        """
        import torch

        policy = self.policy
        uniforms = noise[:, 0] if policy.discrete else None
        normals = None if policy.discrete else noise.astype(np.float32)
        if self._fast is not None:
            params, values = self._fast.forward(obs)
            actions, log_probs = self._fast.sample(params, uniforms, normals)
        else:
            with torch.inference_mode():
                params_t, values_t = policy(torch.from_numpy(obs).to(self.device))
                if self.device == "cpu" or policy.discrete:
                    params_t, values_t = params_t.cpu(), values_t.cpu()
                    actions_t = policy.sample_from(params_t, uniforms, normals)
                    log_probs = policy.log_prob(params_t, actions_t).cpu().numpy()
                else:  # draws made on the host, moved to the device
                    eps = torch.from_numpy(np.asarray(normals)).to(self.device)
                    actions_t = policy.sample_from(params_t, None, None) + eps * torch.exp(
                        policy.log_std
                    )
                    log_probs = policy.log_prob(params_t, actions_t).cpu().numpy()
                actions, values = actions_t.cpu().numpy(), values_t.cpu().numpy()
        return {
            "action": np.asarray(actions),
            "log_prob": np.asarray(log_probs, np.float32),
            "value": np.asarray(values, np.float32),
        }


def as_served_model(policy: Any, device: str = "cpu") -> ServedModel:
    """``policy`` as a :class:`ServedModel` (an ActorCriticPolicy is wrapped).

    Raises:
        TypeError: If it is neither.
    """
    if isinstance(policy, ServedModel) and isinstance(getattr(policy, "spec", None), ModelSpec):
        return policy
    try:
        from fleetgym.agents.policies import ActorCriticPolicy
    except ImportError:  # pragma: no cover - torch missing
        ActorCriticPolicy = None  # type: ignore[assignment,misc]  # noqa: N806
    if ActorCriticPolicy is not None and isinstance(policy, ActorCriticPolicy):
        return ActorCriticModel(policy, device)
    raise TypeError(
        "policy: expected an ActorCriticPolicy or a ServedModel (spec, forward, "
        f"load_weights), actual {type(policy).__name__}"
    )
