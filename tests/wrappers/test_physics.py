"""Tests of fleetgym.wrappers.physics: per-episode physics, seeding, MuJoCo, the shim, bad input."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest

from fleetgym.wrappers import NetworkShimWrapper, PhysicsRandomizationWrapper

CARTPOLE_RANGES = {"length": (0.5, 2.0), "masspole": (0.5, 3.0), "masscart": (0.5, 2.0)}
NOMINAL = {"length": 0.5, "masspole": 0.1, "masscart": 1.0}


def _cartpole(ranges=CARTPOLE_RANGES):
    return PhysicsRandomizationWrapper(gym.make("CartPole-v1"), ranges)


def test_cartpole_values_are_in_range_recorded_and_derived_ones_follow():
    env = _cartpole()
    seen = []
    for seed in range(20):
        _, info = env.reset(seed=seed)
        physics = info["physics"]
        base = env.unwrapped
        for name, (low, high) in CARTPOLE_RANGES.items():
            assert NOMINAL[name] * low <= physics[name] <= NOMINAL[name] * high
            assert getattr(base, name) == physics[name]
        assert base.total_mass == pytest.approx(base.masspole + base.masscart, rel=1e-15)
        assert base.polemass_length == pytest.approx(base.masspole * base.length, rel=1e-15)
        seen.append(physics["length"])
    # 20 uniform draws on [0.25, 1.0]: all distinct (a constant would mean no draw).
    assert len(set(seen)) == 20


def test_the_physics_reaches_the_dynamics():
    """A heavier, longer pole changes the next state the env computes from the same state."""
    a = _cartpole({"length": 1.0, "masspole": 1.0})
    b = _cartpole({"length": 3.0, "masspole": 5.0})
    obs_a, _ = a.reset(seed=3)
    obs_b, _ = b.reset(seed=3)
    np.testing.assert_array_equal(obs_a, obs_b)  # the same start state
    assert not np.allclose(a.step(1)[0], b.step(1)[0])


def test_same_seed_same_physics_and_unseeded_resets_continue_the_stream():
    first, second = _cartpole(), _cartpole()
    draws = [first.reset(seed=7)[1]["physics"], first.reset()[1]["physics"]]
    again = [second.reset(seed=7)[1]["physics"], second.reset()[1]["physics"]]
    assert draws == again
    assert draws[0] != draws[1]
    assert first.reset(seed=8)[1]["physics"] != draws[0]


def test_factors_do_not_compound_across_episodes():
    env = _cartpole({"masspole": (2.0, 2.0)})
    for seed in (None, 1, None):
        env.reset(seed=seed)
        assert env.unwrapped.masspole == pytest.approx(0.2)
    env.close()
    assert env.unwrapped.masspole == pytest.approx(0.1)  # nominal restored


def test_composes_with_the_shims_profile_mix_on_independent_streams():
    env = NetworkShimWrapper(_cartpole(), profile=["ethernet", "wifi-normal"])
    pairs = [(env.reset(seed=s)[1]) for s in range(30)]
    profiles = {info["profile"] for info in pairs}
    assert profiles == {"ethernet", "wifi-normal"}
    # The shim draws the profile from a stream of its own: the same seeds without the
    # physics draw give the same profiles.
    plain = NetworkShimWrapper(gym.make("CartPole-v1"), profile=["ethernet", "wifi-normal"])
    assert [plain.reset(seed=s)[1]["profile"] for s in range(30)] == [
        info["profile"] for info in pairs
    ]
    # ... and the physics of a seed does not depend on the shim around it.
    alone = _cartpole()
    assert [alone.reset(seed=s)[1]["physics"] for s in range(30)] == [
        info["physics"] for info in pairs
    ]


def test_make_rebuilds_the_wrapper_from_the_spec():
    env = _cartpole()
    rebuilt = gym.make(env.spec)
    assert rebuilt.reset(seed=4)[1]["physics"] == env.reset(seed=4)[1]["physics"]


def test_mujoco_masses_friction_and_gear_are_drawn_and_nominal_restored_first():
    pytest.importorskip("mujoco")
    env = PhysicsRandomizationWrapper(
        gym.make("Hopper-v5"),
        {
            "body_mass": (0.5, 1.5),
            "geom_friction:foot_geom": (2.0, 2.0),
            "actuator_gear": (0.8, 1.2),
        },
    )
    model = env.unwrapped.model
    nominal_mass = model.body_mass.copy()
    nominal_gear = model.actuator_gear[:, 0].copy()
    foot = model.geom("foot_geom").id
    nominal_foot = float(model.geom_friction[foot, 0])
    for seed in range(3):
        _, info = env.reset(seed=seed)
        ratio = model.body_mass[1:] / nominal_mass[1:]  # body 0 is the world (mass 0)
        assert np.all((ratio >= 0.5) & (ratio <= 1.5))
        np.testing.assert_array_equal(info["physics"]["body_mass"], model.body_mass)
        assert model.geom_friction[foot, 0] == pytest.approx(2.0 * nominal_foot)
        gear = model.actuator_gear[:, 0] / nominal_gear
        assert np.all((gear >= 0.8) & (gear <= 1.2))
    env.close()
    np.testing.assert_array_equal(model.body_mass, nominal_mass)
    np.testing.assert_array_equal(model.actuator_gear[:, 0], nominal_gear)


@pytest.mark.parametrize(
    ("ranges", "error", "match"),
    [
        ({"masspole": (-1.0, 1.0)}, ValueError, r"ranges\['masspole'\]: expected factors > 0"),
        ({"masscart": (0.0, 1.0)}, ValueError, r"ranges\['masscart'\]: expected factors > 0"),
        ({"length": (2.0, 1.0)}, ValueError, r"ranges\['length'\]: expected low <= high"),
        ({"length": (1.0, float("nan"))}, ValueError, r"ranges\['length'\]"),
        ({"pole_colour": (1.0, 2.0)}, ValueError, r"unknown parameter 'pole_colour'.*CartPole"),
        ({"body_mass": (1.0, 2.0)}, ValueError, r"unknown parameter 'body_mass'"),
        ({"length": "long"}, TypeError, r"ranges\['length'\]"),
        ({"length": (1.0, 2.0, 3.0)}, TypeError, r"ranges\['length'\]"),
        ({}, ValueError, "ranges: expected a non-empty mapping"),
        ([("length", (1, 2))], TypeError, "ranges: expected a non-empty mapping"),
    ],
)
def test_bad_ranges_name_the_parameter(ranges, error, match):
    with pytest.raises(error, match=match):
        _cartpole(ranges)


def test_unknown_mujoco_element_and_unsupported_env():
    pytest.importorskip("mujoco")
    with pytest.raises(ValueError, match="no body named 'tail'"):
        PhysicsRandomizationWrapper(gym.make("Hopper-v5"), {"body_mass:tail": (1.0, 2.0)})
    with pytest.raises(ValueError, match="unknown parameter 'length' for Hopper-v5"):
        PhysicsRandomizationWrapper(gym.make("Hopper-v5"), {"length": (1.0, 2.0)})
    with pytest.raises(TypeError, match="env: expected a CartPole or MuJoCo env"):
        PhysicsRandomizationWrapper(gym.make("Pendulum-v1"), {"m": (1.0, 2.0)})
