"""Fig. 7 (iterlin.experiments.fig7): first-layer filter changes, one tiny real run with two seeds,
filter_match exactly on constructed trajectories (seed by seed), and the claims' verdicts
(intervals over seeds)."""

from __future__ import annotations

import math

import numpy as np
import pytest
from _toy import fake_history

from iterlin.repro.claims import NA, UNDECIDED, UNSTABLE
from iterlin.experiments import fig7, resolve
from iterlin.experiments.fig7 import filter_grid, filter_match, match_marks, match_report
from iterlin.analysis.probes import filters_to_image
from iterlin.repro.stats import seed_interval


def test_scales():
    assert resolve("fig7").n_seeds == 1 and resolve("fig7") == fig7.EXPERIMENT.get_config()
    # cpu and gpu: Fig. 3's stable setting (the linear model under its bound), with its sharpness record
    same = ("K", "lr", "steps", "batch_size", "augment", "n_train", "n_sharpness", "sharpness_every")
    for scale in ("cpu", "gpu"):
        assert ({k: getattr(resolve("fig7", scale), k) for k in same}
                == {k: getattr(resolve("fig3", scale), k) for k in same})
    assert resolve("fig7", "cpu").n_seeds >= 3 and resolve("fig7", "gpu").n_seeds >= 8


def test_fig7_filters_tiny_two_seeds(tiny_cifar):
    config = resolve("fig7", K=2, steps=2, batch_size=8, n_train=16, n_test=8, n_evals=2, n_seeds=2,
                     n_sharpness=8, sharpness_every=1)
    r = fig7.compute(config, tiny_cifar)
    assert isinstance(r, fig7.Results) and r.config is None
    h = r.runs
    d = np.asarray(h["filters_delta"])
    assert d.shape == (4, 3, 5, 5, 3, 50)  # (R = 2 seeds x 2 K, E, h, w, c_in, filters)
    assert h["K"].tolist() == [1.0, 2.0, 1.0, 2.0] and h["seed_index"].tolist() == [0, 0, 1, 1]
    assert np.all(d[:, 0] == 0)  # change from initialisation is 0 at step 0
    assert np.all(np.abs(d[:, -1]).sum(axis=(1, 2, 3, 4)) > 0)
    m = r.match
    assert np.asarray(m.norm).shape == (4, 3) and float(m.K_large) == 2.0
    for k in ("ratio", "fraction", "cosine", "match_step"):
        assert np.asarray(m[k]).shape == (2,)  # one per seed
    # seed by seed: the ratio is that seed's large-K run over its own K = 1 run
    np.testing.assert_allclose(m.ratio, [m.norm[1, -1] / m.norm[0, -1], m.norm[3, -1] / m.norm[2, -1]])
    # the sharpness record beside the filters, at every evaluation point (sharpness_every=1)
    assert np.asarray(h["lr_over_bound"]).shape == (4, 3) and np.all(np.isfinite(h["lr_over_bound"]))
    rows = fig7.claims(r._replace(config=config))
    assert len(rows) == 4 and rows[1].holds == NA  # "about 10 %" judged only at scale 'paper'
    assert rows[2].claim.startswith("the linear model stays stable") and rows[2].holds != NA


def _trajectories(large_scales, steps=(0, 10, 20, 30, 40), K=(1.0, 8.0)):
    """Per seed s: K = 1's change grows 0, 1, 2, 3, 4 (in norm) along one direction; the large K's
    is ``large_scales[s]`` times that at every point. Runs seed-major, in the order of ``K``."""
    base = np.zeros((5, 5, 3, 50))
    base[0, 0, 0, 0] = 1.0
    runs = []
    for scale in np.atleast_1d(large_scales):
        for k in K:
            runs.append(np.stack([t * (1.0 if k == 1 else scale) * base for t in range(len(steps))]))
    S = np.size(large_scales)
    return {"filters_delta": np.stack(runs), "step": np.asarray(steps), "K": np.array(list(K) * S),
            "seed_index": np.repeat(np.arange(S), len(K))}


