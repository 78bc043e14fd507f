"""``fleetgym schedule``: evaluate, train and fine-tune actor schedulers.

``fleetgym schedule evaluate`` runs schedulers (the heuristic baselines of
:mod:`fleetgym.agents.schedulers` and trained SB3 models) on
:class:`~fleetgym.meta_env.ActorSchedulingEnv` over several seeds and writes, into
``--out``, a CSV of every episode, a CSV and a Markdown table of mean ± std per scheduler
(time, time to target, cost, success rate, rounds, total reward) and a PNG of actors and
mean return per round. ``train`` and ``finetune`` belong to
:mod:`fleetgym.experiments.scheduler_training`, loaded only when used.

Example:
    fleetgym schedule evaluate --workload CartPole-v1 --scheduler adapt --seeds 5
    fleetgym schedule evaluate --scheduler all --seeds 3 --out fleetgym-out/baselines
    fleetgym schedule evaluate --scheduler learned:runs/scheduler.zip --scheduler max
"""

from __future__ import annotations

import argparse
import csv
import importlib
import math
import statistics
import sys
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from fleetgym.experiments.argtypes import env_kwarg, non_negative_int, positive_int

#: The general scheduling env (kwargs ``workload``, ``timing``, ...).
DEFAULT_ENV_ID = "fleetgym/ActorScheduling-v0"
#: What ``--scheduler all`` expands to: a Fixed(n) sweep and every MinionsRL heuristic
#: (Fixed(32) is Max).
ALL_SCHEDULERS: tuple[str, ...] = (
    "fixed:1",
    "fixed:4",
    "fixed:8",
    "fixed:16",
    "max",
    "increase",
    "decrease",
    "adapt",
    "server",
)
_TRAINING_MODULE = "fleetgym.experiments.scheduler_training"


@dataclass
class EpisodeResult:
    """One evaluation episode: one whole training run of the workload under a scheduler.

    ``time_s`` is the sum of the round times P_k (the time to target when ``success``),
    ``cost`` the total billed cost, both as the env accounts them (modelled or measured).
    """

    scheduler: str
    seed: int
    success: bool
    target_reached: bool
    time_s: float
    cost: float
    rounds: int
    total_reward: float
    mean_actors: float
    max_return: float
    final_return: float
    wall_s: float
    num_actors: list[int] = field(default_factory=list)
    mean_return: list[float] = field(default_factory=list)

    @property
    def time_to_target_s(self) -> float:
        """Sum of round times until the target, NaN if it was not reached within budget."""
        return self.time_s if self.success else math.nan


def _check_seeds(seeds: Iterable[int]) -> list[int]:
    out = []
    for s in seeds:
        if isinstance(s, bool) or not isinstance(s, int) or s < 0:
            raise ValueError(f"seeds: expected integers >= 0, actual {s!r}")
        out.append(int(s))
    if not out:
        raise ValueError("seeds: expected at least one seed, actual none")
    return out


