"""Fig. 6 (iterlin.experiments.fig6): linear probes over training, one tiny real run with two seeds,
the probe-set size, the probe summary, and the claims' verdicts (the shared noise rule over seeds)."""

from __future__ import annotations

import numpy as np
import pytest
from _toy import FakeSweep, fake_cifar, fake_history, null_model

from iterlin.repro.claims import NA, UNDECIDED, UNSTABLE
from iterlin.experiments import _common, fig6, resolve
from iterlin.experiments.fig6 import probe_size, probe_table


def test_config():
    assert resolve("fig6", K=5e6).K == (1, 5_000_000)
    assert isinstance(resolve("fig6"), fig6.Config) and fig6.EXPERIMENT.get_config(K=5e6) == resolve("fig6", K=5e6)
    with pytest.raises(ValueError, match="n_probe=0 is not allowed"):
        resolve("fig6", n_probe=0)
    assert resolve("fig6", "cpu").n_seeds >= 2 and resolve("fig6", "gpu").n_seeds >= 3
    assert resolve("fig6").n_seeds == 1  # smoke stays one seed


def test_fig6_probes_tiny_two_seeds(tiny_cifar):
    config = resolve("fig6", K=2, steps=2, batch_size=8, n_train=16, n_test=8, n_probe=10, n_evals=1, n_seeds=2,
                     n_sharpness=8, sharpness_every=1)
    r = fig6.compute(config, tiny_cifar)
    assert isinstance(r, fig6.Results) and r.config is None
    h = r.runs
    assert h["step"].tolist() == [0, 2] and h["K"].tolist() == [1.0, 2.0, 1.0, 2.0]
    assert h["seed_index"].tolist() == [0, 0, 1, 1] and h["seed"].tolist() == [0, 0, 1, 1]
    for layer in fig6.PROBE_LAYERS:
        for k in ("train_acc", "test_acc", "lam"):
            assert np.asarray(h[f"probe_{layer}_{k}"]).shape == (4, 2)
    acc = np.asarray(h["probe_layer1_test_acc"])
    assert np.all((acc >= 0) & (acc <= 1))
    assert acc[0, 0] == acc[1, 0] and acc[2, 0] == acc[3, 0]  # the runs of one seed share θ_0
    assert int(r.n_probe) == 10 and int(r.n_test) == 8
    rows = fig6.claims(r._replace(config=config))
    assert np.asarray(h["lr_over_bound"]).shape == (4, 2) and np.all(np.isfinite(h["lr_over_bound"]))
    assert len(rows) == 8 and rows[-1].claim == "every run stays finite (no NaN or exploding loss)"
    assert rows[-2].claim.startswith("the linear model stays stable") and rows[-2].holds != NA
    assert "2 seeds" in rows[0].measured
    for layer in fig6.PROBE_LAYERS:  # per test image, every run and point; two routes to the accuracy
        c = np.asarray(h[f"probe_{layer}_test_correct"])
        assert c.shape == (4, 2, 8) and c.dtype == bool
        np.testing.assert_allclose(c.mean(axis=2), h[f"probe_{layer}_test_acc"], rtol=1e-6)
    assert "paired test images" in rows[0].measured


# ------------------------------------------------------------------------------------------------
# n_probe: derived from what is installed, and refused beyond it


def _n_probe(n_probe):
    """The smoke config with ``n_probe`` (None: every image up to the cap)."""
    return fig6.EXPERIMENT.get_config().replace(n_probe=n_probe)


def test_probe_size_none_is_every_image_up_to_the_cap():
    assert probe_size(_n_probe(None), 256) == 256
    assert probe_size(_n_probe(None), 4660) == min(4660, fig6.PROBE_CAP) == fig6.PROBE_CAP
    assert probe_size(_n_probe(None), 50_000) == fig6.PROBE_CAP
    assert probe_size(_n_probe(7), 16) == 7 and probe_size(_n_probe(16), 16) == 16
    with pytest.raises(ValueError, match=r"n_probe=5000 is not allowed: n_probe must be <= n_train=4660 .*"
                                         r"or None for all of them up to 2000"):
        probe_size(_n_probe(5000), 4660)


