"""The loss registry: the built-in losses give the numbers they gave before the registry,
and a loss registered from outside the library trains through the public learners."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from fleetgym.agents.learners import (  # noqa: E402
    LOSS_REGISTRY,
    LOSSES,
    CompensatedPPOLearner,
    LossConfig,
    LossSettings,
    PolicyLoss,
    TokenPPO,
    get_loss,
    level_policy_loss,
    register_loss,
    unregister_loss,
    vtrace,
)
from fleetgym.agents.rollout import RolloutWorker  # noqa: E402

torch.set_num_threads(1)

NEW = torch.tensor([-0.2, 0.1, 0.5, -1.0, 0.3, 0.0])
OLD = torch.tensor([0.0, 0.0, 0.2, -0.6, -0.3, 0.1])
ADV = torch.tensor([1.0, -0.5, 2.0, 0.3, -1.2, 0.7])

#: (loss, fraction) of each built-in loss on NEW, OLD, ADV with default settings, computed
#: with the string-dispatch code before the registry existed.
FLAT = {
    "ppo": (-0.21901416778564453, 0.5),
    "gipo": (-0.3195174038410187, 0.0),
    "vtrace": (-0.03752629831433296, 0.5),
}
FLAT["decoupled"] = FLAT["ppo"]  # without behaviour_log_probs: PPO-clip exactly
#: level_policy_loss of the same numbers as (B=2, K=3, D=2) token log-probs, per level.
LEVELS = {
    "ppo": [(-1.0883391, 0.5), (-0.2403585, 0.8333333), (-0.2357195, 1.0)],
    "gipo": [(-1.3727512, 0.0), (-0.8315233, 0.1666667), (-0.2898475, 0.0)],
    "vtrace": [(-0.4971311, 0.5), (-0.4324804, 0.5), (-0.6, 1.0)],
}
LEVELS["decoupled"] = LEVELS["ppo"]  # no proximal policy here: PPO-clip exactly


def test_the_builtin_losses_are_registered():
    assert tuple(LOSSES) == ("ppo", "gipo", "vtrace", "decoupled")
    assert set(LOSSES) <= set(LOSS_REGISTRY)


@pytest.mark.parametrize("name", LOSSES)
def test_registered_losses_reproduce_the_values_from_before_the_registry(name):
    value, fraction = get_loss(name).policy_term(NEW, OLD, ADV, LossSettings())
    assert float(value) == pytest.approx(FLAT[name][0], abs=1e-6)
    assert float(fraction) == pytest.approx(FLAT[name][1], abs=1e-6)
    new = NEW.reshape(2, 3, 1).expand(2, 3, 2)
    old = OLD.reshape(2, 3, 1).expand(2, 3, 2)
    for level, expected in zip(("token", "action", "chunk"), LEVELS[name], strict=True):
        value, fraction = level_policy_loss(new, old, torch.tensor([0.8, -0.4]), level, name)
        assert (float(value), float(fraction)) == pytest.approx(expected, abs=1e-6)


def test_vtrace_targets_come_from_the_registered_loss():
    args = (np.ones(3), np.zeros(3), np.zeros(3, bool), np.zeros(3, bool), np.zeros(3), 0.0)
    rhos = np.log([0.5, 2.0, 1.0])
    adv, targets = get_loss("vtrace").targets(*args, rhos, 0.9, 0.95)
    expected_targets, expected_adv = vtrace(*args, rhos, 0.9)
    np.testing.assert_allclose(adv, expected_adv)
    np.testing.assert_allclose(targets, expected_targets)
    with pytest.raises(ValueError, match="log_rhos: expected an array"):
        get_loss("vtrace").targets(*args, None, 0.9, 0.95)


def test_registry_refuses_bad_entries():
    with pytest.raises(ValueError, match="name: expected a name not registered yet"):
        register_loss("ppo", get_loss("ppo"))
    with pytest.raises(ValueError, match="name: expected lower-case"):
        register_loss("Bad Name", get_loss("ppo"))
    with pytest.raises(TypeError, match="loss: expected a PolicyLoss instance"):
        register_loss("fine", object())  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="expected a loss added by register_loss"):
        unregister_loss("gipo")
    with pytest.raises(ValueError, match="loss: expected one of"):
        get_loss("a2c")
    with pytest.raises(TypeError, match="loss: expected one of"):
        get_loss(3)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="rho_bar: expected a finite number > 0"):
        LossSettings(rho_bar=-1.0)


class CappedImportance(PolicyLoss):
    """A toy loss: the importance-sampled policy gradient with the ratio capped at 2."""

    default_target_kl = 0.05
    fraction_name = "capped"

    def __init__(self) -> None:
        self.calls = 0

    def policy_term(self, new_log_probs, old_log_probs, advantages, settings):
        self.calls += 1
        ratio = torch.exp(new_log_probs - old_log_probs)
        loss = -(torch.clamp(ratio, max=2.0) * advantages).mean()
        return loss, (ratio > 2.0).float().mean()

    def label(self, settings, name=""):
        return f"{name}(cap=2)"


@pytest.fixture
def toy_loss():
    loss = register_loss("capped-is", CappedImportance())
    yield loss
    unregister_loss("capped-is")


def test_a_loss_registered_outside_the_library_trains_through_the_learners(toy_loss):
    config = LossConfig("capped-is")
    assert config.label == "capped-is(cap=2)"
    with pytest.raises(ValueError, match="proximal_clip: expected loss 'ppo'"):
        LossConfig("capped-is", proximal_clip=True)
    learner = CompensatedPPOLearner("CartPole-v1", config, epochs=1, minibatch_size=16, seed=0)
    before = {k: v.copy() for k, v in learner.get_weights().items()}
    worker = RolloutWorker("CartPole-v1", 0, seed=0)
    try:
        trajectory = worker.rollout(learner.get_weights(), 32, 0)
    finally:
        worker.close()
    stats = learner.update([trajectory])
    assert toy_loss.calls == 2 and stats.num_samples == 32 and stats.policy_version == 1
    assert np.isfinite(stats.policy_loss)
    after = learner.get_weights()
    assert any(not np.array_equal(before[k], after[k]) for k in before)

    model = TokenPPO(
        "Pendulum-v1", n_envs=2, n_steps=4, epochs=1, minibatch_size=8, hidden_size=16,
        layers=1, heads=2, vocab_size=64, num_bins=16, loss="capped-is",
    )  # fmt: skip
    assert model.config.effective_target_kl == 0.05
    stats = model.learn(total_timesteps=8).history[-1]
    assert toy_loss.calls == 3 and stats.minibatches == 1 and np.isfinite(stats.policy_loss)


def test_an_unregistered_loss_is_refused_by_the_configs():
    with pytest.raises(ValueError, match="loss: expected one of"):
        LossConfig("capped-is")
    with pytest.raises(ValueError, match="loss: expected one of"):
        TokenPPO("Pendulum-v1", loss="capped-is")
