"""The training workloads: which environment, how it is preprocessed, and PPO defaults for it.

A :class:`Workload` is a frozen, picklable description (plain fields only), so it crosses
process boundaries as data or simply by its name (:func:`get_workload`). Besides the
built-in names of :data:`WORKLOADS`, any Gymnasium environment is a workload:
:func:`get_workload` takes a registered ID (``"module:ID"`` and user-registered IDs
included) or an ``EnvSpec``, and :meth:`Workload.from_env` an ID or an importable
callable; the preprocessing and the PPO defaults are then inferred from the env's spaces
(:mod:`fleetgym.agents.workloads.spec`). A callable travels by its import path
(``"module:attr"``), never as pickled code. It builds the
environment an actor steps (:meth:`Workload.make_env`) and the policy it acts with
(:meth:`Workload.make_policy`). This module imports no torch: the policy module is loaded
only when a policy is built.

The defaults follow common PPO practice for each family (CleanRL / SB3 zoo): a 64x64 tanh
MLP with separate actor and critic for classic control and MuJoCo, the Nature CNN with a
shared trunk for Atari; observation normalisation and reward scaling for MuJoCo; sign-clipped
rewards for Atari (the reported returns stay the raw game score).
"""

from __future__ import annotations

import functools
import time
from dataclasses import dataclass, fields, replace
from typing import TYPE_CHECKING, Any

import gymnasium as gym

from fleetgym.agents.workloads.fields import (
    check_fields,
)
from fleetgym.agents.workloads.spec import (
    FRAME_PPO_DEFAULTS,
    EnvSource,
    build_env,
    build_error,
    describe_env,
)
from fleetgym.errors import UnknownWorkloadError

__all__ = ["WORKLOADS", "StepDelay", "Workload", "get_workload", "workload_spaces"]

if TYPE_CHECKING:  # pragma: no cover - typing only
    from fleetgym.agents.policies import ActorCriticPolicy


