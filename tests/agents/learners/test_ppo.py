"""Tests of fleetgym.agents.learners.ppo: GAE by hand, the surrogate, updates, hooks and files."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from fleetgym.agents.learners.gae import compute_gae
from fleetgym.agents.learners.ppo import PPOLearner
from fleetgym.agents.policies.running_stats import RunningMeanStd
from fleetgym.agents.rollout import RolloutWorker
from fleetgym.agents.types import Learner, Trajectory

R = np.array([1.0, 2.0, 3.0])
V = np.array([0.5, 1.0, 1.5])
NO = np.zeros(3, bool)


def _flags(i):
    f = np.zeros(3, bool)
    f[i] = True
    return f


# Hand computation, gamma = 0.9, lambda = 0.8 (gamma * lambda = 0.72), last_value = 2.0:
#   no episode end: delta = [1 + .9*1 - .5, 2 + .9*1.5 - 1, 3 + .9*2 - 1.5] = [1.4, 2.35, 3.3]
#     A2 = 3.3, A1 = 2.35 + .72*3.3 = 4.726, A0 = 1.4 + .72*4.726 = 4.80272
#   terminated after step 1: delta1 = 2 - 1 = 1.0, chain cut -> A1 = 1.0, A0 = 1.4 + .72 = 2.12,
#     A2 = 3.3 (step 2 starts the next episode and bootstraps from last_value)
#   truncated after step 1 with V(final obs) = 4: delta1 = 2 + .9*4 - 1 = 4.6 -> A1 = 4.6,
#     A0 = 1.4 + .72*4.6 = 4.712, A2 = 3.3
#   terminated after the last step: delta2 = 3 - 1.5 = 1.5, A1 = 2.35 + .72*1.5 = 3.43,
#     A0 = 1.4 + .72*3.43 = 3.8696
@pytest.mark.parametrize(
    ("terminated", "truncated", "trunc_values", "expected"),
    [
        (NO, NO, np.zeros(3), [4.80272, 4.726, 3.3]),
        (_flags(1), NO, np.zeros(3), [2.12, 1.0, 3.3]),
        (NO, _flags(1), np.array([0.0, 4.0, 0.0]), [4.712, 4.6, 3.3]),
        (_flags(2), NO, np.zeros(3), [3.8696, 3.43, 1.5]),
    ],
)
def test_gae_by_hand(terminated, truncated, trunc_values, expected):
    adv, ret = compute_gae(R, V, terminated, truncated, trunc_values, 2.0, 0.9, 0.8)
    np.testing.assert_allclose(adv, expected, rtol=1e-6)
    np.testing.assert_allclose(ret, np.array(expected) + V, rtol=1e-6)


def test_gae_lambda_one_is_the_discounted_return_minus_value():
    rng = np.random.default_rng(0)
    rewards, values = rng.normal(size=20), rng.normal(size=20)
    adv, _ = compute_gae(
        rewards, values, np.zeros(20, bool), np.zeros(20, bool), np.zeros(20), 0.7, 0.95, 1.0
    )
    mc = [
        sum(0.95**k * rewards[t + k] for k in range(20 - t)) + 0.95 ** (20 - t) * 0.7
        for t in range(20)
    ]
    np.testing.assert_allclose(adv, np.array(mc) - values, rtol=1e-5, atol=1e-5)


def test_clipped_surrogate_by_hand():
    learner = PPOLearner("CartPole-v1", clip_coef=0.2)
    old = torch.zeros(3)
    new = torch.log(torch.tensor([1.5, 0.5, 1.1]))
    adv = torch.tensor([1.0, 1.0, -1.0])
    # min(r A, clip(r) A) = [min(1.5, 1.2), min(0.5, 0.8), min(-1.1, -1.1)] = [1.2, 0.5, -1.1]
    loss, clip_fraction = learner.policy_loss(new, old, adv)
    assert float(loss) == pytest.approx(-(1.2 + 0.5 - 1.1) / 3, rel=1e-6)
    assert float(clip_fraction) == pytest.approx(2 / 3)


def _rollouts(learner, n_actors, steps, workload="CartPole-v1", seed=0):
    workers = [RolloutWorker(workload, i, seed) for i in range(n_actors)]
    return [w.rollout(learner.get_weights(), steps, learner.policy_version) for w in workers]


def test_one_cartpole_update():
    learner = PPOLearner("CartPole-v1", seed=0, epochs=2, minibatch_size=32)
    assert isinstance(learner, Learner)
    before = learner.get_weights()
    stats = learner.update(_rollouts(learner, 2, 64))
    assert stats.num_samples == 128 and stats.policy_version == 1 == learner.policy_version
    assert stats.kl >= 0.0 and stats.kl > 0.0  # the weights moved, so the policy did
    assert stats.update_time_s > 0.0 and np.isfinite(stats.loss)
    assert 0.0 <= stats.clip_fraction <= 1.0 and stats.entropy > 0.0
    after = learner.get_weights()
    assert any(not np.array_equal(before[k], after[k]) for k in before)


def test_varying_actor_counts_per_round():
    learner = PPOLearner("CartPole-v1", seed=0, epochs=1)
    for n in (1, 3, 2):
        stats = learner.update(_rollouts(learner, n, 16))
        assert stats.num_samples == 16 * n
    assert learner.policy_version == 3


def test_hopper_update_folds_observation_statistics_into_the_weights():
    learner = PPOLearner("Hopper-v5", seed=0, epochs=1)
    trajs = _rollouts(learner, 2, 32, workload="Hopper-v5")
    stats = learner.update(trajs)
    assert stats.kl >= 0.0
    weights = learner.get_weights()
    assert float(weights["obs_count"]) == 64
    np.testing.assert_allclose(
        weights["obs_mean"], np.concatenate([t.obs for t in trajs]).mean(0), rtol=1e-10
    )


def _fake_traj(returns, n=4):
    return Trajectory(
        obs=np.zeros((n, 4), np.float32),
        actions=np.zeros(n, np.int64),
        log_probs=np.full(n, np.log(0.5), np.float32),
        values=np.zeros(n, np.float32),
        rewards=np.ones(n, np.float32),
        terminated=np.zeros(n, bool),
        truncated=np.zeros(n, bool),
        truncation_values=np.zeros(n, np.float32),
        last_value=0.0,
        episode_returns=list(returns),
        episode_lengths=[1] * len(returns),
        actor_id=0,
        policy_version=0,
        seed=0,
    )


def test_mean_return_over_the_last_100_episodes():
    learner = PPOLearner("CartPole-v1", epochs=1)
    assert learner.update([_fake_traj([])]).mean_return == 0.0  # nothing completed yet
    stats = learner.update([_fake_traj(range(100)), _fake_traj(range(100, 150))])
    assert stats.episodes_completed == 150
    assert stats.mean_return == pytest.approx(np.mean(np.arange(50, 150)))


def test_reward_transforms():
    traj = _fake_traj([], n=3)
    traj.rewards = np.array([2.0, -0.5, 0.0], np.float32)
    sign = PPOLearner("CartPole-v1", reward_transform="sign")
    np.testing.assert_array_equal(sign.transform_rewards(traj), [1.0, -1.0, 0.0])
    scale = PPOLearner("CartPole-v1", reward_transform="scale", gamma=0.5)
    traj.rewards = np.ones(3, np.float32)
    discounted = np.array([1.0, 1.5, 1.75])  # running r_t + 0.5 * running
    np.testing.assert_allclose(scale.transform_rewards(traj), 1 / np.sqrt(discounted.var() + 1e-8))
    # the slot's discounted return carries over to its next trajectory
    scale.transform_rewards(traj)
    stats = RunningMeanStd()
    stats.update(np.concatenate([discounted, [1.875, 1.9375, 1.96875]]))
    assert scale.return_stats.var == pytest.approx(stats.var)


def test_policy_loss_hook_is_used():
    class ValueOnly(PPOLearner):
        def policy_loss(self, new_log_probs, old_log_probs, advantages):
            return 0.0 * new_log_probs.sum(), torch.tensor(0.0)

    learner = ValueOnly("CartPole-v1", seed=0, epochs=1, ent_coef=0.0)
    before = learner.get_weights()
    learner.update(_rollouts(learner, 1, 32))
    after = learner.get_weights()
    # zero policy gradient -> Adam leaves the actor untouched; the critic still learns
    for key in before:
        changed = not np.array_equal(before[key], after[key])
        assert changed == key.startswith(("critic_body", "value_head")), key


def test_save_load_round_trip_continues_identically(tmp_path):
    learner = PPOLearner("CartPole-v1", seed=1, epochs=2)
    learner.update(_rollouts(learner, 2, 32) + [_fake_traj([10.0, 20.0])])
    path = learner.save(tmp_path / "learner.pt")
    restored = PPOLearner("CartPole-v1", seed=99, epochs=2)
    restored.load(path)
    assert restored.policy_version == learner.policy_version == 1
    assert list(restored.recent_returns) == list(learner.recent_returns)
    for key, value in learner.get_weights().items():
        np.testing.assert_array_equal(restored.get_weights()[key], value)
    trajs = _rollouts(learner, 2, 32, seed=5)
    a, b = learner.update(trajs), restored.update(trajs)
    assert a.loss == b.loss and a.kl == b.kl
    for key, value in learner.get_weights().items():
        np.testing.assert_array_equal(restored.get_weights()[key], value)
    # the policy alone is saved next to the learner file
    assert (tmp_path / "learner.policy.pt").is_file()


def test_load_errors(tmp_path):
    learner = PPOLearner("CartPole-v1")
    with pytest.raises(FileNotFoundError, match="missing"):
        learner.load(tmp_path / "absent.pt")
    path = PPOLearner("Hopper-v5").save(tmp_path / "hopper.pt")
    with pytest.raises(
        ValueError, match="expected a learner for 'CartPole-v1', actual 'Hopper-v5'"
    ):
        learner.load(path)
    torch.save({"a": torch.zeros(1)}, tmp_path / "other.pt")
    with pytest.raises(ValueError, match="expected a PPOLearner file"):
        learner.load(tmp_path / "other.pt")


def test_invalid_arguments():
    with pytest.raises(TypeError, match="actual \\['learning_rate'\\]"):
        PPOLearner("CartPole-v1", learning_rate=1e-3)
    with pytest.raises(ValueError, match="seed: expected an int >= 0"):
        PPOLearner("CartPole-v1", seed=-1)
    with pytest.raises(ValueError, match="lr: expected a finite float > 0"):
        PPOLearner("CartPole-v1", lr=-1.0)
    learner = PPOLearner("CartPole-v1")
    with pytest.raises(ValueError, match="expected a non-empty list"):
        learner.update([])
    with pytest.raises(TypeError, match="expected Trajectory items"):
        learner.update([object()])  # type: ignore[list-item]
    bad = _fake_traj([])
    bad.obs = np.zeros((4, 3), np.float32)
    with pytest.raises(ValueError, match=r"trajectories\[0\].obs: expected shape"):
        learner.update([bad])
    with pytest.raises(ValueError, match="lr: expected a finite number > 0"):
        learner.set_learning_rate(0.0)
    with pytest.raises(ValueError, match="lr: expected a finite number > 0, actual inf"):
        learner.set_learning_rate(float("inf"))
    with pytest.raises(TypeError, match="lr: expected a number, actual str '1e-3'"):
        learner.set_learning_rate("1e-3")  # type: ignore[arg-type]


def test_update_takes_any_iterable_of_trajectories_once():
    # A generator must not be consumed by the checks before the batch is built.
    twin = PPOLearner("CartPole-v1", seed=3, epochs=1)
    learner = PPOLearner("CartPole-v1", seed=3, epochs=1)
    trajectories = _rollouts(learner, 2, 16)
    from_list = twin.update(list(trajectories))
    from_generator = learner.update(t for t in trajectories)
    assert from_generator.num_samples == 32 == from_list.num_samples
    assert from_generator.loss == pytest.approx(from_list.loss)
    with pytest.raises(ValueError, match="expected a non-empty list of Trajectory, actual 3"):
        learner.update(3)  # type: ignore[arg-type]
