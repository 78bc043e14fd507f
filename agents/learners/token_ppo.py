"""Token-level PPO: a :class:`~fleetgym.agents.tokens.policy.TokenPolicy` trained on an env.

:class:`TokenPPO` is the SB3-shaped entry point (``learn(total_timesteps)``, ``predict``,
``save`` / ``load``) for a VLA-style policy whose actions are chains of tokens. Each update:

1. :class:`~fleetgym.agents.rollout.token_rollout.TokenRolloutCollector` runs ``n_steps``
   decisions in each of ``n_envs`` envs; behaviour log-probs come from the KV-cached
   decoding through the slim head's restricted softmax
   (:func:`~fleetgym.agents.tokens.head.action_log_softmax`), the same function the
   learner's teacher-forced pass ends in, so the ratios start at 1;
2. advantages per env by the registered loss's estimator
   (:func:`~fleetgym.agents.learners.losses.registry.get_loss`): GAE (PPO-clip, GIPO) or
   V-trace targets (``loss="vtrace"``, with chunk-level log-ratios of the policy at the
   start of the update), discounting by ``gamma^K`` between decisions of ``K`` actions;
3. ``epochs`` passes of shuffled minibatches of
   :func:`~fleetgym.agents.learners.losses.level_policy_loss` at the configured
   ``ratio_level`` (``"token"``: one ratio and clip per token; ``"action"``: one per
   action, the sum of its ``D`` token log-probs; ``"chunk"``: one per decision), each
   decision's terms summed (``level_scale="decision"``: one gradient scale at every level),
   plus ``vf_coef`` times the value head's squared error and minus ``ent_coef`` times the
   mean token entropy; the tokens of actions an episode's end cut from a chunk are masked
   out of all three; an optional KL budget (``target_kl``, on the chunk-level estimate) ends
   the update early, by default for GIPO and V-trace, which have no trust region.

With ``D = 1`` ``"action"`` is ``"token"``; with ``K = 1`` ``"action"`` is ``"chunk"``.
"""

from __future__ import annotations

import collections
import dataclasses
import json
import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import torch
from torch import nn

from fleetgym.agents.files import check_path, load_torch_file
from fleetgym.agents.learners.losses.functions import kl_estimate, normalize
from fleetgym.agents.learners.losses.levels import level_log_probs, level_policy_loss
from fleetgym.agents.learners.losses.registry import get_loss
from fleetgym.agents.learners.token_config import (
    TokenPPOConfig,
    build_token_policy,
)
from fleetgym.agents.policies.running_stats import RunningMeanStd
from fleetgym.agents.rollout.token_rollout import (
    TokenEnvSpec,
    TokenRollout,
    TokenRolloutCollector,
    env_action,
    env_factory,
    token_env_spec,
)
from fleetgym.agents.tokens.local import resolve_device
from fleetgym.agents.tokens.missions import InstructionEncoder
from fleetgym.agents.tokens.policy import TokenPolicy
from fleetgym.validation import check_int, quote

#: Completed episodes the reported mean return averages over.
RETURN_WINDOW = 20
#: What :meth:`TokenPPO.save` writes under ``"kind"``.
FILE_KIND = "fleetgym.TokenPPO"


@dataclass
class TokenUpdateStats:
    """One update: env steps so far, wall time, returns and the loss terms.

    Args:
        update: Updates so far, this one included (1 for the first).
        env_steps: Env steps the model collected so far (``K`` per decision).
        wall_s: Wall seconds of all updates so far; with :meth:`TokenPPO.learn`, their
            rollout collection included.
        mean_return: Mean return of the last (up to) 20 completed episodes; NaN before
            the first.
        episodes: Episodes that ended in this update's rollout.
        policy_loss, value_loss, entropy, clip_fraction: Means over the update's gradient
            steps of the policy term, the value loss (0.5 * MSE), the entropy of the
            executed actions' tokens and the loss's fraction (clipped, outside ``sigma``
            or truncated terms).
        value_error: Root-mean-square error of the rollout's recorded values against their
            targets, in units of the (scaled) return.
        kl: Chunk-level ``KL(mu || pi)`` estimate at the last minibatch that took a step,
            measured before that step (0.0 if none did).
        minibatches: Gradient steps taken (fewer when the KL budget ended the update).
    """

    update: int
    env_steps: int
    wall_s: float
    mean_return: float
    episodes: int
    policy_loss: float
    value_loss: float
    value_error: float
    entropy: float
    clip_fraction: float
    kl: float
    minibatches: int


