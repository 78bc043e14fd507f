"""Tests of fleetgym.agents.world_model's imagined env, success reward and imagination buffer."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
import torch
from world_model_systems import LinearEnv, linear_truth

from fleetgym.agents.learners.ppo import PPOLearner
from fleetgym.agents.rollout import RolloutWorker
from fleetgym.agents.world_model import (
    ImaginationConfig,
    ImaginedEnv,
    ImaginedVectorEnv,
    SuccessRewardModel,
    TransitionBuffer,
    WorldModel,
    multistep_error,
)
from fleetgym.agents.world_model.imagination import _runs


def _in_starts(obs, starts):
    return all((starts == row).all(axis=1).any() for row in obs)


# ----------------------------------------------------------------- ImaginedVectorEnv
def test_shapes_and_info(linear_model, linear_data):
    venv = ImaginedVectorEnv(linear_model, linear_data.obs, num_envs=3, horizon=4)
    obs, _ = venv.reset(seed=0)
    assert obs.shape == (3, 2) and obs.dtype == np.float32
    assert _in_starts(obs, linear_data.obs)
    assert venv.observation_space.shape == (3, 2) and venv.single_action_space.shape == (1,)
    obs, reward, terminated, truncated, info = venv.step(np.zeros((3, 1), np.float32))
    assert obs.shape == (3, 2) and reward.shape == (3,) and reward.dtype == np.float32
    assert terminated.dtype == bool and truncated.shape == (3,)
    assert info["uncertainty"].shape == (3,)
    np.testing.assert_array_equal(info["model_version"], [linear_model.version] * 3)


def test_a_seeded_reset_reproduces_the_episodes(linear_model, linear_data):
    def run(seed):
        venv = ImaginedVectorEnv(linear_model, linear_data.obs, num_envs=4, horizon=3)
        out = [venv.reset(seed=seed)[0]]
        for _ in range(5):  # across an auto-reset, which draws from the same generator
            out.append(venv.step(np.full((4, 1), 0.5, np.float32))[0])
        return np.stack(out)

    np.testing.assert_array_equal(run(7), run(7))
    assert not np.array_equal(run(7), run(8))


def test_horizon_truncates_and_autoresets_in_the_same_step(linear_model, linear_data):
    # learn_termination=False: only the horizon ends an episode here.
    venv = ImaginedVectorEnv(linear_model, linear_data.obs, num_envs=5, horizon=3, sample=False)
    obs, _ = venv.reset(seed=1)
    actions = np.full((5, 1), -0.25, np.float32)
    for t in range(1, 7):
        before = obs
        obs, _, terminated, truncated, info = venv.step(actions)
        assert not terminated.any()
        assert truncated.all() == (t % 3 == 0) and truncated.any() == (t % 3 == 0)
        if t % 3:
            assert "final_obs" not in info
            continue
        # SAME_STEP: the step that ends returns the next start; the last obs is final_obs,
        # the model's step from the previous obs (one of the two elites, sample=False).
        assert info["final_obs"].shape == (5,) and info["_final_obs"].all()
        assert _in_starts(obs, linear_data.obs)
        per_member = [
            linear_model.step(before, actions, np.full(5, j), None, sample=False).next_obs
            for j in range(2)
        ]
        for i, final in enumerate(info["final_obs"]):
            assert final.dtype == np.float32 and final.shape == (2,)
            assert any(np.array_equal(final, p[i]) for p in per_member)


def test_max_uncertainty_truncates(linear_model, linear_data):
    # Two elites never agree exactly, so any step's disagreement is > 0.
    strict = ImaginedVectorEnv(linear_model, linear_data.obs, 4, horizon=100, max_uncertainty=0.0)
    strict.reset(seed=0)
    _, _, _, truncated, info = strict.step(np.zeros((4, 1), np.float32))
    assert (info["uncertainty"] > 0).all() and truncated.all()
    loose = ImaginedVectorEnv(linear_model, linear_data.obs, 4, horizon=100, max_uncertainty=1e9)
    loose.reset(seed=0)
    assert not loose.step(np.zeros((4, 1), np.float32))[3].any()


def test_the_reward_model_gives_the_reward(linear_model, linear_data):
    success = SuccessRewardModel(obs_dim=2, hidden_sizes=(8,), seed=0)
    venv = ImaginedVectorEnv(
        linear_model, linear_data.obs, 4, horizon=100, reward_model=success, sample=False
    )
    obs, _ = venv.reset(seed=0)
    actions = np.full((4, 1), 0.3, np.float32)
    nxt, reward, *_ = venv.step(actions)
    np.testing.assert_array_equal(reward, success.reward(obs, nxt))
    regression = linear_model.predict(obs, actions).reward
    assert not np.allclose(reward, regression)


def test_bad_imagined_envs_are_refused(linear_model, linear_data):
    env = LinearEnv()
    fresh = WorldModel(env.observation_space, env.action_space, hidden_sizes=(4,))
    with pytest.raises(ValueError, match="expected a fitted world model .* version 0"):
        ImaginedVectorEnv(fresh, linear_data.obs)
    with pytest.raises(ValueError, match=r"starts: expected .* \(M >= 1, 2\)"):
        ImaginedVectorEnv(linear_model, np.zeros((3, 4)))
    with pytest.raises(ValueError, match="starts: expected finite"):
        ImaginedVectorEnv(linear_model, np.full((3, 2), np.nan))
    with pytest.raises(ValueError, match="horizon"):
        ImaginedVectorEnv(linear_model, linear_data.obs, horizon=0)
    with pytest.raises(TypeError, match="expected a WorldModel"):
        ImaginedVectorEnv("model", linear_data.obs)


# The imagined observation space is unbounded on purpose (a model can leave any box).
@pytest.mark.filterwarnings("ignore:.*observation space (minimum|maximum) value is")
def test_the_single_env_passes_the_checkers(linear_model, linear_data):
    from gymnasium.utils.env_checker import check_env
    from stable_baselines3.common.env_checker import check_env as sb3_check_env

    check_env(ImaginedEnv(linear_model, linear_data.obs, horizon=3), skip_render_check=True)
    sb3_check_env(ImaginedEnv(linear_model, linear_data.obs, horizon=3), warn=False)
    env = ImaginedEnv(linear_model, linear_data.obs, horizon=2)
    env.reset(seed=0)
    env.step(np.zeros(1, np.float32))
    obs, _, terminated, truncated, info = env.step(np.zeros(1, np.float32))
    assert truncated and not terminated and obs.dtype == np.float32 and obs.shape == (2,)
    assert set(info) == {"uncertainty", "model_version"}


def test_sb3_ppo_trains_in_imagination(linear_model, linear_data):
    from stable_baselines3 import PPO
    from stable_baselines3.common.env_util import make_vec_env

    venv = make_vec_env(
        lambda: ImaginedEnv(linear_model, linear_data.obs, horizon=10), n_envs=2, seed=0
    )
    algo = PPO("MlpPolicy", venv, n_steps=64, batch_size=64, n_epochs=1, seed=0,
               device="cpu", policy_kwargs={"net_arch": [16]})  # fmt: skip
    algo.learn(256)
    assert algo.num_timesteps == 256


# ----------------------------------------------------------------- SuccessRewardModel
def _success_data(n=400, seed=0, with_next=True):
    """1-D states in [0, 1]: a step that reaches x' > 0.8 succeeds (reward 1, terminated)."""
    rng = np.random.default_rng(seed)
    obs = rng.uniform(0, 1, (n, 1)).astype(np.float32)
    nxt = np.clip(obs + rng.uniform(-0.2, 0.2, (n, 1)), 0, 1).astype(np.float32)
    success = nxt[:, 0] > 0.8
    buf = TransitionBuffer()
    has_next = np.ones(n, bool) if with_next else ~success
    buf.add(obs, np.zeros(n, int), success.astype(np.float32), nxt, success, has_next=has_next)
    return buf


