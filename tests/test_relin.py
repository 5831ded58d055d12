"""iterlin.relin: when to re-linearise, as a pure policy (every, adaptive, until_solved).

Exactness is checked in float64: ``every(K)`` is the K = int path (bitwise), ``adaptive(0)`` is
K = 1 and ``adaptive(inf)`` is K = ∞, ``adaptive`` follows its rule (a literal reimplementation of
Eq. 3–4 with the rule, step by step on the host), a sweep mixing tolerances is each run alone,
``until_solved`` IS ``train_adam_solved`` and reproduces the Adam-solved loop as it was before it
became a policy (its step, verbatim, below), a checkpointed run resumes exactly.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from _compiles import compilations
from _toy import init_params, tiny_problem

from iterlin import relin
from iterlin.solvers.adam_solve import train_adam_solved
from iterlin.checkpoint import CheckpointError
from iterlin.linearise import linearised_apply
from iterlin.losses import get_loss
from iterlin.training import (
    commit_step,
    fit,
    init_state,
    make_linearised_update,
    make_step,
    train,
    train_sweep,
)
from iterlin.training._steps import _train_check_on
from iterlin.tree import tree_stack, tree_where

OPT = optax.sgd(0.3, momentum=0.9)


def _same(a, b):
    """Bitwise equal pytrees (NaN equal to NaN)."""
    la, ta = jax.tree.flatten(a)
    lb, tb = jax.tree.flatten(b)
    assert ta == tb
    for u, v in zip(la, lb, strict=True):
        np.testing.assert_array_equal(np.asarray(u), np.asarray(v))


def _same_history(h1, h2, skip=()):
    assert set(h1) - set(skip) == set(h2) - set(skip)
    for k in h1:
        if k not in skip:
            np.testing.assert_array_equal(np.asarray(h1[k]), np.asarray(h2[k]), err_msg=k)


def _close_history(h1, h2, rtol, skip=()):
    for k in set(h1) - set(skip):
        a, b = np.asarray(h1[k]), np.asarray(h2[k])
        if a.dtype.kind in "fc":
            np.testing.assert_allclose(a, b, rtol=rtol, atol=rtol, err_msg=k)
        else:
            np.testing.assert_array_equal(a, b, err_msg=k)


@pytest.fixture
def problem(x64):
    apply_fn, params, x, y = tiny_problem(n=24)
    return apply_fn, params, (x, y), (x[:8] + 0.5, y[:8])


# --------------------------------------------------------------------------------------------
# every(K) is the K = int path
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("K", [1, 3, math.inf])
@pytest.mark.parametrize("compiled_loop", [False, True])
def test_every_K_is_bitwise_the_integer_K_path(problem, K, compiled_loop):
    apply_fn, params, data, test = problem
    kw = dict(steps=10, optimizer=OPT, batch_size=8, eval_data=test, eval_every=3, compiled_loop=compiled_loop)
    p_int, h_int = train(apply_fn, params, data, K=K, **kw)
    p_pol, h_pol = train(apply_fn, params, data, K=relin.every(K), **kw)
    _same(p_int, p_pol)
    _same_history(h_int, h_pol)
    expected = [] if math.isinf(K) else list(range(K, 11, K))
    assert h_pol["relin_step"].tolist() == expected and h_pol["n_relin"][-1] == len(expected)


@pytest.mark.parametrize("vectorise", [False, True])
def test_every_in_a_sweep_is_bitwise_the_integer_sweep(problem, vectorise):
    apply_fn, _, data, test = problem
    params = tree_stack([init_params(s) for s in range(3)])
    kw = dict(steps=10, optimizer=OPT, batch_size=8, eval_data=test, eval_every=5, vectorise=vectorise)
    p_int, h_int = train_sweep(apply_fn, params, data, K=[1, 3, math.inf], **kw)
    p_pol, h_pol = train_sweep(apply_fn, params, data, K=[relin.every(1), relin.every(3), relin.every(math.inf)],
                               **kw)
    _same(p_int, p_pol)
    _same_history(h_int, h_pol)
    # (R, J): each run's steps, padded with −1
    assert h_pol["relin_step"].tolist() == [list(range(1, 11)), [3, 6, 9] + [-1] * 7, [-1] * 10]


def test_relin_steps_of_every_3_over_10_steps():
    f = lambda p, x: x @ p  # noqa: E731
    x = jnp.array([[1.0], [2.0]])
    _, h = train(f, jnp.zeros((1, 1)), (x, 3 * x), K=relin.every(3), steps=10, optimizer=optax.sgd(0.1), loss="mse")
    assert h["relin_step"].tolist() == [3, 6, 9] and h["relin_step"].dtype == np.int32


# --------------------------------------------------------------------------------------------
# adaptive
# --------------------------------------------------------------------------------------------


def _generic_K(step):
    """The linearised step without its ``k1`` shortcut (so fit runs the linearised step at K = 1)."""
    return lambda state, batch: step(state, batch)


def test_adaptive_zero_is_K_1(problem):
    apply_fn, params, data, test = problem
    kw = dict(steps=10, optimizer=OPT, batch_size=8, eval_data=test, eval_every=2)
    p_ad, h_ad = train(apply_fn, params, data, K=relin.adaptive(0), **kw)
    p_k1, h_k1 = train(apply_fn, params, data, K=1, **kw)  # the plain-gradient route (step.k1)
    assert jax.tree.all(jax.tree.map(lambda a, b: np.allclose(a, b, rtol=1e-12, atol=1e-14), p_ad, p_k1))
    _close_history(h_ad, h_k1, 1e-12, skip=("relin_gap",))
    assert h_ad["relin_step"].tolist() == list(range(1, 11))
    # and bitwise the linearised step at K = 1 (the same Eq. 3, the same decisions)
    state, h_lin = fit(_generic_K(make_step(apply_fn, OPT, "ce")), init_state(params, OPT, 1), apply_fn, data,
                       steps=10, batch_size=8, eval_data=test, eval_every=2)
    _same(p_ad, state.params)
    _same_history({k: v for k, v in h_ad.items() if not k.startswith("relin_")}, h_lin)


def test_adaptive_infinite_is_K_infinity(problem):
    apply_fn, params, data, test = problem
    kw = dict(steps=10, optimizer=OPT, batch_size=8, eval_data=test, eval_every=2)
    p_ad, h_ad = train(apply_fn, params, data, K=relin.adaptive(math.inf), **kw)
    p_inf, h_inf = train(apply_fn, params, data, K=math.inf, **kw)
    _same(p_ad, p_inf)  # the same step, plus a forward pass that decides nothing
    _same_history(h_ad, h_inf, skip=("relin_gap",))
    assert h_ad["relin_step"].tolist() == [] and h_ad["n_relin"][-1] == 0


def _reference_adaptive(apply_fn, params, x, y, *, lr, steps, tol, min_period, max_period):
    """Algorithm 1 with the adaptive rule, literally, on the host: full batch, plain SGD."""
    loss = get_loss("ce")
    L_lin = jax.jit(lambda ps, p: jnp.mean(loss.per_example(linearised_apply(apply_fn, ps, p, x), y)))
    L_net = jax.jit(lambda p: jnp.mean(loss.per_example(apply_fn(p, x), y)))
    grad = jax.jit(jax.grad(lambda p, ps: L_lin(ps, p)))
    theta, theta_s, k, relins = params, params, 0, []
    for t in range(steps):
        lin, net = float(L_lin(theta_s, theta)), float(L_net(theta))
        theta = jax.tree.map(lambda a, g: a - lr * g, theta, grad(theta, theta_s))
        k += 1
        drifted = tol == 0 or abs(lin - net) > tol * abs(net)
        if (k >= min_period and drifted) or k >= max_period:
            theta_s, k = theta, 0
            relins.append(t + 1)
    return theta, relins


@pytest.mark.parametrize("tol, min_period, max_period", [(0.02, 1, math.inf), (0.02, 4, 6), (0.0, 4, 4),
                                                         (math.inf, 1, 6), (0.05, 2, 7)])
def test_adaptive_follows_its_rule_with_min_and_max_periods(problem, tol, min_period, max_period):
    apply_fn, params, (x, y), _ = problem
    steps = 30
    ref_theta, ref_relins = _reference_adaptive(apply_fn, params, x, y, lr=0.5, steps=steps, tol=tol,
                                                min_period=min_period, max_period=max_period)
    theta, h = train(apply_fn, params, (x, y), K=relin.adaptive(tol, min_period=min_period, max_period=max_period),
                     steps=steps, optimizer=optax.sgd(0.5), eval_every=10)
    assert h["relin_step"].tolist() == ref_relins
    assert jax.tree.all(jax.tree.map(lambda a, b: np.allclose(a, b, rtol=1e-10, atol=1e-12), theta, ref_theta))
    periods = np.diff([0] + ref_relins)
    assert np.all(periods >= min_period) and np.all(periods <= max_period)
    gaps = h["relin_gap"]
    assert gaps.shape == (len(ref_relins),)
    if 0 < tol < math.inf:
        # a relinearisation before the cap is a drift beyond tol; one at the cap may be below it
        assert np.all((gaps > tol) | (periods == max_period))
    if (tol, min_period, max_period) == (0.02, 4, 6):  # both bounds bind in this case
        unbounded = _reference_adaptive(apply_fn, params, x, y, lr=0.5, steps=steps, tol=tol, min_period=1,
                                        max_period=math.inf)[1]
        assert np.any(np.diff([0] + unbounded) < 4) and np.any(np.diff([0] + unbounded) > 6)
        assert 4 in periods and 6 in periods


def test_adaptive_decide_is_pure_and_vmaps_over_tolerances():
    """decide on its own: the extremes of the rule, and one call vmapped over four tolerances."""
    pol = relin.adaptive(0.1, min_period=2, max_period=5)
    s = pol.init(4)
    info = relin.RelinInfo(step=jnp.int32(7), K=jnp.int32(5), n_relin=jnp.int32(1), loss=jnp.asarray(1.2),
                           net_loss=jnp.asarray(1.0))
    tols = jnp.asarray([0.0, 0.1, 0.3, jnp.inf], s.tol.dtype)
    states = jax.tree.map(lambda a: jnp.stack([a] * 4), s)._replace(tol=tols, inner_steps=jnp.full(4, 1, jnp.int32))
    relins, new = jax.jit(jax.vmap(pol.decide, in_axes=(0, None)))(states, info)
    assert relins.tolist() == [True, True, False, False]  # gap 0.2: > 0 (tol 0: always), > 0.1, < 0.3, < ∞
    assert new.inner_steps.tolist() == [0, 0, 2, 2]
    assert new.relin_step[:, 1].tolist() == [7, 7, -1, -1] and new.relin_step[:, 0].tolist() == [-1] * 4
    np.testing.assert_allclose(new.gap, 0.2, rtol=1e-6)
    # min_period: k = 1 < 2 holds off even a large gap; max_period: k = 5 forces a relinearisation
    relin_early, _ = pol.decide(s, info._replace(loss=jnp.asarray(9.0)))
    relin_cap, _ = pol.decide(s._replace(tol=jnp.asarray(jnp.inf, s.tol.dtype), inner_steps=jnp.int32(4)), info)
    assert not bool(relin_early) and bool(relin_cap)
    # tol = 0 re-linearises even on a gap of exactly 0; tol = ∞ never, not even on a zero network loss
    zero = info._replace(loss=jnp.asarray(1.0))
    assert bool(relin.adaptive(0).decide(relin.adaptive(0).init(1), zero)[0])
    inf_pol = relin.adaptive(math.inf)
    assert not bool(inf_pol.decide(inf_pol.init(1), info._replace(net_loss=jnp.asarray(0.0), K=jnp.int32(0)))[0])


def test_adaptive_costs_one_forward_pass_and_every_none(monkeypatch):
    """Tracing a step calls the network once inside the linearisation (its JVP) for every(K), and
    once more, at θ_t, for adaptive."""
    from iterlin.training import _steps

    apply_fn, params, x, y = tiny_problem()
    calls = []

    def counting(p, xb):
        calls.append(1)
        return apply_fn(p, xb)

    lin_calls = []
    real = _steps.linearised_apply
    monkeypatch.setattr(_steps, "linearised_apply", lambda *a, **k: lin_calls.append(1) or real(*a, **k))
    for policy, net_forwards in ((relin.every(3), 0), (relin.adaptive(0.1), 1)):
        calls.clear(), lin_calls.clear()
        step = make_step(counting, OPT, "ce", policy=policy)
        state = init_state(params, OPT, policy, steps=10)
        jax.jit(step).lower(state, (x[:8], y[:8]))
        assert len(lin_calls) == 1 and len(calls) == 1 + net_forwards, policy


# --------------------------------------------------------------------------------------------
# Sweeps: one kind, many parameters, one program
# --------------------------------------------------------------------------------------------

ADAPTIVE = [relin.adaptive(0.01), relin.adaptive(0.05, min_period=2), relin.adaptive(0.2, max_period=4),
            relin.adaptive(math.inf)]


@pytest.mark.parametrize("vectorise", [True, False])
def test_a_sweep_mixing_tolerances_equals_each_run_alone(problem, vectorise):
    apply_fn, params, data, test = problem
    kw = dict(steps=16, optimizer=optax.sgd(0.5), batch_size=8, eval_data=test, eval_every=4)
    stacked = tree_stack([params] * len(ADAPTIVE))
    p_sw, h_sw = train_sweep(apply_fn, stacked, data, K=ADAPTIVE, vectorise=vectorise, **kw)
    assert len({tuple(r[r >= 0]) for r in h_sw["relin_step"]}) == len(ADAPTIVE)  # the runs differ
    for i, pol in enumerate(ADAPTIVE):
        p, h = train(apply_fn, params, data, K=pol, **kw)
        assert jax.tree.all(jax.tree.map(lambda a, b, i=i: np.allclose(a[i], b, rtol=1e-12, atol=1e-14), p_sw, p))
        J = len(h["relin_step"])
        assert h_sw["relin_step"][i, :J].tolist() == h["relin_step"].tolist()
        assert np.all(h_sw["relin_step"][i, J:] == -1) and np.all(np.isnan(h_sw["relin_gap"][i, J:]))
        for k in ("n_relin", "net_train_loss", "lin_test_acc"):
            np.testing.assert_allclose(h_sw[k][i], h[k], rtol=1e-12, err_msg=k)


def test_other_tolerances_compile_nothing(problem):
    """The tolerances are arrays in the state: a sweep (or a run) with other values is the same program."""
    apply_fn, params, data, _ = problem
    kw = dict(steps=6, optimizer=OPT, batch_size=8, eval_every=3, vectorise=True)
    stacked = tree_stack([params] * 3)
    train_sweep(apply_fn, stacked, data, K=[relin.adaptive(t) for t in (0.1, 0.2, 0.3)], **kw)
    with compilations() as seen:
        train_sweep(apply_fn, stacked, data, K=[relin.adaptive(0.5, min_period=2), relin.adaptive(0),
                                                relin.adaptive(math.inf, max_period=3)], **kw)
    assert seen == []
    train(apply_fn, params, data, K=relin.adaptive(0.1), steps=6, optimizer=OPT, batch_size=8, eval_every=3)
    with compilations() as seen:
        train(apply_fn, params, data, K=relin.adaptive(2.0, max_period=2), steps=6, optimizer=OPT, batch_size=8,
              eval_every=3)
    assert seen == []


def test_a_sweep_refuses_policies_of_different_kinds(problem):
    apply_fn, params, data, _ = problem
    stacked = tree_stack([params] * 2)
    for K in ([3, relin.adaptive(0.1)], [relin.adaptive(0.1), relin.until_solved()],
              [relin.until_solved(check_batch_size=4), relin.until_solved(check_batch_size=8)]):
        with pytest.raises(ValueError, match="of one kind"):
            train_sweep(apply_fn, stacked, data, K=K, steps=4, optimizer=OPT)


# --------------------------------------------------------------------------------------------
# until_solved: the Adam-solved loop
# --------------------------------------------------------------------------------------------


class _OldSolve(NamedTuple):
    inner_steps: jax.Array
    prev_loss: jax.Array
    check_loss: jax.Array
    check_acc: jax.Array
    relin_step: jax.Array
    relin_inner_steps: jax.Array
    relin_acc: jax.Array
    relin_loss: jax.Array
    relin_reason: jax.Array


def _old_solve_step(apply_fn, optimizer, loss, target_acc, check_every, plateau_tol, check_batch_size):
    """The Adam-solved step as it was before it became a policy (iterlin 0.1.0, ``adam_solve._solve_step``),
    verbatim but for names: its criterion's parameters static, its own state."""
    loss = get_loss(loss)
    update = make_linearised_update(apply_fn, optimizer, loss)

    def step(state, batch, train_data):
        x, y = batch
        solve = state.policy
        f = jnp.result_type(float)
        classify = jnp.issubdtype(train_data[1].dtype, jnp.integer)
        value, params, inner_opt = update(state.params, state.params_s, state.opt_state, x, y)
        k = solve.inner_steps + 1
        at_K = (state.K > 0) & (k >= state.K)
        do_check = ((k % check_every) == 0) | at_K
        nan = jnp.asarray(jnp.nan, f)
        lin_loss, lin_acc = jax.lax.cond(
            do_check,
            lambda: tuple(v.astype(f) for v in _train_check_on(apply_fn, loss, train_data, check_batch_size,
                                                               state.params_s, params)),
            lambda: (nan, nan),
        )
        if classify and target_acc is not None:
            hit_target = do_check & (lin_acc >= target_acc)
        else:
            hit_target = jnp.asarray(False)
        plateau = do_check & (solve.prev_loss - lin_loss < plateau_tol * solve.prev_loss)
        plateau = plateau if plateau_tol > 0 else jnp.asarray(False)
        relin_ = hit_target | plateau | at_K
        reason = jnp.where(hit_target, 1, jnp.where(plateau, 2, 3)).astype(jnp.int32)
        params_s = tree_where(relin_, params, state.params_s)
        inner_opt = tree_where(relin_, optimizer.init(params), inner_opt)
        j = jnp.where(relin_, state.n_relin, solve.relin_step.shape[0])
        log = lambda buf, v: buf.at[j].set(jnp.asarray(v, buf.dtype), mode="drop")  # noqa: E731
        checked = jnp.where(do_check, lin_loss, solve.prev_loss)
        solve_new = _OldSolve(
            inner_steps=jnp.where(relin_, 0, k),
            prev_loss=jnp.where(relin_, jnp.inf, checked).astype(f),
            check_loss=jnp.where(do_check, lin_loss, solve.check_loss),
            check_acc=jnp.where(do_check, lin_acc, solve.check_acc),
            relin_step=log(solve.relin_step, state.step + 1),
            relin_inner_steps=log(solve.relin_inner_steps, k),
            relin_acc=log(solve.relin_acc, lin_acc),
            relin_loss=log(solve.relin_loss, lin_loss),
            relin_reason=log(solve.relin_reason, reason),
        )
        new = commit_step(state, value, params, params_s, inner_opt, relin_, solve_new)
        return new, {"loss": value}

    step.takes_data = True
    return step


