"""Fig. 9 (iterlin.experiments.fig9): damped Gauss–Newton over a λ grid, one tiny real run, the
slope variation and kept means exactly, and every claim's verdict on constructed results."""

from __future__ import annotations

import numpy as np
import pytest

from iterlin.repro.claims import NA, UNDECIDED
from iterlin.experiments import claims, fig9, resolve, run
from iterlin.experiments.fig9 import function_panels, kept_means, plot_functions


def test_config_validation():
    with pytest.raises(ValueError, match="damping"):
        resolve("fig9", damping=[0.1, -1.0])
    with pytest.raises(ValueError, match="x64"):
        resolve("fig9", x64="yes")
    assert resolve("fig9", damping=0.5).damping == (0.5,)
    assert resolve("fig9", damping=[1, 0]).damping == (0.0, 1.0)
    cpu = resolve("fig9", "cpu")
    assert cpu.n_seeds > resolve("fig9").n_seeds and cpu.n_train == 20 and cpu.n_test == 1000


def test_slope_variation():
    x = np.linspace(-1, 1, 201)
    assert fig9.slope_variation(np.abs(x), x) == pytest.approx(2.0)
    assert fig9.slope_variation(3 * x + 1, x) == pytest.approx(0.0, abs=1e-9)
    assert fig9.slope_variation(np.stack([np.abs(x), 2 * np.abs(x)]), x).shape == (2,)


def test_fig9_tiny(tmp_path):
    r = run("fig9", damping=[0.0, 1.0], steps=3, n_seeds=2, n_functions=1, n_train=8, n_test=30, n_evals=1,
            cache_dir=tmp_path, progress=False, verbose=False)
    assert isinstance(r, fig9.Results) and r.config.damping == (0.0, 1.0)
    assert r.damping.tolist() == [0.0, 1.0] and r.seeds.tolist() == [0, 1]
    for key in ("train_rmse", "test_rmse", "kept", "diverged", "slope_variation"):
        assert np.asarray(getattr(r, key)).shape == (2, 2), key
    assert r.curves.train_rmse.shape == (2, 2, 2) and r.curves.step.tolist() == [0, 3]
    assert r.functions.shape == (2, 1, 30)
    assert r.x_test.shape == (30,) and r.x_train.shape == (8,)
    assert np.all(np.isfinite(r.test_rmse))
    np.testing.assert_array_equal(r.kept, np.isfinite(r.train_rmse) & (r.train_rmse <= fig9.MAX_TRAIN_RMSE))
    np.testing.assert_allclose(r.curves.test_rmse[..., -1], r.test_rmse)
    table = str(claims(r, directory=tmp_path))
    assert table.startswith("Claims of fig9 at scale 'smoke':") and "every run stays finite" in table
    assert (tmp_path / "fig9.json").is_file()


def test_kept_means():
    m = fig9.kept_means(np.array([[1.0, 3.0, 100.0], [2.0, 2.0, 2.0]]),
                        np.array([[True, True, False], [False, False, False]]))
    assert m[0] == 2.0 and np.isnan(m[1])


# ----------------------------------------------------------------------------------------------
# Claims on constructed results: four values of λ, eight seeds
# ----------------------------------------------------------------------------------------------

FILTER = "runs with train RMSE > 2.5 are removed"
LOWER = "more damping → lower mean test RMSE"
CONSISTENT = "more damping → more consistent test RMSE"
MINIMUM = "the minimum test RMSE is similar at every λ"
SMOOTH = "more damping → smoother learned functions"
DIVERGED = "every run stays finite (no NaN or exploding loss)"

LAMS = (0.0, 0.01, 1.0, 100.0)
#: half the seeds find a good function at every λ; the other half are worse the less damping
LOW = np.array([0.10, 0.11, 0.12, 0.13])
HIGH = np.array([[1.5, 2.0, 2.5, 3.0], [0.8, 1.0, 1.2, 1.4], [0.4, 0.5, 0.6, 0.7], [0.15, 0.16, 0.17, 0.18]])
TEST = np.concatenate([np.tile(LOW, (4, 1)), HIGH], axis=1)  # (L, S) = (4, 8)
#: slope variation: rougher the less damping (a seed-to-seed variation that differs between λ)
SV = np.array([800.0, 300.0, 90.0, 40.0])[:, None] * np.stack([np.roll(np.linspace(0.8, 1.2, 8), i) for i in range(4)])


