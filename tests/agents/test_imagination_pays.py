"""Tests of the "Imagination that pays" fixes, on a real WorldModel / Imagination / PPOLearner.

The horizon between fits, the fixed held-out split, terminal observations and success
labels, gradient clipping, the success share of B_real, B_img kept between updates with
its imagination lag, the replay control and bad input.
"""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
import torch
from world_model_systems import LinearEnv

from fleetgym.agents.learners.ppo import PPOLearner
from fleetgym.agents.rollout import RolloutWorker
from fleetgym.agents.types import Trajectory
from fleetgym.agents.world_model import (
    Imagination,
    ImaginationConfig,
    SuccessRewardModel,
    TransitionBuffer,
    WorldModel,
    validation_schedule,
)
from fleetgym.agents.world_model.config import parse_imagination_spec
from fleetgym.errors import UnsupportedSpaceError

SMALL = {
    "share": 0.5,
    "warmup": 100,
    "ensemble_size": 2,
    "elites": 2,
    "hidden_sizes": (16,),
    "max_fit_updates": 20,
}


def _rounds(n: int, steps: int = 64) -> list[Trajectory]:
    worker = RolloutWorker("CartPole-v1", actor_id=0, seed=0)
    weights = PPOLearner("CartPole-v1", seed=0).get_weights()
    trajs = [worker.rollout(weights, steps, 0) for _ in range(n)]
    worker.close()
    return trajs


# ----------------------------------------------------------------- 1. horizon between fits
@pytest.mark.parametrize(
    "how",
    [
        {"horizon": validation_schedule(5, 50, target=0.3)},
        {"schedule": "validation", "min_horizon": 5, "max_horizon": 50, "validation_target": 0.3},
    ],
    ids=["callable", "schedule=validation"],
)
def test_the_validation_horizon_holds_between_fits(how):
    learner = PPOLearner("CartPole-v1", seed=0, imagination={**SMALL, "model_every": 3, **how})
    horizons, fitted = [], []
    for traj in _rounds(9):
        before = learner.imagination.model.version
        learner.update([traj])
        horizons.append(learner.imagination.last.horizon)
        fitted.append(learner.imagination.model.version > before)
    # A fit every third update (the first once warmup is met).
    assert fitted == [False, False, True] * 3
    # The first fit gives the start; later fits move it; between fits it holds.
    assert horizons[2] == 5 and max(horizons) > 5, horizons
    for i in range(3, len(horizons)):
        if not fitted[i]:
            assert horizons[i] == horizons[i - 1], horizons


@pytest.mark.parametrize("name", ["validation", "linear", "error"])
def test_the_spec_chooses_the_schedule(name):
    config = parse_imagination_spec(f"schedule={name},min_horizon=2,max_horizon=9")
    assert config.schedule == name and config.as_dict()["schedule"] == name
    imagination = Imagination(config, *_cartpole_spaces())
    chosen = imagination._horizon([0.0] * 9)
    assert 2 <= chosen <= 9
    if name == "linear":
        assert chosen == 2  # update 0 of a linear rise from min_horizon


def _cartpole_spaces() -> tuple[gym.Space, gym.Space]:
    env = gym.make("CartPole-v1")
    return env.observation_space, env.action_space


# ----------------------------------------------------------------- 2. a fixed held-out split
def test_no_row_is_ever_both_held_out_and_trained_on_across_fits():
    env = LinearEnv()
    model = WorldModel(
        env.observation_space, env.action_space, ensemble_size=2, elites=1,
        hidden_sizes=(8,), seed=0,
    )  # fmt: skip
    source = TransitionBuffer.collect(env, 600, seed=0)
    data = TransitionBuffer(10_000, seed=3)
    held: set[int] = set()
    trained: set[int] = set()
    for lo in range(0, 600, 100):  # B_real grows; every fit is warm-started on all of it
        rows = slice(lo, lo + 100)
        data.add(source.obs[rows], source.actions[rows], source.rewards[rows],
                 source.next_obs[rows], source.terminated[rows])  # fmt: skip
        report = model.fit(data, epochs=1)
        now_held, now_trained = set(model.last_holdout_rows), set(model.last_train_rows)
        assert len(now_held) == report.holdout_samples and now_held.isdisjoint(now_trained)
        assert held <= now_held and trained <= now_trained  # rows keep their side
        held, trained = held | now_held, trained | now_trained
    assert held.isdisjoint(trained) and len(held | trained) == 600
    assert 0.1 < len(held) / 600 < 0.3  # about the default holdout share, 0.2


def test_rows_keep_their_keys_through_eviction_and_tail():
    data = TransitionBuffer(20, seed=1)
    for _ in range(3):
        obs = np.random.default_rng(0).normal(size=(15, 2)).astype(np.float32)
        data.add(obs, np.zeros(15, int), np.zeros(15), obs, np.zeros(15, bool))
    assert data.row_ids.tolist() == list(range(25, 45))
    tail = data.tail(5)
    np.testing.assert_array_equal(tail.holdout_key, data.holdout_key[-5:])


