"""adaptive (iterlin.experiments.adaptive): the config's validation, the sweep with relin policies,
a tiny real run of both sweeps, the claims' verdicts on constructed results (each can hold and
fail), and the placement summary on constructed re-linearisation steps."""

from __future__ import annotations

import math

import jax
import numpy as np
import pytest
from _toy import fake_cifar, flat_mlp, tiny_problem

from iterlin import relin
from iterlin.repro.claims import NA, UNDECIDED
from iterlin.experiments import _common, adaptive, resolve
from iterlin.experiments.adaptive import accuracy_against_updates, placement_dots, relin_raster

INF = math.inf
BIG = 100_000  # test images: 2 s.e. of Δ ≈ 0.4 points


# ------------------------------------------------------------------------------------------------
# config


def test_config_and_scales():
    c = resolve("adaptive", K=[30, 3], tol=[0.1, 0.01, 0.1])
    assert c.K == (1, 3, 30) and c.tol == (0.01, 0.1)  # K = 1 always in; sorted, de-duplicated
    assert resolve("adaptive", tol=0.05).tol == (0.05,)  # one value means a list of one
    for scale in ("smoke", "cpu", "gpu", "paper"):
        c = resolve("adaptive", scale)
        assert c.K[0] == 1 and len(c.K) >= 2 and len(c.tol) >= 2, scale  # a fixed K > 1 beside K = 1
    cpu = resolve("adaptive", "cpu")  # the K sweep's stable setting, the sharpness recorded
    ks = resolve("ksweep", "cpu")
    assert all(getattr(cpu, k) == getattr(ks, k)
               for k in ("lr", "steps", "batch_size", "augment", "n_train", "n_sharpness"))
    assert cpu.n_seeds >= 3 and cpu.sharpness_every == ks.sharpness_every
    gpu = resolve("adaptive", "gpu")  # the cpu grid, made finer
    assert set(cpu.K) <= set(gpu.K) and set(cpu.tol) <= set(gpu.tol) and gpu.n_seeds > cpu.n_seeds
    assert resolve("adaptive").n_seeds == 1


@pytest.mark.parametrize(
    "tol, message",
    [
        ([], r"tol=\[\] is not allowed: tol must list at least one tolerance"),
        ([0.1, 0], r"tol\[1\]=0 is not allowed: tol\[1\] must be a finite number > 0.*which is K = 1"),
        (-1, r"tol=-1 is not allowed: tol must be a finite number > 0"),
        (INF, r"tol=inf is not allowed: tol must be a finite number > 0.*which is K = inf"),
        ([0.1, math.nan], r"tol\[1\]=nan is not allowed"),
        ("abc", r"tol='abc' is not allowed"),
    ],
)
def test_a_bad_tolerance_is_named(tol, message):
    with pytest.raises(ValueError, match=message):
        resolve("adaptive", tol=tol)


@pytest.mark.parametrize("K, message", [([1, 0], r"K\[1\]=0 is not allowed"), ([2.5], r"K\[0\]=2.5 is not allowed")])
def test_a_bad_K_is_named(K, message):
    with pytest.raises(ValueError, match=message):
        resolve("adaptive", K=K)


def test_the_paper_scale_needs_all_of_cifar10(cifar_subset_path):
    with pytest.raises(ValueError, match="n_train"):
        adaptive.load(resolve("adaptive", "paper"))


# ------------------------------------------------------------------------------------------------
# _common.sweep with relin policies


def test_sweep_takes_policies_of_one_kind(x64):
    """adaptive(0) re-linearises every step: K = 1 up to rounding (the linearised step at θ_s = θ_t);
    a policy sweep records each run's tolerance and re-linearisation steps; kinds may not mix."""
    apply_fn, params, x, y = tiny_problem()
    key = jax.random.PRNGKey(3)
    kw = dict(lr=0.1, steps=6, batch_size=8, key=key, eval_data=(x, y), eval_steps=[0, 3, 6])
    plain = _common.sweep(apply_fn, params, (x, y), K=[1], **kw)
    pol = _common.sweep(apply_fn, params, (x, y), K=[relin.adaptive(0.0), relin.adaptive(INF)], **kw)
    assert "relin_step" not in plain and "policy" not in plain  # periods: the history as before
    assert pol["policy"].tolist() == ["adaptive"] * 2 and pol["tol"].tolist() == [0.0, INF]
    assert pol["K"].tolist() == [INF, INF] and pol["n_relin"][:, -1].tolist() == [6, 0]
    assert pol["relin_step"][0].tolist() == [1, 2, 3, 4, 5, 6] and (pol["relin_step"][1] == -1).all()
    np.testing.assert_allclose(pol["net_test_acc"][0], plain["net_test_acc"][0], atol=1e-12)
    np.testing.assert_allclose(pol["net_train_loss"][0], plain["net_train_loss"][0], rtol=1e-9)
    with pytest.raises(ValueError, match="must be of one kind"):
        _common.sweep(apply_fn, params, (x, y), K=[3, relin.adaptive(0.1)], **kw)
    with pytest.raises(ValueError, match=r"K\[1\]=0 is not allowed"):
        _common.sweep(apply_fn, params, (x, y), K=[relin.adaptive(0.1), 0], **kw)


