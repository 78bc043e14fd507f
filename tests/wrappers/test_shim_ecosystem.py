"""The shim around the envs users already have: Atari, MiniGrid, classic control without dt;
discoverable arguments; spec round trips; episode facts in the final step's info."""

from __future__ import annotations

import json
import subprocess
import sys
import warnings

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.envs.registration import EnvSpec

import fleetgym
from fleetgym.errors import MissingArgumentError
from fleetgym.wrappers import NetworkProfile, NetworkShimWrapper, get_profile
from fleetgym.wrappers import profiles as profiles_module
from fleetgym.wrappers.channels import GaussianChannel
from fleetgym.wrappers.shim_config import ATARI_FPS, control_period, infer_step_ms


def find_shim(env: gym.Env) -> NetworkShimWrapper:
    while not isinstance(env, NetworkShimWrapper):
        env = env.env
    return env


def run_episode_steps(env: gym.Env, n: int, seed: int = 0) -> dict:
    env.reset(seed=seed)
    info: dict = {}
    for _ in range(n):
        *_, terminated, truncated, info = env.step(env.action_space.sample())
        if terminated or truncated:
            break
    return info


# -- control period ---------------------------------------------------------------------


def test_ale_period_is_frameskip_over_60_hz():
    pytest.importorskip("ale_py")
    env = gym.make("fleetgym/NetShim-v0", env_id="ALE/Pong-v5", profile="wifi-normal")
    assert find_shim(env).step_ms == pytest.approx(4 * 1000 / ATARI_FPS)  # 66.7 ms
    env.action_space.seed(0)
    info = run_episode_steps(env, 5)
    assert find_shim(env).profile.name == "wifi-normal" and info["obs_age_steps"] >= 0
    env.close()


def test_ale_period_counts_a_frame_skipping_wrapper():
    pytest.importorskip("ale_py")
    from gymnasium.wrappers import AtariPreprocessing

    env = gym.make("fleetgym/NetShim-v0", env_id="PongNoFrameskip-v4", profile="perfect")
    assert find_shim(env).step_ms == pytest.approx(1000 / ATARI_FPS)
    inner = AtariPreprocessing(gym.make("ALE/Pong-v5", frameskip=1), frame_skip=4)
    assert infer_step_ms(inner) == pytest.approx(4000 / ATARI_FPS)
    # A stochastic frameskip (v4 IDs: uniform in [2, 5)) counts as its mean, 3 frames.
    assert infer_step_ms(gym.make("Pong-v4")) == pytest.approx(3000 / ATARI_FPS)


def test_minigrid_takes_render_fps_with_a_warning():
    pytest.importorskip("minigrid")
    with pytest.warns(UserWarning, match="render_fps.*pass step_ms"):
        env = gym.make("fleetgym/NetShim-v0", env_id="MiniGrid-Empty-5x5-v0", profile="ethernet")
    assert find_shim(env).step_ms == pytest.approx(100.0)  # MiniGrid: render_fps 10
    env.action_space.seed(0)
    assert run_episode_steps(env, 5)["obs_age_steps"] == 0
    assert find_shim(env).profile.name == "ethernet"
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # an explicit period: no warning
        gym.make("fleetgym/NetShim-v0", env_id="MiniGrid-Empty-5x5-v0", step_ms=250.0)


def test_mountain_car_continuous_under_the_shim():
    with pytest.warns(UserWarning, match="render_fps"):
        env = gym.make("fleetgym/NetShim-v0", env_id="MountainCarContinuous-v0", info="full")
    assert find_shim(env).step_ms == pytest.approx(1000 / 30)
    assert env.spec.reward_threshold == 90.0 and env.spec.max_episode_steps == 999
    env.action_space.seed(0)
    info = run_episode_steps(env, 5)
    assert info["applied_action"].shape == (1,)


def test_control_period_order():
    assert control_period(gym.make("Pendulum-v1")) == (pytest.approx(50.0), "dt")
    assert control_period(gym.make("CartPole-v1")) == (pytest.approx(20.0), "tau")
    assert control_period(gym.make("MountainCar-v0")) == (pytest.approx(1000 / 30), "render_fps")


# -- discoverable arguments --------------------------------------------------------------


