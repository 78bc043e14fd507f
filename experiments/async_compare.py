"""Asynchronous against synchronous training: env steps/s, wall time to target, learner utilisation.

Three trainers with the same actors (``--actors`` slots of ``rollout_steps`` env steps,
one update per ``--actors`` trajectories, the workload's PPO hyperparameters) and the same
cores:

* ``sync-fleet`` -- the synchronous path: :func:`fleetgym.agents.learners.training.train` with a
  process fleet (one worker process per actor) and
  :class:`~fleetgym.agents.learners.ppo.PPOLearner`;
* ``sync-threads`` -- :class:`~fleetgym.agents.learners.asynchronous.trainer.AsyncPPO` with
  ``max_policy_lag=0`` (actor threads wait for every update: synchronous PPO on the
  asynchronous trainer's own machinery);
* ``async`` -- :class:`AsyncPPO` with ``--loss`` (PPO-clip by default), value recomputation,
  global normalisation and ``max_policy_lag=--lag``.

``--actor-modes thread process`` runs the ``AsyncPPO`` trainers once with actor threads
and once with a worker process per actor slot (``actors="process"``; the table labels
those rows ``(process actors)``). ``--inference server`` makes the ``AsyncPPO`` actors act
through the trainer's inference server (in-process for threads, a loopback socket with
observations in shared memory for processes; rows labelled ``served``).

Workloads: ``uniform`` (the plain env) and ``heterogeneous`` (each actor's env steps cost
an extra log-normal delay, ``--delay-ms`` median and ``--delay-sigma`` spread: a long tail
of slow actors). Each run stops at the workload's target return or after ``--steps`` env
steps. Prints a Markdown table; ``--out`` also writes it with a JSON of the runs.

Example::

    python -m fleetgym.experiments.async_compare --steps 20000 --seeds 1 --out runs/compare
"""

from __future__ import annotations

import argparse
import itertools
import json
import statistics
import time
from pathlib import Path
from typing import Any

from fleetgym.experiments.tables import markdown_table

MODES = ("sync-fleet", "sync-threads", "async")
ACTOR_MODES = ("thread", "process")
WORKLOADS = ("uniform", "heterogeneous")


def _workload(name: str, kind: str, delay_ms: float, sigma: float) -> Any:
    from fleetgym.agents.workloads import get_workload

    base = get_workload(name)
    if kind == "uniform":
        return base
    return base.with_overrides(step_delay_s=delay_ms / 1000.0, step_delay_sigma=sigma)


