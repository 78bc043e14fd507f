"""``fleetgym profiles fit TRACE``: end to end, the written profile file, bad input (exit 2)."""

from __future__ import annotations

import json
import math
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
    """docs/results/profiles.md holds the command's report on wifi-office.csv, verbatim."""
    from fleetgym.experiments.profile_fit import format_report
    from fleetgym.traces import trace_path
    from fleetgym.wrappers.profile_fit import fit_profile

    docs = Path(__file__).resolve().parents[2] / "docs"
    page = (docs / "results" / "profiles.md").read_text()
    report = format_report(fit_profile("wifi-office.csv"))
    report = report.replace(str(trace_path("wifi-office.csv")), "fleetgym/traces/wifi-office.csv")
    assert f"```text\n{report}\n```" in page


def _ping(n: int = 300, *, interval_s: float = 0.02, stamps: bool = True, lost=(), first=1) -> str:
    """`ping -D -i interval_s 192.0.2.7` output (Linux iputils): n requests, some lost.

    Replies are printed as they arrive: a late one after the next request's.
    """
    rng = np.random.default_rng(0)
    replies = []
    for k in range(n):
        rtt = 30.0 + float(rng.gamma(2.0, 4.0))
        if first + k not in lost:
            stamp = 1700000000 + interval_s * k + rtt / 1000
            reply = f"64 bytes from 192.0.2.7: icmp_seq={first + k} ttl=57 time={rtt:.1f} ms"
            replies.append((stamp, f"[{stamp:.6f}] {reply}" if stamps else reply))
    if stamps:
        replies.sort()
    lines = ["PING 192.0.2.7 (192.0.2.7) 56(84) bytes of data.", *(line for _, line in replies)]
    return "\n".join(lines) + "\n"


def test_raw_ping_output_in_one_command(tmp_path, capsys):
    ping = _write(tmp_path / "ping.txt", _ping(lost=(40, 41, 42, 200)))
    assert main(["profiles", "fit", str(ping), "--out", str(tmp_path)]) == 0
    text = capsys.readouterr().out
    for needle in (
        "Direction model: round trips halved into one-way delays (detected: ping output",
        "symmetric paths assumed",
        "format: ping output (Linux iputils, -D timestamps): 300 echo requests",
        "4 lost",
        "interval: 20 ms per packet, from the -D timestamps (median 20 ms per icmp_seq",
        "loss 1.33%",
        "loss per direction 0.67%",
    ):
        assert needle in text, text
    data = json.loads((tmp_path / "fit-ping.json").read_text())
    fit = data["fit"]
    assert "round trips halved" in fit["direction_model"]
    up = fit["uplink"]
    assert up["delays"] == "half-rtt" and up["interval_source"].startswith("the -D timestamps")
    assert up["loss"]["per_direction"] == pytest.approx(1 - math.sqrt(1 - 4 / 300), rel=0.01)
    rtts = [float(x.split("time=")[1].split()[0]) for x in ping.read_text().splitlines()[1:]]
    assert up["delay"]["trace"]["p50_ms"] == pytest.approx(np.median(rtts) / 2)


def test_ping_without_timestamps_says_which_interval_it_took(tmp_path, capsys):
    ping = _write(tmp_path / "plain.txt", _ping(120, stamps=False))
    assert main(["profiles", "fit", str(ping), "--out", str(tmp_path), "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["uplink"]["interval_ms"] == 1000.0
    assert report["uplink"]["interval_source"].startswith("ping's default, 1000 ms")
    assert main(["profiles", "fit", str(ping), "--out", str(tmp_path), "--interval-ms", "20"]) == 0
    assert "interval: 20 ms per packet, from given (--interval-ms" in capsys.readouterr().out


def test_rtt_halves_a_csv_of_round_trips(tmp_path, capsys):
    trace = _trace(tmp_path / "rtt.csv", GaussianChannel(60.0, 5.0, 0.02), seed=4)
    assert main(["profiles", "fit", str(trace), "--rtt", "--out", str(tmp_path), "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert "(--rtt / rtt=True; symmetric paths assumed)" in report["direction_model"]
    assert report["uplink"]["delay"]["trace"]["mean_ms"] == pytest.approx(30.0, abs=0.5)
    err = _usage_error(
        ["profiles", "fit", "wifi-office.csv", "--rtt", "--downlink", str(trace)], capsys
    )
    assert "round-trip times" in err and "--downlink" in err


def test_bad_ping_captures_are_usage_errors_naming_file_and_line(tmp_path, capsys):
    lines = _ping(80).splitlines(keepends=True)
    cases = {
        "short.txt": (_ping(30), "too few packets: expected at least 50, actual 30"),
        "lost.txt": (
            "".join(f"Request timeout for icmp_seq {k}\n" for k in range(80)),
            "every echo request is lost (80 of 80",
        ),
        "back.txt": (
            "".join(lines[:10]) + lines[5] + "".join(lines[10:]),
            ":11: timestamp goes backwards",
        ),
        "mixed.txt": (
            "".join(lines[:10])
            + "64 bytes from 192.0.2.7: icmp_seq=10 ttl=57 time=41.200 ms\n"
            + "".join(lines[11:]),
            ":11: mixed ping formats",
        ),
        "windows.txt": (
            "Reply from 192.0.2.7: bytes=32 time=41ms TTL=57\n" * 60,
            ":1: unknown ping format",
        ),
        "odd.txt": ("".join(lines[:20]) + "hello\n" + "".join(lines[20:]), ":21: unknown ping"),
    }
    out = ["--out", str(tmp_path / "p")]
    for name, (text, reason) in cases.items():
        path = str(_write(tmp_path / name, text))
        err = _usage_error(["profiles", "fit", path, *out], capsys)
        assert path in err and reason in err, err
    slow = str(_write(tmp_path / "slow.txt", _ping(80, interval_s=1.0)))
    err = _usage_error(["profiles", "fit", slow, "--interval-ms", "20", *out], capsys)
    assert f"{slow}:3: --interval-ms / interval_ms=20 contradicts the -D timestamps" in err
    assert not (tmp_path / "p").exists() or not list((tmp_path / "p").iterdir())
