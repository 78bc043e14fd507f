"""The inference server: throughput and latency as ratios against references measured in
the same run (no absolute time is asserted).

* ``test_bench_server_vs_unbatched``: requests/s of the server answering 64 closed-loop
  clients (threads, no think time) over unbatched per-request inference (the same model,
  one request per forward, in one thread: what each actor does with its own policy copy),
  for the CartPole MLP and the Atari Nature CNN. Target: >= 10x for the CNN.
* ``test_bench_defaults_vs_grid``: the defaults (256 / 5 ms) at 16 clients over the best
  fixed setting of a small grid. Target: >= 0.9x.
* ``test_bench_auto_vs_fixed``: ``max_wait_ms="auto"`` over the best fixed deadline of the
  grid at 4, 16, 64 and 256 clients, and its p99 latency against ``latency_budget_ms``.
  Target: >= 0.95x at each, p99 within the budget.
* ``test_bench_fleet_server_vs_local``: env steps/s of a process fleet through the server
  over the same fleet with per-actor inference, on the heterogeneous CartPole workload
  (per-actor log-normal step delay) and on Atari.
* ``test_bench_busy_share_local_vs_server``: the share of wall time each actor's own
  policy copy spends in forward passes (per-actor inference) against the server's
  utilisation for the same actors (AcceRL's accelerator active time comparison).
* ``test_bench_finite_checks_vs_unchecked``: requests/s of the server with its NaN/inf
  checks of every request (``check_request`` of each submit, the stacked batch in
  ``_forward``) over the same server with those checks made no-ops, 16 closed-loop
  clients without think time (the request path at its busiest, where a check costs
  most). Target: >= 0.9x (asserted with ``--benchmark-enable`` only).

Clients of the grid and auto benchmarks are actors with heterogeneous env steps: each
sleeps a per-client log-normal time between requests (median ``THINK_MS``, sigma 1), so
requests do not arrive in lockstep and the deadline matters. Durations are short by
default (2 shared cores); the full run:
``FLEETGYM_BENCH_SECONDS=2 pytest benchmarks/test_bench_inference.py --benchmark-enable -s``.
"""

from __future__ import annotations

import os
import threading
import time

import numpy as np
import pytest

from fleetgym.agents.inference import InferenceServer
from fleetgym.agents.workloads import get_workload

#: Seconds each configuration is driven (``--benchmark-disable``: a smoke run).
SECONDS = float(os.environ.get("FLEETGYM_BENCH_SECONDS", "1.0"))
#: Median think time (env step) of the grid/auto clients, milliseconds.
THINK_MS = float(os.environ.get("FLEETGYM_BENCH_THINK_MS", "1.0"))
MLP, CNN = "CartPole-v1", "QbertNoFrameskip-v4"
GRID_BATCH = (32, 256)
GRID_WAIT_MS = (0.0, 1.0, 5.0, 20.0)
BUDGET_MS = 50.0


@pytest.fixture(scope="module", autouse=True)
def _one_torch_thread():
    """One torch thread: the server and the reference each get one core's worth."""
    import torch

    previous = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(previous)


def _seconds(benchmark) -> float:
    return SECONDS if benchmark.enabled else min(SECONDS, 0.3)


def _report(benchmark, title: str, **figures: float) -> None:
    benchmark.extra_info.update(figures)
    print(f"\n{title}: " + ", ".join(f"{k}={v:.4g}" for k, v in figures.items()))


def _drive(server: InferenceServer, clients: int, seconds: float, think_ms: float) -> dict:
    """``clients`` closed-loop threads for ``seconds``; the server's metrics of that window."""
    spec = server.spec
    obs = np.zeros(spec.obs.shape, np.dtype(spec.obs.dtype))
    noise = np.full(spec.noise.shape, 0.5)
    rng = np.random.default_rng(0)
    thinks = think_ms / 1e3 * np.exp(rng.standard_normal(clients)) if think_ms > 0 else None
    stop = threading.Event()
    ready = threading.Barrier(clients + 1)

    def actor(i: int) -> None:
        with server.connect(slots=2) as client:
            ready.wait()
            while not stop.is_set():
                client.infer(obs, noise)
                if thinks is not None:
                    time.sleep(thinks[i])

    threads = [threading.Thread(target=actor, args=(i,), daemon=True) for i in range(clients)]
    for t in threads:
        t.start()
    ready.wait()
    time.sleep(min(0.2, seconds / 3))  # warm-up: the auto wait settles, threads start
    server.reset_metrics()
    time.sleep(seconds)
    metrics = server.metrics()
    stop.set()
    for t in threads:
        t.join()
    return metrics


