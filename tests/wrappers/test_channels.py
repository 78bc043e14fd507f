"""Tests of fleetgym.wrappers.channels: distributions (fixed seeds, math-derived tolerances),
stream state across blocks, invariants (hypothesis), validation."""

from __future__ import annotations

import math
import pickle

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import stats
from shim_envs import CounterEnv, FullInfoShim

from fleetgym.traces import TraceData
from fleetgym.wrappers import (
    FixedDelay,
    GaussianChannel,
    GilbertElliottChannel,
    TraceChannel,
)
from fleetgym.wrappers.channel_base import MAX_DELAY_MS

Z = 4.5  # half-width of every normal-approximation interval, in standard errors


def rng(seed: int = 0) -> np.random.Generator:
    return np.random.default_rng(seed)


def stream(channel, n: int, block: int, seed: int = 0) -> np.ndarray:
    """n delays drawn through one sampler in blocks (exercises state carried across blocks)."""
    s = channel.sampler(rng(seed), 20.0)
    return np.concatenate([s.next(min(block, n - i)) for i in range(0, n, block)])


def runs(mask: np.ndarray) -> np.ndarray:
    """Lengths of the runs of True in a boolean array."""
    padded = np.concatenate([[False], mask, [False]]).astype(np.int8)
    edges = np.flatnonzero(np.diff(padded))
    return edges[1::2] - edges[0::2]


# -- GaussianChannel ------------------------------------------------------------------


def test_gaussian_delay_distribution_ks():
    """max(0, N(80, 40^2)) is an atom of mass Phi(-2) at 0 plus a normal truncated to
    (0, inf). KS needs a continuous law, so it tests the positive part against the truncated
    normal's CDF; with a fixed seed the result is deterministic, and a correct sampler gives
    p >= 1e-3 for all but 0.1 % of seeds. The atom's mass gets a binomial interval."""
    ch = GaussianChannel(80, 40, 0.0)
    d = ch.sample_delays(rng(1), 20_000)
    p0 = stats.norm.cdf(-2)
    positive = d[d > 0]
    cdf = lambda x: (stats.norm.cdf((x - 80) / 40) - p0) / (1 - p0)  # noqa: E731
    assert stats.kstest(positive, cdf).pvalue > 1e-3
    assert abs(np.mean(d == 0) - p0) < Z * math.sqrt(p0 * (1 - p0) / d.size)

    # The same test catches a wrong law: N(80, 45^2) is rejected.
    def truncated_cdf(x, mean, std):
        low = stats.norm.cdf(-mean / std)
        return (stats.norm.cdf((x - mean) / std) - low) / (1 - low)

    assert stats.kstest(positive, lambda x: truncated_cdf(x, 80, 45)).pvalue < 1e-3


def test_gaussian_loss_rate_binomial_interval():
    n, p = 200_000, 0.1
    d = GaussianChannel(30, 10, p).sample_delays(rng(2), n)
    # Independent Bernoulli(p) losses: the rate's standard error is sqrt(p (1 - p) / n).
    assert abs(np.mean(np.isinf(d)) - p) < Z * math.sqrt(p * (1 - p) / n)
    assert not np.any(np.isnan(d)) and np.all(d[np.isfinite(d)] >= 0)


def test_ar1_correlation_and_marginal_across_blocks():
    """Latent z_k = rho z_{k-1} + sqrt(1-rho^2) e_k. With mean 100, std 10 clipping never
    happens (20 sigma), so (d - 100) / 10 is the AR(1) itself. Bartlett: the lag-1
    autocorrelation's standard error is sqrt((1 - rho^2) / n)."""
    rho, n, block = 0.8, 100_000, 500
    d = stream(GaussianChannel(100, 10, 0.0, correlation=rho), n, block, seed=3)
    z = (d - 100) / 10
    r1 = np.corrcoef(z[:-1], z[1:])[0, 1]
    assert abs(r1 - rho) < Z * math.sqrt((1 - rho**2) / n)
    # Marginal unchanged: mean 0 with standard error sqrt((1 + rho) / (1 - rho) / n).
    assert abs(z.mean()) < Z * math.sqrt((1 + rho) / (1 - rho) / n)
    # Variance 1; the sample variance of an AR(1) has standard error
    # sqrt(2 (1 + rho^2) / (1 - rho^2) / n).
    assert abs(z.var() - 1) < Z * math.sqrt(2 * (1 + rho**2) / (1 - rho**2) / n)
    # The drift continues across block boundaries: pairs (last of a block, first of the
    # next) have the same correlation (n_pairs = 199, standard error ~ sqrt((1-rho^2)/199)).
    last = np.arange(block - 1, n - 1, block)
    r_boundary = np.corrcoef(z[last], z[last + 1])[0, 1]
    assert abs(r_boundary - rho) < Z * math.sqrt((1 - rho**2) / last.size)


