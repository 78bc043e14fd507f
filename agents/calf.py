"""The CALF experiment: train under a network, evaluate under many, measure the gap.

Three training regimes (CALF's), each with and without compensation:

- ``baseline``: Mode 1, no network (the ``perfect`` profile, bit-identical to the bare env);
- ``delay-only``: a fixed 50 ms each way, no jitter, no loss;
- ``net-aware``: delay + jitter + loss (``wifi-normal``); ``net-aware-mix`` draws the
  profile per episode from ``perfect``/``ethernet``/``wifi-normal``/``wifi-degraded``.

"Compensated" policies see :func:`~fleetgym.wrappers.compensation.make_robust_env`'s
input (k delivered observations with their ages, plus the actions sent), with k and the
action-history length measured from the training network; plain policies see the
delivered observation only. Every policy is then evaluated, with the same input stack,
under each :class:`NetworkCondition` of :data:`EVAL_CONDITIONS` (and the ablation and
degraded-variant tables), and the gap of a condition is
``1 - return(condition) / return(sim-clean)`` of the same policies.

CartPole trains with SB3 PPO (rl-zoo's tuned CartPole hyperparameters), MiniGrid with
sb3-contrib's RecurrentPPO (LSTM). MiniGrid has no physical time step: its control
period is an explicit ``step_ms`` (20 ms by default, the same as CartPole's, so a
profile means the same staleness in steps in both).
"""

from __future__ import annotations

import dataclasses
import logging
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import gymnasium as gym
import numpy as np

from fleetgym.wrappers.compensation import history_length_for_profile, make_robust_env

logger = logging.getLogger(__name__)

__all__ = [
    "ABLATION_CONDITIONS",
    "CONDITIONS",
    "DEGRADED_VARIANTS",
    "EVAL_CONDITIONS",
    "REGIMES",
    "EnvSetup",
    "EvalRecord",
    "NetworkCondition",
    "Regime",
    "TrainedPolicy",
    "aggregate",
    "evaluate_policy",
    "env_setup",
    "make_condition_env",
    "train_regime",
]

#: (mean_ms, std_ms, loss, correlation) of one Gaussian channel.
ChannelSpec = tuple[float, float, float, float]


@dataclass(frozen=True)
class NetworkCondition:
    """One network configuration: a named profile, or explicit Gaussian channels.

    Models what the shim is built with; a condition is plain data (picklable, hashable)
    and builds fresh channel objects for every env, because channels carry state.

    Example:
        >>> c = NetworkCondition("fixed-50ms", uplink=(50.0, 0.0, 0.0, 0.0), downlink=(50.0, 0.0, 0.0, 0.0))
        >>> sorted(c.shim_kwargs())
        ['downlink', 'uplink']

    Args:
        name: Label used in tables.
        profile: Profile name, or a tuple of names drawn per episode.
        uplink: Observation channel ``(mean_ms, std_ms, loss, correlation)`` when no profile.
        downlink: Action channel, same form.
        delivery: ``"fifo"``/``"latest"``, or ``None`` for the shim's default.
        step_ms: Control period override (``None`` = the env setup's).
        description: One line for the report.

    Raises:
        ValueError: if neither or both of ``profile`` and the channels are given.
    """

    name: str
    profile: str | tuple[str, ...] | None = None
    uplink: ChannelSpec | None = None
    downlink: ChannelSpec | None = None
    delivery: str | None = None
    step_ms: float | None = None
    description: str = ""

    def __post_init__(self) -> None:
        has_channels = self.uplink is not None or self.downlink is not None
        if (self.profile is None) == (not has_channels):
            raise ValueError(
                f"NetworkCondition {self.name!r}: expected a profile or uplink/downlink "
                f"channels (exactly one of the two), actual profile={self.profile!r}, "
                f"uplink={self.uplink!r}, downlink={self.downlink!r}"
            )

    def shim_kwargs(self) -> dict[str, Any]:
        """Keyword arguments for :class:`NetworkShimWrapper` (fresh channel objects)."""
        from fleetgym.wrappers.channels import GaussianChannel

        kwargs: dict[str, Any] = {}
        if self.profile is not None:
            kwargs["profile"] = (
                self.profile if isinstance(self.profile, str) else list(self.profile)
            )
        else:
            for key, spec in (("uplink", self.uplink), ("downlink", self.downlink)):
                mean, std, loss, corr = spec if spec is not None else (0.0, 0.0, 0.0, 0.0)
                kwargs[key] = GaussianChannel(mean_ms=mean, std_ms=std, loss=loss, correlation=corr)
        if self.delivery is not None:
            kwargs["delivery"] = self.delivery
        return kwargs