def _unbatched_rate(workload: str, seconds: float) -> float:
    """Requests/s of one-request forward passes in one thread (per-actor inference)."""
    from fleetgym.agents.inference import ActorCriticModel

    model = ActorCriticModel(get_workload(workload).make_policy())
    obs = np.zeros((1, *model.spec.obs.shape), np.dtype(model.spec.obs.dtype))
    noise = np.full((1, *model.spec.noise.shape), 0.5)
    model.forward(obs, noise)
    count, started = 0, time.perf_counter()
    while time.perf_counter() - started < seconds:
        model.forward(obs, noise)
        count += 1
    return count / (time.perf_counter() - started)


@pytest.mark.timeout(600)
@pytest.mark.parametrize("workload", [MLP, CNN])
def test_bench_server_vs_unbatched(benchmark, workload):
    seconds = _seconds(benchmark)
    if workload == CNN and benchmark.enabled:
        seconds = max(seconds, 3.0)  # CNN batches take tens of ms: a longer window
    reference = _unbatched_rate(workload, seconds)
    with InferenceServer(get_workload(workload).make_policy()) as server:
        metrics = benchmark.pedantic(
            _drive, args=(server, 64, seconds, 0.0), rounds=1, iterations=1
        )
    _report(
        benchmark,
        f"server vs unbatched, 64 clients, {workload}",
        server_requests_per_s=metrics["requests_per_s"],
        unbatched_requests_per_s=reference,
        ratio=metrics["requests_per_s"] / reference,
        mean_batch=metrics["mean_batch"],
        utilisation=metrics["utilisation"],
        latency_ms_p99=metrics["latency_ms_p99"],
    )


def _compare(
    configs: dict[str, dict], clients: int, seconds: float, reps: int
) -> dict[str, dict[str, float]]:
    """Each server configuration driven ``reps`` times, interleaved (A B C A B C ...) so
    that load drift on a shared machine hits all alike; medians of the figures."""
    policy = get_workload(MLP).make_policy()
    runs: dict[str, list[dict]] = {label: [] for label in configs}
    for _ in range(reps):
        for label, options in configs.items():
            with InferenceServer(policy, **options) as server:
                runs[label].append(_drive(server, clients, seconds, THINK_MS))
    keys = ("requests_per_s", "latency_ms_p99", "mean_batch", "wait_ms", "utilisation")
    return {
        label: {key: float(np.median([m[key] for m in ms])) for key in keys}
        for label, ms in runs.items()
    }


def _reps(benchmark) -> int:
    return 3 if benchmark.enabled else 1


@pytest.mark.timeout(900)
def test_bench_defaults_vs_grid(benchmark):
    configs = {
        f"{b}/{w:g}": {"max_batch": b, "max_wait_ms": w} for b in GRID_BATCH for w in GRID_WAIT_MS
    }
    configs["defaults"] = {}
    figures = benchmark.pedantic(
        _compare, args=(configs, 16, _seconds(benchmark), _reps(benchmark)), rounds=1, iterations=1
    )
    defaults = figures.pop("defaults")
    best = max(figures, key=lambda k: figures[k]["requests_per_s"])
    _report(
        benchmark,
        f"defaults (256 / 5 ms) vs best of grid {GRID_BATCH} x {GRID_WAIT_MS} ms, 16 clients "
        f"(best: {best})",
        defaults_requests_per_s=defaults["requests_per_s"],
        best_requests_per_s=figures[best]["requests_per_s"],
        ratio=defaults["requests_per_s"] / figures[best]["requests_per_s"],
    )