# -- GilbertElliottChannel ------------------------------------------------------------


@pytest.mark.parametrize("block", [7, 512, 100_000])
def test_gilbert_elliott_burst_lengths_and_loss_rate(block):
    loss, burst, n = 0.1, 4.0, 200_000
    ch = GilbertElliottChannel.from_loss_and_burst(loss, burst, mean_ms=10, std_ms=2)
    d = stream(ch, n, block, seed=4)
    lost = np.isinf(d)
    # Gilbert model (loss 0 in Good, 1 in Bad): loss bursts are Bad sojourns, geometric
    # with r = 1 / burst: mean 1/r, standard deviation sqrt(1 - r) / r.
    r = 1 / burst
    lengths = runs(lost)
    assert abs(lengths.mean() - burst) < Z * math.sqrt(1 - r) / r / math.sqrt(lengths.size)
    # Loss rate of a two-state chain: variance of the mean is p(1-p)/n (1+lam)/(1-lam),
    # lam = 1 - P(G->B) - P(B->G) the chain's second eigenvalue.
    lam = 1 - ch.p_good_to_bad - ch.p_bad_to_good
    se = math.sqrt(loss * (1 - loss) / n * (1 + lam) / (1 - lam))
    assert abs(lost.mean() - loss) < Z * se


def test_gilbert_elliott_four_parameter_form():
    ch = GilbertElliottChannel(0.05, 0.2, loss_good=0.01, loss_bad=0.5)
    pb = 0.05 / 0.25
    assert ch.bad_fraction == pytest.approx(pb)
    assert ch.loss_rate == pytest.approx(0.8 * 0.01 + 0.2 * 0.5)
    n = 200_000
    lost = np.isinf(ch.sample_delays(rng(5), n))
    # Conservative standard error: a chain-modulated Bernoulli has variance at most the
    # Bernoulli variance plus the state variance inflated by (1 + lam) / (1 - lam).
    lam = 1 - 0.25
    se = math.sqrt(
        (ch.loss_rate * (1 - ch.loss_rate) + 0.49**2 * pb * (1 - pb) * (1 + lam) / (1 - lam)) / n
    )
    assert abs(lost.mean() - ch.loss_rate) < Z * se


# -- reordering against its analytic value ---------------------------------------------


def analytic_reorder_rate(mean: float, std: float, loss: float, step: float) -> float:
    """P(a delivered packet is reordered) for i.i.d. max(0, N) delays, one packet per tick.

    Packet i arrives at tick i + m_i, m_i = floor(d_i / P); packet i + k overtakes it iff it
    arrives at a strictly earlier tick: floor(d_j / P) <= m_i - k - 1, i.e. d_j < (m_i - k) P,
    probability (1 - loss) Phi(((m_i - k) P - mean) / std). Later packets are independent.
    """
    cdf = lambda x: stats.norm.cdf((x - mean) / std)  # noqa: E731  (x > 0 here)
    total = 0.0
    m_max = int((mean + 10 * std) / step) + 2
    for m in range(m_max):
        lo = cdf(m * step) if m > 0 else 0.0
        p_m = cdf((m + 1) * step) - lo  # includes the atom at 0 for m = 0
        survive = 1.0
        for k in range(1, m):
            survive *= 1 - (1 - loss) * cdf((m - k) * step)
        total += p_m * (1 - survive)
    return total


