"""The asynchronous trainer: lag bound, backpressure, faults, errors, save/load."""

from __future__ import annotations

import dataclasses
import threading
import time

import numpy as np
import pytest
import torch

from fleetgym.agents.learners.asynchronous.config import AsyncPPOConfig, AsyncTopology
from fleetgym.agents.learners.asynchronous.trainer import AsyncPPO
from fleetgym.agents.learners.losses.registry import PolicyLoss, register_loss, unregister_loss
from fleetgym.agents.rollout import RolloutWorker
from fleetgym.errors import FleetError

TINY = dict(n_actors=2, steps_per_actor=16, epochs=1, minibatch_size=16)


def fields_of(cls):
    return [f.name for f in dataclasses.fields(cls)]


def _actor_threads() -> list[str]:
    return [t.name for t in threading.enumerate() if t.name.startswith("actor-")]


@pytest.mark.timeout(120)
@pytest.mark.parametrize("loss", ["gipo", "ppo", "vtrace"])
def test_learn_records_lag_within_the_bound(loss):
    model = AsyncPPO(
        "CartPole-v1",
        algo=AsyncPPOConfig(
            loss=loss, max_policy_lag=2, hyperparameters={"epochs": 1, "minibatch_size": 16}
        ),
        topology=AsyncTopology(n_actors=2, steps_per_actor=16),
        seed=0,
    )
    model.learn(256)
    assert model.num_timesteps >= 256
    # an update whose samples were all dropped takes no step (rare: out-of-order actors)
    assert model.learner.policy_version <= len(model.history)
    for record in model.history:
        s = record.stats
        # out-of-order trajectories may arrive over the bound: exactly those are dropped
        assert int((s.lags > 2).sum()) == s.dropped_samples
        assert s.num_samples + s.dropped_samples == 32
        assert 0.0 <= record.learner_utilisation <= 1.0
    assert model.max_outstanding <= model.capacity == 3 * 2
    assert _actor_threads() == []


@pytest.mark.timeout(120)
def test_lag_zero_is_synchronous():
    model = AsyncPPO(
        "CartPole-v1",
        algo=AsyncPPOConfig(
            loss="ppo", max_policy_lag=0, hyperparameters={"epochs": 1, "minibatch_size": 16}
        ),
        topology=AsyncTopology(n_actors=2, steps_per_actor=16),
        seed=0,
    )
    model.learn(128)
    assert all(r.stats.lag_max == 0 and r.stats.dropped_samples == 0 for r in model.history)
    assert model.max_outstanding <= 2


@pytest.mark.timeout(120)
def test_sequential_injected_lag_is_exact():
    model = AsyncPPO(
        "CartPole-v1",
        algo=AsyncPPOConfig(
            max_policy_lag=3, lag_injection=3, hyperparameters={"epochs": 1, "minibatch_size": 16}
        ),
        topology=AsyncTopology(concurrent=False, n_actors=2, steps_per_actor=16),
        seed=1,
    )
    model.learn(32 * 6)
    lags = [int(r.stats.lag_max) for r in model.history]
    assert lags == [0, 1, 2, 3, 3, 3]  # capped by the versions that exist early on
    again = AsyncPPO(
        "CartPole-v1",
        algo=AsyncPPOConfig(
            max_policy_lag=3, lag_injection=3, hyperparameters={"epochs": 1, "minibatch_size": 16}
        ),
        topology=AsyncTopology(concurrent=False, n_actors=2, steps_per_actor=16),
        seed=1,
    )
    again.learn(32 * 6)
    w1, w2 = model.learner.get_weights(), again.learner.get_weights()
    assert all(np.array_equal(w1[k], w2[k]) for k in w1)


@pytest.mark.timeout(120)
def test_backpressure_pauses_actors_while_the_learner_is_slow():
    model = AsyncPPO(
        "CartPole-v1",
        algo=AsyncPPOConfig(max_policy_lag=1, hyperparameters={"epochs": 1, "minibatch_size": 16}),
        topology=AsyncTopology(n_actors=2, steps_per_actor=16),
        seed=0,
    )
    update = model.learner.update

    def slow_update(batch):
        time.sleep(0.05)
        return update(batch)

    model.learner.update = slow_update  # type: ignore[method-assign]
    model.learn(32 * 5)
    # (1 + 1) * 2 tickets: never more trajectories collecting or queued, nothing dropped
    assert model.max_outstanding <= 4
    assert all(r.queued <= 4 for r in model.history)


