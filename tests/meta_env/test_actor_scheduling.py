"""ActorSchedulingEnv: exact time/cost/reward arithmetic, termination, normalisation, seeds.

The exactness tests drive the env with a tiny fake fleet and learner that implement the
protocols of ``fleetgym.agents.types`` and return scripted returns and fixed-size
trajectories, so every number below can be computed by hand. The end-to-end tests use the
real in-process fleet and PPO learner on CartPole with tiny budgets.
"""

from __future__ import annotations

import math

import gymnasium as gym
import numpy as np
import pytest

import fleetgym  # noqa: F401  (registers the IDs)
from fleetgym.agents.schedulers.observation import KL_SCALE
from fleetgym.agents.types import ActorTiming, RoundResult, Trajectory, UpdateStats
from fleetgym.errors import UnknownWorkloadError
from fleetgym.meta_env import ActorSchedulingEnv, make_actor_scheduling_env
from fleetgym.meta_env.presets import scheduling_defaults
from fleetgym.meta_env.pricing import get_pricing
from fleetgym.meta_env.time_model import TimeModel

STEPS = 10
WEIGHT_BYTES = 1000  # 250 float32
# Per trajectory of STEPS steps (see FakeFleet): obs f32 (10,1) 40 + actions i64 80 +
# log_probs/values/rewards/truncation_values f32 4 x 40 + terminated/truncated bool 2 x 10.
TRAJ_BYTES = 40 + 80 + 160 + 20


class FakeFleet:
    """Runs nothing: returns fixed-size trajectories and a measured compute of 0.05 s each."""

    def __init__(self, workload, *, max_actors, seed, **kwargs):
        self.max_actors = max_actors
        self.seed = seed
        self.closed = False
        self.calls: list[int] = []

    def run_round(self, weights, num_actors, steps_per_actor, *, policy_version=0):
        self.calls.append(num_actors)
        n = steps_per_actor
        trajs = [
            Trajectory(
                obs=np.zeros((n, 1), np.float32),
                actions=np.zeros(n, np.int64),
                log_probs=np.zeros(n, np.float32),
                values=np.zeros(n, np.float32),
                rewards=np.ones(n, np.float32),
                terminated=np.zeros(n, bool),
                truncated=np.zeros(n, bool),
                truncation_values=np.zeros(n, np.float32),
                last_value=0.0,
                episode_returns=[],
                episode_lengths=[],
                actor_id=i,
                policy_version=policy_version,
                seed=self.seed,
            )
            for i in range(num_actors)
        ]
        timings = [
            ActorTiming(
                actor_id=i,
                startup_s=0.0,
                compute_s=0.07,
                transfer_s=0.0,
                cold_start=False,
                num_steps=n,
                cpu_s=0.05,
            )
            for i in range(num_actors)
        ]
        return RoundResult(num_actors, steps_per_actor, policy_version, trajs, timings)

    def close(self):
        self.closed = True


class FakeLearner:
    """Reports scripted mean returns (RETURNS[k] after update k), loss 2k+1, KL 0.01(k+1)."""

    RETURNS = [10.0, 40.0, 30.0, 80.0, 120.0, 150.0]

    def __init__(self, workload, *, seed, **overrides):
        self.policy_version = 0

    def get_weights(self):
        return {"w": np.zeros(250, np.float32)}

    def update(self, trajectories):
        k = self.policy_version
        self.policy_version += 1
        return UpdateStats(
            loss=2.0 * k + 1.0,
            mean_return=self.RETURNS[min(k, len(self.RETURNS) - 1)],
            kl=0.01 * (k + 1),
            update_time_s=0.4,
            num_samples=sum(len(t) for t in trajectories),
            policy_version=self.policy_version,
        )


UNIT_PRICES = {
    "vcpu_second": 1e-3,
    "gb_second": 0.0,
    "actor_request": 0.0,
    "learner_second": 1e-2,
    "learner_request": 0.0,
}
COMPUTE = {
    "actor_step_s": 0.01,
    "actor_overhead_s": 0.0,
    "learner_sample_s": 0.001,
    "learner_overhead_s": 0.1,
    "actor_jitter_cv": 0.0,
}


