"""TokenActor: a local and a served actor of one seed decode the same tokens; the behaviour
log-probs are the learner's; seeding by (seed, slot, incarnation); chunks of K actions; the
published observation statistics normalise; bad input is refused."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from fleetgym.agents.inference import InferenceServer
from fleetgym.agents.inference.token_model import (
    OBS_STATS_PREFIX,
    token_policy_weights,
)
from fleetgym.agents.learners.asynchronous.token_actor import TokenActor
from fleetgym.agents.learners.token_config import TokenPPOConfig
from fleetgym.agents.workloads import get_workload

CFG = TokenPPOConfig(hidden_size=16, layers=1, heads=2, vocab_size=64, num_bins=16, chunk=2)
HOPPER = get_workload("Hopper-v5")


def _weights(actor: TokenActor) -> dict:
    return token_policy_weights(actor.local_model().policy)


def test_local_and_served_actors_decode_the_same_tokens_with_the_learners_log_probs():
    local = TokenActor(HOPPER, 1, 0, 0, CFG)
    weights = _weights(local)
    weights.update(
        {OBS_STATS_PREFIX + "mean": np.full(11, 0.1), OBS_STATS_PREFIX + "var": np.full(11, 2.0)}
    )
    served_model = TokenActor(HOPPER, 5, 0, 0, CFG).local_model()  # another copy, then the weights
    served_model.load_weights(weights)
    with InferenceServer(served_model, max_batch=2, max_wait_ms=1.0) as server:
        served = TokenActor(HOPPER, 1, 0, 0, CFG, client=server.connect(slots=1))
        a = local.rollout(weights, 12, 4)
        b = served.rollout(weights, 12, 4)
        served.close()
    local.close()
    assert a.actions.shape == (12, 2, 3) and b.policy_versions.tolist() == [0] * 12
    assert a.policy_versions is None
    np.testing.assert_array_equal(a.actions, b.actions)
    np.testing.assert_allclose(a.log_probs, b.log_probs, atol=1e-5)
    np.testing.assert_allclose(a.obs, b.obs)
    with torch.no_grad():
        ev = local.local_model().policy.evaluate(
            torch.from_numpy(b.obs), torch.from_numpy(b.actions), step=torch.from_numpy(b.steps)
        )
    np.testing.assert_allclose(b.log_probs, ev.log_probs.numpy(), atol=1e-5)
    np.testing.assert_allclose(b.values, ev.values.numpy(), atol=1e-5)


def test_chunks_run_k_actions_and_episodes_end_inside_them():
    actor = TokenActor(HOPPER, 0, 3, 0, CFG)
    traj = actor.rollout(_weights(actor), 64, 0)
    done = traj.terminated | traj.truncated
    assert done.any()  # a random Hopper falls within 128 steps
    # K = 2 env steps per decision, one fewer where an episode ended at its first action.
    assert 2 * 64 - int(done.sum()) <= traj.env_steps <= 2 * 64
    assert sum(traj.episode_lengths) <= traj.env_steps
    # Steps restart at 0 after each episode end and grow by K otherwise.
    after = np.flatnonzero(done[:-1]) + 1
    assert (traj.steps[after] == 0).all()
    going = np.flatnonzero(~done[:-1])
    assert (traj.steps[going + 1] == traj.steps[going] + 2).all()
    assert np.isfinite(traj.rewards).all()
    actor.close()


def test_seeding_is_by_seed_slot_and_incarnation():
    runs = {}
    for key in [(0, 0, 0), (0, 0, 0), (0, 1, 0), (0, 0, 1)]:
        actor = TokenActor(HOPPER, key[1], key[0], key[2], CFG)
        torch.manual_seed(0)
        weights = _weights(TokenActor(HOPPER, 0, 0, 0, CFG))
        runs.setdefault(key, []).append(actor.rollout(weights, 8, 0).actions)
        actor.close()
    np.testing.assert_array_equal(*runs[(0, 0, 0)])
    assert not np.array_equal(runs[(0, 0, 0)][0], runs[(0, 1, 0)][0])
    assert not np.array_equal(runs[(0, 0, 0)][0], runs[(0, 0, 1)][0])


def test_published_statistics_normalise_the_observations():
    actor = TokenActor(HOPPER, 0, 0, 0, CFG)
    weights = _weights(actor)
    mean, var = np.full(11, 0.5), np.full(11, 4.0)
    weights.update({OBS_STATS_PREFIX + "mean": mean, OBS_STATS_PREFIX + "var": var})
    traj = actor.rollout(weights, 4, 0)
    np.testing.assert_allclose(traj.obs, (traj.raw_obs - 0.5) / np.sqrt(4.0 + 1e-8), atol=1e-6)
    bad = {**weights, OBS_STATS_PREFIX + "var": np.ones(3)}
    with pytest.raises(ValueError, match=r"observation statistics of shape \(11,\)"):
        actor.rollout(bad, 4, 1)
    actor.close()


def test_a_discrete_env_takes_the_bin_as_its_action():
    cfg = TokenPPOConfig(hidden_size=16, layers=1, heads=2, vocab_size=64, num_bins=16)
    actor = TokenActor(get_workload("CartPole-v1"), 0, 0, 0, cfg)
    traj = actor.rollout(_weights(actor), 16, 0)
    offset = actor.spec.tokenizer.offset
    assert set((traj.actions - offset).ravel().tolist()) <= {0, 1}
    assert traj.env_steps == 16
    actor.close()


def test_bad_input_is_refused():
    with pytest.raises(TypeError, match="config: expected a TokenPPOConfig, actual dict"):
        TokenActor(HOPPER, 0, 0, 0, {"chunk": 2})
    actor = TokenActor(HOPPER, 0, 0, 0, CFG)
    with pytest.raises(ValueError, match="weights: expected the token policy's keys"):
        actor.rollout({"w": np.zeros(1, np.float32)}, 4, 0)
    actor.close()
