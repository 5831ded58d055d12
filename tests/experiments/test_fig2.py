"""Fig. 2 (iterlin.experiments.fig2): the mini-batch panel's runs, and the claims' verdicts."""

from __future__ import annotations

import math

import numpy as np
import pytest
from _toy import FakeSweep, fake_cifar, fake_history, null_model

from iterlin.repro.claims import NA, UNDECIDED, UNSTABLE
from iterlin.experiments import _common, fig2, resolve


@pytest.fixture
def fake_sweep(monkeypatch):
    """The CNN sweep with a recording fake in place of training (and a small model in place of the CNN)."""
    fake = FakeSweep()
    monkeypatch.setattr(_common, "sweep", fake)
    monkeypatch.setattr(_common, "make_model", null_model)
    return fake


def test_minibatch_periods():
    assert fig2.minibatch_periods([1, 4, math.inf], 3) == [1, 12, math.inf]
    assert fig2.minibatch_periods([1, 5, 20], 10) == [1, 50, 200]
    assert fig2.minibatch_periods([1], 7) == [1]


def test_fig2_minibatch_runs_scale_lr_K_and_steps(fake_sweep):
    """The mini-batch panel uses lr / factor, K × factor (K = 1 stays plain SGD) and steps × factor."""
    config = resolve("fig2", K=[1, 4, math.inf], lr=0.2, steps=5, factor=3, batch_size=4, n_train=16, n_evals=5)
    res = fig2.compute(config, fake_cifar(16))
    full, mini = fake_sweep.calls
    assert full["K"] == [1, 4, math.inf] and full["lr"] == 0.2 and full["steps"] == 5
    assert full["batch_size"] is None and full["eval_steps"] == [0, 1, 2, 3, 4, 5]
    assert mini["K"] == [1, 12, math.inf]  # K = 1 (plain SGD) stays 1
    assert math.isclose(mini["lr"], 0.2 / 3)
    assert mini["steps"] == 15
    assert mini["batch_size"] == 4
    assert mini["eval_steps"] == [0, 3, 6, 9, 12, 15]  # the same n_evals points over the longer run
    assert isinstance(res, fig2.Results) and res.config is None and int(res.n_test) == 8
    assert {k for k, v in res._asdict().items() if v is not None} == {"full", "mini", "n_test", "n_train"}
    assert full["n"] == mini["n"] == 16 and res.n_train.tolist() == [16, 16]
    res = res._replace(n_test=np.asarray(100_000))  # enough test images to decide "on par"
    rows = fig2.claims(res)
    assert [r.holds for r in rows] == ["yes", "yes", NA, NA, "yes"]  # the fake records no sharpness
    assert callable(full["callback"]) and callable(mini["callback"])  # each panel records its own
    assert "K=4 (1 re-linearisations)" in rows[0].measured and "K=12 (1 re-linearisations)" in rows[1].measured


def test_each_panel_records_lambda_max_at_its_own_re_linearisations(fake_sweep, monkeypatch):
    """The full-batch panel's λ_max every ``sharpness_every`` steps at its rate; the mini-batch
    panel's every ``sharpness_every × factor`` at lr / factor, on the same first images."""
    seen = []
    monkeypatch.setattr(fig2, "sharpness_callback",
                        lambda c, d, lr: seen.append((c.sharpness_every, lr, d.x_train[: c.n_sharpness])))
    config = resolve("fig2", K=[1, 4], lr=0.2, steps=8, factor=2, batch_size=4, n_train=16, n_train_full=8,
                     n_evals=4, n_sharpness=8, sharpness_every=4)
    fig2.compute(config, fake_cifar(16))
    (every_full, lr_full, x_full), (every_mini, lr_mini, x_mini) = seen
    assert (every_full, lr_full, every_mini, lr_mini) == (4, 0.2, 8, 0.1)
    np.testing.assert_array_equal(x_full, x_mini)
    # λ_max is measured on the full-batch panel's images: n_sharpness is checked against them
    monkeypatch.setattr("iterlin.experiments._common.load_cifar10", lambda n, n_test: fake_cifar(n, n_test))
    with pytest.raises(ValueError, match="n_sharpness=9 is not allowed: n_sharpness must be <= n_train=8"):
        fig2.load(config.replace(n_sharpness=9))
    assert fig2.load(config).x_train.shape[0] == 16


