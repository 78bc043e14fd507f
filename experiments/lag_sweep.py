"""``fleetgym lag-sweep``: final return against an injected policy lag, per loss and compensation.

Each run trains :class:`~fleetgym.agents.learners.asynchronous.trainer.AsyncPPO` without threads
(``concurrent=False``) with ``lag_injection=k``: the actors act with the weights from ``k``
updates ago (early on, the oldest that exist), so every sample of update ``u`` has lag
``min(k, u)`` exactly and a run is deterministic for its seed. The lag is counted in
updates, so a run of ``U`` updates (``ceil(steps / samples per update)``) refuses lags
``>= U`` (the actors would act with the initial policy throughout). After the step budget,
the learner's own policy (not the stale behaviour policy) is scored over deterministic
evaluation episodes: their mean return and, where the env reports ``x_velocity`` (MuJoCo
locomotion), their mean forward velocity; on Hopper a run *hops* when both reach
:data:`HOP_RETURN` and :data:`HOP_VELOCITY`. The grid: lags 0, 10, 50, 200, 1000 updates; PPO-clip, V-trace and
GIPO (sigma 0.5 and 0.8); with and without value recomputation and global advantage
normalisation (both on or both off); several seeds. Writes into ``--out``
``lag_sweep.md`` (a table, mean +- std over seeds), ``lag_sweep.csv`` (one row per run)
and ``lag_sweep.png``; a progress bar counts the runs (``--no-progress``: one line per
run on stderr instead).
``--merge`` trains nothing: it reads the ``lag_sweep.csv`` of earlier sweeps (a grid run in
parts) and writes the combined table and figure.

Example::

    fleetgym lag-sweep --env CartPole-v1 --quick --out runs/lag
    fleetgym lag-sweep --merge runs/lag-ppo runs/lag-gipo --out runs/lag-all
"""

from __future__ import annotations

import argparse
import csv
import dataclasses
import json
import math
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from fleetgym.experiments.argtypes import (
    UsageError,
    check_output_dir,
    non_negative_int,
    output_folder,
    positive_int,
    seed_range,
)
from fleetgym.experiments.tables import group_by, markdown_table, mean_std, write_csv
from fleetgym.validation import quote

ENVS = ("CartPole-v1", "Hopper-v5")
LAGS = (0, 10, 50, 200, 1000)
#: A Hopper run hops (a gait, not the balancing plateau of about 1 per step alive) when its
#: deterministic evaluation reaches both this return and this forward velocity (m/s).
HOP_RETURN = 2000.0
HOP_VELOCITY = 0.5
#: (label, loss, sigma)
LOSSES: tuple[tuple[str, str, float], ...] = (
    ("ppo", "ppo", 0.8),
    ("vtrace", "vtrace", 0.8),
    ("gipo-0.5", "gipo", 0.5),
    ("gipo-0.8", "gipo", 0.8),
)
VARIANTS = ("plain", "compensated")  # compensated: value recomputation + global norm
#: Per env: actors and env steps per actor (one update consumes one rollout of each), PPO
#: epochs and minibatch, the step budgets and the lags they hold (default and ``--quick``). Hopper uses its
#: workload's epochs, minibatch, learning rate, observation normalisation and reward
#: scaling and its 8 actors, with rollouts of 64 steps instead of 256: 512 samples per
#: update, so the default budget of 262,144 env steps is 512 updates and a lag of 200
#: updates is reached after 40 % of a run (a lag of 1000 needs ``--steps`` >= 512,512) (with the workload's 2,048 samples per update a
#: run of the same length would be 128 updates).
SETTINGS: dict[str, dict[str, Any]] = {
    "CartPole-v1": dict(
        actors=1, steps=32, epochs=2, minibatch=32, budget=40_000, quick_budget=3_200,
        lags=LAGS, quick_lags=(0, 10, 50),
    ),
    "Hopper-v5": dict(
        actors=8, steps=64, epochs=10, minibatch=64, budget=262_144, quick_budget=25_600,
        lags=(0, 10, 50, 200), quick_lags=(0, 10),
    ),
}  # fmt: skip
QUICK_LOSSES = ("ppo", "gipo-0.8")