def test_filter_match_exact():
    # The large K's change ends at 1.5 = K = 1's at step 15 = 37.5 % of training.
    m = filter_match(_trajectories(0.375))
    np.testing.assert_allclose(m.norm, [[0, 1, 2, 3, 4], [0, 0.375, 0.75, 1.125, 1.5]])
    np.testing.assert_allclose(m.ratio, [0.375])
    np.testing.assert_allclose(m.fraction, [0.375])
    np.testing.assert_allclose(m.cosine, [1.0])
    assert m.match_step.tolist() == [20]  # nearest evaluation point to step 15 (interpolation weight 0.5)
    assert float(m.K_large) == 8.0


def test_filter_match_seed_by_seed_and_by_K_not_position():
    m = filter_match(_trajectories([0.375, 0.5]))
    np.testing.assert_allclose(m.ratio, [0.375, 0.5])
    np.testing.assert_allclose(m.fraction, [0.375, 0.5])
    listed_backwards = filter_match(_trajectories([0.375, 0.5], K=(8.0, 1.0)))
    for k in ("ratio", "fraction", "cosine", "match_step"):
        np.testing.assert_allclose(listed_backwards[k], m[k])


def test_filter_match_never_reached_and_no_change():
    m = filter_match(_trajectories(2.0))  # the large K moved further than K = 1 ever did
    np.testing.assert_allclose(m.ratio, [2.0])
    assert math.isnan(m.fraction[0]) and m.match_step.tolist() == [40]
    still = _trajectories(1.0)
    still["filters_delta"] = np.zeros_like(still["filters_delta"])
    m = filter_match(still)
    assert math.isnan(m.ratio[0]) and math.isnan(m.cosine[0])


def test_seed_interval():
    m, se, lo, hi = seed_interval([0.4, 0.6])
    assert m == pytest.approx(0.5) and se == pytest.approx(np.std([0.4, 0.6], ddof=1) / math.sqrt(2))
    assert (lo, hi) == pytest.approx((0.5 - 12.7062 * se, 0.5 + 12.7062 * se), rel=1e-5)  # t_0.975(1)
    m, se, lo, hi = seed_interval([0.3])
    assert m == 0.3 and math.isnan(se) and math.isnan(lo) and math.isnan(hi)


def _results(ratio, fraction, *, scale="smoke", K=(1, 8), diverged=None, cosine=0.9):
    ratio, fraction = np.atleast_1d(ratio), np.atleast_1d(fraction)
    S = ratio.size
    h = fake_history(list(K) * S, 0.05, 24, [0.3] * (len(K) * S), diverged=diverged)
    h["seed_index"] = np.repeat(np.arange(S), len(K))
    match = fig7.FilterMatch(norm=np.zeros((len(K) * S, 1)), ratio=ratio, fraction=fraction,
                             cosine=np.full(S, cosine), match_step=np.zeros(S), K_large=np.asarray(float(max(K))))
    return fig7.Results(runs=h, match=match, config=fig7.EXPERIMENT.get_config(scale))


def test_claims_hold_over_seeds():
    rows = fig7.claims(_results([0.5, 0.502], [0.1, 0.101], scale="paper"))
    assert [r.holds for r in rows] == ["yes", "yes", NA, "yes"]  # no sharpness record in these histories
    assert rows[0].measured == "‖ΔW_T‖ K=8 / K=1 = 0.50 (95 % t interval [0.49, 0.51], 2 seeds)"
    assert rows[1].measured == ("K=1 reaches the final large-K ‖ΔW‖ at 10.1 % of training (95 % t interval "
                                "[9.4 %, 10.7 %], 2 seeds; cos 0.90)")