def evaluate_scheduler(
    scheduler: Any,
    env_kwargs: Mapping[str, Any] | None,
    seeds: Iterable[int],
    *,
    env_id: str = DEFAULT_ENV_ID,
    name: str | None = None,
    deterministic: bool = True,
    progress: Any = None,
) -> list[EpisodeResult]:
    """Run ``scheduler`` for one episode per seed and record each episode.

    Works with anything that has SB3's ``predict(obs, state, episode_start,
    deterministic) -> (action, state)``: the baselines and trained SB3 models. The
    scheduler's ``env_overrides`` (e.g. the server-based fleet's VM billing) are merged
    into ``env_kwargs``; recurrent state is threaded through ``state``/``episode_start``.

    Args:
        scheduler: the predictor.
        env_kwargs: keyword arguments of ``gym.make(env_id, ...)``.
        seeds: one episode per seed (``reset(seed=...)``).
        env_id: the scheduling env's ID.
        name: the scheduler's name in the records (default: its ``name`` or class).
        deterministic: passed to ``predict``.
        progress: a tqdm bar to advance by one per episode (or None).

    Returns:
        One :class:`EpisodeResult` per seed.

    Raises:
        TypeError: ``scheduler`` has no ``predict`` or ``env_kwargs`` is not a mapping.
        ValueError: no seeds, or a negative one.
    """
    import gymnasium as gym
    import numpy as np

    import fleetgym  # noqa: F401  (registers the IDs)

    if not callable(getattr(scheduler, "predict", None)):
        raise TypeError(
            f"scheduler: expected an object with SB3's predict(), actual {type(scheduler).__name__}"
        )
    if env_kwargs is not None and not isinstance(env_kwargs, Mapping):
        raise TypeError(f"env_kwargs: expected a mapping, actual {type(env_kwargs).__name__}")
    seeds = _check_seeds(seeds)
    label = name or getattr(scheduler, "name", None) or type(scheduler).__name__
    kwargs = {**dict(env_kwargs or {}), **dict(getattr(scheduler, "env_overrides", {}) or {})}
    env = gym.make(env_id, **kwargs)
    results = []
    try:
        for seed in seeds:
            started = time.perf_counter()
            obs, info = env.reset(seed=seed)
            state: Any = None
            episode_start = np.ones((1,), dtype=bool)
            actors: list[int] = []
            returns: list[float] = []
            total_reward = 0.0
            while True:
                action, state = scheduler.predict(
                    obs, state=state, episode_start=episode_start, deterministic=deterministic
                )
                episode_start = np.zeros((1,), dtype=bool)
                obs, reward, terminated, truncated, info = env.step(action)
                total_reward += float(reward)
                actors.append(int(info["num_actors"]))
                returns.append(float(info["mean_return"]))
                if terminated or truncated:
                    break
            results.append(
                EpisodeResult(
                    scheduler=label,
                    seed=seed,
                    success=bool(info["success"]),
                    target_reached=bool(info["target_reached"]),
                    time_s=float(info["total_time"]),
                    cost=float(info["total_cost"]),
                    rounds=int(info["round"]),
                    total_reward=total_reward,
                    mean_actors=float(np.mean(actors)),
                    max_return=float(info["max_return"]),
                    final_return=float(info["mean_return"]),
                    wall_s=time.perf_counter() - started,
                    num_actors=actors,
                    mean_return=returns,
                )
            )
            if progress is not None:
                progress.update(1)
                progress.set_postfix(scheduler=label, seed=seed)
    finally:
        env.close()
    return results


def load_learned_scheduler(path: str | Path) -> Any:
    """A trained SB3 PPO scheduler from its zip (imports SB3).

    Raises:
        FileNotFoundError: no such file.
    """
    path = Path(path)
    candidates = [path, path.with_suffix(".zip")] if path.suffix != ".zip" else [path]
    found = next((p for p in candidates if p.is_file()), None)
    if found is None:
        raise FileNotFoundError(
            f"learned scheduler: expected an SB3 PPO zip, actual no file {path}"
        )
    from stable_baselines3 import PPO

    from fleetgym.agents.scheduler_actions import MappedScheduler
    from fleetgym.experiments.scheduler_training import META_ATTR

    model = PPO.load(str(found), device="cpu")
    meta = getattr(model, META_ATTR, None)
    mode = (meta or {}).get("config", {}).get("actions", "discrete")
    if mode == "discrete":
        return model
    # A scheduler trained in another action space acts through the same mapping.
    max_actors = int((meta or {}).get("env_kwargs", {}).get("max_actors", 32))
    return MappedScheduler(model, mode, max_actors=max_actors)


