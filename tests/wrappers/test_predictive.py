"""Tests of fleetgym.wrappers.predictive: exact estimates under constant delays, identity
under ``perfect``, the same code over Mode 3, bad input."""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np
import pytest
from gymnasium import spaces
from gymnasium.utils.env_checker import check_env as gym_check_env

import fleetgym  # noqa: F401  (registers fleetgym/Remote-v0)
from fleetgym.errors import UnsupportedSpaceError
from fleetgym.wrappers import AugmentedCompensation, PredictiveCompensation
from fleetgym.wrappers.channels import FixedDelay
from fleetgym.wrappers.compensation import make_robust_env
from fleetgym.wrappers.dynamics import CartPoleDynamics
from fleetgym.wrappers.network_shim import NetworkShimWrapper
from fleetgym.wrappers.predictive import PredictionError, PredictiveObservation

STEP_MS = 20.0


def cartpole_shim(up_ticks: int, down_ticks: int, **kwargs: Any) -> NetworkShimWrapper:
    # Under the loop a delay of n whole periods is used exactly n ticks late.
    return NetworkShimWrapper(
        gym.make("CartPole-v1"),
        uplink=FixedDelay(up_ticks * STEP_MS),
        downlink=FixedDelay(down_ticks * STEP_MS),
        info="full",
        **kwargs,
    )


def random_actions(n: int, seed: int = 0) -> list[int]:
    return [int(a) for a in np.random.default_rng(seed).integers(2, size=n)]


class SumEnv(gym.Env[np.ndarray, int]):
    """Observation = (tick, sum of the actions applied): every step's effect is exact."""

    metadata: dict[str, Any] = {"render_modes": []}

    def __init__(self) -> None:
        self.observation_space = spaces.Box(-1e6, 1e6, shape=(2,), dtype=np.float64)
        self.action_space = spaces.Discrete(5)
        self.state = np.zeros(2)

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        super().reset(seed=seed)
        self.state = np.zeros(2)
        return self.state.copy(), {}

    def step(self, action: int):
        self.state = self.state + [1.0, float(action)]
        return self.state.copy(), 1.0, False, self.state[0] >= 200, {}


def sum_predictor(obs: np.ndarray, actions: np.ndarray, ages: np.ndarray) -> np.ndarray:
    return obs + [len(actions), float(np.sum(actions))]


# ------------------------------------------------------------------ the causal ceiling
@pytest.mark.parametrize(("up", "down"), [(1, 0), (1, 1), (3, 2), (5, 5)])
def test_true_dynamics_recover_the_current_obs_under_a_constant_delay(up: int, down: int):
    shim = cartpole_shim(up, down)
    env = PredictiveObservation(shim, CartPoleDynamics.from_env(shim), action_delay=down)
    env.reset(seed=3)
    for t, action in enumerate(random_actions(60)):
        obs, _, terminated, truncated, info = env.step(action)
        assert info["obs_age_steps"] == min(up, t + 1)
        assert info["predicted_steps"] == min(up, t + 1)
        # Exact up to the float32 rounding of the delivered observation (measured: 0).
        np.testing.assert_allclose(obs, info["true_obs"], rtol=0, atol=1e-5)
        if terminated or truncated:
            break


@pytest.mark.parametrize(("up", "down"), [(1, 1), (2, 3)])
def test_lookahead_action_is_the_state_the_next_action_meets(up: int, down: int):
    shim = cartpole_shim(up, down)
    env = PredictiveObservation(shim, "true-dynamics", action_delay=down, lookahead="action")
    env.reset(seed=4)
    estimates, truths = [], []
    for action in [0, 1] * 20:
        obs, _, terminated, truncated, info = env.step(action)
        estimates.append(obs)
        truths.append(info["true_obs"])
        if terminated or truncated:
            break
    assert len(estimates) > 8
    # The estimate made at tick t is the observation `down` ticks later.
    for t in range(len(estimates) - down):
        np.testing.assert_allclose(estimates[t], truths[t + down], rtol=0, atol=1e-5)