@pytest.mark.parametrize("mean,std,loss", [(80.0, 40.0, 0.1), (30.0, 10.0, 0.02)])
def test_latest_delivery_reorder_rate_matches_analytic(mean, std, loss):
    n = 100_000
    env = FullInfoShim(
        CounterEnv(), uplink=GaussianChannel(mean, std, loss), step_ms=20.0, delivery="latest"
    )
    env.reset(seed=6)
    for _ in range(n):
        env.step(0)
    s = env.network_stats()
    rate = s["uplink_reordered"] / (s["uplink_sent"] - s["uplink_lost"])
    expected = analytic_reorder_rate(mean, std, loss, 20.0)
    # R_i depends on d_i..d_{i+M} only (M ~ (mean + 6 std) / P ticks), so
    # Var(mean of R) <= (2M + 1) / 4 / n.
    m_dep = int((mean + 6 * std) / 20.0) + 1
    assert abs(rate - expected) < Z * math.sqrt((2 * m_dep + 1) / 4 / n)
    fifo = FullInfoShim(CounterEnv(), uplink=GaussianChannel(mean, std, loss), step_ms=20.0)
    fifo.reset(seed=6)
    for _ in range(2000):
        _, _, _, _, info = fifo.step(0)
    assert info["reordered_packets"] == 0


# -- TraceChannel ---------------------------------------------------------------------


def test_trace_channel_lookup_wraps_and_random_start_is_seeded():
    data = TraceData(np.array([0.0, 15.0, 40.0]), np.array([1.0, 2.0, np.inf]), 60.0, "t")
    fixed = TraceChannel(data, random_start=False)
    # Packets at 0, 20, 40, 60, 80, 100 ms -> rows 0 (0<=0), 1 (15<=20), 2, 0 (wrap), 1, 2.
    assert fixed.sample_delays(rng(), 6).tolist() == [1.0, 2.0, math.inf, 1.0, 2.0, math.inf]
    assert fixed.sample_delays(rng(), 3, step_ms=10.0).tolist() == [1.0, 1.0, 2.0]
    moving = TraceChannel(data)
    a = moving.sample_delays(rng(8), 50)
    assert np.array_equal(a, moving.sample_delays(rng(8), 50))
    starts = {tuple(moving.sample_delays(rng(s), 3).tolist()) for s in range(30)}
    assert len(starts) > 1
    assert fixed.loss_rate == pytest.approx(1 / 3)
    s = fixed.sampler(rng(), 20.0)
    assert np.concatenate([s.next(2), s.next(4)]).tolist() == fixed.sample_delays(rng(), 6).tolist()


# -- invariants (hypothesis) ----------------------------------------------------------

channels = st.one_of(
    st.builds(
        GaussianChannel,
        mean_ms=st.floats(0, 500),
        std_ms=st.floats(0, 200),
        loss=st.floats(0, 1),
        correlation=st.floats(0, 0.99),
    ),
    st.builds(
        GilbertElliottChannel,
        p_good_to_bad=st.floats(0.001, 1),
        p_bad_to_good=st.floats(0, 1),
        loss_good=st.floats(0, 1),
        loss_bad=st.floats(0, 1),
        mean_ms=st.floats(0, 500),
        std_ms=st.floats(0, 200),
    ),
)


@settings(max_examples=80, deadline=None)
@given(ch=channels, n=st.integers(0, 400), block=st.integers(1, 64), seed=st.integers(0, 2**32 - 1))
def test_channel_invariants(ch, n, block, seed):
    d = stream(ch, n, block, seed) if n else ch.sample_delays(rng(seed), 0)
    assert d.shape == (n,) and d.dtype == np.float64
    assert not np.any(np.isnan(d))  # lost is inf, never NaN
    assert np.all(d >= 0)  # delays >= 0 (inf included)
    if ch.loss_rate == 0.0 and not isinstance(ch, GilbertElliottChannel):
        assert np.all(np.isfinite(d))


def test_special_cases():
    assert FixedDelay(40).sample_delays(rng(), 4).tolist() == [40.0] * 4
    assert np.all(np.isinf(GaussianChannel(10, 1, 1.0).sample_delays(rng(), 100)))
    assert FixedDelay(40).delay_quantile_ms(0.99) == 40.0
    assert GaussianChannel(0, 0, 1.0).delay_quantile_ms(0.5) == math.inf
    q = GaussianChannel(80, 40).delay_quantile_ms(0.99)
    assert abs(q - (80 + 40 * stats.norm.ppf(0.99))) < 5  # ~2.2 % sampling error at n=1e5