SOLVED = [
    dict(lr=0.02, steps=12, K=5, check_every=2, target_acc=0.6, plateau_tol=1e-4, batch_size=8),
    dict(lr=0.02, steps=20, K=7, check_every=3, target_acc=None, plateau_tol=0.0, batch_size=8),
    dict(lr=0.05, steps=30, K=100, check_every=2, target_acc=1.0, plateau_tol=0.05, batch_size=None),
    dict(lr=0.05, steps=16, K=math.inf, check_every=4, target_acc=0.5, plateau_tol=1e-3, batch_size=12),
]


@pytest.mark.parametrize("cfg", SOLVED, ids=range(len(SOLVED)))
@pytest.mark.parametrize("double", [False, True], ids=["f32", "f64"])
def test_until_solved_is_train_adam_solved_and_reproduces_the_old_loop(cfg, double, request):
    if double:
        request.getfixturevalue("x64")
    apply_fn, params, x, y = tiny_problem(n=24)
    cfg = dict(cfg)
    lr, steps, K, batch_size = cfg.pop("lr"), cfg.pop("steps"), cfg.pop("K"), cfg.pop("batch_size")
    common = dict(steps=steps, batch_size=batch_size, eval_every=4, eval_batch_size=7, eval_data=(x[:8], y[:8]))
    p_solved, h_solved = train_adam_solved(apply_fn, params, (x, y), lr=lr, K=K, **cfg, **common)
    policy = relin.until_solved(**cfg, max_period=K)
    p_train, h_train = train(apply_fn, params, (x, y), K=policy, optimizer=optax.adam(lr), reset_optimizer=True,
                             **common)
    _same(p_solved, p_train)
    _same_history(h_solved, h_train, skip=("inner_steps",))
    # the loop before policies: its step, verbatim, with fit
    adam = optax.adam(lr)
    size = relin.log_size([policy], steps)
    f = jnp.result_type(float)
    old = _OldSolve(jnp.zeros((), jnp.int32), jnp.asarray(jnp.inf, f), jnp.asarray(jnp.nan, f),
                    jnp.asarray(jnp.nan, f), jnp.full((size,), -1, jnp.int32), jnp.full((size,), -1, jnp.int32),
                    jnp.full((size,), jnp.nan, f), jnp.full((size,), jnp.nan, f), jnp.zeros((size,), jnp.int32))
    state = init_state(params, adam, K, policy=old)
    step = _old_solve_step(apply_fn, adam, "ce", cfg["target_acc"], cfg["check_every"], cfg["plateau_tol"], 7)
    state, h_old = fit(step, state, apply_fn, (x, y), **common)
    _same(p_solved, state.params)
    _same_history({k: v for k, v in h_solved.items() if not k.startswith("relin_") and k != "inner_steps"}, h_old)
    n = int(state.n_relin)
    assert h_solved["relin_step"].tolist() == np.asarray(state.policy.relin_step)[:n].tolist()
    np.testing.assert_array_equal(h_solved["relin_acc"], np.asarray(state.policy.relin_acc)[:n])
    np.testing.assert_array_equal(h_solved["relin_loss"], np.asarray(state.policy.relin_loss)[:n])
    reasons = np.asarray(state.policy.relin_reason)[:n]
    assert h_solved["relin_reason"].tolist() == [relin.RELIN_REASONS[r] for r in reasons]


