"""The whole CALF experiment: train every regime, evaluate under every condition, report.

:func:`run_calf` trains every regime for each seed, evaluates each policy under the
evaluation grid (sim-clean, ethernet, wifi-normal, wifi-degraded, a shipped trace), the
clean-trained policy under the paper's ablation, and selected policies under physically
meaningful variants of wifi-degraded, then writes the report of
:mod:`fleetgym.experiments.calf.report`. ``fleetgym calf`` and ``fleetgym reproduce``
call it.
"""

from __future__ import annotations

import dataclasses
import os
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from fleetgym.experiments.calf.conditions import (
    ABLATION_CONDITIONS,
    CONDITIONS,
    DEFAULT_REGIMES,
    DEGRADED_VARIANTS,
    EVAL_CONDITIONS,
    QUICK_REGIMES,
    VARIANT_REGIMES,
    NetworkCondition,
    Regime,
    regime_by_name,
    resolve_condition,
    shipped_trace_condition,
)
from fleetgym.experiments.calf.evaluate import (
    CalfResults,
    EvalRecord,
    aggregate,
    eval_seed,
    evaluate_policy,
)
from fleetgym.experiments.calf.report import write_outputs
from fleetgym.experiments.calf.setup import EnvSetup, env_setup
from fleetgym.experiments.calf.train import TrainedPolicy, policy_layout, train_regime
from fleetgym.validation import check_bool, check_int

__all__ = ["CalfPlan", "execute_calf", "prepare_calf", "run_calf"]


def _seed_list(seeds: int | Sequence[int] | None, quick: bool) -> list[int]:
    if seeds is None:
        return [0] if quick else list(range(5))
    if isinstance(seeds, int) and not isinstance(seeds, bool):
        if seeds < 1:
            raise ValueError(f"seeds: expected a positive count, actual {seeds!r}")
        return list(range(seeds))
    if isinstance(seeds, Sequence) and not isinstance(seeds, str):
        seed_list = [int(s) for s in seeds]
        if not seed_list or any(s < 0 for s in seed_list):
            raise ValueError(f"seeds: expected non-negative seeds, actual {seeds!r}")
        return seed_list
    raise TypeError(f"seeds: expected a count or a sequence of seeds, actual {seeds!r}")


def _grid(conditions: Sequence[str] | None) -> list[NetworkCondition]:
    if conditions is None:
        grid = [CONDITIONS[c] for c in EVAL_CONDITIONS]
        trace = shipped_trace_condition()
        if trace is not None:
            grid.append(trace)
    else:
        grid = [resolve_condition(c) for c in conditions]
    if "sim-clean" not in [c.name for c in grid]:
        grid.insert(0, CONDITIONS["sim-clean"])
    return grid


def _clean_identity(regime: Regime) -> bool:
    """Whether the regime's input is the bare observation under its training network."""
    return (
        regime.compensated
        and regime.compensation not in ("history", "augmented")
        and regime.train_condition == "sim-clean"
    )


@dataclass(frozen=True)
class CalfPlan:
    """A checked CALF run (:func:`prepare_calf`): everything :func:`execute_calf` needs."""

    env: str
    setup: EnvSetup
    seeds: list[int]
    regimes: list[Regime]
    conditions: list[NetworkCondition]
    variants: list[NetworkCondition]
    variant_regimes: frozenset[str]
    timesteps: int
    episodes: int
    ablation: bool
    out: Path
    progress: bool


def _check_algo_installed(setup: EnvSetup) -> None:
    """RecurrentPPO comes from sb3-contrib: a missing package is found before training."""
    if setup.algo == "recurrent-ppo":
        import importlib.util

        if importlib.util.find_spec("sb3_contrib") is None:
            raise ValueError(
                "algo: expected the sb3-contrib package for recurrent-ppo "
                "(pip install sb3-contrib), actual not installed"
            )


