"""Bad-input audit of the asynchronous trainer, the learners, the losses and the inference device.

Every generated bad value given to :class:`AsyncPPO` (constructor, ``learn``, ``predict``,
``save``, ``load``), :class:`PPOLearner` (``load``), the lag bookkeeping, the losses and
the inference server's ``device`` must end in a typed fleetgym error, a TypeError or a
ValueError whose message names the argument (or the file), never a raw numpy, torch,
pickle, struct or OverflowError, a non-finite output or a hang. Also: an env that emits
NaN fails its rollout with a message naming the env and the step, and a diverging update
is rolled back.
"""

from __future__ import annotations

import copy
import functools
import math
import pickle
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fleetgym.errors import FleetError, FleetgymError

torch = pytest.importorskip("torch")

from fleetgym.agents.learners.asynchronous.config import (  # noqa: E402
    AsyncPPOConfig,
    AsyncTopology,
)
from fleetgym.agents.learners.asynchronous.trainer import AsyncPPO  # noqa: E402
from fleetgym.agents.learners.gae import compute_gae  # noqa: E402
from fleetgym.agents.learners.lag import WeightRing, behaviour_versions  # noqa: E402
from fleetgym.agents.learners.losses import (  # noqa: E402
    gipo_loss,
    ppo_clip_loss,
    vtrace,
    vtrace_policy_loss,
)
from fleetgym.agents.learners.ppo import HYPERPARAMETERS, PPOLearner  # noqa: E402

FAST = settings(max_examples=20, deadline=None, suppress_health_check=list(HealthCheck))
TINY = dict(n_actors=1, steps_per_actor=8, epochs=1, minibatch_size=8, concurrent=False)


def configured(**flat: Any) -> dict[str, Any]:
    """Flat settings (as this audit draws them) as AsyncPPO's keywords: ``algo`` and
    ``topology`` dicts (the values unchecked: the configs check them) and the rest."""
    algo = {k: flat.pop(k) for k in list(flat) if k in AsyncPPOConfig.__dataclass_fields__}
    hyper = {k: flat.pop(k) for k in list(flat) if k in HYPERPARAMETERS}
    topology = {k: flat.pop(k) for k in list(flat) if k in AsyncTopology.__dataclass_fields__}
    return {"algo": {**algo, "hyperparameters": hyper}, "topology": topology, **flat}


NOT_BOOLS = st.sampled_from(["no", "yes", "", 0, 1, 1.0, None, [True], np.array([True])])
BAD_COUNTS = st.one_of(
    st.sampled_from([-1, 10**12, 10**30, 2**63, 2**64, 1.5, math.nan, "4", True, False]),
    st.integers(max_value=-1),
    st.integers(min_value=10**8),
)
BAD_SEEDS = st.one_of(
    st.sampled_from([-1, 2**63, 2**64, 10**30, 1.5, "0", True, None, math.nan]),
    st.integers(min_value=2**63),
    st.integers(max_value=-1),
)
BAD_REALS = st.sampled_from([math.nan, math.inf, -math.inf, "0.5", None, True, [0.5]])


def assert_clean(error: BaseException, argument: str | None = None) -> None:
    """``error`` is a clean one: typed, short, naming ``argument``, no torch/pickle advice."""
    assert isinstance(error, (FleetgymError, TypeError, ValueError)), repr(error)
    message = str(error)
    assert len(message) < 2000, f"unbounded message ({len(message)} characters)"
    assert "could not convert" not in message, message
    assert "weights_only" not in message, message
    assert not isinstance(error, (OverflowError, ZeroDivisionError)), repr(error)
    assert not isinstance(error, pickle.UnpicklingError), repr(error)
    if argument is not None:
        assert argument in message, f"{argument!r} not named in {message!r}"


def expect_clean_error(call: Callable[[], Any], argument: str | None = None) -> BaseException:
    """Run ``call``: it must raise a clean error (naming ``argument`` when given)."""
    try:
        call()
    except (FleetgymError, TypeError, ValueError) as error:
        assert_clean(error, argument)
        return error
    raise AssertionError(f"accepted a bad value for {argument}")


