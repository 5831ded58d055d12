"""The closed-form limit (iterlin.experiments.limit): its updates against literal GD, dense solves and
the kernel-regression formula in float64 on a tiny CNN; resume after an interruption; one tiny real
run; every claim's verdict on constructed results."""

from __future__ import annotations

import math
import shutil

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.flatten_util import ravel_pytree

from iterlin.repro.claims import NA
from iterlin.solvers.closed_form import gd_filter
from iterlin.experiments import claims, limit, resolve, run
from iterlin.analysis.jacobian import flat_jacobian
from iterlin.linearise import linearised_apply
from iterlin.models import make_model
from iterlin.analysis.ntk import empirical_ntk, ntk_vector_product


def _tiny(n=4, seed=0):
    """A float64 CNN of the paper's shape on 16 × 16 inputs, n random images, labels, test images."""
    model = make_model("cnn", jax.random.PRNGKey(seed), input_shape=(16, 16, 3), dtype=jnp.float64)
    kx, ky, kt = jax.random.split(jax.random.PRNGKey(100 + seed), 3)
    x = jax.random.normal(kx, (n, 16, 16, 3), jnp.float64)
    y = np.asarray(jax.random.randint(ky, (n,), 0, 10))
    xt = jax.random.normal(kt, (6, 16, 16, 3), jnp.float64)
    return model.apply_fn, model.params, x, y, xt


def _flat(p):
    return np.asarray(ravel_pytree(p)[0])


def _gd(apply_fn, params_s, x, y, eta, steps):
    """Literal full-batch GD on ½‖f_lin − Y‖² (summed) of the linearisation at θ_s."""
    target = jax.nn.one_hot(jnp.asarray(y), 10, dtype=jnp.float64)
    grad = jax.jit(jax.grad(lambda p: 0.5 * jnp.sum((linearised_apply(apply_fn, params_s, p, x) - target) ** 2)))
    p = params_s
    for _ in range(steps):
        p = jax.tree.map(lambda a, g: a - eta * g, p, grad(p))
    return p


def test_flow_equals_many_small_gd_steps_on_the_linearised_cnn(x64):
    f, p0, x, y, _ = _tiny()
    lin = limit.linearise_at(f, p0, x, y)
    steps = 100
    eta = 0.01 / lin.sigma[-1]
    literal = _flat(_gd(f, p0, x, y, eta, steps))
    moved = np.linalg.norm(literal - _flat(p0))
    assert moved > 0
    # the exact K-step filter reproduces the literal steps to rounding
    exact = _flat(limit.update(f, p0, x, lin, lambda s: np.asarray(gd_filter(s, steps, eta))))
    np.testing.assert_allclose(exact, literal, rtol=0, atol=1e-9 * moved)
    # the flow for τ = Kη is first-order close (ησ ≤ 0.01), and closer with twice the steps
    flow = _flat(limit.update(f, p0, x, lin, limit.flow_phi(steps * eta)))
    err = np.linalg.norm(flow - literal)
    assert err < 1e-2 * moved
    finer = _flat(_gd(f, p0, x, y, eta / 2, 2 * steps))
    assert np.linalg.norm(flow - finer) < 0.6 * err


def test_gauss_newton_is_the_dense_minimum_norm_solve_and_damping_the_ridge(x64):
    f, p0, x, y, _ = _tiny()
    lin = limit.linearise_at(f, p0, x, y)
    J = np.asarray(flat_jacobian(f, p0, x))
    r0 = (np.asarray(f(p0, x)) - np.eye(10)[y]).reshape(-1)
    np.testing.assert_allclose(lin.r0, r0, atol=1e-12)
    gn = _flat(limit.update(f, p0, x, lin, limit.flow_phi(math.inf))) - _flat(p0)
    np.testing.assert_allclose(gn, -np.linalg.pinv(J) @ r0, rtol=1e-7, atol=1e-9 * np.linalg.norm(gn))
    # damped GN in kernel form (the filter 1/(σ + λ)) = the parameter (primal) form (JᵀJ + λI)⁻¹Jᵀr
    lam = 0.7
    damped = _flat(limit.update(f, p0, x, lin, limit.damped_phi(lam))) - _flat(p0)
    u, sv, vt = np.linalg.svd(J, full_matrices=False)  # (JᵀJ + λI)⁻¹Jᵀ = V diag(s/(s² + λ)) Uᵀ
    primal = -vt.T @ (sv / (sv**2 + lam) * (u.T @ r0))
    np.testing.assert_allclose(damped, primal, rtol=1e-7, atol=1e-9 * np.linalg.norm(primal))


