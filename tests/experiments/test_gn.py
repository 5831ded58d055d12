"""gn (iterlin.experiments.gn): the config's validation, the λ ↔ K correspondence in our loss
conventions (float64), a tiny real run (K sweep and GN, the same θ_0 and batches), and the claims'
verdicts on constructed results ('yes', 'no', 'undecided', 'n/a', divergence)."""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from _toy import fake_cifar, fake_history, flat_mlp, tiny_problem
from jax.flatten_util import ravel_pytree

from iterlin.repro.claims import NA, UNDECIDED, UNSTABLE
from iterlin.experiments import _common, gn, resolve
from iterlin.experiments.gn import gn_baseline, sweep_colors
from iterlin.solvers.gauss_newton import gauss_newton_step
from iterlin.linearise import linearised_apply

INF = math.inf
BIG = 100_000  # test images: 2 s.e. of Δ ≈ 0.4 points


# ------------------------------------------------------------------------------------------------
# config


def test_config_and_scales():
    assert resolve("gn", K=[100, "inf", 10]).K == (1, 10, 100, INF)
    for scale in ("smoke", "cpu", "gpu", "paper"):
        c = resolve("gn", scale)
        assert c.K[0] == 1 and c.K[-1] == INF and gn.gn_K(c), scale  # K = 1, large K with a GN partner, ∞
        assert c.batch_size is not None and c.cg_maxiter >= 1 and c.augment is False
    cpu = resolve("gn", "cpu")
    assert cpu.n_seeds >= 3 and cpu.n_train is None and cpu.n_test is None
    assert resolve("gn", "paper").n_train == 50_000


@pytest.mark.parametrize(
    "kwargs, message",
    [
        (dict(K=[1, 0]), r"K\[1\]=0 is not allowed"),
        (dict(K=[1, 2.5]), r"K\[1\]=2.5 is not allowed"),
        (dict(lr=[0.1, 0.2]), r"lr=\[0.1, 0.2\] is not allowed: lr must be a single value here"),
        (dict(lr=0), r"lr=0 is not allowed"),
        (dict(cg_maxiter=0), r"cg_maxiter=0 is not allowed"),
        (dict(cg_maxiter=2.5), r"cg_maxiter=2.5 is not allowed"),
        (dict(steps=0), r"steps=0 is not allowed"),
        (dict(batch_size=512), r"batch_size=512 is not allowed: batch_size must be <= n_train=256"),
        (dict(damping=1.0), r"damping=1.0 is not allowed: gn has no parameter 'damping'; its parameters are: "),
    ],
)
def test_a_bad_value_is_named(kwargs, message):
    with pytest.raises(ValueError, match=message):
        resolve("gn", **kwargs)


def test_full_batch_is_refused_by_load():
    config = resolve("gn", batch_size="all")
    with pytest.raises(ValueError, match=r"batch_size=None is not allowed: the Gauss–Newton baseline is mini-batch"):
        gn.load(config)


# ------------------------------------------------------------------------------------------------
# the λ ↔ K correspondence


def test_damping_for_K_is_B_over_K_eta():
    assert gn.damping_for_K(10, 0.01, 128) == pytest.approx(1280.0)
    assert gn.damping_for_K(INF, 0.01, 128) == 0.0
    for K in (3, 35, 1e4):
        assert gn.damping_for_K(K, 0.05, 16) == pytest.approx(16 / (K * 0.05))


def _linearised_gd(apply_fn, params, x, y, *, lr, K):
    """θ after K full-batch GD steps of size ``lr`` on the MEAN cross-entropy of the linearisation
    at ``params`` (the K run's optimiser on one linearisation, written out independently)."""
    flat, unravel = ravel_pytree(params)

    def mean_ce(theta):
        logits = linearised_apply(apply_fn, params, unravel(theta), x)
        return -jnp.mean(jnp.take_along_axis(jax.nn.log_softmax(logits), y[:, None], axis=1))

    grad = jax.jit(jax.grad(mean_ce))
    return np.asarray(jax.lax.fori_loop(0, K, lambda _, th: th - lr * grad(th), flat))


