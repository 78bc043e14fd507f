"""The compute model of any workload, measured on this machine and cached on disk.

The shipped tables of :mod:`~fleetgym.meta_env.presets` hold hand-measured compute models
for the papers' workloads. Any other workload gets its
:class:`~fleetgym.meta_env.time_model.ComputeCostModel` from :func:`calibrate`: a few
seconds of real stepping (a :class:`~fleetgym.agents.rollout.RolloutWorker`, the actor of
every fleet) and updating (:class:`~fleetgym.agents.learners.ppo.PPOLearner`), both on one torch
thread and timed in process CPU time, as the tables were. Each is timed at two sizes and
the line through the two (the fastest of a few repeats each, robust to a loaded machine)
gives the per-step (per-sample) slope and the fixed overhead.

The result is cached as JSON in :func:`cache_dir` (``$FLEETGYM_CACHE_DIR``, else
``$XDG_CACHE_HOME/fleetgym``, else ``~/.cache/fleetgym``), under ``calibration/``, keyed by
the env ID, every workload field, the learner overrides and the versions of fleetgym,
Gymnasium, NumPy, torch and Python: a changed workload or upgraded package measures
again. A cache file that cannot be used (unreadable, not JSON, another workload's key,
an invalid model) is logged with its path and measured again, never an error.
``fleetgym calibrate --workload ID`` runs it explicitly.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import math
import os
import platform
import time
from collections.abc import Iterator, Mapping
from dataclasses import asdict, dataclass, fields
from importlib import metadata
from pathlib import Path
from typing import Any

from fleetgym.agents.workloads import Workload, get_workload
from fleetgym.errors import FleetgymError
from fleetgym.meta_env.time_model import ComputeCostModel
from fleetgym.validation import check_bool, check_float, check_int, quote

__all__ = [
    "CACHE_ENV_VAR",
    "CalibrationError",
    "CalibrationResult",
    "cache_dir",
    "cache_path",
    "calibrate",
    "check_learner_overrides",
]

logger = logging.getLogger(__name__)

#: Environment variable naming the cache folder.
CACHE_ENV_VAR = "FLEETGYM_CACHE_DIR"
#: Straggler spread of calibrated models (as the shipped tables: the run-time spread of
#: identical serverless containers).
JITTER_CV = 0.1
#: Version of the cache file format (part of the key).
FORMAT = 1


class CalibrationError(FleetgymError, RuntimeError):
    """An environment or learner that raised while its compute was being measured."""


@dataclass(frozen=True)
class CalibrationResult:
    """A calibrated compute model and where it came from.

    Args:
        workload: the workload's name.
        model: the compute model.
        path: the cache file (written only where ``stored``).
        cached: read from the cache (True) or measured now (False).
        details: the measured points (seconds at each size).
        stored: the result is in ``path`` (False: measured now, but writing the cache
            file failed; a warning says why).
    """

    workload: str
    model: ComputeCostModel
    path: Path
    cached: bool
    details: Mapping[str, Any]
    stored: bool = True


def cache_dir() -> Path:
    """The cache folder: ``$FLEETGYM_CACHE_DIR``, else the user cache folder's ``fleetgym``."""
    given = os.environ.get(CACHE_ENV_VAR)
    if given:
        return Path(given).expanduser()
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base).expanduser() / "fleetgym"


def _versions() -> dict[str, str]:
    versions = {"python": platform.python_version(), "machine": platform.machine()}
    for package in ("fleetgym", "gymnasium", "numpy", "torch"):
        try:
            versions[package] = metadata.version(package)
        except metadata.PackageNotFoundError:
            versions[package] = "none"
    return versions


def _key(workload: Workload, overrides: Mapping[str, Any]) -> dict[str, Any]:
    fields_ = {k: list(v) if isinstance(v, tuple) else v for k, v in asdict(workload).items()}
    return {
        "format": FORMAT,
        "env_id": workload.env_id,
        "workload": fields_,
        "learner_overrides": dict(sorted(overrides.items())),
        "versions": _versions(),
    }


