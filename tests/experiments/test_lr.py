"""lr (iterlin.experiments.lr): every (K, lr) and seed in one sweep, the stability bound 2/λ_max at
θ_0, a tiny real run, the config's validation (the learning-rate list), and the claims' verdicts on
constructed results (each can hold and fail)."""

from __future__ import annotations

import math

import numpy as np
import pytest
from _toy import FakeSweep, fake_cifar, fake_history, flat_mlp, null_model

from iterlin.repro.claims import NA, UNDECIDED
from iterlin.experiments import _common, lr, resolve
from iterlin.analysis.stability import max_stable_lr

BIG = 100_000  # test images: 2 s.e. of Δ ≈ 0.4 points


# ------------------------------------------------------------------------------------------------
# config


def test_config_and_scales():
    c = resolve("lr", lr=[0.1, 0.01, 0.03, 0.01])
    assert c.lr == (0.01, 0.03, 0.1)  # sorted, de-duplicated
    assert resolve("lr", lr=0.1).lr == (0.01, 0.03, 0.1)  # one rate r means [r/10, 0.3 r, r]
    assert resolve("lr", lr=1e-3).lr == (1e-4, 3e-4, 1e-3)
    assert resolve("lr", K=50).K == (1, 50)
    for scale in ("smoke", "cpu", "gpu", "paper"):
        c = resolve("lr", scale)
        assert len(c.lr) >= 3 and max(c.lr) >= 10 * min(c.lr), scale  # an order of magnitude
        assert c.K[0] == 1 and len(c.K) == 2
    assert resolve("lr", "cpu").n_seeds >= 2 and resolve("lr").n_seeds == 1
    assert lr.decade(0.1) == [0.01, 0.03, 0.1]


@pytest.mark.parametrize(
    "kwargs, message",
    [
        (dict(lr=[]), r"lr=\[\] is not allowed: lr must list at least one value"),
        (dict(lr=[0.01, 0]), r"lr\[1\]=0 is not allowed"),
        (dict(lr=[0.01, -0.1]), r"lr\[1\]=-0.1 is not allowed"),
        (dict(lr=[0.01, math.nan]), r"lr\[1\]=nan is not allowed"),
        (dict(lr=[0.01, math.inf]), r"lr\[1\]=inf is not allowed"),
        (dict(lr=["fast"]), r"lr\[0\]='fast' is not allowed"),
        (dict(lr=0), r"lr=0 is not allowed"),
        (dict(n_sharpness=0), r"n_sharpness=0 is not allowed"),
        (dict(n_sharpness="all"), r"n_sharpness='all' is not allowed"),
        (dict(sharpness_iters=0), r"sharpness_iters=0 is not allowed"),
        (dict(K=[1, 0]), r"K\[1\]=0 is not allowed"),
    ],
)
def test_bad_values_are_named(kwargs, message):
    with pytest.raises(ValueError, match=message):
        resolve("lr", **kwargs)


def test_a_list_of_rates_is_refused_where_one_rate_is_taken():
    with pytest.raises(ValueError, match=r"lr=\[0.1, 0.2\] is not allowed: lr must be a single value here"):
        resolve("fig3", lr=[0.1, 0.2])
    assert resolve("fig3", lr=0.2).lr == 0.2


def test_load_refuses_more_sharpness_images_than_loaded(monkeypatch):
    monkeypatch.setattr(lr, "load_data", lambda config: fake_cifar(16))
    with pytest.raises(ValueError, match=r"n_sharpness=32 is not allowed: n_sharpness must be <= n_train=16"):
        lr.load(resolve("lr", n_sharpness=32))
    assert lr.load(resolve("lr", n_sharpness=16)).x_train.shape[0] == 16


# ------------------------------------------------------------------------------------------------
# compute


