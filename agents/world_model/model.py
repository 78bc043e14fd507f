"""The world model: an ensemble of probabilistic MLPs over (observation, action).

:class:`WorldModel` learns ``p(Δo, r, done | o, a)`` from real transitions: inputs and
targets normalised with the training data's statistics, each member trained on its own
shuffle of the same data, a held-out split scoring every member per head (observation
change, reward, termination), the best ``elites`` members kept for prediction. It
predicts the elite mean (:meth:`WorldModel.predict`) or samples one member per row
(:meth:`WorldModel.step`, as imagined rollouts do), and reports the ensemble's
disagreement as the per-step uncertainty.
"""

from __future__ import annotations

import copy
import logging
import math
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import torch

from fleetgym.agents.files import check_path
from fleetgym.agents.world_model.buffer import TransitionBuffer
from fleetgym.agents.world_model.checkpoint import apply_state, check_state, model_state
from fleetgym.agents.world_model.ensemble import EnsembleMLP, gaussian_nll
from fleetgym.agents.world_model.spaces import SpaceCodec
from fleetgym.validation import check_bool, check_float, check_int, quote

logger = logging.getLogger(__name__)

__all__ = ["FitReport", "ModelDivergedError", "StepPrediction", "WorldModel"]

#: Widest hidden layer and most members accepted (a typo such as 2e6 fails at once).
MAX_WIDTH, MAX_MEMBERS = 4096, 64
#: Probability above which a predicted termination counts as one.
TERMINATION_THRESHOLD = 0.5
#: The default bound on the global gradient norm of one step of the ensemble (all
#: members together; each member's loss is a mean over its minibatch).
MAX_GRAD_NORM = 10.0


class ModelDivergedError(ValueError):
    """A fit produced a non-finite loss; the model keeps its parameters from before it."""


@dataclass
class FitReport:
    """What one :meth:`WorldModel.fit` did and how well the model predicts held-out data.

    Attributes:
        version: The model's version after the fit (its number of fits so far).
        epochs: Epochs (passes over the training split) the fit ran.
        updates: Gradient steps of the ensemble in the fit.
        train_samples: Transitions trained on.
        holdout_samples: Transitions held out for validation.
        validation: Held-out loss per head (``"obs"``, ``"reward"``, ``"termination"``),
            averaged over the elites: normalised MSE of the observation change and of the
            reward, binary cross-entropy of termination (0 without a termination head).
        elites: Indices of the members kept for prediction (the best held-out scores),
            ascending.
        wall_s: Wall-clock seconds of the fit.
    """

    version: int
    epochs: int
    updates: int
    train_samples: int
    holdout_samples: int
    # Held-out loss per head, averaged over the elites: normalised MSE of the observation
    # change and of the reward, binary cross-entropy of termination.
    validation: dict[str, float] = field(default_factory=dict)
    elites: list[int] = field(default_factory=list)
    wall_s: float = 0.0

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class StepPrediction:
    """One batched model step: next observations, rewards, terminations, uncertainty.

    Attributes:
        next_obs: Predicted next observations, flat, float32 ``(N, obs_dim)``.
        reward: Predicted rewards, float32 ``(N,)``.
        terminated: Predicted terminations (probability above 0.5; always False without a
            termination head), bool ``(N,)``.
        uncertainty: The elites' disagreement per row: RMS over the targets of the spread
            of their predicted means, in normalised units (0 with one elite), ``(N,)``.
    """

    next_obs: np.ndarray  # (N, obs_dim) float32
    reward: np.ndarray  # (N,) float32
    terminated: np.ndarray  # (N,) bool
    uncertainty: np.ndarray  # (N,) float32, the elites' disagreement (normalised units)

    def __iter__(self) -> Any:
        """``next_obs, reward, terminated, uncertainty = prediction`` unpacks it."""
        return iter((self.next_obs, self.reward, self.terminated, self.uncertainty))