def test_applied_ids_learn_the_action_age_without_a_prior():
    shim = NetworkShimWrapper(
        SumEnv(), uplink=FixedDelay(2 * STEP_MS), downlink=FixedDelay(3 * STEP_MS), step_ms=STEP_MS
    )
    env = PredictiveObservation(shim, sum_predictor)  # prior action age 0
    env.reset(seed=0)
    truth = np.zeros(2)
    applied: list[int] = []
    actions = [int(a) for a in np.random.default_rng(2).integers(5, size=40)]
    errors = []
    for t, action in enumerate(actions):
        obs, *_ = env.step(action)
        applied.append(actions[t - 3] if t >= 3 else 0)
        truth = np.array([t + 1.0, float(sum(applied))])
        errors.append(float(np.abs(obs - truth).max()))
    # Once the first action's application has been reported back (3 + 2 ticks), exact.
    assert errors[6:] == [0.0] * len(errors[6:])
    assert env._likely_delay() == 3


def test_without_applied_ids_the_given_action_delay_is_used():
    shim = cartpole_shim(2, 2)
    env = PredictiveObservation(shim, "true-dynamics", applied_ids=False, action_delay=2)
    env.reset(seed=5)
    for action in random_actions(30, seed=3):
        obs, _, terminated, truncated, info = env.step(action)
        np.testing.assert_allclose(obs, info["true_obs"], rtol=0, atol=1e-5)
        if terminated or truncated:
            break


def test_perfect_profile_is_the_identity():
    plain = NetworkShimWrapper(gym.make("CartPole-v1"), profile="perfect")
    shim = NetworkShimWrapper(gym.make("CartPole-v1"), profile="perfect")
    env = PredictiveObservation(shim, "true-dynamics", lookahead="action", samples=4)
    a, _ = plain.reset(seed=7)
    b, _ = env.reset(seed=7)
    assert np.array_equal(a, b) and a.dtype == b.dtype
    for action in random_actions(300, seed=4):
        ra = plain.step(action)
        rb = env.step(action)
        assert np.array_equal(ra[0], rb[0])
        assert ra[1:4] == rb[1:4]
        assert rb[4]["predicted_steps"] == 0
        if ra[2] or ra[3]:
            plain.reset()
            env.reset()


def test_distribution_mode_is_seeded_and_reports_its_spread():
    def run() -> list[np.ndarray]:
        shim = NetworkShimWrapper(gym.make("CartPole-v1"), profile="wifi-degraded")
        env = PredictiveObservation(shim, "true-dynamics", samples=8, uncertainty=True)
        assert env.observation_space.shape == (5,)
        out = [env.reset(seed=11)[0]]
        for action in random_actions(25, seed=5):
            obs, _, terminated, truncated, _ = env.step(action)
            out.append(obs)
            if terminated or truncated:
                break
        return out

    first, second = run(), run()
    assert all(np.array_equal(x, y) for x, y in zip(first, second, strict=True))
    assert all(x[-1] >= 0 for x in first) and max(x[-1] for x in first) > 0


def test_plain_and_batched_predictors_agree():
    dyn = CartPoleDynamics()

    def plain(obs: np.ndarray, actions: np.ndarray, ages: np.ndarray) -> np.ndarray:
        return dyn(obs[None], actions[None], None)[0]

    outs = []
    for predictor in (dyn, plain):
        env = PredictiveObservation(
            NetworkShimWrapper(gym.make("CartPole-v1"), profile="wifi-normal"), predictor
        )
        seq = [env.reset(seed=2)[0]]
        for action in random_actions(30, seed=6):
            obs, _, terminated, truncated, _ = env.step(action)
            seq.append(obs)
            if terminated or truncated:
                seq.append(env.reset()[0])
        outs.append(seq)
    assert all(np.array_equal(x, y) for x, y in zip(*outs, strict=True))


