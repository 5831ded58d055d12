"""Fig. 1 (iterlin.experiments.fig1): how each K is trained, one tiny real run, convergence and the
summary numbers, and every claim's verdict on constructed results."""

from __future__ import annotations

import math

import numpy as np
import pytest

from iterlin.claims import NA
from iterlin.experiments import claims, fig1, resolve, run
from iterlin.experiments.fig1 import bridge_curves, diverged_K, seed_rmse, summary


def test_plan():
    config = dict(K=[1, 3, 10, 100, math.inf], steps=1000, n_relin=20, max_relin=100)
    plan = {p["K"]: p for p in fig1.plan(config)}
    assert plan[1]["method"] == "gd" and plan[1]["steps"] == 1000 and plan[3]["method"] == "gd"
    assert plan[3]["n_relin"] == 333
    assert plan[10]["method"] == "flow" and plan[10]["n_relin"] == 100  # ⌈1000/10⌉ = 100 ≤ max_relin
    assert plan[100]["method"] == "flow" and plan[100]["n_relin"] == 20  # at least n_relin
    assert plan[math.inf] == {"K": math.inf, "method": "kernel", "n_relin": 0, "steps": 0}


def test_config_validation():
    with pytest.raises(ValueError, match="damping"):
        resolve("fig1", damping=[1.0, 2.0])  # one λ in fig1
    with pytest.raises(ValueError, match="n_seeds"):
        resolve("fig1", n_seeds=0)
    assert resolve("fig1", K=7)["K"] == [1, 7]


def test_fig1_tiny(tmp_path):
    r = run("fig1", K=[1, 3, 100, math.inf], lr=0.02, steps=20, n_relin=2, max_relin=5, damping=1.0, gn_steps=2,
            n_seeds=2, n_train=8, n_test=30, n_evals=2, cache_dir=tmp_path, progress=False, verbose=False)
    assert r["K"].tolist() == [1, 3, 100, math.inf]
    assert r["method"].tolist() == ["gd", "gd", "flow", "kernel"]
    assert r["n_relin"].tolist() == [20, 6, 2, 0]
    for key in ("net_train_rmse", "net_test_rmse", "lin_train_rmse", "lin_test_rmse", "net_train_rmse_mid",
                "diverged"):
        assert np.asarray(r[key]).shape == (4, 2), key
    assert np.all(np.isfinite(r["lin_test_rmse"]))
    gn = r["gn"]
    assert gn["damping"].tolist() == [0.0, 1.0] and gn["net_test_rmse"].shape == (2, 2)
    assert r["seeds"].tolist() == [0, 1]
    # seed 1's K = 1 run differs from seed 0's (K-major, then seeds: no mix-up of the layout)
    assert r["net_test_rmse"][0, 0] != r["net_test_rmse"][0, 1]
    assert gn["equiv_K"][1] == pytest.approx(1 / (1.0 * 0.02 / 8))
    b = r["bridge"]
    assert b["sigma"].shape == (8,) and b["coeffs"].shape == (8,)
    assert b["K"].tolist() == list(fig1.BRIDGE_K)
    M, G = b["K"].shape[0], b["sigma_grid"].shape[0]
    for key in ("gd_filter", "gn_filter", "gn_filter_fit"):
        assert b[key].shape == (M, G), key
    np.testing.assert_allclose(b["damping"], 1 / (b["K"] * b["eta"]))
    s = fig1.summary(r)
    assert s["net_mean"].shape == (4,) and s["gn_mean"].shape == (2,)
    table = claims(r, directory=tmp_path)
    assert table.startswith("Claims of fig1 at scale 'smoke':") and "every run stays finite" in table
    assert (tmp_path / "fig1.json").is_file()


# ----------------------------------------------------------------------------------------------
# Claims on constructed results
# ----------------------------------------------------------------------------------------------

# η = 1e-3 and σ_min = 0.01: a linearisation is solved from K = 10 / (η σ_min) = 10⁶ on.
KS = [1, 3, 10, 100, 1e6, 1e7, math.inf]
METHODS = ["gd", "gd", "flow", "flow", "flow", "flow", "kernel"]


