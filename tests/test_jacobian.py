"""iterlin.analysis.jacobian: the one per-example Jacobian, PSD eigendecomposition and spectral solve, each
against an independent dense route (float64)."""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.flatten_util import ravel_pytree

from iterlin.analysis.jacobian import (
    contract,
    eigh_psd,
    example_jacobians,
    flat_jacobian,
    jacobian_matrix,
    maybe_jit,
    ntk_mean_diag,
    spectral_filter,
    spectral_solve,
)
from iterlin.analysis.ntk import empirical_ntk

N = 7  # chunks of 3 do not divide it


def _mlp(p, x):
    h = jnp.tanh(x @ p["w0"] + p["b0"])
    return h @ p["w1"] + p["b1"]


def _problem(n=N, d=3, width=4, n_out=2, seed=0):
    rng = np.random.default_rng(seed)
    normal = lambda *s: jnp.asarray(rng.normal(size=s) / math.sqrt(s[0]))  # noqa: E731
    params = {"w0": normal(d, width), "b0": normal(width), "w1": normal(width, n_out), "b1": normal(n_out)}
    return _mlp, params, jnp.asarray(rng.normal(size=(n, d)))


def _dense_jacobian(apply_fn, params, x):
    """Forward mode on the whole batch and the raveled parameters: (N·O, P), a different route."""
    flat, unravel = ravel_pytree(params)
    return np.asarray(jax.jacfwd(lambda f: apply_fn(unravel(f), x).reshape(-1))(flat))


@pytest.mark.parametrize("chunk_size", [None, 1, 3])
def test_jacobian_matrix_is_the_dense_example_major_jacobian(x64, chunk_size):
    apply_fn, params, x = _problem()
    J = _dense_jacobian(apply_fn, params, x)
    assert J.shape == (N * 2, 4 * 3 + 4 + 4 * 2 + 2)
    np.testing.assert_allclose(np.asarray(jacobian_matrix(apply_fn, params, x, chunk_size=chunk_size)), J,
                               rtol=1e-12, atol=1e-13)
    np.testing.assert_allclose(np.asarray(flat_jacobian(apply_fn, params, x)), J, rtol=1e-12, atol=1e-13)


def test_the_ntk_and_gauss_newton_use_the_same_jacobian(x64):
    """Σ_leaves J_a J_bᵀ from the pytree Jacobians (NTK route) = J Jᵀ from the matrix (GN route)."""
    apply_fn, params, x = _problem(seed=1)
    J = np.asarray(jacobian_matrix(apply_fn, params, x))
    blocks = example_jacobians(apply_fn, params, x)
    np.testing.assert_allclose(np.asarray(contract(blocks, blocks)), J @ J.T, rtol=1e-12, atol=1e-13)
    np.testing.assert_allclose(np.asarray(empirical_ntk(apply_fn, params, x, chunk_size=3)), J @ J.T,
                               rtol=1e-12, atol=1e-13)
    for chunk_size in (None, 2):
        np.testing.assert_allclose(float(ntk_mean_diag(apply_fn, params, x, chunk_size=chunk_size)),
                                   np.trace(J @ J.T) / J.shape[0], rtol=1e-12)


def test_maybe_jit_compiles_once_per_setting_and_passes_unhashable_apply_fns_through():
    """No memo of ours: jit's own cache, keyed on the function and the static values, traces ``fn``
    once per (apply_fn, static values, shapes) however many wrappers ``maybe_jit`` returns."""
    from _compiles import compilations

    def fn(apply_fn, a, *, twice):
        return apply_fn(a) * (2 if twice else 1)

    def traces(seen):
        return sum(1 for kind, name in seen if kind == "trace" and name == "fn")

    a, b = jnp.asarray(0.5), jnp.asarray(0.25)
    with compilations() as seen:
        first = maybe_jit(fn, jnp.sin, twice=True)(jnp.sin, a, twice=True)
    assert traces(seen) == 1 and float(first) == pytest.approx(2 * math.sin(0.5), rel=1e-6)
    with compilations() as seen:  # a fresh wrapper, other values: nothing traced
        again = maybe_jit(fn, jnp.sin, twice=True)(jnp.sin, b, twice=True)
    assert traces(seen) == 0 and float(again) == pytest.approx(2 * math.sin(0.25), rel=1e-6)
    with compilations() as seen:  # another static value, another apply_fn: traced, right values
        other = maybe_jit(fn, jnp.sin, twice=False)(jnp.sin, a, twice=False)
        cos = maybe_jit(fn, jnp.cos, twice=True)(jnp.cos, a, twice=True)
    assert traces(seen) == 2
    assert float(other) == pytest.approx(math.sin(0.5), rel=1e-6) and float(cos) == pytest.approx(2 * math.cos(0.5), rel=1e-6)

    class Unhashable:
        __hash__ = None

        def __call__(self, a):
            return a + 1

    assert maybe_jit(fn, Unhashable(), twice=True) is fn


