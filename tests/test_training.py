"""The paper's equations as tests: K = 1 is (S)GD, K ≥ steps is the fixed linearisation, sweeps = single runs."""

import math

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from _toy import init_params, tiny_conv_problem, tiny_problem
from jax.flatten_util import ravel_pytree

import iterlin
from iterlin.losses import get_loss
from iterlin.training import TrainState, commit_step, init_state, make_batch_fn, make_linearised_update, make_step
from iterlin.tree import tree_allclose, tree_index, tree_stack

STEPS = 12


def _reference_loop(fn, params, batch_fn, optimizer, loss, steps):
    """Plain (S)GD on ``fn(params, x)``: the textbook loop, host-side, one step at a time."""
    loss = get_loss(loss)
    opt_state = optimizer.init(params)
    grad = jax.jit(jax.grad(lambda p, x, y: jnp.mean(loss.per_example(fn(p, x), y))))
    for t in range(steps):
        x, y = batch_fn(t)
        updates, opt_state = optimizer.update(grad(params, x, y), opt_state, params)
        params = optax.apply_updates(params, updates)
    return params


@pytest.mark.parametrize("batch_size", [None, 8])
@pytest.mark.parametrize("loss", ["ce", "mse"])
def test_K1_equals_plain_gradient_descent(x64, batch_size, loss):
    apply_fn, params, x, y = tiny_problem(classification=(loss == "ce"))
    key = jax.random.PRNGKey(7)
    opt = optax.sgd(0.3, momentum=0.9)
    got, hist = iterlin.train(apply_fn, params, (x, y), K=1, steps=STEPS, optimizer=opt, loss=loss,
                              batch_size=batch_size, key=key, eval_every=4)
    ref = _reference_loop(apply_fn, params, make_batch_fn(x, y, batch_size, key), opt, loss, STEPS)
    assert tree_allclose(got, ref, rtol=1e-10, atol=1e-12)
    assert not tree_allclose(got, params, atol=1e-3)  # training moved the parameters
    np.testing.assert_array_equal(hist["n_relin"], [0, 4, 8, 12])  # T/K
    # with K = 1 the linear model is the network at every evaluation point
    np.testing.assert_allclose(hist["lin_train_loss"], hist["net_train_loss"], rtol=1e-10)


@pytest.mark.parametrize("loss", ["ce", "mse"])
def test_the_linearised_step_itself_at_K1_is_textbook_sgd(x64, loss):
    """The linearised step (Eq. 3–4, not its K = 1 fast path ``step.k1``) at θ_s = θ, in float64:
    θ ← θ − η ∇L(f(θ, x)) with the gradient of the network itself, written out by hand (no optax,
    no iterlin loss object), equal to rounding at every step; θ_s follows θ (re-linearised each step)."""
    apply_fn, params, x, y = tiny_problem(classification=(loss == "ce"))
    lr = 0.3
    step = make_step(apply_fn, optax.sgd(lr), loss)
    assert step is not step.k1
    linearised = jax.jit(step)
    batch_fn = make_batch_fn(x, y, 8, jax.random.PRNGKey(5))

    def textbook_loss(p, xb, yb):
        out = apply_fn(p, xb)
        if loss == "mse":
            return jnp.mean(0.5 * jnp.sum((out - yb) ** 2, -1))
        return jnp.mean(jax.nn.logsumexp(out, -1) - jnp.take_along_axis(out, yb[:, None], -1)[:, 0])

    grad = jax.jit(jax.grad(textbook_loss))
    state, ref = init_state(params, optax.sgd(lr), 1), params
    for t in range(STEPS):
        xb, yb = batch_fn(t)
        state, _ = linearised(state, (xb, yb))
        ref = jax.tree.map(lambda p, g: p - lr * g, ref, grad(ref, xb, yb))
        assert tree_allclose(state.params, ref, rtol=1e-12, atol=1e-14), t
        assert tree_allclose(state.params_s, state.params, rtol=1e-14, atol=1e-16)  # θ_s ← θ (to an ulp)
        assert int(state.n_relin) == t + 1
    assert jax.tree.leaves(state.params)[0].dtype == jnp.float64
    assert not tree_allclose(state.params, params, atol=1e-3)  # training moved the parameters


@pytest.mark.parametrize("K", [STEPS, 10 * STEPS, math.inf, 5e6])
def test_K_at_least_steps_equals_training_the_fixed_linearisation(x64, K):
    apply_fn, params, x, y = tiny_problem()
    key = jax.random.PRNGKey(3)
    opt = optax.sgd(0.5)
    got, hist = iterlin.train(apply_fn, params, (x, y), K=K, steps=STEPS, optimizer=opt, batch_size=8, key=key)
    f_lin = iterlin.linearise(apply_fn, params)  # linearised once, at initialisation
    ref = _reference_loop(f_lin, params, make_batch_fn(x, y, 8, key), opt, "ce", STEPS)
    assert tree_allclose(got, ref, rtol=1e-10, atol=1e-12)
    # and this differs from SGD on the network: the test can tell the two apart
    sgd = _reference_loop(apply_fn, params, make_batch_fn(x, y, 8, key), opt, "ce", STEPS)
    assert not tree_allclose(got, sgd, rtol=1e-4, atol=1e-4)
    assert hist["n_relin"][-1] == (1 if K == STEPS else 0)