@dataclass(frozen=True)
class Workload:
    """One training workload: an environment, its preprocessing and its PPO defaults.

    Models what an actor of the fleet runs (``env_id`` with the family's standard
    preprocessing) and how the learner trains on it. Round sizes are per actor:
    ``rollout_steps`` environment steps per actor per round, so a round with ``I`` actors
    yields ``I * rollout_steps`` samples; ``minibatch_size`` is absolute, so the number of
    minibatches grows with the number of actors.

    Args:
        name: Workload name (the key in :data:`WORKLOADS`, or the env's ID).
        env_id: Gymnasium ID of the environment (or the ``"module:attr"`` of a callable).
        kind: ``"classic"``, ``"mujoco"``, ``"atari"`` or ``"image"`` (the family).
        target_return: Mean final episode return that counts as solved (``inf``: none
            known; training then runs its whole budget and the scheduling env needs an
            explicit ``target_return``).
        rollout_steps: Default environment steps per actor per round.
        max_rounds: A default training budget in rounds for a fleet of 8 actors.
        lr: Adam learning rate.
        epochs: Passes over a round's samples.
        minibatch_size: Samples per gradient step.
        gamma: Discount factor.
        gae_lambda: GAE lambda.
        clip_coef: PPO ratio clip range.
        ent_coef: Entropy bonus coefficient.
        vf_coef: Value loss coefficient.
        max_grad_norm: Gradient norm clip.
        network: ``"mlp"`` (separate actor and critic) or ``"nature_cnn"`` (shared trunk).
        hidden_sizes: MLP layer widths.
        activation: ``"tanh"`` or ``"relu"`` (MLP hidden activation).
        normalize_obs: Keep running observation statistics in the policy's buffers.
        reward_transform: ``"none"``, ``"sign"`` (Atari clipping) or ``"scale"`` (divide
            by the running std of discounted returns, as Gymnasium's ``NormalizeReward``).
        log_std_init: Initial log standard deviation of a Gaussian policy.
        step_delay_s: Heterogeneous actors: the median extra wall time each env step
            costs (a sleep, no CPU), modelling simulators of different cost. 0 (the
            default) adds nothing.
        step_delay_sigma: Spread of that delay across actors: each env built with a seed
            draws its delay once, ``step_delay_s * exp(step_delay_sigma * z)`` with
            ``z ~ N(0, 1)`` from the seed (log-normal: a long tail of slow actors).
        preprocessing: ``"none"``, ``"flatten"``, ``"frames"`` or ``"atari"`` (see
            :mod:`~fleetgym.agents.workloads.spec`); "" (the default): ``"atari"`` for the
            Atari family, else ``"none"``.
        entry_point: ``"module:attr"`` of the env's constructor, used by processes where
            ``env_id`` is not registered; "": none.
        env_kwargs_json: the env's keyword arguments, a JSON object ("": none).
        max_episode_steps: time limit of the env (None: its registration's).

    Example:
        >>> from fleetgym.agents.workloads import get_workload
        >>> w = get_workload("CartPole-v1")
        >>> w.target_return, w.rollout_steps, w.hidden_sizes
        (475.0, 128, (64, 64))
        >>> env = w.make_env(seed=0)
        >>> env.observation_space.shape
        (4,)
        >>> env.close()

    Raises:
        ValueError: If a field is out of range (checked at construction).
    """

    name: str
    env_id: str
    kind: str
    target_return: float
    rollout_steps: int
    max_rounds: int = 200
    lr: float = 3e-4
    epochs: int = 10
    minibatch_size: int = 64
    gamma: float = 0.99
    gae_lambda: float = 0.95
    clip_coef: float = 0.2
    ent_coef: float = 0.0
    vf_coef: float = 0.5
    max_grad_norm: float = 0.5
    network: str = "mlp"
    hidden_sizes: tuple[int, ...] = (64, 64)
    activation: str = "tanh"
    normalize_obs: bool = False
    reward_transform: str = "none"
    log_std_init: float = 0.0
    step_delay_s: float = 0.0
    step_delay_sigma: float = 0.0
    preprocessing: str = ""
    entry_point: str = ""
    env_kwargs_json: str = ""
    max_episode_steps: int | None = None

    @classmethod
    def from_env(cls, env: Any, **overrides: Any) -> Workload:
        """A workload for any environment, its defaults inferred from the spaces.

        Args:
            env: A registered ID (``"module:ID"`` imports ``module`` first), an
                ``EnvSpec``, or an importable callable returning an env (or its
                ``"module:attr"`` path).
            **overrides: Workload fields replacing the inferred ones; ``env_kwargs`` (a
                dict of plain data) is passed to the env.

        Example:
            >>> w = Workload.from_env("Acrobot-v1", rollout_steps=64)
            >>> w.kind, w.preprocessing, w.target_return, w.rollout_steps
            ('classic', 'none', -100.0, 64)

        Raises:
            UnknownWorkloadError: an unregistered ID (the message lists close matches).
            fleetgym.errors.UnsupportedSpaceError: spaces no policy fits.
            TypeError, ValueError: a bad override (named), an unimportable callable, env
                kwargs that are not a dict of plain data, or an env whose construction
                raised (the message names the workload and quotes the error).
        """
        env_kwargs = overrides.pop("env_kwargs", None)
        described = describe_env(env, env_kwargs, known=WORKLOADS)
        return cls(**described).with_overrides(**overrides)

    @property
    def source(self) -> EnvSource:
        """How to build this workload's env in any process (plain data)."""
        return EnvSource(
            env_id=self.env_id,
            entry_point=self.entry_point,
            kwargs_json=self.env_kwargs_json or "{}",
            max_episode_steps=self.max_episode_steps,
        )

    def __post_init__(self) -> None:
        check_fields(self)

    def make_env(self, seed: int | None = None) -> gym.Env:
        """Build the environment an actor steps, with this family's standard preprocessing.

        Atari: ``AtariPreprocessing`` (30 no-op starts, frame skip 4, 84x84 grayscale) and
        ``FrameStackObservation(4)``, giving ``uint8`` observations of shape (4, 84, 84).
        MuJoCo actions are clipped to the action bounds by the actor, not by the env, so the
        learner sees the unclipped Gaussian samples.

        Args:
            seed: If given, seeds the action space (the env itself is seeded by the first
                ``reset(seed=...)``, as Gymnasium prescribes).

        Returns:
            The environment (Gymnasium API).
        """
        env = build_env(self.source, self.preprocessing)
        if seed is not None:
            env.action_space.seed(int(seed))
        if self.step_delay_s > 0.0:
            env = StepDelay(env, self.actor_step_delay(seed))
        return env

    def actor_step_delay(self, seed: int | None) -> float:
        """The extra seconds per env step of the env built with ``seed`` (log-normal).

        At most an hour (the far tail of a wide spread stays a sleep that can be slept).

        Args:
            seed: The env's seed: the same seed always draws the same delay (the draw
                uses its own generator, not the env's); None draws a fresh one each call.
                Irrelevant when ``step_delay_sigma`` is 0.

        Example:
            >>> w = get_workload("CartPole-v1").with_overrides(step_delay_s=0.002, step_delay_sigma=1.0)
            >>> round(w.actor_step_delay(0), 5), round(w.actor_step_delay(1), 5)
            (0.00864, 0.00053)
        """
        import numpy as np

        z = np.random.default_rng(None if seed is None else [int(seed), 0xDE1A]).standard_normal()
        return float(min(self.step_delay_s * np.exp(self.step_delay_sigma * z), 3600.0))

    def make_policy(self) -> ActorCriticPolicy:
        """Build a freshly initialised policy for this workload (imports torch)."""
        from fleetgym.agents.policies import ActorCriticPolicy

        observation_space, action_space = workload_spaces(self)
        return ActorCriticPolicy(
            observation_space,
            action_space,
            network=self.network,
            hidden_sizes=self.hidden_sizes,
            activation=self.activation,
            normalize_obs=self.normalize_obs,
            log_std_init=self.log_std_init,
            workload_name=self.name,
        )

    def with_overrides(self, **overrides: Any) -> Workload:
        """A copy with some fields replaced (validated like the original).

        Args:
            **overrides: Field name -> new value, for any field of :class:`Workload`
                (e.g. ``rollout_steps=64``); the other fields are kept.

        Raises:
            TypeError: If a name is not a field of :class:`Workload`.
            TypeError, ValueError: If a new value has the wrong type or range (checked as
                at construction).
        """
        known = {f.name for f in fields(self)}
        unknown = sorted(set(overrides) - known)
        if unknown:
            raise TypeError(f"expected Workload fields {sorted(known)}, actual unknown {unknown}")
        return replace(self, **overrides)


