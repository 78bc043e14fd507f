"""TokenLagLearner: fresh trajectories start at ratio 1 and train; lags are measured per
decision; a trajectory over the bound is dropped whole and counted, its episodes reported;
reward scaling keeps one running return per actor; observation statistics are folded in
and published; bad input is refused."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch

from fleetgym.agents.inference.token_model import OBS_STATS_PREFIX
from fleetgym.agents.learners.asynchronous.token_actor import TokenActor
from fleetgym.agents.learners.asynchronous.token_learner import (
    TokenLagLearner,
    stack_trajectories,
)
from fleetgym.agents.learners.token_config import TokenPPOConfig
from fleetgym.agents.workloads import get_workload

CFG = TokenPPOConfig(
    hidden_size=16, layers=1, heads=2, vocab_size=64, num_bins=16, chunk=2, epochs=1,
    minibatch_size=16,
)  # fmt: skip
HOPPER = get_workload("Hopper-v5")


@pytest.fixture
def learner() -> TokenLagLearner:
    return TokenLagLearner(HOPPER, CFG, max_policy_lag=1, seed=0)


def _rollouts(learner: TokenLagLearner, versions: list[int], steps: int = 8) -> list:
    out = []
    for slot, version in enumerate(versions):
        actor = TokenActor(HOPPER, slot, 0, 0, CFG)
        out.append(actor.rollout(learner.get_weights(), steps, version))
        actor.close()
    return out


def test_fresh_trajectories_start_at_ratio_one_and_train(learner):
    batch = _rollouts(learner, [0, 0])
    rollout = stack_trajectories(batch)
    assert rollout.tokens.shape == (8, 2, 2, 3) and rollout.env_steps == sum(
        t.env_steps for t in batch
    )
    with torch.no_grad():
        ev = learner.policy.evaluate(
            torch.from_numpy(rollout.obs.reshape(16, -1)),
            torch.from_numpy(rollout.tokens.reshape(16, 2, 3)),
            step=torch.from_numpy(rollout.steps.reshape(16)),
        )
    np.testing.assert_allclose(ev.log_probs.numpy(), rollout.log_probs.reshape(16, 2, 3), atol=1e-5)
    before = [p.detach().clone() for p in learner.policy.parameters()]
    stats = learner.update(batch)
    assert (stats.policy_version, stats.num_samples, stats.dropped_samples) == (1, 16, 0)
    assert stats.lags.tolist() == [0] * 16 and learner.env_steps == rollout.env_steps
    assert np.isfinite([stats.loss, stats.policy_loss, stats.value_loss, stats.kl]).all()
    after = list(learner.policy.parameters())
    assert any(not torch.equal(a, b) for a, b in zip(before, after, strict=True))


def test_a_trajectory_over_the_bound_is_dropped_whole_and_its_episodes_reported(learner):
    for _ in range(2):
        learner.update(_rollouts(learner, [learner.policy_version]))
    assert learner.policy_version == 2
    stale, fresh = _rollouts(learner, [0, 2], steps=64)
    stale.episode_returns = [123.0]
    stats = learner.update([stale, fresh])
    assert stats.dropped_samples == 64 and stats.num_samples == 64 and stats.lag_max == 2
    assert learner.dropped_samples_total == 64 and 123.0 in learner.recent_returns
    # Served trajectories: lag per decision; one old decision drops the trajectory.
    (served,) = _rollouts(learner, [3])
    served.policy_versions = np.array([1, 2, 3, 3, 3, 3, 3, 3])
    stats = learner.update([served])
    assert stats.lags.tolist() == [2, 1, 0, 0, 0, 0, 0, 0] and stats.dropped_samples == 8
    assert stats.policy_version == 3  # everything dropped: no step, the version stays


def test_reward_scaling_keeps_one_running_return_per_actor(learner):
    batch = _rollouts(learner, [0, 0])
    batch[1].actor_id = 7
    learner.update(batch)
    assert set(learner._actor_returns) == {0, 7}


def test_observation_statistics_are_folded_in_and_published(learner):
    weights = learner.get_weights()
    np.testing.assert_array_equal(weights[OBS_STATS_PREFIX + "mean"], np.zeros(11))
    batch = _rollouts(learner, [0])
    learner.update(batch)
    published = learner.get_weights()[OBS_STATS_PREFIX + "mean"]
    assert not np.allclose(published, 0.0)
    plain = TokenLagLearner(HOPPER, dataclasses.replace(CFG, normalize_obs=False))
    assert not any(k.startswith(OBS_STATS_PREFIX) for k in plain.get_weights())


def test_bad_input_is_refused(learner):
    with pytest.raises(TypeError, match="expected a non-empty list of TokenTrajectory"):
        learner.update([])
    with pytest.raises(TypeError, match=r"trajectories\[0\]: expected a TokenTrajectory"):
        learner.update([object()])
    (future,) = _rollouts(learner, [5])
    with pytest.raises(ValueError, match="a future version: negative lag"):
        learner.update([future])
    a, b = _rollouts(learner, [0, 0])
    short = _rollouts(learner, [0], steps=4)[0]
    with pytest.raises(ValueError, match=r"expected one length, actual lengths \[4, 8\]"):
        learner.update([a, b, short])
    with pytest.raises(TypeError, match="config: expected a TokenPPOConfig"):
        TokenLagLearner(HOPPER, {"chunk": 2})
    with pytest.raises(ValueError, match="max_policy_lag: expected an int >= 0"):
        TokenLagLearner(HOPPER, CFG, max_policy_lag=-1)
