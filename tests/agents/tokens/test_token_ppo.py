"""TokenPPO: every ratio level x loss trains, levels that must agree do, ratios start at 1,
V-trace on fresh samples is GAE(lambda=1), seeding, save/load, bad input."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
import torch

import fleetgym.agents.learners.token_ppo as token_ppo
from fleetgym.agents.learners.gae import compute_gae
from fleetgym.agents.learners.token_config import TokenPPOConfig
from fleetgym.agents.learners.token_ppo import TokenPPO

TINY = dict(
    n_envs=2, n_steps=8, epochs=2, minibatch_size=8, hidden_size=16, layers=1, heads=2,
    vocab_size=64, num_bins=16,
)  # fmt: skip


class Bandit2D(gym.Env):
    """Two action dims, one step per episode, reward ``-|a - target|_1`` (exact optimum 0)."""

    target = np.array([0.5, -0.5])

    def __init__(self) -> None:
        self.observation_space = gym.spaces.Box(-1.0, 1.0, (2,), np.float32)
        self.action_space = gym.spaces.Box(-1.0, 1.0, (2,), np.float32)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        return np.zeros(2, np.float32), {}

    def step(self, action):
        reward = -float(np.abs(np.asarray(action) - self.target).sum())
        return np.zeros(2, np.float32), reward, True, False, {}


def _weights(model):
    return [p.detach().clone() for p in model.policy.parameters()]


def record_minibatches(monkeypatch, policy):
    """Record each minibatch's evaluate inputs and its loss arguments during an update."""
    calls: list[dict] = []
    evaluate = policy.evaluate
    loss_fn = token_ppo.level_policy_loss

    def spy_evaluate(*args, **kwargs):
        calls.append({"evaluate": (args, kwargs)})
        return evaluate(*args, **kwargs)

    def spy_loss(new, old, adv, **kwargs):
        value = loss_fn(new, old, adv, **kwargs)
        calls[-1].update(old=old, adv=adv, kwargs=kwargs, before=float(value[0].detach()))
        return value

    monkeypatch.setattr(policy, "evaluate", spy_evaluate)
    monkeypatch.setattr(token_ppo, "level_policy_loss", spy_loss)
    return calls, evaluate, loss_fn


@pytest.mark.parametrize("loss", ["ppo", "gipo", "vtrace"])
@pytest.mark.parametrize("level", ["token", "action", "chunk"])
def test_every_level_and_loss_lowers_its_own_loss(monkeypatch, level, loss):
    """One update of one minibatch (the policy loss alone: no value or entropy term) lowers
    that minibatch's policy loss: the step goes the way the loss says, at every level."""
    model = TokenPPO(
        Bandit2D, ratio_level=level, loss=loss, chunk=2, vf_coef=0.0, lr=1e-4,
        **{**TINY, "epochs": 1, "minibatch_size": 16},
    )  # fmt: skip
    calls, evaluate, loss_fn = record_minibatches(monkeypatch, model.policy)
    model.learn(16)  # 2 envs x 8 decisions: one minibatch
    minibatches = [c for c in calls if "old" in c]  # V-trace's targets evaluate too
    assert model.num_updates == 1 and len(minibatches) == 1
    (args, kwargs), call = minibatches[0]["evaluate"], minibatches[0]
    with torch.no_grad():
        new = evaluate(*args, **kwargs).log_probs
        # V-trace's loss is -w A log pi with w = min(1, rho) held fixed (1 on-policy).
        old = new if loss == "vtrace" else call["old"]
        after = loss_fn(new, old, call["adv"], **call["kwargs"])[0]
    assert call["kwargs"]["level"] == level and call["kwargs"]["loss"] == loss
    assert float(after) < call["before"] - 1e-4


@pytest.mark.parametrize(
    ("env", "chunk", "same"),
    [("Pendulum-v1", 2, ("token", "action")), (Bandit2D, 1, ("action", "chunk"))],
)
def test_levels_that_sum_one_term_train_identically(env, chunk, same):
    # D = 1: an action's sum is its one token; K = 1: a chunk's sum is its one action.
    a = TokenPPO(env, ratio_level=same[0], chunk=chunk, **TINY).learn(48)
    b = TokenPPO(env, ratio_level=same[1], chunk=chunk, **TINY).learn(48)
    assert all(torch.equal(x, y) for x, y in zip(_weights(a), _weights(b), strict=True))