def cache_path(
    workload: Any, learner_overrides: Mapping[str, Any] | None = None, folder: Path | None = None
) -> Path:
    """The cache file of ``workload``'s calibration (whether it exists or not)."""
    w = get_workload(workload)
    key = _key(w, dict(learner_overrides or {}))
    digest = hashlib.sha256(
        json.dumps(key, sort_keys=True, default=str).encode("utf-8")
    ).hexdigest()
    safe = "".join(c if c.isalnum() or c in "-_." else "_" for c in w.env_id)[:80]
    return (folder or cache_dir()) / "calibration" / f"{safe}-{digest[:16]}.json"


@contextlib.contextmanager
def _step(workload: Workload, what: str) -> Iterator[None]:
    """Turn any exception of one calibration step into a CalibrationError naming it."""
    try:
        yield
    except CalibrationError:
        raise
    except Exception as error:
        raise CalibrationError(
            f"calibration of workload {workload.name!r} failed while {what}: "
            f"{type(error).__name__}: {error}"
        ) from error


def _fit(small: tuple[int, float], large: tuple[int, float]) -> tuple[float, float]:
    """Slope and intercept (both >= 0) of the line through two (size, seconds) points."""
    (n1, t1), (n2, t2) = small, large
    slope = max((t2 - t1) / (n2 - n1), 0.0)
    if slope == 0.0:  # timer resolution or noise: all of it per item
        slope = t2 / n2
    return slope, max(t1 - n1 * slope, 0.0)


def _timed(fn: Any, repeats: int) -> float:
    best = math.inf
    for _ in range(repeats):
        started = time.process_time()
        fn()
        best = min(best, time.process_time() - started)
    return best


def _measure(
    workload: Workload, overrides: Mapping[str, Any], budget_s: float, seed: int
) -> tuple[ComputeCostModel, dict[str, Any]]:
    import torch

    from fleetgym.agents.learners.ppo import PPOLearner
    from fleetgym.agents.rollout import RolloutWorker

    with _step(workload, "building the env and the policy (RolloutWorker)"):
        worker = RolloutWorker(workload, actor_id=0, seed=seed)
    try:
        weights = worker.policy.get_weights()
        with _step(workload, "stepping the env (a rollout)"):
            # Warm-up (first-call costs), then a probe that sizes the measurement.
            worker.rollout(weights, 16, 0)
            probe_steps = 64
            probe = _timed(lambda: worker.rollout(weights, probe_steps, 0), 1)
            per_step = max(probe / probe_steps, 1e-7)
            small = 32
            large = int(min(max(budget_s / 3.0 / per_step / 3.0, 4 * small), 4096))
            t_small = _timed(lambda: worker.rollout(weights, small, 0), 3)
            t_large = _timed(lambda: worker.rollout(weights, large, 0), 3)
        step_s, actor_overhead_s = _fit((small, t_small), (large, t_large))
        # Rollouts as long as the workload's, shortened where 8 of them would not fit the
        # budget (a slow env or a tiny budget).
        samples = int(min(workload.rollout_steps, max(16, budget_s / per_step / 8.0)))
        with _step(workload, "collecting the learner's samples (rollouts)"):
            trajectories = [worker.rollout(weights, samples, 0) for _ in range(8)]
        with _step(workload, "building the learner (PPOLearner)"):
            learner = PPOLearner(workload, seed=seed, **dict(overrides))
        with _step(workload, "updating the learner (PPOLearner.update)"):
            learner.update(trajectories[:1])  # warm-up
            few, many = trajectories[:2], trajectories
            u_small = _timed(lambda: learner.update(few), 2)
            u_large = _timed(lambda: learner.update(many), 2)
        sample_s, learner_overhead_s = _fit((2 * samples, u_small), (8 * samples, u_large))
    finally:
        with contextlib.suppress(Exception):
            worker.close()
    # A heterogeneous fleet's sleeping delay costs wall time, not CPU: add its mean.
    delay = workload.step_delay_s * math.exp(workload.step_delay_sigma**2 / 2.0)
    model = ComputeCostModel(
        actor_step_s=step_s + delay,
        actor_overhead_s=actor_overhead_s,
        learner_sample_s=sample_s,
        learner_overhead_s=learner_overhead_s,
        actor_jitter_cv=JITTER_CV,
    )
    details = {
        "actor": {"steps": [small, large], "cpu_s": [t_small, t_large]},
        "learner": {"samples": [2 * samples, 8 * samples], "cpu_s": [u_small, u_large]},
        "torch_threads": torch.get_num_threads(),
    }
    return model, details


