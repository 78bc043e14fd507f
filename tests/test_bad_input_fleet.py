"""Bad-input audit of the fleet (``make_fleet``, ``run_round`` on each backend) and the learner.

Weights enter a round through ``FleetBase.run_round``, the one entry point of every
backend: wrong types, object arrays, NaN, missing keys and wrong shapes must all be refused
there, before any actor sees them. Learner hyperparameters are checked up front, and an
update that diverges raises instead of leaving non-finite parameters to be saved.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fleetgym.agents.fleet import make_fleet
from fleetgym.agents.fleet.base import FleetBase
from fleetgym.errors import FleetgymError

torch = pytest.importorskip("torch")

FAST = settings(max_examples=20, deadline=None, suppress_health_check=list(HealthCheck))

NOT_NUMBERS = st.sampled_from([None, "1", "abc", [1], {}, 1.5, True, False, object(), math.nan])
BAD_SIZES = st.one_of(
    st.sampled_from([0, -1, 10**12, 10**30, 2**63, 1.5, math.nan, "4", True, None]),
    st.integers(max_value=0),
    st.integers(min_value=10**9),
)


def expect_clean_error(call: Callable[[], Any], argument: str | None = None) -> BaseException:
    """Run ``call``: it must raise a clean error (naming ``argument`` when given)."""
    try:
        call()
    except (FleetgymError, TypeError, ValueError) as error:
        message = str(error)
        assert len(message) < 2000, f"unbounded message ({len(message)} characters)"
        assert "could not convert" not in message, message
        if argument is not None:
            assert argument in message, f"{argument!r} not named in {message!r}"
        return error
    raise AssertionError(f"accepted a bad value for {argument}")


@pytest.fixture(scope="module")
def good_weights() -> dict[str, np.ndarray]:
    from fleetgym.agents.workloads import get_workload

    return get_workload("CartPole-v1").make_policy().get_weights()


def bad_weights(good: dict[str, np.ndarray]) -> st.SearchStrategy[Any]:
    key = sorted(good)[0]

    def replaced(value: Any) -> dict[str, Any]:
        return {**good, key: value}

    return st.one_of(
        st.sampled_from([None, [], "weights", 1.0, {1: np.zeros(2)}]),
        st.builds(
            replaced,
            st.sampled_from(
                [
                    np.full(good[key].shape, math.nan, dtype=np.float32),
                    np.full(good[key].shape, math.inf, dtype=np.float32),
                    good[key].astype(object),
                    np.zeros((3, 3), dtype=np.float32),
                    good[key].tolist(),
                    np.array(["a"] * good[key].size).reshape(good[key].shape),
                    np.zeros(good[key].shape, dtype=np.complex64),
                ]
            ),
        ),
        st.just({k: v for k, v in good.items() if k != key}),
        st.just({**good, "extra": np.zeros(1, dtype=np.float32)}),
    )


@pytest.fixture(scope="module", params=["inprocess", "process"])
def fleet(request: pytest.FixtureRequest) -> Iterator[FleetBase]:
    f = make_fleet("CartPole-v1", backend=request.param, max_actors=2, seed=0)
    try:
        yield f
    finally:
        f.close()


@pytest.mark.timeout(240)
def test_run_round_refuses_bad_weights(fleet: FleetBase, good_weights: Any) -> None:
    @FAST
    @given(weights=bad_weights(good_weights))
    def check(weights: Any) -> None:
        expect_clean_error(lambda: fleet.run_round(weights, 1, 4), "weights")

    check()
    # the fleet still works afterwards, and a good round is complete
    result = fleet.run_round(good_weights, 2, 4)
    assert result.complete and len(result.trajectories) == 2


@pytest.mark.timeout(240)
def test_run_round_refuses_bad_sizes(fleet: FleetBase, good_weights: Any) -> None:
    @FAST
    @given(
        name=st.sampled_from(["num_actors", "steps_per_actor", "policy_version"]),
        value=BAD_SIZES,
    )
    def check(name: str, value: Any) -> None:
        if name == "policy_version" and isinstance(value, int) and value >= 0:
            return  # any non-negative version is fine
        args = {"num_actors": 1, "steps_per_actor": 4, "policy_version": 0, name: value}
        expect_clean_error(
            lambda: fleet.run_round(
                good_weights,
                args["num_actors"],
                args["steps_per_actor"],
                policy_version=args["policy_version"],
            ),
            name,
        )

    check()


@FAST
@given(
    name=st.sampled_from(["max_actors", "seed", "backend", "workload", "inference"]),
    value=st.one_of(BAD_SIZES, NOT_NUMBERS, st.sampled_from(["nope", ""])),
)
def test_make_fleet_arguments(name: str, value: Any) -> None:
    if name == "seed" and isinstance(value, int) and not isinstance(value, bool) and value >= 0:
        return
    kwargs: dict[str, Any] = {"workload": "CartPole-v1", "backend": "inprocess", name: value}
    expect_clean_error(lambda: make_fleet(**kwargs).close(), name)


# -- learner -----------------------------------------------------------------------------

LEARNER_BAD = {
    "lr": st.one_of(
        NOT_NUMBERS.filter(lambda v: v != 1.5), st.sampled_from([math.inf, -1.0, 0.0, -math.inf])
    ),
    "ent_coef": st.sampled_from([math.inf, math.nan, -math.inf, "0.1", None]),
    "vf_coef": st.sampled_from([math.inf, math.nan, "0.5", None]),
    "gamma": st.sampled_from([2.0, -0.1, math.nan, "0.99"]),
    "gae_lambda": st.sampled_from([2.0, math.nan, -1.0]),
    "clip_coef": st.sampled_from([math.nan, -0.2, math.inf]),
    "max_grad_norm": st.sampled_from([math.nan, -1.0]),
    "epochs": BAD_SIZES,
    "minibatch_size": BAD_SIZES,
    "rollout_steps": BAD_SIZES,
    "hidden_sizes": st.sampled_from([(), (0,), (10**12,), (-4,), "64", (64.5,), None, (True,)]),
    "log_std_init": st.sampled_from([math.nan, math.inf, -math.inf, "0"]),
}


@FAST
@given(data=st.data(), name=st.sampled_from(sorted(LEARNER_BAD)))
def test_learner_hyperparameters(data: Any, name: str) -> None:
    from fleetgym.agents.learners.ppo import PPOLearner

    value = data.draw(LEARNER_BAD[name])
    workload = "Pendulum-v1" if name == "log_std_init" else "CartPole-v1"
    expect_clean_error(lambda: PPOLearner(workload, **{name: value}), name)


@FAST
@given(seed=st.one_of(NOT_NUMBERS.filter(lambda v: v is not None), st.just(-1)))
def test_learner_seed(seed: Any) -> None:
    from fleetgym.agents.learners.ppo import PPOLearner

    expect_clean_error(lambda: PPOLearner("CartPole-v1", seed=seed), "seed")


def test_learner_update_inputs() -> None:
    from fleetgym.agents.learners.ppo import PPOLearner

    learner = PPOLearner("CartPole-v1", seed=0)
    for bad in ([], None, "traj", [1, 2], iter([])):
        expect_clean_error(lambda b=bad: learner.update(b), "trajectories")


@pytest.mark.timeout(240)
def test_a_diverging_update_raises_and_keeps_finite_parameters() -> None:
    """An update that makes a parameter non-finite raises; nothing non-finite stays."""
    from fleetgym.agents.fleet.inprocess import InProcessFleet
    from fleetgym.agents.learners.ppo import PPOLearner

    learner = PPOLearner("CartPole-v1", seed=0, lr=1e30, max_grad_norm=1e30)
    with InProcessFleet("CartPole-v1", max_actors=1, seed=0) as fleet:
        round_ = fleet.run_round(learner.policy.get_weights(), 1, 64)
    before = {k: v.clone() for k, v in learner.policy.state_dict().items()}
    try:
        for _ in range(5):
            learner.update(round_.trajectories)
    except ValueError as error:
        assert "finite" in str(error)
    for value in learner.policy.state_dict().values():
        if value.is_floating_point():
            assert bool(torch.isfinite(value).all())
    assert before.keys() == learner.policy.state_dict().keys()


class _BrokenActor:
    """An actor whose every rollout fails (as a worker that cannot load its weights)."""

    def rollout(self, weights: Any, steps: int, policy_version: int) -> Any:
        raise RuntimeError("cannot run")


def _broken(workload: Any, actor_id: int, seed: int, incarnation: int) -> _BrokenActor:
    return _BrokenActor()


@pytest.mark.timeout(120)
@pytest.mark.parametrize("on_incomplete", ["partial", "raise"])
def test_a_round_without_trajectories_is_never_silently_empty(
    good_weights: Any, on_incomplete: str
) -> None:
    from fleetgym.agents.fleet.inprocess import InProcessFleet
    from fleetgym.errors import FleetError

    with InProcessFleet(
        "CartPole-v1", max_actors=2, actor_factory=_broken, on_incomplete=on_incomplete
    ) as fleet:
        if on_incomplete == "raise":
            with pytest.raises(FleetError, match="expected 2 trajectories"):
                fleet.run_round(good_weights, 2, 4)
            return
        result = fleet.run_round(good_weights, 2, 4)
    assert not result.complete and not result.trajectories
    assert {f.actor_id for f in result.failures} == {0, 1}