def make_env(**kwargs):
    base = dict(
        workload="CartPole-v1",
        timing="modeled",
        max_actors=4,
        steps_per_actor=STEPS,
        target_return=100.0,
        max_rounds=10,
        budget=None,
        beta=0.5,
        penalty_scale=10.0,
        pricing_overrides=UNIT_PRICES,
        cold_start_actor_s=0.3,
        cold_start_learner_s=1.5,
        prewarm=False,
        bandwidth_bytes_per_s=1e6,
        latency_s=0.01,
        learner_speed_factor=2.0,
        compute=COMPUTE,
        fleet_factory=FakeFleet,
        learner_factory=FakeLearner,
    )
    base.update(kwargs)
    return make_actor_scheduling_env(**base)


def actor_time(compute_s, cold=0.3):
    return cold + (0.01 + WEIGHT_BYTES / 1e6) + (0.01 + TRAJ_BYTES / 1e6) + compute_s


def test_modeled_round_time_cost_and_reward_are_exact():
    env = make_env()
    env.reset(seed=0)
    obs, reward, terminated, truncated, info = env.step(2)  # 3 actors
    a = actor_time(STEPS * 0.01)  # 0.3 + 0.011 + 0.0103 + 0.1
    learner = 1.5 + (0.1 + 3 * STEPS * 0.001) / 2.0
    p = learner + a
    assert info["num_actors"] == 3
    assert info["actor_times"] == pytest.approx([a] * 3, abs=1e-12)
    assert info["learner_time"] == pytest.approx(learner, abs=1e-12)
    assert info["round_time"] == pytest.approx(p, abs=1e-12)
    cost = learner * 1e-2 + 3 * a * 1e-3
    assert info["round_cost"] == pytest.approx(cost, abs=1e-15)
    assert info["total_cost"] == pytest.approx(cost, abs=1e-15)
    assert reward == pytest.approx(-0.5 * p, abs=1e-12)
    assert not terminated and not truncated
    assert info["mean_return"] == 10.0 and info["loss"] == 1.0 and info["kl"] == 0.01
    np.testing.assert_allclose(info["raw_state"], [1, 1.0, 10.0, 0.01, learner, a, math.inf])
    env.close()


def test_measured_timing_uses_the_fleets_cpu_time_and_the_learners_update_time():
    env = make_env(timing="measured")
    env.reset(seed=0)
    _, _, _, _, info = env.step(1)
    assert info["actor_compute_times"] == [0.05, 0.05]  # cpu_s preferred over wall compute_s
    assert info["actor_times"] == pytest.approx([actor_time(0.05)] * 2, abs=1e-12)
    assert info["learner_time"] == pytest.approx(1.5 + 0.4 / 2.0, abs=1e-12)


def test_cost_weight_adds_a_cost_term():
    env = make_env(cost_weight=100.0)
    env.reset(seed=0)
    _, reward, _, _, info = env.step(0)
    assert reward == pytest.approx(-0.5 * info["round_time"] - 100.0 * info["round_cost"])


def test_success_terminates_without_penalty():
    env = make_env(target_return=80.0)
    env.reset(seed=0)
    rewards, infos = [], []
    done = False
    while not done:
        _, r, terminated, truncated, info = env.step(0)
        rewards.append(r)
        infos.append(info)
        done = terminated or truncated
    assert terminated and not truncated
    assert len(infos) == 4  # returns 10, 40, 30, 80 -> reached at round 4
    assert infos[-1]["success"] and infos[-1]["terminal_penalty"] == 0.0
    assert rewards[-1] == pytest.approx(-0.5 * infos[-1]["round_time"])
    with pytest.raises(gym.error.ResetNeeded):
        env.step(0)


def test_truncation_after_k_rounds_adds_the_scaled_penalty():
    env = make_env(max_rounds=3, target_return=1000.0)
    env.reset(seed=0)
    for _ in range(2):
        _, _, terminated, truncated, _ = env.step(0)
        assert not terminated and not truncated
    _, reward, terminated, truncated, info = env.step(0)
    assert truncated and not terminated
    penalty = (40.0 - 1000.0) / 10.0  # max R_bar over rounds (10, 40, 30) minus J, / scale
    assert info["terminal_penalty"] == pytest.approx(penalty)
    assert reward == pytest.approx(-0.5 * info["round_time"] + penalty)
    assert not info["success"]


def test_paper_form_penalty_is_unscaled():
    env = make_env(max_rounds=1, target_return=1000.0, penalty_scale=1.0)
    env.reset(seed=0)
    _, reward, _, truncated, info = env.step(0)
    assert truncated and reward == pytest.approx(-0.5 * info["round_time"] + (10.0 - 1000.0))


