"""The decoupled PPO objective (``loss="decoupled"``) and the effective sample size (ESS)."""

from __future__ import annotations

import csv
import math

import numpy as np
import pytest
import torch

from fleetgym.agents.learners.asynchronous.config import AsyncPPOConfig, AsyncTopology
from fleetgym.agents.learners.asynchronous.trainer import AsyncPPO
from fleetgym.agents.learners.lag import CompensatedPPOLearner
from fleetgym.agents.learners.losses import (
    LossConfig,
    LossSettings,
    behaviour_weight,
    decoupled_ppo_loss,
    effective_sample_size,
    get_loss,
    ppo_clip_loss,
)
from fleetgym.agents.rollout import RolloutWorker
from fleetgym.cli import main
from fleetgym.experiments.lag_sweep_results import read_runs

torch.set_num_threads(1)


def _grad(fn, new):
    new = new.clone().requires_grad_()
    loss, fraction = fn(new)
    loss.backward()
    return float(loss.detach()), new.grad.clone(), float(fraction)


def test_at_lag_0_with_the_behaviour_as_proximal_it_is_ppo_clip_exactly():
    torch.manual_seed(0)
    behav = torch.randn(64) * 0.3 - 1.0
    new = behav + torch.randn(64) * 0.3  # some ratios outside 1 +- 0.2
    adv = torch.randn(64)
    ppo = _grad(lambda x: ppo_clip_loss(x, behav, adv, 0.2), new)
    dec = _grad(lambda x: decoupled_ppo_loss(x, behav, behav, adv, 0.2), new)
    assert ppo[0] == dec[0] and ppo[2] == dec[2] > 0
    assert torch.equal(ppo[1], dec[1])
    # Through the registry, with and without the behaviour given separately.
    loss = get_loss("decoupled")
    reg = _grad(
        lambda x: loss.policy_term(x, behav, adv, LossSettings(), behaviour_log_probs=behav), new
    )
    assert reg[0] == ppo[0] and torch.equal(reg[1], ppo[1])


def test_a_hand_computed_case():
    """L = -1/n sum_i w_i min(u_i A_i, clip(u_i, 1 - eps, 1 + eps) A_i), u = pi/pi_prox,
    w = pi_prox/mu (no gradient). dL/dlog pi_i = -w_i u_i A_i / n where the unclipped term
    is the minimum (or u inside the clip), else 0."""
    new = torch.log(torch.tensor([1.0, 1.5, 0.5, 1.1]))
    prox = torch.log(torch.tensor([1.0, 1.0, 1.0, 1.0]))
    behav = torch.log(torch.tensor([0.5, 2.0, 1.0, 0.25]))  # w = 2, 0.5, 1, 4
    adv = torch.tensor([1.0, 1.0, -1.0, -2.0])
    eps, n = 0.2, 4
    # sample 0: u = 1,   w = 2:   min(1, 1) = 1              -> 2 * 1 = 2,     grad -2 * 1 * 1
    # sample 1: u = 1.5, w = 0.5: min(1.5, 1.2) = 1.2 clipped -> 0.5 * 1.2 = 0.6, grad 0
    # sample 2: u = 0.5, w = 1:   min(-0.5, -0.8) = -0.8 clipped -> -0.8,     grad 0
    # sample 3: u = 1.1, w = 4:   min(-2.2, -2.2) = -2.2     -> 4 * -2.2 = -8.8, grad -4*1.1*-2
    expected_loss = -(2.0 + 0.6 - 0.8 - 8.8) / n
    expected_grad = [-2.0 / n, 0.0, 0.0, 4 * 1.1 * 2.0 / n]
    loss, grad, fraction = _grad(
        lambda x: decoupled_ppo_loss(x, prox, behav, adv, eps, weight_cap=5.0), new
    )
    assert loss == pytest.approx(expected_loss, abs=1e-6)  # 1.75
    assert grad.tolist() == pytest.approx(expected_grad, abs=1e-6)
    assert fraction == pytest.approx(2 / 4)  # samples 1 and 2 left 1 +- 0.2


