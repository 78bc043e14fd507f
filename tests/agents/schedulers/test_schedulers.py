"""Baseline schedulers: each one's schedule, SB3's predict interface, state, errors."""

from __future__ import annotations

import numpy as np
import pytest

from fleetgym.agents.schedulers import (
    OBS_RETURN,
    OBSERVATION_FIELDS,
    AdaptScheduler,
    DecreaseScheduler,
    FixedScheduler,
    IncreaseScheduler,
    MaxScheduler,
    ServerBasedScheduler,
    make_baseline,
)


def _schedule(scheduler, returns):
    """Actor counts over an episode whose observed R_bar/J are ``returns`` (one per round)."""
    state, counts = None, []
    for k, r in enumerate(returns):
        obs = np.zeros(len(OBSERVATION_FIELDS), np.float32)
        obs[OBS_RETURN] = r
        action, state = scheduler.predict(obs, state, np.array([k == 0]), deterministic=True)
        assert action.shape == () and action.dtype == np.int64
        counts.append(int(action) + 1)
    return counts


def test_fixed_and_max():
    assert _schedule(FixedScheduler(8), [0.0] * 5) == [8] * 5
    assert _schedule(MaxScheduler(32), [0.0] * 5) == [32] * 5
    assert _schedule(MaxScheduler(4), [0.0]) == [4]


def test_increase_adds_ten_every_ten_rounds():
    counts = _schedule(IncreaseScheduler(), [0.0] * 45)
    assert counts == [2] * 10 + [12] * 10 + [22] * 10 + [32] * 15


def test_decrease_removes_ten_every_ten_rounds():
    counts = _schedule(DecreaseScheduler(), [0.0] * 45)
    assert counts == [32] * 10 + [22] * 10 + [12] * 10 + [2] * 10 + [1] * 5


def test_adapt_is_the_clipped_five_round_moving_average():
    returns = [0.0, 0.1, 0.2, 0.5, 0.9, 1.0, 1.0, 0.0]
    counts = _schedule(AdaptScheduler(max_actors=32), returns)
    expected = []
    for k in range(len(returns)):
        window = returns[max(0, k - 4) : k + 1]
        expected.append(int(np.clip(round(np.mean(window) * 32), 1, 32)))
    assert counts == expected
    assert counts[0] == 1  # nothing learned yet: one actor
    # Raw observations with target_return=J give the same schedule.
    raw = _schedule(AdaptScheduler(32, target_return=200.0), [200.0 * r for r in returns])
    assert raw == expected


def test_episode_start_resets_the_state():
    s = IncreaseScheduler(start=2, step=10, every=1)
    obs = np.zeros(7)
    a, state = s.predict(obs, None, np.array([True]))
    a, state = s.predict(obs, state, np.array([False]))
    assert int(a) + 1 == 12
    a, state = s.predict(obs, state, np.array([True]))
    assert int(a) + 1 == 2


def test_batched_predict_keeps_one_state_row_per_env():
    s = AdaptScheduler(max_actors=10)
    obs = np.zeros((2, 7))
    obs[:, OBS_RETURN] = [0.5, 1.0]
    actions, state = s.predict(obs, None, np.array([True, True]))
    assert actions.tolist() == [4, 9] and state.shape == (2, 6)
    obs[:, OBS_RETURN] = [0.5, 0.0]
    actions, _ = s.predict(obs, state, np.array([False, False]))
    assert actions.tolist() == [4, 4]  # env 1: mean(1.0, 0.0) = 0.5 -> 5 actors


def test_server_based_asks_for_cluster_billing():
    s = ServerBasedScheduler()
    assert _schedule(s, [0.0] * 3) == [32] * 3
    assert s.env_overrides == {"billing": "server", "server_actors": 32, "budget": None}
    # The cluster is billed for the fleet it runs, not for I_max.
    assert ServerBasedScheduler(8).env_overrides["server_actors"] == 8
    assert FixedScheduler(4).env_overrides == {}


@pytest.mark.parametrize(
    "name, cls, count",
    [
        ("fixed:8", FixedScheduler, 8),
        ("max", MaxScheduler, 32),
        ("increase", IncreaseScheduler, 2),
        ("decrease", DecreaseScheduler, 32),
        ("adapt", AdaptScheduler, 1),
        ("server", ServerBasedScheduler, 32),
        ("Server:16", ServerBasedScheduler, 16),
    ],
)
def test_make_baseline(name, cls, count):
    s = make_baseline(name)
    assert type(s) is cls
    assert _schedule(s, [0.0])[0] == count


@pytest.mark.parametrize(
    "call, exc, match",
    [
        (lambda: make_baseline("random"), ValueError, "expected one of"),
        (lambda: make_baseline("fixed"), ValueError, "fixed:N"),
        (lambda: make_baseline("fixed:x"), ValueError, "integer after"),
        (lambda: make_baseline("max:3"), ValueError, "takes no"),
        (lambda: FixedScheduler(0), ValueError, ">= 1"),
        (lambda: FixedScheduler(33), ValueError, "<= max_actors"),
        (lambda: FixedScheduler(2.5), TypeError, "expected an int"),
        (lambda: MaxScheduler(0), ValueError, "max_actors"),
        (lambda: AdaptScheduler(target_return=0.0), ValueError, "non-zero"),
        (lambda: MaxScheduler().predict(np.zeros(6)), ValueError, r"shape \(7,\)"),
        (
            lambda: IncreaseScheduler().predict(np.zeros((2, 7)), None, np.array([True])),
            ValueError,
            r"episode_start: expected 2 entries \(one per observation\), actual shape \(1,\)",
        ),
    ],
)
def test_bad_input(call, exc, match):
    with pytest.raises(exc, match=match):
        call()
