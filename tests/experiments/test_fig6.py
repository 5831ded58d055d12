"""Fig. 6 (iterlin.experiments.fig6): linear probes over training, one tiny real run, the probe
summary, and the claims' verdicts."""

from __future__ import annotations

import numpy as np
import pytest
from _toy import fake_cifar, fake_history

from iterlin.claims import NA
from iterlin.experiments import fig6, resolve
from iterlin.experiments.fig6 import probe_table


def test_config():
    assert resolve("fig6", K=5e6)["K"] == [1, 5_000_000]
    with pytest.raises(ValueError, match="n_probe=0 is not allowed"):
        resolve("fig6", n_probe=0)


def test_fig6_probes_tiny(tiny_cifar):
    config = resolve("fig6", K=2, steps=2, batch_size=8, n_train=16, n_test=8, n_probe=10, n_evals=1)
    r = fig6.compute(config, tiny_cifar)
    h = r["runs"]
    assert h["step"].tolist() == [0, 2] and h["K"].tolist() == [1.0, 2.0]
    for layer in fig6.PROBE_LAYERS:
        for k in ("train_acc", "test_acc", "lam"):
            assert np.asarray(h[f"probe_{layer}_{k}"]).shape == (2, 2)
    acc = np.asarray(h["probe_layer1_test_acc"])
    assert np.all((acc >= 0) & (acc <= 1)) and acc[0, 0] == acc[1, 0]  # same θ_0 for both runs
    assert int(r["n_probe"]) == 10 and int(r["n_test"]) == 8
    rows = fig6.claims({**r, "config": config})
    assert len(rows) == 5 and rows[-1].claim == "every run stays finite (no NaN or exploding loss)"


def test_fig6_n_probe_larger_than_n_train(monkeypatch):
    monkeypatch.setattr("iterlin.experiments._common.load_cifar10", lambda n, n_test: fake_cifar(n, n_test))
    config = resolve("fig6", n_train=16, n_test=8, batch_size=8, n_probe=17)
    with pytest.raises(ValueError, match="n_probe=17"):
        fig6.EXPERIMENT.load(config)
    assert fig6.load(resolve("fig6", n_train=16, n_test=8, batch_size=8, n_probe=16)).x_train.shape[0] == 16


def test_probe_summary():
    h = {"probe_layer1_test_acc": np.array([[0.2, 0.4, 0.6], [0.2, 0.3, 0.5]])}
    s = fig6.probe_summary(h, "layer1")
    np.testing.assert_allclose(s["initial"], [0.2, 0.2])
    np.testing.assert_allclose(s["final"], [0.6, 0.5])
    np.testing.assert_allclose(s["mean"], [0.5, 0.4])  # steps > 0 only
    np.testing.assert_allclose(s["gain"], [0.4, 0.3])
    one = fig6.probe_summary({"probe_layer2_test_acc": np.array([[0.3], [0.1]])}, "layer2")
    np.testing.assert_allclose(one["mean"], [0.3, 0.1])  # a single point is its own mean


def _results(probe_k1, probe_large, *, n_test=1000, K=(1, 8), diverged=None):
    h = fake_history(list(K), 0.05, 24, [0.3] * len(K), diverged=diverged)
    for layer in fig6.PROBE_LAYERS:
        h[f"probe_{layer}_test_acc"] = np.array([probe_k1, probe_large][: len(K)], np.float64)
    return {"runs": h, "n_probe": np.asarray(100), "n_test": np.asarray(n_test)}


def test_claims_hold_when_large_K_lags():
    rows = fig6.claims(_results([0.2, 0.5, 0.6], [0.2, 0.3, 0.4]))
    assert [r.holds for r in rows] == ["yes"] * 5
    assert [r.claim for r in rows[:2]] == ["layer1: large-K features improve slower",
                                           "layer1: large-K features level off lower"]
    assert rows[1].measured == "final K=1 60.0 % vs K=8 40.0 %"


def test_claims_fail_when_large_K_does_not_lag():
    rows = fig6.claims(_results([0.2, 0.3, 0.4], [0.2, 0.5, 0.6]))
    assert [r.holds for r in rows] == ["no"] * 4 + ["yes"]
    # slower but not lower: improves slower holds, levels off lower does not
    rows = fig6.claims(_results([0.2, 0.5, 0.5], [0.2, 0.3, 0.5]))
    assert [r.holds for r in rows[:2]] == ["yes", "no"]
    rows = fig6.claims(_results([0.2, 0.5, 0.6], [0.2, 0.3, 0.4], diverged=[False, True]))
    assert rows[-1].holds == "no" and rows[-1].measured == "diverged: K=8, lr=0.05 at step 3"


def test_claims_na_when_K1_probe_gain_is_within_noise():
    # K = 1's probe gains 15 points; 2 s.e. on 20 test images: 2·sqrt(0.2·0.8/20) ≈ 17.9 points
    rows = fig6.claims(_results([0.2, 0.3, 0.35], [0.2, 0.2, 0.2], n_test=20))
    assert [r.holds for r in rows[:4]] == [NA] * 4
    assert "17.9 pts" in rows[0].rule
    # ... and decided on 1000 images (2 s.e. ≈ 2.5 points)
    assert [r.holds for r in fig6.claims(_results([0.2, 0.3, 0.35], [0.2, 0.2, 0.2]))[:4]] == ["yes"] * 4


def test_only_K1_run():
    rows = fig6.claims(_results([0.2, 0.3, 0.4], None, K=(1,)))
    assert [r.holds for r in rows] == [NA, "yes"] and rows[0].measured == "only K = 1 was run"


# The notebook's summary functions (pure functions of the results; no training).


def test_probe_table_one_line_per_layer_and_run():
    h = {"K": np.array([1.0, 8.0]), "step": np.array([0, 5, 10]),
         "probe_layer1_test_acc": np.array([[0.1, 0.2, 0.3], [0.1, 0.1, 0.2]]),
         "probe_layer2_test_acc": np.array([[0.2, 0.4, 0.6], [0.2, 0.2, 0.2]])}
    lines = probe_table({"runs": h}).split("\n")
    assert len(lines) == 4
    assert lines[0] == "layer1  K =    1: initial  10.0 %, final  30.0 %, mean over training  25.0 %"
    assert lines[3] == "layer2  K =    8: initial  20.0 %, final  20.0 %, mean over training  20.0 %"