@pytest.fixture(scope="module")
def model() -> Iterator[AsyncPPO]:
    with AsyncPPO(
        "CartPole-v1",
        algo=AsyncPPOConfig(hyperparameters={"epochs": 1, "minibatch_size": 8}),
        topology=AsyncTopology(n_actors=1, steps_per_actor=8, concurrent=False),
        seed=0,
    ) as m:
        yield m


# -- the constructor ---------------------------------------------------------------------

CONSTRUCTOR_BAD: dict[str, st.SearchStrategy[Any]] = {
    "loss": st.sampled_from(["a3c", "", "PPO", None, 1, ["ppo"]]),
    "sigma": st.one_of(BAD_REALS, st.sampled_from([0.0, -0.8])),
    "max_policy_lag": BAD_COUNTS,
    "n_actors": st.one_of(BAD_COUNTS, st.sampled_from([0, 1025, None])),
    "steps_per_actor": st.one_of(BAD_COUNTS, st.sampled_from([0, 10_000_001])),
    "batch_trajectories": st.one_of(BAD_COUNTS, st.sampled_from([0, 100_001])),
    "recompute_values": NOT_BOOLS,
    "global_advantage_norm": NOT_BOOLS,
    "target_kl": st.sampled_from([math.nan, math.inf, -0.1, 0.0, "big", "AUTO", True, [0.1]]),
    "proximal_clip": NOT_BOOLS,
    "lag_injection": st.one_of(BAD_COUNTS, st.just(9)),  # 9 > the default bound of 8
    "concurrent": NOT_BOOLS,
    "inference": st.sampled_from(["remote", "", None, 1, "LOCAL"]),
    "backend": st.sampled_from(["processes", "thread", "", None, 2]),
    "seed": BAD_SEEDS,
    "tensorboard_log": st.sampled_from([5, 1.5, True, [], object(), b"runs"]),
    "actor_factory": st.sampled_from([5, "factory", 1.5, True, object(), [print]]),
    "lr": st.one_of(BAD_REALS, st.sampled_from([0.0, -1e-3])),
    "epochs": st.one_of(BAD_COUNTS, st.sampled_from([0, 1001])),
    "gamma": st.sampled_from([2.0, -0.1, math.nan, "0.99"]),
}


@FAST
@given(data=st.data(), name=st.sampled_from(sorted(CONSTRUCTOR_BAD)))
def test_async_ppo_constructor(data: Any, name: str) -> None:
    value = data.draw(CONSTRUCTOR_BAD[name])
    kwargs = {**TINY, name: value}
    expect_clean_error(lambda: AsyncPPO("CartPole-v1", **configured(**kwargs)).close(), name)


def test_async_ppo_bounds_the_samples_of_one_update() -> None:
    expect_clean_error(
        lambda: AsyncPPO(
            "CartPole-v1",
            algo=AsyncPPOConfig(batch_trajectories=11),
            topology=AsyncTopology(steps_per_actor=10**7),
        ),
        "batch_trajectories * steps_per_actor",
    )


@FAST
@given(name=st.sampled_from(["seed", "actor_id", "incarnation"]), value=BAD_SEEDS)
def test_rollout_worker_ids(name: str, value: Any) -> None:
    from fleetgym.agents.rollout import RolloutWorker

    kwargs = {"actor_id": 0, "seed": 0, "incarnation": 0, name: value}
    expect_clean_error(lambda: RolloutWorker("CartPole-v1", **kwargs).close(), name)


@FAST
@given(seed=BAD_SEEDS)
def test_learner_and_evaluation_seeds(seed: Any) -> None:
    from fleetgym.agents.learners.training import evaluate_policy

    expect_clean_error(lambda: PPOLearner("CartPole-v1", seed=seed), "seed")
    policy = PPOLearner("CartPole-v1").policy
    expect_clean_error(lambda: evaluate_policy(policy, "CartPole-v1", 1, seed=seed), "seed")


