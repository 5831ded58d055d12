"""Tests of iterlin.feature_experiments (Figs. 6, 7, ntk) and iterlin.resnet_experiments (Fig. 4).

One tiny real run per experiment (compute only, no cache) checking result keys and shapes, and the
pure helpers checked exactly on synthetic histories.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from iterlin.claims import HOLDS, Claim
from iterlin.config import resolve
from iterlin.data import load_cifar10
from iterlin.experiments import EXPERIMENTS
from iterlin.feature_experiments import (
    fig6,
    fig7,
    filter_match,
    ntk,
    ntk_eval_steps,
    relin_kernel_changes,
)
from iterlin.models import Model, make_model
from iterlin.resnet_experiments import fig4, stack_histories


def _rows_ok(name, results, config):
    rows = EXPERIMENTS[name].claims({**results, "config": config})
    assert rows and all(isinstance(r, Claim) and r.holds in HOLDS for r in rows)
    return rows


@pytest.fixture(scope="module")
def tiny_data():
    return load_cifar10(16, 8)


def test_registered():
    for name in ("fig4", "fig6", "fig7", "ntk"):
        assert name in EXPERIMENTS and EXPERIMENTS[name].claims is not None
        for scale in ("smoke", "gpu", "paper"):
            resolve(name, scale)  # every default validates


def test_bad_parameters_named():
    with pytest.raises(ValueError, match="bn_mode"):
        resolve("fig4", bn_mode="running")
    with pytest.raises(ValueError, match="K_bn"):
        resolve("fig4", K_bn=0)
    with pytest.raises(ValueError, match="n_probe"):
        resolve("ntk", n_probe=0)
    assert resolve("fig6", K=5e6)["K"] == [1, 5_000_000]


def test_fig6_probes_tiny(tiny_data):
    config = resolve("fig6", K=2, steps=2, batch_size=8, n_train=16, n_test=8, n_probe=10, n_evals=1)
    r = fig6(config, tiny_data)
    h = r["runs"]
    assert h["step"].tolist() == [0, 2] and h["K"].tolist() == [1.0, 2.0]
    for layer in ("layer1", "layer2"):
        for k in ("train_acc", "test_acc", "lam"):
            assert np.asarray(h[f"probe_{layer}_{k}"]).shape == (2, 2)
    acc = np.asarray(h["probe_layer1_test_acc"])
    assert np.all((acc >= 0) & (acc <= 1)) and acc[0, 0] == acc[1, 0]  # same θ_0 for both runs
    assert int(r["n_probe"]) == 10
    _rows_ok("fig6", r, config)


def test_fig6_n_probe_larger_than_n_train():
    config = resolve("fig6", n_train=16, n_test=8, batch_size=8, n_probe=17)
    with pytest.raises(ValueError, match="n_probe=17"):
        EXPERIMENTS["fig6"].load(config)


def test_fig7_filters_tiny(tiny_data):
    config = resolve("fig7", K=2, steps=2, batch_size=8, n_train=16, n_test=8, n_evals=2)
    r = fig7(config, tiny_data)
    d = np.asarray(r["runs"]["filters_delta"])
    assert d.shape == (2, 3, 5, 5, 3, 50)  # (R, E, h, w, c_in, filters)
    assert np.all(d[:, 0] == 0)  # change from initialisation is 0 at step 0
    assert np.all(np.abs(d[:, -1]).sum(axis=(1, 2, 3, 4)) > 0)
    m = r["match"]
    assert np.asarray(m["norm"]).shape == (2, 3) and float(m["K_large"]) == 2.0
    _rows_ok("fig7", r, config)


def test_ntk_tiny_kernel_fixed_between_relinearisations(tiny_data):
    config = resolve("ntk", K=2, steps=4, batch_size=8, n_train=16, n_test=8, n_probe=2, n_evals=4)
    assert ntk_eval_steps(config) == [0, 1, 2, 3, 4]
    r = ntk(config, tiny_data)
    h = r["runs"]
    for k in ("kernel_distance_init", "kernel_velocity", "kernel_distance_relin"):
        assert np.asarray(h[k]).shape == (2, 5)
    d = np.asarray(h["kernel_distance_relin"])
    assert d[1].tolist()[1] == 0.0 and d[1].tolist()[3] == 0.0  # K = 2: θ_s unchanged over steps 0→1, 2→3
    assert d[1, 2] > 0 and d[1, 4] > 0 and np.all(d[0, 1:] > 0)  # re-linearisations move the kernel
    assert math.isnan(h["kernel_velocity"][0, 0])
    c = relin_kernel_changes(h, 1)
    assert c["relinearised"].tolist() == [False, True, False, True]
    rows = _rows_ok("ntk", r, config)
    assert rows[1].holds == "yes"  # exactly fixed between re-linearisations


def test_fig4_wiring_tiny(monkeypatch, tiny_data):
    """Both panels, every K, with a small MLP in place of ResNet-18 (the wiring, not the ResNet)."""
    import iterlin.resnet_experiments as rx

    seen = []

    def small_model(name, key, bn_mode=None):
        seen.append((name, bn_mode))
        mlp = make_model("mlp", key, input_shape=(32 * 32 * 3,), num_classes=10)
        return Model(lambda p, x: mlp.apply_fn(p, x.reshape(x.shape[0], -1)), mlp.params, None)

    monkeypatch.setattr(rx, "make_model", small_model)
    config = resolve("fig4", K=1, K_bn=math.inf, steps=2, batch_size=4, n_train=16, n_test=8, n_evals=1,
                     bn_mode="frozen")
    r = fig4(config, tiny_data)
    assert seen == [("resnet18", None), ("resnet18_bn", "frozen")]
    for panel, Ks in (("no_bn", [1.0]), ("bn", [1.0, math.inf])):
        h = r[panel]
        assert h["K"].tolist() == Ks and h["step"].tolist() == [0, 2]
        assert np.asarray(h["net_test_acc"]).shape == (len(Ks), 2) and np.asarray(h["diverged"]).shape == (len(Ks),)
    assert r["bn"]["n_relin"][:, -1].tolist() == [2, 0]
    rows = _rows_ok("fig4", r, config)
    assert rows[0].holds == "n/a at this scale"  # 8 test images cannot decide "≈ SGD"


def test_stack_histories_pads_a_diverged_run():
    ok = {"step": np.array([0, 1, 2]), "net_test_acc": np.array([0.1, 0.2, 0.3]), "n_relin": np.array([0, 1, 2]),
          "diverged": np.array(False), "diverged_step": np.array(-1)}
    bad = {"step": np.array([0, 1]), "net_test_acc": np.array([0.1, 0.15]), "n_relin": np.array([0, 1]),
           "diverged": np.array(True), "diverged_step": np.array(1)}
    h = stack_histories([ok, bad], [0, 1, 2])
    assert h["net_test_acc"].tolist() == [[0.1, 0.2, 0.3], [0.1, 0.15, 0.15]]
    assert h["diverged"].tolist() == [False, True] and h["diverged_step"].tolist() == [-1, 1]


def test_filter_match_exact():
    # K = 1's change grows 0, 1, 2, 3, 4 (in norm), the large K's ends at 1.5: reached at 37.5 %.
    steps = np.array([0, 10, 20, 30, 40])
    base = np.zeros((5, 5, 3, 50))
    base[0, 0, 0, 0] = 1.0
    d1 = np.stack([t * base for t in range(5)])
    dk = np.stack([t * 0.375 * base for t in range(5)])
    m = filter_match({"filters_delta": np.stack([d1, dk]), "step": steps, "K": np.array([1.0, 8.0])})
    assert float(m["ratio"]) == pytest.approx(0.375)
    assert float(m["fraction"]) == pytest.approx(0.375)
    assert float(m["cosine"]) == pytest.approx(1.0)
    assert int(m["match_step"]) == 20  # nearest evaluation point to step 15 (interpolation weight 0.5)
