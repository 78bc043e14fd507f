"""Paired training seeds: each round paid relative to a constant fleet on the same seed;
the start race before training (its winner's episodes become the paired references) and
the moves check after it.

The runs are the real scheduling env (real fleet and PPO learner, modelled timing),
shrunk to a few rounds of a few actors.
"""

from __future__ import annotations

import csv
import json

import gymnasium as gym
import numpy as np
import pytest

pytest.importorskip("stable_baselines3")

import torch  # noqa: E402

import fleetgym  # noqa: E402,F401
from fleetgym.agents.schedulers.actions import STEP_DOWN, STEP_KEEP, STEP_UP  # noqa: E402
from fleetgym.experiments.schedule import (  # noqa: E402
    checkpoint,
    config,
    moves,
    paired,
    start,
    train,
)
from fleetgym.experiments.schedule.evaluate import evaluate_scheduler  # noqa: E402

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


def _train_tiny(out, cfg, *, episodes, **kwargs):
    """A scheduler trained on the tiny env, quietly (no progress bar, no TensorBoard)."""
    return train.train_scheduler(
        out,
        env_id=ENV_ID,
        env_kwargs=TINY,
        episodes=episodes,
        config=cfg,
        progress=False,
        tensorboard=False,
        **kwargs,
    )


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
    result = _train_tiny(tmp_path, cfg, episodes=3)
    assert result.episodes == 3
    from fleetgym.experiments.schedule.checkpoint import read_scheduler_meta

    assert read_scheduler_meta(result.model_path)["config"]["paired_seeds"] == 2


# The start race.


def _make():
    return gym.make(ENV_ID, **TINY)


def test_selection_is_the_best_mean_of_constant_fleets_on_the_same_seeds():
    chosen = start.select_start(_make, (4, 1, 2), (5, 6, 7), progress=False)
    assert chosen.sizes == (1, 2, 4) and chosen.seeds == (5, 6, 7)
    env = _make()
    for n in chosen.sizes:
        for s in chosen.seeds:
            # the same episode as a constant fleet run on its own (the env is a pure
            # function of its seed and actions)
            again = paired.fixed_fleet_rewards(env, n, s)
            np.testing.assert_array_equal(chosen.rewards[n][s], again)
    env.close()
    means = chosen.mean_totals()
    assert means[chosen.best] == max(means.values())
    rows = {r["start_actors"]: r for r in chosen.rows()}
    assert rows[chosen.best]["chosen"] and rows[chosen.best]["diff_to_chosen"] == 0
    for n in chosen.sizes:
        diff = chosen.totals(n) - chosen.totals(chosen.best)
        assert rows[n]["diff_to_chosen"] == pytest.approx(diff.mean(), abs=1e-6)
        assert rows[n]["seeds_better_than_chosen"] == int((diff > 0).sum())


def test_ties_go_to_the_smaller_fleet():
    selection = start.StartSelection(
        sizes=(2, 4),
        seeds=(1,),
        best=2,
        rewards={2: {1: np.array([-1.0])}, 4: {1: np.array([-1.0])}},
    )
    assert selection.mean_totals() == {2: -1.0, 4: -1.0}

    class Flat(gym.Env):
        action_space = gym.spaces.Discrete(4)
        observation_space = gym.spaces.Box(-1, 1, (1,))

        def reset(self, *, seed=None, options=None):
            return np.zeros(1, np.float32), {}

        def step(self, action):
            return np.zeros(1, np.float32), -1.0, True, False, {}

    assert start.select_start(Flat, (4, 2, 1), (0, 1), progress=False).best == 1


class _Toy(gym.Env):
    """One round: reward -1/actors + a seed effect common to all sizes + a small
    size-and-seed effect, so 2 and 4 actors are close and 1 is far behind."""

    action_space = gym.spaces.Discrete(4)
    observation_space = gym.spaces.Box(-1, 1, (1,))

    def reset(self, *, seed=None, options=None):
        self._seed = seed
        return np.zeros(1, np.float32), {}

    def step(self, action):
        actors = int(action) + 1
        own = np.random.default_rng([self._seed, actors]).normal(0, 0.01)
        common = np.random.default_rng(self._seed).normal(0, 1.0)
        reward = -1.0 / actors - (0.248 if actors == 4 else 0.0) + common + own
        return np.zeros(1, np.float32), reward, True, False, {}


