"""Fig. 5 (iterlin.experiments.fig5): the (K, lr) runs, the n_train expansion, the assembled results
and the claims' verdicts."""

from __future__ import annotations

import math

import numpy as np
import pytest
from _toy import FakeSweep, fake_cifar, fake_sweep, null_model, with_losses

from iterlin.repro.claims import NA, UNDECIDED, pooled_runs
from iterlin.experiments import _common, fig5, resolve, revalidate
from iterlin.experiments._common import Sweep
from iterlin.repro.stats import runs_of

SCALE = "every finite K scales with data like K = 1"
INF_WORSE = "K = ∞ (no feature learning) scales worse"
CONTROL = "the higher lr of K = ∞ does not explain the gap"
CONVERGED = "runs are trained to convergence"
DIVERGED = "every run stays finite (no NaN or exploding loss)"
STABLE = "the linear model stays stable: η under 0.33 of 2/λ_max(θ_s) along every large-K run"


def _config(**changes):
    """The smoke config with ``changes`` (None sets a knob to None, unlike ``get_config``'s overrides)."""
    return fig5.EXPERIMENT.get_config().replace(**changes)


def test_single_size_expands_to_halvings():
    assert resolve("fig5", n_train=400).n_train == (100, 200, 400)
    assert resolve("fig5", n_train=[300, 100]).n_train == (100, 300)
    assert resolve("fig5", "gpu", n_train="all").n_train == (None,)
    assert revalidate(resolve("fig5", n_train="all")).n_train == (None,)
    assert revalidate(resolve("fig5", n_train="all").to_dict()).n_train == (None,)
    assert revalidate(resolve("fig5", n_train=400)) == resolve("fig5", n_train=400)
    assert revalidate(resolve("fig5", n_train=400).to_dict()) == resolve("fig5", n_train=400)
    assert fig5.EXPERIMENT.get_config(n_train=400) == resolve("fig5", n_train=400)
    assert fig5.Config.EXPAND["n_train"](400) == [100, 200, 400]  # the rule that expands a single size
    with pytest.raises(ValueError, match=r"batch_size=50 is not allowed.*n_train=32"):
        resolve("fig5", n_train=[32, 64], batch_size=50)


def test_runs_dedupe():
    config = resolve("fig5", K=[1, 4], lr=0.1, lr_inf=0.1, n_train=[8, 16], steps=4)
    assert fig5.runs(config) == [(1.0, 0.1), (4.0, 0.1), (math.inf, 0.1)]
    config = resolve("fig5", K=[1, 4], lr=0.1, lr_inf=0.5, n_train=[8, 16], steps=4)
    assert fig5.runs(config) == [(1.0, 0.1), (4.0, 0.1), (math.inf, 0.5), (1.0, 0.5)]


def test_load_checks_batch_size_against_the_smallest_size(monkeypatch):
    monkeypatch.setattr(fig5, "load_cifar10", lambda n, n_test: fake_cifar(min(n, 10), n_test))
    config = _config(n_train=[4, 16], n_test=3, batch_size=None, n_val=None, n_sharpness=4)
    data = fig5.load(config)
    assert sorted(data.by_size) == ["10", "4"] and data.heldout is None  # keyed by the size actually loaded
    with pytest.raises(ValueError, match=r"batch_size=5 is not allowed.*n_train=4"):
        fig5.load(config.replace(batch_size=5))  # refused already by the Config (the smallest size asked for)
    # sizes the Config allows (12, 16 >= 11), but only 10 images are installed: load refuses it
    with pytest.raises(ValueError, match=r"batch_size=11 is not allowed.*n_train=10"):
        fig5.load(config.replace(n_train=(12, 16), batch_size=11))