# ------------------------------------------------------------------------------------------------
# compute: a tiny real run


def test_tiny_real_run_two_sweeps_two_seeds(monkeypatch):
    """A small MLP in place of the CNN: the fixed periods and the tolerances, each one sweep, the
    same seeds; the adaptive runs record their re-linearisation steps."""
    monkeypatch.setattr(_common, "make_model", lambda name, key: flat_mlp(key))
    config = resolve("adaptive", K=[2, 4], tol=[1e-4, 1e6], lr=0.05, steps=6, batch_size=4, n_train=16, n_test=8,
                     n_evals=2, n_seeds=2, n_eval_train=None, n_sharpness=8, sharpness_iters=3, sharpness_every=3)
    r = adaptive.compute(config, fake_cifar(16, n_test=8))
    assert isinstance(r, adaptive.Results) and r.config is None
    hf, ha = r.fixed, r.adaptive
    assert hf["K"].tolist() == [1, 2, 4] * 2 and hf["seed"].tolist() == [0] * 3 + [1] * 3
    assert ha["tol"].tolist() == [1e-4, 1e6] * 2 and ha["seed"].tolist() == [0, 0, 1, 1]
    assert int(r.n_runs) == 10 and r.final_test_acc.shape == (10,) and r.final_test_correct.shape == (10, 8)
    assert r.n_relin[:6].tolist() == [6, 3, 1] * 2  # ⌊T/K⌋
    assert ha["relin_step"].shape[0] == 4 and ha["relin_step"].shape[1] >= 1
    for i in range(4):  # the log holds exactly n_relin steps, increasing, within [2, T]
        s = ha["relin_step"][i]
        s = s[s >= 0]
        assert len(s) == r.n_relin[6 + i] and np.all(np.diff(s) > 0) and np.all((s >= 1) & (s <= 6))
    assert r.n_relin[7] == 0 and r.n_relin[9] == 0  # tol = 1e6: the gap never gets there
    np.testing.assert_allclose(r.final_test_correct.mean(1), r.final_test_acc)
    np.testing.assert_allclose(r.final_test_acc[6:], ha["net_test_acc"][:, -1])
    rows = adaptive.claims(r._replace(config=config))
    assert [row.kind for row in rows] == ["claim", "claim", "claim", "claim"]
    for h in (hf, ha):  # both sweeps record the linear model's sharpness, each run at the config's rate
        np.testing.assert_allclose(h["lr_over_bound"], h["sharpness"] * 0.05 / 2, rtol=1e-6)
    stable = rows[2]
    assert stable.claim.startswith("the linear model stays stable") and stable.holds in ("yes", "no")
    worst = max(np.nanmax(hf["lr_over_bound"][hf["K"] > 1]), np.nanmax(ha["lr_over_bound"]))
    assert f"K>1: largest η·λ_max/2 {worst:.2f} (" in stable.measured
    assert "(tol=" in stable.measured or "(K=" in stable.measured  # the run named by its setting
    assert "2 seeds, 8 paired test images" in rows[0].rule
    s = adaptive.by_policy(r)
    assert s.K.tolist() == [1, 2, 4] and s.K_acc.shape == (3, 2) and s.tol_relin.shape == (2, 2)
    labels, steps = adaptive.raster(r)
    assert labels[:2] == ["K=2", "K=4"] and steps[0].tolist() == [2, 4, 6] and len(labels) == 6
    assert adaptive.timing(r).startswith("10 runs (3 K + 2 tolerances × 2 seeds) in two sweeps, ")


# ------------------------------------------------------------------------------------------------
# claims on constructed results


