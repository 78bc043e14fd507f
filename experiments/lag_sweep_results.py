"""The lag sweep's grid, its runs and their results: the CSV files, tables and figure.

:mod:`fleetgym.experiments.lag_sweep` trains the runs; this module holds what describes
them (the envs, losses, variants and settings, :class:`SweepRun`), reads and writes a
sweep's ``lag_sweep.csv``, writes its table and figure and merges sweeps run in parts
(``fleetgym lag-sweep --merge``), including the committed Hopper-v5 grid.
"""

from __future__ import annotations

import csv
import dataclasses
import math
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fleetgym.experiments.argtypes import UsageError, check_output_dir
from fleetgym.experiments.tables import group_by, markdown_table, mean_std, write_csv
from fleetgym.validation import quote

__all__ = [
    "COMMITTED_GRID",
    "ENVS",
    "HOP_RETURN",
    "HOP_VELOCITY",
    "LAGS",
    "LOSSES",
    "MAX_CSV_LINE",
    "OPTIONAL_COLUMNS",
    "QUICK_LOSSES",
    "SETTINGS",
    "SweepRun",
    "TUNABLE",
    "hop_figure",
    "VARIANTS",
    "check_setting",
    "committed_grid",
    "format_settings",
    "merge",
    "parse_settings",
    "read_csv",
    "read_runs",
    "report",
    "samples_per_update",
    "title",
    "updates_in",
]

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
    ("decoupled", "decoupled", 0.8),
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
    #: What ``--set`` changed from :data:`SETTINGS` (:func:`format_settings`), "" for none
    #: (and in sweeps written before the column existed).
    settings: str = ""
    #: Mean over the run's updates of the effective sample size of the importance weights
    #: ``pi_theta / mu`` at each update's start (:attr:`~fleetgym.agents.learners.lag.
    #: LagUpdateStats.ess`, in ``(0, 1]``, 1 on-policy); NaN in sweeps written before the
    #: column existed.
    ess: float = math.nan

    @property
    def hops(self) -> bool:
        """Whether the final policy hops (:data:`HOP_RETURN` and :data:`HOP_VELOCITY`)."""
        return self.final_return >= HOP_RETURN and self.velocity >= HOP_VELOCITY

    @property
    def best_hops(self) -> bool:
        """Whether the best checkpoint hops (:data:`HOP_RETURN` and :data:`HOP_VELOCITY`)."""
        return self.best_return >= HOP_RETURN and self.best_velocity >= HOP_VELOCITY


#: Columns a sweep's CSV may lack (written before they existed): read as their defaults.
OPTIONAL_COLUMNS = (
    "velocity", "best_return", "best_velocity", "best_update", "settings", "ess",
)  # fmt: skip

#: What ``--set NAME=VALUE`` may change, with the range each accepts (``low < value <=
#: high``; ``ent_coef`` also takes 0): the learner's hyperparameters, the Gaussian policy's
#: initial log standard deviation and PPO's early-stopping KL target.
TUNABLE: dict[str, tuple[float, float]] = {
    "gamma": (0.0, 1.0),
    "gae_lambda": (0.0, 1.0),
    "lr": (0.0, 1.0),
    "ent_coef": (0.0, 1.0),
    "clip_coef": (0.0, 10.0),
    "log_std_init": (-10.0, 2.0),
    "target_kl": (0.0, 10.0),
}


def check_setting(name: str, value: float, where: str = "--set") -> float:
    """``value`` if ``name`` is :data:`TUNABLE` and ``value`` in its range.

    Raises:
        UsageError: An unknown name or a value out of range (or not finite).
    """
    if name not in TUNABLE:
        raise UsageError(f"{where}: expected a name among {sorted(TUNABLE)}, actual {quote(name)}")
    low, high = TUNABLE[name]
    ok = math.isfinite(value) and (low < value or (name == "ent_coef" and value == low))
    if not (ok and value <= high):
        bound = ">=" if name == "ent_coef" else ">"
        raise UsageError(
            f"{where}: {name}: expected a number {bound} {low:g} and <= {high:g}, actual {value!r}"
        )
    return float(value)


def parse_settings(text: str, where: str = "--set") -> dict[str, float]:
    """The overrides ``NAME=VALUE,NAME=VALUE`` (as :func:`format_settings` writes them).

    Raises:
        UsageError: A part is not ``NAME=VALUE``, a name repeats, or :func:`check_setting`
            refuses one.
    """
    settings: dict[str, float] = {}
    for part in filter(None, text.split(",")):
        name, sep, value = part.partition("=")
        name = name.strip()
        try:
            number = float(value) if sep else math.nan
        except ValueError:
            number = math.nan
        if not sep or math.isnan(number):
            raise UsageError(f"{where}: expected NAME=VALUE with a number, actual {quote(part)}")
        if name in settings:
            raise UsageError(f"{where}: expected each name once, actual {name} twice")
        settings[name] = check_setting(name, number, where)
    return settings