def test_the_race_drops_a_clearly_worse_size_early_and_runs_close_ones_on():
    chosen = start.select_start(_Toy, (1, 2, 4), range(10, 40), first=4, progress=False)
    assert len(chosen.rewards[1]) == 4  # 0.5 behind with a spread of ~0.01: dropped at once
    # 2 and 4 differ by 0.002 on average: they race on over more seeds
    assert len(chosen.rewards[2]) > 4 and len(chosen.rewards[4]) > 4
    assert chosen.seeds == tuple(range(10, 10 + len(chosen.rewards[chosen.best])))
    rows = {r["start_actors"]: r for r in chosen.rows()}
    assert rows[1]["seeds"] == 4 and rows[chosen.best]["seeds"] == len(chosen.seeds)
    # the seed effect cancels out of every paired difference
    assert rows[1]["diff_to_chosen"] < -0.4 and rows[1]["diff_stderr"] < 0.02


def test_bad_candidates_are_clear_errors():
    with pytest.raises(ValueError, match=r"start size: expected 1\.\.4"):
        start.select_start(_make, (2, 8), (0,), progress=False)
    with pytest.raises(ValueError, match="expected at least one each"):
        start.select_start(_make, (), (0,), progress=False)
    with pytest.raises(ValueError, match="start_search: expected positive ints"):
        config.SchedulerPPOConfig(start_search=(8, 0))
    with pytest.raises(ValueError, match="start_search: needs a start and a pool"):
        config.SchedulerPPOConfig(start_search=(8,), paired_seeds=0)
    with pytest.raises(ValueError, match="start_search: needs a start and a pool"):
        config.SchedulerPPOConfig(actions="pow2", start_search=(8,))
    assert config.stored_config({"config": {"actions": "step"}})["start_search"] == ()


def test_training_starts_from_the_selected_size_paired_against_it(tmp_path):
    cfg = config.SchedulerPPOConfig(
        n_steps=4,
        batch_size=4,
        n_epochs=2,
        paired_seeds=2,
        start_search=(1, 2, 4),
        start_search_seeds=4,
    )
    result = _train_tiny(tmp_path, cfg, episodes=2, seed=3)
    # the same selection, run again by hand on the pool the env trains on
    chosen = start.select_start(_make, (1, 2, 4), paired.pool_seeds(3, 4), first=2, progress=False)
    stored = checkpoint.read_scheduler_meta(result.model_path)["config"]
    assert stored["start_actors"] == chosen.best and stored["start_search"] == [1, 2, 4]
    summary = json.loads((tmp_path / "scheduler_summary.json").read_text())
    assert summary["start_actors"] == chosen.best
    assert summary["start_search"] == pytest.approx(
        {str(n): v for n, v in chosen.mean_totals().items()}
    )
    with open(tmp_path / "scheduler_start_search.csv") as f:
        rows = list(csv.DictReader(f))
    assert [int(r["start_actors"]) for r in rows] == [1, 2, 4]
    assert [r["chosen"] == "True" for r in rows] == [n == chosen.best for n in (1, 2, 4)]
    # the training episodes are paired against the chosen size's episodes (cached):
    # keeping the start earns exactly 0, as without the selection
    episodes = list(csv.DictReader(open(tmp_path / "scheduler_episodes.csv")))
    assert len(episodes) == 2
    # resuming keeps the stored start and does not select again
    more = train.train_scheduler(
        tmp_path / "resumed",
        episodes=3,
        resume_from=result.model_path,
        progress=False,
        tensorboard=False,
    )
    assert not (tmp_path / "resumed" / "scheduler_start_search.csv").exists()
    resumed = checkpoint.read_scheduler_meta(more.model_path)["config"]
    assert resumed["start_actors"] == chosen.best


def test_reference_cache_is_used_instead_of_running_the_reference():
    fake = {s: np.full(4, -0.25) for s in paired.pool_seeds(0, 2)}
    env = paired.PairedSeedsWrapper(
        _make(),
        lambda: pytest.fail("the reference ran"),
        pool_size=2,
        reference_actors=2,
        reference_cache=fake,
    )
    _, info = env.reset(seed=0)
    _, shaped, *_ = env.step(1)
    plain = _make()
    plain.reset(seed=info["paired_seed"])
    _, reward, *_ = plain.step(1)
    assert shaped == pytest.approx(reward + 0.25, abs=1e-12)
    env.close()
    plain.close()


# The moves check (the ladder of TINY is 1, 2, 4; a step scheduler starts at 2).