def test_budget_exhaustion_terminates_with_penalty():
    # One round with 4 actors costs ~0.0206 (learner 1.57 s x 0.01 + 4 x 0.42 s x 0.001).
    env = make_env(budget=0.05, target_return=1000.0)
    obs, info = env.reset(seed=0)
    assert obs[6] == 1.0 and info["budget_left"] == 0.05
    costs = []
    done = False
    while not done:
        obs, reward, terminated, truncated, info = env.step(3)
        costs.append(info["round_cost"])
        done = terminated or truncated
    assert terminated and not truncated
    assert len(costs) == 3  # cumulative 0.0206, 0.0412, 0.0619 >= 0.05
    assert info["total_cost"] == pytest.approx(sum(costs))
    assert info["budget_left"] == pytest.approx(0.05 - sum(costs))
    assert info["terminal_penalty"] == pytest.approx((40.0 - 1000.0) / 10.0)
    assert obs[6] == pytest.approx((0.05 - sum(costs)) / 0.05, rel=1e-6)


def test_reaching_the_target_over_budget_is_still_penalised():
    # Rounds of 4 actors cost ~0.0206 each: the second (R_bar 40 >= J = 35) overspends
    # 0.03. The penalty measures the best R_bar before it (10), never a bonus.
    env = make_env(budget=0.03, target_return=35.0)
    env.reset(seed=0)
    env.step(3)
    _, reward, terminated, _, info = env.step(3)
    assert terminated and info["target_reached"] and not info["success"]
    assert info["terminal_penalty"] == pytest.approx((10.0 - 35.0) / 10.0)
    assert reward < -0.5 * info["round_time"] - env.unwrapped.cost_weight * info["round_cost"]
    # Overspent in the first round, with no R_bar before it: no bonus either.
    env = make_env(budget=0.001, target_return=5.0)
    env.reset(seed=0)
    _, reward, terminated, _, info = env.step(0)
    assert terminated and info["target_reached"] and not info["success"]
    assert info["terminal_penalty"] == 0.0


def test_observation_normalisation():
    env = make_env(budget=1.0, max_rounds=10, target_return=100.0)
    obs, _ = env.reset(seed=0)
    np.testing.assert_array_equal(obs, [0, 0, 0, 0, 0, 0, 1])
    obs, _, _, _, info = env.step(1)
    raw = info["raw_state"]
    expected = [
        1 / 10,
        math.log1p(1.0),
        10.0 / 100.0,
        math.log1p(0.01 / KL_SCALE),
        raw[4] / env.reference_learner_s,
        raw[5] / env.reference_actor_s,
        (1.0 - info["total_cost"]) / 1.0,
    ]
    np.testing.assert_allclose(obs, expected, rtol=1e-6)
    assert obs.dtype == np.float32 and env.observation_space.contains(obs)
    # Reference times: modelled learner time of a max_actors round and one actor's rollout.
    assert env.reference_learner_s == pytest.approx(1.5 + (0.1 + 4 * STEPS * 0.001) / 2.0)
    assert env.reference_actor_s == pytest.approx(0.3 + 0.02 + STEPS * 0.01)
    warm = make_env(prewarm=True)  # warm containers: the references drop the cold starts
    assert warm.reference_learner_s == pytest.approx((0.1 + 4 * STEPS * 0.001) / 2.0)
    assert warm.reference_actor_s == pytest.approx(0.02 + STEPS * 0.01)
    raw_env = make_env(normalize_obs=False, budget=1.0)
    obs, _ = raw_env.reset(seed=0)
    obs, _, _, _, info = raw_env.step(1)
    np.testing.assert_allclose(obs, info["raw_state"], rtol=1e-6)


def test_prewarm_hides_cold_starts_and_bills_the_pool():
    env = make_env(prewarm=True, warm_pool=2)
    env.reset(seed=0)
    _, _, _, _, info = env.step(2)  # slots 0, 1 warm; slot 2 cold
    warm, cold = actor_time(0.1, cold=0.0), actor_time(0.1)
    learner = (0.1 + 3 * STEPS * 0.001) / 2.0  # warm learner: no cold start
    p = learner + cold
    assert info["actor_times"] == pytest.approx([warm, warm, cold], abs=1e-12)
    assert info["round_time"] == pytest.approx(p, abs=1e-12)
    pool_up = 2 * 0.3 * 1e-3 + 1.5 * 1e-2  # warming the pool and learner once, in round 1
    cost = p * 1e-2 + 2 * p * 1e-3 + cold * 1e-3
    assert info["round_cost"] == pytest.approx(cost + pool_up, abs=1e-15)
    _, _, _, _, info = env.step(0)  # 1 actor: the second pooled slot idles, billed anyway
    p1 = (0.1 + STEPS * 0.001) / 2.0 + warm
    assert info["round_cost"] == pytest.approx(p1 * 1e-2 + 2 * p1 * 1e-3, abs=1e-15)