def _results(test=TEST, sv=SV, kept=None, diverged=None, damping=LAMS):
    test = np.asarray(test, np.float64)
    unused = np.zeros(0)  # what the claims do not read: the curves, the grids, the learned functions
    return fig9.Results(
        damping=np.asarray(damping, np.float64), seeds=np.arange(test.shape[1]),
        train_rmse=np.zeros_like(test), test_rmse=test,
        kept=np.ones_like(test, bool) if kept is None else np.asarray(kept, bool),
        diverged=np.zeros_like(test, bool) if diverged is None else np.asarray(diverged, bool),
        slope_variation=np.asarray(sv, np.float64), target_slope_variation=np.asarray(28.8),
        curves={}, x_test=unused, y_test=unused, x_train=unused, y_train=unused,
        functions=np.zeros((test.shape[0], 0, 0)),
    )


def _holds(results):
    return {r.claim: r.holds for r in fig9.claims(results)}


def _rows(results):
    return {r.claim: r for r in fig9.claims(results)}


def test_claims_hold():
    assert _holds(_results()) == {FILTER: NA, LOWER: "yes", CONSISTENT: "yes", MINIMUM: "yes", SMOOTH: "yes",
                                  DIVERGED: "yes"}
    rows = _rows(_results())
    assert rows[FILTER].measured == "kept per λ: λ=0: 8/8, λ=0.01: 8/8, λ=1: 8/8, λ=100: 8/8"
    geo = 10 ** np.log10(TEST).mean(axis=1)
    assert f"geometric mean: λ=0: {geo[0]:.2f}, λ=0.01: {geo[1]:.2f}, λ=1: {geo[2]:.2f}, λ=100: {geo[3]:.2f}; " \
        "monotone; arithmetic mean: λ=0: 1.18" in rows[LOWER].measured
    geo = 10 ** np.log10(SV).mean(axis=1)
    assert f"geometric mean: λ=0: {geo[0]:.0f}, λ=0.01: {geo[1]:.0f}" in rows[SMOOTH].measured
    assert "(target 29)" in rows[SMOOTH].measured


def test_claims_fail():
    res = _results(test=TEST[::-1] + np.array([[0.0], [0.1], [0.2], [0.4]]), sv=SV[::-1],
                   diverged=[[False] * 7 + [True]] + [[False] * 8] * 3)
    assert _holds(res) == {FILTER: NA, LOWER: "no", CONSISTENT: "no", MINIMUM: "no", SMOOTH: "no", DIVERGED: "no"}
    rows = _rows(res)
    assert rows[DIVERGED].measured == "diverged: λ=0 seed 7"
    assert "rises at λ 0→0.01" in rows[LOWER].measured


def test_the_whole_grid_counts_not_only_its_ends():
    # lower at the largest λ than at λ = 0 (the old rule's "yes"), but higher everywhere in between:
    # the trend over the grid rises
    base = np.stack([np.roll(TEST[3], i) for i in range(4)])  # (4, 8): a spread over seeds
    test = base + np.array([[0.35], [0.15], [1.35], [0.3]])
    res = _results(test=test)
    assert kept_means(res.test_rmse, res.kept)[3] < kept_means(res.test_rmse, res.kept)[0]
    rows = _rows(_results(test=test))
    assert rows[LOWER].holds == "no" and "rises at λ 0.01→1" in rows[LOWER].measured


def test_claims_undecided_within_the_seeds_noise():
    # every λ has the same values, shuffled over the seeds: no trend, a large spread
    rng = np.random.default_rng(1)
    values = np.array([0.2, 0.3, 0.5, 0.6, 0.9, 1.4, 2.0, 3.0])
    noisy = np.stack([rng.permutation(values) for _ in range(4)])
    holds = _holds(_results(test=noisy, sv=100 * noisy))
    assert holds[LOWER] == holds[CONSISTENT] == holds[SMOOTH] == UNDECIDED
    # the minimum of 2 seeds per λ is too noisy to be called similar within 0.1, or not
    two = np.array([[0.1, 0.3], [0.12, 0.35], [0.1, 0.4], [0.11, 0.3]])
    assert _holds(_results(test=two, sv=SV[:, :2]))[MINIMUM] == UNDECIDED