def test_the_success_model_learns_success_and_rewards_progress():
    model = SuccessRewardModel(obs_dim=1, hidden_sizes=(16,), lr=1e-2, seed=0)
    data = _success_data()
    model.fit(data, epochs=60)
    # The label is a threshold of x (0.8); 0.15 either side of it, and with the class
    # weight balancing the few successes, a fitted classifier is confidently right.
    p = model.probability(np.array([[0.1], [0.5], [0.65], [0.95], [1.0]], np.float32))
    assert (p[:3] < 0.2).all() and (p[3:] > 0.8).all(), p
    obs = np.array([[0.2], [0.5], [0.9]], np.float32)
    nxt = np.array([[0.3], [0.95], [0.5]], np.float32)
    np.testing.assert_array_equal(
        model.reward(obs, nxt), model.probability(nxt) - model.probability(obs)
    )
    assert model.reward(obs, nxt)[1] > 0.5 and model.reward(obs, nxt)[2] < -0.5


def test_success_labels_never_take_a_missing_next_observation():
    # A fleet trajectory's successful last step has no o' (stored as zeros): those rows
    # must not put a "success" at the origin; the observation before is labelled instead,
    # with a warning (a trajectory with final_obs gives the success step itself).
    data = _success_data(with_next=False)
    obs, labels = SuccessRewardModel.labels(data)
    assert labels.sum() == 0 and len(obs) == len(data) + int(data.has_next.sum())
    model = SuccessRewardModel(obs_dim=1, hidden_sizes=(16,), lr=1e-2, seed=0)
    with pytest.warns(RuntimeWarning, match="one step early"):
        model.fit(data, epochs=60)
    assert model.probability(np.array([[0.95]], np.float32))[0] > 0.5