def test_missing_env_id_lists_the_arguments():
    with pytest.raises(MissingArgumentError, match=r"(?s)env_id: expected.*\n  profile=") as caught:
        gym.make("fleetgym/NetShim-v0")
    assert isinstance(caught.value, TypeError)
    for argument in ("env_kwargs", "step_ms", "delivery", "register_shim_env"):
        assert argument in str(caught.value)


def test_spec_carries_the_inner_threshold_and_limit():
    env = gym.make("fleetgym/NetShim-v0", env_id="CartPole-v1", profile="wifi-normal")
    assert env.spec.reward_threshold == 475.0 and env.spec.max_episode_steps == 500


@pytest.mark.parametrize(
    "profile",
    [
        "wifi-normal",
        ["ethernet", "wifi-normal"],
        ("perfect", "wifi-degraded"),
        get_profile("wifi-normal"),
        [get_profile("ethernet"), "wifi-normal"],
    ],
    ids=["name", "list", "tuple", "registered-object", "mixed"],
)
def test_spec_json_round_trip_for_every_profile_form(profile):
    env = gym.make("fleetgym/NetShim-v0", env_id="CartPole-v1", profile=profile)
    for rebuilt in (gym.make(env.spec), gym.make(EnvSpec.from_json(env.spec.to_json()))):
        assert rebuilt.spec == env.spec
        assert find_shim(rebuilt).profiles == find_shim(env).profiles
        for e in (env, rebuilt):
            e.reset(seed=4)
        assert [env.step(t % 2)[4]["obs_age_steps"] for t in range(8)] == [
            rebuilt.step(t % 2)[4]["obs_age_steps"] for t in range(8)
        ]


def test_unregistered_profile_object_round_trips_in_memory(monkeypatch):
    lab = NetworkProfile("lab-unregistered", GaussianChannel(5, 1), GaussianChannel(5, 1))
    env = gym.make("fleetgym/NetShim-v0", env_id="CartPole-v1", profile=lab)
    assert find_shim(gym.make(env.spec)).profile == lab
    # Registered for this test only (the registry is process-wide).
    registered = NetworkProfile(
        "lab-registered-ecosystem", GaussianChannel(5, 1), GaussianChannel(5, 1)
    )
    monkeypatch.setitem(profiles_module._REGISTRY, registered.name, registered)
    named = gym.make(
        "fleetgym/NetShim-v0",
        env_id="CartPole-v1",
        profile=get_profile("lab-registered-ecosystem"),
    )
    assert json.loads(named.spec.to_json())["kwargs"]["profile"] == "lab-registered-ecosystem"


def test_convenience_id_needs_no_kwargs():
    env_id = fleetgym.register_shim_env("CartPole-v1", "wifi-normal")
    assert env_id == "fleetgym/NetShim-CartPole-v1-wifi-normal-v0"
    assert fleetgym.register_shim_env("CartPole-v1", "wifi-normal") == env_id  # idempotent
    env = gym.make(env_id)
    assert env.spec.reward_threshold == 475.0 and env.spec.max_episode_steps == 500
    assert find_shim(env).profile.name == "wifi-normal"
    assert gym.make(EnvSpec.from_json(env.spec.to_json())).spec == env.spec
    with pytest.raises(ValueError, match="expected arguments matching"):
        fleetgym.register_shim_env("CartPole-v1", "wifi-normal", delivery="latest")


def layers(env: gym.Env) -> list[str]:
    names = []
    while isinstance(env, gym.Wrapper):
        names.append(type(env).__name__)
        env = env.env
    return names


def test_the_id_checks_and_enforces_order_once():
    """The entry point's inner env has Gymnasium's checker and order enforcing: the IDs add
    no second pair around the shim, and their specs rebuild the same stack."""
    made = gym.make("fleetgym/NetShim-v0", env_id="CartPole-v1", profile="wifi-normal")
    convenience = gym.make(fleetgym.register_shim_env("CartPole-v1", "wifi-normal"))
    assert layers(made) == [
        "NetworkShimWrapper",
        "TimeLimit",
        "OrderEnforcing",
        "PassiveEnvChecker",
    ]
    # The step limit sits outside the shim in the convenience ID and in rebuilt specs.
    rebuilt_stack = ["TimeLimit", "NetworkShimWrapper", "OrderEnforcing", "PassiveEnvChecker"]
    assert layers(convenience) == rebuilt_stack
    for env in (made, convenience):
        assert env.spec.disable_env_checker is True and env.spec.order_enforce is False
        for rebuilt in (gym.make(env.spec), gym.make(EnvSpec.from_json(env.spec.to_json()))):
            assert layers(rebuilt) == rebuilt_stack and rebuilt.spec == env.spec
        with pytest.raises(gym.error.ResetNeeded):
            gym.make(env.spec).step(0)
    # A shim put around an env by hand keeps that env's own flags.
    by_hand = NetworkShimWrapper(gym.make("CartPole-v1"), "wifi-normal")
    assert by_hand.spec.disable_env_checker is False and by_hand.spec.order_enforce is True


