"""Plumbing tests of the CALF experiment (fleetgym.agents.calf, experiments/calf) at tiny budgets.

No learning-quality thresholds here: the real experiment is ``fleetgym calf``.
"""

from __future__ import annotations

import csv
import math

import pytest

from fleetgym.agents import calf
from fleetgym.cli import main as cli_main
from fleetgym.experiments.calf import run_calf

# One PPO update (8 envs x 32 steps) and a single epoch keep each training to a second.
TINY = {"n_epochs": 1}


def tiny_setup(env_id: str = "CartPole-v1", **kw):
    setup = calf.env_setup(env_id, **kw)
    params = dict(setup.hyperparams, **TINY)
    if setup.algo == "recurrent-ppo":
        params.update(n_steps=16, batch_size=32)
    import dataclasses

    return dataclasses.replace(setup, hyperparams=params)


def test_conditions_build_shim_arguments():
    cond = calf.CONDITIONS["fixed-50ms"]
    kwargs = cond.shim_kwargs()
    assert kwargs["uplink"].mean_ms == 50.0 and kwargs["uplink"].std_ms == 0.0
    assert calf.CONDITIONS["wifi-normal"].shim_kwargs() == {"profile": "wifi-normal"}
    assert calf.CONDITIONS["degraded-latest"].shim_kwargs()["delivery"] == "latest"
    with pytest.raises(ValueError, match="expected a profile or uplink/downlink"):
        calf.NetworkCondition("both", profile="perfect", uplink=(1.0, 0.0, 0.0, 0.0))
    with pytest.raises(ValueError, match="expected a profile or uplink/downlink"):
        calf.NetworkCondition("neither")
    with pytest.raises(ValueError, match="condition: expected one of"):
        calf.resolve_condition("carrier-pigeon")
    trace = calf.shipped_trace_condition()
    assert trace is not None and calf.resolve_condition(trace.name).profile == trace.profile


def test_layouts_come_from_the_training_network():
    setup = calf.env_setup("CartPole-v1")
    assert setup.period_ms == pytest.approx(20.0)
    assert calf.layout_for(calf.REGIMES["net-aware"], setup) == calf.InputLayout(False)
    # Fixed 50 ms each way on a 20 ms loop: obs 2 ticks old, actions 2 ticks old.
    delay = calf.layout_for(calf.REGIMES["delay-only+comp"], setup)
    assert (delay.history_length, delay.action_history_length) == (3, 5)
    clean = calf.layout_for(calf.REGIMES["baseline+comp"], setup)
    assert (clean.history_length, clean.action_history_length) == (1, 1)


def test_env_setup_rejects_bad_arguments():
    with pytest.raises(ValueError, match="algo: expected 'ppo' or 'recurrent-ppo'"):
        calf.env_setup("CartPole-v1", algo="dqn")
    with pytest.raises(ValueError, match="step_ms: expected a positive number"):
        calf.env_setup("CartPole-v1", step_ms=0)
    with pytest.raises(ValueError, match="expected a registered Gymnasium ID"):
        calf.env_setup("NoSuchEnv-v9")


@pytest.mark.parametrize("regime", calf.DEFAULT_REGIMES + ("net-aware-mix+comp",))
def test_each_cartpole_regime_trains_and_evaluates(regime):
    setup = tiny_setup()
    policy = calf.train_regime(setup, calf.REGIMES[regime], seed=0, total_timesteps=256)
    assert policy.timesteps >= 256
    rec = calf.evaluate_policy(setup, policy, calf.CONDITIONS["wifi-degraded"], 3, seed=1)
    assert rec.n_episodes == 3 and rec.regime == regime and rec.condition == "wifi-degraded"
    assert 1.0 <= rec.mean_return <= 500.0


def test_minigrid_recurrent_regime_trains_and_evaluates():
    setup = tiny_setup("MiniGrid-Empty-5x5-v0")
    assert setup.algo == "recurrent-ppo" and setup.period_ms == 20.0
    policy = calf.train_regime(
        setup, calf.REGIMES["net-aware+comp"], seed=0, total_timesteps=128, n_envs=2
    )
    rec = calf.evaluate_policy(setup, policy, calf.CONDITIONS["wifi-normal"], 2, seed=0)
    assert rec.n_episodes == 2 and 0.0 <= rec.mean_return <= 1.0


