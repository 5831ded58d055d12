"""Fig. 1 (iterlin.experiments.fig1): how each K is trained, one tiny real run, convergence and the
summary numbers, and every claim's verdict on constructed results."""

from __future__ import annotations

import math

import numpy as np
import pytest

from iterlin.repro.claims import CHECKS_HEADING, NA, UNDECIDED, claims_table, exceeds
from iterlin.experiments import claims, fig1, resolve, run
from iterlin.experiments.fig1 import (
    bridge_curves,
    diverged_K,
    literal_stable,
    plot_literal,
    plot_stability_bound,
    seed_rmse,
    summary,
)


def test_plan():
    config = fig1.EXPERIMENT.get_config(K=[1, 3, 10, 100, math.inf], steps=1000, n_relin=20, max_relin=100)
    plan = {p.K: p for p in fig1.plan(config)}
    assert plan[1] == fig1.RunPlan(K=1.0, method="gd", n_relin=1000, steps=1000) and plan[3].method == "gd"
    assert plan[3].n_relin == 333
    assert plan[10].method == "flow" and plan[10].n_relin == 100  # ⌈1000/10⌉ = 100 ≤ max_relin
    assert plan[100].method == "flow" and plan[100].n_relin == 20  # at least n_relin
    assert plan[math.inf] == fig1.RunPlan(K=math.inf, method="kernel", n_relin=0, steps=0)


def test_config_validation():
    with pytest.raises(ValueError, match="damping"):
        resolve("fig1", damping=[1.0, -2.0])
    with pytest.raises(ValueError, match="n_seeds"):
        resolve("fig1", n_seeds=0)
    assert resolve("fig1", K=7).K == (1, 7)
    assert resolve("fig1", damping=10.0).damping == (10.0,)  # one λ: a list of one
    cpu = resolve("fig1", "cpu")
    assert cpu.n_seeds >= 10 and cpu.n_train == 20 and cpu.n_test == 1000  # the paper's data, many seeds


def test_fig1_tiny(tmp_path):
    r = run("fig1", K=[1, 3, 100, math.inf], lr=0.02, steps=20, n_relin=2, max_relin=5, damping=[1.0, 0.5], gn_steps=2,
            n_seeds=2, n_train=8, n_test=30, n_evals=2, cache_dir=tmp_path, progress=False, verbose=False)
    assert isinstance(r, fig1.Results) and r.config.scale == "smoke"
    assert r.K.tolist() == [1, 3, 100, math.inf]
    assert r.method.tolist() == ["gd", "gd", "flow", "kernel"]
    assert r.n_relin.tolist() == [20, 6, 2, 0]
    for key in ("net_train_rmse", "net_test_rmse", "lin_train_rmse", "lin_test_rmse", "net_train_rmse_mid",
                "diverged"):
        assert np.asarray(getattr(r, key)).shape == (4, 2), key
    assert np.all(np.isfinite(r.lin_test_rmse))
    gn = r.gn
    assert gn.damping.tolist() == [0.0, 0.5, 1.0]
    for key in ("net_test_rmse", "net_train_rmse", "net_train_rmse_mid", "diverged"):
        assert gn[key].shape == (3, 2), key
    assert r.seeds.tolist() == [0, 1]
    # seed 1's K = 1 run differs from seed 0's (K-major, then seeds: no mix-up of the layout)
    assert r.net_test_rmse[0, 0] != r.net_test_rmse[0, 1]
    # the Gauss–Newton runs are λ-major, then seeds: each λ's seeds differ, and so do the λ
    assert gn.net_test_rmse[1, 0] != gn.net_test_rmse[1, 1] and gn.net_test_rmse[1, 0] != gn.net_test_rmse[2, 0]
    np.testing.assert_allclose(gn.equiv_K, [math.inf, 1 / (0.5 * 0.02 / 8), 1 / (1.0 * 0.02 / 8)])
    b = r.bridge
    assert b.sigma.shape == (8,) and b.coeffs.shape == (8,)
    assert b.K.tolist() == list(fig1.BRIDGE_K)
    M, G = b.K.shape[0], b.sigma_grid.shape[0]
    for key in ("gd_filter", "gn_filter", "gn_filter_fit"):
        assert b[key].shape == (M, G), key
    np.testing.assert_allclose(b.damping, 1 / (b.K * b.eta))
    s = fig1.summary(r)
    assert s.net_mean.shape == (4,) and s.gn_mean.shape == (3,)
    table = str(claims(r, directory=tmp_path))
    assert table.startswith("Claims of fig1 at scale 'smoke':") and "every run stays finite" in table
    assert CHECKS_HEADING in table
    assert (tmp_path / "fig1.json").is_file()