class _FlakyWorker(RolloutWorker):
    """Raises halfway through its second rollout (after stepping the env)."""

    calls = 0

    def rollout(self, weights, steps, policy_version):
        type(self).calls += 1
        if type(self).calls == 2:
            super().rollout(weights, steps // 2, policy_version)
            raise RuntimeError("actor killed mid-rollout")
        return super().rollout(weights, steps, policy_version)


@pytest.mark.timeout(120)
@pytest.mark.parametrize("concurrent", [True, False])
def test_a_failed_actor_is_replaced_and_nothing_half_written_reaches_the_learner(concurrent):
    _FlakyWorker.calls = 0
    seen: list[int] = []
    model = AsyncPPO(
        "CartPole-v1",
        algo=AsyncPPOConfig(max_policy_lag=4, hyperparameters={"epochs": 1, "minibatch_size": 16}),
        topology=AsyncTopology(concurrent=concurrent, n_actors=2, steps_per_actor=16),
        seed=0,
        actor_factory=_FlakyWorker,
    )
    update = model.learner.update

    def spy(batch):
        seen.extend(len(t) for t in batch)
        return update(batch)

    model.learner.update = spy  # type: ignore[method-assign]
    model.learn(32 * 3)
    assert model.actor_failures == 1
    assert seen and set(seen) == {16}
    assert _actor_threads() == []


class _EveryOtherFails(RolloutWorker):
    """Fails every second rollout: many failures in all, never two in a row."""

    calls = 0

    def rollout(self, weights, steps, policy_version):
        type(self).calls += 1
        if type(self).calls % 2 == 0:
            raise RuntimeError("a transient fault")
        return super().rollout(weights, steps, policy_version)


@pytest.mark.timeout(120)
@pytest.mark.parametrize("concurrent", [True, False])
def test_restarts_count_failures_in_a_row_not_in_all(concurrent):
    # Eight updates of one actor need eight whole rollouts and meet seven failures, more
    # than MAX_RESTARTS (3) in all but never more than one in a row: training goes on.
    from fleetgym.agents.learners.asynchronous.slots import MAX_RESTARTS

    _EveryOtherFails.calls = 0
    model = AsyncPPO(
        "CartPole-v1",
        algo=AsyncPPOConfig(hyperparameters={"epochs": 1, "minibatch_size": 16}),
        topology=AsyncTopology(concurrent=concurrent, n_actors=1, steps_per_actor=16),
        seed=0,
        actor_factory=_EveryOtherFails,
    )
    model.learn(16 * 8)
    assert len(model.history) == 8 and model.actor_failures >= 7 > MAX_RESTARTS
    assert _actor_threads() == []


def test_actor_timeout_is_checked():
    with pytest.raises(ValueError, match="actor_timeout: expected a finite number > 0"):
        AsyncTopology(actor_timeout=0)
    with pytest.raises(TypeError, match="actor_timeout"):
        AsyncTopology(actor_timeout="10")
    assert AsyncTopology(backend="process", actor_timeout=7).actor_timeout == 7.0


class _Broken:
    def __init__(self, *args):
        pass

    def rollout(self, weights, steps, policy_version):
        raise RuntimeError("no env")


@pytest.mark.timeout(120)
def test_an_actor_that_keeps_failing_stops_training_with_a_clear_error():
    model = AsyncPPO(
        "CartPole-v1",
        algo=AsyncPPOConfig(hyperparameters={"epochs": 1, "minibatch_size": 16}),
        topology=AsyncTopology(n_actors=2, steps_per_actor=16),
        seed=0,
        actor_factory=_Broken,
    )
    with pytest.raises(FleetError, match="actor failed for good"):
        model.learn(64)
    assert _actor_threads() == []


@pytest.mark.timeout(120)
def test_a_learner_exception_stops_the_actors_without_a_hang():
    model = AsyncPPO(
        "CartPole-v1",
        algo=AsyncPPOConfig(max_policy_lag=1, hyperparameters={"epochs": 1, "minibatch_size": 16}),
        topology=AsyncTopology(n_actors=2, steps_per_actor=16),
        seed=0,
    )

    def boom(batch):
        raise ArithmeticError("learner blew up")

    model.learner.update = boom  # type: ignore[method-assign]
    with pytest.raises(ArithmeticError, match="learner blew up"):
        model.learn(64)
    assert _actor_threads() == []


@pytest.mark.timeout(120)
def test_callback_stops_and_save_load_round_trips(tmp_path):
    model = AsyncPPO(
        "CartPole-v1",
        algo=AsyncPPOConfig(
            loss="vtrace", sigma=0.5, hyperparameters={"epochs": 1, "minibatch_size": 16}
        ),
        topology=AsyncTopology(n_actors=2, steps_per_actor=16),
        seed=3,
    )
    model.learn(10_000, callback=lambda record: record.update >= 1)
    assert len(model.history) == 2
    path = model.save(tmp_path / "model.pt")
    loaded = AsyncPPO.load(path)
    assert loaded.config == model.config and loaded.num_timesteps == model.num_timesteps
    assert loaded.learner.policy_version == 2
    obs = np.random.default_rng(0).normal(size=(8, 4)).astype(np.float32)
    assert np.array_equal(loaded.predict(obs)[0], model.predict(obs)[0])
    assert loaded.predict(obs[0])[0].shape == ()


@pytest.mark.timeout(120)
def test_hopper_save_load_keeps_obs_statistics_and_reward_scaling(tmp_path):
    # Hopper normalises observations (buffers travelling with the weights) and scales
    # rewards (a per-actor discounted return in the learner's state): both must reload.
    model = AsyncPPO(
        "Hopper-v5",
        algo=AsyncPPOConfig(hyperparameters={"epochs": 1}),
        topology=AsyncTopology(n_actors=2, steps_per_actor=32),
        seed=0,
    )
    model.learn(64, progress_bar=False)
    path = model.save(tmp_path / "hopper.pt")
    loaded = AsyncPPO.load(path)
    weights, reloaded = model.learner.get_weights(), loaded.learner.get_weights()
    assert float(model.learner.policy.obs_count) > 0
    assert weights.keys() == reloaded.keys()
    assert all(np.array_equal(weights[k], reloaded[k]) for k in weights)
    assert loaded.learner._discounted == pytest.approx(model.learner._discounted)
    obs = np.random.default_rng(0).normal(size=(4, 11))
    assert np.array_equal(loaded.predict(obs)[0], model.predict(obs)[0])
    model.close()
    loaded.close()


@pytest.mark.timeout(120)
def test_tensorboard_logs_the_lag(tmp_path):
    model = AsyncPPO(
        "CartPole-v1",
        algo=AsyncPPOConfig(hyperparameters={"epochs": 1, "minibatch_size": 16}),
        topology=AsyncTopology(n_actors=2, steps_per_actor=16),
        seed=0,
        tensorboard_log=tmp_path / "tb",
    )
    model.learn(64)
    assert list((tmp_path / "tb").glob("events.out.tfevents.*"))


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        (dict(max_policy_lag=-1), ValueError, "max_policy_lag: expected"),
        (dict(loss="a3c"), ValueError, "loss: expected one of"),
        (dict(sigma=0.0), ValueError, "sigma: expected"),
        (dict(sigma=-1.0), ValueError, "sigma: expected"),
        (dict(max_policy_lag=2, lag_injection=3), ValueError, "lag_injection: expected at most"),
        (dict(n_actors=0), ValueError, "n_actors: expected"),
        (dict(steps_per_actor=0), ValueError, "steps_per_actor: expected"),
        (dict(target_kl="big"), ValueError, "target_kl: expected"),
        (dict(target_kl=-0.1), ValueError, "target_kl: expected"),
        (dict(max_policy_lag=1.5), TypeError, "max_policy_lag: expected an int"),
    ],
)
def test_bad_arguments_get_clear_errors(kwargs, error, match):
    config = AsyncPPOConfig if set(kwargs) <= set(fields_of(AsyncPPOConfig)) else AsyncTopology
    with pytest.raises(error, match=match):
        AsyncPPO("CartPole-v1", **{"algo" if config is AsyncPPOConfig else "topology": kwargs})
    with pytest.raises(error, match=match):
        config(**kwargs)