def test_compute_one_sweep_per_size_and_results(monkeypatch):
    """Accuracy grows with n for finite K, not for K = ∞; K = ∞ is scored by its linear model."""
    accs = {8: [0.2, 0.2, 0.2, 0.2], 16: [0.4, 0.39, 0.21, 0.4]}
    fake = FakeSweep(acc=lambda call: accs[call["n"]])

    def sweep(*args, **kw):  # the linear model scores half the network's accuracy
        h = fake(*args, **kw)
        return Sweep.from_columns(with_losses({**h, "lin_test_acc": h["lin_test_acc"] * 0.5,
                                               "lin_train_acc": h["net_train_acc"] * 0.5}))

    monkeypatch.setattr(_common, "sweep", sweep)
    monkeypatch.setattr(_common, "make_model", null_model)
    config = resolve("fig5", K=[1, 4], lr=0.1, lr_inf=0.5, n_train=[8, 16], steps=4, n_evals=2)
    res = fig5.compute(config, fig5.SizedData({"16": fake_cifar(16), "8": fake_cifar(8)}))
    assert [c["n"] for c in fake.calls] == [8, 16]  # sizes in numeric order
    assert all(c["K"] == [1.0, 4.0, math.inf, 1.0] and c["lr"] == [0.1, 0.1, 0.5, 0.5] for c in fake.calls)
    assert isinstance(res, fig5.Results) and res.config is None
    assert res.n_train.tolist() == [8, 16] and res.best_test_acc.shape == (2, 4)
    assert res.K.tolist() == [1.0, 4.0, math.inf, 1.0] and res.lr.tolist() == [0.1, 0.1, 0.5, 0.5]
    assert np.allclose(res.best_test_acc[:, 2], [0.1, 0.105])  # the K = ∞ run's linear model
    assert np.allclose(res.best_test_acc[:, 0], [0.2, 0.4])  # the K = 1 run's network
    assert np.allclose(res.final_train_acc[1], [0.8, 0.78, 0.21, 0.8]) and res.diverged.shape == (2, 4)
    assert sorted(res.histories) == ["16", "8"] and int(res.n_test) == 8
    assert res.stopped_test_acc is None and res.n_val is None  # no n_val: not computed, not stored
    assert "stopped_test_acc" not in _common.stored(res) and "n_val" not in _common.stored(res)
    assert all(c["callback"] is not None for c in fake.calls)  # λ_max
    res = res._replace(config=config)
    rows = {r.claim: r for r in fig5.claims(res)}
    assert rows[CONVERGED].holds == "no"  # train acc. 0.8 < 99 %: the scaling rows are not judged
    assert rows[SCALE].holds == NA and rows[INF_WORSE].holds == NA and "did not fit" in rows[SCALE].rule
    assert rows[CONTROL].holds == UNDECIDED  # 8 test images decide nothing


def test_sizes_derived_from_the_installed_copy(monkeypatch, capsys):
    monkeypatch.setattr(fig5, "load_cifar10", lambda n, n_test: fake_cifar(640 if n is None else n, n_test or 3))
    config = _config(n_train=[None], n_test=None, batch_size=4, n_val=None)
    data = fig5.load(config)
    assert sorted(map(int, data.by_size)) == [20, 40, 80, 160, 320, 640]
    assert "derived from the 640 installed training images: [20, 40, 80, 160, 320, 640]" in capsys.readouterr().out
    # with images held out, the sizes are halvings of what is left
    data = fig5.load(config.replace(n_val=40))
    assert sorted(map(int, data.by_size)) == [18, 37, 75, 150, 300, 600] and data.heldout.x_train.shape[0] == 40
    assert "640 installed training images less 40 held out: [18, 37, 75, 150, 300, 600]" in capsys.readouterr().out


def test_heldout_images_follow_the_largest_training_set(monkeypatch):
    """The n_val images right after the largest set: disjoint from every training set, the same
    images on any copy that holds them; more than are installed is refused, naming n_val."""
    pool = fake_cifar(100, 3)

    def load(n, n_test):
        m = pool.x_train.shape[0] if n is None else min(n, pool.x_train.shape[0])
        return pool._replace(x_train=pool.x_train[:m], y_train=pool.y_train[:m])

    monkeypatch.setattr(fig5, "load_cifar10", load)
    config = _config(n_train=[8, 16], n_test=3, batch_size=None, n_val=10)
    data = fig5.load(config)
    np.testing.assert_array_equal(data.heldout.x_train, pool.x_train[16:26])
    np.testing.assert_array_equal(data.heldout.y_train, pool.y_train[16:26])
    with pytest.raises(ValueError, match=r"n_val=85 is not allowed: 100 training images are installed, and the "
                                         r"largest training set takes 16; n_val must be <= 84"):
        fig5.load(config.replace(n_val=85))


