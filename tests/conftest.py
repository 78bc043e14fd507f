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