def test_compute_runs_every_K_and_rate_in_one_sweep(monkeypatch):
    fake = FakeSweep()
    monkeypatch.setattr(_common, "sweep", fake)
    monkeypatch.setattr(_common, "make_model", null_model)
    monkeypatch.setattr(lr, "make_model", null_model)
    monkeypatch.setattr(lr, "max_stable_lr", lambda f, p, x, y, iters: 0.05 + x.shape[0] + iters / 1000)
    config = resolve("lr", K=5, lr=[0.1, 0.01], steps=10, batch_size=4, n_train=16, n_evals=2, n_sharpness=8,
                     sharpness_iters=7, n_seeds=2)
    res = lr.compute(config, fake_cifar(16, n_test=12))
    (call,) = fake.calls  # ONE sweep, K-major within a seed
    assert call["K"] == [1, 1, 5, 5] and call["lr"] == [0.01, 0.1, 0.01, 0.1]
    assert call["steps"] == 10 and call["batch_size"] == 4 and call["augment"] is False
    assert isinstance(res, lr.Results) and res.config is None
    assert set(_common.stored(res)) == {"runs", "final_test_acc", "stable_lr", "n_test", "n_runs", "wall_seconds"}
    np.testing.assert_allclose(res.stable_lr, [8.057, 8.057])  # one per seed, on n_sharpness images
    assert int(res.n_test) == 12


def test_tiny_real_run_two_seeds(monkeypatch):
    """A small MLP in place of the CNN: every seed × K × lr in one sweep, each run with its own rate;
    the bound is 2/λ_max at each seed's initialisation (the sweep's θ_0)."""
    monkeypatch.setattr(_common, "make_model", lambda name, key: flat_mlp(key))
    monkeypatch.setattr(lr, "make_model", lambda name, key: flat_mlp(key))
    config = resolve("lr", K=2, lr=[0.01, 0.1], steps=4, batch_size=4, n_train=16, n_test=8, n_evals=2,
                     n_seeds=2, n_eval_train=None, n_sharpness=8, sharpness_iters=5)
    data = fake_cifar(16, n_test=8)
    r = lr.compute(config, data)
    h = r.runs
    assert h["K"].tolist() == [1, 1, 2, 2] * 2 and h["lr"].tolist() == [0.01, 0.1] * 4
    assert h["seed"].tolist() == [0] * 4 + [1] * 4 and h["n_relin"][:, -1].tolist() == [4, 4, 2, 2] * 2
    assert h["net_test_acc"][0, 0] == h["net_test_acc"][1, 0] == h["net_test_acc"][3, 0]  # one θ_0 per seed
    assert not np.allclose(h["net_train_loss"][0], h["net_train_loss"][1])  # the rates differ
    for s in (0, 1):
        m = flat_mlp(_common.seed_keys(s)[0])
        assert r.stable_lr[s] == pytest.approx(max_stable_lr(m.apply_fn, m.params, data.x_train[:8],
                                                                data.y_train[:8], iters=5), rel=1e-5)
    assert r.final_test_correct.shape == (8, 8) and int(r.n_runs) == 8
    rows = lr.claims(r._replace(config=config))
    assert len(rows) == 5 and "2 seeds, 8 paired test images" in rows[0].rule
    assert h["sharpness"].shape == h["lr_over_bound"].shape == (8, 3)  # recorded along every run
    s = lr.by_lr(r._replace(config=config))
    assert s.lr.tolist() == [0.01, 0.1] and s.K.tolist() == [1, 2] and s.values.shape == (2, 2, 2)
    np.testing.assert_allclose(s.values[1, 0], r.final_test_acc[[2, 6]])  # K = 2, lr 0.01, seeds 0 and 1
    assert s.diverged.shape == (2, 2) and s.bound == pytest.approx(float(np.mean(r.stable_lr)))
    assert lr.by_lr(r, "net_test_loss").values.shape == (2, 2, 2)
    assert lr.timing(r).startswith("8 runs (2 K × 2 rates × 2 seeds) in one sweep; ")


# ------------------------------------------------------------------------------------------------
# claims on constructed results