def test_prewarm_keep_alive_keeps_the_previous_fleet_warm():
    env = make_env(prewarm=True, keep_alive_s=0.0)  # warm_pool=None: keep-alive
    env.reset(seed=0)
    warm, cold = actor_time(0.1, cold=0.0), actor_time(0.1)
    _, _, _, _, info = env.step(1)  # round 1: its 2 actors warmed before training
    assert info["actor_times"] == pytest.approx([warm, warm], abs=1e-12)
    p1 = (0.1 + 2 * STEPS * 0.001) / 2.0 + warm
    pool_up = 2 * 0.3 * 1e-3 + 1.5 * 1e-2
    assert info["round_cost"] == pytest.approx(p1 * 1e-2 + 2 * p1 * 1e-3 + pool_up, abs=1e-15)
    _, _, _, _, info = env.step(3)  # round 2: slots 0, 1 kept alive, slots 2, 3 cold
    assert info["actor_times"] == pytest.approx([warm, warm, cold, cold], abs=1e-12)
    p2 = (0.1 + 4 * STEPS * 0.001) / 2.0 + cold
    assert info["round_time"] == pytest.approx(p2, abs=1e-12)
    assert info["round_cost"] == pytest.approx(p2 * 1e-2 + 4 * p2 * 1e-3, abs=1e-15)
    _, _, _, _, info = env.step(0)  # round 3: 1 actor, the other 3 released at the start
    p3 = (0.1 + STEPS * 0.001) / 2.0 + warm
    assert info["round_cost"] == pytest.approx(p3 * 1e-2 + p3 * 1e-3, abs=1e-15)


@pytest.mark.parametrize(
    ("pricing", "learner_vm_hour"),
    [(None, 0.192), ("aci-cpu", 0.192), ("aci", 3.06)],  # CartPole's default: a CPU learner
)
def test_server_billing_is_wall_time_of_the_cluster(pricing, learner_vm_hour):
    env = make_env(billing="server", pricing=pricing, pricing_overrides=None, max_actors=32)
    env.reset(seed=0)
    _, _, _, _, info = env.step(31)
    a = actor_time(0.1, cold=0.0)
    p = (0.1 + 32 * STEPS * 0.001) / 2.0 + a
    assert info["round_time"] == pytest.approx(p, abs=1e-12)
    expected = p * (learner_vm_hour + 4 * 1.008) / 3600
    assert info["round_cost"] == pytest.approx(expected, abs=1e-15)


def test_pricing_default_follows_the_workload():
    assert make_env().pricing.name == "aci-cpu"
    assert make_env(pricing="aci").pricing.name == "aci"
    assert scheduling_defaults("Hopper-v5").pricing == "aci-cpu"
    assert scheduling_defaults("QbertNoFrameskip-v4").pricing == "aci"  # a GPU for the CNN


def test_server_billing_sizes_the_cluster_for_its_own_fleet():
    # server:8 runs 8 actors on one 8-core VM, whatever the action space's I_max.
    env = make_env(
        billing="server", pricing="aci", pricing_overrides=None, max_actors=32, server_actors=8
    )
    env.reset(seed=0)
    _, _, _, _, info = env.step(7)
    p = (0.1 + 8 * STEPS * 0.001) / 2.0 + actor_time(0.1, cold=0.0)
    assert info["round_cost"] == pytest.approx(p * (3.06 + 1 * 1.008) / 3600, abs=1e-15)
    with pytest.raises(ValueError, match=r"server_actors: expected an int >= 1, actual 0"):
        make_env(billing="server", server_actors=0)


def test_same_seed_same_modeled_episode_with_stragglers():
    def episode(seed):
        env = make_env(compute={**COMPUTE, "actor_jitter_cv": 0.3})
        env.reset(seed=seed)
        out = []
        for a in (3, 0, 2):
            out.append(env.step(a)[4]["actor_times"])
        return out

    assert episode(5) == episode(5)
    assert episode(5) != episode(6)
    times = episode(5)[0]
    assert len(set(times)) == 4  # four different stragglers


