"""TokenizedActions: spaces, decoding, gym.make round trip, SB3-style use, bad input."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env

from fleetgym.agents.tokens import ActionTokenizer, TokenizedActions
from fleetgym.errors import UnsupportedSpaceError


class RecordingEnv(gym.Env):
    """Box actions in [-1, 1]^2; the observation is the last action the env received."""

    observation_space = gym.spaces.Box(-1.0, 1.0, (2,), np.float32)
    action_space = gym.spaces.Box(-1.0, 1.0, (2,), np.float32)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        return np.zeros(2, np.float32), {}

    def step(self, action):
        return np.asarray(action, np.float32), 0.0, False, False, {}


@pytest.mark.filterwarnings("ignore:.*different from the unwrapped")
@pytest.mark.parametrize("space", ["multidiscrete", "tuple"])
@pytest.mark.parametrize("vocab_size", [None, 32000])
def test_tokens_decode_to_bin_centres(space, vocab_size):
    env = TokenizedActions(RecordingEnv(), num_bins=4, vocab_size=vocab_size, space=space)
    check_env(env, skip_render_check=True)
    offset = 0 if vocab_size is None else vocab_size - 4
    env.reset(seed=0)
    ids = (offset + 0, offset + 3)
    action = np.array(ids) if space == "multidiscrete" else ids
    assert env.action_space.contains(action)
    obs, *_ = env.step(action)
    assert obs.tolist() == [-0.75, 0.75]


def test_multidiscrete_space_and_sampling():
    env = TokenizedActions(gym.make("Hopper-v5"))
    assert env.action_space == gym.spaces.MultiDiscrete([256, 256, 256])
    env.reset(seed=0)
    env.action_space.seed(0)
    for _ in range(3):
        env.step(env.action_space.sample())
    env.close()


def test_gym_make_spec_round_trip():
    env = TokenizedActions(gym.make("Pendulum-v1"), num_bins=8)
    rebuilt = gym.make(env.spec)
    assert rebuilt.action_space == env.action_space
    env.close()
    rebuilt.close()


def test_fitted_tokenizer_beyond_the_box_is_clipped_to_the_box():
    tok = ActionTokenizer([-3.0, -3.0], [3.0, 3.0], num_bins=2)
    env = TokenizedActions(RecordingEnv(), tokenizer=tok)
    env.reset(seed=0)
    obs, *_ = env.step(np.array([0, 1]))  # centres -1.5 and 1.5 lie outside [-1, 1]
    assert obs.tolist() == [-1.0, 1.0]


def test_bad_input():
    with pytest.raises(UnsupportedSpaceError, match="expected a Box"):
        TokenizedActions(gym.make("CartPole-v1"))
    with pytest.raises(ValueError, match="expected 2 dimensions"):
        TokenizedActions(RecordingEnv(), tokenizer=ActionTokenizer([0.0], [1.0]))
    with pytest.raises(TypeError, match="expected an ActionTokenizer"):
        TokenizedActions(RecordingEnv(), tokenizer="bins")
    with pytest.raises(ValueError, match="space: expected one of"):
        TokenizedActions(RecordingEnv(), space="discrete")
    env = TokenizedActions(RecordingEnv(), num_bins=4)
    env.reset(seed=0)
    with pytest.raises(ValueError, match="expected 2 token ids"):
        env.step(np.array([1, 2, 3]))
    with pytest.raises(ValueError, match="expected ids in"):
        env.step(np.array([1, 9]))
