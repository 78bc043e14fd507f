"""Calibration files: the shipped one, malformed ones, and the simulation parts they make."""

from __future__ import annotations

import json

import pytest

from fleetgym.experiments.plan.calibration import (
    REQUIRED_KEYS,
    actor_times,
    learner_times,
    links,
    load_calibrations,
    server_times,
)


def test_the_shipped_calibration_holds_the_three_workloads():
    data = load_calibrations()
    assert set(data["workloads"]) == {"CartPole-v1", "Hopper-v5", "QbertNoFrameskip-v4"}
    for cal in data["workloads"].values():
        assert set(REQUIRED_KEYS) <= set(cal)
        assert actor_times(cal).mean_step_s > 0
        assert learner_times(cal, n_trainers=8).n_trainers == 8
        server = server_times(cal, n_servers=4)
        assert server.n_servers == 4 and server.forward(256) > server.forward(1) > 0
        assert links(cal, latency_s=1e-4).weight_bytes == cal["weight_bytes"]


@pytest.mark.parametrize(
    "text, match",
    [
        ("not json", "expected JSON"),
        ("[1, 2]", "expected an object with 'workloads', actual list"),
        ('{"workloads": {}}', "expected an object with 'workloads', actual dict"),
        ('{"workloads": {"x": {"workload": "x"}}}', "workload 'x': expected keys"),
    ],
)
def test_malformed_files_are_named(tmp_path, text, match):
    path = tmp_path / "cal.json"
    path.write_text(text)
    with pytest.raises(ValueError, match=match) as error:
        load_calibrations(path)
    assert str(path) in str(error.value)


def test_a_missing_file_is_file_not_found(tmp_path):
    with pytest.raises(FileNotFoundError):
        load_calibrations(tmp_path / "none.json")
    assert json.loads(json.dumps(load_calibrations()))  # plain JSON values