def _gauss(mean: float, std: float = 0.0, loss: float = 0.0, corr: float = 0.0) -> ChannelSpec:
    return (float(mean), float(std), float(loss), float(corr))


#: Every named condition: evaluation grid, ablation, degraded variants.
CONDITIONS: dict[str, NetworkCondition] = {
    c.name: c
    for c in (
        NetworkCondition("sim-clean", profile="perfect", description="no network (Mode 1)"),
        NetworkCondition("ethernet", profile="ethernet", description="2±0.5 ms"),
        NetworkCondition("wifi-normal", profile="wifi-normal", description="30±10 ms, 2 % loss"),
        NetworkCondition(
            "wifi-degraded", profile="wifi-degraded", description="80±40 ms, 10 % loss"
        ),
        NetworkCondition(
            "fixed-50ms",
            uplink=_gauss(50),
            downlink=_gauss(50),
            description="50 ms each way, no jitter, no loss",
        ),
        NetworkCondition(
            "fixed-30ms",
            uplink=_gauss(30),
            downlink=_gauss(30),
            description="30 ms each way, no jitter, no loss",
        ),
        NetworkCondition(
            "jitter-only",
            uplink=_gauss(30, 10),
            downlink=_gauss(30, 10),
            description="30±10 ms each way, no loss",
        ),
        NetworkCondition(
            "loss-only",
            uplink=_gauss(0, 0, 0.02),
            downlink=_gauss(0, 0, 0.02),
            description="2 % loss each way, no delay",
        ),
        NetworkCondition(
            "jitter+loss",
            uplink=_gauss(30, 10, 0.02),
            downlink=_gauss(30, 10, 0.02),
            description="30±10 ms, 2 % loss each way (= wifi-normal)",
        ),
        NetworkCondition(
            "degraded-latest",
            profile="wifi-degraded",
            delivery="latest",
            description="wifi-degraded, independent delays (reordering)",
        ),
        NetworkCondition(
            "degraded-corr0.9",
            uplink=_gauss(80, 40, 0.10, 0.9),
            downlink=_gauss(80, 40, 0.10, 0.9),
            description="wifi-degraded with AR(1) delay correlation 0.9",
        ),
        NetworkCondition(
            "degraded-uplink-only",
            uplink=_gauss(80, 40, 0.10),
            downlink=_gauss(0),
            description="wifi-degraded on observations only, actions local",
        ),
        # Wi-Fi latency figures are usually ping round trips: 80±40 ms RTT and ~10 %
        # loss per round trip is 40±28 ms (28 = 40/sqrt 2) and 5 % loss each way.
        NetworkCondition(
            "degraded-rtt",
            uplink=_gauss(40, 28.3, 0.05),
            downlink=_gauss(40, 28.3, 0.05),
            description="wifi-degraded read as round trip: 40±28 ms, 5 % loss each way",
        ),
        NetworkCondition(
            "degraded-100ms-loop",
            profile="wifi-degraded",
            step_ms=100.0,
            description="wifi-degraded with a 100 ms control period",
        ),
    )
}

#: The paper's evaluation grid (the shipped trace is appended at run time).
EVAL_CONDITIONS: tuple[str, ...] = ("sim-clean", "ethernet", "wifi-normal", "wifi-degraded")
#: The paper's ablation, each against a clean-trained policy.
ABLATION_CONDITIONS: tuple[str, ...] = (
    "sim-clean",
    "fixed-50ms",
    "fixed-30ms",
    "jitter-only",
    "loss-only",
    "jitter+loss",
)
#: Physically meaningful changes to wifi-degraded (which brings the paper's pattern back?).
DEGRADED_VARIANTS: tuple[str, ...] = (
    "wifi-degraded",
    "degraded-latest",
    "degraded-corr0.9",
    "degraded-uplink-only",
    "degraded-rtt",
)