def test_k_infinity_is_kernel_regression_with_the_entk_at_theta0(x64):
    f, p0, x, y, xt = _tiny()
    lin = limit.linearise_at(f, p0, x, y)
    p_inf = limit.update(f, p0, x, lin, limit.flow_phi(math.inf))
    pred = np.asarray(linearised_apply(f, p0, p_inf, xt)).reshape(-1)
    k_tx = np.asarray(empirical_ntk(f, p0, xt, x))
    k_xx = np.asarray(empirical_ntk(f, p0, x))
    formula = np.asarray(f(p0, xt)).reshape(-1) - k_tx @ np.linalg.solve(k_xx, lin.r0)
    np.testing.assert_allclose(pred, formula, rtol=1e-6, atol=1e-8)
    # and it interpolates the training targets
    np.testing.assert_allclose(np.asarray(linearised_apply(f, p0, p_inf, x)), np.eye(10)[y], atol=1e-8)


@pytest.mark.parametrize("tau", [1e-3, 1.0, math.inf])
def test_lanczos_route_equals_the_kernel_route(x64, tau):
    f, p0, x, y, _ = _tiny()
    lin = limit.linearise_at(f, p0, x, y)
    mv = ntk_vector_product(f, p0, x)
    a = limit.lanczos_apply(lambda v: mv(v.reshape(-1)), lin.r0, limit.flow_phi(tau), iters=lin.r0.size)
    J = np.asarray(flat_jacobian(f, p0, x))
    kernel = _flat(limit.update(f, p0, x, lin, limit.flow_phi(tau))) - _flat(p0)
    np.testing.assert_allclose(-J.T @ a, kernel, rtol=1e-6, atol=1e-8 * np.linalg.norm(kernel))


def test_config_validation():
    with pytest.raises(ValueError, match="total_time"):
        resolve("limit", total_time=-1.0)
    with pytest.raises(ValueError, match="relins"):
        resolve("limit", relins=[0, 2])
    cpu = resolve("limit", "cpu")
    assert cpu.n_seeds >= 3 and cpu.n_test is None and len(cpu.n_train) >= 3
    specs = limit.run_specs(resolve("limit"))
    assert {s.method for s in specs} == {"flow", "gn", "damped", "kernel"}
    with pytest.raises(ValueError, match="n_main=24 is not allowed: n_main must be one of n_train=\\[8, 16\\]"):
        limit.run_specs(resolve("limit", n_train=[8, 16], n_main=24))
    with pytest.raises(ValueError, match="n_main"):
        resolve("limit", n_main=0)
    # the long R grid: all three knobs or none, at one of n_train, on at most n_seeds seeds
    with pytest.raises(ValueError, match="n_long_seeds=None is not allowed: n_long, long_R and n_long_seeds are "
                                         "given together"):
        limit.run_specs(resolve("limit", n_long=8, long_R=16).replace(n_long_seeds=None))
    with pytest.raises(ValueError, match="n_long=4 is not allowed: n_long must be one of n_train=\\[8, 16\\] other "
                                         "than the main grid's N=16"):
        limit.run_specs(resolve("limit", n_train=[8, 16], n_long=4))
    with pytest.raises(ValueError, match="n_long=16 is not allowed"):
        limit.run_specs(resolve("limit", n_train=[8, 16], n_long=16))
    with pytest.raises(ValueError, match="n_long_seeds=2 is not allowed: n_long_seeds must be <= n_seeds=1"):
        limit.run_specs(resolve("limit", n_long_seeds=2, n_seeds=1))
    with pytest.raises(ValueError, match="long_R"):
        resolve("limit", long_R=0)
    assert limit.long_grid(resolve("limit").replace(n_long=None, long_R=None, n_long_seeds=None)) is None