def test_the_id_still_takes_gymnasiums_checker_and_order_switches():
    checked = gym.make(
        "fleetgym/NetShim-v0",
        env_id="CartPole-v1",
        profile="wifi-normal",
        disable_env_checker=False,
    )
    assert layers(checked)[:2] == ["PassiveEnvChecker", "NetworkShimWrapper"]
    assert checked.spec.disable_env_checker is False
    assert layers(gym.make(checked.spec))[:3] == [
        "TimeLimit",
        "PassiveEnvChecker",
        "NetworkShimWrapper",
    ]
    checked.reset(seed=0)
    assert checked.step(1)[4]["obs_age_steps"] >= 0
    # Rendering before the first reset is refused by the inner env's order enforcing.
    rendering = gym.make(
        "fleetgym/NetShim-v0", env_id="CartPole-v1", profile="perfect", render_mode="rgb_array"
    )
    with pytest.raises(gym.error.ResetNeeded):
        rendering.render()


# -- episode facts in the final step's info ----------------------------------------------


def test_final_step_info_carries_profile_and_network_statistics():
    env = gym.make(
        "fleetgym/NetShim-v0",
        env_id="CartPole-v1",
        profile=["wifi-normal", "wifi-degraded"],
        info="full",
    )
    env.reset(seed=1)
    info: dict = {}
    terminated = truncated = False
    while not (terminated or truncated):
        *_, terminated, truncated, info = env.step(0)
    shim = find_shim(env)
    assert info["profile"] == shim.profile.name
    assert info["network"] == shim.network_stats()
    assert (
        info["network"]["uplink_lost"] + info["network"]["downlink_lost"] == (info["lost_packets"])
    )


def test_sb3_monitor_reads_the_profile_at_episode_end(tmp_path):
    from stable_baselines3.common.monitor import Monitor

    shim = NetworkShimWrapper(gym.make("CartPole-v1"), ["ethernet", "wifi-normal"])
    env = Monitor(shim, str(tmp_path / "m"), info_keywords=("profile",))
    env.reset(seed=0)
    for _ in range(200):
        *_, terminated, truncated, info = env.step(1)
        if terminated or truncated:
            env.reset()
    env.close()
    rows = (tmp_path / "m.monitor.csv").read_text().splitlines()[2:]
    assert rows and all(r.split(",")[-1] in ("ethernet", "wifi-normal") for r in rows)


@pytest.mark.timeout(120)
def test_import_fleetgym_resolves_ale_and_minigrid_ids_in_a_fresh_process():
    pytest.importorskip("ale_py")
    pytest.importorskip("minigrid")
    code = (
        "import sys, gymnasium as gym, fleetgym\n"
        "assert 'ale_py' not in sys.modules and 'minigrid' not in sys.modules\n"
        "env = gym.make('fleetgym/NetShim-v0', env_id='ALE/Pong-v5', profile='perfect')\n"
        "print(env.observation_space.shape)\n"
        "env = gym.make('fleetgym/NetShim-v0', env_id='MiniGrid-Empty-5x5-v0', step_ms=50.0)\n"
        "print(env.action_space)\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=100, check=True
    )
    assert "(210, 160, 3)" in out.stdout and "Discrete(7)" in out.stdout


def test_vector_shim_infers_the_period_the_same_way():
    from fleetgym.wrappers import NetworkShimVectorWrapper

    with pytest.warns(UserWarning, match="render_fps"):
        venv = NetworkShimVectorWrapper(
            gym.make_vec("MountainCarContinuous-v0", 2, vectorization_mode="sync"), "perfect"
        )
    assert venv.step_ms == pytest.approx(1000 / 30)
    obs, _ = venv.reset(seed=0)
    assert np.asarray(obs).shape == (2, 2)