@pytest.mark.parametrize("action", [4, -1, 1.5, "a", [0, 1], None])
def test_action_outside_the_space(action):
    env = make_env()
    env.reset(seed=0)
    with pytest.raises(ValueError, match=r"expected an integer in \[0, 3\]"):
        env.step(action)


def test_numpy_actions_are_accepted():
    env = make_env()
    env.reset(seed=0)
    assert env.step(np.int64(3))[4]["num_actors"] == 4
    assert env.step(np.array([1]))[4]["num_actors"] == 2


@pytest.mark.parametrize(
    "kwargs, exc, match",
    [
        ({"workload": "Pong-v99"}, UnknownWorkloadError, "CartPole-v1"),
        ({"workload": 3}, TypeError, "workload"),
        ({"max_actors": 0}, ValueError, "max_actors"),
        ({"max_actors": 2.0}, TypeError, "max_actors"),
        ({"budget": -1.0}, ValueError, "budget"),
        ({"beta": -0.1}, ValueError, "beta"),
        ({"pricing_overrides": {"vcpu_second": -1.0}}, ValueError, "vcpu_second"),
        ({"pricing": "gcp"}, ValueError, "pricing"),
        ({"cold_start_actor_s": -1.0}, ValueError, "cold_start_actor_s"),
        ({"bandwidth_bytes_per_s": 0.0}, ValueError, "bandwidth"),
        ({"timing": "wall"}, ValueError, "timing"),
        ({"billing": "spot"}, ValueError, "billing"),
        ({"preset": "huge"}, ValueError, "preset"),
        ({"penalty_scale": 0.0}, ValueError, "penalty_scale"),
        ({"steps_per_actor": 0}, ValueError, "steps_per_actor"),
        ({"compute": 3}, TypeError, "compute"),
        (
            {"compute": {"actor_step": 0.1}},
            ValueError,
            r"compute: expected fields of ComputeCostModel .*actual unknown \['actor_step'\]",
        ),
        ({"fleet_kwargs": [("backend", "process")]}, TypeError, "fleet_kwargs: expected a mapping"),
        ({"learner_overrides": 3}, TypeError, "learner_overrides: expected a mapping"),
        ({"pricing_overrides": "cheap"}, TypeError, "pricing_overrides: expected a mapping"),
    ],
)
def test_bad_arguments(kwargs, exc, match):
    with pytest.raises(exc, match=match):
        make_env(**kwargs)


def test_reset_builds_a_fresh_run_and_closes_the_old_fleet():
    env = make_env()
    env.reset(seed=0)
    first = env.fleet
    env.step(0)
    env.reset(seed=1)
    assert first.closed and env.fleet is not first and env.round == 0
    assert env.total_cost == 0.0
    env.close()
    assert env.fleet is None


# ----------------------------------------------------------------- real fleet + learner
TINY = {"max_actors": 4, "steps_per_actor": 16, "max_rounds": 3}


def test_registered_ids_use_the_real_fleet_and_learner():
    from fleetgym.agents.learners.ppo import PPOLearner

    env = gym.make("fleetgym/ActorScheduling-CartPole-Modeled-v0", **TINY)
    env.reset(seed=0)
    inner = env.unwrapped
    assert isinstance(inner.learner, PPOLearner)
    assert type(inner.fleet).__name__ == "InProcessFleet" and inner.fleet.batched
    assert inner.timing == "modeled" and inner.preset == "fast"
    assert inner.time_model.keep_alive  # the preset pre-warms, as MinionsRL does
    _, _, _, _, info = env.step(3)
    assert info["num_samples"] == 4 * 16 and len(info["actor_times"]) == 4
    env.close()
    measured = gym.make("fleetgym/ActorScheduling-CartPole-v0", **TINY)
    measured.reset(seed=0)
    assert not measured.unwrapped.fleet.batched  # each actor timed on its own
    _, _, _, _, info = measured.step(1)
    assert all(t > 0.0 for t in info["actor_compute_times"])
    measured.close()


