"""iterlin.analysis.stability: the GGN matvec against the explicit matrix, λ_max against eigvalsh, and the
bound 2/λ_max deciding whether gradient descent on the linear model diverges (MSE, exact)."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from _toy import tiny_problem
from jax.flatten_util import ravel_pytree

import iterlin
from iterlin.analysis import stability


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


def test_the_start_vector_is_drawn_as_leaf_by_leaf():
    """The power iteration's default start: one compiled draw, the same bits as one draw per leaf."""
    _, params, _, _ = tiny_problem()
    params = {**params, "extra": jnp.zeros((3, 5), jnp.float32)}
    for key in (jax.random.key(0), jax.random.PRNGKey(7)):
        leaves, treedef = jax.tree.flatten(params)
        keys = jax.random.split(key, len(leaves))
        ref = [jax.random.normal(k, a.shape, a.dtype) for k, a in zip(keys, leaves)]
        got = stability._normal_like(params, key)
        assert jax.tree.structure(got) == treedef
        for a, b in zip(jax.tree.leaves(got), ref):
            assert np.array_equal(np.asarray(a), np.asarray(b))


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


# ------------------------------------------------------------------------------------------------
# Recording the sharpness along training
# ------------------------------------------------------------------------------------------------


def _explicit_lin_hessian(apply_fn, params_s, params, x, y):
    """(1/N) J_sᵀ H(f_lin_s(θ)) J_s for cross-entropy, densely."""
    flat_s, unravel = ravel_pytree(params_s)
    J = jax.jacfwd(lambda v: apply_fn(unravel(v), x))(flat_s)
    n, o, _ = J.shape
    out = iterlin.linearise(apply_fn, params_s)(params, x)
    p = jax.nn.softmax(out, -1)
    H = jax.vmap(jnp.diag)(p) - p[:, :, None] * p[:, None, :]
    return jnp.einsum("nap,nab,nbq->pq", J, H, J) / n


def test_linear_model_sharpness_is_the_top_eigenvalue_of_the_linear_models_hessian(x64):
    apply_fn, params_s, x, y = tiny_problem()
    params = jax.tree.map(lambda a: a + 0.3 * jnp.sign(a), params_s)  # θ_t away from θ_s
    lam, v = stability.linear_model_sharpness(apply_fn, params_s, params, x, y, iters=3000)
    G = np.asarray(_explicit_lin_hessian(apply_fn, params_s, params, x, y))
    w = np.linalg.eigvalsh(G)
    assert lam == pytest.approx(w[-1], rel=1e-8)
    assert abs(lam - float(np.linalg.eigvalsh(np.asarray(_explicit_lin_hessian(apply_fn, params_s, params_s, x, y)))[-1])) > 1e-3
    # the warm start from the eigenvector converges at once
    lam2, _ = stability.linear_model_sharpness(apply_fn, params_s, params, x, y, iters=1, v0=v)
    assert lam2 == pytest.approx(w[-1], rel=1e-8)


def test_recorder_in_training_matches_the_dense_eigendecomposition(x64):
    import optax

    apply_fn, params, x, y = tiny_problem()
    seen = []
    rec = stability.sharpness_recorder(apply_fn, x, y, lr=0.1, iters=3000, rtol=1e-14)

    def callback(t, state):  # keep θ_s and θ_t to check against
        seen.append((state.params_s, state.params))
        return rec(t, state)

    _, h = iterlin.train(apply_fn, params, (x, y), K=4, steps=10, optimizer=optax.sgd(0.1), batch_size=8,
                         eval_steps=[0, 2, 4, 6, 10], callback=callback)
    assert h["sharpness"].shape == (5,) and h["lr_over_bound"].shape == (5,)
    for lam, ratio, (ps, p) in zip(h["sharpness"], h["lr_over_bound"], seen):
        want = np.linalg.eigvalsh(np.asarray(_explicit_lin_hessian(apply_fn, ps, p, x, y)))[-1]
        assert lam == pytest.approx(want, rel=1e-7) and ratio == pytest.approx(0.1 * want / 2, rel=1e-7)
    # every: only the multiples of 4 are measured
    rec4 = stability.sharpness_recorder(apply_fn, x, y, lr=0.1, iters=50, every=4)
    _, h4 = iterlin.train(apply_fn, params, (x, y), K=4, steps=10, optimizer=optax.sgd(0.1), batch_size=8,
                          eval_steps=[0, 2, 4, 6, 10], callback=rec4)
    assert np.isnan(h4["sharpness"][[1, 3, 4]]).all() and np.isfinite(h4["sharpness"][[0, 2]]).all()


@pytest.mark.parametrize("factor", [0.95, 1.05])
def test_unstable_flag_fires_exactly_above_the_bound_mse(x64, factor):
    """MSE, K = ∞, full batch: gradient descent on one fixed linearisation, whose Hessian G is constant.
    Above 2/λ_max its loss grows (provably: the top direction is multiplied by |1 − ηλ| > 1 per step),
    below it falls at every step; the record says which, and the block's loss rise agrees."""
    import optax

    apply_fn, params, x, y = tiny_problem(classification=False)
    bound = stability.max_stable_lr(apply_fn, params, x, y, loss="mse", iters=3000)
    lr = factor * bound
    rec = stability.sharpness_recorder(apply_fn, x, y, lr=lr, loss="mse", iters=3000, rtol=1e-14)
    _, h = iterlin.train(apply_fn, params, (x, y), K=float("inf"), steps=200, optimizer=optax.sgd(lr), loss="mse",
                         eval_steps=list(range(0, 201, 20)), callback=rec)
    np.testing.assert_allclose(h["lr_over_bound"], factor, rtol=1e-8)
    rose, start, peak, at = stability.block_loss_rise(h)
    if factor > 1:
        assert stability.first_unstable_step(h) == 0 and rose and peak > 1.1 * start and at > 0
        assert h["lin_train_loss"][-1] > 1e3 * h["lin_train_loss"][0]
    else:
        assert stability.first_unstable_step(h) == -1 and not rose and at == -1
        assert np.all(np.diff(h["lin_train_loss"]) < 0)