def test_one_wild_run_does_not_swamp_the_trend():
    # a kept run (train RMSE ≤ 2.5) that extrapolates wildly between the training points: the
    # arithmetic mean at λ = 0 jumps, its s.e. with it; on the figure's log axis the trend stays clear
    test = TEST.copy()
    test[0, 7] = 500.0
    rows = _rows(_results(test=test))
    # the log slope stays negative (-0.149 per decade), but with 8 seeds (t(7) = 2.36) its interval
    # now reaches past 0: undecided, never "no"
    assert rows[LOWER].holds == UNDECIDED and rows[LOWER].measured.startswith(
        "log₁₀ test RMSE: slope -0.149 per decade, 95 % t interval [-0.316, 0.017]")
    assert "arithmetic mean: λ=0: 63.3" in rows[LOWER].measured


def test_removed_runs_do_not_count():
    # λ = 0's high seeds (train RMSE > 2.5) are removed: the rest is as good as λ = 100's
    kept = np.ones((4, 8), bool)
    kept[0, 4:] = False
    test = TEST.copy()
    test[1:3, 4:] = TEST[3, 4:]
    rows = _rows(_results(test=test, kept=kept))
    assert rows[FILTER].measured == "kept per λ: λ=0: 4/8, λ=0.01: 8/8, λ=1: 8/8, λ=100: 8/8"
    # the slope is positive, but λ = 0 keeps 4 seeds (t(3) = 3.18): its interval holds 0
    assert rows[LOWER].holds == UNDECIDED and "slope 0.012 per decade" in rows[LOWER].measured
    assert "λ=0: 0.12" in rows[LOWER].measured and "nan" not in rows[LOWER].measured
    # with them kept the trend is clear
    assert _holds(_results(test=TEST))[LOWER] == "yes"


def test_claims_not_applicable():
    for res in (_results(test=TEST[:1], sv=SV[:1], damping=(1.0,)),
                _results(test=TEST[:2], sv=SV[:2], damping=(0.0, 1.0), kept=[[False] * 8, [True] * 8]),
                _results(test=TEST[:, :1], sv=SV[:, :1])):  # one seed: no spread to judge a trend by
        rows = fig9.claims(res)
        assert [r.holds for r in rows] == [NA] * 5 + ["yes"]
        assert rows[1].measured == "needs ≥ 2 values of λ with ≥ 2 kept runs"


# The trend and the bootstrap, against direct computations


def test_log_lambda_puts_zero_one_decade_left():
    np.testing.assert_allclose(fig9.log_lambda([0.0, 1e-3, 0.1, 10.0]), [-4.0, -3.0, -1.0, 1.0])
    np.testing.assert_allclose(fig9.log_lambda([0.0]), [0.0])
    with pytest.raises(ValueError, match="damping"):
        fig9.log_lambda([0.1, -1.0])


def test_trend_with_every_seed_is_the_mean_of_the_seeds_slopes():
    rng = np.random.default_rng(0)
    x = fig9.log_lambda(LAMS)
    v = rng.normal(size=(4, 8)) + 0.3 * x[:, None]
    t = fig9.trend(x, v)
    per_seed = np.asarray([np.polyfit(x, v[:, s], 1)[0] for s in range(8)])
    assert t.slope == pytest.approx(per_seed.mean())
    assert t.se == pytest.approx(per_seed.std(ddof=1) / np.sqrt(8))
    assert t.slope == pytest.approx(np.polyfit(x, v.mean(axis=1), 1)[0])
    assert t.used.all() and t.df == 7 and t.lo == pytest.approx(t.slope - 2.364624 * t.se, rel=1e-6)  # t_0.975(7)


def test_trend_with_removed_runs_matches_a_seed_bootstrap():
    # independent seeds, some runs removed: the s.e. from the pairwise covariances is close to the
    # spread of the slope over resampled seeds (a second route)
    rng = np.random.default_rng(2)
    x = fig9.log_lambda(LAMS)
    S = 400
    v = rng.normal(size=(4, S)) + 0.5 * rng.normal(size=(1, S)) - 0.2 * x[:, None]  # a shared seed effect
    kept = rng.random((4, S)) > 0.2
    t = fig9.trend(x, v, kept)
    boot = []
    for _ in range(400):
        cols = rng.integers(0, S, S)
        boot.append(fig9.trend(x, v[:, cols], kept[:, cols]).slope)
    assert t.se == pytest.approx(np.std(boot), rel=0.15)
    assert t.slope == pytest.approx(-0.2, abs=3 * t.se)


