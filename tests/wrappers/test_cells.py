"""Simulated Wi-Fi cells (ns-3) as channels: configuration, cache, replay, shims, profiles.

The configuration and the missing-extra error are tested everywhere; what runs ns-3 skips
without the ``ns3`` extra (the core-only CI step has none). The simulated cell is tiny (two
stations, 4 s) and shared through one cache folder per module.
"""

from __future__ import annotations

import importlib.util
import json

import gymnasium as gym
import numpy as np
import pytest

from fleetgym.errors import DependencyNotInstalled
from fleetgym.wrappers import NetworkShimWrapper
from fleetgym.wrappers.cells import CellChannel, LteCell, WifiCell, cell_from_dict, simulate_cells
from fleetgym.wrappers.cells import simulate as cell_sim
from fleetgym.wrappers.profiles import (
    ProfileFileError,
    cell_profile,
    get_profile,
    load_profile_file,
    save_profile_file,
)

HAS_NS3 = importlib.util.find_spec("ns3") is not None
needs_ns3 = pytest.mark.skipif(
    not HAS_NS3, reason='needs ns-3\'s bindings: pip install "fleetgym[ns3]"'
)
CELL = WifiCell(stations=2, background_mbps=1.0, seconds=4.0)


@pytest.fixture(scope="module")
def cache(tmp_path_factory):
    """One cache folder for the module's simulations (FLEETGYM_CACHE_DIR)."""
    folder = tmp_path_factory.mktemp("ns3-cache")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv(cell_sim.CACHE_ENV, str(folder))
        mp.setattr(cell_sim, "_MEMORY", {})
        yield folder / "ns3"


# --------------------------------------------------------------------------------------
# The configuration: plain data, no ns-3 needed
# --------------------------------------------------------------------------------------
def test_a_cell_round_trips_through_plain_data_and_its_key_is_its_content():
    data = json.loads(json.dumps(CELL.to_dict()))
    assert cell_from_dict(data) == CELL and data["type"] == "wifi"
    assert CELL.key() == WifiCell(2, background_mbps=1.0, seconds=4.0).key()
    assert CELL.key() != WifiCell(2, background_mbps=1.0, seconds=4.0, seed=1).key()
    assert CELL.with_step(20.0).step_ms == 20.0 and CELL.with_step(20.0).packets() == 200
    fixed = WifiCell(step_ms=50.0)
    assert fixed.with_step(20.0) is fixed


@pytest.mark.parametrize(
    ("kwargs", "error", "message"),
    [
        ({"stations": 0}, ValueError, "stations: expected an int in [1, 128]"),
        ({"stations": 2.0}, TypeError, "stations: expected an int"),
        ({"standard": "802.11b"}, ValueError, "standard: expected one of"),
        ({"distance_m": 0.0}, ValueError, "distance_m: expected a finite number > 0"),
        ({"distance_m": float("nan")}, ValueError, "distance_m"),
        ({"mobility": "fly"}, ValueError, "mobility: expected one of"),
        ({"background_mbps": -1}, ValueError, "background_mbps"),
        ({"obs_bytes": 11}, ValueError, "obs_bytes: expected an int in [12, 65000]"),
        ({"step_ms": 0.5}, ValueError, "step_ms"),
        ({"seconds": 0.5}, ValueError, "seconds"),
        ({"seed": -1}, ValueError, "seed"),
        ({"seed": True}, TypeError, "seed: expected an int"),
    ],
)
def test_bad_cell_arguments_name_the_argument(kwargs, error, message):
    with pytest.raises(error, match=message.replace("[", r"\[").replace("]", r"\]")):
        WifiCell(**kwargs)


def test_an_lte_cell_has_its_own_fields_and_ranges():
    cell = LteCell(stations=3, bandwidth_rb=50)
    assert cell_from_dict(json.loads(json.dumps(cell.to_dict()))) == cell
    assert cell.to_dict()["type"] == "lte" and cell.key() != WifiCell(stations=3).key()
    assert LteCell(distance_m=5000.0).distance_m == 5000.0
    with pytest.raises(ValueError, match=r"bandwidth_rb: expected one of \(6, 15, 25"):
        LteCell(bandwidth_rb=24)
    with pytest.raises(TypeError, match="bandwidth_rb"):
        LteCell(bandwidth_rb="25")
    with pytest.raises(ValueError, match="backhaul_ms"):
        LteCell(backhaul_ms=-1.0)
    with pytest.raises(ValueError, match=r"unknown keys \['standard'\]"):
        cell_from_dict({"type": "lte", "standard": "802.11n"})


def test_cell_data_with_an_unknown_type_or_key_is_refused():
    with pytest.raises(ValueError, match=r"cell.type: expected one of \['wifi', 'lte'\]"):
        cell_from_dict({"type": "nr"})
    with pytest.raises(ValueError, match=r"unknown keys \['speed'\]"):
        cell_from_dict({"type": "wifi", "speed": 3})
    with pytest.raises(ValueError, match="cell.stations"):
        cell_from_dict({"type": "wifi", "stations": 0})


