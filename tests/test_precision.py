"""iterlin.precision: one contraction precision everywhere, and the float64 context manager."""

from __future__ import annotations

import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from iterlin.solvers.gauss_newton import gauss_newton_step
from iterlin.analysis.jacobian import contract, example_jacobians, spectral_solve
from iterlin import precision
from iterlin.precision import KERNEL_PRECISION, einsum, matmul


def test_the_policy_is_highest():
    assert KERNEL_PRECISION == jax.lax.Precision.HIGHEST


def test_matmul_and_einsum_are_the_jnp_products(x64):
    rng = np.random.default_rng(0)
    a, b = rng.normal(size=(4, 3)), rng.normal(size=(3, 5))
    np.testing.assert_allclose(np.asarray(matmul(jnp.asarray(a), jnp.asarray(b))), a @ b, rtol=1e-14)
    np.testing.assert_allclose(np.asarray(einsum("ij,jk->ik", jnp.asarray(a), jnp.asarray(b))), a @ b, rtol=1e-14)


def _precisions(fn, *args):
    """The precision of every dot_general and conv_general_dilated in ``fn``'s jaxpr (nested
    jaxprs included)."""
    text = str(jax.make_jaxpr(fn)(*args))
    found = []
    for op in ("dot_general[", "conv_general_dilated["):
        found += [re.search(r"precision=([^\n]*?)(?: preferred_element_type|\n|$)", b).group(1).strip()
                  for b in text.split(op)[1:]]
    return found


def _elementwise(params, x):
    """A model without matrix products of its own: every product in a step comes from the library."""
    return jnp.sum(jnp.tanh(x[:, :, None] * params["w"][None]), axis=1)  # (N, 3) → (N, 2)


def test_every_kernel_contraction_uses_the_policy():
    params = {"w": jnp.ones((3, 2)) * 0.3}
    x = jnp.linspace(-1.0, 1.0, 12).reshape(4, 3)
    y = jnp.zeros((4, 2))
    want = f"(Precision.{KERNEL_PRECISION.name}, Precision.{KERNEL_PRECISION.name})"
    J, r = jnp.ones((4, 6)), jnp.ones(4)
    cases = {
        "spectral_solve": (lambda J, r: spectral_solve(J, r, lambda s: 1.0 / s), J, r),
        "contract": (lambda p, x: contract(example_jacobians(_elementwise, p, x),
                                           example_jacobians(_elementwise, p, x)), params, x),
        "gauss_newton mse": (lambda p: gauss_newton_step(_elementwise, p, x, y, damping=0.1, solver="kernel"), params),
        "gauss_newton ce": (lambda p: gauss_newton_step(_elementwise, p, x, jnp.zeros(4, jnp.int32), damping=0.1,
                                                        loss="ce", solver="kernel"), params),
    }
    for name, (fn, *args) in cases.items():
        found = _precisions(fn, *args)
        assert found and all(p == want for p in found), (name, found)


def test_x64_sets_and_restores_the_flag():
    before = bool(jax.config.jax_enable_x64)
    with precision.x64(True):
        assert jax.config.jax_enable_x64 and jnp.asarray(1.0).dtype == jnp.float64
        with precision.x64(False):
            assert not jax.config.jax_enable_x64 and jnp.asarray(1.0).dtype == jnp.float32
        assert jax.config.jax_enable_x64
    assert bool(jax.config.jax_enable_x64) == before


def test_x64_restores_the_flag_when_the_block_raises():
    before = bool(jax.config.jax_enable_x64)
    with pytest.raises(RuntimeError, match="inside"):
        with precision.x64(not before):
            assert bool(jax.config.jax_enable_x64) == (not before)
            raise RuntimeError("inside")
    assert bool(jax.config.jax_enable_x64) == before


