"""The moves check: a trained step scheduler keeps its moves only if, played
deterministically on the training pool, they beat a constant fleet of its start size.

The runs are the real scheduling env (real fleet and PPO learner, modelled timing),
shrunk to a few rounds of a few actors.
"""

from __future__ import annotations

import json

import numpy as np
import pytest

pytest.importorskip("stable_baselines3")

import torch  # noqa: E402

import fleetgym  # noqa: E402,F401
from fleetgym.agents.scheduler_actions import STEP_DOWN, STEP_KEEP, STEP_UP  # noqa: E402
from fleetgym.experiments.schedule import checkpoint, config, moves, paired, train  # noqa: E402
from fleetgym.experiments.schedule.evaluate import evaluate_scheduler  # noqa: E402

ENV_ID = config.GENERAL_ENV_ID
# CartPole cannot reach its target in 4 rounds of at most 4 actors x 16 steps: every
# episode is truncated after exactly 4 rounds. The ladder is 1, 2, 4; a step scheduler
# starts at 2.
TINY = {
    "workload": "CartPole-v1",
    "timing": "modeled",
    "max_actors": 4,
    "steps_per_actor": 16,
    "max_rounds": 4,
}
POOL = paired.pool_seeds(5, 3)


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    out = tmp_path_factory.mktemp("moves")
    cfg = config.SchedulerPPOConfig(n_steps=4, batch_size=4, n_epochs=2, paired_seeds=3)
    result = train.train_scheduler(
        out,
        env_id=ENV_ID,
        env_kwargs=TINY,
        episodes=1,
        seed=5,
        config=cfg,
        progress=False,
        tensorboard=False,
    )
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
    train.train_scheduler(
        tmp_path,
        env_id=ENV_ID,
        env_kwargs=TINY,
        episodes=1,
        config=cfg,
        progress=False,
        tensorboard=False,
    )
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
