"""Task setups and input layouts of the CALF experiment."""

from __future__ import annotations

import pytest

from fleetgym.experiments.calf import conditions
from fleetgym.experiments.calf import setup as calf_setup


def test_layouts_come_from_the_training_network():
    setup = calf_setup.env_setup("CartPole-v1")
    assert setup.period_ms == pytest.approx(20.0)
    assert calf_setup.layout_for(conditions.REGIMES["net-aware"], setup) == calf_setup.InputLayout(
        False
    )
    # Fixed 50 ms each way on a 20 ms loop: obs and actions floor(2.5 + 0.5) = 3 ticks old
    # (the loop's half-period wait for the next tick of each clock), so k = 4, m = 3 + 3 + 1.
    delay = calf_setup.layout_for(conditions.REGIMES["delay-only+comp"], setup)
    assert (delay.history_length, delay.action_history_length) == (4, 7)
    clean = calf_setup.layout_for(conditions.REGIMES["baseline+comp"], setup)
    assert (clean.history_length, clean.action_history_length) == (1, 1)


def test_env_setup_rejects_bad_arguments():
    with pytest.raises(
        ValueError, match=r"algo: expected one of \('ppo', 'sac', 'td3', 'recurrent-ppo'\)"
    ):
        calf_setup.env_setup("CartPole-v1", algo="dqn")
    with pytest.raises(ValueError, match="step_ms: expected a finite number > 0"):
        calf_setup.env_setup("CartPole-v1", step_ms=0)
    with pytest.raises(ValueError, match="expected a registered Gymnasium ID"):
        calf_setup.env_setup("NoSuchEnv-v9")


def test_the_per_direction_timing_gives_the_older_layouts_and_reaches_the_envs():
    setup = calf_setup.env_setup("CartPole-v1", timing="per-direction")
    assert setup.shim_kwargs["timing"] == "per-direction"
    # Fixed 50 ms each way with a whole period per path: floor(50 / 20) = 2 ticks each way.
    delay = calf_setup.layout_for(conditions.REGIMES["delay-only+comp"], setup)
    assert (delay.history_length, delay.action_history_length) == (3, 5)
    env = calf_setup.make_condition_env(
        setup, conditions.resolve_condition("wifi-normal"), calf_setup.InputLayout(False)
    )
    assert env.get_wrapper_attr("timing").timing == "per-direction"
    env.close()
    with pytest.raises(ValueError, match="timing: expected one of"):
        calf_setup.env_setup("CartPole-v1", timing="whole-step")
