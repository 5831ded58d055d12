"""Fig. 4 (iterlin.experiments.fig4): both panels' wiring on real images with a small model (every
seed × K in one sweep per panel, each run equal to the same run trained alone), the test-set
callback against the training loop's own evaluation, and the claims' verdicts."""

from __future__ import annotations

import math

import numpy as np
import optax
import pytest
from _toy import fake_history, flat_mlp

from iterlin.repro.claims import NA, UNDECIDED, UNSTABLE
from iterlin.experiments import _common, fig4, resolve
from iterlin.training import train, train_sweep
from iterlin.tree import tree_stack


def test_panels():
    config = fig4.EXPERIMENT.get_config("smoke", K=[1, 3], lr=0.02, K_bn=[1, 5], lr_bn=0.04, augment_bn=False)
    panels = fig4.panel_settings(config)
    assert tuple(panels) == fig4.PANELS
    assert panels["no_bn"] == fig4.Panel("resnet18", (1, 3), 0.02, False)
    assert panels["bn"] == fig4.Panel("resnet18_bn", (1, 5), 0.04, False)
    assert fig4.panel_settings(config.replace(augment_bn=True))["bn"].augment


def test_bad_parameters_named():
    with pytest.raises(ValueError, match="bn_mode='running' is not allowed"):
        resolve("fig4", bn_mode="running")
    with pytest.raises(ValueError, match="K_bn=0 is not allowed"):
        resolve("fig4", K_bn=0)
    with pytest.raises(ValueError, match="n_seeds=0 is not allowed"):
        resolve("fig4", n_seeds=0)
    assert resolve("fig4", K_bn="inf", bn_mode="frozen").K_bn == (1, math.inf)
    assert resolve("fig4", "smoke").n_seeds == 1
    cpu = resolve("fig4", "cpu")
    assert cpu.n_seeds >= 2 and cpu.n_train is None and cpu.n_test is None
    assert resolve("fig4", "gpu").n_seeds >= 3


