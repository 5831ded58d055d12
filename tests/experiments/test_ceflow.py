"""The iterated flow under cross-entropy on CIFAR-10 (iterlin.experiments.ceflow): its config refused
naming the knob, its runs each once, one tiny real run whose every claims row evaluates, a resumed run
equal to an uninterrupted one, and the rules' verdicts on constructed results."""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.flatten_util import ravel_pytree

import iterlin.solvers.flow as flow_module
from iterlin.analysis.jacobian import flat_jacobian
from iterlin.experiments import ceflow, resolve, stored
from iterlin.repro.cache import load_results, save_results
from iterlin.linearise import linearised_apply, linearised_predict, transpose_apply
from iterlin.models import make_model
from iterlin.repro.claims import HOLDS

from _toy import ceflow_results


def _tiny_config(**over):
    base = dict(n_train=[4, 8], n_grid=4, total_time=20.0, relins=[1, 2, 4], n_relin=2, long_taus=[40.0],
                n_heldout=12, n_check=4, check_time=0.1, check_relins=10, gd_steps=10)
    return resolve("ceflow", "smoke", **{**base, **over})


def _run(config, ckdir):
    data = ceflow.load(config)
    return ceflow.compute(config, data, checkpoint_dir=ckdir)._replace(config=config)


# ------------------------------------------------------------------------------------------------
# Config


@pytest.mark.parametrize("knob, value", [("total_time", -1.0), ("relins", [0, 2]), ("n_relin", 0), ("n_seeds", 0),
                                         ("long_taus", [-3.0]), ("rtol", 0.0), ("atol", float("nan")),
                                         ("n_grid", 0), ("gd_steps", 0)])
def test_bad_knob_values_are_refused_naming_the_knob(knob, value):
    with pytest.raises(ValueError, match=knob):
        resolve("ceflow", **{knob: value})


@pytest.mark.parametrize("over, knob", [(dict(n_grid=12), "n_grid=12 is not allowed: n_grid must be one of n_train"),
                                        (dict(long_taus=[100.0]), "long_taus=\\[100.0\\] is not allowed"),
                                        (dict(n_check=64), "n_check=64 is not allowed"),
                                        (dict(rtol=2.0), "rtol=2.0 is not allowed"),
                                        (dict(n_heldout=10**5), "n_heldout=100000 is not allowed")])
def test_relations_between_knobs_are_refused_by_load_naming_the_knob(over, knob, cifar_subset_path):
    # total_time/n_relin = 250 at smoke: a "longer" τ of 100 is shorter
    with pytest.raises(ValueError, match=knob):
        ceflow.load(resolve("ceflow", **over))


def test_run_specs_hold_every_run_once_seed_major():
    c = resolve("ceflow", "cpu")
    specs = ceflow.run_specs(c)
    assert len(specs) == len(set(specs))
    assert [s.seed for s in specs] == sorted(s.seed for s in specs)
    for seed in range(c.seed, c.seed + c.n_seeds):
        mine = {(s.R, s.total_time, s.n_train) for s in specs if s.seed == seed}
        T, n, Rn = c.total_time, ceflow.grid_size(c), c.n_relin
        assert {(R, T, n) for R in c.relins} <= mine
        assert {(Rn, Rn * tau, n) for tau in c.long_taus} <= mine
        assert {(1, T, m) for m in c.n_train} | {(Rn, T, m) for m in c.n_train} <= mine
    assert ceflow.grid_size(c.replace(n_grid=None)) == min(c.n_train)


# ------------------------------------------------------------------------------------------------
# The shared helpers (iterlin.linearise) against dense routes, float64


def test_transpose_apply_and_linearised_predict_against_the_dense_jacobian(x64):
    model = make_model("cnn", jax.random.PRNGKey(0), input_shape=(16, 16, 3), dtype=jnp.float64)
    x = jax.random.normal(jax.random.PRNGKey(1), (3, 16, 16, 3), jnp.float64)
    f, p = model.apply_fn, model.params
    a = jax.random.normal(jax.random.PRNGKey(2), (3, 10), jnp.float64)
    J = np.asarray(flat_jacobian(f, p, x))  # (N·C, P), example-major
    got = np.asarray(ravel_pytree(transpose_apply(f)(p, x, a))[0])
    np.testing.assert_allclose(got, J.T @ np.asarray(a).reshape(-1), rtol=1e-10, atol=1e-12)
    q = jax.tree.map(lambda v: v + 0.01, p)
    np.testing.assert_array_equal(np.asarray(linearised_predict(f)(p, q, x)),
                                  np.argmax(np.asarray(linearised_apply(f, p, q, x)), -1))


# ------------------------------------------------------------------------------------------------
# A tiny real run: the results, every claims row, resume