@pytest.mark.timeout(900)
@pytest.mark.parametrize("clients", [4, 16, 64, 256])
def test_bench_auto_vs_fixed(benchmark, clients):
    configs = {f"{w:g} ms": {"max_wait_ms": w} for w in GRID_WAIT_MS}
    configs["auto"] = {"max_wait_ms": "auto", "latency_budget_ms": BUDGET_MS}
    figures = benchmark.pedantic(
        _compare,
        args=(configs, clients, _seconds(benchmark), _reps(benchmark)),
        rounds=1,
        iterations=1,
    )
    auto = figures.pop("auto")
    best = max(figures, key=lambda k: figures[k]["requests_per_s"])
    _report(
        benchmark,
        f"auto vs best fixed deadline of {GRID_WAIT_MS} ms, {clients} clients (best: {best})",
        auto_requests_per_s=auto["requests_per_s"],
        best_fixed_requests_per_s=figures[best]["requests_per_s"],
        ratio=auto["requests_per_s"] / figures[best]["requests_per_s"],
        auto_wait_ms=auto["wait_ms"],
        auto_latency_ms_p99=auto["latency_ms_p99"],
        best_fixed_latency_ms_p99=figures[best]["latency_ms_p99"],
        budget_ms=BUDGET_MS,
        auto_mean_batch=auto["mean_batch"],
    )


def _fleet_rate(workload, actors: int, steps: int, repeats: int, **options) -> tuple[float, dict]:
    from fleetgym.agents.fleet import make_fleet

    weights = workload.make_policy().get_weights()
    with make_fleet(workload, "process", max_actors=actors, seed=0, **options) as fleet:
        fleet.prewarm(actors)
        fleet.run_round(weights, actors, 8)  # warm-up: first requests, first allocations
        if hasattr(fleet, "metrics"):
            fleet.server.reset_metrics()
        best = float("inf")
        for _ in range(repeats):
            started = time.perf_counter()
            assert fleet.run_round(weights, actors, steps).complete
            best = min(best, time.perf_counter() - started)
        metrics = fleet.metrics() if hasattr(fleet, "metrics") else {}
    return actors * steps / best, metrics


@pytest.mark.timeout(900)
@pytest.mark.parametrize("workload_name", ["heterogeneous-CartPole", CNN])
def test_bench_fleet_server_vs_local(benchmark, workload_name):
    repeats = 3 if benchmark.enabled else 1
    if workload_name == CNN and not benchmark.enabled:
        pytest.skip("Atari fleets start slowly: measured with --benchmark-enable only")
    if workload_name == CNN:
        workload, actors, steps, group = get_workload(CNN), 4, 32, 2
    else:
        workload = get_workload(MLP).with_overrides(step_delay_s=0.001, step_delay_sigma=0.5)
        actors, steps, group = 8, 128 if benchmark.enabled else 32, 4
    local, _ = _fleet_rate(workload, actors, steps, repeats)
    served, metrics = _fleet_rate(workload, actors, steps, repeats, inference="server")
    grouped_local, _ = _fleet_rate(workload, actors, steps, repeats, actors_per_worker=group)
    grouped, grouped_metrics = benchmark.pedantic(
        _fleet_rate,
        args=(workload, actors, steps, repeats),
        kwargs={"inference": "server", "actors_per_worker": group},
        rounds=1,
        iterations=1,
    )
    _report(
        benchmark,
        f"process fleet through the server vs per-actor inference, {workload_name}, "
        f"{actors} actors x {steps} steps",
        local_steps_per_s=local,
        served_steps_per_s=served,
        ratio=served / local,
        served_mean_batch=metrics.get("mean_batch", 0.0),
        served_utilisation=metrics.get("utilisation", 0.0),
        grouped_local_steps_per_s=grouped_local,
        grouped_served_steps_per_s=grouped,
        grouped_ratio=grouped / grouped_local,
        grouped_served_mean_batch=grouped_metrics.get("mean_batch", 0.0),
    )


def _time_forwards(monkeypatch) -> list[float]:
    """Count the seconds spent in policy forward passes (outermost calls only) in ``[0]``:
    the numpy MLP snapshot's and the torch policy's methods a rollout calls."""
    from fleetgym.agents.policies import ActorCriticPolicy, NumpyActorCritic

    spent, depth = [0.0], threading.local()

    def timed(original):
        def wrapper(self, *args, **kwargs):
            outer = not getattr(depth, "n", 0)
            depth.n = getattr(depth, "n", 0) + 1
            started = time.perf_counter()
            try:
                return original(self, *args, **kwargs)
            finally:
                depth.n -= 1
                if outer:
                    spent[0] += time.perf_counter() - started

        return wrapper

    for cls, names in (
        (NumpyActorCritic, ("forward", "sample", "value")),
        (ActorCriticPolicy, ("forward", "sample_from", "log_prob", "value")),
    ):
        for name in names:
            monkeypatch.setattr(cls, name, timed(getattr(cls, name)))
    return spent