@pytest.mark.parametrize(
    "env_id",
    [
        "fleetgym/ActorScheduling-CartPole-Modeled-v0",
        "fleetgym/ActorScheduling-CartPole-v0",
        "fleetgym/ActorScheduling-v0",
    ],
)
def test_check_env_gymnasium_and_sb3(env_id):
    from gymnasium.utils.env_checker import check_env
    from stable_baselines3.common.env_checker import check_env as sb3_check_env

    env = gym.make(env_id, **TINY)
    check_env(env.unwrapped, skip_render_check=True)
    sb3_check_env(env.unwrapped, warn=True, skip_render_check=True)
    rebuilt = gym.make(env.spec)
    assert rebuilt.unwrapped.max_actors == 4 and rebuilt.unwrapped.steps_per_actor == 16
    env.close()
    rebuilt.close()


def test_same_seed_same_real_episode_in_modeled_mode():
    def run(seed):
        env = gym.make("fleetgym/ActorScheduling-CartPole-Modeled-v0", **TINY)
        obs, _ = env.reset(seed=seed)
        rows = [obs.tolist()]
        for action in (3, 0, 2):
            obs, reward, terminated, truncated, info = env.step(action)
            rows.append(
                (obs.tolist(), reward, info["actor_times"], info["loss"], info["mean_return"])
            )
        env.close()
        return rows

    first = run(7)
    assert first == run(7)
    assert first != run(8)


def test_vector_use():
    envs = gym.make_vec(
        "fleetgym/ActorScheduling-CartPole-Modeled-v0",
        num_envs=2,
        vectorization_mode="sync",
        **TINY,
    )
    obs, _ = envs.reset(seed=0)
    assert obs.shape == (2, 7)
    obs, rewards, terminated, truncated, infos = envs.step(np.array([0, 3]))
    assert rewards.shape == (2,) and (rewards < 0).all()
    assert infos["num_actors"].tolist() == [1, 4]
    envs.close()


def test_a_tiny_real_run_to_truncation():
    env = gym.make("fleetgym/ActorScheduling-CartPole-Modeled-v0", target_return=1e6, **TINY)
    env.reset(seed=1)
    total = 0.0
    for _ in range(3):
        _, reward, terminated, truncated, info = env.step(3)
        total += reward
    assert total < 0.0
    assert truncated and not terminated and info["round"] == 3
    assert info["terminal_penalty"] == pytest.approx(
        (info["max_return"] - 1e6) / env.unwrapped.penalty_scale
    )
    assert info["total_time"] > 0 and info["total_cost"] > 0
    env.close()


class NoEpisodeLearner(FakeLearner):
    """Like PPOLearner before its first finished episode: mean return 0.0, 0 episodes."""

    def update(self, trajectories):
        stats = super().update(trajectories)
        stats.mean_return, stats.episodes_completed = 0.0, 0
        return stats


def test_a_non_positive_target_is_not_reached_before_any_episode_ends():
    # The learner's 0.0 before the first finished episode is a placeholder, not a return:
    # with J <= 0 it must neither reach the target nor count as max_k R_bar.
    env = make_env(target_return=-5.0, max_rounds=2, learner_factory=NoEpisodeLearner)
    env.reset(seed=0)
    _, _, terminated, truncated, info = env.step(0)
    assert not terminated and not truncated and not info["target_reached"]
    _, reward, terminated, truncated, info = env.step(0)
    assert truncated and not terminated and not info["success"]
    # No return was ever seen: the penalty uses the placeholder, max R_bar - J = 0 - (-5),
    # which is above J: a run that failed earns no bonus, the penalty is 0.
    assert info["terminal_penalty"] == 0.0


def test_process_backend_through_fleet_kwargs():
    # The in-process default's lockstep flag must not leak into another backend's options.
    env = ActorSchedulingEnv(
        "CartPole-v1",
        timing="modeled",
        training={"steps_per_actor": 8},
        fleet={"max_actors": 2, "backend": "process"},
        episode={"max_rounds": 1},
    )
    try:
        env.reset(seed=0)
        assert type(env.fleet).__name__ == "ProcessFleet"
        _, _, _, truncated, info = env.step(1)
        assert truncated and info["num_actors"] == 2 and info["num_samples"] == 16
    finally:
        env.close()