def test_levels_differ_where_they_must():
    a = TokenPPO(Bandit2D, ratio_level="token", chunk=2, **TINY).learn(48)
    b = TokenPPO(Bandit2D, ratio_level="chunk", chunk=2, **TINY).learn(48)
    assert any(not torch.equal(x, y) for x, y in zip(_weights(a), _weights(b), strict=True))


def test_the_first_minibatch_sees_ratios_of_one(monkeypatch):
    seen = []
    real = token_ppo.level_policy_loss

    def spy(new, old, *args, **kwargs):
        seen.append(float((new.detach() - old).abs().max()))
        return real(new, old, *args, **kwargs)

    monkeypatch.setattr(token_ppo, "level_policy_loss", spy)
    TokenPPO("Pendulum-v1", chunk=2, **TINY).learn(32)
    # Behaviour (KV-cached) and learner (teacher-forced) log-probs: one restricted softmax,
    # equal up to float32 rounding before the first step; later minibatches move.
    assert seen[0] < 1e-5
    assert max(seen) > 1e-3


def test_vtrace_targets_on_fresh_samples_are_lambda_one_returns():
    model = TokenPPO("Pendulum-v1", loss="vtrace", normalize_reward=False, chunk=2, **TINY)
    rollout = model.collector.collect(model.policy, 8)
    flat = model.flatten(rollout)
    adv, ret = model._targets(rollout, flat)
    for i in range(2):
        gae_adv, gae_ret = compute_gae(
            rollout.rewards[:, i], rollout.values[:, i], rollout.terminated[:, i],
            rollout.truncated[:, i], rollout.truncation_values[:, i],
            float(rollout.last_values[i]), 0.99**2, 1.0,
        )  # fmt: skip
        # log rho is float32 rounding (< 1e-5, see the test above), so rho = c = 1 to 1e-5:
        # over 8 decisions of |delta| <= 35 (two Pendulum steps of >= -16.3) that moves a
        # target by < 8 * 35 * 1e-5 = 3e-3, plus float32 rounding of returns <= 300 (3e-5).
        assert np.allclose(ret[:, i], gae_ret, atol=1e-2)
        # V-trace's advantage is the one-step r + gamma v_{t+1} - V(s_t) on the targets.
        assert np.isfinite(adv[:, i]).all()
    assert not np.allclose(ret, rollout.values)


def test_learning_moves_the_bandit_towards_its_optimum():
    model = TokenPPO(Bandit2D, seed=0, **{**TINY, "n_envs": 8, "epochs": 4, "lr": 1e-3})
    model.learn(512)
    # A uniform policy on [-1, 1]^2 scores E -|U - t|_1 = -2 * 0.625 = -1.25 with a s.d. of
    # 0.62 per episode, 0.14 for the mean of the 20 episodes reported: the first update
    # reads about -1.25 (< -0.9 by 2.5 s.d.), and a gain of 0.3 is 1.5 s.d. of a difference.
    first = model.history[0].mean_return
    last = model.history[-1].mean_return
    assert first < -0.9 and last > first + 0.3, (first, last)


def test_same_seed_same_run():
    a = TokenPPO("Pendulum-v1", seed=3, **TINY).learn(48)
    b = TokenPPO("Pendulum-v1", seed=3, **TINY).learn(48)
    c = TokenPPO("Pendulum-v1", seed=4, **TINY).learn(48)
    assert all(torch.equal(x, y) for x, y in zip(_weights(a), _weights(b), strict=True))
    assert [s.policy_loss for s in a.history] == [s.policy_loss for s in b.history]
    assert any(not torch.equal(x, y) for x, y in zip(_weights(a), _weights(c), strict=True))