def test_the_long_r_grid_runs_each_r_once_beside_its_n():
    """The doubling grid up to long_R (with the config's R below it) at n_long, for the first
    n_long_seeds seeds, right after that N's kernel and scaling run (whose R it does not repeat)."""
    config = resolve("limit", n_train=[8, 16, 32], n_main=32, relins=[1, 3], n_relin=2, n_seeds=3,
                     n_long=16, long_R=24, n_long_seeds=2)
    assert limit.long_grid(config) == limit.LongGrid(16, (1, 2, 3, 4, 8, 16, 24), 2)
    specs = limit.run_specs(config)
    assert len(set(specs)) == len(specs)
    for seed in (0, 1, 2):
        at16 = [(s.method, s.R) for s in specs if s.seed == seed and s.n_train == 16]
        if seed < 2:
            assert at16 == [("kernel", 1), ("flow", 2)] + [("flow", R) for R in (1, 3, 4, 8, 16, 24)]
        else:
            assert at16 == [("kernel", 1), ("flow", 2)]
    assert all(s.tau == pytest.approx(config.total_time / s.R) for s in specs if s.method == "flow")


def test_n_main_puts_the_r_grid_below_the_largest_scaling_size():
    """The R grid, GN and damped GN at n_main; K = ∞ and R = n_relin at every N; per seed, the kernel
    of n_main comes right after its R grid (its linearisation at θ₀ is still at hand)."""
    config = resolve("limit", n_train=[8, 16, 32], n_main=16, relins=[1, 2], n_relin=2, n_seeds=2).replace(
        n_long=None, long_R=None, n_long_seeds=None)
    specs = limit.run_specs(config)
    for seed in (0, 1):
        mine = [s for s in specs if s.seed == seed]
        assert {(s.method, s.n_train) for s in mine if s.method in ("gn", "damped")} == {("gn", 16), ("damped", 16)}
        assert sorted(s.R for s in mine if s.method == "flow" and s.n_train == 16) == [1, 2]
        assert [(s.method, s.n_train) for s in mine if s.n_train != 16] == [
            ("kernel", 32), ("flow", 32), ("kernel", 8), ("flow", 8)]
        at_main = [s.method for s in mine if s.n_train == 16]
        assert at_main[-1] == "kernel" and mine.index([s for s in mine if s.method == "kernel"][0]) == len(at_main) - 1
    # None: the largest, as before
    assert {s.n_train for s in limit.run_specs(resolve("limit", n_train=[8, 16], n_main=None)) if s.method == "gn"} == {16}


def test_n_check_above_the_images_loaded_is_refused(cifar_subset_path):
    with pytest.raises(ValueError, match="n_check=20 is not allowed"):
        limit.load(resolve("limit", n_train=[8, 16], n_check=20, n_test=4))


def _tiny_run(tmp_path, **kw):
    return run("limit", n_train=[4, 8], n_test=16, relins=[1, 2], n_relin=2, n_check=4, gd_steps=3,
               n_long=4, long_R=4, cache_dir=tmp_path, progress=False, verbose=False, **kw)


def test_tiny_real_run_and_resume(tmp_path, cifar_subset_path, monkeypatch):
    ref = _tiny_run(tmp_path / "a")
    assert isinstance(ref, limit.Results) and ref.config.experiment == "limit"
    runs = ref.runs
    assert set(runs["method"]) == {"flow", "gn", "damped", "kernel"}
    assert runs["net_test_correct"].shape == (len(runs["method"]), 16)
    np.testing.assert_allclose(runs["net_test_acc"], runs["net_test_correct"].mean(1))
    assert np.all(np.isfinite(runs["train_rmse"]))
    table = str(claims(ref, directory=tmp_path))
    assert table.startswith("Claims of limit at scale 'smoke':") and "Consistency checks" in table

    # interrupt the computation at its 3rd re-linearisation after θ₀, then rerun: the same results
    calls = {"n": 0}
    real = limit.linearise_at

    def flaky(*a, **k):
        calls["n"] += 1
        if calls["n"] == 3:
            raise KeyboardInterrupt
        return real(*a, **k)

    monkeypatch.setattr(limit, "linearise_at", flaky)
    with pytest.raises(KeyboardInterrupt):
        _tiny_run(tmp_path / "b")
    done = calls["n"]
    calls["n"] = -10**6  # no further interruptions
    again = _tiny_run(tmp_path / "b")
    assert calls["n"] - (-10**6) < sum(int(r) for r in runs["R"]) + 3  # fewer linearisations than from scratch
    assert done == 3
    for key in ("net_test_acc", "lin_test_acc", "train_rmse"):
        np.testing.assert_allclose(again.runs[key], runs[key], rtol=1e-5, atol=1e-6)


