"""``fleetgym soak``: the 3-minute soak end to end, its verdict's arithmetic, its bad input."""

from __future__ import annotations

import csv
import functools
import json
import math
import os
import random
import signal
import subprocess
import sys
import types
from pathlib import Path

import pytest

from fleetgym.cli import main
from fleetgym.experiments.soak.supervisor import FAULT_KINDS, LogWatcher
from fleetgym.experiments.soak.verdict import (
    FD_BUDGET_PER_MIN,
    RSS_BUDGET_MIB_PER_MIN,
    check_accounting,
    fit_slope,
    leak_report,
)

linux = pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="the soak reads /proc")


@linux
@pytest.mark.timeout(600)
def test_three_minute_soak_survives_every_fault_and_accounts_every_step(tmp_path):
    out = tmp_path / "soak"
    command = [
        sys.executable, "-m", "fleetgym", "soak", "--minutes", "3", "--fault-every", "15",
        "--learner-kill-every", "75", "--sample-every", "5", "--actor-timeout", "8",
        "--checkpoint-every", "5", "--out", str(out), "--no-progress",
    ]  # fmt: skip
    # Started as a shell starts a background job (SIGINT ignored, inherited by children):
    # the soak must still stop its learner and Mode 3 server with SIGINT at the end.
    ignore = functools.partial(signal.signal, signal.SIGINT, signal.SIG_IGN)
    done = subprocess.run(command, capture_output=True, text=True, timeout=570, preexec_fn=ignore)
    summary = json.loads((out / "summary.json").read_text())
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert summary["passed"] and summary["problems"] == []
    for kind in (*FAULT_KINDS, "learner-kill"):
        entry = summary["faults"][kind]
        if kind == "server-connections" and entry["not_injected"]:
            continue  # ss -K needs CAP_NET_ADMIN: reported as not injected, not as survived
        assert entry["injected"] >= 1 and entry["survived"] == entry["injected"], kind
    assert len(summary["restarts"]) == 2
    assert all(r["resume_s"] is not None and r["left_behind"] == 0 for r in summary["restarts"])
    accounting = summary["accounting"]
    assert accounting["exact"] and accounting["env_steps"] == accounting["expected"] > 0
    assert summary["left_behind"] == 0 and summary["learner_exit"] == 130
    assert summary["shm_segments"]["left_behind"] == []
    with (out / "samples.csv").open() as fh:
        roles = {row["role"] for row in csv.DictReader(fh)}
    assert {"learner", "actor-worker", "mode3-server", "soak"} <= roles
    assert (out / "soak.png").stat().st_size > 10_000


def test_fit_slope_is_exact_on_a_line_and_needs_four_points():
    t = [0.0, 60.0, 120.0, 180.0, 240.0]
    slope, se = fit_slope(t, [10.0 + 2.5 * i for i in range(5)])
    assert slope == pytest.approx(2.5) and se == pytest.approx(0.0, abs=1e-12)
    assert fit_slope(t[:3], [1.0, 2.0, 3.0]) is None
    assert fit_slope([5.0] * 4, [1.0, 2.0, 3.0, 4.0]) is None


def _samples(pid, slope_mib_per_min, noise_mib, minutes=30, fds=10, seed=0):
    rng = random.Random(seed)
    return [
        types.SimpleNamespace(
            t_s=60.0 * i,
            pid=pid,
            role="learner",
            age_s=60.0 * i,
            fds=fds,
            rss_mib=300.0 + slope_mib_per_min * i + rng.gauss(0.0, noise_mib),
        )  # fmt: skip
        for i in range(minutes)
    ]