# ----------------------------------------------------------------------------------------------
# Claims on constructed results
# ----------------------------------------------------------------------------------------------

# η = 1e-3 and σ_min = 0.01: a linearisation is solved from K = 10 / (η σ_min) = 10⁶ on.
KS = [1, 3, 10, 100, 1000, 1e4, 1e5, 1e6, 1e7, math.inf]
METHODS = ["gd", "gd"] + ["flow"] * 7 + ["kernel"]
#: the mean test RMSE per K: flat up to K = 100, then a curve the damped runs can be told apart on
NET = (0.10, 0.10, 0.105, 0.11, 0.45, 0.15, 0.40, 1.0, 1.0, 5.0)
#: damped GN λ (η = 1e-3: 1/(λη) = 1e5, 1e4, 1000, 100) ...
LAMS = (0.01, 0.1, 1.0, 10.0)
#: ... and their test RMSE when damping λ plays the role of K = 1/(λη): [λ = 0, then LAMS]
GN_TRUE = (1.0, 0.40, 0.15, 0.45, 0.11)
#: per-seed noise (4 seeds) of the K runs and of the Gauss–Newton runs (paired differences have a spread)
NOISE_K = np.array([0.005, -0.005, 0.0025, -0.0025])
NOISE_GN = np.array([0.005, 0.0, -0.005, 0.0])


def _literal(S=4, offset=0.0, noise=None, diverged=None, bound_last=None):
    """Constructed ``Results.literal``: rates (0.02, 0.005) × K (10, 100) × S seeds; the closed form at 0.5,
    the literal runs at 0.5 + offset + noise (per seed); rate 0.02 at K = 10 diverged in every seed by default, on a
    linearisation with bound 0.01 < 0.02; every other bound 0.5."""
    NR, NL, E = 2, 2, 3
    noise = np.resize(np.array([0.002, -0.002, 0.001, -0.001]), S) if noise is None else np.asarray(noise)
    flow = np.full((NR, NL, S), 0.5)
    div = np.zeros((NR, NL, S), bool)
    if diverged is None:
        div[0, 0] = True
    else:
        div[...] = diverged
    bound = np.full((NR, NL, S, E), 0.5)
    bound[..., 0] = 1.3
    bound[..., -1] = np.where(div, 0.01, 0.5) if bound_last is None else bound_last
    net = np.where(div, np.nan, flow + offset + noise)
    return fig1.LiteralRuns(
        K=np.array([10.0, 100.0]), lr=np.array([0.02, 0.005]), steps=np.asarray(5000), n_relin=np.array([500, 50]),
        tau=np.array([[0.01, 0.1], [0.0025, 0.025]]), net_test_rmse=net, net_train_rmse=net, lin_test_rmse=net,
        diverged=div, diverged_step=np.where(div, 1500, -1), bound_step=np.array([0, 2500, 5000]), bound=bound,
        flow_net_test_rmse=flow, flow_net_train_rmse=flow, flow_diverged=np.zeros((NR, NL, S), bool))


def _bridge(**columns):
    """A constructed ``Results.bridge``: M = 2 periods, a grid of 3 points; ``columns`` replace these."""
    grid = np.array([0.5, 1.0, 4.0])
    return fig1.Bridge(**{
        "eta": np.asarray(1e-3), "sigma": np.array([0.01, 1.0, 100.0]), "coeffs": np.ones(3),
        "K": np.asarray([10.0, 100.0]), "damping": np.asarray([1.0, 2.0]), "damping_fit": np.asarray([1.5, 2.5]),
        "sigma_grid": grid, "gd_filter": np.ones((2, 3)), "gn_filter": np.ones((2, 3)),
        "gn_filter_fit": np.ones((2, 3)), **columns})


