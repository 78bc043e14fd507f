"""``fleetgym profiles simulate`` (ns-3) and its profile in fit, assess and calf, at tiny budgets."""

from __future__ import annotations

import contextlib
import importlib.util
import io
import json

import numpy as np
import pytest

from fleetgym.cli import main
from fleetgym.traces import load_trace
from fleetgym.wrappers.cells import simulate as cell_sim
from fleetgym.wrappers.profiles import load_profile_file

pytestmark = pytest.mark.skipif(
    importlib.util.find_spec("ns3") is None,
    reason='needs ns-3\'s bindings: pip install "fleetgym[ns3]"',
)


@pytest.fixture(scope="module")
def simulated(tmp_path_factory):
    """One simulated cell (3 stations, 4 s, 1 Mb/s each), its report and files."""
    folder = tmp_path_factory.mktemp("cell")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv(cell_sim.CACHE_ENV, str(folder / "cache"))
        mp.setattr(cell_sim, "_MEMORY", {})
        argv = ["profiles", "simulate", "--stations", "3", "--background-mbps", "1"]
        argv += ["--seconds", "4", "--station", "2", "--name", "lab", "--out", str(folder)]
        buffer = io.StringIO()
        with contextlib.redirect_stdout(buffer):
            assert main([*argv, "--json"]) == 0
        yield folder, json.loads(buffer.getvalue())


def test_simulate_writes_the_profile_and_the_stations_traces(simulated):
    folder, report = simulated
    assert report["profile_file"] == str(folder / "lab.json")
    profile = load_profile_file(folder / "lab.json")
    assert profile.name == "lab" and profile.uplink.cell.stations == 3
    assert profile.uplink.cell.step_ms == 20.0
    up = load_trace(folder / "lab-uplink.csv")
    down = load_trace(folder / "lab-downlink.csv")
    assert len(up) == len(down) == 200 and up.period_ms == pytest.approx(4000.0)
    run = cell_sim.simulate_cells([profile.uplink.cell])[0]
    # The traces hold station 2's packets, to the microsecond.
    np.testing.assert_allclose(up.delay_ms, run.up[2], atol=1e-6)
    np.testing.assert_allclose(down.delay_ms, run.down[2], atol=1e-6)
    assert report["loss_up"] == 0.0 and 0.0 < report["rtt_p50_ms"] < 20.0


def test_profiles_fit_reads_the_simulated_traces(simulated, capsys):
    folder, _ = simulated
    code = main(
        [
            "profiles",
            "fit",
            str(folder / "lab-uplink.csv"),
            "--downlink",
            str(folder / "lab-downlink.csv"),
            "--out",
            str(folder / "fit"),
            "--json",
        ]
    )
    assert code == 0
    fitted = load_profile_file(folder / "fit" / "fit-lab-uplink.json")
    assert fitted.uplink.delay_quantile_ms(0.5) < 20.0


def test_profiles_assess_takes_the_cell_profile(simulated, capsys):
    folder, _ = simulated
    code = main(
        [
            "profiles",
            "assess",
            str(folder / "lab.json"),
            "--network-only",
            "--ticks",
            "300",
            "--out",
            str(folder / "assess"),
            "--json",
            "--no-progress",
        ]
    )
    assert code == 0
    net = json.loads(capsys.readouterr().out)["network"]
    # Sub-millisecond one-way delays on a 20 ms loop: every packet arrives in its own tick.
    assert net["round_trip_ticks"]["p99"] == 0.0 and net["stall_share"] == 0.0


def test_calf_trains_and_evaluates_under_the_cell(simulated, capsys):
    folder, _ = simulated
    profile = str(folder / "lab.json")
    code = main(
        [
            "calf",
            "--timesteps",
            "256",
            "--episodes",
            "1",
            "--no-ablation",
            "--variants",
            "",
            "--regimes",
            f"baseline,{profile}",
            "--conditions",
            f"sim-clean,{profile}",
            "--out",
            str(folder / "calf"),
            "--no-progress",
        ]
    )
    assert code == 0
    assert f"| {profile} |" in capsys.readouterr().out


def test_simulate_an_lte_cell(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(cell_sim, "_MEMORY", {})
    argv = ["profiles", "simulate", "--cell", "lte", "--stations", "2", "--seconds", "2"]
    assert main([*argv, "--bandwidth-rb", "15", "--out", str(tmp_path), "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["cell"]["type"] == "lte" and report["cell"]["bandwidth_rb"] == 15
    profile = load_profile_file(tmp_path / "lte-cell.json")
    assert profile.uplink.cell.distance_m == 200.0 and report["loss_up"] == 0.0