def resolve_schedulers(
    names: str | Sequence[str], *, max_actors: int = 32, target_return: float | None = None
) -> dict[str, Any]:
    """Schedulers by name: ``fixed:N``, ``max``, ``increase``, ``decrease``, ``adapt``,
    ``server``, ``all`` (:data:`ALL_SCHEDULERS`) and ``learned:PATH`` (an SB3 PPO zip).

    Names may be given as a list or comma-separated. Returns table name -> predictor.

    Raises:
        ValueError: an unknown name; FileNotFoundError: a missing ``learned:`` zip.
    """
    from fleetgym.agents.schedulers import make_baseline

    if isinstance(names, str):
        names = [names]
    flat: list[str] = []
    for item in names:
        if not isinstance(item, str):
            raise TypeError(f"scheduler: expected a name, actual {type(item).__name__}")
        # A learned path may itself contain commas only if given alone.
        parts = [item] if item.startswith("learned:") else item.split(",")
        flat.extend(p.strip() for p in parts if p.strip())
    if not flat:
        raise ValueError("scheduler: expected at least one name, actual none")
    out: dict[str, Any] = {}
    for spec in flat:
        if spec.lower() == "all":
            for base in ALL_SCHEDULERS:
                sched = make_baseline(base, max_actors=max_actors, target_return=target_return)
                out[sched.name] = sched
        elif spec.startswith("learned:"):
            path = spec.split(":", 1)[1]
            if not path:
                raise ValueError(f"scheduler: expected learned:PATH, actual {spec!r}")
            key = "learned" if "learned" not in out else f"learned:{Path(path).stem}"
            out[key] = load_learned_scheduler(path)
        else:
            sched = make_baseline(spec, max_actors=max_actors, target_return=target_return)
            out[sched.name] = sched
    return out


def _mean_std(values: Sequence[float]) -> tuple[float, float]:
    values = [v for v in values if not math.isnan(v)]
    if not values:
        return math.nan, math.nan
    return statistics.fmean(values), (statistics.pstdev(values) if len(values) > 1 else 0.0)


def summarize(results: Sequence[EpisodeResult]) -> list[dict[str, Any]]:
    """Mean ± std per scheduler (population std over seeds), in first-seen order."""
    order: dict[str, list[EpisodeResult]] = {}
    for r in results:
        order.setdefault(r.scheduler, []).append(r)
    rows = []
    for sched, rs in order.items():
        row: dict[str, Any] = {"scheduler": sched, "episodes": len(rs)}
        row["success_rate"] = sum(r.success for r in rs) / len(rs)
        for key, values in (
            ("time_s", [r.time_s for r in rs]),
            ("time_to_target_s", [r.time_to_target_s for r in rs]),
            ("cost", [r.cost for r in rs]),
            ("rounds", [float(r.rounds) for r in rs]),
            ("total_reward", [r.total_reward for r in rs]),
            ("mean_actors", [r.mean_actors for r in rs]),
            ("wall_s", [r.wall_s for r in rs]),
        ):
            mean, std = _mean_std(values)
            row[f"{key}_mean"], row[f"{key}_std"] = mean, std
        rows.append(row)
    return rows


def _pm(mean: float, std: float, digits: int) -> str:
    if math.isnan(mean):
        return "n/a"
    return f"{mean:.{digits}f} ± {std:.{digits}f}"


def markdown_table(rows: Sequence[Mapping[str, Any]]) -> str:
    """The summary as a Markdown table (mean ± std over seeds).

    "wall" is this machine's wall-clock time per episode (the cost of the simulation
    itself, not a modelled figure).
    """
    header = (
        "| scheduler | success | time to target (s) | time (s) | cost ($) | rounds "
        "| total reward | mean actors | wall (s) |\n|---|---|---|---|---|---|---|---|---|"
    )
    lines = [header]
    for r in rows:
        lines.append(
            f"| {r['scheduler']} | {r['success_rate']:.0%} "
            f"| {_pm(r['time_to_target_s_mean'], r['time_to_target_s_std'], 1)} "
            f"| {_pm(r['time_s_mean'], r['time_s_std'], 1)} "
            f"| {_pm(r['cost_mean'], r['cost_std'], 4)} "
            f"| {_pm(r['rounds_mean'], r['rounds_std'], 1)} "
            f"| {_pm(r['total_reward_mean'], r['total_reward_std'], 2)} "
            f"| {_pm(r['mean_actors_mean'], r['mean_actors_std'], 1)} "
            f"| {_pm(r['wall_s_mean'], r['wall_s_std'], 1)} |"
        )
    return "\n".join(lines)


