"""Damped Gauss–Newton (Eq. 5–6): every solver against an independent dense route."""

from __future__ import annotations

import math
from functools import partial

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from jax.flatten_util import ravel_pytree

from iterlin.gauss_newton import (
    KERNEL_MAX_OUTPUTS,
    flat_jacobian,
    gauss_newton_step,
    gauss_newton_train,
    make_gauss_newton_step,
    select_solver,
)
from iterlin.training import train


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
    step = jax.jit(make_gauss_newton_step(apply_fn, damping=1.0))
    from iterlin.training import init_state

    state = init_state(params, optax.identity(), 1)
    state1, m = step(state, (x, y))
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
        (dict(damping=1.0, loss="ce", solver="kernel_cg"), "kernel_cg"),
        (dict(damping=0.0, solver="primal_cg"), "damping=0.0"),
    ],
)
def test_bad_arguments_raise(kwargs, name):
    apply_fn, params, x, y, y_cls = _setup(dtype=jnp.float32)
    yy = y_cls if kwargs.get("loss") == "ce" else y
    with pytest.raises(ValueError, match=name):
        gauss_newton_step(apply_fn, params, x, yy, **kwargs)
    if name not in ("kernel_cg", "damping=0.0"):  # these depend on the problem, not only the arguments
        with pytest.raises(ValueError, match=name):
            make_gauss_newton_step(apply_fn, **kwargs)


def test_bad_data_raise():
    apply_fn, params, x, y, y_cls = _setup(dtype=jnp.float32)
    with pytest.raises(ValueError, match="leading dimension"):
        gauss_newton_step(apply_fn, params, x, y[:-1], damping=1.0)
    with pytest.raises(ValueError, match="integer class labels"):
        gauss_newton_step(apply_fn, params, x, y, damping=1.0, loss="ce")
    with pytest.raises(ValueError, match="damping"):
        gauss_newton_train(apply_fn, params, (x, y), damping=-1.0, steps=2)