class StepDelay(gym.Wrapper):  # type: ignore[type-arg]
    """Each ``step`` also sleeps ``delay_s`` seconds (a slower simulator; no CPU used).

    :meth:`Workload.make_env` adds it when ``step_delay_s`` > 0.

    Args:
        env: The environment to slow down.
        delay_s: Seconds each ``step`` sleeps before stepping ``env`` (>= 0; 0 adds only
            the call overhead). ``reset`` is not delayed.
    """

    def __init__(self, env: gym.Env, delay_s: float) -> None:
        super().__init__(env)
        self.delay_s = float(delay_s)

    def step(self, action: Any) -> Any:
        time.sleep(self.delay_s)
        return self.env.step(action)


@functools.cache
def _spaces(workload: Workload) -> tuple[gym.Space, gym.Space]:
    try:
        env = build_env(workload.source, workload.preprocessing)
    except UnknownWorkloadError:
        raise
    except Exception as error:
        raise build_error(workload.source, error) from error
    try:
        return env.observation_space, env.action_space
    finally:
        env.close()


def workload_spaces(
    workload: Workload | str, env_id: str | None = None, kind: str | None = None
) -> tuple[gym.Space, gym.Space]:
    """Observation and action spaces of a workload's env as the policy sees them.

    Built once per process and workload (cached).

    Args:
        workload: A :class:`Workload` or anything :func:`get_workload` takes (a
            built-in name, a Gymnasium ID, ...).
        env_id, kind: Ignored: accepted for callers that pass a workload's name with
            them; the name alone selects the workload.

    Raises:
        TypeError, ValueError: If the workload is unknown or its env cannot be built (the
            message names the workload).
    """
    del env_id, kind
    return _spaces(get_workload(workload))