# ------------------------------------------------------------------ the same code in Mode 3
@pytest.mark.timeout(120)
def test_the_same_wrapper_over_remote_v0():
    from fleetgym.wrappers.remote import RemoteEnvServer

    server = RemoteEnvServer("CartPole-v1", step_ms=50.0).start()
    try:
        client = gym.make("fleetgym/Remote-v0", address=f"{server.address[0]}:{server.address[1]}")
        env = PredictiveObservation(client, "true-dynamics")
        obs, _ = env.reset(seed=0)
        for action in random_actions(20, seed=7):
            obs, _, terminated, truncated, info = env.step(action)
            assert obs.shape == (4,) and np.all(np.isfinite(obs))
            assert info["predicted_steps"] == info["obs_age_steps"]
            if info["predicted_steps"] == 0:
                assert np.array_equal(obs, info["true_obs"])
            if terminated or truncated:
                env.reset()
        env.close()
    finally:
        server.stop()


# ------------------------------------------------------------------ the whole stack
def test_make_robust_env_builds_the_predictive_and_augmented_stacks():
    env = make_robust_env(
        "CartPole-v1", "wifi-normal", compensation="predictive", predictor="true-dynamics"
    )
    assert isinstance(env, PredictiveObservation)
    assert env.observation_space == gym.make("CartPole-v1").observation_space
    gym_check_env(env, skip_render_check=True)
    aug = make_robust_env(
        "CartPole-v1", "wifi-normal", compensation=AugmentedCompensation(action_history_length=5)
    )
    assert aug.observation_space.shape == (4 + 2 + 5 * 2,)


# ------------------------------------------------------------------ bad input
def test_a_predictor_of_the_wrong_shape_names_the_step():
    env = PredictiveObservation(cartpole_shim(1, 0), lambda obs, actions, ages: obs[:3])
    env.reset(seed=0)
    with pytest.raises(
        PredictionError,
        match=r"predictor at step 0: expected an estimate of shape \(4,\), actual \(3,\)",
    ):
        env.step(1)


def test_a_predictor_with_non_finite_values_names_the_step():
    calls = []

    def nan_after_two(obs, actions, ages):
        calls.append(1)
        return obs * np.nan if len(calls) > 2 else obs

    env = PredictiveObservation(cartpole_shim(1, 0), nan_after_two)
    env.reset(seed=0)
    env.step(0)
    env.step(0)
    with pytest.raises(PredictionError, match="predictor at step 2: expected finite values"):
        env.step(0)


def test_a_predictor_for_other_spaces_is_refused():
    pendulum = gym.make("Pendulum-v1")
    foreign = CartPoleDynamics(observation_space=pendulum.observation_space)
    with pytest.raises(UnsupportedSpaceError, match="observation_space"):
        PredictiveObservation(cartpole_shim(1, 1), foreign)
    other_actions = CartPoleDynamics(action_space=spaces.Discrete(3))
    with pytest.raises(UnsupportedSpaceError, match="action_space"):
        PredictiveObservation(cartpole_shim(1, 1), other_actions)
    with pytest.raises(UnsupportedSpaceError, match="CartPole"):
        PredictiveObservation(NetworkShimWrapper(gym.make("Acrobot-v1")), "true-dynamics")


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"predictor": 3}, TypeError, "predictor: expected a callable"),
        ({"lookahead": -1}, ValueError, "lookahead"),
        ({"lookahead": "later"}, TypeError, "lookahead"),
        ({"applied_ids": False}, ValueError, "action_delay: expected the action age"),
        ({"samples": 1.5}, TypeError, "samples"),
        ({"start_action": 7}, ValueError, "start_action"),
    ],
)
def test_bad_arguments(kwargs: dict[str, Any], error: type, match: str):
    args = {"predictor": "true-dynamics", **kwargs}
    with pytest.raises(error, match=match):
        PredictiveObservation(cartpole_shim(1, 1), **args)


