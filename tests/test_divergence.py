"""Divergence is a result, not a crash: a non-finite run is frozen at its last finite parameters.

Contract (:func:`iterlin.training.make_step`, :func:`iterlin.training.fit`): at step t the loss is
L(θ_t); if it (or the update it produces) is not finite, the run is frozen at θ_t, the last finite
iterate, ``diverged`` becomes True and ``diverged_step`` = t. Training stops at the next evaluation
point once every run has diverged; in a sweep the other runs continue unaffected.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from iterlin.training import train, train_sweep
from iterlin.tree import tree_index, tree_stack


def _linear(params, x):
    return x @ params["w"]


def _data(n=8, d=3, scale=1.0):
    x = scale * jax.random.normal(jax.random.PRNGKey(1), (n, d))
    return x, x @ jnp.arange(1.0, d + 1.0)[:, None]


def _mse(w, x, y):
    return jnp.mean(0.5 * jnp.sum((x @ w - y) ** 2, axis=-1))


def _finite(tree):
    return all(bool(jnp.all(jnp.isfinite(leaf))) for leaf in jax.tree.leaves(tree))


def test_huge_learning_rate_diverges_and_keeps_the_last_finite_parameters():
    x, y = _data()
    lr, steps, every = 10.0, 60, 5
    # Plain gradient descent (K = 1 on a linear model is exactly that): find the first iterate θ_t
    # whose loss is not finite.
    w, iterates = jnp.zeros((3, 1)), []
    for _ in range(steps):
        iterates.append(w)
        if not jnp.isfinite(_mse(w, x, y)):
            break
        w = w - lr * jax.grad(_mse)(w, x, y)
    t_star = len(iterates) - 1
    assert 2 < t_star < steps - every, "the set-up must diverge mid-run"
    assert _finite(iterates[t_star])

    params, history = train(_linear, {"w": jnp.zeros((3, 1))}, (x, y), K=1, steps=steps,
                            optimizer=optax.sgd(lr), loss="mse", eval_every=every)
    assert bool(history["diverged"]) is True
    assert int(history["diverged_step"]) == t_star
    assert _finite(params)
    np.testing.assert_allclose(params["w"], iterates[t_star], rtol=1e-4)
    # Stopped at the first evaluation point after the divergence, which is recorded there.
    first_check = -(-(t_star + 1) // every) * every
    assert history["step"][-1] == first_check
    assert np.all(np.isfinite(history["net_train_loss"][:-1]))
    assert not np.isfinite(history["net_train_loss"][-1])


def test_model_with_non_finite_output_is_frozen_at_its_initial_parameters():
    x, y = _data()
    params0 = {"w": jnp.ones((3, 1))}
    params, history = train(lambda p, x: _linear(p, x) * jnp.inf, params0, (x, y), K=2, steps=20,
                            optimizer=optax.adam(1e-2), loss="mse", eval_every=4)
    assert bool(history["diverged"]) and int(history["diverged_step"]) == 0
    assert np.array_equal(params["w"], params0["w"])
    assert list(history["step"]) == [0, 4]


def test_an_update_that_overflows_does_not_leave_infinite_parameters():
    # The loss at θ_0 is finite, but lr · ∇L overflows float32: θ_1 = ±inf. The run must keep θ_0
    # (the last finite iterate), not θ_1.
    x, y = _data(scale=10.0)
    params0 = {"w": jnp.ones((3, 1))}
    assert jnp.isfinite(_mse(params0["w"], x, y))
    params, history = train(_linear, params0, (x, y), K=1, steps=10, optimizer=optax.sgd(1e37),
                            loss="mse", eval_every=1)
    assert bool(history["diverged"])
    assert _finite(params), f"diverged run left non-finite parameters {params}"
    assert np.array_equal(params["w"], params0["w"])
    assert int(history["diverged_step"]) == 0


def _bilinear(params, x):
    """f(θ, x) = (x W) v: its curvature grows with ‖θ‖², so a ×10³ initialisation diverges."""
    return (x @ params["W"]) @ params["v"]


def _bilinear_init(seed, scale=1.0):
    k1, k2 = jax.random.split(jax.random.PRNGKey(seed))
    return {"W": scale * 0.3 * jax.random.normal(k1, (3, 4)), "v": scale * 0.3 * jax.random.normal(k2, (4, 1))}


def test_sweep_with_one_diverging_run_continues_the_other(x64):
    x, y = _data()
    stable, unstable = _bilinear_init(0), _bilinear_init(1, scale=1e3)
    kw = dict(steps=30, optimizer=optax.sgd(0.01), loss="mse", eval_every=5)
    params, history = train_sweep(_bilinear, tree_stack([stable, unstable]), (x, y), K=[3, 3], **kw)

    assert history["diverged"].tolist() == [False, True]
    assert history["diverged_step"][0] == -1 and 0 <= history["diverged_step"][1] < 25
    assert list(history["step"]) == list(range(0, 31, 5)), "the sweep is not stopped by one run"
    assert _finite(params)

    for run, init in enumerate([stable, unstable]):
        alone_params, alone = train(_bilinear, init, (x, y), K=3, **kw)
        assert bool(alone["diverged"]) == bool(history["diverged"][run])
        assert int(alone["diverged_step"]) == int(history["diverged_step"][run])
        for got, want in zip(jax.tree.leaves(tree_index(params, run)), jax.tree.leaves(alone_params)):
            np.testing.assert_allclose(got, want, rtol=1e-10, atol=1e-12)
        if run == 0:  # the stable run's whole history equals the run alone
            for k in ("net_train_loss", "lin_train_loss", "n_relin"):
                np.testing.assert_allclose(history[k][run], alone[k], rtol=1e-10, atol=1e-12)
        assert _finite(alone_params)


def test_rerunning_a_diverged_run_from_its_checkpoint_returns_the_same_result(tmp_path):
    x, y = _data()
    kw = dict(K=1, steps=60, optimizer=optax.sgd(10.0), loss="mse", eval_every=5, checkpoint=tmp_path / "c.npz")
    params, history = train(_linear, {"w": jnp.zeros((3, 1))}, (x, y), **kw)
    assert bool(history["diverged"]) and history["step"][-1] < 60
    params2, history2 = train(_linear, {"w": jnp.zeros((3, 1))}, (x, y), **kw)
    assert np.array_equal(params2["w"], params["w"])
    assert sorted(history2) == sorted(history)
    for k in history:
        assert np.array_equal(history2[k], history[k], equal_nan=True), (k, history[k], history2[k])


@pytest.mark.parametrize("value", [np.nan, np.inf])
def test_non_finite_targets_diverge_at_step_zero(value):
    x, y = _data()
    params0 = {"w": jnp.zeros((3, 1))}
    params, history = train(_linear, params0, (x, y.at[3, 0].set(value)), K=1, steps=6,
                            optimizer=optax.sgd(0.1), loss="mse", eval_every=3)
    assert bool(history["diverged"]) and int(history["diverged_step"]) == 0
    assert np.array_equal(params["w"], params0["w"])
