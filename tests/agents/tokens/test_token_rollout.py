"""TokenRolloutCollector: chunk rewards, episode ends, seeding, one distribution, bad envs."""

from __future__ import annotations

import copy

import gymnasium as gym
import numpy as np
import pytest
import torch

from fleetgym.agents.rollout.token_rollout import TokenRolloutCollector, token_env_spec
from fleetgym.agents.tokens import ActionTokenizer
from fleetgym.agents.tokens.backbones import TinyCausalTransformer
from fleetgym.agents.tokens.missions import MissionVocabulary
from fleetgym.agents.tokens.policy import TokenPolicy


class CounterEnv(gym.Env):
    """Observation = the step count, reward 1 per step, terminated after ``length`` steps."""

    def __init__(self, length: int = 4, dims: int = 1, terminate: bool = True) -> None:
        self.length, self.terminate = length, terminate
        self.observation_space = gym.spaces.Box(-np.inf, np.inf, (1,), np.float64)
        self.action_space = gym.spaces.Box(-1.0, 1.0, (dims,), np.float32)
        self.t = 0

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.t = 0
        return np.array([0.0]), {}

    def step(self, action):
        assert self.action_space.contains(np.asarray(action, np.float32))
        self.t += 1
        return np.array([float(self.t)]), 1.0, self.terminate and self.t >= self.length, False, {}


def _policy(dims=1, chunk=1, obs_dim=1, seed=0):
    torch.manual_seed(seed)
    tok = ActionTokenizer([-1.0] * dims, [1.0] * dims, num_bins=8, vocab_size=32)
    net = TinyCausalTransformer(hidden_size=16, layers=1, heads=2, vocab_size=32)
    return TokenPolicy(net, tok, obs_dim=obs_dim, chunk=chunk, max_steps=10)


def test_chunk_rewards_are_discounted_sums_and_an_episode_ends_inside_a_chunk():
    policy = _policy(chunk=3)
    col = TokenRolloutCollector(lambda: CounterEnv(length=4), policy, 2, gamma=0.5)
    ro = col.collect(policy, decisions=4)
    # Episode of 4 steps in chunks of 3: decisions of 3 and 1 steps, then again.
    assert ro.rewards[:, 0].tolist() == [1.75, 1.0, 1.75, 1.0]
    assert ro.terminated[:, 0].tolist() == [False, True, False, True]
    assert not ro.truncated.any()
    assert ro.env_steps == 2 * 8 and ro.episode_returns == [4.0] * 4
    assert ro.episode_lengths == [4] * 4
    # The step input of each decision is its env step inside the episode.
    assert ro.steps[:, 1].tolist() == [0.0, 3.0, 0.0, 3.0]
    # The chunk's actions after the episode's end were not executed: marked for the learner.
    full, cut = [True] * 3, [True, False, False]
    assert ro.executed[:, 0].tolist() == [full, cut, full, cut]


def test_the_learner_does_not_train_on_tokens_after_an_episode_ended_in_the_chunk():
    """Two rollouts that differ only in the tokens (and their log-probs) of actions no env
    executed give the same update; before the mask they moved the policy."""
    from fleetgym.agents.learners.token_ppo import TokenPPO

    def make():
        return CounterEnv(length=4, dims=2)

    kwargs = dict(chunk=3, n_envs=2, n_steps=4, epochs=1, minibatch_size=8, hidden_size=16,
                  layers=1, heads=2, vocab_size=64, num_bins=8, normalize_reward=False)  # fmt: skip
    a, b = TokenPPO(make, **kwargs), TokenPPO(make, **kwargs)
    ro = a.collector.collect(a.policy, 4)
    b.collector.obs_stats = a.collector.obs_stats
    assert (~ro.executed).any()
    other = copy.deepcopy(ro)
    dropped = ~other.executed[..., None].repeat(2, -1)
    rng = np.random.default_rng(0)
    other.tokens[dropped] = a.policy.tokenizer.offset + rng.integers(0, 8, int(dropped.sum()))
    other.log_probs[dropped] = -7.0
    assert not np.array_equal(other.tokens, ro.tokens)
    a.update(ro)
    b.update(other)
    for p, q in zip(a.policy.parameters(), b.policy.parameters(), strict=True):
        assert torch.allclose(p, q, atol=1e-6)
    a.collector.close()
    b.collector.close()


def test_time_limits_are_truncations_with_a_bootstrap_value():
    policy = _policy()
    col = TokenRolloutCollector(
        lambda: gym.wrappers.TimeLimit(CounterEnv(terminate=False), 3),
        policy,
        1,
        normalize_obs=False,
    )
    ro = col.collect(policy, decisions=6)
    assert ro.truncated[:, 0].tolist() == [False, False, True] * 2
    assert not ro.terminated.any()
    assert np.all(ro.truncation_values[ro.truncated] != 0.0)
    assert np.all(ro.truncation_values[~ro.truncated] == 0.0)


