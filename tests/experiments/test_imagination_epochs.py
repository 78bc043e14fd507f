"""The ``ppo+epochs`` arm: no model, ``ppo+imagination``'s gradient steps per real step."""

from __future__ import annotations

import math
from fractions import Fraction

import pytest


def _arms():
    from fleetgym.experiments.imagination.study import ENVS

    setup = ENVS["CartPole-v1"]
    return setup, {a.name: a for a in setup.arms}


def _per_real_step(setup, arm) -> Fraction:
    from fleetgym.experiments.imagination.study import gradient_steps_per_update

    steps, real = gradient_steps_per_update(setup.workload, setup.actors, arm)
    return Fraction(steps, real)


def test_the_epochs_arm_makes_the_imagination_arms_gradient_steps_per_real_step():
    from fleetgym.agents.workloads import get_workload
    from fleetgym.agents.world_model import ImaginationConfig

    setup, arms = _arms()
    model, epochs = arms["ppo+imagination"], arms["ppo+epochs"]
    # The same real rounds, fresh real data only, no model and no replay.
    assert epochs.steps_per_actor == model.steps_per_actor
    assert epochs.imagination is None
    assert _per_real_step(setup, epochs) == _per_real_step(setup, model)
    # The same count written out from the settings: the imagination arm trains each
    # update's real samples and share / (1 - share) times as many imagined ones.
    w = get_workload(setup.workload)
    config = ImaginationConfig(**model.imagination)
    real = setup.actors * model.steps_per_actor
    samples = real + round(real * config.share / (1 - config.share))
    model_steps = w.epochs * math.ceil(samples / w.minibatch_size) * config.updates_per_round
    own = w.with_overrides(**epochs.overrides)
    own_steps = own.epochs * math.ceil(real / min(own.minibatch_size, real))
    assert Fraction(own_steps, real) == Fraction(model_steps, real)


def test_a_drifted_epochs_arm_is_no_longer_matched():
    import dataclasses

    setup, arms = _arms()
    model, epochs = arms["ppo+imagination"], arms["ppo+epochs"]
    target = _per_real_step(setup, model)
    fewer = dataclasses.replace(epochs, overrides={"epochs": epochs.overrides["epochs"] - 1})
    assert _per_real_step(setup, fewer) < target
    # 8 x 48 = 384 samples: 2 minibatches of 256 per epoch, 80 steps per 384 real ones.
    assert _per_real_step(setup, dataclasses.replace(epochs, steps_per_actor=48)) != target
    more_imagined = dataclasses.replace(model, imagination={**model.imagination, "share": 0.875})
    assert _per_real_step(setup, more_imagined) != _per_real_step(setup, model)


def test_matched_epochs_refuses_a_round_no_whole_number_of_epochs_matches():
    from fleetgym.experiments.imagination.study import matched_epochs

    setup, arms = _arms()
    model = arms["ppo+imagination"]
    assert (
        matched_epochs(setup.workload, setup.actors, model, model.steps_per_actor)
        == (arms["ppo+epochs"].overrides["epochs"])
    )
    # 8 x 33 = 264 samples: 2 minibatches of 256 per epoch, 40 * 264 / 512 is not whole.
    with pytest.raises(ValueError, match="steps_per_actor: no whole number of epochs"):
        matched_epochs(setup.workload, setup.actors, model, 33)
    auto = type(model)(model.name, 32, {"share": "auto"})
    with pytest.raises(ValueError, match="share: expected a fixed number"):
        matched_epochs(setup.workload, setup.actors, auto, 32)


@pytest.mark.parametrize("name", ["ppo+epochs", "ppo+imagination"])
def test_the_counted_gradient_steps_are_the_learners(name):
    """Real updates on real CartPole data: the optimiser steps ``PPOLearner`` takes per
    update are the ones :func:`gradient_steps_per_update` counts (once imagination runs)."""
    import torch

    from fleetgym.agents.fleet import make_fleet
    from fleetgym.agents.learners.ppo import PPOLearner
    from fleetgym.agents.learners.training import train
    from fleetgym.agents.workloads import get_workload
    from fleetgym.experiments.imagination.study import gradient_steps_per_update

    torch.set_num_threads(1)
    setup, arms = _arms()
    arm = arms[name]
    workload = get_workload(setup.workload)
    imagination = None if arm.imagination is None else {**arm.imagination, "seed": 0}
    learner = PPOLearner(workload, seed=0, imagination=imagination, **arm.overrides)
    counted = {"n": 0}
    step = learner.optimizer.step

    def counting_step(*args, **kwargs):
        counted["n"] += 1
        return step(*args, **kwargs)

    learner.optimizer.step = counting_step
    per_update: list[tuple[int, bool, int | None]] = []

    def callback(record) -> bool:
        im = learner.imagination
        active = im is None or im.last.active
        per_update.append((counted["n"], active, None if im is None else im.last.horizon))
        counted["n"] = 0
        return False

    fleet = make_fleet(workload, backend="inprocess", max_actors=setup.actors, seed=0)
    try:
        train(
            workload,
            fleet,
            learner,
            setup.actors,
            4,
            target=math.inf,
            callback=callback,
            steps_per_actor=arm.steps_per_actor,
        )
    finally:
        fleet.close()
    running = [(n, h) for n, active, h in per_update if active]
    # CartPole's warmup (500 real transitions) is passed at the second round of 256, the
    # first imagined samples come with the third.
    assert len(per_update) == 4 and len(running) >= 2, per_update
    for n, horizon in running:
        assert n == gradient_steps_per_update(setup.workload, setup.actors, arm, horizon)[0]
    nominal, _ = gradient_steps_per_update(setup.workload, setup.actors, arm)
    if arm.imagination is None:
        assert [n for n, _ in running] == [nominal] * len(running)
    else:  # the rollouts round the imagined samples up, never down
        assert all(n >= nominal for n, _ in running)


def test_the_epochs_option_runs_the_arm_at_other_epochs(tmp_path):
    import json

    from fleetgym import cli
    from fleetgym.experiments.imagination.study import gradient_steps_per_update

    argv = ["imagination", "--env", "CartPole-v1", "--seeds", "1", "--budget", "512"]
    argv += ["--arms", "ppo+epochs", "--epochs", "3", "--out", str(tmp_path), "--no-progress"]
    assert cli.main(argv) == 1  # 512 real steps cannot reach 475
    (run,) = json.loads((tmp_path / "results_CartPole-v1.json").read_text())
    assert run["arm"] == "ppo+epochs-3"
    setup, arms = _arms()
    import dataclasses

    three = dataclasses.replace(arms["ppo+epochs"], overrides={"epochs": 3})
    steps, real = gradient_steps_per_update(setup.workload, setup.actors, three)
    assert Fraction(steps, real) == Fraction(3, setup.actors * three.steps_per_actor)