def test_intermediate_K_relinearises_every_K_steps(x64):
    """K = 3 equals the textbook Algorithm 1: GD on f_lin at θ_s, θ_s ← θ every 3 steps."""
    apply_fn, params, x, y = tiny_problem()
    key, opt, K = jax.random.PRNGKey(1), optax.sgd(0.5), 3
    got, _ = iterlin.train(apply_fn, params, (x, y), K=K, steps=STEPS, optimizer=opt, batch_size=8, key=key)
    batch_fn = make_batch_fn(x, y, 8, key)
    ref = params
    for block in range(STEPS // K):  # SGD has no state, so restarting it per block is exact
        ref = _reference_loop(iterlin.linearise(apply_fn, ref), ref,
                              lambda t, b=block: batch_fn(b * K + t), opt, "ce", K)
    assert tree_allclose(got, ref, rtol=1e-10, atol=1e-12)


def test_cross_entropy_is_applied_to_linearised_logits_not_linearised(x64):
    """∇θ CE(f_lin(θ)) = Jᵀ(softmax(f_s + J δ) − y)/N, not the linearised loss's Jᵀ(softmax(f_s) − y)/N."""
    apply_fn, params_s, x, y = tiny_problem()
    params = jax.tree.map(lambda a, b: a + 0.5 * (b - a), params_s, init_params(5))  # θ ≠ θ_s
    state = init_state(params_s, optax.sgd(1.0), math.inf)._replace(params=params)
    new, _ = make_step(apply_fn, optax.sgd(1.0), "ce")(state, (x, y))
    grad = ravel_pytree(params)[0] - ravel_pytree(new.params)[0]  # lr 1: the step is −∇

    flat_s, unravel = ravel_pytree(params_s)
    jac = jax.jacfwd(lambda v: apply_fn(unravel(v), x))(flat_s)  # (N, O, P)
    onehot = jax.nn.one_hot(y, 3)
    logits_lin = apply_fn(params_s, x) + jnp.einsum("nop,p->no", jac, ravel_pytree(params)[0] - flat_s)
    expected = jnp.einsum("nop,no->p", jac, jax.nn.softmax(logits_lin) - onehot) / x.shape[0]
    linearised_loss = jnp.einsum("nop,no->p", jac, jax.nn.softmax(apply_fn(params_s, x)) - onehot) / x.shape[0]
    np.testing.assert_allclose(grad, expected, rtol=1e-10, atol=1e-12)
    assert np.linalg.norm(grad - linearised_loss) > 1e-2 * np.linalg.norm(grad)


def test_sweep_run_equals_the_same_run_alone():
    apply_fn, _, x, y = tiny_problem(n=40)
    Ks = [1, 3, math.inf]
    inits = [init_params(s) for s in (0, 1, 2)]
    opt, key = optax.sgd(0.2, momentum=0.5), jax.random.PRNGKey(11)
    kw = dict(steps=15, optimizer=opt, batch_size=10, key=key, eval_data=(x[:8], y[:8]), eval_every=5)
    swept, hist = iterlin.train_sweep(apply_fn, tree_stack(inits), (x, y), K=Ks, **kw)
    assert hist["net_train_acc"].shape == (3, 4) and hist["step"].shape == (4,)
    for i, (K, p0) in enumerate(zip(Ks, inits)):
        alone, h = iterlin.train(apply_fn, p0, (x, y), K=K, **kw)
        assert tree_allclose(tree_index(swept, i), alone, rtol=2e-5, atol=2e-6)
        for k in ("net_test_acc", "lin_train_loss", "n_relin"):
            np.testing.assert_allclose(hist[k][i], h[k], rtol=2e-5, atol=1e-6)
    np.testing.assert_array_equal(hist["n_relin"][:, -1], [15, 5, 0])


def test_sweep_with_per_run_hyperparams_and_keys_equals_each_run_alone(x64):
    """Per-run learning rates (an inject_hyperparams optimizer) and one batch key per run: run i is
    ``train`` with ``optax.sgd(lr_i)`` and ``key_i``; the final state holds each rate."""
    apply_fn, params, x, y = tiny_problem(n=40)
    Ks, rates = [1, 3, math.inf], [0.05, 0.2, 0.4]
    keys = jnp.stack([jax.random.PRNGKey(i) for i in (7, 8, 9)])
    kw = dict(steps=12, batch_size=10, eval_data=(x[:8], y[:8]), eval_every=4)
    state, hist = iterlin.train_sweep(apply_fn, tree_stack([params] * 3), (x, y), K=Ks, key=keys,
                                      optimizer=optax.inject_hyperparams(optax.sgd)(learning_rate=1.0),
                                      hyperparams={"learning_rate": rates}, return_state=True, **kw)
    lr = state.opt_state.hyperparams["learning_rate"]
    assert lr.dtype == jnp.float64 and lr.tolist() == rates
    for i, (K, rate) in enumerate(zip(Ks, rates)):
        alone, h = iterlin.train(apply_fn, params, (x, y), K=K, key=keys[i], optimizer=optax.sgd(rate), **kw)
        assert tree_allclose(tree_index(state.params, i), alone, rtol=1e-10, atol=1e-12)
        for k in ("net_train_loss", "lin_test_acc", "n_relin"):
            np.testing.assert_allclose(hist[k][i], h[k], rtol=1e-10, atol=1e-12, err_msg=k)
    assert len({float(v) for v in hist["net_train_loss"][:, -1]}) == 3  # the rates matter


def test_per_run_hyperparams_outlive_the_optimizer_reset(x64):
    """With ``reset_optimizer`` (a fresh Adam at each re-linearisation) run i still trains at its own
    rate after every reset: it equals ``train`` with ``optax.adam(lr_i)`` alone, which resets to that
    rate; before the fix the reset put every run back at the rate the optimizer was made with."""
    apply_fn, params, x, y = tiny_problem(n=40)
    Ks, rates = [3, 4, 1], [0.01, 0.05, 0.002]
    kw = dict(steps=12, batch_size=10, key=jax.random.PRNGKey(3), eval_data=(x[:8], y[:8]), eval_every=4,
              reset_optimizer=True)
    state, hist = iterlin.train_sweep(apply_fn, tree_stack([params] * 3), (x, y), K=Ks,
                                      optimizer=optax.inject_hyperparams(optax.adam)(learning_rate=1.0),
                                      hyperparams={"learning_rate": rates}, return_state=True, **kw)
    assert state.opt_state.hyperparams["learning_rate"].tolist() == rates
    for i, (K, rate) in enumerate(zip(Ks, rates)):
        alone, h = iterlin.train(apply_fn, params, (x, y), K=K, optimizer=optax.adam(rate), **kw)
        assert tree_allclose(tree_index(state.params, i), alone, rtol=1e-10, atol=1e-12)
        np.testing.assert_allclose(hist["net_train_loss"][i], h["net_train_loss"], rtol=1e-10, atol=1e-12)


def test_per_run_hyperparams_are_the_state_each_rate_would_make():
    """Run i's optimizer state holds its rate as ``inject_hyperparams(sgd)(learning_rate=lr_i).init(θ_0)``
    would (same dtype and value: float32 for float32 parameters), so a sweep equals its runs' states stacked."""
    apply_fn, params, x, y = tiny_problem()
    rates = [0.1, 1 / 3]
    state, _ = iterlin.train_sweep(apply_fn, tree_stack([params] * 2), (x, y), K=[2, 2], steps=1,
                                   optimizer=optax.inject_hyperparams(optax.sgd)(learning_rate=0.5),
                                   hyperparams={"learning_rate": rates}, return_state=True, eval_steps=[0, 1])
    for i, rate in enumerate(rates):
        want = optax.inject_hyperparams(optax.sgd)(learning_rate=rate).init(params).hyperparams["learning_rate"]
        got = tree_index(state.opt_state, i).hyperparams["learning_rate"]
        assert got.dtype == want.dtype == jnp.float32 and got.shape == want.shape == ()
        assert got.tobytes() == want.tobytes()


def test_history_reports_network_and_linear_model_separately(x64):
    apply_fn, params, x, y = tiny_problem()
    _, h = iterlin.train(apply_fn, params, (x, y), K=math.inf, steps=10, optimizer=optax.sgd(1.0),
                         eval_data=(x, y), eval_every=5)
    assert h["lin_train_loss"][-1] < h["lin_train_loss"][0]
    # the network and its fixed linearisation part ways after training
    assert abs(h["net_train_loss"][-1] - h["lin_train_loss"][-1]) > 1e-4
    np.testing.assert_allclose(h["net_test_acc"], h["net_train_acc"])  # same data passed as test
    assert h["diverged"] == False and h["diverged_step"] == -1  # noqa: E712


def test_regression_history_reports_rmse(x64):
    apply_fn, params, x, y = tiny_problem(classification=False, out=1)
    _, h = iterlin.train(apply_fn, params, (x, y), K=2, steps=4, optimizer=optax.sgd(0.1), loss="mse")
    out = apply_fn(params, x)
    np.testing.assert_allclose(h["net_train_rmse"][0], np.sqrt(np.mean((out - y) ** 2)), rtol=1e-10)
    np.testing.assert_allclose(h["net_train_loss"][0], 0.5 * np.mean(np.sum((out - y) ** 2, -1)), rtol=1e-10)


def test_minibatches_walk_a_permutation_per_epoch():
    x = jnp.arange(20.0)[:, None]
    batch_fn = make_batch_fn(x, jnp.arange(20), 5, jax.random.PRNGKey(0))
    epoch0 = np.concatenate([np.asarray(batch_fn(t)[1]) for t in range(4)])
    epoch1 = np.concatenate([np.asarray(batch_fn(t)[1]) for t in range(4, 8)])
    assert sorted(epoch0) == list(range(20)) and sorted(epoch1) == list(range(20))
    assert list(epoch0) != list(epoch1)
    np.testing.assert_array_equal(batch_fn(5)[1], batch_fn(5)[1])  # a pure function of t


def test_augmentation_is_on_device_and_deterministic_per_step():
    x = jax.random.normal(jax.random.PRNGKey(0), (8, 8, 8, 3))
    batch_fn = make_batch_fn(x, jnp.arange(8), None, jax.random.PRNGKey(1), augment=True)
    a, b = batch_fn(0)[0], batch_fn(1)[0]
    assert a.shape == x.shape and not np.allclose(a, b)
    np.testing.assert_array_equal(a, batch_fn(0)[0])


def test_eval_chunks_that_do_not_divide_the_split(x64):
    apply_fn, params, x, y = tiny_problem(n=23)
    _, h1 = iterlin.train(apply_fn, params, (x, y), K=1, steps=1, optimizer=optax.sgd(0.0), eval_batch_size=5)
    _, h2 = iterlin.train(apply_fn, params, (x, y), K=1, steps=1, optimizer=optax.sgd(0.0), eval_batch_size=1000)
    np.testing.assert_allclose(h1["net_train_loss"], h2["net_train_loss"], rtol=1e-12)
    np.testing.assert_allclose(h1["net_train_acc"], h2["net_train_acc"])


def test_compiled_loop_equals_per_step_dispatch(x64):
    """The accelerator path (one fori_loop between evaluations) and the CPU path give one result."""
    apply_fn, params, x, y = tiny_problem()
    kw = dict(K=3, steps=9, optimizer=optax.sgd(0.3, momentum=0.9), batch_size=8, key=jax.random.PRNGKey(2),
              eval_every=4)
    loop, h_loop = iterlin.train(apply_fn, params, (x, y), compiled_loop=True, **kw)
    steps, h_steps = iterlin.train(apply_fn, params, (x, y), compiled_loop=False, **kw)
    assert tree_allclose(loop, steps, rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(h_loop["lin_train_loss"], h_steps["lin_train_loss"], rtol=1e-12)
    np.testing.assert_array_equal(h_loop["n_relin"], [0, 1, 2, 3])


def test_a_user_convolution_takes_the_products_and_the_compiled_loop_on_cpu(x64, monkeypatch):
    """The rule (conv="auto"): on the CPU, train rewrites a user's convolutions into products
    (iterlin.conv.as_products), so its step holds none and runs in the compiled loop; with
    conv="xla" the step holds lax.conv and fit dispatches it step by step (jax-ml/jax#12868). Both
    routes train the same network to rounding."""
    from iterlin.training import _loop

    seen = []
    rule = _loop._pays_loop_penalty
    monkeypatch.setattr(_loop, "_pays_loop_penalty", lambda *a: seen.append(rule(*a)) or seen[-1])
    apply_fn, params, x, y = tiny_conv_problem()
    kw = dict(K=2, steps=4, optimizer=optax.sgd(0.1), batch_size=8, key=jax.random.PRNGKey(2), eval_every=2)
    auto, h_auto = iterlin.train(apply_fn, params, (x, y), **kw)
    xla, h_xla = iterlin.train(apply_fn, params, (x, y), conv="xla", **kw)
    on_cpu = jax.default_backend() == "cpu"
    assert seen == [False, on_cpu]  # auto: no convolution left (CPU); xla: a convolution, dispatched on the CPU
    assert tree_allclose(auto, xla, rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(h_auto["lin_train_loss"], h_xla["lin_train_loss"], rtol=1e-10)
    with pytest.raises(ValueError, match="conv"):
        iterlin.train(apply_fn, params, (x, y), conv="fast", **kw)


# ----------------------------------------------------------------------------------------------
# TrainState.policy, and commit_proposal (commit_step), the one divergence guard
# ----------------------------------------------------------------------------------------------


def _leaves_equal(a, b):
    la, ta = jax.tree.flatten(a)
    lb, tb = jax.tree.flatten(b)
    return ta == tb and all(np.array_equal(np.asarray(u), np.asarray(v)) for u, v in zip(la, lb))


def test_policy_defaults_to_empty_and_rides_beside_the_optimizer_state():
    params = {"w": jnp.ones((2, 1))}
    st = init_state(params, optax.sgd(0.1, momentum=0.9), 3)
    assert TrainState._fields[-1] == "policy" and st.policy == ()
    assert _leaves_equal(st.opt_state, optax.sgd(0.1, momentum=0.9).init(params))
    policy = {"h": jnp.asarray(0.5), "log": jnp.zeros(3)}
    st = init_state(params, optax.sgd(0.1), 3, policy=policy)
    assert st.policy is policy


def test_commit_step_accepts_a_finite_proposal_and_freezes_everything_on_divergence():
    params = {"w": jnp.asarray([1.0, 2.0])}
    opt = optax.sgd(0.1, momentum=0.9)
    st = init_state(params, opt, 2, policy=jnp.asarray(0.5))
    new_p = {"w": jnp.asarray([3.0, 4.0])}
    new_opt = jax.tree.map(lambda a: a + 1.0, st.opt_state)
    relin = jnp.asarray(True)

    ok = commit_step(st, jnp.asarray(1.0), new_p, new_p, new_opt, relin, jnp.asarray(0.25))
    assert _leaves_equal(ok.params, new_p) and _leaves_equal(ok.params_s, new_p)
    assert _leaves_equal(ok.opt_state, new_opt) and float(ok.policy) == 0.25
    assert int(ok.step) == 1 and int(ok.n_relin) == 1 and not bool(ok.diverged) and int(ok.diverged_step) == -1
    assert float(commit_step(st, jnp.asarray(1.0), new_p, new_p, new_opt, relin).policy) == 0.5  # None: kept

    inf_p = {"w": jnp.asarray([3.0, jnp.inf])}
    for value, proposal in ((jnp.asarray(jnp.nan), new_p), (jnp.asarray(1.0), inf_p)):  # loss, or update
        bad = commit_step(ok, value, proposal, proposal, new_opt, relin, jnp.asarray(9.0))
        assert bool(bad.diverged) and int(bad.diverged_step) == 1 and int(bad.step) == 2
        for field in ("params", "params_s", "opt_state", "policy", "n_relin", "K"):
            assert _leaves_equal(getattr(bad, field), getattr(ok, field)), field
        later = commit_step(bad, jnp.asarray(1.0), new_p, new_p, new_opt, relin, jnp.asarray(7.0))  # stays frozen
        assert bool(later.diverged) and int(later.diverged_step) == 1 and int(later.step) == 3
        for field in ("params", "params_s", "opt_state", "policy", "n_relin"):
            assert _leaves_equal(getattr(later, field), getattr(ok, field)), field


def test_commit_proposal_guards_any_state_type_with_the_protocol_fields():
    """The one guard is generic over the state: another NamedTuple with its own fields (here an
    extra ``h``, no θ_s, optimizer or policy) is frozen whole on divergence, step counting on."""
    from typing import Any, NamedTuple

    from iterlin.training import commit_proposal

    class Other(NamedTuple):
        params: Any
        step: jax.Array
        diverged: jax.Array
        diverged_step: jax.Array
        h: jax.Array

    i32 = lambda v: jnp.asarray(v, jnp.int32)  # noqa: E731
    st = Other({"w": jnp.asarray([1.0, 2.0])}, i32(0), jnp.asarray(False), i32(-1), jnp.asarray(0.5))
    ok = commit_proposal(st, jnp.asarray(1.0), st._replace(params={"w": jnp.asarray([3.0, 4.0])}, h=jnp.asarray(2.0)))
    assert type(ok) is Other and ok.params["w"].tolist() == [3.0, 4.0] and float(ok.h) == 2.0
    assert int(ok.step) == 1 and not bool(ok.diverged) and int(ok.diverged_step) == -1
    inf_p = {"w": jnp.asarray([jnp.inf, 0.0])}
    bad = commit_proposal(ok, jnp.asarray(1.0), ok._replace(params=inf_p, h=jnp.asarray(9.0)))
    assert bool(bad.diverged) and int(bad.diverged_step) == 1 and int(bad.step) == 2
    assert bad.params["w"].tolist() == [3.0, 4.0] and float(bad.h) == 2.0
    later = commit_proposal(bad, jnp.asarray(1.0), bad._replace(h=jnp.asarray(7.0)))  # stays frozen
    assert bool(later.diverged) and int(later.diverged_step) == 1 and int(later.step) == 3 and float(later.h) == 2.0


def test_make_step_is_the_linearised_update_then_one_commit(x64):
    """make_step = make_linearised_update (Eq. 3) + the relin rule (Eq. 4), committed once."""
    apply_fn, params, x, y = tiny_problem()
    opt = optax.adam(1e-2)
    st = init_state(params, opt, 1, policy=jnp.asarray(3.0))
    new, m = jax.jit(make_step(apply_fn, opt, "ce"))(st, (x, y))
    value, p, o = make_linearised_update(apply_fn, opt, "ce")(params, params, st.opt_state, x, y)
    assert float(m["loss"]) == pytest.approx(float(value), rel=1e-12)
    assert tree_allclose(new.params, p, rtol=1e-12, atol=1e-14) and tree_allclose(new.params_s, p, rtol=1e-12)
    assert tree_allclose(new.opt_state, o, rtol=1e-12, atol=1e-14)
    assert float(new.policy) == 3.0 and int(new.n_relin) == 1


@pytest.mark.parametrize("per_run_keys", [False, True])
@pytest.mark.parametrize("compiled_loop", [False, True])
def test_sweep_runs_stepped_one_by_one_equal_the_vmapped_sweep(x64, per_run_keys, compiled_loop):
    """``vectorise=False`` (runs one after the other between evaluation points: the CPU's default
    for models of at least ``STEP_RUNS_MIN_PARAMS`` parameters) and ``vectorise=True`` (vmap) are two routes to the same results, with shared or per-run keys."""
    from iterlin.training import fit, init_state, make_step
    from iterlin.tree import tree_stack

    apply_fn, params, x, y = tiny_problem()
    opt = optax.sgd(0.2)
    state = tree_stack([init_state(params, opt, k) for k in (1, 3, math.inf)])
    key = jax.random.PRNGKey(5)
    if per_run_keys:
        key = jnp.stack([jax.random.PRNGKey(i) for i in range(3)])
    out = {}
    for vec in (False, True):
        out[vec] = fit(make_step(apply_fn, opt, "ce"), state, apply_fn, (x, y), steps=7, batch_size=8, key=key,
                       eval_data=(x, y), eval_steps=[0, 4, 7], sweep=True, augment=False,
                       compiled_loop=compiled_loop, vectorise=vec)
    for name in ("net_train_loss", "lin_test_acc", "n_relin"):
        np.testing.assert_allclose(out[False][1][name], out[True][1][name], rtol=1e-10, atol=1e-12, err_msg=name)
    np.testing.assert_allclose(out[False][0].params["Dense_0"]["kernel"], out[True][0].params["Dense_0"]["kernel"],
                               rtol=1e-10, atol=1e-12)
    if per_run_keys:  # each run drew its own batches: run i equals a lone run with key i
        from iterlin.training import train

        _, alone = train(apply_fn, params, (x, y), K=3, steps=7, optimizer=opt, batch_size=8, key=key[1],
                         eval_data=(x, y), eval_steps=[0, 4, 7])
        np.testing.assert_allclose(out[False][1]["net_train_loss"][1], alone["net_train_loss"], rtol=1e-10)


def test_one_key_per_run_needs_a_sweep_of_that_many_runs():
    from iterlin.training import fit, init_state, make_step
    from iterlin.tree import tree_stack

    apply_fn, params, x, y = tiny_problem()
    opt = optax.sgd(0.2)
    keys = jnp.stack([jax.random.PRNGKey(i) for i in range(3)])
    with pytest.raises(ValueError, match=r"key of shape \(3, 2\) is not allowed"):
        fit(make_step(apply_fn, opt, "ce"), init_state(params, opt, 1), apply_fn, (x, y), steps=2, key=keys)
    state = tree_stack([init_state(params, opt, 1)] * 2)
    with pytest.raises(ValueError, match=r"leading axis equal to the number of runs \(2\)"):
        fit(make_step(apply_fn, opt, "ce"), state, apply_fn, (x, y), steps=2, key=keys, sweep=True)


def test_training_metrics_on_a_subset_of_the_training_set(x64):
    from iterlin.training import fit, init_state, make_step

    apply_fn, params, x, y = tiny_problem()
    opt = optax.sgd(0.2)
    kw = dict(steps=4, batch_size=8, eval_steps=[0, 4], key=jax.random.PRNGKey(0))
    _, sub = fit(make_step(apply_fn, opt, "ce"), init_state(params, opt, 2), apply_fn, (x, y), eval_train_size=10,
                 eval_data=(x[:10], y[:10]), **kw)
    np.testing.assert_allclose(sub["net_train_loss"], sub["net_test_loss"], rtol=1e-12)
    np.testing.assert_allclose(sub["lin_train_acc"], sub["lin_test_acc"], rtol=1e-12)
    with pytest.raises(ValueError, match="eval_train_size=25 is not allowed"):
        fit(make_step(apply_fn, opt, "ce"), init_state(params, opt, 2), apply_fn, (x, y), eval_train_size=25, **kw)


@pytest.mark.parametrize("steps,batch,n_train,n_test", [
    (100_000, 128, 4660, 0), (10_000, 128, 50_000, 10_000), (2_000, 256, 50_000, 0), (200, 128, 4660, 932),
    (40, 256, 1024, 0), (3, 8, 24, 10),
])
def test_default_evaluation_is_budgeted_at_a_tenth_of_the_images_trained_on(steps, batch, n_train, n_test):
    from iterlin.training import DEFAULT_EVAL_BUDGET, MIN_EVAL_TRAIN, default_evaluation
    from iterlin.training._evaluation import eval_points

    every, n_sub = default_evaluation(steps, batch, n_train, n_test)
    points = eval_points(steps, every, None)
    assert 2 <= len(points) <= 21 and points[0] == 0 and points[-1] == steps
    assert min(n_train, MIN_EVAL_TRAIN) <= n_sub <= n_train
    evaluated = len(points) * (n_sub + n_test)
    if len(points) > 2:  # only the two ends are kept beyond the budget
        assert evaluated <= DEFAULT_EVAL_BUDGET * steps * batch
    if 21 * (n_train + n_test) <= DEFAULT_EVAL_BUDGET * steps * batch:  # room for everything: all of it
        assert (len(points), n_sub) == (21, n_train)


def test_fit_evaluates_on_the_default_schedule_unless_told(x64):
    from iterlin.training import default_evaluation, fit, init_state, make_step
    from iterlin.training._evaluation import eval_points

    apply_fn, params, x, y = tiny_problem(n=600)
    opt = optax.sgd(0.2)
    run = lambda **kw: fit(make_step(apply_fn, opt, "ce"), init_state(params, opt, 2), apply_fn, (x, y), steps=600,
                           batch_size=32, key=jax.random.PRNGKey(0), compiled_loop=True, **kw)[1]
    every, n_sub = default_evaluation(600, 32, x.shape[0])
    default = run()
    assert default["step"].tolist() == eval_points(600, every, None) and 2 < len(default["step"]) < 21
    assert run(eval_every=200)["step"].tolist() == [0, 200, 400, 600]  # told: the schedule given
    # told the subset only: the schedule budgeted for it (all 600 images: fewer points)
    assert run(eval_train_size=600)["step"].tolist() == eval_points(600, default_evaluation(600, 32, 600, 0, 600)[0],
                                                                    None)
    assert len(run(eval_train_size=600)["step"]) < len(default["step"])
    # the default subset is the first n_sub images; given a schedule, all of them
    sub, full = run(eval_steps=[0, 600], eval_train_size=n_sub), run(eval_steps=[0, 600])
    assert n_sub < x.shape[0]
    np.testing.assert_allclose(default["net_train_loss"][[0, -1]], sub["net_train_loss"], rtol=1e-12)
    assert not np.allclose(full["net_train_loss"], sub["net_train_loss"])


def test_the_k1_step_is_the_linearised_step_at_K_1_without_the_jvp(x64):
    """``make_step(...).k1`` (plain gradient, what fit runs for K = 1) and the linearised step at
    K = 1 are two routes to one step: Eq. 3 with θ_s = θ_t."""
    apply_fn, params, x, y = tiny_problem()
    for opt in (optax.sgd(0.3), optax.adam(0.01)):
        step = make_step(apply_fn, opt, "ce")
        a = b = init_state(params, opt, 1)
        for t in range(4):
            batch = (x[4 * t:4 * t + 8], y[4 * t:4 * t + 8])
            a, ma = jax.jit(step)(a, batch)
            b, mb = jax.jit(step.k1)(b, batch)
            np.testing.assert_allclose(ma["loss"], mb["loss"], rtol=1e-12)
        assert tree_allclose(a.params, b.params, rtol=1e-10, atol=1e-12)
        assert tree_allclose(a.params_s, b.params_s, rtol=1e-10, atol=1e-12)
        assert int(a.n_relin) == int(b.n_relin) == 4 and int(b.step) == 4


def test_fit_runs_K_1_without_the_linearisation(monkeypatch):
    """A lone K = 1 run never calls the linearised apply (no JVP is traced); K = 2 does.

    K = 2 first: it traces its step and the evaluation (which evaluates the linear model). The
    K = 1 run then reuses that evaluation program (compiled once, same apply_fn, loss and shapes)
    and traces only its own step, ``step.k1``, which must not call the linearised apply at all.
    """
    import iterlin.training as T
    from iterlin.training import _evaluation, _steps

    calls = []
    real = _steps.linearised_apply

    def counting(*args, **kwargs):
        calls.append(1)
        return real(*args, **kwargs)

    for module in (_steps, _evaluation):  # the step's linearised loss, and the evaluation's linear model
        monkeypatch.setattr(module, "linearised_apply", counting)
    apply_fn, params, x, y = tiny_problem()
    opt = optax.sgd(0.1)
    T.fit(make_step(apply_fn, opt, "ce"), init_state(params, opt, 2), apply_fn, (x, y), steps=3, batch_size=8,
          eval_steps=[0, 3], eval_train_size=4)
    assert len(calls) >= 2  # K = 2: its step (the linearised loss) and the evaluation (the linear model)
    calls.clear()
    T.fit(make_step(apply_fn, opt, "ce"), init_state(params, opt, 1), apply_fn, (x, y), steps=3, batch_size=8,
          eval_steps=[0, 3], eval_train_size=4)
    assert calls == []  # K = 1: step.k1 traced afresh, without the linearisation


def test_evaluation_sums_are_keyed_by_model_split_and_metric_and_named_only_in_the_history():
    """The evaluation's sums carry typed keys (no name is parsed back); ``means`` divides by each
    split's size, takes the root of the squared error, and names each entry as the history does."""
    from iterlin.training._evaluation import MetricKey, means

    sums = {MetricKey("net", "test", "sq_err"): np.array([8.0, 18.0]), MetricKey("lin", "held_out", "acc"): 3.0,
            MetricKey("net", "train", "loss"): 6.0}
    out = means(sums, {"test": 2, "held_out": 4, "train": 3})
    assert sorted(out) == ["lin_held_out_acc", "net_test_rmse", "net_train_loss"]
    np.testing.assert_array_equal(out["net_test_rmse"], [2.0, 3.0])
    assert out["lin_held_out_acc"] == 0.75 and out["net_train_loss"] == 2.0


def test_K_is_checked_once_from_a_typed_config_to_the_step(monkeypatch):
    """A period passes ``check_K`` once where the experiment layer takes it (the typed config) and
    once where the core's public API takes it (``relin.every``), and nowhere below them."""
    import iterlin.repro.config
    import iterlin.relin
    import iterlin.training._state
    from iterlin.experiments import fig3
    from iterlin.validate import check_K

    calls = []

    def counting(module):
        def check(K, name="K"):
            calls.append((module, K))
            return check_K(K, name)
        return check

    for module in (iterlin.repro.config, iterlin.relin, iterlin.training._state):
        monkeypatch.setattr(module, "check_K", counting(module.__name__))
    config = fig3.EXPERIMENT.get_config("smoke", K=[5e6])
    assert calls == [("iterlin.repro.config", 5e6)]
    calls.clear()
    apply_fn, params, x, y = tiny_problem()
    iterlin.train_sweep(apply_fn, tree_stack([params] * len(config.K)), (x, y), K=list(config.K), steps=2,
                        optimizer=optax.sgd(0.1), eval_every=2)
    assert [m for m, _ in calls] == ["iterlin.relin"] * len(config.K)


@pytest.mark.parametrize("microbatch", [1, 4, 64])
def test_microbatched_step_equals_the_whole_batch(x64, microbatch):
    """Gradient accumulation over chunks of the batch (``microbatch``: chunks of one; two chunks of 4
    and a remainder of 2 of the batch of 10; 64 exceeds the batch) is the same training as one pass over the whole batch:
    the linearised steps (K = 3), the K = 1 steps (``step.k1``) and the sweep's vmapped steps."""
    apply_fn, params, x, y = tiny_problem(n=40)
    kw = dict(steps=9, batch_size=10, optimizer=optax.sgd(0.3), key=jax.random.PRNGKey(1), eval_every=3)
    for K in (3, 1):
        want, hw = iterlin.train(apply_fn, params, (x, y), K=K, **kw)
        got, hg = iterlin.train(apply_fn, params, (x, y), K=K, microbatch=microbatch, **kw)
        assert tree_allclose(got, want, rtol=1e-12, atol=1e-14)
        np.testing.assert_allclose(hg["lin_train_loss"], hw["lin_train_loss"], rtol=1e-12)
    stacked = tree_stack([params, init_params(1)])
    want, _ = iterlin.train_sweep(apply_fn, stacked, (x, y), K=[1, 3], **kw)
    got, _ = iterlin.train_sweep(apply_fn, stacked, (x, y), K=[1, 3], microbatch=microbatch, **kw)
    assert tree_allclose(got, want, rtol=1e-12, atol=1e-14)


def test_microbatch_sums_the_chunks_gradients(x64):
    """``mean_value_and_grad`` with chunks of 3 over 8 examples (two chunks and a remainder of 2) equals
    the mean loss and its gradient over the whole batch; and it differs from a mean of the chunks'
    means (the chunks are weighted by their sizes), so the test can tell the two apart."""
    from iterlin.training import mean_value_and_grad

    apply_fn, params, x, y = tiny_problem(n=8)
    per_example = lambda p, x, y: optax.softmax_cross_entropy_with_integer_labels(apply_fn(p, x), y)  # noqa: E731
    v, g = mean_value_and_grad(per_example, 3)(params, x, y)
    vw, gw = jax.value_and_grad(lambda p: jnp.mean(per_example(p, x, y)))(params)
    np.testing.assert_allclose(v, vw, rtol=1e-13)
    assert tree_allclose(g, gw, rtol=1e-12, atol=1e-14)
    means = [jnp.mean(per_example(params, x[i:i + 3], y[i:i + 3])) for i in (0, 3, 6)]
    assert abs(float(jnp.mean(jnp.stack(means))) - float(vw)) > 1e-6


def test_microbatch_reaches_the_step_of_train_and_train_sweep(x64):
    """A model that centres each batch it sees (as BatchNorm with batch statistics) trains differently
    in chunks of 5 than over whole batches of 10, through ``train`` and ``train_sweep`` alike: the
    option reaches the steps (and is not for such models, as documented)."""
    apply_fn, params, x, y = tiny_problem(n=40)
    centred = lambda p, xb: apply_fn(p, xb - jnp.mean(xb, axis=0))  # noqa: E731
    kw = dict(K=3, steps=3, batch_size=10, optimizer=optax.sgd(0.3), eval_steps=[0, 3])
    for mb, differs in ((None, False), (5, True)):
        whole, _ = iterlin.train(centred, params, (x, y), **kw)
        got, _ = iterlin.train(centred, params, (x, y), microbatch=mb, **kw)
        assert (not tree_allclose(got, whole, rtol=1e-6, atol=1e-8)) is differs
        swept, _ = iterlin.train_sweep(centred, tree_stack([params]), (x, y), K=[3], steps=3, batch_size=10,
                                       optimizer=optax.sgd(0.3), eval_steps=[0, 3], microbatch=mb)
        assert tree_allclose(tree_index(swept, 0), got, rtol=1e-10, atol=1e-12)


def test_microbatch_is_validated():
    apply_fn, params, x, y = tiny_problem()
    for bad in (0, -2, 2.5, "16"):
        with pytest.raises(ValueError, match="microbatch"):
            iterlin.train(apply_fn, params, (x, y), K=2, steps=1, optimizer=optax.sgd(0.1), microbatch=bad)


def test_microbatch_is_checked_once_on_each_entry_point(monkeypatch):
    """``train`` and ``train_sweep`` check ``microbatch`` once (they derive the evaluation chunk from
    it, then build the step without checking again); ``make_step``, an entry point too, checks it."""
    from iterlin.training import _api, _checks, _steps

    calls = []
    real = _checks.check_microbatch

    def counting(mb):
        calls.append(mb)
        return real(mb)

    monkeypatch.setattr(_api, "check_microbatch", counting)
    monkeypatch.setattr(_steps, "check_microbatch", counting)
    apply_fn, params, x, y = tiny_problem()
    iterlin.train(apply_fn, params, (x, y), K=2, steps=1, optimizer=optax.sgd(0.1), microbatch=4)
    assert calls == [4]
    iterlin.train_sweep(apply_fn, tree_stack([params]), (x, y), K=[2], steps=1, optimizer=optax.sgd(0.1),
                        microbatch=4)
    assert calls == [4, 4]
    make_step(apply_fn, optax.sgd(0.1), "ce", microbatch=4)
    assert calls == [4, 4, 4]
