"""Fig. 7 (iterlin.experiments.fig7): first-layer filter changes, one tiny real run, filter_match
exactly on constructed trajectories, and the claims' verdicts."""

from __future__ import annotations

import math

import numpy as np
import pytest
from _toy import fake_history

from iterlin.claims import NA
from iterlin.experiments import fig7, resolve
from iterlin.experiments.fig7 import filter_match, match_marks, match_report


def test_fig7_filters_tiny(tiny_cifar):
    config = resolve("fig7", K=2, steps=2, batch_size=8, n_train=16, n_test=8, n_evals=2)
    r = fig7.compute(config, tiny_cifar)
    d = np.asarray(r["runs"]["filters_delta"])
    assert d.shape == (2, 3, 5, 5, 3, 50)  # (R, E, h, w, c_in, filters)
    assert np.all(d[:, 0] == 0)  # change from initialisation is 0 at step 0
    assert np.all(np.abs(d[:, -1]).sum(axis=(1, 2, 3, 4)) > 0)
    m = r["match"]
    assert np.asarray(m["norm"]).shape == (2, 3) and float(m["K_large"]) == 2.0
    rows = fig7.claims({**r, "config": config})
    assert len(rows) == 3 and rows[1].holds == NA  # "about 10 %" judged only at scale 'paper'


def _trajectories(large_scale, steps=(0, 10, 20, 30, 40)):
    """K = 1's change grows 0, 1, 2, 3, 4 (in norm) along one direction; the large K's is
    ``large_scale`` times that at every point."""
    base = np.zeros((5, 5, 3, 50))
    base[0, 0, 0, 0] = 1.0
    d1 = np.stack([t * base for t in range(len(steps))])
    dk = np.stack([t * large_scale * base for t in range(len(steps))])
    return {"filters_delta": np.stack([d1, dk]), "step": np.asarray(steps), "K": np.array([1.0, 8.0])}


def test_filter_match_exact():
    # The large K's change ends at 1.5 = K = 1's at step 15 = 37.5 % of training.
    m = fig7.filter_match(_trajectories(0.375))
    np.testing.assert_allclose(m["norm"], [[0, 1, 2, 3, 4], [0, 0.375, 0.75, 1.125, 1.5]])
    assert float(m["ratio"]) == pytest.approx(0.375)
    assert float(m["fraction"]) == pytest.approx(0.375)
    assert float(m["cosine"]) == pytest.approx(1.0)
    assert int(m["match_step"]) == 20  # nearest evaluation point to step 15 (interpolation weight 0.5)
    assert float(m["K_large"]) == 8.0


def test_filter_match_never_reached_and_no_change():
    m = fig7.filter_match(_trajectories(2.0))  # the large K moved further than K = 1 ever did
    assert float(m["ratio"]) == pytest.approx(2.0) and math.isnan(float(m["fraction"]))
    assert int(m["match_step"]) == 40
    still = _trajectories(1.0)
    still["filters_delta"] = np.zeros_like(still["filters_delta"])
    m = fig7.filter_match(still)
    assert math.isnan(float(m["ratio"])) and math.isnan(float(m["cosine"]))


def _results(ratio, fraction, *, scale="smoke", K=(1, 8), diverged=None):
    h = fake_history(list(K), 0.05, 24, [0.3] * len(K), diverged=diverged)
    match = {"ratio": np.asarray(ratio), "fraction": np.asarray(fraction), "cosine": np.asarray(0.9)}
    return {"runs": h, "match": match, "config": {"scale": scale}}


def test_claims_hold():
    rows = fig7.claims(_results(0.5, 0.1, scale="paper"))
    assert [r.holds for r in rows] == ["yes", "yes", "yes"]
    assert rows[0].measured == "‖ΔW_T‖ K=8 / K=1 = 0.50"
    assert rows[1].measured == "K=1 reaches the final large-K ‖ΔW‖ at 10 % of training (cos 0.90)"


def test_claims_fail():
    rows = fig7.claims(_results(0.95, 0.5, scale="paper", diverged=[True, False]))
    assert [r.holds for r in rows] == ["no", "no", "no"]
    assert fig7.claims(_results(0.5, float("nan"), scale="paper"))[1].holds == "no"  # never reached
    assert "never" in fig7.claims(_results(0.5, float("nan"), scale="paper"))[1].measured


def test_claims_not_applicable():
    assert [r.holds for r in fig7.claims(_results(0.5, 0.1))] == ["yes", NA, "yes"]  # not at scale 'paper'
    assert fig7.claims(_results(float("nan"), float("nan")))[0].holds == NA  # K = 1's filters never moved
    rows = fig7.claims(_results(1.0, 1.0, K=(1,)))
    assert [r.holds for r in rows] == [NA, "yes"] and rows[0].claim == "fig7: large K against K = 1"


# The notebook's summary functions (pure functions of the results; no training).


def _summary_results(norms):
    """Two runs (K = 1, 8) whose single 1×1×1 filter changes by ``norms`` (R, E) at steps 0, 10, 20."""
    h = {"K": np.array([1.0, 8.0]), "step": np.array([0, 10, 20]),
         "filters_delta": np.asarray(norms, np.float64).reshape(2, 3, 1, 1, 1, 1)}
    return {"runs": h, "match": filter_match(h)}


def test_match_marks_where_k1_reaches_the_large_k_final_size():
    m = match_marks(_summary_results([[0.0, 1.0, 2.0], [0.0, 0.5, 1.5]]))
    assert m["target"] == 1.5
    np.testing.assert_allclose([m["fraction"], m["step"]], [0.75, 15.0])  # half-way between steps 10 and 20


def test_match_marks_never_reached():
    m = match_marks(_summary_results([[0.0, 0.1, 0.2], [0.0, 0.5, 1.5]]))
    assert m["target"] == 1.5 and math.isnan(m["fraction"]) and math.isnan(m["step"])
    assert match_report(_summary_results([[0.0, 0.1, 0.2], [0.0, 0.5, 1.5]])).endswith("never in this run")


def test_match_report_ratio_and_fraction():
    text = match_report(_summary_results([[0.0, 1.0, 2.0], [0.0, 0.5, 1.5]]))
    assert text == ("final ratio (large K / K = 1): 0.75; K = 1 reaches the large-K final size at 75 % of training "
                    "(cosine there: 1.00)")
