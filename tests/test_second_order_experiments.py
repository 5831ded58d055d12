"""Tests of iterlin.second_order_experiments (Figs. 1, 8, 9): the pieces exactly, the runs by shape."""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from iterlin.claims import Claim
from iterlin.closed_form import flow_filter
from iterlin.config import resolve
from iterlin.data import Dataset, load_cifar10, quintic
from iterlin.experiments import EXPERIMENTS, claims, run
from iterlin.gauss_newton import gauss_newton_step
from iterlin.models import make_model
from iterlin.second_order_experiments import (
    damped_gn_filter_traced,
    fig1_plan,
    fig8,
    flow_filter_traced,
    make_spectral_step,
    quintic_model,
    slope_variation,
    torch_default_init,
    train_spectral,
)
from iterlin.training import init_state
from iterlin.tree import tree_allclose, tree_index


def test_registered():
    for name in ("fig1", "fig8", "fig9"):
        assert name in EXPERIMENTS and EXPERIMENTS[name].claims is not None


def test_torch_default_init_bounds_and_seeds():
    model = make_model("mlp", jax.random.PRNGKey(0))
    p0 = torch_default_init(jax.random.PRNGKey(1), model.params)
    p1 = torch_default_init(jax.random.PRNGKey(2), model.params)
    assert jax.tree.structure(p0) == jax.tree.structure(model.params)
    for name, layer in p0.items():
        bound = 1 / math.sqrt(layer["kernel"].shape[0])
        assert layer["kernel"].shape == model.params[name]["kernel"].shape
        for leaf in (layer["kernel"], layer["bias"]):
            assert float(jnp.max(jnp.abs(leaf))) <= bound
        assert float(jnp.max(jnp.abs(layer["bias"]))) > 0  # unlike Flax's zero biases
    assert not tree_allclose(p0, p1)
    with pytest.raises(ValueError, match="params"):
        torch_default_init(jax.random.PRNGKey(0), {"w": jnp.ones(3)})


def test_full_rank_ntk_with_torch_init(x64):
    """The reason for the PyTorch initialisation: Flax's zero biases give a rank-4 NTK on the quintic."""
    from iterlin.closed_form import residual_spectrum

    d = quintic(dtype=np.float64)
    apply_fn, params = quintic_model([0], jnp.float64)
    sigma, _ = residual_spectrum(apply_fn, tree_index(params, 0), d.x_train, d.y_train)
    assert int(np.sum(np.asarray(sigma) > 1e-10 * float(sigma[-1]))) == 20
    flax = make_model("mlp", jax.random.PRNGKey(0), dtype=jnp.float64)
    sigma_flax, _ = residual_spectrum(flax.apply_fn, flax.params, d.x_train, d.y_train)
    assert int(np.sum(np.asarray(sigma_flax) > 1e-10 * float(sigma_flax[-1]))) == 4


def test_spectral_step_is_damped_gauss_newton(x64):
    """make_spectral_step with the damped filter = gauss_newton_step (MSE), for λ = 0 and λ > 0."""
    d = quintic(8, 4, dtype=np.float64)
    apply_fn, params = quintic_model([3, 4], jnp.float64)
    lams = jnp.asarray([0.0, 0.5])
    step = make_spectral_step(apply_fn, damped_gn_filter_traced, step_size=0.7)
    for i in range(2):
        p = tree_index(params, i)
        state = init_state(p, __import__("optax").identity(), 1)._replace(opt_state=lams[i])
        new, m = jax.jit(step)(state, (jnp.asarray(d.x_train), jnp.asarray(d.y_train)))
        ref = gauss_newton_step(apply_fn, p, d.x_train, d.y_train, damping=float(lams[i]), loss="mse",
                                solver="kernel", step_size=0.7)
        assert tree_allclose(new.params, ref, rtol=1e-8, atol=1e-10)
        assert tree_allclose(new.params_s, ref, rtol=1e-8, atol=1e-10)
        assert int(new.n_relin) == 1 and int(new.step) == 1
        want = 0.5 * np.mean(np.sum((np.asarray(apply_fn(p, d.x_train)) - d.y_train) ** 2, -1))
        assert float(m["loss"]) == pytest.approx(want, rel=1e-10)


