"""Closed forms on the linearised MSE problem (Appendix B) against training and dense algebra."""

from __future__ import annotations

import math

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from jax.flatten_util import ravel_pytree

from iterlin.solvers.closed_form import (
    equivalent_damping,
    flow_filter,
    gd_filter,
    gn_filter,
    gradient_flow_limit,
    gradient_flow_outputs,
    gradient_flow_params,
    k_step_gd,
    residual_spectrum,
    spectral_update,
)
from iterlin.solvers.gauss_newton import flat_jacobian, gauss_newton_step
from iterlin.linearise import linearised_apply
from iterlin.training import train


class MLP(nn.Module):
    out: int = 2

    @nn.compact
    def __call__(self, x):
        for _ in range(2):
            x = nn.tanh(nn.Dense(8)(x))
        return nn.Dense(self.out)(x)


def _setup(n=6, d=3, out=2, seed=0, dtype=jnp.float64):
    """Tiny tanh MLP (P = 122 > N·O = 12), parameters drawn with NumPy (no JAX RNG compiles)."""
    model = MLP(out=out)
    rng = np.random.default_rng(seed)
    x = jnp.asarray(rng.normal(size=(n, d)), dtype)
    shapes = jax.eval_shape(model.init, jax.random.PRNGKey(0), x)
    params = jax.tree.map(
        lambda s: jnp.asarray(rng.normal(size=s.shape) * (1 / math.sqrt(s.shape[0]) if len(s.shape) == 2 else 0.1),
                              dtype),
        shapes,
    )
    y = jnp.asarray(rng.normal(size=(n, out)), dtype)
    return model.apply, params, x, y


def _flat(tree):
    return np.asarray(ravel_pytree(tree)[0])


def _ntk(apply_fn, params, x):
    J = np.asarray(flat_jacobian(apply_fn, params, x))
    return J, J @ J.T


def test_train_K_steps_equals_k_step_gd(x64):
    """K full-batch SGD steps of ``train`` (mean loss, lr) = the exact K-step formula with η = lr/N."""
    apply_fn, params, x, y = _setup()
    n = x.shape[0]
    _, theta = _ntk(apply_fn, params, x)
    lr = 0.9 * n / np.linalg.eigvalsh(theta).max()  # η σ_max = 0.9: large, oscillation-free steps
    K = 40
    trained, hist = train(apply_fn, params, (x, y), K=K, steps=K, optimizer=optax.sgd(lr), loss="mse",
                          batch_size=None, eval_steps=[])
    exact = k_step_gd(apply_fn, params, x, y, K, lr / n)
    moved = np.linalg.norm(_flat(exact) - _flat(params))
    assert moved > 0.1
    np.testing.assert_allclose(_flat(trained), _flat(exact), rtol=0, atol=1e-8 * moved)
    assert int(hist["n_relin"][-1]) == 1  # the only re-linearisation is after the last step


