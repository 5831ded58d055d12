"""iterlin.repro.stats: the difference of two accuracies with its Student's t interval, and how numbers print."""

from __future__ import annotations

import math

import numpy as np
import pytest

from iterlin.repro.claims import UNDECIDED, on_par
from iterlin.repro.stats import (Difference, VarianceComponents, difference, mean_variance, num, pct, power,
                                 runs_difference, seed_interval, seeds_needed, variance_components)


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


# ------------------------------------------------------------------------------------------------
# The two-way model (seeds × images, the interaction once), and power
# ------------------------------------------------------------------------------------------------


def _gaussian(rng, S, n, seed_sd, image_sd, interaction_sd, delta):
    """Per-(seed, image) differences d_si = Δ + a_s + b_i + c_si as scores of B (A scores 0)."""
    d = (delta + seed_sd * rng.standard_normal((S, 1)) + image_sd * rng.standard_normal((1, n))
         + interaction_sd * rng.standard_normal((S, n)))
    return np.zeros((S, n)), d


def _binary(rng, S, n, alpha_a, alpha_b, sd):
    """Correctness of A and B, paired on seeds and images: c = [z_i + α + a_s + η_si + ξ_si > 0] with
    the image's difficulty z_i and η_si shared by A and B (they agree on most images); the true Δ is
    Φ(α_B/s) − Φ(α_A/s), s² the sum of the four variances ``sd``."""
    z_sd, seed_sd, eta_sd, xi_sd = sd
    z, eta = z_sd * rng.standard_normal((1, n)), eta_sd * rng.standard_normal((S, n))

    def run(alpha):
        return z + alpha + seed_sd * rng.standard_normal((S, 1)) + eta + xi_sd * rng.standard_normal((S, n)) > 0

    return run(alpha_a), run(alpha_b)


def _coverage(draw, truth, draws, seed=0):
    rng = np.random.default_rng(seed)
    hits = {"split": 0, "two_way": 0}
    for _ in range(draws):
        ca, cb = draw(rng)
        for model in hits:
            d = difference(ca.mean(1), cb.mean(1), n_test=ca.shape[1], correct_a=ca, correct_b=cb, model=model)
            hits[model] += d.lo <= truth <= d.hi
    return {k: v / draws for k, v in hits.items()}


def test_two_way_interval_covers_95_percent_and_the_split_over_covers():
    from scipy import stats as scipy_stats

    # known components and difference, new seeds and new images each draw (the population the claim
    # is about); 2,000 draws: a binomial s.d. of 0.005 about 0.95, so ±0.015 is 3 s.d.
    draws, tol = 2000, 3 * math.sqrt(0.95 * 0.05 / 2000)
    gauss = _coverage(lambda r: _gaussian(r, 4, 200, 0.01, 0.2, 0.5, 0.01), 0.01, draws)
    sd = (1.0, 0.05, 0.5, 0.7)
    s = math.sqrt(sum(v**2 for v in sd))
    truth = float(scipy_stats.norm.cdf(-0.2 / s) - scipy_stats.norm.cdf(-0.3 / s))
    binary = _coverage(lambda r: _binary(r, 4, 200, -0.3, -0.2, sd), truth, draws, seed=1)
    for cov in (gauss, binary):
        assert abs(cov["two_way"] - 0.95) <= tol, cov
        assert cov["split"] > 0.95 + tol, cov  # the interaction counted twice: conservative


