"""Fitting a profile to a trace (fleetgym.wrappers.profile_fit), the fitted channels
(fleetgym.wrappers.fitted_channels) and profile files (fleetgym.wrappers.profiles).

Parameter recovery runs on traces generated from known channels with fixed seeds; every
tolerance is a sampling error derived in the test's docstring, not tuned. Two facts are
used throughout:

- An AR(1) series with coefficient rho carries the information of
  ``n_eff = n (1 - rho) / (1 + rho)`` independent values for its mean (the sum of its
  autocorrelations is ``(1 + rho) / (1 - rho)``). Indicators ``1{z_k <= z}`` of a Gaussian
  AR(1) are correlated at most as much as ``z`` itself, so ``n_eff`` is also a
  conservative sample size for the empirical CDF and the KS distance. Losses independent of
  the delays thin the delivered series, which only weakens its correlation.
- The KS distance of ``n_eff`` independent values to their own CDF is below
  ``K / sqrt(n_eff)`` with probability 0.999, ``K = kolmogi(0.001) = 1.949``.
"""

from __future__ import annotations

import json
import math
import pickle
from dataclasses import FrozenInstanceError
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest
from scipy.special import kolmogi, ndtr, ndtri

import fleetgym  # noqa: F401  (registers fleetgym/NetShim-v0)
from fleetgym.errors import TraceFormatError, UnknownProfileError
from fleetgym.traces import TraceData, load_trace
from fleetgym.traces.generate import write_csv
from fleetgym.wrappers import HistoryCompensation, NetworkShimWrapper, make_robust_env
from fleetgym.wrappers.channels import GaussianChannel, GilbertElliottChannel
from fleetgym.wrappers.fit_models import (
    KS_CRITICAL,
    RUN_BINS,
    _Sample,
    gaussian_cdf,
    split_round_trip_loss,
)
from fleetgym.wrappers.fitted_channels import (
    EmpiricalChannel,
    LogNormalChannel,
    channel_from_dict,
    channel_to_dict,
    rescale_gilbert_elliott,
)
from fleetgym.wrappers.profile_fit import TraceFitError, fit_direction, fit_profile
from fleetgym.wrappers.profiles import (
    NetworkProfile,
    ProfileFileError,
    get_profile,
    load_profile_file,
    save_profile_file,
)

K999 = float(kolmogi(0.001))
STEP = 10.0


def make_trace(channel, n: int, seed: int, step: float = STEP) -> TraceData:
    delays = channel.sample_delays(np.random.default_rng(seed), n, step)
    return TraceData(np.arange(n) * step, delays, n * step, "generated")


def lag1_normal_scores(d: np.ndarray) -> tuple[float, int]:
    """Lag-1 correlation of the latent normal (via the true CDF is not needed: ranks)."""
    ok = np.isfinite(d)
    z = np.full(d.size, np.nan)
    ranks = np.argsort(np.argsort(d[ok])) + 1.0
    z[ok] = ndtri(ranks / (ok.sum() + 1))
    a, b = z[:-1], z[1:]
    both = np.isfinite(a) & np.isfinite(b)
    return float(np.corrcoef(a[both], b[both])[0, 1]), int(both.sum())


def n_pairs(trace: TraceData) -> int:
    ok = np.isfinite(trace.delay_ms)
    return int(np.sum(ok[:-1] & ok[1:]))