def shipped_trace_condition() -> NetworkCondition | None:
    """The first packaged trace profile (``trace-<file>``) as a condition, if any."""
    from fleetgym.wrappers import profiles

    traces = [n for n in profiles.list_profiles() if n.startswith("trace-")]
    if not traces:
        return None
    return NetworkCondition(
        traces[0], profile=traces[0], description=f"replay of the shipped trace {traces[0]}"
    )


def resolve_condition(name: str) -> NetworkCondition:
    """A condition by name: a table entry or any registered profile name.

    Raises:
        ValueError: for a name that is none of these.
    """
    if name in CONDITIONS:
        return CONDITIONS[name]
    from fleetgym.wrappers import profiles

    if name in profiles.list_profiles():
        return NetworkCondition(
            name, profile=name, description=profiles.get_profile(name).description
        )
    raise ValueError(
        f"condition: expected one of {sorted(CONDITIONS)} or a profile name "
        f"{profiles.list_profiles()}, actual {name!r}"
    )


@dataclass(frozen=True)
class Regime:
    """A training regime: the network trained under, and whether inputs are compensated.

    Example:
        >>> REGIMES["net-aware+comp"].compensated, REGIMES["net-aware+comp"].train_condition
        (True, 'wifi-normal')

    Args:
        name: Label (``<regime>`` or ``<regime>+comp``).
        train_condition: Name of the :class:`NetworkCondition` trained under.
        compensated: Whether the policy gets the compensation stack.
    """

    name: str
    train_condition: str
    compensated: bool

    @property
    def base(self) -> str:
        """The regime without the ``+comp`` suffix."""
        return self.name.removesuffix("+comp")


CONDITIONS["net-aware-mix"] = NetworkCondition(
    "net-aware-mix",
    profile=("perfect", "ethernet", "wifi-normal", "wifi-degraded"),
    description="profile drawn per episode",
)

REGIMES: dict[str, Regime] = {}
for _base, _cond in (
    ("baseline", "sim-clean"),
    ("delay-only", "fixed-50ms"),
    ("net-aware", "wifi-normal"),
    ("net-aware-mix", "net-aware-mix"),
):
    REGIMES[_base] = Regime(_base, _cond, False)
    REGIMES[_base + "+comp"] = Regime(_base + "+comp", _cond, True)

#: The regimes of the default experiment (the paper's three, with and without compensation).
DEFAULT_REGIMES: tuple[str, ...] = (
    "baseline",
    "baseline+comp",
    "delay-only",
    "delay-only+comp",
    "net-aware",
    "net-aware+comp",
)


# --------------------------------------------------------------------------------------
# Environments
# --------------------------------------------------------------------------------------
def _minigrid_base(env_id: str) -> gym.Env[Any, Any]:
    import minigrid  # noqa: F401  (registers the MiniGrid IDs)
    from gymnasium.wrappers import FlattenObservation
    from minigrid.wrappers import ImgObsWrapper

    # The egocentric 7x7x3 view, flattened: a Box that SB3 does not mistake for an image
    # (its values are object/colour/state indices 0..10, not pixels to scale by 1/255).
    return FlattenObservation(ImgObsWrapper(gym.make(env_id)))


@dataclass(frozen=True)
class EnvSetup:
    """How one task is built and trained.

    Args:
        env_id: Gymnasium ID.
        algo: ``"ppo"`` (SB3) or ``"recurrent-ppo"`` (sb3-contrib, LSTM).
        step_ms: Control period in ms (``None`` = the env's ``dt``/``tau``).
        shim_kwargs: Extra shim arguments (e.g. MiniGrid's no-op start action).
        hyperparams: Algorithm keyword arguments.
        total_timesteps: Full training budget.
        quick_timesteps: ``--quick`` training budget.
    """

    env_id: str
    algo: str
    step_ms: float | None
    shim_kwargs: dict[str, Any] = field(default_factory=dict)
    hyperparams: dict[str, Any] = field(default_factory=dict)
    total_timesteps: int = 100_000
    quick_timesteps: int = 30_000

    def base_env(self) -> gym.Env[Any, Any]:
        """A fresh instance of the task (before any network)."""
        if self.env_id.startswith("MiniGrid"):
            return _minigrid_base(self.env_id)
        return gym.make(self.env_id)

    @property
    def period_ms(self) -> float:
        """The control period in ms."""
        if self.step_ms is not None:
            return float(self.step_ms)
        env = self.base_env()
        try:
            dt = getattr(env.unwrapped, "dt", None) or getattr(env.unwrapped, "tau", None)
        finally:
            env.close()
        if dt is None:
            raise ValueError(f"{self.env_id}: expected step_ms for an env without dt/tau")
        return float(dt) * 1000.0