def _results(net=(0.5, 0.52, 0.55, 0.7, 1.0, 1.01, 2.0), kernel_lin=2.0, gn_test=(1.0, 0.7), damping=10.0,
             damping_fit=(1.5, 2.5), sigma=(0.01, 1.0, 100.0), train=0.01, mid=None, diverged=None):
    """Two seeds with equal numbers; λ = 10 ↔ K = 1/(λη) = 100."""
    NK, S = len(KS), 2
    net = np.repeat(np.asarray(net, np.float64)[:, None], S, axis=1)
    lin = net.copy()
    lin[-1] = kernel_lin
    train = np.broadcast_to(np.asarray(train, np.float64), (NK, S)).copy()
    eta = 1e-3
    return {
        "K": np.asarray(KS, np.float64), "method": np.asarray(METHODS),
        "net_test_rmse": net, "lin_test_rmse": lin, "net_train_rmse": train,
        "net_train_rmse_mid": train.copy() if mid is None else np.asarray(mid, np.float64),
        "diverged": np.zeros((NK, S), bool) if diverged is None else np.asarray(diverged, bool),
        "gn": {"damping": np.asarray([0.0, damping]),
               "equiv_K": np.asarray([math.inf, math.inf if damping == 0 else 1 / (damping * eta)]),
               "net_test_rmse": np.repeat(np.asarray(gn_test)[:, None], S, axis=1),
               "net_train_rmse": np.full((2, S), 0.01), "net_train_rmse_mid": np.full((2, S), 0.01),
               "diverged": np.zeros((2, S), bool)},
        "bridge": {"eta": np.asarray(eta), "sigma": np.asarray(sigma, np.float64), "K": np.asarray([10.0, 100.0]),
                   "damping": np.asarray([1.0, 2.0]), "damping_fit": np.asarray(damping_fit, np.float64)},
        "seeds": np.asarray([0, 1]),
    }


SMALL = "small K ≈ (stochastic) gradient descent"
LARGE = "large K → Gauss–Newton (each linearisation solved, Eq. 5)"
SAME = "all larger K give the same result"
BETWEEN = "in between: re-linearising before convergence"
KINF = "K = ∞ (no feature learning) generalises worse than K = 1"
DAMPING = "damping λ plays the role of K ≈ 1/(λη) (Sec. 3.3)"
BRIDGE = "K GD steps act on the residual like damping λ = 1/(Kη)"
CONVERGED = "every run is trained to convergence"
DIVERGED = "every run stays finite (no NaN or exploding loss)"


def _holds(results):
    return {r.claim: r.holds for r in fig1.claims(results)}


def test_summary_and_converged():
    res = _results()
    s = fig1.summary(res)
    assert float(s["sigma_min"]) == 0.01 and float(s["solved_from"]) == pytest.approx(1e6)
    np.testing.assert_allclose(s["net_mean"], [0.5, 0.52, 0.55, 0.7, 1.0, 1.01, 2.0])  # K = ∞: linear model
    np.testing.assert_allclose(s["gn_mean"], [1.0, 0.7])
    assert float(fig1.summary(_results(sigma=(0.0, 1e-20, 0.5, 100.0)))["sigma_min"]) == 0.5  # ~0 ignored
    conv = fig1.converged({"net_train_rmse": np.array([0.01, 0.5, 0.5, np.nan]),
                           "net_train_rmse_mid": np.array([0.5, 0.52, 1.0, np.nan])})
    assert conv.tolist() == [True, True, False, False]  # ≤ 0.02, or a plateau (≤ 10 % change)


def test_claims_all_hold():
    holds = _holds(_results())
    assert holds == {SMALL: "yes", LARGE: "yes", SAME: "yes", BETWEEN: NA, KINF: "yes", DAMPING: "yes",
                     BRIDGE: "yes", CONVERGED: "yes", DIVERGED: "yes"}
    rows = {r.claim: r for r in fig1.claims(_results())}
    assert rows[SAME].measured == "K=1e6: 1.000; K=1e7: 1.010; GN 1.000"
    assert rows[BETWEEN].measured == "K=100: 0.700"
    assert rows[DAMPING].measured == "damped GN λ=10: 0.700; K=100: 0.700 (1/(λη) = 100)"
    assert rows[CONVERGED].measured == "16/16 runs converged"  # 6 trained K × 2 seeds + 2 GN runs × 2 seeds