def _low_rank_jacobian(m=8, p=6, rank=3, seed=0):
    """J (m × p) of rank 3 < min(m, p): Θ = JJᵀ and JᵀJ are both singular."""
    rng = np.random.default_rng(seed)
    return jnp.asarray(rng.normal(size=(m, rank)) @ rng.normal(size=(rank, p)))


def test_eigh_psd_reconstructs_and_masks_the_null_directions(x64):
    J = _low_rank_jacobian()
    theta = J @ J.T
    sigma, U, keep = eigh_psd(theta)
    assert np.all(np.diff(np.asarray(sigma)) >= 0) and np.all(np.asarray(sigma) >= 0)
    np.testing.assert_allclose(np.asarray(U @ jnp.diag(sigma) @ U.T), np.asarray(theta), atol=1e-10)
    assert int(keep.sum()) == 3
    np.testing.assert_allclose(np.sort(np.asarray(sigma)[np.asarray(keep)]),
                               np.sort(np.linalg.eigvalsh(np.asarray(theta)))[-3:], rtol=1e-10)


def test_spectral_filter_cut_off_follows_the_shift(x64):
    sigma = jnp.asarray([0.0, 1e-20, 0.5, 4.0])
    inv = spectral_filter(sigma, lambda s: 1.0 / s)  # λ = 0: null directions dropped, never 1/0
    np.testing.assert_array_equal(np.asarray(inv), [0.0, 0.0, 2.0, 0.25])
    lam = 0.1  # λ > 0: every direction of Θ + λI is kept, 1/(σ + λ)
    np.testing.assert_allclose(np.asarray(spectral_filter(sigma, lambda s: 1.0 / (s + lam), lam)),
                               1.0 / (np.asarray(sigma) + lam), rtol=1e-14)


def test_spectral_solve_damped_is_ridge_and_undamped_is_minimum_norm(x64):
    J = _low_rank_jacobian(seed=1)
    r = jnp.asarray(np.random.default_rng(2).normal(size=8))
    Jn, rn = np.asarray(J), np.asarray(r)
    for lam in (1e-3, 0.7, 30.0):
        want = -np.linalg.solve(Jn.T @ Jn + lam * np.eye(6), Jn.T @ rn)
        got = spectral_solve(J, r, lambda s: 1.0 / (s + lam), shift=lam)
        np.testing.assert_allclose(np.asarray(got), want, rtol=1e-9, atol=1e-11, err_msg=f"λ={lam}")
    want = -np.linalg.lstsq(Jn, rn, rcond=None)[0]  # minimum-norm least squares (SVD)
    np.testing.assert_allclose(np.asarray(spectral_solve(J, r, lambda s: 1.0 / s)), want, rtol=1e-8, atol=1e-10)


def test_spectral_solve_flow_filter_is_the_gradient_flow_ode(x64):
    """φ(σ) = (1 − e^{−στ})/σ solves dδ/dt = −Jᵀ(r + Jδ), δ(0) = 0, at t = τ (by a matrix exponential)."""
    J = _low_rank_jacobian(seed=3)
    r = jnp.asarray(np.random.default_rng(4).normal(size=8))
    P = J.shape[1]
    M = jnp.zeros((P + 1, P + 1)).at[:P, :P].set(-J.T @ J).at[:P, P].set(-J.T @ r)
    for tau in (0.05, 1.0, 7.0):
        want = jax.scipy.linalg.expm(M * tau)[:P, P]
        got = spectral_solve(J, r, lambda s: -jnp.expm1(-s * tau) / s)
        np.testing.assert_allclose(np.asarray(got), np.asarray(want), rtol=1e-8, atol=1e-10, err_msg=f"τ={tau}")