@pytest.mark.parametrize("enabled", ["yes", None, 2, 1.0])
def test_x64_refuses_a_non_bool(enabled):
    before = bool(jax.config.jax_enable_x64)
    with pytest.raises(ValueError, match=re.escape(f"enabled={enabled!r}")):
        with precision.x64(enabled):
            pass
    assert bool(jax.config.jax_enable_x64) == before


# ----------------------------------------------------------------------------------------------
# The network's own products where a Jacobian is built: full_precision
# ----------------------------------------------------------------------------------------------


def _conv_model(params, x):
    """A small CNN whose own products name no precision (as Flax's layers): (N, 6, 6, 2) → (N, 3)."""
    h = jax.lax.conv_general_dilated(x, params["w"], (1, 1), "SAME", dimension_numbers=("NHWC", "HWIO", "NHWC"))
    return jnp.tanh(h).reshape(x.shape[0], -1) @ params["v"]


def test_full_precision_sets_and_restores_the_default():
    before = jax.config.jax_default_matmul_precision
    with precision.full_precision():
        assert jax.config.jax_default_matmul_precision == "highest"
    assert jax.config.jax_default_matmul_precision == before


def test_every_jacobian_route_runs_the_networks_products_at_full_precision():
    from iterlin.analysis.jacobian import jacobian_matrix
    from iterlin.analysis.ntk import empirical_ntk_fn, ntk_vector_product

    k = jax.random.split(jax.random.PRNGKey(0), 3)
    params = {"w": jax.random.normal(k[0], (3, 3, 2, 2)), "v": jax.random.normal(k[1], (72, 3))}
    x = jax.random.normal(k[2], (4, 6, 6, 2))
    y = jnp.zeros((4, 3))
    want = f"(Precision.{KERNEL_PRECISION.name}, Precision.{KERNEL_PRECISION.name})"
    cases = {
        "jacobian_matrix": (lambda p: jacobian_matrix(_conv_model, p, x), params),
        # conv="xla": the network's own convolution (on the CPU "auto" rewrites it into products: below)
        "ntk jacobian": (lambda p: empirical_ntk_fn(_conv_model, mode="jacobian", conv="xla")(p, x), params),
        "ntk ntvp": (lambda p: empirical_ntk_fn(_conv_model, mode="ntvp", conv="xla")(p, x), params),
        "ntk_vector_product": (lambda p: ntk_vector_product(_conv_model, p, x, conv="xla")(jnp.ones(12)), params),
        "gauss_newton kernel_cg": (lambda p: gauss_newton_step(_conv_model, p, x, y, damping=0.1,
                                                               solver="kernel_cg", conv="xla"), params),
        "gauss_newton primal_cg": (lambda p: gauss_newton_step(_conv_model, p, x, y, damping=0.1,
                                                               solver="primal_cg", conv="xla"), params),
    }
    lowered = {  # the convolution rewritten into slices and products (conv="matmul"): its products too
        "ntk_vector_product, products": (lambda p: ntk_vector_product(_conv_model, p, x, conv="matmul")(jnp.ones(12)),
                                         params),
        "ntk jacobian, products": (lambda p: empirical_ntk_fn(_conv_model, mode="jacobian", conv="matmul")(p, x),
                                   params),
    }
    # the caller's default (bfloat16 here; TF32 or the autotuner's choice on a GPU) does not reach them
    with jax.default_matmul_precision("bfloat16"):
        for name, (fn, *args) in cases.items():
            found = _precisions(fn, *args)
            assert any("conv" in line for line in str(jax.make_jaxpr(fn)(*args)).split("\n")), name
            assert found and all(p == want for p in found), (name, found)
        for name, (fn, *args) in lowered.items():
            jaxpr = str(jax.make_jaxpr(fn)(*args))
            assert "conv_general_dilated" not in jaxpr, name
            found = _precisions(fn, *args)
            assert found and all(p == want for p in found), (name, found)
        # the network's own forward pass is left as the caller set it: the test can fail
        assert set(_precisions(lambda p: _conv_model(p, x), params)) != {want}