def test_stopped_at_best_picks_the_test_accuracy_where_held_out_accuracy_peaks():
    val = np.array([[0.1, 0.5, 0.4], [0.3, 0.3, 0.2], [np.nan, np.nan, np.nan], [np.nan, 0.2, 0.6]])
    test = np.array([[0.2, 0.3, 0.9], [0.4, 0.8, 0.1], [0.5, 0.5, 0.5], [0.9, 0.1, 0.2]])
    # the peak, not the best test accuracy; the earliest on a tie; NaN points skipped; none: NaN
    np.testing.assert_array_equal(fig5.stopped_at_best(val, test), [0.3, 0.4, np.nan, 0.2])


def test_compute_with_heldout_images_stops_on_them(monkeypatch):
    """Each run is stopped where the model it trains (the network; K = ∞: its linear model) does
    best on the held-out images, and the claims then say so."""
    def sweep(*args, callback=None, **kw):
        h = FakeSweep()(*args, **kw)
        assert callable(callback)  # a held-out tracker factory
        R, E = h["net_test_acc"].shape
        return Sweep.from_columns(with_losses({
            **h,
            "net_val_acc": np.tile([0.1, 0.9, 0.2], (R, 1))[:, :E],  # the network peaks at point 1
            "lin_val_acc": np.tile([0.1, 0.2, 0.9], (R, 1))[:, :E],  # the linear model at point 2
            "lin_test_acc": h["lin_test_acc"] * 0.5,
            "lin_train_acc": h["net_train_acc"],
        }))

    monkeypatch.setattr(_common, "sweep", sweep)
    monkeypatch.setattr(_common, "make_model", null_model)
    config = resolve("fig5", K=[1, 4], lr=0.1, lr_inf=0.1, n_train=[8, 16], steps=4, n_evals=2, n_val=8)
    data = fig5.SizedData({"8": fake_cifar(8), "16": fake_cifar(16)}, fake_cifar(8))
    res = fig5.compute(config, data)
    h = res.histories["8"]
    np.testing.assert_allclose(res.stopped_test_acc[0, :2], h["net_test_acc"][:2, 1])
    np.testing.assert_allclose(res.stopped_test_acc[0, 2], h["lin_test_acc"][2, 2])  # K = ∞
    assert res.stopped_test_correct is None  # the fake sweep records no test image's correctness
    assert int(res.n_val) == 8
    res = res._replace(config=config)
    rows = {r.claim: r for r in fig5.claims(res)}
    assert "early stopping on 8 held-out training images" in rows[SCALE].rule


def test_the_sharpness_record_uses_each_runs_own_rate():
    """A real sweep of two seeds × (K, lr) at two rates: every run records λ_max of its linear model
    and η·λ_max/2 with its own η (seed-major, as the sweep orders its runs), and the stability row
    judges the K > 1 runs of every size pooled."""
    config = resolve("fig5", K=[1, 2], lr=0.01, lr_inf=0.03, n_train=[8, 16], steps=4, n_evals=2, n_val=None,
                     n_test=8, batch_size=4, n_seeds=2, n_sharpness=8, sharpness_iters=3, sharpness_every=2)
    res = fig5.compute(config, fig5.SizedData({"8": fake_cifar(8), "16": fake_cifar(16)}))
    for n in ("8", "16"):
        h = res.histories[n]
        assert h["lr"].tolist() == [0.01, 0.01, 0.03, 0.03] * 2 and h["seed"].tolist() == [0] * 4 + [1] * 4
        lam, ratio = np.asarray(h["sharpness"]), np.asarray(h["lr_over_bound"])
        assert np.isfinite(lam).all() and (lam > 0).all()
        np.testing.assert_allclose(ratio, lam * np.asarray(h["lr"])[:, None] / 2, rtol=1e-6)
    pooled = pooled_runs([res.histories["8"], res.histories["16"]])
    assert pooled["lr_over_bound"].shape == (16, 3) and pooled["K"].tolist()[:4] == [1.0, 2.0, math.inf, 1.0]
    res = res._replace(config=config)
    row = {r.claim: r for r in fig5.claims(res)}[STABLE]
    worst = float(np.max(pooled["lr_over_bound"][pooled["K"] > 1]))
    assert f"K>1: largest η·λ_max/2 {worst:.2f}" in row.measured
    assert row.holds == ("yes" if worst <= 1 / 3 else "no")
    # Two routes to the early-stopped accuracy: the per-image record at the stopping point, and
    # the loop's own evaluation of the test images (no n_val: the best test accuracy's point).
    assert res.stopped_test_correct.shape == (2, 8, 8) and res.stopped_test_correct.dtype == bool
    np.testing.assert_allclose(res.stopped_test_correct.mean(axis=-1), res.best_test_acc, atol=1e-6)
    assert "8 paired test images" in {r.claim: r for r in fig5.claims(res)}[SCALE].measured