def _results(net=NET, kernel_lin=2.0, gn_test=GN_TRUE, lams=LAMS, damping_fit=(1.5, 2.5), sigma=(0.01, 1.0, 100.0),
             train=0.01, mid=None, diverged=None, noise_k=NOISE_K, noise_gn=NOISE_GN, literal="default",
             first_step="default"):
    """S = len(noise_k) seeds: run i's value + the noise rolled by i (so paired differences between runs
    have a spread over seeds); per-run arrays (NK, S) / (L, S) may be given instead. ``first_step``:
    by default half the bound e^(−σ_min Kη) for the closed-form K (every seed's σ_min the smallest
    non-zero of ``sigma``), NaN for the others; None: results from before it was recorded."""
    S = len(noise_k)
    NK = len(KS)

    def seeds(values, noise):
        values = np.asarray(values, np.float64)
        if values.ndim == 2:
            return values
        return values[:, None] + np.stack([np.roll(np.asarray(noise, np.float64), i) for i in range(len(values))])

    net = seeds(net, noise_k)
    lin = net.copy()
    lin[-1] = kernel_lin + np.roll(noise_k, 1) if np.ndim(kernel_lin) == 0 else kernel_lin
    gn_test = seeds(gn_test, noise_gn)
    train = np.broadcast_to(np.asarray(train, np.float64), (NK, S)).copy()
    eta = 1e-3
    gl = np.asarray((0.0,) + tuple(lams))
    L = len(gl)
    sigma_min = min(v for v in sigma if v > 0)
    return fig1.Results(
        K=np.asarray(KS, np.float64), method=np.asarray(METHODS),
        n_relin=np.asarray([1000, 333] + [100] * 7 + [0]), time=np.asarray([10.0] * (NK - 1) + [math.inf]),
        net_test_rmse=net, lin_test_rmse=lin, net_train_rmse=train, lin_train_rmse=train.copy(),
        net_train_rmse_mid=train.copy() if mid is None else np.asarray(mid, np.float64),
        diverged=np.zeros((NK, S), bool) if diverged is None else np.asarray(diverged, bool),
        gn=fig1.GaussNewtonRuns(
            damping=gl, equiv_K=np.asarray([math.inf] + [1 / (v * eta) for v in lams]), net_test_rmse=gn_test[:L],
            net_train_rmse=np.full((L, S), 0.01), net_train_rmse_mid=np.full((L, S), 0.01),
            diverged=np.zeros((L, S), bool)),
        bridge=_bridge(eta=np.asarray(eta), sigma=np.asarray(sigma, np.float64),
                       damping_fit=np.asarray(damping_fit, np.float64)),
        x_test=np.linspace(-1, 1, 5), y_test=np.zeros(5), seeds=np.arange(S),
        literal=None if literal is None else _literal(S) if isinstance(literal, str) else literal,
        first_step=None if first_step is None else np.asarray(first_step, np.float64) if not isinstance(
            first_step, str) else np.where(np.asarray(METHODS)[:, None] == "flow",
                                           0.5 * np.exp(-np.asarray(KS, np.float64)[:, None] * eta * sigma_min), np.nan)
        * np.ones((1, S)),
        sigma_min=np.full(S, sigma_min),
    )


SMALL = "small K ≈ (stochastic) gradient descent"
LARGE = "large K → Gauss–Newton: a solved linearisation is the Gauss–Newton step (Eq. 5)"
BETWEEN = "in between: re-linearising before convergence"
KINF = "K = ∞ (no feature learning) generalises worse than K = 1"
DAMPING = "damping λ plays the role of K ≈ 1/(λη) (Sec. 3.3)"
BRIDGE = "K GD steps act on the residual like damping λ = 1/(Kη)"
CONVERGED = "every run is trained to convergence"
DIVERGED = "every run stays finite (no NaN or exploding loss)"
LITERAL = "literal GD at large K ≈ its closed form (the small-lr limit) where stable"
LITERAL_BOUND = "literal GD diverges only above the stability bound lr > 2/λ_max(G(θ_s))"
CHECKS = {LARGE, BRIDGE, LITERAL_BOUND}


def _holds(results):
    return {r.claim: r.holds for r in fig1.claims(results)}


def _rows(results):
    return {r.claim: r for r in fig1.claims(results)}


def test_summary_and_converged():
    res = _results(noise_k=np.zeros(2), noise_gn=np.zeros(2))
    s = fig1.summary(res)
    assert float(s.sigma_min) == 0.01 and float(s.solved_from) == pytest.approx(1e6)
    np.testing.assert_allclose(s.net_mean, NET[:-1] + (2.0,))  # K = ∞: the linear model
    np.testing.assert_allclose(s.gn_mean, GN_TRUE)
    assert float(fig1.summary(_results(sigma=(0.0, 1e-20, 0.5, 100.0))).sigma_min) == 0.5  # ~0 ignored
    conv = fig1.converged(np.array([0.01, 0.5, 0.5, np.nan]), np.array([0.5, 0.52, 1.0, np.nan]))
    assert conv.tolist() == [True, True, False, False]  # ≤ 0.02, or a plateau (≤ 10 % change)


