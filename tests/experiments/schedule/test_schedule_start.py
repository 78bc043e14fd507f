"""Start-size selection: each candidate as a constant fleet on the pool's seeds, the best
mean becomes the start, and its episodes become the paired references.

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

import fleetgym  # noqa: E402,F401
from fleetgym.experiments.schedule import checkpoint, config, paired, start, train  # noqa: E402

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
    result = train.train_scheduler(
        tmp_path,
        env_id=ENV_ID,
        env_kwargs=TINY,
        episodes=2,
        seed=3,
        config=cfg,
        progress=False,
        tensorboard=False,
    )
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