def test_until_solved_never_passing_is_every_K_with_a_reset(problem):
    apply_fn, params, data, _ = problem
    adam = optax.adam(0.02)
    kw = dict(steps=14, optimizer=adam, batch_size=8, eval_every=7, reset_optimizer=True)
    p_us, h_us = train(apply_fn, params, data, K=relin.until_solved(target_acc=None, plateau_tol=0, max_period=4),
                       **kw)
    p_ev, h_ev = train(apply_fn, params, data, K=4, **kw)
    assert h_us["relin_step"].tolist() == h_ev["relin_step"].tolist() == [4, 8, 12]
    assert jax.tree.all(jax.tree.map(lambda a, b: np.allclose(a, b, rtol=1e-12, atol=1e-14), p_us, p_ev))
    assert h_us["relin_reason"].tolist() == ["K"] * 3


def test_until_solved_sweep_mixing_targets_equals_each_alone(problem):
    apply_fn, params, data, _ = problem
    pols = [relin.until_solved(target_acc=0.5, check_every=2, max_period=6),
            relin.until_solved(target_acc=None, check_every=3, plateau_tol=0.05, max_period=9)]
    kw = dict(steps=12, optimizer=optax.adam(0.05), batch_size=8, eval_every=6, reset_optimizer=True)
    p_sw, h_sw = train_sweep(apply_fn, tree_stack([params] * 2), data, K=pols, vectorise=True, **kw)
    for i, pol in enumerate(pols):
        p, h = train(apply_fn, params, data, K=pol, **kw)
        assert jax.tree.all(jax.tree.map(lambda a, b, i=i: np.allclose(a[i], b, rtol=1e-12, atol=1e-14), p_sw, p))
        J = len(h["relin_step"])
        assert h_sw["relin_step"][i, :J].tolist() == h["relin_step"].tolist()
        assert h_sw["relin_reason"][i, :J].tolist() == h["relin_reason"].tolist()
        assert all(r == "" for r in h_sw["relin_reason"][i, J:])


