import jax
import jax.numpy as jnp
import numpy as np
from jax.flatten_util import ravel_pytree

import iterlin
from iterlin.tree import tree_add, tree_scale, tree_sub

from _toy import init_params, tiny_problem


def test_equals_network_at_linearisation_point():
    apply_fn, params, x, _ = tiny_problem()
    f_lin = iterlin.linearise(apply_fn, params)
    np.testing.assert_array_equal(f_lin(params, x), apply_fn(params, x))


def test_matches_dense_first_order_taylor(x64):
    apply_fn, params_s, x, _ = tiny_problem()
    params = init_params(1)  # another point: θ − θ_s is not small
    flat_s, unravel = ravel_pytree(params_s)
    flat, _ = ravel_pytree(params)
    jac = jax.jacfwd(lambda v: apply_fn(unravel(v), x))(flat_s)  # (N, O, P)
    taylor = apply_fn(params_s, x) + jnp.einsum("nop,p->no", jac, flat - flat_s)
    got = iterlin.linearise(apply_fn, params_s)(params, x)
    assert jac.dtype == jnp.float64
    np.testing.assert_allclose(got, taylor, rtol=1e-12, atol=1e-12)
    # and it is not the network itself away from θ_s
    assert not np.allclose(got, apply_fn(params, x), atol=1e-3)


def test_affine_in_params(x64):
    apply_fn, params_s, x, _ = tiny_problem()
    d = tree_sub(init_params(2), params_s)
    f_lin = iterlin.linearise(apply_fn, params_s)
    f = [f_lin(tree_add(params_s, tree_scale(a, d)), x) for a in (0.0, 1.0, 3.0)]
    np.testing.assert_allclose(f[2] - f[0], 3 * (f[1] - f[0]), rtol=1e-10, atol=1e-10)


def test_linearisation_point_is_traced_not_baked_in():
    """Re-linearising under jit is a value change: one compilation serves every θ_s."""
    apply_fn, params_s, x, _ = tiny_problem()
    traces = []

    @jax.jit
    def f(ps, p, x):
        traces.append(1)
        return iterlin.linearised_apply(apply_fn, ps, p, x)

    other = init_params(3)
    a = f(params_s, other, x)
    b = f(other, other, x)
    assert len(traces) == 1
    np.testing.assert_allclose(b, apply_fn(other, x), rtol=1e-5, atol=1e-5)
    assert not np.allclose(a, b, atol=1e-3)