def test_every_network_product_of_a_run_is_at_full_precision(tmp_path, cifar_subset_path, monkeypatch):
    """compute (runs and consistency checks) traces and calls the network only at HIGHEST precision,
    so that a GPU's TF32 cannot reach J, Θ or the literal GD of the checks."""
    real, seen = limit.make_model, []

    def recording(*a, **k):
        model = real(*a, **k)

        def apply_fn(params, x):
            seen.append(jax.config.jax_default_matmul_precision)
            return model.apply_fn(params, x)

        return model._replace(apply_fn=apply_fn)

    monkeypatch.setattr(limit, "make_model", recording)
    _tiny_run(tmp_path)
    assert seen and set(seen) == {"highest"}, sorted(set(map(str, seen)))


# ----------------------------------------------------------------------------------------------
# Claims on constructed results
# ----------------------------------------------------------------------------------------------


def _constructed(acc: dict, n_test=2000, seeds=3, sizes=(32, 64, 128), scaling=None, n_main=None, long=None):
    """Results with the given per-(method, R) accuracy at N = n_main (None: the largest; exactly
    reproducible); ``long``: (N, n_seeds, {R: accuracy}), the long R grid at N for the first seeds."""
    rng = np.random.default_rng(0)
    rows = []
    n = max(sizes) if n_main is None else n_main
    for s in range(seeds):
        for (method, R), a in acc.items():
            rows.append((method, R, n, s, a))
        for m in [m for m in sizes if m != n]:
            for method, R in (("kernel", 1), ("flow", 2)):
                rows.append((method, R, m, s, scaling[(method, m)]))
            if long is not None and m == long[0] and s < long[1]:
                rows += [("flow", R, m, s, a) for R, a in long[2].items() if R != 2]
    correct = []
    for method, R, m, s, a in rows:
        c = np.zeros(n_test, bool)
        c[: int(round(a * n_test))] = True
        correct.append(c)
    runs = {"method": np.asarray([r[0] for r in rows]), "R": np.asarray([r[1] for r in rows]),
            "n_train": np.asarray([r[2] for r in rows]), "seed": np.asarray([r[3] for r in rows]),
            "tau": np.ones(len(rows)), "damping": np.asarray([0.5 if r[0] == "damped" else 0.0 for r in rows]),
            "net_test_correct": np.stack(correct), "lin_test_correct": np.stack(correct),
            "net_train_acc": np.ones(len(rows)), "train_rmse": np.zeros(len(rows))}
    runs["net_test_acc"] = runs["net_test_correct"].mean(1) + rng.normal(0, 1e-4, len(rows))
    runs["lin_test_acc"] = runs["net_test_acc"]
    checks = {"n_check": 8, "eta": 1e-5, "gd_steps": 10, "tau": 1e-4, "literal_vs_flow": 0.001,
              "network_gd_vs_flow": 0.1, "network_gd_vs_one_flow": 0.2, "gn_vs_flow_inf": 1e-6}
    return limit.Results(
        runs=limit.Runs(**runs),
        relin_seconds=limit.RelinSeconds(n_train=np.asarray(sorted(sizes)), seconds=np.ones(len(sizes))),
        checks=limit.Checks(**{k: np.asarray(v) for k, v in checks.items()}), n_test=np.asarray(n_test),
        config=limit.EXPERIMENT.get_config("cpu").replace(
            n_train=tuple(sizes), n_main=n, n_test=n_test, relins=tuple(sorted({R for m, R in acc if m == "flow"})),
            n_relin=2, n_seeds=seeds, n_check=checks["n_check"], gd_steps=checks["gd_steps"],
            n_long=None if long is None else long[0], long_R=None if long is None else max(long[2]),
            n_long_seeds=None if long is None else long[1]))


