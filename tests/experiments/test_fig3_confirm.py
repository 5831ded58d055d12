"""Fig. 3, confirmatory (iterlin.experiments.fig3_confirm): the window's per-image scores on the
held-out pool, resumed runs, and the registered rows' rules on made-up results."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from _toy import fake_cifar, fake_history

from iterlin.data import HeldOut
from iterlin.experiments import _common, fig3_confirm, protocol
from iterlin.repro.claims import NA, UNDECIDED, UNSTABLE
from iterlin.repro.config import format_value


def test_window_points():
    assert fig3_confirm.window_points(8000, 0.1, 5) == [7200, 7400, 7600, 7800, 8000]
    assert fig3_confirm.window_points(40, 0.25, 2) == [30, 40]
    assert fig3_confirm.window_points(10, 0.1, 5) == [9, 10]  # coinciding points counted once


def test_window_out_of_range_is_refused():
    for bad in (0, 1.5, -0.1):
        with pytest.raises(ValueError, match=f"window={bad!r} is not allowed"):
            fig3_confirm.EXPERIMENT.get_config("smoke", window=bad)


def _data(n_train=16, n_test=6, n_unused=5):
    train = fake_cifar(n_train, n_test=n_test, seed=0)
    pool = fake_cifar(n_unused, n_test=n_test, seed=1)._replace(x_test=train.x_test, y_test=train.y_test)
    return fig3_confirm.Data(train, pool, HeldOut(np.arange(n_test), 10_000 + np.arange(n_unused)))


def test_compute_scores_every_pool_image_and_resumes_to_the_same_scores(tmp_path):
    """Real training (the paper's CNN on 16 made-up images): the window's scores are each run's mean
    correctness over the window's points on every pool image (test images first); a second compute
    from the finished checkpoint restores the scorer's carry and gives the same scores."""
    config = fig3_confirm.EXPERIMENT.get_config("smoke", K=[1, 2, "inf"], steps=4, batch_size=4, n_train=16, n_seeds=1,
                                     n_evals=2, window=0.5, n_window_evals=2, n_sharpness=4, sharpness_every=2)
    data = _data()
    a = fig3_confirm.compute(config, data, checkpoint_dir=tmp_path)
    assert a.window_net.shape == a.window_lin.shape == (3, 11) and int(a.n_test) == 6
    assert set(np.unique(a.window_net * 2)) <= {0.0, 1.0, 2.0}  # two points: 0, 1/2 or 1
    h = a.runs
    points = np.asarray(h["step"]) >= 2
    np.testing.assert_allclose(np.asarray(h["window_net_acc"])[:, points].mean(1), a.window_net.mean(1), rtol=1e-6)
    assert np.isnan(np.asarray(h["window_net_acc"])[:, ~points]).all()
    b = fig3_confirm.compute(config, data, checkpoint_dir=tmp_path)  # resumed from the last checkpoint
    np.testing.assert_array_equal(a.window_net, b.window_net)
    np.testing.assert_array_equal(a.window_lin, b.window_lin)
    import matplotlib.pyplot as plt  # the page's plot draws these results (its reference run is pending)

    plt.close("all")
    fig3_confirm.plot(a._replace(config=config))
    assert all(ax.has_data() for ax in plt.gcf().axes)
    plt.close("all")


class _State:
    def __init__(self, runs):
        self.step = np.zeros(runs, np.int32)


def test_window_scorer_carry_restores_its_counts(monkeypatch):
    """A scorer restored from another's carry mid-window ends with the same counts."""
    calls = iter([{"net_test_correct": np.array([[1, 0, 1]], bool), "lin_test_correct": np.array([[0, 0, 1]], bool)},
                  {"net_test_correct": np.array([[1, 1, 0]], bool), "lin_test_correct": np.array([[1, 0, 1]], bool)}] * 2)
    monkeypatch.setattr(_common, "final_correct", lambda *a, **k: next(calls))
    x, y = np.zeros((3, 2)), np.zeros(3, int)
    whole = _common.WindowScores(x, y, start=5)
    cb = whole(None, None)
    assert np.isnan(cb(0, _State(1))["window_net_acc"]).all()
    cb(5, _State(1)), cb(10, _State(1))
    parts = _common.WindowScores(x, y, start=5)
    first = parts(None, None)
    first(0, _State(1)), first(5, _State(1))
    resumed = parts(None, None)
    resumed.restore(first.carry(_State(1)))
    resumed(10, _State(1))
    for got, want in zip(parts.scores(), whole.scores()):
        np.testing.assert_array_equal(got, want)
    np.testing.assert_array_equal(whole.scores()[0], [[1.0, 0.5, 0.5]])


def test_no_window_point_is_an_error():
    with pytest.raises(ValueError, match="start=5 is not allowed"):
        _common.WindowScores(np.zeros((2, 1)), np.zeros(2, int), start=5).scores()


# ------------------------------------------------------------------------------------------------
# The rows' rules on made-up results: 4 seeds × K ∈ {1, 10, ∞}, 2,000 pool images

S, N, N_TEST = 4, 2000, 500


def _results(*, mid=0.0, inf=-0.10, train=1.0, ratio=0.1, diverged=False, noise=0.3, seed=0):
    """Scores: K = 1 correct on a random 40 % of images (per seed), K = 10 and K = ∞ shifted by
    ``mid``/``inf`` (a fraction of images flipped), each run with independent per-image noise."""
    rng = np.random.default_rng(seed)
    K = [1, 10, float("inf")] * S
    h = fake_history(K, 0.1, 100, [0.4] * (3 * S), n_evals=10)
    h["net_train_acc"] = np.full_like(h["net_test_acc"], train)
    h["lr_over_bound"] = np.where(np.isinf(np.asarray(K))[:, None] | (np.asarray(K)[:, None] == 1), 0.05, ratio) \
        * np.ones_like(h["net_test_acc"])
    h["diverged"] = np.asarray([diverged and k == 10 for k in K])
    h["n_relin"] = np.stack([np.linspace(0, 0 if np.isinf(k) else 100 // k, 11).astype(int) for k in K])
    base = (rng.random((S, N)) < 0.4).astype(np.float64)
    score = np.empty((3 * S, N))
    for s in range(S):
        for j, shift in enumerate((0.0, mid, inf)):
            p = np.clip(base[s] + shift + noise * (rng.random(N) - 0.5), 0, 1)
            score[3 * s + j] = p
    config = fig3_confirm.EXPERIMENT.get_config("smoke", K=[1, 10, "inf"], steps=100, n_seeds=S, window=0.1)
    runs = _common.Sweep.from_columns(
        {**{k.replace("_acc", "_loss"): 1 - v for k, v in h.items() if k.endswith("_acc")}, **h})
    return fig3_confirm.Results(runs=runs, window_net=score.astype(np.float32), window_lin=score.astype(np.float32),
                                n_test=np.asarray(N_TEST), pool_test_index=np.arange(N_TEST),
                                pool_train_index=np.arange(N - N_TEST), config=config)


def _claims(results) -> list:
    """The rows' rules on ``results``, with the rows' own run (``config``) not required: the made-up
    results are not the registered run."""
    rows = tuple(dataclasses.replace(r, config={}) for r in protocol.rows_of("fig3_confirm"))
    return protocol.claims("fig3_confirm", results, protocol.Protocol(rows))


def _holds(results) -> dict:
    return {c.id.split(".")[1]: c.holds for c in _claims(results)}


def test_the_registered_rows_fix_the_cpu_scales_run():
    """Every confirmatory row names the run it is decided on: the cpu (and gpu) scale's config; this
    build's smoke run reads n/a on each."""
    rows = protocol.rows_of("fig3_confirm")
    assert rows and all(r.status == "confirmatory" and r.registered and r.seeds == 10 for r in rows)
    for scale in ("cpu", "gpu"):
        config = fig3_confirm.EXPERIMENT.get_config(scale)
        assert all(protocol.config_mismatch(r, config) == "" for r in rows), scale
        assert config.n_seeds == max(r.seeds for r in rows)
    assert all(c.holds == NA for c in fig3_confirm.claims(_results()))


def test_rows_on_par_with_a_gap():
    rows = {c.id.split(".")[1]: c for c in _claims(_results())}
    assert {k: c.holds for k, c in rows.items()} == {
        "converged": "yes", "stable": "yes", "finite": "yes", "gap": "yes", "few_updates": "yes",
        "under_one_point": "yes"}
    assert "test images (500)" in rows["few_updates"].measured and "unused training images (1500)" in rows["few_updates"].measured
    assert "±0.25 of the run's own K = 1 − K = ∞ gap" in rows["few_updates"].rule
    assert "margin ±" in rows["few_updates"].measured and "0.25 × the gap" in rows["few_updates"].measured


def test_rows_a_large_k_far_below_reads_no():
    got = _holds(_results(mid=-0.06))
    assert got["few_updates"] == "no" and got["under_one_point"] == "no" and got["gap"] == "yes"


def test_rows_without_a_gap_are_undecided():
    got = _holds(_results(inf=0.0))
    assert got["gap"] == UNDECIDED and got["few_updates"] == UNDECIDED  # no gap to take a quarter of


def test_rows_not_trained_to_the_criterion_do_not_count():
    rows = {c.id.split(".")[1]: c for c in _claims(_results(train=0.9))}
    assert rows["converged"].holds == "no"
    for k in ("gap", "few_updates", "under_one_point"):
        assert rows[k].holds == UNDECIDED and "not counted: row fig3_confirm.converged reads 'no'" in rows[k].measured


def test_rows_of_an_unstable_linear_model_read_unstable():
    got = _holds(_results(ratio=0.5))
    assert got["stable"] == "no"
    assert got["few_updates"] == got["under_one_point"] == got["gap"] == UNSTABLE


def test_registered_rows_read_na_on_another_run():
    """A row whose ``config`` fixes its run reads n/a on a run with other knobs, naming them."""
    res = _results()
    row = protocol.rows_of("fig3_confirm")[-1]
    fixed = protocol.Protocol((row.__class__(**{**row.asdict(), "config": {"scale": "cpu", "steps": 8000}}),))
    (c,) = protocol.claims("fig3_confirm", res, fixed)
    assert c.holds == NA and "scale='smoke'" in c.rule and "steps=100" in c.rule
    same = protocol.Protocol((row.__class__(**{**row.asdict(), "config": {"scale": "smoke", "steps": 100,
                                                                              "K": [1, 10, float("inf")]}}),))
    with pytest.raises(protocol.ProtocolError, match="requires"):  # its required rows are not evaluated with it
        protocol.claims("fig3_confirm", res, same)
    assert format_value(res.config.window) == "0.1"
