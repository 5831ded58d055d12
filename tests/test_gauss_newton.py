"""Damped Gauss–Newton (Eq. 5–6): every solver against an independent dense route."""

from __future__ import annotations

import dataclasses
import math
import re
from functools import partial

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from jax.flatten_util import ravel_pytree

from iterlin.solvers.closed_form import gradient_flow_limit, gradient_flow_params
from iterlin.solvers.gauss_newton import (
    CG_RESIDUAL_SLACK,
    CGConvergenceWarning,
    KERNEL_MAX_OUTPUTS,
    conjugate_gradient,
    flat_jacobian,
    gauss_newton_step,
    gauss_newton_train,
    GaussNewtonState,
    init_gauss_newton_state,
    make_gauss_newton_step,
    select_solver,
)
from iterlin.training import fit, train
from iterlin.tree import tree_index, tree_stack


class MLP(nn.Module):
    out: int = 1
    width: int = 8
    depth: int = 2

    @nn.compact
    def __call__(self, x):
        for _ in range(self.depth):
            x = nn.tanh(nn.Dense(self.width)(x))
        return nn.Dense(self.out)(x)


def _init(model, x, seed):
    """Parameters of ``model`` drawn with NumPy (LeCun-normal weights, small biases): no JAX RNG compiles."""
    rng = np.random.default_rng(seed)
    shapes = jax.eval_shape(model.init, jax.random.PRNGKey(0), x)

    def draw(leaf):
        scale = 1.0 / math.sqrt(leaf.shape[0]) if len(leaf.shape) == 2 else 0.1
        return jnp.asarray(rng.normal(size=leaf.shape) * scale, x.dtype)

    return jax.tree.map(draw, shapes)


def _setup(n=6, d=3, out=2, seed=0, dtype=jnp.float64):
    """A tiny tanh MLP (2 hidden layers of 8; P = 122 for out = 2) and a random regression/classification batch."""
    model = MLP(out=out)
    rng = np.random.default_rng(100 + seed)
    x = jnp.asarray(rng.normal(size=(n, d)), dtype)
    params = _init(model, x, seed)
    y_reg = jnp.asarray(rng.normal(size=(n, out)), dtype)
    y_cls = jnp.asarray(rng.integers(0, out, size=n), jnp.int32)
    return model.apply, params, x, y_reg, y_cls


def _flat(tree):
    return np.asarray(ravel_pytree(tree)[0])


@partial(jax.jit, static_argnums=0)
def _jacfwd(apply_fn, params, x):
    flat, unravel = ravel_pytree(params)
    return jax.jacfwd(lambda p: apply_fn(unravel(p), x))(flat)  # (N, O, P)


def _dense_jacobian(apply_fn, params, x):
    """Full-batch forward-mode Jacobian (a different route from the per-example reverse mode)."""
    flat, unravel = ravel_pytree(params)
    jac = _jacfwd(apply_fn, params, x)
    return np.asarray(jac.reshape(-1, flat.size)), np.asarray(flat), unravel


def _summed_loss(loss, y):
    if loss == "mse":
        return lambda f: 0.5 * jnp.sum((f - y) ** 2)
    return lambda f: -jnp.sum(jnp.take_along_axis(jax.nn.log_softmax(f), y[:, None], axis=1))


@partial(jax.jit, static_argnums=0)
def _grad_hess(loss, out, y):
    """g = ∂L/∂f and H = ∂²L/∂f² of the summed loss by autodiff (not the library's formulas)."""
    total = _summed_loss(loss, y)
    g = jax.grad(total)(out).reshape(-1)
    return g, jax.hessian(total)(out).reshape(g.size, g.size)


def _dense_gn(apply_fn, params, x, y, lam, loss):
    """θ − (JᵀHJ + λI)⁻¹Jᵀg, all dense."""
    J, flat, _ = _dense_jacobian(apply_fn, params, x)
    g, H = (np.asarray(a) for a in _grad_hess(loss, apply_fn(params, x), y))
    A = J.T @ H @ J + lam * np.eye(J.shape[1])
    return flat - np.linalg.solve(A, J.T @ g), J


@pytest.mark.parametrize("damping_mode", ["absolute", "relative"])
def test_solvers_agree_with_dense_mse(x64, damping_mode):
    apply_fn, params, x, y, _ = _setup(out=2)
    d = 0.3
    J, _, _ = _dense_jacobian(apply_fn, params, x)
    lam = d if damping_mode == "absolute" else d * np.mean(np.diag(J @ J.T))
    expected, _ = _dense_gn(apply_fn, params, x, y, lam, "mse")
    for solver in ("kernel", "kernel_cg", "primal_cg", "auto"):  # auto = kernel here (no extra compile)
        got = gauss_newton_step(apply_fn, params, x, y, damping=d, damping_mode=damping_mode, solver=solver)
        np.testing.assert_allclose(_flat(got), expected, rtol=1e-9, atol=1e-9, err_msg=solver)


