"""InferenceServer with in-process clients: the batching rule end to end, weight swaps,
bad input, closing, and a load test (every request answered exactly once, its own answer).

The model is the deterministic EchoModel (conftest): an answer encodes its request and the
weights that computed it. No test asserts on wall-clock time.
"""

from __future__ import annotations

import threading
import time

import numpy as np
import pytest
from conftest import EchoModel, request

from fleetgym.agents.inference import InferenceError, InferenceServer
from fleetgym.agents.workloads import get_workload

#: A wait no test ever reaches: a batch that runs proves another rule fired.
NEVER_MS = 60_000.0


def _wait_for(predicate, what: str) -> None:
    for _ in range(20_000):
        if predicate():
            return
        time.sleep(0.001)
    raise AssertionError(f"never happened: {what}")


@pytest.mark.timeout(60)
def test_every_client_waiting_runs_the_batch_without_the_timeout(echo_model):
    with InferenceServer(echo_model, max_batch=256, max_wait_ms=NEVER_MS) as server:
        clients = [server.connect() for _ in range(16)]
        tickets = [c.submit(request(i, 0)) for i, c in enumerate(clients)]
        replies = [c.wait(t) for c, t in zip(clients, tickets, strict=True)]
        assert echo_model.batches == [(16, 0)]
        for i, reply in enumerate(replies):
            np.testing.assert_array_equal(reply.outputs["echo"][0], request(i, 0) * 2)
        assert server.metrics()["batch_histogram"] == {16: 1}
        for c in clients:
            c.close()


@pytest.mark.timeout(60)
def test_full_batches_then_the_rest_when_the_idle_client_leaves(echo_model):
    with InferenceServer(echo_model, max_batch=4, max_wait_ms=NEVER_MS) as server:
        busy, idle = server.connect(slots=16), server.connect()
        ticket = busy.submit(np.stack([request(0, n) for n in range(10)]))
        _wait_for(lambda: len(echo_model.batches) == 2, "two full batches")
        assert echo_model.batches == [(4, 0), (4, 0)] and server.metrics()["queued"] == 2
        assert not ticket.done.is_set()
        idle.close()  # now every connected client is waiting
        reply = busy.wait(ticket)
        assert echo_model.batches == [(4, 0), (4, 0), (2, 0)]
        np.testing.assert_array_equal(reply.outputs["echo"][:, 1], np.arange(10) * 2.0)
        assert reply.batch_ids.tolist() == [1] * 4 + [2] * 4 + [3] * 2
        busy.close()


@pytest.mark.timeout(60)
def test_oldest_request_waits_max_wait(echo_model):
    with InferenceServer(echo_model, max_batch=256, max_wait_ms=20.0) as server:
        client, _idle = server.connect(), server.connect()
        reply = client.infer(request(0, 0))
        # the idle client never sends: only the deadline can have run this batch
        assert echo_model.batches == [(1, 0)] and reply.batch_ids.tolist() == [1]
        assert server.metrics()["queue_wait_ms_p50"] >= 20.0


@pytest.mark.timeout(120)
def test_weight_swap_under_load_never_mixes_versions(echo_model):
    stop = threading.Event()
    seen: list[tuple[int, int, int]] = []  # (batch id, answer's version, model's tag)
    lock = threading.Lock()
    with InferenceServer(echo_model, max_batch=8, max_wait_ms=0.5) as server:

        def actor(i: int) -> None:
            with server.connect(slots=4) as client:
                n = 0
                while not stop.is_set():
                    reply = client.infer(np.stack([request(i, n), request(i, n + 1)]))
                    with lock:
                        for row in range(2):
                            seen.append(
                                (
                                    int(reply.batch_ids[row]),
                                    int(reply.policy_versions[row]),
                                    int(reply.outputs["version"][row]),
                                )
                            )
                    n += 2

        threads = [threading.Thread(target=actor, args=(i,)) for i in range(12)]
        for t in threads:
            t.start()
        for version in range(1, 41):
            assert server.set_weights({"tag": np.array(version)}, version) == version
            assert server.policy_version == version
        stop.set()
        for t in threads:
            t.join()
    by_batch: dict[int, set[int]] = {}
    for batch, version, tag in seen:
        assert version == tag  # the version reported is the weights that computed it
        by_batch.setdefault(batch, set()).add(version)
    assert all(len(versions) == 1 for versions in by_batch.values())
    assert len({v for _, v, _ in seen}) > 1