def test_a_sharpness_set_larger_than_the_largest_training_set_is_refused(monkeypatch):
    monkeypatch.setattr(fig5, "load_cifar10", lambda n, n_test: fake_cifar(n, n_test))
    fig5.load(_config(n_train=[8, 16], n_test=3, batch_size=None, n_val=None, n_sharpness=12))  # 8: all of it
    with pytest.raises(ValueError, match=r"n_sharpness=20 is not allowed: n_sharpness must be <= n_train=16"):
        fig5.load(_config(n_train=[8, 16], n_test=3, batch_size=None, n_val=None, n_sharpness=20))


def test_a_set_smaller_than_n_sharpness_is_measured_whole():
    """Two routes to λ_max on the whole 8-image set: n_sharpness 8, and n_sharpness 16 (the larger
    set's size), which measures all of a smaller set; the 16-image set's record is on 8 or 16 images."""
    config = resolve("fig5", K=[1, 2], lr=0.01, lr_inf=0.03, n_train=[8, 16], steps=4, n_evals=2, n_val=None,
                     n_test=8, batch_size=4, n_seeds=1, n_sharpness=8, sharpness_iters=3, sharpness_every=2)
    data = fig5.SizedData({"8": fake_cifar(8), "16": fake_cifar(16)})
    part, whole = (fig5.compute(config.replace(n_sharpness=m), data).histories for m in (8, 16))
    np.testing.assert_allclose(np.asarray(whole["8"]["sharpness"]), np.asarray(part["8"]["sharpness"]), rtol=1e-6)
    assert not np.allclose(np.asarray(whole["16"]["sharpness"]), np.asarray(part["16"]["sharpness"]), rtol=1e-3)


# ----------------------------------------------------------------------------------------------
# Claims on constructed results: runs K = 1, 4 at lr 0.1; K = ∞ and K = 1 at lr_inf 0.5
# ----------------------------------------------------------------------------------------------

K = [1.0, 4.0, math.inf, 1.0]
LR = [0.1, 0.1, 0.5, 0.5]


