"""``fleetgym soak``: train for a set time under injected faults and check what leaks.

The soak runs the asynchronous trainer as a user would (``fleetgym train --mode async
--backend process --inference server``, checkpoints on, the per-update log written as the
run goes) beside a Mode 3 server (``fleetgym serve-env``), and for ``--minutes``:

* every ``--fault-every`` seconds injects the next fault in turn: SIGKILL an actor's
  worker, SIGSTOP one for longer than ``--actor-timeout`` (then SIGCONT), reset the
  inference server's client connections (``ss -K``), send malformed frames to Mode 3's
  port and then run a real client session there;
* every ``--learner-kill-every`` seconds SIGKILLs the learner and relaunches it with
  ``--resume`` (the time to its first new update is the resume time);
* every ``--sample-every`` seconds samples every process of the soak (resident memory,
  open descriptors, threads, children) from ``/proc``.

It passes (exit 0, else 1) when every fault was survived (training went on, the fault's
own check passed), the env-step accounting of the final log is exact, no process's memory
or descriptors grow faster than their budget (:mod:`~fleetgym.experiments.soak.verdict`),
no process of a killed learner outlived it, nothing is left behind at the end and no
shared-memory segment leaked. It writes ``samples.csv``, ``faults.csv``, ``restarts.csv``,
``leaks.csv``, ``summary.json`` and ``soak.png`` into ``--out`` (the learner's run in
``run/``, each process's output in ``*.log``). Linux only (``/proc``); resetting
connections needs ``ss`` and CAP_NET_ADMIN (otherwise that fault is reported as not
injected).

Example::

    fleetgym soak --minutes 60 --out runs/soak
    fleetgym soak --minutes 3 --fault-every 15 --learner-kill-every 75 --sample-every 5
"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from fleetgym.experiments.argtypes import (
    UsageError,
    check_output_dir,
    output_folder,
    positive_float,
    positive_int,
)

__all__ = ["configure", "run"]


def _kinds(text: str) -> tuple[str, ...]:
    from fleetgym.experiments.soak.supervisor import FAULT_KINDS

    kinds = tuple(k for k in text.split(",") if k)
    unknown = [k for k in kinds if k not in FAULT_KINDS]
    if unknown:
        raise argparse.ArgumentTypeError(
            f"expected a comma-separated list of {', '.join(FAULT_KINDS)}, actual {text!r}"
        )
    return kinds


def configure(parser: argparse.ArgumentParser) -> None:
    """Add this subcommand's arguments (imports nothing heavy)."""
    parser.add_argument("--minutes", type=positive_float, default=60.0,
                        help="how long to train under faults (default 60)")  # fmt: skip
    parser.add_argument("--out", type=output_folder, default=Path("fleetgym-out/soak"),
                        help="output folder, empty or new (default fleetgym-out/soak)")  # fmt: skip
    parser.add_argument("--workload", default="CartPole-v1", help="the workload trained")
    parser.add_argument("--actors", type=positive_int, default=2, help="actor worker processes")
    parser.add_argument("--seed", type=int, default=0, help="the run's and the faults' seed")
    parser.add_argument("--fault-every", type=positive_float, default=120.0, metavar="S",
                        help="seconds between faults, each kind in turn (default 120)")  # fmt: skip
    parser.add_argument("--learner-kill-every", type=positive_float, default=900.0, metavar="S",
                        help="seconds between kills of the learner (default 900)")  # fmt: skip
    parser.add_argument("--sample-every", type=positive_float, default=60.0, metavar="S",
                        help="seconds between resource samples (default 60)")  # fmt: skip
    parser.add_argument("--actor-timeout", type=positive_float, default=20.0, metavar="S",
                        help="the trainer's rollout timeout; a stopped worker is held "
                        "15 s longer (default 20)")  # fmt: skip
    parser.add_argument("--checkpoint-every", type=positive_int, default=20, metavar="N",
                        help="the learner's checkpoint period in updates (default 20)")  # fmt: skip
    parser.add_argument("--warmup", type=positive_float, default=None, metavar="S",
                        help="seconds of each process's life left out of the leak fits "
                        "(default: a tenth of the soak, between 60 and 300)")  # fmt: skip
    parser.add_argument("--faults", type=_kinds, default=None, metavar="KINDS",
                        help="the kinds injected in turn (default all: actor-kill, "
                        "actor-stop, server-connections, mode3-garbage)")  # fmt: skip
    parser.add_argument("--no-plot", action="store_true", help="write no soak.png")
    parser.add_argument("--no-progress", action="store_true",
                        help="no progress bar: a line per resource sample instead")  # fmt: skip