def test_same_seed_same_rollout_and_other_seed_another():
    def run(seed):
        policy = _policy(dims=1, chunk=2, obs_dim=3)
        col = TokenRolloutCollector(lambda: gym.make("Pendulum-v1"), policy, 2, seed=seed)
        return col.collect(policy, decisions=6), col.collect(policy, decisions=3)

    (a1, a2), (b1, b2), (c1, _) = run(0), run(0), run(1)
    for x, y in ((a1, b1), (a2, b2)):
        assert np.array_equal(x.tokens, y.tokens) and np.array_equal(x.obs, y.obs)
        assert np.array_equal(x.rewards, y.rewards)
    assert not np.array_equal(a1.obs, c1.obs)


def test_behaviour_log_probs_are_the_learners_on_the_stored_inputs():
    policy = _policy(dims=1, chunk=2, obs_dim=3)
    col = TokenRolloutCollector(lambda: gym.make("Pendulum-v1"), policy, 3, seed=0)
    col.collect(policy, decisions=4)  # the statistics now normalise
    ro = col.collect(policy, decisions=4)
    b = ro.num_decisions
    ev = policy.evaluate(
        torch.from_numpy(ro.obs.reshape(b, 3)),
        torch.from_numpy(ro.tokens.reshape(b, 2, 1)),
        step=torch.from_numpy(ro.steps.reshape(b)),
    )
    # float32: the cached and the full pass differ by rounding (~1e-6 on log-probs of ~-2).
    assert torch.allclose(ev.log_probs, torch.from_numpy(ro.log_probs.reshape(b, 2, 1)), atol=1e-5)
    assert torch.allclose(ev.values, torch.from_numpy(ro.values.reshape(b)), atol=1e-5)
    assert np.all(np.abs(ro.obs) <= 10.0)


def test_bad_envs_are_refused():
    policy = _policy()
    with pytest.raises(ValueError, match=r"expected Discrete\(8\)"):
        TokenRolloutCollector(lambda: gym.make("CartPole-v1"), _policy(obs_dim=4), 1)
    with pytest.raises(ValueError, match="Box action space of 2 entries"):
        TokenRolloutCollector(lambda: gym.make("Pendulum-v1"), _policy(dims=2, obs_dim=3), 1)
    with pytest.raises(ValueError, match="observations of 1 entries"):
        TokenRolloutCollector(lambda: gym.make("Pendulum-v1"), policy, 1)
    with pytest.raises(TypeError, match="callable"):
        TokenRolloutCollector("Pendulum-v1", policy, 1)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="TokenPolicy"):
        TokenRolloutCollector(lambda: CounterEnv(), object(), 1)  # type: ignore[arg-type]
    col = TokenRolloutCollector(lambda: CounterEnv(), policy, 1)
    with pytest.raises(ValueError, match="chunk, dims and obs_dim"):
        col.collect(_policy(chunk=2), decisions=1)


def test_babyai_missions_become_instruction_ids_and_bins_become_actions():
    pytest.importorskip("minigrid")
    env_id = "BabyAI-GoToRedBallGrey-v0"
    vocab = MissionVocabulary()
    spec = token_env_spec(gym.make(env_id), num_bins=256, vocab_size=64)
    assert spec.discrete and spec.tokenizer.num_bins == 7 and spec.max_steps == 64
    assert (spec.obs_dim, spec.instruction_length) == (7 * 7 * 3 + 1, vocab.length)
    torch.manual_seed(0)
    net = TinyCausalTransformer(hidden_size=16, layers=1, heads=2, vocab_size=64)
    policy = TokenPolicy(
        net, spec.tokenizer, obs_dim=spec.obs_dim,
        instruction_length=spec.instruction_length, max_steps=spec.max_steps,
    )  # fmt: skip
    col = TokenRolloutCollector(lambda: gym.make(env_id), policy, 2, seed=0)
    ro = col.collect(policy, decisions=70)  # > 64: every env ends an episode
    assert ro.instructions is not None and ro.instructions.shape == (70, 2, vocab.length)
    assert np.all(ro.instructions == vocab.encode("go to the red ball"))
    bins = ro.tokens - spec.tokenizer.offset
    assert bins.min() >= 0 and bins.max() <= 6 and len(ro.episode_returns) >= 2
    b = ro.num_decisions
    ev = policy.evaluate(
        torch.from_numpy(ro.obs.reshape(b, -1)), torch.from_numpy(ro.tokens.reshape(b, 1, 1)),
        torch.from_numpy(ro.instructions.reshape(b, -1)), step=torch.from_numpy(ro.steps.reshape(b)),
    )  # fmt: skip
    assert torch.allclose(ev.log_probs, torch.from_numpy(ro.log_probs.reshape(b, 1, 1)), atol=1e-5)


def test_env_specs_refuse_what_no_token_policy_takes():
    with pytest.raises(ValueError, match="Box observation space or a Dict with 'image'"):
        token_env_spec(gym.make("Blackjack-v1"), 8, 64)  # Tuple observations, Discrete(2)

    class MultiEnv(CounterEnv):
        def __init__(self):
            super().__init__()
            self.action_space = gym.spaces.MultiDiscrete([3, 3])

    with pytest.raises(ValueError, match="Box or Discrete action space"):
        token_env_spec(MultiEnv(), 8, 64)
    pytest.importorskip("minigrid")
    with pytest.raises(ValueError, match="mission ids .* below the action ids"):
        token_env_spec(gym.make("BabyAI-GoToRedBallGrey-v0"), 8, vocab_size=20)
