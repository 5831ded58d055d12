"""Compile once: a second call of a training loop with the same ``apply_fn``, optimizer, loss and
shapes traces and compiles nothing, whatever the values of the data and of θ_0.

Compilations are counted in-process from ``jax.monitoring``'s duration events: a traced function
(``/jax/core/compile/jaxpr_trace_duration``) and a program lowered for compilation
(``/jax/core/compile/jaxpr_to_mlir_module_duration``). Both happen before JAX's persistent
compilation cache is consulted (the suite turns it on, see ``conftest.py``), so a warm disk cache
does not hide a recompilation. Never timing.

Each loop is called twice with different data and different θ_0: the second call must trace
nothing, and its results must equal a fresh computation of the same call (through a fresh wrapper
of ``apply_fn``, so nothing is shared with the cached programs) and differ from the first call's
(the cache returns no stale, data-dependent result). Memoisation must not mix up programs either:
another optimizer (learning rate), loss, batch size or K gives its own, correct, results.
"""

from __future__ import annotations

import math

import jax
import numpy as np
import optax
import pytest
from _compiles import compilations
from _toy import init_params, tiny_problem

from iterlin.solvers.adam_solve import train_adam_solved
from iterlin.solvers.gauss_newton import gauss_newton_train, make_gauss_newton_step
from iterlin.training import make_step, train, train_sweep
from iterlin.tree import tree_stack


def _fresh(apply_fn):
    """A new function object computing ``apply_fn``: a cache keyed on ``apply_fn`` misses."""
    return lambda p, x: apply_fn(p, x)


def _assert_equal(a, b):
    """Two results ``(params, history)`` are identical (bitwise, NaN equal to NaN)."""
    (pa, ha), (pb, hb) = a, b
    for x, y in zip(jax.tree.leaves(pa), jax.tree.leaves(pb), strict=True):
        np.testing.assert_array_equal(np.asarray(x), np.asarray(y))
    assert set(ha) == set(hb)
    for k in ha:
        np.testing.assert_array_equal(np.asarray(ha[k]), np.asarray(hb[k]), err_msg=k)


def _differ(a, b) -> bool:
    return any(not np.array_equal(np.asarray(x), np.asarray(y))
               for x, y in zip(jax.tree.leaves(a[0]), jax.tree.leaves(b[0]), strict=True))


@pytest.fixture(scope="module")
def problem():
    apply_fn, _, x, y = tiny_problem(n=24)
    x2 = x * 0.7 + 0.3  # other values, the same shapes and dtypes
    y2 = (y + 1) % 3
    xt, yt = x[:8] + 0.5, y[:8]
    xt2, yt2 = x2[:8] - 0.5, y2[:8]
    return apply_fn, ((x, y), (xt, yt)), ((x2, y2), (xt2, yt2))


OPT = optax.sgd(0.3, momentum=0.9)


def _train(apply_fn, params, data, eval_data, **kw):
    return train(apply_fn, params, data, K=3, steps=6, optimizer=OPT, batch_size=8, eval_data=eval_data,
                 eval_every=2, **kw)


def _sweep(vectorise):
    def run(apply_fn, params, data, eval_data, **kw):
        return train_sweep(apply_fn, params, data, K=[1, 3, math.inf], steps=6, optimizer=OPT, batch_size=8,
                           eval_data=eval_data, eval_steps=[0, 2, 6], vectorise=vectorise, **kw)
    return run


def _gauss_newton(apply_fn, params, data, eval_data, **kw):
    x, y = data
    return gauss_newton_train(apply_fn, params, (x, jax.nn.one_hot(y, 3)), damping=0.0, steps=3, eval_every=1,
                              eval_data=(eval_data[0], jax.nn.one_hot(eval_data[1], 3)), step_size=0.5, **kw)


def _gauss_newton_sweep(apply_fn, params, data, eval_data, **kw):
    return gauss_newton_train(apply_fn, params, data, damping=[0.5, 2.0, 8.0], loss="ce", steps=3, eval_every=1,
                              batch_size=12, **kw)


def _adam_solved(apply_fn, params, data, eval_data, **kw):
    return train_adam_solved(apply_fn, params, data, lr=0.02, steps=8, K=5, check_every=2, target_acc=0.6,
                             batch_size=8, eval_every=4, eval_batch_size=7, eval_data=eval_data, **kw)


LOOPS = {
    "train": (_train, False),
    "train_per_step_dispatch": (lambda *a, **kw: _train(*a, compiled_loop=False, **kw), False),
    "train_sweep_vmapped": (_sweep(True), True),
    "train_sweep_per_run_loop": (_sweep(False), True),
    "gauss_newton_train": (_gauss_newton, False),
    "gauss_newton_train_sweep": (_gauss_newton_sweep, True),
    "train_adam_solved": (_adam_solved, False),
}


@pytest.mark.parametrize("name", list(LOOPS))
def test_a_second_call_with_other_data_and_params_compiles_nothing(problem, name):
    run, stacked = LOOPS[name]
    apply_fn, (data1, eval1), (data2, eval2) = problem
    params1 = tree_stack([init_params(s) for s in range(3)]) if stacked else init_params(0)
    params2 = tree_stack([init_params(s) for s in range(3, 6)]) if stacked else init_params(3)

    with compilations() as first:
        out1 = run(apply_fn, params1, data1, eval1)
    assert any(kind == "lower" for kind, _ in first)  # the counter sees compilations
    with compilations() as second:
        out2 = run(apply_fn, params2, data2, eval2)
    assert second == [], f"the second call of {name} traced/compiled {second}"

    _assert_equal(out2, run(_fresh(apply_fn), params2, data2, eval2))
    assert _differ(out1, out2)
    # and the first call's arguments again: its results, not the second's
    with compilations() as third:
        again = run(apply_fn, params1, data1, eval1)
    assert third == []
    _assert_equal(again, out1)


