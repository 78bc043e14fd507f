"""``fleetgym calf`` on the user's network (profile and trace files) and algorithm."""

from __future__ import annotations

import pytest

from fleetgym.cli import main as cli_main
from fleetgym.experiments.calf import conditions, hyperparams
from fleetgym.experiments.calf import setup as calf_setup
from fleetgym.wrappers import GaussianChannel, NetworkProfile
from fleetgym.wrappers.profiles import save_profile_file


@pytest.fixture
def net_files(tmp_path):
    channel = GaussianChannel(30.0, 5.0, 0.01)
    profile = save_profile_file(
        NetworkProfile("my-net", channel, channel), tmp_path / "my-net.json"
    )
    trace = tmp_path / "office.csv"
    trace.write_text("send_ms,delay_ms\n" + "".join(f"{i * 10},{5 + i % 7}\n" for i in range(500)))
    return profile, trace


def _calf(tmp_path, *argv):
    return cli_main(
        [
            "calf",
            "--timesteps",
            "256",
            "--episodes",
            "1",
            "--no-ablation",
            "--variants",
            "",
            "--out",
            str(tmp_path / "out"),
            "--no-progress",
            *argv,
        ]
    )


def test_profile_and_trace_files_are_regimes_and_conditions(tmp_path, capsys, net_files):
    profile, trace = net_files
    code = _calf(
        tmp_path,
        "--regimes",
        f"baseline,{profile}+comp,{trace}",
        "--conditions",
        f"sim-clean,{profile},{trace}",
    )
    assert code == 0
    out = capsys.readouterr().out
    assert f"| {profile}+comp |" in out and f"| {trace} |" in out
    assert f"gap {profile}" in out and "hyperparameters: RL Zoo ppo.yml CartPole-v1" in out


def test_a_trace_file_is_replayed_both_ways(net_files):
    _, trace = net_files
    condition = conditions.resolve_condition(str(trace))
    shim_profile = condition.shim_kwargs()["profile"]
    assert shim_profile.uplink is shim_profile.downlink and shim_profile.name == "office"


@pytest.mark.parametrize("flag", ["--regimes", "--conditions"])
@pytest.mark.parametrize("name", ["nowhere.json", "nowhere.csv", "no/such/trace"])
def test_a_missing_file_is_a_usage_error_before_training(tmp_path, capsys, monkeypatch, flag, name):
    from fleetgym.experiments.calf import experiment

    def no_training(*args, **kwargs):
        raise AssertionError("training started before the arguments were checked")

    monkeypatch.setattr(experiment, "train_regime", no_training)
    assert _calf(tmp_path, flag, name) == 2
    err = capsys.readouterr().err
    assert "no such file" in err and len(err.strip().splitlines()) == 1
    out = tmp_path / "out"
    assert not out.exists() or not list(out.iterdir())


def test_a_malformed_profile_file_is_a_usage_error(tmp_path, capsys):
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    assert _calf(tmp_path, "--conditions", str(bad)) == 2
    assert "bad.json" in capsys.readouterr().err


def test_sac_on_a_discrete_env_is_a_usage_error(tmp_path, capsys):
    assert _calf(tmp_path, "--algo", "sac", "--regimes", "baseline") == 2
    err = capsys.readouterr().err
    assert "algo: expected ppo or recurrent-ppo for CartPole-v1's Discrete action space" in err


def test_the_zoo_table_and_the_defaults():
    setup = calf_setup.env_setup("Pendulum-v1", algo="td3")
    assert setup.hyperparams_source == "RL Zoo td3.yml Pendulum-v0"
    assert setup.hyperparams["action_noise"] == ("normal", 0.1) and setup.n_envs == 1
    hopper = calf_setup.env_setup("Hopper-v5", algo="ppo")
    assert hopper.hyperparams_source == "RL Zoo ppo.yml Hopper-v4; without its VecNormalize"
    other = calf_setup.env_setup("Acrobot-v1")
    assert (other.algo, other.hyperparams, other.hyperparams_source) == ("ppo", {}, "SB3 defaults")
    cartpole = calf_setup.env_setup("CartPole-v1")  # the study's tuned PPO, unchanged
    assert cartpole.hyperparams["n_steps"] == 32 and cartpole.n_envs == 8
    for (algo, _), (_, values, _) in hyperparams.ZOO.items():
        assert algo in hyperparams.ALGOS and "n_envs" in values


@pytest.mark.parametrize(
    ("env", "algo"),
    [
        ("Pendulum-v1", "sac"),
        ("Pendulum-v1", "td3"),
        ("CartPole-v1", "recurrent-ppo"),
        pytest.param("Pendulum-v1", "ppo", marks=pytest.mark.slow),  # 4096 steps a rollout
    ],
)
def test_every_algorithm_trains_and_is_evaluated(tmp_path, capsys, env, algo):
    code = _calf(
        tmp_path,
        "--env",
        env,
        "--algo",
        algo,
        "--timesteps",
        "128",
        "--regimes",
        "baseline",
        "--conditions",
        "sim-clean",
    )
    assert code == 0
    out = capsys.readouterr().out
    assert out.startswith(f"# CALF on {env}") and f"\n{algo} (" in out