# -- learn, predict, save ----------------------------------------------------------------

LEARN_BAD: dict[str, st.SearchStrategy[Any]] = {
    "total_timesteps": st.sampled_from([0, -1, -(10**30), 1.5, "64", True, None, math.nan]),
    "callback": st.sampled_from([5, "stop", 1.5, True]),
    "progress_bar": NOT_BOOLS,
    "target": st.sampled_from([math.nan, "195", True, [1.0], np.array([1.0, 2.0])]),
}


@FAST
@given(data=st.data(), name=st.sampled_from(sorted(LEARN_BAD)))
def test_learn_arguments(model: AsyncPPO, data: Any, name: str) -> None:
    value = data.draw(LEARN_BAD[name])
    kwargs = {"total_timesteps": 8, name: value}
    before = model.num_timesteps
    expect_clean_error(lambda: model.learn(**kwargs), name)
    assert model.num_timesteps == before  # refused before any step


BAD_OBSERVATIONS = st.one_of(
    st.sampled_from(
        [
            "abc",
            b"\x00\x01",
            None,
            {},
            np.zeros(5, np.float32),
            np.zeros((2, 5), np.float32),
            np.zeros((0, 4), np.float32),
            np.zeros((2, 2, 4), np.float32),
            np.full(4, np.nan, np.float32),
            np.array([0.0, np.inf, 0.0, 0.0]),
            np.array([[0.0] * 4, [0.0, 0.0, -np.inf, 0.0]]),
            np.array(["a", "b", "c", "d"]),
            np.array([1, None, 2, 3], dtype=object),
            np.array([object()] * 4, dtype=object),
            np.zeros(4, np.complex64),
            [[1.0, 2.0], [3.0]],
            [0.0, 0.0, "x", 0.0],
        ]
    ),
    st.lists(st.floats(allow_nan=True, allow_infinity=True), min_size=4, max_size=4).filter(
        lambda v: not all(math.isfinite(x) for x in v)
    ),
    st.lists(st.floats(-1.0, 1.0), max_size=8).filter(lambda v: len(v) != 4),
)


@FAST
@given(observation=BAD_OBSERVATIONS)
def test_predict_observations(model: AsyncPPO, observation: Any) -> None:
    expect_clean_error(lambda: model.predict(observation), "observation")


@FAST
@given(observation=st.lists(st.floats(-1e30, 1e30), min_size=4, max_size=4))
def test_predict_accepts_any_finite_observation(model: AsyncPPO, observation: list[float]) -> None:
    action, state = model.predict(np.array(observation, np.float32))
    assert state is None and int(action) in (0, 1)
    actions, _ = model.predict(np.array([observation] * 3, np.float32))
    assert actions.shape == (3,)


@FAST
@given(deterministic=NOT_BOOLS)
def test_predict_deterministic(model: AsyncPPO, deterministic: Any) -> None:
    expect_clean_error(
        lambda: model.predict(np.zeros(4, np.float32), deterministic), "deterministic"
    )


@FAST
@given(path=st.sampled_from([5, None, 1.5, True, b"model.pt", ["model.pt"], ""]))
def test_save_paths(model: AsyncPPO, path: Any) -> None:
    expect_clean_error(lambda: model.save(path), "path")
    expect_clean_error(lambda: model.learner.save(path), "path")
    expect_clean_error(lambda: AsyncPPO.load(path), "path")


def test_save_to_a_folder_is_refused(model: AsyncPPO, tmp_path: Path) -> None:
    expect_clean_error(lambda: model.save(tmp_path), "path")


# -- load: corrupt and foreign files -----------------------------------------------------


@pytest.fixture(scope="module")
def saved(tmp_path_factory: pytest.TempPathFactory, model: AsyncPPO) -> Path:
    return model.save(tmp_path_factory.mktemp("saved") / "model.pt")


