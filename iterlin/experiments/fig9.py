"""Fig. 9: damped Gauss–Newton (Eq. 6) on the quintic: test RMSE against λ, learned functions (Sec. 3.3).

Every (λ, seed) run is full-batch damped Gauss–Newton with step size α for ``steps`` steps,
θ ← θ − α(JᵀJ + λI)⁻¹Jᵀ(f(θ, X) − Y) (:func:`iterlin.gauss_newton.gauss_newton_train`, λ traced
per run, so every λ and seed run in ONE compiled program). The paper: more damping gives lower,
more consistent test RMSE ("note the number of high RMSE runs") and smoother functions, despite
similar minima; runs with train RMSE > 2.5 are removed.

The setting is the paper's (20 / 1000 evenly spaced points of the quintic on [−3.625, 3.625], an
MLP with 5 hidden layers of 50 ReLU units, squared error, full batch); the λ grid, steps, step
size and seeds are ours (the paper names none). This edition's choices, not the paper's:
PyTorch's default ``nn.Linear`` initialisation (:func:`iterlin.models.quintic_model`: with Flax's
zero biases every ReLU of the MLP has its kink at x = 0 and the NTK on the 20 points has rank 4)
and float64 (``x64``: in float32 most runs with λ ≤ 10⁻² stall at a train RMSE of about 0.78).

Config keys: ``damping`` (list of λ ≥ 0), ``steps``, ``step_size`` (α), ``seed``, ``n_seeds``
(seeds ``seed … seed + n_seeds − 1``), ``n_functions`` (functions kept per λ, the first seeds),
``n_train``, ``n_test``, ``n_evals``, ``x64``.

Results: ``damping`` (L,), ``seeds`` (S,), ``train_rmse``/``test_rmse`` (L, S) of the final
network, ``kept`` (L, S): finite and train RMSE ≤ :data:`MAX_TRAIN_RMSE` (the paper's filter),
``diverged`` (L, S), ``slope_variation`` (L, S) (:func:`slope_variation` of the learned
function on the test grid; ``target_slope_variation`` for the quintic itself),
``curves``: ``step`` (E,), ``train_rmse``/``test_rmse`` (L, S, E); ``x_test``, ``y_test``
(n_test,), ``x_train``, ``y_train`` (n_train,), ``functions`` (L, F, n_test): the learned
functions of the first F seeds on the test grid. :func:`kept_means` gives the mean test RMSE
over the kept seeds per λ.
"""

from __future__ import annotations

from typing import Mapping

import jax
import jax.numpy as jnp
import numpy as np

from ..claims import Claim, divergence_row, num, verdict
from ..data import Dataset
from ..gauss_newton import gauss_newton_train
from ..models import quintic_model
from ..precision import x64
from ._common import Experiment, checkpoint_path, eval_points, load_quintic

__all__ = [
    "SCALES", "EXPERIMENT", "MAX_TRAIN_RMSE", "load", "compute", "claims", "slope_variation",
    "kept_means", "function_panels",
]

SCALES = {
    "smoke": dict(
        damping=[0.0, 1e-3, 1e-2, 1e-1, 1.0, 10.0], steps=200, step_size=1.0, seed=0, n_seeds=10,
        n_functions=10, n_train=20, n_test=1000, n_evals=10, x64=True,
    ),
    "gpu": dict(
        damping=[0.0, 1e-3, 1e-2, 1e-1, 1.0, 10.0, 100.0], steps=2000, step_size=1.0, seed=0,
        n_seeds=50, n_functions=10, n_train=20, n_test=1000, n_evals=20, x64=True,
    ),
    "paper": dict(
        damping=[0.0, 1e-3, 1e-2, 1e-1, 1.0, 10.0, 100.0], steps=2000, step_size=1.0, seed=0,
        n_seeds=100, n_functions=10, n_train=20, n_test=1000, n_evals=20, x64=True,
    ),
}

#: Runs whose final train RMSE exceeds this are removed (the paper's filter).
MAX_TRAIN_RMSE = 2.5

load = load_quintic