@pytest.mark.parametrize("scale", ["smoke", "cpu", "gpu"])
def test_scales_fit_the_installed_subset(scale):
    """The scales that use every installed image never ask for more probe images than the shared
    subset (4,660 training images) holds: the gpu scale's old n_probe = 5000 did."""
    config = resolve("fig6", scale)
    installed = 4660 if config.n_train is None else config.n_train
    assert probe_size(config, installed) <= installed


def test_load_refuses_more_probe_images_than_loaded(monkeypatch):
    monkeypatch.setattr("iterlin.experiments._common.load_cifar10", lambda n, n_test: fake_cifar(n, n_test))
    config = resolve("fig6", n_train=16, n_test=8, batch_size=8, n_probe=17, n_sharpness=16)
    with pytest.raises(ValueError, match="n_probe=17 is not allowed: n_probe must be <= n_train=16"):
        fig6.EXPERIMENT.load(config)
    with pytest.raises(ValueError, match="n_sharpness=17 is not allowed: n_sharpness must be <= n_train=16"):
        fig6.load(resolve("fig6", n_train=16, n_test=8, batch_size=8, n_probe=16, n_sharpness=17))
    config = resolve("fig6", n_train=16, n_test=8, batch_size=8, n_probe=16, n_sharpness=16)
    assert fig6.load(config).x_train.shape[0] == 16


def test_compute_fits_the_probes_on_the_derived_number(monkeypatch):
    seen = {}

    def tracker(features_fn, train_xy, test_xy, **kw):
        seen["n"], seen["n_test"] = train_xy[0].shape[0], test_xy[0].shape[0]
        return lambda step, state: {}

    monkeypatch.setattr(_common, "sweep", FakeSweep())
    monkeypatch.setattr(_common, "make_model", null_model)
    monkeypatch.setattr(fig6, "probe_tracker", tracker)
    monkeypatch.setattr(fig6, "PROBE_CAP", 10)
    config = resolve("fig6", n_train=16, n_test=8, batch_size=8, steps=4, n_evals=2)
    assert config.n_probe is None
    res = fig6.compute(config, fake_cifar(16, n_test=8))
    assert int(res.n_probe) == 10 == seen["n"] and seen["n_test"] == 8


# ------------------------------------------------------------------------------------------------
# the summary and the claims


def test_probe_summary():
    h = {"probe_layer1_test_acc": np.array([[0.2, 0.4, 0.6], [0.2, 0.3, 0.5]])}
    s = fig6.probe_summary(h, "layer1")
    np.testing.assert_allclose(s.initial, [0.2, 0.2])
    np.testing.assert_allclose(s.final, [0.6, 0.5])
    np.testing.assert_allclose(s.mean, [0.5, 0.4])  # steps > 0 only
    one = fig6.probe_summary({"probe_layer2_test_acc": np.array([[0.3], [0.1]])}, "layer2")
    np.testing.assert_allclose(one.mean, [0.3, 0.1])  # a single point is its own mean


def _results(k1, large, *, n_test=1000, K=(1, 8), diverged=None):
    """Runs of every seed × K (seed-major): ``k1`` and ``large`` are one probe curve (E,) each, or
    one per seed (S, E); the same curves for both layers."""
    k1, large = np.atleast_2d(np.asarray(k1, np.float64)), np.atleast_2d(np.asarray(large, np.float64))
    S = k1.shape[0]
    h = fake_history(list(K) * S, 0.05, 24, [0.3] * (len(K) * S), n_evals=k1.shape[1] - 1, diverged=diverged)
    h["seed_index"] = np.repeat(np.arange(S), len(K))
    curves = [(k1 if k == 1 else large)[s] for s in range(S) for k in K]
    for layer in fig6.PROBE_LAYERS:
        h[f"probe_{layer}_test_acc"] = np.stack(curves)
    return fig6.Results(runs=h, n_probe=np.asarray(100), n_test=np.asarray(n_test),
                        config=fig6.EXPERIMENT.get_config().replace(K=tuple(K)))