def test_two_way_mean_squares_are_statsmodels_anova():
    import pandas as pd
    import statsmodels.formula.api as smf
    from statsmodels.stats.anova import anova_lm

    rng = np.random.default_rng(3)
    S, n = 4, 30
    ca, cb = _gaussian(rng, S, n, 0.3, 0.4, 0.5, 0.1)
    d = cb - ca
    frame = pd.DataFrame({"d": d.ravel(), "seed": np.repeat(np.arange(S), n), "image": np.tile(np.arange(n), S)})
    table = anova_lm(smf.ols("d ~ C(seed) + C(image)", frame).fit())
    ms_a, ms_b, ms_ab = table["mean_sq"]
    vc = variance_components(ca, cb)
    assert (vc.seed, vc.image, vc.interaction, vc.n_images) == pytest.approx(
        ((ms_a - ms_ab) / n, (ms_b - ms_ab) / S, ms_ab, n), rel=1e-10)
    two = difference(ca.mean(1), cb.mean(1), n_test=n, correct_a=ca, correct_b=cb, model="two_way")
    split = difference(ca.mean(1), cb.mean(1), n_test=n, correct_a=ca, correct_b=cb)
    assert two.delta == split.delta and two.se**2 == pytest.approx((ms_a + ms_b - ms_ab) / (S * n), rel=1e-10)
    # the split's seed and test terms are MS_A/(S n) and MS_B/(S n): the interaction twice
    assert split.se**2 - two.se**2 == pytest.approx(ms_ab / (S * n), rel=1e-10)
    df = (ms_a + ms_b - ms_ab) ** 2 / (ms_a**2 / (S - 1) + ms_b**2 / (n - 1) + ms_ab**2 / ((S - 1) * (n - 1)))
    assert two.df == pytest.approx(df, rel=1e-10)
    assert mean_variance(vc, S) == pytest.approx(((ms_a + ms_b - ms_ab) / (S * n), df), rel=1e-10)


def test_two_way_edge_cases_and_bad_input():
    rng = np.random.default_rng(0)
    c = rng.random((3, 400)) < 0.4
    # identical runs: the rule of three's floor, as in the split model
    same = difference(c.mean(1), c.mean(1), n_test=400, correct_a=c, correct_b=c, model="two_way")
    assert same.se == pytest.approx(math.sqrt(3) / 400) and same.df == math.inf
    # seed means that agree better than the interaction allows: at least MS_AB/(S n)
    d = np.zeros((3, 400))
    d[:, :200] = [[1], [-1], [1]] * np.where(np.arange(200) % 2, 1, -1)  # every seed mean 0, image means ±1/3
    two = difference(np.zeros(3), d.mean(1), n_test=400, correct_a=np.zeros_like(d), correct_b=d, model="two_way")
    vc = variance_components(np.zeros_like(d), d)
    assert vc.seed == 0 and two.se**2 == pytest.approx(vc.interaction / 1200) and two.df == 2 * 399
    # one seed: the split (nothing is counted twice)
    one = c[:1]
    assert difference(0.4, 0.41, n_test=400, correct_a=one, correct_b=~one, model="two_way") == difference(
        0.4, 0.41, n_test=400, correct_a=one, correct_b=~one)
    with pytest.raises(ValueError, match="model='bayes' is not allowed"):
        difference(0.4, 0.5, n_test=10, model="bayes")
    with pytest.raises(ValueError, match="model='two_way' is not allowed without correct_a"):
        difference([0.4, 0.5], [0.5, 0.5], n_test=10, model="two_way")
    with pytest.raises(ValueError, match="with test_var"):
        difference([0.4, 0.5], [0.5, 0.5], n_test=400, correct_a=c[:2], correct_b=c[:2], test_var=0.1, model="two_way")
    with pytest.raises(ValueError, match="S >= 2 seeds and n >= 2 images"):
        variance_components(c[:1], c[:1])
    with pytest.raises(ValueError, match="n_images=1 is not allowed: n_images must be an integer >= 2"):
        variance_components(c, c, n_images=1)


def test_runs_difference_passes_the_model():
    rng = np.random.default_rng(2)
    correct = rng.random((4, 300)) < 0.4
    acc = correct.mean(1)
    two = runs_difference(acc, correct, [0, 2], [1, 3], n_test=300, model="two_way")
    assert two == difference(acc[[0, 2]], acc[[1, 3]], n_test=300, correct_a=correct[[0, 2]],
                             correct_b=correct[[1, 3]], model="two_way")
    assert two.se < runs_difference(acc, correct, [0, 2], [1, 3], n_test=300).se


def test_power_exceeds_is_the_textbook_one_sample_t_power():
    from statsmodels.stats.power import TTestPower

    # seeds only (no image terms): Δ̂ is a mean of S per-seed differences, df S − 1, the one-sided
    # t test at 2.5 %: statsmodels' noncentral-t power (a pool so large that the rule of three's
    # floor, 3/n², never binds)
    vc = VarianceComponents(seed=0.02**2, image=0.0, interaction=0.0, n_images=10**6)
    for S, effect in ((3, 0.5), (6, 0.5), (12, 1.0), (4, 2.0)):
        want = TTestPower().power(effect_size=effect, nobs=S, alpha=0.025, alternative="larger")
        assert power(vc, S, margin=0.01, test="exceeds", true_diff=0.02 * effect) == pytest.approx(want, abs=1e-5)
    assert mean_variance(vc, 6) == pytest.approx((0.02**2 / 6, 5.0))