# --------------------------------------------------------------------------------------------
# Checkpoints
# --------------------------------------------------------------------------------------------


class _Interrupt(Exception):
    pass


def _interrupt_at(step):
    def callback(t, state):
        if t == step:  # before this evaluation point's checkpoint is written
            raise _Interrupt
        return {}

    return callback


@pytest.mark.parametrize("sweep", [False, True])
def test_an_interrupted_adaptive_run_resumes_exactly(problem, tmp_path, sweep):
    apply_fn, params, data, test = problem
    kw = dict(steps=16, optimizer=optax.sgd(0.5), batch_size=8, eval_data=test, eval_every=4)
    if sweep:
        run = lambda K, **k: train_sweep(apply_fn, tree_stack([params] * 2), data, K=K, **kw, **k)  # noqa: E731
        K, other = [relin.adaptive(0.02), relin.adaptive(0.1, max_period=3)], [relin.adaptive(0.02)] * 2
    else:
        run = lambda K, **k: train(apply_fn, params, data, K=K, **kw, **k)  # noqa: E731
        K, other = relin.adaptive(0.02, min_period=2), relin.adaptive(0.03, min_period=2)
    ref, ref_hist = run(K)
    assert np.size(ref_hist["relin_step"]) > 2
    path = tmp_path / "run.npz"
    with pytest.raises(_Interrupt):
        run(K, checkpoint=path, callback=_interrupt_at(12))
    got, hist = run(K, checkpoint=path)
    _same(got, ref)
    _same_history(hist, ref_hist)
    with pytest.raises(CheckpointError, match="different run configuration"):  # another tolerance
        run(other, checkpoint=path)