def test_claims_hold_when_large_K_lags():
    rows = fig6.claims(_results([0.2, 0.5, 0.6], [0.2, 0.3, 0.4]))
    assert [r.holds for r in rows] == ["yes"] * 6 + [NA, "yes"]  # no sharpness record in these histories
    assert [r.claim for r in rows[:3]] == ["layer1: the features' linear separability improves over training (K = 1)",
                                           "layer1: large-K features improve slower",
                                           "layer1: large-K features level off lower"]
    assert rows[2].measured.startswith("final probe acc.: K=1 60.0 % vs K=8 40.0 %; Δ +20.0 pts, 2 s.e. interval")
    assert "(1 seed: test noise only, no seed spread, 1000 unpaired test images)" in rows[2].measured


def test_claims_fail_when_large_K_does_not_lag():
    rows = fig6.claims(_results([0.2, 0.3, 0.4], [0.2, 0.5, 0.6]))
    assert [r.holds for r in rows] == ["yes", "no", "no"] * 2 + [NA, "yes"]
    # slower but not lower: improves slower holds, levels off lower is undecided (Δ = 0)
    rows = fig6.claims(_results([0.2, 0.5, 0.5], [0.2, 0.3, 0.5]))
    assert [r.holds for r in rows[:3]] == ["yes", "yes", UNDECIDED]
    # K = 1's probe gets worse over training
    assert fig6.claims(_results([0.6, 0.4, 0.3], [0.6, 0.4, 0.3]))[0].holds == "no"


def test_small_test_set_is_undecided():
    # 20 points apart on 20 test images: 2 s.e. of a difference ≈ 31 points
    rows = fig6.claims(_results([0.2, 0.3, 0.4], [0.2, 0.2, 0.2], n_test=20))
    assert [r.holds for r in rows[:3]] == [UNDECIDED] * 3
    # ... decided on 1000 images
    assert [r.holds for r in fig6.claims(_results([0.2, 0.3, 0.4], [0.2, 0.2, 0.2]))[:3]] == ["yes"] * 3


def test_seeds_that_disagree_leave_it_undecided():
    """Two seeds, huge test set: the large K lags by 20 points in one seed and leads by 16 in the
    other: the seed spread makes 'lower' undecided; when both seeds agree it holds."""
    k1 = [[0.2, 0.5, 0.6], [0.2, 0.5, 0.6]]
    rows = fig6.claims(_results(k1, [[0.2, 0.3, 0.4], [0.2, 0.7, 0.76]], n_test=10**6))
    assert rows[2].holds == UNDECIDED and "(2 seeds, 1000000 unpaired test images)" in rows[2].measured
    rows = fig6.claims(_results(k1, [[0.2, 0.3, 0.4], [0.2, 0.32, 0.42]], n_test=10**6))
    assert rows[2].holds == "yes"
    assert rows[2].measured.startswith("final probe acc.: K=1 60.0 % vs K=8 41.0 %; Δ +19.0 pts")


def test_runs_are_found_by_K_not_by_position():
    """The same runs listed large K first: the verdicts do not change."""
    a = fig6.claims(_results([0.2, 0.5, 0.6], [0.2, 0.3, 0.4], K=(1, 8)))
    b = fig6.claims(_results([0.2, 0.5, 0.6], [0.2, 0.3, 0.4], K=(8, 1)))
    assert [r.holds for r in a] == [r.holds for r in b] == ["yes"] * 6 + [NA, "yes"]
    assert [r.measured for r in a] == [r.measured for r in b]


def test_a_diverged_run_is_not_compared():
    # the large K diverged: its linear model was unstable, and the comparisons say so
    rows = fig6.claims(_results([0.2, 0.5, 0.6], [0.2, 0.3, 0.4], diverged=[False, True]))
    assert [r.holds for r in rows] == ["yes", UNSTABLE, UNSTABLE] * 2 + [NA, "no"]
    assert rows[-1].measured == "diverged: K=8, lr=0.05 at step 3"
    assert rows[1].measured.endswith("; unstable: K=8 seed 0 diverged at step 3")
    # K = 1 diverged: its probes read a frozen state, so nothing is compared
    rows = fig6.claims(_results([0.2, 0.5, 0.6], [0.2, 0.3, 0.4], diverged=[True, False]))
    assert [r.holds for r in rows] == [NA] * 6 + [NA, "no"]


