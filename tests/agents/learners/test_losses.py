"""Policy losses, V-trace and the lag-compensating learner, on exact small inputs."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from fleetgym.agents.learners.gae import compute_gae
from fleetgym.agents.learners.lag import (
    CompensatedPPOLearner,
    LagUpdateStats,
    ObservedTrajectory,
    WeightRing,
    behaviour_versions,
)
from fleetgym.agents.learners.losses import (
    LossConfig,
    gaussian_weight,
    gipo_loss,
    kl_estimate,
    normalize,
    ppo_clip_loss,
    vtrace,
    vtrace_policy_loss,
)
from fleetgym.agents.rollout import RolloutWorker


def test_ppo_clip_exact_values_and_zero_gradient_outside_the_clip():
    new = torch.log(torch.tensor([1.0, 1.5, 0.5, 1.1])).requires_grad_()
    adv = torch.tensor([2.0, 1.0, -1.0, -1.0])
    loss, frac = ppo_clip_loss(new, torch.zeros(4), adv, clip=0.2)
    # min(rho A, clip(rho) A): 2, 1.2 (clipped), -0.8 (clipped), -1.1
    assert float(loss.detach()) == pytest.approx(-(2.0 + 1.2 - 0.8 - 1.1) / 4, abs=1e-6)
    assert float(frac) == pytest.approx(0.5)
    loss.backward()
    # d/dlogpi of -rho A / n = -rho A / n where unclipped, 0 where the clipped term is taken
    assert new.grad.tolist() == pytest.approx([-0.5, 0.0, 0.0, 1.1 / 4], abs=1e-6)


def test_gipo_weight_gradient_is_weighted_importance_sampled_gradient():
    log_ratio = torch.tensor([0.0, 0.4, -0.8, 2.4])
    new = log_ratio.clone().requires_grad_()
    adv = torch.tensor([1.0, -2.0, 3.0, 1.0])
    loss, outside = gipo_loss(new, torch.zeros(4), adv, sigma=0.8)
    w = np.exp(-0.5 * (log_ratio.numpy() / 0.8) ** 2)
    rho = np.exp(log_ratio.numpy())
    assert float(loss.detach()) == pytest.approx(float(-(w * rho * adv.numpy()).mean()), rel=1e-6)
    assert float(outside) == pytest.approx(0.25)  # only |log rho| = 2.4 > sigma
    loss.backward()
    # w is not differentiated: the gradient is -w * rho * A / n, not (1 - (log rho)/sigma^2)...
    assert new.grad.numpy() == pytest.approx(-(w * rho * adv.numpy()) / 4, rel=1e-5)


def test_gipo_equals_the_policy_gradient_on_policy():
    new = torch.zeros(3, requires_grad=True)
    adv = torch.tensor([1.0, -1.0, 0.5])
    gipo_loss(new, torch.zeros(3), adv, sigma=0.5)[0].backward()
    assert new.grad.tolist() == pytest.approx((-adv / 3).tolist())


def test_gipo_weight_bounds_the_effective_ratio():
    log_ratio = torch.linspace(-6.0, 6.0, 1001)
    for sigma in (0.5, 0.8):
        effective = gaussian_weight(log_ratio, sigma) * torch.exp(log_ratio)
        # max of exp(x - x^2 / (2 sigma^2)) is exp(sigma^2 / 2) at x = sigma^2
        assert float(effective.max()) <= math.exp(sigma**2 / 2) + 1e-6
        assert float(effective.max()) == pytest.approx(math.exp(sigma**2 / 2), rel=1e-3)


@pytest.mark.parametrize("sigma", [0.0, -0.1, float("nan")])
def test_sigma_must_be_positive(sigma):
    with pytest.raises(ValueError, match="sigma: expected"):
        gaussian_weight(torch.zeros(1), sigma)
    with pytest.raises(ValueError, match="sigma: expected"):
        LossConfig("gipo", sigma=sigma)


def test_loss_config_rejects_unknown_loss_and_non_bool_switches():
    with pytest.raises(ValueError, match="loss: expected one of"):
        LossConfig("a2c")
    with pytest.raises(TypeError, match="recompute_values: expected a bool"):
        LossConfig("ppo", recompute_values=1)  # type: ignore[arg-type]
    assert LossConfig("gipo", 0.8, True, True).label == "gipo(sigma=0.8)+recompute+global-norm"


def test_vtrace_policy_loss_truncates_the_weight_at_one():
    new = torch.log(torch.tensor([0.5, 3.0])).requires_grad_()
    loss, frac = vtrace_policy_loss(new, torch.zeros(2), torch.tensor([2.0, 1.0]))
    loss.backward()
    assert new.grad.tolist() == pytest.approx([-0.5 * 2.0 / 2, -1.0 * 1.0 / 2])
    assert float(frac) == pytest.approx(0.5)


def _episode_arrays():
    rewards = np.array([1.0, 2.0, 0.5, 1.0, 3.0])
    values = np.array([0.5, 0.2, -0.1, 0.3, 0.4])
    terminated = np.array([False, True, False, False, False])
    truncated = np.array([False, False, False, True, False])
    truncation_values = np.array([0.0, 0.0, 0.0, 0.7, 0.0])
    return rewards, values, terminated, truncated, truncation_values


def test_vtrace_on_policy_equals_lambda_one_returns():
    rewards, values, term, trunc, tv = _episode_arrays()
    vs, adv = vtrace(rewards, values, term, trunc, tv, 0.9, np.zeros(5), gamma=0.9)
    _, returns = compute_gae(rewards, values, term, trunc, tv, 0.9, gamma=0.9, gae_lambda=1.0)
    assert vs == pytest.approx(returns, abs=1e-6)
    # A_t = r_t + gamma * v_next - V(s_t) with v_next cut at episode ends
    expected = [
        1.0 + 0.9 * vs[1] - 0.5,
        2.0 - 0.2,  # terminated
        0.5 + 0.9 * vs[3] + 0.1,
        1.0 + 0.9 * 0.7 - 0.3,  # truncated: bootstrap from the truncation value
        3.0 + 0.9 * 0.9 - 0.4,  # last step: bootstrap from last_value
    ]
    assert adv == pytest.approx(expected, abs=1e-6)


def test_vtrace_truncates_rho_and_c_at_one():
    rewards, values = np.array([1.0, 1.0]), np.array([0.0, 0.0])
    none = np.zeros(2, bool)
    # ratios 4 and 0.25: rho_0 = c_0 = 1, rho_1 = c_1 = 0.25
    vs, adv = vtrace(rewards, values, none, none, np.zeros(2), 0.0, np.log([4.0, 0.25]), 1.0)
    assert vs.tolist() == pytest.approx([1.0 + 1.0 * 0.25, 0.25])
    assert adv.tolist() == pytest.approx([1.0 + 0.25, 1.0])


def test_normalize_standardises_and_leaves_single_samples():
    out = normalize(torch.tensor([1.0, 3.0, 5.0, 7.0]))
    assert float(out.mean()) == pytest.approx(0.0, abs=1e-6)
    assert float(out.std()) == pytest.approx(1.0, abs=1e-6)
    assert normalize(torch.tensor([4.0])).tolist() == [4.0]


# ----------------------------------------------------------------- the learner


def _trajectory(version: int, steps: int = 16, seed: int = 0) -> ObservedTrajectory:
    worker = RolloutWorker("CartPole-v1", 0, seed=seed)
    weights = worker.policy.get_weights()
    traj = worker.rollout(weights, steps, version)
    fields = {f: getattr(traj, f) for f in traj.__dataclass_fields__}
    return ObservedTrajectory(**fields, next_obs=worker.obs.copy())


def test_global_normalisation_standardises_the_whole_batch():
    learner = CompensatedPPOLearner("CartPole-v1", LossConfig("ppo", global_advantage_norm=True))
    batch = learner.build_batch([_trajectory(0), _trajectory(0, seed=1)])
    assert float(batch.advantages.mean()) == pytest.approx(0.0, abs=1e-5)
    assert float(batch.advantages.std()) == pytest.approx(1.0, abs=1e-5)
    x = torch.tensor([1.0, 2.0])
    assert learner.normalize_advantages(x) is x


def test_value_recomputation_uses_the_newest_critic():
    traj = _trajectory(0)
    traj.values[:] = 100.0  # a stale behaviour critic
    traj.last_value = 100.0
    plain = CompensatedPPOLearner("CartPole-v1", LossConfig("ppo"), seed=3)
    fresh = CompensatedPPOLearner("CartPole-v1", LossConfig("ppo", recompute_values=True), seed=3)
    rewards = np.asarray(traj.rewards, np.float64)
    _, stale_returns = plain.compute_advantages(traj, rewards)
    adv, returns = fresh.compute_advantages(traj, rewards)
    with torch.no_grad():
        values = fresh.policy(torch.from_numpy(traj.obs))[1].numpy()
        last = float(fresh.policy(torch.from_numpy(traj.next_obs[None]))[1][0])
    expected_adv, _ = compute_gae(
        rewards,
        values,
        traj.terminated,
        traj.truncated,
        traj.truncation_values,
        last,
        fresh.workload.gamma,
        fresh.workload.gae_lambda,
    )
    assert adv == pytest.approx(expected_adv, abs=1e-5)
    assert returns == pytest.approx(expected_adv + values, abs=1e-5)
    assert stale_returns[0] > 50.0  # the stale critic's values went into the targets


@pytest.mark.parametrize(
    "config",
    [LossConfig("ppo"), LossConfig("gipo", 0.5, True, True), LossConfig("vtrace", 0.8, True)],
    ids=lambda c: c.label,
)
def test_learner_updates_with_every_loss(config):
    learner = CompensatedPPOLearner("CartPole-v1", config, epochs=1)
    stats = learner.update([_trajectory(0)])
    assert isinstance(stats, LagUpdateStats)
    assert stats.policy_version == 1 and stats.num_samples == 16
    assert math.isfinite(stats.loss)


def test_lag_is_measured_per_sample_and_stale_samples_are_dropped():
    learner = CompensatedPPOLearner("CartPole-v1", max_policy_lag=2, epochs=1)
    learner.policy_version = 5
    fresh, stale = _trajectory(4), _trajectory(1, seed=1)
    mixed = _trajectory(0, seed=2)
    mixed.policy_versions = np.array([2] * 6 + [3] * 10)  # per-sample versions (a server)
    stats = learner.update([fresh, stale, mixed])
    assert stats.lags.tolist() == [1] * 16 + [4] * 16 + [3] * 6 + [2] * 10
    assert stats.dropped_samples == 16 + 6 and learner.dropped_samples_total == 22
    assert stats.num_samples == 16 + 10
    assert (stats.lag_p50, stats.lag_max) == (2.0, 4)
    assert stats.lag_histogram() == {"1": 16, "2-3": 16, "4-7": 16}
    assert behaviour_versions(mixed).tolist() == [2] * 6 + [3] * 10


def test_all_samples_dropped_takes_no_step():
    learner = CompensatedPPOLearner("CartPole-v1", max_policy_lag=0, epochs=1)
    learner.policy_version = 3
    before = learner.get_weights()
    stats = learner.update([_trajectory(1)])
    assert stats.num_samples == 0 and stats.dropped_samples == 16
    assert learner.policy_version == 3
    after = learner.get_weights()
    assert all(np.array_equal(before[k], after[k]) for k in before)


def test_max_policy_lag_must_be_non_negative():
    with pytest.raises(ValueError, match="max_policy_lag: expected"):
        CompensatedPPOLearner("CartPole-v1", max_policy_lag=-1)
    with pytest.raises(TypeError, match="config: expected a LossConfig"):
        CompensatedPPOLearner("CartPole-v1", config="gipo")  # type: ignore[arg-type]


def test_weight_ring_returns_the_weights_from_k_updates_ago():
    ring = WeightRing(capacity=4)
    with pytest.raises(LookupError):
        ring.lagged(0)
    for v in range(10):
        ring.push(v, {"w": np.array([float(v)])})
    assert ring.versions() == [6, 7, 8, 9]
    assert ring.lagged(0)[0] == 9 and ring.lagged(3)[0] == 6
    assert ring.lagged(100)[0] == 6  # capped at the oldest kept
    with pytest.raises(ValueError, match="capacity"):
        WeightRing(0)


def test_kl_estimate_is_the_k3_estimator():
    # rho = 2 and 0.5: ((2 - 1) - log 2 + (0.5 - 1) - log 0.5) / 2 = 0.25
    new = torch.log(torch.tensor([2.0, 0.5]))
    assert float(kl_estimate(new, torch.zeros(2))) == pytest.approx(0.25, abs=1e-6)
    assert float(kl_estimate(torch.zeros(4), torch.zeros(4))) == 0.0


def test_target_kl_is_validated_and_labelled():
    assert LossConfig("gipo", target_kl=0.02).label == "gipo(sigma=0.8)+kl<=0.02"
    assert LossConfig("gipo").target_kl is None
    with pytest.raises(ValueError, match="target_kl: expected"):
        LossConfig("gipo", target_kl=0.0)


def test_gipo_keeps_a_gradient_where_ppo_clip_stops():
    # A sample at rho = 1.5 with A > 0: PPO-clip (1 + 0.2) gives no gradient, GIPO's is
    # w * rho * A = exp(-(log 1.5 / 0.8)^2 / 2) * 1.5.
    new = torch.log(torch.tensor([1.5])).requires_grad_(True)
    ppo_clip_loss(new, torch.zeros(1), torch.ones(1))[0].backward()
    assert float(new.grad[0]) == 0.0
    new.grad = None
    gipo_loss(new, torch.zeros(1), torch.ones(1), sigma=0.8)[0].backward()
    expected = -math.exp(-0.5 * (math.log(1.5) / 0.8) ** 2) * 1.5
    assert float(new.grad[0]) == pytest.approx(expected, rel=1e-5)


def test_the_kl_budget_stops_the_policy_steps_of_an_update():
    free = CompensatedPPOLearner("CartPole-v1", LossConfig("gipo"), seed=0, minibatch_size=32)
    bounded = CompensatedPPOLearner(
        "CartPole-v1", LossConfig("gipo", target_kl=1e-9), seed=0, minibatch_size=32
    )
    weights = free.get_weights()  # the behaviour is the learners' policy: lag 0
    batch = [RolloutWorker("CartPole-v1", i, seed=i).rollout(weights, 64, 0) for i in range(2)]
    free_stats, bounded_stats = free.update(batch), bounded.update(batch)
    # The first minibatch starts at the behaviour (KL 0) and steps; the second one has
    # moved the policy by more than 1e-9 and stops it for the rest of the update.
    assert bounded.policy_stops == 1 and free.policy_stops == 0
    assert 0.0 < bounded_stats.kl < free_stats.kl
    assert bounded_stats.policy_version == 1


def test_proximal_clip_is_validated_and_labelled():
    assert LossConfig("ppo", proximal_clip=True).label == "ppo-proximal"
    with pytest.raises(ValueError, match="proximal_clip: expected loss 'ppo'"):
        LossConfig("gipo", proximal_clip=True)
    with pytest.raises(TypeError, match="proximal_clip: expected a bool"):
        LossConfig("ppo", proximal_clip=1)  # type: ignore[arg-type]


def test_proximal_clip_centres_the_clip_on_the_learner_and_weights_by_its_ratio():
    # The trajectory's behaviour policy is another network than the learner's: lagged samples.
    trajs = [_trajectory(0), _trajectory(0, seed=1)]
    config = {"global_advantage_norm": True}
    plain = CompensatedPPOLearner("CartPole-v1", LossConfig("ppo", **config), seed=3)
    prox = CompensatedPPOLearner(
        "CartPole-v1", LossConfig("ppo", proximal_clip=True, **config), seed=3
    )
    reference, batch = plain.build_batch(trajs), prox.build_batch(trajs)
    with torch.no_grad():
        learner_log_probs = prox.policy.evaluate_actions(batch.obs, batch.actions)[0]
    weight = torch.exp(learner_log_probs - reference.log_probs)
    assert not torch.allclose(weight, torch.ones_like(weight), atol=1e-3)  # really lagged
    torch.testing.assert_close(batch.log_probs, learner_log_probs)
    torch.testing.assert_close(batch.advantages, reference.advantages * weight)
    # the objective: min(r A', clip(r) A') with r = pi / pi_prox and A' = (pi_prox / mu) A
    # is (pi_prox / mu) min(r A, clip(r) A), decoupled PPO's, since the weight is positive
    new = learner_log_probs + 0.3 * torch.linspace(-1, 1, len(weight))
    ours, _ = prox.policy_loss(new, batch.log_probs, batch.advantages)
    r = torch.exp(new - learner_log_probs)
    a = reference.advantages
    expected = -(weight * torch.min(r * a, torch.clamp(r, 0.8, 1.2) * a)).mean()
    torch.testing.assert_close(ours, expected)


def test_proximal_clip_on_policy_is_plain_ppo_clip():
    # samples of the learner's own policy: the weight is 1 up to float rounding
    learners = [
        CompensatedPPOLearner("CartPole-v1", LossConfig("ppo", proximal_clip=p), seed=4, epochs=2)
        for p in (False, True)
    ]
    worker = RolloutWorker("CartPole-v1", 0, seed=5)
    traj = worker.rollout(learners[0].get_weights(), 32, 0)
    for learner in learners:
        learner.update([traj])
    plain, prox = (learner.get_weights() for learner in learners)
    for name in plain:
        np.testing.assert_allclose(prox[name], plain[name], atol=1e-5)