# ----------------------------------------------------------------- 3. terminal observations
def _trajectory(obs, rewards, terminated, truncated, final_obs=None) -> Trajectory:
    n = len(rewards)
    traj = Trajectory(
        obs=np.asarray(obs, np.float32), actions=np.zeros(n, np.int64),
        log_probs=np.zeros(n, np.float32), values=np.zeros(n, np.float32),
        rewards=np.asarray(rewards, np.float32), terminated=np.asarray(terminated, bool),
        truncated=np.asarray(truncated, bool), truncation_values=np.zeros(n, np.float32),
        last_value=0.0, episode_returns=[], episode_lengths=[], actor_id=0,
        policy_version=0, seed=0,
    )  # fmt: skip
    if final_obs is not None:
        traj.final_obs = np.asarray(final_obs, np.float32)  # type: ignore[attr-defined]
    return traj


def test_terminal_observations_are_stored_and_the_success_step_is_labelled(recwarn):
    nan = np.nan
    # Episode 1: 0.1 -> 0.5 -> 0.7 -> success at 0.9 (terminated, rewarded);
    # episode 2: 0.2 -> 0.3, cut by a time limit at 0.35; then 0.4 (mid-episode).
    traj = _trajectory(
        obs=[[0.1], [0.5], [0.7], [0.2], [0.3], [0.4]],
        rewards=[0, 0, 1, 0, 0, 0],
        terminated=[0, 0, 1, 0, 0, 0],
        truncated=[0, 0, 0, 0, 1, 0],
        final_obs=[[nan], [nan], [0.9], [nan], [0.35], [nan]],
    )
    data = TransitionBuffer()
    assert data.add_trajectory(traj) == 5  # the last step has no next observation
    assert data.has_next.all()
    np.testing.assert_allclose(data.next_obs[:, 0], [0.5, 0.7, 0.9, 0.3, 0.35])
    assert data.terminated.tolist() == [False, False, True, False, False]
    assert len(set(data.segments[:3])) == 1 and data.segments[3] != data.segments[2]
    obs, labels = SuccessRewardModel.labels(data)
    # The positive class is the state success reached (0.9), not the one before (0.7).
    np.testing.assert_allclose(obs[labels == 1][:, 0], [0.9])
    SuccessRewardModel(obs_dim=1, hidden_sizes=(4,), seed=0).fit(data, epochs=1)
    assert not [w for w in recwarn if "success labels" in str(w.message)]


def test_success_rows_without_a_terminal_observation_warn():
    traj = _trajectory([[0.1], [0.7]], [0, 1], [0, 1], [0, 0])
    data = TransitionBuffer()
    data.add_trajectory(traj)
    assert not data.has_next[-1]
    with pytest.warns(RuntimeWarning, match="one step early"):
        SuccessRewardModel(obs_dim=1, hidden_sizes=(4,), seed=0).fit(data, epochs=1)


# ----------------------------------------------------------------- 6. clipping, B_real, B_img
def test_both_models_clip_every_gradient_step(monkeypatch, linear_data):
    calls: list[float] = []
    clip = torch.nn.utils.clip_grad_norm_

    def spy(parameters, max_norm, *args, **kwargs):
        calls.append(float(max_norm))
        return clip(parameters, max_norm, *args, **kwargs)

    monkeypatch.setattr(torch.nn.utils, "clip_grad_norm_", spy)
    env = LinearEnv()
    model = WorldModel(env.observation_space, env.action_space, ensemble_size=2, elites=1,
                       hidden_sizes=(8,), seed=0)  # fmt: skip
    assert model.max_grad_norm == 10.0 and model.config()["max_grad_norm"] == 10.0
    report = model.fit(linear_data, epochs=1, batch_size=200)
    assert calls == [10.0] * report.updates
    calls.clear()
    success = SuccessRewardModel(obs_dim=2, hidden_sizes=(4,), seed=0)
    assert success.max_grad_norm == 1.0
    success.fit(linear_data, epochs=2, batch_size=1000)  # 1,800 rows: 2 batches an epoch
    assert calls == [1.0] * 4


def test_a_saved_model_keeps_its_max_grad_norm(tmp_path, linear_data):
    env = LinearEnv()
    model = WorldModel(env.observation_space, env.action_space, ensemble_size=2, elites=1,
                       hidden_sizes=(8,), max_grad_norm=0.5, seed=0)  # fmt: skip
    model.fit(linear_data, epochs=1)
    assert WorldModel.load(model.save(tmp_path / "m.pt")).max_grad_norm == 0.5


def _episodes(buffer: TransitionBuffer, count: int, length: int, success: bool) -> None:
    for _ in range(count):
        obs = np.full((length, 1), float(success), np.float32)
        rewards = np.zeros(length, np.float32)
        term = np.zeros(length, bool)
        term[-1] = True
        rewards[-1] = float(success)
        buffer.add(obs, np.zeros(length, int), rewards, obs, term)


