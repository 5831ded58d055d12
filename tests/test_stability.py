"""iterlin.stability: the GGN matvec against the explicit matrix, λ_max against eigvalsh, and the
bound 2/λ_max deciding whether gradient descent on the linear model diverges (MSE, exact)."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from _toy import tiny_problem
from jax.flatten_util import ravel_pytree

import iterlin
from iterlin import stability


def _explicit_ggn(apply_fn, params, x, y, loss):
    flat, unravel = ravel_pytree(params)
    out = apply_fn(params, x)
    n, o = out.shape
    J = jax.jacfwd(lambda v: apply_fn(unravel(v), x))(flat).reshape(n, o, -1)
    if loss == "mse":
        H = jnp.broadcast_to(jnp.eye(o), (n, o, o))
    else:
        p = jax.nn.softmax(out, -1)
        H = jax.vmap(jnp.diag)(p) - p[:, :, None] * p[:, None, :]
    return jnp.einsum("nap,nab,nbq->pq", J, H, J) / n, flat, unravel


@pytest.mark.parametrize("loss", ["ce", "mse"])
def test_matvec_and_sharpness_match_the_explicit_ggn(x64, loss):
    apply_fn, params, x, y = tiny_problem(classification=loss == "ce")
    G, flat, unravel = _explicit_ggn(apply_fn, params, x, y, loss)
    v = jax.random.normal(jax.random.key(3), flat.shape, flat.dtype)
    got = ravel_pytree(stability.ggn_matvec(apply_fn, params, x, y, loss)(unravel(v)))[0]
    np.testing.assert_allclose(got, G @ v, rtol=1e-10, atol=1e-12)
    lam = np.linalg.eigvalsh(np.asarray(G))[-1]
    assert stability.ggn_sharpness(apply_fn, params, x, y, loss=loss, iters=3000) == pytest.approx(lam, rel=1e-6)


@pytest.mark.parametrize("factor, diverges", [(0.95, False), (1.05, True)])
def test_gradient_descent_on_the_linear_model_diverges_exactly_above_the_bound(x64, factor, diverges):
    """MSE: the linear model's loss is quadratic with Hessian G, so full-batch GD at η = factor·2/λ_max
    contracts every direction below the bound and blows up the top one above it."""
    apply_fn, params, x, y = tiny_problem(classification=False)
    bound = stability.max_stable_lr(apply_fn, params, x, y, loss="mse", iters=3000)
    f_lin = iterlin.linearise(apply_fn, params)
    loss = jax.jit(lambda p: jnp.mean(0.5 * jnp.sum((f_lin(p, x) - y) ** 2, -1)))
    grad = jax.jit(jax.grad(loss))
    p, lr, start = params, factor * bound, float(loss(params))
    for _ in range(400):
        p = jax.tree.map(lambda a, g: a - lr * g, p, grad(p))
    end = float(loss(p))
    if diverges:
        assert not np.isfinite(end) or end > 1e3 * start
    else:
        assert np.isfinite(end) and end < start


def test_bad_arguments_are_named():
    apply_fn, params, x, y = tiny_problem()
    with pytest.raises(ValueError, match="iters"):
        stability.ggn_sharpness(apply_fn, params, x, y, iters=0)
    with pytest.raises(ValueError, match="loss"):
        stability.ggn_sharpness(apply_fn, params, x, y, loss="hinge")
    with pytest.raises(ValueError):
        stability.ggn_sharpness(apply_fn, params, x, y[:3])