def test_fig4_wiring_two_seeds(monkeypatch, tiny_cifar):
    """Both panels, every seed × K, with a small MLP in place of ResNet-18 (the wiring, not the
    ResNet): each run of the sweep equals that seed's run trained alone and evaluated by the
    training loop (the test metrics come from the callback there, from ``fit`` here)."""
    seen = []

    def small_model(name, key, bn_mode=None):
        seen.append((name, bn_mode))
        return flat_mlp(key)

    monkeypatch.setattr(fig4, "make_model", small_model)
    config = resolve("fig4", K=3, K_bn=math.inf, steps=4, batch_size=4, n_train=16, n_test=8, n_evals=2,
                     bn_mode="frozen", n_seeds=2, seed=5, n_eval_train=6, lr=0.05, lr_bn=0.02)
    r = fig4.compute(config, tiny_cifar)
    assert isinstance(r, fig4.Results) and r.config is None
    assert seen == [("resnet18", None)] * 2 + [("resnet18_bn", "frozen")] * 2
    for panel, Ks, lr, augment in (("no_bn", [1.0, 3.0], 0.05, False), ("bn", [1.0, math.inf], 0.02, True)):
        h = getattr(r, panel)
        assert h["K"].tolist() == Ks * 2 and h["step"].tolist() == [0, 2, 4]
        assert h["seed_index"].tolist() == [0, 0, 1, 1] and h["seed"].tolist() == [5, 5, 6, 6]
        assert h["lr"].tolist() == [lr] * 4
        for key in ("net_test_acc", "net_test_loss", "net_train_acc", "lin_train_acc", "n_relin"):
            assert np.asarray(h[key]).shape == (4, 3), (panel, key)
        assert "lin_test_acc" not in h  # the linear model is evaluated on the training images only
        assert h["diverged"].shape == (4,) and h["net_test_correct"].shape == (4, 8)
        np.testing.assert_allclose(h["net_test_correct"].mean(axis=1), h["net_test_acc"][:, -1])
        for r_i, (s, k) in ((1, (5, Ks[1])), (2, (6, Ks[0]))):  # seed 5's large K, seed 6's K = 1
            init_key, data_key = _common.seed_keys(s)
            m = flat_mlp(init_key)
            _, ref = train(m.apply_fn, m.params, (tiny_cifar.x_train, tiny_cifar.y_train), K=k, steps=4,
                           optimizer=optax.sgd(lr), batch_size=4, key=data_key, augment=augment,
                           eval_data=(tiny_cifar.x_test, tiny_cifar.y_test), eval_steps=[0, 2, 4], eval_train_size=6)
            for key in ("net_test_acc", "net_test_loss", "net_train_loss", "lin_train_loss", "n_relin"):
                np.testing.assert_allclose(h[key][r_i], ref[key], rtol=2e-5, atol=1e-6, err_msg=f"{panel} {r_i} {key}")
        assert not np.allclose(h["net_train_loss"][0], h["net_train_loss"][2])  # the seeds differ
        # the sharpness record (every evaluation point is a multiple of sharpness_every = 2), with the panel's rate
        assert h["sharpness"].shape == (4, 3) and np.isfinite(h["sharpness"]).all() and (h["sharpness"] > 0).all()
        np.testing.assert_allclose(h["lr_over_bound"], lr * h["sharpness"] / 2, rtol=1e-6)
    assert r.bn["n_relin"][:, -1].tolist() == [4, 0, 4, 0]
    assert int(r.n_test) == 8
    rows = fig4.claims(r._replace(config=config))
    assert len(rows) == 7
    assert [r.claim.split(":")[0] for r in rows[5:]] == ["no BatchNorm", "BatchNorm + augmentation"]
    assert "largest η·λ_max/2" in rows[5].measured
    assert rows[3].claim.startswith("BatchNorm lowers") and "median over 2 seeds" in rows[3].measured
    assert rows[1].measured.startswith("K=1: ") and "no finite K > 1" in rows[1].measured  # K_bn = [1, ∞]
    assert "2 seeds, 8 paired test images" in rows[0].measured


def test_callback_equals_the_training_loops_evaluation(tiny_cifar):
    """The test-set callback (chunks of 3 images) and ``fit``'s own evaluation of the network give
    the same loss and accuracy for every run of a sweep, and the per-image record matches."""
    x, y, xt, yt = tiny_cifar
    ms = [flat_mlp(_common.seed_keys(s)[0]) for s in (0, 1)]
    params = tree_stack([m.params for m in ms])
    common = dict(K=[1, 2], steps=2, optimizer=optax.sgd(0.05), batch_size=4, eval_steps=[0, 2])
    _, ref = train_sweep(ms[0].apply_fn, params, (x, y), eval_data=(xt, yt), **common)
    _, h = train_sweep(ms[0].apply_fn, params, (x, y), callback=fig4.net_test_callback(ms[0].apply_fn, xt, yt, 3),
                       **common)
    np.testing.assert_allclose(h["net_test_acc"], ref["net_test_acc"], rtol=1e-6)
    np.testing.assert_allclose(h["net_test_loss"], ref["net_test_loss"], rtol=1e-5)
    assert np.asarray(h["net_test_correct"]).shape == (2, 2, 8)
    np.testing.assert_allclose(np.asarray(h["net_test_correct"]).mean(-1), ref["net_test_acc"])


# ------------------------------------------------------------------------------------------------
# Claims on constructed results


def _panel(acc, lr, *, S=1, K=(1, 100), n=None, diverged=None):
    """A panel's sweep history: S seeds × K (seed-major), final accuracies ``acc`` (R,); with ``n``,
    nested per-image correctness (a run gets the first round(acc·n) test images right)."""
    h = fake_history(list(K) * S, lr, 200, acc, diverged=diverged)
    h["seed_index"] = np.repeat(np.arange(S), len(K))
    if n is not None:
        h["net_test_correct"] = np.arange(n)[None, :] < np.round(np.asarray(acc)[:, None] * n)
    return h


