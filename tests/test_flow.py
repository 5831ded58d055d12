"""The linearised model's gradient flow under a general loss (iterlin.solvers.flow), in float64.

Two routes to one result each: the ODE against many small full-batch GD steps of ``train`` on
cross-entropy; function space against parameter space; the squared loss against the closed form;
halved tolerances against the default ones and a tight reference; a resumed iterated run against an
uninterrupted one. Then every bad input raises, naming its parameter.
"""

from __future__ import annotations

import math

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from jax.flatten_util import ravel_pytree

from iterlin.solvers import closed_form
from iterlin.linearise import linearised_apply
from iterlin.analysis.ntk import empirical_ntk
from iterlin.solvers import flow
from iterlin.solvers.flow import FlowConfig, FlowSolveError, flow_outputs, iterated_flow, linearised_flow
from iterlin.training import train

TAU = 2.0


class MLP(nn.Module):
    @nn.compact
    def __call__(self, x):
        for _ in range(2):
            x = nn.tanh(nn.Dense(8)(x))
        return nn.Dense(3)(x)


def _setup(n=6, d=4, seed=0):
    """A tiny tanh MLP (P = 139 > N·C = 18) in float64 and integer labels of 3 classes."""
    rng = np.random.default_rng(seed)
    x = jnp.asarray(rng.normal(size=(n, d)))
    y = jnp.asarray(rng.integers(0, 3, n))
    model = MLP()
    params = jax.tree.map(lambda a: a.astype(jnp.float64), model.init(jax.random.PRNGKey(seed), x))
    assert jax.tree.leaves(params)[0].dtype == jnp.float64
    return model.apply, params, x, y


def _max_diff(a, b):
    return float(np.max(np.abs(np.asarray(a) - np.asarray(b))))


def test_flow_is_the_limit_of_small_gd_steps_on_cross_entropy(x64):
    """K steps of ``train`` (SGD, rate η = τ/K, mean CE on the linear model at θ_s) approach the ODE
    at rate O(η); the Richardson extrapolation 2·GD(τ/2K) − GD(τ/K) removes that term."""
    apply_fn, params, x, y = _setup()
    res = linearised_flow(apply_fn, params, x, y, TAU)
    outs = {}
    for K in (400, 800):
        pK, _ = train(apply_fn, params, (x, y), K=math.inf, steps=K, optimizer=optax.sgd(TAU / K), loss="ce")
        outs[K] = linearised_apply(apply_fn, params, pK, x)
    moved = _max_diff(res.outputs, res.outputs0)
    assert moved > 0.1  # the flow went somewhere
    e400, e800 = _max_diff(outs[400], res.outputs), _max_diff(outs[800], res.outputs)
    assert e800 < 1e-3 and 1.8 < e400 / e800 < 2.2  # first order in η
    assert _max_diff(2 * outs[800] - outs[400], res.outputs) < 2e-6


def test_function_space_equals_parameter_space(x64):
    """f(θ_s) + J_s(θ_τ − θ_s) (one JVP at the θ_τ of the VJP) equals the ODE's F(τ)."""
    apply_fn, params, x, y = _setup()
    res = linearised_flow(apply_fn, params, x, y, TAU)
    f_lin = linearised_apply(apply_fn, params, res.params, x)
    assert _max_diff(f_lin, res.outputs) < 1e-10
    assert _max_diff(res.outputs0, apply_fn(params, x)) == 0


def test_squared_loss_equals_the_closed_form(x64):
    """Mean ½‖F − Y‖² at τ: Eq. 14 and 18 with t = τ and lr = 1/N (the summed loss's rate)."""
    apply_fn, params, x, y = _setup()
    n = x.shape[0]
    theta = empirical_ntk(apply_fn, params, x)
    f0 = apply_fn(params, x)
    f, _, _ = flow_outputs(theta, f0, y, TAU, loss="mse")
    exact = closed_form.gradient_flow_outputs(theta, f0, y, TAU, lr=1.0 / n)
    assert _max_diff(f, f0) > 0.1
    assert _max_diff(f, exact) < 1e-7
    res = linearised_flow(apply_fn, params, x, y, TAU, loss="mse")
    p_exact = closed_form.gradient_flow_params(apply_fn, params, x, y, TAU, lr=1.0 / n)
    assert _max_diff(ravel_pytree(res.params)[0],
                     ravel_pytree(p_exact)[0]) < 1e-7


