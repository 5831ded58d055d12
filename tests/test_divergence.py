"""Divergence is a result, not a crash: a diverging run is frozen at its last state before it.

Contract (:func:`iterlin.training.commit_step`, through which every step function commits once:
:func:`iterlin.training.make_step`, :func:`iterlin.solvers.gauss_newton.make_gauss_newton_step` with either
filter, and with :func:`iterlin.relin.until_solved`, the Adam-solved step): at step t the loss is L(θ_t); if it is not
finite or its magnitude exceeds :func:`iterlin.training.divergence_bound` (√ of the dtype's largest
finite value), or the update it produces is not finite, the run is frozen at that state (θ_t, θ_s,
optimizer state, policy), ``diverged`` becomes True and ``diverged_step`` = t. Training stops at the next
evaluation point once every run has diverged; in a sweep the other runs continue unaffected.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from iterlin.training import divergence_bound, train, train_sweep
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
    # whose loss is not finite or beyond the divergence bound.
    w, iterates = jnp.zeros((3, 1)), []
    for _ in range(steps):
        iterates.append(w)
        if not abs(float(_mse(w, x, y))) <= divergence_bound(jnp.float32):
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
    bound = divergence_bound(jnp.float32)
    assert np.all(np.abs(history["net_train_loss"][:-1]) <= bound)
    assert not np.abs(history["net_train_loss"][-1]) <= bound  # the frozen θ_t*'s loss: beyond the bound


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


# ----------------------------------------------------------------------------------------------
# Every kind of step commits through the one guard: an overflowing update freezes the whole run
# ----------------------------------------------------------------------------------------------

_HUGE = 3e38  # finite in float32 (max ≈ 3.4e38); times anything > 1.2 it overflows
_N, _B = 16, 4  # 4 mini-batches per epoch
_BAD = 5  # the example whose Jacobian is enormous


def _scaled_jacobian(params, x):
    """f(θ, x) = x[:, :3] w, but with Jacobian x[:, 3] · x[:, :3]: the value is always the linear
    model's (finite), the derivative of example n is scaled by the flag x[n, 3] (1 except one example)."""
    lin = x[:, :3] @ params["w"]
    return lin + (x[:, 3:] - 1.0) * (lin - jax.lax.stop_gradient(lin))