def _simulated_yes(vc, S, margin, delta, test, draws, seed=0):
    """The share of draws of Gaussian data with components ``vc`` that the claims' rule calls "yes"."""
    from iterlin.repro.claims import exceeds

    rng = np.random.default_rng(seed)
    yes = 0
    for _ in range(draws):
        ca, cb = _gaussian(rng, S, vc.n_images, *np.sqrt(vc[:3]), delta)
        d = difference(ca.mean(1), cb.mean(1), n_test=vc.n_images, correct_a=ca, correct_b=cb, model="two_way")
        yes += (on_par(d, margin) if test == "on_par" else exceeds(d)) == "yes"
    return yes / draws


@pytest.mark.parametrize("test, S, margin, delta", [("on_par", 3, 0.06, 0.03), ("on_par", 6, 0.04, 0.02),
                                                    ("exceeds", 4, 0.04, 0.03)])
def test_power_matches_a_brute_force_simulation_of_the_rule(test, S, margin, delta):
    # image and interaction components like fig3's pilot (per-image differences of two CIFAR-10
    # runs), a seed s.d. of 1 point, a smaller pool; df 2.4, 7 and 3.8: the t distribution matters
    # (at 3 seeds, plugging se = σ into the equivalence test's power gives 0.18, and a χ² with
    # Satterthwaite's df for se² 0.40; the rule reads yes in 0.46 of the draws)
    vc = VarianceComponents(seed=1e-4, image=0.003, interaction=0.066, n_images=300)
    want = power(vc, S, margin=margin, test=test, true_diff=delta)
    assert 0.3 < want < 0.9  # a power the simulation can tell apart from 0 and 1
    draws = 1500
    got = _simulated_yes(vc, S, margin, delta, test, draws)
    print(f"{test} S={S}: power {want:.3f}, simulated {got:.3f}")
    assert abs(got - want) <= 3 * math.sqrt(want * (1 - want) / draws) + 0.01, (got, want)


def test_seeds_needed_is_the_fewest_that_reach_the_target():
    vc = VarianceComponents(seed=1e-5, image=0.0028, interaction=0.066, n_images=4592)
    plan = seeds_needed(vc, margin=0.01)
    assert plan.power >= 0.8 > power(vc, plan.n_seeds - 1, margin=0.01)
    assert plan.n_images == 4592 and plan.se == pytest.approx(math.sqrt(mean_variance(vc, plan.n_seeds)[0]))
    assert seeds_needed(vc, margin=0.01, target=0.9).n_seeds >= plan.n_seeds
    # power falls as |Δ| grows (margin/2 is the worst case of |Δ| ≤ margin/2), and is symmetric
    assert power(vc, 8, margin=0.01, true_diff=0.0) > power(vc, 8, margin=0.01) == pytest.approx(
        power(vc, 8, margin=0.01, true_diff=-0.005))
    # the image terms do not shrink with seeds: a small pool cannot reach a tight margin
    with pytest.raises(ValueError, match="2400 images .* would reach it at 50 seeds"):
        seeds_needed(vc._replace(n_images=300), margin=0.01, max_seeds=50)
    with pytest.raises(ValueError, match="test='tost' is not allowed"):
        power(vc, 4, margin=0.01, test="tost")
    with pytest.raises(ValueError, match="n_seeds=1 is not allowed"):
        power(vc, 1, margin=0.01)
    with pytest.raises(ValueError, match="margin=0 is not allowed"):
        power(vc, 4, margin=0)
    with pytest.raises(ValueError, match="true_diff=nan is not allowed"):
        power(vc, 4, margin=0.01, true_diff=math.nan)
    with pytest.raises(ValueError, match="target=1 is not allowed"):
        seeds_needed(vc, margin=0.01, target=1)
    with pytest.raises(ValueError, match="variances must be finite"):
        power(vc._replace(image=-1.0), 4, margin=0.01)
    with pytest.raises(TypeError, match="must be a VarianceComponents"):
        power((0.0, 0.0, 0.0, 10), 4, margin=0.01)
