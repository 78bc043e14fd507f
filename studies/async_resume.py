"""Does a killed and resumed asynchronous run still reach its target within the budget?

For each seed: one uninterrupted ``fleetgym train --mode async`` run, and one SIGKILLed at
a random moment then resumed with ``--resume`` to the same budget. The moment is drawn per
seed from the seed: once the run has checkpointed update ``k`` (``k`` uniform over 10-80 %
of the uninterrupted run's updates), after a further delay uniform over 0-2 s, so the
kill lands between two checkpoints and the updates done since the last one are lost. Writes one CSV row per run: the seed, the arm, the exit status (0: the target
was reached), the final mean return, the env steps and updates, when it was killed and
the checkpoint it resumed from.

Example::

    python studies/async_resume.py --seeds 5 --out docs/results/data/async_resume.csv
"""

from __future__ import annotations

import argparse
import csv
import os
import random
import re
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

FINAL = re.compile(
    r"target [\d.e+inf]+: mean return ([-\d.]+) after (\d+) env steps, (\d+) updates"
)


def _train(args: argparse.Namespace, seed: int, out: Path, resume: bool) -> list[str]:
    command = [
        sys.executable, "-m", "fleetgym", "train", "--mode", "async", "--workload",
        args.workload, "--actors", str(args.actors), "--seed", str(seed), "--max-steps",
        str(args.budget), "--out", str(out), "--checkpoint-every", str(args.checkpoint_every),
        "--no-progress",
    ]  # fmt: skip
    return command + (["--resume", str(out / "checkpoints")] if resume else [])


def _finish(proc: subprocess.Popen[str], began: float) -> dict[str, object]:
    text, _ = proc.communicate()
    match = FINAL.search(text or "")
    return {
        "exit": proc.returncode,
        "reached": proc.returncode == 0,
        "final_return": float(match.group(1)) if match else "",
        "env_steps": int(match.group(2)) if match else "",
        "updates": int(match.group(3)) if match else "",
        "wall_s": round(time.monotonic() - began, 2),
    }


def run_seed(args: argparse.Namespace, seed: int, work: Path) -> list[dict[str, object]]:
    env = dict(os.environ, OMP_NUM_THREADS="1")
    began = time.monotonic()
    plain = subprocess.Popen(_train(args, seed, work / f"plain-{seed}", False), env=env,
                             stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)  # fmt: skip
    row_plain = {"seed": seed, "arm": "uninterrupted", **_finish(plain, began)}
    rng = random.Random(seed)
    updates = row_plain["updates"]
    at_update = max(1, round(rng.uniform(0.1, 0.8) * (updates if isinstance(updates, int) else 1)))
    delay = rng.uniform(0.0, 2.0)
    out = work / f"killed-{seed}"
    began = time.monotonic()
    first = subprocess.Popen(_train(args, seed, out, False), env=env, stdout=subprocess.DEVNULL,
                             stderr=subprocess.DEVNULL, start_new_session=True)  # fmt: skip
    while first.poll() is None:
        done = [int(p.stem.split("-")[1]) for p in (out / "checkpoints").glob("ckpt-*.pt")]
        if done and max(done) >= at_update:
            time.sleep(delay)
            break
        time.sleep(0.02)
    killed_at = round(time.monotonic() - began, 2)
    finished_first = first.poll() is not None
    if not finished_first:
        os.killpg(first.pid, signal.SIGKILL)
    first.wait()
    names = sorted((out / "checkpoints").glob("ckpt-*.pt"))
    checkpoint = int(names[-1].stem.split("-")[1]) if names else ""
    again = time.monotonic()
    resumed = subprocess.Popen(_train(args, seed, out, True), env=env, stdout=subprocess.PIPE,
                               stderr=subprocess.STDOUT, text=True)  # fmt: skip
    row = {"seed": seed, "arm": "killed and resumed", **_finish(resumed, again)}
    row.update(kill_after_update=at_update, kill_delay_s=round(delay, 2), killed_at_s=killed_at,
               resumed_from_update=checkpoint, finished_before_the_kill=finished_first)  # fmt: skip
    return [row_plain, row]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", type=int, default=5)
    parser.add_argument("--workload", default="CartPole-v1")
    parser.add_argument("--actors", type=int, default=8)
    parser.add_argument("--budget", type=int, default=200_000, help="env steps per run")
    parser.add_argument("--checkpoint-every", type=int, default=5, help="updates")
    parser.add_argument("--out", type=Path, required=True, help="the CSV written")
    args = parser.parse_args()
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for seed in range(args.seeds):
            rows += run_seed(args, seed, Path(tmp))
            print(rows[-2], rows[-1], sep="\n", flush=True)
    fields = list(dict.fromkeys(k for row in rows for k in row))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    with args.out.open("w", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=fields)
        writer.writeheader()
        writer.writerows(rows)
    for arm in ("uninterrupted", "killed and resumed"):
        reached = sum(bool(r["reached"]) for r in rows if r["arm"] == arm)
        print(f"{arm}: {reached} of {args.seeds} seeds reached the target")


if __name__ == "__main__":
    main()