def _chunk(token_log_probs: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
    return level_log_probs(token_log_probs, "chunk", mask)


def _rows(tensor: torch.Tensor | None, index: Any) -> torch.Tensor | None:
    return None if tensor is None else tensor[index]


def _checked_policy(policy: Any, config: TokenPPOConfig) -> TokenPolicy:
    if not isinstance(policy, TokenPolicy):
        raise TypeError(
            f"policy_factory: expected it to return a TokenPolicy, actual {quote(policy)}"
        )
    if policy.chunk != config.chunk:
        raise ValueError(
            f"policy_factory: expected a policy of chunk {config.chunk} (the config's), actual "
            f"{policy.chunk}"
        )
    return policy


class TokenPPO:
    """PPO for a token policy on a Box or Discrete env, with the ratio level as a switch.

    Models the training loop of a VLA policy fine-tuned with RL (AcceRL's token-level PPO,
    RLinf's ``logprob_type``) at a size that trains on a CPU: the policy, its collector and
    its optimiser, in the mould of SB3's ``PPO``.

    Args:
        env: A Gymnasium env id or a callable returning an env (Box or Discrete actions;
            flat Box observations or BabyAI's image + mission, see
            :func:`~fleetgym.agents.rollout.token_rollout.token_env_spec`).
        seed: Seeds the weights, the envs, the sampling and the minibatch order.
        backbone_module: Your own causal LM (a
            :class:`~fleetgym.agents.tokens.backbones.CausalBackbone` or a Hugging Face
            causal LM) instead of ``config.backbone``.
        policy_factory: ``policy_factory(spec)`` returns the policy instead (e.g.
            :meth:`TokenPolicy.from_pretrained
            <fleetgym.agents.tokens.policy.TokenPolicy.from_pretrained>` with
            ``tokenizer=spec.tokenizer``, ``obs_dim=spec.obs_dim``,
            ``instruction_length=spec.instruction_length``); it runs under the seed, and
            its ``chunk`` must be ``config.chunk``.
        vocabulary: The instruction encoder of a language-conditioned env (a
            :class:`~fleetgym.agents.tokens.MissionVocabulary`, the default, or an
            :class:`~fleetgym.agents.tokens.InstructionTokenizer`).
        device: Where the policy and the update run (``"cpu"``, ``"cuda[:N]"``); the envs
            and the sampling's generator stay on the host.
        config: A :class:`TokenPPOConfig`; or give its fields as keywords.
        **kwargs: Fields of :class:`TokenPPOConfig` (``chunk=2``, ``lr=1e-4`` ...) when
            ``config`` is not given; the others keep their defaults.

    Example:
        >>> model = TokenPPO("Pendulum-v1", chunk=2, n_envs=2, n_steps=8, epochs=1,
        ...                  hidden_size=16, layers=1, heads=2, vocab_size=64, num_bins=16)
        >>> stats = model.learn(total_timesteps=64).history[-1]
        >>> stats.env_steps, model.predict(np.zeros(3))[0].shape
        (64, (2, 1))

    Raises:
        TypeError / ValueError: For a bad env, an unknown or out-of-range hyperparameter,
            or an env whose spaces the policy cannot take.
    """

    def __init__(
        self,
        env: str | Callable[[], gym.Env],
        seed: int = 0,
        *,
        backbone_module: nn.Module | None = None,
        policy_factory: Callable[[TokenEnvSpec], TokenPolicy] | None = None,
        vocabulary: InstructionEncoder | None = None,
        device: str = "cpu",
        config: TokenPPOConfig | None = None,
        **kwargs: Any,
    ) -> None:
        if config is not None and kwargs:
            raise TypeError(
                "TokenPPO: expected either config= or keyword hyperparameters, not both"
            )
        fields = {f.name for f in dataclasses.fields(TokenPPOConfig)}
        unknown = sorted(set(kwargs) - fields)
        if unknown:
            raise TypeError(
                f"TokenPPO: expected hyperparameters among {sorted(fields)}, actual {unknown}"
            )
        self.config = cfg = config if config is not None else TokenPPOConfig(**kwargs)
        self.seed = check_int("seed", seed, low=0)
        self.make_env = env_factory(env)
        self.device = resolve_device("device", device)
        if backbone_module is not None and policy_factory is not None:
            raise TypeError("backbone_module, policy_factory: expected at most one of them")
        probe = self.make_env()
        self.spec = spec = token_env_spec(probe, cfg.num_bins, cfg.vocab_size, vocabulary)
        self.action_shape = spec.action_shape
        probe.close()
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(self.seed)
            if policy_factory is None:
                self.policy = build_token_policy(cfg, spec, backbone_module)
            else:
                self.policy = _checked_policy(policy_factory(spec), cfg)
        self.policy.to(self.device)
        self.optimizer = torch.optim.Adam(
            [p for p in self.policy.parameters() if p.requires_grad], lr=cfg.lr, eps=1e-5
        )
        self.collector = TokenRolloutCollector(
            self.make_env, self.policy, cfg.n_envs, self.seed, cfg.gamma, cfg.normalize_obs,
            vocabulary,
        )  # fmt: skip
        self.generator = torch.Generator().manual_seed(self.seed)
        self.return_stats = RunningMeanStd()
        self._discounted = np.zeros(cfg.n_envs)
        self.recent_returns: collections.deque[float] = collections.deque(maxlen=RETURN_WINDOW)
        self.history: list[TokenUpdateStats] = []
        self.num_updates = 0
        self._wall = 0.0

    @property
    def env_steps(self) -> int:
        """Env steps collected so far."""
        return self.collector.total_env_steps

    # ----------------------------------------------------------------- training
    def learn(
        self, total_timesteps: int, callback: Callable[[TokenUpdateStats], Any] | None = None
    ) -> TokenPPO:
        """Collect and update until ``total_timesteps`` more env steps; returns ``self``.

        Args:
            total_timesteps: Env steps to collect in this call (>= 1); the last update's
                rollout may overshoot it.
            callback: Called with each update's :class:`TokenUpdateStats`; returning
                ``False`` (not merely a falsy value) stops training.
        """
        target = self.env_steps + check_int("total_timesteps", total_timesteps, low=1)
        while self.env_steps < target:
            start = time.perf_counter()
            rollout = self.collector.collect(self.policy, self.config.n_steps)
            stats = self.update(rollout, start)
            if callback is not None and callback(stats) is False:
                break
        return self

    def _scaled_rewards(self, rollout: TokenRollout) -> np.ndarray:
        rewards = rollout.rewards.astype(np.float64)
        if not self.config.normalize_reward:
            return rewards
        gamma_k = self.config.gamma**self.config.chunk
        done = rollout.terminated | rollout.truncated
        discounted = np.empty_like(rewards)
        for t in range(rewards.shape[0]):
            self._discounted = self._discounted * gamma_k + rewards[t]
            discounted[t] = self._discounted
            self._discounted[done[t]] = 0.0
        self.return_stats.update(discounted)
        return rewards / math.sqrt(float(self.return_stats.var) + 1e-8)

    def _targets(
        self, rollout: TokenRollout, flat: dict[str, torch.Tensor]
    ) -> tuple[np.ndarray, np.ndarray]:
        """Advantages and value targets ``(T, N)`` by the loss's estimator (GAE, V-trace ...).

        A loss whose estimator needs the ratios (``needs_log_rhos``) gets the chunk-level
        log-ratios of the policy at the start of the update.
        """
        cfg = self.config
        policy_loss = get_loss(cfg.loss)
        rewards = self._scaled_rewards(rollout)
        gamma_k = cfg.gamma**cfg.chunk
        log_rhos = None
        if policy_loss.needs_log_rhos:
            with torch.no_grad():
                current = torch.cat([
                    self.policy.evaluate(flat["obs"][i : i + 1024], flat["tokens"][i : i + 1024],
                                         _rows(flat.get("instructions"), slice(i, i + 1024)),
                                         step=flat["steps"][i : i + 1024]).log_probs.cpu()
                    for i in range(0, flat["obs"].shape[0], 1024)
                ])  # fmt: skip
            mask = flat.get("mask")
            log_rhos = (_chunk(current, mask) - _chunk(flat["old"], mask)).numpy()
            log_rhos = log_rhos.reshape(rewards.shape)
        adv, ret = np.zeros_like(rewards, np.float32), np.zeros_like(rewards, np.float32)
        for i in range(rewards.shape[1]):
            series = (
                rewards[:, i], rollout.values[:, i], rollout.terminated[:, i],
                rollout.truncated[:, i], rollout.truncation_values[:, i],
                float(rollout.last_values[i]),
            )  # fmt: skip
            rhos = None if log_rhos is None else log_rhos[:, i]
            adv[:, i], ret[:, i] = policy_loss.targets(*series, rhos, gamma_k, cfg.gae_lambda)
        return adv, ret

    def flatten(self, rollout: TokenRollout) -> dict[str, torch.Tensor]:
        """The rollout's obs, steps, tokens and behaviour log-probs (``"old"``) over ``T N``.

        Also ``"instructions"`` and the executed-action ``"mask"`` when the rollout has them.

        Args:
            rollout: A :class:`~fleetgym.agents.rollout.token_rollout.TokenRollout` of
                ``T`` decisions in each of ``N`` envs, with this config's ``chunk``.
        """
        b, k = rollout.num_decisions, self.config.chunk
        arrays = (rollout.obs, rollout.steps, rollout.tokens, rollout.log_probs)
        shapes = ((b, -1), (b,), (b, k, -1), (b, k, -1))
        names = ("obs", "steps", "tokens", "old")
        flat = {
            n: torch.from_numpy(a.reshape(s)) for n, a, s in zip(names, arrays, shapes, strict=True)
        }
        if rollout.instructions is not None:
            flat["instructions"] = torch.from_numpy(rollout.instructions.reshape(b, -1))
        if rollout.executed is not None:
            flat["mask"] = torch.from_numpy(rollout.executed.reshape(b, k))
        return flat

    def update(self, rollout: TokenRollout, start: float | None = None) -> TokenUpdateStats:
        """One PPO update (``epochs`` passes of minibatches) from one rollout.

        Args:
            rollout: A :class:`~fleetgym.agents.rollout.token_rollout.TokenRollout` of this
                model's policy and envs (what its collector returns).
            start: The :func:`time.perf_counter` time the work on this update began (the
                rollout's collection, as :meth:`learn` passes it), counted into
                ``wall_s``; ``None``: now.

        Returns:
            The update's :class:`TokenUpdateStats`, also appended to :attr:`history`.
        """
        start = time.perf_counter() if start is None else start
        cfg, pol = self.config, self.policy
        b, flat = rollout.num_decisions, self.flatten(rollout)
        adv_np, ret_np = self._targets(rollout, flat)
        dev = pol.device
        adv = torch.from_numpy(adv_np.reshape(b)).to(dev)
        ret = torch.from_numpy(ret_np.reshape(b)).to(dev)
        budget = cfg.effective_target_kl
        totals: collections.defaultdict[str, float] = collections.defaultdict(float)
        count, mb, stopped = 0, min(cfg.minibatch_size, b), False
        pol.train()
        for _ in range(cfg.epochs):
            order = torch.randperm(b, generator=self.generator)
            for lo in range(0, b - 1, mb):
                idx = order[lo : lo + mb]
                ev = pol.evaluate(
                    flat["obs"][idx], flat["tokens"][idx], _rows(flat.get("instructions"), idx),
                    step=flat["steps"][idx],
                )  # fmt: skip
                old, mask = flat["old"][idx].to(dev), _rows(flat.get("mask"), idx)
                mask = None if mask is None else mask.to(dev)
                kl = float(kl_estimate(_chunk(ev.log_probs, mask), _chunk(old, mask)))
                if budget is not None and kl > budget:
                    stopped = True
                    break
                pg, clip_fraction = level_policy_loss(
                    ev.log_probs, old, normalize(adv[idx]), level=cfg.ratio_level,
                    loss=cfg.loss, clip=cfg.clip, sigma=cfg.sigma, mask=mask,
                    scale=cfg.level_scale,
                )  # fmt: skip
                v_loss = 0.5 * (ev.values - ret[idx]).square().mean()
                if mask is None:
                    entropy = ev.entropy.mean()
                else:  # the tokens of executed actions only
                    valid = mask.unsqueeze(-1).expand_as(ev.entropy)
                    entropy = ev.entropy[valid].mean()
                loss = pg + cfg.vf_coef * v_loss - cfg.ent_coef * entropy
                self.optimizer.zero_grad(set_to_none=True)
                loss.backward()
                nn.utils.clip_grad_norm_(pol.parameters(), cfg.max_grad_norm)
                self.optimizer.step()
                for key, value in zip(
                    ("pg", "v", "ent", "clip"), (pg, v_loss, entropy, clip_fraction), strict=True
                ):
                    totals[key] += float(value.detach())
                totals["kl"] = kl
                count += 1
            if stopped:
                break
        pol.eval()
        self.recent_returns.extend(rollout.episode_returns)
        self.num_updates += 1
        self._wall += time.perf_counter() - start
        n = max(count, 1)
        stats = TokenUpdateStats(
            update=self.num_updates,
            env_steps=self.env_steps,
            wall_s=self._wall,
            mean_return=float(np.mean(self.recent_returns or [np.nan])),
            episodes=len(rollout.episode_returns),
            policy_loss=totals["pg"] / n,
            value_loss=totals["v"] / n,
            # In units of the (scaled) return: how well the value head predicts its target.
            value_error=float(np.sqrt(np.mean(np.square(rollout.values - ret_np)))),
            entropy=totals["ent"] / n,
            clip_fraction=totals["clip"] / n,
            kl=totals["kl"],
            minibatches=count,
        )
        self.history.append(stats)
        return stats

    # ----------------------------------------------------------------- acting
    def predict(
        self, obs: Any, deterministic: bool = True, step: int = 0
    ) -> tuple[np.ndarray, None]:
        """The action for one observation (SB3's ``predict``): ``(action, None)``.

        With ``chunk=1`` the action has the env's shape; with ``chunk=K`` it is ``(K, D)``,
        the chunk to execute in order. The observation statistics are not updated.

        Args:
            obs: One observation as the env returns it.
            deterministic: Take each token's most likely bin; ``False`` samples with the
                model's generator (the one that also shuffles the minibatches).
            step: The env step within the episode; the policy reads it only for its value
                estimate, so it does not change the action.
        """
        vec, ids = self.collector.observe(obs)
        x = torch.from_numpy(self.collector.normalize(vec))
        sample = self.policy.act(
            x, None if ids is None else torch.from_numpy(ids[None]),
            step=torch.full((1,), float(step)), deterministic=deterministic,
            generator=self.generator,
        )  # fmt: skip
        actions = self.collector.env_actions(self.policy, sample.tokens)[0]
        if self.config.chunk == 1:
            return actions[0].reshape(self.action_shape), None
        return actions, None

    def evaluate(
        self, episodes: int = 5, seed: int = 10_000, deterministic: bool = True
    ) -> list[float]:
        """Returns of ``episodes`` episodes on fresh envs (seeds ``seed``, ``seed + 1`` ...).

        Args:
            episodes: How many episodes (>= 1), each on a new env.
            seed: The reset seed of the first episode; episode ``e`` resets with
                ``seed + e``.
            deterministic: As in :meth:`predict`.
        """
        returns = []
        for e in range(check_int("episodes", episodes, low=1)):
            env = self.make_env()
            obs, _ = env.reset(seed=seed + e)
            total, t, done = 0.0, 0, False
            while not done:
                chunk, _ = self.predict(obs, deterministic=deterministic, step=t)
                for action in np.asarray(chunk).reshape(self.config.chunk, -1):
                    obs, r, term, trunc, _ = env.step(env_action(action, self.spec))
                    total, t, done = total + float(r), t + 1, bool(term or trunc)
                    if done:
                        break
            env.close()
            returns.append(total)
        return returns

    # ----------------------------------------------------------------- files
    def save(self, path: str | Path) -> Path:
        """Write the policy, the observation statistics and the config (``torch.save``).

        Holds tensors and plain values only (loads with ``torch.load(weights_only=True)``).

        Args:
            path: The file to write (``str`` or ``os.PathLike``); its folder must exist.

        Returns:
            ``path`` as a :class:`~pathlib.Path`.
        """
        path = check_path("path", path)
        stats = self.collector.obs_stats
        ret = self.return_stats
        state = {
            "kind": FILE_KIND, "config": json.dumps(dataclasses.asdict(self.config), sort_keys=True),
            "policy": self.policy.state_dict(), "num_updates": self.num_updates,
            "obs_mean": torch.from_numpy(np.asarray(stats.mean, np.float64)),
            "obs_var": torch.from_numpy(np.asarray(stats.var, np.float64)),
            "obs_count": float(stats.count), "return_var": float(ret.var),
            "return_count": float(ret.count),
        }  # fmt: skip
        torch.save(state, path)
        return path

    def load(self, path: str | Path) -> None:
        """Restore what :meth:`save` wrote; the file must be of the same config.

        Args:
            path: A file :meth:`save` wrote (``str`` or ``os.PathLike``).

        Raises:
            FileNotFoundError: If it does not exist.
            ValueError: If it is not a TokenPPO file or was written with another config.
        """
        path = check_path("path", path)
        state = load_torch_file(path, "a TokenPPO file")
        if state.get("kind") != FILE_KIND:
            raise ValueError(
                f"{path}: expected a TokenPPO file, actual kind {quote(state.get('kind'))}"
            )
        mine = json.dumps(dataclasses.asdict(self.config), sort_keys=True)
        if state.get("config") != mine:
            raise ValueError(
                f"{path}: expected the config {mine}, actual {quote(state.get('config'))}"
            )
        self.policy.load_state_dict(state["policy"])
        stats = self.collector.obs_stats
        stats.mean, stats.var = state["obs_mean"].numpy(), state["obs_var"].numpy()
        stats.count = float(state["obs_count"])
        self.return_stats.var, self.return_stats.count = state["return_var"], state["return_count"]
        self.num_updates = int(state["num_updates"])