def test_make_robust_env_predictor_only_with_predictive():
    with pytest.raises(ValueError, match="predictor: expected a predictor with"):
        make_robust_env("CartPole-v1", "wifi-normal", compensation="predictive")
    with pytest.raises(ValueError, match="predictor: expected None with compensation='history'"):
        make_robust_env("CartPole-v1", "wifi-normal", predictor="true-dynamics")
    with pytest.raises(ValueError, match="compensation"):
        make_robust_env("CartPole-v1", "wifi-normal", compensation="magic")


@pytest.mark.parametrize("env_id", ["Hopper-v5", "HalfCheetah-v5"])
def test_mujoco_dynamics_recover_the_current_obs_under_a_constant_delay(env_id: str):
    """A constant 3 + 2 tick delay: once the action delay is known, rolling the delivered
    observation through the actions in flight with the env's physics gives the current
    observation (to float rounding: MuJoCo's warm start differs between instances)."""
    period = gym.make(env_id).unwrapped.dt * 1000.0
    shim = NetworkShimWrapper(
        gym.make(env_id),
        uplink=FixedDelay(3 * period),
        downlink=FixedDelay(2 * period),
        info="full",
    )
    env = PredictiveObservation(shim, "true-dynamics")
    obs, info = env.reset(seed=0)
    rng = np.random.default_rng(0)
    errors = []
    for _ in range(40):
        action = rng.uniform(-0.3, 0.3, env.action_space.shape).astype(np.float32)
        obs, _, terminated, truncated, info = env.step(action)
        errors.append(float(np.abs(obs - info["true_obs"]).max()))
        if terminated or truncated:
            break
    assert len(errors) > 10
    assert max(errors[8:]) < 1e-6
    assert info["obs_age_steps"] == 3


def test_mujoco_dynamics_refuse_envs_whose_obs_is_not_the_joint_state():
    from fleetgym.wrappers.dynamics import MujocoStateDynamics

    with pytest.raises(UnsupportedSpaceError, match="root position"):
        MujocoStateDynamics("Hopper-v5", {"exclude_current_positions_from_observation": False})
    with pytest.raises(UnsupportedSpaceError, match="Ant"):
        MujocoStateDynamics("Ant-v5")
    with pytest.raises(UnsupportedSpaceError, match="CartPole, a Pendulum, a MuJoCo"):
        PredictiveObservation(NetworkShimWrapper(gym.make("Acrobot-v1")), "true-dynamics")


# ------------------------------------------------------------------ the prior action age
def test_make_robust_env_derives_the_prior_from_the_network():
    """75 ms each way at 20 ms: the shim applies every action 4 ticks after it was sent
    (floor(75 / 20 + 0.5)); make_robust_env's prior is that age, measured on the shim's
    own timeline, and with it the estimate is exact from the first step on."""
    from fleetgym.wrappers import action_delay_for_profile

    network = {"uplink": FixedDelay(75.0), "downlink": FixedDelay(75.0)}
    shim = NetworkShimWrapper(gym.make("CartPole-v1"), step_ms=STEP_MS, **network)
    shim.reset(seed=0)
    ages = [shim.step(t % 2)[-1]["action_age_steps"] for t in range(20)]
    assert set(ages[4:]) == {4}  # once a_0 has arrived (before: the start action)
    assert action_delay_for_profile(None, STEP_MS, **network) == 4

    def errors(**predict_kwargs: Any) -> list[float]:
        env = make_robust_env(
            "CartPole-v1",
            None,
            compensation=PredictiveCompensation(
                "true-dynamics", options={"lookahead": "action", "samples": 16, **predict_kwargs}
            ),
            step_ms=STEP_MS,
            shim={"info": "full", **network},
        )
        assert env.action_delay == predict_kwargs.get("action_delay", 4)
        env.reset(seed=1)
        estimates, truths = [], []
        for action in [1, 0] * 20:
            obs, _, terminated, truncated, info = env.step(action)
            estimates.append(obs)
            truths.append(info["true_obs"])
            if terminated or truncated:
                break
        # lookahead="action": the estimate at tick t is the observation 4 ticks later.
        return [float(np.abs(e - x).max()) for e, x in zip(estimates[:-4], truths[4:], strict=True)]

    derived = errors()
    assert len(derived) >= 8 and max(derived) < 1e-5
    # An explicit action_delay overrides the profile's (0: the old default, wrong here
    # until the applied ids have come back).
    assert max(errors(action_delay=0)) > 1e-3