def _cartpole_setup(env_id: str) -> EnvSetup:
    # rl-zoo's tuned PPO hyperparameters for CartPole-v1 (500 within ~1e5 steps); the
    # linear schedules are built in train_regime.
    return EnvSetup(
        env_id=env_id,
        algo="ppo",
        step_ms=None,
        hyperparams={
            "n_steps": 32,
            "batch_size": 256,
            "gae_lambda": 0.8,
            "gamma": 0.98,
            "n_epochs": 20,
            "ent_coef": 0.0,
            "learning_rate": ("lin", 1e-3),
            "clip_range": ("lin", 0.2),
        },
        total_timesteps=100_000,
        quick_timesteps=40_000,
    )


def _minigrid_setup(env_id: str) -> EnvSetup:
    return EnvSetup(
        env_id=env_id,
        algo="recurrent-ppo",
        step_ms=20.0,
        # 6 = "done", a no-op in navigation tasks: what the env does before the first
        # action packet of an episode arrives.
        shim_kwargs={"start_action": 6},
        hyperparams={
            "n_steps": 128,
            "batch_size": 256,
            "gae_lambda": 0.95,
            "gamma": 0.99,
            "n_epochs": 4,
            "ent_coef": 0.01,
            "learning_rate": 7e-4,
            "clip_range": 0.2,
            "policy_kwargs": {"lstm_hidden_size": 64, "net_arch": [64]},
        },
        total_timesteps=100_000,
        quick_timesteps=30_000,
    )


def env_setup(env_id: str, *, algo: str | None = None, step_ms: float | None = None) -> EnvSetup:
    """The :class:`EnvSetup` of a task (CartPole-v1 and MiniGrid IDs are tuned).

    Args:
        env_id: A Gymnasium ID.
        algo: Override the algorithm (``"ppo"`` or ``"recurrent-ppo"``).
        step_ms: Override the control period.

    Raises:
        ValueError, TypeError: on a bad argument.
    """
    if not isinstance(env_id, str) or not env_id:
        raise TypeError(f"env_id: expected a Gymnasium ID, actual {env_id!r}")
    if algo is not None and algo not in ("ppo", "recurrent-ppo"):
        raise ValueError(f"algo: expected 'ppo' or 'recurrent-ppo', actual {algo!r}")
    if step_ms is not None and (isinstance(step_ms, bool) or not float(step_ms) > 0):
        raise ValueError(f"step_ms: expected a positive number, actual {step_ms!r}")
    if env_id.startswith("MiniGrid"):
        setup = _minigrid_setup(env_id)
    else:
        setup = _cartpole_setup(env_id)
        if env_id not in gym.registry:
            raise ValueError(f"env_id: expected a registered Gymnasium ID, actual {env_id!r}")
    changes: dict[str, Any] = {}
    if algo is not None:
        changes["algo"] = algo
    if step_ms is not None:
        changes["step_ms"] = float(step_ms)
    return dataclasses.replace(setup, **changes) if changes else setup


@dataclass(frozen=True)
class InputLayout:
    """The policy's input: plain delivered observation, or the compensation stack.

    Args:
        compensated: Whether to build the compensation stack.
        history_length: k frames.
        action_history_length: m sent actions.
    """

    compensated: bool
    history_length: int = 1
    action_history_length: int = 0


def layout_for(regime: Regime, setup: EnvSetup, quantile: float = 0.99) -> InputLayout:
    """The input layout of a regime: k and m measured from its training network."""
    if not regime.compensated:
        return InputLayout(False)
    cond = resolve_condition(regime.train_condition)
    period = cond.step_ms or setup.period_ms
    kwargs = cond.shim_kwargs()
    profile = kwargs.pop("profile", None)
    k = history_length_for_profile(profile, period, quantile, **kwargs)
    kwargs = cond.shim_kwargs()
    profile = kwargs.pop("profile", None)
    m = history_length_for_profile(profile, period, quantile, path="round_trip", **kwargs)
    return InputLayout(True, k, m)