def _results(best, *, train=1.0, sizes=(100, 400), lr_inf=0.5, diverged=None, K=K, lr=LR, n_test=10**6, seeds=1):
    """Constructed results; ``best`` (N, R) for one seed, repeated for ``seeds`` seeds (seed s
    adds 0.002·s to every accuracy, so the seed spread is small but not zero)."""
    best = np.concatenate([np.asarray(best, np.float64) + 0.002 * s for s in range(seeds)], axis=1)
    K, lr = list(K) * seeds, list(lr) * seeds
    S, R = best.shape
    div = np.zeros((S, R), bool) if diverged is None else np.tile(np.asarray(diverged, bool), (1, seeds))
    histories = {str(n): fake_sweep(K, lr, 10, best[s], diverged=div[s]) for s, n in enumerate(sizes)}
    return fig5.Results(
        n_train=np.asarray(sizes), K=np.asarray(K), lr=np.asarray(lr, np.float64),
        seed_index=np.repeat(np.arange(seeds), R // seeds), n_test=np.asarray(n_test),
        best_test_acc=best, final_train_acc=np.full((S, R), train), diverged=div,
        histories=histories, config=fig5.EXPERIMENT.get_config().replace(lr=0.1, lr_inf=lr_inf),
    )


def _holds(results):
    holds = {r.claim: r.holds for r in fig5.claims(results)}
    assert holds.pop(STABLE) == NA  # constructed results record no sharpness
    return holds


def test_claims_all_hold():
    res = _results([[0.30, 0.29, 0.30, 0.30], [0.50, 0.48, 0.35, 0.49]])
    assert _holds(res) == {SCALE: "yes", INF_WORSE: "yes", CONTROL: "yes", CONVERGED: "yes", DIVERGED: "yes"}
    rows = fig5.claims(res)
    assert rows[0].measured.startswith("gain n=100→400: K=1 20.0 pts; K=4 19.0 pts (Δ -1.0 pts, 2 s.e. interval")


def test_claims_fail():
    # K = 4 gains 10 points less than K = 1; K = ∞ gains as much as K = 1 at its rate; the control
    # K = 1 at lr_inf is 5 points off; one run diverged.
    res = _results([[0.30, 0.30, 0.30, 0.30], [0.50, 0.40, 0.60, 0.55]],
                   diverged=[[False] * 4, [False, True, False, False]])
    assert _holds(res) == {SCALE: "no", INF_WORSE: "no", CONTROL: "no", CONVERGED: "yes", DIVERGED: "no"}
    assert fig5.claims(res)[-1].measured == "diverged: n=400: K=4, lr=0.1 at step 3"


def test_unconverged_runs_leave_the_scaling_rows_unjudged():
    res = _results([[0.30, 0.30, 0.30, 0.30], [0.50, 0.40, 0.60, 0.55]], train=0.9)
    holds = _holds(res)
    assert holds[CONVERGED] == "no" and holds[SCALE] == NA and holds[INF_WORSE] == NA


def test_each_scaling_row_is_gated_on_the_runs_it_compares():
    """Only K = ∞ under 99 % at the largest size: the finite-K row is judged, the K = ∞ row is not;
    only K = 4 under it: the reverse."""
    best = [[0.30, 0.29, 0.30, 0.30], [0.50, 0.48, 0.35, 0.49]]
    res = _results(best)
    res = res._replace(final_train_acc=np.array([[1.0, 1.0, 1.0, 1.0], [1.0, 1.0, 0.982, 1.0]]))
    holds = _holds(res)
    assert holds[CONVERGED] == "no" and holds[SCALE] == "yes" and holds[INF_WORSE] == NA
    res = res._replace(final_train_acc=np.array([[1.0, 0.98, 1.0, 1.0], [1.0, 1.0, 1.0, 1.0]]))
    holds = _holds(res)
    assert holds[CONVERGED] == "no" and holds[SCALE] == NA and holds[INF_WORSE] == "yes"


def test_few_test_images_leave_the_claims_undecided_and_seeds_count():
    best = [[0.30, 0.29, 0.30, 0.30], [0.50, 0.48, 0.35, 0.49]]
    holds = _holds(_results(best, n_test=500))
    assert holds[SCALE] == UNDECIDED and holds[CONTROL] == UNDECIDED
    assert holds[INF_WORSE] == "yes"  # a 14-point gap is beyond the noise of 500 images
    rows = fig5.claims(_results(best, n_test=500, seeds=3))
    assert "3 seeds" in rows[0].measured


def test_per_image_correctness_is_read_where_each_run_was_stopped(monkeypatch):
    """With the test images' per-image record, each run's correctness is taken at the point its
    held-out accuracy peaked (the network's for finite K, the linear model's for K = ∞)."""
    E, n_test = 3, 8
    rng = np.random.default_rng(0)

    def sweep(*args, **kw):
        h = FakeSweep()(*args, **kw)
        R = h["net_test_acc"].shape[0]
        net, lin = (rng.random((R, E, n_test)) < 0.5 for _ in range(2))
        return Sweep.from_columns(with_losses({
            **h, "net_val_acc": np.tile([0.1, 0.9, 0.2], (R, 1)), "lin_val_acc": np.tile([0.1, 0.2, 0.9], (R, 1)),
            "net_test_set_per_image": net, "lin_test_set_per_image": lin,
            "net_test_acc": net.mean(-1), "lin_test_acc": lin.mean(-1), "lin_train_acc": h["net_train_acc"],
        }))

    monkeypatch.setattr(_common, "sweep", sweep)
    monkeypatch.setattr(_common, "make_model", null_model)
    config = resolve("fig5", K=[1, 4], lr=0.1, lr_inf=0.5, n_train=[8, 16], steps=4, n_evals=2, n_val=8)
    res = fig5.compute(config, fig5.SizedData({"8": fake_cifar(8), "16": fake_cifar(16)}, fake_cifar(8)))
    for i, n in enumerate(("8", "16")):
        h = res.histories[n]
        np.testing.assert_array_equal(res.stopped_test_correct[i, [0, 1, 3]], h["net_test_set_per_image"][[0, 1, 3], 1])
        np.testing.assert_array_equal(res.stopped_test_correct[i, 2], h["lin_test_set_per_image"][2, 2])  # K = ∞
    np.testing.assert_allclose(res.stopped_test_correct.mean(-1), res.stopped_test_acc)


def test_paired_test_images_narrow_a_difference_of_gains():
    """Runs that agree on most test images: paired per image, the test noise of a difference of
    gains is that of the few images where they differ, not of four independent accuracies (the
    rule for results that lack the per-image record)."""
    n = 1000
    res = _results([[0.30, 0.29, 0.30, 0.30], [0.50, 0.48, 0.35, 0.49]], n_test=n, seeds=3)
    R = res.K.size
    rng = np.random.default_rng(1)
    small = rng.random(n) < 0.3  # every run gets the same images right at the small size ...
    large = small | (rng.random(n) < 0.29)  # ... and at the large one, but for a few images per run
    hits = np.stack([np.tile(small, (R, 1)), np.tile(large, (R, 1))])
    flip = rng.random((R, n)) < 0.02
    hits[1] ^= flip
    res_paired = res._replace(best_test_acc=hits.mean(-1), stopped_test_correct=hits)
    res_unpaired = res_paired._replace(stopped_test_correct=None)
    i1, i4 = runs_of({"K": res.K, "lr": res.lr}, 1, 0.1), runs_of({"K": res.K, "lr": res.lr}, 4.0, 0.1)
    paired, unpaired = fig5.gain_difference(res_paired, i1, i4), fig5.gain_difference(res_unpaired, i1, i4)
    assert paired.paired and not unpaired.paired and paired.delta == pytest.approx(unpaired.delta)
    assert paired.hi - paired.lo < 0.5 * (unpaired.hi - unpaired.lo)
    rows = {r.claim: r for r in fig5.claims(res_paired)}
    assert f"{n} paired test images" in rows[SCALE].measured and f"{n} paired test images" in rows[CONTROL].measured


def test_claims_not_applicable():
    # One size only: both scaling rows read n/a, each saying why.
    rows = fig5.claims(_results([[0.30, 0.30, 0.30, 0.30]], sizes=(100,)))
    assert [(r.id, r.holds, r.measured) for r in rows][:2] == [
        ("fig5.scales_like", NA, "one training-set size only"), ("fig5.inf_worse", NA, "one training-set size only")]
    # lr_inf = lr: the K = ∞ run has no separate K = 1 control.
    res = _results([[0.30, 0.30, 0.30], [0.50, 0.49, 0.35]], lr_inf=0.1, K=[1.0, 4.0, math.inf], lr=[0.1] * 3)
    holds = _holds(res)
    assert holds[CONTROL] == NA and holds[SCALE] == "yes" and holds[INF_WORSE] == "yes"
    # No finite K > 1: nothing to compare with K = 1.
    res = _results([[0.30, 0.30, 0.30], [0.50, 0.35, 0.50]], K=[1.0, math.inf, 1.0], lr=[0.1, 0.5, 0.5])
    assert _holds(res)[SCALE] == NA


# The notebook's summary functions (pure functions of the results; no training).


def test_by_size_turns_per_size_values_into_a_history_over_sizes():
    res = _results([[0.30, 0.30, 0.30, 0.30], [0.50, 0.40, 0.60, 0.55]], sizes=(100, 400),
                   diverged=[[False] * 4, [False, True, False, False]])
    acc, _ = fig5.stopped(res)
    h = fig5.by_size(res, acc, "stopped")
    np.testing.assert_array_equal(h["step"], [100, 400])
    np.testing.assert_array_equal(h["stopped"], acc.T)
    assert h["K"].tolist() == K and h["lr"].tolist() == LR
    assert h["diverged"].tolist() == [False, True, False, False] and h["diverged_step"].tolist() == [-1, 400, -1, -1]
