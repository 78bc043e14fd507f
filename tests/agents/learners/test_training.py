"""Tests of fleetgym.agents.learners.training: the synchronous round loop, stops and errors."""

from __future__ import annotations

import math

import numpy as np
import pytest

from fleetgym.agents.fleet import InProcessFleet
from fleetgym.agents.learners.ppo import PPOLearner
from fleetgym.agents.learners.training import TrainingHistory, train
from fleetgym.agents.types import RoundResult, Trajectory, UpdateStats
from fleetgym.errors import FleetError


class ScriptedLearner:
    """A learner whose mean return follows a script; records what it was fed."""

    def __init__(self, returns):
        self.returns = list(returns)
        self.policy_version = 0
        self.fed: list[int] = []

    def get_weights(self):
        return {"w": np.array([float(self.policy_version)])}

    def update(self, trajectories):
        self.fed.append(len(trajectories))
        self.policy_version += 1
        return UpdateStats(
            loss=0.0,
            mean_return=self.returns[self.policy_version - 1],
            kl=0.0,
            update_time_s=0.0,
            num_samples=sum(len(t) for t in trajectories),
            policy_version=self.policy_version,
            episodes_completed=1,
        )


class CountingFleet:
    """A fleet returning empty-env trajectories of the requested size (exact counts)."""

    max_actors = 8

    def __init__(self, drop: int = 0):
        self.calls: list[tuple[int, int, int]] = []
        self.drop = drop

    def run_round(self, weights, num_actors, steps_per_actor, *, policy_version=0):
        self.calls.append((num_actors, steps_per_actor, policy_version))
        trajs = [
            Trajectory(
                obs=np.zeros((steps_per_actor, 1)),
                actions=np.zeros(steps_per_actor),
                log_probs=np.zeros(steps_per_actor),
                values=np.zeros(steps_per_actor),
                rewards=np.zeros(steps_per_actor),
                terminated=np.zeros(steps_per_actor, bool),
                truncated=np.zeros(steps_per_actor, bool),
                truncation_values=np.zeros(steps_per_actor),
                last_value=0.0,
                episode_returns=[],
                episode_lengths=[],
                actor_id=i,
                policy_version=policy_version,
                seed=0,
            )
            for i in range(num_actors - self.drop)
        ]
        return RoundResult(num_actors, steps_per_actor, policy_version, trajs, [])

    def close(self):
        pass


def test_real_fleet_and_learner_run_rounds():
    learner = PPOLearner("CartPole-v1", seed=0, epochs=1)
    with InProcessFleet("CartPole-v1", max_actors=4, seed=0, batched=True) as fleet:
        history = train(
            "CartPole-v1",
            fleet,
            learner,
            num_actors=3,
            max_rounds=2,
            steps_per_actor=16,
            target=math.inf,
        )
    assert isinstance(history, TrainingHistory)
    assert len(history) == 2 and history.stop_reason == "max_rounds"
    assert [r.total_steps for r in history.rounds] == [48, 96]
    assert history.total_steps == 96 and learner.policy_version == 2
    assert all(r.stats.kl >= 0.0 for r in history.rounds)
    assert history.rounds[-1].wall_s >= history.rounds[0].wall_s > 0.0


def test_stops_at_the_target_and_sends_versions():
    fleet, learner = CountingFleet(), ScriptedLearner([10.0, 50.0, 100.0, 200.0])
    history = train(
        "CartPole-v1", fleet, learner, 2, max_rounds=10, target=100.0, steps_per_actor=4
    )
    assert history.stop_reason == "target" and history.reached_target
    assert len(history) == 3 and history.final_return == 100.0
    assert fleet.calls == [(2, 4, 0), (2, 4, 1), (2, 4, 2)]


def test_default_target_and_rollout_length_come_from_the_workload():
    fleet, learner = CountingFleet(), ScriptedLearner([474.0, 475.0])
    history = train("CartPole-v1", fleet, learner, 1, max_rounds=5)
    assert history.target == 475.0 and len(history) == 2
    assert fleet.calls[0][1] == 128


def test_schedule_callback_and_step_budget():
    fleet, learner = CountingFleet(), ScriptedLearner([0.0] * 10)
    history = train(
        "CartPole-v1", fleet, learner, lambda k: k + 1, 8, target=1e9, steps_per_actor=2
    )
    assert [c[0] for c in fleet.calls] == list(range(1, 9)) and history.stop_reason == "max_rounds"
    fleet, learner = CountingFleet(), ScriptedLearner([0.0] * 10)
    history = train(
        "CartPole-v1", fleet, learner, 2, 10, target=1e9, steps_per_actor=5, max_steps=25
    )
    assert history.stop_reason == "max_steps" and history.total_steps == 30
    seen = []
    fleet, learner = CountingFleet(), ScriptedLearner([0.0] * 10)
    history = train(
        "CartPole-v1",
        fleet,
        learner,
        1,
        10,
        target=1e9,
        callback=lambda r: seen.append(r.round) or r.round == 2,
    )
    assert history.stop_reason == "callback" and seen == [0, 1, 2]
    assert set(history.rounds[0].as_dict()) >= {"round", "num_actors", "loss", "mean_return", "kl"}