def test_tiny_real_run_every_row_evaluates_and_resume_equals_uninterrupted(tmp_path, cifar_subset_path, monkeypatch):
    config = _tiny_config()
    ref = _run(config, tmp_path / "a")
    runs = ref.runs
    q = len(ceflow.run_specs(config))
    assert runs.net_correct.shape == (q, 12) and runs.lin_correct.dtype == bool
    np.testing.assert_allclose(runs.net_heldout_acc, runs.net_correct.mean(1))
    assert int(ref.n_test) == 12 and ref.pool_test_index.shape == (12,) and ref.pool_train_index.shape == (0,)
    assert np.all(np.isfinite(runs.train_loss)) and np.all(runs.ode_steps > 0)
    rows = ceflow.claims(ref)
    assert [r.id for r in rows] == ["ceflow.large_tau", "ceflow.few_updates", "ceflow.inf_scales_worse",
                                    "ceflow.solve_further", "ceflow.fits", "ceflow.gd_check"]
    assert all(r.holds in HOLDS for r in rows)
    assert float(ref.check.gd_vs_flow) < float(ref.check.gd_vs_one_flow)  # re-linearising moves towards GD

    # interrupt at the 5th linearisation (the R = 4 run's second), then rerun: the same results
    calls = {"n": 0}
    real = flow_module.linearised_flow

    def flaky(*a, **k):
        calls["n"] += 1
        if calls["n"] == 5:
            raise KeyboardInterrupt
        return real(*a, **k)

    monkeypatch.setattr(flow_module, "linearised_flow", flaky)
    with pytest.raises(KeyboardInterrupt):
        _run(config, tmp_path / "b")
    calls["n"] = -10**6
    again = _run(config, tmp_path / "b")
    total = sum(int(R) for R in runs.R) + config.check_relins + 1
    assert calls["n"] + 10**6 == total - 4  # the four finished linearisations were not redone
    for k in ("net_correct", "lin_correct", "net_train_acc", "lin_train_acc", "train_loss", "ode_steps"):
        np.testing.assert_array_equal(again.runs[k], runs[k], err_msg=k)
    assert np.isnan(again.runs.seconds[0]) and not np.isnan(runs.seconds[0])  # read from its stored scores


# ------------------------------------------------------------------------------------------------
# The rules on constructed results


def _constructed(acc, m: int = 2000, seeds: int = 3, train: float = 1.0) -> ceflow.Results:
    """Results of the smoke scale's runs (:func:`_toy.ceflow_results`), every seed alike but for a
    shift of a few images."""
    config = resolve("ceflow", "smoke", n_seeds=seeds, relins=[1, 2, 8, 32], n_train=[8, 16, 32])
    return ceflow_results(config, acc, m=m, train=train)


def _rows(results) -> dict:
    return {r.id: r.holds for r in ceflow.claims(results)}


def test_results_read_back_from_a_results_file_give_the_same_claims(tmp_path):
    results = _constructed(lambda s: (0.4 + 0.01 * s.n_train / 8, 0.3))
    path = tmp_path / "results.npz"
    save_results(path, stored(results), key="k", config=results.config.to_dict())
    back = ceflow.EXPERIMENT.typed(load_results(path, key="k"), results.config)
    assert isinstance(back.check, ceflow.Check) and isinstance(back.runs, ceflow.Runs)
    assert [str(c) for c in ceflow.claims(back)] == [str(c) for c in ceflow.claims(results)]


def test_rules_read_yes_and_no_from_constructed_results():
    T = 500.0

    def good(s):  # finer τ and more data help; K = ∞ gains nothing from data
        if s.total_time > T:  # the longer τ: 10 points worse
            return 0.3, 0.3
        return 0.4 + 0.01 * s.n_train / 8, 0.3

    rows = _rows(_constructed(good))
    assert rows["ceflow.large_tau"] == "yes" and rows["ceflow.few_updates"] == "yes"
    assert rows["ceflow.inf_scales_worse"] == "yes" and rows["ceflow.solve_further"] == "yes"
    assert rows["ceflow.fits"] == "yes" and rows["ceflow.gd_check"] == "yes"

    def bad(s):  # each R 10 points below the next: nothing on par; the longer τ better; K = ∞ gains most
        if s.total_time > T:
            return 0.6, 0.3
        return 0.1 * np.log2(s.R) / 5 + 0.2, 0.2 + 0.05 * s.n_train / 8

    rows = _rows(_constructed(bad))
    assert rows["ceflow.large_tau"] == "no" and rows["ceflow.few_updates"] == "no"
    assert rows["ceflow.inf_scales_worse"] == "no" and rows["ceflow.solve_further"] == "no"
    # networks that do not fit their training set: the comparisons are not judged
    rows = _rows(_constructed(good, train=0.9))
    assert rows["ceflow.fits"] == "no" and rows["ceflow.large_tau"].startswith("n/a")
    assert rows["ceflow.few_updates"].startswith("n/a") and rows["ceflow.solve_further"].startswith("n/a")
