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
        "--resume": ["{missing}", "{file}", "{dir}"],
        "--out": ["", "   ", "{file}", "{file}/sub"],
        "--env-kwarg": ['target_return="abc"', "target_return=[1]", "nokey", "=1", "beta=nan"],
        "--actions": ["nope"],
        "--checkpoint-every": ["-1", "abc"],
        "--checkpoint-minutes": ["-1", "0", "nan", "inf", "-inf", "abc", "", "1e400", "0x10"],
        "--keep": BAD_INTS,
        "--eval-seeds": ["-1", "abc"],
        "--first-eval-seed": ["-1", "abc", "4294967296"],
        "--start-search": ["0", "abc", "5000"],
        "--name": [" "],
    },
    ("schedule", "finetune", "--from", "{missing}"): {
        "--lr": BAD_NUMBERS,
        "--episodes": BAD_INTS,
        "--out": ["", "{file}"],
        "--workload": ["nope"],
        "--eval-seeds": BAD_INTS,
        "--first-eval-seed": ["-1", "abc"],
        "--baselines": ["nope", "fixed:0"],
    },
    ("schedule", "evaluate", "--seeds", "2"): {
        "--seeds": BAD_INTS,
        "--first-seed": ["-1", "abc", "4294967295"],  # two seeds from the last one
        "--max-actors": [*BAD_INTS, "1000000000000"],
        "--scheduler": ["nope", "fixed:0", "fixed:abc", "learned:{missing}", ""],
        "--workload": ["nope"],
        "--env-kwarg": ['target_return="abc"', "target_return=[1]", "target_return={}"],
        "--out": ["", "{file}"],
        "--timing": ["nope"],
    },
    ("schedule", "search"): {"--first-seed": ["-1", "abc"], "--out": ["", "{file}"]},
    ("schedule", "seeds"): {
        "--first-train-seed": ["-1", "abc"],
        "--first-eval-seed": ["-1"],
        "--finetune-from": ["{missing}", "{dir}/seed{seed}.zip"],
        "--scratch-checkpoint": ["checkpoints/ep10.zip"],
        "--out": ["", "{file}"],
    },
    ("train",): {
        "--lr": ["inf", "-1", "nan", "abc", "0"],
        "--actors": [*BAD_INTS, "1000000000000"],
        "--rounds": BAD_INTS,
        "--steps-per-actor": [*BAD_INTS, "1000000000000"],
        "--workload": ["nope", ""],
        "--backend": ["nope"],
        "--seed": ["-1", "abc"],
        "--eval-episodes": ["-1", "abc"],
        "--imagination": ["share=2", "nope", "horizon=0", "colour=red", "hidden_sizes=ax2"],
        "--address": ["127.0.0.1:6379"],  # without --backend ray
    },
    # --out is checked (created) where a file is asked for: --save, --log, --plot, --tensorboard
    ("train", "--save", "--log", "--plot", "--tensorboard"): {
        "--out": ["", "{file}", "{file}/sub"]
    },
    ("imagination",): {
        "--env": ["nope", "", "Pendulum-v1"],  # Pendulum is --mbpo's
        "--seeds": BAD_INTS,
        "--first-seed": ["-1", "abc"],
        "--budget": BAD_INTS,
        "--arms": ["nope", ",", "ppo,nope"],
        "--async-steps": BAD_INTS,
        "--out": ["", "{file}", "{file}/sub"],
        "--real-ratio": ["0.5"],  # --mbpo's options without --mbpo
        "--updates-per-step": ["5"],
        "--jobs": ["2"],
        "--epochs": BAD_INTS,
    },
    ("imagination", "--arms", "ppo"): {"--epochs": ["48"]},  # without the ppo+epochs arm
    ("imagination", "--async"): {"--arms": ["ppo"], "--budget": ["1000"], "--epochs": ["48"]},
    ("imagination", "--mbpo", "--env", "Hopper-v5"): {
        "--env": ["CartPole-v1", "nope"],
        "--updates-per-step": BAD_INTS,
        "--real-ratio": ["2", "-0.1", "nan", "abc", ""],
        "--rollout-length": ["0", "-1", "cosine", ""],
        "--ensemble-size": [*BAD_INTS, "65"],
        "--eval-every": BAD_INTS,
        "--learning-starts": BAD_INTS,
        "--jobs": [*BAD_INTS, "65"],
        "--arms": ["ppo", ",", "mbpo,nope"],
        "--out": ["", "{file}"],
        "--epochs": ["48"],
    },
    ("profiles",): {
        "--samples": ["0", "99", "1000000000000", "abc"],
        "--step-ms": BAD_NUMBERS,
        "--netem": ["nope", "", "  "],
    },
    ("reproduce",): {"--only": ["nope", "", ",", "calf,nope"], "--out": ["", "{file}"]},
    ("calibrate",): {"--workload": ["nope", ""], "--seed": ["-1", "abc"]},
    ("calibrate", "--workload", "CartPole-v1", "--budget", "0.01"): {
        "--cache-dir": ["", "{file}", "{file}/sub"],
        "--budget": ["0", "-1", "nan", "inf", "1e9", "abc", "0.001"],
        "--learner-override": ["nope=1", "lr=-1", "lr=abc", "epochs=0", "gamma=nan"],
    },
    ("lag-sweep",): {
        "--seeds": BAD_INTS,
        "--first-seed": ["-1", "abc", "4294967295"],
        "--steps": BAD_INTS,
        "--lags": ["1250", "5000"],  # the default CartPole run has 1,250 updates
        "--jobs": BAD_INTS,
        "--env": ["nope"],
        "--out": ["", "{file}"],
    },
    # Hopper's sweep updates on 512 env steps: a smaller budget holds no update.
    ("lag-sweep", "--env", "Hopper-v5", "--lags", "0"): {"--steps": ["511", "1"]},
    ("calf",): {
        "--timesteps": BAD_INTS,
        "--step-ms": BAD_NUMBERS,
        "--algo": ["nope"],
        "--timing": ["nope", ""],
        "--out": ["", "{file}"],
        "--first-seed": ["-1", "abc", "4294967295"],
        "--regimes": ["nope", "nowhere+comp"],
        "--conditions": ["nope"],
        "--variants": ["nope"],
        "--variant-regimes": ["nope"],
        "--env": ["Nope-v0"],
    },
    ("serve-env", "--env-id", "CartPole-v1"): {
        "--bind": [
            "nope",
            "127.0.0.1:99999",
            "127.0.0.1:abc",
            "",
            "127.0.0.1:١٢٣",
            "127.0.0.1:²",
            "300.1.1.1:0",
            "localhost:99999",
            "::1:0",
            "[nope]:0",
        ],
        "--step-ms": [*BAD_NUMBERS, "60001", "1e300"],
        "--max-sessions": BAD_INTS,
        "--profile": ["nope"],
        "--secret-file": ["{missing}", "{dir}", ""],
        "--env-id": ["Nope-v0", "", "CartPol-v1", "Blackjack-v1"],
        "--env-kwarg": ["foo=1", "render_mode=3"],
        "--port-file": ["", "{file}/port", "{dir}"],
        "--record-dir": ["", "{file}", "{file}/sub"],
    },
    ("plan", "predict", "--workloads", "CartPole-v1", "--actors", "8", "--no-accerl"): {
        "--actors": ["0", "-1", "abc"],
        "--lag": ["-1", "abc"],
        "--delay-ms": ["-1", "nan", "abc"],
        "--delay-sigma": ["-1", "nan"],
        "--learner-speedup": ["0", "-1", "nan"],
        "--server-speedup": ["0", "-1"],
        "--updates": ["0", "abc"],
        "--seed": ["-1", "abc"],
        "--workloads": ["nope"],
        "--calibration": ["{missing}", "", "{dir}"],
        "--out": ["", "{file}"],
    },
    ("plan", "validate"): {"--first-seed": ["-1", "abc"], "--out": ["", "{file}"]},
    ("plan", "measure"): {"--out": ["", "{file}", "{file}/sub"], "--workloads": ["nope"]},
    ("profiles", "simulate"): {
        "--cell": ["nr", ""],
        "--bandwidth-rb": ["24", "abc", "25"],  # 25 is valid, but not without --cell lte
        "--backhaul-ms": ["-1", "nan", "abc", "1"],
        "--stations": [*BAD_INTS, "129"],
        "--standard": ["802.11b", ""],
        "--distance-m": [*BAD_NUMBERS, "1001"],
        "--mobility": ["fly"],
        "--background-mbps": ["-1", "nan", "abc", "1001"],
        "--obs-bytes": ["11", "65001", "abc"],
        "--action-bytes": ["0", "abc"],
        "--step-ms": [*BAD_NUMBERS, "0.5", "20000"],
        "--seconds": ["0", "0.5", "3601", "nan", "abc"],
        "--seed": ["-1", "abc", "2147483648"],
        "--station": ["-1", "1", "abc"],
        "--name": ["a/b", "..", ""],
        "--out": ["", "{file}", "{file}/sub"],
    },
    ("profiles", "simulate", "--cell", "lte"): {
        "--standard": ["802.11n"],
        "--distance-m": ["10001", "0"],
        "--bandwidth-rb": ["7"],
        "--backhaul-ms": ["1001"],
    },
    ("profiles", "fit", "wifi-office.csv"): {
        "--out": ["", "{file}", "{file}/sub"],
        "--name": ["a/b", ".."],
    },
    ("train", "--mode", "async", "--log"): {"--out": ["", "{file}", "{file}/sub"]},
    ("docs",): {
        "--source": ["{file}", "{missing}", "{dir}"],
        "--serve": ["0", "70000", "abc"],
        "--out": ["", "{file}", "{file}/sub"],
    },
    ("soak",): {
        "--minutes": ["0", "-1", "nan", "abc"],
        "--fault-every": ["0", "nan"],
        "--actor-timeout": ["0", "inf"],
        "--actors": ["0", "abc"],
        "--faults": ["nope", "actor-kill,nope"],
        "--out": ["", "{file}", "{file}/sub"],
    },
    # Refused before any Ray cluster starts: Ray actors act with their own policy copy.
    ("train", "--mode", "async", "--backend", "ray"): {"--inference": ["server"]},
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


