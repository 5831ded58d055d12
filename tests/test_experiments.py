"""Experiments: per-run learning rates in one sweep, assembly of each figure's results, claims rows,
parameters checked before any data or compute, and one real end-to-end run on a tiny config."""

from __future__ import annotations

import math

import jax
import numpy as np
import optax
import pytest

import iterlin.experiments as ex
from iterlin.claims import NA, Claim
from iterlin.config import resolve
from iterlin.training import train

from _toy import tiny_problem

# ----------------------------------------------------------------------------------------------
# sweep(): several (K, lr) in one program = separate runs
# ----------------------------------------------------------------------------------------------


def test_sweep_with_per_run_learning_rates_equals_separate_runs(x64):
    apply_fn, params, x, y = tiny_problem()
    key = jax.random.PRNGKey(3)
    runs = [(3, 0.1), (math.inf, 0.5)]
    h = ex.sweep(apply_fn, params, (x, y), K=[k for k, _ in runs], lr=[lr for _, lr in runs], steps=9,
                 batch_size=8, key=key, eval_data=(x, y), n_evals=3)
    assert h["step"].tolist() == [0, 3, 6, 9]
    assert h["K"].tolist() == [3.0, math.inf] and h["lr"].tolist() == [0.1, 0.5]
    for i, (k, lr) in enumerate(runs):
        _, ref = train(apply_fn, params, (x, y), K=k, steps=9, optimizer=optax.sgd(lr), batch_size=8, key=key,
                       eval_data=(x, y), eval_steps=[0, 3, 6, 9])
        for name in ("net_train_loss", "lin_test_loss", "net_test_acc", "n_relin"):
            np.testing.assert_allclose(h[name][i], ref[name], rtol=1e-9, atol=1e-12, err_msg=name)


def test_sweep_rejects_bad_arguments():
    apply_fn, params, x, y = tiny_problem()
    with pytest.raises(ValueError, match=r"K\[1\]=0 is not allowed"):
        ex.sweep(apply_fn, params, (x, y), K=[1, 0], lr=0.1, steps=2)
    with pytest.raises(ValueError, match=r"lr\[1\]=-1 is not allowed"):
        ex.sweep(apply_fn, params, (x, y), K=[1, 2], lr=[0.1, -1], steps=2)
    with pytest.raises(ValueError, match="lr must be one rate or 2 rates"):
        ex.sweep(apply_fn, params, (x, y), K=[1, 2], lr=[0.1, 0.2, 0.3], steps=2)


def test_eval_points_and_early_stopping():
    assert ex.eval_points(10, 4) == [0, 2, 5, 8, 10]
    assert ex.eval_points(2, 5) == [0, 1, 2]
    h = {"net_test_acc": np.array([[0.1, 0.5, 0.3], [0.2, np.nan, 0.4]])}
    assert ex.early_stopped(h).tolist() == [0.5, 0.4]


# ----------------------------------------------------------------------------------------------
# Assembly of each figure (training replaced by a fake sweep: fast, checks what is asked for)
# ----------------------------------------------------------------------------------------------


