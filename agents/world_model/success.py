"""AcceRL's success reward model: a classifier of success, its rise as the imagined reward.

For sparse success tasks (MiniGrid / BabyAI: reward only when the goal is reached) a
regression head learns mostly zeros. :class:`SuccessRewardModel` instead learns
``M(o) = P(success | o)`` from real transitions (the observation reached by a step that
was rewarded and ended the episode is a success), and an imagined step earns
``r = M(o') - M(o)``: the progress it makes towards success (AcceRL §3).
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch
from torch import nn

from fleetgym.agents.world_model.buffer import TransitionBuffer
from fleetgym.validation import check_float, check_int

__all__ = ["SuccessRewardModel"]

#: The default bound on the classifier's gradient norm per step.
MAX_GRAD_NORM = 1.0


class SuccessRewardModel:
    """A small MLP classifier of success over flat observations.

    Args:
        obs_dim: Width of the flat observations.
        hidden_sizes: Hidden widths.
        lr: Adam's learning rate.
        max_grad_norm: Every gradient step's norm is clipped to it (default 1).
        seed: Seeds the weights and the shuffles.

    Example:
        >>> m = SuccessRewardModel(obs_dim=2, hidden_sizes=(8,), seed=0)
        >>> m.reward(np.zeros((3, 2), np.float32), np.ones((3, 2), np.float32)).shape
        (3,)
    """

    def __init__(
        self,
        obs_dim: int,
        hidden_sizes: Sequence[int] = (64, 64),
        lr: float = 1e-3,
        seed: int = 0,
        max_grad_norm: float = MAX_GRAD_NORM,
    ) -> None:
        self.obs_dim = check_int("obs_dim", obs_dim, 1)
        self.max_grad_norm = check_float("max_grad_norm", max_grad_norm, 0.0, strict=True)
        layers: list[nn.Module] = []
        width = self.obs_dim
        for h in hidden_sizes:
            layers += [nn.Linear(width, int(h)), nn.SiLU()]
            width = int(h)
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(int(seed))
            self.net = nn.Sequential(*layers, nn.Linear(width, 1))
        self.optimizer = torch.optim.Adam(
            self.net.parameters(), lr=check_float("lr", lr, 0.0, strict=True)
        )
        self.generator = torch.Generator().manual_seed(int(seed))
        self.mean = np.zeros(self.obs_dim, np.float32)
        self.std = np.ones(self.obs_dim, np.float32)
        self.version = 0
        self._warned = False

    @staticmethod
    def labels(data: TransitionBuffer) -> tuple[np.ndarray, np.ndarray]:
        """Observations and success labels: each reached ``o'`` (success: rewarded end).

        Only rows that hold their ``o'`` (``has_next``): the others' are zeros, not states.

        Args:
            data: Real transitions; every ``o`` is labelled 0, and each known ``o'`` is
                labelled 1 where its step terminated with a positive reward, else 0.

        Returns:
            ``(obs, labels)``: the observations stacked, float32 labels in {0, 1}.
        """
        success = data.terminated & (data.rewards > 0)
        obs = np.concatenate([data.obs, data.next_obs[data.has_next]])
        labels = np.concatenate(
            [np.zeros(len(data), np.float32), success[data.has_next].astype(np.float32)]
        )
        return obs, labels

    def fit(self, data: TransitionBuffer, epochs: int = 20, batch_size: int = 256) -> float:
        """Train on ``data``'s observations; returns the last epoch's mean cross-entropy.

        The positive class is the observation a successful step reached (its terminal
        observation): :meth:`TransitionBuffer.collect` stores it, and so does
        :meth:`TransitionBuffer.add_trajectory` for a trajectory that carries
        ``final_obs``. A successful row without it (a trajectory without ``final_obs``)
        falls back to labelling the observation *before* the rewarded step, one step
        early, with a warning the first time.

        Each fit re-normalises the inputs by ``data``'s statistics, weighs the positive
        class by the class ratio (up to 100x) and warm-starts from the current weights.

        Args:
            data: Real transitions with observations of ``obs_dim`` values.
            epochs: Passes over the labelled observations (1 to 10,000).
            batch_size: Observations per gradient step (>= 1).
        """
        epochs = check_int("epochs", epochs, 1, 10_000)
        obs, labels = self.labels(data)
        missing = data.terminated & (data.rewards > 0) & ~data.has_next
        if missing.any():
            if not self._warned:
                warnings.warn(
                    f"success labels: {int(missing.sum())} successful rows lack their "
                    "terminal observation (trajectories without final_obs); the observation "
                    "before the success is labelled instead, one step early",
                    RuntimeWarning,
                    stacklevel=2,
                )
                self._warned = True
            obs = np.concatenate([obs, data.obs[missing]])
            labels = np.concatenate([labels, np.ones(int(missing.sum()), np.float32)])
        self.mean = obs.mean(0).astype(np.float32)
        std = obs.std(0)
        self.std = np.where(std < 1e-6, 1.0, std).astype(np.float32)
        x = torch.from_numpy((obs - self.mean) / self.std)
        y = torch.from_numpy(labels)
        pos = float(labels.mean())
        weight = torch.tensor(min(100.0, (1 - pos) / pos) if pos > 0 else 1.0)
        last = 0.0
        for _ in range(epochs):
            order = torch.randperm(len(y), generator=self.generator)
            total, count = 0.0, 0
            for lo in range(0, len(y), batch_size):
                idx = order[lo : lo + batch_size]
                loss = nn.functional.binary_cross_entropy_with_logits(
                    self.net(x[idx]).squeeze(-1), y[idx], pos_weight=weight
                )
                self.optimizer.zero_grad(set_to_none=True)
                loss.backward()
                torch.nn.utils.clip_grad_norm_(self.net.parameters(), self.max_grad_norm)
                self.optimizer.step()
                total, count = total + float(loss.detach()), count + 1
            last = total / max(count, 1)
        self.version += 1
        return last

    @torch.no_grad()
    def probability(self, obs: Any) -> np.ndarray:
        """``M(o)``, shape (N,).

        Args:
            obs: Flat observations ``(N, obs_dim)``, raw (normalised here with the
                statistics of the last fit).
        """
        x = torch.from_numpy((np.asarray(obs, np.float32) - self.mean) / self.std)
        return torch.sigmoid(self.net(x).squeeze(-1)).numpy()

    def reward(self, obs: Any, next_obs: Any) -> np.ndarray:
        """The imagined reward ``M(o') - M(o)``, shape (N,).

        Args:
            obs: Flat observations before the steps, ``(N, obs_dim)``.
            next_obs: The observations the steps reached, same shape; the reward lies in
                ``[-1, 1]``, positive for progress towards success.
        """
        return (self.probability(next_obs) - self.probability(obs)).astype(np.float32)