@pytest.mark.parametrize("K", [40, 200, 1000])
def test_K_linearised_steps_match_the_damped_ggn_step_at_lambda_B_over_K_eta(x64, K):
    """Sec. 3.3 in our conventions: K GD steps of size η on the mean CE of B examples (linearised)
    ≈ one damped GGN step on the SUMMED CE (gauss_newton_step) at λ = B/(Kη) (gn.damping_for_K).

    The flow filter (1 − e^{−στ})/σ, τ = Kη/B, and the damped 1/(σ + 1/τ) agree as στ → 0 and
    στ → ∞ and differ by at most ~25 % between; the linearised CE adds its own curvature as the move
    grows. Measured here (relative error of the displacement): 7 %, 20 %, 32 % at K = 40, 200, 1000;
    λ = B/(Kη) beats λ·2 and λ/2 at every K, and the unnormalised λ = 1/(Kη) (right for a GN on the
    MEAN loss, wrong for gauss_newton_step's summed loss) gives a step about B times too long."""
    apply_fn, params, x, y = tiny_problem(seed=3, n=8, d=4, out=3, width=8)
    B, lr = x.shape[0], 0.005
    theta0 = np.asarray(ravel_pytree(params)[0])
    moved = _linearised_gd(apply_fn, params, x, y, lr=lr, K=K) - theta0

    def err(lam):
        step = gauss_newton_step(apply_fn, params, x, y, damping=lam, loss="ce", solver="primal_cg")
        d = np.asarray(ravel_pytree(step)[0]) - theta0
        return np.linalg.norm(d - moved) / np.linalg.norm(moved), d @ moved / (np.linalg.norm(d) * np.linalg.norm(moved))

    lam = gn.damping_for_K(K, lr, B)
    e, cos = err(lam)
    assert e < 0.35 and cos > 0.95, (e, cos)
    assert e < err(2 * lam)[0] and e < err(lam / 2)[0]
    assert err(1.0 / (K * lr))[0] > 0.5  # off by the factor B in λ


def test_the_correspondence_becomes_exact_for_short_flows(x64):
    """στ → 0: both filters tend to τ (the step is −(Kη/B)·g_sum = K·η·(mean gradient)); the
    relative error falls with Kη, roughly in proportion (first order in στ)."""
    apply_fn, params, x, y = tiny_problem(seed=3, n=8, d=4, out=3, width=8)
    B = x.shape[0]
    theta0 = np.asarray(ravel_pytree(params)[0])
    errs = []
    for K in (40, 10):
        lr = 0.005
        moved = _linearised_gd(apply_fn, params, x, y, lr=lr, K=K) - theta0
        step = gauss_newton_step(apply_fn, params, x, y, damping=gn.damping_for_K(K, lr, B), loss="ce",
                                 solver="primal_cg")
        errs.append(np.linalg.norm(np.asarray(ravel_pytree(step)[0]) - theta0 - moved) / np.linalg.norm(moved))
    assert errs[1] < errs[0] / 2.5 and errs[1] < 0.03, errs


# ------------------------------------------------------------------------------------------------
# compute


def test_tiny_real_run_two_seeds(monkeypatch):
    """A small MLP in place of the CNN: the K sweep (one program) and GN at λ(K) for every finite K > 1
    (one program, every λ × seed, one batch key per run): shapes, pairing, and the claims' rows."""
    monkeypatch.setattr(_common, "make_model", lambda name, key: flat_mlp(key))
    monkeypatch.setattr(gn, "make_model", lambda name, key: flat_mlp(key))
    config = resolve("gn", K=[2, 4, INF], lr=0.05, steps=4, batch_size=4, cg_maxiter=2, n_train=16, n_test=8,
                     n_evals=2, n_seeds=2, n_eval_train=None)
    r = gn.compute(config, fake_cifar(16, n_test=8))
    assert isinstance(r, gn.Results) and r.config is None
    h, g = r.runs, r.gn
    assert h["K"].tolist() == [1, 2, 4, INF] * 2 and h["seed"].tolist() == [0] * 4 + [1] * 4
    assert g["K"].tolist() == [2.0, 4.0] * 2 and g["seed"].tolist() == [0, 0, 1, 1]
    np.testing.assert_allclose(g["damping"], [4 / (2 * 0.05), 4 / (4 * 0.05)] * 2)
    assert g["net_test_acc"].shape == (4, 3) and g["n_relin"][:, -1].tolist() == [4] * 4  # GN re-linearises every step
    assert r.gn_final_test_correct.shape == (4, 8) and r.final_test_correct.shape == (8, 8)
    np.testing.assert_allclose(r.gn_final_test_correct.mean(1), r.gn_final_test_acc)
    np.testing.assert_allclose(g["net_test_acc"][:, 0], g["net_test_acc"][[0, 0, 2, 2], 0])  # same θ_0 per seed
    np.testing.assert_allclose(g["net_test_acc"][[0, 2], 0], h["net_test_acc"][[0, 4], 0])  # ... as the K runs
    assert int(r.n_runs) == 12 and float(r.gn_wall_seconds) >= 0
    rows = gn.claims(r._replace(config=config))
    assert [row.kind for row in rows] == ["claim"] * 3
    assert rows[0].measured.startswith("K=2 (2 re-linearisations): ") and "; K=4 (1 re-linearisations): " in rows[0].measured
    assert rows[1].claim.startswith("the linear model stays stable") and h["lr_over_bound"].shape == (8, 3)
    assert "2 seeds, 8 paired test images" in rows[0].measured and "B=4, η=0.05" in rows[0].rule
    s = gn.by_K(r._replace(config=config))
    assert s.sweep.K.tolist() == [1, 2, 4, INF] and s.sweep.acc.shape == (4, 2) and s.gn_acc.shape == (2, 2)
    assert s.gn_K.tolist() == [2.0, 4.0] and s.gn_damping.tolist() == pytest.approx([40.0, 20.0])
    assert gn.timing(r).startswith("12 runs (4 K × 2 seeds, 4 GN), ")


