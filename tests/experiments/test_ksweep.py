"""ksweep (iterlin.experiments.ksweep): one sweep over a log grid of K up to ∞, a tiny real run, the
config's validation, and the claims' verdicts on constructed results (each can hold and fail)."""

from __future__ import annotations

import math

import numpy as np
import pytest
from _toy import FakeSweep, fake_cifar, fake_history, flat_mlp, null_model

from iterlin.repro.claims import NA, UNDECIDED, UNSTABLE
from iterlin.experiments import _common, ksweep, resolve

INF = math.inf
BIG = 100_000  # test images: 2 s.e. of Δ ≈ 0.4 points


# ------------------------------------------------------------------------------------------------
# config


def test_config_and_scales():
    assert resolve("ksweep", K=[300, 3, "inf", 30]).K == (1, 3, 30, 300, INF)
    assert resolve("ksweep", K=5e6).K == (1, 5_000_000)  # one K means [1, K]
    for scale in ("smoke", "cpu", "gpu", "paper"):
        c = resolve("ksweep", scale)
        finite = [k for k in c.K if math.isfinite(k)]
        assert c.K[0] == 1 and c.K[-1] == INF, scale
        # up to ≥ T, plus ∞; the cpu scale stops at T/4 for time (its K ≥ T check is n/a)
        assert max(finite) >= c.steps if scale != "cpu" else 4 * max(finite) == c.steps, scale
        assert c.augment is (scale in ("cpu", "gpu")), scale  # the stable setting augments, as fig3
    assert resolve("ksweep", "cpu").n_seeds >= 2 and resolve("ksweep").n_seeds == 1


@pytest.mark.parametrize(
    "K, message",
    [
        ([], r"K=\[\] is not allowed: K must list at least one period"),
        ([1, 0, 10], r"K\[1\]=0 is not allowed"),
        ([1, 2.5], r"K\[1\]=2.5 is not allowed"),
        ([1, "abc"], r"K\[1\]='abc' is not allowed"),
        ([1, math.nan], r"K\[1\]=nan is not allowed"),
    ],
)
def test_a_bad_K_grid_is_named(K, message):
    with pytest.raises(ValueError, match=message):
        resolve("ksweep", K=K)


def test_a_list_learning_rate_is_refused_here():
    with pytest.raises(ValueError, match=r"lr=\[0.1, 0.2\] is not allowed: lr must be a single value here"):
        resolve("ksweep", lr=[0.1, 0.2])


# ------------------------------------------------------------------------------------------------
# compute


def test_compute_runs_every_K_in_one_sweep(monkeypatch):
    fake = FakeSweep(acc=[0.30, 0.31, 0.32, 0.20])
    monkeypatch.setattr(_common, "sweep", fake)
    monkeypatch.setattr(_common, "make_model", null_model)
    config = resolve("ksweep", K=[10, 3, "inf"], lr=0.1, steps=10, batch_size=4, n_train=16, n_evals=2)
    res = ksweep.compute(config, fake_cifar(16, n_test=12))
    (call,) = fake.calls  # ONE sweep
    assert call["K"] == [1, 3, 10, INF] and call["lr"] == 0.1 and call["steps"] == 10 and call["batch_size"] == 4
    assert call["augment"] is False and call["eval_steps"] == [0, 5, 10]
    assert isinstance(res, ksweep.Results) and res.config is None
    assert set(_common.stored(res)) == {"runs", "final_test_acc", "n_test", "n_runs", "wall_seconds"}
    assert int(res.n_test) == 12 and int(res.n_runs) == 4 and float(res.wall_seconds) >= 0
    np.testing.assert_allclose(res.final_test_acc, [0.30, 0.31, 0.32, 0.20])