def test_keep_alive_ttl_keeps_released_containers_warm_and_bills_them():
    ttl = 0.4
    env = make_env(prewarm=True, keep_alive_s=ttl, target_return=1e9, max_rounds=50)
    env.reset(seed=0)
    warm, cold = actor_time(0.1, cold=0.0), actor_time(0.1)

    def p(n, slowest):
        return (0.1 + n * STEPS * 0.001) / 2.0 + slowest

    env.step(3)  # round 1: 4 actors, warmed before training
    _, _, _, _, info = env.step(0)  # round 2: 1 actor; slots 1-3 idle, warm, billed
    p2 = p(1, warm)
    assert p2 < ttl
    idle2 = 3 * p2 * 1e-3
    assert info["round_cost"] == pytest.approx(p2 * 1e-2 + p2 * 1e-3 + idle2, abs=1e-15)
    # Round 3: back to 4 actors within the TTL: no cold start, and slots 1-3 are billed
    # from the start of the round as warm ones.
    _, _, _, _, info = env.step(3)
    assert info["actor_times"] == pytest.approx([warm] * 4, abs=1e-12)
    p3 = p(4, warm)
    assert info["round_cost"] == pytest.approx(p3 * 1e-2 + 4 * p3 * 1e-3, abs=1e-15)
    # Round 4 with 1 actor: slots 1-3 idle for min(round, ttl).
    _, _, _, _, info = env.step(0)
    p4 = p(1, warm)
    idle4 = 3 * min(p4, ttl) * 1e-3
    assert info["round_cost"] == pytest.approx(p4 * 1e-2 + p4 * 1e-3 + idle4, abs=1e-15)
    # Rounds 5-6 with 1 actor: the TTL runs out in round 5 (partly billed), then round 7
    # grows to 4 again and pays three cold starts.
    _, _, _, _, info = env.step(0)
    p5 = p(1, warm)
    left = max(ttl - p4, 0.0)
    idle5 = 3 * min(p5, left) * 1e-3
    assert info["round_cost"] == pytest.approx(p5 * 1e-2 + p5 * 1e-3 + idle5, abs=1e-15)
    env.step(0)
    _, _, _, _, info = env.step(3)
    assert info["actor_times"] == pytest.approx([warm, cold, cold, cold], abs=1e-12)


def test_keep_alive_ttl_of_zero_releases_at_the_next_round():
    env = make_env(prewarm=True, keep_alive_s=0.0)
    env.reset(seed=0)
    env.step(3)
    env.step(0)
    _, _, _, _, info = env.step(3)
    warm, cold = actor_time(0.1, cold=0.0), actor_time(0.1)
    assert info["actor_times"] == pytest.approx([warm, cold, cold, cold], abs=1e-12)
    with pytest.raises(ValueError, match="keep_alive_s"):
        make_env(prewarm=True, keep_alive_s=-1.0)


# ----------------------------------------------------------------- time_model= and pricing=
TIME_FIELDS = (
    "cold_start_actor_s",
    "cold_start_learner_s",
    "prewarm",
    "bandwidth_bytes_per_s",
    "latency_s",
    "learner_speed_factor",
)


def _episode(env, actions=(2, 0, 3)):
    env.reset(seed=0)
    out = [env.step(a) for a in actions]
    env.close()
    return [(o.tolist(), r, i["round_cost"], i["actor_times"]) for o, r, _, _, i in out]


def test_time_model_and_pricing_objects_match_the_flat_arguments():
    flat = make_env(prewarm=True, keep_alive_s=0.2)
    time_model = TimeModel(
        cold_start_actor_s=0.3,
        cold_start_learner_s=1.5,
        prewarm=True,
        keep_alive_s=0.2,
        bandwidth_bytes_per_s=1e6,
        latency_s=0.01,
        learner_speed_factor=2.0,
    )
    no_flat = {name: None for name in TIME_FIELDS}
    objects = make_env(
        **no_flat,
        time_model=time_model,
        pricing=get_pricing("aci-cpu", **UNIT_PRICES),
        pricing_overrides=None,
    )
    assert objects.time_model is time_model
    assert objects.accountant.time_model is time_model
    assert _episode(objects) == _episode(flat)


def test_time_model_with_its_flat_fields_is_an_error():
    with pytest.raises(ValueError, match=r"time_model: expected either .*\['latency_s'\]"):
        make_actor_scheduling_env("CartPole-v1", time_model=TimeModel(), latency_s=0.01)
    with pytest.raises(TypeError, match="time_model: expected a TimeModel, a dict of its fields"):
        make_actor_scheduling_env("CartPole-v1", time_model=[("latency_s", 0.01)])
    with pytest.raises(ValueError, match="pricing_overrides: expected None with a PricingPreset"):
        make_actor_scheduling_env(
            "CartPole-v1", pricing=get_pricing("aci"), pricing_overrides={"x": 1}
        )