def make_condition_env(
    setup: EnvSetup, condition: NetworkCondition, layout: InputLayout
) -> gym.Env[Any, Any]:
    """One env: the task behind ``condition``'s network, with ``layout``'s input stack."""
    from stable_baselines3.common.monitor import Monitor

    from fleetgym.wrappers.network_shim import NetworkShimWrapper

    kwargs = dict(setup.shim_kwargs)
    kwargs.update(condition.shim_kwargs())
    kwargs["step_ms"] = condition.step_ms or setup.period_ms
    base = setup.base_env()
    if layout.compensated:
        profile = kwargs.pop("profile", None)
        env: gym.Env[Any, Any] = make_robust_env(
            base,
            profile,
            history_length=layout.history_length,
            action_history_length=layout.action_history_length,
            **kwargs,
        )
    else:
        env = NetworkShimWrapper(base, **kwargs)
    return Monitor(env)


def _vec_env(
    setup: EnvSetup, condition: NetworkCondition, layout: InputLayout, n_envs: int, seed: int
) -> Any:
    from stable_baselines3.common.vec_env import DummyVecEnv

    fns: list[Callable[[], gym.Env[Any, Any]]] = [
        (lambda: make_condition_env(setup, condition, layout)) for _ in range(n_envs)
    ]
    vec = DummyVecEnv(fns)
    vec.seed(seed)
    return vec


# --------------------------------------------------------------------------------------
# Training and evaluation
# --------------------------------------------------------------------------------------
@dataclass
class TrainedPolicy:
    """A trained policy with everything needed to evaluate it.

    Args:
        regime: The regime it was trained in.
        seed: Training seed.
        layout: Its input layout.
        model: The SB3 / sb3-contrib model.
        timesteps: Environment steps trained.
        wall_s: Training wall time (noisy on a shared machine).
    """

    regime: Regime
    seed: int
    layout: InputLayout
    model: Any
    timesteps: int
    wall_s: float


def _linear(initial: float) -> Callable[[float], float]:
    def schedule(progress_remaining: float) -> float:
        return progress_remaining * initial

    return schedule


def train_regime(
    setup: EnvSetup,
    regime: Regime,
    seed: int,
    total_timesteps: int,
    *,
    n_envs: int = 8,
    quantile: float = 0.99,
    device: str = "cpu",
) -> TrainedPolicy:
    """Trains one policy in one regime.

    Args:
        setup: The task.
        regime: The regime.
        seed: Seed of the model and of the envs' reset (hence of the packet schedules).
        total_timesteps: Environment steps.
        n_envs: Parallel envs (in-process DummyVecEnv: the shim's cost is per step).
        quantile: Staleness quantile for the compensation lengths.
        device: Torch device.

    Returns:
        The trained policy.

    Raises:
        ValueError, TypeError: on a bad argument.
    """
    import time

    import torch

    if (
        isinstance(total_timesteps, bool)
        or not isinstance(total_timesteps, int)
        or total_timesteps < 1
    ):
        raise ValueError(f"total_timesteps: expected a positive int, actual {total_timesteps!r}")
    if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
        raise ValueError(f"seed: expected an int >= 0, actual {seed!r}")
    torch.set_num_threads(1)
    layout = layout_for(regime, setup, quantile)
    condition = resolve_condition(regime.train_condition)
    vec = _vec_env(setup, condition, layout, n_envs, seed=seed * 1000)
    params = dict(setup.hyperparams)
    for key in ("learning_rate", "clip_range"):
        value = params.get(key)
        if isinstance(value, tuple) and value[0] == "lin":
            params[key] = _linear(float(value[1]))
    if setup.algo == "ppo":
        from stable_baselines3 import PPO

        model: Any = PPO("MlpPolicy", vec, seed=seed, device=device, verbose=0, **params)
    else:
        from sb3_contrib import RecurrentPPO

        model = RecurrentPPO("MlpLstmPolicy", vec, seed=seed, device=device, verbose=0, **params)
    from stable_baselines3.common.logger import Logger

    # No outputs: SB3's default logger would create a dated folder in the temp dir per run.
    model.set_logger(Logger(folder=None, output_formats=[]))
    start = time.perf_counter()
    model.learn(total_timesteps=total_timesteps)
    wall = time.perf_counter() - start
    vec.close()
    return TrainedPolicy(regime, seed, layout, model, int(model.num_timesteps), wall)


