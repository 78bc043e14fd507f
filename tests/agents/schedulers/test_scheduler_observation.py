"""The scheduling observation: one layout for the env and the schedulers, its scaling."""

from __future__ import annotations

import math

import numpy as np
import pytest

from fleetgym.agents import schedulers
from fleetgym.agents.schedulers.observation import (
    KL_SCALE,
    OBS_ACTOR_TIME,
    OBS_BUDGET,
    OBS_CLIP,
    OBS_KL,
    OBS_LEARNER_TIME,
    OBS_LOSS,
    OBS_RETURN,
    OBS_ROUND,
    OBSERVATION_FIELDS,
    normalize_observation,
    raw_observation,
)

INDICES = {
    "round": OBS_ROUND,
    "loss": OBS_LOSS,
    "mean_return": OBS_RETURN,
    "kl": OBS_KL,
    "learner_time": OBS_LEARNER_TIME,
    "actor_time": OBS_ACTOR_TIME,
    "budget_left": OBS_BUDGET,
}


def test_each_field_has_its_index_and_the_schedulers_share_them():
    assert {name: OBSERVATION_FIELDS.index(name) for name in OBSERVATION_FIELDS} == INDICES
    assert schedulers.OBS_RETURN is OBS_RETURN
    assert schedulers.OBSERVATION_FIELDS is OBSERVATION_FIELDS


def test_normalisation_entry_by_entry():
    raw = np.zeros(len(OBSERVATION_FIELDS))
    raw[[OBS_ROUND, OBS_LOSS, OBS_RETURN, OBS_KL]] = [3, -2.0, -50.0, 0.02]
    raw[[OBS_LEARNER_TIME, OBS_ACTOR_TIME, OBS_BUDGET]] = [4.0, 1.0, 0.25]
    obs = normalize_observation(
        raw, max_rounds=10, target_return=-100.0, learner_time_s=2.0, actor_time_s=0.5, budget=1.0
    )
    expected = [0.3, -math.log1p(2.0), -0.5, math.log1p(0.02 / KL_SCALE), 2.0, 2.0, 0.25]
    np.testing.assert_allclose(obs, expected, rtol=1e-6)
    assert obs.dtype == np.float32


def test_zero_scales_leave_entries_unscaled_and_everything_is_clipped():
    raw = np.full(len(OBSERVATION_FIELDS), 1e30)
    obs = normalize_observation(
        raw, max_rounds=1, target_return=0.0, learner_time_s=0.0, actor_time_s=0.0, budget=None
    )
    assert obs[OBS_BUDGET] == 1.0
    assert (np.abs(obs) <= OBS_CLIP).all()


@pytest.mark.parametrize(("budget", "entry"), [(None, 0.0), (2.0, 1.5)])
def test_raw_observation_is_finite(budget, entry):
    raw = np.zeros(len(OBSERVATION_FIELDS))
    raw[OBS_BUDGET] = math.inf if budget is None else 1.5
    raw[OBS_LEARNER_TIME] = 1e300
    obs = raw_observation(raw, budget=budget)
    assert obs[OBS_BUDGET] == entry and np.isfinite(obs).all()