def test_gaussian_trace_recovers_mean_std_rho_and_bernoulli_loss():
    """GaussianChannel(40, 8, loss 0.05, rho 0.8), 40 000 packets.

    - mean within 4 sigma / sqrt(n_eff), n_eff = n_delivered (1 - rho) / (1 + rho);
    - std: for a Gaussian AR(1), Var(s^2) = 2 sigma^4 (1 + rho^2) / ((1 - rho^2) n), so
      SE(s) = sigma / sqrt(2 n) * sqrt((1 + rho^2) / (1 - rho^2)); within 4 SE;
    - rho (plain and on normal scores): Var(rho_hat) = (1 - rho^2) / m <= 1 / m over m
      successive delivered pairs; within 4 / sqrt(m);
    - loss rate within 4 sqrt(p (1 - p) / n) (Bernoulli: independent packets), and the
      Bernoulli model kept (the likelihood-ratio test's false alarm rate is 0.1 %);
    - the Gaussian's own KS distance is below K / sqrt(n_eff) (it is the true model).
    """
    mean, std, p, rho, n = 40.0, 8.0, 0.05, 0.8, 40_000
    trace = make_trace(GaussianChannel(mean, std, p, rho), n, seed=1)
    fit = fit_direction(trace)
    g = fit.delay.gaussian
    n_eff = fit.delivered * (1 - rho) / (1 + rho)
    assert abs(g.mean_ms - mean) <= 4 * std / math.sqrt(n_eff)
    se_std = std / math.sqrt(2 * fit.delivered) * math.sqrt((1 + rho**2) / (1 - rho**2))
    assert abs(g.std_ms - std) <= 4 * se_std
    m = n_pairs(trace)
    assert abs(g.correlation - rho) <= 4 / math.sqrt(m)
    assert abs(fit.delay.correlation - rho) <= 4 / math.sqrt(m)
    assert abs(fit.loss.rate - p) <= 4 * math.sqrt(p * (1 - p) / n)
    assert fit.loss.chosen == "bernoulli" and fit.channel.loss == fit.loss.rate
    assert fit.delay.ks["gaussian"] <= K999 / math.sqrt(n_eff)
    assert fit.interval_ms == STEP and fit.channel.interval_ms == STEP


def test_lognormal_trace_recovers_marginal_rho_and_gilbert_loss():
    """LogNormalChannel(median 6, sigma 0.6, shift 2, rho 0.8, Gilbert loss 4 %, mean burst
    3), 60 000 packets.

    - rho on normal scores within 4 / sqrt(m), m successive delivered pairs (as above);
    - marginal: the true CDF's KS distance to the data is below K / sqrt(n_eff), and the
      fit, which minimises KS over the shift, is no worse than that bound; by the triangle
      inequality sup |F_fit - F_true| <= 2 K / sqrt(n_eff). The log-normal is then kept
      (its KS is below the 5 % critical value 1.358 / sqrt(n_eff) unless a 5 % event).
    - loss: the Gilbert chain's lost/delivered indicator has autocorrelation lambda^k,
      lambda = 1 - a - b, so the loss rate is within 4 sqrt(p (1 - p) / n_eff_loss),
      n_eff_loss = n (1 - lambda) / (1 + lambda). The transition estimates are binomial
      given the visits: b_hat within 4 sqrt(b (1 - b) / (n p)), a_hat within
      4 sqrt(a (1 - a) / (n (1 - p))). Bursts are i.i.d. Geometric(b): each histogram bin's
      trace fraction is within 4 sqrt(q (1 - q) / bursts) of the true probability q.
    """
    loss = GilbertElliottChannel.from_loss_and_burst(0.04, 3.0)
    true = LogNormalChannel(6.0, 0.6, 2.0, 0.8, loss, STEP)
    n = 60_000
    trace = make_trace(true, n, seed=2)
    fit = fit_direction(trace)
    m = n_pairs(trace)
    assert abs(fit.delay.correlation - 0.8) <= 4 / math.sqrt(m)
    n_eff = fit.delivered * (1 - 0.8) / (1 + 0.8)
    bound = K999 / math.sqrt(n_eff)
    sample = _Sample(trace.delay_ms[np.isfinite(trace.delay_ms)])
    assert sample.ks(true.cdf) <= bound
    assert fit.delay.ks["lognormal"] <= bound
    x = true.quantile_ms(np.linspace(0.0005, 0.9995, 2000))
    assert np.max(np.abs(fit.delay.lognormal.cdf(x) - true.cdf(x))) <= 2 * bound
    assert fit.delay.chosen == "lognormal"
    assert fit.delay.ks_critical == pytest.approx(KS_CRITICAL / math.sqrt(fit.delay.n_eff))

    a, b, p = loss.p_good_to_bad, loss.p_bad_to_good, loss.loss_rate
    lam = 1 - a - b
    n_eff_loss = n * (1 - lam) / (1 + lam)
    assert abs(fit.loss.rate - p) <= 4 * math.sqrt(p * (1 - p) / n_eff_loss)
    assert fit.loss.chosen == "gilbert"
    g = fit.loss.gilbert
    assert abs(g.p_bad_to_good - b) <= 4 * math.sqrt(b * (1 - b) / (n * p))
    assert abs(g.p_good_to_bad - a) <= 4 * math.sqrt(a * (1 - a) / (n * (1 - p)))
    bursts = fit.loss.bursts.size
    # The ML estimate of P(B->G) is one over the mean burst (up to the trace's ends).
    assert fit.loss.model_mean_burst("gilbert") == pytest.approx(
        fit.loss.mean_burst, rel=2 / bursts
    )
    for (lo, hi), row in zip(RUN_BINS, fit.loss.burst_table(), strict=True):
        q = (1 - b) ** (lo - 1) - (0.0 if hi is None else (1 - b) ** hi)
        assert abs(row["trace"] - q) <= 4 * math.sqrt(q * (1 - q) / bursts)
    assert isinstance(fit.channel, LogNormalChannel) and fit.channel.loss == g