def prepare_calf(
    env: str = "CartPole-v1",
    *,
    quick: bool = False,
    seeds: int | Sequence[int] | None = None,
    out_dir: str | os.PathLike[str] = "fleetgym-out/calf",
    regimes: Sequence[str] | None = None,
    conditions: Sequence[str] | None = None,
    timesteps: int | None = None,
    episodes: int | None = None,
    ablation: bool = True,
    variants: Sequence[str] | None = None,
    variant_regimes: Sequence[str] | None = None,
    step_ms: float | None = None,
    algo: str | None = None,
    progress: bool = True,
    timing: str | None = None,
) -> CalfPlan:
    """Check every argument of :func:`run_calf` and resolve its names, training nothing.

    Takes :func:`run_calf`'s arguments; ``fleetgym calf`` calls it first, so that a bad
    name or combination is a usage error before any work starts.

    Raises:
        ValueError, TypeError: on a bad argument.
    """
    quick = check_bool("quick", quick)
    ablation = check_bool("ablation", ablation)
    progress = check_bool("progress", progress)
    setup = env_setup(env, algo=algo, step_ms=step_ms, timing=timing)
    _check_algo_installed(setup)
    seed_list = _seed_list(seeds, quick)
    regime_objs = [
        regime_by_name(name) for name in (regimes or (QUICK_REGIMES if quick else DEFAULT_REGIMES))
    ]
    if not regimes and not env.startswith("CartPole"):
        # The predictive regimes' predictors (true dynamics, the fitted world model) are
        # built for CartPole's flat observation; elsewhere they are run when asked for.
        regime_objs = [r for r in regime_objs if r.compensation in ("history", "augmented")]
    if not regime_objs:
        raise ValueError(f"regimes: expected at least one regime, actual {regimes!r}")
    cond_objs = _grid(conditions)
    if variants is None:
        variants = () if quick else DEGRADED_VARIANTS
    variant_objs = [resolve_condition(c) for c in variants]
    names = list(VARIANT_REGIMES if variant_regimes is None else variant_regimes)
    for name in names:
        regime_by_name(name)  # a misspelt name would silently match no regime
    total = check_int(
        "timesteps",
        timesteps
        if timesteps is not None
        else (setup.quick_timesteps if quick else setup.total_timesteps),
        low=1,
    )
    n_episodes = check_int(
        "episodes", episodes if episodes is not None else (20 if quick else 50), low=1
    )
    return CalfPlan(
        env=env,
        setup=setup,
        seeds=seed_list,
        regimes=regime_objs,
        conditions=cond_objs,
        variants=variant_objs,
        variant_regimes=frozenset(names),
        timesteps=total,
        episodes=n_episodes,
        ablation=ablation,
        out=Path(out_dir),
        progress=progress,
    )


def run_calf(
    env: str = "CartPole-v1",
    *,
    quick: bool = False,
    seeds: int | Sequence[int] | None = None,
    out_dir: str | os.PathLike[str] = "fleetgym-out/calf",
    regimes: Sequence[str] | None = None,
    conditions: Sequence[str] | None = None,
    timesteps: int | None = None,
    episodes: int | None = None,
    ablation: bool = True,
    variants: Sequence[str] | None = None,
    variant_regimes: Sequence[str] | None = None,
    step_ms: float | None = None,
    algo: str | None = None,
    progress: bool = True,
    timing: str | None = None,
) -> CalfResults:
    """Runs the CALF experiment and writes its report (see the module docstring).

    :func:`prepare_calf` checks the arguments, :func:`execute_calf` does the work.

    Args:
        env: ``CartPole-v1`` or a MiniGrid ID (e.g. ``MiniGrid-Empty-5x5-v0``).
        quick: Small budgets: 1 seed, regimes baseline / net-aware / net-aware+comp.
        seeds: Number of seeds (0..N-1) or explicit seeds; default 1 quick, 5 full.
        out_dir: Output folder (created).
        regimes: Regime names (see
            :data:`~fleetgym.experiments.calf.conditions.REGIMES`; also
            ``<condition>+comp`` / ``<condition>`` to train under any condition).
        conditions: Evaluation grid (default sim-clean, ethernet, wifi-normal,
            wifi-degraded and the first shipped trace).
        timesteps: Training steps per policy (default from the task's setup).
        episodes: Evaluation episodes per (policy, condition): default 50 (20 quick).
        ablation: Evaluate the clean-trained policy under the paper's ablation.
        variants: wifi-degraded variants to evaluate (default
            :data:`~fleetgym.experiments.calf.conditions.DEGRADED_VARIANTS`, none with
            ``quick``; empty to skip).
        variant_regimes: Regimes evaluated under the variants.
        step_ms: Control period override (MiniGrid's default is 20 ms).
        algo: ``"ppo"``, ``"sac"``, ``"td3"`` or ``"recurrent-ppo"`` override.
        progress: Show tqdm progress bars.
        timing: The shims' timeline (default the shim's, ``"loop"``; ``"per-direction"``
            reproduces the figures measured before the loop became the default).

    Returns:
        The :class:`~fleetgym.experiments.calf.evaluate.CalfResults`.

    Raises:
        ValueError, TypeError: on a bad argument.
    """
    return execute_calf(
        prepare_calf(
            env,
            quick=quick,
            seeds=seeds,
            out_dir=out_dir,
            regimes=regimes,
            conditions=conditions,
            timesteps=timesteps,
            episodes=episodes,
            ablation=ablation,
            variants=variants,
            variant_regimes=variant_regimes,
            step_ms=step_ms,
            algo=algo,
            progress=progress,
            timing=timing,
        )
    )