def test_eta_above_the_bound_makes_the_comparison_unstable():
    r = _results([0.2, 0.5, 0.6], [0.2, 0.3, 0.4])
    r.runs["lr_over_bound"] = np.array([[0.1, 0.2, 0.9], [0.1, 0.2, 1.4]])  # the large K crossed at step 24
    rows = fig6.claims(r)
    assert [r.holds for r in rows] == ["yes", UNSTABLE, UNSTABLE] * 2 + ["no", "yes"]
    assert "η above 2/λ_max(θ_s) at step 24" in rows[1].measured


def test_only_K1_run():
    rows = fig6.claims(_results([0.2, 0.3, 0.4], [0.2, 0.3, 0.4], K=(1,)))
    assert [r.holds for r in rows] == [NA, "yes"] and rows[0].measured == "only K = 1 was run"


# The notebook's summary functions (pure functions of the results; no training).


def test_probe_table_one_line_per_layer_and_K():
    lines = probe_table(_results([0.1, 0.2, 0.3], [0.1, 0.1, 0.2], n_test=50)).split("\n")
    assert len(lines) == 1 + 4
    assert lines[0] == "probes fitted on 100 training images, scored on 50 test images; mean over 1 seed"
    assert lines[1] == "layer1  K =    1: initial  10.0 %, final  30.0 %, mean over training  25.0 %"
    assert lines[4] == "layer2  K =    8: initial  10.0 %, final  20.0 %, mean over training  15.0 %"


def test_probe_table_means_over_seeds():
    res = _results([[0.1, 0.2, 0.3], [0.1, 0.2, 0.5]], [[0.1, 0.1, 0.2], [0.1, 0.1, 0.2]])
    lines = probe_table(res).split("\n")
    assert lines[0].endswith("mean over 2 seeds ± one standard error")
    # K = 1's final: 30 % and 50 %: mean 40 %, s.e. = std(ddof=1)/√2 = 10 points
    assert lines[1] == ("layer1  K =    1: initial  10.0 ± 0.0 %, final  40.0 ± 10.0 %, "
                        "mean over training  30.0 ± 5.0 %")


def _nested(acc, n):
    """(E, n) bool: at each point the first round(acc·n) images right (nested across runs: the
    tightest pairing)."""
    out = np.zeros((len(acc), n), bool)
    for e, a in enumerate(acc):
        out[e, :int(round(a * n))] = True
    return out


def test_recorded_per_image_results_pair_the_comparisons():
    """Three seeds, 932 test images, the large K two points lower at the end in every seed: as two
    independent binomials that is inside the noise; paired on the same images (the probes agree on
    the rest) it is decided. probe_correct's means are probe_summary's (two routes)."""
    k1 = [[0.38, 0.39, 0.40], [0.37, 0.39, 0.405], [0.38, 0.385, 0.395]]
    large = [[0.38, 0.38, 0.38], [0.37, 0.375, 0.385], [0.38, 0.38, 0.375]]
    r = _results(k1, large, n_test=932)
    unpaired = fig6.claims(r)
    assert unpaired[2].holds == UNDECIDED and "932 unpaired test images" in unpaired[2].measured
    h = r.runs
    for layer in fig6.PROBE_LAYERS:
        h[f"probe_{layer}_test_correct"] = np.stack([_nested(a, 932) for a in h[f"probe_{layer}_test_acc"]])
        s, c = fig6.probe_summary(h, layer), fig6.probe_correct(h, layer)
        for what in ("initial", "final", "mean"):
            np.testing.assert_allclose(getattr(c, what).mean(axis=1), getattr(s, what), atol=1e-3)
    paired = fig6.claims(r)
    assert paired[2].holds == "yes" and "932 paired test images" in paired[2].measured
    same_delta = [x.measured.split(";")[1].split(",")[0] for x in (paired[2], unpaired[2])]
    assert same_delta == [" Δ +2.0 pts"] * 2  # the same Δ, a narrower interval
    assert fig6.probe_correct({"probe_layer1_test_acc": np.zeros((2, 3))}, "layer1") is None