@dataclass
class SweepRun:
    """One training run of the sweep and its evaluated final return."""

    env: str
    loss: str
    variant: str
    lag: int
    seed: int
    steps: int
    updates: int
    final_return: float  # deterministic evaluation of the learner's final policy
    train_return: float  # mean of the last 100 training episodes (behaviour policy)
    wall_s: float
    #: Mean forward velocity (m/s) over the evaluation episodes; NaN where the env reports
    #: none (CartPole; sweeps written before the column existed).
    velocity: float = math.nan
    #: The best checkpoint (see :func:`run_one`), scored on the same evaluation episodes as
    #: the final policy: its return and forward velocity, NaN in sweeps written before
    #: these columns existed; ``best_update`` is the update it was taken after.
    best_return: float = math.nan
    best_velocity: float = math.nan
    best_update: int = 0

    @property
    def hops(self) -> bool:
        """Whether the final policy hops (:data:`HOP_RETURN` and :data:`HOP_VELOCITY`)."""
        return self.final_return >= HOP_RETURN and self.velocity >= HOP_VELOCITY

    @property
    def best_hops(self) -> bool:
        """Whether the best checkpoint hops (:data:`HOP_RETURN` and :data:`HOP_VELOCITY`)."""
        return self.best_return >= HOP_RETURN and self.best_velocity >= HOP_VELOCITY


#: Columns a sweep's CSV may lack (written before they existed): read as their defaults.
OPTIONAL_COLUMNS = ("velocity", "best_return", "best_velocity", "best_update")
#: Checkpoints a run considers for its best policy (one every ``updates // CHECKPOINTS``
#: updates, and the final one), each scored on :data:`SELECTION_EPISODES` deterministic
#: episodes of their own.
CHECKPOINTS = 32
SELECTION_EPISODES = 3


def samples_per_update(env: str) -> int:
    """Env steps one update of ``env``'s sweep consumes (actors x steps per actor)."""
    setting = SETTINGS[env]
    return int(setting["actors"] * setting["steps"])