@pytest.mark.timeout(900)
@pytest.mark.parametrize("workload_name", ["heterogeneous-CartPole", CNN])
def test_bench_busy_share_local_vs_server(benchmark, monkeypatch, workload_name):
    """AcceRL's comparison (accelerator active time): the share of wall time each actor's
    own policy copy spends in forward passes (per-actor inference, each actor alone on a
    core), against the server's utilisation when the same actors act through it."""
    from fleetgym.agents.rollout import RolloutWorker

    if workload_name == CNN and not benchmark.enabled:
        pytest.skip("Atari fleets start slowly: measured with --benchmark-enable only")
    if workload_name == CNN:
        workload, actors, steps = get_workload(CNN), 4, 32
    else:
        workload = get_workload(MLP).with_overrides(step_delay_s=0.001, step_delay_sigma=0.5)
        actors, steps = 8, 128 if benchmark.enabled else 16
    weights = workload.make_policy().get_weights()
    served_rate, metrics = _fleet_rate(workload, actors, steps, 1, inference="server")
    spent = _time_forwards(monkeypatch)
    shares, walls = [], []
    for slot in range(actors):
        worker = RolloutWorker(workload, slot, 0)
        worker.rollout(weights, 4, 0)  # warm-up
        spent[0] = 0.0
        started = time.perf_counter()
        worker.rollout(weights, steps, 0)
        walls.append(time.perf_counter() - started)
        shares.append(spent[0] / walls[-1])
        worker.close()
    benchmark.pedantic(lambda: None, rounds=1, iterations=1)
    _report(
        benchmark,
        f"forward-pass share of wall time, {workload_name}, {actors} actors x {steps} steps",
        local_busy_share_mean=float(np.mean(shares)),
        local_busy_share_min=float(np.min(shares)),
        local_busy_share_max=float(np.max(shares)),
        local_mean_batch=1.0,
        local_steps_per_s_per_actor=steps / float(np.mean(walls)),
        server_utilisation=metrics["utilisation"],
        server_mean_batch=metrics["mean_batch"],
        served_fleet_steps_per_s=served_rate,
    )
    assert all(0.0 < share < 1.0 for share in shares)


def _checked_vs_unchecked(monkeypatch, clients: int, seconds: float, reps: int) -> dict:
    """Requests/s of the server with and without its finite checks (its one NaN/inf test,
    ``checks.all_finite``, replaced by a no-op), interleaved (checked, unchecked, checked,
    ...) so that load drift hits both alike; medians."""
    from fleetgym.agents.inference import checks

    policy = get_workload(MLP).make_policy()
    rates: dict[str, list[float]] = {"checked": [], "unchecked": []}
    for _ in range(reps):
        for label in rates:
            with monkeypatch.context() as patch:
                if label == "unchecked":
                    patch.setattr(checks, "all_finite", lambda array: True)
                with InferenceServer(policy) as server:
                    if label == "unchecked":  # the reference really runs without the checks
                        with server.connect() as client:
                            client.infer(np.full(server.spec.obs.shape, np.nan, np.float32))
                    rates[label].append(_drive(server, clients, seconds, 0.0)["requests_per_s"])
    return {label: float(np.median(r)) for label, r in rates.items()}


@pytest.mark.timeout(600)
def test_bench_finite_checks_vs_unchecked(benchmark, monkeypatch):
    clients = 16
    figures = benchmark.pedantic(
        _checked_vs_unchecked,
        args=(monkeypatch, clients, _seconds(benchmark), 5 if benchmark.enabled else 1),
        rounds=1,
        iterations=1,
    )
    ratio = figures["checked"] / figures["unchecked"]
    _report(
        benchmark,
        f"server with NaN/inf request checks vs without, {clients} clients, no think time",
        checked_requests_per_s=figures["checked"],
        unchecked_requests_per_s=figures["unchecked"],
        ratio=ratio,
    )
    if benchmark.enabled:
        assert ratio >= 0.9
