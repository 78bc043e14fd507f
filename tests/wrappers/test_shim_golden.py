"""The scalar shim's outputs for fixed seeds, pinned as digests.

Recorded on the code before the per-step path was trimmed for speed: any later change to
``NetworkShimWrapper``, its links or the ``fleetgym/NetShim-v0`` stack must leave every
observation, reward, end flag and ``info`` value (and their types) bit-identical. A digest
that changes means the shim's outputs changed: find out why before updating it.
"""

from __future__ import annotations

import hashlib
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
from gymnasium import spaces
from shim_envs import SpacesEnv

import fleetgym  # noqa: F401  (registers the IDs)
from fleetgym.wrappers import NetworkShimWrapper

STEPS = 400


def _feed(h: Any, x: Any) -> None:
    """Hash ``x`` exactly: type names, array bytes, float bit patterns."""
    h.update(type(x).__name__.encode())
    if isinstance(x, np.ndarray):
        h.update(f"{x.dtype.str}{x.shape}".encode())
        h.update(np.ascontiguousarray(x).tobytes())
    elif isinstance(x, dict):
        for k in sorted(x):
            h.update(repr(k).encode())
            _feed(h, x[k])
    elif isinstance(x, (tuple, list)):
        h.update(str(len(x)).encode())
        for v in x:
            _feed(h, v)
    elif isinstance(x, (float, np.floating)):
        h.update(float(x).hex().encode())
    elif isinstance(x, (bool, np.bool_, int, np.integer, str)) or x is None:
        h.update(repr(x.item() if isinstance(x, np.generic) else x).encode())
    else:
        raise TypeError(type(x))


def _digest(env: gym.Env, seed: int = 7) -> str:
    """Digest of ``STEPS`` steps of random actions (episodes reset without a seed as they
    end, so the network's streams continue)."""
    h = hashlib.sha256()
    env.action_space.seed(seed)
    obs, info = env.reset(seed=seed)
    _feed(h, (obs, info))
    for _ in range(STEPS):
        obs, reward, terminated, truncated, info = env.step(env.action_space.sample())
        _feed(h, (obs, reward, terminated, truncated, info))
        if terminated or truncated:
            obs, info = env.reset()
            _feed(h, (obs, info))
    return h.hexdigest()[:24]


#: (env id, profile, delivery, timing, info level) -> digest.
GOLDEN = {
    ("CartPole-v1", "wifi-normal", "fifo", "loop", "train"): "9fe4c5975166bf991213bd7e",
    ("CartPole-v1", "wifi-normal", "fifo", "loop", "full"): "41f6ed62c4fd9707321b0f84",
    ("CartPole-v1", "wifi-degraded", "fifo", "loop", "train"): "441b648403e35a31b4618270",
    ("CartPole-v1", "wifi-degraded", "fifo", "loop", "full"): "84dac8b3a225578fbd8b1bda",
    ("CartPole-v1", "wifi-normal", "latest", "loop", "full"): "94a629892de803cf17de73ea",
    (
        "CartPole-v1",
        "wifi-degraded",
        "latest",
        "per-direction",
        "train",
    ): "936957e70d1f014f115b51ca",
    ("CartPole-v1", "wifi-degraded", "latest", "loop", "full"): "0ab4d991526a4fbda302f59e",
    ("CartPole-v1", "perfect", "fifo", "loop", "train"): "343af6326662cd6c2ce75472",
    ("CartPole-v1", "perfect", "fifo", "loop", "full"): "ba96cc49b138e7ba57ed62f2",
    (
        "CartPole-v1",
        ("wifi-normal", "wifi-degraded"),
        "fifo",
        "loop",
        "train",
    ): "ce3c457d2f8a7f51f21a4533",
    ("Pendulum-v1", "wifi-degraded", "fifo", "loop", "full"): "6a2d14bc2fe9b8bae9106a7d",
    ("Pendulum-v1", "wifi-normal", "latest", "loop", "train"): "cdc0c57b6c7d19514960df57",
}


@pytest.mark.parametrize("case", list(GOLDEN), ids=lambda c: "-".join(map(str, c)))
def test_shim_outputs_are_pinned(case):
    env_id, profile, delivery, timing, info = case
    kwargs = {"delivery": delivery, "timing": timing, "info": info}
    profile = list(profile) if isinstance(profile, tuple) else profile
    by_hand = NetworkShimWrapper(gym.make(env_id), profile, **kwargs)
    assert _digest(by_hand) == GOLDEN[case]
    # The registered ID: the same outputs (its outer layers only pass them through).
    made = gym.make("fleetgym/NetShim-v0", env_id=env_id, profile=profile, **kwargs)
    assert _digest(made) == GOLDEN[case]


DICT_SPACES = (
    spaces.Dict({"pos": spaces.Box(-1, 1, (2,)), "mode": spaces.Discrete(4)}),
    spaces.Dict({"move": spaces.Discrete(2), "force": spaces.Box(0, 1, (1,))}),
)

#: name -> (env id or "dict-spaces", profile, wrapper keywords, digest): the other paths
#: (copied observations, small blocks, other phases, zero-delay directions, dict spaces).
GOLDEN_MORE = {
    "copy-fifo": (
        "CartPole-v1",
        "wifi-degraded",
        {"copy_observations": True},
        "441b648403e35a31b4618270",
    ),
    "copy-latest-full": (
        "CartPole-v1",
        "wifi-normal",
        {"copy_observations": True, "delivery": "latest", "info": "full"},
        "94a629892de803cf17de73ea",
    ),
    "block-8-train": (
        "CartPole-v1",
        "wifi-degraded",
        {"block_size": 8},
        "563e708f9f2e35b1a7c9cd25",
    ),
    "block-3-full": (
        "CartPole-v1",
        "wifi-degraded",
        {"block_size": 3, "info": "full"},
        "02d46768ab0d54c205fa1d65",
    ),
    "share-0.25-full": (
        "CartPole-v1",
        "wifi-normal",
        {"uplink_share": 0.25, "info": "full"},
        "cf59ab3470e6f1eeccb34829",
    ),
    "per-direction-fifo": (
        "CartPole-v1",
        "wifi-degraded",
        {"timing": "per-direction"},
        "75211ad2864da7c27f150707",
    ),
    "ethernet-full": ("CartPole-v1", "ethernet", {"info": "full"}, "d73d7ea97bff64a97d92e746"),
    "uplink-only-full": (
        "CartPole-v1",
        "wifi-degraded-uplink",
        {"info": "full"},
        "2aeed9edc793493f7beb2efc",
    ),
    "step-5ms": (
        "CartPole-v1",
        "wifi-degraded",
        {"step_ms": 5.0, "info": "full"},
        "e0a91dc80d365eed2d60b089",
    ),
    "dict-spaces-full": (
        "dict-spaces",
        "wifi-degraded",
        {"info": "full"},
        "7958eefff12865bbf188fd58",
    ),
    "dict-spaces-train": ("dict-spaces", "wifi-normal", {}, "d6e3dc0e2173e0514a207d10"),
}


@pytest.mark.parametrize("name", list(GOLDEN_MORE))
def test_more_shim_outputs_are_pinned(name):
    env_id, profile, kwargs, digest = GOLDEN_MORE[name]
    if env_id == "dict-spaces":
        env = NetworkShimWrapper(SpacesEnv(*DICT_SPACES), profile, step_ms=20.0, **kwargs)
    else:
        env = NetworkShimWrapper(gym.make(env_id), profile, **kwargs)
    assert _digest(env) == digest