#: Largest cache file read (a model and a few measured points, not a document).
MAX_CACHE_FILE_BYTES = 1 << 20


def _read(path: Path, key: Mapping[str, Any]) -> tuple[ComputeCostModel, dict[str, Any]] | None:
    """The cached model at ``path``; None (measure again) if there is none or it is unusable.

    A file that is not this workload's calibration -- unreadable, larger than
    :data:`MAX_CACHE_FILE_BYTES`, not JSON, of another format, another key (a foreign
    file), or holding an invalid model -- is logged with its path and measured again (the
    measurement then replaces it).
    """
    found = _parse(path, key)
    if isinstance(found, str):
        logger.warning("calibration cache file %s %s: measuring again", path, found)
        return None
    return found


def _parse(
    path: Path, key: Mapping[str, Any]
) -> tuple[ComputeCostModel, dict[str, Any]] | str | None:
    """The model at ``path``, None if there is no file, or why the file is unusable."""
    try:
        with path.open("rb") as handle:
            raw = handle.read(MAX_CACHE_FILE_BYTES + 1)
    except FileNotFoundError:
        return None
    except OSError as error:
        return f"cannot be read ({error.strerror or error})"
    if len(raw) > MAX_CACHE_FILE_BYTES:
        return f"is larger than {MAX_CACHE_FILE_BYTES} bytes"
    try:
        data = json.loads(raw.decode("utf-8"))
    except (ValueError, RecursionError) as error:  # UnicodeDecodeError is a ValueError
        return f"is not JSON ({quote(str(error))})"
    if not isinstance(data, dict) or not isinstance(data.get("model"), dict):
        return "is not a calibration cache file (no 'model' object)"
    if data.get("key") != json.loads(json.dumps(key, sort_keys=True, default=str)):
        return "holds the calibration of another workload or version (its key)"
    try:
        model = ComputeCostModel(
            **{f.name: data["model"][f.name] for f in fields(ComputeCostModel)}
        )
    except KeyError as error:
        return f"lacks the model field {error}"
    except (TypeError, ValueError) as error:
        return f"holds an invalid model ({error})"
    details = data.get("details")
    return model, dict(details) if isinstance(details, dict) else {}


def check_learner_overrides(workload: Workload, overrides: Any) -> dict[str, Any]:
    """``learner_overrides`` as a dict of PPO hyperparameters with valid values.

    Raises:
        TypeError: Not a mapping, or a key that is not a PPO hyperparameter.
        ValueError: A value out of its range (named).
    """
    from fleetgym.agents.learners.ppo import HYPERPARAMETERS

    if overrides is None:
        return {}
    if not isinstance(overrides, Mapping):
        raise TypeError(
            f"learner_overrides: expected a mapping or None, actual {type(overrides).__name__}"
        )
    unknown = sorted(quote(k) for k in overrides if k not in HYPERPARAMETERS)
    if unknown:
        raise TypeError(
            f"learner_overrides: expected hyperparameters among {list(HYPERPARAMETERS)}, "
            f"actual {', '.join(unknown)}"
        )
    checked = dict(overrides)
    workload.with_overrides(**checked)  # the values, validated as the learner does
    return checked