# ------------------------------------------------------------------------------------------------
# claims on constructed results


def _results(acc, gn_acc, K=(1, 10, 30, INF), gn_K=(10, 30), steps=60, n_test=BIG, seeds=1, gn_diverged=None,
             diverged=None, lr=0.01, B=128):
    """A constructed gn result: final accuracies of the K runs ``acc`` and of the GN runs ``gn_acc``
    (one per ``gn_K``), one seed or ``seeds`` copies, paired per-image records."""
    Ks, gKs = list(K) * seeds, list(gn_K) * seeds
    h = fake_history(Ks, lr, steps, list(acc) * seeds, diverged=None if diverged is None else list(diverged) * seeds)
    h["seed_index"] = np.repeat(np.arange(seeds), len(K))
    g = fake_history(gKs or [10], lr, steps, list(gn_acc) * seeds or [0.0],
                     diverged=None if gn_diverged is None else list(gn_diverged) * seeds)
    g["seed_index"] = np.repeat(np.arange(seeds), len(gn_K))
    g["damping"] = np.asarray([gn.damping_for_K(k, lr, B) for k in gKs])

    def correct(a):
        c = np.zeros((len(a), n_test), bool)
        for r, v in enumerate(a):
            c[r, :int(round(v * n_test))] = True
        return c

    acc, gn_acc = _common.trained_final(h)["final_test_acc"], g["net_test_acc"][:, -1]
    res = gn.Results(runs=h, final_test_acc=acc, final_test_correct=correct(acc), gn=g, gn_final_test_acc=gn_acc,
                     gn_final_test_correct=correct(gn_acc), n_test=np.asarray(n_test),
                     n_runs=np.asarray(len(Ks) + len(gKs)), wall_seconds=np.asarray(1.0),
                     config=gn.EXPERIMENT.get_config("smoke", lr=lr, batch_size=B))
    if not gKs:  # compute() records no GN runs when the grid has no finite K > 1
        res = res._replace(gn=None, gn_final_test_acc=None, gn_final_test_correct=None)
    return res


def test_on_par_is_yes():
    rows = gn.claims(_results([0.40, 0.39, 0.38, 0.30], [0.392, 0.378]))
    assert [r.holds for r in rows] == ["yes", NA, "yes"]  # no sharpness record: its row n/a
    # the smoke config's GN solves each step with 2 CG iterations: the row says so
    assert rows[0].claim == "every finite K > 1 ends on par with damped GN at λ = B/(Kη)"
    assert rows[0].rule.startswith("damped GN (2 CG iterations per step), ")
    one = gn.claims(_results([0.40, 0.39, 0.38, 0.30], [0.392, 0.378])._replace(
        config=gn.EXPERIMENT.get_config("smoke", lr=0.01, batch_size=128, cg_maxiter=1)))
    assert "damped GN (1 CG iteration per step)" in one[0].rule
    assert rows[0].measured.startswith("K=10 (6 re-linearisations): 39.0 %, GN λ=1280.0: 39.2 %, GN minus K: Δ +0.2 pts")
    assert rows[0].measured.endswith(" yes") and "; K=30 (2 re-linearisations): " in rows[0].measured
    assert "λ = B/(Kη) on the summed loss (B=128, η=0.01)" in rows[0].rule and "inside ±2 pts" in rows[0].rule


def test_far_off_is_no_and_a_wide_interval_is_undecided():
    rows = gn.claims(_results([0.40, 0.39, 0.38, 0.30], [0.30, 0.39]))
    assert rows[0].holds == "no" and rows[0].measured.endswith(") yes")  # K = 10 far off, K = 30 on par
    rows = gn.claims(_results([0.40, 0.39, 0.38, 0.30], [0.375, 0.37], n_test=200))
    assert rows[0].holds == UNDECIDED