@pytest.mark.parametrize(("share", "kept"), [(0.0, 0), (0.3, 6), (0.5, 10)])
def test_a_success_share_of_b_real_survives_eviction(share, kept):
    data = TransitionBuffer(20, success_share=share)
    _episodes(data, 4, 2, success=True)  # 8 successful rows, oldest
    _episodes(data, 10, 4, success=False)  # 40 failures push them out
    assert len(data) == 20
    assert int(data.success_rows().sum()) == min(kept, 8)
    # Whole episodes, newest first; the rest of the capacity holds the newest rows.
    assert int(data.success_rows().sum()) % 2 == 0
    assert data.row_ids[-1] == data.total_added - 1


def test_b_img_is_kept_between_updates_with_its_imagination_lag():
    config = {**SMALL, "horizon": 4, "model_every": 2, "max_imagination_lag": 1}
    learner = PPOLearner("CartPole-v1", seed=0, imagination=config)
    imagination = learner.imagination
    records = []
    for traj in _rounds(6):
        learner.update([traj])
        record = imagination.last
        records.append(record)
        if not imagination.imagined:
            continue  # before the first fit
        versions = np.concatenate([t.model_versions for t in imagination.imagined])
        # Every kept sample records its model; none is more than 1 fit behind.
        assert (imagination.model.version - versions <= 1).all()
        assert record.imagination_lag == pytest.approx(
            float((imagination.model.version - versions).mean())
        )
    assert any(r.reused_samples > 0 for r in records[1:])
    assert any(r.imagination_lag > 0 for r in records)
    assert all(r.reused_samples <= r.imagined_samples for r in records)


@pytest.mark.parametrize("model_every", [1, 2])
def test_by_default_every_update_imagines_afresh(model_every):
    config = {**SMALL, "horizon": 4, "model_every": model_every}
    learner = PPOLearner("CartPole-v1", seed=0, imagination=config)
    for traj in _rounds(4):
        learner.update([traj])
        assert learner.imagination.last.reused_samples == 0
        assert learner.imagination.last.imagination_lag == 0.0


def test_with_lag_zero_only_the_newest_models_samples_are_reused():
    config = {**SMALL, "horizon": 4, "model_every": 2, "max_imagination_lag": 0}
    learner = PPOLearner("CartPole-v1", seed=0, imagination=config)
    reused = []
    for traj in _rounds(6):
        before = learner.imagination.model.version
        learner.update([traj])
        last = learner.imagination.last
        assert last.imagination_lag == 0.0
        fitted = learner.imagination.model.version > before
        reused.append(last.reused_samples > 0)
        if fitted:
            assert last.reused_samples == 0  # the older model's samples were dropped
    assert any(reused)


# ----------------------------------------------------------------- the replay control
def test_the_replay_arm_draws_as_many_samples_from_real_data():
    trajs = _rounds(4)
    replay = PPOLearner("CartPole-v1", seed=0, imagination={"share": 0.75, "source": "replay",
                                                            "warmup": 100})  # fmt: skip
    sizes = [replay.update([t]).num_samples for t in trajs]
    # Nothing to replay before warmup; then three extra real samples per real one (a short
    # store is replayed more than once).
    assert sizes == [64, 256, 256, 256]
    assert replay.imagination.model.version == 0  # no model is fitted
    assert replay.imagination.last.horizon == 0 and replay.imagination.last.active
    assert replay.samples_seen == 4 * 64


# ----------------------------------------------------------------- bad input
@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"updates_per_round": 0}, "updates_per_round"),
        ({"updates_per_round": -2}, "updates_per_round"),
        ({"horizon": 0}, "horizon"),
        ({"min_horizon": 0}, "min_horizon"),
        ({"max_horizon": -1}, "max_horizon"),
        ({"share": 1.01}, "share"),
        ({"share": -0.5}, "share"),
        ({"success_share": 1.5}, "success_share"),
        ({"success_share": -0.1}, "success_share"),
        ({"max_imagination_lag": -1}, "max_imagination_lag"),
        ({"schedule": "cosine"}, "schedule"),
        ({"source": "dream"}, "source"),
        ({"source": "replay", "share": "auto"}, "share: expected a number"),
        ({"validation_target": 0.0}, "validation_target"),
        ({"schedule_updates": 0}, "schedule_updates"),
    ],
)
def test_bad_values_are_refused_naming_the_argument(kwargs, match):
    with pytest.raises(ValueError, match=match):
        ImaginationConfig(**kwargs)


@pytest.mark.parametrize("share", [-0.1, 1.5])
def test_a_buffer_refuses_a_bad_success_share(share):
    with pytest.raises(ValueError, match="success_share"):
        TransitionBuffer(100, success_share=share)


def test_an_env_the_model_cannot_take_is_refused_naming_imagination():
    image = gym.spaces.Box(0, 255, (8, 8, 3), np.uint8)
    with pytest.raises(UnsupportedSpaceError, match="imagination: the env's observation_space"):
        Imagination(ImaginationConfig(), image, gym.spaces.Discrete(3))


def test_a_bad_final_obs_is_refused():
    traj = _trajectory([[0.1, 0.2]], [1], [1], [0], final_obs=[[0.1, 0.2, 0.3]])
    with pytest.raises(ValueError, match="final_obs"):
        TransitionBuffer().add_trajectory(traj)