def test_claims_fail_over_seeds():
    rows = fig7.claims(_results([0.95, 0.951], [0.5, 0.501], scale="paper", diverged=[True, False, False, False]))
    assert [r.holds for r in rows] == ["no", "no", NA, "no"]  # K = 1 (seed 0) diverged: no
    rows = fig7.claims(_results([1.2, 1.21], [float("nan")] * 2, scale="paper"))  # large K moved further
    assert [r.holds for r in rows[:2]] == ["no", "no"] and "never" in rows[1].measured


def test_claims_undecided():
    # the seeds straddle 0.9; one seed has no spread to estimate; a seed that never reaches it
    assert fig7.claims(_results([0.5, 1.1], [0.1, 0.1]))[0].holds == UNDECIDED
    rows = fig7.claims(_results(0.5, 0.1, scale="paper"))
    assert [r.holds for r in rows[:2]] == [UNDECIDED, UNDECIDED] and rows[0].measured.endswith("(1 seed)")
    assert fig7.claims(_results([0.5, 0.5], [0.1, float("nan")], scale="paper"))[1].holds == UNDECIDED
    assert fig7.claims(_results([0.5, 0.5], [0.05, 0.5], scale="paper"))[1].holds == UNDECIDED


def test_claims_unstable_large_k():
    # seed 1's large-K run diverged: its filters say nothing about feature learning, whatever the ratio
    rows = fig7.claims(_results([0.5, 0.502], [0.1, 0.101], diverged=[False, False, False, True]))
    assert rows[0].holds == UNSTABLE and "unstable: K=8 seed 1 diverged at step 3" in rows[0].measured and rows[-1].holds == "no"
    # η above 2/λ_max(θ_s) at a recorded step of a large-K run, though nothing diverged
    r = _results([0.5, 0.502], [0.1, 0.101])
    ratio = np.full((4, 3), np.nan)
    ratio[:, 0] = 0.2
    ratio[1, 2] = 1.3
    r.runs["lr_over_bound"] = ratio
    rows = fig7.claims(r)
    assert rows[0].holds == UNSTABLE and "η above 2/λ_max(θ_s) at step" in rows[0].measured
    assert rows[2].holds == "no"  # the sharpness row agrees


def test_claims_not_applicable():
    assert [r.holds for r in fig7.claims(_results([0.5, 0.52], [0.1, 0.1]))] == ["yes", NA, NA, "yes"]  # not 'paper'
    assert fig7.claims(_results([float("nan")] * 2, [float("nan")] * 2))[0].holds == NA  # K = 1 never moved
    rows = fig7.claims(_results(1.0, 1.0, K=(1,)))
    assert [r.holds for r in rows] == [NA, "yes"] and rows[0].claim == "fig7: large K against K = 1"


# The notebook's summary functions (pure functions of the results; no training).


