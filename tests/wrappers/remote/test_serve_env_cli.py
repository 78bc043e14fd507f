"""``fleetgym serve-env`` and ``fleetgym profiles --netem``, and the long soak (slow)."""

from __future__ import annotations

import json
import os
import resource
import signal
import subprocess
import sys
import threading
import time

import gymnasium as gym
import pytest

import fleetgym  # noqa: F401
from fleetgym.cli import main
from fleetgym.wrappers.remote import RemoteEnvServer


@pytest.mark.timeout(90)
def test_serve_env_subprocess_serves_a_client(tmp_path):
    port_file = tmp_path / "port"
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "fleetgym",
            "serve-env",
            "--env-id",
            "CartPole-v1",
            "--env-kwarg",
            "max_episode_steps=20",
            "--bind",
            "127.0.0.1:0",
            "--port-file",
            str(port_file),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        end = time.monotonic() + 60
        while not (port_file.exists() and port_file.read_text().strip()):
            assert proc.poll() is None, proc.communicate()
            assert time.monotonic() < end
            time.sleep(0.1)
        port = int(port_file.read_text())
        env = gym.make("fleetgym/Remote-v0", address=f"127.0.0.1:{port}")
        try:
            env.reset(seed=0)
            for t in range(20):
                *_, term, trunc, _ = env.step(t % 2)
                if term or trunc:
                    break
            assert trunc or term  # max_episode_steps=20 reached the server's gym.make
        finally:
            env.close()
    finally:
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


@pytest.mark.timeout(90)
def test_serve_env_measure_json(capsys):
    assert (
        main(
            [
                "serve-env",
                "--env-id",
                "CartPole-v1",
                "--profile",
                "wifi-normal",
                "--step-ms",
                "10",
                "--measure",
                "60",
                "--json",
            ]
        )
        == 0
    )
    rep = json.loads(capsys.readouterr().out)
    assert rep["profile"] == "wifi-normal" and rep["steps"] == 60
    for direction in ("uplink", "downlink"):
        assert set(rep[direction]) == {"socket", "shim", "within"}
        assert rep[direction]["socket"]["packets"] == 60
    assert rep["round_trip_ms"]["udp"]["p50"] > 0


def test_serve_env_bad_arguments(capsys):
    assert main(["serve-env", "--env-id", "CartPole-v1", "--bind", "0.0.0.0:0"]) == 2
    assert "secret" in capsys.readouterr().err
    assert main(["serve-env", "--env-id", "CartPole-v1", "--profile", "nope"]) == 2


def test_serve_env_fallback(capsys):
    from fleetgym.experiments.serve_env import load_fallback

    assert load_fallback(None) is None
    assert load_fallback("os.path:join") is os.path.join  # a dotted module, a plain name
    assert load_fallback("os:path.join") is os.path.join  # a dotted name
    base = ["serve-env", "--env-id", "CartPole-v1", "--fallback"]
    for spec, words in [
        ("no-colon", "expected MODULE:NAME"),
        (":name", "expected MODULE:NAME"),
        ("no_such_module_xyz:f", "importable"),
        ("os:no_such_name", "importable"),
        ("os:sep", "callable"),
    ]:
        assert main([*base, spec]) == 2, spec
        err = capsys.readouterr().err
        assert "--fallback" in err and words in err, err
    # Accepted, and given to the server: a --measure run takes it (its client asks for none).
    assert main([*base, "os.path:join", "--step-ms", "10", "--measure", "5", "--json"]) == 0


def test_profiles_netem(capsys):
    assert main(["profiles", "--netem", "wifi-normal"]) == 0
    out = capsys.readouterr().out
    assert "netem limit 100000 delay 30ms 10ms distribution normal loss 2%" in out
    assert main(["profiles", "--netem", "trace-wifi-office"]) == 2


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_soak_eight_clients_sixty_seconds():
    """8 clients for 60 s on loopback: nothing lost beyond the profile's own loss, memory flat."""
    srv = RemoteEnvServer("CartPole-v1", profile="ethernet").start()
    address = f"{srv.address[0]}:{srv.address[1]}"
    stop = time.monotonic() + 60
    counts, errors, rss = {}, [], []

    def client(i: int) -> None:
        try:
            env = gym.make("fleetgym/Remote-v0", address=address)
            try:
                env.reset(seed=i)
                n = ages = 0
                while time.monotonic() < stop:
                    *_, term, trunc, info = env.step(i % 2)
                    n += 1
                    ages += info["obs_age_steps"] > 1 or info["lost_packets"] > 0
                    if term or trunc:
                        env.reset()
                counts[i] = (n, ages)
            finally:
                env.close()
        except Exception as exc:
            errors.append(exc)

    threads = [threading.Thread(target=client, args=(i,)) for i in range(8)]
    for th in threads:
        th.start()
    while any(th.is_alive() for th in threads):
        rss.append(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)
        time.sleep(5)
    srv.stop()
    assert not errors
    total = sum(n for n, _ in counts.values())
    assert total > 8 * 1000  # far from the 8 * 3000 ceiling only under heavy load
    # ethernet loses nothing: every observation arrives, at most a tick late.
    assert sum(a for _, a in counts.values()) <= 0.01 * total
    # Peak memory grows by less than 20 MB between the first and the last minute's samples.
    assert rss[-1] - rss[1] < 20_000 if os.name == "posix" else True