def test_a_profile_file_with_a_cell_and_channels_is_refused(tmp_path):
    path = tmp_path / "both.json"
    path.write_text(
        json.dumps(
            {
                "fleetgym_profile": 1,
                "cell": CELL.to_dict(),
                "uplink": {"type": "gaussian", "mean_ms": 1.0, "std_ms": 0.0},
            }
        )
    )
    with pytest.raises(ProfileFileError, match='either a "cell" or "uplink"'):
        load_profile_file(path)
    path.write_text(json.dumps({"fleetgym_profile": 1, "cell": {"type": "wifi", "seed": -2}}))
    with pytest.raises(ProfileFileError, match="cell.seed"):
        load_profile_file(path)


def test_without_the_extra_a_cell_profile_raises_the_install_error(tmp_path, monkeypatch):
    path = tmp_path / "cell.json"
    path.write_text(json.dumps({"fleetgym_profile": 1, "cell": CELL.to_dict()}))
    real = importlib.util.find_spec
    monkeypatch.setattr(
        cell_sim.importlib.util,
        "find_spec",
        lambda name, *a: None if name == "ns3" else real(name, *a),
    )
    for make in (
        lambda: load_profile_file(path),
        lambda: gym.make("fleetgym/NetShim-v0", env_id="CartPole-v1", profile=str(path)),
        lambda: cell_profile(CELL),
        lambda: simulate_cells([CELL.with_step(20.0)], cache=False),
    ):
        with pytest.raises(DependencyNotInstalled, match=r'pip install "fleetgym\[ns3\]"'):
            make()


