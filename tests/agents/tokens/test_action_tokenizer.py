"""ActionTokenizer: round trip within half a bin, quantile fitting, vocabulary windows, bad input."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest

from fleetgym.agents.tokens import ActionTokenizer

# Relative slack for float64 rounding in the round-trip bound: a handful of ulps of the range.
ULPS = 16 * np.finfo(np.float64).eps


@pytest.mark.parametrize("num_bins", [2, 7, 256])
@pytest.mark.parametrize("vocab_size", [None, 32000])
def test_round_trip_within_half_a_bin_including_clipped(num_bins, vocab_size):
    rng = np.random.default_rng(0)
    low, high = np.array([-1.0, 0.0, -5.0]), np.array([1.0, 0.5, 20.0])
    tok = ActionTokenizer(low, high, num_bins=num_bins, vocab_size=vocab_size)
    # A third of the draws fall outside [low, high]: they round-trip to the clipped value.
    span = high - low
    actions = rng.uniform(low - span, high + span, size=(5000, 3))
    ids, clipped = tok.encode_counted(actions)
    assert clipped == int(np.count_nonzero((actions < low) | (actions > high)))
    assert ids.min() >= tok.offset and ids.max() < tok.offset + num_bins
    error = np.abs(tok.decode(ids) - np.clip(actions, low, high))
    bound = span / (2 * num_bins) + ULPS * np.abs(high).max()
    assert np.all(error <= bound)
    # The bound is tight: some draw lands near a bin edge.
    assert np.all(error.max(axis=0) > 0.9 * span / (2 * num_bins))


def test_bin_edges_and_centres_exactly():
    tok = ActionTokenizer([0.0], [4.0], num_bins=4)
    assert tok.encode([[0.0], [0.999], [1.0], [3.999], [4.0], [9.0], [-9.0]]).ravel().tolist() == [
        0,
        0,
        1,
        3,
        3,
        3,
        0,
    ]
    assert tok.decode(np.arange(4)[:, None]).ravel().tolist() == [0.5, 1.5, 2.5, 3.5]
    # Decoding a centre and encoding it again gives the same id.
    ids = np.arange(4)[:, None]
    assert np.array_equal(tok.encode(tok.decode(ids)), ids)


def test_vocabulary_tail_is_openvla_window():
    tok = ActionTokenizer([-1.0] * 3, [1.0] * 3, vocab_size=32000)
    assert tok.offset == 31744
    assert tok.token_ids[0] == 31744 and tok.token_ids[-1] == 31999
    assert tok.encode([1.0, -1.0, 0.0]).tolist() == [31999, 31744, 31744 + 128]


def test_from_data_uses_quantiles_and_clips_outliers():
    rng = np.random.default_rng(1)
    data = rng.normal(size=(10_000, 2)) * [1.0, 10.0]
    data[0] = [1e6, -1e6]  # an outlier the quantiles ignore
    tok = ActionTokenizer.from_data(data)
    assert np.allclose(tok.low, np.quantile(data, 0.01, axis=0))
    assert np.allclose(tok.high, np.quantile(data, 0.99, axis=0))
    _, clipped = tok.encode_counted(data)
    # 1 % below and 1 % above per dimension, up to the interpolation of np.quantile.
    assert abs(clipped - 0.02 * data.size) <= 4


def test_constant_dimension_decodes_to_the_constant():
    tok = ActionTokenizer.from_data(np.stack([np.linspace(0, 1, 50), np.full(50, 2.5)], 1))
    decoded = tok.decode(tok.encode([[0.3, 2.5]]))
    assert decoded[0, 1] == 2.5


def test_from_space():
    tok = ActionTokenizer.from_space(gym.spaces.Box(-2.0, 2.0, (2, 2)), num_bins=16)
    assert tok.dims == 4 and tok.low.tolist() == [-2.0] * 4
    with pytest.raises(ValueError, match="expected finite bounds"):
        ActionTokenizer.from_space(gym.spaces.Box(-np.inf, np.inf, (2,)))
    with pytest.raises(TypeError, match="expected a gymnasium Box"):
        ActionTokenizer.from_space(gym.spaces.Discrete(3))


def test_raise_mode_refuses_out_of_range():
    tok = ActionTokenizer([0.0, 0.0], [1.0, 1.0], out_of_range="raise")
    assert tok.encode([1.0, 0.0]).tolist() == [255, 0]
    with pytest.raises(ValueError, match=r"actions\[1\]: expected within \[0, 1\], actual 1.5"):
        tok.encode([0.5, 1.5])


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"low": [0.0], "high": [1.0, 2.0]}, ValueError, "expected one shape"),
        ({"low": [1.0], "high": [0.0]}, ValueError, "expected >= low"),
        ({"low": [np.nan], "high": [0.0]}, ValueError, "expected finite numbers"),
        ({"low": [], "high": []}, ValueError, "non-empty 1-d"),
        ({"low": ["a"], "high": [0.0]}, TypeError, "array of numbers"),
        ({"low": [0.0], "high": [1.0], "num_bins": 1}, ValueError, "num_bins"),
        ({"low": [0.0], "high": [1.0], "num_bins": 2.0}, TypeError, "num_bins"),
        ({"low": [0.0], "high": [1.0], "vocab_size": 100}, ValueError, "vocab_size: expected >= "),
        ({"low": [0.0], "high": [1.0], "out_of_range": "wrap"}, ValueError, "out_of_range"),
    ],
)
def test_bad_construction(kwargs, error, match):
    with pytest.raises(error, match=match):
        ActionTokenizer(**kwargs)


def test_bad_encode_and_decode_input():
    tok = ActionTokenizer([0.0, 0.0], [1.0, 1.0], vocab_size=1000)
    with pytest.raises(ValueError, match="last dimension of 2"):
        tok.encode([0.1, 0.2, 0.3])
    with pytest.raises(ValueError, match="NaN"):
        tok.encode([np.nan, 0.2])
    with pytest.raises(TypeError, match="array of numbers"):
        tok.encode(["x", 0.2])
    with pytest.raises(ValueError, match=r"ids in \[744, 999\], actual 5"):
        tok.decode([5, 800])
    with pytest.raises(TypeError, match="integers"):
        tok.decode([800.0, 801.0])
    with pytest.raises(ValueError, match="expected a \\(n, dims\\) array"):
        ActionTokenizer.from_data(np.zeros(3))
    with pytest.raises(ValueError, match="q_low < q_high"):
        ActionTokenizer.from_data(np.zeros((3, 1)), quantiles=(0.9, 0.1))


def test_openvla_mapping_against_a_hand_computed_table():
    """OpenVLA: N = 4 edges [-1, -1/3, 1/3, 1] (3 intervals, centres -2/3, 0, 2/3),
    d = np.digitize(u, edges) in 1 .. 4, id = V - d; decode clip(V - id - 1, 0, 2)."""
    tok = ActionTokenizer([-1.0], [1.0], num_bins=4, vocab_size=10, mapping="openvla")
    u = [-1.0, -0.5, -1 / 3, 0.0, 0.3, 1 / 3, 0.5, 0.999, 1.0, 7.0, -7.0]
    ids = [9, 9, 8, 8, 8, 7, 7, 7, 6, 6, 9]
    assert tok.encode(np.array(u)[:, None]).ravel().tolist() == ids
    assert tok.offset == 6 and tok.token_ids.tolist() == [6, 7, 8, 9]
    centres = tok.decode(np.array([9, 8, 7, 6])[:, None]).ravel()
    np.testing.assert_allclose(centres, [-2 / 3, 0.0, 2 / 3, 2 / 3], atol=1e-15)
    # The ascending scheme maps the same actions elsewhere: bin b is id offset + b.
    ascending = ActionTokenizer([-1.0], [1.0], num_bins=4, vocab_size=10)
    assert ascending.encode(np.array([[-1.0], [1.0]])).ravel().tolist() == [6, 9]


def test_openvla_mapping_at_256_bins_of_llama_and_a_scaled_range():
    tok = ActionTokenizer([0.0, -2.0], [4.0, 2.0], vocab_size=32000, mapping="openvla")
    # u = -1 is the vocabulary's last id, u = +1 its 256th last; u = 0 lies in the
    # interval above edge 127 (edges are -1 + 2 k / 255), so d = 128.
    assert tok.encode([[0.0, -2.0], [4.0, 2.0], [2.0, 0.0]]).tolist() == [
        [31999, 31999], [31744, 31744], [31872, 31872],
    ]  # fmt: skip
    rng = np.random.default_rng(0)
    actions = rng.uniform([0.0, -2.0], [4.0, 2.0], size=(5000, 2))
    error = np.abs(tok.decode(tok.encode(actions)) - actions)
    assert np.all(error <= tok.bin_width / 2 + 1e-12)
    with pytest.raises(ValueError, match="vocabulary size with mapping='openvla'"):
        ActionTokenizer([0.0], [1.0], mapping="openvla")
    with pytest.raises(ValueError, match="mapping: expected one of"):
        ActionTokenizer([0.0], [1.0], vocab_size=300, mapping="rt2")