def test_block_loss_rise_and_first_unstable_step_on_histories():
    h = {"step": np.array([0, 5, 10, 15, 20]),
         "n_relin": np.array([[0, 0, 1, 1, 2], [0, 0, 1, 1, 1]]),
         "lin_train_loss": np.array([[2.0, 1.9, 1.5, 1.6, 9.0],  # +6.7 % in a block: noise; 9.0 is a new block
                                     [2.0, 1.9, 1.5, 1.4, 2.2]]),  # 1.4 → 2.2 inside block 1
         "lr_over_bound": np.array([[0.2, 0.5, np.nan, 0.9, 1.0], [0.2, 1.2, 0.8, 2.0, np.nan]])}
    rose, start, peak, at = stability.block_loss_rise(h)
    assert rose.tolist() == [False, True] and (start[1], peak[1], at[1]) == (1.4, 2.2, 20) and at[0] == -1
    assert stability.block_loss_rise(h, rtol=0.05)[0].tolist() == [True, True]
    assert stability.first_unstable_step(h).tolist() == [-1, 5]
    nan = dict(h, lin_train_loss=np.array([[2.0, np.nan, 1.0, 1.0, 1.0], [2.0, 1.0, 1.0, 1.0, 1.0]]))
    assert stability.block_loss_rise(nan)[0].tolist() == [True, False]


def test_recorder_bad_arguments_are_named():
    apply_fn, params, x, y = tiny_problem()
    with pytest.raises(ValueError, match="lr=0"):
        stability.sharpness_recorder(apply_fn, x, y, lr=0)
    with pytest.raises(ValueError, match="every"):
        stability.sharpness_recorder(apply_fn, x, y, lr=0.1, every=0)


def test_bound_record_of_a_sweep_history():
    nan = np.nan
    h = {"step": np.array([0, 2, 4, 6]), "K": np.array([1.0, 2.0]), "lr": np.array([0.1, 0.2]),
         "lr_over_bound": np.array([[0.5, nan, 0.25, nan], [0.5, nan, 2.0, nan]]),
         "n_relin": np.array([[0, 2, 4, 6], [0, 1, 1, 3]]),
         "lin_train_loss": np.array([[2.3, 1.9, 1.6, 1.4], [2.3, 1.5, 2.2, 1.4]])}
    rec = stability.bound_record(h)
    np.testing.assert_allclose(rec.bound, [[0.2, nan, 0.4, nan], [0.4, nan, 0.1, nan]])  # η / (η λ / 2) = 2 / λ
    assert rec.rose_at.tolist() == [-1, 4] and rec.K.tolist() == [1, 2] and rec.step.tolist() == [0, 2, 4, 6]
    del h["lin_train_loss"]
    assert stability.bound_record(h).rose_at.tolist() == [-1, -1]


class _Stop(Exception):
    """Ends a run at an evaluation point, as a kill would: the checkpoint holds the point before."""


def _stopping_at(step):
    def factory(apply_fn, params0):
        def stop(t, state):
            if t == step:
                raise _Stop
            return {}

        return stop

    return factory


@pytest.mark.parametrize("sweep", [False, True])
def test_a_resumed_run_records_the_sharpness_of_an_uninterrupted_one_bit_for_bit(tmp_path, sweep):
    """The power iteration's warm start rides in the checkpoint (the recorder's carry, through
    ``merge_callbacks``): a run stopped after its second checkpoint and resumed by a fresh recorder
    records ``sharpness`` and ``lr_over_bound`` exactly as the run that was never stopped."""
    import optax

    from iterlin.experiments._common import merge_callbacks

    apply_fn, params, x, y = tiny_problem()
    if sweep:
        params = iterlin.tree.tree_stack([params, jax.tree.map(lambda a: 1.5 * a, params)])
    rec = lambda apply_fn, params0: stability.sharpness_recorder(apply_fn, x, y, lr=0.5, iters=30, rtol=1e-3)  # noqa: E731

    def run(*factories, checkpoint=None):
        callback = merge_callbacks(rec, *factories)(apply_fn, params)
        train = iterlin.train_sweep if sweep else iterlin.train
        return train(apply_fn, params, (x, y), K=[4, 4] if sweep else 4, steps=16,
                     optimizer=optax.sgd(0.5), batch_size=8, eval_every=2, callback=callback,
                     checkpoint=checkpoint)[1]

    want = run()
    ckpt = tmp_path / "run.npz"
    with pytest.raises(_Stop):
        run(_stopping_at(6), checkpoint=ckpt)  # checkpoints at 2 and 4 written, stopped at 6
    got = run(checkpoint=ckpt)
    for key in ("sharpness", "lr_over_bound"):
        assert np.isfinite(want[key]).all()
        np.testing.assert_array_equal(got[key], want[key], strict=True)
