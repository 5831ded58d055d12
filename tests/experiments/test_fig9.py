"""Fig. 9 (iterlin.experiments.fig9): damped Gauss–Newton over a λ grid, one tiny real run, the
slope variation and kept means exactly, and every claim's verdict on constructed results."""

from __future__ import annotations

import numpy as np
import pytest

from iterlin.claims import NA
from iterlin.experiments import claims, fig9, resolve, run
from iterlin.experiments.fig9 import function_panels, kept_means


def test_config_validation():
    with pytest.raises(ValueError, match="damping"):
        resolve("fig9", damping=[0.1, -1.0])
    with pytest.raises(ValueError, match="x64"):
        resolve("fig9", x64="yes")
    assert resolve("fig9", damping=0.5)["damping"] == [0.5]
    assert resolve("fig9", damping=[1, 0])["damping"] == [0.0, 1.0]


def test_slope_variation():
    x = np.linspace(-1, 1, 201)
    assert fig9.slope_variation(np.abs(x), x) == pytest.approx(2.0)
    assert fig9.slope_variation(3 * x + 1, x) == pytest.approx(0.0, abs=1e-9)
    assert fig9.slope_variation(np.stack([np.abs(x), 2 * np.abs(x)]), x).shape == (2,)


def test_fig9_tiny(tmp_path):
    r = run("fig9", damping=[0.0, 1.0], steps=3, n_seeds=2, n_functions=1, n_train=8, n_test=30, n_evals=1,
            cache_dir=tmp_path, progress=False, verbose=False)
    assert r["damping"].tolist() == [0.0, 1.0] and r["seeds"].tolist() == [0, 1]
    for key in ("train_rmse", "test_rmse", "kept", "diverged", "slope_variation"):
        assert np.asarray(r[key]).shape == (2, 2), key
    assert r["curves"]["train_rmse"].shape == (2, 2, 2) and r["curves"]["step"].tolist() == [0, 3]
    assert r["functions"].shape == (2, 1, 30)
    assert r["x_test"].shape == (30,) and r["x_train"].shape == (8,)
    assert np.all(np.isfinite(r["test_rmse"]))
    np.testing.assert_array_equal(r["kept"], np.isfinite(r["train_rmse"]) & (r["train_rmse"] <= fig9.MAX_TRAIN_RMSE))
    np.testing.assert_allclose(r["curves"]["test_rmse"][..., -1], r["test_rmse"])
    table = claims(r, directory=tmp_path)
    assert table.startswith("Claims of fig9 at scale 'smoke':") and "every run stays finite" in table
    assert (tmp_path / "fig9.json").is_file()


def test_kept_means():
    res = {"test_rmse": np.array([[1.0, 3.0, 100.0], [2.0, 2.0, 2.0]]),
           "kept": np.array([[True, True, False], [False, False, False]])}
    m = fig9.kept_means(res)
    assert m[0] == 2.0 and np.isnan(m[1])


# ----------------------------------------------------------------------------------------------
# Claims on constructed results: λ = 0 and λ = 10, three seeds
# ----------------------------------------------------------------------------------------------

FILTER = "runs with train RMSE > 2.5 are removed"
LOWER = "more damping → lower mean test RMSE"
CONSISTENT = "more damping → more consistent test RMSE"
MINIMUM = "the minimum test RMSE is similar at every λ"
SMOOTH = "more damping → smoother learned functions"
DIVERGED = "every run stays finite (no NaN or exploding loss)"


def _results(test_lo=(0.5, 1.5, 3.0), test_hi=(0.52, 0.6, 0.7), sv_lo=(80, 90, 100), sv_hi=(30, 35, 40),
             kept=None, diverged=None, damping=(0.0, 10.0)):
    L = len(damping)
    test = np.array([test_lo, test_hi][:L], np.float64)
    return {
        "damping": np.asarray(damping, np.float64), "seeds": np.array([0, 1, 2]),
        "test_rmse": test, "kept": np.ones_like(test, bool) if kept is None else np.asarray(kept, bool),
        "slope_variation": np.array([sv_lo, sv_hi][:L], np.float64), "target_slope_variation": np.asarray(28.8),
        "diverged": np.zeros_like(test, bool) if diverged is None else np.asarray(diverged, bool),
    }


def _holds(results):
    return {r.claim: r.holds for r in fig9.claims(results)}


def test_claims_hold():
    assert _holds(_results()) == {FILTER: NA, LOWER: "yes", CONSISTENT: "yes", MINIMUM: "yes", SMOOTH: "yes",
                                  DIVERGED: "yes"}
    rows = fig9.claims(_results())
    assert rows[0].measured == "kept per λ: λ=0: 3/3, λ=10: 3/3"
    assert rows[4].measured == "median slope variation: λ=0: 90, λ=10: 35 (target 29)"


def test_claims_fail():
    res = _results(test_lo=(0.52, 0.6, 0.7), test_hi=(0.8, 1.5, 3.0), sv_lo=(30, 35, 40), sv_hi=(80, 90, 100),
                   diverged=[[False, False, True], [False, False, False]])
    assert _holds(res) == {FILTER: NA, LOWER: "no", CONSISTENT: "no", MINIMUM: "no", SMOOTH: "no", DIVERGED: "no"}
    assert fig9.claims(res)[-1].measured == "diverged: λ=0 seed 2"


def test_removed_runs_do_not_count():
    # λ = 0's third seed (train RMSE > 2.5) is removed: without it λ = 0 is lower and more consistent
    res = _results(test_lo=(0.5, 0.5, 50.0), test_hi=(0.52, 0.6, 0.7), kept=[[True, True, False], [True] * 3])
    holds = _holds(res)
    assert holds[LOWER] == "no" and holds[CONSISTENT] == "no" and holds[MINIMUM] == "yes"
    assert fig9.claims(res)[0].measured == "kept per λ: λ=0: 2/3, λ=10: 3/3"


def test_claims_not_applicable():
    for res in (_results(damping=(1.0,)), _results(kept=[[False] * 3, [True] * 3])):
        rows = fig9.claims(res)
        assert [r.holds for r in rows] == [NA, NA, "yes"] and rows[1].claim == "more damping helps"


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
    assert function_panels({"damping": np.linspace(0, 1, L)}, n) == want


def test_function_panels_default_is_four():
    assert function_panels({"damping": np.arange(6.0)}) == [0, 2, 3, 5]


@pytest.mark.parametrize("n", [0, -1, 2.5, True])
def test_function_panels_bad_n(n):
    with pytest.raises(ValueError, match="^n="):
        function_panels({"damping": np.arange(6.0)}, n)


def test_kept_means_over_kept_seeds_only():
    r = {"test_rmse": np.array([[1.0, 3.0, 100.0], [2.0, 2.0, 2.0]]),
         "kept": np.array([[True, True, False], [False, False, False]])}
    np.testing.assert_array_equal(kept_means(r), [2.0, np.nan])