def test_bimodal_trace_takes_the_empirical_table():
    """A two-mode delay (75 % near 5 ms, 25 % near 60 ms) from a fine table, rho 0.5,
    40 000 packets: no log-normal fits, the empirical table is taken.

    Each fitted row i is the sample p_i-quantile, so |F_true(q_i) - p_i| <= KS_true + 1/n;
    between rows both CDFs are non-decreasing and the fitted one moves from p_i to
    p_{i+1}, so sup |F_fit - F_true| <= max row gap (0.01) + K / sqrt(n_eff) + 1 / n.
    """
    rng = np.random.default_rng(3)
    mix = np.concatenate(
        [5.0 * np.exp(0.3 * rng.standard_normal(75_000)), 60 + 5 * rng.standard_normal(25_000)]
    )
    probs = np.linspace(0.0, 1.0, 2001)
    true = EmpiricalChannel(
        tuple(np.quantile(np.maximum(mix, 0), probs)), tuple(probs), 0.5, 0.01, STEP
    )
    n = 40_000
    fit = fit_direction(make_trace(true, n, seed=4))
    n_eff = fit.delivered * (1 - 0.5) / (1 + 0.5)
    assert fit.delay.chosen == "empirical"
    assert fit.delay.ks["lognormal"] > fit.delay.ks_critical
    x = np.linspace(0.0, 90.0, 5000)
    gap = np.max(np.diff(fit.delay.empirical.probabilities))
    assert (
        np.max(np.abs(fit.delay.empirical.cdf(x) - true.cdf(x)))
        <= gap + K999 / math.sqrt(n_eff) + 1 / n
    )


@pytest.mark.parametrize("step", [10.0, 20.0, 5.0])
def test_fitted_channels_keep_their_drift_in_time_at_another_step(step):
    """A channel fitted per 10 ms packet, sampled every ``step`` ms: the latent AR(1)
    coefficient becomes rho ** (step / 10), within 4 / sqrt(n) (n pairs, no loss); the
    Gilbert chain's bursts keep their length in time: the burst-end probability becomes
    (1 - pi_B) (1 - lambda^t), whose ML estimate is binomial over the n p lost packets.
    """
    n, t = 100_000, step / STEP
    ch = LogNormalChannel(6.0, 0.5, 1.0, 0.9, interval_ms=STEP)
    rho, m = lag1_normal_scores(ch.sample_delays(np.random.default_rng(5), n, step))
    assert abs(rho - 0.9**t) <= 4 / math.sqrt(m)
    ge = GilbertElliottChannel.from_loss_and_burst(0.05, 4.0)
    lossy = EmpiricalChannel((1.0, 2.0, 3.0), correlation=0.0, loss=ge, interval_ms=STEP)
    d = lossy.sample_delays(np.random.default_rng(6), n, step)
    lost = np.isinf(d)
    scaled = rescale_gilbert_elliott(ge, t)
    b_t, lam_t = scaled.p_bad_to_good, 1 - scaled.p_good_to_bad - scaled.p_bad_to_good
    b_hat = np.sum(lost[:-1] & ~lost[1:]) / np.sum(lost[:-1])
    assert abs(b_hat - b_t) <= 4 * math.sqrt(b_t * (1 - b_t) / (n * 0.05))
    n_eff = n * (1 - lam_t) / (1 + lam_t)
    assert abs(lost.mean() - 0.05) <= 4 * math.sqrt(0.05 * 0.95 / n_eff)