def run_mode(
    mode: str,
    workload: Any,
    actors: int,
    seed: int,
    steps: int,
    lag: int,
    loss: str = "ppo",
    save_dir: Path | None = None,
    eval_episodes: int = 10,
    actor_mode: str = "thread",
    inference: str = "local",
    proximal_clip: bool = False,
) -> dict[str, Any]:
    """One training run; returns steps, wall time, steps/s, utilisation and the return.

    ``proximal_clip`` (``loss="ppo"``, ``async`` mode only) clips around the learner's
    policy at each update's start (decoupled PPO, see ``LossConfig``).

    ``actor_mode`` places an :class:`AsyncPPO` run's actors (``"thread"`` or ``"process"``);
    ``sync-fleet`` always runs a process fleet.

    With ``save_dir`` an :class:`AsyncPPO` run is also saved, reloaded with
    :meth:`AsyncPPO.load`, and both policies are scored over ``eval_episodes``
    deterministic episodes on the same seeds (``eval_return``, ``reloaded_return``).
    """
    from fleetgym.agents.learners.asynchronous.trainer import AsyncPPO

    target = workload.target_return
    started = time.perf_counter()
    extra: dict[str, Any] = {}
    if mode == "sync-fleet":
        from fleetgym.agents.fleet import make_fleet
        from fleetgym.agents.learners.ppo import PPOLearner
        from fleetgym.agents.learners.training import train

        learner = PPOLearner(workload, seed=seed)
        rounds = -(-steps // (actors * workload.rollout_steps))
        with make_fleet(workload, backend="process", max_actors=actors, seed=seed) as fleet:
            started = time.perf_counter()  # the worker processes are up
            history = train(workload, fleet, learner, actors, rounds, target=target)
        wall = time.perf_counter() - started
        busy = sum(r.stats.update_time_s for r in history.rounds)
        done, final = history.total_steps, history.final_return
        reached = history.reached_target
    else:
        synchronous = mode == "sync-threads"
        model = AsyncPPO(
            workload,
            loss="ppo" if synchronous else loss,
            max_policy_lag=0 if synchronous else lag,
            n_actors=actors,
            recompute_values=not synchronous,
            global_advantage_norm=not synchronous,
            proximal_clip=proximal_clip and not synchronous,
            actors=actor_mode,
            inference=inference,
            seed=seed,
        )
        model.prewarm()  # the actors (worker processes) are up, as for sync-fleet
        model.learn(steps, target=target)
        model.close()
        last = model.history[-1]
        wall, busy = last.wall_s, last.learner_busy_s
        done, final = model.num_timesteps, model.learner.mean_return
        reached = final >= target
        extra["loss"] = model.config.label
        if save_dir is not None:
            name = mode if actor_mode == "thread" else f"{mode}-{actor_mode}"
            name += "-served" if inference == "server" else ""
            extra.update(_save_reload_score(model, save_dir / f"{name}-{seed}.pt", eval_episodes))
    return {
        "mode": mode,
        "actor_mode": "process" if mode == "sync-fleet" else actor_mode,
        "inference": "local" if mode == "sync-fleet" else inference,
        "seed": seed,
        "steps": done,
        "wall_s": wall,
        "steps_per_s": done / wall,
        "learner_utilisation": busy / wall,
        "final_return": final,
        "reached_target": bool(reached),
        **extra,
    }


def _save_reload_score(model: Any, path: Path, episodes: int) -> dict[str, float]:
    """Save ``model``, load it back, and score both over the same deterministic episodes."""
    from fleetgym.agents.learners.asynchronous.trainer import AsyncPPO
    from fleetgym.agents.learners.training import evaluate_policy

    path.parent.mkdir(parents=True, exist_ok=True)
    model.save(path)
    reloaded = AsyncPPO.load(path)
    seed = 10_000 + model.seed
    scores = {
        name: statistics.fmean(evaluate_policy(m.learner.policy, m.workload, episodes, seed=seed))
        for name, m in (("eval_return", model), ("reloaded_return", reloaded))
    }
    reloaded.close()
    return scores


def _fmt(values: list[float], spec: str) -> str:
    mean = statistics.fmean(values)
    if len(values) < 2:
        return format(mean, spec)
    return f"{format(mean, spec)} ± {format(statistics.pstdev(values), spec)}"


def _label(mode: str, actor_mode: str, inference: str) -> str:
    """A table row's trainer: the mode, then where its actors run and act, if not the default."""
    notes = [] if mode == "sync-fleet" else (["process actors"] if actor_mode != "thread" else [])
    notes += ["served"] if mode != "sync-fleet" and inference == "server" else []
    return f"{mode} ({', '.join(notes)})" if notes else mode


def table(results: dict[str, list[dict[str, Any]]]) -> list[str]:
    """Markdown lines: per workload and mode, the means (± std over seeds)."""
    rows = []
    for kind, runs in results.items():
        for mode, actor_mode, inference in itertools.product(
            MODES, ACTOR_MODES, ("local", "server")
        ):
            mine = [
                r
                for r in runs
                if (r["mode"], r.get("actor_mode", "thread"), r.get("inference", "local"))
                == (mode, actor_mode, inference)
            ]
            if not mine:
                continue
            reached = [r["wall_s"] for r in mine if r["reached_target"]]
            rows.append(
                [
                    kind,
                    _label(mode, actor_mode, inference),
                    _fmt([r["steps_per_s"] for r in mine], ".0f"),
                    _fmt([r["learner_utilisation"] for r in mine], ".2f"),
                    _fmt([r["final_return"] for r in mine], ".0f"),
                    f"{len(reached)}/{len(mine)}"
                    + (f" ({_fmt(reached, '.0f')} s)" if reached else ""),
                ]
            )
    header = ["workload", "trainer", "env steps/s", "learner utilisation", "final return"]
    return markdown_table([*header, "reached target (wall)"], rows)


def main(argv: list[str] | None = None) -> int:
    """Run the comparison and print (and optionally write) the table."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workload", default="CartPole-v1")
    parser.add_argument("--kinds", nargs="+", choices=WORKLOADS, default=list(WORKLOADS))
    parser.add_argument("--modes", nargs="+", choices=MODES, default=list(MODES))
    parser.add_argument("--actors", type=int, default=8)
    parser.add_argument("--steps", type=int, default=20_000)
    parser.add_argument("--seeds", type=int, default=1)
    parser.add_argument(
        "--first-seed", type=int, default=0, help="run seeds first-seed .. first-seed + seeds - 1"
    )
    parser.add_argument("--lag", type=int, default=4)
    parser.add_argument("--loss", choices=("gipo", "ppo", "vtrace"), default="ppo")
    parser.add_argument(
        "--proximal-clip",
        action="store_true",
        help="async with --loss ppo: clip around the learner's policy at the update's start, "
        "advantages weighted by its ratio to the behaviour policy (decoupled PPO)",
    )
    parser.add_argument("--delay-ms", type=float, default=1.0)
    parser.add_argument("--delay-sigma", type=float, default=1.0)
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument(
        "--save-dir",
        type=Path,
        default=None,
        help="save each AsyncPPO run here, reload it and score both (deterministic episodes)",
    )
    parser.add_argument("--eval-episodes", type=int, default=10)
    parser.add_argument(
        "--actor-modes",
        nargs="+",
        choices=ACTOR_MODES,
        default=["thread"],
        help="where AsyncPPO's actors run: threads, a worker process each, or both "
        "(default thread)",
    )
    parser.add_argument(
        "--inference",
        choices=("local", "server"),
        default="local",
        help="AsyncPPO's actors act with their own policy copy (local) or through the "
        "trainer's inference server (default local)",
    )
    args = parser.parse_args(argv)
    if args.proximal_clip and args.loss != "ppo":
        parser.error(f"--proximal-clip: expected --loss ppo, actual {args.loss}")

    import torch

    torch.set_num_threads(1)
    results: dict[str, list[dict[str, Any]]] = {}
    for kind in args.kinds:
        workload = _workload(args.workload, kind, args.delay_ms, args.delay_sigma)
        for seed in range(args.first_seed, args.first_seed + args.seeds):
            for mode, actor_mode in [(m, a) for m in args.modes for a in args.actor_modes]:
                if mode == "sync-fleet" and actor_mode != args.actor_modes[0]:
                    continue  # a process fleet either way: run it once
                run = run_mode(
                    mode,
                    workload,
                    args.actors,
                    seed,
                    args.steps,
                    args.lag,
                    args.loss,
                    None if args.save_dir is None else args.save_dir / kind,
                    args.eval_episodes,
                    actor_mode,
                    args.inference,
                    args.proximal_clip,
                )
                results.setdefault(kind, []).append(run)
                print(json.dumps({"workload": kind, **run}), flush=True)
    lines = table(results)
    print("\n".join(lines))
    if args.out is not None:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "async_compare.md").write_text("\n".join(lines) + "\n")
        (args.out / "async_compare.json").write_text(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
