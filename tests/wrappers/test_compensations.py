"""The compensations as objects with one registry: make_robust_env takes a name or an
object, a new compensation registers without touching make_robust_env, and the scheduled
one chooses D and k from the network."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

import gymnasium as gym
import pytest

from fleetgym.wrappers import ScheduledChunks, StallRule, choose_schedule, make_robust_env
from fleetgym.wrappers.compensations import (
    COMPENSATION_REGISTRY,
    Compensation,
    NetworkContext,
    ScheduledCompensation,
    register_compensation,
    resolve_compensation,
)


def controller(obs: Any) -> int:
    return int(obs[2] + 0.5 * obs[3] + 0.05 * obs[1] > 0)


def test_every_named_stack_is_a_registered_class():
    assert set(COMPENSATION_REGISTRY) == {"history", "augmented", "predictive", "scheduled"}
    comp = resolve_compensation("history", history_length=3)
    assert comp.name == "history" and comp.history_length == 3  # type: ignore[attr-defined]
    with pytest.raises(ValueError, match="compensation: expected one of"):
        resolve_compensation("telepathy")
    with pytest.raises(TypeError, match="compensation"):
        resolve_compensation(3)


def test_make_robust_env_builds_scheduled_chunks_with_d_and_k_from_the_network():
    env = make_robust_env(
        "CartPole-v1",
        "wifi-degraded",
        compensation=ScheduledCompensation("true-dynamics", policy=controller),
    )
    chunks = env
    assert isinstance(chunks, ScheduledChunks)
    chosen = choose_schedule("wifi-degraded", 20.0)
    assert (chunks.delay, chunks.chunk) == (chosen.delay, chosen.chunk)
    obs, _ = env.reset(seed=0)
    assert obs.shape == (4,)  # the env's own observation: a clean policy runs on it
    total, done = 0.0, False
    while not done:
        obs, reward, term, trunc, _ = env.step(controller(obs))
        total, done = total + float(reward), term or trunc
    assert total > 0
    # Without a policy the packets carry one action each.
    single = make_robust_env(
        "CartPole-v1", "wifi-degraded", compensation="scheduled", predictor="true-dynamics"
    )
    assert single.get_wrapper_attr("chunk") == 1


def test_scheduled_compensation_refusals():
    with pytest.raises(ValueError, match="predictor: expected a predictor with"):
        make_robust_env("CartPole-v1", "wifi-normal", compensation="scheduled")
    with pytest.raises(ValueError, match="predictor: expected None with a Compensation"):
        make_robust_env(
            "CartPole-v1",
            compensation=ScheduledCompensation("true-dynamics"),
            predictor="true-dynamics",
        )
    with pytest.raises(ValueError, match="stall: expected 'hold' or 'predict'"):
        make_robust_env(
            "CartPole-v1",
            "wifi-normal",
            compensation="scheduled",
            predictor="true-dynamics",
            stall=StallRule("safe", safe_action=0),
        )
    # 1.x keywords name their 2.0 place.
    with pytest.raises(TypeError, match=r"stall_features.*HistoryCompensation"):
        make_robust_env(
            "CartPole-v1",
            "wifi-normal",
            compensation="scheduled",
            predictor="true-dynamics",
            stall_features=True,
        )
    with pytest.raises(TypeError, match=r"predict_kwargs.*ScheduledCompensation"):
        make_robust_env("CartPole-v1", predict_kwargs={"policy": controller})
    with pytest.raises(TypeError, match=r"shim=\{'delivery'"):
        make_robust_env("CartPole-v1", delivery="latest")


def test_a_new_compensation_registers_and_plugs_in():
    seen: list[NetworkContext] = []

    @dataclass(frozen=True)
    class Identity(Compensation):
        name: ClassVar[str] = "identity-test"

        def build(self, env: gym.Env[Any, Any], network: NetworkContext) -> gym.Env[Any, Any]:
            seen.append(network)
            return env

    register_compensation(Identity)
    try:
        env = make_robust_env("CartPole-v1", "wifi-normal", compensation=Identity())
        assert env.reset(seed=0)[0].shape == (4,)
        assert seen[0].step_ms == 20.0 and seen[0].profile == "wifi-normal"
        by_name = make_robust_env("CartPole-v1", "ethernet", compensation="identity-test")
        assert by_name.reset(seed=0)[0].shape == (4,)
        with pytest.raises(ValueError, match="registered already"):

            @register_compensation
            @dataclass(frozen=True)
            class Other(Compensation):
                name: ClassVar[str] = "identity-test"

    finally:
        COMPENSATION_REGISTRY.pop("identity-test", None)
    with pytest.raises(TypeError):
        register_compensation(int)  # type: ignore[arg-type]


def test_a_scheduled_object_with_its_own_d_and_k():
    env = make_robust_env(
        "CartPole-v1",
        "wifi-normal",
        compensation=ScheduledCompensation("true-dynamics", policy=controller, delay=5, chunk=2),
    )
    assert (env.get_wrapper_attr("delay"), env.get_wrapper_attr("chunk")) == (5, 2)