def test_gradient_flow_is_limit_of_small_gd_steps(x64):
    apply_fn, params, x, y = _setup(seed=1)
    n = x.shape[0]
    J, theta = _ntk(apply_fn, params, x)
    sigma_max = np.linalg.eigvalsh(theta).max()
    eta, t = 1.0 / sigma_max, 3.0  # flow time such that η σ_max t = 3
    flow = _flat(gradient_flow_params(apply_fn, params, x, y, t, eta))
    moved = np.linalg.norm(flow - _flat(params))

    # many small GD steps with ``train`` (first-order error in the step η t / m)
    m = 20_000
    trained, _ = train(apply_fn, params, (x, y), K=math.inf, steps=m, optimizer=optax.sgd(n * eta * t / m),
                       loss="mse", batch_size=None, eval_steps=[])
    err_train = np.linalg.norm(_flat(trained) - flow)
    assert err_train < 1e-3 * moved

    # the exact m-step formula: first-order convergence, and Richardson extrapolation is tight
    def gd(m):
        return _flat(k_step_gd(apply_fn, params, x, y, m, eta * t / m))

    e1, e2 = gd(m), gd(2 * m)
    assert np.linalg.norm(e1 - _flat(trained)) < 1e-8 * moved
    err1, err2 = np.linalg.norm(e1 - flow), np.linalg.norm(e2 - flow)
    assert 1.9 < err1 / err2 < 2.1
    np.testing.assert_allclose(2 * e2 - e1, flow, rtol=0, atol=1e-8 * moved)

    # outputs (Eq. 14) = the linearised model at the flow parameters (Eq. 18); t as an array
    f0 = apply_fn(params, x)
    ft = gradient_flow_outputs(theta, f0, y, jnp.array([0.0, t]), eta)
    assert ft.shape == (2,) + f0.shape
    np.testing.assert_allclose(ft[0], f0, atol=1e-12)
    f_lin = linearised_apply(apply_fn, params, jax.tree.map(jnp.asarray, gradient_flow_params(
        apply_fn, params, x, y, t, eta)), x)
    np.testing.assert_allclose(ft[1], f_lin, rtol=1e-9, atol=1e-9)
    # and the network's linearisation after ``train`` (first-order close)
    f_train = linearised_apply(apply_fn, params, trained, x)
    assert np.max(np.abs(np.asarray(f_train - ft[1]))) < 1e-3 * np.max(np.abs(np.asarray(f0 - y)))


def test_flow_limit_is_eq19_and_gauss_newton(x64):
    apply_fn, params, x, y = _setup(seed=2)
    J, theta = _ntk(apply_fn, params, x)
    r = np.asarray(apply_fn(params, x) - y).reshape(-1)
    limit = _flat(gradient_flow_limit(apply_fn, params, x, y))
    np.testing.assert_allclose(limit, _flat(params) - np.linalg.lstsq(J, r, rcond=None)[0], rtol=1e-8, atol=1e-8)
    np.testing.assert_allclose(_flat(gradient_flow_params(apply_fn, params, x, y, math.inf, 0.1)), limit)
    np.testing.assert_allclose(_flat(gauss_newton_step(apply_fn, params, x, y, damping=0.0, solver="kernel")), limit,
                               rtol=1e-9, atol=1e-9)
    # long flow and many GD steps approach it
    eta = 1.0 / np.linalg.eigvalsh(theta).max()
    t_long = 60.0 * np.linalg.eigvalsh(theta).max() / np.linalg.eigvalsh(theta).min()
    np.testing.assert_allclose(_flat(gradient_flow_params(apply_fn, params, x, y, t_long, eta)), limit, atol=1e-8)
    np.testing.assert_allclose(_flat(k_step_gd(apply_fn, params, x, y, int(t_long), eta)), limit, atol=1e-8)
    # gradient_flow_outputs at t = ∞ interpolates the targets
    f_inf = gradient_flow_outputs(theta, apply_fn(params, x), y, t_long, eta)
    np.testing.assert_allclose(f_inf, y, atol=1e-8)


def test_damped_gauss_newton_is_the_gn_filter(x64):
    apply_fn, params, x, y = _setup(seed=3)
    for lam in (0.01, 1.0):
        via_filter = spectral_update(apply_fn, params, x, y, lambda s: gn_filter(s, lam))
        np.testing.assert_allclose(_flat(via_filter),
                                   _flat(gauss_newton_step(apply_fn, params, x, y, damping=lam, solver="kernel_cg")),
                                   rtol=1e-8, atol=1e-8)