def test_the_cap_bounds_the_behaviour_weight():
    prox = torch.zeros(4)
    behav = torch.log(torch.tensor([1.0, 0.5, 0.1, 0.01]))  # w = 1, 2, 10, 100
    assert behaviour_weight(prox, behav, cap=5.0).tolist() == pytest.approx([1, 2, 0, 0])
    assert behaviour_weight(prox, behav, cap=5.0, mode="truncate").tolist() == pytest.approx(
        [1, 2, 5, 5]
    )
    assert behaviour_weight(prox, behav, cap=None).tolist() == pytest.approx([1, 2, 10, 100])
    # In the loss: a sample past the cap gives no gradient ("drop") or a capped one.
    new = torch.zeros(4)
    adv = torch.ones(4)
    _, dropped, _ = _grad(lambda x: decoupled_ppo_loss(x, prox, behav, adv, 0.2, 5.0), new)
    assert dropped.tolist() == pytest.approx([-1 / 4, -2 / 4, 0.0, 0.0])
    _, cut, _ = _grad(lambda x: decoupled_ppo_loss(x, prox, behav, adv, 0.2, 5.0, "truncate"), new)
    assert cut.tolist() == pytest.approx([-1 / 4, -2 / 4, -5 / 4, -5 / 4])
    assert float(cut.abs().max()) <= 5.0 / 4


def test_effective_sample_size():
    assert effective_sample_size(torch.zeros(5)) == 1.0
    assert effective_sample_size(np.full(3, 7.0)) == pytest.approx(1.0)  # equal weights
    # w = 1, 2, 3: (1 + 2 + 3)^2 / (3 * (1 + 4 + 9)) = 36 / 42
    assert effective_sample_size(np.log([1.0, 2.0, 3.0])) == pytest.approx(36 / 42)
    # one weight dominating: -> 1 / n
    assert effective_sample_size(np.array([0.0, -50.0, -50.0, -50.0])) == pytest.approx(0.25)
    assert math.isnan(effective_sample_size(np.zeros(0)))
    with pytest.raises(ValueError, match="log_weights"):
        effective_sample_size(np.array([0.0, np.nan]))


def test_the_learner_reports_ess_1_on_policy_and_below_1_with_lag():
    learner = CompensatedPPOLearner("CartPole-v1", LossConfig("decoupled"), epochs=2)
    worker = RolloutWorker("CartPole-v1", 0, seed=0)
    stale = learner.get_weights()
    stats = learner.update([worker.rollout(stale, 64, 0)])
    assert stats.ess == pytest.approx(1.0, abs=1e-6)
    stats = learner.update([worker.rollout(stale, 64, 0)])  # lag 1
    assert 0 < stats.ess < 1


def test_a_proximal_offset_reads_older_weights_of_the_learner():
    learner = CompensatedPPOLearner(
        "CartPole-v1", LossConfig("decoupled", proximal_offset=2), max_policy_lag=3, epochs=1
    )
    worker = RolloutWorker("CartPole-v1", 0, seed=0)
    for _ in range(3):
        learner.update([worker.rollout(learner.get_weights(), 32, learner.policy_version)])
    assert learner._proximal_ring is not None
    assert learner._proximal_ring.versions() == [1, 2]
    assert learner.config.label == "decoupled(cap=5)-prox2"


def test_async_ppo_trains_cartpole_with_the_decoupled_loss():
    algo = AsyncPPOConfig(
        loss="decoupled", max_policy_lag=2, lag_injection=1, hyperparameters={"epochs": 1}
    )
    model = AsyncPPO(
        "CartPole-v1",
        algo=algo,
        topology=AsyncTopology(n_actors=1, steps_per_actor=32, concurrent=False),
        seed=0,
    )
    try:
        model.learn(128)
    finally:
        model.close()
    assert model.learner.config.loss == "decoupled"
    assert len(model.history) == 4
    assert all(0 < r.ess <= 1 + 1e-9 for r in model.history)
    assert all(math.isfinite(r.stats.policy_loss) for r in model.history)


