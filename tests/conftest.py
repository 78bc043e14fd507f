"""Shared fixtures: small exact environments for the tests."""

from __future__ import annotations

import os

import pytest
from hypothesis import settings

os.environ.setdefault("MPLBACKEND", "Agg")

# Property tests draw the same examples on every run, so a CI result reproduces; set
# HYPOTHESIS_PROFILE=explore to search with fresh random examples instead.
settings.register_profile("ci", derandomize=True)
settings.register_profile("explore", derandomize=False)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))


@pytest.fixture(scope="session", autouse=True)
def _cache_folder(tmp_path_factory):
    """Simulated cells (ns-3) are cached in a folder of the session, not the user's cache;
    the guides' processes inherit it."""
    if "FLEETGYM_CACHE_DIR" not in os.environ:
        os.environ["FLEETGYM_CACHE_DIR"] = str(tmp_path_factory.mktemp("fleetgym-cache"))
    yield


@pytest.fixture(autouse=True)
def _one_torch_thread():
    """Keep torch to one thread: the test machines have 2 cores shared by many processes."""
    try:
        import torch
    except ImportError:  # pragma: no cover - torch is a dependency
        yield
        return
    previous = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(previous)


# -- the core-only run ----------------------------------------------------------------------
# CI also runs the core's tests (wrappers, traces, registration, Mode 3) in a virtual
# environment holding the core dependencies only, with FLEETGYM_CORE_ONLY=1. There, a test
# that reaches for an optional package (SB3, torch, MiniGrid, ...) is reported as skipped,
# naming the extra, instead of failing; any other error still fails. With every extra
# installed (the normal run) nothing is skipped this way.
CORE_ONLY = os.environ.get("FLEETGYM_CORE_ONLY") == "1"


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    if not CORE_ONLY or call.excinfo is None:
        return
    from fleetgym.extras import missing_extra

    missing = missing_extra(call.excinfo.value, item.nodeid)
    if missing is not None:
        report = outcome.get_result()
        report.outcome = "skipped"
        report.longrepr = (str(item.path), item.location[1], f"core only: {missing}")