# ----------------------------------------------------------------- ImaginationConfig
@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"share": -0.1}, ValueError, "share"),
        ({"share": 1.5}, ValueError, "share"),
        ({"share": "most"}, ValueError, "share"),
        ({"max_share": 2.0}, ValueError, "max_share"),
        ({"horizon": 0}, ValueError, "horizon"),
        ({"horizon": -3}, ValueError, "horizon"),
        ({"horizon": "long"}, ValueError, "horizon"),
        ({"min_horizon": 10, "max_horizon": 5}, ValueError, "min_horizon: expected at most"),
        ({"reward": "sparse"}, ValueError, "reward"),
        ({"elites": 8, "ensemble_size": 4}, ValueError, "elites"),
        ({"warmup": 5}, ValueError, "warmup"),
        ({"error_tolerance": 0.0}, ValueError, "error_tolerance"),
    ],
)
def test_bad_imagination_configs_are_refused(kwargs, error, match):
    with pytest.raises(error, match=match):
        ImaginationConfig(**kwargs)


def test_imagination_config_from_values():
    assert ImaginationConfig.from_value(None) is None
    assert ImaginationConfig.from_value(False) is None
    assert ImaginationConfig.from_value(True, seed=3) == ImaginationConfig(seed=3)
    config = ImaginationConfig.from_value({"share": 0.5, "hidden_sizes": [8]}, seed=2)
    assert (config.share, config.hidden_sizes, config.seed) == (0.5, (8,), 2)
    assert ImaginationConfig.from_value(config) is config
    assert ImaginationConfig(share="auto", horizon=lambda update, _: 1 + update).share == "auto"
    with pytest.raises(TypeError, match=r"actual \['shares'\]"):
        ImaginationConfig.from_value({"shares": 0.5})
    with pytest.raises(TypeError, match="expected None, True"):
        ImaginationConfig.from_value(0.5)


# ----------------------------------------------------------------- PPOLearner(imagination=...)
TINY = {
    "share": 0.5,
    "horizon": 5,
    "warmup": 100,
    "ensemble_size": 2,
    "elites": 2,
    "hidden_sizes": (16,),
    "max_fit_updates": 20,
}


def _rounds(n=2, steps=128):
    worker = RolloutWorker("CartPole-v1", actor_id=0, seed=0)
    learner = PPOLearner("CartPole-v1", seed=0)
    trajs = [worker.rollout(learner.get_weights(), steps, 0) for _ in range(n)]
    worker.close()
    return trajs


def test_ppo_mixes_imagined_samples_into_its_updates():
    trajs = _rounds()
    learner = PPOLearner("CartPole-v1", seed=0, imagination=TINY)
    plain = PPOLearner("CartPole-v1", seed=0)
    for i, traj in enumerate(trajs, start=1):
        stats = learner.update([traj])
        plain.update([traj])
        last = learner.imagination.last
        # share 0.5: one imagined sample per real one (rounded up to whole steps per env).
        assert last.active and last.imagined_samples >= 128
        assert stats.num_samples == 128 + last.imagined_samples
        assert last.model_version == i and last.imagination_lag == 0.0
        assert learner.samples_seen == 128 * i  # real samples only
    # Episode returns come from the real trajectories only.
    assert list(learner.recent_returns) == list(plain.recent_returns)
    assert learner.episodes_seen == plain.episodes_seen > 0
    assert learner.imagination.buffer.total_added > 0


def test_ppo_with_share_zero_learns_as_without_imagination():
    trajs = _rounds()
    learner = PPOLearner("CartPole-v1", seed=0, imagination={**TINY, "share": 0.0})
    plain = PPOLearner("CartPole-v1", seed=0)
    for traj in trajs:
        stats, reference = learner.update([traj]), plain.update([traj])
        assert stats.num_samples == reference.num_samples == 128
        assert learner.imagination.last.imagined_samples == 0
    # The model was fitted (own generators) without touching the policy's randomness.
    assert learner.imagination.model.version == 2
    for key, value in plain.get_weights().items():
        np.testing.assert_array_equal(learner.get_weights()[key], value)