@pytest.mark.parametrize("damping_mode", ["absolute", "relative"])
def test_solvers_agree_with_dense_ce(x64, damping_mode):
    apply_fn, params, x, _, y = _setup(n=6, out=3, seed=1)
    d = 0.2
    J, _, _ = _dense_jacobian(apply_fn, params, x)
    lam = d if damping_mode == "absolute" else d * np.mean(np.diag(J @ J.T))
    expected, _ = _dense_gn(apply_fn, params, x, y, lam, "ce")
    for solver in ("kernel", "primal_cg", "auto"):
        got = gauss_newton_step(apply_fn, params, x, y, damping=d, damping_mode=damping_mode, solver=solver,
                                loss="ce")
        np.testing.assert_allclose(_flat(got), expected, rtol=1e-9, atol=1e-9, err_msg=solver)


def test_ce_zero_damping_is_minimum_norm_ggn_step(x64):
    """λ = 0 with cross-entropy (H singular): the minimum-norm solution −(JᵀHJ)⁺Jᵀg."""
    apply_fn, params, x, _, y = _setup(n=6, out=3, seed=2)
    J, flat, _ = _dense_jacobian(apply_fn, params, x)
    g, H = (np.asarray(a) for a in _grad_hess("ce", apply_fn(params, x), y))
    expected = flat - np.linalg.pinv(J.T @ H @ J, rcond=1e-10, hermitian=True) @ (J.T @ g)
    got = gauss_newton_step(apply_fn, params, x, y, damping=0.0, loss="ce", solver="kernel")
    np.testing.assert_allclose(_flat(got), expected, rtol=1e-7, atol=1e-7)


def test_jacobian_is_example_major(x64):
    apply_fn, params, x, _, _ = _setup(out=2)
    J_dense, _, _ = _dense_jacobian(apply_fn, params, x)
    np.testing.assert_allclose(np.asarray(flat_jacobian(apply_fn, params, x)), J_dense, rtol=1e-12, atol=1e-12)


def test_zero_damping_is_eq19_min_norm(x64):
    """Over-parameterised (N·O < P): λ = 0 (and λ → 0) gives θ_s − Jᵀ(JJᵀ)⁻¹(f − Y) = θ_s − J⁺(f − Y)."""
    apply_fn, params, x, y, _ = _setup(n=6, out=2)
    J, flat, _ = _dense_jacobian(apply_fn, params, x)
    assert J.shape[0] < J.shape[1]
    r = np.asarray(apply_fn(params, x) - y).reshape(-1)
    expected = flat - np.linalg.lstsq(J, r, rcond=None)[0]  # minimum-norm least squares (SVD route)
    for solver, lam, tol in (("kernel", 0.0, 1e-8), ("kernel_cg", 0.0, 1e-7), ("kernel", 1e-10, 1e-7)):
        got = gauss_newton_step(apply_fn, params, x, y, damping=lam, solver=solver)
        np.testing.assert_allclose(_flat(got), expected, rtol=tol, atol=tol, err_msg=f"{solver} {lam}")
    # and the linearised model interpolates the targets
    delta = _flat(gauss_newton_step(apply_fn, params, x, y, damping=0.0, solver="kernel")) - flat
    np.testing.assert_allclose(r + J @ delta, 0.0, atol=1e-8)


def test_damped_step_is_ridge_solution(x64):
    """Eq. 6 = argmin_θ ½‖f_lin(θ) − Y‖² + (λ/2)‖θ − θ_s‖² (augmented least squares, not the normal equations)."""
    apply_fn, params, x, y, _ = _setup(n=6, out=2, seed=3)
    J, flat, _ = _dense_jacobian(apply_fn, params, x)
    r = np.asarray(apply_fn(params, x) - y).reshape(-1)
    for lam in (1e-3, 0.7, 25.0):
        A = np.vstack([J, math.sqrt(lam) * np.eye(J.shape[1])])
        b = np.concatenate([-r, np.zeros(J.shape[1])])
        delta = np.linalg.lstsq(A, b, rcond=None)[0]
        got = gauss_newton_step(apply_fn, params, x, y, damping=lam, solver="kernel")
        np.testing.assert_allclose(_flat(got), flat + delta, rtol=1e-9, atol=1e-9)
        half = gauss_newton_step(apply_fn, params, x, y, damping=lam, solver="kernel", step_size=0.5)
        np.testing.assert_allclose(_flat(half), flat + 0.5 * delta, rtol=1e-9, atol=1e-9)