@dataclass(frozen=True)
class EvalRecord:
    """Returns of one policy (regime, seed) under one condition.

    Args:
        env_id: Task.
        regime: Regime name.
        seed: Training seed.
        condition: Condition name.
        mean_return: Mean episode return.
        std_return: Std of episode returns.
        n_episodes: Episodes evaluated.
        table: Which table the record belongs to (``grid``, ``ablation``, ``degraded``).
    """

    env_id: str
    regime: str
    seed: int
    condition: str
    mean_return: float
    std_return: float
    n_episodes: int
    table: str = "grid"


def evaluate_policy(
    setup: EnvSetup,
    policy: TrainedPolicy,
    condition: NetworkCondition,
    n_episodes: int = 50,
    *,
    n_envs: int = 10,
    seed: int = 0,
    table: str = "grid",
) -> EvalRecord:
    """Deterministic returns of ``policy`` under ``condition`` (same input stack as trained).

    Episodes run on ``n_envs`` envs at once (batched inference); SB3's episode
    accounting gives every env an equal share so short episodes are not over-counted.

    Raises:
        ValueError: if ``n_episodes`` < 1.
    """
    from stable_baselines3.common.evaluation import evaluate_policy as sb3_evaluate

    if isinstance(n_episodes, bool) or not isinstance(n_episodes, int) or n_episodes < 1:
        raise ValueError(f"n_episodes: expected a positive int, actual {n_episodes!r}")
    n_envs = max(1, min(n_envs, n_episodes))
    vec = _vec_env(setup, condition, policy.layout, n_envs, seed=seed)
    returns, _ = sb3_evaluate(
        policy.model,
        vec,
        n_eval_episodes=n_episodes,
        deterministic=True,
        return_episode_rewards=True,
        warn=False,
    )
    vec.close()
    arr = np.asarray(returns, dtype=np.float64)
    return EvalRecord(
        setup.env_id,
        policy.regime.name,
        policy.seed,
        condition.name,
        float(arr.mean()),
        float(arr.std()),
        int(arr.size),
        table,
    )


def eval_seed(train_seed: int, condition: str) -> int:
    """Evaluation seed: differs per training seed and condition, reproducible."""
    return 100_000 + 1_000 * train_seed + sum(condition.encode()) % 997


@dataclass(frozen=True)
class Cell:
    """Aggregate over seeds of one (table, regime, condition).

    Args:
        table, regime, condition: Keys.
        mean: Mean over seeds of the per-seed mean return.
        std: Std over seeds of the per-seed mean return (the seed spread).
        n_seeds: Seeds aggregated.
        gap: 1 - mean(condition) / mean(sim-clean) over the same seeds (NaN without clean).
        gap_std: Std over seeds of the per-seed gaps.
    """

    table: str
    regime: str
    condition: str
    mean: float
    std: float
    n_seeds: int
    gap: float
    gap_std: float


def aggregate(records: Sequence[EvalRecord], clean: str = "sim-clean") -> list[Cell]:
    """Mean ± seed std per (table, regime, condition), with the gap against ``clean``.

    Ablation records use the grid's clean return of the same regime and seed when
    their own table has none.
    """
    by_key: dict[tuple[str, str, str], dict[int, float]] = {}
    for r in records:
        by_key.setdefault((r.table, r.regime, r.condition), {})[r.seed] = r.mean_return
    clean_of: dict[tuple[str, int], float] = {}
    for r in records:
        if r.condition == clean:
            clean_of.setdefault((r.regime, r.seed), r.mean_return)
    cells = []
    for (table, regime, cond), per_seed in by_key.items():
        seeds = sorted(per_seed)
        vals = np.array([per_seed[s] for s in seeds])
        cleans = np.array([clean_of.get((regime, s), math.nan) for s in seeds])
        gaps = 1.0 - vals / np.where(cleans > 0, cleans, math.nan)
        gap = 1.0 - vals.mean() / cleans.mean() if np.all(cleans > 0) else math.nan
        cells.append(
            Cell(
                table,
                regime,
                cond,
                float(vals.mean()),
                float(vals.std()),
                len(seeds),
                float(gap),
                float(np.nanstd(gaps)) if np.any(np.isfinite(gaps)) else math.nan,
            )
        )
    return cells
