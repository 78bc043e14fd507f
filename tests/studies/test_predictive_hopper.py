"""Tests of studies/predictive_hopper.py's parts that need no trained policy: the
baselines' input layout, the refusal of mismatched training arguments, the plot."""

from __future__ import annotations

import json

import numpy as np
import pytest


@pytest.fixture(scope="module")
def example(load_study):
    return load_study("predictive_hopper")


@pytest.mark.parametrize(("compensation", "frames"), [("augmented", 1), ("history", 6)])
def test_a_baselines_layout_is_fixed_by_its_training_delay(example, compensation, frames):
    """Trained under rtt-9: k frames of 11 + 2 age features, and the 10 actions sent since
    the observation; the same layout behind every network it is evaluated under."""
    want = frames * (11 + 2) + 10 * 3
    for condition in ("clean", "rtt-5", "rtt-9-jitter", "wifi-normal"):
        env = example._baseline_env("rtt-9", compensation, condition)
        obs, _ = env.reset(seed=0)
        assert env.observation_space.shape == (want,) and obs.shape == (want,)
        obs, *_ = env.step(np.zeros(3, dtype=np.float32))
        assert np.all(np.isfinite(obs))
        env.close()


@pytest.mark.parametrize(
    ("under", "compensation"), [("rtt-5", None), (None, "augmented"), ("wifi-normal", "history")]
)
def test_mismatched_training_arguments_are_refused(example, under, compensation):
    with pytest.raises(SystemExit, match="train"):
        example.train(0, 10, under, compensation)


def test_the_plot_draws_evaluate_and_baselines_results(example, tmp_path):
    rows = [
        {"seed": s, "condition": c, "input": i, "return": r, "velocity": 0.0}
        for s, scale in ((0, 1000.0), (1, 200.0))
        for c, i, r in (
            ("clean", "delayed", 1.0),
            ("rtt-3", "delayed", 0.1),
            ("rtt-5", "delayed", 0.05),
            ("rtt-3-jitter", "ceiling-ahead", 0.5),
        )
        for r in [r * scale]
    ]
    results = tmp_path / "evaluate.json"
    results.write_text(json.dumps(rows))
    baselines = tmp_path / "baselines.json"
    baseline = {"seed": 0, "input": "augmented (trained under rtt-5)", "velocity": 0.0}
    baselines.write_text(json.dumps([{**baseline, "condition": "rtt-5", "return": 900.0}]))
    out = tmp_path / "sweep.png"
    example.plot([results, baselines], out)
    assert out.stat().st_size > 0
