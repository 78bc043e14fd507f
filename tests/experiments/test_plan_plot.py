"""The prediction figure is written (a PNG), grid lines and AcceRL markers alike."""

from __future__ import annotations

from fleetgym.experiments.plan.plot import plot_predictions
from fleetgym.experiments.plan.predict import accerl_points, grid_points

CAL = {
    "rollout_steps": 2,
    "step_s": [1e-4],
    "policy_s": 0.0,
    "update_fixed_s": 1e-3,
    "update_per_sample_s": 1e-5,
    "server_batch_sizes": [1, 64],
    "server_forward_s": [1e-4, 2e-4],
    "weight_bytes": 1000,
    "obs_bytes": 16,
    "step_bytes": 40,
}


def test_plot_writes_a_png(tmp_path):
    cals = {"a": CAL, "b": CAL}
    points = grid_points(cals, actors=(2, 4), updates=3) + accerl_points(cals, updates=3)
    path = plot_predictions(points, tmp_path / "plan.png")
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
