"""The empirical NTK (Eq. 2) against the dense ϕϕᵀ, kernel distances, and the kernel tracker in training."""

import math

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from jax.flatten_util import ravel_pytree

import iterlin
from iterlin.analysis.ntk import (
    empirical_ntk,
    empirical_ntk_fn,
    kernel_distance,
    kernel_tracker,
    ntk_vector_product,
    relinearisation_steps,
)
import iterlin.analysis.ntk as ntk_module
from iterlin.tree import tree_allclose, tree_stack

from _toy import tiny_conv_problem, tiny_problem

N = 7  # examples: chunk sizes 3 and 4 do not divide it, 7 and 1 do


def _mlp(p, x):
    h = jnp.tanh(x @ p["w0"] + p["b0"])
    return jax.nn.relu(h @ p["w1"] + p["b1"]) @ p["w2"] + p["b2"]


def _conv(p, x):
    """Convolution + dense: parameter leaves of rank 4, 1 and 2 (NHWC, HWIO)."""
    h = jax.lax.conv_general_dilated(x, p["k"], (1, 1), "VALID", dimension_numbers=("NHWC", "HWIO", "NHWC"))
    h = jax.nn.relu(h + p["kb"])
    return h.reshape(h.shape[0], -1) @ p["w"] + p["b"]


def _problem(kind, n_out, n=N, seed=0):
    """(apply_fn, params, x) in float64, plain jnp (no initialisation to compile)."""
    rng = np.random.default_rng(seed)
    normal = lambda *shape: jnp.asarray(rng.normal(size=shape) / np.sqrt(shape[0]))  # noqa: E731
    if kind == "mlp":
        params = {"w0": normal(2, 6), "b0": normal(6), "w1": normal(6, 6), "b1": normal(6),
                  "w2": normal(6, n_out), "b2": normal(n_out)}
        return _mlp, params, jnp.asarray(rng.normal(size=(n, 2)))
    params = {"k": normal(3, 3, 2, 4), "kb": normal(4), "w": normal(36, n_out), "b": normal(n_out)}
    return _conv, params, jnp.asarray(rng.normal(size=(n, 5, 5, 2)))


def _dense_ntk(apply_fn, params, x1, x2):
    """ϕ(X₁)ϕ(X₂)ᵀ from the dense Jacobian of the flattened outputs w.r.t. the flattened parameters."""

    @jax.jit
    def dense(params, x1, x2):
        flat, unravel = ravel_pytree(params)
        jac = lambda x: jax.jacfwd(lambda f: apply_fn(unravel(f), x).reshape(-1))(flat)  # noqa: E731
        return jac(x1) @ jac(x2).T

    return np.asarray(dense(params, x1, x2))


@pytest.mark.parametrize(
    "kind, n_out, chunk_size, with_x2",
    [
        ("mlp", 1, None, False),  # one chunk of N: the Jacobian is reused
        ("mlp", 3, 3, True),  # 3 does not divide N = 7
        ("conv", 3, 4, False),  # 4 does not divide N; blocks below the diagonal mirrored
        ("conv", 1, 1, True),  # 1 divides N
    ],
)
def test_ntk_equals_dense_jacobian_product(x64, kind, n_out, chunk_size, with_x2):
    apply_fn, params, x = _problem(kind, n_out)
    x2 = x[2:6] * 1.5 + 0.1 if with_x2 else None
    n2 = N if x2 is None else 4
    ref = _dense_ntk(apply_fn, params, x, x if x2 is None else x2)
    for mode in ("jacobian", "ntvp"):
        got = empirical_ntk(apply_fn, params, x, x2, chunk_size=chunk_size, mode=mode)
        assert got.shape == (N * n_out, n2 * n_out) and got.dtype == jnp.float64
        np.testing.assert_allclose(got, ref, rtol=1e-10, atol=1e-12, err_msg=mode)
        traced = jax.jit(empirical_ntk_fn(apply_fn, chunk_size=chunk_size, mode=mode))(params, x, x2)
        np.testing.assert_allclose(traced, ref, rtol=1e-10, atol=1e-12, err_msg=f"traced {mode}")