def _fake_history(K, lr, steps, acc_final, diverged=None, n_evals=2):
    R = len(K)
    E = n_evals + 1
    acc = np.linspace(0.1, 1.0, E)[None, :] * np.asarray(acc_final)[:, None]
    div = np.zeros(R, bool) if diverged is None else np.asarray(diverged)
    return {
        "step": np.linspace(0, steps, E).astype(int),
        "K": np.asarray([float(k) for k in K]),
        "lr": np.asarray(lr if isinstance(lr, list) else [lr] * R, float),
        "n_relin": np.stack([np.full(E, 0 if math.isinf(k) else steps // k) for k in K]),
        "net_test_acc": acc, "lin_test_acc": acc, "net_train_acc": np.minimum(2 * acc, 1.0),
        "diverged": div, "diverged_step": np.where(div, 3, -1),
    }


class FakeSweep:
    def __init__(self, acc=None):
        self.calls, self.acc = [], acc

    def __call__(self, apply_fn, params, data, *, K, lr, steps, batch_size=None, **kw):
        self.calls.append(dict(K=list(K), lr=lr, steps=steps, batch_size=batch_size, n=data[0].shape[0], **kw))
        acc = self.acc if self.acc is not None else [0.30] * len(K)
        return _fake_history(K, lr, steps, acc)


def _data(n, n_test=8):
    from iterlin.data import Dataset

    rng = np.random.default_rng(n)
    return Dataset(rng.normal(size=(n, 32, 32, 3)).astype(np.float32), rng.integers(0, 10, n).astype(np.int32),
                   rng.normal(size=(n_test, 32, 32, 3)).astype(np.float32), rng.integers(0, 10, n_test).astype(np.int32))


def test_fig2_minibatch_runs_scale_lr_K_and_steps(monkeypatch):
    fake = FakeSweep()
    monkeypatch.setattr(ex, "sweep", fake)
    config = resolve("fig2", K=[1, 4, math.inf], lr=0.2, steps=5, factor=3, batch_size=4, n_train=16)
    res = ex.fig2(config, _data(16))
    full, mini = fake.calls
    assert full["K"] == [1, 4, math.inf] and full["lr"] == 0.2 and full["steps"] == 5 and full["batch_size"] is None
    assert mini["K"] == [1, 12, math.inf]  # K = 1 (plain SGD) stays 1 and math.isclose(mini["lr"], 0.2 / 3) and mini["steps"] == 15
    assert mini["batch_size"] == 4
    assert set(res) == {"full", "mini"}
    rows = ex.fig2_claims(res)
    assert [r.holds for r in rows] == ["yes", "yes", "yes"]
    assert "K=4 (1 re-linearisations)" in rows[0].measured


def test_fig5_runs_dedupe_and_results(monkeypatch):
    config = resolve("fig5", K=[1, 4], lr=0.1, lr_inf=0.1, n_train=[8, 16], steps=4)
    assert ex.fig5_runs(config) == [(1.0, 0.1), (4.0, 0.1), (math.inf, 0.1)]
    config = resolve("fig5", K=[1, 4], lr=0.1, lr_inf=0.5, n_train=[8, 16], steps=4, n_evals=2)
    assert ex.fig5_runs(config) == [(1.0, 0.1), (4.0, 0.1), (math.inf, 0.5), (1.0, 0.5)]
    # accuracy grows with n for finite K, not for K = inf
    accs = iter([[0.2, 0.2, 0.2, 0.2], [0.4, 0.39, 0.21, 0.4]])
    fake = FakeSweep()
    monkeypatch.setattr(ex, "sweep", lambda *a, **k: (setattr(fake, "acc", next(accs)), fake(*a, **k))[1])
    res = ex.fig5(config, {"8": _data(8), "16": _data(16)})
    assert res["n_train"].tolist() == [8, 16] and res["best_test_acc"].shape == (2, 4)
    assert np.allclose(res["best_test_acc"][:, 2], [0.2, 0.21])
    assert [c["n"] for c in fake.calls] == [8, 16]
    res["config"] = config
    rows = {r.claim: r for r in ex.fig5_claims(res)}
    assert rows["every finite K scales with data like K = 1"].holds == "yes"
    assert rows["K = ∞ (no feature learning) scales worse"].holds == "yes"
    assert rows["the higher lr of K = ∞ does not explain the gap"].holds == "yes"
    assert rows["runs are trained to convergence"].holds == "no"  # train acc. 0.8 < 99 %


def test_fig3_claims_rules():
    h = _fake_history([1, 5], 0.1, 50, [0.40, 0.395])
    rows = ex.fig3_claims({"runs": h, "config": {"scale": "smoke"}})
    assert [r.holds for r in rows] == ["yes", NA, "yes", "yes"]
    assert rows[0].measured == "K=1: 40.0 %; K=5 (10 re-linearisations): 39.5 % (Δ -0.5 pts)"
    h = _fake_history([1, 5], 0.1, 50, [0.40, 0.37])
    assert [r.holds for r in ex.fig3_claims({"runs": h, "config": {"scale": "paper"}})][:3] == ["no", "no", "no"]


def test_divergence_is_reported_in_claims():
    h = _fake_history([1, 5], [0.1, 0.2], 50, [0.40, 0.40], diverged=[False, True])
    rows = ex.fig3_claims({"runs": h, "config": {"scale": "smoke"}})
    assert rows[0].holds == "no"  # a diverged run does not match K = 1
    assert rows[-1] == Claim("every run stays finite (no NaN loss)", "no divergence reported",
                             "diverged: K=5, lr=0.2 at step 3", "no", rows[-1].rule)


def test_claims_cell_publishes(tmp_path):
    h = _fake_history([1, 5], 0.1, 50, [0.40, 0.395])
    text = ex.claims({"runs": h, "config": {"experiment": "fig3", "scale": "smoke"}}, directory=tmp_path)
    assert text.startswith("Claims of fig3 at scale 'smoke':") and (tmp_path / "fig3.json").is_file()


# ----------------------------------------------------------------------------------------------
# run(): parameters checked before data or compute; then a real tiny run, cached
# ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "kwargs, message",
    [
        (dict(K="abc"), "K='abc' is not allowed"),
        (dict(K=0), "K=0 is not allowed"),
        (dict(lr=float("nan")), "lr=nan is not allowed"),
        (dict(steps=0), "steps=0 is not allowed"),
        (dict(scale="foo"), "scale='foo' is not allowed"),
        (dict(batch_size=0), "batch_size=0 is not allowed"),
    ],
)
def test_run_validates_before_loading(monkeypatch, kwargs, message):
    def no_load(config):
        raise AssertionError("data loaded before the parameters were checked")

    monkeypatch.setitem(ex.EXPERIMENTS, "fig3", ex.EXPERIMENTS["fig3"]._replace(load=no_load))
    with pytest.raises(ValueError, match=message):
        ex.run("fig3", **kwargs)


def test_run_unknown_experiment():
    with pytest.raises(ValueError, match="experiment='fig42' is not allowed"):
        ex.run("fig42")


def test_n_train_and_batch_size_checked_against_installed_data(cifar_subset_path):
    with pytest.raises(ValueError, match=r"n_train=99999 is not allowed.*n_train must be <= 4660"):
        ex.run("fig3", n_train=99999, progress=False)
    with pytest.raises(ValueError, match=r"batch_size=4661 is not allowed.*n_train=4660"):
        ex.run("fig3", n_train="all", n_test=10, batch_size=4661, progress=False)


def test_tiny_real_run_is_cached(cifar_subset_path, tmp_path, capsys):
    kw = dict(K=2, lr=0.05, steps=2, batch_size=8, n_train=16, n_test=16, n_evals=1, progress=False,
              cache_dir=tmp_path)
    res = ex.run("fig3", **kw)
    h = res["runs"]
    assert res["config"]["K"] == [1, 2] and res["config"]["n_train"] == 16
    assert h["step"].tolist() == [0, 2] and h["net_test_acc"].shape == (2, 2)
    assert h["n_relin"][:, -1].tolist() == [2, 1] and not h["diverged"].any()
    assert np.all((h["net_test_acc"] >= 0) & (h["net_test_acc"] <= 1))
    assert "computed and cached" in capsys.readouterr().out
    again = ex.run("fig3", **kw)  # replotting reruns nothing
    assert "loaded cached results" in capsys.readouterr().out
    for name in ("net_test_acc", "lin_test_acc", "n_relin"):
        np.testing.assert_array_equal(again["runs"][name], h[name])
    assert ex.run(res["config"], progress=False, cache_dir=tmp_path)["config"] == res["config"]
    rows = ex.fig3_claims(res)
    assert len(rows) == 4 and all(r.holds in ("yes", "no", NA) for r in rows)