# --------------------------------------------------------------------------------------------
# Validation: named errors before any compute
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("make, name", [
    (lambda: relin.adaptive(-1), "tol=-1"),
    (lambda: relin.adaptive(math.nan), "tol=nan"),
    (lambda: relin.adaptive("abc"), "tol='abc'"),
    (lambda: relin.adaptive(True), "tol=True"),
    (lambda: relin.adaptive(-math.inf), "tol=-inf"),
    (lambda: relin.adaptive(0.1, min_period=0), "min_period=0"),
    (lambda: relin.adaptive(0.1, min_period=2.5), "min_period=2.5"),
    (lambda: relin.adaptive(0.1, min_period=5, max_period=3), "min_period=5"),
    (lambda: relin.adaptive(0.1, max_period=0), "max_period=0"),
    (lambda: relin.adaptive(0.1, max_period="abc"), "max_period='abc'"),
    (lambda: relin.every(0), "K=0"),
    (lambda: relin.every(2.5), "K=2.5"),
    (lambda: relin.every("abc"), "K='abc'"),
    (lambda: relin.every(math.nan), "K=nan"),
    (lambda: relin.until_solved(target_acc=1.5), "target_acc=1.5"),
    (lambda: relin.until_solved(target_acc="all"), "target_acc='all'"),
    (lambda: relin.until_solved(check_every=0), "check_every=0"),
    (lambda: relin.until_solved(plateau_tol=-1), "plateau_tol=-1"),
    (lambda: relin.until_solved(plateau_tol=math.nan), "plateau_tol=nan"),
    (lambda: relin.until_solved(max_period=0), "max_period=0"),
    (lambda: relin.until_solved(check_batch_size=0), "check_batch_size=0"),
])
def test_bad_arguments_are_named(make, name):
    with pytest.raises(ValueError) as e:
        make()
    assert str(e.value).startswith(f"{name} is not allowed"), str(e.value)


