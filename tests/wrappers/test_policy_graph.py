"""Policy graphs over the network (fleetgym.wrappers.policy_graph)."""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np
import pytest
from gymnasium import spaces
from gymnasium.utils.env_checker import check_env
from shim_envs import CounterEnv

from fleetgym.errors import UnknownProfileError
from fleetgym.wrappers import (
    FixedDelay,
    GaussianChannel,
    NetworkProfile,
    NetworkShimWrapper,
    PolicyGraph,
    PolicyGraphEnv,
    PolicyLink,
    PolicyNode,
)

N = 10_000
ACTIONS = spaces.Discrete(N)
GOALS = spaces.Box(0.0, 1e6, (), dtype=np.float64)


def _profile(up_ms: float, down_ms: float, loss: float = 0.0) -> NetworkProfile:
    return NetworkProfile("test", FixedDelay(up_ms, loss), FixedDelay(down_ms, loss))


def _echo(inputs: dict[str, Any]) -> int:
    """Acts with the tick index it last saw (so the applied actions show the obs' age)."""
    return int(inputs["env"][0]) % N


def _single(profile: Any) -> PolicyGraph:
    return PolicyGraph(
        [PolicyNode("remote", _echo, ACTIONS)],
        [PolicyLink("env", "remote", profile), PolicyLink("remote", "env", profile)],
    )


def _hierarchy(
    planner_profile: Any, period: int = 5, calls: list[int] | None = None
) -> PolicyGraph:
    def planner(inputs: dict[str, Any]) -> np.ndarray:
        if calls is not None:
            calls.append(int(inputs["env"][0]))
        return np.float64(inputs["env"][0])

    def controller(inputs: dict[str, Any]) -> int:
        return int(inputs["planner"]) % N

    return PolicyGraph(
        [
            PolicyNode("planner", planner, GOALS, period=period),
            PolicyNode("controller", controller, ACTIONS),
        ],
        [
            PolicyLink("env", "planner", planner_profile),
            PolicyLink("planner", "controller", planner_profile),
            PolicyLink("env", "controller"),
            PolicyLink("controller", "env"),
        ],
    )


@pytest.mark.parametrize("share", [0.5, 0.3])
@pytest.mark.parametrize(
    ("up_ms", "down_ms"), [(0, 0), (5, 5), (15, 0), (0, 15), (25, 25), (35, 47), (70, 5)]
)
def test_single_node_has_the_shims_timing(up_ms: float, down_ms: float, share: float) -> None:
    # One remote node over one profile both ways is the shim: the same observations reach
    # the policy and the env applies the same actions, tick for tick.
    profile = _profile(up_ms, down_ms)
    shim = NetworkShimWrapper(CounterEnv(N), profile, step_ms=20.0, uplink_share=share)
    obs, _ = shim.reset(seed=0)
    seen_shim = [int(obs[0])]
    for _ in range(40):
        obs, *_ = shim.step(_echo({"env": obs}))
        seen_shim.append(int(obs[0]))
    graph_env = PolicyGraphEnv(
        CounterEnv(N), _single(profile), "remote", step_ms=20.0, uplink_share=share
    )
    obs, _ = graph_env.reset(seed=0)
    seen_graph = [int(obs["env"][0])]
    for _ in range(40):
        obs, *_ = graph_env.step(_echo(obs))
        seen_graph.append(int(obs["env"][0]))
    assert seen_graph == seen_shim
    assert graph_env.unwrapped.applied == shim.unwrapped.applied  # type: ignore[attr-defined]


def test_perfect_links_are_the_bare_env() -> None:
    env = PolicyGraphEnv(gym.make("CartPole-v1"), _cartpole_graph("perfect"), "controller")
    bare = gym.make("CartPole-v1")
    obs, _ = env.reset(seed=3)
    bare_obs, _ = bare.reset(seed=3)
    for t in range(30):
        np.testing.assert_array_equal(obs["env"], bare_obs)
        action = t % 2
        obs, reward, terminated, truncated, info = env.step(action)
        bare_obs, bare_reward, bare_term, bare_trunc, _ = bare.step(action)
        assert (reward, terminated, truncated) == (bare_reward, bare_term, bare_trunc)
        assert info["input_age_steps"] == {"env": 0, "planner": (t + 1) % 10}  # held goal
        if terminated:
            break