def test_gn_damping_puts_gauss_newton_first():
    assert fig1.gn_damping(fig1.EXPERIMENT.get_config(damping=[10.0, 0.0, 0.1, 10.0])) == [0.0, 0.1, 10.0]


def test_seed_difference_against_a_direct_computation():
    a = np.array([1.0, 2.0, 3.0, np.nan, 5.0])
    b = np.array([1.5, 2.0, 4.0, 1.0, 5.2])
    d = fig1.seed_difference(a, b)
    ok = np.isfinite(a) & np.isfinite(b)
    diff = (b - a)[ok]
    assert d.n_seeds == 4 and d.paired
    assert d.delta == pytest.approx(diff.mean())
    assert d.se == pytest.approx(diff.std(ddof=1) / math.sqrt(diff.size))
    assert d.df == 3 and d.lo == pytest.approx(diff.mean() - 3.182446 * d.se, rel=1e-6)  # t_0.975(3)
    one = fig1.seed_difference([1.0], [3.0])
    assert one.n_seeds == 1 and math.isnan(one.se)
    assert fig1.decide(one, exceeds) == UNDECIDED  # one seed: no spread to judge the noise by
    assert fig1.interval(one) == "Δ +2.000 (1 seed)"
    assert fig1.interval(fig1.seed_difference([0.0, 0.0], [0.1, 0.5])) == "Δ +0.300 [-2.241, +2.841]"  # t(1) = 12.7
    with pytest.raises(ValueError, match="a and b"):
        fig1.seed_difference([1.0, 2.0], [1.0])


def test_claims_all_hold():
    rows = fig1.claims(_results())
    holds = {r.claim: r.holds for r in rows}
    assert holds == {SMALL: "yes", LARGE: "yes", BETWEEN: NA, KINF: "yes", DAMPING: "yes", BRIDGE: "yes",
                     CONVERGED: "yes", DIVERGED: "yes", LITERAL: "yes", LITERAL_BOUND: "yes"}
    assert {r.claim for r in rows if r.kind == "check"} == CHECKS  # by construction: listed apart
    rows = {r.claim: r for r in rows}
    assert rows[LARGE].measured == (
        "one linearisation, largest distance over 4 seeds: K=1e6: 2.3e-05 (bound 4.5e-05); K=1e7: 1.9e-44 "
        "(bound 3.7e-44); after all their linearisations (reported only: λ = 0 Gauss–Newton amplifies rounding), "
        "final test RMSE K=1e6: 1.000, K=1e7: 1.000, GN (λ = 0): 1.000, largest deviation of a seed 1.0 %")
    assert rows[BETWEEN].measured == "K=100: 0.110; K=1000: 0.450; K=1e4: 0.150; K=1e5: 0.400"
    assert rows[DAMPING].measured.startswith("λ=0.01 ↔ K=1e5: 0.400 vs 0.400")
    # K = 1/(10λη) pairs λ = 10 with K = 10, on the flat part: not refuted there
    assert rows[DAMPING].measured.endswith("wrong pairings: K = 10/(λη) refuted by λ = 0.01, 0.1, 1, 10; "
                                           "K = 1/(10λη) refuted by λ = 0.01, 0.1, 1")
    assert rows[CONVERGED].measured == "56/56 runs converged"  # 9 trained K × 4 seeds + 5 GN runs (λ = 0 and 4 damped) × 4 seeds
    table = claims_table(fig1.claims(_results()))
    assert table.index(CHECKS_HEADING) < table.index(LARGE) and table.index(KINF) < table.index(CHECKS_HEADING)


