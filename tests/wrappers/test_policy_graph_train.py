"""Training one node of a policy graph with PPO while another node stays frozen."""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np
import pytest
from gymnasium import spaces

from fleetgym.wrappers import PolicyGraph, PolicyGraphEnv, PolicyLink, PolicyNode

pytest.importorskip("stable_baselines3", reason="needs the [sb3] extra (stable-baselines3)")
torch = pytest.importorskip("torch", reason="needs torch (the [sb3] extra)")

GOALS = spaces.Box(-2.4, 2.4, (1,), dtype=np.float32)


class FrozenPlanner:
    """A planner network trained elsewhere, frozen: observation -> goal position."""

    def __init__(self) -> None:
        torch.manual_seed(0)
        self.net = torch.nn.Sequential(
            torch.nn.Linear(4, 8), torch.nn.Tanh(), torch.nn.Linear(8, 1)
        )
        self.net.requires_grad_(False)
        self.calls = 0

    def __call__(self, inputs: dict[str, Any]) -> np.ndarray:
        self.calls += 1
        obs = torch.as_tensor(np.asarray(inputs["env"], dtype=np.float32))
        return (2.0 * torch.tanh(self.net(obs))).numpy().astype(np.float32)


def _state(module: Any) -> dict[str, Any]:
    return {k: v.detach().clone() for k, v in module.state_dict().items()}


def test_ppo_trains_the_local_node_and_leaves_the_frozen_planner_unchanged() -> None:
    from stable_baselines3 import PPO

    planner = FrozenPlanner()
    graph = PolicyGraph(
        [
            PolicyNode("planner", planner, GOALS, period=5),
            PolicyNode("controller", None, spaces.Discrete(2)),
        ],
        [
            PolicyLink("env", "planner", "wifi-normal"),
            PolicyLink("planner", "controller", "wifi-normal"),
            PolicyLink("env", "controller", "perfect"),
            PolicyLink("controller", "env", "perfect"),
        ],
    )
    env = gym.wrappers.FlattenObservation(
        PolicyGraphEnv(gym.make("CartPole-v1"), graph, trained="controller")
    )
    assert env.observation_space.shape == (5,)  # the env's state, then the planner's goal
    model = PPO("MlpPolicy", env, n_steps=128, batch_size=64, n_epochs=2, seed=0, device="cpu")
    planner_before = _state(planner.net)
    controller_before = _state(model.policy)

    model.learn(total_timesteps=256)

    assert model.num_timesteps == 256
    # The frozen node ran (every 5 ticks) and its network is bit for bit what it was.
    assert planner.calls >= 256 // 5
    for name, value in _state(planner.net).items():
        assert torch.equal(value, planner_before[name]), name
    # The trained node's parameters moved.
    after = _state(model.policy)
    changed = [k for k in after if not torch.equal(after[k], controller_before[k])]
    assert changed, "PPO's update left the controller unchanged"
    # The planner's goals crossed the link into the controller's observations: past its
    # start output (0) and the rollout's first ticks (answers to observations of the
    # rollout before), each goal is the frozen network's output for one of the rollout's
    # observations (the link delays it, the network is the same).
    obs = np.asarray(model.rollout_buffer.observations, dtype=np.float32).reshape(-1, 5)
    produced = {planner({"env": o[:4]}).tobytes() for o in obs}
    late = [o[4:].tobytes() for o in obs[20:] if o[4] != 0.0]
    assert len(late) > 50
    assert all(goal in produced for goal in late)
    env.close()
