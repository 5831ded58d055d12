"""iterlin.repro.stats: the difference of two accuracies with its Student's t interval, and how numbers print."""

from __future__ import annotations

import math

import numpy as np
import pytest

from iterlin.repro.claims import UNDECIDED, on_par
from iterlin.repro.stats import Difference, difference, num, pct, runs_difference, seed_interval


def test_pct_and_num():
    assert pct(0.41234) == "41.2 %" and pct(-0.0001) == "0.0 %" and pct(float("nan")) == "nan"
    assert pct(0.5, 0) == "50 %" and pct(math.inf) == "inf"
    assert num(-0.001) == "0.00" and num(1.23456, 3) == "1.235" and num(-math.inf) == "-inf"


def test_difference_combines_seed_spread_and_test_noise():
    # unpaired, one seed: two binomials
    d = difference(0.4, 0.45, n_test=1000)
    p = 0.425
    assert d.delta == pytest.approx(0.05) and d.se == pytest.approx(math.sqrt(2 * p * (1 - p) / 1000))
    assert (d.n_seeds, d.n_test, d.paired) == (1, 1000, False) and d.lo == pytest.approx(d.delta - 2 * d.se)
    assert d.df is None and d.quantile == 2.0  # one seed: no seed term, ±2 s.e. of the test noise
    # seeds add Var_s(Δ_s)/S
    d2 = difference([0.40, 0.42, 0.44], [0.45, 0.45, 0.50], n_test=1000)
    deltas = np.array([0.05, 0.03, 0.06])
    p2 = np.mean([0.40, 0.42, 0.44, 0.45, 0.45, 0.50])
    assert d2.se == pytest.approx(math.sqrt(deltas.var(ddof=1) / 3 + 2 * p2 * (1 - p2) / 1000))
    v_seed, v_test = deltas.var(ddof=1) / 3, 2 * p2 * (1 - p2) / 1000
    assert d2.df == pytest.approx((v_seed + v_test) ** 2 / (v_seed**2 / 2))  # Welch–Satterthwaite
    # paired: the per-image differences, averaged over seeds: identical runs have no test noise
    rng = np.random.default_rng(0)
    c = rng.random((2, 500)) < 0.4
    same = difference(c.mean(1), c.mean(1), n_test=500, correct_a=c, correct_b=c)
    assert same.paired and same.delta == 0 and same.se == pytest.approx(math.sqrt(3) / 500)  # the floor
    flip = c.copy()
    flip[:, :10] = ~flip[:, :10]
    d3 = difference(c.mean(1), flip.mean(1), n_test=500, correct_a=c, correct_b=flip)
    per_image = (flip.astype(float) - c).mean(0)
    seed = (flip.mean(1) - c.mean(1)).var(ddof=1) / 2
    assert d3.se == pytest.approx(math.sqrt(seed + per_image.var(ddof=1) / 500))
    assert d3.se < difference(c.mean(1), flip.mean(1), n_test=500).se  # paired is tighter
    assert difference(0.4, 0.5, n_test=100, test_var=0.0).se == 0.0
    with pytest.raises(ValueError, match="n_test=0 is not allowed"):
        difference(0.4, 0.5, n_test=0)
    with pytest.raises(ValueError, match="one accuracy per seed each"):
        difference([0.4, 0.5], [0.4], n_test=10)


def test_seed_interval_is_students_t_over_seeds():
    m, se, lo, hi = seed_interval([0.4, 0.6])
    assert m == pytest.approx(0.5) and se == pytest.approx(np.std([0.4, 0.6], ddof=1) / np.sqrt(2))
    assert (lo, hi) == pytest.approx((0.5 - 12.7062 * se, 0.5 + 12.7062 * se), rel=1e-5)  # t_0.975(1)
    _, se3, lo3, _ = seed_interval([0.4, 0.5, 0.6])
    assert lo3 == pytest.approx(0.5 - 4.302653 * se3, rel=1e-6)  # t_0.975(2)
    assert all(np.isnan(v) for v in seed_interval([0.3])[1:])


def test_difference_short_and_counts():
    d = Difference(0.004, 0.008, 3, 932, True, math.inf)  # df ∞: ±1.96 s.e.
    assert d.short() == "Δ +0.4 [-1.2, +2.0]" and d.counts() == "3 seeds, 932 paired test images"
    assert d.describe() == "Δ +0.4 pts, 95 % t interval [-1.2, +2.0] (3 seeds, 932 paired test images)"
    assert Difference(0.0, 0.01, 1, 200, False).counts() == "1 seed: test noise only, no seed spread, 200 unpaired test images"
    assert Difference(0.004, 0.008, 3, 932, True).describe().startswith("Δ +0.4 pts, 2 s.e. interval [-1.2, +2.0]")


def test_difference_interval_is_students_t_with_welch_satterthwaite_df():
    from scipy import stats as scipy_stats

    # two seeds whose differences disagree far more than the test noise: df → 1, t(1) = 12.7
    d = difference([0.40, 0.40], [0.40, 0.50], n_test=10**9)
    assert d.df == pytest.approx(1.0, rel=1e-6) and d.quantile == pytest.approx(12.7062, rel=1e-5)
    assert (d.lo, d.hi) == pytest.approx((0.05 - 12.7062 * 0.05, 0.05 + 12.7062 * 0.05), rel=1e-4)
    assert on_par(d, 0.02) == UNDECIDED  # the same data, ±2 s.e. ([−0.05, 0.15]), would also not be "yes"
    # the seed term negligible against the test noise: df large, the interval ≈ ±1.96 s.e.
    big = difference([0.40, 0.40, 0.40], [0.40, 0.4001, 0.4002], n_test=1000)
    assert big.df > 1e4 and big.quantile == pytest.approx(scipy_stats.norm.ppf(0.975), rel=1e-3)
    # identical per-seed differences: no seed variance, df ∞
    assert difference([0.25, 0.5], [0.5, 0.75], n_test=1000).df == math.inf
    # a gap ±2 s.e. called "no" but t(1) leaves undecided: Δ = 5 ± 1 pts (se 1), two seeds
    two = difference([0.40, 0.40], [0.44, 0.46], n_test=10**9)
    assert two.hi - two.lo == pytest.approx(2 * 12.7062 * two.se, rel=1e-4)
    assert on_par(two, 0.02) == UNDECIDED and two.delta - 2 * two.se >= 0.02


def test_runs_difference_pairs_on_the_recorded_test_images():
    n = 1000
    correct = np.zeros((4, n), bool)
    for r, k in enumerate([400, 390, 410, 400]):  # runs: seed 0 (A, B), seed 1 (A, B)
        correct[r, :k] = True
    d = runs_difference(correct.mean(1), correct, [0, 2], [1, 3], n_test=n)
    assert d.paired and d.n_seeds == 2 and d.delta == pytest.approx(-0.01)
    assert d == difference(correct.mean(1)[[0, 2]], correct.mean(1)[[1, 3]], n_test=n, correct_a=correct[[0, 2]],
                           correct_b=correct[[1, 3]])
    assert not runs_difference(correct.mean(1), None, [0, 2], [1, 3], n_test=n).paired