def _check_usage_error(
    case: tuple[tuple[str, ...], str, str], tmp: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    prefix, flag, value = case
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


@pytest.mark.timeout(600)
def test_every_listed_bad_value_is_a_usage_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The whole table, every run (the values were chosen to stop before any work)."""
    for i, case in enumerate(FLAT):
        folder = tmp_path / str(i)
        folder.mkdir()
        _check_usage_error(case, folder, capsys)


#: Integer options and the range each accepts (generated values fall outside it).
INT_FLAGS = {
    ("schedule", "train"): {"--n-steps": 1, "--n-epochs": 1, "--episodes": 1, "--max-actors": 1},
    ("train",): {"--actors": 1, "--rounds": 1, "--steps-per-actor": 1},
    ("lag-sweep",): {"--seeds": 1, "--jobs": 1},
    ("calf",): {"--timesteps": 1, "--seeds": 1},
}


@pytest.mark.timeout(600)
@FAST
@given(
    data=st.data(),
    prefix=st.sampled_from(sorted(INT_FLAGS)),
    value=st.one_of(
        st.integers(max_value=0),
        st.integers(min_value=10**10),
        st.floats(allow_nan=True, allow_infinity=True).map(repr),
        st.text(max_size=20).filter(lambda t: not t.strip().lstrip("+").isdigit()),
    ),
)
def test_generated_bad_counts_are_usage_errors(
    tmp_path_factory: pytest.TempPathFactory,
    capsys: pytest.CaptureFixture[str],
    data: Any,
    prefix: tuple[str, ...],
    value: Any,
) -> None:
    flag = data.draw(st.sampled_from(sorted(INT_FLAGS[prefix])))
    text = str(value).replace("\x00", "")
    if not text.strip():
        text = "-3"
    _check_usage_error((prefix, flag, text), tmp_path_factory.mktemp("cli"), capsys)


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


def _one_usage_line(argv: list[str], capsys: pytest.CaptureFixture[str]) -> str:
    capsys.readouterr()
    try:
        status: Any = main(argv)
    except SystemExit as stop:
        status = stop.code
    out, err = capsys.readouterr()
    lines = [line for line in err.splitlines() if line.strip() and "Warning" not in line]
    assert status == 2, (argv, status, out[-500:], err[-2000:])
    assert "Traceback" not in err and len(lines) == 1, err
    return lines[0]


@pytest.mark.timeout(120)
def test_train_async_refuses_sequential(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["train", "--mode", "async", "--sequential", "--max-steps", "16", "--no-progress"]
    assert "--sequential" in _one_usage_line(argv, capsys)
    argv = ["train", "--sequential", "--backend", "process", "--rounds", "1", "--no-progress"]
    assert "--sequential: expected --backend inprocess" in _one_usage_line(argv, capsys)


@pytest.mark.timeout(120)
def test_serve_env_on_a_port_in_use_names_the_address(
    capsys: pytest.CaptureFixture[str],
) -> None:
    from fleetgym.wrappers.remote import RemoteEnvServer

    server = RemoteEnvServer("CartPole-v1").start()
    try:
        port = server.address[1]
        argv = ["serve-env", "--env-id", "CartPole-v1", "--bind", f"127.0.0.1:{port}"]
        line = _one_usage_line(argv, capsys)
        assert f"cannot listen on 127.0.0.1:{port}" in line, line
    finally:
        server.stop()


def test_serve_env_measure_refuses_a_secret_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    secret = tmp_path / "secret"
    secret.write_bytes(b"a-shared-secret-of-some-length")
    argv = ["serve-env", "--env-id", "CartPole-v1", "--measure", "5"]
    assert "--measure" in _one_usage_line([*argv, "--secret-file", str(secret)], capsys)


#: A valid row of a sweep's CSV (the columns of SweepRun).
_ROW = {
    "env": "CartPole-v1",
    "loss": "ppo",
    "variant": "plain",
    "lag": "10",
    "seed": "0",
    "steps": "64",
    "updates": "2",
    "final_return": "20.0",
    "train_return": "15.0",
    "wall_s": "1.5",
}
_BAD_FIELD_VALUES = {
    "lag": ["-1", "-100", "1.5", "nan", "", "١٠", "abc"],
    "seed": ["-3", "x"],
    "steps": ["-64", "1e3"],
    "updates": ["-1"],
    "final_return": ["nan", "NaN", "inf", "-inf", "", "x", "1e999", "٣"],
    "train_return": ["nan", "inf"],
    "wall_s": ["-1", "nan"],
    "env": ["Nope-v0", ""],
    "loss": ["sgd"],
    "variant": ["both"],
}


@pytest.mark.timeout(600)
@FAST
@given(
    data=st.data(),
    field=st.sampled_from(sorted(_BAD_FIELD_VALUES)),
    good_rows=st.integers(0, 3),
)
def test_lag_sweep_merge_refuses_bad_values_naming_file_and_line(
    tmp_path_factory: pytest.TempPathFactory,
    capsys: pytest.CaptureFixture[str],
    data: Any,
    field: str,
    good_rows: int,
) -> None:
    import csv

    value = data.draw(st.sampled_from(_BAD_FIELD_VALUES[field]))
    folder = tmp_path_factory.mktemp("sweep")
    path = folder / "lag_sweep.csv"
    with path.open("w", newline="", encoding="utf-8") as fh:
        writer = csv.DictWriter(fh, fieldnames=list(_ROW))
        writer.writeheader()
        for seed in range(good_rows):
            writer.writerow({**_ROW, "seed": str(seed + 10)})
        writer.writerow({**_ROW, field: value})
    out = tmp_path_factory.mktemp("out")
    line = _one_usage_line(["lag-sweep", "--merge", str(folder), "--out", str(out)], capsys)
    assert f"{path}, line {good_rows + 2}: {field}:" in line, line
    assert not (out / "lag_sweep.md").exists()


def test_lag_sweep_merge_refuses_unreadable_files(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    header = ",".join(_ROW)
    cases = {
        "binary": b"\xff\xfe\x00garbage\n",
        "huge-line": (header + "\n" + "x" * 100_000 + "\n").encode(),
        "short-row": (header + "\nCartPole-v1,ppo\n").encode(),
        "nul": (header + "\n" + ",".join(_ROW.values()).replace("ppo", "p\x00po") + "\n").encode(),
    }
    for name, content in cases.items():
        folder = tmp_path / name
        folder.mkdir()
        (folder / "lag_sweep.csv").write_bytes(content)
        argv = ["lag-sweep", "--merge", str(folder), "--out", str(tmp_path / "out")]
        assert "lag_sweep.csv" in _one_usage_line(argv, capsys), name
