"""The replay side of MBPO: the model buffer and the batches that mix it with real data.

:class:`ModelReplay` keeps the newest imagined transitions (a ring, first in first out);
:class:`MixedReplay` answers SB3's ``replay_buffer.sample(batch_size, env)`` with a batch of
``round(real_ratio * batch_size)`` rows of the real buffer and the rest from the model
buffer (all real while the model buffer is empty or imagination is off).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
from stable_baselines3.common.type_aliases import ReplayBufferSamples

from fleetgym.validation import check_float, check_int

__all__ = ["MixedReplay", "ModelReplay", "real_rows"]


class ModelReplay:
    """Up to ``capacity`` imagined transitions ``(o, a, r, o', done)``, the newest kept.

    Args:
        capacity: Rows kept.
        obs_dim: Width of an observation.
        action_dim: Width of an action.
    """

    def __init__(self, capacity: int, obs_dim: int, action_dim: int) -> None:
        self.capacity = check_int("model_buffer_size", capacity, 1, 100_000_000)
        self.obs = np.zeros((self.capacity, obs_dim), np.float32)
        self.actions = np.zeros((self.capacity, action_dim), np.float32)
        self.rewards = np.zeros(self.capacity, np.float32)
        self.next_obs = np.zeros((self.capacity, obs_dim), np.float32)
        self.dones = np.zeros(self.capacity, np.float32)
        #: The model version that imagined each row.
        self.versions = np.zeros(self.capacity, np.int64)
        self.pos = 0
        self.size = 0
        #: Rows ever added.
        self.total_added = 0

    def __len__(self) -> int:
        return self.size

    def add(
        self,
        obs: np.ndarray,
        actions: np.ndarray,
        rewards: np.ndarray,
        next_obs: np.ndarray,
        dones: np.ndarray,
        version: int,
    ) -> None:
        """Append a batch of rows (the oldest rows are overwritten once full)."""
        n = int(obs.shape[0])
        if n > self.capacity:  # only the newest fit
            keep = slice(n - self.capacity, n)
            obs, actions, rewards = obs[keep], actions[keep], rewards[keep]
            next_obs, dones = next_obs[keep], dones[keep]
            n = self.capacity
        idx = (self.pos + np.arange(n)) % self.capacity
        self.obs[idx] = obs
        self.actions[idx] = actions
        self.rewards[idx] = rewards
        self.next_obs[idx] = next_obs
        self.dones[idx] = dones
        self.versions[idx] = version
        self.pos = int((self.pos + n) % self.capacity)
        self.size = min(self.capacity, self.size + n)
        self.total_added += n

    def clear(self) -> None:
        """Forget every row (imagination stopped)."""
        self.pos = self.size = 0


class MixedReplay:
    """SB3's replay interface over the real buffer and a :class:`ModelReplay`.

    Args:
        real: The algorithm's SB3 replay buffer (real transitions).
        model: The model buffer.
        real_ratio: Share of each batch drawn from ``real``, in ``[0, 1]``.
        rng: Draws the model rows (the real rows come from SB3's own sampling).
        device: Where the tensors go.
    """

    def __init__(
        self,
        real: Any,
        model: ModelReplay,
        real_ratio: float,
        rng: np.random.Generator,
        device: Any,
    ) -> None:
        self.real = real
        self.model = model
        self.real_ratio = check_float("real_ratio", real_ratio, 0.0, 1.0)
        self.rng = rng
        self.device = device
        #: (real rows, model rows) of the newest batch.
        self.last_split = (0, 0)

    def split(self, batch_size: int) -> tuple[int, int]:
        """How many rows of a batch come from each buffer."""
        if not len(self.model):
            return batch_size, 0
        n_real = int(round(self.real_ratio * batch_size))
        return n_real, batch_size - n_real

    def sample(self, batch_size: int, env: Any = None) -> ReplayBufferSamples:
        n_real, n_model = self.split(batch_size)
        self.last_split = (n_real, n_model)
        parts = []
        if n_real:
            real = self.real.sample(n_real, env=env)
            parts.append(
                (
                    real.observations,
                    real.actions,
                    real.next_observations,
                    real.dones,
                    real.rewards,
                )
            )
        if n_model:
            idx = self.rng.integers(0, len(self.model), n_model)
            m = self.model

            def tensor(x: np.ndarray) -> torch.Tensor:
                return torch.as_tensor(x, device=self.device)

            parts.append(
                (
                    tensor(m.obs[idx]),
                    tensor(m.actions[idx]),
                    tensor(m.next_obs[idx]),
                    tensor(m.dones[idx, None]),
                    tensor(m.rewards[idx, None]),
                )
            )
        fields = [torch.cat([p[i].float() for p in parts]) for i in range(5)]
        return ReplayBufferSamples(*fields)


def real_rows(buffer: Any, n: int) -> dict[str, np.ndarray]:
    """The newest ``n`` rows of an SB3 replay buffer with one env (at most the rows it
    holds), oldest first, as flat arrays.

    ``terminated`` is SB3's ``done`` without the time-limit truncations.
    """
    held = buffer.buffer_size if buffer.full else buffer.pos
    n = max(0, min(int(n), held))
    idx = (buffer.pos - n + np.arange(n)) % buffer.buffer_size
    dones = buffer.dones[idx, 0].astype(bool)
    timeouts = buffer.timeouts[idx, 0].astype(bool)
    return {
        "obs": buffer.observations[idx, 0].reshape(n, -1).astype(np.float32),
        "actions": buffer.actions[idx, 0].reshape(n, -1).astype(np.float32),
        "rewards": buffer.rewards[idx, 0].astype(np.float32),
        "next_obs": buffer.next_observations[idx, 0].reshape(n, -1).astype(np.float32),
        "terminated": dones & ~timeouts,
        "done": dones,
    }