def _summary_results(norms, K=(1.0, 8.0)):
    """Runs (seed-major over ``K``) whose single 1×1×1 filter changes by ``norms`` (R, E) at steps 0, 10, 20."""
    norms = np.asarray(norms, np.float64)
    R = norms.shape[0]
    h = {"K": np.array(list(K) * (R // len(K))), "step": np.array([0, 10, 20]),
         "seed_index": np.repeat(np.arange(R // len(K)), len(K)),
         "filters_delta": norms.reshape(R, 3, 1, 1, 1, 1)}
    return fig7.Results(runs=h, match=filter_match(h))


def test_match_marks_where_k1_reaches_the_large_k_final_size():
    m = match_marks(_summary_results([[0.0, 1.0, 2.0], [0.0, 0.5, 1.5]]))
    assert m.target == 1.5
    np.testing.assert_allclose([m.fraction, m.step], [0.75, 15.0])  # half-way between steps 10 and 20


def test_match_marks_on_the_mean_curves():
    # two seeds: K = 1's mean curve 0, 1, 2; the large K's mean final 1.5 (1 and 2)
    m = match_marks(_summary_results([[0.0, 0.5, 1.5], [0.0, 0.5, 1.0], [0.0, 1.5, 2.5], [0.0, 0.5, 2.0]]))
    assert m.target == 1.5
    np.testing.assert_allclose([m.fraction, m.step], [0.75, 15.0])


def test_match_marks_never_reached():
    m = match_marks(_summary_results([[0.0, 0.1, 0.2], [0.0, 0.5, 1.5]]))
    assert m.target == 1.5 and math.isnan(m.fraction) and math.isnan(m.step)
    assert match_report(_summary_results([[0.0, 0.1, 0.2], [0.0, 0.5, 1.5]])).endswith("never in this run")


def test_match_report_ratio_and_fraction():
    text = match_report(_summary_results([[0.0, 1.0, 2.0], [0.0, 0.5, 1.5]]))
    assert text == ("1 seed: final ratio (large K / K = 1): 0.75; K = 1 reaches the large-K final size at 75 % of "
                    "training (cosine there: 1.00)")
    text = match_report(_summary_results([[0.0, 1.0, 2.0], [0.0, 0.5, 1.5], [0.0, 1.0, 2.0], [0.0, 0.5, 1.0]]))
    assert text == ("2 seeds (mean ± s.e.): final ratio (large K / K = 1): 0.62 ± 0.12; K = 1 reaches the large-K "
                    "final size at 62 ± 12 % of training (cosine there: 1.00 ± 0.00)")


# ----------------------------------------------------------------------------------------------
# the figure: filter_grid


def test_filter_grid_draws_each_filter_of_each_run(figures):
    rng = np.random.default_rng(2)
    delta = 0.01 * rng.normal(size=(2, 4, 5, 5, 3, 6))  # (R, E, h, w, C, F)
    fig, axes = filter_grid(delta, [0, 8, 16, 24], [1, math.inf], runs=[1, 0], filters=2, vrange=0.5,
                            title="range ±{vrange:g}")
    assert axes.shape == (4, 4)
    np.testing.assert_allclose(axes[0, 2].images[0].get_array(), filters_to_image(delta[1, 2, :, :, :, 0], 0.5))
    np.testing.assert_allclose(axes[3, 1].images[0].get_array(), filters_to_image(delta[0, 1, :, :, :, 1], 0.5))
    assert axes[0, 0].get_ylabel() == "filter 1\nK = ∞" and axes[1, 0].get_ylabel() == "filter 1\nK = 1"
    assert [axes[3, e].get_xlabel() for e in range(4)] == ["0", "8", "16", "24"]
    assert fig._suptitle.get_text() == "range ±0.5"


def test_filter_grid_stretched_range(figures):
    delta = np.zeros((1, 2, 2, 2, 3, 3))
    delta[0, 1, 0, 0, 0, 0] = 0.02
    delta[0, 1, 0, 0, 0, 2] = 0.5  # filter 3 is not drawn: it does not set the range
    fig, axes = filter_grid(delta, [0, 1], [1], filters=[0, 1], vrange="max", title="±{vrange:.3g}")
    assert fig._suptitle.get_text() == "±0.02"
    assert axes[0, 1].images[0].get_array()[0, 0, 0] == pytest.approx(1.0)


@pytest.mark.parametrize("kwargs, name", [
    (dict(delta=np.zeros((2, 4, 5, 5, 3))), "delta"),
    (dict(step=[0, 1, 2]), "step"),
    (dict(K=[1]), "K"),
    (dict(runs=[2]), "runs"),
    (dict(filters=7), "filters"),
    (dict(vrange=0.0), "vrange"),
])
def test_filter_grid_bad_arguments_name_the_parameter(figures, kwargs, name):
    args = dict(delta=np.zeros((2, 4, 5, 5, 3, 6)), step=[0, 1, 2, 3], K=[1, 8]) | kwargs
    with pytest.raises(ValueError, match=f"^{name} "):
        filter_grid(args.pop("delta"), args.pop("step"), args.pop("K"), **args)