def _write_csv(path: Path, rows: Sequence[Mapping[str, Any]]) -> Path:
    with path.open("w", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    return path


def _plot(results: Sequence[EpisodeResult], path: Path, title: str) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax_a, ax_r) = plt.subplots(1, 2, figsize=(12, 4))
    colours: dict[str, Any] = {}
    for r in results:
        first = r.scheduler not in colours
        if first:
            colours[r.scheduler] = f"C{len(colours) % 10}"
        style = {"color": colours[r.scheduler], "lw": 1, "alpha": 0.8}
        rounds = range(1, len(r.num_actors) + 1)
        ax_a.step(rounds, r.num_actors, where="post", label=r.scheduler if first else None, **style)
        ax_r.plot(rounds, r.mean_return, **style)
    ax_a.set_xlabel("round k")
    ax_a.set_ylabel("actors I_k")
    ax_r.set_xlabel("round k")
    ax_r.set_ylabel("mean return R̄_k")
    for ax in (ax_a, ax_r):
        ax.grid(alpha=0.3)
    ax_a.legend(fontsize=7, ncol=2)
    fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def write_report(
    results: Sequence[EpisodeResult], out: str | Path, *, title: str = "scheduler evaluation"
) -> dict[str, Path]:
    """Write episodes.csv, summary.csv, summary.md and schedules.png into ``out``."""
    if not results:
        raise ValueError("results: expected at least one episode, actual none")
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    episode_rows = []
    for r in results:
        row = asdict(r)
        row["time_to_target_s"] = r.time_to_target_s
        row["num_actors"] = " ".join(str(n) for n in r.num_actors)
        row["mean_return"] = " ".join(f"{v:.2f}" for v in r.mean_return)
        episode_rows.append(row)
    rows = summarize(results)
    table = markdown_table(rows)
    files = {
        "episodes": _write_csv(out / "episodes.csv", episode_rows),
        "summary_csv": _write_csv(out / "summary.csv", rows),
        "summary_md": out / "summary.md",
        "plot": _plot(results, out / "schedules.png", title),
    }
    files["summary_md"].write_text(f"# {title}\n\n{table}\n")
    return files


# --------------------------------------------------------------------------- CLI


def _configure_evaluate(p: argparse.ArgumentParser) -> None:
    p.add_argument("--workload", default="CartPole-v1", help="workload (default: CartPole-v1)")
    p.add_argument(
        "--scheduler",
        action="append",
        default=None,
        help="fixed:N, max, increase, decrease, adapt, server, all, learned:PATH "
        "(repeatable or comma-separated; default: all)",
    )
    p.add_argument("--seeds", type=positive_int, default=5, help="episodes per scheduler")
    p.add_argument(
        "--first-seed", type=non_negative_int, default=0, help="seeds are FIRST..FIRST+N-1"
    )
    p.add_argument(
        "--timing",
        choices=("modeled", "measured"),
        default="modeled",
        help="modeled (default): deterministic compute model; measured: this machine's",
    )
    p.add_argument("--preset", choices=("fast", "paper"), default="fast", help="env defaults")
    p.add_argument("--max-actors", type=positive_int, default=32, help="I_max")
    p.add_argument("--env-id", default=DEFAULT_ENV_ID, help="scheduling env ID")
    p.add_argument(
        "--env-kwarg",
        action="append",
        default=[],
        type=env_kwarg,
        metavar="KEY=VALUE",
        help="extra env keyword argument (VALUE parsed as JSON if it can be), repeatable",
    )
    p.add_argument("--out", default="fleetgym-out/schedule-eval", help="output folder")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")