def _history(values, key, n_relin, steps, acc, diverged, S):
    acc = np.asarray(list(acc) * S, np.float64)
    n = np.asarray(list(n_relin) * S) if np.ndim(n_relin[0]) == 0 else np.asarray(n_relin).T.reshape(-1)
    div = np.asarray(list(diverged or [False] * len(values)) * S, bool)
    h = {"step": np.asarray([0, steps // 2, steps]), key: np.asarray(list(values) * S, np.float64),
         "n_relin": np.stack([np.asarray([0, k // 2, k]) for k in n]),
         "net_test_acc": np.stack([np.asarray([0.1, a / 2, a]) for a in acc]), "diverged": div,
         "diverged_step": np.where(div, 3, -1), "seed_index": np.repeat(np.arange(S), len(values)),
         "seed": np.repeat(np.arange(S), len(values))}
    h["lin_test_acc"] = h["net_test_acc"]
    return h


def _results(fixed_acc, tol_acc, *, K=(1, 10, 30, 100), tol=(0.003, 0.01, 0.03), tol_relin=(40, 8, 3), steps=200,
             n_test=BIG, seeds=1, diverged=None, relin_step=None):
    """A constructed adaptive result: one accuracy per fixed K and per tolerance (the same for every
    seed), ⌊T/K⌋ re-linearisations for a fixed K, ``tol_relin`` for the tolerances (one count per
    tolerance, or (S, N_t) per seed); ``relin_step`` (R_a, J) the adaptive runs' steps (default evenly)."""
    hf = _history(K, "K", [0 if math.isinf(k) else steps // k for k in K], steps, fixed_acc,
                  None if diverged is None else diverged[:len(K)], seeds)
    ha = _history(tol, "tol", tol_relin, steps, tol_acc, None if diverged is None else diverged[len(K):], seeds)
    ha["K"] = np.full(len(ha["tol"]), INF)
    if relin_step is None:
        n = ha["n_relin"][:, -1]
        J = max(int(n.max()), 1)
        relin_step = np.full((len(n), J), -1)
        for i, k in enumerate(n):
            relin_step[i, :k] = (np.arange(1, k + 1) * steps) // max(k, 1)
    ha["relin_step"] = np.asarray(relin_step)
    acc = np.concatenate([_common.trained_final(hf)["final_test_acc"], ha["net_test_acc"][:, -1]])
    return adaptive.Results(
        fixed=hf, adaptive=ha, final_test_acc=acc, final_test_correct=None,  # unpaired: no per-image record
        n_relin=np.concatenate([hf["n_relin"][:, -1], ha["n_relin"][:, -1]]), n_test=np.asarray(n_test),
        n_runs=np.asarray(len(acc)), wall_seconds=np.asarray(1.0),
        config=adaptive.EXPERIMENT.get_config("smoke", K=K, tol=tol, steps=steps))


def test_yes_when_an_adaptive_run_on_par_uses_fewer_updates():
    # K = 10 (20 updates) on par, K = 30 (6) and 100 (2) off; tol 0.01 (8) on par: 8 < 20
    rows = adaptive.claims(_results([0.40, 0.40, 0.30, 0.25], [0.40, 0.40, 0.30]))
    assert rows[0].holds == "yes"
    assert rows[0].measured.startswith("F = 20, A = 8; K=10 (20): Δ 0.0 [-0.4, +0.4] yes")
    assert "tol=0.01 (8): Δ 0.0 [-0.4, +0.4] yes" in rows[0].measured and "1 seed: test noise only, no seed spread, 100000 unpaired" in rows[0].rule


def test_yes_when_no_fixed_K_is_on_par_but_an_adaptive_run_is():
    rows = adaptive.claims(_results([0.40, 0.30, 0.30, 0.25], [0.40, 0.30, 0.30], tol_relin=(40, 8, 3)))
    assert rows[0].holds == "yes" and "F: no fixed K > 1 on par, A = 40" in rows[0].measured


def test_no_when_the_fixed_period_on_par_needs_no_more_updates():
    # K = 30 (6 updates) on par; the only adaptive run on par makes 8 ≥ 6
    rows = adaptive.claims(_results([0.40, 0.40, 0.40, 0.30], [0.40, 0.40, 0.30]))
    assert rows[0].holds == "no" and rows[0].measured.startswith("F = 6, A = 8")
    rows = adaptive.claims(_results([0.40, 0.30, 0.30, 0.30], [0.30, 0.30, 0.30]))  # nothing on par
    assert rows[0].holds == "no" and "A: no tolerance on par" in rows[0].measured


def test_equal_updates_are_not_fewer():
    rows = adaptive.claims(_results([0.40, 0.40, 0.40, 0.30], [0.40, 0.40, 0.30], tol_relin=(40, 6, 3)))
    assert rows[0].holds == "no"


def test_the_most_updates_over_seeds_count():
    # tol 0.01 makes 4 updates in seed 0 but 7 in seed 1; K = 30 (6) is on par: not fewer in every seed
    res = _results([0.40, 0.40, 0.40, 0.30], [0.30, 0.40, 0.30], tol_relin=[(40, 40), (4, 7), (3, 3)], seeds=2)
    rows = adaptive.claims(res)
    assert rows[0].holds == "no" and "tol=0.01 (7)" in rows[0].measured
    res = _results([0.40, 0.40, 0.40, 0.30], [0.30, 0.40, 0.30], tol_relin=[(40, 40), (4, 5), (3, 3)], seeds=2)
    assert adaptive.claims(res)[0].holds == "yes"


def test_undecided_when_the_noise_rule_cannot_decide():
    # 200 test images: every comparison's interval is wider than ±2 points
    rows = adaptive.claims(_results([0.40, 0.40, 0.40, 0.30], [0.40, 0.40, 0.30], n_test=200))
    assert rows[0].holds == UNDECIDED
    # adaptive on par with 3 updates, but K = 100 (2 updates) undecided: it might be on par with fewer
    rows = adaptive.claims(_results([0.40, 0.30, 0.30, 0.39], [0.30, 0.30, 0.40], tol_relin=(40, 8, 3), n_test=10_000))
    assert rows[0].holds == UNDECIDED and "K=100 (2)" in rows[0].measured


def test_divergence_is_no():
    # the adaptive run on par with fewer updates diverged: not on par, whatever its accuracy
    res = _results([0.40, 0.40, 0.30, 0.25], [0.30, 0.40, 0.30], diverged=[False] * 4 + [False, True, False])
    rows = adaptive.claims(res)
    assert rows[0].holds == "no" and "tol=0.01 (8): Δ 0.0 [-0.4, +0.4] no" in rows[0].measured
    assert rows[-1].holds == "no" and rows[-1].measured == "diverged: tol=0.01 (seed 0) at step 3"
    res = _results([0.40, 0.40, 0.30, 0.25], [0.40, 0.40, 0.30], diverged=[True] + [False] * 6)  # K = 1 diverged
    assert adaptive.claims(res)[0].holds == "no"


def test_not_applicable_without_the_rows_it_compares():
    rows = adaptive.claims(_results([0.40], [0.40, 0.40, 0.30], K=(1,)))
    assert rows[0].holds == NA and rows[0].measured.startswith("needs K = 1, a fixed K > 1")
    on_par = adaptive.Setting(K=None, tol=0.01, relin=3, diff=None, par="yes")
    assert adaptive.fewer_updates([], [on_par]) == NA
    assert adaptive.fewer_updates([on_par._replace(K=2.0, tol=None)], []) == NA


# ------------------------------------------------------------------------------------------------
# placement


def test_even_fraction():
    np.testing.assert_allclose(adaptive.even_fraction([4, 5, 1, 2], 0.5), [0.5, 0.4, 0.0, 0.5])
    assert np.isnan(adaptive.even_fraction(0, 0.5))
    np.testing.assert_allclose(adaptive.even_fraction(4, [0.25, 0.5, 1.0]), [0.25, 0.5, 1.0])


def test_placement_on_constructed_steps():
    T = 200
    steps = np.asarray([[2, 5, 10, 20, 150], [50, 100, 150, 200, -1], [-1, -1, -1, -1, -1]])
    res = _results([0.4] * 4, [0.4] * 3, tol_relin=(5, 4, 0), relin_step=steps, steps=T)
    p = adaptive.placement(res)
    assert p.tol.tolist() == [0.003, 0.01, 0.03] and p.n[:, 0].tolist() == [5, 4, 0]
    assert p.fractions.tolist() == [0.25, 0.5] and p.steps == T
    np.testing.assert_allclose(p.early[0, 0], [0.8, 0.8])  # 4 of 5 by step 50 and by step 100
    np.testing.assert_allclose(p.even[0, 0], [0.2, 0.4])
    np.testing.assert_allclose(p.early[1, 0], [0.25, 0.5])  # evenly spaced: no excess
    np.testing.assert_allclose(p.excess[1, 0], [0.0, 0.0])
    assert np.isnan(p.early[2, 0]).all()


def test_the_placement_row_decides_over_seeds():
    early = [[2, 5, 10, 20, 150]] * 3
    even = [[40, 80, 120, 160, 200]] * 3
    res = _results([0.4] * 4, [0.4] * 3, tol_relin=[(5, 5)] * 3, relin_step=np.asarray(early + early), seeds=2)
    row = adaptive.claims(res)[1]
    assert row.holds == "yes" and "tol=0.003: first half 80.0 % of 5 (even 40.0 %), excess 40.0 %" in row.measured
    res = _results([0.4] * 4, [0.4] * 3, tol_relin=[(5, 5)] * 3, relin_step=np.asarray(even + even), seeds=2)
    assert adaptive.claims(res)[1].holds == "no"  # evenly placed: excess 0, not above
    res = _results([0.4] * 4, [0.4] * 3, tol_relin=(5, 5, 5), relin_step=np.asarray(early))  # one seed
    assert adaptive.claims(res)[1].holds == UNDECIDED
    res = _results([0.4] * 4, [0.4] * 3, tol_relin=(0, 0, 0), relin_step=np.full((3, 1), -1))
    assert adaptive.claims(res)[1].holds == NA


# ----------------------------------------------------------------------------------------------
# the figure: accuracy_against_updates, relin_raster, placement_dots


def test_accuracy_against_updates_means_in_order_of_updates_each_seed_a_dot(ax):
    relin = np.array([[10.0, 12.0], [2.0, 4.0]])  # (N, S): setting 0 makes more updates than setting 1
    acc = np.array([[0.5, 0.7], [0.2, np.nan]])  # a seed without a finite accuracy is left out
    line = accuracy_against_updates(ax, relin, acc, names=["K=1", "K=8"], diverged=[False, True], label="K")
    np.testing.assert_allclose(line.get_xydata(), [[3.0, 20.0], [11.0, 60.0]])  # ordered by updates, in %
    assert line.get_label() == "K" and ax.get_xscale() == "symlog"
    (dots,) = ax.collections[1:]  # the error bars, then the seeds
    np.testing.assert_allclose(dots.get_offsets(), [[10.0, 50.0], [12.0, 70.0], [2.0, 20.0]])
    assert [t.get_text() for t in ax.texts] == ["K=1", "K=8"]
    (cross,) = [ln for ln in ax.lines if ln.get_marker() == "x"]
    np.testing.assert_allclose(cross.get_xydata(), [[3.0, 20.0]])
    with pytest.raises(ValueError, match="^acc "):
        accuracy_against_updates(ax, relin, acc[:, :1])
    with pytest.raises(ValueError, match="^names "):
        accuracy_against_updates(ax, relin, acc, names=["K=1"])


def test_relin_raster_one_row_per_run_top_to_bottom(ax):
    relin_raster(ax, [[10, 20], [5]], ["K=10", "tol=0.1"], T=40, colors=["C0", "C1"])
    first, second = ax.collections
    assert first.get_positions() == [10.0, 20.0] and first.get_lineoffset() == 1  # the first run on top
    assert second.get_positions() == [5.0] and second.get_lineoffset() == 0
    assert dict(zip(ax.get_yticks(), (t.get_text() for t in ax.get_yticklabels()))) == {1: "K=10", 0: "tol=0.1"}
    assert ax.get_xlim() == (0, 40)
    assert sorted(ln.get_xdata()[0] for ln in ax.lines) == [10.0, 20.0]  # dotted lines at T/4 and T/2
    with pytest.raises(ValueError, match="^labels "):
        relin_raster(ax, [[10]], ["a", "b"], T=40)


def test_placement_dots_each_setting_a_column_of_each_fraction(ax):
    early = np.array([[[0.5, 0.75]], [[0.25, 1.0]]])  # (N = 2 settings, S = 1 seed, F = 2 fractions)
    even = np.full_like(early, 0.5)
    placement_dots(ax, early, even, [0.25, 0.5], ["tol=0.1", "tol=0.01"])
    filled = [ln for ln in ax.lines if ln.get_markerfacecolor() != "none"]
    np.testing.assert_allclose([ln.get_xydata()[0] for ln in filled], [[0, 50], [1, 25], [3, 75], [4, 100]])
    assert [ln.get_label() for ln in filled[:2]] == ["tol=0.1", "tol=0.01"]
    assert [t.get_text() for t in ax.get_xticklabels()] == ["by 0.25·T", "by 0.5·T"]
    with pytest.raises(ValueError, match="^even "):
        placement_dots(ax, early, even[:1], [0.25, 0.5], ["a", "b"])