def _holds(rows):
    return {r.claim.split(":")[0]: r.holds for r in rows}


def test_claims_read_the_r_grid_at_n_main():
    """With the scaling grid past n_main, the R-grid claims read n_main's runs, and the slope takes every N."""
    good = {("flow", 1): 0.30, ("flow", 2): 0.40, ("flow", 4): 0.40, ("gn", 2): 0.33, ("damped", 2): 0.38,
            ("kernel", 1): 0.29}
    scaling = {("kernel", 32): 0.25, ("flow", 32): 0.25, ("kernel", 128): 0.31, ("flow", 128): 0.50}
    results = _constructed(good, sizes=(32, 64, 128), n_main=64, scaling=scaling)
    assert limit.ran_main_size(results) == 64
    rows = limit.claims(results)
    h = _holds(rows)
    assert h["few feature updates suffice"] == "yes" and "(vs R=4: 40.0 %" in rows[0].measured
    assert "K=∞ 29.0 %" in rows[2].measured  # the kernel at n_main, not at the largest N
    assert h["K = ∞ scales worse with N than a finite τ"] == "yes"


def test_claims_constructed_yes_and_no():
    scaling = {("kernel", 32): 0.25, ("kernel", 64): 0.27, ("flow", 32): 0.25, ("flow", 64): 0.32}
    good = {("flow", 1): 0.30, ("flow", 2): 0.40, ("flow", 4): 0.40, ("gn", 2): 0.33, ("damped", 2): 0.38,
            ("kernel", 1): 0.29}
    rows = limit.claims(_constructed(good, scaling=scaling))
    h = _holds(rows)
    assert h["few feature updates suffice"] == "yes" and "smallest R on par: 2" in rows[0].measured
    assert h["K = ∞ (eNTK at θ₀) ends below every finite τ that re-linearises"] == "yes"
    assert h["K = ∞ scales worse with N than a finite τ"] == "yes"
    assert h["solving each linearisation completely hurts"] == "yes"
    assert h["damping helps"] == "yes"
    assert [r.holds for r in rows if r.kind == "check"] == ["yes", "yes", "yes"]
    assert h["with R to the hundreds (the long R grid)"] == NA  # no long grid in this config

    bad = {("flow", 1): 0.30, ("flow", 2): 0.30, ("flow", 4): 0.40, ("gn", 2): 0.45, ("damped", 2): 0.40,
           ("kernel", 1): 0.45}
    h = _holds(limit.claims(_constructed(bad, scaling={("kernel", 32): 0.25, ("kernel", 64): 0.35,
                                                        ("flow", 32): 0.35, ("flow", 64): 0.30})))
    assert h["few feature updates suffice"] == "no"
    assert h["K = ∞ (eNTK at θ₀) ends below every finite τ that re-linearises"] == "no"
    assert h["K = ∞ scales worse with N than a finite τ"] == "no"
    assert h["solving each linearisation completely hurts"] == "no"
    assert h["damping helps"] == "no"


def test_claims_read_the_long_r_grid_on_its_own_seeds():
    """The long grid's row pairs every R with its largest R on the seeds that ran it (the scaling
    run's R = 2 at that N ran on every seed, and is paired on the long grid's two)."""
    good = {("flow", 1): 0.30, ("flow", 2): 0.40, ("flow", 4): 0.40, ("gn", 2): 0.33, ("damped", 2): 0.38,
            ("kernel", 1): 0.29}
    scaling = {("kernel", 32): 0.25, ("kernel", 64): 0.27, ("flow", 32): 0.25, ("flow", 64): 0.32}
    long = (32, 2, {1: 0.20, 2: 0.25, 4: 0.30, 8: 0.31, 16: 0.315})
    results = _constructed(good, scaling=scaling, long=long)
    rows = limit.claims(results)
    assert rows[0].claim.startswith("few feature updates suffice") and rows[0].holds == "yes"
    assert rows[1].claim == "with R to the hundreds (the long R grid): the smallest R on par with gradient flow"
    assert rows[1].measured.startswith("N = 32, 2 seeds, gradient flow R = 16: ")
    assert rows[1].holds == "yes" and "smallest R on par: 8" in rows[1].measured and "(vs R=16: 31.5 %" in rows[1].measured
    assert "2 seeds" in rows[1].measured and "R=2: Δ -6.5" in rows[1].measured
    by = limit.accuracy_by_R(results, 32)
    assert by.R.tolist() == [1, 2, 4, 8, 16] and by.acc.shape == (5, 2)
    # every R ≤ 12 short of gradient flow: no
    long = (32, 2, {1: 0.20, 2: 0.25, 4: 0.26, 8: 0.27, 16: 0.40})
    assert limit.claims(_constructed(good, scaling=scaling, long=long))[1].holds == "no"