@pytest.mark.parametrize("with_x2", [False, True])
@pytest.mark.parametrize("panel_chunks", [1, 2, 3, 10])
def test_ntk_panels_equal_the_dense_jacobian_product(x64, panel_chunks, with_x2):
    """Panels of 1, 2 (a partial last panel), 3 and more chunks than there are (N = 7, chunk 2: 4 chunks)."""
    apply_fn, params, x = _problem("conv", 3)
    x2 = x[1:6] * 0.5 - 0.2 if with_x2 else None
    ref = _dense_ntk(apply_fn, params, x, x if x2 is None else x2)
    got = empirical_ntk(apply_fn, params, x, x2, chunk_size=2, panel_chunks=panel_chunks)
    np.testing.assert_allclose(got, ref, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("budget_chunks", [1, 3, 4])
def test_ntk_auto_panels_equal_the_dense_jacobian_product(x64, monkeypatch, budget_chunks):
    """``panel_chunks=None`` with a budget of 1, 3 or 4 chunks of the 4 (N = 7, chunk 2: with 3, a
    panel of 3 and a last panel of the 1 left) and blocks on or above the diagonal only, mirrored."""
    apply_fn, params, x = _problem("conv", 3)
    n_params = sum(leaf.size for leaf in jax.tree.leaves(params))
    monkeypatch.setattr(ntk_module, "PANEL_NUMBERS", budget_chunks * 2 * 3 * n_params)
    ref = _dense_ntk(apply_fn, params, x, x)
    got = empirical_ntk(apply_fn, params, x, chunk_size=2)
    np.testing.assert_allclose(got, ref, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("chunk_size, panel_chunks", [(2, 1), (2, 3), (3, None)])
def test_symmetric_route_equals_the_full_route(x64, chunk_size, panel_chunks):
    """Θ(X) (x2=None: only the blocks on or above the diagonal computed, the rest mirrored) equals
    Θ(X, X) (every block computed), host-driven, traced and by NTK-vector products, float64."""
    apply_fn, params, x = _problem("conv", 3)
    full = empirical_ntk(apply_fn, params, x, x, chunk_size=chunk_size, panel_chunks=panel_chunks)
    sym = empirical_ntk(apply_fn, params, x, chunk_size=chunk_size, panel_chunks=panel_chunks)
    np.testing.assert_allclose(sym, full, rtol=1e-12, atol=1e-13)
    np.testing.assert_array_equal(sym, sym.T)  # mirrored exactly
    ntvp = empirical_ntk(apply_fn, params, x, chunk_size=chunk_size, mode="ntvp")
    np.testing.assert_allclose(ntvp, full, rtol=1e-12, atol=1e-13)
    traced = jax.jit(empirical_ntk_fn(apply_fn, chunk_size=chunk_size))
    np.testing.assert_allclose(traced(params, x), traced(params, x, x), rtol=1e-12, atol=1e-13)


def test_ntk_is_example_major(x64):
    """Row n·O + o is output o of example n: block (n, m) of the reshaped kernel is Θ(x_n, x_m)."""
    apply_fn, params, x = _problem("mlp", 3)
    k = np.asarray(empirical_ntk(apply_fn, params, x, chunk_size=3)).reshape(N, 3, N, 3)
    for n, m in [(0, 0), (3, 1), (6, 2)]:
        np.testing.assert_allclose(k[n, :, m, :], _dense_ntk(apply_fn, params, x[n:n + 1], x[m:m + 1]),
                                   rtol=1e-10, atol=1e-12)


def test_ntk_is_symmetric_psd_and_detects_wrong_answers(x64):
    apply_fn, params, x = _problem("mlp", 3)
    k = np.asarray(empirical_ntk(apply_fn, params, x, chunk_size=2))
    np.testing.assert_array_equal(k, k.T)  # mirrored blocks
    assert np.linalg.eigvalsh(k).min() > -1e-10
    # a different θ gives a different kernel: the comparison above can fail
    other = jax.tree.map(lambda a: jnp.asarray(np.asarray(a) * 1.1), params)
    assert not np.allclose(empirical_ntk(apply_fn, other, x, chunk_size=2), k, rtol=1e-3)


def test_traced_variant_under_vmap_matches_per_run_kernels(x64):
    apply_fn, params, x = _problem("mlp", 2)
    params2 = _problem("mlp", 2, seed=1)[1]
    ntk = empirical_ntk_fn(apply_fn, chunk_size=3)
    stacked = jax.jit(jax.vmap(ntk, in_axes=(0, None)))(tree_stack([params, params2]), x)
    assert stacked.shape == (2, 2 * N, 2 * N)
    for r, p in enumerate([params, params2]):
        np.testing.assert_allclose(stacked[r], empirical_ntk(apply_fn, p, x, chunk_size=3), rtol=1e-10, atol=1e-12)


def test_ntk_vector_product_equals_kernel_times_vector(x64):
    apply_fn, params, x = _problem("conv", 3)
    k = np.asarray(empirical_ntk(apply_fn, params, x))
    mv = ntk_vector_product(apply_fn, params, x)
    rng = np.random.default_rng(0)
    v = rng.normal(size=N * 3)
    np.testing.assert_allclose(mv(v), k @ v, rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(mv(v.reshape(N, 3)), (k @ v).reshape(N, 3), rtol=1e-10, atol=1e-12)
    vs = rng.normal(size=(N * 3, 4))
    np.testing.assert_allclose(jax.jit(mv)(vs), k @ vs, rtol=1e-10, atol=1e-12)
    with pytest.raises(ValueError, match="v of shape"):
        mv(np.ones(5))


def test_bad_arguments_are_named():
    apply_fn, params, x = _mlp, {"w0": np.ones((5, 2))}, np.ones((4, 5))
    with pytest.raises(ValueError, match="mode"):
        empirical_ntk(apply_fn, params, x, mode="dense")
    with pytest.raises(ValueError, match="chunk_size"):
        empirical_ntk(apply_fn, params, x, chunk_size=0)
    with pytest.raises(ValueError, match="panel_chunks"):
        empirical_ntk(apply_fn, params, x, panel_chunks=0)
    with pytest.raises(ValueError, match="chunk_size"):
        empirical_ntk_fn(apply_fn, chunk_size=2.5)
    with pytest.raises(ValueError, match="x2"):
        empirical_ntk(apply_fn, params, x, x[:, :2])
    with pytest.raises(ValueError, match="x1"):
        empirical_ntk(apply_fn, params, x[:0])
    with pytest.raises(ValueError, match="k1 and k2"):
        kernel_distance(np.eye(2), np.eye(3))
    with pytest.raises(ValueError, match="K"):
        relinearisation_steps(0, 10)


# ----------------------------------------------------------------------------------------------
# Kernel distance (Fort et al. 2020)
# ----------------------------------------------------------------------------------------------


def _random_psd(rng, m=6, rank=3):
    a = rng.normal(size=(m, rank))
    return a @ a.T


def test_kernel_distance_properties(x64):
    rng = np.random.default_rng(1)
    k1, k2 = _random_psd(rng), _random_psd(rng)
    assert float(kernel_distance(k1, k1)) == 0.0
    np.testing.assert_allclose(kernel_distance(k1, 3.7 * k1), 0.0, atol=1e-15)  # scale invariant
    d12 = float(kernel_distance(k1, k2))
    assert 0.0 < d12 < 1.0
    np.testing.assert_allclose(kernel_distance(k2, k1), d12, rtol=1e-14)  # symmetric
    ref = 1 - np.sum(k1 * k2) / (np.linalg.norm(k1) * np.linalg.norm(k2))  # the defining formula
    np.testing.assert_allclose(d12, ref, rtol=1e-12)
    np.testing.assert_allclose(kernel_distance(np.diag([1.0, 0.0]), np.diag([0.0, 1.0])), 1.0, rtol=1e-15)
    for _ in range(20):
        d = float(kernel_distance(_random_psd(rng), _random_psd(rng)))
        assert 0.0 <= d <= 1.0
    # batched over leading axes (runs of a sweep)
    batch = kernel_distance(np.stack([k1, k1]), np.stack([k1, k2]))
    np.testing.assert_allclose(batch, [0.0, d12], atol=1e-15)


def test_kernel_distance_small_changes_are_accurate_in_float32():
    rng = np.random.default_rng(2)
    k = _random_psd(rng)
    e = _random_psd(rng)
    eps = 1e-5
    ref = float(kernel_distance(np.float64(k), np.float64(k + eps * e)))  # ~ eps², far below float32's 1 − cos
    got = float(kernel_distance(jnp.float32(k), jnp.float32(k + eps * e)))
    assert ref > 0
    np.testing.assert_allclose(got, ref, rtol=0.05)


def test_relinearisation_steps():
    assert relinearisation_steps(100, 1000) == list(range(0, 1001, 100))
    assert relinearisation_steps(3, 10) == [0, 3, 6, 9]
    assert relinearisation_steps(math.inf, 10) == [0]
    assert relinearisation_steps(5e6, 100) == [0]
    pts = relinearisation_steps(10, 10**5, max_points=6)
    assert pts[0] == 0 and pts[1] == 10 and pts[-1] == 10**5 and len(pts) <= 7
    assert all(p % 10 == 0 for p in pts) and pts == sorted(set(pts))


# ----------------------------------------------------------------------------------------------
# Kernel tracker inside iterlin.train
# ----------------------------------------------------------------------------------------------


TRAIN = dict(steps=12, optimizer=optax.sgd(0.5), loss="ce", eval_every=4)


@pytest.fixture(scope="module")
def tracked_runs():
    """Histories with a kernel tracker: single runs K = 1 and K = ∞, and a sweep over both."""
    apply_fn, params, x, y = tiny_problem(n=16, width=8)
    single = {
        K: iterlin.train(apply_fn, params, (x, y), K=K, callback=kernel_tracker(apply_fn, x[:5], chunk_size=2),
                         **TRAIN)[1]
        for K in (1, math.inf)
    }
    _, sweep = iterlin.train_sweep(apply_fn, tree_stack([params, params]), (x, y), K=[1, math.inf],
                                   callback=kernel_tracker(apply_fn, x[:5]), **TRAIN)
    return single, sweep


def test_kernel_tracker_fixed_linearisation_never_moves_the_linear_kernel(tracked_runs):
    hist = tracked_runs[0][math.inf]
    np.testing.assert_array_equal(hist["step"], [0, 4, 8, 12])
    np.testing.assert_array_equal(hist["kernel_distance_relin"], 0.0)  # θ_s = θ_0 throughout
    d_init = hist["kernel_distance_init"]
    assert d_init[0] == 0.0 and d_init[-1] > 1e-6  # but the network's kernel moved
    assert np.isnan(hist["kernel_velocity"][0]) and np.all(hist["kernel_velocity"][1:] > 0)


def test_kernel_tracker_with_K1_moves_the_linear_kernel_at_every_point(tracked_runs):
    hist = tracked_runs[0][1]
    assert hist["kernel_distance_relin"][0] == 0.0
    assert np.all(hist["kernel_distance_relin"][1:] > 1e-7)
    # K = 1: θ_s = θ_t at every point, so the linear model's kernel change is the network's
    np.testing.assert_allclose(hist["kernel_distance_relin"][1:], hist["kernel_velocity"][1:] * 4, rtol=1e-5)


def test_kernel_tracker_in_a_sweep_matches_single_runs(tracked_runs):
    single, sweep = tracked_runs
    assert sweep["kernel_distance_init"].shape == (2, 4)
    for r, K in enumerate([1, math.inf]):
        for key in ("kernel_distance_init", "kernel_velocity", "kernel_distance_relin"):
            np.testing.assert_allclose(sweep[key][r], single[K][key], rtol=1e-4, atol=1e-7, err_msg=key)


def test_kernel_tracker_at_relinearisation_steps_sees_every_relinearisation():
    apply_fn, params, x, y = tiny_problem(n=16, width=8)
    steps, K = 12, 3
    _, hist = iterlin.train(apply_fn, params, (x, y), K=K, steps=steps, optimizer=optax.sgd(0.5),
                            eval_steps=relinearisation_steps(K, steps), callback=kernel_tracker(apply_fn, x[:4]))
    np.testing.assert_array_equal(hist["step"], [0, 3, 6, 9, 12])
    np.testing.assert_array_equal(hist["n_relin"], [0, 1, 2, 3, 4])
    assert np.all(hist["kernel_distance_relin"][1:] > 0)
    # evaluated right after each re-linearisation θ_s = θ_t: the linear and the network kernels agree
    np.testing.assert_allclose(hist["kernel_distance_relin"][1:], hist["kernel_velocity"][1:] * K, rtol=1e-5)


def test_kernel_tracker_params0_gives_the_initial_kernel_on_resume():
    apply_fn, params, x, _ = tiny_problem(n=16, width=8)
    later = jax.tree.map(lambda a: a * 1.05, params)
    state = iterlin.init_state(later, optax.sgd(0.1), 1)
    fresh = kernel_tracker(apply_fn, x[:4])(4, state)
    resumed = kernel_tracker(apply_fn, x[:4], params0=params)(4, state)
    assert fresh["kernel_distance_init"] == 0.0 and resumed["kernel_distance_init"] > 1e-6


def test_a_user_convolution_is_lowered_by_the_conv_rule(x64):
    """A user's Flax network with lax.conv and a max-pool: the kernel and Θv with conv="auto" (products
    on the CPU, iterlin.conv.as_products) and conv="matmul" equal conv="xla" (as written), float64."""
    from iterlin import gauss_newton_step

    apply_fn, params, x, y = tiny_conv_problem(n=5, out=2)
    ref = empirical_ntk(apply_fn, params, x, chunk_size=2, conv="xla")
    v = jax.random.normal(jax.random.PRNGKey(2), (10,), jnp.float64)
    for conv in ("auto", "matmul"):
        np.testing.assert_allclose(empirical_ntk(apply_fn, params, x, chunk_size=2, conv=conv), ref, rtol=1e-10,
                                   atol=1e-12)
        np.testing.assert_allclose(ntk_vector_product(apply_fn, params, x, conv=conv)(v), ref @ v, rtol=1e-10,
                                   atol=1e-12)
        step = [gauss_newton_step(apply_fn, params, x, y, damping=0.1, loss="ce", conv=c)
                for c in (conv, "xla")]
        assert tree_allclose(*step, rtol=1e-9, atol=1e-12)
