"""The NTK experiment (iterlin.experiments.ntk): evaluation steps, one tiny real run (the linear
model's kernel is exactly fixed between re-linearisations), and the claims' verdicts."""

from __future__ import annotations

import math

import numpy as np
import pytest
from _toy import fake_history

from iterlin.claims import NA
from iterlin.experiments import ntk, resolve
from iterlin.experiments.ntk import relin_steps, relin_table


def test_bad_parameters_named():
    with pytest.raises(ValueError, match="n_probe=0 is not allowed"):
        resolve("ntk", n_probe=0)
    assert resolve("ntk", n_probe="all")["n_probe"] is None


def test_eval_steps_add_every_relinearisation():
    assert ntk.eval_steps({"steps": 12, "n_evals": 2, "K": [1, 5]}) == [0, 5, 6, 10, 12]
    assert ntk.eval_steps({"steps": 12, "n_evals": 2, "K": [1, math.inf]}) == [0, 6, 12]
    assert ntk.eval_steps({"steps": 4, "n_evals": 4, "K": [1, 2]}) == [0, 1, 2, 3, 4]
    assert len(ntk.eval_steps({"steps": 10_000, "n_evals": 2, "K": [1, 2]}, max_points=7)) <= 3 + 7


def test_ntk_tiny_kernel_fixed_between_relinearisations(tiny_cifar):
    config = resolve("ntk", K=2, steps=4, batch_size=8, n_train=16, n_test=8, n_probe=2, n_evals=4)
    assert ntk.eval_steps(config) == [0, 1, 2, 3, 4]
    r = ntk.compute(config, tiny_cifar)
    h = r["runs"]
    assert int(r["n_probe"]) == 2
    for k in ("kernel_distance_init", "kernel_velocity", "kernel_distance_relin"):
        assert np.asarray(h[k]).shape == (2, 5)
    d = np.asarray(h["kernel_distance_relin"])
    assert d[1].tolist()[1] == 0.0 and d[1].tolist()[3] == 0.0  # K = 2: θ_s unchanged over steps 0→1, 2→3
    assert d[1, 2] > 0 and d[1, 4] > 0 and np.all(d[0, 1:] > 0)  # re-linearisations move the kernel
    assert math.isnan(h["kernel_velocity"][0, 0])
    c = ntk.relin_kernel_changes(h, 1)
    assert c["relinearised"].tolist() == [False, True, False, True]
    rows = ntk.claims({**r, "config": config})
    assert len(rows) == 4 and rows[1].holds == "yes"  # exactly fixed between re-linearisations
    assert rows[2].holds == "yes"


def _history(d_init_k1=0.2, relin=(0.0, 0.1, 0.0, 0.2), K=(1, 2), diverged=None):
    """Steps 0..4, K = 2 re-linearising at steps 2 and 4 (intervals 1→2 and 3→4)."""
    h = fake_history(list(K), 0.05, 4, [0.3] * len(K), n_evals=4, diverged=diverged)
    h["step"] = np.arange(5)
    R = len(K)
    h["n_relin"] = np.stack([np.arange(5), np.array([0, 0, 1, 1, 2])][:R])
    h["kernel_distance_init"] = np.stack([np.linspace(0, d_init_k1, 5), np.linspace(0, 0.05, 5)][:R])
    h["kernel_distance_relin"] = np.stack([np.full(5, 0.1), np.array([0.0, *relin])][:R])
    return {"runs": h, "n_probe": np.asarray(4)}


def test_relin_kernel_changes():
    c = ntk.relin_kernel_changes(_history()["runs"], 1)
    assert c["step"].tolist() == [1, 2, 3, 4] and c["n_relin"].tolist() == [0, 1, 1, 2]
    assert c["relinearised"].tolist() == [False, True, False, True]
    assert c["distance"].tolist() == [0.0, 0.1, 0.0, 0.2]


def test_claims_hold():
    rows = ntk.claims(_history())
    assert [r.holds for r in rows] == ["yes", "yes", "yes", "yes"]
    assert rows[1].measured == "K=2: max d(Θ_s, Θ_s,prev) = 0.000000 over 2 intervals without re-linearisation"
    assert rows[2].measured == "K=2: 2 intervals with re-linearisations, d from 0.1000 to 0.2000"


def test_claims_fail():
    rows = ntk.claims(_history(d_init_k1=0.005, relin=(1e-9, 0.1, 0.0, 0.0), diverged=[False, True]))
    assert [r.holds for r in rows] == ["no", "no", "no", "no"]


def test_claims_not_applicable():
    # every interval holds a re-linearisation (K = 1 as the "large" K's schedule): nothing to hold fixed
    res = _history(relin=(0.05, 0.1, 0.05, 0.2))
    res["runs"]["n_relin"][1] = np.arange(5)
    rows = ntk.claims(res)
    assert rows[1].holds == NA and rows[2].holds == "yes"
    # the large K never re-linearised within the run
    res = _history()
    res["runs"]["n_relin"][1] = 0
    rows = ntk.claims(res)
    assert rows[1].holds == "no" and rows[2].holds == NA  # 0.1, 0.2 measured where θ_s did not change
    assert rows[2].measured == "K=2: no re-linearisation"
    rows = ntk.claims(_history(K=(1,)))
    assert [r.holds for r in rows] == [NA, "yes"] and rows[0].claim == "ntk: large K against K = 1"


@pytest.mark.parametrize("k", [1, math.inf])
def test_eval_steps_without_finite_large_K(k):
    assert ntk.eval_steps({"steps": 10, "n_evals": 5, "K": [1, k]}) == [0, 2, 4, 6, 8, 10]


# The notebook's summary functions (pure functions of the results; no training).


def _results(K=(1.0, 6.0)):
    R = len(K)
    n_relin = np.array([[0, 3, 6, 9], [0, 0, 1, 1]])[:R]
    d = np.array([[0.0, 0.2, 0.1, 0.3], [0.0, 0.0, 0.1683, 0.0]])[:R]
    return {"runs": {"K": np.array(K), "step": np.array([0, 3, 6, 9]), "n_relin": n_relin,
                     "kernel_distance_relin": d}}


def test_relin_steps_of_the_largest_k():
    np.testing.assert_array_equal(relin_steps(_results()), [6])


def test_relin_steps_empty_when_only_k1_ran():
    assert relin_steps(_results(K=(1.0,))).size == 0


def test_relin_table_rows():
    lines = relin_table(_results()).split("\n")
    assert lines[0] == "K = 6" and "re-linearisations so far" in lines[1]
    assert len(lines) == 2 + 3
    assert lines[3].split() == ["6", "1", "yes", "0.1683"]
    assert lines[2].split() == ["3", "0", "no", "0.0000"]
