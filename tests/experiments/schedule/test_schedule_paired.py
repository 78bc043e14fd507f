"""Paired training seeds: each round paid relative to a constant fleet on the same seed.

The runs are the real scheduling env (real fleet and PPO learner, modelled timing),
shrunk to a few rounds of a few actors.
"""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest

pytest.importorskip("stable_baselines3")

import fleetgym  # noqa: E402,F401
from fleetgym.agents.scheduler_actions import STEP_DOWN, STEP_KEEP, STEP_UP  # noqa: E402
from fleetgym.experiments.schedule import config, paired, train  # noqa: E402

ENV_ID = config.GENERAL_ENV_ID
# CartPole cannot reach its target in 4 rounds of at most 4 actors x 16 steps: every
# episode is truncated after exactly 4 rounds.
TINY = {
    "workload": "CartPole-v1",
    "timing": "modeled",
    "max_actors": 4,
    "steps_per_actor": 16,
    "max_rounds": 4,
}


def _episode(env, actions):
    env.reset()
    shaped = []
    for action in actions:
        _, reward, terminated, truncated, info = env.step(action)
        shaped.append(reward)
        if terminated or truncated:
            return shaped, info
    raise AssertionError("the episode did not end")


def _paired_env(pool_size=2, reference_actors=2, env_kwargs=TINY):
    return paired.PairedSeedsWrapper(
        gym.make(ENV_ID, **env_kwargs),
        lambda: gym.make(ENV_ID, **env_kwargs),
        pool_size=pool_size,
        reference_actors=reference_actors,
    )


def test_the_reference_schedule_earns_exactly_zero_on_every_pool_seed():
    env = _paired_env(pool_size=2, reference_actors=2)
    env.reset(seed=5)
    for _ in range(3):  # seeds a, b, then a again (from the cache)
        shaped, info = _episode(env, [1] * 4)  # action 1: two actors, the reference
        assert sum(shaped) == 0.0
        assert info["paired_reference"] < 0
    assert len(env._cache) == 2
    env.close()


def test_paired_return_is_the_true_return_minus_the_references_on_that_seed():
    env = _paired_env(pool_size=1, reference_actors=2)
    env.reset(seed=0)
    shaped, info = _episode(env, [3, 0, 3, 1])
    # The true reward of the same seed and actions, unpaired.
    plain = gym.make(ENV_ID, **TINY)
    plain.reset(seed=info["paired_seed"])
    true = [plain.step(a)[1] for a in (3, 0, 3, 1)]
    reference = env.reference_rewards(info["paired_seed"])
    np.testing.assert_allclose(shaped, np.asarray(true) - reference, rtol=0, atol=1e-12)
    assert info["paired_reference"] == pytest.approx(reference.sum())
    assert sum(true) != sum(reference)  # the schedule differs from the reference
    plain.close()
    env.close()


def test_pool_follows_the_reset_seed_and_cycles():
    env = _paired_env(pool_size=3)
    seen = []
    env.reset(seed=11)
    seen.append(env._seed)
    for _ in range(3):
        env.reset()
        seen.append(env._seed)
    assert seen == paired.pool_seeds(11, 3) + paired.pool_seeds(11, 3)[:1]
    env.reset(seed=12)
    assert env._seed == paired.pool_seeds(12, 3)[0] != seen[0]
    env.close()
    # Never the small evaluation seeds.
    assert min(paired.pool_seeds(0, 1000)) >= 10_000


def test_bad_arguments_are_clear_errors():
    base = gym.make(ENV_ID, **TINY)
    with pytest.raises(ValueError, match="pool_size"):
        paired.PairedSeedsWrapper(base, lambda: base, pool_size=0)
    with pytest.raises(TypeError, match="make_reference"):
        paired.PairedSeedsWrapper(base, None)
    env = paired.PairedSeedsWrapper(base, lambda: gym.make(ENV_ID, **TINY), reference_actors=9)
    with pytest.raises(ValueError, match=r"reference_actors: expected 1\.\.4"):
        env.reset(seed=0)
    env.close()


def test_the_training_env_pairs_against_the_start_size_and_monitor_logs_the_true_reward():
    venv = train.make_scheduler_vec_env(
        ENV_ID, TINY, actions="step", start_actors=2, paired_seeds=2, seed=3
    )
    venv.reset()
    total = 0.0
    for action in (STEP_KEEP, STEP_UP, STEP_DOWN, STEP_KEEP):
        _, reward, done, infos = venv.step(np.array([action]))
        total += float(reward[0])
    assert done[0]
    # Up then down again: the fleet differs from the reference in round 2 only.
    assert infos[0]["episode"]["r"] == pytest.approx(total + infos[0]["paired_reference"], abs=1e-5)
    assert total != 0.0
    venv.close()


def test_training_with_paired_seeds_runs_and_stores_the_setting(tmp_path):
    cfg = config.SchedulerPPOConfig(n_steps=4, batch_size=4, n_epochs=2, paired_seeds=2)
    result = train.train_scheduler(
        tmp_path,
        env_id=ENV_ID,
        env_kwargs=TINY,
        episodes=3,
        config=cfg,
        progress=False,
        tensorboard=False,
    )
    assert result.episodes == 3
    from fleetgym.experiments.schedule.checkpoint import read_scheduler_meta

    assert read_scheduler_meta(result.model_path)["config"]["paired_seeds"] == 2