def test_tiny_real_run_two_seeds(monkeypatch):
    """A small MLP in place of the CNN: every seed × K in one sweep; K = ∞ scored by its linear model;
    K ≥ T follows K = ∞'s trajectory exactly (the claims' consistency check holds)."""
    monkeypatch.setattr(_common, "make_model", lambda name, key: flat_mlp(key))
    config = resolve("ksweep", K=[2, 4, 8, INF], lr=0.05, steps=4, batch_size=4, n_train=16, n_test=8, n_evals=2,
                     n_seeds=2, n_eval_train=None)
    r = ksweep.compute(config, fake_cifar(16, n_test=8))
    h = r.runs
    assert h["K"].tolist() == [1, 2, 4, 8, INF] * 2 and h["seed"].tolist() == [0] * 5 + [1] * 5
    assert h["n_relin"][:, -1].tolist() == [4, 2, 1, 0, 0] * 2
    assert int(r.n_runs) == 10 and r.final_test_correct.shape == (10, 8)
    fixed = np.isinf(h["K"])
    np.testing.assert_allclose(r.final_test_acc[fixed], h["lin_test_acc"][fixed, -1])
    np.testing.assert_allclose(r.final_test_acc[~fixed], h["net_test_acc"][~fixed, -1])
    np.testing.assert_allclose(r.final_test_correct.mean(1), r.final_test_acc)
    # K = 4 (re-linearised at the last step only), K = 8 and K = ∞: the same θ_T
    for k in (4.0, 8.0):
        np.testing.assert_array_equal(h["net_test_correct"][h["K"] == k], h["net_test_correct"][fixed])
    rows = ksweep.claims(r._replace(config=config))
    assert [r.kind for r in rows] == ["claim", "claim", "check", "claim", "claim"]
    assert rows[2].holds == "yes" and "K=4" in rows[2].measured and "K=8" in rows[2].measured
    assert "2 seeds, 8 paired test images" in rows[0].rule
    s = ksweep.by_K(r._replace(config=config))
    assert s.K.tolist() == [1, 2, 4, 8, INF] and s.acc.shape == (5, 2) and s.net_inf.shape == (1, 2)
    assert s.relin.tolist() == [4, 2, 1, 0, 0] and s.inf.tolist() == [False] * 4 + [True] and s.steps == 4
    assert ksweep.timing(r).startswith("10 runs (5 K × 2 seeds) in one sweep, ")


# ------------------------------------------------------------------------------------------------
# claims on constructed results


def _results(acc, K=(1, 3, 10, 30, INF), steps=24, n_test=BIG, diverged=None, lin=None, correct=False, seeds=1):
    """A constructed ksweep result: final accuracies ``acc`` per K (the model each run trains), one
    seed or ``seeds`` copies of it; the K = ∞ run's network at ``lin``, by default that of a finite
    K ≥ T (the same θ_T, as in a real run) or, without one, the linear model's."""
    late = [a for k, a in zip(K, acc) if math.isfinite(k) and k >= steps]
    if lin is None and late:
        lin = late[-1]
    Ks = list(K) * seeds
    acc = list(acc) * seeds
    h = fake_history(Ks, 0.05, steps, acc, diverged=None if diverged is None else list(diverged) * seeds)
    h["seed_index"] = np.repeat(np.arange(seeds), len(K))
    if lin is not None:  # the K = ∞ run's network (drawn open), not its linear model
        fixed = np.isinf(h["K"])
        h["net_test_acc"] = h["net_test_acc"].copy()
        h["net_test_acc"][fixed, -1] = lin
    res = ksweep.Results(runs=h, **_common.trained_final(h), n_test=np.asarray(n_test), n_runs=np.asarray(len(Ks)),
                         wall_seconds=np.asarray(1.0), config=ksweep.EXPERIMENT.get_config("smoke"))
    if correct:
        n = n_test
        c = np.zeros((len(Ks), n), bool)
        for r, a in enumerate(res.final_test_acc):
            c[r, :int(round(a * n))] = True
        res = res._replace(final_test_correct=c)
        h["net_test_correct"] = c
    return res


def test_claims_hold_when_large_K_is_on_par_and_infinity_is_below():
    rows = ksweep.claims(_results([0.40, 0.399, 0.398, 0.397, 0.30]))
    assert [r.holds for r in rows] == ["yes", "yes", "yes", NA, "yes"]  # NA: no sharpness record
    assert rows[0].measured.startswith("largest K on par: K=30 (0 re-linearisations); K=3 (8): Δ -0.1")
    assert "K=∞ (linear model): 30.0 %" in rows[1].measured and "K=10: Δ +9.8" in rows[1].measured


def test_the_largest_K_on_par_is_reported_with_its_feature_updates():
    rows = ksweep.claims(_results([0.40, 0.40, 0.30, 0.40, 0.20]))  # K = 10 falls off, K = 30 on par
    assert rows[0].holds == "yes"
    assert rows[0].measured.startswith("largest K on par: K=30 (0 re-linearisations); K=3 (8): Δ 0.0")
    assert "K=10 (2): Δ -10.0 [-10.4, -9.6] no" in rows[0].measured