@pytest.mark.parametrize("solver", ["tsit5", "kvaerno5"])
def test_halving_the_tolerances_changes_nothing_that_matters(x64, solver):
    """F(τ) at the default tolerances, at half of them, and at a tight reference (Tsit5 at
    rtol = 1e-12) agree to 1e-7 (the stated accuracy of the defaults rtol = 1e-8, atol = 1e-10), and
    the training predictions are the same; a loose solve (rtol = 1e-2) is visibly off, so this test
    sees the tolerances."""
    apply_fn, params, x, y = _setup()
    theta = empirical_ntk(apply_fn, params, x)
    f0 = apply_fn(params, x)
    d = FlowConfig(solver=solver)
    f, _, steps = flow_outputs(theta, f0, y, 20.0, config=d)
    fh, _, steps_h = flow_outputs(theta, f0, y, 20.0, config=d._replace(rtol=d.rtol / 2, atol=d.atol / 2))
    ref, _, _ = flow_outputs(theta, f0, y, 20.0, config=FlowConfig(rtol=1e-12, atol=1e-14, solver="tsit5"))
    loose, _, _ = flow_outputs(theta, f0, y, 20.0, config=d._replace(rtol=1e-2, atol=1e-2))
    assert steps_h > steps
    assert _max_diff(f, fh) < 1e-7 and _max_diff(f, ref) < 1e-7
    assert np.array_equal(np.argmax(f, -1), np.argmax(fh, -1))
    assert _max_diff(loose, ref) > 1e-6


def test_explicit_and_implicit_solvers_agree(x64):
    """Tsit5 (explicit) and Kvaerno5 (implicit) at the default tolerances: one flow, to 1e-7."""
    apply_fn, params, x, y = _setup()
    theta = empirical_ntk(apply_fn, params, x)
    f0 = apply_fn(params, x)
    f_i, c_i, _ = flow_outputs(theta, f0, y, 20.0, config=FlowConfig(solver="kvaerno5"))
    f_e, c_e, _ = flow_outputs(theta, f0, y, 20.0, config=FlowConfig(solver="tsit5"))
    assert _max_diff(f_i, f0) > 0.1
    assert _max_diff(f_i, f_e) < 1e-7 and _max_diff(c_i, c_e) < 1e-7


def test_the_ode_is_float64_for_a_float32_model():
    """Without x64 (a float32 model's kernel), F(τ) and c(τ) are still float64, and equal the
    float64 solve of the same (float32-rounded) kernel."""
    rng = np.random.default_rng(0)
    J = rng.normal(size=(12, 40)).astype(np.float32)
    theta, f0, y = J @ J.T, rng.normal(size=(4, 3)).astype(np.float32), rng.integers(0, 3, 4)
    f, c, _ = flow_outputs(theta, f0, y, TAU)
    assert f.dtype == np.float64 and c.dtype == np.float64
    with flow.x64(True):
        f64, _, _ = flow_outputs(theta.astype(np.float64), f0.astype(np.float64), y, TAU)
    assert _max_diff(f, f64) == 0


def test_iterated_flow_resumed_equals_uninterrupted(x64, tmp_path, monkeypatch):
    apply_fn, params, x, y = _setup(n=6)
    xh, yh = _setup(n=5, seed=1)[2:]
    kw = dict(total_time=3.0, relins=3)
    whole = iterated_flow(apply_fn, params, (x, y), (xh, yh), **kw)
    assert whole.rounds.net_test_correct.shape == (3, 5) and whole.rounds.net_test_correct.dtype == bool
    assert np.all(np.diff(whole.rounds.train_loss) < 0)  # the flow lowers the loss round after round

    ckpt = tmp_path / "flow.npz"
    real, calls = flow.linearised_flow, []

    def interrupted(*a, **k):
        calls.append(1)
        if len(calls) == 2:
            raise KeyboardInterrupt  # killed in round 2: round 1's checkpoint is on disk
        return real(*a, **k)

    monkeypatch.setattr(flow, "linearised_flow", interrupted)
    with pytest.raises(KeyboardInterrupt):
        iterated_flow(apply_fn, params, (x, y), (xh, yh), checkpoint=ckpt, **kw)
    calls.clear()
    monkeypatch.setattr(flow, "linearised_flow", lambda *a, **k: (calls.append(1), real(*a, **k))[1])
    resumed = iterated_flow(apply_fn, params, (x, y), (xh, yh), checkpoint=ckpt, **kw)
    assert len(calls) == 2  # rounds 2 and 3 only: it resumed
    for a, b in zip(jax.tree.leaves(whole), jax.tree.leaves(resumed)):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    with pytest.raises(ValueError, match="checkpoint="):  # another run's checkpoint is refused
        iterated_flow(apply_fn, params, (x, y), (xh, yh), checkpoint=ckpt, total_time=3.0, relins=2)
    other = jax.tree.map(lambda a: a + 1e-3, params)  # another θ₀ (seed), same shapes
    with pytest.raises(ValueError, match="another run"):
        iterated_flow(apply_fn, other, (x, y), (xh, yh), checkpoint=ckpt, **kw)


