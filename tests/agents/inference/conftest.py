"""A deterministic served model whose answer encodes its request, for the inference tests."""

from __future__ import annotations

import threading

import numpy as np
import pytest

from fleetgym.agents.inference import ArraySpec, ModelSpec


class EchoModel:
    """Answers ``echo = obs * 2 + noise`` and ``version = the loaded weights' tag``.

    ``obs`` is a float64 pair (client id, request number), so an answer names the request
    it belongs to; ``version`` shows which weights computed it. ``forward`` can be made
    to block (``gate``) or fail (``fail_on``: an obs[0] value that raises).
    """

    def __init__(self) -> None:
        self.spec = ModelSpec(
            ArraySpec((2,), "float64"),
            ArraySpec((1,), "float64"),
            (("echo", ArraySpec((2,), "float64")), ("version", ArraySpec((), "int64"))),
        )
        self.tag = 0
        self.gate: threading.Event | None = None
        self.entered = threading.Event()
        self.fail_on: float | None = None
        self.batches: list[tuple[int, int]] = []  # (size, tag) per forward

    def load_weights(self, weights):
        self.tag = int(weights["tag"])

    def forward(self, obs, noise):
        self.entered.set()
        if self.gate is not None:
            self.gate.wait()
        if self.fail_on is not None and np.any(obs[:, 0] == self.fail_on):
            raise RuntimeError("poisoned request")
        self.batches.append((len(obs), self.tag))
        return {"echo": obs * 2.0 + noise, "version": np.full(len(obs), self.tag, np.int64)}


@pytest.fixture
def echo_model():
    return EchoModel()


def request(client_id: int, n: int) -> np.ndarray:
    return np.array([float(client_id), float(n)])