@pytest.mark.timeout(60)
def test_bad_input_errors_reach_only_that_client(echo_model):
    with InferenceServer(echo_model, max_batch=64, max_wait_ms=1.0) as server:
        good, bad = server.connect(), server.connect(slots=2)
        with pytest.raises(ValueError, match=r"obs: expected shape \(2,\)"):
            bad.submit(np.zeros(3))
        with pytest.raises(TypeError, match="obs: expected dtype float64, actual float32"):
            bad.submit(np.zeros(2, np.float32))
        with pytest.raises(TypeError, match="obs: expected np.ndarray"):
            bad.submit([0.0, 1.0])  # type: ignore[arg-type]
        with pytest.raises(ValueError, match="noise: expected shape"):
            bad.submit(np.zeros(2), noise=np.zeros(3))
        with pytest.raises(ValueError, match="at most 2 observations in flight"):
            bad.submit(np.zeros((3, 2)))
        # a request that breaks the forward pass fails for its client only
        echo_model.fail_on = 99.0
        gate = echo_model.gate = threading.Event()
        blocker = good.submit(request(1, 0))
        _wait_for(echo_model.entered.is_set, "the first forward")
        poisoned = bad.submit(request(99, 0))
        fine = good.submit(request(1, 1))
        gate.set()
        good.wait(blocker)
        with pytest.raises(InferenceError, match="forward pass failed: RuntimeError: poisoned"):
            bad.wait(poisoned)
        np.testing.assert_array_equal(good.wait(fine).outputs["echo"][0], request(1, 1) * 2)
        bad.close()
        with pytest.raises(InferenceError, match="expected an open client, actual closed"):
            bad.submit(np.zeros(2))
        np.testing.assert_array_equal(good.infer(request(1, 2)).outputs["echo"][0], [2.0, 4.0])
        assert server.metrics()["errors"] == 1


@pytest.mark.timeout(60)
def test_close_answers_waiting_requests_with_an_error(echo_model):
    server = InferenceServer(echo_model, max_batch=64, max_wait_ms=NEVER_MS)
    client, _idle = server.connect(), server.connect()
    ticket = client.submit(request(0, 0))
    server.close()
    with pytest.raises(InferenceError, match="the inference server closed"):
        client.wait(ticket)
    with pytest.raises(InferenceError, match="expected an open server"):
        server.connect()
    server.close()  # idempotent


@pytest.mark.timeout(60)
def test_rejected_weights_keep_the_old_ones():
    policy = get_workload("CartPole-v1").make_policy()
    with InferenceServer(policy, max_wait_ms=0.0) as server:
        with pytest.raises(InferenceError, match="set_weights: ValueError: weights"):
            server.set_weights({"nope": np.zeros(1)}, version=4)
        assert server.policy_version == 0
        client = server.connect()
        obs = np.zeros((3, 4), np.float32)
        reply = client.infer(obs, noise=np.full((3, 1), 0.25))
        actions, log_probs, values = policy.act(obs, rng=_FixedUniform(0.25))
        np.testing.assert_array_equal(reply.outputs["action"], actions)
        np.testing.assert_allclose(reply.outputs["log_prob"], log_probs, atol=1e-6)
        np.testing.assert_allclose(reply.outputs["value"], values, atol=1e-6)


class _FixedUniform:
    def __init__(self, u: float) -> None:
        self.u = u

    def random(self, n: int) -> np.ndarray:
        return np.full(n, self.u)


def _load(duration_s: float, num_clients: int) -> None:
    model = EchoModel()
    stop = threading.Event()
    errors: list[str] = []
    counts = [0] * num_clients
    with InferenceServer(model, max_batch=256, max_wait_ms=2.0) as server:

        def actor(i: int) -> None:
            # Odd clients double-buffer: two groups in flight, stepping one while the
            # other waits.
            try:
                with server.connect(slots=4) as client:
                    n = 0
                    groups = 2 if i % 2 else 1
                    tickets = [
                        client.submit(request(i, n + g), noise=[g * 0.5]) for g in range(groups)
                    ]
                    n += groups
                    while True:
                        last = stop.is_set()  # one decision per round: no ticket left behind
                        for g in range(groups):
                            reply = client.wait(tickets[g])
                            expected = request(i, n - groups + g) * 2 + g * 0.5
                            if not np.array_equal(reply.outputs["echo"][0], expected):
                                errors.append(
                                    f"client {i}: {reply.outputs['echo'][0]} != {expected}"
                                )
                            counts[i] += 1
                            if not last:
                                tickets[g] = client.submit(request(i, n + g), noise=[g * 0.5])
                        if last:
                            return
                        n += groups
            except Exception as exc:  # pragma: no cover - reported below
                errors.append(f"client {i}: {exc!r}")

        threads = [threading.Thread(target=actor, args=(i,)) for i in range(num_clients)]
        for t in threads:
            t.start()
        stop.wait(duration_s)
        stop.set()
        for t in threads:
            t.join()
        metrics = server.metrics()
    assert errors == []
    assert all(c > 0 for c in counts)
    # exactly once: the server answered as many requests as the clients received
    assert metrics["requests"] == sum(counts) and metrics["errors"] == 0
    assert metrics["queued"] == 0 and metrics["connected_clients"] == 0
    assert max(metrics["batch_histogram"]) <= 256


@pytest.mark.timeout(120)
def test_load_256_clients_short():
    _load(5.0, 256)


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_load_256_clients_long():
    _load(60.0, 256)


class _FailingClock:
    """A clock that returns a non-number from its ``fail_after``-th reading on."""

    def __init__(self, fail_after: int) -> None:
        self.calls = 0
        self.fail_after = fail_after

    def __call__(self):
        self.calls += 1
        return time.perf_counter() if self.calls < self.fail_after else "not a number"