def _mujoco(name: str, target: float, **kw: Any) -> Workload:
    defaults: dict[str, Any] = dict(
        kind="mujoco",
        rollout_steps=256,  # 8 actors x 256 = 2048 samples per round, the usual PPO batch
        max_rounds=500,
        lr=3e-4,
        epochs=10,
        minibatch_size=64,
        normalize_obs=True,
        reward_transform="scale",
    )
    defaults.update(kw)
    return Workload(name=name, env_id=name, target_return=target, **defaults)


def _atari(name: str, target: float) -> Workload:
    return Workload(
        name=name,
        env_id=name,
        kind="atari",
        target_return=target,
        vf_coef=0.5,
        reward_transform="sign",
        **FRAME_PPO_DEFAULTS,
    )


#: Every workload, by name. Targets: CartPole's "solved" threshold; for MuJoCo and Atari,
#: returns a standard PPO run reaches within a few million steps.
WORKLOADS: dict[str, Workload] = {
    w.name: w
    for w in (
        Workload(
            name="CartPole-v1",
            env_id="CartPole-v1",
            kind="classic",
            target_return=475.0,
            rollout_steps=128,
            max_rounds=300,
            lr=1e-3,
            epochs=10,
            minibatch_size=256,
            gamma=0.99,
            gae_lambda=0.95,
            ent_coef=0.0,
        ),
        _mujoco("Hopper-v5", 1000.0),
        _mujoco("HalfCheetah-v5", 1500.0),
        _mujoco("Humanoid-v5", 700.0, max_rounds=2000),
        _atari("QbertNoFrameskip-v4", 5000.0),
        _atari("SpaceInvadersNoFrameskip-v4", 800.0),
        _atari("GravitarNoFrameskip-v4", 300.0),
    )
}


def get_workload(name: Any) -> Workload:
    """The workload ``name``: built-in, or inferred from any Gymnasium environment.

    Args:
        name: A :class:`Workload` (returned as is), a built-in name of :data:`WORKLOADS`, a
            registered Gymnasium ID (``"module:ID"`` forms and the user's own IDs
            included), a ``gymnasium.envs.registration.EnvSpec``, or an importable
            env-building callable (see :meth:`Workload.from_env`).

    Example:
        >>> get_workload("CartPole-v1") is WORKLOADS["CartPole-v1"]
        True
        >>> get_workload("Pendulum-v1").network, get_workload("Pendulum-v1").normalize_obs
        ('mlp', True)

    Raises:
        UnknownWorkloadError: If ``name`` is neither built-in nor registered (the message
            lists close matches).
        fleetgym.errors.UnsupportedSpaceError: If no policy fits the env's spaces.
        TypeError: If ``name`` is none of the above.
        TypeError, ValueError: If building the env raised (see :meth:`Workload.from_env`).
    """
    if isinstance(name, Workload):
        return name
    if isinstance(name, str):
        if name in WORKLOADS:
            return WORKLOADS[name]
        return _inferred(name)
    if isinstance(name, gym.envs.registration.EnvSpec) or callable(name):
        return Workload.from_env(name)
    raise TypeError(
        "workload: expected a name (str), a Gymnasium ID, an EnvSpec or a Workload, "
        f"actual {type(name).__name__}"
    )


@functools.lru_cache(maxsize=256)
def _inferred(env_id: str) -> Workload:
    return Workload.from_env(env_id)