@pytest.mark.parametrize(
    ("make", "error", "message"),
    [
        (lambda: LossConfig("a2c"), ValueError, "loss: expected one of"),
        (lambda: LossConfig("decoupled", proximal_offset=0), ValueError, "proximal_offset"),
        (lambda: LossConfig("decoupled", proximal_offset=-1), ValueError, "proximal_offset"),
        (lambda: LossConfig("decoupled", proximal_offset=1.0), TypeError, "proximal_offset"),
        (lambda: LossConfig("decoupled", proximal_offset=20_000), ValueError, "proximal_offset"),
        (lambda: LossConfig("decoupled", weight_cap=1.0), ValueError, "weight_cap"),
        (lambda: LossConfig("decoupled", weight_cap="5"), TypeError, "weight_cap"),
        (lambda: LossConfig("decoupled", cap_mode="clip"), ValueError, "cap_mode"),
        (lambda: LossConfig("decoupled", proximal_clip=True), ValueError, "proximal_clip"),
        (
            lambda: CompensatedPPOLearner(
                "CartPole-v1", LossConfig("decoupled", proximal_offset=4), max_policy_lag=2
            ),
            ValueError,
            "proximal_offset: expected at most max_policy_lag \\+ 1 = 3",
        ),
        (lambda: AsyncPPOConfig(loss="decoupld"), ValueError, "loss: expected one of"),
        (
            lambda: AsyncPPOConfig(loss="decoupled", proximal_offset=4, max_policy_lag=2),
            ValueError,
            "proximal_offset: expected at most max_policy_lag \\+ 1 = 3",
        ),
        (lambda: AsyncPPOConfig(loss="decoupled", proximal_offset=0), ValueError, "proximal"),
        (lambda: AsyncPPOConfig(loss="decoupled", weight_cap=1.0), ValueError, "weight_cap"),
        (lambda: AsyncPPOConfig(loss="decoupled", cap_mode="clip"), ValueError, "cap_mode"),
    ],
)
def test_bad_input_is_refused_at_construction(make, error, message):
    with pytest.raises(error, match=message):
        make()


@pytest.mark.timeout(240)
def test_the_lag_sweep_writes_an_ess_column_and_reads_old_csvs(tmp_path):
    out = tmp_path / "sweep"
    argv = ["lag-sweep", "--env", "CartPole-v1", "--losses", "decoupled", "--variants"]
    argv += ["compensated", "--lags", "0", "2", "--seeds", "1", "--steps", "96"]
    assert main([*argv, "--eval-episodes", "1", "--no-progress", "--out", str(out)]) == 0
    with (out / "lag_sweep.csv").open() as fh:
        rows = list(csv.DictReader(fh))
    assert {r["lag"] for r in rows} == {"0", "2"}
    ess = {r["lag"]: float(r["ess"]) for r in rows}
    assert ess["0"] == pytest.approx(1.0, abs=1e-6) and 0 < ess["2"] < 1
    old = tmp_path / "old"
    old.mkdir()
    (old / "lag_sweep.csv").write_text(
        "env,loss,variant,lag,seed,steps,updates,final_return,train_return,wall_s\n"
        "CartPole-v1,ppo,plain,0,0,64,2,20.0,18.0,1.0\n"
    )
    (run,) = read_runs(old)
    assert math.isnan(run.ess)
    merged = tmp_path / "merged"
    assert main(["lag-sweep", "--merge", str(out), str(old), "--out", str(merged)]) == 0
    with (merged / "lag_sweep.csv").open() as fh:
        by_loss = {r["loss"]: r["ess"] for r in csv.DictReader(fh)}
    assert by_loss["ppo"] == "nan" and float(by_loss["decoupled"]) > 0


def test_async_ppo_passes_its_decoupled_settings_to_the_loss():
    algo = AsyncPPOConfig(
        loss="decoupled", proximal_offset=2, weight_cap=None, cap_mode="truncate", max_policy_lag=2
    )
    assert (algo.loss_config.proximal_offset, algo.loss_config.weight_cap) == (2, None)
    assert algo.loss_config.cap_mode == "truncate"
    assert AsyncPPOConfig(**algo.as_dict()) == algo  # the settings file round-trips