def _results(acc1, accK, rates=(0.01, 0.03, 0.1), K=50, bound=0.054, n_test=BIG, div1=None, divK=None, seeds=1):
    """A constructed lr result: final accuracies of K = 1 and of the large K per rate (one seed, or
    ``seeds`` identical copies), divergence flags per rate, and the bound 2/λ_max(θ_0)."""
    n = len(rates)
    Ks = ([1] * n + [K] * n) * seeds
    lrs = list(rates) * 2 * seeds
    acc = (list(acc1) + list(accK)) * seeds
    div = (list(div1 or [False] * n) + list(divK or [False] * n)) * seeds
    h = fake_history(Ks, lrs, 300, acc, diverged=div)
    h["seed_index"] = np.repeat(np.arange(seeds), 2 * n)
    return lr.Results(runs=h, **_common.trained_final(h), stable_lr=np.full(seeds, bound), n_test=np.asarray(n_test),
                      n_runs=np.asarray(len(Ks)), wall_seconds=np.asarray(1.0),
                      config=lr.EXPERIMENT.get_config("cpu", K=K, lr=rates))


def test_claims_hold_when_large_K_breaks_above_the_bound():
    rows = lr.claims(_results([0.40, 0.45, 0.47], [0.40, 0.449, 0.30]))
    assert [r.holds for r in rows] == ["yes", "yes", "no", NA, "yes"]
    assert rows[0].measured == "K=50 on par up to lr 0.03; K=1 better (or K=50 diverged) from lr 0.1; K=1 finite at 0.01, 0.03, 0.1"
    assert rows[1].claim == "large K on par with K = 1 at the rates below 2/λ_max(θ_0)"
    assert rows[1].measured == "2/λ_max(θ_0) = 0.054: lr 0.01: Δ 0.0 [-0.4, +0.4] yes; lr 0.03: Δ -0.1 [-0.5, +0.3] yes"
    assert rows[2].measured == "2/λ_max(θ_0) = 0.054: lr 0.1: Δ -17.0 [-17.4, -16.6] no"


def test_a_rate_both_on_par_and_behind_is_reported_apart_from_the_larger_rates():
    # K = 50 one point behind at 0.003 (on par within ±2 points, yet behind beyond noise), far behind from 0.03
    rows = lr.claims(_results([0.30, 0.40, 0.45], [0.29, 0.40, 0.20], rates=(0.003, 0.01, 0.03)))
    assert rows[0].holds == "yes"
    assert rows[0].measured == ("K=50 on par up to lr 0.01 (K=1 ahead beyond noise, within the margin, at 0.003); "
                                "K=1 better (or K=50 diverged) from lr 0.03; K=1 finite at 0.003, 0.01, 0.03")
    rows = lr.claims(_results([0.30, 0.40, 0.45], [0.29, 0.40, 0.45], rates=(0.003, 0.01, 0.03)))
    assert rows[0].holds == "no" and "; K=1 better at no larger rate;" in rows[0].measured


def test_divergence_of_large_K_counts_as_worse():
    rows = lr.claims(_results([0.40, 0.45, 0.47], [0.40, 0.45, 0.47], divK=[False, False, True]))
    assert [r.holds for r in rows] == ["yes", "yes", "no", NA, "no"]
    assert "(large K diverged)" in rows[2].measured and rows[4].measured == "diverged: K=50, lr=0.1 at step 3"
    assert rows[3].measured == "no sharpness record"


def test_claims_fail_when_large_K_takes_every_rate():
    rows = lr.claims(_results([0.40, 0.45, 0.47], [0.40, 0.45, 0.47]))
    assert [r.holds for r in rows] == ["no", "yes", "yes", NA, "yes"]
    rows = lr.claims(_results([0.40, 0.45, 0.47], [0.40, 0.45, 0.50]))  # large K better at 0.1: not worse
    assert rows[0].holds == "no" and rows[2].holds == "no"


def test_on_par_below_the_bound_can_fail():
    rows = lr.claims(_results([0.40, 0.45, 0.47], [0.30, 0.45, 0.30]))
    assert rows[1].holds == "no" and rows[0].holds == "yes"  # on par at 0.03, worse at 0.1


def test_rates_on_one_side_of_the_bound_only():
    rows = lr.claims(_results([0.40, 0.45, 0.47], [0.40, 0.45, 0.47], bound=1.0))
    assert rows[2].holds == NA and rows[2].measured.endswith(": no rate in the grid")
    rows = lr.claims(_results([0.40], [0.40], rates=(0.01,)))
    assert rows[0].holds == NA  # one rate: nothing to compare