def test_claims_each_fail():
    above = np.full((len(KS), 4), np.nan)
    above[2:9] = 0.0
    above[8, 2] = 1e-3  # K = 10⁷, seed 2: one linearisation 1e-3 from the GN step, above e^(−σ_min τ) = e^(−100)
    cases = {
        SMALL: dict(net=(0.10, 0.10, 0.14) + NET[3:]),  # K = 10 40 % above K = 1, beyond the seeds' noise
        LARGE: dict(first_step=above),
        KINF: dict(kernel_lin=0.05),
        DAMPING: dict(gn_test=(1.0, 0.40, 0.15, 0.15, 0.11)),  # λ = 1 ends at 0.15, K = 1000 at 0.45
        BRIDGE: dict(damping_fit=(10.0, 2.5)),  # a factor 10
        CONVERGED: dict(train=0.5, mid=np.full((len(KS), 4), 1.0)),
        DIVERGED: dict(diverged=[[False] * 4, [False, True, False, False]] + [[False] * 4] * (len(KS) - 2)),
    }
    for claim, change in cases.items():
        holds = _holds(_results(**change))
        assert holds[claim] == "no", (claim, holds)
        others = {c: h for c, h in holds.items() if c not in (claim, BETWEEN)}
        assert set(others.values()) == {"yes"}, (claim, others)
    assert _rows(_results(**cases[DIVERGED]))[DIVERGED].measured == "diverged: K=3 seed 1"
    # the solved K ending 20 % off GN after all their linearisations is reported, not judged
    drifted = _rows(_results(net=NET[:-2] + (1.2, 5.0)))[LARGE]
    assert drifted.holds == "yes" and drifted.measured.endswith("K=1e7: 1.200, GN (λ = 0): 1.000, largest deviation "
                                                                "of a seed 20.9 %")
    train = np.full((len(KS), 4), 0.01)
    train[1] = 0.5
    mid = train.copy()
    mid[1] = 1.0
    assert _rows(_results(train=train, mid=mid))[CONVERGED].measured == "52/56 runs converged (not: K=3)"


def test_claims_undecided_within_the_seeds_noise():
    wide = np.array([0.05, -0.05, 0.04, -0.04])  # a seed-to-seed spread wider than every tolerance
    net = np.asarray(NET)[:, None] + NOISE_K[None, :]
    net[1] = NET[1] + wide  # K = 3: mean 0.10, 2 s.e. ≈ ±0.05 > 20 % of 0.10
    net[-1] = NET[-1]
    assert _holds(_results(net=net))[SMALL] == UNDECIDED
    lin = 0.10 + np.array([0.3, -0.3, 0.25, -0.2])  # K = ∞ 0.11 on average, far noisier
    assert _holds(_results(kernel_lin=lin))[KINF] == UNDECIDED
    gn = np.asarray(GN_TRUE)[:, None] + NOISE_GN[None, :]
    gn[3] = 0.45 + np.array([0.3, -0.3, 0.2, -0.2])  # λ = 1: on average K = 1000's, but too noisy
    assert _holds(_results(gn_test=gn))[DAMPING] == UNDECIDED
    # one seed: every comparison between seeds is undecided
    holds = _holds(_results(noise_k=np.zeros(1), noise_gn=np.zeros(1)))
    assert holds[SMALL] == holds[KINF] == holds[DAMPING] == UNDECIDED


def test_damping_row_discriminates_the_pairing():
    # the right pairing holds ...
    assert _holds(_results())[DAMPING] == "yes"
    # ... a wrong correspondence fails: the damped runs end where K = 10/(λη) does (K = 1e6, 1e5, 1e4, 1000)
    shifted = (1.0, 1.0, 0.40, 0.15, 0.45)
    assert _holds(_results(gn_test=shifted))[DAMPING] == "no"
    # ... and so do shuffled K: the K runs' results permuted among K = 100, 1000, 1e4, 1e5
    net = list(NET)
    net[3], net[4], net[5], net[6] = NET[6], NET[3], NET[4], NET[5]
    assert _holds(_results(net=net))[DAMPING] == "no"
    # a flat K curve cannot tell the pairing from a wrong one: undecided, never "yes"
    flat = (0.1,) * (len(KS) - 3) + (1.0, 1.0, 5.0)
    assert _holds(_results(net=flat, gn_test=(1.0, 0.1, 0.1, 0.1, 0.1)))[DAMPING] == UNDECIDED
    # the old rule (|Δ| ≤ 0.05 against the K nearest 1/(λη)) passed every K from 1 to 300 for λ = 10;
    # with one λ = 10 on the flat part the row is undecided
    assert _holds(_results(lams=(10.0,), gn_test=(1.0, 0.11)))[DAMPING] == UNDECIDED


def test_damping_pairs():
    res = _results()
    assert fig1.damping_pairs(res) == [(1, 6), (2, 5), (3, 4), (4, 3)]  # λ ↔ K = 1e5, 1e4, 1000, 100
    assert fig1.damping_pairs(res, 10.0) == [(1, 7), (2, 6), (3, 5), (4, 4)]
    assert fig1.damping_pairs(res, 0.1) == [(1, 5), (2, 4), (3, 3), (4, 2)]
    far = _results(lams=(1e-6, 10.0), gn_test=(1.0, 1.0, 0.11))  # 1/(λη) = 1e9: no K within √10
    assert fig1.damping_pairs(far) == [(2, 3)]


