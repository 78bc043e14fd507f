"""The learned scheduler's configuration: its env IDs and its PPO hyperparameters.

The scheduler of MinionsRL is a small PPO agent: policy and value networks of two
64-unit tanh layers, Adam at a learning rate of 0.005 (ours: 0.001 with a KL limit per
update), trained for 100 episodes, where
one episode is one whole training run of a workload and one step is one round of it.

Why ``n_steps=64`` and ``batch_size=32`` by default: an episode is tens of rounds, so 100
episodes are a few thousand scheduler steps. SB3's default ``n_steps=2048`` would give
one or two updates in the whole budget; 64 steps per update (about two episodes) gives
dozens of updates, each with ``n_epochs=10`` passes of two minibatches of 32. Fewer than
64 steps would make the per-update advantage normalisation rest on one episode.

Example:
    >>> cfg = SchedulerPPOConfig(n_steps=16, batch_size=8)
    >>> cfg.policy_kwargs()["net_arch"]
    {'pi': [64, 64], 'vf': [64, 64]}
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

from fleetgym.agents.schedulers.actions import ACTION_MODES, fleet_sizes

__all__ = [
    "CARTPOLE_MODELED_ENV_ID",
    "DEFAULT_START_SEARCH",
    "GENERAL_ENV_ID",
    "SchedulerPPOConfig",
    "stored_config",
    "validate_env_kwargs",
]

#: The deterministic CartPole scheduling env: fast, and an episode is reproducible. The
#: scheduler trains here unless told otherwise.
CARTPOLE_MODELED_ENV_ID = "fleetgym/ActorScheduling-CartPole-Modeled-v0"
#: The start sizes a ``"step"`` scheduler races before training by default (those on the
#: env's ladder): one cheap, paired comparison instead of PPO's rare tries of the first move.
DEFAULT_START_SEARCH: tuple[int, ...] = (4, 8, 16, 32)
#: The general scheduling env (kwargs ``workload``, ``timing``, ...): what
#: ``fleetgym schedule`` evaluates, trains and fine-tunes on.
GENERAL_ENV_ID = "fleetgym/ActorScheduling-v0"


@dataclass
class SchedulerPPOConfig:
    """Hyperparameters of the scheduler's PPO (defaults: the paper's, plus our update size).

    Models the MinionsRL scheduler agent (policy and value networks 2 x 64 tanh; the paper
    trains with Adam at 0.005, here 0.001 with a KL limit per update, see
    ``target_kl``). ``n_steps`` x ``n_envs`` scheduler steps (rounds) make one update;
    see the module docstring for why 64.

    Args:
        learning_rate: Adam learning rate.
        n_steps: scheduler steps per environment between updates.
        batch_size: minibatch size of each gradient step.
        n_epochs: passes over a rollout per update.
        gamma: discount of the scheduler's return (rounds are the time steps). 1 by
            default: the objective is the run's whole time (and cost), and a discount
            makes the later rounds of a long run cheap, which favours small fleets (at
            0.99 with GAE 0.95 three training seeds of the ``step`` mode drifted to one
            actor within eight episodes).
        gae_lambda: GAE lambda; 1 (Monte-Carlo returns) by default, so that what a
            smaller fleet costs at the end of the run reaches the round that chose it.
        clip_range: PPO clip range.
        ent_coef: entropy bonus; keeps the 32-way action distribution from collapsing
            before the value function has seen a few episodes.
        vf_coef: value loss weight.
        max_grad_norm: gradient clipping.
        n_envs: scheduling envs stepped together (each step of each is a real round).
        normalize_reward: scale rewards by a running std of the return (SB3
            ``VecNormalize(norm_obs=False)``); the observation is already normalised by
            the env, so a saved model needs nothing extra at evaluation.
        hidden: hidden layer sizes of both networks.
        actions: the action parametrisation
            (:data:`~fleetgym.agents.schedulers.actions.ACTION_MODES`): ``"pow2"`` (the
            default), the sizes 1, 2, 4, ..., ``max_actors``; ``"discrete"``, the env's
            ``Discrete(max_actors)`` (the paper's; 32 unordered choices collapse onto one
            early at lr 0.005); ``"log2"``, one continuous action on a log
            scale.
        start_actors: with ``actions="step"``, the fleet size an episode starts from
            (None: the middle of the ladder, 8 of 1-32).
        keep_prior: with ``actions="step"``, the initial policy's probability of keeping
            the current size (the two moves share the rest; 1/3 is uniform). A uniform
            start walks the fleet at random, and each step up pays a cold start; 0.9
            explores one move in ten rounds.
        target_kl: end an update's epochs once the policy has moved this far (SB3's
            ``target_kl``; None: never). With an untrained critic, the first updates'
            advantages are mostly noise; at lr 0.005 and no limit one update was enough to
            send a ``step`` scheduler from 8 actors to 1 or to 32 for the rest of its
            training (2 of 3 seeds).
        paired_seeds: train each env on a pool of this many workload seeds, every round
            paid relative to a constant fleet of the start size on the same seed (common
            random numbers, :mod:`fleetgym.experiments.schedule.paired`); 0: a fresh seed
            every episode and the env's own reward. Without it, five CartPole training
            seeds split between keeping 8 actors and climbing to 32 (22 % short of the
            best fixed fleet); paired on 8 seeds all five landed within 5 % of it.
        first_keep_prior: with ``actions="step"``, the initial policy's probability of
            keeping the start size at the *first* decision (None: ``keep_prior``, as in
            every round). 1/3 explores the first move uniformly while later rounds keep
            the prior (:mod:`fleetgym.experiments.schedule.policy`).
        train_starts: with ``actions="step"``, exploring starts: each training episode
            starts from a size drawn from these ladder sizes (evaluation still starts from
            ``start_actors``). Empty: every episode starts from ``start_actors``.
        start_search: with ``actions="step"`` and ``paired_seeds``, choose the start size
            before training: each of these sizes runs as a constant fleet on the pool's
            workload seeds and the best mean total reward becomes ``start_actors``
            (:mod:`fleetgym.experiments.schedule.start`); the policy then learns the moves
            from there. Empty: start from ``start_actors``. None (the default):
            :data:`DEFAULT_START_SEARCH` up to the env's ``max_actors`` where there is a
            start to choose and a pool (``actions="step"``, ``paired_seeds`` >= 1,
            ``start_actors`` None), else off. Only a
            fresh training run selects; resuming and fine-tuning keep the stored start.
        start_search_seeds: workload seeds the start-size race may use: every size runs on
            the ``paired_seeds`` training pool, the close ones go on over more seeds (the
            pool's continuation) until one is ahead by two standard errors or these run
            out.
        check_moves: with ``actions="step"`` and ``paired_seeds``, after training play
            the deterministic scheduler on the training pool and keep its moves only if
            they beat the constant fleet of its start size there on average; else its
            action head is reset so that it keeps the start size
            (:mod:`fleetgym.experiments.schedule.moves`). None (the default): on where
            there are moves and a pool (``actions="step"``, ``paired_seeds`` >= 1).
        use_sde: with ``actions="log2"``, generalised state-dependent exploration (SB3
            ``use_sde``, noise drawn once per rollout), so that exploration changes the
            fleet size smoothly with the state instead of at random every round.

    Example:
        >>> SchedulerPPOConfig().learning_rate
        0.001
        >>> SchedulerPPOConfig(n_steps=10, batch_size=4).rollout_size
        10

    Raises:
        ValueError: a non-positive size or rate, or a batch larger than a rollout.
    """

    learning_rate: float = 0.001
    n_steps: int = 64
    batch_size: int = 32
    n_epochs: int = 10
    gamma: float = 1.0
    gae_lambda: float = 1.0
    clip_range: float = 0.2
    ent_coef: float = 0.01
    vf_coef: float = 0.5
    max_grad_norm: float = 0.5
    n_envs: int = 1
    normalize_reward: bool = False
    hidden: tuple[int, ...] = (64, 64)
    actions: str = "step"
    use_sde: bool = False
    start_actors: int | None = None
    keep_prior: float = 0.9
    first_keep_prior: float | None = None
    target_kl: float | None = 0.02
    paired_seeds: int = 8
    train_starts: tuple[int, ...] = ()
    start_search: tuple[int, ...] | None = None
    start_search_seeds: int = 24
    check_moves: bool | None = None

    def __post_init__(self) -> None:
        if self.actions not in ACTION_MODES:
            raise ValueError(f"actions: expected one of {ACTION_MODES}, actual {self.actions!r}")
        if self.start_actors is not None and (
            isinstance(self.start_actors, bool)
            or not isinstance(self.start_actors, int)
            or self.start_actors < 1
        ):
            raise ValueError(
                f"start_actors: expected None or a positive int, actual {self.start_actors!r}"
            )
        if (
            isinstance(self.keep_prior, bool)
            or not isinstance(self.keep_prior, (int, float))
            or not 0 < self.keep_prior < 1
        ):
            raise ValueError(f"keep_prior: expected a number in (0, 1), actual {self.keep_prior!r}")
        if self.first_keep_prior is not None:
            if (
                isinstance(self.first_keep_prior, bool)
                or not isinstance(self.first_keep_prior, (int, float))
                or not 0 < self.first_keep_prior < 1
            ):
                raise ValueError(
                    f"first_keep_prior: expected None or a number in (0, 1), "
                    f"actual {self.first_keep_prior!r}"
                )
            if self.actions != "step":
                raise ValueError("first_keep_prior: needs a first move, actions='step'")
        if self.target_kl is not None and (
            isinstance(self.target_kl, bool)
            or not isinstance(self.target_kl, (int, float))
            or not 0 < self.target_kl < math.inf
        ):
            raise ValueError(
                f"target_kl: expected None or a positive number, actual {self.target_kl!r}"
            )
        if self.use_sde and self.actions != "log2":
            raise ValueError("use_sde: needs a continuous action space, actions='log2'")
        if (
            isinstance(self.paired_seeds, bool)
            or not isinstance(self.paired_seeds, int)
            or self.paired_seeds < 0
        ):
            raise ValueError(f"paired_seeds: expected an int >= 0, actual {self.paired_seeds!r}")
        self.train_starts = _sizes("train_starts", self.train_starts)
        if self.train_starts and self.actions != "step":
            raise ValueError("train_starts: needs a start, actions='step'")
        if self.start_search is not None:
            self.start_search = _sizes("start_search", self.start_search)
        if self.check_moves is not None and not isinstance(self.check_moves, bool):
            raise ValueError(f"check_moves: expected None or a bool, actual {self.check_moves!r}")
        if (
            isinstance(self.start_search_seeds, bool)
            or not isinstance(self.start_search_seeds, int)
            or self.start_search_seeds < 2
        ):
            raise ValueError(
                f"start_search_seeds: expected an int >= 2, actual {self.start_search_seeds!r}"
            )
        if self.check_moves and not self.paired_step:
            raise ValueError(
                "check_moves: needs moves and a pool of seeds to check them on, "
                "actions='step' and paired_seeds >= 1"
            )
        if self.start_search and not self.paired_step:
            raise ValueError(
                "start_search: needs a start and a pool of seeds to compare on, "
                "actions='step' and paired_seeds >= 1"
            )
        for name in ("n_steps", "batch_size", "n_epochs", "n_envs"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{name}: expected a positive int, actual {value!r}")
        for name in ("learning_rate", "gamma", "clip_range", "max_grad_norm"):
            value = getattr(self, name)
            if not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0:
                raise ValueError(f"{name}: expected a positive finite number, actual {value!r}")
        if not 0 < self.gamma <= 1:
            raise ValueError(f"gamma: expected a number in (0, 1], actual {self.gamma!r}")
        if not 0 <= self.gae_lambda <= 1:
            raise ValueError(f"gae_lambda: expected a number in [0, 1], actual {self.gae_lambda!r}")
        if self.ent_coef < 0 or self.vf_coef < 0:
            raise ValueError(
                f"ent_coef, vf_coef: expected numbers >= 0, actual {self.ent_coef!r}, {self.vf_coef!r}"
            )
        if self.batch_size > self.rollout_size:
            raise ValueError(
                f"batch_size: expected at most n_steps * n_envs = {self.rollout_size}, "
                f"actual {self.batch_size}"
            )
        self.hidden = tuple(int(h) for h in self.hidden)
        if not self.hidden or any(h < 1 for h in self.hidden):
            raise ValueError(f"hidden: expected positive layer sizes, actual {self.hidden!r}")

    @property
    def paired_step(self) -> bool:
        """A ``"step"`` scheduler trained on a pool of paired seeds: it has a start size
        to select and moves to check."""
        return self.actions == "step" and self.paired_seeds >= 1

    def resolved(self, max_actors: int) -> SchedulerPPOConfig:
        """This config with ``start_search`` and ``check_moves`` made concrete for an env
        of ``max_actors`` (what a checkpoint stores).

        Example:
            >>> SchedulerPPOConfig().resolved(32).start_search
            (4, 8, 16, 32)
            >>> cfg = SchedulerPPOConfig().resolved(8)
            >>> cfg.start_search, cfg.check_moves
            ((4, 8), True)
            >>> SchedulerPPOConfig(actions="pow2").resolved(32).start_search
            ()
            >>> SchedulerPPOConfig(start_actors=16).resolved(32).start_search
            ()
        """
        search = self.start_search
        if search is None:
            ladder = fleet_sizes(max_actors)
            auto = self.paired_step and self.start_actors is None
            search = tuple(n for n in DEFAULT_START_SEARCH if n in ladder) if auto else ()
            if len(search) < 2:
                search = ()
        check = self.paired_step if self.check_moves is None else self.check_moves
        return replace(self, start_search=search, check_moves=check)

    @property
    def rollout_size(self) -> int:
        """Scheduler steps collected per update."""
        return self.n_steps * self.n_envs

    def policy_kwargs(self) -> dict[str, Any]:
        """SB3 ``policy_kwargs``: separate 2 x 64 tanh policy and value networks."""
        import torch.nn as nn

        return {
            "net_arch": {"pi": list(self.hidden), "vf": list(self.hidden)},
            "activation_fn": nn.Tanh,
        }

    def ppo_kwargs(self) -> dict[str, Any]:
        """Keyword arguments of ``stable_baselines3.PPO`` (all but env and policy)."""
        return {
            "learning_rate": self.learning_rate,
            "n_steps": self.n_steps,
            "batch_size": self.batch_size,
            "n_epochs": self.n_epochs,
            "gamma": self.gamma,
            "gae_lambda": self.gae_lambda,
            "clip_range": self.clip_range,
            "ent_coef": self.ent_coef,
            "vf_coef": self.vf_coef,
            "max_grad_norm": self.max_grad_norm,
            "target_kl": self.target_kl,
            "policy_kwargs": self.policy_kwargs(),
            **({"use_sde": True, "sde_sample_freq": -1} if self.use_sde else {}),
        }


def _sizes(name: str, sizes: Any) -> tuple[int, ...]:
    sizes = tuple(sizes)
    if any(isinstance(n, bool) or not isinstance(n, int) or n < 1 for n in sizes):
        raise ValueError(f"{name}: expected positive ints (ladder sizes), actual {sizes!r}")
    return sizes


def validate_env_kwargs(env_kwargs: Mapping[str, Any] | None) -> dict[str, Any]:
    """``env_kwargs`` as a fresh dict (None: empty).

    Raises:
        TypeError: ``env_kwargs`` is not a mapping.
    """
    if env_kwargs is None:
        return {}
    if not isinstance(env_kwargs, Mapping):
        raise TypeError(f"env_kwargs: expected a mapping, actual {type(env_kwargs).__name__}")
    return dict(env_kwargs)


def stored_config(meta: Mapping[str, Any]) -> dict[str, Any]:
    """The :class:`SchedulerPPOConfig` keyword arguments stored in a checkpoint's metadata."""
    cfg = dict(meta.get("config", {}))
    # Checkpoints from before the action modes acted in the env's own Discrete space.
    cfg.setdefault("actions", "discrete")
    # ... and before paired seeds, on a fresh workload seed every episode.
    cfg.setdefault("paired_seeds", 0)
    # ... and before the start-size selection.
    cfg.setdefault("start_search", ())
    cfg.setdefault("check_moves", False)
    for name in ("hidden", "train_starts", "start_search"):
        if cfg.get(name) is not None:
            cfg[name] = tuple(cfg[name])
    return {k: v for k, v in cfg.items() if k in SchedulerPPOConfig.__dataclass_fields__}