def _settings(args: argparse.Namespace) -> Any:
    import types

    from fleetgym.experiments.soak.supervisor import FAULT_KINDS

    duration = args.minutes * 60
    return types.SimpleNamespace(
        duration=duration,
        fault_every=args.fault_every,
        learner_kill_every=args.learner_kill_every if args.learner_kill_every < duration else None,
        actor_timeout=args.actor_timeout,
        recover_s=max(60.0, 3 * args.actor_timeout),
        kinds=FAULT_KINDS if args.faults is None else args.faults,
        seed=args.seed,
        warmup=args.warmup if args.warmup is not None else min(300.0, max(60.0, duration / 10)),
    )


def _start_mode3(out: Path, tree: Any) -> tuple[subprocess.Popen[bytes], int]:
    """The Mode 3 server, on a free loopback port."""
    port_file = out / "mode3.port"
    port_file.unlink(missing_ok=True)
    log = (out / "mode3.log").open("wb")
    proc = subprocess.Popen(
        [sys.executable, "-m", "fleetgym", "serve-env", "--env-id", "CartPole-v1",
         "--bind", "127.0.0.1:0", "--port-file", str(port_file)],
        stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
    )  # fmt: skip
    log.close()
    tree.name(proc.pid, "mode3-server")
    began = time.monotonic()
    while time.monotonic() - began < 120:
        text = port_file.read_text().strip() if port_file.exists() else ""
        if text.isdigit():
            return proc, int(text)
        if proc.poll() is not None:
            break
        time.sleep(0.2)
    proc.kill()
    raise RuntimeError(f"the Mode 3 server did not start (see {out / 'mode3.log'})")


def _write_csv(path: Path, rows: list[dict[str, Any]], fields: list[str]) -> None:
    import csv

    with path.open("w", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=fields)
        writer.writeheader()
        writer.writerows(rows)


def _steps_per_update(log: Path, actors: int) -> int:
    """``actors * steps_per_actor``, the rollout length read from the learner's first line."""
    match = re.search(rb"x (\d+) steps per rollout", log.read_bytes()) if log.exists() else None
    if match is None:
        raise RuntimeError(f"{log}: the learner did not start (no start-up line)")
    return actors * int(match.group(1))


def run(args: argparse.Namespace) -> int:
    """Run the soak; 0 when it passed, 1 when a check failed.

    Raises:
        UsageError: A bad argument or output folder, or not Linux.
    """
    from fleetgym.extras import require

    if not Path("/proc/self/status").exists():
        raise UsageError("fleetgym soak: expected Linux (/proc), actual none")
    require("torch", "fleetgym soak (the trainer)")
    if not args.no_plot:
        require("matplotlib", "fleetgym soak's plot (or --no-plot)")
    out = check_output_dir("--out", args.out)
    if any(out.iterdir()):
        raise UsageError(f"--out: expected an empty or new folder, actual {str(out)!r} holds files")
    settings = _settings(args)
    if settings.fault_every >= settings.duration:
        raise UsageError("--fault-every: expected less than the soak's length, actual more")
    return _soak(args, settings, out)