def test_claims_fail_when_every_large_K_falls_off():
    rows = ksweep.claims(_results([0.40, 0.30, 0.30, 0.30, 0.20]))
    assert rows[0].holds == "no" and "no K > 1 on par" in rows[0].measured


def test_few_feature_updates_need_a_K_with_at_most_12():
    # T = 240: K = 3 and 10 make 80 and 24 re-linearisations; only K = 30 (8) counts, and it is off
    rows = ksweep.claims(_results([0.40, 0.40, 0.40, 0.30, 0.20], steps=240))
    assert rows[0].holds == "no" and rows[0].measured.startswith("largest K on par: K=10 (24 re-linearisations)")
    rows = ksweep.claims(_results([0.40, 0.40, 0.40], K=(1, 2, 3), steps=240))
    assert rows[0].holds == NA  # no K with ≤ 12 re-linearisations


def test_infinity_not_below_when_it_matches_or_beats_a_finite_K():
    rows = ksweep.claims(_results([0.40, 0.40, 0.30, 0.40, 0.35]))  # K = 10 below ∞
    assert rows[1].holds == "no"
    rows = ksweep.claims(_results([0.40, 0.40, 0.40, 0.40, 0.40]))
    assert rows[1].holds == UNDECIDED and rows[0].holds == "yes"


def test_small_test_set_is_undecided():
    rows = ksweep.claims(_results([0.40, 0.39, 0.38, 0.37, 0.36], n_test=200))
    assert rows[0].holds == UNDECIDED and rows[1].holds == UNDECIDED
    assert "1 seed: test noise only, no seed spread, 200 unpaired test images" in rows[0].rule


def test_paired_images_and_seeds_decide_what_an_unpaired_seed_cannot():
    unpaired = ksweep.claims(_results([0.40, 0.40, 0.40, 0.40, 0.38], n_test=2000, seeds=2))
    paired = ksweep.claims(_results([0.40, 0.40, 0.40, 0.40, 0.38], n_test=2000, seeds=2, correct=True))
    assert unpaired[1].holds == UNDECIDED and paired[1].holds == "yes"
    assert "2 seeds, 2000 paired test images" in paired[0].rule


def test_divergence_is_unstable_and_a_diverged_K1_no():
    rows = ksweep.claims(_results([0.40, 0.40, 0.30, 0.30, 0.20], diverged=[False, True, False, False, False]))
    # K = 3 diverged (unstable: it might have been on par), K = 10 and 30 are off: not a plain "no"
    assert rows[0].holds == UNSTABLE
    assert "no K > 1 on par" in rows[0].measured and "K=3 (8): Δ 0.0 [-0.4, +0.4] no (unstable)" in rows[0].measured
    rows = ksweep.claims(_results([0.40, 0.30, 0.30, 0.40, 0.20], diverged=[False, False, False, True, False]))
    assert rows[0].holds == UNSTABLE  # K = 3, 10 off, K = 30 diverged: it might have been on par
    rows = ksweep.claims(_results([0.40, 0.40, 0.40, 0.40, 0.20], diverged=[False, False, True, False, False]))
    assert rows[1].holds == UNSTABLE and rows[-1].holds == "no"  # a diverged K is not evidence against ∞
    assert rows[-1].measured == "diverged: K=10, lr=0.05 at step 3"
    rows = ksweep.claims(_results([0.40, 0.40, 0.40, 0.40, 0.20], diverged=[True, False, False, False, False]))
    assert rows[0].holds == "no"  # K = 1 diverged


def test_the_K_at_least_T_check_fails_when_the_networks_differ():
    rows = ksweep.claims(_results([0.40, 0.40, 0.40, 0.40, 0.30], lin=0.25))  # ∞'s network 25 %, K = 30's 40 %
    assert rows[2].kind == "check" and rows[2].holds == "no"
    assert rows[2].measured == "network f(θ_T): K=∞ 25.0 %; K=30 40.0 %"
    rows = ksweep.claims(_results([0.40, 0.40, 0.40], K=(1, 3, 10)))  # no ∞, no K ≥ T
    assert rows[1].holds == NA and rows[2].holds == NA
