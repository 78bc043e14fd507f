"""Action parametrisations of the learned scheduler (fleetgym.agents.schedulers.actions)."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest

import fleetgym  # noqa: F401  (registers the IDs)
from fleetgym.agents.schedulers import FixedScheduler
from fleetgym.agents.schedulers.actions import (
    ACTION_MODES,
    STEP_DOWN,
    STEP_KEEP,
    STEP_UP,
    MappedScheduler,
    SchedulerActionWrapper,
    action_space_for,
    fleet_sizes,
    num_actors_for,
    start_index,
    step_index,
)

MODELED = "fleetgym/ActorScheduling-CartPole-Modeled-v0"
#: A general scheduling env small enough to train a scheduler on in seconds.
TINY_GENERAL = {"workload": "CartPole-v1", "timing": "modeled", "max_rounds": 6}


def _train_tiny(out, **config):
    """A scheduler trained for 2 episodes on :data:`TINY_GENERAL`."""
    from fleetgym.experiments.schedule.config import SchedulerPPOConfig
    from fleetgym.experiments.schedule.train import train_scheduler

    return train_scheduler(
        out,
        env_id="fleetgym/ActorScheduling-v0",
        env_kwargs=TINY_GENERAL,
        episodes=2,
        config=SchedulerPPOConfig(n_steps=8, batch_size=4, n_epochs=1, **config),
        tensorboard=False,
        progress=False,
    )


@pytest.mark.parametrize("max_actors", [1, 2, 3, 8, 20, 32, 64])
def test_pow2_sizes_are_increasing_and_end_at_max(max_actors):
    sizes = fleet_sizes(max_actors)
    assert sizes[0] == 1 and sizes[-1] == max_actors
    assert list(sizes) == sorted(set(sizes))
    assert all(b <= 2 * a for a, b in zip(sizes, sizes[1:], strict=False))


@pytest.mark.parametrize("max_actors", [1, 7, 32])
def test_every_action_of_every_mode_is_a_valid_fleet(max_actors):
    for mode in ACTION_MODES:
        if mode == "step":  # relative: tested below
            continue
        space = action_space_for(mode, max_actors)
        if isinstance(space, gym.spaces.Discrete):
            actions = [np.int64(a) for a in range(space.n)]
        else:
            actions = [np.array([a], dtype=np.float32) for a in np.linspace(-1, 1, 101)]
        sizes = [num_actors_for(mode, a, max_actors) for a in actions]
        assert all(1 <= n <= max_actors for n in sizes)
        assert sizes == sorted(sizes)  # every mode is ordered
        assert sizes[0] == 1 and sizes[-1] == max_actors


def test_log2_is_a_log_scale():
    # a = 0 is the geometric middle of 1..32; out-of-range actions are clipped.
    assert num_actors_for("log2", 0.0, 32) == round(32**0.5)
    assert num_actors_for("log2", -5.0, 32) == 1
    assert num_actors_for("log2", np.array([7.0]), 32) == 32


@pytest.mark.parametrize(
    ("mode", "action", "match"),
    [
        ("discrete", 32, r"in \[0, 32\), actual 32"),
        ("discrete", -1, r"in \[0, 32\), actual -1"),
        ("pow2", 6, r"in \[0, 6\), actual 6"),
        ("pow2", 1.5, "expected one integer"),
        ("log2", np.nan, "expected one finite number"),
        ("log2", [0.1, 0.2], "expected one finite number"),
        ("linear", 0, "actions: expected one of"),
    ],
)
def test_bad_actions_raise(mode, action, match):
    with pytest.raises(ValueError, match=match):
        num_actors_for(mode, action, 32)


def test_wrapper_maps_onto_the_env():
    env = SchedulerActionWrapper(gym.make(MODELED), "pow2")
    assert env.action_space == gym.spaces.Discrete(6)
    env.reset(seed=0)
    for index, expected in enumerate((1, 2, 4, 8, 16, 32)):
        assert env.step(index)[4]["num_actors"] == expected
    env.close()
    env = SchedulerActionWrapper(gym.make(MODELED), "log2")
    assert isinstance(env.action_space, gym.spaces.Box)
    env.reset(seed=0)
    assert env.step(np.array([1.0], dtype=np.float32))[4]["num_actors"] == 32
    env.close()


def test_wrapper_rejects_a_non_discrete_env():
    with pytest.raises(TypeError, match="expected a Discrete action space"):
        SchedulerActionWrapper(gym.make("Pendulum-v1"), "pow2")


def test_mapped_scheduler_acts_in_the_env_space():
    # The inner predictor answers index 4 (FixedScheduler(5) -> action 4): the fifth pow2
    # size, 16 actors, env action 15, for single and batched observations alike.
    mapped = MappedScheduler(FixedScheduler(5, max_actors=6), "pow2", max_actors=32)
    action, _ = mapped.predict(np.zeros(7, dtype=np.float32))
    assert action.tolist() == [15]
    action, _ = mapped.predict(np.zeros((3, 7), dtype=np.float32))
    assert action.tolist() == [15, 15, 15]
    with pytest.raises(TypeError, match="expected an object with predict"):
        MappedScheduler(object(), "pow2")


def test_a_trained_pow2_scheduler_is_evaluated_on_the_plain_env(tmp_path):
    from fleetgym.experiments.schedule.checkpoint import load_learned_scheduler
    from fleetgym.experiments.schedule.evaluate import evaluate_scheduler

    kwargs = TINY_GENERAL
    result = _train_tiny(tmp_path, actions="pow2")
    scheduler = load_learned_scheduler(result.model_path)
    assert isinstance(scheduler, MappedScheduler) and scheduler.mode == "pow2"
    (episode,) = evaluate_scheduler(scheduler, kwargs, [0], env_id="fleetgym/ActorScheduling-v0")
    assert set(episode.num_actors) <= set(fleet_sizes(32))


def test_config_checks_the_action_mode():
    from fleetgym.experiments.schedule.config import SchedulerPPOConfig

    with pytest.raises(ValueError, match="actions: expected one of"):
        SchedulerPPOConfig(actions="linear")
    with pytest.raises(ValueError, match="use_sde: needs a continuous action space"):
        SchedulerPPOConfig(actions="pow2", use_sde=True)
    assert SchedulerPPOConfig(actions="log2", use_sde=True).ppo_kwargs()["use_sde"] is True


def test_step_walks_the_ladder_and_holds_at_its_ends():
    sizes = fleet_sizes(32)
    index = start_index(32)
    assert sizes[index] == 8
    walk = []
    for action in (STEP_UP, STEP_UP, STEP_UP, STEP_KEEP, STEP_DOWN) + (STEP_DOWN,) * 6:
        index = step_index(index, action, len(sizes))
        walk.append(sizes[index])
    assert walk == [16, 32, 32, 32, 16, 8, 4, 2, 1, 1, 1]
    assert sizes[start_index(32, 2)] == 2
    with pytest.raises(ValueError, match=r"start_actors: expected one of \(1, 2, 4"):
        start_index(32, 3)
    with pytest.raises(ValueError, match=r"in \[0, 3\), actual 3"):
        step_index(0, 3, 6)
    with pytest.raises(ValueError, match="'step' is relative"):
        num_actors_for("step", 1, 32)


def test_step_wrapper_adds_the_size_and_restarts_each_episode():
    from stable_baselines3.common.env_checker import check_env

    env = SchedulerActionWrapper(gym.make(MODELED), "step", start_actors=4)
    assert env.action_space == gym.spaces.Discrete(3)
    assert env.observation_space.shape == (8,)
    obs, _ = env.reset(seed=0)
    assert obs[-1] == pytest.approx(2 / 5)  # 4 actors: ladder position 2 of 0..5
    seen = []
    for action in (STEP_UP, STEP_KEEP, STEP_DOWN, STEP_DOWN):
        obs, _, _, _, info = env.step(action)
        seen.append(info["num_actors"])
        assert obs[-1] == pytest.approx(fleet_sizes(32).index(info["num_actors"]) / 5)
        assert env.observation_space.contains(obs)
    assert seen == [8, 8, 4, 2]
    obs, _ = env.reset(seed=1)
    assert obs[-1] == pytest.approx(2 / 5)
    check_env(env)
    env.close()


def test_a_trained_step_scheduler_acts_alike_wrapped_and_on_the_plain_env(tmp_path):
    # The same model acting through the training wrapper and through MappedScheduler on
    # the plain env (how it is evaluated next to the baselines) picks the same fleets.
    from fleetgym.experiments.schedule.checkpoint import load_learned_scheduler, load_scheduler
    from fleetgym.experiments.schedule.evaluate import evaluate_scheduler

    kwargs = TINY_GENERAL
    result = _train_tiny(tmp_path, actions="step", start_actors=16)
    scheduler = load_learned_scheduler(result.model_path)
    assert isinstance(scheduler, MappedScheduler) and scheduler.mode == "step"
    assert fleet_sizes(32)[scheduler.start] == 16
    episodes = evaluate_scheduler(scheduler, kwargs, [0, 1], env_id="fleetgym/ActorScheduling-v0")
    model = load_scheduler(result.model_path)
    for seed, episode in zip([0, 1], episodes, strict=True):
        env = SchedulerActionWrapper(
            gym.make("fleetgym/ActorScheduling-v0", **kwargs), "step", start_actors=16
        )
        obs, _ = env.reset(seed=seed)
        sizes, done = [], False
        while not done:
            action, _ = model.predict(obs, deterministic=True)
            obs, _, terminated, truncated, info = env.step(action)
            sizes.append(info["num_actors"])
            done = terminated or truncated
        env.close()
        assert sizes == list(episode.num_actors)


def test_config_checks_the_start_size():
    from fleetgym.experiments.schedule.config import SchedulerPPOConfig

    for bad in (0, -2, 2.5, True):
        with pytest.raises(ValueError, match="start_actors: expected None or a positive int"):
            SchedulerPPOConfig(actions="step", start_actors=bad)


def _starts(env: SchedulerActionWrapper, n: int, seed: int = 0) -> list[int]:
    return [fleet_sizes(32)[round(float(env.reset(seed=seed)[0][-1]) * 5)] for _ in range(n)]


def test_exploring_starts_are_uniform_reproducible_and_independent_of_the_workload_seed():
    starts = (4, 8, 16, 32)
    env = SchedulerActionWrapper(gym.make(MODELED), "step", train_starts=starts, starts_seed=[7, 0])
    drawn = _starts(env, 400)  # the same workload seed every episode
    counts = [drawn.count(n) for n in starts]
    # Binomial(400, 1/4) per size: mean 100, std 8.7; 5 std either way.
    assert all(57 <= c <= 143 for c in counts), counts
    again = SchedulerActionWrapper(
        gym.make(MODELED), "step", train_starts=starts, starts_seed=[7, 0]
    )
    assert _starts(again, 20, seed=123) == drawn[:20]
    other = SchedulerActionWrapper(
        gym.make(MODELED), "step", train_starts=starts, starts_seed=[7, 1]
    )
    assert _starts(other, 20) != drawn[:20]
    # the episode runs from the drawn size: a keep plays it
    obs, _ = env.reset(seed=0)
    size = fleet_sizes(32)[round(float(obs[-1]) * 5)]
    assert env.step(STEP_KEEP)[4]["num_actors"] == size
    for e in (env, again, other):
        e.close()


def test_exploring_starts_are_checked():
    from fleetgym.experiments.schedule.config import SchedulerPPOConfig, stored_config

    with pytest.raises(ValueError, match="start_actors: expected one of"):
        SchedulerActionWrapper(gym.make(MODELED), "step", train_starts=(8, 12))
    with pytest.raises(ValueError, match="train_starts: only the 'step' mode"):
        SchedulerActionWrapper(gym.make(MODELED), "pow2", train_starts=(8,))
    with pytest.raises(ValueError, match="train_starts: expected positive ints"):
        SchedulerPPOConfig(train_starts=(8, 0))
    with pytest.raises(ValueError, match="train_starts: needs a start"):
        SchedulerPPOConfig(actions="pow2", train_starts=(8,))
    cfg = stored_config({"config": {"actions": "step", "train_starts": [4, 8]}})
    assert SchedulerPPOConfig(**cfg).train_starts == (4, 8)
    assert stored_config({"config": {"actions": "step"}}).get("train_starts", ()) == ()