def test_float32_and_pytree_structure_preserved():
    apply_fn, params, x, y, _ = _setup(dtype=jnp.float32)
    new = gauss_newton_step(apply_fn, params, x, y, damping=1.0)
    assert jax.tree.structure(new) == jax.tree.structure(params)
    for a, b in zip(jax.tree.leaves(new), jax.tree.leaves(params)):
        assert a.dtype == jnp.float32 and a.shape == b.shape
    assert np.all(np.isfinite(_flat(new)))


def test_select_solver_rule():
    assert select_solver(20, 10_000) == "kernel"
    assert select_solver(KERNEL_MAX_OUTPUTS + 1, 100) == "primal_cg"  # P ≤ N·O: CG in parameter space
    assert select_solver(10_000, 10**6) == "kernel_cg"  # N·O < P: CG in kernel space
    assert select_solver(10_000, 10**6, "ce") == "primal_cg"  # CE: kernel system not symmetric
    assert select_solver(4000, 10**6) == "kernel_cg"  # J would be too large to materialise


def test_large_K_training_approaches_gauss_newton_step(x64):
    """K = ∞, many small full-batch GD steps on the linearisation → the λ = 0 (min-norm) GN step."""
    apply_fn, params, x, y, _ = _setup(n=6, out=2, seed=4)
    n = x.shape[0]
    target = _flat(gauss_newton_step(apply_fn, params, x, y, damping=0.0, solver="kernel"))
    J, _, _ = _dense_jacobian(apply_fn, params, x)
    sigma = np.linalg.eigvalsh(J @ J.T)
    lr = n / sigma.max()  # η = lr/N = 1/σ_max on the summed loss: stable, fastest safe step
    steps = int(15 * sigma.max() / sigma.min())  # error ∝ (1 − σ_min/σ_max)^t ≈ e^{−15} at the end
    assert steps < 30_000, steps

    def distance(step, state):
        return {"dist": float(np.linalg.norm(_flat(state.params) - target))}

    final, hist = train(apply_fn, params, (x, y), K=math.inf, steps=steps, optimizer=optax.sgd(lr), loss="mse",
                        batch_size=None, eval_steps=[steps // 8, steps // 4, steps // 2], callback=distance)
    dist = np.asarray(hist["dist"])
    assert np.all(np.diff(dist) < 0), dist
    assert dist[-1] < 1e-5 * dist[0], dist
    np.testing.assert_allclose(_flat(final), target, atol=1e-5 * dist[0])
    assert int(hist["n_relin"][-1]) == 0


def _quintic_toy(dtype=jnp.float64):
    x = jnp.linspace(-2.0, 2.0, 20, dtype=dtype)[:, None]
    y = x**5 / 32 - x**3 / 2 + 2 * x - 1
    model = MLP(out=1, width=10, depth=2)
    return model.apply, _init(model, x, 5), x, y


def test_gauss_newton_train_equals_repeated_steps(x64):
    apply_fn, params, x, y = _quintic_toy()
    kw = dict(damping=0.05, step_size=0.8, damping_mode="relative")
    steps = 3
    final, hist = gauss_newton_train(apply_fn, params, (x, y), steps=steps, eval_every=1, **kw)
    p = params
    losses = []
    for _ in range(steps):
        losses.append(float(np.mean(0.5 * np.sum((np.asarray(apply_fn(p, x)) - np.asarray(y)) ** 2, -1))))
        p = gauss_newton_step(apply_fn, p, x, y, **kw)
    losses.append(float(np.mean(0.5 * np.sum((np.asarray(apply_fn(p, x)) - np.asarray(y)) ** 2, -1))))
    np.testing.assert_allclose(_flat(final), _flat(p), rtol=1e-10, atol=1e-10)
    np.testing.assert_allclose(hist["net_train_loss"], losses, rtol=1e-10)
    np.testing.assert_allclose(hist["lin_train_loss"], losses, rtol=1e-10)  # θ_s = θ after each GN step
    assert list(hist["n_relin"]) == [0, 1, 2, 3]
    assert losses[-1] < losses[0]
    assert not bool(hist["diverged"])


def test_gauss_newton_step_fn_contract_and_freezing(x64):
    apply_fn, params, x, y = _quintic_toy()
    step = jax.jit(make_gauss_newton_step(apply_fn))
    state = init_gauss_newton_state(params, 1.0)
    assert float(state.h) == 1.0 and state.h.shape == ()
    state1, m = step(state, (x, y))
    assert isinstance(state1, GaussNewtonState) and float(state1.h) == 1.0
    assert int(state1.step) == 1 and int(state1.n_relin) == 1
    assert _flat(state1.params_s).tolist() == _flat(state1.params).tolist()
    np.testing.assert_allclose(float(m["loss"]), np.mean(0.5 * (np.asarray(apply_fn(params, x)) - np.asarray(y)) ** 2))
    bad = y.at[0, 0].set(jnp.nan)
    state2, m2 = step(state1, (x, bad))
    assert not np.isfinite(float(m2["loss"]))
    assert bool(state2.diverged) and int(state2.diverged_step) == 1 and int(state2.n_relin) == 1
    np.testing.assert_array_equal(_flat(state2.params), _flat(state1.params))
    state3, _ = step(state2, (x, y))  # stays frozen
    assert bool(state3.diverged) and int(state3.diverged_step) == 1
    np.testing.assert_array_equal(_flat(state3.params), _flat(state1.params))


def test_gauss_newton_step_refuses_a_bad_h_or_another_state_naming_it(x64):
    """h must be one run's scalar (a non-scalar h, e.g. a stacked state stepped without vmap, is refused while
    tracing, naming state.h); a TrainState is refused, naming GaussNewtonState; a non-scalar damping given to
    the factory without stacked=True is refused naming damping."""
    from iterlin.training import init_state

    apply_fn, params, x, y = _quintic_toy()
    step = make_gauss_newton_step(apply_fn)
    state = init_gauss_newton_state(params, 1.0)
    for bad in (jnp.asarray([1.0, 2.0]), 1.0):
        with pytest.raises(ValueError, match=r"state\.h=.* is not allowed: .*a scalar array"):
            step(state._replace(h=bad), (x, y))
    stacked = init_gauss_newton_state(tree_stack([params] * 2), [1.0, 2.0], stacked=True)
    with pytest.raises(ValueError, match=r"state\.h="):
        jax.jit(step)(stacked, (x, y))
    with pytest.raises(TypeError, match="TrainState.*GaussNewtonState.*init_gauss_newton_state"):
        step(init_state(params, optax.sgd(0.1), 1, policy=jnp.asarray(1.0)), (x, y))
    for bad in ([1.0, 2.0], np.ones((2, 2)), jnp.asarray([0.5])):
        with pytest.raises(ValueError, match="damping="):
            init_gauss_newton_state(params, bad)


@pytest.mark.parametrize(
    "kwargs, name",
    [
        (dict(damping=-1.0), "damping"),
        (dict(damping=float("nan")), "damping"),
        (dict(damping=float("inf")), "damping"),
        (dict(damping="1"), "damping"),
        (dict(damping=1.0, solver="foo"), "solver"),
        (dict(damping=1.0, damping_mode="foo"), "damping_mode"),
        (dict(damping=1.0, loss="hinge"), "loss"),
        (dict(damping=1.0, step_size=0.0), "step_size"),
        (dict(damping=1.0, cg_tol=-1e-3), "cg_tol"),
        (dict(damping=1.0, cg_maxiter=0), "cg_maxiter"),
        (dict(damping=1.0, filter="newton"), "filter"),
        (dict(damping=1.0, loss="ce", solver="kernel_cg"), "kernel_cg"),
        (dict(damping=1.0, filter="flow", loss="ce"), "filter='flow'"),
        (dict(damping=1.0, filter="flow", solver="kernel_cg"), "filter='flow'"),
        (dict(damping=1.0, filter="flow", solver="primal_cg"), "filter='flow'"),
        (dict(damping=1.0, filter="flow", damping_mode="relative"), "filter='flow'"),
        (dict(damping=-1.0, filter="flow"), "damping"),
        (dict(damping=float("nan"), filter="flow"), "damping"),
        (dict(damping=-math.inf, filter="flow"), "damping"),
        (dict(damping="inf", filter="flow"), "damping"),
        (dict(damping=0.0, solver="primal_cg"), "damping=0.0"),
    ],
)
def test_bad_arguments_raise(kwargs, name):
    apply_fn, params, x, y, y_cls = _setup(dtype=jnp.float32)
    yy = y_cls if kwargs.get("loss") == "ce" else y
    with pytest.raises(ValueError, match=re.escape(name)):
        gauss_newton_step(apply_fn, params, x, yy, **kwargs)
    static = {k: v for k, v in kwargs.items() if k != "damping"}
    if name == "damping":  # the per-run value: refused by the state factory
        with pytest.raises(ValueError, match=name):
            init_gauss_newton_state(params, kwargs["damping"], filter=kwargs.get("filter", "damped"))
    elif name != "damping=0.0":  # that one depends on the problem, not only on the arguments
        with pytest.raises(ValueError, match=re.escape(name)):
            make_gauss_newton_step(apply_fn, **static)


def test_bad_data_raise():
    apply_fn, params, x, y, y_cls = _setup(dtype=jnp.float32)
    with pytest.raises(ValueError, match="leading dimension"):
        gauss_newton_step(apply_fn, params, x, y[:-1], damping=1.0)
    with pytest.raises(ValueError, match="integer class labels"):
        gauss_newton_step(apply_fn, params, x, y, damping=1.0, loss="ce")
    with pytest.raises(ValueError, match="damping"):
        gauss_newton_train(apply_fn, params, (x, y), damping=-1.0, steps=2)


# ----------------------------------------------------------------------------------------------
# The hyperparameter in GaussNewtonState.h: traced, swept, and the flow filter
# ----------------------------------------------------------------------------------------------


def _fit_gn(apply_fn, params, x, y, damping, steps, stacked, **static):
    """``fit`` with make_gauss_newton_step and init_gauss_newton_state (sweep when stacked)."""
    filt = static.get("filter", "damped")
    state = init_gauss_newton_state(params, damping, filter=filt, stacked=stacked)
    step = make_gauss_newton_step(apply_fn, **static)
    return fit(step, state, apply_fn, (x, y), steps=steps, loss=static.get("loss", "mse"), eval_steps=[],
               sweep=stacked)


@pytest.mark.parametrize("loss, damping_mode", [("mse", "absolute"), ("mse", "relative"), ("ce", "absolute")])
def test_traced_damping_in_a_sweep_equals_gauss_newton_step_per_value(x64, loss, damping_mode):
    """λ read from state.h, one compiled program for all λ: run i = gauss_newton_step with λ_i."""
    apply_fn, p0, x, y_reg, y_cls = _setup(n=6, out=3 if loss == "ce" else 2, seed=6)
    y = y_cls if loss == "ce" else y_reg
    inits = [p0, _setup(n=6, out=3 if loss == "ce" else 2, seed=7)[1], p0]
    lams = [0.0, 0.3, 5.0]
    kw = dict(loss=loss, damping_mode=damping_mode, step_size=0.8)
    state, hist = _fit_gn(apply_fn, tree_stack(inits), x, y, lams, 2, True, **kw)
    assert isinstance(state, GaussNewtonState)
    assert state.h.shape == (3,) and np.asarray(state.h).tolist() == lams
    assert hist["n_relin"][:, -1].tolist() == [2, 2, 2] and not hist["diverged"].any()
    for i, (p, lam) in enumerate(zip(inits, lams)):
        for _ in range(2):
            p = gauss_newton_step(apply_fn, p, x, y, damping=lam, **kw)
        np.testing.assert_allclose(_flat(tree_index(state.params, i)), _flat(p), rtol=1e-9, atol=1e-10,
                                   err_msg=f"λ={lam}")
        np.testing.assert_array_equal(_flat(tree_index(state.params_s, i)), _flat(tree_index(state.params, i)))


def test_flow_filter_is_gradient_flow_on_the_linearisation(x64):
    """filter="flow" with τ = closed_form.gradient_flow_params (η = 1, time τ); τ = ∞: gradient_flow_limit."""
    apply_fn, params, x, y, _ = _setup(n=6, out=2, seed=8)
    J, _, _ = _dense_jacobian(apply_fn, params, x)
    sigma = np.linalg.eigvalsh(J @ J.T)
    taus = [0.3 / sigma.max(), 3.0 / sigma.min(), math.inf]
    state, _ = _fit_gn(apply_fn, tree_stack([params] * 3), x, y, taus, 1, True, filter="flow")
    for i, tau in enumerate(taus):
        want = gradient_flow_limit(apply_fn, params, x, y) if math.isinf(tau) else \
            gradient_flow_params(apply_fn, params, x, y, tau, 1.0)
        got = tree_index(state.params, i)
        np.testing.assert_allclose(_flat(got), _flat(want), rtol=1e-9, atol=1e-10, err_msg=f"τ={tau}")
        eager = gauss_newton_step(apply_fn, params, x, y, damping=tau, filter="flow")
        np.testing.assert_allclose(_flat(eager), _flat(want), rtol=1e-9, atol=1e-10)
    # τ = ∞ is the undamped (minimum-norm) Gauss–Newton step, Eq. 5 = Eq. 19
    gn = gauss_newton_step(apply_fn, params, x, y, damping=0.0, solver="kernel")
    np.testing.assert_allclose(_flat(tree_index(state.params, 2)), _flat(gn), rtol=1e-9, atol=1e-10)
    # and α scales the flow step
    half = gauss_newton_step(apply_fn, params, x, y, damping=taus[0], filter="flow", step_size=0.5)
    full = _flat(tree_index(state.params, 0)) - _flat(params)
    np.testing.assert_allclose(_flat(half) - _flat(params), 0.5 * full, rtol=1e-9, atol=1e-12)


def test_gauss_newton_train_sweep_equals_runs_alone(x64):
    apply_fn, params, x, y = _quintic_toy()
    x_test = jnp.linspace(-1.9, 1.9, 7, dtype=x.dtype)[:, None]
    kw = dict(steps=3, step_size=0.9, eval_every=1, eval_data=(x_test, x_test**2))
    lams = [1e-3, 10.0]
    swept, hist = gauss_newton_train(apply_fn, tree_stack([params] * 2), (x, y), damping=lams, **kw)
    assert hist["net_train_rmse"].shape == (2, 4) and hist["step"].shape == (4,)
    for i, lam in enumerate(lams):
        alone, h = gauss_newton_train(apply_fn, params, (x, y), damping=lam, **kw)
        np.testing.assert_allclose(_flat(tree_index(swept, i)), _flat(alone), rtol=1e-10, atol=1e-12)
        for k in ("net_train_loss", "net_test_rmse", "lin_train_loss", "n_relin"):
            np.testing.assert_allclose(hist[k][i], h[k], rtol=1e-10, atol=1e-12, err_msg=k)
    # the same with the flow filter (τ per run; τ = ∞, undamped, is too ill-conditioned over 3 steps
    # of this toy to compare batched and unbatched eigensolvers to 1e-10)
    swept, _ = gauss_newton_train(apply_fn, tree_stack([params] * 2), (x, y), damping=[0.5, 5.0],
                                  filter="flow", **kw)
    alone, _ = gauss_newton_train(apply_fn, params, (x, y), damping=5.0, filter="flow", **kw)
    np.testing.assert_allclose(_flat(tree_index(swept, 1)), _flat(alone), rtol=1e-10, atol=1e-12)


class _Recorder:
    def __init__(self, apply_fn):
        self.apply_fn, self.calls = apply_fn, 0

    def __call__(self, params, x):
        self.calls += 1
        return self.apply_fn(params, x)


@pytest.mark.parametrize(
    "kwargs, fragment",
    [
        (dict(damping=-1), "damping=-1 "),
        (dict(damping=math.nan), "damping=nan"),
        (dict(damping="0.1"), "damping='0.1'"),
        (dict(damping=[0.1, -2.0]), "damping[1]=-2.0"),
        (dict(damping=[0.1, math.inf]), "damping[1]=inf"),
        (dict(damping=[0.1, -1.0], filter="flow"), "damping[1]=-1.0"),
        (dict(damping=-0.5, filter="flow"), "damping=-0.5"),
        (dict(damping=[]), "damping=[]"),
        (dict(damping=[0.1, 0.2, 0.3]), "len(damping)=3"),
        (dict(damping=0.1, filter="newton"), "filter='newton'"),
        (dict(damping=0.1, sweep=True), "sweep=True"),
        (dict(damping=0.0, solver="primal_cg"), "damping=0.0"),
        (dict(damping=[0.1, 0.0], solver="primal_cg"), "damping=0.0"),
    ],
)
def test_gauss_newton_train_refuses_bad_values_before_any_compute(kwargs, fragment):
    apply_fn, params, x, y, _ = _setup(dtype=jnp.float32)  # P = 122 > N·O = 12: primal CG singular at λ = 0
    recorder = _Recorder(apply_fn)
    stacked = tree_stack([params] * 2) if isinstance(kwargs["damping"], list) else params
    with pytest.raises(ValueError) as info:
        gauss_newton_train(recorder, stacked, (x, y), steps=2, **kwargs)
    assert fragment in str(info.value), str(info.value)
    # at most a shape-only trace (traced once more on the CPU by the convolution lowering, conv="auto")
    assert recorder.calls <= (2 if fragment == "damping=0.0" else 0)


def test_init_gauss_newton_state_values_and_stacking():
    _, params, _, _, _ = _setup(dtype=jnp.float32)
    st = init_gauss_newton_state(params, 0.25)
    assert type(st) is GaussNewtonState and st._fields == ("params", "step", "diverged", "diverged_step", "h",
                                                          "cg_residual")
    assert float(st.cg_residual) == 0.0
    assert st.h.shape == () and float(st.h) == 0.25 and st.h.dtype == jnp.result_type(float)
    assert int(st.step) == 0 and int(st.n_relin) == 0 and int(st.K) == 1
    assert not bool(st.diverged) and int(st.diverged_step) == -1 and st.params_s is st.params
    st = init_gauss_newton_state(params, math.inf, filter="flow")
    assert float(st.h) == math.inf
    st = init_gauss_newton_state(tree_stack([params] * 2), (0.0, 2.0), stacked=True)
    assert type(st) is GaussNewtonState and st.h.shape == (2,) and st.step.shape == (2,)
    assert st.K.tolist() == [1, 1] and st.n_relin.tolist() == [0, 0]
    with pytest.raises(ValueError, match="stacked"):
        init_gauss_newton_state(params, [1.0], stacked="yes")
    with pytest.raises(ValueError, match="sequence"):
        init_gauss_newton_state(tree_stack([params] * 2), 1.0, stacked=True)
    with pytest.raises(ValueError, match="leading run axis"):
        init_gauss_newton_state(params, [1.0, 2.0], stacked=True)


def test_a_vmapped_primal_cg_sweep_of_the_cnn_equals_its_runs_one_by_one():
    """The sweep of damped GN steps (primal CG) on the paper's CNN, vmapped over two runs, equals the same
    runs stepped one after the other. With ``conv="matmul"`` (the CPU's default), jax's CG (which
    computes r₀ = b − A·0) returned δ = 0 here on XLA:CPU: A·0 came out NaN under vmap."""
    from iterlin.models import make_model

    model = make_model("cnn", jax.random.PRNGKey(0), conv="matmul")
    x = jax.random.normal(jax.random.PRNGKey(1), (32, 32, 32, 3))
    y = jax.random.randint(jax.random.PRNGKey(2), (32,), 0, 10)
    runs = dict(damping=[1280.0, 365.7], steps=1, loss="ce", solver="primal_cg", cg_maxiter=10, eval_steps=[0, 1])
    stacked = tree_stack([model.params] * 2)
    vmapped, _ = gauss_newton_train(model.apply_fn, stacked, (x, y), vectorise=True, **runs)
    one_by_one, _ = gauss_newton_train(model.apply_fn, stacked, (x, y), vectorise=False, **runs)
    moved = sum(float(jnp.sum(jnp.abs(a - b))) for a, b in zip(jax.tree.leaves(one_by_one), jax.tree.leaves(stacked)))
    assert moved > 0
    for a, b in zip(jax.tree.leaves(vmapped), jax.tree.leaves(one_by_one)):
        np.testing.assert_allclose(a, b, rtol=1e-3, atol=1e-5)


def _spd(key, n, dtype=jnp.float64):
    a = jax.random.normal(key, (n, n), dtype)
    return a @ a.T / n + 0.1 * jnp.eye(n, dtype=dtype)


def test_conjugate_gradient_takes_the_iterates_of_jax_cg_and_solves_the_system(x64):
    """Same iteration as jax.scipy.sparse.linalg.cg (x0 = 0, atol = 0) at every iteration cap, and the
    solution of Ax = b at convergence (float64)."""
    from jax.scipy.sparse.linalg import cg

    A = _spd(jax.random.PRNGKey(0), 12)
    b = jax.random.normal(jax.random.PRNGKey(1), (12,), jnp.float64)
    for k in (1, 3, 7):
        ours = conjugate_gradient(lambda v: A @ v, b, tol=1e-12, maxiter=k).x
        theirs, _ = cg(lambda v: A @ v, b, tol=1e-12, atol=0.0, maxiter=k)
        np.testing.assert_allclose(ours, theirs, rtol=1e-10, atol=1e-12)
    x = conjugate_gradient(lambda v: A @ v, b, tol=1e-12).x
    np.testing.assert_allclose(x, np.linalg.solve(np.asarray(A), np.asarray(b)), rtol=1e-8)


def test_conjugate_gradient_stops_at_the_tolerance_and_never_applies_the_operator_to_zero(x64):
    """It stops once ‖r‖ ≤ tol·‖b‖ (fewer products than the cap) and A is only applied to search directions."""
    A = _spd(jax.random.PRNGKey(2), 30)
    b = jax.random.normal(jax.random.PRNGKey(3), (30,), jnp.float64)
    seen = []

    def matvec(v):
        seen.append(float(jnp.linalg.norm(v)))
        return A @ v

    with jax.disable_jit():
        x = conjugate_gradient(matvec, b, tol=1e-3, maxiter=30).x
    assert 0 < len(seen) < 30
    assert min(seen) > 0
    assert float(jnp.linalg.norm(A @ x - b)) <= 1e-3 * float(jnp.linalg.norm(b)) * (1 + 1e-9)


def test_conjugate_gradient_vmapped_over_systems_equals_each_solve(x64):
    """A batch of systems stopping at different iterations gives each system's own solution."""
    As = jnp.stack([_spd(jax.random.PRNGKey(i), 10) * s for i, s in enumerate((1.0, 50.0, 0.02))])
    bs = jax.random.normal(jax.random.PRNGKey(9), (3, 10), jnp.float64)

    def solve(A, b):
        return conjugate_gradient(lambda v: A @ v, b, tol=1e-10).x

    batched = jax.jit(jax.vmap(solve))(As, bs)
    for i in range(3):
        np.testing.assert_allclose(batched[i], solve(As[i], bs[i]), rtol=1e-9, atol=1e-12)


def test_gauss_newton_config_validates_once_and_is_a_static_value():
    """The typed config: options normalised on construction (a Loss by name, the flow's solver resolved),
    equal options give equal, hashable configs (one jit cache entry), bad options raise naming the option."""
    from iterlin.solvers.gauss_newton import GaussNewtonConfig
    from iterlin.losses import get_loss

    a = GaussNewtonConfig(loss=get_loss("ce"), solver="primal_cg")
    assert a.loss == "ce" and a == GaussNewtonConfig(loss="ce", solver="primal_cg") and hash(a) == hash(
        GaussNewtonConfig(loss="ce", solver="primal_cg"))
    assert GaussNewtonConfig(filter="flow").solver == "kernel"
    assert a.record() == {"filter": "damped", "step_size": 1.0, "loss": "ce", "solver": "primal_cg",
                          "damping_mode": "absolute", "cg_tol": None, "cg_maxiter": None}
    with pytest.raises(ValueError, match="cg_maxiter"):
        GaussNewtonConfig(cg_maxiter=0)
    with pytest.raises(dataclasses.FrozenInstanceError):
        a.loss = "mse"


def test_cg_reports_its_true_residual(x64):
    """The residual CG returns is ‖b − Ax‖/‖b‖ of its x: tiny when converged, large when stopped early."""
    A = _spd(jax.random.PRNGKey(4), 20)
    b = jax.random.normal(jax.random.PRNGKey(5), (20,), jnp.float64)
    for maxiter, converged in ((None, True), (2, False)):
        x, residual = conjugate_gradient(lambda v: A @ v, b, tol=1e-10, maxiter=maxiter)
        want = float(jnp.linalg.norm(b - A @ x) / jnp.linalg.norm(b))
        assert float(residual) == pytest.approx(want, rel=1e-6)
        assert (float(residual) <= CG_RESIDUAL_SLACK * 1e-10) == converged


@pytest.mark.parametrize("solver", ["kernel_cg", "primal_cg"])
def test_a_cg_step_that_does_not_converge_warns_with_its_residual(x64, solver):
    """λ = 0 with a singular Θ (N·O = 160 > P = 122) for kernel CG: g is not in Θ's range, so CG
    cannot converge and the step is wrong; primal CG with a tolerance float64 cannot reach likewise.
    Each warns, naming the residual; a converged solve (λ > 0), or one truncated by an explicit
    ``cg_maxiter``, does not warn."""
    import warnings

    apply_fn, params, x, y, _ = _setup(n=80)
    kw = dict(damping=0.0, solver="kernel_cg") if solver == "kernel_cg" else dict(damping=0.1, solver="primal_cg",
                                                                                   cg_tol=1e-30)
    with pytest.warns(CGConvergenceWarning, match=r"gauss_newton_step: conjugate gradients did not converge: "
                                                  r"relative residual ‖b − Ax‖/‖b‖ = \d\.\d\de[-+]\d\d > 10 × cg_tol"):
        gauss_newton_step(apply_fn, params, x, y, **kw)
    with warnings.catch_warnings():
        warnings.simplefilter("error", CGConvergenceWarning)
        gauss_newton_step(apply_fn, params, x, y, damping=0.1, solver=solver)
        gauss_newton_step(apply_fn, params, x, y, **kw, cg_maxiter=3)


def test_gauss_newton_training_that_does_not_converge_warns_once_after_training(x64):
    """Inside the compiled loop the residual is kept in the state (the largest so far) and checked
    once at the end; a sweep's run that converges keeps a small residual."""
    import warnings

    apply_fn, params, x, y, _ = _setup(n=80)
    with pytest.warns(CGConvergenceWarning, match="gauss_newton_train: conjugate gradients did not converge") as w:
        gauss_newton_train(apply_fn, tree_stack([params, params]), (x, y), damping=[0.0, 0.1], steps=3,
                           solver="kernel_cg", eval_every=3)
    assert len([m for m in w if m.category is CGConvergenceWarning]) == 1
    state = init_gauss_newton_state(tree_stack([params, params]), [0.0, 0.1], stacked=True)
    state, _ = fit(make_gauss_newton_step(apply_fn, solver="kernel_cg"), state, apply_fn, (x, y), steps=2,
                   loss="mse", sweep=True, eval_every=2)
    assert float(state.cg_residual[0]) > 1e-3 and float(state.cg_residual[1]) < CG_RESIDUAL_SLACK * 1e-10
    with warnings.catch_warnings():
        warnings.simplefilter("error", CGConvergenceWarning)
        gauss_newton_train(apply_fn, params, (x, y), damping=0.1, steps=2, solver="kernel_cg", eval_every=2)