def test_precompute_then_compute_equals_one_compute(tmp_path, cifar_subset_path, monkeypatch):
    """Seeds computed ahead by precompute (another process's share) are read by compute, which
    computes only the rest: the same results as one compute, with fewer linearisations. A finished
    run's folder entry is its scores (the parameters removed), so a folder computed on one machine
    can be carried to another; scores that are another run's or damaged are recomputed."""
    config = resolve("limit", "smoke", n_train=[4, 8], n_test=16, relins=[1, 2], n_relin=2, n_check=4, gd_steps=3,
                     n_long=4, long_R=4, n_seeds=2)
    data = limit.load(config)
    calls = {"n": 0}
    real = limit.linearise_at

    def counting(*a, **k):
        calls["n"] += 1
        return real(*a, **k)

    monkeypatch.setattr(limit, "linearise_at", counting)
    whole = limit.compute(config, data, checkpoint_dir=tmp_path / "a")
    assert isinstance(whole, limit.Results) and whole.config is None
    n_whole = calls["n"]
    folder = tmp_path / "b"
    limit.precompute(config, data, [1], folder)
    keys = [s.key() for s in limit.run_specs(config) if s.seed == 1]
    assert sorted(p.name for p in folder.iterdir()) == sorted(f"{k}.scores.npz" for k in keys)
    carried = tmp_path / "carried"
    shutil.copytree(folder, carried)
    calls["n"] = 0
    split = limit.compute(config, data, checkpoint_dir=folder)
    assert 0 < calls["n"] < n_whole
    arrays = ("seed", "R", "net_test_acc", "lin_test_acc", "net_test_correct", "lin_test_correct", "net_train_acc",
              "train_rmse")
    for key in arrays:
        np.testing.assert_array_equal(split.runs[key], whole.runs[key])

    (carried / f"{keys[0]}.scores.npz").write_bytes(b"damaged")
    (carried / f"{keys[1]}.scores.npz").write_bytes((folder / f"{keys[2]}.scores.npz").read_bytes())
    again = limit.compute(config, data, checkpoint_dir=carried)
    for key in arrays:
        np.testing.assert_array_equal(again.runs[key], whole.runs[key])
    assert not list(carried.glob("*_s1.npz")) and len(list(carried.glob("*.scores.npz"))) == len(limit.run_specs(config))

    for bad in ([2], 1, ["0"]):
        with pytest.raises(ValueError, match="seeds"):
            limit.precompute(config, data, bad, tmp_path / "c")
    with pytest.raises(ValueError, match="checkpoint_dir"):
        limit.precompute(config, data, [0], None)


def test_lanczos_stopped_before_convergence_warns_with_its_last_change(x64):
    """Too few Lanczos steps for τ = ∞ (the filter 1/σ over a wide spectrum): it warns with the last
    step's relative change; with every step it needs, it does not."""
    import warnings

    f, p0, x, y, _ = _tiny()
    lin = limit.linearise_at(f, p0, x, y)
    mv = ntk_vector_product(f, p0, x)
    with pytest.warns(limit.LanczosConvergenceWarning, match=r"not converged after iters=3 steps: the last step "
                                                              r"changed the estimate by \d\.\d\de[-+]\d\d \(relative\)"):
        limit.lanczos_apply(lambda v: mv(v.reshape(-1)), lin.r0, limit.flow_phi(math.inf), iters=3)
    with warnings.catch_warnings():
        warnings.simplefilter("error", limit.LanczosConvergenceWarning)
        limit.lanczos_apply(lambda v: mv(v.reshape(-1)), lin.r0, limit.flow_phi(math.inf), iters=lin.r0.size)