def test_claims_not_applicable_or_absent():
    # σ_min = 1e-6: no K in the grid solves a linearisation
    rows = _rows(_results(sigma=(1e-6, 1.0, 100.0)))
    assert rows[LARGE].holds == NA and rows[LARGE].kind == "check" and rows[BETWEEN].holds == NA
    # results from before the first step was recorded: the check is n/a
    assert _rows(_results(first_step=None))[LARGE].holds == NA
    # no damped run: the K ↔ λ row is n/a
    assert _holds(_results(lams=(), gn_test=(1.0,)))[DAMPING] == NA


# The notebook's summary functions (pure functions of the results; no training).


def _summary_results():
    train = np.full((3, 2), 0.01)
    return fig1.Results(
        K=np.array([1.0, 1e3, math.inf]),
        method=np.array(["gd", "flow", "kernel"]),
        n_relin=np.array([100, 2, 0]), time=np.array([1.0, 2.0, math.inf]),
        net_train_rmse=train, net_train_rmse_mid=train, lin_train_rmse=train,
        net_test_rmse=np.array([[0.1, 0.3], [0.2, np.nan], [9.0, 9.0]]),
        lin_test_rmse=np.array([[5.0, 5.0], [5.0, 5.0], [0.4, 0.6]]),
        diverged=np.array([[False, False], [False, True], [False, False]]),
        gn=fig1.GaussNewtonRuns(damping=np.array([0.0, 1.0]), equiv_K=np.array([math.inf, 100.0]),
                                net_test_rmse=np.array([[0.5, 0.7], [0.2, 0.2]]), net_train_rmse=np.zeros((2, 2)),
                                net_train_rmse_mid=np.zeros((2, 2)), diverged=np.zeros((2, 2), bool)),
        bridge=_bridge(eta=np.asarray(0.01), sigma=np.array([0.0, 2.0, 10.0]), K=np.array([10.0]),
                       damping=np.array([1.0]), damping_fit=np.array([1.5]), gd_filter=np.array([[1.0, 0.5, 0.25]]),
                       gn_filter=np.array([[2.0, 1.0, 0.5]]), gn_filter_fit=np.array([[0.2, 0.1, 0.05]])),
        x_test=np.linspace(-1, 1, 5), y_test=np.zeros(5), seeds=np.arange(2),
    )


def test_seed_rmse_is_the_network_except_the_linear_model_at_k_inf():
    r = _summary_results()
    np.testing.assert_array_equal(seed_rmse(r), [[0.1, 0.3], [0.2, np.nan], [0.4, 0.6]])
    with np.errstate(invalid="ignore"):
        np.testing.assert_allclose(np.nanmean(seed_rmse(r), axis=1), summary(r).net_mean)


def test_summary_numbers_the_figure_draws():
    s = summary(_summary_results())
    assert float(s.sigma_min) == 2.0  # the zero eigenvalue is left out
    np.testing.assert_allclose(float(s.solved_from), 10 / (0.01 * 2.0))
    np.testing.assert_allclose(s.gn_mean, [0.6, 0.2])


def test_diverged_K_any_seed():
    np.testing.assert_array_equal(diverged_K(_summary_results()), [False, True, False])


def test_bridge_curves_fractions_and_gauss_newton_filter():
    c = bridge_curves(_summary_results())
    grid = np.array([0.5, 1.0, 4.0])
    np.testing.assert_allclose(c.sigma_grid, grid)
    np.testing.assert_allclose(c.gn0_filter, 1 / grid)
    np.testing.assert_allclose(c.gd_filter, [[1.0, 0.5, 0.25]])
    np.testing.assert_allclose(c.gd_fraction, [[0.5, 0.5, 1.0]])
    np.testing.assert_allclose(c.gn_fraction, [[1.0, 1.0, 2.0]])
    np.testing.assert_allclose(c.gn_fraction_fit, [[0.1, 0.1, 0.2]])


# ----------------------------------------------------------------------------------------------
# Literal gradient descent at large K beside its closed form
# ----------------------------------------------------------------------------------------------


def test_literal_plan():
    cfg = fig1.EXPERIMENT.get_config(K=[1, 3, 10, 30, 100, 1000, 10**4, math.inf], lr=0.02, steps=10_000, n_relin=500,
                          max_relin=1000)
    lp = fig1.literal_plan(cfg)
    assert lp == fig1.LiteralPlan(K=[10.0, 100.0, 1000.0], lr=[0.02, 0.005], steps=5000)  # decades, ≤ T/2, closed form


