"""Rollouts of a token policy: ``N`` envs in lockstep, actions decoded from action tokens.

:class:`TokenRolloutCollector` steps ``N`` copies of a Gymnasium env whose action space is a
``Box`` with one batched :meth:`~fleetgym.agents.tokens.policy.TokenPolicy.act` per
*decision*. A decision is a chunk of ``K`` actions of ``D`` tokens each
(``policy.chunk``, ``policy.tokenizer.dims``); the env executes the ``K`` decoded actions
(bin centres, :class:`~fleetgym.agents.tokens.ActionTokenizer`) one after another, and the
decision's reward is their discounted sum ``sum_i gamma^i r_i``, so a learner discounts
between decisions by ``gamma^K``. An episode that ends inside a chunk drops the chunk's
remaining actions, and :attr:`TokenRollout.executed` marks them so that a learner neither
trains on their tokens nor counts them in a ratio.

The collector owns the observation statistics (running mean and variance, frozen during a
rollout and folded in after it): the rollout stores the *normalised* observations the policy
saw, so the learner's teacher-forced pass sees exactly the behaviour policy's input and the
importance ratios start at 1.

A ``Discrete(n)`` env takes one token of ``n`` bins per action, the bin index being the
action; a BabyAI env's ``Dict`` observation becomes its flattened image plus direction and
its mission's ids (:class:`ObservationAdapter`, :func:`token_env_spec`).

Seeding: env ``i`` of a collector seeded ``s`` resets from ``SeedSequence([s, i])``, and the
token sampling uses one ``torch.Generator`` seeded from ``s``; two collectors with one seed
and one policy produce identical rollouts.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import gymnasium as gym
import numpy as np
import torch

from fleetgym.agents.policies.running_stats import RunningMeanStd
from fleetgym.agents.tokens import ActionTokenizer
from fleetgym.agents.tokens.missions import InstructionEncoder, MissionVocabulary
from fleetgym.agents.tokens.policy import TokenPolicy
from fleetgym.validation import check_bool, check_float, check_int, quote

#: Normalised observations are clipped to ``[-OBS_CLIP, OBS_CLIP]`` (SB3's VecNormalize).
OBS_CLIP = 10.0


@dataclass
class TokenRollout:
    """``T`` decisions of ``N`` envs, time-major: arrays ``(T, N, ...)``.

    ``K`` is the policy's chunk (actions per decision) and ``D`` the tokens per action.

    Attributes:
        obs: Normalised observations the policy saw, float32 ``(T, N, obs_dim)``.
        steps: Each decision's env step inside its episode (0 at a reset), float32
            ``(T, N)``: the attention value head's step input.
        tokens: The sampled action tokens (vocabulary ids), int64 ``(T, N, K, D)``.
        log_probs: The behaviour policy's log-probability of each token, ``(T, N, K, D)``.
        values: The behaviour policy's value of each decision's observation, ``(T, N)``.
        rewards: Each decision's reward, ``sum_i gamma^i r_i`` over its executed actions.
        terminated: The episode reached a terminal state inside the decision, ``(T, N)``.
        truncated: The episode was cut (a time limit, not terminal) inside the decision.
        truncation_values: Value of the cut-off final observation where ``truncated``
            (0 elsewhere), ``(T, N)``: it bootstraps the return.
        last_values: Value of each env's observation after the last decision, ``(N,)``.
        env_steps: Env steps the rollout ran (executed actions over all envs).
        episode_returns: Undiscounted return of each episode that ended in the rollout
            (episodes continue across rollouts, so it may include earlier steps).
        episode_lengths: Env steps of each of those episodes, in the same order.
        instructions: Mission ids ``(T, N, L)`` where the env has a mission, else None.
        executed: ``(T, N, K)``: whether the env executed action ``k`` of the decision
            (False after an episode ended inside the chunk); None: every action was.
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
    # Instruction ids ``(T, N, L)`` where the env has a mission, else ``None``.
    instructions: np.ndarray | None = None
    # ``(T, N, K)``: whether the env executed action ``k`` of the decision (``False``
    # after an episode ended inside the chunk); ``None``: every action was.
    executed: np.ndarray | None = None

    @property
    def num_decisions(self) -> int:
        """``T N``."""
        return int(self.rewards.size)