def test_fitted_channels_are_values():
    ge = GilbertElliottChannel.from_loss_and_burst(0.05, 2.0)
    a = LogNormalChannel(6.0, 0.5, 2.0, 0.9, ge, 10.0)
    b = EmpiricalChannel([1.0, 2.0, 9.0], [0.0, 0.5, 1.0], 0.5, 0.1)
    for ch in (a, b):
        assert pickle.loads(pickle.dumps(ch)) == ch and hash(ch) == hash(
            pickle.loads(pickle.dumps(ch))
        )
        with pytest.raises(FrozenInstanceError):
            ch.correlation = 0.1  # type: ignore[misc]
        d1 = ch.sample_delays(np.random.default_rng(7), 500)
        assert np.array_equal(d1, ch.sample_delays(np.random.default_rng(7), 500))
        assert not np.any(np.isnan(d1)) and np.all(d1[np.isfinite(d1)] >= 0)
        assert ch.describe()
    assert b.quantiles_ms == (1.0, 2.0, 9.0) and a.loss_rate == pytest.approx(0.05)
    assert b.loss_rate == 0.1 and EmpiricalChannel((1.0, 3.0)).probabilities == (0.0, 1.0)
    assert float(a.cdf(float(a.quantile_ms(0.3)))) == pytest.approx(0.3)
    assert float(b.cdf(2.0)) == 0.5 and float(b.cdf(2.0, left=True)) == 0.5
    atom = EmpiricalChannel((1.0, 4.0, 4.0, 6.0), (0.0, 0.2, 0.7, 1.0))
    assert float(atom.cdf(4.0)) == 0.7 and float(atom.cdf(4.0, left=True)) == 0.2
    # Uncorrelated, no loss: the sampled marginal is the table's (KS of 20 000 i.i.d.).
    sample = _Sample(atom.sample_delays(np.random.default_rng(8), 20_000))
    assert sample.ks(atom.cdf) <= K999 / math.sqrt(20_000)


@pytest.mark.parametrize(
    "make,error,match",
    [
        (lambda: LogNormalChannel(6.0, -1.0), ValueError, "sigma"),
        (lambda: LogNormalChannel(6.0, 11.0), ValueError, "sigma"),
        (lambda: LogNormalChannel(6.0, 0.5, correlation=1.0), ValueError, "correlation"),
        (lambda: LogNormalChannel(6.0, 0.5, loss="0.1"), TypeError, "loss"),
        (
            lambda: LogNormalChannel(6.0, 0.5, loss=GilbertElliottChannel(0.1, 0.5, mean_ms=3)),
            ValueError,
            "loss only",
        ),
        (lambda: LogNormalChannel(6.0, 0.5, interval_ms=0.0), ValueError, "interval_ms"),
        (lambda: EmpiricalChannel((3.0, 1.0)), ValueError, r"quantiles_ms\[1\]"),
        (lambda: EmpiricalChannel((1.0,)), ValueError, "quantiles_ms"),
        (lambda: EmpiricalChannel((1.0, float("nan"))), ValueError, "quantiles_ms"),
        (lambda: EmpiricalChannel("12"), TypeError, "quantiles_ms"),
        (lambda: EmpiricalChannel((1.0, 2.0), (0.0, 0.9)), ValueError, "probabilities"),
        (lambda: EmpiricalChannel((1.0, 2.0, 3.0), (0.0, 1.0)), ValueError, "probabilities"),
        (lambda: EmpiricalChannel((1.0, 2.0), (True, 1.0)), TypeError, "probabilities"),
    ],
)
def test_fitted_channels_refuse_bad_arguments(make, error, match):
    with pytest.raises(error, match=match):
        make()


# --------------------------------------------------------------------------------------
# Profile files
# --------------------------------------------------------------------------------------
def _profile() -> NetworkProfile:
    ge = GilbertElliottChannel.from_loss_and_burst(0.03, 1.5)
    up = LogNormalChannel(5.5, 0.9, 3.0, 0.96, ge, 10.0)
    down = EmpiricalChannel((1.0, 2.5, 30.0), (0.0, 0.6, 1.0), 0.3, 0.02, 10.0)
    return NetworkProfile("lab", up, down, "a lab link")


