"""Tests of fleetgym.agents.policies: shapes, exact distribution maths, sampling, files."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
import torch

from fleetgym.agents.policies import ActorCriticPolicy, NumpyActorCritic
from fleetgym.errors import UnsupportedSpaceError

VEC = gym.spaces.Box(-np.inf, np.inf, (5,), np.float32)
BOX = gym.spaces.Box(-1.0, 1.0, (3,), np.float32)
IMG = gym.spaces.Box(0, 255, (4, 84, 84), np.uint8)


def _policy(action_space=None, **kw):
    torch.manual_seed(0)
    return ActorCriticPolicy(VEC, action_space or gym.spaces.Discrete(4), **kw)


@pytest.mark.parametrize(
    ("action_space", "action_shape", "dtype"),
    [(gym.spaces.Discrete(4), (7,), np.int64), (BOX, (7, 3), np.float32)],
)
def test_act_shapes_and_consistency_with_evaluate_actions(action_space, action_shape, dtype):
    policy = _policy(action_space)
    obs = np.random.default_rng(0).normal(size=(7, 5)).astype(np.float32)
    actions, log_probs, values = policy.act(obs, rng=np.random.default_rng(1))
    assert actions.shape == action_shape and actions.dtype == dtype
    assert log_probs.shape == (7,) and values.shape == (7,)
    lp, ent, v = policy.evaluate_actions(torch.from_numpy(obs), torch.from_numpy(actions))
    np.testing.assert_allclose(lp.detach().numpy(), log_probs, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(v.detach().numpy(), values, rtol=1e-6)
    np.testing.assert_allclose(policy.value(obs), values, rtol=1e-6)
    assert ent.shape == (7,)


def test_single_unbatched_observation_is_accepted():
    actions, _, _ = _policy().act(np.zeros(5, np.float32), rng=np.random.default_rng(0))
    assert actions.shape == (1,)
    with pytest.raises(ValueError, match=r"obs: expected shape \(batch, 5\)"):
        _policy().act(np.zeros((2, 6), np.float32))


def test_log_prob_and_entropy_match_torch_distributions():
    cat = _policy()
    logits = torch.randn(6, 4)
    actions = torch.tensor([0, 1, 2, 3, 1, 0])
    ref = torch.distributions.Categorical(logits=logits)
    torch.testing.assert_close(cat.log_prob(logits, actions), ref.log_prob(actions))
    torch.testing.assert_close(cat.entropy(logits), ref.entropy())

    gauss = _policy(BOX, log_std_init=-0.5)
    means, acts = torch.randn(6, 3), torch.randn(6, 3)
    ref_n = torch.distributions.Normal(means, torch.exp(gauss.log_std).detach().expand(6, 3))
    torch.testing.assert_close(gauss.log_prob(means, acts), ref_n.log_prob(acts).sum(-1))
    torch.testing.assert_close(gauss.entropy(means), ref_n.entropy().sum(-1))


def test_kl_matches_torch_and_is_zero_on_itself():
    cat = _policy()
    a, b = torch.randn(5, 4), torch.randn(5, 4)
    ref = torch.distributions.kl_divergence(
        torch.distributions.Categorical(logits=a), torch.distributions.Categorical(logits=b)
    )
    torch.testing.assert_close(cat.kl_divergence(a, b), ref)
    torch.testing.assert_close(cat.kl_divergence(a, a), torch.zeros(5))

    gauss = _policy(BOX)
    ls_p, ls_q = torch.tensor([0.1, -0.2, 0.3]), torch.tensor([-0.4, 0.0, 0.2])
    m_p, m_q = torch.randn(5, 3), torch.randn(5, 3)
    ref = torch.distributions.kl_divergence(
        torch.distributions.Normal(m_p, ls_p.exp()), torch.distributions.Normal(m_q, ls_q.exp())
    ).sum(-1)
    torch.testing.assert_close(gauss.kl_divergence(m_p, m_q, ls_p, ls_q), ref)


def test_categorical_sampling_frequencies():
    policy = _policy()
    logits = torch.tensor([[2.0, 0.0, -1.0, 1.0]])
    probs = torch.softmax(logits, -1).numpy()[0]
    n = 20_000
    rng = np.random.default_rng(123)
    actions = policy.sample_from(logits.expand(n, 4), rng.random(n), None).numpy()
    freq = np.bincount(actions, minlength=4) / n
    # Each frequency is a binomial proportion: std = sqrt(p (1 - p) / n) <= 0.0036 for
    # n = 20000; 5 std bounds a false failure at ~6e-7 per category (fixed seed anyway).
    tol = 5 * np.sqrt(probs * (1 - probs) / n)
    assert np.all(np.abs(freq - probs) <= tol)


def test_gaussian_sampling_uses_mean_and_std():
    policy = _policy(BOX, log_std_init=np.log(0.5))
    means = torch.tensor([[0.3, -0.2, 1.0]])
    normals = np.ones((1, 3), np.float32)
    sample = policy.sample_from(means, None, normals)
    torch.testing.assert_close(sample, means + 0.5)
    assert torch.equal(policy.sample_from(means, None, None), means)


def test_deterministic_act_takes_the_mode():
    policy = _policy()
    obs = np.random.default_rng(0).normal(size=(8, 5)).astype(np.float32)
    actions, _, _ = policy.act(obs, deterministic=True)
    logits, _ = policy(torch.from_numpy(obs))
    np.testing.assert_array_equal(actions, logits.argmax(-1).numpy())


def test_same_generator_state_gives_same_actions():
    policy = _policy(BOX)
    obs = np.zeros((4, 5), np.float32)
    a1 = policy.act(obs, rng=np.random.default_rng(7))[0]
    a2 = policy.act(obs, rng=np.random.default_rng(7))[0]
    a3 = policy.act(obs, rng=np.random.default_rng(8))[0]
    np.testing.assert_array_equal(a1, a2)
    assert not np.array_equal(a1, a3)


def test_running_obs_statistics_equal_batch_statistics():
    policy = _policy(normalize_obs=True)
    rng = np.random.default_rng(0)
    a = rng.normal(3.0, 2.0, size=(50, 5))
    b = rng.normal(-1.0, 0.5, size=(30, 5))
    policy.update_obs_stats(a)
    policy.update_obs_stats(b)
    both = np.concatenate([a, b])
    np.testing.assert_allclose(policy.obs_mean.numpy(), both.mean(0), rtol=1e-10)
    np.testing.assert_allclose(policy.obs_var.numpy(), both.var(0), rtol=1e-10)
    assert float(policy.obs_count) == 80
    x = torch.from_numpy(both[:2].astype(np.float32))
    expected = (both[:2] - both.mean(0)) / np.sqrt(both.var(0) + 1e-8)
    np.testing.assert_allclose(policy.preprocess(x).numpy(), expected, rtol=1e-4, atol=1e-5)
    # the statistics are buffers: they travel with the weights
    weights = policy.get_weights()
    assert {"obs_mean", "obs_var", "obs_count"} <= set(weights)
    other = _policy(normalize_obs=True)
    other.load_weights(weights)
    torch.testing.assert_close(other.preprocess(x), policy.preprocess(x))


def test_normalised_observations_are_clipped():
    policy = _policy(normalize_obs=True)
    policy.update_obs_stats(np.zeros((10, 5)) + np.arange(10)[:, None] * 1e-3)
    out = policy.preprocess(torch.full((1, 5), 1e6))
    assert float(out.max()) == 10.0


def test_weights_round_trip_and_errors():
    policy, other = _policy(), _policy()
    with torch.no_grad():
        for p in other.parameters():
            p.add_(1.0)
    other.load_weights(policy.get_weights())
    for (k, v), (_, w) in zip(policy.state_dict().items(), other.state_dict().items(), strict=True):
        assert torch.equal(v, w), k
    weights = policy.get_weights()
    weights.pop("value_head.bias")
    with pytest.raises(ValueError, match=r"missing \['value_head.bias'\]"):
        other.load_weights(weights)
    weights = policy.get_weights()
    weights["value_head.bias"] = np.zeros(3, np.float32)
    with pytest.raises(ValueError, match=r"expected shape \(1,\), actual \(3,\)"):
        other.load_weights(weights)


@pytest.mark.parametrize("action_space", [gym.spaces.Discrete(3), BOX])
def test_save_load_round_trip_reproduces_actions(tmp_path, action_space):
    policy = _policy(action_space, normalize_obs=True, workload_name="custom")
    policy.update_obs_stats(np.random.default_rng(0).normal(2.0, 3.0, size=(20, 5)))
    path = policy.save(tmp_path / "sub" / "policy.pt")
    assert path.is_file() and path.with_suffix(".json").is_file()
    loaded = ActorCriticPolicy.load(path)
    assert loaded.config == policy.config
    obs = np.random.default_rng(1).normal(size=(6, 5)).astype(np.float32)
    for a, b in zip(
        policy.act(obs, rng=np.random.default_rng(3)),
        loaded.act(obs, rng=np.random.default_rng(3)),
        strict=True,
    ):
        np.testing.assert_array_equal(a, b)


def test_load_missing_file(tmp_path):
    with pytest.raises(FileNotFoundError, match="missing"):
        ActorCriticPolicy.load(tmp_path / "absent.pt")


def test_cnn_policy_on_stacked_frames():
    torch.manual_seed(0)
    policy = ActorCriticPolicy(
        IMG, gym.spaces.Discrete(6), network="nature_cnn", hidden_sizes=(512,), activation="relu"
    )
    obs = np.random.default_rng(0).integers(0, 256, size=(2, 4, 84, 84), dtype=np.uint8)
    actions, log_probs, values = policy.act(obs, rng=np.random.default_rng(0))
    assert actions.shape == (2,) and log_probs.shape == (2,) and values.shape == (2,)
    assert np.all((actions >= 0) & (actions < 6))


@pytest.mark.parametrize(
    ("obs_space", "action_space", "kw", "error", "match"),
    [
        (
            gym.spaces.Discrete(3),
            gym.spaces.Discrete(2),
            {},
            UnsupportedSpaceError,
            "expected a Box",
        ),
        (
            VEC,
            gym.spaces.MultiDiscrete([2, 2]),
            {},
            UnsupportedSpaceError,
            "expected Discrete or a 1-D Box",
        ),
        (IMG, gym.spaces.Discrete(2), {}, UnsupportedSpaceError, "expected 1-D vectors"),
        (
            VEC,
            gym.spaces.Discrete(2),
            {"network": "nature_cnn"},
            UnsupportedSpaceError,
            r"expected \(C, H, W\)",
        ),
        (VEC, gym.spaces.Discrete(2), {"network": "rnn"}, ValueError, "network: expected"),
        (VEC, gym.spaces.Discrete(2), {"activation": "gelu"}, ValueError, "activation: expected"),
        (VEC, gym.spaces.Discrete(2), {"hidden_sizes": ()}, ValueError, "hidden_sizes: expected"),
    ],
)
def test_invalid_construction(obs_space, action_space, kw, error, match):
    with pytest.raises(error, match=match):
        ActorCriticPolicy(obs_space, action_space, **kw)


@pytest.mark.parametrize(
    ("action_space", "kw"),
    [
        (gym.spaces.Discrete(4), {}),
        (gym.spaces.Discrete(3), {"activation": "relu", "normalize_obs": True}),
        (BOX, {"normalize_obs": True, "log_std_init": -0.7}),
    ],
)
def test_numpy_snapshot_matches_the_torch_policy(action_space, kw):
    policy = _policy(action_space, **kw)
    rng = np.random.default_rng(0)
    policy.update_obs_stats(rng.normal(1.0, 2.0, size=(40, 5)))
    fast = NumpyActorCritic(policy)
    obs = rng.normal(size=(9, 5)).astype(np.float32)
    params, values = fast.forward(obs)
    params_t, values_t = policy(torch.from_numpy(obs))
    # float32 products in a different order: agreement to rounding (~1e-7 relative)
    np.testing.assert_allclose(params, params_t.detach().numpy(), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(values, values_t.detach().numpy(), rtol=1e-5, atol=1e-6)
    uniforms, normals = policy.draw(np.random.default_rng(1), 9)
    actions, log_probs = fast.sample(params, uniforms, normals)
    actions_t = policy.sample_from(params_t, uniforms, normals)
    np.testing.assert_allclose(actions, actions_t.detach().numpy(), rtol=1e-5, atol=1e-6)
    lp_t = policy.log_prob(params_t, torch.from_numpy(actions)).detach().numpy()
    np.testing.assert_allclose(log_probs, lp_t, rtol=1e-5, atol=1e-5)
    mode, _ = fast.sample(params, None, None)
    np.testing.assert_allclose(
        mode, policy.sample_from(params_t, None, None).detach().numpy(), atol=1e-6
    )


def test_numpy_snapshot_refuses_cnn_policies():
    policy = ActorCriticPolicy(
        IMG, gym.spaces.Discrete(2), network="nature_cnn", hidden_sizes=(32,)
    )
    with pytest.raises(ValueError, match="expected an MLP policy"):
        NumpyActorCritic(policy)


@pytest.mark.parametrize("action_space", [gym.spaces.Discrete(4), BOX])
def test_log_prob_entropy_and_kl_agree_with_torch_distributions(action_space):
    # The policy keeps its own formulas (the learner's seeded figures depend on their exact
    # rounding); torch.distributions checks the maths to float32 rounding.
    from torch.distributions import Categorical, Independent, Normal, kl_divergence

    torch.manual_seed(0)
    policy = _policy(action_space, log_std_init=-0.3)
    params_p = torch.randn(64, policy.action_dim) * 2
    params_q = torch.randn(64, policy.action_dim) * 2
    if policy.discrete:
        actions = torch.randint(0, policy.action_dim, (64,))
        dist_p, dist_q = Categorical(logits=params_p), Categorical(logits=params_q)
        kl = policy.kl_divergence(params_p, params_q)
    else:
        actions = torch.randn(64, policy.action_dim)
        other_log_std = torch.full((policy.action_dim,), 0.4)
        std = policy.log_std.exp().detach()
        dist_p = Independent(Normal(params_p, std), 1)
        dist_q = Independent(Normal(params_q, other_log_std.exp()), 1)
        kl = policy.kl_divergence(params_p, params_q, log_std_q=other_log_std)
    with torch.no_grad():
        torch.testing.assert_close(policy.log_prob(params_p, actions), dist_p.log_prob(actions))
        torch.testing.assert_close(policy.entropy(params_p), dist_p.entropy())
        torch.testing.assert_close(kl, kl_divergence(dist_p, dist_q))


@pytest.mark.parametrize(
    ("kw", "error", "match"),
    [
        ({"log_std_init": float("nan")}, ValueError, "log_std_init: expected a finite number"),
        ({"hidden_sizes": (64, 10**12)}, ValueError, r"hidden_sizes\[1\]: expected an int in"),
        ({"hidden_sizes": (64.0,)}, TypeError, r"hidden_sizes\[0\]: expected an int"),
        ({"hidden_sizes": "64"}, TypeError, "hidden_sizes: expected a sequence of ints"),
        ({"normalize_obs": "no"}, TypeError, "normalize_obs: expected a bool"),
        ({"network": 3}, TypeError, "network: expected one of"),
    ],
)
def test_bad_hyperparameters_are_rejected_up_front(kw, error, match):
    with pytest.raises(error, match=match):
        _policy(BOX, **kw)
