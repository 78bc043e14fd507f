"""The actor slot of a token policy in the asynchronous trainer (:class:`TokenActor`).

A :class:`TokenActor` steps one environment of a workload with a
:class:`~fleetgym.agents.tokens.policy.TokenPolicy`: each *decision* decodes ``K D``
action tokens (``K`` actions of ``D`` dimensions) and the env runs the ``K`` decoded
actions in turn; the decision's reward is ``sum_i gamma^i r_i`` (as
:class:`~fleetgym.agents.rollout.token_rollout.TokenRolloutCollector`). The tokens come
from the actor's own policy copy (``inference="local"``) or from an inference server
serving a :class:`~fleetgym.agents.inference.token_model.TokenPolicyModel`
(``inference="server"``); either way the actor draws one uniform per token from its own
generator and the token is the inverse CDF of the restricted distribution at that draw,
so an actor's tokens do not depend on where they were decoded (up to float rounding of
the batch).

Observations are normalised on the actor with the statistics published with the weights
(keys under :data:`~fleetgym.agents.inference.token_model.OBS_STATS_PREFIX`): the
trajectory keeps both the normalised observation the policy saw (what the learner
re-evaluates, so ratios start at 1) and the raw one (what the learner folds into the next
statistics).

Seeding: slot ``i`` of a trainer seeded ``s``, incarnation ``k``, builds its env and
generator from ``SeedSequence([s, i, k])``, as
:class:`~fleetgym.agents.rollout.RolloutWorker` does.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from fleetgym.agents.inference.token_model import (
    OBS_STATS_PREFIX,
    load_token_policy_weights,
    pack_token_request,
)
from fleetgym.agents.learners.token_ppo import TokenPPOConfig, build_token_policy
from fleetgym.agents.rollout.token_rollout import (
    OBS_CLIP,
    ObservationAdapter,
    env_action,
    token_env_spec,
)
from fleetgym.agents.types import Trajectory, Weights
from fleetgym.agents.workloads import Workload


@dataclass
class TokenTrajectory(Trajectory):
    """One token actor's rollout of ``n`` decisions, time-major.

    ``obs`` are the normalised observations the policy saw, ``actions`` the tokens and
    ``log_probs`` their behaviour log-probs ``(n, K, D)``, ``rewards`` the chunk-discounted
    sums; ``steps`` is each decision's env step inside its episode, ``raw_obs`` the
    observations before normalisation, ``instructions`` the mission ids ``(n, L)`` (or
    ``None``), ``env_steps`` the env steps taken (``n K`` unless episodes ended inside a
    chunk) and ``policy_versions`` the version that decoded each decision (served only).
    """

    steps: np.ndarray = field(default_factory=lambda: np.zeros(0, np.float32))
    raw_obs: np.ndarray = field(default_factory=lambda: np.zeros((0, 0)))
    instructions: np.ndarray | None = None
    env_steps: int = 0
    policy_versions: np.ndarray | None = None


def obs_statistics(weights: Weights) -> tuple[np.ndarray, np.ndarray] | None:
    """The ``(mean, var)`` published with ``weights``, or ``None`` (no normalisation)."""
    mean = weights.get(OBS_STATS_PREFIX + "mean")
    var = weights.get(OBS_STATS_PREFIX + "var")
    return None if mean is None or var is None else (np.asarray(mean), np.asarray(var))


def normalize_obs(raw: np.ndarray, stats: tuple[np.ndarray, np.ndarray] | None) -> np.ndarray:
    """``raw`` as the policy sees it: standardised and clipped (float32), or as is."""
    raw = np.asarray(raw, np.float64)
    if stats is None:
        return raw.astype(np.float32)
    scaled = (raw - stats[0]) / np.sqrt(stats[1] + 1e-8)
    return np.clip(scaled, -OBS_CLIP, OBS_CLIP).astype(np.float32)


class TokenActor:
    """One asynchronous actor slot stepping its env with a token policy.

    Models a VLA rollout worker: one persistent environment, decisions of ``K D`` tokens
    decoded locally or by an inference server, whole rollouts handed to the learner.

    Example:
        >>> from fleetgym.agents.learners.token_ppo import TokenPPOConfig
        >>> from fleetgym.agents.workloads import get_workload
        >>> cfg = TokenPPOConfig(hidden_size=16, layers=1, heads=2, vocab_size=64, num_bins=8)
        >>> actor = TokenActor(get_workload("CartPole-v1"), 0, 0, 0, config=cfg)
        >>> weights = {k: v.detach().numpy() for k, v in actor.policy.state_dict().items()}
        >>> traj = actor.rollout(weights, 16, policy_version=3)
        >>> traj.actions.shape, traj.log_probs.shape, traj.env_steps, traj.policy_version
        ((16, 1, 1), (16, 1, 1), 16, 3)
        >>> actor.close()

    Args:
        workload: What the env is (:meth:`~fleetgym.agents.workloads.Workload.make_env`).
        actor_id: The slot index.
        seed: The trainer's seed.
        incarnation: Restarts of this slot so far.
        config: The token policy's sizes, chunk and discount (a
            :class:`~fleetgym.agents.learners.token_ppo.TokenPPOConfig`).
        client: An inference client of a server serving the token policy (``None``: the
            actor builds a policy copy and loads the weights it is given).

    Raises:
        TypeError: If ``config`` is not a TokenPPOConfig.
        ValueError: If the env's spaces do not fit a token policy.
    """

    def __init__(
        self,
        workload: Workload,
        actor_id: int,
        seed: int,
        incarnation: int,
        config: TokenPPOConfig,
        client: Any = None,
    ) -> None:
        if not isinstance(config, TokenPPOConfig):
            raise TypeError(f"config: expected a TokenPPOConfig, actual {type(config).__name__}")
        self.config, self.actor_id, self.client = config, actor_id, client
        sequence = np.random.SeedSequence([int(seed), int(actor_id), int(incarnation)])
        env_seed, rng_seed = sequence.generate_state(2, np.uint32)
        self.seed = int(env_seed)
        self.rng = np.random.default_rng(int(rng_seed))
        self.env = workload.make_env(seed=self.seed)
        self.spec = token_env_spec(self.env, config.num_bins, config.vocab_size)
        self.adapter = ObservationAdapter(self.env.observation_space)
        self.tokens_per_decision = config.chunk * self.spec.tokenizer.dims
        self.policy = None
        if client is None:
            self.policy = build_token_policy(config, self.spec).eval()
        self._loaded: int | None = None
        self._raw, self._ids = self.adapter(self.env.reset(seed=self.seed)[0])
        self._t, self._return = 0, 0.0

    def _decide(
        self, obs: np.ndarray, step: int, ids: np.ndarray | None, noise: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray, float, int | None]:
        """Tokens ``(K, D)``, their log-probs, the value and the answering version."""
        if self.client is not None:
            reply = self.client.infer(pack_token_request(obs[None], np.array([step]),
                                                         None if ids is None else ids[None]),
                                      noise[None])  # fmt: skip
            out = reply.outputs
            version = int(reply.policy_versions[0])
            return out["tokens"][0], out["log_prob"][0], float(out["value"][0]), version
        assert self.policy is not None
        sample = self.policy.act(
            torch.from_numpy(obs[None]),
            None if ids is None else torch.from_numpy(ids[None]),
            step=torch.full((1,), float(step)),
            uniforms=torch.from_numpy(noise[None]),
        )
        return (
            sample.tokens[0].numpy(), sample.log_probs[0].numpy(), float(sample.values[0]), None
        )  # fmt: skip

    def _actions(self, tokens: np.ndarray) -> np.ndarray:
        """The ``K`` env actions ``(K, D)`` of one decision's tokens."""
        if self.spec.discrete:
            return tokens - self.spec.tokenizer.offset
        return np.asarray(self.spec.tokenizer.decode(tokens))

    def rollout(self, weights: Weights, steps: int, policy_version: int) -> TokenTrajectory:
        """``steps`` decisions with ``weights`` (its observation statistics at least).

        Raises:
            ValueError: If the env returns a non-finite observation or reward.
        """
        if self.policy is not None and self._loaded != policy_version:
            load_token_policy_weights(self.policy, weights)
            self._loaded = policy_version
        stats = obs_statistics(weights) if self.config.normalize_obs else None
        k, d, n = self.config.chunk, self.spec.tokenizer.dims, self.tokens_per_decision
        obs = np.zeros((steps, self.adapter.obs_dim), np.float32)
        raw_obs = np.zeros((steps, self.adapter.obs_dim))
        tokens, log_probs = np.zeros((steps, k, d), np.int64), np.zeros((steps, k, d), np.float32)
        values, rewards = np.zeros(steps, np.float32), np.zeros(steps, np.float32)
        terminated, truncated = np.zeros(steps, bool), np.zeros(steps, bool)
        truncation_values, step_index = np.zeros(steps, np.float32), np.zeros(steps, np.float32)
        length = self.adapter.instruction_length
        instructions = np.zeros((steps, length), np.int64) if length else None
        versions = np.zeros(steps, np.int64)
        returns: list[float] = []
        lengths: list[int] = []
        env_steps = 0
        for t in range(steps):
            raw_obs[t], obs[t], step_index[t] = self._raw, normalize_obs(self._raw, stats), self._t
            if instructions is not None and self._ids is not None:
                instructions[t] = self._ids
            tokens[t], log_probs[t], values[t], version = self._decide(
                obs[t], self._t, self._ids, self.rng.random(n)
            )
            versions[t] = policy_version if version is None else version
            for j, action in enumerate(self._actions(tokens[t])):
                observed, reward, term, trunc, _ = self.env.step(env_action(action, self.spec))
                raw, ids = self.adapter(observed)
                if not (np.all(np.isfinite(raw)) and math.isfinite(float(reward))):
                    raise ValueError(
                        f"actor {self.actor_id}: expected finite observations and rewards"
                    )
                rewards[t] += self.config.gamma**j * float(reward)
                self._return += float(reward)
                self._t += 1
                env_steps += 1
                if term or trunc:
                    terminated[t], truncated[t] = bool(term), not term
                    returns.append(self._return)
                    lengths.append(self._t)
                    if not term:  # the value of the cut-off observation bootstraps it
                        truncation_values[t] = self._decide(
                            normalize_obs(raw, stats), self._t, ids, self.rng.random(n)
                        )[2]
                    raw, ids = self.adapter(self.env.reset()[0])
                    self._t, self._return = 0, 0.0
                    break
            self._raw, self._ids = raw, ids
        # Bootstrap values read the hidden states of sampled tokens, as the learner's do.
        last = self._decide(
            normalize_obs(self._raw, stats), self._t, self._ids, self.rng.random(n)
        )[2]
        return TokenTrajectory(
            obs=obs, actions=tokens, log_probs=log_probs, values=values, rewards=rewards,
            terminated=terminated, truncated=truncated, truncation_values=truncation_values,
            last_value=last, episode_returns=returns, episode_lengths=lengths,
            actor_id=self.actor_id, policy_version=policy_version, seed=self.seed,
            steps=step_index, raw_obs=raw_obs, instructions=instructions, env_steps=env_steps,
            policy_versions=versions if self.client is not None else None,
        )  # fmt: skip

    def close(self) -> None:
        """Close the env (and the inference client)."""
        if self.client is not None:
            self.client.close()
        self.env.close()


__all__ = ["TokenActor", "TokenTrajectory", "normalize_obs", "obs_statistics"]