@pytest.fixture(scope="module")
def literal_tiny():
    """literal_runs on 8 points, 2 seeds: K = 10 and 100, T' = 100 steps, rates 0.02 and 0.005 (float64)."""
    import jax.numpy as jnp

    from iterlin.models import quintic_model
    from iterlin.precision import x64

    cfg = resolve("fig1", K=[1, 3, 10, 100, math.inf], steps=200, n_relin=2, max_relin=50, n_seeds=2, n_train=8,
                  n_test=30, n_evals=2)
    with x64(True):
        apply_fn, params = quintic_model([0, 1], jnp.float64)
        return fig1.literal_runs(apply_fn, params, fig1.load(cfg), cfg)


def test_literal_runs_shapes(literal_tiny):
    lit = literal_tiny
    assert lit.K.tolist() == [10.0, 100.0] and lit.lr.tolist() == [0.02, 0.005] and int(lit.steps) == 100
    assert lit.n_relin.tolist() == [10, 1]
    np.testing.assert_allclose(lit.tau, [[10 * 0.02 / 8, 100 * 0.02 / 8], [10 * 0.005 / 8, 100 * 0.005 / 8]])
    for key in ("net_test_rmse", "net_train_rmse", "lin_test_rmse", "diverged", "diverged_step",
                "flow_net_test_rmse", "flow_net_train_rmse", "flow_diverged"):
        assert np.shape(lit[key]) == (2, 2, 2), key
    assert lit.bound_step.tolist() == [0, 50, 100] and lit.bound.shape == (2, 2, 2, 3)
    assert not lit.diverged.any() and np.all(np.isfinite(lit.net_test_rmse))
    # at step 0 every run is linearised at its θ₀: the bound there is the same for every rate and K
    np.testing.assert_allclose(lit.bound[..., 0], np.broadcast_to(lit.bound[0, 0, :, 0], (2, 2, 2)), rtol=1e-6)
    assert np.all(lit.bound[..., 0] > 0.5)  # 2/λ_max(J₀ᵀJ₀/N) ≈ 1.2–1.3 at θ₀: far above the rates


def test_literal_gd_approaches_its_closed_form_as_the_rate_shrinks(monkeypatch):
    """Equivalence (float64): K steps at rate lr' on a linearisation → gradient flow for τ = K·lr'/N as lr' → 0
    (Eq. 18). The same τ = 0.025 and R = 3 linearisations at lr' = 0.02 (K = 10) and lr' = 0.002 (K = 100),
    seed 0: the closed forms agree, and the literal run's distance to them shrinks with the rate (O(lr')).
    (Over 10 linearisations, and at seed 1 from the 2nd, a gap of ~1e-3 in train RMSE appears that does not
    shrink with the rate: see the report of issue 11 part 4; not tested here.)"""
    import jax.numpy as jnp

    from iterlin.models import quintic_model
    from iterlin.precision import x64

    monkeypatch.setattr(fig1, "LITERAL_RATES", (1.0,))
    out = []
    for lr, K, steps in ((0.02, 10, 60), (0.002, 100, 600)):
        cfg = resolve("fig1", K=[1, K, math.inf], lr=lr, steps=steps, n_relin=2, max_relin=1000, n_seeds=1,
                      n_train=8, n_test=30, n_evals=1)
        with x64(True):
            apply_fn, params = quintic_model([0], jnp.float64)
            lit = fig1.literal_runs(apply_fn, params, fig1.load(cfg), cfg)
        assert lit.K.tolist() == [K] and lit.n_relin.tolist() == [3] and not lit.diverged.any()
        np.testing.assert_allclose(lit.tau, [[0.025]])
        out.append(lit)
    coarse, fine = out
    np.testing.assert_allclose(fine["flow_net_train_rmse"], coarse["flow_net_train_rmse"], rtol=1e-9)
    err = [np.abs(o["net_train_rmse"] - o["flow_net_train_rmse"])[0, 0] for o in out]  # (S,) each
    assert np.all(err[1] < err[0] / 5), err  # ≈ 10× closer at a 10× smaller rate
    assert np.all(err[0] < 1e-2 * coarse["flow_net_train_rmse"][0, 0])