def test_leak_report_flags_growth_above_the_budget_and_not_a_flat_noisy_process():
    # 1 MiB/min is 5.6x the budget; with 2 MiB of noise over 25 fitted minutes the slope's
    # standard error is 2 / sqrt(sum (t - mean)^2) = 2 / sqrt(25 * (25^2 - 1) / 12) = 0.028,
    # so 1 - 3 * 0.03 clears the 0.18 budget; a flat series has |slope| ~ 0.03 < budget.
    leaking = leak_report(_samples(1, 1.0, 2.0), warmup_s=300)
    flat = leak_report(_samples(2, 0.0, 2.0, seed=1), warmup_s=300)
    assert leaking[0]["leak"] and leaking[0]["samples"] == 25
    assert not flat[0]["leak"]
    assert abs(flat[0]["rss_slope_mib_per_min"]) < RSS_BUDGET_MIB_PER_MIN
    fd_leak = [
        types.SimpleNamespace(
            t_s=60.0 * i, pid=3, role="actor-worker", age_s=60.0 * i, rss_mib=100.0, fds=10 + i // 5
        )  # fmt: skip
        for i in range(30)
    ]
    row = leak_report(fd_leak, warmup_s=0)[0]
    assert row["fd_slope_per_min"] > FD_BUDGET_PER_MIN and row["leak"]


def _log(path, rows):
    with path.open("w", newline="") as fh:
        writer = csv.writer(fh)
        writer.writerow(["update", "total_steps", "wall_s", "learner_busy_s", "queued",
                         "actor_failures", "lags"])  # fmt: skip
        for update, steps, failures in rows:
            writer.writerow([update, steps, 0.1, 0.1, 0, failures, "[0 0\n 0]"])


def test_accounting_finds_a_lost_update_and_a_step_counted_twice(tmp_path):
    log = tmp_path / "log.csv"
    _log(log, [(0, 256, 0), (1, 512, 0), (2, 768, 1)])
    assert check_accounting(log, 256) == {
        "exact": True, "updates": 3, "env_steps": 768, "expected": 768, "problems": []
    }  # fmt: skip
    _log(log, [(0, 256, 0), (2, 512, 0)])
    assert not check_accounting(log, 256)["exact"]
    _log(log, [(0, 256, 0), (1, 768, 0)])
    report = check_accounting(log, 256)
    assert not report["exact"] and "expected 512" in report["problems"][0]
    assert not check_accounting(tmp_path / "missing.csv", 256)["exact"]


def test_log_watcher_counts_each_update_once_across_a_resume(tmp_path):
    log = tmp_path / "log.csv"
    watcher = LogWatcher(log)
    _log(log, [(0, 256, 0), (1, 512, 0), (2, 768, 1)])
    watcher.poll()
    assert watcher.snapshot() == (3, 1) and watcher.last_update == 2
    # A resumed learner rewrites the file (a new inode) from its checkpoint's 2 updates.
    watcher.resumed(2)
    replaced = tmp_path / "new.csv"
    _log(replaced, [(0, 256, 0), (1, 512, 0), (2, 768, 1), (3, 1024, 1)])
    os.replace(replaced, log)
    watcher.poll()
    assert watcher.snapshot() == (5, 1) and watcher.total_steps == 1024


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--faults", "actor-kill,nope"], "--faults"),
        (["--minutes", "0"], "--minutes"),
        (["--minutes", "1", "--fault-every", "90"], "--fault-every"),
        (["--actor-timeout", "nan"], "--actor-timeout"),
    ],
)
def test_bad_input_exits_2_before_any_process_starts(tmp_path, capsys, argv, message):
    with pytest.raises(SystemExit) as exit_info:
        code = main(["soak", "--out", str(tmp_path / "s"), *argv])
        raise SystemExit(code)
    assert exit_info.value.code == 2
    assert message in capsys.readouterr().err
    assert not (tmp_path / "s" / "run").exists()


def test_a_folder_holding_files_is_refused(tmp_path, capsys):
    (tmp_path / "old.txt").write_text("x")
    assert main(["soak", "--out", str(tmp_path)]) == 2
    assert "expected an empty or new folder" in capsys.readouterr().err


def test_budgets_are_the_stated_ones():
    assert RSS_BUDGET_MIB_PER_MIN * 24 * 60 == pytest.approx(256.0)
    assert FD_BUDGET_PER_MIN * 60 == pytest.approx(1.0)
    assert math.isfinite(RSS_BUDGET_MIB_PER_MIN)