def test_profiles_simulate_without_the_extra_is_one_line_naming_it(tmp_path, monkeypatch, capsys):
    from fleetgym.cli import main

    real = importlib.util.find_spec
    monkeypatch.setattr(
        cell_sim.importlib.util,
        "find_spec",
        lambda name, *a: None if name == "ns3" else real(name, *a),
    )
    assert main(["profiles", "simulate", "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and 'pip install "fleetgym[ns3]"' in err[0], err
    assert not (tmp_path / "out").exists()


@pytest.mark.skipif(HAS_NS3, reason="checks the core install, which has no ns-3")
def test_the_core_install_names_the_ns3_extra(tmp_path):
    path = tmp_path / "cell.json"
    path.write_text(json.dumps({"fleetgym_profile": 1, "cell": CELL.to_dict()}))
    with pytest.raises(DependencyNotInstalled, match=r"fleetgym\[ns3\]"):
        get_profile(str(path))


# --------------------------------------------------------------------------------------
# With ns-3: the simulation, its cache and the replay
# --------------------------------------------------------------------------------------
@needs_ns3
def test_a_simulated_cell_delivers_every_stations_packets_both_ways(cache):
    run = simulate_cells([CELL.with_step(20.0)])[0]
    assert run.up.shape == run.down.shape == (2, 200)
    delivered = np.isfinite(run.up).mean(), np.isfinite(run.down).mean()
    # An idle two-station cell at 10 m loses nothing.
    assert delivered == (1.0, 1.0)
    # One-way delay: more than the air time of 200 bytes, well under a control period.
    assert 0.05 < np.median(run.up) < 5.0 and run.up.max() < 20.0
    assert run.meta["packets"] == 200 and run.meta["ns3_version"]
    assert list(cache.glob("*.npz")), "the run was not cached"


@needs_ns3
def test_a_cells_packets_do_not_depend_on_the_cells_simulated_before_it(cache):
    lte = LteCell(stations=2, seconds=3.0, step_ms=20.0)
    wifi = CELL.with_step(20.0)
    lte_first, wifi_second = simulate_cells([lte, wifi], cache=False)
    wifi_first, lte_second = simulate_cells([wifi, lte], cache=False)
    assert np.array_equal(wifi_first.up, wifi_second.up)
    assert np.array_equal(lte_first.down, lte_second.down)
    # An idle LTE cell: every packet arrives; the uplink waits for its grant (several ms),
    # the downlink needs no request.
    assert np.isfinite(lte_first.up).all() and np.isfinite(lte_first.down).all()
    assert np.median(lte_first.up) > np.median(lte_first.down) > 1.0


@needs_ns3
def test_the_cache_replays_the_simulation_bit_for_bit_and_a_new_seed_differs(cache):
    first = simulate_cells([CELL.with_step(20.0)])[0]
    cell_sim._MEMORY.clear()
    from_disk = simulate_cells([CELL.with_step(20.0)])[0]
    assert np.array_equal(first.up, from_disk.up) and np.array_equal(first.down, from_disk.down)
    other = WifiCell(stations=2, background_mbps=1.0, seconds=4.0, seed=1).with_step(20.0)
    again, reseeded = simulate_cells([CELL.with_step(20.0), other], cache=False)
    # ns-3 is deterministic for a seed: simulated afresh, the same delays to the bit.
    assert np.array_equal(again.up, first.up) and np.array_equal(again.down, first.down)
    assert not np.array_equal(reseeded.up, first.up)


@needs_ns3
def test_both_directions_replay_one_station_from_one_offset(cache):
    run = simulate_cells([CELL.with_step(20.0)])[0]
    profile = cell_profile(CELL)
    for slot in (0, 1, 2):
        up, down = profile.uplink.paired_samplers(
            profile.downlink, np.random.default_rng(7), np.random.default_rng(8), 20.0, slot
        )
        a, b = up.next(300), down.next(300)
        station = slot % 2
        # The offset (from the uplink's generator) is shared: find it in the station's rows.
        start = int(np.flatnonzero(run.up[station] == a[0])[0])
        k = (start + np.arange(300)) % 200
        assert np.array_equal(a, run.up[station, k]) and np.array_equal(b, run.down[station, k])
    # A cell channel on its own draws its own offset, like a trace.
    alone = CellChannel(CELL, "downlink", station=1).sample_delays(np.random.default_rng(1), 5)
    assert np.isin(alone, run.down[1]).all()


@needs_ns3
def test_mode_2_with_a_cell_replays_bit_identically_for_a_seed(cache, tmp_path):
    path = save_profile_file(cell_profile(CELL, "lab"), tmp_path / "lab.json")

    def episode(seed):
        env = gym.make("fleetgym/NetShim-v0", env_id="CartPole-v1", profile=str(path))
        obs, _ = env.reset(seed=seed)
        rows = [obs]
        ages = []
        for t in range(150):
            obs, reward, term, trunc, info = env.step(t % 2)
            rows.append(obs)
            ages.append((info["obs_age_steps"], info["action_age_steps"]))
            if term or trunc:
                obs, _ = env.reset()
        env.close()
        return np.array(rows), ages

    a, ages_a = episode(3)
    b, ages_b = episode(3)
    assert np.array_equal(a, b) and ages_a == ages_b
    assert load_profile_file(path).uplink == CellChannel(CELL, "uplink")


@needs_ns3
def test_a_vector_shim_gives_each_sub_env_its_own_station(cache):
    from fleetgym.wrappers import NetworkShimVectorWrapper

    vec = gym.make_vec("CartPole-v1", num_envs=3, vectorization_mode="sync")
    env = NetworkShimVectorWrapper(vec, profile=cell_profile(CELL), step_ms=20.0)
    env.reset(seed=0)
    samplers = env._links.samplers
    run = simulate_cells([CELL.with_step(20.0)])[0]
    # Rows 0..2 are the downlinks of sub-envs 0..2, rows 3..5 their uplinks. Sub-env i
    # replays station i mod 2, and all start on the vector's clock: the same column.
    columns = []
    for i in range(3):
        draw = samplers[3 + i].next(50)
        station = run.up[i % 2]
        start = int(np.flatnonzero(station == draw[0])[0])
        assert np.array_equal(draw, station[(start + np.arange(50)) % 200]), i
        columns.append(start)
    assert len(set(columns)) == 1, columns
    for _ in range(20):
        env.step(env.action_space.sample())
    env.close()

    # The clock comes from the seed: another seed, another stretch; the same, the same.
    def first_column(seed):
        env = NetworkShimVectorWrapper(
            gym.make_vec("CartPole-v1", num_envs=2, vectorization_mode="sync"),
            profile=cell_profile(CELL),
            step_ms=20.0,
        )
        env.reset(seed=seed)
        draw = env._links.samplers[2].next(1)
        env.close()
        return int(np.flatnonzero(run.up[0] == draw[0])[0])

    assert first_column(0) == columns[0] and first_column(5) != first_column(0)


@needs_ns3
def test_a_sub_env_stays_on_the_vectors_clock_across_its_episodes(cache):
    from fleetgym.wrappers import NetworkShimVectorWrapper

    vec = gym.make_vec("CartPole-v1", num_envs=2, vectorization_mode="sync")
    env = NetworkShimVectorWrapper(vec, profile=cell_profile(CELL), step_ms=20.0)
    env.reset(seed=0)
    period = CELL.with_step(20.0).packets() * 20.0
    base = env._links.samplers[2]._offset  # sub-env 0's uplink, started at tick 0
    seen = {id(env._links.samplers[2]), id(env._links.samplers[3])}
    fresh = []
    for _ in range(200):  # always pushing left: episodes end within ~10 ticks
        env.step(np.zeros(2, dtype=np.int64))
        for row in (2, 3):
            sampler = env._links.samplers[row]
            if id(sampler) not in seen:
                seen.add(id(sampler))
                fresh.append((env._g, sampler._offset))
    env.close()
    assert len(fresh) >= 10
    for tick, offset in fresh:
        # A new episode's first packet leaves at the tick after the reset: on the clock.
        assert offset == pytest.approx((base + tick * 20.0) % period, abs=1e-6), tick


@needs_ns3
def test_a_scalar_shim_with_explicit_cell_channels_runs(cache):
    env = NetworkShimWrapper(
        gym.make("CartPole-v1"),
        uplink=CellChannel(CELL, "uplink"),
        downlink=CellChannel(CELL, "downlink"),
    )
    env.reset(seed=1)
    for _ in range(10):
        env.step(0)
    assert env.profile.uplink.describe().startswith("ns-3 802.11n cell: 2 station(s)")