def test_literal_gd_diverges_above_the_stability_bound_and_not_below(monkeypatch):
    """One linearisation (K = 10 = T'), at θ₀: a rate far above 2/λ_max diverges, one below it does not."""
    import jax.numpy as jnp

    from iterlin.models import quintic_model
    from iterlin.precision import x64

    monkeypatch.setattr(fig1, "LITERAL_RATES", (1.0, 1e-10))  # rates lr and lr·10⁻¹⁰
    cfg = resolve("fig1", K=[1, 10, math.inf], lr=1e9, steps=20, n_relin=1, max_relin=50, n_seeds=2, n_train=8,
                  n_test=30, n_evals=1)
    with x64(True):
        apply_fn, params = quintic_model([0, 1], jnp.float64)
        lit = fig1.literal_runs(apply_fn, params, fig1.load(cfg), cfg)
    assert lit.K.tolist() == [10.0] and lit.n_relin.tolist() == [1]
    bound0 = lit.bound[..., 0]
    assert np.all(lit.lr[0] > bound0[0]) and np.all(lit.lr[1] < bound0[1])  # 1e9 and 0.1 vs ≈ 1.2
    assert lit.diverged[0].all() and not lit.diverged[1].any()
    assert np.all((lit.diverged_step[0] >= 0) & (lit.diverged_step[0] < 10))
    assert np.all(np.isnan(lit.net_test_rmse[0])) and np.all(np.isfinite(lit.net_test_rmse[1]))
    assert fig1.literal_bound(lit)[1] == "yes"


def test_literal_claim_rows():
    # default: the literal runs on their closed form where stable, the diverged ones below their bound
    rows = _rows(_results())
    assert rows[LITERAL].holds == "yes" and rows[LITERAL_BOUND].holds == "yes"
    assert "lr=0.02 K=10: no stable run (4/4 diverged)" in rows[LITERAL].measured
    assert "lr=0.02 K=10: 4/4 diverged (steps 1500–1500)" in rows[LITERAL_BOUND].measured
    # a finite run that ended above its bound (blowing up: a huge test RMSE) is not evidence: left out, and
    # the means shown are over the seeds kept
    blowing = _literal()
    blowing.bound[0, 1, 0, -1] = 0.01  # rate 0.02 at K = 100, seed 0: above its last bound
    blowing.net_test_rmse[0, 1, 0] = 1e85
    row = _rows(_results(literal=blowing))[LITERAL]
    assert row.holds == "yes" and "lr=0.02 K=100: 0.499 vs 0.500" in row.measured, row.measured
    assert "(1/4 ended above their bound, left out)" in row.measured
    assert literal_stable(blowing)[0, 1].tolist() == [False, True, True, True]
    # the same seed counted, as before: its 1e85 makes the interval unbounded, so the row could not decide
    blowing.bound[0, 1, 0, -1] = 0.5
    assert _rows(_results(literal=blowing))[LITERAL].holds == UNDECIDED
    # a systematic 20 % offset against the closed form: no
    assert _holds(_results(literal=_literal(offset=0.1)))[LITERAL] == "no"
    # a seed-to-seed spread wider than the tolerance (±0.025): undecided
    assert _holds(_results(literal=_literal(noise=[0.1, -0.1, 0.08, -0.05])))[LITERAL] == UNDECIDED
    # one seed: undecided
    one = _results(noise_k=np.zeros(1), noise_gn=np.zeros(1), literal=_literal(S=1))
    assert _holds(one)[LITERAL] == UNDECIDED
    # every run diverged: nothing to compare; a diverged run whose bound was above its rate: the check fails
    assert _holds(_results(literal=_literal(diverged=True)))[LITERAL] == NA
    bad = _literal(bound_last=0.5)  # rate 0.02 at K = 10 diverged although 0.02 < 0.5
    assert _holds(_results(literal=bad))[LITERAL_BOUND] == "no"
    # none diverged: the check is n/a; results from before the literal runs: both rows n/a
    assert _holds(_results(literal=_literal(diverged=False)))[LITERAL_BOUND] == NA
    old = _holds(_results(literal=None))
    assert old[LITERAL] == NA and old[LITERAL_BOUND] == NA


def test_literal_plot_helpers_draw_and_skip_old_results(ax):
    lit = _literal()
    assert len(plot_literal(ax, lit)) == 4  # per rate: the literal runs and their closed form
    assert len(plot_stability_bound(ax, lit)) == 4  # per rate and K: the median bound
    assert plot_literal(ax, None) == [] and plot_stability_bound(ax, None) == []  # results from before the runs