def execute_calf(plan: CalfPlan) -> CalfResults:
    """Train, evaluate and report a :class:`CalfPlan`; an error here is a crash, not a
    usage error (the arguments were checked by :func:`prepare_calf`)."""
    env, setup, seed_list = plan.env, plan.setup, plan.seeds
    regime_objs, cond_objs, variant_objs = plan.regimes, plan.conditions, plan.variants
    v_regimes, total, n_episodes, ablation = (
        plan.variant_regimes,
        plan.timesteps,
        plan.episodes,
        plan.ablation,
    )
    out = plan.out
    out.mkdir(parents=True, exist_ok=True)

    start = time.perf_counter()
    records: list[EvalRecord] = []
    train_wall: dict[str, float] = {}
    layouts: dict[str, tuple[int, int]] = {}
    jobs = [(s, r) for s in seed_list for r in regime_objs]
    from tqdm.auto import tqdm

    bar = tqdm(jobs, desc=f"calf {env}", unit="policy", disable=not plan.progress)
    plain: dict[tuple[int, str], TrainedPolicy] = {}
    for seed, regime in bar:
        bar.set_postfix_str(f"train {regime.name} seed {seed}")
        if _clean_identity(regime):
            # Without a network the predictive input is the observation itself: the
            # policy is the plain one of the same seed, trained once.
            key = (seed, regime.train_condition)
            if key not in plain:
                plain[key] = train_regime(
                    setup, Regime(regime.base, regime.train_condition, False), seed, total
                )
            policy = dataclasses.replace(
                plain[key], regime=regime, layout=policy_layout(setup, regime, seed)
            )
        else:
            policy = train_regime(setup, regime, seed, total)
            if not regime.compensated:
                plain[(seed, regime.train_condition)] = policy
        train_wall[f"{regime.name}/{seed}"] = policy.wall_s
        layouts[regime.name] = (policy.layout.history_length, policy.layout.action_history_length)
        evals: list[tuple[str, NetworkCondition]] = [("grid", c) for c in cond_objs]
        if ablation and regime.name == "baseline":
            evals += [("ablation", CONDITIONS[c]) for c in ABLATION_CONDITIONS]
        if regime.name in v_regimes:
            evals += [("degraded", c) for c in variant_objs]
        for table, cond in evals:
            bar.set_postfix_str(f"eval {regime.name} seed {seed} {cond.name}")
            records.append(
                evaluate_policy(
                    setup,
                    policy,
                    cond,
                    n_episodes,
                    seed=eval_seed(seed, cond.name),
                    table=table,
                )
            )
        # Rewrite the report after every policy: a long run stopped early keeps what
        # it finished.
        done = seed_list[: seed_list.index(seed) + 1]
        results = CalfResults(
            env,
            records,
            aggregate(records),
            [],
            time.perf_counter() - start,
            train_wall,
            layouts,
        )
        results.files = write_outputs(
            results, out, setup, done, total, n_episodes, [c.name for c in cond_objs]
        )
    bar.close()
    return results