def test_claims_each_fail():
    cases = {
        SMALL: dict(net=(0.5, 0.52, 0.7, 0.7, 1.0, 1.01, 2.0)),  # K = 10 40 % above K = 1
        LARGE: dict(net=(0.5, 0.52, 0.55, 0.7, 1.0, 1.2, 2.0)),  # K = 10⁷ 20 % off GN (and not flat)
        SAME: dict(net=(0.5, 0.52, 0.55, 0.7, 1.1, 1.01, 2.0)),  # K = 10⁶ 10 % off GN
        KINF: dict(kernel_lin=0.4),
        DAMPING: dict(gn_test=(1.0, 0.9)),  # 0.2 from K = 100's 0.7
        BRIDGE: dict(damping_fit=(10.0, 2.5)),  # a factor 10
        CONVERGED: dict(train=0.5, mid=np.full((7, 2), 1.0)),
        DIVERGED: dict(diverged=[[False, False], [False, True]] + [[False, False]] * 5),
    }
    for claim, change in cases.items():
        holds = _holds(_results(**change))
        assert holds[claim] == "no", (claim, holds)
        others = {c: h for c, h in holds.items() if c not in (claim, BETWEEN, SAME if claim == LARGE else None)}
        assert set(others.values()) == {"yes"}, (claim, others)
    rows = {r.claim: r for r in fig1.claims(_results(**cases[DIVERGED]))}
    assert rows[DIVERGED].measured == "diverged: K=3 seed 1"
    rows = {r.claim: r for r in fig1.claims(_results(train=np.array([[0.01, 0.01]] + [[0.5, 0.5]] + [[0.01] * 2] * 5),
                                                     mid=np.array([[0.01, 0.01]] + [[1.0, 1.0]] + [[0.01] * 2] * 5)))}
    assert rows[CONVERGED].measured == "14/16 runs converged (not: K=3)"


def test_claims_not_applicable_or_absent():
    # σ_min = 1e-6: no K in the grid solves a linearisation
    holds = _holds(_results(sigma=(1e-6, 1.0, 100.0)))
    assert holds[SAME] == NA and holds[BETWEEN] == NA
    # λ = 0: no damped run to compare
    assert DAMPING not in _holds(_results(damping=0.0))


# The notebook's summary functions (pure functions of the results; no training).


def _summary_results():
    return {
        "K": np.array([1.0, 1e3, math.inf]),
        "method": np.array(["gd", "flow", "kernel"]),
        "net_test_rmse": np.array([[0.1, 0.3], [0.2, np.nan], [9.0, 9.0]]),
        "lin_test_rmse": np.array([[5.0, 5.0], [5.0, 5.0], [0.4, 0.6]]),
        "diverged": np.array([[False, False], [False, True], [False, False]]),
        "gn": {"net_test_rmse": np.array([[0.5, 0.7], [0.2, 0.2]])},
        "bridge": {"eta": np.asarray(0.01), "sigma": np.array([0.0, 2.0, 10.0]),
                   "sigma_grid": np.array([0.5, 1.0, 4.0]),
                   "gd_filter": np.array([[1.0, 0.5, 0.25]]), "gn_filter": np.array([[2.0, 1.0, 0.5]]),
                   "gn_filter_fit": np.array([[0.2, 0.1, 0.05]])},
    }


def test_seed_rmse_is_the_network_except_the_linear_model_at_k_inf():
    r = _summary_results()
    np.testing.assert_array_equal(seed_rmse(r), [[0.1, 0.3], [0.2, np.nan], [0.4, 0.6]])
    with np.errstate(invalid="ignore"):
        np.testing.assert_allclose(np.nanmean(seed_rmse(r), axis=1), summary(r)["net_mean"])


def test_summary_numbers_the_figure_draws():
    s = summary(_summary_results())
    assert float(s["sigma_min"]) == 2.0  # the zero eigenvalue is left out
    np.testing.assert_allclose(float(s["solved_from"]), 10 / (0.01 * 2.0))
    np.testing.assert_allclose(s["gn_mean"], [0.6, 0.2])


def test_diverged_K_any_seed():
    np.testing.assert_array_equal(diverged_K(_summary_results()), [False, True, False])


def test_bridge_curves_fractions_and_gauss_newton_filter():
    c = bridge_curves(_summary_results())
    grid = np.array([0.5, 1.0, 4.0])
    np.testing.assert_allclose(c["sigma_grid"], grid)
    np.testing.assert_allclose(c["gn0_filter"], 1 / grid)
    np.testing.assert_allclose(c["gd_filter"], [[1.0, 0.5, 0.25]])
    np.testing.assert_allclose(c["gd_fraction"], [[0.5, 0.5, 1.0]])
    np.testing.assert_allclose(c["gn_fraction"], [[1.0, 1.0, 2.0]])
    np.testing.assert_allclose(c["gn_fraction_fit"], [[0.1, 0.1, 0.2]])