def env_factory(env: str | Callable[[], gym.Env]) -> Callable[[], gym.Env]:
    """A callable making the env: ``gym.make(env)`` for an id, the callable itself otherwise.

    Raises:
        TypeError: For anything else.
    """
    if isinstance(env, str):
        return lambda: gym.make(env)
    if callable(env):
        return env
    raise TypeError(f"env: expected an env id or a callable returning an env, actual {quote(env)}")


def env_action(action: np.ndarray, spec: TokenEnvSpec) -> Any:
    """One decoded action row ``(D,)`` as the env takes it (an int for a Discrete env)."""
    return int(action[0]) if spec.discrete else action.reshape(spec.action_shape)


@dataclass(frozen=True)
class TokenEnvSpec:
    """What a token policy for an env needs: its tokenizer, input sizes and episode limit."""

    tokenizer: ActionTokenizer
    obs_dim: int
    instruction_length: int
    max_steps: int
    action_shape: tuple[int, ...]
    discrete: bool


def token_env_spec(
    env: gym.Env, num_bins: int, vocab_size: int, vocabulary: InstructionEncoder | None = None
) -> TokenEnvSpec:
    """The tokenizer and sizes of a token policy for ``env`` (which is reset once, seed 0).

    A ``Box`` action gets ``num_bins`` bins per entry; a ``Discrete(n)`` action is one
    token of ``n`` bins whose bin index is the action. Ids are the vocabulary's tail.

    Raises:
        ValueError: For another action space, or mission ids that reach the action ids.
    """
    space = env.action_space
    if isinstance(space, gym.spaces.Discrete):
        n = int(space.n)
        low, high = np.zeros(1), np.full(1, n - 1.0)
        tokenizer = ActionTokenizer(low, high, num_bins=n, vocab_size=vocab_size)
    elif isinstance(space, gym.spaces.Box):
        tokenizer = ActionTokenizer.from_space(space, num_bins=num_bins, vocab_size=vocab_size)
    else:
        raise ValueError(f"env: expected a Box or Discrete action space, actual {quote(space)}")
    adapter = ObservationAdapter(env.observation_space, vocabulary)
    if adapter.vocabulary is not None and adapter.vocabulary.max_id >= tokenizer.offset:
        raise ValueError(
            f"vocab_size: expected mission ids (up to {adapter.vocabulary.max_id}) below the "
            f"action ids (from {tokenizer.offset}), actual vocab_size {vocab_size}"
        )
    env.reset(seed=0)  # BabyAI sets its step limit on reset
    limit = getattr(env.spec, "max_episode_steps", None)
    limit = limit or getattr(env.unwrapped, "max_steps", None) or 1000
    return TokenEnvSpec(
        tokenizer, adapter.obs_dim, adapter.instruction_length, int(limit),
        tuple(space.shape or ()), isinstance(space, gym.spaces.Discrete),
    )  # fmt: skip


class ObservationAdapter:
    """An env observation as ``(vector (obs_dim,), instruction ids (L,) or None)``.

    A flat ``Box`` passes through (``L = 0``); a BabyAI ``Dict`` with ``image``,
    ``direction`` and ``mission`` becomes the flattened image plus the direction, and the
    mission's ids in a :class:`~fleetgym.agents.tokens.missions.MissionVocabulary`.

    Raises:
        ValueError: For another observation space.
    """

    def __init__(self, space: gym.Space, vocabulary: InstructionEncoder | None = None) -> None:
        self.vocabulary: InstructionEncoder | None = None
        if isinstance(space, gym.spaces.Box):
            self.obs_dim, self.instruction_length = int(np.prod(space.shape)), 0
        elif isinstance(space, gym.spaces.Dict) and {"image", "mission"} <= set(space.spaces):
            self.vocabulary = vocabulary or MissionVocabulary()
            image = space.spaces["image"].shape or ()
            self.obs_dim = int(np.prod(image)) + int("direction" in space.spaces)
            self.instruction_length = self.vocabulary.length
        else:
            raise ValueError(
                "env: expected a Box observation space or a Dict with 'image' and 'mission', "
                f"actual {quote(space)}"
            )

    def __call__(self, obs: object) -> tuple[np.ndarray, np.ndarray | None]:
        if self.vocabulary is None:
            return np.asarray(obs, np.float64).ravel(), None
        assert isinstance(obs, dict)  # the space was checked in __init__
        parts = [np.asarray(obs["image"], np.float64).ravel()]
        if "direction" in obs:
            parts.append(np.array([float(obs["direction"])]))
        return np.concatenate(parts), self.vocabulary.encode(obs["mission"])


