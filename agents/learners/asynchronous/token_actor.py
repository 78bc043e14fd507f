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

Observations are normalised where the tokens are decoded, by the
:class:`~fleetgym.agents.inference.token_model.TokenPolicyModel` (local or the server's),
with the statistics published with the weights; the trajectory keeps both the normalised
observation the policy saw (the model's ``policy_obs``: what the learner re-evaluates, so
ratios start at 1) and the raw one (what the learner folds into the next statistics).
A local actor runs the same model class the server runs, on its own copy of the weights.

Seeding: slot ``i`` of a trainer seeded ``s``, incarnation ``k``, builds its env and
generator from ``SeedSequence([s, i, k])``, as
:class:`~fleetgym.agents.rollout.RolloutWorker` does.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from fleetgym.agents.inference.token_model import TokenPolicyModel, pack_token_request
from fleetgym.agents.learners.token_config import TokenPPOConfig, build_token_policy
from fleetgym.agents.rollout.token_rollout import ObservationAdapter, env_action, token_env_spec
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
    chunk), ``executed`` ``(n, K)`` which of a decision's actions the env ran (not those
    after an episode ended inside the chunk) and ``policy_versions`` the version that
    decoded each decision (served only).
    """

    steps: np.ndarray = field(default_factory=lambda: np.zeros(0, np.float32))
    raw_obs: np.ndarray = field(default_factory=lambda: np.zeros((0, 0)))
    instructions: np.ndarray | None = None
    env_steps: int = 0
    policy_versions: np.ndarray | None = None
    executed: np.ndarray | None = None


class TokenActor:
    """One asynchronous actor slot stepping its env with a token policy.

    Models a VLA rollout worker: one persistent environment, decisions of ``K D`` tokens
    decoded locally or by an inference server, whole rollouts handed to the learner.

    Args:
        workload: What the env is (:meth:`~fleetgym.agents.workloads.Workload.make_env`).
        actor_id: The slot index.
        seed: The trainer's seed.
        incarnation: Restarts of this slot so far.
        config: The token policy's sizes, chunk and discount (a
            :class:`~fleetgym.agents.learners.token_config.TokenPPOConfig`).
        client: An inference client of a server serving the token policy (``None``: the
            actor decodes with its own :class:`TokenPolicyModel`, built at its first
            local rollout, and loads the weights it is given; see also
            :meth:`served_rollout`).

    Example:
        >>> from fleetgym.agents.learners.token_config import TokenPPOConfig
        >>> from fleetgym.agents.workloads import get_workload
        >>> cfg = TokenPPOConfig(hidden_size=16, layers=1, heads=2, vocab_size=64, num_bins=8)
        >>> actor = TokenActor(get_workload("CartPole-v1"), 0, 0, 0, config=cfg)
        >>> state = actor.local_model().policy.state_dict()
        >>> traj = actor.rollout({k: v.numpy() for k, v in state.items()}, 16, policy_version=3)
        >>> traj.actions.shape, traj.log_probs.shape, traj.env_steps, traj.policy_version
        ((16, 1, 1), (16, 1, 1), 16, 3)
        >>> actor.close()

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
        self._own_client = client is not None
        sequence = np.random.SeedSequence([int(seed), int(actor_id), int(incarnation)])
        env_seed, rng_seed = sequence.generate_state(2, np.uint32)
        self.seed = int(env_seed)
        self.rng = np.random.default_rng(int(rng_seed))
        self.env = workload.make_env(seed=self.seed)
        self.spec = token_env_spec(self.env, config.num_bins, config.vocab_size)
        self.adapter = ObservationAdapter(self.env.observation_space)
        self.tokens_per_decision = config.chunk * self.spec.tokenizer.dims
        self._model: TokenPolicyModel | None = None
        self._loaded: int | None = None
        self._raw, self._ids = self.adapter(self.env.reset(seed=self.seed)[0])
        self._t, self._return = 0, 0.0

    def local_model(self) -> TokenPolicyModel:
        """The actor's own model (built on first use, random weights until loaded)."""
        if self._model is None:
            self._model = TokenPolicyModel(build_token_policy(self.config, self.spec))
        return self._model

    def _decide(
        self, raw: np.ndarray, step: int, ids: np.ndarray | None, noise: np.ndarray
    ) -> tuple[dict[str, np.ndarray], int | None]:
        """One decision's answer (tokens, log-probs, value, the observation the policy saw)
        and the answering version (``None`` when local)."""
        request = pack_token_request(
            raw[None], np.array([step]), None if ids is None else ids[None]
        )
        if self.client is None:
            out = self.local_model().forward(request, noise[None])
            return {k: v[0] for k, v in out.items()}, None
        reply = self.client.infer(request, noise[None])
        return {k: v[0] for k, v in reply.outputs.items()}, int(reply.policy_versions[0])

    def _actions(self, tokens: np.ndarray) -> np.ndarray:
        """The ``K`` env actions ``(K, D)`` of one decision's tokens."""
        if self.spec.discrete:
            return tokens - self.spec.tokenizer.offset
        return np.asarray(self.spec.tokenizer.decode(tokens))

    def rollout(self, weights: Weights, steps: int, policy_version: int) -> TokenTrajectory:
        """``steps`` decisions: with ``weights`` locally, or through the client (whose
        server holds the weights; ``weights`` is then ignored).

        Raises:
            ValueError: If the env returns a non-finite observation or reward, or the
                weights do not fit the policy.
        """
        if self.client is None and self._loaded != policy_version:
            self.local_model().load_weights(weights)
            self._loaded = policy_version
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
        executed = np.zeros((steps, k), bool)
        returns: list[float] = []
        lengths: list[int] = []
        env_steps = 0
        for t in range(steps):
            raw_obs[t], step_index[t] = self._raw, self._t
            if instructions is not None and self._ids is not None:
                instructions[t] = self._ids
            out, version = self._decide(self._raw, self._t, self._ids, self.rng.random(n))
            obs[t], tokens[t], log_probs[t] = out["policy_obs"], out["tokens"], out["log_prob"]
            values[t] = out["value"]
            versions[t] = policy_version if version is None else version
            for j, action in enumerate(self._actions(tokens[t])):
                observed, reward, term, trunc, _ = self.env.step(env_action(action, self.spec))
                raw, ids = self.adapter(observed)
                if not (np.all(np.isfinite(raw)) and math.isfinite(float(reward))):
                    raise ValueError(
                        f"actor {self.actor_id}: expected finite observations and rewards"
                    )
                rewards[t] += self.config.gamma**j * float(reward)
                executed[t, j] = True
                self._return += float(reward)
                self._t += 1
                env_steps += 1
                if term or trunc:
                    terminated[t], truncated[t] = bool(term), not term
                    returns.append(self._return)
                    lengths.append(self._t)
                    if not term:  # the value of the cut-off observation bootstraps it
                        cut, _ = self._decide(raw, self._t, ids, self.rng.random(n))
                        truncation_values[t] = cut["value"]
                    raw, ids = self.adapter(self.env.reset()[0])
                    self._t, self._return = 0, 0.0
                    break
            self._raw, self._ids = raw, ids
        # The bootstrap value: a decision's value (prefix-only by default) at the last state.
        last, _ = self._decide(self._raw, self._t, self._ids, self.rng.random(n))
        return TokenTrajectory(
            obs=obs, actions=tokens, log_probs=log_probs, values=values, rewards=rewards,
            terminated=terminated, truncated=truncated, truncation_values=truncation_values,
            last_value=float(last["value"]), episode_returns=returns, episode_lengths=lengths,
            actor_id=self.actor_id, policy_version=policy_version, seed=self.seed,
            steps=step_index, raw_obs=raw_obs, instructions=instructions, env_steps=env_steps,
            policy_versions=versions if self.client is not None else None,
            executed=executed,
        )  # fmt: skip

    def served_rollout(self, client: Any, steps: int, policy_version: int) -> TokenTrajectory:
        """``steps`` decisions through ``client`` (a worker process's client of the
        trainer's server, which this actor does not close)."""
        self.client = client
        return self.rollout({}, steps, policy_version)

    def close(self) -> None:
        """Close the env (and the inference client it was built with)."""
        if self._own_client and self.client is not None:
            self.client.close()
        self.env.close()


__all__ = ["TokenActor", "TokenTrajectory"]
