"""Bad-input audit of every ``fleetgym`` subcommand.

Every usage error goes to stderr as one line and exits with status 2, with no traceback,
before any work starts (output folders and files are checked first).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fleetgym.cli import COMMANDS, main

FAST = settings(max_examples=40, deadline=None, suppress_health_check=list(HealthCheck))

BAD_NUMBERS = ["-1", "0", "nan", "inf", "-inf", "abc", "", "1e400", "10" * 30, "1.5.2", "0x10"]
BAD_INTS = ["-1", "0", "abc", "1.5", "", "1e3", "nan", "99999999999999999999999"]

#: subcommand argv prefix -> {flag: bad values}; each value is refused before any work.
CASES: dict[tuple[str, ...], dict[str, list[str]]] = {
    ("schedule", "train"): {
        "--lr": BAD_NUMBERS,
        "--n-steps": BAD_INTS,
        "--batch-size": [*BAD_INTS, "100000"],
        "--n-epochs": BAD_INTS,
        "--n-envs": BAD_INTS,
        "--gamma": ["2", "-0.1", "0", "nan", "abc"],
        "--ent-coef": ["-1", "nan", "inf", "abc"],
        "--episodes": BAD_INTS,
        "--seed": ["-1", "abc", "1.5"],
        "--max-actors": [*BAD_INTS, "1000000000000"],
        "--workload": ["nope", "", "CartPole-v99"],
        "--resume": ["{missing}"],
        "--out": ["", "   ", "{file}", "{file}/sub"],
        "--env-kwarg": ['target_return="abc"', "target_return=[1]", "nokey", "=1", "beta=nan"],
        "--actions": ["nope"],
        "--checkpoint-every": ["-1", "abc"],
        "--eval-seeds": ["-1", "abc"],
    },
    ("schedule", "finetune", "--from", "{missing}"): {
        "--lr": BAD_NUMBERS,
        "--episodes": BAD_INTS,
        "--out": ["", "{file}"],
        "--workload": ["nope"],
        "--eval-seeds": BAD_INTS,
    },
    ("schedule", "evaluate", "--seeds", "1"): {
        "--seeds": BAD_INTS,
        "--first-seed": ["-1", "abc"],
        "--max-actors": [*BAD_INTS, "1000000000000"],
        "--scheduler": ["nope", "fixed:0", "fixed:abc", "learned:{missing}", ""],
        "--workload": ["nope"],
        "--env-kwarg": ['target_return="abc"', "target_return=[1]", "target_return={}"],
        "--out": ["", "{file}"],
        "--timing": ["nope"],
    },
    ("train",): {
        "--lr": ["inf", "-1", "nan", "abc", "0"],
        "--actors": [*BAD_INTS, "1000000000000"],
        "--rounds": BAD_INTS,
        "--steps-per-actor": [*BAD_INTS, "1000000000000"],
        "--workload": ["nope", ""],
        "--save": ["", "{file}/x.pt", "{dir}"],
        "--log": ["{file}/x.csv", "{dir}"],
        "--plot": ["{file}/x.png"],
        "--backend": ["nope"],
        "--seed": ["-1", "abc"],
        "--eval-episodes": ["-1", "abc"],
    },
    ("profiles",): {
        "--samples": ["0", "99", "1000000000000", "abc"],
        "--step-ms": BAD_NUMBERS,
        "--netem": ["nope"],
    },
    ("reproduce",): {"--only": ["nope", "", ",", "calf,nope"], "--out": ["", "{file}"]},
    ("calibrate",): {"--workload": ["nope", ""], "--seed": ["-1", "abc"]},
    ("lag-sweep",): {
        "--seeds": BAD_INTS,
        "--steps": BAD_INTS,
        "--jobs": BAD_INTS,
        "--env": ["nope"],
        "--out": ["", "{file}"],
    },
    ("calf",): {
        "--timesteps": BAD_INTS,
        "--step-ms": BAD_NUMBERS,
        "--algo": ["nope"],
        "--out": ["", "{file}"],
    },
    ("serve-env", "--env-id", "CartPole-v1"): {
        "--bind": ["nope", "127.0.0.1:99999", "127.0.0.1:abc", ""],
        "--step-ms": BAD_NUMBERS,
        "--max-sessions": BAD_INTS,
        "--profile": ["nope"],
        "--secret-file": ["{missing}"],
    },
}

FLAT = [
    (prefix, flag, value)
    for prefix, flags in CASES.items()
    for flag in flags
    for value in flags[flag]
]


def test_every_subcommand_is_audited() -> None:
    assert {prefix[0] for prefix in CASES} == set(COMMANDS)


def _argv(prefix: tuple[str, ...], flag: str, value: str, tmp: Path) -> list[str]:
    file = tmp / "a-file"
    file.write_text("not a folder\n")
    subs = {"{missing}": str(tmp / "missing.zip"), "{file}": str(file), "{dir}": str(tmp)}

    def fill(text: str) -> str:
        for key, path in subs.items():
            text = text.replace(key, path)
        return text

    argv = [fill(part) for part in prefix]
    if flag != "--out" and "--out" in CASES[prefix]:
        # Keeps a run that slips through out of the working directory.
        argv += [f"--out={tmp / 'out'}"]
    return [*argv, f"{flag}={fill(value)}"]


@pytest.mark.timeout(600)
@FAST
@given(case=st.sampled_from(FLAT))
def test_usage_errors_are_one_line_on_stderr(
    tmp_path_factory: pytest.TempPathFactory,
    capsys: pytest.CaptureFixture[str],
    case: tuple[tuple[str, ...], str, str],
) -> None:
    prefix, flag, value = case
    tmp = tmp_path_factory.mktemp("cli")
    argv = _argv(prefix, flag, value, tmp)
    capsys.readouterr()
    try:
        status: Any = main(argv)
    except SystemExit as stop:
        status = stop.code
    out, err = capsys.readouterr()
    lines = [line for line in err.splitlines() if line.strip() and "Warning" not in line]
    assert status == 2, (argv, status, out[-500:], err[-2000:])
    assert "Traceback" not in err, err
    assert len(lines) == 1, (argv, err)
    assert lines[0].startswith("fleetgym"), lines
    assert not out.strip() or "usage" not in out, out
    assert not list((tmp / "out").glob("*")) if (tmp / "out").exists() else True


def test_no_command_and_unknown_command(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as stop:
        main(["nope"])
    assert stop.value.code == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err


@pytest.mark.timeout(120)
def test_console_usage_error_in_a_process() -> None:
    """The real process: exit status 2, one stderr line, nothing on stdout."""
    proc = subprocess.run(
        [sys.executable, "-m", "fleetgym", "reproduce", "--only", "nope"],
        capture_output=True,
        text=True,
        timeout=100,
        env={**os.environ, "PYTHONWARNINGS": "ignore"},
        check=False,
    )
    assert proc.returncode == 2, proc.stderr
    assert proc.stdout == ""
    assert len(proc.stderr.strip().splitlines()) == 1, proc.stderr
