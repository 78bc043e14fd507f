"""Corrupt, foreign and unwritable calibration cache files: measured again, never a raw error.

A cache file that cannot be used is logged with its path and measured again (the
measurement replaces it); one that cannot be written leaves ``stored=False`` and the CLI
says so instead of printing a path it never wrote.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fleetgym.agents.workloads import get_workload
from fleetgym.cli import main
from fleetgym.meta_env.calibration import (
    CACHE_ENV_VAR,
    MAX_CACHE_FILE_BYTES,
    _key,
    _read,
    cache_path,
    calibrate,
)

BUDGET = 0.02
FAST = settings(max_examples=40, deadline=None, suppress_health_check=list(HealthCheck))
JSON = st.recursive(
    st.none() | st.booleans() | st.floats(allow_nan=False) | st.integers() | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner),
    max_leaves=20,
)
MODEL = {
    "actor_step_s": 1e-4,
    "actor_overhead_s": 1e-3,
    "learner_sample_s": 1e-5,
    "learner_overhead_s": 1e-2,
    "actor_jitter_cv": 0.1,
}


@pytest.fixture(autouse=True)
def _cache_in_tmp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(CACHE_ENV_VAR, str(tmp_path / "cache"))


def _key_of(name: str) -> dict[str, Any]:
    return _key(get_workload(name), {})


@FAST
@given(
    content=st.one_of(
        st.binary(max_size=64),
        JSON.map(lambda value: json.dumps(value).encode()),
        st.fixed_dictionaries({"model": JSON, "key": JSON}).map(lambda d: json.dumps(d).encode()),
        st.sampled_from([b"[" * 100_000, b'{"model": {}}', b"\xff\xfe", b"NaN", b""]),
    )
)
def test_any_content_reads_as_a_model_or_none(
    tmp_path_factory: pytest.TempPathFactory, content: bytes
) -> None:
    path = tmp_path_factory.mktemp("cal") / "x.json"
    path.write_bytes(content)
    assert _read(path, _key_of("Acrobot-v1")) is None


def _record(name: str, **changes: Any) -> dict[str, Any]:
    record = {"key": json.loads(json.dumps(_key_of(name), default=str)), "model": dict(MODEL)}
    record.update(changes)
    return record


def test_a_valid_file_is_read_and_a_foreign_one_is_not(tmp_path: Path) -> None:
    path = tmp_path / "x.json"
    path.write_text(json.dumps(_record("Acrobot-v1", details="not a dict")))
    found = _read(path, _key_of("Acrobot-v1"))
    assert found is not None and found[0].actor_step_s == MODEL["actor_step_s"]
    assert found[1] == {}
    assert _read(path, _key_of("CartPole-v1")) is None  # another workload's key


@pytest.mark.parametrize(
    "content",
    [
        b"{not json",
        b"\xff\xfe\x00",
        b"[" * 50_000,
        b" " * (MAX_CACHE_FILE_BYTES + 10),
        json.dumps(["a", "list"]).encode(),
        json.dumps(_record("Acrobot-v1", model={"actor_step_s": 1e-4})).encode(),
        json.dumps(_record("Acrobot-v1", model={**MODEL, "actor_step_s": -1.0})).encode(),
        json.dumps(_record("Acrobot-v1", model={**MODEL, "actor_step_s": "fast"})).encode(),
        json.dumps(_record("CartPole-v1")).encode(),  # foreign: another workload's file
    ],
    ids=["not-json", "binary", "deep", "huge", "list", "missing", "negative", "str", "foreign"],
)
@pytest.mark.timeout(120)
def test_an_unusable_cache_file_is_measured_again_and_replaced(
    content: bytes, caplog: pytest.LogCaptureFixture
) -> None:
    path = cache_path("Acrobot-v1")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(content)
    with caplog.at_level(logging.WARNING, logger="fleetgym.meta_env.calibration"):
        result = calibrate("Acrobot-v1", budget_s=BUDGET)
    assert not result.cached and result.stored
    assert str(path) in caplog.text and "measuring again" in caplog.text
    assert json.loads(path.read_text())["model"]["actor_step_s"] > 0
    again = calibrate("Acrobot-v1", budget_s=BUDGET)
    assert again.cached


@pytest.mark.timeout(120)
def test_a_cache_path_that_cannot_be_written_is_reported(
    capsys: pytest.CaptureFixture[str],
) -> None:
    path = cache_path("Acrobot-v1")
    path.mkdir(parents=True)  # a folder where the file goes: read and write both fail
    result = calibrate("Acrobot-v1", budget_s=BUDGET)
    assert not result.cached and not result.stored
    argv = ["calibrate", "--workload", "Acrobot-v1", "--budget", str(BUDGET), "--json"]
    assert main(argv) == 0
    assert json.loads(capsys.readouterr().out)["cache"] is None
    assert main(argv[:-1]) == 0
    assert "cache: none (writing" in capsys.readouterr().out


def test_bad_calibrate_arguments_are_refused_before_measuring(tmp_path: Path) -> None:
    cases: list[tuple[dict[str, Any], type[Exception], str]] = [
        ({"learner_overrides": 5}, TypeError, "learner_overrides:"),
        ({"learner_overrides": {"learning_rate": 1.0}}, TypeError, "learner_overrides:"),
        ({"learner_overrides": {1: 1.0}}, TypeError, "learner_overrides:"),
        ({"learner_overrides": {"lr": -1.0}}, ValueError, "lr:"),
        ({"force": "yes"}, TypeError, "force:"),
        ({"folder": 5}, TypeError, "folder:"),
        ({"budget_s": float("nan")}, ValueError, "budget_s:"),
        ({"seed": -1}, ValueError, "seed:"),
    ]
    for kwargs, error, prefix in cases:
        with pytest.raises(error, match=f"^{prefix}"):
            calibrate("Acrobot-v1", **{"budget_s": BUDGET, **kwargs})
    assert not (tmp_path / "cache").exists()  # nothing measured, nothing written


def test_a_given_folder_that_cannot_be_written_is_refused_before_measuring(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import fleetgym.meta_env.calibration as calibration

    def never(*args: Any) -> Any:
        raise AssertionError("measured although the cache folder cannot be written")

    a_file = tmp_path / "a-file"
    a_file.write_text("x")
    with monkeypatch.context() as patch:
        patch.setattr(calibration, "_measure", never)
        for folder in ("/dev/null/x", a_file, a_file / "below"):
            with pytest.raises(ValueError, match=r"^folder: expected a folder the") as caught:
                calibrate("Acrobot-v1", budget_s=BUDGET, folder=folder)
            message = str(caught.value)
            assert repr(str(folder)) in message and "cannot be created" in message
    folder = tmp_path / "new" / "cache"
    result = calibrate("Acrobot-v1", budget_s=BUDGET, folder=folder)
    assert result.stored and result.path.is_file() and folder in result.path.parents