def format_settings(settings: dict[str, float]) -> str:
    """``settings`` as one CSV cell, sorted by name ("" for none)."""
    return ",".join(f"{name}={float(settings[name])!r}" for name in sorted(settings))


def samples_per_update(env: str) -> int:
    """Env steps one update of ``env``'s sweep consumes (actors x steps per actor)."""
    setting = SETTINGS[env]
    return int(setting["actors"] * setting["steps"])


def updates_in(env: str, steps: int) -> int:
    """Updates a run of ``steps`` env steps makes (the last one may overshoot the budget)."""
    return -(-steps // samples_per_update(env))


def _cell(values: list[float], digits: int) -> str:
    finite = [v for v in values if not math.isnan(v)]
    if not finite:
        return "-"
    mean, std = mean_std(finite)
    return f"{mean:.{digits}f} ± {std:.{digits}f}"


def _best_hops(runs: list[SweepRun]) -> str:
    recorded = [r for r in runs if not math.isnan(r.best_return)]
    return f"{sum(r.best_hops for r in recorded)}/{len(recorded)}" if recorded else "-"


def report(runs: list[SweepRun], out: Path, title: str) -> tuple[Path, Path]:
    """Write the Markdown tables and the PNG (final return vs lag, mean +- std over seeds);
    on Hopper with the effective sample size recorded, also ``lag_sweep_hops.png``
    (:func:`hop_figure`).

    The tables: final return; where the runs measured a velocity, forward velocity and, on
    Hopper, the seeds that hop (:attr:`SweepRun.hops`) out of the seeds run; where they
    recorded a best checkpoint, its return and (Hopper) the seeds whose best checkpoint
    hops (:attr:`SweepRun.best_hops`).
    """
    from matplotlib.figure import Figure

    lags = sorted({r.lag for r in runs})
    cells = group_by(runs, key=lambda r: (r.loss, r.variant, r.settings, r.lag))
    rows_of = list(group_by(runs, key=lambda r: (r.loss, r.variant, r.settings)))
    tuned = any(r.settings for r in runs)  # a settings column only where --set was used
    header = ["loss", "compensation", *(["settings"] if tuned else []), *[f"lag {k}" for k in lags]]

    def table(cell: Callable[[list[SweepRun]], str]) -> list[str]:
        rows = [
            [
                loss,
                variant,
                *([settings or "defaults"] if tuned else []),
                *[cell(cells.get((loss, variant, settings, lag), [])) for lag in lags],
            ]
            for loss, variant, settings in rows_of
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

    def section(caption: str, cell: Callable[[list[SweepRun]], str]) -> list[str]:
        return [caption, "", *table(cell), ""]

    lines = [f"# {title}", ""]
    lines += section(
        f"Final return (deterministic evaluation of the learner's policy), mean ± std over "
        f"{seeds} seeds, {shape}; columns: injected lag in updates.",
        lambda rs: _cell([r.final_return for r in rs], 0),
    )
    hopper = any(r.env == "Hopper-v5" for r in runs)
    if any(not math.isnan(r.velocity) for r in runs):
        lines += section(
            "Forward velocity (m/s, mean over the evaluation episodes), mean ± std over seeds:",
            lambda rs: _cell([r.velocity for r in rs], 2),
        )
        if hopper:
            lines += section(
                f"Seeds that hop (final return >= {HOP_RETURN:.0f} and forward velocity >= "
                f"{HOP_VELOCITY} m/s) out of the seeds run:",
                lambda rs: f"{sum(r.hops for r in rs)}/{len(rs)}" if rs else "-",
            )
    if any(not math.isnan(r.ess) for r in runs):
        lines += section(
            "Effective sample size of the importance weights pi_theta / mu (mean over the "
            "run's updates, in (0, 1]; 1: on-policy), mean ± std over seeds:",
            lambda rs: _cell([r.ess for r in rs], 2),
        )
    if any(not math.isnan(r.best_return) for r in runs):
        lines += section(
            "Best checkpoint (one every 1/32 of the run and the final policy, chosen on "
            "selection episodes of its own and scored on the final evaluation's episodes): "
            "return, mean ± std over seeds:",
            lambda rs: _cell([r.best_return for r in rs], 0),
        )
        if hopper:
            lines += section(
                "Seeds whose best checkpoint hops, out of the seeds that recorded one:",
                _best_hops,
            )
    md = out / "lag_sweep.md"
    md.write_text("\n".join(lines))

    variants = list(dict.fromkeys(r.variant for r in runs))
    fig = Figure(figsize=(5.2 * len(variants), 3.8))
    axes = fig.subplots(1, len(variants), sharey=True, squeeze=False)[0]
    for ax, variant in zip(axes, variants, strict=True):
        series = dict.fromkeys((r.loss, r.settings) for r in runs)
        for colour, (loss, settings) in enumerate(series):
            points = [
                (lag, *mean_std([r.final_return for r in cells[(loss, variant, settings, lag)]]))
                for lag in lags
                if (loss, variant, settings, lag) in cells
            ]
            if not points:
                continue
            xs = [p[0] for p in points]
            means = [p[1] for p in points]
            stds = [p[2] for p in points]
            label = f"{loss} ({settings})" if settings else loss
            ax.errorbar(
                xs, means, yerr=stds, marker="o", capsize=3, label=label, color=f"C{colour}"
            )
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
    if hopper and any(not math.isnan(r.ess) for r in runs):
        hop_figure(runs, out / "lag_sweep_hops.png", title.split(":")[0])
    return md, png


def hop_figure(runs: list[SweepRun], path: Path, env: str) -> None:
    """Two panels against the lag, one line per loss (and compensation, settings): the share
    of seeds that hop, and the mean effective sample size of the importance weights."""
    from matplotlib.figure import Figure

    cells = group_by(runs, key=lambda r: (r.loss, r.variant, r.settings, r.lag))
    series = list(dict.fromkeys((r.loss, r.variant, r.settings) for r in runs))
    lags = sorted({r.lag for r in runs})
    fig = Figure(figsize=(10, 3.8))
    hop_ax, ess_ax = fig.subplots(1, 2, sharex=True)
    for colour, (loss, variant, settings) in enumerate(series):
        present = [lag for lag in lags if (loss, variant, settings, lag) in cells]
        share = [
            sum(r.hops for r in cells[(loss, variant, settings, lag)])
            / len(cells[(loss, variant, settings, lag)])
            for lag in present
        ]
        ess = [
            mean_std([r.ess for r in cells[(loss, variant, settings, lag)]])[0] for lag in present
        ]
        label = f"{loss}, {variant}" + (f" ({settings})" if settings else "")
        hop_ax.plot(present, share, marker="o", color=f"C{colour}", label=label)
        ess_ax.plot(present, ess, marker="o", color=f"C{colour}", label=label)
    hop_ax.set_ylabel("share of seeds that hop")
    hop_ax.set_ylim(-0.05, 1.05)
    ess_ax.set_ylabel("effective sample size (mean over updates)")
    for ax in (hop_ax, ess_ax):
        ax.set_xticks(lags, [str(lag) for lag in lags])
        ax.set_xlabel("injected policy lag (updates)")
        ax.grid(alpha=0.3)
    hop_ax.legend(loc="best", fontsize=8)
    fig.suptitle(f"{env}: seeds that hop and the effective sample size against the lag")
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def title(env: str) -> str:
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
    if "settings" in values:  # as --set writes it: checked, in its canonical order
        values["settings"] = format_settings(
            parse_settings(values["settings"], f"--merge: {where}: settings")
        )
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
    merged: dict[tuple[str, str, str, str, int, int], SweepRun] = {}
    for path in files:
        for r in read_csv(path):
            merged[(r.env, r.loss, r.variant, r.settings, r.lag, r.seed)] = r
    return list(merged.values()), files


def merge(folders: list[Path], out: Path) -> int:
    """Combine earlier sweeps' runs into one table, CSV and figure in ``out``; returns 0.

    A run (env, loss, variant, settings, lag, seed) found in several folders is kept once,
    from the last folder that has it.

    Raises:
        UsageError: A folder is not a sweep's output, or the folders hold runs of more
            than one env, or none at all.
    """
    check_output_dir("--out", out)
    merged: dict[tuple[str, str, str, str, int, int], SweepRun] = {}
    for folder in folders:
        for r in read_runs(folder):
            merged[(r.env, r.loss, r.variant, r.settings, r.lag, r.seed)] = r
    runs = list(merged.values())
    envs = sorted({r.env for r in runs})
    if len(envs) != 1:
        raise UsageError(f"--merge: expected the runs of one env, actual {envs or 'no runs'}")
    write_csv(out / "lag_sweep.csv", runs)
    md, png = report(runs, out, title(envs[0]))
    print(md.read_text())
    print(f"merged {len(runs)} runs from {len(folders)} folders: wrote {md} and {png}")
    return 0