def _results(acc_nb, acc_b, *, n_test=100_000, S=1, paired=False, div_nb=None, div_b=None):
    n = n_test if paired else None
    return fig4.Results(
        no_bn=_panel(acc_nb, 0.01, S=S, n=n, diverged=div_nb),
        bn=_panel(acc_b, 0.02, S=S, n=n, diverged=div_b),
        n_test=np.asarray(n_test),
    )


def test_claims_hold_on_par_and_no_divergence():
    rows = fig4.claims(_results([0.5, 0.495], [0.6, 0.605]))
    # no run diverged: "more easily" undecided; no sharpness record in these histories: its rows n/a
    assert [r.holds for r in rows] == ["yes", "yes", UNDECIDED, NA, "yes", NA, NA]
    assert rows[0].claim == "no BatchNorm: large K ≈ SGD (K = 1)"
    assert rows[2].measured.startswith("diverged or loss exploded: BN 0/2 runs (lr 0.02), no BN 0/2 runs (lr 0.01)")
    assert rows[2].rule.endswith("learning rates or K differ between the panels (as in the paper)")
    same = _results([0.5, 0.495], [0.6, 0.605])
    same.bn["lr"] = same.no_bn["lr"]
    assert fig4.claims(same)[2].rule.endswith("the same learning rate and K in both panels")


def test_claims_fail():
    assert [r.holds for r in fig4.claims(_results([0.5, 0.45], [0.6, 0.65]))] == ["no", "no", UNDECIDED, NA, "yes", NA, NA]
    # a no-BN large-K run diverged and no BN run did: one run in two is no evidence either way, and the
    # diverged run's linear model was unstable: not evidence about "on par" either
    rows = fig4.claims(_results([0.5, 0.5], [0.6, 0.6], div_nb=[False, True]))
    assert [r.holds for r in rows] == [UNSTABLE, "yes", UNDECIDED, NA, "no", NA, NA]
    assert rows[4].measured == "diverged: no BN: K=100, lr=0.01 at step 3"


def test_on_par_over_seeds_and_paired_test_images():
    """Three seeds, 300 test images: large K within half a point of K = 1 on the same images is
    decided on par within 2 points when paired; unpaired on 300 images it is undecided."""
    acc = [0.40, 0.395, 0.42, 0.415, 0.38, 0.385]
    rows = fig4.claims(_results(acc, acc, n_test=300, S=3, paired=True))
    assert rows[0].holds == "yes" and "(3 seeds, 300 paired test images)" in rows[0].measured
    rows = fig4.claims(_results(acc, acc, n_test=300, S=3, paired=False))
    assert rows[0].holds == UNDECIDED and "unpaired" in rows[0].measured
    # seeds that disagree: +5 and -5 points, the mean difference 0 is not evidence of parity
    rows = fig4.claims(_results([0.40, 0.45, 0.40, 0.35], [0.6] * 4, n_test=100_000, S=2))
    assert rows[0].holds == UNDECIDED


def test_bn_divergence_is_counted_and_tested():
    nb4 = [0.5] * 4
    # every BN run diverged and no no-BN run did: p = 1/70 < 0.05
    rows = fig4.claims(_results(nb4, nb4, S=2, div_b=[True] * 4))
    assert rows[2].holds == "yes" and "BN 4/4 runs" in rows[2].measured and "no BN 0/4 runs" in rows[2].measured
    assert "p = 0.01 (BN more)" in rows[2].measured
    rows = fig4.claims(_results(nb4, nb4, S=2, div_nb=[True] * 4))
    assert rows[2].holds == "no"
    rows = fig4.claims(_results(nb4, nb4, S=2, div_b=[False, True, False, False]))
    assert rows[2].holds == UNDECIDED and rows[4].holds == "no"  # 1 of 4 against 0 of 4: p = 0.5
    # finite runs whose training loss exploded count as diverged (iterlin.repro.failures.exploded_runs)
    res = _results(nb4, nb4, S=2)
    res.no_bn["net_train_loss"] = np.array([[2.3, 2.1]] * 4) * np.array([[1, 1], [1, 30], [1, 1], [1, 30]])
    res.no_bn["step"] = np.array([0, 200])
    rows = fig4.claims(res)
    assert "no BN 2/4 runs" in rows[2].measured and "BN 0/4 runs" in rows[2].measured
    assert rows[4].holds == "no" and "no BN: K=100, lr=0.01: training loss 2.3 → 63 at step 200" in rows[4].measured