def _copy(saved: Path, folder: Path, pt: bytes | None = None, settings: str | None = None) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    target = folder / "model.pt"
    target.write_bytes(saved.read_bytes() if pt is None else pt)
    json_text = saved.with_suffix(".json").read_text() if settings is None else settings
    target.with_suffix(".json").write_bytes(json_text.encode("utf-8", "surrogatepass"))
    return target


BAD_SETTINGS = st.one_of(
    st.text(max_size=40),
    st.sampled_from(
        [
            "",
            "not json",
            "{",
            "[]",
            "null",
            "0",
            '"CartPole-v1"',
            "{}",
            '{"workload": 5}',
            '{"workload": "Nope-v9"}',
            '{"workload": "CartPole-v1", "format": "fleetgym.PPOLearner"}',
            '{"workload": "CartPole-v1", "num_timesteps": -1}',
            '{"workload": "CartPole-v1", "num_timesteps": 1.5}',
            '{"workload": "CartPole-v1", "num_timesteps": 1e400}',
            '{"workload": "CartPole-v1", "hyperparameters": []}',
            '{"workload": "CartPole-v1", "hyperparameters": {"learning_rate": 1}}',
            '{"workload": "CartPole-v1", "seed": -1}',
            '{"workload": "CartPole-v1", "seed": 18446744073709551616}',
            '{"workload": "CartPole-v1", "steps_per_actor": 1e12}',
            '{"workload": "CartPole-v1", "concurrent": "no"}',
            '{"workload": "CartPole-v1", "unknown": 1}',
            '{"workload": "CartPole-v1", "sigma": NaN}',
            '{"workload": "CartPole-v1", "algo": []}',
            '{"workload": "CartPole-v1", "algo": {"loss": "a3c"}}',
            '{"workload": "CartPole-v1", "topology": {"n_actors": 0}}',
            '{"workload": "CartPole-v1", "topology": {"actors": "thread"}}',
            '{"workload": "CartPole-v1", "version": 3}',
            "[" * 5000 + "]" * 5000,
        ]
    ),
)


@pytest.mark.timeout(240)
@FAST
@given(settings_text=BAD_SETTINGS)
def test_load_refuses_bad_settings(saved: Path, tmp_path_factory: Any, settings_text: str) -> None:
    target = _copy(saved, tmp_path_factory.mktemp("bad-settings"), settings=settings_text)
    try:
        AsyncPPO.load(target).close()
    except (FleetgymError, TypeError, ValueError) as error:
        assert_clean(error, str(target.with_suffix(".json")))
        return
    # A text that happens to be valid settings (the saved ones, e.g.) loads fine.
    assert settings_text.strip().startswith("{")


def _state(saved: Path) -> dict[str, Any]:
    return torch.load(saved, weights_only=True)


def _corrupt_states(saved: Path) -> list[Any]:
    """Checkpoints torch can load that are not (or no longer) this learner's."""

    def changed(part: str, key: str, value: Any) -> dict[str, Any]:
        state = _state(saved)
        state[part][key] = value
        return state

    first = next(iter(_state(saved)["policy"]))
    shape = tuple(_state(saved)["policy"][first].shape)
    missing_meta = _state(saved)
    del missing_meta["meta"]["episodes_seen"]
    missing_weight = _state(saved)
    del missing_weight["policy"][first]
    return [
        [1, 2, 3],
        {"a": torch.zeros(1)},
        {"policy": {}, "optimizer": {}, "meta": {}},
        missing_meta,
        missing_weight,
        changed("meta", "policy_version", -1),
        changed("meta", "policy_version", 2**64),
        changed("meta", "episodes_seen", -5),
        changed("meta", "samples_seen", 1.5),
        changed("meta", "workload", "Hopper-v5"),
        changed("meta", "workload", 7),
        changed("meta", "recent_returns", [1.0, math.nan]),
        changed("meta", "recent_returns", "abc"),
        changed("meta", "return_stats", [0.0, -1.0, 0.0]),
        changed("meta", "return_stats", [0.0, 1.0]),
        changed("meta", "seed", -3),
        changed("meta", "discounted", {"slot": 1.0}),
        changed("meta", "discounted", {"0": math.inf}),
        changed("policy", first, torch.full(shape, math.nan)),
        changed("policy", first, torch.zeros(3)),
        changed("policy", first, "weights"),
        changed("optimizer", "state", {0: {"step": "x"}}),
        {**_state(saved), "optimizer": {"param_groups": [], "state": {}}},
    ]