def test_trend_needs_two_values_of_lambda_with_two_seeds():
    t = fig9.trend([0.0, 1.0], [[1.0, 2.0], [3.0, np.nan]])
    assert np.isnan(t.slope) and np.isnan(t.se) and t.used.tolist() == [True, False]
    with pytest.raises(ValueError, match="values"):
        fig9.trend([0.0, 1.0, 2.0], np.ones((2, 3)))


def test_minimum_range_and_its_bootstrap():
    test = np.array([[0.1, 0.5, 0.3], [0.2, 0.4, 0.9]])
    kept = np.array([[True, True, True], [False, True, True]])
    rng_, lo, hi = fig9.minimum_range(test, kept, n_bootstrap=200)
    assert rng_ == pytest.approx(0.4 - 0.1)  # λ 0's min 0.1, λ 1's 0.4 (0.2 was removed)
    assert lo <= rng_ <= hi
    same = np.tile([[0.1, 0.2, 0.3]], (2, 1))  # identical λ: every resample has range 0
    assert fig9.minimum_range(same, np.ones((2, 3), bool), n_bootstrap=50) == (0.0, 0.0, 0.0)
    assert fig9.minimum_range(test, kept) == fig9.minimum_range(test, kept)  # a fixed generator seed


# The notebook's summary functions (pure functions of the results; no training).


@pytest.mark.parametrize("L, n, want", [
    (6, 4, [0, 2, 3, 5]),
    (7, 4, [0, 2, 4, 6]),
    (3, 4, [0, 1, 2]),
    (1, 4, [0]),
    (5, 1, [0]),
    (0, 4, []),
])
def test_function_panels_spread_over_the_grid(L, n, want):
    assert function_panels(np.linspace(0, 1, L), n) == want


def test_function_panels_default_is_four():
    assert function_panels(np.arange(6.0)) == [0, 2, 3, 5]


@pytest.mark.parametrize("n", [0, -1, 2.5, True])
def test_function_panels_bad_n(n):
    with pytest.raises(ValueError, match="^n="):
        function_panels(np.arange(6.0), n)


def test_kept_means_over_kept_seeds_only():
    test = np.array([[1.0, 3.0, 100.0], [2.0, 2.0, 2.0]])
    kept = np.array([[True, True, False], [False, False, False]])
    np.testing.assert_array_equal(kept_means(test, kept), [2.0, np.nan])


def test_geometric_means_over_kept_seeds_match_the_trend():
    kept = np.ones((4, 8), bool)
    kept[0, 7] = False
    res = _results(kept=kept)
    g = fig9.geometric_means(res.test_rmse, res.kept)
    direct = [10 ** np.log10(TEST[i][kept[i]]).mean() for i in range(4)]
    np.testing.assert_allclose(g.mean, direct)
    t = fig9.trend(fig9.log_lambda(LAMS), np.log10(TEST), kept)  # the claims' per-λ means, the same numbers
    np.testing.assert_allclose(np.log10(g.mean), t.means)
    np.testing.assert_allclose(np.log10(g.hi) - np.log10(g.mean), t.ses)
    assert np.all(g.lo < g.mean) and np.all(g.mean < g.hi)


# ----------------------------------------------------------------------------------------------
# the figure: plot_functions


def test_plot_functions_one_line_per_seed_the_target_and_the_training_points(ax):
    f = np.arange(12.0).reshape(4, 3)  # 4 seeds on 3 points
    lines = plot_functions(ax, [0, 1, 2], f, y_target=[1, 2, 3], x_train=[0, 2], y_train=[1, 3])
    assert len(lines) == 4 and len(ax.lines) == 6
    np.testing.assert_allclose(lines[2].get_ydata(), f[2])
    target, train = ax.lines[4], ax.lines[5]
    assert target.get_label() == "target" and target.get_linestyle() == "--"
    assert train.get_label() == "train" and train.get_marker() == "o"
    np.testing.assert_allclose(train.get_xydata(), [[0, 1], [2, 3]])


@pytest.mark.parametrize("kwargs, name", [
    (dict(functions=np.zeros((4, 2))), "functions"),
    (dict(y_target=[1, 2]), "y_target"),
    (dict(x_train=[0, 2]), "y_train"),
    (dict(x_train=[0, 2], y_train=[1]), "y_train"),
])
def test_plot_functions_bad_arguments_name_the_parameter(ax, kwargs, name):
    args = dict(functions=np.zeros((4, 3))) | kwargs
    with pytest.raises(ValueError, match=f"^{name} "):
        plot_functions(ax, [0, 1, 2], args.pop("functions"), **args)