def slope_variation(f, x) -> np.ndarray:
    """Total variation of the slope of a sampled 1-d function, Σ_i |s_{i+1} − s_i| (s = Δf/Δx).

    ``f`` (..., M) values on the sorted grid ``x`` (M,). For a ReLU network (piecewise linear) it
    is the sum of the slope changes at its kinks inside the grid: a roughness measure that is
    small for smooth functions (for the quintic target on the test grid of [−3.625, 3.625] it is ≈ 28.8).
    """
    f = np.asarray(f, np.float64)
    x = np.asarray(x, np.float64).ravel()
    with np.errstate(over="ignore", invalid="ignore"):
        s = np.diff(f, axis=-1) / np.diff(x)
        return np.sum(np.abs(np.diff(s, axis=-1)), axis=-1)


def compute(config: Mapping, data: Dataset, *, checkpoint_dir=None, progress: bool = False) -> dict:
    """Every (λ, seed) in one program (see the module docstring for the results)."""
    lams = list(config["damping"])
    seeds = list(range(config["seed"], config["seed"] + config["n_seeds"]))
    L, S = len(lams), len(seeds)
    F = min(config["n_functions"], S)
    with x64(config["x64"]):
        dtype = jnp.float64 if config["x64"] else jnp.float32
        apply_fn, params = quintic_model(seeds, dtype)
        stacked = jax.tree.map(lambda a: jnp.concatenate([a] * L), params)
        final, h = gauss_newton_train(
            apply_fn, stacked, (data.x_train, data.y_train), damping=[lam for lam in lams for _ in seeds],
            steps=config["steps"], step_size=config["step_size"], loss="mse", solver="kernel",
            eval_data=(data.x_test, data.y_test), eval_steps=eval_points(config["steps"], config["n_evals"]),
            checkpoint=checkpoint_path(checkpoint_dir, "gn"), progress=progress, config=dict(config))
        preds = np.asarray(jax.vmap(apply_fn, in_axes=(0, None))(final, jnp.asarray(data.x_test)), np.float64)
    E = len(h["step"])
    train_c = np.asarray(h["net_train_rmse"]).reshape(L, S, E)
    test_c = np.asarray(h["net_test_rmse"]).reshape(L, S, E)
    train_rmse, test_rmse = train_c[..., -1], test_c[..., -1]
    preds = preds[..., 0].reshape(L, S, -1)
    x_test = np.asarray(data.x_test, np.float64).ravel()
    with np.errstate(invalid="ignore"):
        kept = np.isfinite(test_rmse) & np.isfinite(train_rmse) & (train_rmse <= MAX_TRAIN_RMSE)
    return {
        "damping": np.asarray(lams, np.float64),
        "seeds": np.asarray(seeds),
        "train_rmse": train_rmse,
        "test_rmse": test_rmse,
        "kept": kept,
        "diverged": np.asarray(h["diverged"]).reshape(L, S),
        "slope_variation": slope_variation(preds, x_test),
        "target_slope_variation": slope_variation(np.asarray(data.y_test, np.float64).ravel(), x_test),
        "curves": {"step": np.asarray(h["step"]), "train_rmse": train_c, "test_rmse": test_c},
        "x_test": x_test,
        "y_test": np.asarray(data.y_test, np.float64).ravel(),
        "x_train": np.asarray(data.x_train, np.float64).ravel(),
        "y_train": np.asarray(data.y_train, np.float64).ravel(),
        "functions": preds[:, :F],
    }


def kept_means(results: Mapping) -> np.ndarray:
    """Mean final test RMSE over the kept seeds, per λ (L,); NaN where no seed was kept."""
    test = np.asarray(results["test_rmse"], np.float64)
    kept = np.asarray(results["kept"], bool)
    return np.asarray([test[i][kept[i]].mean() if kept[i].any() else np.nan for i in range(len(test))])