def test_load_without_settings_file(tmp_path):
    with pytest.raises(FileNotFoundError, match="settings file"):
        AsyncPPO.load(tmp_path / "missing.pt")


@pytest.mark.timeout(120)
def test_actors_through_the_inference_server_record_per_sample_versions():
    with AsyncPPO(
        "CartPole-v1",
        algo=AsyncPPOConfig(max_policy_lag=2, hyperparameters={"epochs": 1, "minibatch_size": 16}),
        topology=AsyncTopology(inference="server", n_actors=2, steps_per_actor=16),
        seed=0,
    ) as model:
        model.learn(32 * 4)
        assert model.learner.policy_version == 4
        assert all(r.stats.lag_max <= 2 for r in model.history)
        assert model.slots.server is not None and model.slots.server.policy_version >= 3
    assert model.slots.server is None and _actor_threads() == []


def test_server_inference_takes_no_actor_factory():
    with pytest.raises(ValueError, match="actor_factory: expected None"):
        AsyncPPO("CartPole-v1", topology=AsyncTopology(inference="server"), actor_factory=_Broken)


def test_target_kl_auto_bounds_the_losses_without_a_trust_region():
    assert AsyncPPO("CartPole-v1").config.loss == "ppo"  # the default loss
    assert AsyncPPO("CartPole-v1", algo=AsyncPPOConfig(loss="gipo")).config.target_kl == 0.02
    assert AsyncPPO("CartPole-v1", algo=AsyncPPOConfig(loss="vtrace")).config.target_kl == 0.02
    assert AsyncPPO("CartPole-v1", algo=AsyncPPOConfig(loss="ppo")).config.target_kl is None
    assert (
        AsyncPPO("CartPole-v1", algo=AsyncPPOConfig(loss="gipo", target_kl=None)).config.target_kl
        is None
    )