def test_filters_against_sums_and_limits(x64):
    sigma = np.array([0.0, 1e-300, 1e-12, 1e-3, 0.5, 3.0, 19.0])
    lr = 0.1
    for K in (1, 2, 7, 50):
        geometric = lr * sum((1 - lr * sigma) ** k for k in range(K))  # η Σ_{k<K} (1 − ησ)^k
        np.testing.assert_allclose(gd_filter(sigma, K, lr), geometric, rtol=1e-12)
    t = 2.5
    np.testing.assert_allclose(flow_filter(sigma, t, lr)[:3], lr * t, rtol=1e-9)
    np.testing.assert_allclose(flow_filter(sigma, t, lr)[3:], (1 - np.exp(-lr * sigma[3:] * t)) / sigma[3:],
                               rtol=1e-12)
    np.testing.assert_allclose(gd_filter(sigma, 200_000, lr * t / 200_000), flow_filter(sigma, t, lr), rtol=1e-5)
    pos = sigma[4:]
    np.testing.assert_allclose(gd_filter(pos, math.inf, lr), gn_filter(pos, 0.0), rtol=1e-12)
    np.testing.assert_allclose(flow_filter(pos, math.inf, lr), 1 / pos, rtol=1e-12)
    np.testing.assert_allclose(gn_filter(sigma, 2.0), 1 / (sigma + 2.0))


def test_equivalent_damping(x64):
    assert equivalent_damping(10, 0.01) == pytest.approx(10.0)
    assert equivalent_damping(math.inf, 0.01) == 0.0
    sigma = np.logspace(-3, 2, 60)
    lr = 1e-2  # lr σ_max = 1 < 2
    lams = [equivalent_damping(K, lr, sigma) for K in (10, 100, 1000)]
    for K, lam in zip((10, 100, 1000), lams):
        assert 0.25 < lam * K * lr < 2.0, (K, lam)  # the same scale as 1/(Kη)

        def misfit(l):
            rho_gd = 1 - (1 - lr * sigma) ** K
            return np.sum((rho_gd - sigma / (sigma + l)) ** 2)

        assert misfit(lam) <= min(misfit(lam * 1.01), misfit(lam / 1.01))
    assert lams[0] > lams[1] > lams[2]  # fewer steps per linearisation ↔ more damping
    # residual-weighted version on a real network spectrum
    apply_fn, params, x, y = _setup(seed=4)
    sig, coef = residual_spectrum(apply_fn, params, x, y)
    _, theta = _ntk(apply_fn, params, x)
    np.testing.assert_allclose(np.sort(np.linalg.eigvalsh(theta)), sig, rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(np.linalg.norm(coef), np.linalg.norm(np.asarray(apply_fn(params, x) - y)), rtol=1e-12)
    lam = equivalent_damping(20, 0.5 / float(sig.max()), sig, weights=np.asarray(coef) ** 2)
    assert lam > 0 and math.isfinite(lam)
    with pytest.raises(ValueError, match="lr"):
        equivalent_damping(10, 1.0, sigma)  # lr σ_max ≥ 2: GD diverges
    with pytest.raises(ValueError, match="weights"):
        equivalent_damping(10, lr, sigma, weights=np.ones(3))


@pytest.mark.parametrize(
    "call, name",
    [
        (lambda a, p, x, y: k_step_gd(a, p, x, y, 0, 0.1), "K"),
        (lambda a, p, x, y: k_step_gd(a, p, x, y, 2.5, 0.1), "K"),
        (lambda a, p, x, y: k_step_gd(a, p, x, y, 3, -0.1), "lr"),
        (lambda a, p, x, y: gradient_flow_params(a, p, x, y, -1.0, 0.1), "t"),
        (lambda a, p, x, y: gradient_flow_params(a, p, x, y, float("nan"), 0.1), "t"),
        (lambda a, p, x, y: gradient_flow_limit(a, p, x, y[:-1]), "leading dimension"),
        (lambda a, p, x, y: gradient_flow_outputs(jnp.eye(5), a(p, x), y, 1.0, 0.1), "theta_kernel"),
        (lambda a, p, x, y: gradient_flow_outputs(jnp.eye(12), a(p, x), y, -1.0, 0.1), "t"),
        (lambda a, p, x, y: gn_filter(1.0, -1.0), "damping"),
        (lambda a, p, x, y: flow_filter(1.0, 1.0, 0.0), "lr"),
        (lambda a, p, x, y: equivalent_damping(0, 0.1), "K"),
    ],
)
def test_bad_arguments_raise(call, name):
    apply_fn, params, x, y = _setup(dtype=jnp.float32)
    with pytest.raises(ValueError, match=name):
        call(apply_fn, params, x, y)
