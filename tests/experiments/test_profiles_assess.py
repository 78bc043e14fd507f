"""``fleetgym profiles assess``: the network figures, the verdict and bad input, at tiny budgets."""

from __future__ import annotations

import json

import pytest

from fleetgym.cli import main
from fleetgym.experiments import assess
from fleetgym.experiments.assess_network import assess_network
from fleetgym.wrappers import GaussianChannel, NetworkProfile
from fleetgym.wrappers.profiles import save_profile_file


def _constant(tmp_path, one_way_ms=50.0):
    channel = GaussianChannel(one_way_ms, 0.0, 0.0)
    return save_profile_file(
        NetworkProfile("const", channel, channel, "constant"), tmp_path / "const.json"
    )


def _stall_trace(tmp_path, every_s=5.0, stall_s=1.0, duration_s=100.0):
    """A CSV trace: 2 ms one way, a packet every 20 ms, and a stall of ``stall_s`` every
    ``every_s`` in which packets wait for its end."""
    lines = ["send_ms,delay_ms"]
    for i in range(int(duration_s * 50)):
        send = i * 20.0
        phase = send % (every_s * 1000.0)
        wait = stall_s * 1000.0 - phase if phase < stall_s * 1000.0 else 0.0
        lines.append(f"{send:g},{2.0 + wait:g}")
    path = tmp_path / "stalls.csv"
    path.write_text("\n".join(lines) + "\n")
    return path


def _assess(tmp_path, capsys, *argv):
    code = main(
        ["profiles", "assess", *argv, "--out", str(tmp_path / "out"), "--json", "--no-progress"]
    )
    assert code == 0
    return json.loads(capsys.readouterr().out)


def test_a_constant_delay_gives_the_exact_round_trip_in_ticks(tmp_path, capsys):
    # 50 ms each way on CartPole's 20 ms loop: every observation and action is 3 ticks old.
    report = _assess(tmp_path, capsys, str(_constant(tmp_path)), "--network-only", "--ticks", "500")
    net = report["network"]
    assert net["step_ms"] == pytest.approx(20.0) and report["step_ms_source"] == "the env's dt/tau"
    assert net["round_trip_ticks"] == {"median": 6.0, "p95": 6.0, "p99": 6.0, "max": 6}
    assert net["stall_share"] == 0.0 and net["longest_stall_s"] == 0.0
    assert net["loss"]["uplink"] == {
        "loss_rate": 0.0,
        "bursts": 0,
        "mean_burst": 0.0,
        "max_burst": 0,
    }
    assert "verdict" not in report
    assert (tmp_path / "out" / "assess_const_CartPole-v1.txt").exists()


def test_the_period_is_the_envs_own(tmp_path, capsys):
    # Pendulum's dt is 50 ms: the same 50 ms each way is 1 tick per path, plus the loop's.
    report = _assess(
        tmp_path,
        capsys,
        str(_constant(tmp_path)),
        "--env",
        "Pendulum-v1",
        "--network-only",
        "--ticks",
        "200",
    )
    assert report["network"]["step_ms"] == pytest.approx(50.0)
    assert report["network"]["round_trip_ticks"]["median"] < 6


def test_a_stall_heavy_trace_gives_its_stall_share(tmp_path, capsys):
    # A 1 s stall every 5 s on each path: 20 % of the time each without news for 50 ticks.
    report = _assess(
        tmp_path, capsys, str(_stall_trace(tmp_path)), "--network-only", "--ticks", "5000"
    )
    net = report["network"]
    assert net["stall_share_uplink"] == pytest.approx(0.2, abs=0.02)
    assert net["stall_share_downlink"] == pytest.approx(0.2, abs=0.02)
    assert 0.2 <= net["stall_share"] <= 0.4
    assert net["longest_stall_s"] == pytest.approx(1.0, abs=0.05)
    assert net["loss"]["uplink"]["loss_rate"] == 0.0


def test_loss_bursts_are_counted_per_path():
    from fleetgym.wrappers import GilbertElliottChannel

    bursty = GilbertElliottChannel(p_good_to_bad=0.02, p_bad_to_good=0.25, mean_ms=5.0)
    net = assess_network(NetworkProfile("b", bursty, bursty), 20.0, ticks=20_000)
    loss = net["loss"]["uplink"]
    assert loss["mean_burst"] == pytest.approx(4.0, rel=0.2)  # 1 / p_bad_to_good
    assert loss["max_burst"] > loss["mean_burst"] and 0.0 < loss["loss_rate"] < 0.2