def test_flow_filter_traced_matches_closed_form(x64):
    sigma = jnp.asarray([1e-4, 0.3, 2.0, 40.0])
    for tau in (0.01, 3.0):
        np.testing.assert_allclose(flow_filter_traced(sigma, tau), flow_filter(sigma, tau, 1.0), rtol=1e-12)
    np.testing.assert_allclose(flow_filter_traced(sigma, jnp.inf), 1 / sigma, rtol=1e-12)
    np.testing.assert_allclose(damped_gn_filter_traced(sigma, 0.2), 1 / (sigma + 0.2), rtol=1e-12)


def test_train_spectral_vmaps_runs(x64):
    """One program for several hyperparameters; run i equals training run i alone."""
    d = quintic(6, 5, dtype=np.float64)
    apply_fn, params = quintic_model([0, 1], jnp.float64)
    kw = dict(filter_fn=damped_gn_filter_traced, steps=2, eval_data=(d.x_test, d.y_test), n_evals=2)
    final, h = train_spectral(apply_fn, params, (d.x_train, d.y_train), hyper=[0.1, 1.0], **kw)
    assert np.asarray(h["net_train_rmse"]).shape == (2, 3)
    alone, _ = train_spectral(apply_fn, jax.tree.map(lambda a: a[1:], params), (d.x_train, d.y_train),
                              hyper=[1.0], **kw)
    assert tree_allclose(tree_index(final, 1), tree_index(alone, 0), rtol=1e-9, atol=1e-12)


def test_slope_variation():
    x = np.linspace(-1, 1, 201)
    assert slope_variation(np.abs(x), x) == pytest.approx(2.0)
    assert slope_variation(3 * x + 1, x) == pytest.approx(0.0, abs=1e-9)
    assert slope_variation(np.stack([np.abs(x), 2 * np.abs(x)]), x).shape == (2,)


def test_fig1_plan():
    config = dict(K=[1, 3, 10, 100, math.inf], steps=1000, n_relin=20, max_relin=100)
    plan = {p["K"]: p for p in fig1_plan(config)}
    assert plan[1]["method"] == "gd" and plan[1]["steps"] == 1000 and plan[3]["method"] == "gd"
    assert plan[10]["method"] == "flow" and plan[10]["n_relin"] == 100  # ⌈1000/10⌉ = 100 ≤ max_relin
    assert plan[100]["method"] == "flow" and plan[100]["n_relin"] == 20  # at least n_relin
    assert plan[math.inf]["method"] == "kernel"


def test_config_validation():
    with pytest.raises(ValueError, match="damping"):
        resolve("fig9", damping=[0.1, -1.0])
    with pytest.raises(ValueError, match="damping"):
        resolve("fig1", damping=[1.0, 2.0])  # one λ in fig1
    with pytest.raises(ValueError, match="x64"):
        resolve("fig9", x64="yes")
    with pytest.raises(ValueError, match="n_seeds"):
        resolve("fig1", n_seeds=0)
    with pytest.raises(ValueError, match="lr_adam"):
        resolve("fig8", lr_adam=0)
    assert resolve("fig9", damping=0.5)["damping"] == [0.5]
    assert resolve("fig9", damping=[1, 0])["damping"] == [0.0, 1.0]
    for scale in ("smoke", "gpu", "paper"):
        for name in ("fig1", "fig8", "fig9"):
            resolve(name, scale)


def _table_ok(table: str, name: str):
    assert table.startswith(f"Claims of {name} at scale 'smoke':")
    assert "every run stays finite" in table