def test_aggregate_means_seed_spread_and_gap():
    rec = calf.EvalRecord
    records = [
        rec("E", "r", 0, "sim-clean", 400.0, 0.0, 5),
        rec("E", "r", 1, "sim-clean", 500.0, 0.0, 5),
        rec("E", "r", 0, "wifi-normal", 200.0, 0.0, 5),
        rec("E", "r", 1, "wifi-normal", 400.0, 0.0, 5),
        rec("E", "r", 0, "jitter-only", 100.0, 0.0, 5, "ablation"),
    ]
    cells = {(c.table, c.condition): c for c in calf.aggregate(records)}
    wifi = cells[("grid", "wifi-normal")]
    assert (wifi.mean, wifi.std, wifi.n_seeds) == (300.0, 100.0, 2)
    assert wifi.gap == pytest.approx(1 - 300 / 450)
    assert wifi.gap_std == pytest.approx(0.15)  # per-seed gaps 0.5 and 0.2
    assert cells[("grid", "sim-clean")].gap == 0.0
    # Ablation rows borrow the grid's clean return of the same regime and seed.
    assert cells[("ablation", "jitter-only")].gap == pytest.approx(0.75)


def test_run_calf_writes_table_csv_and_png(tmp_path):
    results = run_calf(
        "CartPole-v1",
        quick=True,
        out_dir=tmp_path,
        regimes=["baseline", "net-aware+comp"],
        timesteps=256,
        episodes=2,
        variants=["wifi-degraded", "degraded-corr0.9"],
        progress=False,
    )
    names = sorted(p.name for p in results.files)
    assert names == [
        "calf_CartPole-v1.md",
        "calf_CartPole-v1.png",
        "calf_CartPole-v1_records.csv",
        "calf_CartPole-v1_summary.csv",
    ]
    text = (tmp_path / "calf_CartPole-v1.md").read_text()
    assert "| regime | sim-clean | ethernet | wifi-normal | wifi-degraded |" in text
    assert "## Ablation" in text and "## wifi-degraded variants" in text
    with (tmp_path / "calf_CartPole-v1_records.csv").open() as fh:
        rows = list(csv.DictReader(fh))
    grid = [r for r in rows if r["table"] == "grid"]
    assert len(grid) == 2 * 5  # 2 regimes x (4 conditions + the shipped trace)
    assert {r["table"] for r in rows} == {"grid", "ablation", "degraded"}
    assert (tmp_path / "calf_CartPole-v1.png").read_bytes()[:4] == b"\x89PNG"
    cell = results.cell("baseline", "sim-clean")
    assert cell.n_seeds == 1 and not math.isnan(cell.mean)


def test_cli_calf_quick(tmp_path, capsys):
    code = cli_main(
        [
            "calf",
            "--quick",
            "--timesteps",
            "256",
            "--episodes",
            "2",
            "--regimes",
            "baseline",
            "--conditions",
            "sim-clean,wifi-normal",
            "--no-ablation",
            "--variants",
            "",
            "--out",
            str(tmp_path),
            "--no-progress",
        ]
    )
    assert code == 0
    out = capsys.readouterr().out
    assert "# CALF on CartPole-v1" in out and "wrote" in out
    assert (tmp_path / "calf_CartPole-v1_summary.csv").exists()


def test_run_calf_rejects_bad_arguments(tmp_path):
    with pytest.raises(ValueError, match="seeds: expected a positive count"):
        run_calf(seeds=0, out_dir=tmp_path, progress=False)
    with pytest.raises(TypeError, match="seeds: expected a count or a sequence"):
        run_calf(seeds=True, out_dir=tmp_path, progress=False)
    with pytest.raises(ValueError, match="condition: expected one of"):
        run_calf(regimes=["nowhere+comp"], out_dir=tmp_path, progress=False)
    with pytest.raises(ValueError, match="episodes: expected a positive int"):
        run_calf(episodes=0, out_dir=tmp_path, progress=False)


def test_cli_calf_bad_arguments_end_with_one_line(tmp_path, capsys):
    code = cli_main(["calf", "--seeds", "0", "--out", str(tmp_path), "--no-progress"])
    assert code == 2
    assert "seeds: expected a positive count" in capsys.readouterr().err