POOL = paired.pool_seeds(5, 3)


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    out = tmp_path_factory.mktemp("moves")
    cfg = config.SchedulerPPOConfig(n_steps=4, batch_size=4, n_epochs=2, paired_seeds=3)
    result = _train_tiny(out, cfg, episodes=1, seed=5)
    return result.model_path


def _with_head(src, dst, action):
    """A copy of the scheduler at ``src`` whose argmax is ``action`` in every state."""
    model = checkpoint.load_scheduler(src)
    with torch.no_grad():
        model.policy.action_net.weight.zero_()
        model.policy.action_net.bias.zero_()
        model.policy.action_net.bias[action] = 3.0
    meta = dict(getattr(model, checkpoint.META_ATTR))
    checkpoint.save_scheduler(model, dst, meta, meta["episodes"])
    return dst


def _schedules(path, seeds):
    played = evaluate_scheduler(checkpoint.load_learned_scheduler(path), TINY, seeds, env_id=ENV_ID)
    return [list(e.num_actors) for e in played], np.array([e.total_reward for e in played])


def test_moves_that_lose_are_reset_to_keeping_the_start(trained, tmp_path):
    for action in (STEP_UP, STEP_DOWN):
        path = _with_head(trained, tmp_path / f"a{action}.zip", action)
        _, totals = _schedules(path, POOL)
        constant = np.array([r.sum() for r in _constant(2, POOL)])
        check = moves.check_moves(path, ENV_ID, TINY, POOL, start_actors=2, keep_prior=0.9)
        diff = totals - constant
        assert check.seeds == 3 and check.mean_diff == pytest.approx(diff.mean(), abs=1e-9)
        assert check.stderr == pytest.approx(diff.std(ddof=1) / np.sqrt(3), abs=1e-9)
        assert check.kept == (diff.mean() > 0)
        after, after_totals = _schedules(path, POOL)
        if check.kept:
            np.testing.assert_array_equal(after_totals, totals)
        else:
            assert after == [[2, 2, 2, 2]] * 3  # the start size throughout
            model = checkpoint.load_scheduler(path)
            probs = torch.softmax(model.policy.action_net.bias.detach(), 0)
            assert float(probs[STEP_KEEP]) == pytest.approx(0.9, abs=1e-6)
            assert float(model.policy.action_net.weight.detach().abs().sum()) == 0.0


def test_moves_that_gain_are_kept_untouched(trained, tmp_path):
    path = _with_head(trained, tmp_path / "up.zip", STEP_UP)
    before, totals = _schedules(path, POOL)
    constant = _constant(2, POOL)
    # a reference 1.0 worse in total on every seed: the moves gain on average
    reference = {s: r - 1.0 / len(r) for s, r in zip(POOL, constant, strict=True)}
    check = moves.check_moves(
        path, ENV_ID, TINY, POOL, start_actors=2, keep_prior=0.9, reference=reference
    )
    gain = totals - np.array([r.sum() for r in constant]) + 1.0
    assert check.kept and check.mean_diff == pytest.approx(gain.mean(), abs=1e-9)
    after, after_totals = _schedules(path, POOL)
    assert after == before and before[0][1] == 4  # still moving up
    np.testing.assert_array_equal(after_totals, totals)


def test_a_keeping_policy_gains_exactly_nothing(trained, tmp_path):
    path = _with_head(trained, tmp_path / "keep.zip", STEP_KEEP)
    check = moves.check_moves(path, ENV_ID, TINY, POOL, start_actors=2, keep_prior=0.9)
    assert check.mean_diff == 0.0 and not check.kept


def test_training_with_the_check_records_it(tmp_path):
    cfg = config.SchedulerPPOConfig(
        n_steps=4, batch_size=4, n_epochs=2, paired_seeds=2, check_moves=True
    )
    _train_tiny(tmp_path, cfg, episodes=1)
    summary = json.loads((tmp_path / "scheduler_summary.json").read_text())
    assert summary["moves_check"]["seeds"] == 2
    with pytest.raises(ValueError, match="check_moves: needs moves and a pool"):
        config.SchedulerPPOConfig(check_moves=True, paired_seeds=0)
    with pytest.raises(ValueError, match="check_moves: needs moves and a pool"):
        config.SchedulerPPOConfig(check_moves=True, actions="pow2")


def _constant(actors, seeds):
    import gymnasium as gym

    env = gym.make(ENV_ID, **TINY)
    try:
        return [paired.fixed_fleet_rewards(env, actors, s) for s in seeds]
    finally:
        env.close()