class HalfCappedImportance(PolicyLoss):
    """A toy loss of this test file: the importance-sampled policy gradient, ratio capped at 1.5."""

    default_target_kl = 0.03

    def __init__(self) -> None:
        self.calls = 0

    def policy_term(self, new_log_probs, old_log_probs, advantages, settings):
        self.calls += 1
        ratio = torch.exp(new_log_probs - old_log_probs)
        return -(torch.clamp(ratio, max=1.5) * advantages).mean(), (ratio > 1.5).float().mean()


@pytest.fixture
def half_capped():
    loss = register_loss("half-capped-is", HalfCappedImportance())
    yield loss
    unregister_loss("half-capped-is")


@pytest.mark.timeout(120)
def test_a_loss_registered_outside_the_library_trains_through_async_ppo(half_capped):
    model = AsyncPPO(
        "CartPole-v1",
        algo=AsyncPPOConfig(
            loss="half-capped-is",
            max_policy_lag=1,
            hyperparameters={"epochs": 1, "minibatch_size": 16},
        ),
        topology=AsyncTopology(backend="inprocess", n_actors=2, steps_per_actor=16),
        seed=0,
    )
    assert model.config.loss == "half-capped-is"
    assert model.config.target_kl == 0.03  # "auto": the registered loss's default
    model.learn(128)
    assert model.num_timesteps >= 128 and model.learner.policy_version >= 1
    assert half_capped.calls >= 1
    assert all(np.isfinite(r.stats.policy_loss) for r in model.history)
    assert _actor_threads() == []


def test_a_loss_no_longer_registered_is_refused_with_the_registry_error():
    with pytest.raises(ValueError, match="loss: expected one of .*'vtrace'"):
        AsyncPPO("CartPole-v1", algo=AsyncPPOConfig(loss="half-capped-is"))