def test_small_test_set_is_undecided_and_a_diverged_K1_is_not_evidence():
    rows = lr.claims(_results([0.40, 0.45, 0.47], [0.39, 0.44, 0.42], n_test=200))
    assert [r.holds for r in rows[:3]] == [UNDECIDED] * 3
    assert "1 seed: test noise only, no seed spread, 200 unpaired test images" in rows[0].rule
    rows = lr.claims(_results([0.40, 0.45, 0.10], [0.40, 0.45, 0.10], div1=[False, False, True],
                              divK=[False, False, True]))
    assert rows[0].holds == "no" and "K=1 finite at 0.01, 0.03" in rows[0].measured  # K = 1 broke too


def test_only_K1_is_na():
    h = fake_history([1, 1], [0.01, 0.1], 300, [0.4, 0.4])
    rows = lr.claims(lr.Results(runs=h, **_common.trained_final(h), stable_lr=np.array([0.05]), n_test=np.asarray(BIG),
                                n_runs=np.asarray(2), wall_seconds=np.asarray(1.0)))
    assert [r.holds for r in rows] == [NA, NA, NA, NA, "yes"] and rows[0].measured == "only K = 1 was run"


def _recorded(ratio, lin_loss, diverged=None):
    """A history: two large-K runs (lr 0.01 and 0.1, K = 2) beside their K = 1 runs, with a sharpness
    record and the linear model's loss at 4 evaluations (blocks by n_relin)."""
    h = fake_history([1, 1, 2, 2], [0.01, 0.1, 0.01, 0.1], 6, [0.4] * 4, n_evals=3, diverged=diverged)
    h["n_relin"] = np.array([[0, 2, 4, 6], [0, 2, 4, 6], [0, 1, 1, 3], [0, 1, 1, 3]])
    h["lr_over_bound"] = np.array([[0.1, 0.2, 0.3, 0.4], [1.0, 2.0, 3.0, 4.0]] + ratio)
    h["lin_train_loss"] = np.array([[2.3, 1.9, 1.6, 1.4]] * 2 + lin_loss)
    return h


def test_crossing():
    calm = [2.3, 1.9, 1.6, 1.4]
    # the lr 0.1 run crossed at step 2 and its linear model's loss rose at step 4: yes
    h = _recorded([[0.1, 0.2, 0.3, 0.4], [0.5, 1.2, 1.5, 2.0]], [calm, [2.3, 1.5, 2.2, 1.4]])
    measured, holds, _ = lr.crossing(h)
    assert holds == "yes" and measured == "1 of 2 runs failed, 1 crossed; lr 0.1 seed 0: crossed at step 2, failed at 4"
    assert [f.failed for f in lr.failures(h)] == [-1, 4] and [f.crossed for f in lr.failures(h)] == [-1, 2]
    # a failure with η under the bound up to it: no
    h = _recorded([[0.1, 0.2, 0.3, 0.4], [0.5, 0.6, 0.7, 2.0]], [calm, [2.3, 1.5, 2.2, 1.4]])
    measured, holds, _ = lr.crossing(h)
    assert holds == "no" and "failed at step 4 with η under the bound (crossed only at 6)" in measured
    # a crossing that never failed: no; a divergence counts as a failure
    h = _recorded([[0.1, 0.2, 0.3, 0.4], [0.5, 1.2, 1.5, 2.0]], [calm, calm])
    measured, holds, _ = lr.crossing(h)
    assert holds == "no" and measured.endswith("crossed at step 2, never failed")
    h = _recorded([[0.1, 0.2, 0.3, 0.4], [0.5, 1.2, 1.5, 2.0]], [calm, calm], diverged=[False, False, False, True])
    assert lr.crossing(h)[1] == "yes"
    # nothing failed and nothing crossed: n/a
    assert lr.crossing(_recorded([[0.1, 0.2, 0.3, 0.4], [0.1, 0.2, 0.3, 0.4]], [calm, calm]))[1] == NA
