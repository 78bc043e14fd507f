"""Per-workload defaults of the scheduling env: the table, derived defaults, overrides."""

from __future__ import annotations

import pytest

from fleetgym.errors import UnknownWorkloadError
from fleetgym.meta_env.presets import (
    SCHEDULING_DEFAULTS,
    SchedulingDefaults,
    scheduling_defaults,
)


def test_the_table_is_served_and_other_workloads_are_derived():
    assert scheduling_defaults("CartPole-v1") is SCHEDULING_DEFAULTS["CartPole-v1"]["fast"]
    assert scheduling_defaults("CartPole-v1", "paper").target_return == 475.0
    hopper = scheduling_defaults("Hopper-v5")
    assert hopper.learner_overrides == {"minibatch_size": 256} and hopper.budget == 0.003
    atari = scheduling_defaults("QbertNoFrameskip-v4")
    assert atari.pricing == "aci" and atari.learner_speed_factor == 10.0
    assert atari.budget is None and atari.penalty_scale >= 1.0


def test_override_replaces_only_what_is_given_and_validates():
    d = scheduling_defaults("CartPole-v1")
    same = d.override(steps_per_actor=None, beta=None)
    assert same == d
    changed = d.override(max_rounds=3, budget=None, target_return=10)
    assert (changed.max_rounds, changed.budget, changed.target_return) == (3, None, 10.0)
    assert type(changed.target_return) is float
    assert d.override(budget="default").budget == d.budget
    with pytest.raises(ValueError, match="budget: expected a number >= 0, None or 'default'"):
        d.override(budget="lots")
    with pytest.raises(ValueError, match=r"max_rounds: expected an int in \[1, "):
        d.override(max_rounds=0)
    with pytest.raises(TypeError, match="compute: expected a ComputeCostModel"):
        SchedulingDefaults(10, 1.0, 10, None, 0.1, 1.0, 1.0, compute={})  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("call", "exc", "match"),
    [
        (lambda: scheduling_defaults("CartPole-v1", "huge"), ValueError, "preset: expected one of"),
        (lambda: scheduling_defaults("CartPole-v1", 1), TypeError, "preset: expected one of"),
        (lambda: scheduling_defaults("Pong-v99"), UnknownWorkloadError, "CartPole-v1"),
    ],
)
def test_errors(call, exc, match):
    with pytest.raises(exc, match=match):
        call()