def _with_sharpness(res, lam_nb, lam_b):
    """Give both panels a sharpness record (R, 3): NaN at step 0, ``lam`` (R,) at a middle step, and
    at the last step (a linearisation no step was taken on, which the bound row leaves out) a value
    that would decide it the other way: the no-BN panel's 1e6, the BN panel's 1."""
    for p, lam, last in (("no_bn", lam_nb, 1e6), ("bn", lam_b, 1.0)):
        getattr(res, p)["sharpness"] = np.stack([np.full(len(lam), np.nan), np.asarray(lam, np.float64),
                                                 np.full(len(lam), last)], axis=1)
    return res


def test_bn_bound_compares_each_seeds_largest_lambda_max():
    nb4 = [0.5] * 4
    # seed by seed (two K per seed), BN's largest λ_max is twice the no-BN one: its bound is lower
    rows = fig4.claims(_with_sharpness(_results(nb4, nb4, S=2), [100, 80, 200, 150], [150, 200, 300, 350]))
    assert rows[3].claim.startswith("BatchNorm lowers the linear model's stability bound")
    assert rows[3].holds == UNDECIDED  # two seeds: t(1) = 12.7 makes the interval far too wide
    d = np.log10([200 / 100, 400 / 200, 340 / 180])
    rows = fig4.claims(_with_sharpness(_results([0.5] * 6, [0.5] * 6, S=3), [100, 90, 200, 150, 180, 170],
                                       [190, 200, 400, 390, 340, 300]))
    assert rows[3].holds == "yes" and f"mean log₁₀ ratio {d.mean():+.2f}" in rows[3].measured
    assert "median over 3 seeds: BN 340 (lr 0.02, augmented), no BN 180 (lr 0.01)" in rows[3].measured
    # the other way round: BN's curvature lower, its bound higher
    rows = fig4.claims(_with_sharpness(_results([0.5] * 6, [0.5] * 6, S=3), [190, 200, 400, 390, 360, 300],
                                       [100, 90, 200, 150, 180, 170]))
    assert rows[3].holds == "no"
    # a seed with no record in one panel is left out; none in common: n/a
    res = _with_sharpness(_results(nb4, nb4, S=2), [np.nan, np.nan, 200, 150], [150, 200, np.nan, np.nan])
    assert fig4.claims(res)[3].holds == NA


def test_fisher_one_sided():
    assert fig4.fisher_one_sided(4, 4, 0, 4) == pytest.approx(1 / 70)
    assert fig4.fisher_one_sided(0, 4, 0, 4) == 1.0
    assert fig4.fisher_one_sided(0, 4, 4, 4) == 1.0
    with pytest.raises(ValueError, match="a=5 is not allowed"):
        fig4.fisher_one_sided(5, 4, 0, 4)
    stats = pytest.importorskip("scipy.stats")
    for a, n_a, b, n_b in [(3, 4, 1, 4), (2, 6, 0, 6), (5, 10, 2, 12), (1, 3, 2, 2)]:
        want = stats.fisher_exact([[a, n_a - a], [b, n_b - b]], alternative="greater").pvalue
        assert fig4.fisher_one_sided(a, n_a, b, n_b) == pytest.approx(want)