def claims(results: Mapping) -> list[Claim]:
    """More damping → lower, more consistent test RMSE and smoother functions."""
    lams = np.asarray(results["damping"], np.float64)
    test = np.asarray(results["test_rmse"], np.float64)
    kept = np.asarray(results["kept"], bool)
    sv = np.asarray(results["slope_variation"], np.float64)
    lo, hi = int(np.argmin(lams)), int(np.argmax(lams))
    n_kept = kept.sum(axis=1)
    filt = Claim(
        "runs with train RMSE > 2.5 are removed", "some runs removed at small λ",
        "kept per λ: " + ", ".join(f"λ={v:g}: {int(k)}/{kept.shape[1]}" for v, k in zip(lams, n_kept)),
        verdict(None), "a procedure, not a claim: reported only (applied before the rows below)",
    )
    if len(lams) < 2 or n_kept[lo] == 0 or n_kept[hi] == 0:
        na = Claim("more damping helps", "Fig. 9", "needs ≥ 2 values of λ with kept runs", verdict(None),
                   "needs ≥ 2 λ values")
        return [filt, na, _fig9_diverged(results)]

    def stat(f, i, a=test):
        return float(f(a[i][kept[i]]))

    mean_lo, mean_hi = stat(np.mean, lo), stat(np.mean, hi)
    std_lo, std_hi = stat(np.std, lo), stat(np.std, hi)
    means = kept_means(results)
    lower = Claim(
        "more damping → lower mean test RMSE", "mean test RMSE falls as λ grows (figure only)",
        "mean test RMSE: " + ", ".join(f"λ={v:g}: {num(m)}" for v, m in zip(lams, means)),
        verdict(mean_hi < mean_lo), f"mean at the largest λ ({lams[hi]:g}) < mean at the smallest ({lams[lo]:g})",
    )
    consistent = Claim(
        "more damping → more consistent test RMSE", "fewer high-RMSE runs at large λ (figure only)",
        f"std of test RMSE: λ={lams[lo]:g}: {num(std_lo)}, λ={lams[hi]:g}: {num(std_hi)}; "
        f"max: {num(stat(np.max, lo))} vs {num(stat(np.max, hi))}",
        verdict(std_hi < std_lo), "std over kept seeds at the largest λ < at the smallest λ",
    )
    minimum = Claim(
        "the minimum test RMSE is similar at every λ", "\"despite the minimums being similar\"",
        f"min test RMSE: λ={lams[lo]:g}: {num(stat(np.min, lo))}, λ={lams[hi]:g}: {num(stat(np.min, hi))}",
        verdict(abs(stat(np.min, lo) - stat(np.min, hi)) < 0.1), "|Δ min| < 0.1",
    )
    sv_lo, sv_hi = stat(np.median, lo, sv), stat(np.median, hi, sv)
    smooth = Claim(
        "more damping → smoother learned functions", "smoother functions as λ grows (figure only)",
        f"median slope variation: λ={lams[lo]:g}: {num(sv_lo, 0)}, λ={lams[hi]:g}: {num(sv_hi, 0)} "
        f"(target {num(float(results['target_slope_variation']), 0)})",
        verdict(sv_hi < sv_lo), "median total variation of f' over the test grid smaller at the largest λ",
    )
    return [filt, lower, consistent, minimum, smooth, _fig9_diverged(results)]


def _fig9_diverged(results: Mapping) -> Claim:
    lams = np.asarray(results["damping"], np.float64)
    div = np.asarray(results["diverged"], bool)
    seeds = np.asarray(results["seeds"])
    return divergence_row([f"λ={lams[i]:g} seed {int(seeds[j])}" for i, j in zip(*np.nonzero(div))])



EXPERIMENT = Experiment("fig9", SCALES, load, compute, claims, __name__)


# ------------------------------------------------------------------------------------------------
# What the notebook draws: pure functions of the results (nothing here is part of ``compute``).


def function_panels(results: Mapping, n: int = 4) -> list[int]:
    """The indices of the (at most ``n``) values of λ whose learned functions are drawn.

    Spread evenly over the grid, both ends included, in increasing order, without repeats:
    ``[0, 2, 3, 5]`` for 6 values of λ and n = 4; every index when there are at most n values.
    """
    if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n < 1:
        raise ValueError(f"n={n!r} is not allowed: n must be an integer >= 1 (the number of panels)")
    L = len(np.asarray(results["damping"]).reshape(-1))
    if L == 0:
        return []
    return sorted({int(round(v)) for v in np.linspace(0, L - 1, min(n, L))})