def test_save_and_load_round_trip(tmp_path):
    model = TokenPPO("Pendulum-v1", chunk=2, **TINY).learn(48)
    path = model.save(tmp_path / "m.pt")
    state = torch.load(path, weights_only=True)  # plain tensors and values only
    assert state["kind"] == "fleetgym.TokenPPO"
    other = TokenPPO("Pendulum-v1", seed=9, chunk=2, **TINY)
    other.load(path)
    obs = np.array([0.3, -0.2, 0.5])
    assert np.array_equal(model.predict(obs)[0], other.predict(obs)[0])
    assert model.predict(obs)[0].shape == (2, 1)
    assert np.array_equal(model.collector.obs_stats.mean, other.collector.obs_stats.mean)
    with pytest.raises(ValueError, match="expected the config"):
        TokenPPO("Pendulum-v1", chunk=1, **TINY).load(path)
    (tmp_path / "junk.pt").write_bytes(b"not a checkpoint")
    with pytest.raises(ValueError, match="not a fleetgym checkpoint"):
        other.load(tmp_path / "junk.pt")
    with pytest.raises(FileNotFoundError):
        other.load(tmp_path / "missing.pt")


@pytest.mark.parametrize("value_head", ["attention", "mean", "first"])
def test_value_heads(value_head):
    model = TokenPPO("Pendulum-v1", value_head=value_head, **TINY).learn(32)
    assert np.isfinite(model.history[-1].value_error)
    assert model.predict(np.zeros(3))[0].shape == (1,)


@pytest.mark.parametrize("env", ["CartPole-v1", "BabyAI-GoToRedBallGrey-v0"])
def test_discrete_and_language_conditioned_envs_train(env):
    if env.startswith("BabyAI"):
        pytest.importorskip("minigrid")
    model = TokenPPO(env, **TINY).learn(32)
    assert np.isfinite(model.history[-1].policy_loss) and model.spec.discrete
    action, _ = model.predict(model.make_env().reset(seed=0)[0])
    assert action.shape == () and 0 <= int(action) < model.spec.tokenizer.num_bins
    assert len(model.evaluate(1)) == 1


def test_llama_backbone_trains():
    pytest.importorskip("transformers")
    model = TokenPPO("Pendulum-v1", backbone="llama", **TINY).learn(32)
    assert np.isfinite(model.history[-1].policy_loss)


def test_bad_input():
    with pytest.raises(ValueError, match="ratio_level: expected one of"):
        TokenPPOConfig(ratio_level="joint")
    with pytest.raises(TypeError, match="expected hyperparameters among"):
        TokenPPO("Pendulum-v1", learning_rate=1e-3)
    with pytest.raises(ValueError, match="Box observation space or a Dict with 'image'"):
        TokenPPO("Blackjack-v1", **TINY)
    with pytest.raises(TypeError, match="env id or a callable"):
        TokenPPO(3, **TINY)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="either config= or keyword"):
        TokenPPO("Pendulum-v1", config=TokenPPOConfig(), chunk=2)
    assert TokenPPOConfig(loss="ppo").effective_target_kl is None
    assert TokenPPOConfig(loss="vtrace", target_kl=0).effective_target_kl is None


def test_the_device_is_checked_and_the_policy_lives_there():
    with pytest.raises(ValueError, match="device: expected 'cpu' or 'cuda"):
        TokenPPO("Pendulum-v1", device="tpu", **TINY_DEVICE)
    model = TokenPPO("Pendulum-v1", device="cpu", **TINY_DEVICE)
    assert model.policy.device.type == "cpu"


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_on_a_gpu_token_ppo_collects_and_updates_there():  # pragma: no cover - GPU only
    gpu = TokenPPO("Pendulum-v1", seed=0, device="cuda", **TINY_DEVICE)
    cpu = TokenPPO("Pendulum-v1", seed=0, device="cpu", **TINY_DEVICE)
    rollouts = [m.collector.collect(m.policy, 4) for m in (gpu, cpu)]
    # the same uniforms on the host: the same tokens unless a draw falls within float
    # rounding of a CDF boundary
    assert (rollouts[0].tokens == rollouts[1].tokens).mean() > 0.9
    gpu.update(rollouts[0])
    assert gpu.policy.device.type == "cuda"
    assert all(torch.isfinite(p).all() for p in gpu.policy.parameters())


TINY_DEVICE = dict(
    n_envs=2, n_steps=4, epochs=1, hidden_size=16, layers=1, heads=2, vocab_size=64, num_bins=16
)
