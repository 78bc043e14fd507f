"""Rollouts of a token policy: ``N`` Box envs in lockstep, actions decoded from action tokens.

:class:`TokenRolloutCollector` steps ``N`` copies of a Gymnasium env whose action space is a
``Box`` with one batched :meth:`~fleetgym.agents.tokens.policy.TokenPolicy.act` per
*decision*. A decision is a chunk of ``K`` actions of ``D`` tokens each
(``policy.chunk``, ``policy.tokenizer.dims``); the env executes the ``K`` decoded actions
(bin centres, :class:`~fleetgym.agents.tokens.ActionTokenizer`) one after another, and the
decision's reward is their discounted sum ``sum_i gamma^i r_i``, so a learner discounts
between decisions by ``gamma^K``. An episode that ends inside a chunk drops the chunk's
remaining actions.

The collector owns the observation statistics (running mean and variance, frozen during a
rollout and folded in after it): the rollout stores the *normalised* observations the policy
saw, so the learner's teacher-forced pass sees exactly the behaviour policy's input and the
importance ratios start at 1.

Seeding: env ``i`` of a collector seeded ``s`` resets from ``SeedSequence([s, i])``, and the
token sampling uses one ``torch.Generator`` seeded from ``s``; two collectors with one seed
and one policy produce identical rollouts.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field

import gymnasium as gym
import numpy as np
import torch

from fleetgym.agents.policies.running_stats import RunningMeanStd
from fleetgym.agents.tokens.policy import TokenPolicy
from fleetgym.validation import check_bool, check_float, check_int, quote

#: Normalised observations are clipped to ``[-OBS_CLIP, OBS_CLIP]`` (SB3's VecNormalize).
OBS_CLIP = 10.0


@dataclass
class TokenRollout:
    """``T`` decisions of ``N`` envs, time-major: arrays ``(T, N, ...)``.

    ``obs`` are normalised (the policy's input), ``steps`` each decision's env step inside
    its episode (the attention value head's step input), ``tokens`` and ``log_probs`` the
    behaviour's ``(T, N, K, D)``, ``rewards`` the chunk-discounted sums, and
    ``truncation_values`` the value of the final observation where a time limit cut an
    episode. ``last_values`` ``(N,)`` bootstrap the last decision of each env.
    """

    obs: np.ndarray
    steps: np.ndarray
    tokens: np.ndarray
    log_probs: np.ndarray
    values: np.ndarray
    rewards: np.ndarray
    terminated: np.ndarray
    truncated: np.ndarray
    truncation_values: np.ndarray
    last_values: np.ndarray
    env_steps: int
    episode_returns: list[float] = field(default_factory=list)
    episode_lengths: list[int] = field(default_factory=list)

    @property
    def num_decisions(self) -> int:
        """``T N``."""
        return int(self.rewards.size)


class TokenRolloutCollector:
    """``N`` seeded Box envs stepped in lockstep by a :class:`TokenPolicy`.

    Models the actor side of token-level PPO on a continuous-control task: each decision
    decodes ``K D`` tokens per env with the KV cache, the env runs the ``K`` actions, and
    episodes continue across rollouts.

    Example:
        >>> from fleetgym.agents.tokens import ActionTokenizer
        >>> from fleetgym.agents.tokens.backbones import TinyCausalTransformer
        >>> env = gym.make("Pendulum-v1")
        >>> tok = ActionTokenizer.from_space(env.action_space, num_bins=16)
        >>> net = TinyCausalTransformer(hidden_size=16, layers=1, heads=2, vocab_size=16)
        >>> policy = TokenPolicy(net, tok, obs_dim=3, chunk=2, max_steps=200)
        >>> collector = TokenRolloutCollector(lambda: gym.make("Pendulum-v1"), policy, 2, seed=0)
        >>> rollout = collector.collect(policy, decisions=5)
        >>> rollout.tokens.shape, rollout.env_steps
        ((5, 2, 2, 1), 20)
        >>> collector.close()

    Args:
        make_env: A callable returning a new env (a Box action space of ``D`` entries and a
            flat Box observation of ``policy.obs_dim`` entries).
        policy: The token policy (only its shapes are read here; :meth:`collect` takes the
            policy to act with).
        num_envs: ``N``.
        seed: Seeds the envs and the sampling.
        gamma: Discount inside a chunk.
        normalize_obs: Normalise observations by running statistics.

    Raises:
        TypeError: If ``make_env`` is not callable or returns no env, or ``policy`` is not a
            :class:`TokenPolicy`.
        ValueError: For an env whose spaces do not fit the policy, or a bad count.
    """

    def __init__(
        self,
        make_env: Callable[[], gym.Env],
        policy: TokenPolicy,
        num_envs: int = 1,
        seed: int = 0,
        gamma: float = 0.99,
        normalize_obs: bool = True,
    ) -> None:
        if not callable(make_env):
            raise TypeError(
                f"make_env: expected a callable returning an env, actual {quote(make_env)}"
            )
        if not isinstance(policy, TokenPolicy):
            raise TypeError(f"policy: expected a TokenPolicy, actual {quote(policy)}")
        self.num_envs = check_int("num_envs", num_envs, low=1)
        self.seed = check_int("seed", seed, low=0)
        self.gamma = check_float("gamma", gamma, 0.0, 1.0)
        self.normalize_obs = check_bool("normalize_obs", normalize_obs)
        self.chunk, self.dims, self.obs_dim = policy.chunk, policy.tokenizer.dims, policy.obs_dim
        self.envs = [make_env() for _ in range(self.num_envs)]
        for env in self.envs:
            _check_env(env, policy)
        self.obs_stats = RunningMeanStd((self.obs_dim,))
        seeds = [
            int(np.random.SeedSequence([self.seed, i]).generate_state(1, np.uint32)[0])
            for i in range(self.num_envs)
        ]
        self.generator = torch.Generator().manual_seed(self.seed)
        self._raw = np.stack(
            [
                np.asarray(env.reset(seed=s)[0], np.float64).ravel()
                for env, s in zip(self.envs, seeds, strict=True)
            ]
        )
        self._t = np.zeros(self.num_envs, np.int64)
        self._return = np.zeros(self.num_envs)
        self.total_env_steps = 0

    def normalize(self, raw: np.ndarray) -> np.ndarray:
        """Observations ``(B, obs_dim)`` as the policy sees them (float32)."""
        raw = np.asarray(raw, np.float64).reshape(-1, self.obs_dim)
        if not self.normalize_obs:
            return raw.astype(np.float32)
        scaled = (raw - self.obs_stats.mean) / np.sqrt(self.obs_stats.var + 1e-8)
        return np.clip(scaled, -OBS_CLIP, OBS_CLIP).astype(np.float32)

    def _act(self, policy: TokenPolicy, obs: np.ndarray, steps: np.ndarray):
        return policy.act(
            torch.from_numpy(obs),
            step=torch.from_numpy(steps.astype(np.float32)),
            generator=self.generator,
        )

    def collect(self, policy: TokenPolicy, decisions: int) -> TokenRollout:
        """``decisions`` decisions of every env with ``policy``; then the stats fold in.

        Raises:
            ValueError: For a policy of other shapes than the collector's, or an env that
                returns a non-finite observation or reward.
        """
        if (policy.chunk, policy.tokenizer.dims, policy.obs_dim) != (
            self.chunk,
            self.dims,
            self.obs_dim,
        ):
            raise ValueError(
                "policy: expected the chunk, dims and obs_dim the collector was built for"
            )
        t_max, n, k, d = (
            check_int("decisions", decisions, low=1),
            self.num_envs,
            self.chunk,
            self.dims,
        )
        obs = np.zeros((t_max, n, self.obs_dim), np.float32)
        steps = np.zeros((t_max, n), np.float32)
        tokens = np.zeros((t_max, n, k, d), np.int64)
        log_probs = np.zeros((t_max, n, k, d), np.float32)
        values, rewards = np.zeros((t_max, n), np.float32), np.zeros((t_max, n), np.float32)
        terminated, truncated = np.zeros((t_max, n), bool), np.zeros((t_max, n), bool)
        truncation_values = np.zeros((t_max, n), np.float32)
        returns, lengths, seen, start = [], [], [], self.total_env_steps
        policy.eval()
        for t in range(t_max):
            obs[t], steps[t] = self.normalize(self._raw), self._t
            seen.append(self._raw.copy())
            sample = self._act(policy, obs[t], steps[t])
            tokens[t], log_probs[t] = sample.tokens.numpy(), sample.log_probs.numpy()
            values[t] = sample.values.numpy()
            actions = policy.env_actions(sample.tokens).numpy()
            final: dict[int, tuple[np.ndarray, int]] = {}
            for i, env in enumerate(self.envs):
                for j in range(k):
                    raw, reward, term, trunc, _ = env.step(
                        actions[i, j].reshape(env.action_space.shape)
                    )
                    raw, r = np.asarray(raw, np.float64).ravel(), float(reward)
                    if not (np.all(np.isfinite(raw)) and math.isfinite(r)):
                        raise ValueError(f"env {i}: expected finite observations and rewards")
                    rewards[t, i] += self.gamma**j * r
                    self._return[i] += r
                    self._t[i] += 1
                    self.total_env_steps += 1
                    if term or trunc:
                        terminated[t, i], truncated[t, i] = bool(term), not term
                        returns.append(float(self._return[i]))
                        lengths.append(int(self._t[i]))
                        if not term:
                            final[i] = (raw, int(self._t[i]))
                        raw = np.asarray(env.reset()[0], np.float64).ravel()
                        self._return[i], self._t[i] = 0.0, 0
                        break
                self._raw[i] = raw
            if final:
                # The value of the observation a time limit cut off bootstraps the return.
                ids = sorted(final)
                cut = self._act(
                    policy,
                    self.normalize(np.stack([final[i][0] for i in ids])),
                    np.array([final[i][1] for i in ids]),
                )
                truncation_values[t, ids] = cut.values.numpy()
        last = self._act(policy, self.normalize(self._raw), self._t.astype(np.float32))
        if self.normalize_obs:
            self.obs_stats.update(np.concatenate(seen))
        return TokenRollout(
            obs, steps, tokens, log_probs, values, rewards, terminated, truncated,
            truncation_values, last.values.numpy().astype(np.float32),
            self.total_env_steps - start, returns, lengths,
        )  # fmt: skip

    def close(self) -> None:
        """Close every env."""
        for env in self.envs:
            env.close()


def _check_env(env: gym.Env, policy: TokenPolicy) -> None:
    if not isinstance(env, gym.Env):
        raise TypeError(f"make_env: expected it to return a gymnasium Env, actual {quote(env)}")
    space, obs_space = env.action_space, env.observation_space
    if not isinstance(space, gym.spaces.Box) or int(np.prod(space.shape)) != policy.tokenizer.dims:
        raise ValueError(
            f"env: expected a Box action space of {policy.tokenizer.dims} entries (the "
            f"tokenizer's dims), actual {quote(space)}"
        )
    if not isinstance(obs_space, gym.spaces.Box) or int(np.prod(obs_space.shape)) != policy.obs_dim:
        raise ValueError(
            f"env: expected a Box observation space of {policy.obs_dim} entries (the "
            f"policy's obs_dim), actual {quote(obs_space)}"
        )