def _overflow_problem():
    """Data where the step that first meets example _BAD proposes non-finite parameters, while the
    loss at θ_t stays finite (θ_t = θ_s there: every step below re-linearises); and the batch key
    such that this happens mid-run, at step t* ≥ 2 of the first epoch."""
    from iterlin.training import make_batch_fn

    feats = jax.random.normal(jax.random.PRNGKey(3), (_N, 3)).at[_BAD].set(3.0)
    flag = jnp.ones((_N, 1)).at[_BAD].set(_HUGE)
    x = jnp.concatenate([feats, flag], axis=1)
    y = feats @ jnp.asarray([[1.0], [2.0], [3.0]])
    for seed in range(50):
        key = jax.random.PRNGKey(seed)
        batch_fn = make_batch_fn(x, y, _B, key)
        t_star = next(t for t in range(_N // _B) if bool(jnp.any(batch_fn(t)[0][:, 3] == _HUGE)))
        if t_star >= 2:
            return x, y, key, batch_fn, t_star
    raise AssertionError("no key puts the bad example mid-epoch")


def _step_kinds(x, y):
    """(name, step_fn, fresh state) for every kind of step function in the library."""
    from iterlin.solvers.gauss_newton import init_gauss_newton_state, make_gauss_newton_step
    from iterlin.relin import until_solved
    from iterlin.training import init_state, make_step

    params = {"w": jnp.zeros((3, 1))}
    sgd = optax.sgd(0.05, momentum=0.9)
    adam = optax.adam(1e-2)
    solved = until_solved(target_acc=None, check_every=1, plateau_tol=0.0, max_period=1)
    return [
        ("linearised SGD", make_step(_scaled_jacobian, sgd, "mse"), init_state(params, sgd, 1)),
        ("Gauss-Newton damped", make_gauss_newton_step(_scaled_jacobian, step_size=0.5),
         init_gauss_newton_state(params, 0.1)),
        ("Gauss-Newton flow", make_gauss_newton_step(_scaled_jacobian, filter="flow"),
         init_gauss_newton_state(params, 1.0, filter="flow")),
        ("Adam-solved", make_step(_scaled_jacobian, adam, "mse", reset_optimizer=True, policy=solved),
         init_state(params, adam, solved, steps=16)),
    ]


def _same(a, b) -> bool:
    la, ta = jax.tree.flatten(a)
    lb, tb = jax.tree.flatten(b)
    return ta == tb and all(np.array_equal(np.asarray(u), np.asarray(v), equal_nan=True) for u, v in zip(la, lb))


@pytest.mark.parametrize("kind", range(4), ids=["sgd", "gn-damped", "gn-flow", "adam-solved"])
def test_every_step_kind_freezes_an_overflowing_update_at_the_last_finite_state(kind):
    from iterlin.training import fit

    x, y, key, batch_fn, t_star = _overflow_problem()
    name, step_fn, state0 = _step_kinds(x, y)[kind]
    kw = dict(loss="mse", batch_size=_B, key=key, eval_steps=[])

    before, h_before = fit(step_fn, state0, _scaled_jacobian, (x, y), steps=t_star, **kw)
    assert not bool(h_before["diverged"]) and _finite(before.params), name
    data = ((x, y),) if getattr(step_fn, "takes_data", False) else ()  # the Adam-solved check reads (x, y)
    value = jax.jit(step_fn)(before, batch_fn(t_star), *data)[1]["loss"]
    assert np.isfinite(float(value)), f"{name}: the loss at θ_t* must be finite (an overflowing update, not a NaN loss)"

    after, h_after = fit(step_fn, state0, _scaled_jacobian, (x, y), steps=t_star + 4, **kw)  # 3 steps past it
    assert bool(after.diverged) and int(after.diverged_step) == t_star, name
    assert bool(h_after["diverged"]) and int(h_after["diverged_step"]) == t_star
    assert int(after.step) == t_star + 4
    assert type(after) is type(state0), name  # each algorithm's own state (TrainState, GaussNewtonState)
    kept = [f for f in after._fields if f not in ("step", "diverged", "diverged_step")] + ["params_s", "n_relin", "K"]
    for field in dict.fromkeys(kept):
        assert _same(getattr(after, field), getattr(before, field)), f"{name}: {field} moved after the divergence"
    assert _finite(after.params) and _finite(after.params_s)
    assert int(after.n_relin) == t_star  # every step before t* re-linearised, none after


# ----------------------------------------------------------------------------------------------
# A loss that explodes but stays finite (Fig. 9's float64 runs at RMSE 1e128): diverged, with its step
# ----------------------------------------------------------------------------------------------


def _explosion_step(dtype):
    """The first t at which ½·100^t, the loss of the runs below, exceeds √(max) of ``dtype``."""
    return next(t for t in range(400) if 0.5 * 100.0**t > float(jnp.finfo(dtype).max) ** 0.5)


@pytest.mark.parametrize("precision", ["float32", "float64"])
def test_a_finite_but_exploding_loss_is_divergence_with_its_step(precision, request):
    # f(w, x) = x w, x = 1, y = 0, loss ½w², SGD at lr 11: w ← −10 w, so L(θ_t) = ½·100^t. It passes
    # √(max) at t* (78 in float64, 10 in float32) and stays finite until 154 (resp. 19).
    if precision == "float64":
        request.getfixturevalue("x64")
    dtype = jnp.dtype(precision)
    t_star = _explosion_step(dtype)
    steps = t_star + 5
    assert np.isfinite(np.asarray(0.5 * 100.0**steps, dtype)), "the loss stays finite over the whole run"
    x, y = jnp.ones((1, 1), dtype), jnp.zeros((1, 1), dtype)
    params0 = {"w": jnp.ones((1, 1), dtype)}
    params, history = train(_linear, params0, (x, y), K=1, steps=steps, optimizer=optax.sgd(11.0), loss="mse",
                            eval_every=1)
    assert bool(history["diverged"]) and int(history["diverged_step"]) == t_star
    assert params["w"].dtype == dtype
    np.testing.assert_allclose(float(params["w"][0, 0]), (-10.0) ** t_star, rtol=1e-5)  # frozen at θ_t*
    loss = np.asarray(history["net_train_loss"], np.float64)
    assert np.all(np.isfinite(loss)) and loss[-1] > divergence_bound(dtype)


def test_fig9_like_gauss_newton_runs_whose_rmse_explodes_are_marked_diverged(x64):
    # Damped Gauss–Newton with λ = 0 and step size 11 on f(w, x) = x w, J = I: r ← −10 r. The RMSE grows
    # to 10^{t} (10^128 and beyond in float64) without ever becoming infinite in the run's 100 steps.
    from iterlin.solvers.gauss_newton import gauss_newton_train

    x, y = jnp.eye(3, dtype=jnp.float64), jnp.zeros((3, 1), jnp.float64)
    params = tree_stack([{"w": jnp.ones((3, 1), jnp.float64)}] * 2)
    _, h = gauss_newton_train(_linear, params, (x, y), damping=[0.0, 0.0], step_size=11.0, steps=100, loss="mse",
                              eval_every=10)
    assert h["diverged"].tolist() == [True, True]
    assert h["diverged_step"].tolist() == [_explosion_step(jnp.float64)] * 2
    rmse = np.asarray(h["net_train_rmse"], np.float64)
    assert np.all(np.isfinite(rmse)) and rmse.max() > 1e77