@pytest.mark.timeout(60)
def test_a_dying_server_thread_answers_every_waiter_and_reports_itself_dead(echo_model):
    clock = _FailingClock(fail_after=10**9)
    server = InferenceServer(echo_model, max_batch=64, max_wait_ms=NEVER_MS, clock=clock)
    a, b = server.connect(), server.connect(slots=4)
    queued = b.submit(np.stack([request(2, n) for n in range(3)]))  # waits for client a
    clock.fail_after = clock.calls + 1  # the next reading, the server's or a's, fails
    with pytest.raises(InferenceError, match="clock failed|dead"):
        a.submit(request(1, 0))
    with pytest.raises(InferenceError, match="inference server thread died: TypeError"):
        b.wait(queued)  # no timeout: it must return
    assert server.closed and server.error is not None and "TypeError" in server.error
    with pytest.raises(InferenceError, match="dead"):
        a.submit(request(1, 1))
    with pytest.raises(InferenceError, match="dead"):
        server.set_weights({"tag": np.array(1)})
    server.close()  # closing a dead server is fine


@pytest.mark.timeout(60)
def test_versions_clocks_and_values_are_checked_at_the_entry(echo_model):
    with pytest.raises(TypeError, match="clock: expected a callable returning finite seconds"):
        InferenceServer(echo_model, clock=lambda: float("nan"))
    with pytest.raises(ValueError, match="policy_version"):
        InferenceServer(echo_model, policy_version=2**63)
    policy = get_workload("CartPole-v1").make_policy()
    with InferenceServer(policy, max_wait_ms=1.0) as server:
        weights = policy.get_weights()
        with pytest.raises(ValueError, match=r"version: expected an int in \[0, "):
            server.set_weights(weights, 2**63)
        name = next(iter(weights))
        poisoned = dict(weights, **{name: np.full_like(weights[name], np.nan)})
        with pytest.raises(ValueError, match=rf"weights\['{name}'\]: expected finite"):
            server.set_weights(poisoned)
        with pytest.raises(TypeError, match="weights"):
            server.set_weights("weights")  # type: ignore[arg-type]
        client = server.connect()
        for bad in (np.full(4, np.nan, np.float32), np.array([0, np.inf, 0, 0], np.float32)):
            with pytest.raises(ValueError, match="obs: expected finite values"):
                client.submit(bad)
        with pytest.raises(ValueError, match="noise: expected finite"):
            client.submit(np.zeros(4, np.float32), np.full(1, np.nan))
        reply = client.infer(np.zeros(4, np.float32))  # the server serves on
        assert np.isfinite(reply.outputs["value"]).all()
        assert server.set_weights(weights, 2**63 - 1) == 2**63 - 1
        assert client.infer(np.zeros(4, np.float32)).policy_versions.tolist() == [2**63 - 1]


@pytest.mark.timeout(60)
def test_uniform_noise_outside_zero_one_is_refused_by_every_client():
    from fleetgym.agents.inference import ModelSpec, RemoteClient

    policy = get_workload("CartPole-v1").make_policy()  # categorical: the draw is a uniform
    obs = np.zeros(4, np.float32)
    with InferenceServer(policy, max_wait_ms=1.0) as server:
        assert server.spec.uniform_noise
        assert ModelSpec.from_json(server.spec.to_json()) == server.spec
        with server.connect() as local, RemoteClient(server.listen(), slots=4) as remote:
            assert remote.spec.uniform_noise
            for client in (local, remote):
                for bad in (5.0, 1.0, -0.25, -0.0 - 1e-300):
                    with pytest.raises(
                        ValueError, match=r"^noise: expected uniform draws in \[0, 1\), actual"
                    ) as caught:
                        client.submit(obs, np.full(1, bad))
                    assert repr(bad) in str(caught.value)
                with pytest.raises(ValueError, match=r"actual 5\.0 \(and 1 more\)"):
                    client.submit(np.zeros((3, 4), np.float32), [[0.5], [5.0], [7.0]])
                with pytest.raises(ValueError, match="^noise: expected finite"):
                    client.submit(obs, np.full(1, np.nan))
                for good in (0.0, 0.5, np.nextafter(1.0, 0.0)):
                    assert client.infer(obs, np.full(1, good)).outputs["action"].shape == (1,)
    gaussian = get_workload("Pendulum-v1").make_policy()  # normals: any finite draw
    with InferenceServer(gaussian, max_wait_ms=1.0) as server, server.connect() as client:
        assert not server.spec.uniform_noise
        client.infer(np.zeros(3, np.float32), np.full(1, 5.0))
    legacy = {k: v for k, v in server.spec.to_json().items() if k != "uniform_noise"}
    assert not ModelSpec.from_json(legacy).uniform_noise
    with pytest.raises(ValueError, match="^spec: expected a ModelSpec description"):
        ModelSpec.from_json({**server.spec.to_json(), "uniform_noise": "yes"})