def _cartpole_graph(profile: str, controller: Any = None) -> PolicyGraph:
    return PolicyGraph(
        [
            PolicyNode("planner", lambda inputs: np.float32(0.0), spaces.Box(-2, 2, ()), period=10),
            PolicyNode("controller", controller, spaces.Discrete(2)),
        ],
        [
            PolicyLink("env", "planner", profile),
            PolicyLink("planner", "controller", profile),
            PolicyLink("env", "controller"),
            PolicyLink("controller", "env"),
        ],
    )


def test_planner_acts_every_period_and_its_goal_arrives_late() -> None:
    # Planner at ticks 0, 5, 10, ...; its goal (the tick it saw) crosses a 30 ms link at
    # 20 ms ticks: sent at tick t, used by the controller from tick t + 2.
    calls: list[int] = []
    env = PolicyGraphEnv(
        CounterEnv(N), _hierarchy(_profile(30, 30), calls=calls), "controller", step_ms=20.0
    )
    obs, _ = env.reset(seed=0)
    goals = [float(obs["planner"])]
    for _ in range(20):
        obs, *_ = env.step(0)
        goals.append(float(obs["planner"]))
    # The planner's observation is 30 ms (2 ticks at s = 0.5) old, except the reset's.
    assert calls == [0, 3, 8, 13, 18]
    # Its goal from tick 5k reaches the controller at tick 5k + 2.
    expected = [0.0] * 7 + [3.0] * 5 + [8.0] * 5 + [13.0] * 4
    assert goals == expected


def test_trained_planner_steps_span_its_period() -> None:
    graph = _hierarchy("perfect", period=4)
    graph = PolicyGraph(
        [
            PolicyNode("planner", None, GOALS, period=4),
            graph.nodes["controller"],
        ],
        graph.links,
    )
    env = PolicyGraphEnv(CounterEnv(N, horizon=10), graph, "planner", step_ms=20.0)
    obs, _ = env.reset(seed=0)
    assert list(obs) == ["env"]
    steps = []
    while True:
        obs, reward, terminated, truncated, info = env.step(np.array(7.0))
        steps.append((info["graph_ticks"], reward, int(obs["env"][0])))
        if truncated:
            break
    assert steps == [(4, 4.0, 4), (4, 4.0, 8), (2, 2.0, 10)]
    assert env.unwrapped.applied == [7] * 10  # type: ignore[attr-defined]


def test_lost_goals_leave_the_start_output() -> None:
    lossy = _profile(0, 0, loss=1.0)
    env = PolicyGraphEnv(CounterEnv(N), _hierarchy(lossy), "controller", step_ms=20.0)
    obs, _ = env.reset(seed=0)
    for _ in range(12):
        assert float(obs["planner"]) == 0.0
        obs, *_ = env.step(1)


def test_same_seed_same_episode_other_seed_other_delays() -> None:
    def run(seed: int) -> list[int]:
        profile = NetworkProfile(
            "jitter", GaussianChannel(30, 15, 0.05), GaussianChannel(30, 15, 0.05)
        )
        env = PolicyGraphEnv(CounterEnv(N), _single(profile), "remote", step_ms=20.0)
        obs, _ = env.reset(seed=seed)
        for _ in range(60):
            obs, *_ = env.step(_echo(obs))
        return list(env.unwrapped.applied)  # type: ignore[attr-defined]

    assert run(1) == run(1)
    assert run(1) != run(2)


def test_run_episode_and_check_env() -> None:
    def controller(inputs: dict[str, Any]) -> int:
        theta, omega = inputs["env"][2], inputs["env"][3]
        return int(theta + 0.5 * omega > 0)

    env = PolicyGraphEnv(
        gym.make("CartPole-v1"), _cartpole_graph("wifi-normal", controller), "controller"
    )
    total, length = env.run_episode(seed=0)
    assert total == length > 30  # the pole stays up a while with a local controller
    check_env(env, skip_render_check=True)


# -- bad input --------------------------------------------------------------------------------
def _node(name: str = "a", policy: Any = _echo) -> PolicyNode:
    return PolicyNode(name, policy, ACTIONS)