def test_channels_are_values_picklable_and_comparable():
    data = TraceData(np.array([0.0, 10.0]), np.array([1.0, np.inf]), 20.0, "t")
    for ch in (
        GaussianChannel(30, 10, 0.02, 0.5),
        GilbertElliottChannel.from_loss_and_burst(0.05, 3),
        TraceChannel(data),
    ):
        again = pickle.loads(pickle.dumps(ch))
        assert again == ch and hash(again) == hash(ch)
        assert isinstance(ch.describe(), str)
    assert GaussianChannel(30, 10) != GaussianChannel(30, 11)


# -- bad input ------------------------------------------------------------------------


def test_bad_parameters_raise():
    with pytest.raises(
        ValueError, match=r"loss: expected a finite number >= 0 and <= 1, actual 1.5"
    ):
        GaussianChannel(10, 1, 1.5)
    with pytest.raises(ValueError, match="loss: expected a finite number"):
        GaussianChannel(10, 1, -0.1)
    with pytest.raises(ValueError, match="mean_ms: expected a finite number"):
        GaussianChannel(-1, 1)
    with pytest.raises(ValueError, match="std_ms: expected a finite number"):
        GaussianChannel(1, -1)
    with pytest.raises(ValueError, match="std_ms: expected a finite number"):
        GaussianChannel(1, float("nan"))
    with pytest.raises(ValueError, match="correlation: expected a finite number"):
        GaussianChannel(1, 1, correlation=1.0)
    with pytest.raises(TypeError, match="loss: expected a number, actual bool"):
        GaussianChannel(1, 1, True)
    with pytest.raises(TypeError, match="mean_ms: expected a number, actual str"):
        GaussianChannel("10")
    with pytest.raises(ValueError, match="never moves"):
        GilbertElliottChannel(0.0, 0.0)
    with pytest.raises(ValueError, match="p_good_to_bad: expected a finite number"):
        GilbertElliottChannel(1.2, 0.1)
    with pytest.raises(ValueError, match="mean_burst_length"):
        GilbertElliottChannel.from_loss_and_burst(0.9, 2.0)
    with pytest.raises(ValueError, match=r"mean_burst_length: expected a finite number >= 1"):
        GilbertElliottChannel.from_loss_and_burst(0.1, 0.5)
    with pytest.raises(ValueError, match=r"loss_rate: expected a finite number >= 0 and < 1"):
        GilbertElliottChannel.from_loss_and_burst(1.0, 2.0)
    with pytest.raises(TypeError, match="rng: expected a np.random.Generator"):
        GaussianChannel(1, 1).sample_delays(0, 5)
    with pytest.raises(ValueError, match="n: expected an int in"):
        GaussianChannel(1, 1).sample_delays(rng(), -1)
    with pytest.raises(ValueError, match="step_ms: expected a finite number >= 0.001"):
        GaussianChannel(1, 1).sample_delays(rng(), 3, step_ms=0)
    with pytest.raises(TypeError, match="trace: expected a fleetgym.traces.TraceData"):
        TraceChannel([1.0, 2.0])


@pytest.mark.parametrize("step_ms", [float("nan"), 0.0, -20.0, 5e-324, float("inf"), 1e300])
def test_trace_sampler_and_shim_reject_a_control_period_out_of_range(step_ms):
    channel = TraceChannel.from_file("wifi-office.csv")
    with pytest.raises(ValueError, match="step_ms: expected a finite number >= 0.001"):
        channel.sampler(rng(), step_ms=step_ms)
    with pytest.raises(ValueError, match="step_ms: expected a finite number >= 0.001"):
        GaussianChannel(1, 1).sample_delays(rng(), 3, step_ms=step_ms)


@pytest.mark.parametrize("field", ["mean_ms", "std_ms"])
def test_delays_beyond_the_documented_bound_are_rejected(field):
    with pytest.raises(ValueError, match=f"{field}: expected a finite number >= 0 and <= 1e"):
        GaussianChannel(**{"mean_ms": 1.0, "std_ms": 1.0, field: 1e300})
    GaussianChannel(**{"mean_ms": 1.0, "std_ms": 1.0, field: MAX_DELAY_MS})
