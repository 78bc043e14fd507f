"""Tests of the profile registry (fleetgym.wrappers.profiles) and ``fleetgym profiles``."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from fleetgym.cli import main
from fleetgym.errors import UnknownProfileError
from fleetgym.wrappers import FixedDelay, GaussianChannel, NetworkProfile, TraceChannel
from fleetgym.wrappers.profiles import get_profile, list_profiles, register_profile


def test_builtin_profiles_match_the_paper():
    names = list_profiles()
    assert names[:4] == ["perfect", "ethernet", "wifi-normal", "wifi-degraded"]
    assert "trace-wifi-office" in names
    assert get_profile("ethernet").uplink == GaussianChannel(2.0, 0.5, 0.0)
    assert get_profile("wifi-normal").downlink == GaussianChannel(30.0, 10.0, 0.02)
    degraded = get_profile("wifi-degraded")
    assert degraded.uplink == GaussianChannel(80.0, 40.0, 0.10) == degraded.downlink
    assert isinstance(get_profile("trace-wifi-office").uplink, TraceChannel)
    assert get_profile(degraded) is degraded


def test_unknown_profile_lists_the_known_ones():
    with pytest.raises(
        UnknownProfileError, match=r"profile: expected one of .*'wifi-normal'.*actual 'lte'"
    ):
        get_profile("lte")
    with pytest.raises(TypeError, match="profile: expected a name"):
        get_profile(3)


def test_register_profile(monkeypatch):
    from fleetgym.wrappers import profiles

    monkeypatch.setattr(profiles, "_REGISTRY", dict(profiles._REGISTRY))
    p = register_profile("lab", FixedDelay(5), description="lab LAN")
    assert p.downlink == p.uplink == FixedDelay(5)
    assert get_profile("lab") is p and list_profiles()[-1] == "lab"
    with pytest.raises(ValueError, match="is registered"):
        register_profile("lab", FixedDelay(6))
    register_profile("lab", FixedDelay(6), FixedDelay(7), overwrite=True)
    assert get_profile("lab").downlink == FixedDelay(7)
    with pytest.raises(TypeError, match="uplink: expected a fleetgym Channel"):
        register_profile("bad", 5)
    with pytest.raises(TypeError, match="name: expected a non-empty str"):
        NetworkProfile("", FixedDelay(1), FixedDelay(1))


def test_cli_lists_profiles_and_traces(capsys):
    assert main(["profiles", "--samples", "2000"]) == 0
    out = capsys.readouterr().out
    for name in (
        "perfect",
        "ethernet",
        "wifi-normal",
        "wifi-degraded",
        "trace-wifi-office",
        "wifi-office.csv",
    ):
        assert name in out


def test_cli_json_and_bad_arguments(capsys):
    assert main(["profiles", "--json", "--samples", "2000", "--step-ms", "50"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["step_ms"] == 50.0
    by_name = {p["name"]: p for p in data["profiles"]}
    # wifi-degraded: p99 of max(0, N(80, 40)) ~ 173 ms -> 3 periods of 50 ms.
    assert by_name["wifi-degraded"]["uplink"]["p99_periods"] == 3
    assert by_name["perfect"]["downlink"]["p99_ms"] == 0.0
    assert data["traces"][0]["file"] == "wifi-office.csv"
    assert main(["profiles", "--step-ms", "0"]) == 2
    assert main(["profiles", "--samples", "5"]) == 2


def test_cli_as_a_process():
    out = subprocess.run(
        [sys.executable, "-m", "fleetgym", "profiles", "--samples", "1000"],
        capture_output=True,
        text=True,
        check=True,
    )
    assert "wifi-degraded" in out.stdout