class TokenRolloutCollector:
    """``N`` seeded Box (or Discrete) envs stepped in lockstep by a :class:`TokenPolicy`.

    Models the actor side of token-level PPO on a continuous-control task: each decision
    decodes ``K D`` tokens per env with the KV cache, the env runs the ``K`` actions, and
    episodes continue across rollouts.

    Args:
        make_env: A callable returning a new env (a Box action space of ``D`` entries, or
            ``Discrete(n)`` for one token of ``n`` bins, and a Box observation of
            ``policy.obs_dim`` entries or a BabyAI ``Dict``); called ``num_envs`` times.
        policy: The token policy (only its shapes are read here; :meth:`collect` takes the
            policy to act with).
        num_envs: ``N``, the envs stepped in lockstep (>= 1).
        seed: Seeds the envs (env ``i`` from ``SeedSequence([seed, i])``) and the token
            sampling's ``torch.Generator`` (an int >= 0).
        gamma: Discount in [0, 1] between the ``K`` actions of a chunk (the decision's
            reward is ``sum_i gamma^i r_i``).
        normalize_obs: Standardise observations by running statistics (updated after each
            :meth:`collect`) and clip them to ``[-10, 10]``; False: raw float32.
        vocabulary: The mission words of a language-conditioned env (BabyAI's by default; a
            :class:`~fleetgym.agents.tokens.MissionVocabulary` or an
            :class:`~fleetgym.agents.tokens.InstructionTokenizer`).

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
        vocabulary: InstructionEncoder | None = None,
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
        self.observe = ObservationAdapter(self.envs[0].observation_space, vocabulary)
        if (self.observe.obs_dim, self.observe.instruction_length) != (
            policy.obs_dim,
            policy.instruction_length,
        ):
            raise ValueError(
                f"env: expected observations of {policy.obs_dim} entries and "
                f"{policy.instruction_length} instruction ids (the policy's obs_dim and "
                f"instruction_length), actual {self.observe.obs_dim} and "
                f"{self.observe.instruction_length}"
            )
        self._discrete = isinstance(self.envs[0].action_space, gym.spaces.Discrete)
        self._offset = policy.tokenizer.offset
        self.obs_stats = RunningMeanStd((self.obs_dim,))
        seeds = [
            int(np.random.SeedSequence([self.seed, i]).generate_state(1, np.uint32)[0])
            for i in range(self.num_envs)
        ]
        self.generator = torch.Generator().manual_seed(self.seed)
        first = [
            self.observe(env.reset(seed=s)[0]) for env, s in zip(self.envs, seeds, strict=True)
        ]
        self._raw = np.stack([vec for vec, _ in first])
        missions = [ids for _, ids in first if ids is not None]
        self._ids = np.stack(missions) if self.observe.instruction_length else None
        self._t = np.zeros(self.num_envs, np.int64)
        self._return = np.zeros(self.num_envs)
        self.total_env_steps = 0

    def normalize(self, raw: np.ndarray) -> np.ndarray:
        """Observations ``(B, obs_dim)`` as the policy sees them (float32).

        Args:
            raw: Raw (adapted) observations, any array reshapeable to ``(B, obs_dim)``;
                standardised by the current statistics and clipped when ``normalize_obs``.
        """
        raw = np.asarray(raw, np.float64).reshape(-1, self.obs_dim)
        if not self.normalize_obs:
            return raw.astype(np.float32)
        scaled = (raw - self.obs_stats.mean) / np.sqrt(self.obs_stats.var + 1e-8)
        return np.clip(scaled, -OBS_CLIP, OBS_CLIP).astype(np.float32)

    def _act(self, policy: TokenPolicy, obs: np.ndarray, steps: np.ndarray, ids: np.ndarray | None):
        return policy.act(
            torch.from_numpy(obs),
            None if ids is None else torch.from_numpy(ids),
            step=torch.from_numpy(steps.astype(np.float32)),
            generator=self.generator,
        )

    def env_actions(self, policy: TokenPolicy, tokens: torch.Tensor) -> np.ndarray:
        """The env actions ``(B, K, D)`` of tokens: bin centres, or bin indices (Discrete).

        Args:
            policy: The token policy whose tokenizer decodes the tokens (unused for a
                ``Discrete`` env: the bin index is the action).
            tokens: Action tokens (vocabulary ids), shape ``(B, K, D)``.
        """
        if self._discrete:  # one token per decision step, its bin is the action
            return (tokens - self._offset).cpu().numpy()
        return policy.env_actions(tokens).numpy()

    def collect(self, policy: TokenPolicy, decisions: int) -> TokenRollout:
        """``decisions`` decisions of every env with ``policy``; then the stats fold in.

        The observation statistics stay frozen during the rollout; the observations at
        the decisions are folded in at the end (with ``normalize_obs``). Sets ``policy``
        to eval mode.

        Args:
            policy: The token policy to act with; its chunk, tokenizer dims and ``obs_dim``
                must be those the collector was built for.
            decisions: Decisions ``T`` per env (>= 1); each runs up to ``K`` env steps.

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
        executed = np.zeros((t_max, n, k), bool)
        ids = self._ids
        instructions = None if ids is None else np.zeros((t_max, *ids.shape), np.int64)
        returns, lengths, seen, start = [], [], [], self.total_env_steps
        policy.eval()
        for t in range(t_max):
            obs[t], steps[t] = self.normalize(self._raw), self._t
            if instructions is not None and ids is not None:
                instructions[t] = ids
            seen.append(self._raw.copy())
            sample = self._act(policy, obs[t], steps[t], ids)
            tokens[t], log_probs[t] = sample.tokens.cpu().numpy(), sample.log_probs.cpu().numpy()
            values[t] = sample.values.cpu().numpy()
            actions = self.env_actions(policy, sample.tokens)
            final: dict[int, tuple[np.ndarray, int, np.ndarray | None]] = {}
            for i, env in enumerate(self.envs):
                for j in range(k):
                    act = actions[i, j]
                    observed, reward, term, trunc, _ = env.step(
                        int(act[0]) if self._discrete else act.reshape(env.action_space.shape)
                    )
                    (raw, mission), r = self.observe(observed), float(reward)
                    if not (np.all(np.isfinite(raw)) and math.isfinite(r)):
                        raise ValueError(f"env {i}: expected finite observations and rewards")
                    rewards[t, i] += self.gamma**j * r
                    executed[t, i, j] = True
                    self._return[i] += r
                    self._t[i] += 1
                    self.total_env_steps += 1
                    if term or trunc:
                        terminated[t, i], truncated[t, i] = bool(term), not term
                        returns.append(float(self._return[i]))
                        lengths.append(int(self._t[i]))
                        if not term:
                            final[i] = (raw, int(self._t[i]), mission)
                        raw, mission = self.observe(env.reset()[0])
                        self._return[i], self._t[i] = 0.0, 0
                        break
                self._raw[i] = raw
                if ids is not None and mission is not None:
                    ids[i] = mission
            if final:
                # The value of the observation a time limit cut off bootstraps the return.
                cut_ids = sorted(final)
                cut_missions = [final[i][2] for i in cut_ids]
                missions = (
                    None if ids is None else np.stack([m for m in cut_missions if m is not None])
                )
                cut = self._act(
                    policy,
                    self.normalize(np.stack([final[i][0] for i in cut_ids])),
                    np.array([final[i][1] for i in cut_ids]),
                    missions,
                )
                truncation_values[t, cut_ids] = cut.values.cpu().numpy()
        last = self._act(policy, self.normalize(self._raw), self._t.astype(np.float32), ids)
        if self.normalize_obs:
            self.obs_stats.update(np.concatenate(seen))
        return TokenRollout(
            obs, steps, tokens, log_probs, values, rewards, terminated, truncated,
            truncation_values, last.values.cpu().numpy().astype(np.float32),
            self.total_env_steps - start, returns, lengths, instructions, executed,
        )  # fmt: skip

    def close(self) -> None:
        """Close every env."""
        for env in self.envs:
            env.close()


def _check_env(env: gym.Env, policy: TokenPolicy) -> None:
    if not isinstance(env, gym.Env):
        raise TypeError(f"make_env: expected it to return a gymnasium Env, actual {quote(env)}")
    space, tok = env.action_space, policy.tokenizer
    if isinstance(space, gym.spaces.Discrete):
        if tok.dims != 1 or tok.num_bins != int(space.n) or int(space.start) != 0:
            raise ValueError(
                f"env: expected Discrete({tok.num_bins}) for a tokenizer of one dimension of "
                f"{tok.num_bins} bins, actual {quote(space)} for {tok.dims} dims"
            )
    elif not isinstance(space, gym.spaces.Box) or int(np.prod(space.shape)) != tok.dims:
        raise ValueError(
            f"env: expected a Box action space of {tok.dims} entries (the "
            f"tokenizer's dims), actual {quote(space)}"
        )