class _Evil:
    def __reduce__(self) -> tuple[Any, ...]:
        return (print, ("this must never run",))


@pytest.mark.timeout(240)
def test_load_refuses_corrupt_and_foreign_checkpoints(saved: Path, tmp_path: Path) -> None:
    real = saved.read_bytes()
    rng = np.random.default_rng(0)
    raw: list[bytes] = [
        b"",
        b"garbage",
        rng.bytes(300),
        real[: len(real) // 2],
        real[:100],
        pickle.dumps(_Evil()),
        pickle.dumps({"policy": object()}),
        saved.with_suffix(".json").read_bytes(),
    ]
    for i, state in enumerate(_corrupt_states(saved)):
        path = tmp_path / f"state{i}.pt"
        torch.save(state, path)
        raw.append(path.read_bytes())
    for i, content in enumerate(raw):
        target = _copy(saved, tmp_path / f"case{i}", pt=content)
        learner = PPOLearner("CartPole-v1", seed=1)
        before = {k: v.clone() for k, v in learner.policy.state_dict().items()}
        error = expect_clean_error(lambda t=target, lr=learner: lr.load(t))
        assert str(target) in str(error), f"case {i}: file not named in {error}"
        assert error.__cause__ is None, f"case {i}: chained to {error.__cause__!r}"
        after = learner.policy.state_dict()
        assert all(torch.equal(before[k], after[k]) for k in before), f"case {i}: changed"
        assert learner.policy_version == 0
        error = expect_clean_error(lambda t=target: AsyncPPO.load(t))
        assert str(target) in str(error)


def test_a_pickle_is_not_a_checkpoint_and_never_advice_to_unpickle(tmp_path: Path) -> None:
    path = tmp_path / "evil.pt"
    path.write_bytes(pickle.dumps(_Evil()))
    with pytest.raises(ValueError, match="not a fleetgym checkpoint") as info:
        PPOLearner("CartPole-v1").load(path)
    assert "weights_only" not in str(info.value) and info.value.__cause__ is None


def test_a_policy_file_is_not_an_async_ppo_checkpoint(saved: Path) -> None:
    policy_file = saved.with_name(saved.stem + ".policy.pt")
    assert policy_file.is_file()
    error = expect_clean_error(lambda: AsyncPPO.load(policy_file))
    assert "policy" in str(error)


def test_a_bad_override_of_load_keeps_its_type_and_names_the_file(saved: Path) -> None:
    error = expect_clean_error(
        lambda: AsyncPPO.load(saved, topology={"concurrent": "no"}), "concurrent"
    )
    assert isinstance(error, TypeError) and str(saved.with_suffix(".json")) in str(error)


@pytest.mark.parametrize("keyword", ["loss", "n_actors", "lr", "actors", "ray_actor_options"])
def test_a_1x_keyword_names_its_2_0_place(keyword: str) -> None:
    with pytest.raises(
        TypeError, match=rf"AsyncPPO: the keyword '{keyword}' moved in fleetgym 2.0"
    ):
        AsyncPPO("CartPole-v1", **{keyword: 1})


@pytest.mark.timeout(120)
def test_load_restores_a_good_checkpoint(saved: Path, model: AsyncPPO) -> None:
    with AsyncPPO.load(saved) as again:
        assert again.num_timesteps == model.num_timesteps
        assert again.learner.policy_version == model.learner.policy_version
        w1, w2 = again.learner.get_weights(), model.learner.get_weights()
        assert all(np.array_equal(w1[k], w2[k]) for k in w1)


# -- lag bookkeeping ---------------------------------------------------------------------


@FAST
@given(version=st.one_of(BAD_SEEDS, st.sampled_from([np.float64(3.0), 3.0])))
def test_weight_ring_versions(version: Any) -> None:
    ring = WeightRing(3)
    expect_clean_error(lambda: ring.push(version, {}), "version")
    assert ring.versions() == []


@functools.cache
def _rollout_once(steps: int) -> Any:
    from fleetgym.agents.rollout import RolloutWorker

    worker = RolloutWorker("CartPole-v1", 0, seed=0)
    try:
        return worker.rollout(worker.policy.get_weights(), steps, 0)
    finally:
        worker.close()


def _rollout(steps: int = 8) -> Any:
    """A CartPole trajectory of ``steps`` steps at version 0 (a copy: tests change it)."""
    return copy.copy(_rollout_once(steps))


BAD_PER_SAMPLE = st.sampled_from(
    [
        np.zeros(7, np.int64),  # one short: a negative dropped-sample count before
        np.zeros(9, np.int64),
        np.zeros((8, 1), np.int64),
        np.full(8, -1, np.int64),
        np.arange(8, 0, -1),  # backwards
        np.full(8, 0.5),
        np.zeros(8, bool),
        [0] * 8,
        np.full(8, 2**63, np.uint64),
    ]
)


@FAST
@given(per_sample=BAD_PER_SAMPLE)
def test_behaviour_versions_refuses_impossible_versions(per_sample: Any) -> None:
    traj = _rollout()
    traj.policy_versions = per_sample  # type: ignore[attr-defined]
    expect_clean_error(lambda: behaviour_versions(traj), "policy_versions")


@FAST
@given(version=BAD_SEEDS)
def test_behaviour_versions_refuses_bad_trajectory_versions(version: Any) -> None:
    traj = _rollout()
    traj.policy_version = version
    expect_clean_error(lambda: behaviour_versions(traj), "policy_version")


# -- the losses --------------------------------------------------------------------------


@FAST
@given(
    lengths=st.tuples(*[st.integers(0, 4)] * 6).filter(lambda n: len(set(n)) > 1),
    gamma=st.floats(0.0, 1.0),
)
def test_advantage_estimators_refuse_mismatched_lengths(
    lengths: tuple[int, ...], gamma: float
) -> None:
    r, v, term, trunc, tv, rho = lengths
    args = (
        np.ones(r),
        np.zeros(v),
        np.zeros(term, bool),
        np.zeros(trunc, bool),
        np.zeros(tv),
        0.0,
    )
    expect_clean_error(lambda: vtrace(*args, np.zeros(rho), gamma))
    if len(set(lengths[:5])) > 1:
        expect_clean_error(lambda: compute_gae(*args, gamma, 0.95))
    else:
        advantages, returns = compute_gae(*args, gamma, 0.95)
        assert np.isfinite(advantages).all() and np.isfinite(returns).all()


ESTIMATOR_BAD: dict[str, st.SearchStrategy[Any]] = {
    "rewards": st.sampled_from([[1.0, math.nan, 0.0], [math.inf, 0.0, 0.0], "abc", [[1.0]] * 3]),
    "values": st.sampled_from([[0.0, -math.inf, 0.0], ["a", "b", "c"]]),
    "truncation_values": st.sampled_from([[0.0, 0.0, math.nan]]),
    "last_value": BAD_REALS,
    "log_rhos": st.sampled_from([[0.0, math.nan, 0.0], [math.inf, 0.0, 0.0], "x"]),
    "gamma": st.sampled_from([-0.1, 1.5, math.nan, math.inf, "0.9", None]),
    "rho_bar": st.sampled_from([0.0, -1.0, math.nan, math.inf, "1"]),
    "c_bar": st.sampled_from([0.0, -1.0, math.nan, "1"]),
}


@FAST
@given(data=st.data(), name=st.sampled_from(sorted(ESTIMATOR_BAD)))
def test_vtrace_arguments(data: Any, name: str) -> None:
    kwargs: dict[str, Any] = dict(
        rewards=np.ones(3),
        values=np.zeros(3),
        terminated=np.zeros(3, bool),
        truncated=np.zeros(3, bool),
        truncation_values=np.zeros(3),
        last_value=0.0,
        log_rhos=np.zeros(3),
        gamma=0.9,
    )
    kwargs[name] = data.draw(ESTIMATOR_BAD[name])
    expect_clean_error(lambda: vtrace(**kwargs), name)
    if name not in ("log_rhos", "rho_bar", "c_bar"):
        del kwargs["log_rhos"]
        expect_clean_error(lambda: compute_gae(**kwargs, gae_lambda=0.95), name)


def test_vtrace_takes_a_zero_ratio() -> None:
    flags = np.zeros(2, bool)
    log_rhos = np.array([-math.inf, 0.0])
    vs, adv = vtrace(np.ones(2), np.zeros(2), flags, flags, np.zeros(2), 0.0, log_rhos, 0.9)
    assert np.isfinite(vs).all() and np.isfinite(adv).all()


@FAST
@given(n=st.tuples(st.integers(1, 4), st.integers(1, 4), st.integers(1, 4)))
def test_policy_losses_refuse_mismatched_shapes(n: tuple[int, int, int]) -> None:
    new, old, adv = (torch.zeros(k) for k in n)
    for loss in (ppo_clip_loss, gipo_loss, vtrace_policy_loss):
        if len(set(n)) > 1:
            expect_clean_error(lambda f=loss: f(new, old, adv), "advantages")
        else:
            value, fraction = loss(new, old, adv)
            assert math.isfinite(float(value)) and 0.0 <= float(fraction) <= 1.0


@FAST
@given(clip=st.one_of(BAD_REALS, st.floats(max_value=-1e-9)))
def test_policy_loss_bounds(clip: Any) -> None:
    args = (torch.zeros(3), torch.zeros(3), torch.ones(3))
    expect_clean_error(lambda: ppo_clip_loss(*args, clip), "clip")
    expect_clean_error(lambda: vtrace_policy_loss(*args, clip), "rho_bar")


# -- the inference device ----------------------------------------------------------------


@FAST
@given(device=st.sampled_from([None, 0, "tpu", "", "cpu:0", "cuda:", "cuda:x", "cuda:-1", "gpu"]))
def test_inference_devices(device: Any) -> None:
    from fleetgym.agents.inference import InferenceConfig

    expect_clean_error(lambda: InferenceConfig(device=device), "device")


@pytest.mark.skipif(torch.cuda.is_available(), reason="this torch has CUDA")
@pytest.mark.parametrize("device", ["cuda", "cuda:0", "cuda:3"])
def test_cuda_without_cuda_is_a_clear_error(device: str) -> None:
    from fleetgym.agents.fleet import make_fleet
    from fleetgym.agents.inference import ActorCriticModel, InferenceServer
    from fleetgym.agents.workloads import get_workload

    expected = (
        f"device: expected 'cpu' or an available accelerator, actual '{device}' "
        "(torch has no CUDA here)"
    )
    policy = get_workload("CartPole-v1").make_policy()
    for call in (
        lambda: InferenceServer(policy, device=device),
        lambda: ActorCriticModel(policy, device),
        lambda: make_fleet(
            "CartPole-v1", inference="server", inference_options={"device": device}, max_actors=1
        ).close(),
    ):
        error = expect_clean_error(call, "device")
        assert str(error) == expected


# -- an env that emits NaN ---------------------------------------------------------------


class NaNEnv(gym.Env):
    """Zeros, then from step ``bad_at`` on a NaN observation or an infinite reward."""

    observation_space = gym.spaces.Box(-1.0, 1.0, (3,), np.float32)
    action_space = gym.spaces.Discrete(2)

    def __init__(self, bad_at: int = 5, what: str = "obs") -> None:
        self.bad_at, self.what, self.t = bad_at, what, 0

    def reset(self, *, seed: int | None = None, options: Any = None) -> tuple[Any, dict]:
        super().reset(seed=seed)
        self.t = 0
        return np.zeros(3, np.float32), {}

    def step(self, action: Any) -> tuple[Any, float, bool, bool, dict]:
        self.t += 1
        obs, reward = np.zeros(3, np.float32), 1.0
        if self.t >= self.bad_at:
            if self.what == "obs":
                obs[1] = np.nan
            else:
                reward = math.inf
        return obs, reward, False, self.t >= 50, {}


ENV_ID = "fleetgym-test/NaN-v0"
if ENV_ID not in gym.registry:
    gym.register(ENV_ID, entry_point=NaNEnv)


def nan_workload(what: str) -> Any:
    from fleetgym.agents.workloads import Workload

    return Workload.from_env(ENV_ID, env_kwargs={"what": what}, rollout_steps=16)


@pytest.mark.parametrize(
    ("what", "match"),
    [("obs", "at step 5 of the rollout .*observation"), ("reward", "at step 4 .*reward")],
)
def test_a_nan_env_fails_its_rollout_naming_the_env_and_the_step(what: str, match: str) -> None:
    from fleetgym.agents.rollout import RolloutWorker

    worker = RolloutWorker(nan_workload(what), 0, seed=0)
    try:
        with pytest.raises(ValueError, match=f"env {ENV_ID} \\(actor 0\\) {match}"):
            worker.rollout(worker.policy.get_weights(), 16, 0)
    finally:
        worker.close()


@pytest.mark.timeout(120)
@pytest.mark.parametrize(
    ("concurrent", "inference"), [(False, "local"), (True, "local"), (False, "server")]
)
def test_a_nan_env_stops_async_ppo_with_a_clear_error(concurrent: bool, inference: str) -> None:
    options = {**TINY, "concurrent": concurrent, "inference": inference}
    with AsyncPPO(nan_workload("obs"), seed=0, **configured(**options)) as m:
        with pytest.raises(FleetError, match=f"env {ENV_ID} .*step 5.*expected finite values"):
            m.learn(64)
        assert m.learner.policy_version == 0


@pytest.mark.timeout(120)
def test_a_nan_env_stops_synchronous_training_with_the_reason() -> None:
    from fleetgym.agents.fleet.inprocess import InProcessFleet
    from fleetgym.agents.learners.training import train

    workload = nan_workload("reward")
    learner = PPOLearner(workload, seed=0)
    with InProcessFleet(workload, max_actors=1, seed=0) as fleet:
        with pytest.raises(FleetError, match="actual none; actor 0 .*reward: expected finite"):
            train(workload, fleet, learner, num_actors=1, max_rounds=2, steps_per_actor=16)


# -- divergence --------------------------------------------------------------------------


@pytest.mark.timeout(120)
def test_a_huge_learning_rate_is_the_divergence_error_with_rollback() -> None:
    learner = PPOLearner("CartPole-v1", seed=0, lr=1e300, epochs=2, minibatch_size=8)
    traj = _rollout(steps=16)
    before = {k: v.clone() for k, v in learner.policy.state_dict().items()}
    with pytest.raises(ValueError, match="diverged") as info:
        learner.update([traj])
    assert "update 1: expected finite parameters" in str(info.value)
    after = learner.policy.state_dict()
    assert all(torch.equal(before[k], after[k]) for k in before)
    assert learner.policy_version == 0 and not learner.optimizer.state_dict()["state"]
    learner.set_learning_rate(1e-3)  # the learner still works
    assert learner.update([traj]).policy_version == 1


@pytest.mark.timeout(120)
@pytest.mark.parametrize("concurrent", [False, True])
def test_async_ppo_divergence_rolls_back(concurrent: bool) -> None:
    options = configured(**{**TINY, "concurrent": concurrent, "lr": 1e300})
    with AsyncPPO("CartPole-v1", seed=0, **options) as m:
        before = m.learner.get_weights()
        with pytest.raises(ValueError, match="diverged"):
            m.learn(64)
        after = m.learner.get_weights()
        assert all(np.array_equal(before[k], after[k]) for k in before)
        assert m.learner.policy_version == 0 and m.num_timesteps == 0
