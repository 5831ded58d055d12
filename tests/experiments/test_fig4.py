"""Fig. 4 (iterlin.experiments.fig4): both panels' wiring on real images with a small model,
stacking of single-run histories, and the claims' verdicts."""

from __future__ import annotations

import math

import numpy as np
import pytest
from _toy import fake_history, flat_mlp

from iterlin.claims import NA
from iterlin.experiments import fig4, resolve
from iterlin.experiments.fig4 import divergence_report


def test_panels():
    assert fig4.PANELS == {"no_bn": ("resnet18", "K", "lr", None),
                           "bn": ("resnet18_bn", "K_bn", "lr_bn", "augment_bn")}


def test_bad_parameters_named():
    with pytest.raises(ValueError, match="bn_mode='running' is not allowed"):
        resolve("fig4", bn_mode="running")
    with pytest.raises(ValueError, match="K_bn=0 is not allowed"):
        resolve("fig4", K_bn=0)
    assert resolve("fig4", K_bn="inf", bn_mode="frozen")["K_bn"] == [1, math.inf]


def test_fig4_wiring_tiny(monkeypatch, tiny_cifar):
    """Both panels, every K, with a small MLP in place of ResNet-18 (the wiring, not the ResNet)."""
    seen = []

    def small_model(name, key, bn_mode=None):
        seen.append((name, bn_mode))
        return flat_mlp(key)

    monkeypatch.setattr(fig4, "make_model", small_model)
    config = resolve("fig4", K=1, K_bn=math.inf, steps=2, batch_size=4, n_train=16, n_test=8, n_evals=1,
                     bn_mode="frozen")
    r = fig4.compute(config, tiny_cifar)
    assert seen == [("resnet18", None), ("resnet18_bn", "frozen")]
    for panel, Ks in (("no_bn", [1.0]), ("bn", [1.0, math.inf])):
        h = r[panel]
        assert h["K"].tolist() == Ks and h["step"].tolist() == [0, 2]
        assert np.asarray(h["net_test_acc"]).shape == (len(Ks), 2) and np.asarray(h["diverged"]).shape == (len(Ks),)
        assert h["lr"].tolist() == [config["lr" if panel == "no_bn" else "lr_bn"]] * len(Ks)
    assert r["bn"]["n_relin"][:, -1].tolist() == [2, 0]
    assert int(r["n_test"]) == 8
    rows = fig4.claims({**r, "config": config})
    assert len(rows) == 4
    assert rows[0].holds == NA and rows[1].holds == NA  # 8 test images cannot decide "≈ SGD"


def test_stack_histories_pads_a_diverged_run():
    ok = {"step": np.array([0, 1, 2]), "net_test_acc": np.array([0.1, 0.2, 0.3]), "n_relin": np.array([0, 1, 2]),
          "diverged": np.array(False), "diverged_step": np.array(-1)}
    bad = {"step": np.array([0, 1]), "net_test_acc": np.array([0.1, 0.15]), "n_relin": np.array([0, 1]),
           "diverged": np.array(True), "diverged_step": np.array(1)}
    h = fig4.stack_histories([ok, bad], [0, 1, 2])
    assert h["step"].tolist() == [0, 1, 2]
    assert h["net_test_acc"].tolist() == [[0.1, 0.2, 0.3], [0.1, 0.15, 0.15]]
    assert h["n_relin"].tolist() == [[0, 1, 2], [0, 1, 1]]
    assert h["diverged"].tolist() == [False, True] and h["diverged_step"].tolist() == [-1, 1]


def _results(acc_nb, acc_b, *, n_test=100_000, div_nb=None, div_b=None):
    return {
        "no_bn": fake_history([1, 100], 0.01, 200, acc_nb, diverged=div_nb),
        "bn": fake_history([1, 100], 0.02, 200, acc_b, diverged=div_b),
        "n_test": np.asarray(n_test),
    }


def test_claims_hold_on_par_and_no_divergence():
    rows = fig4.claims(_results([0.5, 0.49], [0.6, 0.61]))
    assert [r.holds for r in rows] == ["yes", "yes", NA, "yes"]  # no run diverged: "more easily" undecided
    assert rows[0].claim == "no BatchNorm: large K ≈ SGD (K = 1)"


def test_claims_fail():
    assert [r.holds for r in fig4.claims(_results([0.5, 0.45], [0.6, 0.65]))] == ["no", "no", NA, "yes"]
    # a no-BN run diverged and no BN run did: BN does not diverge more easily
    rows = fig4.claims(_results([0.5, 0.5], [0.6, 0.6], div_nb=[False, True]))
    assert [r.holds for r in rows] == ["no", "yes", "no", "no"]
    assert rows[3].measured == "diverged: no BN: K=100, lr=0.01 at step 3"


def test_bn_diverges_more_easily():
    rows = fig4.claims(_results([0.5, 0.5], [0.6, 0.6], div_b=[False, True]))
    assert [r.holds for r in rows] == ["yes", "no", "yes", "no"]
    assert rows[2].measured == "diverged: BN 1/2, no BN 0/2"


def test_claims_na_on_few_test_images():
    assert [r.holds for r in fig4.claims(_results([0.5, 0.3], [0.6, 0.6], n_test=16))] == [NA, NA, NA, "yes"]
    only_k1 = {"no_bn": fake_history([1], 0.01, 10, [0.5]), "bn": fake_history([1, math.inf], 0.01, 10, [0.5, 0.4]),
               "n_test": np.asarray(100_000)}
    assert [r.holds for r in fig4.claims(only_k1)][:2] == [NA, NA]  # no finite K > 1 in either panel


# The notebook's summary functions (pure functions of the results; no training).


def test_divergence_report_one_line_per_run_in_panel_order():
    def h(K, div, at, acc):
        return {"K": np.array(K), "diverged": np.array(div), "diverged_step": np.array(at),
                "net_test_acc": np.array(acc)}

    results = {"no_bn": h([1.0, 1e6], [False, False], [-1, -1], [[0.1, 0.5], [0.1, 0.25]]),
               "bn": h([1.0, math.inf], [False, True], [-1, 30], [[0.1, 0.6], [0.1, 0.1234]])}
    text = divergence_report(results, {"no_bn": "no BN", "bn": "BN"})
    assert text.split("\n") == [
        "ResNet-18, no BN: K = 1: finite throughout; final test accuracy 50.0 %",
        "ResNet-18, no BN: K = 1e6: finite throughout; final test accuracy 25.0 %",
        "ResNet-18, BN: K = 1: finite throughout; final test accuracy 60.0 %",
        "ResNet-18, BN: K = ∞: diverged at step 30; final test accuracy 12.3 %",
    ]
