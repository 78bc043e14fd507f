"""The learned scheduler's PPO configuration."""

from __future__ import annotations

import pytest

from fleetgym.experiments.schedule import config


def test_config_is_the_papers_architecture():
    cfg = config.SchedulerPPOConfig()
    kwargs = cfg.ppo_kwargs()
    # The paper's Adam at 0.005; ours at 0.001 with a KL limit per update (see config).
    assert kwargs["learning_rate"] == 0.001 and kwargs["target_kl"] == 0.02
    assert (cfg.actions, cfg.gamma, cfg.gae_lambda, cfg.keep_prior) == ("step", 1.0, 1.0, 0.9)
    # Each training episode paired with Fixed(8) on one of 8 workload seeds.
    assert cfg.paired_seeds == 8
    assert kwargs["policy_kwargs"]["net_arch"] == {"pi": [64, 64], "vf": [64, 64]}
    import torch.nn as nn

    assert kwargs["policy_kwargs"]["activation_fn"] is nn.Tanh
    # 64 steps per update: 100 episodes of tens of rounds give dozens of updates.
    assert cfg.rollout_size == 64


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"n_steps": 0}, "n_steps: expected a positive int"),
        ({"batch_size": 128}, "batch_size: expected at most"),
        ({"learning_rate": -1.0}, "learning_rate: expected a positive"),
        ({"gamma": 1.5}, r"gamma: expected a number in \(0, 1\]"),
        ({"gae_lambda": 2.0}, "gae_lambda"),
        ({"ent_coef": -0.1}, "ent_coef"),
        ({"n_envs": True}, "n_envs: expected a positive int"),
        ({"hidden": ()}, "hidden: expected positive layer sizes"),
        ({"paired_seeds": -1}, "paired_seeds: expected an int >= 0"),
        ({"paired_seeds": 2.0}, "paired_seeds: expected an int >= 0"),
    ],
)
def test_config_rejects_bad_values(kwargs, match):
    with pytest.raises(ValueError, match=match):
        config.SchedulerPPOConfig(**kwargs)


def test_a_checkpoint_from_before_a_setting_resumes_the_way_it_was_trained():
    cfg = config.stored_config({"config": {"learning_rate": 0.005, "hidden": [64, 64]}})
    assert cfg["actions"] == "discrete" and cfg["paired_seeds"] == 0
    assert config.SchedulerPPOConfig(**cfg).hidden == (64, 64)
