"""Fig. 3 (iterlin.experiments.fig3): one sweep of the config's K, and the claims' verdicts."""

from __future__ import annotations

import numpy as np
from _toy import FakeSweep, fake_cifar, fake_history, null_model

from iterlin.repro.claims import NA, UNDECIDED, UNSTABLE, Claim
from iterlin.experiments import _common, fig3, resolve

BIG = 100_000  # test images: 2 s.e. of Δ ≈ 0.4 points, so "under 1 point" is decided


def test_compute_runs_the_config(monkeypatch):
    fake = FakeSweep()
    monkeypatch.setattr(_common, "sweep", fake)
    monkeypatch.setattr(_common, "make_model", null_model)
    config = resolve("fig3", K=5, lr=0.1, steps=10, batch_size=4, n_train=16, n_evals=2)
    res = fig3.compute(config, fake_cifar(16, n_test=12))
    (call,) = fake.calls
    assert call["K"] == [1, 5] and call["lr"] == 0.1 and call["steps"] == 10 and call["batch_size"] == 4
    assert call["augment"] is True and call["eval_steps"] == [0, 5, 10]
    assert isinstance(res, fig3.Results) and res.config is None and int(res.n_test) == 12
    assert call["callback"] is not None  # the sharpness recorder


def _rows(acc, scale="smoke", n_test=BIG, K=(1, 5), steps=50, diverged=None, lr=0.1):
    h = fake_history(list(K), lr, steps, acc, diverged=diverged)
    return fig3.claims(fig3.Results(runs=h, n_test=np.asarray(n_test), config=fig3.EXPERIMENT.get_config(scale)))


def test_claims_rules():
    rows = _rows([0.40, 0.395])
    assert [r.holds for r in rows] == ["yes", NA, "yes", NA, "yes"]
    assert rows[0].measured == ("K=1: 40.0 %; K=5 (10 re-linearisations): 39.5 %; Δ -0.5 pts, 2 s.e. interval "
                                "[-0.9, -0.1] (1 seed: test noise only, no seed spread, 100000 unpaired test images)")
    assert rows[2].measured == rows[0].measured  # the same Δ, judged within the shared ±2 points


def test_few_updates_match_within_the_shared_two_points_where_one_point_is_undecided():
    """"Comparable generalisation" (Sec. 4.1) is the shared on-par rule, ±2 points, as the K sweep
    judges it; the row "under 1 point" is Fig. 3's own, stricter number: Δ −1.0 ± 1.0 is inside
    ±2 but not inside ±1."""
    rows = _rows([0.40, 0.39], n_test=20_000)
    assert [r.holds for r in rows] == [UNDECIDED, NA, "yes", NA, "yes"]
    assert "±2 pts" in rows[2].rule and "±1 pts" in rows[0].rule
    assert [r.holds for r in _rows([0.40, 0.37], scale="paper")] == ["no", "no", "no", NA, "yes"]


def test_claims_hold_at_paper_scale():
    assert [r.holds for r in _rows([0.823, 0.818], scale="paper")] == ["yes", "yes", "yes", NA, "yes"]
    assert [r.holds for r in _rows([0.70, 0.70], scale="paper")] == ["yes", "no", "yes", NA, "yes"]  # not 82.3 %


def test_too_many_relinearisations_do_not_count():
    rows = _rows([0.40, 0.40], K=(1, 2))  # 25 re-linearisations > 12
    assert [r.holds for r in rows] == ["yes", NA, "no", NA, "yes"]


def test_small_test_set_is_undecided_and_so_is_the_row_depending_on_it():
    rows = _rows([0.40, 0.30], n_test=200)
    assert [r.holds for r in rows] == [UNDECIDED, NA, UNDECIDED, NA, "yes"]  # the row it rests on is undecided
    assert "200 unpaired test images" in rows[0].measured


def test_seeds_and_paired_test_images_decide_what_one_unpaired_seed_cannot():
    """Two seeds whose large-K run gets the images K = 1 gets, but one: paired, the interval is
    tight and 'on par within 1 point' is decided (yes); unpaired it would be undecided."""
    h = fake_history([1, 5, 1, 5], 0.1, 50, [0.40, 0.40, 0.41, 0.409])
    h["seed_index"] = np.array([0, 0, 1, 1])
    n = 2000
    correct = np.zeros((4, n), bool)
    for r, acc in enumerate([0.40, 0.40, 0.41, 0.409]):
        correct[r, :int(round(acc * n))] = True
    h["net_test_correct"] = correct
    rows = fig3.claims(fig3.Results(runs=h, n_test=np.asarray(n), config=fig3.EXPERIMENT.get_config("cpu")))
    assert rows[0].holds == "yes" and "2 seeds, 2000 paired test images" in rows[0].measured
    del h["net_test_correct"]
    assert fig3.claims(fig3.Results(runs=h, n_test=np.asarray(n), config=fig3.EXPERIMENT.get_config("cpu")))[0].holds == UNDECIDED


def test_divergence_is_reported_in_claims():
    rows = _rows([0.40, 0.40], lr=[0.1, 0.2], diverged=[False, True], n_test=200)
    # a diverged large-K run is not evidence about the claim: its linear model was unstable
    assert rows[0].holds == UNSTABLE and rows[0].measured.endswith("unstable: K=5 seed 0 diverged at step 3")
    assert rows[2].holds == UNSTABLE
    assert rows[-1] == Claim("every run stays finite (no NaN or exploding loss)", "no divergence reported",
                             "diverged: K=5, lr=0.2 at step 3", "no", rows[-1].rule, id="fig3.finite")


def test_the_sharpness_row():
    h = fake_history([1, 5], 0.1, 50, [0.40, 0.395])
    h["lr_over_bound"] = np.array([[0.1, 0.2, 0.3], [0.1, 0.25, 0.2]])
    rows = fig3.claims(fig3.Results(runs=h, n_test=np.asarray(BIG), config=fig3.EXPERIMENT.get_config("cpu")))
    assert rows[3].holds == "yes" and rows[0].holds == "yes"
    h["lr_over_bound"] = np.array([[0.1, 0.2, 0.3], [0.1, 1.25, 0.2]])  # η above the bound: unstable
    rows = fig3.claims(fig3.Results(runs=h, n_test=np.asarray(BIG), config=fig3.EXPERIMENT.get_config("cpu")))
    assert [r.holds for r in rows[:4]] == [UNSTABLE, NA, UNSTABLE, "no"]