def test_fig9_tiny(tmp_path):
    r = run("fig9", damping=[0.0, 1.0], steps=3, n_seeds=2, n_functions=1, n_train=8, n_test=30, n_evals=1,
            cache_dir=tmp_path, progress=False, verbose=False)
    assert r["damping"].tolist() == [0.0, 1.0]
    for key in ("train_rmse", "test_rmse", "kept", "diverged", "slope_variation"):
        assert np.asarray(r[key]).shape == (2, 2), key
    assert r["curves"]["train_rmse"].shape == (2, 2, 2) and r["curves"]["step"].tolist() == [0, 3]
    assert r["functions"].shape == (2, 1, 30)
    assert r["x_test"].shape == (30,) and r["x_train"].shape == (8,)
    assert np.all(np.isfinite(r["test_rmse"]))
    _table_ok(claims(r, directory=tmp_path), "fig9")
    assert (tmp_path / "fig9.json").is_file()


def test_fig1_tiny(tmp_path):
    r = run("fig1", K=[1, 3, 100, math.inf], lr=0.02, steps=20, n_relin=2, max_relin=5, damping=1.0, gn_steps=2,
            n_seeds=2, n_train=8, n_test=30, n_evals=2, cache_dir=tmp_path, progress=False, verbose=False)
    assert r["K"].tolist() == [1, 3, 100, math.inf]
    assert r["method"].tolist() == ["gd", "gd", "flow", "kernel"]
    assert r["n_relin"].tolist() == [20, 6, 2, 0]
    for key in ("net_train_rmse", "net_test_rmse", "lin_train_rmse", "lin_test_rmse", "net_train_rmse_mid",
                "diverged"):
        assert np.asarray(r[key]).shape == (4, 2), key
    assert np.all(np.isfinite(r["lin_test_rmse"]))
    gn = r["gn"]
    assert gn["damping"].tolist() == [0.0, 1.0] and gn["net_test_rmse"].shape == (2, 2)
    assert r["seeds"].tolist() == [0, 1]
    # seed 1's K = 1 run differs from seed 0's (K-major, then seeds: no mix-up of the layout)
    assert r["net_test_rmse"][0, 0] != r["net_test_rmse"][0, 1]
    assert gn["equiv_K"][1] == pytest.approx(1 / (1.0 * 0.02 / 8))
    b = r["bridge"]
    assert b["sigma"].shape == (8,) and b["coeffs"].shape == (8,)
    M, G = b["K"].shape[0], b["sigma_grid"].shape[0]
    for key in ("gd_filter", "gn_filter", "gn_filter_fit"):
        assert b[key].shape == (M, G), key
    np.testing.assert_allclose(b["damping"], 1 / (b["K"] * b["eta"]))
    _table_ok(claims(r, directory=tmp_path), "fig1")


def test_fig8_tiny(monkeypatch):
    """One tiny run of each of the three trainings on 8 real CIFAR-10 images (compute only, no cache).

    The CNN is swapped for a small MLP on the flattened images (same outputs, (N, 10) logits) so
    that the three compilations stay fast; the wiring, not the CNN, is under test here.
    """
    import iterlin.second_order_experiments as so
    from iterlin.models import Model

    def small_model(name, key, **kw):
        assert name == "cnn"
        mlp = make_model("mlp", key, input_shape=(32 * 32 * 3,), num_classes=10)
        return Model(lambda p, x: mlp.apply_fn(p, x.reshape(x.shape[0], -1)), mlp.params, None)

    monkeypatch.setattr(so, "make_model", small_model)
    d = load_cifar10(8, 8)
    config = resolve("fig8", K=2, steps=4, n_train=8, n_test=8, n_evals=2, batch_size=None)
    r = fig8(config, Dataset(*d))
    for name in ("solved", "sgd", "adam"):
        h = r[name]
        assert h["step"].tolist() == [0, 2, 4], name
        for key in ("net_train_acc", "net_test_acc", "lin_train_acc"):
            assert np.asarray(h[key]).shape == (3,), (name, key)
    assert r["solved"]["n_relin"].tolist() == [0, 1, 2]
    assert r["solved"]["relin_step"].tolist() == [2, 4] and r["solved"]["relin_acc"].shape == (2,)
    assert r["sgd"]["n_relin"][-1] == 4  # K = 1
    rows = EXPERIMENTS["fig8"].claims({**r, "config": config})
    assert all(isinstance(row, Claim) for row in rows) and len(rows) >= 4