def test_profile_file_round_trip_and_every_way_in(tmp_path):
    path = save_profile_file(_profile(), tmp_path / "lab.json", fit={"note": [1, 2]})
    assert load_profile_file(path) == _profile()
    assert get_profile(str(path)) == _profile() == get_profile(path)
    for ch in (
        GaussianChannel(3, 1, 0.1, 0.5),
        GilbertElliottChannel(0.1, 0.4, 0.01, 0.8, 9, 2, 0.3),
    ):
        assert channel_from_dict(json.loads(json.dumps(channel_to_dict(ch)))) == ch
    env = NetworkShimWrapper(gym.make("CartPole-v1"), profile=str(path))
    env.reset(seed=0)
    for _ in range(30):
        *_, terminated, truncated, _ = env.step(0)
        if terminated or truncated:
            env.reset()
    assert env.profile == _profile()
    env = gym.make("fleetgym/NetShim-v0", env_id="CartPole-v1", profile=str(path))
    env.reset(seed=1)
    env.step(1)
    robust = make_robust_env(
        "CartPole-v1",
        str(path),
        compensation=HistoryCompensation(history_length=2, action_history_length=2),
    )
    robust.reset(seed=2)
    robust.step(0)
    with pytest.raises(UnknownProfileError, match=r"existing \.json profile file.*no such file"):
        get_profile(str(tmp_path / "missing.json"))
    with pytest.raises(TypeError, match="no plain-data form|trace replay"):
        save_profile_file(get_profile("trace-wifi-office"), tmp_path / "t.json")


BAD_FILES = {
    "not json": (b"{uplink: 1}", "not valid JSON"),
    "binary": (pickle.dumps({"uplink": 1}), "binary|not valid JSON"),
    "array": (b"[1, 2]", "expected a JSON object"),
    "no version": (b'{"uplink": {"type": "gaussian"}}', "fleetgym_profile"),
    "bad version": (b'{"fleetgym_profile": 2, "uplink": {"type": "gaussian"}}', "fleetgym_profile"),
    "unknown key": (
        b'{"fleetgym_profile": 1, "uplink": {"type": "gaussian"}, "x": 1}',
        r"unknown keys \['x'\]",
    ),
    "no uplink": (b'{"fleetgym_profile": 1}', "uplink"),
    "bad type": (b'{"fleetgym_profile": 1, "uplink": {"type": "pickle"}}', "uplink.type"),
    "bad param": (
        b'{"fleetgym_profile": 1, "uplink": {"type": "gaussian", "std_ms": -1}}',
        "uplink.std_ms",
    ),
    "bool param": (
        b'{"fleetgym_profile": 1, "uplink": {"type": "gaussian", "loss": true}}',
        "uplink.loss",
    ),
    "unknown param": (
        b'{"fleetgym_profile": 1, "uplink": {"type": "gaussian", "rho": 1}}',
        r"uplink: unknown keys \['rho'\]",
    ),
    "NaN": (b'{"fleetgym_profile": 1, "uplink": {"type": "gaussian", "mean_ms": NaN}}', "finite"),
    "huge": (
        b'{"fleetgym_profile": 1, "uplink": {"type": "gaussian", "mean_ms": 1e400}}',
        "uplink.mean_ms",
    ),
    "bad loss": (
        b'{"fleetgym_profile": 1, "uplink": {"type": "lognormal", "median_ms": 5, "loss": {"type": "x"}}}',
        "uplink.loss",
    ),
    "bad GE loss": (
        b'{"fleetgym_profile": 1, "downlink": {"type": "gaussian"}, "uplink": {"type": "empirical", '
        b'"quantiles_ms": [1, 2], "loss": {"type": "gilbert_elliott", "p_good_to_bad": 2}}}',
        "uplink.loss.p_good_to_bad",
    ),
    "table": (
        b'{"fleetgym_profile": 1, "uplink": {"type": "empirical", "quantiles_ms": [3, "1"]}}',
        r"uplink.quantiles_ms\[1\]",
    ),
    "name": (b'{"fleetgym_profile": 1, "name": "", "uplink": {"type": "gaussian"}}', "name"),
    "deep": (b"[" * 100_000 + b"]" * 100_000, "not valid JSON|expected a JSON object"),
}


@pytest.mark.parametrize("case", list(BAD_FILES))
def test_malformed_profile_files_name_the_file_and_the_key(tmp_path, case):
    content, match = BAD_FILES[case]
    path = tmp_path / "bad.json"
    path.write_bytes(content)
    with pytest.raises(ProfileFileError, match=match) as caught:
        get_profile(str(path))
    assert str(path) in str(caught.value)
    with pytest.raises(ProfileFileError):  # the shim reports the same error
        NetworkShimWrapper(gym.make("CartPole-v1"), profile=str(path))