def _training_module() -> Any:
    try:
        return importlib.import_module(_TRAINING_MODULE)
    except ImportError:
        return None


def configure(parser: argparse.ArgumentParser) -> None:
    """Add ``evaluate``, ``train`` and ``finetune`` (imports nothing heavy)."""
    sub = parser.add_subparsers(dest="schedule_command", metavar="ACTION")
    _configure_evaluate(
        sub.add_parser("evaluate", help="run schedulers over seeds and tabulate time and cost")
    )
    training = _training_module()
    train_p = sub.add_parser("train", help="train the learned (SB3 PPO) scheduler")
    finetune_p = sub.add_parser("finetune", help="fine-tune a trained scheduler on a workload")
    for p, adder in ((train_p, "add_train_arguments"), (finetune_p, "add_finetune_arguments")):
        add = getattr(training, adder, None) if training is not None else None
        if add is not None:
            add(p)
        else:  # accept anything so run() can say what is missing
            p.add_argument("rest", nargs=argparse.REMAINDER)


def _run_evaluate(args: argparse.Namespace) -> int:
    import torch
    from tqdm.auto import tqdm

    from fleetgym.meta_env.actor_scheduling import scheduling_defaults

    torch.set_num_threads(1)
    env_kwargs: dict[str, Any] = {}
    if args.env_id == DEFAULT_ENV_ID:
        env_kwargs.update(workload=args.workload, preset=args.preset, timing=args.timing)
    env_kwargs["max_actors"] = args.max_actors
    env_kwargs.update(dict(args.env_kwarg))
    # Adapt reads R_bar/J from the normalised observation; raw observations need J.
    target = None
    if env_kwargs.get("normalize_obs") is False:
        target = (
            env_kwargs.get("target_return")
            or scheduling_defaults(
                env_kwargs.get("workload", args.workload), env_kwargs.get("preset", args.preset)
            ).target_return
        )
    schedulers = resolve_schedulers(
        args.scheduler or ["all"], max_actors=args.max_actors, target_return=target
    )
    seeds = list(range(args.first_seed, args.first_seed + args.seeds))
    results: list[EpisodeResult] = []
    with tqdm(
        total=len(schedulers) * len(seeds),
        desc="schedule evaluate",
        unit="ep",
        disable=args.no_progress,
    ) as bar:
        for name, sched in schedulers.items():
            results.extend(
                evaluate_scheduler(
                    sched, env_kwargs, seeds, env_id=args.env_id, name=name, progress=bar
                )
            )
    title = f"{args.workload}, {args.timing} timing, seeds {seeds[0]}..{seeds[-1]}"
    files = write_report(results, args.out, title=title)
    print(markdown_table(summarize(results)))
    print("wrote " + ", ".join(str(p) for p in files.values()))
    return 0


def run(args: argparse.Namespace) -> int:
    """Dispatch ``evaluate`` here and ``train``/``finetune`` to the training module."""
    command = getattr(args, "schedule_command", None)
    if command is None:
        print("usage: fleetgym schedule {evaluate,train,finetune} ...", file=sys.stderr)
        return 2
    if command == "evaluate":
        from fleetgym.errors import FleetgymError

        try:
            return _run_evaluate(args)
        except (FleetgymError, ValueError, TypeError, FileNotFoundError) as exc:
            # Bad names, paths or env arguments: a one-line message, not a traceback.
            print(f"fleetgym schedule evaluate: {exc}", file=sys.stderr)
            return 2
    training = _training_module()
    fn = getattr(training, command, None) if training is not None else None
    if fn is None:
        print(
            f"fleetgym schedule {command}: not available yet: expected "
            f"{_TRAINING_MODULE}.{command}(args), actual module or function missing",
            file=sys.stderr,
        )
        return 2
    return int(fn(args) or 0)