def test_no_partner_is_na():
    rows = gn.claims(_results([0.40, 0.39, 0.38, 0.30], [0.39], gn_K=(10,)))
    assert rows[0].holds == NA and rows[0].measured.endswith("; K=30 (2 re-linearisations): no GN run at this K")
    res = _results([0.40, 0.30], [], K=(1, INF), gn_K=())
    rows = gn.claims(res)
    assert rows[0].holds == NA and rows[0].measured == "no finite K > 1 was run"


def test_a_diverged_run_is_no():
    rows = gn.claims(_results([0.40, 0.39, 0.38, 0.30], [0.39, 0.38], gn_diverged=[True, False]))
    assert [r.holds for r in rows] == ["no", NA, "no"]
    assert rows[-1].measured == "diverged: GN λ=1280.0 (K=10) at step 3"
    rows = gn.claims(_results([0.40, 0.39, 0.38, 0.30], [0.39, 0.38], diverged=[False, False, True, False]))
    assert [r.holds for r in rows] == [UNSTABLE, NA, "no"]  # a K run that diverged: its linear model
    assert rows[-1].measured == "diverged: K=30, lr=0.01 at step 3"


def test_a_K_run_above_its_bound_is_no_unstable_and_the_record_is_judged():
    res = _results([0.40, 0.39, 0.38, 0.30], [0.39, 0.38])
    ratio = np.full((4, 3), np.nan)
    ratio[:, 0] = 0.1
    ratio[1, 2] = 0.3  # K = 10 under a third of its bound
    ratio[2, 1] = 1.2  # K = 30 above it at the middle record (step 30)
    rows = gn.claims(res._replace(runs={**res.runs, "lr_over_bound": ratio}))
    assert [r.holds for r in rows] == [UNSTABLE, "no", "yes"]
    assert "largest η·λ_max/2 1.20 (K=30, step 30)" in rows[1].measured
    ratio[2, 1] = 0.3
    rows = gn.claims(res._replace(runs={**res.runs, "lr_over_bound": ratio}))
    assert [r.holds for r in rows] == ["yes", "yes", "yes"]


def test_seeds_are_paired():
    rows = gn.claims(_results([0.40, 0.39, 0.38, 0.30], [0.39, 0.38], seeds=3))
    assert "3 seeds, 100000 paired test images" in rows[0].measured
    s = gn.by_K(_results([0.40, 0.39, 0.38, 0.30], [0.39, 0.38], seeds=3))
    assert s.sweep.acc.shape == (4, 3) and s.gn_acc.shape == (2, 3) and s.gn_diverged.tolist() == [False, False]


# ----------------------------------------------------------------------------------------------
# the figure: gn_baseline, sweep_colors


def test_gn_baseline_draws_each_lambda_right_of_its_K_with_seeds_and_labels(ax):
    acc = np.array([[0.4, 0.5], [0.6, 0.7]])  # (L, S) fractions
    line = gn_baseline(ax, [10.0, 100.0], acc, damping=[0.1, 0.01], diverged=[False, True], offset=1.1)
    np.testing.assert_allclose(line.get_xydata(), [[11.0, 45.0], [110.0, 65.0]])  # × offset; the mean in %
    assert line.get_marker() == "D" and line.get_label() == "damped Gauss–Newton at K(λ) = B/(λη)"
    assert [t.get_text() for t in ax.texts] == ["λ=0.1", "λ=0.01"]
    (cross,) = [ln for ln in ax.lines if ln.get_marker() == "x"]
    np.testing.assert_allclose(cross.get_xydata(), [[110.0, 65.0]])  # the point where a seed diverged
    assert gn_baseline(ax, [], np.zeros((0, 2))) is None  # no damped runs: nothing drawn
    with pytest.raises(ValueError, match="^K_equiv "):
        gn_baseline(ax, [10.0, math.inf], acc)
    with pytest.raises(ValueError, match="^acc "):
        gn_baseline(ax, [10.0], acc)


def test_sweep_colors_match_the_K_runs_and_grey_for_a_K_without_one(ax):
    from iterlin.repro.plotting import plot_sweep

    h = {**fake_history([1.0, 8.0, 1.0, 8.0], 0.1, 8, [0.5, 0.4, 0.5, 0.4]), "seed_index": np.array([0, 0, 1, 1])}
    lines = plot_sweep(ax, h, "net_test_acc", color=["C3", "C5"])
    assert sweep_colors(h, lines, [8.0, 1.0, 4.0]) == ["C5", "C3", "gray"]

