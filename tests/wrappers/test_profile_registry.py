"""A network profile registered from outside the library is reachable by name wherever a
profile is taken: the shim, ``gym.make("fleetgym/NetShim-v0")`` and ``make_robust_env``."""

from __future__ import annotations

import gymnasium as gym
import pytest

import fleetgym  # noqa: F401  (registers fleetgym/NetShim-v0)
from fleetgym.wrappers import (
    DEFAULT_PROFILE,
    FixedDelay,
    NetworkShimWrapper,
    get_profile,
    list_profiles,
    make_robust_env,
    register_profile,
)
from fleetgym.wrappers.profiles import _REGISTRY

STEP_MS = 20.0


@pytest.fixture
def toy_profile():
    """``"toy-two-ticks"``: 2 periods each way, registered for the test, removed afterwards."""
    profile = register_profile("toy-two-ticks", FixedDelay(2 * STEP_MS), description="a toy")
    yield profile
    _REGISTRY.pop("toy-two-ticks", None)


def test_a_registered_profile_is_used_by_name_everywhere(toy_profile):
    assert "toy-two-ticks" in list_profiles() and get_profile("toy-two-ticks") is toy_profile
    made = gym.make("fleetgym/NetShim-v0", env_id="CartPole-v1", profile="toy-two-ticks")
    made.reset(seed=0)
    ages = [made.step(0)[-1]["obs_age_steps"] for _ in range(6)]
    assert ages[-1] == 2  # a constant 2-tick uplink delay, once the first packet is in
    robust = make_robust_env("CartPole-v1", "toy-two-ticks")
    assert robust.unwrapped.spec.id == "CartPole-v1"
    assert robust.get_wrapper_attr("profile").name == "toy-two-ticks"
    with pytest.raises(ValueError, match="is registered"):
        register_profile("toy-two-ticks", FixedDelay(0.0))


def test_the_default_profile_is_one_name_for_every_entry():
    shim = NetworkShimWrapper(gym.make("CartPole-v1"))
    made = gym.make("fleetgym/NetShim-v0", env_id="CartPole-v1")
    robust = make_robust_env("CartPole-v1")
    names = {e.get_wrapper_attr("profile").name for e in (shim, made, robust)}
    assert names == {DEFAULT_PROFILE} == {"wifi-degraded"}