def test_the_step_factories_are_memoised_on_what_they_close_over():
    apply_fn, *_ = tiny_problem()
    opt = optax.sgd(0.1)
    step = make_step(apply_fn, opt, "ce")
    assert make_step(apply_fn, opt, "ce") is step
    assert make_step(apply_fn, opt, "ce").k1 is step.k1
    others = [
        make_step(apply_fn, optax.sgd(0.1), "ce"),  # another optimizer object (its own closures)
        make_step(apply_fn, opt, "mse"),
        make_step(apply_fn, opt, "ce", reset_optimizer=True),
        make_step(apply_fn, opt, "ce", refresh=lambda p, x: p),
        make_step(_fresh(apply_fn), opt, "ce"),
    ]
    assert all(other is not step for other in others)
    assert len({id(o) for o in others}) == len(others)
    gn = make_gauss_newton_step(apply_fn, step_size=0.5)
    assert make_gauss_newton_step(apply_fn, step_size=0.5) is gn
    assert make_gauss_newton_step(apply_fn, step_size=0.25) is not gn
    assert make_gauss_newton_step(apply_fn, step_size=0.5, loss="ce") is not gn


def test_memoised_programs_are_not_reused_for_other_settings(problem):
    """Another optimizer (learning rate), loss, batch size or K with the same apply_fn and data:
    each gives the results of a fresh computation, not those of a cached program."""
    apply_fn, (data, eval_data), _ = problem
    params = init_params(0)
    base = dict(K=3, steps=6, optimizer=optax.sgd(0.3), batch_size=8, loss="ce")
    variants = {
        "base": {},
        "lr": {"optimizer": optax.sgd(0.05)},
        "loss": {"loss": "mse"},
        "batch_size": {"batch_size": 6},
        "K": {"K": 2},
        "K1": {"K": 1},
    }
    results = {}
    for name, change in variants.items():
        kw = dict(base, **change)
        results[name] = train(apply_fn, params, data, eval_data=eval_data, eval_every=3, **kw)
        _assert_equal(results[name], train(_fresh(apply_fn), params, data, eval_data=eval_data, eval_every=3, **kw))
    for name in variants:
        if name != "base":
            assert _differ(results[name], results["base"]), name
    # train_adam_solved builds its Adam from lr: another lr is another program
    a = train_adam_solved(apply_fn, params, data, lr=0.02, steps=4, check_every=2, eval_every=4)
    b = train_adam_solved(apply_fn, params, data, lr=0.005, steps=4, check_every=2, eval_every=4)
    _assert_equal(b, train_adam_solved(_fresh(apply_fn), params, data, lr=0.005, steps=4, check_every=2,
                                       eval_every=4))
    assert _differ(a, b)


def test_no_array_is_baked_into_the_programs(problem):
    """The data, the evaluation splits and the key are arguments: a call with other values of all
    of them (and another key) reuses the programs of the first."""
    apply_fn, (data1, eval1), (data2, eval2) = problem
    params1, params2 = init_params(0), init_params(1)
    key1, key2 = jax.random.PRNGKey(1), jax.random.PRNGKey(2)
    smaller = (data2[0][:16], data2[1][:16])
    _train(apply_fn, params1, data1, eval1, key=key1)
    with compilations() as second:
        _train(apply_fn, params2, data2, eval2, key=key2)
    assert second == []
    # other shapes do compile (jit's own cache is keyed on shapes)
    with compilations() as other_shapes:
        _train(apply_fn, params2, smaller, eval2)
    assert any(kind == "lower" for kind, _ in other_shapes)


def test_the_jitted_single_calls_compile_once(problem):
    """flat_jacobian, gauss_newton_step and the closed forms jit through ``jacobian.maybe_jit`` (jit's
    own cache, no memo of ours): a second call with other values of θ and the data traces nothing."""
    from iterlin.solvers.closed_form import gradient_flow_limit
    from iterlin.solvers.gauss_newton import gauss_newton_step
    from iterlin.analysis.jacobian import flat_jacobian

    apply_fn, ((x, y), _), ((x2, y2), _) = problem
    targets, targets2 = jax.nn.one_hot(y, 3), jax.nn.one_hot(y2, 3)
    calls = {
        "flat_jacobian": lambda p, x, t: flat_jacobian(apply_fn, p, x),
        "gauss_newton_step": lambda p, x, t: gauss_newton_step(apply_fn, p, x, t, damping=0.5),
        "gradient_flow_limit": lambda p, x, t: gradient_flow_limit(apply_fn, p, x, t),
    }
    params1, params2 = init_params(0), init_params(1)
    for name, call in calls.items():
        with compilations() as first:
            out1 = call(params1, x, targets)
        assert any(kind == "lower" for kind, _ in first), name
        with compilations() as second:
            out2 = call(params2, x2, targets2)
        assert second == [], f"the second call of {name} traced/compiled {second}"
        assert _differ((out1, {}), (out2, {})), name