def test_the_verdict_thresholds():
    network = {
        "stall_share": 0.3,
        "stall_p95_s": 2.0,
        "step_ms": 20.0,
        "round_trip_ticks": {"p95": 4.0},
    }

    def returns(comp):
        return {"clean": {"mean": 500.0}, "random": {"mean": 20.0}, "compensated": {"mean": comp}}

    assert assess.verdict(network, returns(480.0), None)[0] == "feasible"
    assert assess.verdict(network, returns(300.0), None)[0] == "degraded"
    line, kept = assess.verdict(network, returns(30.0), 0.3)
    assert line.startswith("infeasible: stalls of 2.00 s exceed what the env tolerates")
    assert "0.30 s" in line and kept == pytest.approx(10 / 480)
    calm = {**network, "stall_share": 0.0}
    assert assess.verdict(calm, returns(30.0), None)[0].startswith("infeasible: a round trip")


def test_the_whole_assessment_at_a_tiny_budget(tmp_path, capsys):
    cache = tmp_path / "cache"
    argv = ["ethernet", "--timesteps", "256", "--episodes", "1", "--ticks", "300"]
    report = _assess(tmp_path, capsys, *argv, "--cache", str(cache), "--plot")
    assert set(report["returns"]) == {
        "clean",
        "random",
        "delivered",
        "predictive",
        "scheduled",
        "compensated",
    }
    assert "predictive compensation" in report["compensations"]["predictive"]
    assert report["compensation"] in report["compensations"].values()
    best = max(report["returns"]["predictive"]["mean"], report["returns"]["scheduled"]["mean"])
    assert report["returns"]["compensated"]["mean"] == best
    # ethernet: every action packet is on time, so D = 1 and one action a packet.
    assert report["schedule"]["delay"] == 1 and report["schedule"]["chunk"] == 1
    assert report["verdict"].split(":")[0] in ("feasible", "degraded", "infeasible")
    assert list(cache.glob("CartPole-v1_ppo_seed0_256.zip"))
    assert (tmp_path / "out" / "assess_ethernet_CartPole-v1.png").exists()
    again = _assess(tmp_path, capsys, *argv, "--cache", str(cache))  # loaded, not retrained
    assert "loaded from" in again["policy"]
    assert again["returns"]["clean"] == report["returns"]["clean"]


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["lte"], "PROFILE: condition: expected"),
        (["missing.json"], "no such file"),
        (["missing-trace.csv"], "no such file"),
        (["wifi-normal", "--env", "NoSuchEnv-v0"], "--env: expected a registered Gymnasium ID"),
        (["wifi-normal", "--policy", "nowhere.zip"], "--policy: expected an SB3 zip file"),
        (["wifi-normal", "--algo", "sac"], "--algo: algo: expected ppo or recurrent-ppo"),
        (["wifi-normal", "--step-ms", "0"], "--step-ms: expected a number in"),
    ],
)
def test_bad_input_is_a_usage_error_before_any_work(tmp_path, capsys, monkeypatch, argv, message):
    def no_work(*args, **kwargs):
        raise AssertionError("work started before the arguments were checked")

    monkeypatch.setattr(assess, "assess_network", no_work)
    out = tmp_path / "out"
    code = main(["profiles", "assess", *argv, "--out", str(out), "--no-progress"])
    assert code == 2
    err = capsys.readouterr().err
    assert message in err and len(err.strip().splitlines()) == 1
    assert not out.exists() or not list(out.iterdir())


def test_scheduled_chunks_take_the_delay_and_chunk_given(tmp_path, capsys):
    argv = ["wifi-normal", "--timesteps", "256", "--episodes", "1", "--ticks", "300"]
    report = _assess(
        tmp_path, capsys, *argv, "--cache", str(tmp_path / "cache"), "--delay", "4", "--chunk", "2"
    )
    assert (report["schedule"]["delay"], report["schedule"]["chunk"]) == (4, 2)
    assert report["schedule"]["source"] == "--delay/--chunk"
    assert "D=4, k=2" in report["compensations"]["scheduled"]


@pytest.mark.parametrize(("flag", "value"), [("--delay", "0"), ("--chunk", "-2")])
def test_a_bad_delay_or_chunk_is_refused_by_the_parser(tmp_path, capsys, flag, value):
    with pytest.raises(SystemExit) as exit_info:
        main(["profiles", "assess", "wifi-normal", flag, value, "--out", str(tmp_path)])
    assert exit_info.value.code == 2
    assert f"argument {flag}: expected an integer >= 1" in capsys.readouterr().err