def test_fig2_full_batch_panel_trains_on_the_first_n_train_full_images(fake_sweep):
    """n_train_full: the full-batch panel's images (the first n), the mini-batch panel keeps all."""
    data = fake_cifar(16)
    config = resolve("fig2", K=[1, 4], steps=2, factor=2, batch_size=4, n_train=16, n_train_full=6, n_evals=2)
    res = fig2.compute(config, data)
    full, mini = fake_sweep.calls
    assert (full["n"], mini["n"]) == (6, 16) and res.n_train.tolist() == [6, 16]
    sub = fig2.full_batch_data(config, data)
    np.testing.assert_array_equal(sub.x_train, data.x_train[:6])
    np.testing.assert_array_equal(sub.y_train, data.y_train[:6])
    assert sub.x_test is data.x_test
    assert fig2.full_batch_data(config.replace(n_train_full=100), data) is data  # more than loaded: all
    with pytest.raises(ValueError, match="n_train_full=0 is not allowed"):
        resolve("fig2", n_train_full=0)


def _results(full_acc, mini_acc, n_test=100_000, full_div=None, mini_div=None):
    return fig2.Results(
        full=fake_history([1, 5, math.inf], 0.1, 50, full_acc, diverged=full_div),
        mini=fake_history([1, 50, math.inf], 0.01, 500, mini_acc, diverged=mini_div),
        n_test=np.asarray(n_test), n_train=np.asarray([1000, 1000]),
    )


def test_claims_hold_when_on_par():
    rows = fig2.claims(_results([0.40, 0.395, 0.30], [0.40, 0.41, 0.30]))
    assert [r.holds for r in rows] == ["yes", "yes", NA, NA, "yes"]
    assert rows[0].measured.startswith("K=1: 40.0 %; K=5 (10 re-linearisations): 39.5 %; Δ -0.5 pts, 2 s.e.")
    assert rows[4].measured == "none diverged"
    assert rows[2].claim.startswith("full batch: the linear model stays stable")
    assert rows[3].claim.startswith("mini-batch: the linear model stays stable")


def test_each_panel_is_judged_on_its_own_bound():
    r = _results([0.40, 0.40, 0.30], [0.40, 0.40, 0.30])
    r.full["lr_over_bound"] = np.array([[0.2, 0.3, 0.3], [0.2, 0.25, 0.3], [0.2, np.nan, np.nan]])
    r.mini["lr_over_bound"] = np.array([[0.2, 0.3, 0.3], [0.2, 0.5, 1.2], [0.2, np.nan, np.nan]])
    rows = fig2.claims(r)
    # full batch under a third of the bound: decided; the mini-batch K = 50 crossed it at step 500
    assert [r.holds for r in rows] == ["yes", UNSTABLE, "yes", "no", "yes"]
    assert "η above 2/λ_max(θ_s) at step 500" in rows[1].measured


def test_claims_fail_when_apart_or_diverged():
    rows = fig2.claims(_results([0.40, 0.35, 0.30], [0.40, 0.43, 0.30]))
    assert [r.holds for r in rows] == ["no", "no", NA, NA, "yes"]  # -5 and +3 points
    rows = fig2.claims(_results([0.40, 0.40, 0.30], [0.40, 0.40, 0.30], mini_div=[False, True, False]))
    assert [r.holds for r in rows] == ["yes", UNSTABLE, NA, NA, "no"]  # large K diverged: not evidence
    assert rows[4].measured == "diverged: mini-batch: K=50, lr=0.01 at step 3"


def test_claims_undecided_when_the_test_set_is_too_small():
    rows = fig2.claims(_results([0.40, 0.40, 0.30], [0.40, 0.37, 0.30], n_test=150))
    assert [r.holds for r in rows] == [UNDECIDED, UNDECIDED, NA, NA, "yes"]  # 2 s.e. of Δ on 150 images ≈ 11 points
    only_inf = fig2.Results(full=fake_history([1, math.inf], 0.1, 50, [0.4, 0.3]),
                            mini=fake_history([1, math.inf], 0.1, 50, [0.4, 0.3]), n_test=np.asarray(100_000),
                            n_train=np.asarray([1000, 1000]))
    assert [r.holds for r in fig2.claims(only_inf)] == [NA, NA, NA, NA, "yes"]  # no finite K > 1 to compare
