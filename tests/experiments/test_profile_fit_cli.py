"""``fleetgym profiles fit TRACE``: end to end, the written profile file, bad input (exit 2)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest

from fleetgym.cli import build_parser, main
from fleetgym.traces.generate import write_csv
from fleetgym.wrappers import NetworkShimWrapper
from fleetgym.wrappers.channels import GaussianChannel
from fleetgym.wrappers.fitted_channels import EmpiricalChannel, LogNormalChannel
from fleetgym.wrappers.profiles import get_profile


def _trace(path: Path, channel, n: int = 3000, seed: int = 0, step: float = 10.0) -> Path:
    delay = channel.sample_delays(np.random.default_rng(seed), n, step)
    write_csv(path, np.arange(n) * step, np.round(delay, 3), "generated for a test")
    return path


def test_fit_packaged_trace_prints_the_fit_and_writes_a_profile(tmp_path, capsys):
    out, png = tmp_path / "fit-wifi-office.json", tmp_path / "fit-wifi-office.png"
    assert main(["profiles", "fit", "wifi-office.csv", "--out", str(tmp_path), "--plot"]) == 0
    text = capsys.readouterr().out
    for needle in ("KS", "<- profile", "burst length", "gilbert", "same fit", "5-9", str(out)):
        assert needle in text
    assert png.stat().st_size > 10_000
    data = json.loads(out.read_text())
    assert data["fleetgym_profile"] == 1 and data["name"] == "fit-wifi-office"
    assert data["fit"]["uplink"]["delay"]["models"]["lognormal"]["ks"] > 0
    profile = get_profile(str(out))
    env = NetworkShimWrapper(gym.make("CartPole-v1"), profile=str(out))
    env.reset(seed=0)
    env.step(0)
    assert env.profile == profile


def test_fit_two_directions_by_subprocess_json(tmp_path):
    up = _trace(tmp_path / "up.csv", LogNormalChannel(6.0, 0.5, 2.0, 0.7, 0.02, 10.0), seed=1)
    down = _trace(tmp_path / "down.csv", GaussianChannel(30.0, 4.0, 0.0, 0.5), seed=2)
    out = tmp_path / "lab.json"
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "fleetgym",
            "profiles",
            "fit",
            str(up),
            "--downlink",
            str(down),
            "--out",
            str(tmp_path),
            "--name",
            "lab",
            "--delay-model",
            "empirical",
            "--json",
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert report["profile_file"] == str(out) and report["same_both_ways"] is False
    assert report["downlink"]["loss"]["chosen"] == "none"
    assert report["uplink"]["delay"]["chosen"] == "empirical"
    profile = get_profile(out)
    assert profile.name == "lab" and isinstance(profile.uplink, EmpiricalChannel)
    assert profile.uplink != profile.downlink


def test_fit_default_output_folder(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    trace = _trace(tmp_path / "lan.csv", GaussianChannel(2.0, 0.5, 0.01), seed=3)
    assert main(["profiles", "fit", str(trace)]) == 0
    written = tmp_path / "fleetgym-out" / "profiles" / "fit-lan.json"
    assert get_profile(str(written)).name == "fit-lan"
    assert "fleetgym-out/profiles/fit-lan.json" in capsys.readouterr().out


def _write(path: Path, text: str) -> Path:
    path.write_text(text)
    return path


def _usage_error(argv: list[str], capsys) -> str:
    capsys.readouterr()
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "Traceback" not in err, err
    return err


def test_untraceable_input_is_a_one_line_usage_error(tmp_path, capsys):
    lost = _trace(tmp_path / "lost.csv", GaussianChannel(5.0, 1.0, 1.0), n=100)
    short = _trace(tmp_path / "short.csv", GaussianChannel(5.0, 1.0), n=20)
    back = _write(tmp_path / "back.csv", "send_ms,delay_ms\n0,5\n10,5\n5,6\n")
    garbage = tmp_path / "garbage.csv"
    garbage.write_bytes(b"\x00\x01\x02")
    out = ["--out", str(tmp_path / "p")]
    cases = {
        str(lost): "every packet is lost",
        str(short): "too few packets",
        str(back): "expected non-decreasing send_ms",
        str(garbage): "binary data",
        str(tmp_path / "missing.csv"): "cannot read the file",
    }
    for path, reason in cases.items():
        err = _usage_error(["profiles", "fit", path, *out], capsys)
        assert path in err and reason in err and err.startswith("fleetgym profiles fit: error:")
    err = _usage_error(
        ["profiles", "fit", "wifi-office.csv", "--downlink", str(lost), *out], capsys
    )
    assert str(lost) in err
    not_a_folder = _write(tmp_path / "file", "x")
    for bad in (str(not_a_folder), f"{not_a_folder}/sub"):
        err = _usage_error(["profiles", "fit", "wifi-office.csv", "--out", bad], capsys)
        assert "--out" in err
    assert not (tmp_path / "p").exists() or not list((tmp_path / "p").iterdir())


def test_name_with_a_folder_is_a_usage_error(tmp_path, capsys):
    for name in ("a/b", "..", "."):
        argv = ["profiles", "fit", "wifi-office.csv", "--out", str(tmp_path), "--name", name]
        assert "--name: expected a name without a folder" in _usage_error(argv, capsys)


def test_empty_name_is_a_usage_error(tmp_path, capsys):
    err = _usage_error(["profiles", "fit", "wifi-office.csv", "--name", " "], capsys)
    assert "--name" in err


@pytest.mark.parametrize(
    "argv",
    [
        ["--format", "nope"],
        ["--interval-ms", "0"],
        ["--interval-ms", "nan"],
        ["--base-delay-ms", "-1"],
        ["--delay-model", "gamma"],
        ["--loss-model", "x"],
        ["--out", ""],
        ["--out", " "],
        ["--plot", "x.png"],
    ],
)
def test_bad_option_values_are_argparse_errors(argv, tmp_path):
    with pytest.raises(SystemExit) as caught:
        main(["profiles", "fit", "wifi-office.csv", *argv])
    assert caught.value.code == 2


def test_profiles_without_an_action_still_lists(capsys):
    assert main(["profiles", "--samples", "2000"]) == 0
    out = capsys.readouterr().out
    assert "trace-wifi-office" in out and "Shipped traces" in out
    help_text = build_parser()._subparsers._group_actions[0].choices["profiles"].format_help()
    assert "fit" in help_text


def test_docs_page_shows_the_fit_of_the_shipped_trace():
    """docs/profile-fit.md holds the command's report on wifi-office.csv, verbatim."""
    from fleetgym.experiments.profile_fit import format_report
    from fleetgym.traces import trace_path
    from fleetgym.wrappers.profile_fit import fit_profile

    page = (Path(__file__).resolve().parents[2] / "docs" / "profile-fit.md").read_text()
    report = format_report(fit_profile("wifi-office.csv"))
    report = report.replace(str(trace_path("wifi-office.csv")), "fleetgym/traces/wifi-office.csv")
    assert f"```text\n{report}\n```" in page