@pytest.mark.parametrize(
    ("nodes", "links", "match"),
    [
        (
            [_node("a"), _node("b")],
            [
                PolicyLink("env", "a"),
                PolicyLink("a", "b"),
                PolicyLink("b", "a", "wifi-normal"),
                PolicyLink("b", "env"),
            ],
            r"cycle: (a -> b -> a|b -> a -> b)",
        ),
        ([_node("a")], [PolicyLink("env", "a"), PolicyLink("a", "ctrl")], r"unknown node 'ctrl'"),
        ([_node("a")], [PolicyLink("a", "a"), PolicyLink("a", "env")], "to itself"),
        ([_node("a")], [PolicyLink("a", "env"), PolicyLink("a", "env")], "given twice"),
        ([_node("a")], [PolicyLink("env", "a")], "exactly one link into 'env'"),
        (
            [_node("a"), _node("b")],
            [PolicyLink("a", "env"), PolicyLink("b", "env")],
            r"exactly one link into 'env'.*actual 2",
        ),
        (
            [_node("a"), _node("b")],
            [PolicyLink("a", "env"), PolicyLink("env", "b")],
            "'b' sends to no one",
        ),
        ([_node("a"), _node("a")], [PolicyLink("a", "env")], "'a' is used twice"),
    ],
)
def test_bad_graphs(nodes: list[PolicyNode], links: list[PolicyLink], match: str) -> None:
    with pytest.raises(ValueError, match=match):
        PolicyGraph(nodes, links)


def test_bad_nodes_links_and_profiles() -> None:
    with pytest.raises(
        UnknownProfileError, match=r"profile of link env -> a: .*actual 'wifi-nromal'"
    ):
        PolicyLink("env", "a", "wifi-nromal")
    with pytest.raises(ValueError, match="reserved"):
        PolicyNode("env", _echo, ACTIONS)
    with pytest.raises(TypeError, match="policy of node 'a'"):
        PolicyNode("a", 3, ACTIONS)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="period of node 'a'"):
        PolicyNode("a", _echo, ACTIONS, period=0)
    with pytest.raises(TypeError, match="nodes: expected a non-empty"):
        PolicyGraph([], [])


def test_bad_env_arguments() -> None:
    graph = _hierarchy("perfect")
    no_policy = PolicyGraph(
        [PolicyNode("planner", None, GOALS), graph.nodes["controller"]], graph.links
    )
    with pytest.raises(ValueError, match="node 'planner' has no policy"):
        PolicyGraphEnv(CounterEnv(N), no_policy, "controller", step_ms=20.0)
    with pytest.raises(ValueError, match="trained: expected one of the graph's nodes"):
        PolicyGraphEnv(CounterEnv(N), graph, "env", step_ms=20.0)
    with pytest.raises(ValueError, match="node 'controller' acts on the env"):
        PolicyGraphEnv(CounterEnv(5), graph, "controller", step_ms=20.0)
    with pytest.raises(ValueError, match="step_ms"):
        PolicyGraphEnv(CounterEnv(N), graph, "controller")
    env = PolicyGraphEnv(CounterEnv(N), graph, "controller", step_ms=20.0)
    with pytest.raises(RuntimeError, match="reset"):
        env.step(0)
    env.reset(seed=0)
    with pytest.raises(ValueError, match="action: expected an element"):
        env.step(N)


def test_reset_calls_the_policies_reset_hook() -> None:
    class Counting:
        def __init__(self) -> None:
            self.calls = 0
            self.resets = 0

        def reset(self) -> None:
            self.resets += 1
            self.calls = 0

        def __call__(self, inputs: dict[str, Any]) -> np.ndarray:
            self.calls += 1
            return np.float64(self.calls)

    planner = Counting()
    graph = _hierarchy("perfect")
    graph = PolicyGraph(
        [PolicyNode("planner", planner, GOALS), graph.nodes["controller"]], graph.links
    )
    env = PolicyGraphEnv(CounterEnv(N), graph, "controller", step_ms=20.0)
    for seed in (0, 1):
        obs, _ = env.reset(seed=seed)
        assert float(obs["planner"]) == 1.0  # the first call of this episode
        obs, *_ = env.step(0)
        assert float(obs["planner"]) == 2.0
    assert planner.resets == 2
