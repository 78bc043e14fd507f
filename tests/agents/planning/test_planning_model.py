"""The simulation's parts refuse impossible shapes with "expected ..., actual ..." errors."""

from __future__ import annotations

import math

import numpy as np
import pytest

from fleetgym.agents.planning import (
    ActorTimes,
    LearnerTimes,
    NetworkLinks,
    PipelineShape,
    ServerTimes,
)


@pytest.mark.parametrize(
    "build, error, match",
    [
        (
            lambda: PipelineShape(n_actors=0, steps_per_actor=1),
            ValueError,
            r"n_actors: expected an int in \[1, 100000\], actual 0",
        ),
        (
            lambda: PipelineShape(n_actors=1, steps_per_actor=0),
            ValueError,
            r"steps_per_actor: expected an int in \[1, ",
        ),
        (
            lambda: PipelineShape(n_actors=2.5, steps_per_actor=1),
            TypeError,
            "n_actors: expected an int, actual float",
        ),
        (
            lambda: PipelineShape(1, 1, max_policy_lag=-1),
            ValueError,
            r"max_policy_lag: expected an int in \[0, ",
        ),
        (
            lambda: PipelineShape(1, 1, batch_trajectories=0),
            ValueError,
            r"batch_trajectories: expected an int in \[1, ",
        ),
        (lambda: PipelineShape(1, 1, inference="gpu"), ValueError, "inference: expected one of"),
        (lambda: PipelineShape(1, 1, cpu_slots=0), ValueError, r"cpu_slots: expected an int in"),
        (
            lambda: PipelineShape(1, 1, quantum_s=0.0),
            ValueError,
            "quantum_s: expected a finite number > 0",
        ),
        (
            lambda: PipelineShape(1, 1, switch_s=-1e-6),
            ValueError,
            "switch_s: expected a finite number >= 0",
        ),
        (
            lambda: ActorTimes(step_s=()),
            ValueError,
            "step_s: expected at least one time, actual an empty",
        ),
        (
            lambda: ActorTimes(step_s=(0.001, -0.001)),
            ValueError,
            r"step_s\[1\]: expected a finite number >= 0, actual -0.001",
        ),
        (
            lambda: ActorTimes(step_s=(math.nan,)),
            ValueError,
            r"step_s\[0\]: expected a finite number",
        ),
        (lambda: ActorTimes(step_s=0.001), TypeError, "step_s: expected a sequence of seconds"),
        (
            lambda: ActorTimes(step_s=(0.001,), delay_s=-1.0),
            ValueError,
            "delay_s: expected a finite number >= 0",
        ),
        (
            lambda: ActorTimes(step_s=(0.001,), policy_s=math.inf),
            ValueError,
            "policy_s: expected a finite",
        ),
        (
            lambda: ActorTimes(step_s=(0.001,), delays_s=(-1.0,)),
            ValueError,
            r"delays_s\[0\]: expected",
        ),
        (
            lambda: ServerTimes(batch_sizes=(1, 8), forward_s=(0.001,)),
            ValueError,
            r"forward_s: expected one time per batch size \(2\), actual 1",
        ),
        (
            lambda: ServerTimes(batch_sizes=(8, 1), forward_s=(0.001, 0.002)),
            ValueError,
            r"batch_sizes: expected increasing sizes, actual \(8, 1\)",
        ),
        (
            lambda: ServerTimes(batch_sizes=(0,), forward_s=(0.001,)),
            ValueError,
            r"batch_sizes\[0\]: expected an int >= 1, actual 0",
        ),
        (
            lambda: ServerTimes(batch_sizes=(1,), forward_s=(0.001,), max_batch=0),
            ValueError,
            "max_batch: expected an int >= 1",
        ),
        (
            lambda: ServerTimes(batch_sizes=(1,), forward_s=(0.001,), max_wait_s=-0.1),
            ValueError,
            "max_wait_s: expected a finite number >= 0",
        ),
        (
            lambda: ServerTimes(batch_sizes=(1,), forward_s=(0.001,), n_servers=0),
            ValueError,
            "n_servers: expected an int >= 1",
        ),
        (
            lambda: LearnerTimes(fixed_s=-0.1, per_sample_s=0.0),
            ValueError,
            "fixed_s: expected a finite number >= 0, actual -0.1",
        ),
        (
            lambda: LearnerTimes(0.0, 0.0, n_trainers=0),
            ValueError,
            "n_trainers: expected an int >= 1",
        ),
        (
            lambda: LearnerTimes(0.0, 0.0, speedup=0.0),
            ValueError,
            "speedup: expected a finite number > 0",
        ),
        (
            lambda: NetworkLinks(latency_s=-1e-3),
            ValueError,
            "latency_s: expected a finite number >= 0",
        ),
        (
            lambda: NetworkLinks(actor_bandwidth_Bps=0.0),
            ValueError,
            "actor_bandwidth_Bps: expected a number \\(not NaN\\) > 0",
        ),
        (
            lambda: NetworkLinks(step_bytes=-1.0),
            ValueError,
            "step_bytes: expected a finite number >= 0",
        ),
        (
            lambda: NetworkLinks(actors_per_node=0),
            ValueError,
            "actors_per_node: expected an int >= 1",
        ),
    ],
)
def test_impossible_shapes_are_refused(build, error, match):
    with pytest.raises(error, match=match):
        build()


def test_capacity_and_defaults():
    shape = PipelineShape(n_actors=8, steps_per_actor=128, max_policy_lag=4)
    assert shape.batch == 8 and shape.capacity == 40 and not shape.synchronous
    assert PipelineShape(3, 1).synchronous and PipelineShape(3, 1).capacity == 3
    assert PipelineShape(3, 1, batch_trajectories=6, max_policy_lag=1).capacity == 12


def test_server_forward_interpolates_and_extrapolates():
    server = ServerTimes(batch_sizes=(1, 3, 5), forward_s=(1.0, 2.0, 2.0), speedup=2.0)
    assert server.forward(2) == pytest.approx(0.75)
    assert server.forward(9) == pytest.approx(1.0)  # flat past the last slope
    assert ServerTimes(batch_sizes=(4,), forward_s=(0.5,)).forward(100) == 0.5


def test_actor_delays_are_log_normal_or_given():
    given = ActorTimes(step_s=(0.0,), delays_s=(0.1, 0.2, 0.3))
    assert given.actor_delays(2, np.random.default_rng(0)).tolist() == [0.1, 0.2]
    drawn = ActorTimes(step_s=(0.0,), delay_s=0.01, delay_sigma=1.0)
    delays = drawn.actor_delays(20_000, np.random.default_rng(0))
    # The median of a log-normal is its scale; 20,000 draws put it within 3 %.
    assert np.median(delays) == pytest.approx(0.01, rel=0.03)
    assert ActorTimes(step_s=(0.0,)).actor_delays(3, np.random.default_rng(0)).tolist() == [0.0] * 3


def test_links_transfer():
    links = NetworkLinks(latency_s=0.001)
    assert links.transfer_s(1e6, 1e9) == pytest.approx(0.002)
    assert NetworkLinks().transfer_s(1e9, math.inf) == 0.0
