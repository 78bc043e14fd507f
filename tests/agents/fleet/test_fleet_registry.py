"""The fleet backend registry: a toy backend registered from outside and built by make_fleet."""

from __future__ import annotations

import pytest

from fleetgym.agents.backends import BACKENDS, RENAMED_BACKENDS, check_backend
from fleetgym.agents.fleet import (
    FleetBackend,
    InProcessFleet,
    backend_names,
    get_backend,
    make_fleet,
    register_backend,
    unregister_backend,
)
from fleetgym.agents.workloads import get_workload

WORKLOAD = "CartPole-v1"


class CountingFleet(InProcessFleet):
    """A toy backend: the in-process fleet, counting its rounds."""

    def __init__(self, workload, max_actors=32, seed=0, label="toy", **opts):
        super().__init__(workload, max_actors=max_actors, seed=seed, **opts)
        self.label = label
        self.rounds = 0

    def run_round(self, *args, **kwargs):
        self.rounds += 1
        return super().run_round(*args, **kwargs)


@pytest.fixture
def toy():
    """``"toy"`` registered for the test, removed afterwards."""
    backend = register_backend("toy", local=CountingFleet)
    yield backend
    unregister_backend("toy")


def test_a_registered_backend_is_built_by_make_fleet(toy):
    assert isinstance(toy, FleetBackend) and get_backend("toy") is toy
    assert backend_names() == (*BACKENDS, "toy")
    weights = get_workload(WORKLOAD).make_policy().get_weights()
    with make_fleet(WORKLOAD, backend="toy", max_actors=2, seed=5, label="mine") as fleet:
        assert type(fleet) is CountingFleet and fleet.label == "mine"
        assert (fleet.max_actors, fleet.seed) == (2, 5)
        result = fleet.run_round(weights, 2, 8)
        assert result.complete and fleet.rounds == 1
    # No inference-server variant registered: refused, naming what the backend builds.
    with pytest.raises(ValueError, match=r"inference: expected one of \('local',\)"):
        make_fleet(WORKLOAD, backend="toy", inference="server")


def test_import_paths_and_replacing():
    register_backend("lazy", "fleetgym.agents.fleet.inprocess:InProcessFleet")
    try:
        with make_fleet(WORKLOAD, backend="lazy", max_actors=1) as fleet:
            assert type(fleet) is InProcessFleet
        with pytest.raises(ValueError, match=r"not registered yet \(or replace=True\)"):
            register_backend("lazy", CountingFleet)
        register_backend("lazy", CountingFleet, replace=True)
        with make_fleet(WORKLOAD, backend="lazy", max_actors=1) as fleet:
            assert type(fleet) is CountingFleet
    finally:
        unregister_backend("lazy")
    assert "lazy" not in backend_names()


def test_bad_registrations_and_names_are_refused():
    with pytest.raises(ValueError, match=r"actual 'thread' \(renamed 'inprocess' in 2.0\)"):
        register_backend("thread", CountingFleet)
    with pytest.raises(ValueError, match="name: expected lower case"):
        register_backend("My Fleet", CountingFleet)
    with pytest.raises(TypeError, match="local: expected a fleet class"):
        register_backend("toy2", 42)
    with pytest.raises(ValueError, match="local: expected an import path"):
        register_backend("toy2", "not a path")
    with pytest.raises(TypeError, match="replace: expected a bool"):
        register_backend("toy2", CountingFleet, replace="yes")
    assert "toy2" not in backend_names()
    with pytest.raises(ValueError, match=r"backend: expected one of \('inprocess', 'process', "):
        get_backend("nope")
    with pytest.raises(TypeError, match="backend: expected one of"):
        get_backend(3)
    with pytest.raises(ValueError, match="backend: expected one of"):
        unregister_backend("nope")


@pytest.mark.parametrize(("old", "new"), sorted(RENAMED_BACKENDS.items()))
def test_1x_backend_names_are_refused_naming_the_new_one(old, new):
    message = rf"actual {old!r} \(renamed {new!r} in 2.0\)"
    with pytest.raises(ValueError, match=message):
        make_fleet(WORKLOAD, backend=old)
    with pytest.raises(ValueError, match=message):
        check_backend(old)
    assert check_backend(new) == new
    with pytest.raises(TypeError, match="backend: expected one of"):
        check_backend(None)