def updates_in(env: str, steps: int) -> int:
    """Updates a run of ``steps`` env steps makes (the last one may overshoot the budget)."""
    return -(-steps // samples_per_update(env))


def configure(parser: argparse.ArgumentParser) -> None:
    """Add this subcommand's arguments (imports nothing heavy)."""
    parser.add_argument("--env", choices=ENVS, default="CartPole-v1", help="workload")
    parser.add_argument(
        "--quick",
        action="store_true",
        help=f"minutes on 2 cores: losses {', '.join(QUICK_LOSSES)}, compensated only, "
        "a short budget and the lags it holds",
    )
    parser.add_argument(
        "--seeds", type=positive_int, default=3, help="seeds per cell, FIRST..FIRST+N-1"
    )
    parser.add_argument(
        "--first-seed",
        type=non_negative_int,
        default=0,
        metavar="FIRST",
        help="the first seed: --seeds N runs FIRST..FIRST+N-1",
    )
    parser.add_argument(
        "--out",
        type=output_folder,
        default=Path("fleetgym-out/lag-sweep"),
        metavar="DIR",
        help="output folder: lag_sweep.md, lag_sweep.csv and lag_sweep.png",
    )
    parser.add_argument(
        "--lags",
        type=non_negative_int,
        nargs="+",
        default=None,
        help="lags in updates, each below the run's number of updates (default: "
        + "; ".join(
            f"{env} {' '.join(map(str, s['lags']))} (--quick {' '.join(map(str, s['quick_lags']))})"
            for env, s in SETTINGS.items()
        )
        + ")",
    )
    parser.add_argument(
        "--losses",
        nargs="+",
        choices=[label for label, _, _ in LOSSES],
        default=None,
        help="losses (default all; --quick: ppo gipo-0.8)",
    )
    parser.add_argument(
        "--variants",
        nargs="+",
        choices=VARIANTS,
        default=None,
        help="compensation switches (default: both; --quick: compensated)",
    )
    budgets = "; ".join(
        f"{env} {s['budget']} (--quick {s['quick_budget']})" for env, s in SETTINGS.items()
    )
    parser.add_argument(
        "--steps",
        type=positive_int,
        default=None,
        help=f"env steps per run, at least one update's (default: {budgets})",
    )
    parser.add_argument(
        "--eval-episodes", type=positive_int, default=5, help="evaluation episodes per run"
    )
    parser.add_argument("--jobs", type=positive_int, default=1, help="worker processes")
    parser.add_argument(
        "--merge",
        nargs="+",
        type=Path,
        default=None,
        metavar="DIR",
        help="train nothing: combine the lag_sweep.csv of these earlier sweeps into one "
        "table and figure in --out",
    )
    parser.add_argument(
        "--no-progress",
        action="store_true",
        help="no progress bar (one line per finished run on stderr instead)",
    )
    parser.add_argument("--shard", default=None, help=argparse.SUPPRESS)  # "i/n", internal


def _lags(args: argparse.Namespace) -> list[int]:
    if args.lags is not None:
        return list(args.lags)
    return list(SETTINGS[args.env]["quick_lags" if args.quick else "lags"])


def _budget(args: argparse.Namespace) -> int:
    setting = SETTINGS[args.env]
    return int(args.steps or (setting["quick_budget"] if args.quick else setting["budget"]))


def check_run_shape(env: str, steps: int, lags: list[int]) -> int:
    """The updates a run of ``steps`` env steps makes, after checking that the budget holds
    one update and every lag is below the run's number of updates.

    Raises:
        UsageError: ``--steps`` below one update's samples, or a lag ``>=`` the run's
            updates (the actors would act with the initial policy throughout); the
            message says how many updates the run has.
    """
    per_update = samples_per_update(env)
    setting = SETTINGS[env]
    if steps < per_update:
        raise UsageError(
            f"--steps: expected at least one update's env steps on {env}, {per_update} "
            f"({setting['actors']} actor(s) x {setting['steps']} steps), actual {steps}"
        )
    updates = updates_in(env, steps)
    too_long = sorted({lag for lag in lags if lag >= updates})
    if too_long:
        raise UsageError(
            f"--lags: expected lags below the run's {updates} updates ({steps} env steps, "
            f"{per_update} per update on {env}; at a lag >= {updates} the actors act with "
            f"the initial policy throughout: raise --steps to at least "
            f"{max(too_long) * per_update + 1}), actual {too_long}"
        )
    return updates


def _grid(args: argparse.Namespace) -> list[tuple[str, str, int, int]]:
    losses = args.losses or (list(QUICK_LOSSES) if args.quick else [x[0] for x in LOSSES])
    variants = args.variants or (["compensated"] if args.quick else list(VARIANTS))
    return [
        (loss, variant, lag, seed)
        for loss in losses
        for variant in variants
        for lag in _lags(args)
        for seed in range(args.first_seed, args.first_seed + args.seeds)
    ]


def evaluate(policy: Any, env_id: str, episodes: int, seed: int) -> tuple[list[float], float]:
    """Deterministic evaluation of ``policy``: the return of each of ``episodes`` episodes
    and the mean forward velocity over them (the mean of the env's ``info["x_velocity"]``
    per step, which is the displacement over the episode's duration; NaN if the env reports
    no ``x_velocity``). Actions are clipped to the bounds, as the actors do."""
    import gymnasium as gym
    import numpy as np

    from fleetgym.agents.workloads import get_workload

    env = get_workload(env_id).make_env(seed=seed)
    rng = np.random.default_rng(seed)
    space = env.action_space
    returns: list[float] = []
    velocities: list[float] = []
    try:
        obs, _ = env.reset(seed=seed)
        for _ in range(episodes):
            total, done, speeds = 0.0, False, []
            while not done:
                action = policy.act(np.asarray(obs)[None], deterministic=True, rng=rng)[0][0]
                if isinstance(space, gym.spaces.Box):
                    action = np.clip(action, space.low, space.high)
                else:
                    action = int(action)
                obs, reward, terminated, truncated, info = env.step(action)
                total += float(reward)
                if "x_velocity" in info:
                    speeds.append(float(info["x_velocity"]))
                done = bool(terminated or truncated)
            returns.append(total)
            velocities.append(float(np.mean(speeds)) if speeds else math.nan)
            obs, _ = env.reset()
    finally:
        env.close()
    return returns, float(np.mean(velocities))


def run_one(
    env: str, loss: str, variant: str, lag: int, seed: int, steps: int, episodes: int
) -> SweepRun:
    """Train one cell of the grid and evaluate its final policy."""
    from fleetgym.agents.learners.asynchronous.trainer import AsyncPPO

    setting = SETTINGS[env]
    _, kind, sigma = next(x for x in LOSSES if x[0] == loss)
    compensated = variant == "compensated"
    started = time.perf_counter()
    model = AsyncPPO(
        env,
        loss=kind,
        sigma=sigma,
        max_policy_lag=lag,
        lag_injection=lag,
        concurrent=False,
        n_actors=setting["actors"],
        steps_per_actor=setting["steps"],
        recompute_values=compensated,
        global_advantage_norm=compensated,
        seed=seed,
        epochs=setting["epochs"],
        minibatch_size=setting["minibatch"],
    )
    policy = model.learner.policy
    every = max(1, updates_in(env, steps) // CHECKPOINTS)
    best: dict[str, Any] = {"score": -math.inf, "weights": None, "update": 0}

    def consider(update: int) -> None:
        # Selection episodes of their own (seed 20,000 + seed), so the best checkpoint's
        # reported score, on the final evaluation's episodes, is not the one it won on.
        scores, _ = evaluate(policy, env, SELECTION_EPISODES, seed=20_000 + seed)
        if sum(scores) / len(scores) > best["score"]:
            best.update(
                score=sum(scores) / len(scores), weights=policy.get_weights(), update=update
            )

    def checkpoint(record: Any) -> None:
        if (record.update + 1) % every == 0:
            consider(record.update + 1)

    model.learn(steps, callback=checkpoint)
    model.close()
    if best["update"] != model.learner.policy_version:
        consider(model.learner.policy_version)
    returns, velocity = evaluate(policy, env, episodes, seed=10_000 + seed)
    final = policy.get_weights()
    policy.load_weights(best["weights"])
    best_returns, best_velocity = evaluate(policy, env, episodes, seed=10_000 + seed)
    policy.load_weights(final)
    return SweepRun(
        env=env,
        loss=loss,
        variant=variant,
        lag=lag,
        seed=seed,
        steps=model.num_timesteps,
        updates=model.learner.policy_version,
        final_return=sum(returns) / len(returns),
        train_return=model.learner.mean_return,
        wall_s=time.perf_counter() - started,
        velocity=velocity,
        best_return=sum(best_returns) / len(best_returns),
        best_velocity=best_velocity,
        best_update=int(best["update"]),
    )


def _describe(done: SweepRun) -> str:
    speed = "" if math.isnan(done.velocity) else f", velocity {done.velocity:.2f} m/s"
    return (
        f"{done.loss} {done.variant} lag {done.lag} seed {done.seed}: final return "
        f"{done.final_return:.0f}{speed} ({done.wall_s:.0f} s)"
    )


def _run_shard(
    args: argparse.Namespace,
    steps: int,
    index: int,
    count: int,
    finished: Callable[[SweepRun], None],
) -> list[SweepRun]:
    """Run every ``count``-th cell of the grid from ``index``; ``finished(run)`` after each."""
    runs = []
    for i, (loss, variant, lag, seed) in enumerate(_grid(args)):
        if i % count == index:
            runs.append(run_one(args.env, loss, variant, lag, seed, steps, args.eval_episodes))
            finished(runs[-1])
    return runs


def _read_lines(path: Path) -> list[SweepRun]:
    """The runs a shard has appended to ``path`` so far (complete lines only)."""
    if not path.is_file():
        return []
    text = path.read_text()
    return [
        SweepRun(**json.loads(line))
        for line in text.splitlines(keepends=True)
        if line.endswith("\n")
    ]


def _run_parallel(
    args: argparse.Namespace, steps: int, finished: Callable[[SweepRun], None]
) -> list[SweepRun]:
    """The grid split over ``--jobs`` child processes; each appends its runs to a JSON-lines
    file as they finish, which this process reads for its progress."""
    shard_dir = args.out / "shards"
    shard_dir.mkdir(parents=True, exist_ok=True)
    files = [shard_dir / f"shard_{i}.jsonl" for i in range(args.jobs)]
    for path in files:
        path.unlink(missing_ok=True)
    base = [sys.executable, "-m", "fleetgym", "lag-sweep", "--env", args.env]
    base += ["--seeds", str(args.seeds), "--first-seed", str(args.first_seed)]
    base += ["--steps", str(steps), "--out", str(shard_dir)]
    base += ["--eval-episodes", str(args.eval_episodes), "--lags", *map(str, _lags(args))]
    if args.quick:
        base.append("--quick")
    if args.losses:
        base += ["--losses", *args.losses]
    if args.variants:
        base += ["--variants", *args.variants]
    children = [subprocess.Popen([*base, "--shard", f"{i}/{args.jobs}"]) for i in range(args.jobs)]
    seen = [0] * args.jobs

    def poll() -> None:
        for i, path in enumerate(files):
            runs = _read_lines(path)
            for run in runs[seen[i] :]:
                finished(run)
            seen[i] = len(runs)

    try:
        while any(child.poll() is None for child in children):
            poll()
            time.sleep(0.5)
        poll()
        codes = [child.wait() for child in children]
    finally:
        for child in children:
            if child.poll() is None:
                child.kill()
                child.wait()
    if any(codes):
        raise RuntimeError(f"lag-sweep shards: expected exit status 0, actual {codes}")
    return [run for path in files for run in _read_lines(path)]


def _cell(values: list[float], digits: int) -> str:
    finite = [v for v in values if not math.isnan(v)]
    if not finite:
        return "-"
    mean, std = mean_std(finite)
    return f"{mean:.{digits}f} ± {std:.{digits}f}"


def report(runs: list[SweepRun], out: Path, title: str) -> tuple[Path, Path]:
    """Write the Markdown tables and the PNG (final return vs lag, mean +- std over seeds).

    The tables: final return; where the runs measured a velocity, forward velocity and, on
    Hopper, the seeds that hop (:attr:`SweepRun.hops`) out of the seeds run.
    """
    from matplotlib.figure import Figure

    lags = sorted({r.lag for r in runs})
    cells = group_by(runs, key=lambda r: (r.loss, r.variant, r.lag))
    pairs = list(group_by(runs, key=lambda r: (r.loss, r.variant)))
    header = ["loss", "compensation", *[f"lag {k}" for k in lags]]

    def table(cell: Callable[[list[SweepRun]], str]) -> list[str]:
        rows = [
            [loss, variant, *[cell(cells.get((loss, variant, lag), [])) for lag in lags]]
            for loss, variant in pairs
        ]
        return markdown_table(header, rows)

    seeds = len({r.seed for r in runs})
    steps = sorted({r.steps for r in runs})
    updates = sorted({r.updates for r in runs})
    shape = (
        f"{steps[0]} env steps = {updates[0]} updates per run"
        if len(steps) == 1 and len(updates) == 1
        else f"{steps[0]}-{steps[-1]} env steps = {updates[0]}-{updates[-1]} updates per run"
    )
    lines = [
        f"# {title}",
        "",
        f"Final return (deterministic evaluation of the learner's policy), mean ± std over "
        f"{seeds} seeds, {shape}; columns: injected lag in updates.",
        "",
        *table(lambda rs: _cell([r.final_return for r in rs], 0)),
        "",
    ]
    if any(not math.isnan(r.velocity) for r in runs):
        lines += [
            "Forward velocity (m/s, mean over the evaluation episodes), mean ± std over seeds:",
            "",
            *table(lambda rs: _cell([r.velocity for r in rs], 2)),
            "",
        ]
        if any(r.env == "Hopper-v5" for r in runs):
            lines += [
                f"Seeds that hop (final return >= {HOP_RETURN:.0f} and forward velocity >= "
                f"{HOP_VELOCITY} m/s) out of the seeds run:",
                "",
                *table(lambda rs: f"{sum(r.hops for r in rs)}/{len(rs)}" if rs else "-"),
                "",
            ]
    md = out / "lag_sweep.md"
    md.write_text("\n".join(lines))

    variants = list(dict.fromkeys(r.variant for r in runs))
    fig = Figure(figsize=(5.2 * len(variants), 3.8))
    axes = fig.subplots(1, len(variants), sharey=True, squeeze=False)[0]
    for ax, variant in zip(axes, variants, strict=True):
        for colour, loss in enumerate(dict.fromkeys(r.loss for r in runs)):
            points = [
                (lag, *mean_std([r.final_return for r in cells[(loss, variant, lag)]]))
                for lag in lags
                if (loss, variant, lag) in cells
            ]
            if not points:
                continue
            xs = [p[0] for p in points]
            means = [p[1] for p in points]
            stds = [p[2] for p in points]
            ax.errorbar(xs, means, yerr=stds, marker="o", capsize=3, label=loss, color=f"C{colour}")
        if any(r.env == "Hopper-v5" for r in runs):
            ax.axhline(HOP_RETURN, color="grey", linestyle="--", linewidth=0.8)
        ax.set_xscale("symlog", linthresh=10)
        ax.set_xlim(-0.5, max(lags) * 1.5 + 1)
        ax.set_xticks(lags, [str(lag) for lag in lags])
        ax.set_xlabel("injected policy lag (updates)")
        ax.set_title(variant)
        ax.grid(alpha=0.3)
        ax.legend(loc="best", fontsize=8)
    axes[0].set_ylabel("final return")
    fig.suptitle(title)
    fig.tight_layout()
    png = out / "lag_sweep.png"
    fig.savefig(png, dpi=110)
    return md, png


def _title(env: str) -> str:
    return f"{env}: final return vs injected policy lag"


#: Longest line of a ``lag_sweep.csv`` read (a row holds short names and numbers).
MAX_CSV_LINE = 16_384


def _run_of(row: dict[str, Any], where: str) -> SweepRun:
    """One CSV row as a run, each value checked (names known, counts >= 0, finite)."""
    values: dict[str, Any] = {}
    for f in dataclasses.fields(SweepRun):
        if f.name in OPTIONAL_COLUMNS and row.get(f.name) is None:
            continue  # a sweep written before the column: its default
        text = (row.get(f.name) or "").strip()
        kind = str(f.type)
        try:
            if kind != "str" and not text.isascii():
                raise ValueError(text)
            value: Any = int(text) if kind == "int" else float(text) if kind == "float" else text
        except ValueError:
            what = "an integer" if kind == "int" else "a number"
            raise UsageError(
                f"--merge: {where}: {f.name}: expected {what}, actual {quote(text)}"
            ) from None
        if kind == "int" and value < 0:
            raise UsageError(
                f"--merge: {where}: {f.name}: expected an integer >= 0, actual {value}"
            )
        if (
            kind == "float"
            and not math.isfinite(value)
            and not (f.name in OPTIONAL_COLUMNS and math.isnan(value))
        ):
            raise UsageError(
                f"--merge: {where}: {f.name}: expected a finite number, actual {text!r}"
            )
        if f.name == "wall_s" and value < 0:
            raise UsageError(f"--merge: {where}: wall_s: expected a number >= 0, actual {text!r}")
        values[f.name] = value
    known = {"env": ENVS, "loss": tuple(label for label, _, _ in LOSSES), "variant": VARIANTS}
    for name, choices in known.items():
        if values[name] not in choices:
            raise UsageError(
                f"--merge: {where}: {name}: expected one of {list(choices)}, "
                f"actual {quote(values[name])}"
            )
    return SweepRun(**values)


def read_runs(folder: Path) -> list[SweepRun]:
    """The runs an earlier sweep wrote to ``folder/lag_sweep.csv``.

    Raises:
        UsageError: ``folder`` holds no ``lag_sweep.csv``, the file cannot be read (or is
            not UTF-8 text), lacks a column of :class:`SweepRun`, or a value does not
            parse or is out of range (a NaN or infinite return, a negative lag, seed or
            count, an unknown env, loss or variant); the message names the file and line.
            The ``velocity`` column may be missing (a sweep written before it) or NaN
            (none measured).
    """
    path = Path(folder) / "lag_sweep.csv"
    if not path.is_file():
        raise UsageError(f"--merge: expected a sweep's output folder, {path} is missing")
    return read_csv(path)


def read_csv(path: Path) -> list[SweepRun]:
    """The runs of one sweep's CSV file (checked as :func:`read_runs` says)."""
    names = [f.name for f in dataclasses.fields(SweepRun) if f.name not in OPTIONAL_COLUMNS]
    runs = []
    line = 1
    try:
        with path.open(newline="", encoding="utf-8") as fh:
            reader = csv.DictReader(_bounded_lines(fh, path))
            for row in reader:
                line = reader.line_num
                missing = sorted(set(names) - set(row))
                if missing:
                    raise UsageError(
                        f"--merge: {path}: expected the columns {missing}, "
                        f"actual {quote(sorted(str(k) for k in row))}"
                    )
                runs.append(_run_of(row, f"{path}, line {line}"))
    except (OSError, UnicodeDecodeError, csv.Error) as exc:
        raise UsageError(f"--merge: {path}, line {line}: cannot be read ({exc})") from None
    return runs


def _bounded_lines(fh: Any, path: Path) -> Any:
    for number, text in enumerate(fh, start=1):
        if len(text) > MAX_CSV_LINE:
            raise UsageError(
                f"--merge: {path}, line {number}: expected a line of a sweep's CSV, "
                f"actual {len(text)} characters"
            )
        yield text


#: The committed Hopper-v5 grid, in parts: ``docs/results/data`` of a source checkout
#: (docs/results/async.md tells the commands and the commit of each part).
COMMITTED_GRID = "docs/results/data/lag_sweep_hopper_gait_*.csv"


def committed_grid(root: Path | None = None) -> tuple[list[SweepRun], list[Path]]:
    """The runs of the committed Hopper grid and the files they came from.

    Args:
        root: The source tree (default: the one this module lies in, whose root is the
            package); an installation without ``docs/`` gives no runs.

    Returns:
        ``(runs, files)``: a run found in several parts is kept once, from the last file
        in name order; ``([], [])`` when no part is found.
    """
    root = Path(__file__).resolve().parents[1] if root is None else Path(root)
    files = sorted(root.glob(COMMITTED_GRID))
    merged: dict[tuple[str, str, str, int, int], SweepRun] = {}
    for path in files:
        for r in read_csv(path):
            merged[(r.env, r.loss, r.variant, r.lag, r.seed)] = r
    return list(merged.values()), files


def merge(folders: list[Path], out: Path) -> int:
    """Combine earlier sweeps' runs into one table, CSV and figure in ``out``; returns 0.

    A run (env, loss, variant, lag, seed) found in several folders is kept once, from the
    last folder that has it.

    Raises:
        UsageError: A folder is not a sweep's output, or the folders hold runs of more
            than one env, or none at all.
    """
    check_output_dir("--out", out)
    merged: dict[tuple[str, str, str, int, int], SweepRun] = {}
    for folder in folders:
        for r in read_runs(folder):
            merged[(r.env, r.loss, r.variant, r.lag, r.seed)] = r
    runs = list(merged.values())
    envs = sorted({r.env for r in runs})
    if len(envs) != 1:
        raise UsageError(f"--merge: expected the runs of one env, actual {envs or 'no runs'}")
    write_csv(out / "lag_sweep.csv", runs)
    md, png = report(runs, out, _title(envs[0]))
    print(md.read_text())
    print(f"merged {len(runs)} runs from {len(folders)} folders: wrote {md} and {png}")
    return 0


def _shard(text: str) -> tuple[int, int]:
    """The internal ``--shard i/n`` (this child runs every n-th cell from i)."""
    index, sep, count = text.partition("/")
    if not (sep and index.isdigit() and count.isdigit() and int(index) < int(count)):
        raise UsageError(f"--shard: expected i/n with 0 <= i < n, actual {text!r}")
    return int(index), int(count)


def run(args: argparse.Namespace) -> int:
    """Run the sweep and write its table, CSV and figure; returns 0."""
    if args.merge:
        return merge(args.merge, args.out)
    seed_range(args.first_seed, args.seeds)
    shard = None if args.shard is None else _shard(args.shard)
    steps = _budget(args)
    updates = check_run_shape(args.env, steps, _lags(args))
    check_output_dir("--out", args.out)
    import torch

    torch.set_num_threads(1)
    if shard is not None:
        # A child of --jobs: silent, each run appended to its JSON-lines file at once.
        index, count = shard
        path = args.out / f"shard_{index}.jsonl"
        path.unlink(missing_ok=True)

        def append(done: SweepRun) -> None:
            with path.open("a", encoding="utf-8") as fh:
                fh.write(json.dumps(asdict(done)) + "\n")

        _run_shard(args, steps, index, count, append)
        return 0
    from tqdm import tqdm

    grid = _grid(args)
    print(
        f"lag sweep on {args.env}: {len(grid)} runs of {steps} env steps ({updates} updates of "
        f"{samples_per_update(args.env)}), {args.jobs} job(s)"
    )
    started = time.perf_counter()
    with tqdm(total=len(grid), desc="lag sweep", unit="run", disable=args.no_progress) as bar:

        def finished(done: SweepRun) -> None:
            if args.no_progress:
                print(_describe(done), file=sys.stderr, flush=True)
            else:
                bar.write(_describe(done), file=sys.stderr)
            bar.update(1)

        if args.jobs > 1:
            runs = _run_parallel(args, steps, finished)
        else:
            runs = _run_shard(args, steps, 0, 1, finished)
    write_csv(args.out / "lag_sweep.csv", runs)
    md, png = report(runs, args.out, _title(args.env))
    print(md.read_text())
    print(
        f"wrote {md}, {png} and {args.out / 'lag_sweep.csv'} in {time.perf_counter() - started:.0f} s"
    )
    return 0