# ----------------------------------------------------------------- nothing non-finite flows out
@pytest.mark.parametrize(
    "action", [1e300, -1e300, math.inf, math.nan, np.uint64(2**64 - 1), 10**400]
)
def test_huge_actions_are_refused_clearly(action):
    env = make_env()
    env.reset(seed=0)
    with pytest.raises(ValueError, match=r"action: expected an integer in \[0, 3\]"):
        env.step(action)


@pytest.mark.parametrize(
    ("kwargs", "exc", "match"),
    [
        ({"target_return": "high"}, TypeError, "target_return: expected a number, actual str"),
        ({"target_return": 1e300}, ValueError, "target_return: expected a finite number"),
        ({"target_return": math.nan}, ValueError, "target_return"),
        ({"beta": 1e300}, ValueError, "beta"),
        ({"cost_weight": math.inf}, ValueError, "cost_weight"),
        ({"penalty_scale": 1e-300}, ValueError, "penalty_scale"),
        ({"budget": 1e300}, ValueError, "budget"),
        ({"cold_start_actor_s": 1e300}, ValueError, "cold_start_actor_s"),
        ({"latency_s": 1e300}, ValueError, "latency_s"),
        ({"keep_alive_s": 1e300}, ValueError, "keep_alive_s"),
        ({"bandwidth_bytes_per_s": 1e-300}, ValueError, "bandwidth_bytes_per_s"),
        ({"learner_speed_factor": 1e-300}, ValueError, "learner_speed_factor"),
        ({"learner_speed_factor": 1e300}, ValueError, "learner_speed_factor"),
        ({"pricing_overrides": {"learner_second": 1e300}}, ValueError, "learner_second"),
        ({"compute": {"actor_step_s": 1e300}}, ValueError, "actor_step_s"),
        ({"compute": {"actor_jitter_cv": 1e200}}, ValueError, "actor_jitter_cv"),
        ({"normalize_obs": "yes"}, TypeError, "normalize_obs: expected a bool"),
    ],
)
def test_out_of_range_values_name_their_argument(kwargs, exc, match):
    with pytest.raises(exc, match=match):
        make_env(**kwargs)


@pytest.mark.parametrize("normalize_obs", [True, False])
@pytest.mark.parametrize("timing", ["modeled", "measured"])
def test_extreme_accepted_values_keep_every_output_finite(normalize_obs, timing):
    from fleetgym.meta_env.presets import MAX_SCALE, MIN_PENALTY_SCALE
    from fleetgym.meta_env.pricing import MAX_PRICE
    from fleetgym.meta_env.time_model import (
        MAX_JITTER_CV,
        MAX_SECONDS,
        MAX_SPEED_FACTOR,
        MIN_BANDWIDTH,
    )

    prices = {name: MAX_PRICE for name in UNIT_PRICES} | {
        "server_learner_vm_hour": MAX_PRICE,
        "server_actor_vm_hour": MAX_PRICE,
    }
    env = make_env(
        timing=timing,
        normalize_obs=normalize_obs,
        target_return=-MAX_SCALE,
        beta=MAX_SCALE,
        cost_weight=MAX_SCALE,
        penalty_scale=MIN_PENALTY_SCALE,
        budget=MAX_SCALE,
        max_rounds=2,
        pricing_overrides=prices,
        cold_start_actor_s=MAX_SECONDS,
        cold_start_learner_s=MAX_SECONDS,
        latency_s=MAX_SECONDS,
        bandwidth_bytes_per_s=MIN_BANDWIDTH,
        learner_speed_factor=1.0 / MAX_SPEED_FACTOR,
        compute={name: MAX_SECONDS for name in COMPUTE} | {"actor_jitter_cv": MAX_JITTER_CV},
        learner_factory=NoEpisodeLearner,
    )
    obs, _ = env.reset(seed=0)
    assert np.isfinite(obs).all()
    done = False
    while not done:
        obs, reward, terminated, truncated, info = env.step(3)
        done = terminated or truncated
        assert np.isfinite(obs).all() and math.isfinite(reward)
        for key in ("round_time", "round_cost", "total_cost", "total_time", "budget_left"):
            assert math.isfinite(info[key]), key
        assert np.isfinite(info["actor_times"]).all()
        assert env.observation_space.contains(obs)