def test_profile_file_that_is_a_folder(tmp_path):
    folder = tmp_path / "dir.json"
    folder.mkdir()
    with pytest.raises(ProfileFileError, match="regular file"):
        load_profile_file(folder)
    with pytest.raises(ProfileFileError, match="cannot read"):
        load_profile_file(tmp_path / "missing.json")


# --------------------------------------------------------------------------------------
# The shipped trace and bad traces
# --------------------------------------------------------------------------------------
def test_packaged_trace_fit_loads_and_drives_a_shim(tmp_path):
    fit = fit_profile("wifi-office.csv")
    assert fit.same_both_ways and fit.profile.uplink == fit.profile.downlink
    report = fit.to_dict()
    json.dumps(report, allow_nan=False)
    ks = {m: v["ks"] for m, v in report["uplink"]["delay"]["models"].items()}
    assert set(ks) == {"gaussian", "lognormal", "empirical"} and all(
        0 <= v <= 1 for v in ks.values()
    )
    # The table matches by construction (rows 1 % apart), the Gaussian worst.
    assert ks["empirical"] <= 0.01 < ks["lognormal"] < ks["gaussian"]
    trace = load_trace("wifi-office.csv")
    assert report["uplink"]["loss"]["rate"] == trace.loss_rate
    path = save_profile_file(fit.profile, tmp_path / "wifi.json", fit=report)
    assert get_profile(str(path)) == fit.profile
    env = NetworkShimWrapper(gym.make("CartPole-v1"), profile=str(path))
    env.reset(seed=0)
    for _ in range(200):
        *_, terminated, truncated, info = env.step(0)
        assert info["obs_age_steps"] >= 0
        if terminated or truncated:
            env.reset()
    assert env.profile.name == "fit-wifi-office"


def _csv(path: Path, delays: list[float], send: list[float] | None = None) -> Path:
    send_ms = np.arange(len(delays)) * 10.0 if send is None else np.asarray(send, dtype=float)
    write_csv(path, send_ms, np.asarray(delays, dtype=float), "test trace")
    return path


def test_traces_that_cannot_be_fitted_say_why(tmp_path):
    inf = math.inf
    cases = {
        "short.csv": ([5.0] * 10, None, "too few packets: expected at least 50, actual 10"),
        "lost.csv": ([inf] * 100, None, "every packet is lost"),
        "sparse.csv": ([5.0] * 10 + [inf] * 90, None, "too few delivered packets"),
        "same.csv": ([5.0] * 100, [0.0] * 100, "same send time"),
    }
    for name, (delays, send, reason) in cases.items():
        path = _csv(tmp_path / name, delays, send)
        with pytest.raises(TraceFitError, match=reason) as caught:
            fit_profile(path)
        assert str(path) in str(caught.value)
    back = tmp_path / "back.csv"
    back.write_text("send_ms,delay_ms\n0,5\n10,5\n5,6\n")
    with pytest.raises(TraceFormatError, match=r"back.csv:4: expected non-decreasing send_ms"):
        fit_profile(back)
    with pytest.raises(TraceFormatError, match="cannot read"):
        fit_profile(tmp_path / "missing.csv")
    with pytest.raises(TraceFormatError, match="regular file"):
        fit_profile(tmp_path)
    with pytest.raises(TypeError, match="trace"):
        fit_direction("wifi-office.csv")
    with pytest.raises(ValueError, match="delay_model"):
        fit_profile("wifi-office.csv", delay_model="gamma")


def test_constant_delays_and_no_loss_fit_degenerate_models():
    """A fixed 7 ms delay without loss: every model is the constant, KS 0, no loss."""
    trace = TraceData(np.arange(200) * 5.0, np.full(200, 7.0), 1000.0, "const")
    fit = fit_direction(trace)
    assert fit.delay.ks == {"gaussian": 0.0, "lognormal": 0.0, "empirical": 0.0}
    assert fit.loss.chosen == "none" and fit.channel.loss_rate == 0.0
    assert np.all(fit.channel.sample_delays(np.random.default_rng(0), 50, 5.0) == 7.0)
    assert fit.loss.burst_table()[0]["trace"] is None