def test_the_prior_follows_the_profile_and_an_explicit_one_wins():
    from fleetgym.wrappers import action_delay_for_profile

    def prior(profile: Any, **options: Any) -> int:
        comp = PredictiveCompensation("true-dynamics", options=options)
        return make_robust_env("CartPole-v1", profile, compensation=comp).action_delay

    assert prior("perfect") == 0
    assert prior("wifi-normal") == action_delay_for_profile("wifi-normal", STEP_MS) == 1
    assert prior("wifi-degraded") == action_delay_for_profile("wifi-degraded", STEP_MS) == 5
    assert prior("wifi-degraded-uplink") == 0  # actions are local
    assert prior("wifi-degraded", action_delay=2) == 2
    assert prior("wifi-normal", applied_ids=False) == 1
    # A mix drawn per episode: the ages of every profile pooled.
    assert action_delay_for_profile(["wifi-degraded", "wifi-degraded"], STEP_MS) == 5
    # The most frequent age; the CALF study's median round trip minus median observation
    # age differs where the distribution is skewed.
    assert prior("trace-wifi-office") == 0
    assert action_delay_for_profile("trace-wifi-office", STEP_MS, statistic="median") == 1
    with pytest.raises(ValueError, match="profile: expected at least one profile"):
        action_delay_for_profile([], STEP_MS)  # the shim's own resolution, and its error
    with pytest.raises(ValueError, match=r"statistic: expected one of \('mode', 'median'\)"):
        action_delay_for_profile("wifi-normal", STEP_MS, statistic="mean")


# ------------------------------------------------------------------ stalls
def test_max_horizon_stops_the_rollout_in_a_stall():
    shim = cartpole_shim(6, 0)
    env = PredictiveObservation(shim, "true-dynamics", max_horizon=3)
    env.reset(seed=0)
    for t in range(10):
        *_, info = env.step(t % 2)
        assert info["predicted_steps"] == min(t + 1, 3)


def test_the_rollout_follows_the_watchdogs_safe_action():
    """Actions take 5 ticks; the env's watchdog applies action 3 after 2 ticks without a
    fresh one (ticks 1 to 4 of the episode). The rollout that knows it is exact; one that
    assumes the shim's hold is not."""
    from fleetgym.wrappers import StallWatchdog

    def run(model_watchdog: bool) -> list[float]:
        shim = NetworkShimWrapper(
            SumEnv(),
            uplink=FixedDelay(STEP_MS),
            downlink=FixedDelay(5 * STEP_MS),
            step_ms=STEP_MS,
            info="full",
        )
        watched = StallWatchdog(shim, stall_steps=2, safe_action=3)
        options: dict[str, Any] = {"stall_steps": 2, "safe_action": 3} if model_watchdog else {}
        env = PredictiveObservation(watched, sum_predictor, action_delay=5, **options)
        env.reset(seed=0)
        errors = []
        for t in range(12):
            obs, *_, info = env.step(1)
            assert info["safe_action"] == (1 <= t <= 4)
            errors.append(float(np.abs(obs - info["true_obs"]).max()))
        return errors

    assert run(True) == [0.0] * 12
    assert max(run(False)) > 0