def _normaliser(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    mean = x.mean(axis=0)
    std = x.std(axis=0)
    return mean.astype(np.float32), np.where(std < 1e-6, 1.0, std).astype(np.float32)


class WorldModel:
    """An ensemble of Gaussian MLPs predicting the observation change, reward and termination.

    Args:
        observation_space: The env's observation space (flat: a 1-D Box, or Discrete,
            MultiDiscrete, MultiBinary, Dict, Tuple through Gymnasium's flattening).
        action_space: Discrete, MultiDiscrete, MultiBinary or a 1-D Box.
        ensemble_size: Members (MBPO: 7).
        elites: Members kept for prediction, the best on held-out data (MBPO: 5).
        hidden_sizes: Hidden widths of each member (MBPO: four layers of 200).
        lr: Adam's learning rate.
        weight_decay: L2 penalty on the weights.
        learn_termination: Learn the termination head (``False``: never terminates, for
            envs that do not end, e.g. Pendulum).
        max_grad_norm: Every gradient step's global norm (all members together) is
            clipped to it (default 10).
        seed: Seeds the initial weights and the shuffles. The held-out split is fixed by
            the rows' own keys (:attr:`TransitionBuffer.holdout_key`), not redrawn per fit.

    Example:
        >>> env = gym.make("CartPole-v1")
        >>> data = TransitionBuffer.collect(env, 300, seed=0)
        >>> model = WorldModel(env.observation_space, env.action_space, ensemble_size=3,
        ...                    elites=2, hidden_sizes=(32, 32), seed=0)
        >>> report = model.fit(data, epochs=2)
        >>> report.version, len(report.elites)
        (1, 2)
        >>> model.predict(data.obs[:4], data.actions[:4]).next_obs.shape
        (4, 4)

    Raises:
        TypeError / ValueError: For a bad count or width, ``elites > ensemble_size``.
        fleetgym.errors.UnsupportedSpaceError: For spaces the model cannot take (images).
    """

    def __init__(
        self,
        observation_space: gym.Space,
        action_space: gym.Space,
        *,
        ensemble_size: int = 7,
        elites: int = 5,
        hidden_sizes: Sequence[int] = (200, 200, 200, 200),
        lr: float = 1e-3,
        weight_decay: float = 1e-5,
        learn_termination: bool = True,
        max_grad_norm: float = MAX_GRAD_NORM,
        seed: int = 0,
    ) -> None:
        self.codec = SpaceCodec(observation_space, action_space)
        self.ensemble_size = check_int("ensemble_size", ensemble_size, 1, MAX_MEMBERS)
        self.num_elites = check_int("elites", elites, 1, self.ensemble_size)
        if isinstance(hidden_sizes, (str, bytes)) or not isinstance(hidden_sizes, Sequence):
            raise TypeError(
                f"hidden_sizes: expected a sequence of ints, actual {quote(hidden_sizes)}"
            )
        if not hidden_sizes:
            raise ValueError("hidden_sizes: expected at least one width, actual ()")
        self.hidden_sizes = [
            check_int(f"hidden_sizes[{i}]", h, 1, MAX_WIDTH) for i, h in enumerate(hidden_sizes)
        ]
        self.lr = check_float("lr", lr, 0.0, strict=True)
        self.weight_decay = check_float("weight_decay", weight_decay, 0.0)
        self.learn_termination = check_bool("learn_termination", learn_termination)
        self.max_grad_norm = check_float("max_grad_norm", max_grad_norm, 0.0, strict=True)
        self.seed = check_int("seed", seed, 0, 2**63 - 1)
        d, a = self.codec.obs_dim, self.codec.action_dim
        self.targets = d + 1
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(self.seed)
            self.net = EnsembleMLP(self.ensemble_size, d + a, self.targets, self.hidden_sizes)
        self.optimizer = torch.optim.Adam(self.net.parameters(), lr=self.lr)
        self.generator = torch.Generator().manual_seed(self.seed)
        self.rng = np.random.default_rng([self.seed, 0x3D])
        self.in_mean = np.zeros(d + a, np.float32)
        self.in_std = np.ones(d + a, np.float32)
        self.out_mean = np.zeros(self.targets, np.float32)
        self.out_std = np.ones(self.targets, np.float32)
        self.elites = list(range(self.num_elites))
        #: Fits so far; imagined samples record the version that produced them.
        self.version = 0
        self._pos_weight = torch.tensor(1.0)
        self.last_report: FitReport | None = None
        #: The buffer row ids (:attr:`TransitionBuffer.row_ids`) the last fit held out
        #: and trained on.
        self.last_holdout_rows = np.zeros(0, np.int64)
        self.last_train_rows = np.zeros(0, np.int64)

    # ----------------------------------------------------------------- spaces
    @property
    def observation_space(self) -> gym.Space:
        return self.codec.observation_space

    @property
    def action_space(self) -> gym.Space:
        return self.codec.action_space

    @property
    def obs_dim(self) -> int:
        return self.codec.obs_dim

    # ----------------------------------------------------------------- tensors
    def _inputs(self, obs: np.ndarray, actions: Any) -> torch.Tensor:
        x = np.concatenate([obs, self.codec.encode_actions(actions)], axis=1)
        return torch.from_numpy((x - self.in_mean) / self.in_std)

    def _targets(self, data: TransitionBuffer) -> np.ndarray:
        y = np.concatenate([data.next_obs - data.obs, data.rewards[:, None]], axis=1)
        return y.astype(np.float32)

    # ----------------------------------------------------------------- training
    def fit(
        self,
        data: TransitionBuffer,
        *,
        epochs: int | None = None,
        max_epochs: int = 50,
        batch_size: int = 256,
        holdout: float = 0.2,
        patience: int = 5,
        max_updates: int | None = None,
    ) -> FitReport:
        """Train every member on ``data``; score them on a held-out split; pick the elites.

        Args:
            data: Real transitions (at least 10).
            epochs: Passes over the training split (``None``: until the held-out loss has
                not improved by 1 % for ``patience`` epochs, at most ``max_epochs``).
            max_epochs: Bound when ``epochs`` is ``None``.
            batch_size: Minibatch per member.
            holdout: Share of ``data`` held out for validation (``(0, 0.5]``): the rows
                whose :attr:`~TransitionBuffer.holdout_key` is below it, drawn once when
                each row entered the buffer, so successive (warm-started) fits on a
                growing buffer never validate on a row an earlier fit trained on.
            patience: Epochs without improvement before stopping.
            max_updates: Bound on gradient steps (``None``: none).

        Returns:
            The :class:`FitReport`; :attr:`version` is incremented.

        Raises:
            ValueError: For fewer than 10 transitions, spaces other than the model's,
                or a bad count or share.
            ModelDivergedError: If a loss became NaN or infinite (the model is rolled back
                to its parameters from before the fit).
        """
        if not isinstance(data, TransitionBuffer):
            raise TypeError(f"data: expected a TransitionBuffer, actual {type(data).__name__}")
        if data.obs.shape[1] != self.obs_dim:
            raise ValueError(
                f"data: expected observations of {self.obs_dim} values (the model's space), "
                f"actual {data.obs.shape[1]}"
            )
        n = len(data)
        if n < 10:
            raise ValueError(f"data: expected at least 10 transitions, actual {n}")
        if epochs is not None:
            epochs = check_int("epochs", epochs, 1, 10_000)
        max_epochs = check_int("max_epochs", max_epochs, 1, 10_000)
        batch_size = check_int("batch_size", batch_size, 1, 1 << 20)
        holdout = check_float("holdout", holdout, 0.0, 0.5, strict=True)
        patience = check_int("patience", patience, 1, 10_000)
        if max_updates is not None:
            max_updates = check_int("max_updates", max_updates, 1)
        started = time.perf_counter()
        # Everything a fit changes, so that a fit that fails leaves the model as it was.
        snapshot = self._snapshot()
        try:
            report = self._fit(data, epochs, max_epochs, batch_size, patience, holdout, max_updates)
        except RuntimeError as exc:
            self._restore(snapshot)
            if "overflow" not in str(exc):
                raise
            # Adam's step raises once lr / (1 - beta1^t) leaves float32 (e.g. lr=1e300).
            raise ModelDivergedError(
                f"world model fit {self.version + 1}: expected finite gradient steps, actual "
                f"one that overflowed ({exc}); lower lr (the model keeps its parameters "
                "from before this fit)"
            ) from None
        except BaseException:
            self._restore(snapshot)
            raise
        report.wall_s = time.perf_counter() - started
        logger.debug("world model fit: %s", report)
        return report

    def _snapshot(self) -> dict[str, Any]:
        return {
            "net": {k: v.detach().clone() for k, v in self.net.state_dict().items()},
            "optimizer": copy.deepcopy(self.optimizer.state_dict()),
            "normaliser": {
                k: getattr(self, k).copy() for k in ("in_mean", "in_std", "out_mean", "out_std")
            },
            "pos_weight": self._pos_weight.clone(),
            "generator": self.generator.get_state(),
            "rng": copy.deepcopy(self.rng.bit_generator.state),
        }

    def _restore(self, snapshot: dict[str, Any]) -> None:
        self.net.load_state_dict(snapshot["net"])
        self.optimizer.load_state_dict(snapshot["optimizer"])
        for k, v in snapshot["normaliser"].items():
            setattr(self, k, v)
        self._pos_weight = snapshot["pos_weight"]
        self.generator.set_state(snapshot["generator"])
        self.rng.bit_generator.state = snapshot["rng"]

    def _fit(
        self,
        data: TransitionBuffer,
        epochs: int | None,
        max_epochs: int,
        batch_size: int,
        patience: int,
        holdout: float,
        max_updates: int | None,
    ) -> FitReport:
        held = data.holdout_key < holdout
        if not held.any():  # a tiny buffer: the row of the smallest key
            held[int(np.argmin(data.holdout_key))] = True
        if held.all():  # keep one training row: the largest key
            held[int(np.argmax(data.holdout_key))] = False
        hold, train = np.flatnonzero(held), np.flatnonzero(~held)
        self.last_holdout_rows = data.row_ids[hold].copy()
        self.last_train_rows = data.row_ids[train].copy()
        x_all = np.concatenate([data.obs, self.codec.encode_actions(data.actions)], axis=1)
        y_all = self._targets(data)
        self.in_mean, self.in_std = _normaliser(x_all[train])
        with_next = train[data.has_next[train]]
        if len(with_next) < 2:
            raise ValueError(
                f"data: expected at least 2 training transitions with a next observation, "
                f"actual {len(with_next)}"
            )
        self.out_mean, self.out_std = _normaliser(y_all[with_next])
        r_mean, r_std = _normaliser(y_all[train, -1:])
        self.out_mean[-1], self.out_std[-1] = r_mean[0], r_std[0]
        x = torch.from_numpy((x_all - self.in_mean) / self.in_std)
        y = torch.from_numpy((y_all - self.out_mean) / self.out_std)
        mask = np.ones(y_all.shape, np.float32)
        mask[~data.has_next, :-1] = 0.0
        w = torch.from_numpy(mask)
        done = torch.from_numpy(data.terminated.astype(np.float32))
        # Terminations are rare (CartPole: one step in tens): weigh them up by the square
        # root of the class ratio (a compromise between missed and false ends), up to 10x.
        share = float(data.terminated[train].mean())
        ratio = math.sqrt((1 - share) / share) if share > 0 else 1.0
        self._pos_weight = torch.tensor(min(10.0, ratio))
        train_t = torch.from_numpy(train)
        e = self.ensemble_size
        best = math.inf
        stale, updates, epoch = 0, 0, 0
        budget = epochs if epochs is not None else max_epochs
        for epoch in range(1, budget + 1):
            self.net.train()
            perms = torch.stack(
                [train_t[torch.randperm(len(train), generator=self.generator)] for _ in range(e)]
            )
            for lo in range(0, len(train), batch_size):
                idx = perms[:, lo : lo + batch_size]
                loss = self._loss(x[idx], y[idx], w[idx], done[idx])
                if not bool(torch.isfinite(loss)):
                    raise ModelDivergedError(
                        f"world model fit {self.version + 1}, epoch {epoch}: expected a finite "
                        f"loss, actual {loss.item()} (lower lr; the model keeps its "
                        "parameters from before this fit)"
                    )
                self.optimizer.zero_grad(set_to_none=True)
                loss.backward()
                torch.nn.utils.clip_grad_norm_(self.net.parameters(), self.max_grad_norm)
                self.optimizer.step()
                updates += 1
                if max_updates is not None and updates >= max_updates:
                    break
            scores = self._validate(x[hold], y[hold], w[hold], done[hold])
            total = float(np.mean(np.sort(scores["score"])[: self.num_elites]))
            if max_updates is not None and updates >= max_updates:
                break
            if epochs is None:
                if total < best * 0.99 or best == math.inf:
                    best, stale = total, 0
                else:
                    stale += 1
                    if stale >= patience:
                        break
        scores = self._validate(x[hold], y[hold], w[hold], done[hold])
        if not all(np.isfinite(v).all() for v in scores.values()):
            raise ModelDivergedError(
                f"world model fit {self.version + 1}: expected finite held-out losses, actual "
                f"{ {k: v.tolist() for k, v in scores.items()} } (the model keeps its parameters "
                "from before this fit)"
            )
        self.elites = sorted(int(i) for i in np.argsort(scores["score"])[: self.num_elites])
        self.version += 1
        validation = {
            head: float(np.mean(scores[head][self.elites]))
            for head in ("obs", "reward", "termination")
        }
        self.last_report = FitReport(
            version=self.version,
            epochs=epoch,
            updates=updates,
            train_samples=len(train),
            holdout_samples=len(hold),
            validation=validation,
            elites=list(self.elites),
        )
        return self.last_report

    def _loss(
        self, x: torch.Tensor, y: torch.Tensor, w: torch.Tensor, done: torch.Tensor
    ) -> torch.Tensor:
        mean, log_var, logit = self.net(x)
        loss = gaussian_nll(mean, log_var, y, w).sum()
        if self.learn_termination:
            loss = (
                loss
                + torch.nn.functional.binary_cross_entropy_with_logits(
                    logit, done, reduction="none", pos_weight=self._pos_weight
                )
                .mean(dim=1)
                .sum()
            )
        decay = sum((m.weight**2).sum() for m in self._linears())
        return loss + self.net.bound_penalty() + self.weight_decay * decay

    def _linears(self) -> list[Any]:
        return [
            m for m in self.net.modules() if isinstance(getattr(m, "weight", None), torch.Tensor)
        ]

    @torch.no_grad()
    def _validate(
        self, x: torch.Tensor, y: torch.Tensor, w: torch.Tensor, done: torch.Tensor
    ) -> dict[str, np.ndarray]:
        self.net.eval()
        e = self.ensemble_size
        mean, _, logit = self.net(x.unsqueeze(0).expand(e, -1, -1))
        err = (mean - y.unsqueeze(0)) ** 2
        wo = w[:, :-1].unsqueeze(0)
        obs_mse = ((err[..., :-1] * wo).sum(dim=(1, 2)) / wo.sum().clamp_min(1.0)).numpy()
        rew_mse = err[..., -1].mean(dim=1).numpy()
        bce = (
            torch.nn.functional.binary_cross_entropy_with_logits(
                logit, done.unsqueeze(0).expand(e, -1), reduction="none"
            )
            .mean(dim=1)
            .numpy()
        )
        if not self.learn_termination:
            bce = np.zeros(e, np.float32)
        return {
            "obs": obs_mse,
            "reward": rew_mse,
            "termination": bce,
            "score": obs_mse + rew_mse + bce,
        }

    # ----------------------------------------------------------------- prediction
    @torch.no_grad()
    def _forward(
        self, obs: np.ndarray, actions: Any
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        obs = self.codec.flatten_batch(obs)
        x = self._inputs(obs, actions)
        self.net.eval()
        elites = torch.as_tensor(self.elites)
        mean, log_var, logit = self.net(x.unsqueeze(0).expand(self.ensemble_size, -1, -1))
        return mean[elites], log_var[elites], logit[elites]

    def _decode(self, obs: np.ndarray, delta: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        out = delta * self.out_std + self.out_mean
        return (obs + out[:, :-1]).astype(np.float32), out[:, -1].astype(np.float32)

    def predict(self, obs: Any, actions: Any) -> StepPrediction:
        """The elites' mean prediction for a batch (deterministic).

        Args:
            obs: Flat observations, shape (N, obs_dim).
            actions: N actions of the action space.
        """
        obs = self.codec.flatten_batch(obs)
        mean, _, logit = self._forward(obs, actions)
        mu = mean.mean(0).numpy()
        next_obs, reward = self._decode(obs, mu)
        p_done = torch.sigmoid(logit).mean(0).numpy()
        terminated = (p_done > TERMINATION_THRESHOLD) & self.learn_termination
        return StepPrediction(next_obs, reward, terminated, self._disagreement(mean))

    def step(
        self,
        obs: Any,
        actions: Any,
        members: np.ndarray,
        rng: np.random.Generator,
        *,
        sample: bool = True,
    ) -> StepPrediction:
        """One imagined step: each row follows elite ``members[i]`` (an index into the elites).

        Args:
            obs: Flat observations (N, obs_dim).
            actions: N actions.
            members: Elite index per row, ints in ``[0, elites)`` (a trajectory keeps its
                member, drawn once from a seeded generator).
            rng: Source of the Gaussian noise when ``sample``.
            sample: Draw from the member's Gaussian (``False``: its mean).
        """
        obs = self.codec.flatten_batch(obs)
        mean, log_var, logit = self._forward(obs, actions)
        rows = np.arange(obs.shape[0])
        members = np.asarray(members)
        if (
            members.shape != rows.shape
            or members.dtype.kind not in "iu"
            or (members < 0).any()
            or (members >= self.num_elites).any()
        ):
            raise ValueError(
                f"members: expected {rows.size} ints in [0, {self.num_elites}) (elite indices), "
                f"actual {quote(members.tolist())}"
            )
        mu = mean.numpy()[members, rows]
        if sample:
            std = np.exp(0.5 * log_var.numpy()[members, rows])
            mu = mu + std * rng.standard_normal(mu.shape).astype(np.float32)
        next_obs, reward = self._decode(obs, mu)
        p_done = 1.0 / (1.0 + np.exp(-logit.numpy()[members, rows]))
        terminated = (p_done > TERMINATION_THRESHOLD) & self.learn_termination
        return StepPrediction(next_obs, reward, terminated, self._disagreement(mean))

    @staticmethod
    def _disagreement(mean: torch.Tensor) -> np.ndarray:
        """RMS over targets of the elites' spread of predicted means (normalised units)."""
        if mean.shape[0] < 2:
            return np.zeros(mean.shape[1], np.float32)
        return mean.var(dim=0, unbiased=False).mean(dim=-1).sqrt().numpy().astype(np.float32)

    # ----------------------------------------------------------------- files
    def config(self) -> dict[str, Any]:
        """The constructor's arguments and the spaces, as plain data."""
        return {
            "ensemble_size": self.ensemble_size,
            "elites": self.num_elites,
            "hidden_sizes": list(self.hidden_sizes),
            "lr": self.lr,
            "weight_decay": self.weight_decay,
            "learn_termination": self.learn_termination,
            "max_grad_norm": self.max_grad_norm,
            "seed": self.seed,
            **self.codec.config(),
        }

    def state(self) -> dict[str, Any]:
        """Tensors and plain values only (loads with ``torch.load(weights_only=True)``)."""
        return model_state(self)

    def load_state(self, state: Any, where: str = "state") -> None:
        """Take a :meth:`state` back; everything is checked before anything is applied.

        Args:
            state: A dict as :meth:`state` returns it, from a model with the same spaces
                and sizes.
            where: Where ``state`` came from (e.g. a file name), named in the error messages.

        Raises:
            ValueError: Naming ``where``, for another format, another model's spaces or
                sizes, missing keys, non-finite weights or bad elites.
        """
        apply_state(self, check_state(self, state, where))

    def save(self, path: str | Path) -> Path:
        """Write the model with ``torch.save`` (tensors and plain values only).

        Args:
            path: The file to write (a str or path, not a folder); missing parent folders
                are created and an existing file is overwritten.

        Returns:
            The path written.
        """
        target: Path = check_path("path", path)
        target.parent.mkdir(parents=True, exist_ok=True)
        torch.save(self.state(), target)
        return target

    @classmethod
    def load(cls, path: str | Path) -> WorldModel:
        """A model written by :meth:`save` (``torch.load(weights_only=True)``, checked).

        Args:
            path: The file :meth:`save` wrote; the model is rebuilt from its config (spaces,
                sizes, seed) and then takes its state.
        """
        from fleetgym.agents.world_model.checkpoint import read_model

        return read_model(cls, path)