def test_forced_models_and_two_directions():
    up = make_trace(LogNormalChannel(6.0, 0.6, 2.0, 0.5, 0.02, STEP), 5_000, seed=9)
    down = make_trace(GaussianChannel(20.0, 3.0, 0.0), 5_000, seed=10)
    fit = fit_profile(up, down, name="two", delay_model="empirical", loss_model="gilbert")
    assert not fit.same_both_ways and fit.profile.name == "two"
    assert isinstance(fit.profile.uplink, EmpiricalChannel)
    assert isinstance(fit.profile.uplink.loss, GilbertElliottChannel)
    assert fit.profile.downlink.loss_rate == 0.0 and fit.downlink.loss.chosen == "none"
    assert set(fit.to_dict()) == {"same_both_ways", "direction_model", "uplink", "downlink"}


def test_gaussian_cdf_has_the_atom_at_zero():
    cdf = gaussian_cdf(GaussianChannel(1.0, 2.0))
    assert float(cdf(0.0)) == pytest.approx(float(ndtr(-0.5))) and float(cdf(0.0, left=True)) == 0.0
    fixed = gaussian_cdf(GaussianChannel(3.0, 0.0))
    assert float(fixed(3.0)) == 1.0 and float(fixed(3.0, left=True)) == 0.0


def test_split_round_trip_loss_keeps_the_round_trip_rate_and_the_burst_length():
    assert split_round_trip_loss(0.0) == 0.0
    one_way = split_round_trip_loss(0.19)
    assert 1.0 - (1.0 - one_way) ** 2 == pytest.approx(0.19)
    chain = GilbertElliottChannel(0.02, 0.25, 0.0, 1.0)
    split = split_round_trip_loss(chain)
    assert isinstance(split, GilbertElliottChannel) and split.p_bad_to_good == 0.25
    assert 1.0 - (1.0 - split.loss_rate) ** 2 == pytest.approx(chain.loss_rate)


def test_round_trips_are_halved_and_their_loss_split_over_the_two_directions():
    rng = np.random.default_rng(5)
    n = 4000
    rtt = 40.0 + rng.gamma(2.0, 3.0, n)
    rtt[rng.random(n) < 0.04] = np.inf
    trace = TraceData(np.arange(n) * 20.0, rtt, n * 20.0, "rtt.txt", kind="rtt")
    fit = fit_profile(trace, loss_model="bernoulli")
    up = fit.uplink
    assert up.kind == "half-rtt" and fit.same_both_ways
    assert up.delay.trace_quantiles_ms["p50_ms"] == pytest.approx(np.median(rtt[rtt < 1e9]) / 2)
    rate = float(np.mean(np.isinf(rtt)))
    assert up.loss.rate == pytest.approx(rate)
    assert up.loss_per_direction == pytest.approx(1.0 - math.sqrt(1.0 - rate))
    assert fit.profile.uplink.loss == pytest.approx(up.loss_per_direction)
    assert fit.profile.downlink == fit.profile.uplink
    assert "round trips halved" in fit.direction_model
    assert "symmetric paths assumed" in fit.direction_model
    data = fit.to_dict()
    assert data["direction_model"] == fit.direction_model
    assert data["uplink"]["delays"] == "half-rtt"
    assert data["uplink"]["loss"]["split_from_round_trips"] is True
    # The same trace fitted as one-way delays: no halving, no split, said so.
    one_way = fit_profile(TraceData(trace.send_ms, rtt, n * 20.0, "d.txt"), loss_model="bernoulli")
    assert one_way.uplink.loss_per_direction == pytest.approx(rate)
    assert one_way.direction_model.startswith("one-way delays as captured")
    forced = fit_profile(TraceData(trace.send_ms, rtt, n * 20.0, "d.txt"), rtt=True)
    assert forced.uplink.kind == "half-rtt" and "--rtt / rtt=True" in forced.direction_model


def test_round_trips_do_not_go_with_a_downlink_trace():
    trace = make_trace(GaussianChannel(20.0, 2.0, 0.0), 200, seed=1)
    rtt = TraceData(trace.send_ms, trace.delay_ms * 2, trace.period_ms, "ping.txt", kind="rtt")
    with pytest.raises(TraceFitError, match="ping.txt: it holds round-trip times"):
        fit_profile(rtt, trace)
    with pytest.raises(TraceFitError, match="round-trip times"):
        fit_profile(trace, trace, rtt=True)