def test_partial_rounds():
    fleet, learner = CountingFleet(drop=1), ScriptedLearner([0.0] * 3)
    history = train("CartPole-v1", fleet, learner, 3, 2, target=1e9, steps_per_actor=2)
    assert learner.fed == [2, 2] and history.total_steps == 8
    with pytest.raises(FleetError, match="expected 3 trajectories, actual 2"):
        train(
            "CartPole-v1", CountingFleet(drop=1), ScriptedLearner([0.0]), 3, 2, allow_partial=False
        )
    with pytest.raises(FleetError, match="actual none"):
        train("CartPole-v1", CountingFleet(drop=1), ScriptedLearner([0.0]), 1, 2)


def test_invalid_target_and_callback():
    fleet, learner = CountingFleet(), ScriptedLearner([0.0] * 3)
    with pytest.raises(TypeError, match=r"target: expected a number, actual str"):
        train("CartPole-v1", fleet, learner, 1, 2, target="475")
    with pytest.raises(TypeError, match=r"callback: expected a callable or None, actual int"):
        train("CartPole-v1", fleet, learner, 1, 2, callback=3)
    assert fleet.calls == []  # refused before the first round


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"num_actors": 0}, "num_actors: expected an int >= 1"),
        ({"num_actors": 9}, "expected at most the fleet's max_actors=8, actual 9"),
        ({"max_rounds": 0}, "max_rounds: expected an int >= 1"),
        ({"steps_per_actor": -3}, r"steps_per_actor: expected an int in \[1, 10000000\]"),
        ({"steps_per_actor": 10**12}, r"steps_per_actor: expected an int in \[1, 10000000\]"),
        ({"max_steps": 0}, "max_steps: expected an int >= 1"),
    ],
)
def test_invalid_arguments(kwargs, match):
    args = {"num_actors": 2, "max_rounds": 3, **kwargs}
    with pytest.raises(ValueError, match=match):
        train("CartPole-v1", CountingFleet(), ScriptedLearner([0.0] * 3), **args)


def test_evaluate_policy_plays_whole_episodes():
    from fleetgym.agents.learners.training import evaluate_policy
    from fleetgym.agents.workloads import get_workload

    policy = get_workload("CartPole-v1").make_policy()
    returns = evaluate_policy(policy, "CartPole-v1", episodes=3, seed=0)
    assert len(returns) == 3 and all(1.0 <= r <= 500.0 for r in returns)
    assert returns == evaluate_policy(policy, "CartPole-v1", episodes=3, seed=0)
    with pytest.raises(ValueError, match="episodes: expected an int >= 1"):
        evaluate_policy(policy, "CartPole-v1", episodes=0)


def test_cli_train_rejects_bad_arguments(capsys):
    from fleetgym.cli import main

    assert main(["train", "--workload", "Pong"]) == 2
    assert "expected one of" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["train", "--actors", "0"])
    assert "expected an integer >= 1, actual 0" in capsys.readouterr().err
    assert main(["train", "--backend", "process", "--sequential"]) == 2
    assert main(["train", "--lr", "-1"]) == 2
    assert "lr: expected a finite float > 0, actual -1.0" in capsys.readouterr().err


def test_numpy_integers_are_accepted_as_counts():
    # A schedule built with numpy (np.clip, np.round(...).astype(int)) returns np.int64.
    fleet, learner = CountingFleet(), ScriptedLearner([0.0] * 3)
    history = train(
        "CartPole-v1",
        fleet,
        learner,
        lambda k: np.int64(k + 1),
        np.int64(3),
        target=1e9,
        steps_per_actor=np.int32(2),
        max_steps=np.int64(100),
    )
    assert [c[0] for c in fleet.calls] == [1, 2, 3] and history.total_steps == 12
    assert all(type(c[0]) is int for c in fleet.calls)


def test_evaluate_policy_rejects_a_bad_step_cap():
    from fleetgym.agents.learners.training import evaluate_policy
    from fleetgym.agents.workloads import get_workload

    policy = get_workload("CartPole-v1").make_policy()
    with pytest.raises(ValueError, match=r"max_steps_per_episode: expected an int >= 1, actual 0"):
        evaluate_policy(policy, "CartPole-v1", episodes=1, max_steps_per_episode=0)
    assert evaluate_policy(policy, "CartPole-v1", 2, seed=np.int64(0), max_steps_per_episode=3) == [
        3.0,
        3.0,
    ]