def test_one_round_is_the_linear_model_at_theta0(x64):
    """R = 1: the linear model at θ₀ flowed for T, scored per image (network and linear model)."""
    apply_fn, params, x, y = _setup()
    xh, yh = _setup(n=5, seed=1)[2:]
    run = iterated_flow(apply_fn, params, (x, y), (xh, yh), total_time=TAU, relins=1)
    res = linearised_flow(apply_fn, params, x, y, TAU)
    assert _max_diff(ravel_pytree(run.params)[0], ravel_pytree(res.params)[0]) == 0
    lin = np.argmax(linearised_apply(apply_fn, params, res.params, xh), -1) == np.asarray(yh)
    net = np.argmax(apply_fn(res.params, xh), -1) == np.asarray(yh)
    np.testing.assert_array_equal(run.rounds.lin_test_correct[0], lin)
    np.testing.assert_array_equal(run.rounds.net_test_correct[0], net)
    assert run.rounds.lin_train_acc[0] == np.mean(np.argmax(res.outputs, -1) == np.asarray(y))


# ------------------------------------------------------------------------------------------------
# Bad input: a clear error naming the parameter
# ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("tau", [0, 0.0, -1.0, math.nan, math.inf, -math.inf, "1", True])
def test_bad_tau(x64, tau):
    apply_fn, params, x, y = _setup()
    with pytest.raises(ValueError, match=r"tau="):
        linearised_flow(apply_fn, params, x, y, tau)


@pytest.mark.parametrize("field, value", [("rtol", 0.0), ("rtol", 1.0), ("rtol", 1e-20), ("rtol", math.nan),
                                          ("atol", 0.0), ("atol", -1e-9), ("atol", math.inf),
                                          ("max_steps", 0), ("max_steps", 2.5), ("max_bytes", 0),
                                          ("chunk_size", 0), ("solver", "euler")])
def test_bad_config(x64, field, value):
    apply_fn, params, x, y = _setup()
    with pytest.raises(ValueError, match=f"{field}="):
        linearised_flow(apply_fn, params, x, y, TAU, config=FlowConfig()._replace(**{field: value}))


def test_non_finite_kernel_and_outputs(x64):
    apply_fn, params, x, y = _setup()
    theta = np.array(empirical_ntk(apply_fn, params, x))
    f0 = apply_fn(params, x)
    theta[0, 1] = np.nan
    with pytest.raises(ValueError, match="theta_kernel"):
        flow_outputs(theta, f0, y, TAU)
    with pytest.raises(ValueError, match="f0"):
        flow_outputs(np.eye(18), np.full((6, 3), np.inf), y, TAU)
    with pytest.raises(ValueError, match="theta_kernel has shape"):
        flow_outputs(np.eye(17), f0, y, TAU)


def test_step_limit_is_an_error_naming_max_steps(x64):
    apply_fn, params, x, y = _setup()
    with pytest.raises(FlowSolveError, match="max_steps=3"):
        linearised_flow(apply_fn, params, x, y, TAU, config=FlowConfig(max_steps=3))


@pytest.mark.parametrize("solver, copies", [("tsit5", 1), ("kvaerno5", 3)])
def test_too_large_n_is_refused_before_the_kernel(x64, monkeypatch, solver, copies):
    apply_fn, params, x, y = _setup()
    monkeypatch.setattr(flow, "empirical_ntk", lambda *a, **k: pytest.fail("the kernel was built"))
    need = flow.flow_memory_bytes(6, 3, np.float64, solver)
    assert need == 18 * 18 * 8 * (1 + copies)
    with pytest.raises(ValueError, match=rf"N=6 is not allowed.*18 × 18.*plus {copies} float64"):
        linearised_flow(apply_fn, params, x, y, TAU, config=FlowConfig(max_bytes=need - 1, solver=solver))


def test_bad_iterated_arguments(x64):
    apply_fn, params, x, y = _setup()
    for kw, name in [(dict(total_time=0.0, relins=2), "total_time"), (dict(total_time=math.inf, relins=2), "total_time"),
                     (dict(total_time=1.0, relins=0), "relins")]:
        with pytest.raises(ValueError, match=f"{name}="):
            iterated_flow(apply_fn, params, (x, y), (x, y), **kw)