def test_a_diverging_model_stops_imagination_with_a_warning():
    trajs = _rounds(3)
    learner = PPOLearner("CartPole-v1", seed=0, imagination={**TINY, "model_lr": 1e300})
    with pytest.warns(RuntimeWarning, match="imagination stopped: .* real data only"):
        stats = learner.update([trajs[0]])
    assert stats.num_samples == 128 and not learner.imagination.enabled
    assert learner.imagination.model.version == 0
    for traj in trajs[1:]:  # training continues, on real data, without another warning
        assert learner.update([traj]).num_samples == 128
    assert learner.policy_version == 3 and learner.samples_seen == 384


# ----------------------------------------------------------------- multistep_error
def _linear_runs(episodes=20, seed=0):
    env, rng = LinearEnv(), np.random.default_rng(seed)
    runs = []
    for e in range(episodes):
        obs, _ = env.reset(seed=seed + e)
        seen, acts, done = [obs], [], False
        while not done:
            action = rng.uniform(-1, 1, 1).astype(np.float32)
            obs, _, terminated, truncated, _ = env.step(action)
            seen.append(obs)
            acts.append(action)
            done = terminated or truncated
        runs.append((np.stack(seen), np.stack(acts)))
    return runs


def test_multistep_error_is_zero_for_a_perfect_model(linear_model, monkeypatch):
    runs = _linear_runs()
    scale = np.ones(2)
    perfect = type("Prediction", (), {})

    def truth(obs, actions):
        out = perfect()
        out.next_obs = linear_truth(obs, actions)[0]
        return out

    monkeypatch.setattr(linear_model, "predict", truth)
    error = multistep_error(linear_model, runs, 10, scale, np.random.default_rng(0))
    # Runs are 5 steps long (the env truncates): horizons past 5 are left out. The env
    # computes the same float32 expression, so the error is 0 to rounding (~1e-14).
    assert len(error) == 5 and max(error) < 1e-10

    def still(obs, actions):  # "nothing moves": the error of a model that can fail
        out = perfect()
        out.next_obs = obs.copy()
        return out

    monkeypatch.setattr(linear_model, "predict", still)
    lazy = multistep_error(linear_model, runs, 5, scale, np.random.default_rng(0))
    assert min(lazy) > 1e-3 and lazy[-1] > lazy[0]


def test_multistep_error_of_the_trained_model_is_small(linear_model, linear_data):
    runs = _linear_runs(seed=100)
    error = multistep_error(
        linear_model, runs, 5, linear_data.obs.std(axis=0), np.random.default_rng(0)
    )
    # In units of B_real's variance per dimension (~1/3 here): the one-step error is the
    # held-out error above (< 1e-2 of the change's variance, which is smaller still).
    assert len(error) == 5 and error[0] < 1e-3 and max(error) < 1e-2


def test_runs_split_trajectories_at_episode_ends():
    (traj,) = _rounds(1, steps=64)
    runs = _runs(traj)
    assert sum(len(a) for _, a in runs) == 64 - int((traj.terminated | traj.truncated).sum()) - 1
    for obs, actions in runs:
        assert len(obs) == len(actions) + 1
    np.testing.assert_array_equal(runs[0][0], traj.obs[: len(runs[0][0])])


def test_imagined_trajectories_record_their_model_version():
    (traj,) = _rounds(1)
    learner = PPOLearner("CartPole-v1", seed=0, imagination=TINY)
    imagined = learner.imagination.step(learner.policy, [traj], learner.policy_version)
    assert imagined and all((t.model_versions == 1).all() for t in imagined)
    assert all(t.actor_id < 0 and t.episode_returns == [] for t in imagined)
    assert all(np.isfinite(t.uncertainty).all() for t in imagined)
    assert torch.get_num_threads() == 1  # the suite's one-thread fixture still holds
    assert isinstance(learner.imagination.model.action_space, gym.spaces.Discrete)


def test_validation_schedule_rises_as_the_held_out_loss_falls():
    from types import SimpleNamespace as NS

    from fleetgym.agents.world_model import validation_schedule

    sched = validation_schedule(5, 50, target=1e-4)
    first = NS(validation={"obs": 1e-2})

    def at(loss):
        return sched(0, NS(history=[first], last=NS(validation={"obs": loss})))

    # log-linear between the first fit's loss (5) and the target (50), clipped beyond.
    assert [at(1e-2), at(1e-3), at(1e-4), at(1e-6), at(1.0)] == [5, 28, 50, 50, 5]
    with pytest.raises(ValueError, match="start"):
        validation_schedule(0, 50)
