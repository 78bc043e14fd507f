"""``fleetgym train --mode async --log --plot``: one CSV row and one curve point per update."""

from __future__ import annotations

import csv

import pytest

from fleetgym.cli import main


@pytest.mark.timeout(180)
def test_train_async_writes_the_log_and_the_plot(tmp_path, capsys):
    log, plot = tmp_path / "runs" / "log.csv", tmp_path / "runs" / "curves.png"
    argv = ["train", "--mode", "async", "--actors", "2", "--steps-per-actor", "16"]
    argv += ["--max-steps", "64", "--no-progress", "--out", str(tmp_path / "runs")]
    argv += ["--log", "--plot"]
    assert main(argv) == 1  # 64 steps do not reach 475
    out = capsys.readouterr().out
    assert f"wrote the per-update log to {log}" in out and f"learning curves to {plot}" in out
    with log.open() as fh:
        rows = list(csv.DictReader(fh))
    assert [int(r["update"]) for r in rows] == [0, 1]
    assert {"total_steps", "wall_s", "mean_return", "lag_p99", "learner_utilisation"} <= set(
        rows[0]
    )
    assert plot.stat().st_size > 1000


def test_live_log_writes_each_update_as_it_comes_and_rewrites_a_resumed_history(tmp_path):
    from fleetgym.agents.learners.asynchronous.config import AsyncPPOConfig, AsyncTopology
    from fleetgym.agents.learners.asynchronous.trainer import AsyncPPO
    from fleetgym.experiments.async_train import LiveLog

    model = AsyncPPO(
        "CartPole-v1",
        topology=AsyncTopology(n_actors=1, steps_per_actor=16, concurrent=False),
        algo=AsyncPPOConfig(hyperparameters={"epochs": 1, "minibatch_size": 16}),
    )
    path = tmp_path / "log.csv"
    counts = []

    def rows():
        with path.open(newline="") as fh:
            return [int(r["update"]) for r in csv.DictReader(fh)]

    live = LiveLog(path, model)

    def callback(record):
        live(record)
        counts.append(rows())

    model.learn(16 * 3, callback)
    live.close()
    assert counts == [[0], [0, 1], [0, 1, 2]]  # on disk after each update
    # A resumed run's first update rewrites the file from its history: a killed run's rows
    # after the checkpoint (here the third) are not kept twice.
    model.history = model.history[:2]
    resumed = LiveLog(path, model)
    resumed(model.history[-1])
    resumed.close()
    assert rows() == [0, 1]


def test_a_resumed_live_log_streams_the_earlier_rows_without_holding_them(tmp_path):
    import tracemalloc

    from fleetgym.experiments.async_train import LiveLog

    path = tmp_path / "log.csv"
    fields = ["update", "total_steps", *(f"metric_{i}" for i in range(12))]
    with path.open("w", newline="") as file:
        writer = csv.writer(file)
        writer.writerow(fields)
        for i in range(20_000):
            writer.writerow([i, 256 * (i + 1), *[f"{0.123456789 * i:.9f}"] * 12])
    copy = tmp_path / "copy.csv"
    with copy.open("w", newline="") as out:
        tracemalloc.start()
        try:
            LiveLog(path, None, resumed=True)._copy_earlier_rows(15_000, out, ["other"])
            _, peak = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
    with copy.open(newline="") as file:
        rows = list(csv.DictReader(file))
    assert [int(r["update"]) for r in rows] == list(range(15_000))
    assert list(rows[0]) == fields  # the file's own columns
    # Held as dicts, 15,000 rows of 14 fields take about 20 MiB (about 1.3 KiB a row); the
    # copy holds one row at a time (and the files' buffers), so its peak stays under 1 MiB.
    assert peak < 1 << 20