def _soak(args: argparse.Namespace, settings: Any, out: Path) -> int:
    from fleetgym.experiments.soak.procs import (
        ProcessTree,
        become_subreaper,
        descendants,
        mapped_shm,
        shm_entries,
        shm_names,
    )
    from fleetgym.experiments.soak.supervisor import FaultRunner, Learner, LogWatcher, as_rows
    from fleetgym.experiments.soak.verdict import check_accounting, leak_report

    started = time.monotonic()
    if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        # Started in the background by a shell (`cmd &`): SIGINT is ignored, and an ignored
        # signal stays ignored in every child, so Ctrl-C would stop neither the learner nor
        # the Mode 3 server. The soak stops them with SIGINT: restore it for all.
        signal.signal(signal.SIGINT, signal.default_int_handler)
    reaper = become_subreaper()
    tree = ProcessTree(os.getpid(), started)
    shm_start = shm_entries()
    shm_before = shm_names()
    run_dir = out / "run"
    mode3, port = _start_mode3(out, tree)
    command = [
        "train", "--mode", "async", "--backend", "process", "--inference", "server",
        "--workload", args.workload, "--actors", str(args.actors), "--seed", str(args.seed),
        "--max-steps", str(10**9), "--target", "inf", "--out", str(run_dir), "--log",
        "--checkpoint-every", str(args.checkpoint_every), "--keep", "3", "--no-progress",
        "--actor-timeout", f"{args.actor_timeout:g}",
    ]  # fmt: skip
    learner = Learner(command, run_dir, out, tree)
    learner.start()
    watcher = LogWatcher(run_dir / "log.csv")
    restarts: list[Any] = []
    runner = FaultRunner(learner, watcher, port, lambda: mode3.poll() is None, settings,
                         started, restarts.append)  # fmt: skip
    print(
        f"soak: {args.minutes:g} min of {args.workload}, {args.actors} actor processes through "
        f"an inference server, a fault every {settings.fault_every:g} s, the learner killed "
        + (f"every {settings.learner_kill_every:g} s" if settings.learner_kill_every else "never")
        + f", samples every {args.sample_every:g} s; "
        f"Mode 3 on 127.0.0.1:{port}; writing {out}",
        flush=True,
    )
    runner.start()
    from tqdm import tqdm

    bar = tqdm(total=round(settings.duration), unit="s", desc="soak", disable=args.no_progress,
               dynamic_ncols=True)  # fmt: skip
    samples: list[Any] = []
    unexpected: list[str] = []
    next_sample = 0.0
    try:
        while (now := time.monotonic() - started) < settings.duration:
            watcher.poll()
            if now >= next_sample:
                samples += tree.sample()
                next_sample += args.sample_every
                done = sum(f.survived is not None for f in runner.faults)
                if args.no_progress:
                    print(f"  {now / 60:5.1f} min: {watcher.events} updates, "
                          f"{watcher.total_steps} env steps, {done} faults", flush=True)  # fmt: skip
                else:
                    bar.set_postfix(updates=watcher.events, faults=done, restarts=len(restarts))
            bar.update(max(0, min(round(now), bar.total) - bar.n))
            if not runner.restarting.locked() and learner.proc is not None:
                if learner.proc.poll() is not None and runner.restarting.acquire(blocking=False):
                    try:  # died on its own (not one of the soak's kills): a failure, resumed
                        code = learner.proc.returncode
                        unexpected.append(f"learner exited with {code} at {now:.0f} s")
                        watcher.resumed(learner.checkpoint_updates() or 0)
                        learner.start(resume=learner.checkpoint_updates() is not None)
                    finally:
                        runner.restarting.release()
            if mode3.poll() is not None and not any("Mode 3" in u for u in unexpected):
                unexpected.append(f"the Mode 3 server exited with {mode3.returncode}")
            time.sleep(0.25)
    except KeyboardInterrupt:
        unexpected.append("interrupted")
        runner.halt.set()
    finally:
        bar.close()
        runner.closing.set()  # the fault under way is judged, none starts
        ending = time.monotonic()
        while runner.is_alive() and time.monotonic() - ending < settings.recover_s + 180:
            watcher.poll()
            runner.join(0.25)
        runner.halt.set()
        watcher.poll()
        samples += tree.sample()
        code = learner.stop()
        mode3.send_signal(signal.SIGINT)
        try:
            mode3.wait(30)
        except subprocess.TimeoutExpired:
            mode3.kill()
            unexpected.append("the Mode 3 server did not stop within 30 s of Ctrl-C")
        left: list[int] = []
        for _ in range(50):
            left = descendants(os.getpid())
            if not left:
                break
            time.sleep(0.2)
        for pid in left:
            os.kill(pid, signal.SIGKILL)
    shm_end = shm_entries()
    # A segment that appeared during the soak and that no live process maps any more was
    # left behind (by the soak's processes: nothing else should run beside a soak).
    orphan_shm = sorted(shm_names() - shm_before - mapped_shm())
    steps_per_update = _steps_per_update(out / "learner-1.log", args.actors)
    accounting = check_accounting(run_dir / "log.csv", steps_per_update)
    leaks = leak_report(samples, settings.warmup)
    faults = runner.faults
    _write_csv(out / "samples.csv", as_rows(samples), list(as_rows(samples)[0]))
    if faults:
        _write_csv(out / "faults.csv", as_rows(faults), list(as_rows(faults)[0]))
    if restarts:
        _write_csv(out / "restarts.csv", as_rows(restarts), list(as_rows(restarts)[0]))
    if leaks:
        _write_csv(out / "leaks.csv", leaks, list(leaks[0]))
    summary = _summary(args, settings, faults, restarts, accounting, leaks, unexpected,
                       left, shm_start, shm_end, orphan_shm, code, reaper)  # fmt: skip
    (out / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
    if not args.no_plot and samples:
        from fleetgym.experiments.soak.verdict import plot_soak

        plot_soak(out / "soak.png", samples, faults,
                  f"fleetgym soak: {args.minutes:g} min, {args.workload}")  # fmt: skip
    _print(summary, out)
    return 0 if summary["passed"] else 1


def _summary(args: Any, settings: Any, faults: list[Any], restarts: list[Any],
             accounting: dict[str, Any], leaks: list[dict[str, Any]], unexpected: list[str],
             left: list[int], shm_start: tuple[int, int], shm_end: tuple[int, int],
             orphan_shm: list[str], code: int | None, reaper: bool) -> dict[str, Any]:  # fmt: skip
    from fleetgym.experiments.soak.verdict import FD_BUDGET_PER_MIN, RSS_BUDGET_MIB_PER_MIN

    kinds: dict[str, dict[str, int]] = {}
    for f in faults:
        entry = kinds.setdefault(f.kind, {"injected": 0, "survived": 0, "not_injected": 0})
        if f.survived is None:
            entry["not_injected"] += 1
        else:
            entry["injected"] += 1
            entry["survived"] += bool(f.survived)
    failures = [f"{f.kind} at {f.t_s:.0f} s: {f.detail}" for f in faults if f.survived is False]
    leaking = [f"{r['role']} {r['pid']}" for r in leaks if r["leak"]]
    problems = failures + unexpected + accounting["problems"]
    if not accounting["exact"] and not accounting["problems"]:
        problems.append("env-step accounting: the log is empty")
    problems += [f"leak: {name}" for name in leaking]
    if left:
        problems.append(f"{len(left)} processes left behind at the end")
    if orphan_shm:
        problems.append(f"/dev/shm: {len(orphan_shm)} segments left behind ({orphan_shm[:5]})")
    if code not in (0, 1, 130):
        problems.append(f"the learner stopped with exit status {code} (expected 130 on Ctrl-C)")
    from fleetgym import __version__

    return {
        "passed": not problems,
        "problems": problems,
        "fleetgym": __version__,
        "commit": _commit(),
        "minutes": args.minutes,
        "workload": args.workload,
        "actors": args.actors,
        "seed": args.seed,
        "faults": kinds,
        "restarts": [
            {
                "t_s": r.t_s,
                "resume_s": r.resume_s,
                "redone_updates": r.redone_updates,
                "left_behind": r.left_behind,
            }
            for r in restarts
        ],  # fmt: skip
        "accounting": accounting,
        "budgets": {
            "rss_mib_per_min": RSS_BUDGET_MIB_PER_MIN,
            "fd_per_min": FD_BUDGET_PER_MIN,
            "sigmas": 3.0,
            "warmup_s": settings.warmup,
        },  # fmt: skip
        "largest_slopes": _largest(leaks),
        "processes_fitted": len(leaks),
        "shm_segments": {"start": shm_start[0], "end": shm_end[0], "left_behind": orphan_shm},
        "left_behind": len(left),
        "learner_exit": code,
        "subreaper": reaper,
    }


def _commit() -> str | None:
    """The commit of the package's checkout (None outside one)."""
    try:
        done = subprocess.run(
            ["git", "rev-parse", "HEAD"], cwd=Path(__file__).resolve().parent,
            capture_output=True, text=True, timeout=10,
        )  # fmt: skip
    except (OSError, subprocess.TimeoutExpired):
        return None
    return done.stdout.strip() or None if done.returncode == 0 else None


def _largest(leaks: list[dict[str, Any]]) -> dict[str, Any]:
    """The steepest RSS and fd slope of each role."""
    out: dict[str, Any] = {}
    for row in leaks:
        entry = out.setdefault(row["role"], {"rss_mib_per_min": None, "fd_per_min": None})
        for key, field in (("rss_mib_per_min", "rss_slope_mib_per_min"),
                           ("fd_per_min", "fd_slope_per_min")):  # fmt: skip
            if entry[key] is None or row[field] > entry[key]:
                entry[key] = row[field]
    return out


def _print(summary: dict[str, Any], out: Path) -> None:
    print(f"{'fault':<20} {'injected':>8} {'survived':>8} {'not injected':>12}")
    for kind, entry in summary["faults"].items():
        print(
            f"{kind:<20} {entry['injected']:>8} {entry['survived']:>8} {entry['not_injected']:>12}"
        )
    for r in summary["restarts"]:
        print(f"learner killed at {r['t_s']:.0f} s: resumed in {r['resume_s']} s, "
              f"{r['redone_updates']} updates done again, {r['left_behind']} processes left")  # fmt: skip
    acc = summary["accounting"]
    print(f"env steps: {acc['env_steps']} logged, {acc['expected']} expected "
          f"({acc['updates']} updates): {'exact' if acc['exact'] else 'NOT exact'}")  # fmt: skip
    for role, entry in summary["largest_slopes"].items():
        print(f"steepest {role}: RSS {entry['rss_mib_per_min']:+.4f} MiB/min, "
              f"fds {entry['fd_per_min']:+.4f}/min")  # fmt: skip
    shm = summary["shm_segments"]
    print(
        f"shared-memory segments: {shm['start']} at the start, {shm['end']} at the end, "
        f"{len(shm['left_behind'])} left behind; processes left behind: {summary['left_behind']}"
    )
    verdict = "PASSED" if summary["passed"] else "FAILED: " + "; ".join(summary["problems"])
    print(f"soak {verdict} (files in {out})")