def test_the_loops_refuse_bad_policies_before_any_compute():
    calls = []

    def apply_fn(p, x):
        calls.append(1)
        return x @ p

    x = jnp.ones((4, 2))
    y = jnp.zeros((4,), jnp.int32)
    p = jnp.zeros((2, 2))
    kw = dict(steps=4, optimizer=OPT)
    with pytest.raises(ValueError, match="K='adaptive' is not allowed.*policy"):
        train(apply_fn, p, (x, y), K="adaptive", **kw)
    with pytest.raises(ValueError, match="reset_optimizer='yes'"):
        train(apply_fn, p, (x, y), K=relin.every(2), reset_optimizer="yes", **kw)
    with pytest.raises(ValueError, match="K=every"):  # a policy, not a sequence of them
        train_sweep(apply_fn, tree_stack([p]), (x, y), K=relin.every(2), **kw)
    with pytest.raises(ValueError, match="of one kind"):
        train_sweep(apply_fn, tree_stack([p, p]), (x, y), K=[relin.adaptive(0.1), 2], **kw)
    with pytest.raises(ValueError, match="steps=None"):
        init_state(p, OPT, relin.adaptive(0.1))
    with pytest.raises(ValueError, match="policy is not allowed"):
        init_state(p, OPT, relin.adaptive(0.1), policy=jnp.asarray(1.0), steps=4)
    assert calls == []
    with pytest.raises(TypeError, match="needs a AdaptiveState"):  # a step for adaptive, a state for every
        make_step(apply_fn, OPT, "ce", policy=relin.adaptive(0.1))(init_state(p, OPT, 2), (x, y))


def test_policies_describe_themselves():
    assert repr(relin.every(3)) == "every(K=3)"
    assert repr(relin.adaptive(0.1, max_period=50)) == "adaptive(tol=0.1, min_period=1, max_period=50)"
    assert relin.adaptive(math.inf).describe() == {"kind": "adaptive", "K": math.inf, "tol": math.inf,
                                                   "min_period": 1}
    assert relin.until_solved(target_acc=None).describe()["target_acc"] is None
    assert relin.as_policy(5).K == relin.as_policy(5e0).K == 5 and relin.as_policy(math.inf).kind == "every"
    assert relin.adaptive(0.1).rule == relin.adaptive(7.0, min_period=3).rule  # one program for both
    assert relin.adaptive(0.1).rule != relin.every(3).rule
    assert relin.log_size([relin.every(3)], 100) == 0
    assert relin.log_size([relin.adaptive(0.1, min_period=4), relin.adaptive(0.2, min_period=2)], 100) == 51
    with pytest.warns(UserWarning, match="only the first"):
        assert relin.log_size([relin.adaptive(0.1)], 10**6) == relin.MAX_LOG