def _check_writable(given: Any, folder: Path) -> None:
    """Create the cache folder ``folder`` (in ``given``) and check it can be written.

    Raises:
        ValueError: If it cannot be created or is not a writable folder.
    """
    try:
        folder.mkdir(parents=True, exist_ok=True)
        why = "" if os.access(folder, os.W_OK | os.X_OK) else "it is not writable"
    except OSError as error:
        why = f"it cannot be created: {error.strerror or error}"
    if why:
        raise ValueError(
            f"folder: expected a folder the calibration can be cached in, actual "
            f"{quote(os.fspath(given))} ({why}: {quote(str(folder))})"
        )


def calibrate(
    workload: Any,
    *,
    learner_overrides: Mapping[str, Any] | None = None,
    force: bool = False,
    budget_s: float = 3.0,
    seed: int = 0,
    folder: Path | None = None,
) -> CalibrationResult:
    """The compute model of ``workload``: from the cache, or measured now and cached.

    Args:
        workload: anything :func:`~fleetgym.agents.workloads.get_workload` takes.
        learner_overrides: PPO hyperparameters replacing the workload's (as the
            scheduling env's preset passes them).
        force: measure again even if a cached result exists.
        budget_s: about how many CPU seconds the rollouts are timed for.
        seed: seed of the actor and the learner.
        folder: the cache folder (default :func:`cache_dir`).

    Example:
        >>> result = calibrate("CartPole-v1", budget_s=0.2)  # doctest: +SKIP
        >>> result.model.actor_step_s  # doctest: +SKIP
        0.00018

    Raises:
        CalibrationError: the env or the learner raised; the message names the step.
        fleetgym.errors.UnknownWorkloadError: an unknown workload.
        TypeError: a value of the wrong type, a learner override that is not a PPO
            hyperparameter.
        ValueError: a value out of range (an override's value included), or a ``folder``
            whose cache folder cannot be created or written, checked before anything is
            measured.

    A cache file that cannot be used is measured again (see the module docstring). A
    ``folder`` given here that cannot be written is an error; where the default folder
    (or a file in either) cannot be written, the result has ``stored=False``: nothing
    was cached, and ``path`` is only where the file would have gone.
    """
    w = get_workload(workload)
    overrides = check_learner_overrides(w, learner_overrides)
    force = check_bool("force", force)
    budget_s = check_float("budget_s", budget_s, low=0.01, high=3600.0)
    seed = check_int("seed", seed, low=0)
    if folder is not None and not isinstance(folder, (str, os.PathLike)):
        raise TypeError(f"folder: expected a folder path or None, actual {quote(folder)}")
    path = cache_path(w, overrides, None if folder is None else Path(folder))
    if not force:
        found = _read(path, _key(w, overrides))
        if found is not None:
            return CalibrationResult(w.name, found[0], path, True, found[1])
    if folder is not None:
        _check_writable(folder, path.parent)  # a folder the caller named: refused before measuring
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        model, details = _measure(w, overrides, budget_s, seed)
    finally:
        torch.set_num_threads(threads)
    record = {
        "key": _key(w, overrides),
        "model": asdict(model),
        "details": details,
        "measured_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
    }
    stored = True
    partial = path.with_suffix(f".{os.getpid()}.tmp")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        partial.write_text(json.dumps(record, indent=2, sort_keys=True, default=str) + "\n")
        partial.replace(path)  # atomic: a concurrent reader never sees half a file
        logger.info("calibrated %s; cached in %s", w.name, path)
    except OSError as error:
        stored = False
        with contextlib.suppress(OSError):
            partial.unlink()
        logger.warning("could not cache the calibration of %s in %s: %s", w.name, path, error)
    return CalibrationResult(w.name, model, path, False, details, stored)
